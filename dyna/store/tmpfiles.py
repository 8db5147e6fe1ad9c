"""The writer-named temporaries of :mod:`dyna.fileio.tempfiles`, under the name the
experiment runner imports them by; new code imports :mod:`dyna.fileio.tempfiles`."""

from dyna.fileio.tempfiles import clean_orphans, make_temp_dir

__all__ = ["clean_orphans", "make_temp_dir"]
