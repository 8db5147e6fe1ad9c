"""The file lock every writer of a skill library or a memory file holds.

An inter-process lock (:mod:`filelock`, ``fcntl.flock`` on POSIX) around a whole
read-modify-write, so two processes sharing a library never interleave their changes. The
lock file is never reached through a symbolic link.
"""

from __future__ import annotations

from pathlib import Path

import filelock

from dyna.errors import DynaError, check_range
from dyna.fileio.paths import SymlinkError

__all__ = ["LibraryLockTimeout", "library_lock", "lock_path"]


class LibraryLockTimeout(DynaError, TimeoutError):
    """Another process (or another library object) held a library's file lock longer than
    the timeout; nothing was written.

    Attributes
    ----------
    path : str
        The lock file (``<library>/.dyna/lock`` or ``<file>.lock``).
    timeout : float
        Seconds waited.
    """

    def __init__(self, path: object, timeout: float):
        self.path = str(path)
        self.timeout = timeout
        super().__init__(f"lock={self.path!r}: held by another writer for more than "
                         f"{timeout:g} s; nothing was written, try again")

    def __reduce__(self):
        return (type(self), (self.path, self.timeout))


class _LibraryFileLock(filelock.FileLock):
    """A :class:`filelock.FileLock` whose timeout raises :class:`LibraryLockTimeout`."""

    def acquire(self, timeout=None, *args, **kwargs):
        lock = Path(self.lock_file)
        _refuse_links(lock)
        lock.parent.mkdir(parents=True, exist_ok=True)
        try:
            return super().acquire(timeout, *args, **kwargs)
        except filelock.Timeout:
            raise LibraryLockTimeout(self.lock_file,
                                     self.timeout if timeout is None else timeout) from None


def _refuse_links(lock: Path) -> None:
    """:class:`SymlinkError` when the lock file or its folder is a symbolic link."""
    for p in (lock.parent, lock):
        if p.is_symlink():
            raise SymlinkError(p)


def lock_path(folder_or_file: Path) -> Path:
    """The lock file :func:`library_lock` uses for ``folder_or_file``: ``.dyna/lock`` inside
    a library folder (an existing folder, or a path without a suffix), ``<name>.lock`` beside
    a file (``MEMORY.md`` -> ``MEMORY.md.lock``)."""
    p = Path(folder_or_file)
    if p.is_dir() or (not p.exists() and not p.suffix):
        return p / ".dyna" / "lock"
    return p.with_name(p.name + ".lock")


def library_lock(folder_or_file: Path, timeout: float = 30) -> filelock.FileLock:
    """An inter-process lock (:mod:`filelock`, ``fcntl.flock`` on POSIX) for every write to a
    skill library folder or a memory file.

    Hold it around the whole read-modify-write (re-read the state under the lock). The lock is
    re-entrant within one thread of one lock object, so keep one object per library and
    nest freely; two objects (two processes, or two libraries on one folder in one process)
    exclude each other. The lock file is :func:`lock_path` (``<folder>/.dyna/lock``, or
    ``MEMORY.md.lock`` beside a memory file); its folder is created when the lock is first
    taken (never just by making the lock object).

    Parameters
    ----------
    folder_or_file : Path
        The library folder, or the memory file.
    timeout : float
        Seconds to wait for the lock on each acquisition (> 0).

    Raises
    ------
    LibraryLockTimeout
        (on acquisition) The lock was not obtained within ``timeout``; names the lock file.
    dyna.errors.ConfigError
        ``timeout`` is not a positive number; :class:`SymlinkError` (a ConfigError) when the
        lock file or its folder is a symlink (a lock written through a link could land
        outside the library).
    """
    check_range("timeout", timeout, 0, lo_open=True)
    path = lock_path(folder_or_file)
    _refuse_links(path)
    return _LibraryFileLock(str(path), timeout=timeout)
