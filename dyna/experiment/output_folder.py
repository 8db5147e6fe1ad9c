"""The output folder of a run: chosen, checked, built hidden, then renamed into place.

A run's files are written into a hidden temporary sibling of the output folder (named for
its writing process, :func:`dyna.fileio.tempfiles.make_temp_dir`), which is renamed into
place only when everything is written; on any error or Ctrl-C it is removed, with the parent
folders the run created, so no partial output folder is ever left. The next run into the
same folder removes a temporary sibling left by a killed run, never one of a run still going.

Part of the experiment machinery: used by the runner
(:func:`dyna.experiment.runner.run_experiment`) and the pilot of a calibrated experiment.
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path

from dyna.errors import ConfigError
from dyna.fileio.tempfiles import clean_orphans, make_temp_dir

__all__ = ["TempFolder", "check_writable", "default_out_dir", "rename_into_place"]


def default_out_dir(config, root: str | Path = "runs") -> Path:
    """``<root>/<name>-<YYYYmmdd-HHMMSS>-<8 hex>`` (UTC; with ``-2``, ``-3``... if taken).

    The random suffix keeps two runs of one experiment started in the same second apart:
    32 bits from the operating system, so 50 runs in one second share a name with
    probability 50*49/2 / 2**32 < 3e-7 (and a taken name still gets ``-2`` here, and again
    when the finished run is renamed into place). It is not drawn from the experiment's
    seed, so it changes no result."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{config.name}-{stamp}-{os.urandom(4).hex()}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def check_writable(out: Path) -> None:
    """Refuse, before any job runs, an output folder that cannot be written (``/proc``, a
    read-only mount, a file on the way): a probe folder is made and removed in its nearest
    existing ancestor, so the check holds for root too.

    Raises
    ------
    ConfigError
        Field ``--out``.
    """
    anc = out.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise ConfigError("--out", str(out), f"{str(anc)!r} is not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dyna-probe-", dir=anc))
    except OSError as exc:
        raise ConfigError("--out", str(out), f"cannot write in {str(anc)!r}: "
                          f"{exc.strerror or exc}") from None


def rename_into_place(tmp: Path, out: Path) -> Path:
    """Rename the finished ``tmp`` to ``out``; if another process took ``out`` meanwhile,
    to ``out-2``, ``out-3``, ... (said on stderr): a finished run is never lost.

    Returns
    -------
    Path
        Where the run is.
    """
    target, k = out, 1
    while True:
        if not target.exists():
            try:
                os.rename(tmp, target)
                if target != out:
                    print(f"dyna: {out} was taken by another run meanwhile; this run is in "
                          f"{target}", file=sys.stderr)
                return target
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
        k += 1
        target = out.with_name(f"{out.name}-{k}")


class TempFolder:
    """The hidden sibling a run writes into, then publishes as ``out`` or discards.

    Attributes
    ----------
    out : Path
        Where the output folder goes.
    path : Path
        The temporary folder (``.<name>.tmp-<pid>-...`` beside ``out``).
    """

    def __init__(self, out: Path):
        """Make the temporary folder, and the parents of ``out`` that do not exist; a
        temporary sibling left by a killed run (its owner is not running) is removed, one
        of a live run stays.

        Raises
        ------
        ConfigError
            Field ``--out``: the folder cannot be made (the parents made are removed).
        """
        self.out = out
        self._created_parent: Path | None = None
        try:
            if not out.parent.exists():
                top = out.parent
                while not top.parent.exists():
                    top = top.parent
                self._created_parent = top
                out.parent.mkdir(parents=True)
            clean_orphans(out, folder=True)
            self.path = make_temp_dir(out)
        except OSError as exc:
            self._remove_created_parents()
            raise ConfigError("--out", str(out), f"cannot write there: "
                              f"{exc.strerror or exc}") from None

    def publish(self) -> Path:
        """Open the folder to everyone (as the umask allows; ``mkdtemp`` makes it 0700)
        and rename it into place (:func:`rename_into_place`); where it went."""
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.path, 0o777 & ~umask)
        return rename_into_place(self.path, self.out)

    def discard(self) -> None:
        """Remove the temporary folder and the parents of ``out`` this run made."""
        shutil.rmtree(self.path, ignore_errors=True)
        self._remove_created_parents()

    def _remove_created_parents(self) -> None:
        """Remove ``out``'s parent and its parents up to the first one this run made,
        while they are empty."""
        top = self._created_parent
        if top is None:
            return
        path = self.out.parent
        while True:
            try:
                path.rmdir()
            except OSError:
                return
            if path == top:
                return
            path = path.parent
