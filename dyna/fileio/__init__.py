"""The one place dyna reads and writes the files it keeps, and what it promises there.

Every writer and reader of a skill library, a memory file, a store export or a cache goes
through these functions, so each safeguard is written once:

- :mod:`~dyna.fileio.paths`: no symbolic link followed below a library folder
  (:func:`check_no_symlink`, :func:`read_bytes_nofollow`, :func:`open_write_nofollow`), no
  read that resolves outside its folder (:func:`read_bytes_within`), no name that resolves
  to another place than an entry of its folder (:func:`resolve_in_folder`), no special file
  opened (:func:`open_regular`, :func:`file_kind`); a refusal is a :class:`SymlinkError`
  (a ConfigError);
- :mod:`~dyna.fileio.unique_json`: JSON that names a key twice is refused
  (:func:`loads_unique`, :class:`DuplicateKeyError`);
- :mod:`~dyna.fileio.jsonfiles`: JSON files and append-only JSON-lines logs read and
  written with both of the above (:func:`read_json`, :func:`append_record`,
  :func:`read_records`); an unreadable file is a :class:`CorruptFileError` naming file and
  line;
- :mod:`~dyna.fileio.atomic`: whole-or-absent writes (:func:`atomic_write`,
  :func:`atomic_target`): temporary file in the same folder, fsync, ``os.replace``, fsync
  of the folder (:func:`fsync_dir`); :func:`place_new` never overwrites;
- :mod:`~dyna.fileio.failures`: why a write did not happen, typed: a link, FIFO or device
  as the target (:class:`NotRegularFileError`), a refusal of the system named by its errno
  such as ENOSPC (:class:`FileWriteError`, :func:`write_errors`), text that is not UTF-8
  (:func:`check_utf8`);
- :mod:`~dyna.fileio.tempfiles`: temporaries named by their writer, so one left by a killed
  writer is removed and one of a live writer never;
- :mod:`~dyna.fileio.lock`: the inter-process lock of a library (:func:`library_lock`);
- :mod:`~dyna.fileio.names`: control, bidirectional and zero-width characters found
  (:func:`first_hidden`) or shown as escapes (:func:`visible`, :func:`terminal_safe`).

This package sits in the lowest layer: it imports the standard library, :mod:`filelock`
and :mod:`dyna.errors` only. Names load from their module on first use.
"""

from dyna._lazy import lazy_getattr

_LAZY = {
    "SymlinkError": "paths", "check_no_symlink": "paths", "file_kind": "paths",
    "file_mark": "paths", "open_nofollow": "paths", "open_regular": "paths",
    "open_write_nofollow": "paths",
    "read_bytes_nofollow": "paths", "read_bytes_within": "paths",
    "resolve_in_folder": "paths",
    "DuplicateKeyError": "unique_json", "loads_unique": "unique_json",
    "CorruptFileError": "jsonfiles", "append_record": "jsonfiles", "read_json": "jsonfiles",
    "read_last_record": "jsonfiles", "read_records": "jsonfiles",
    "whole_record": "jsonfiles",
    "atomic_target": "atomic", "atomic_write": "atomic", "check_target": "atomic",
    "fsync_dir": "atomic", "place_new": "atomic",
    "FileWriteError": "failures", "NotRegularFileError": "failures",
    "check_utf8": "failures", "write_errors": "failures",
    "clean_orphans": "tempfiles", "make_temp_dir": "tempfiles",
    "make_temp_file": "tempfiles",
    "LibraryLockTimeout": "lock", "library_lock": "lock", "lock_path": "lock",
    "HIDDEN": "names", "TERMINAL_UNSAFE": "names", "first_hidden": "names",
    "terminal_safe": "names", "visible": "names",
}

__all__ = sorted(_LAZY)


def __dir__():
    return __all__


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
