"""Whole-or-absent writes: a reader sees the old file or the complete new one, never a part.

The data goes to a temporary file in the target's folder (named by its writer,
:mod:`dyna.fileio.tempfiles`, so one left by a killed writer is removed by the next write
of the same target), is flushed and fsync'ed, and is renamed over the target
(``os.replace``, atomic on POSIX); the folder is then fsync'ed too, so the rename itself
survives a power cut (:func:`fsync_dir`). A target that exists and is not a regular file
(a device such as ``/dev/null``, a FIFO, a socket, a symbolic link such as ``/dev/stdout``)
is never written over (:class:`~dyna.fileio.failures.NotRegularFileError`); a write the
system refuses (a full disk, no permission) is a
:class:`~dyna.fileio.failures.FileWriteError` and leaves the target as it was; text that
UTF-8 cannot encode is refused before anything is written. :func:`place_new` puts a
finished file in place only where none is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from dyna.errors import ConfigError, MissingFileError
from dyna.fileio.failures import (FileWriteError, NotRegularFileError, check_utf8, kind_text,
                                  write_errors)
from dyna.fileio.tempfiles import clean_orphans, make_temp_file

__all__ = ["atomic_target", "atomic_write", "check_target", "fsync_dir", "place_new"]


def _mode(path: Path, field: str, follow: bool) -> int | None:
    """``st_mode`` of ``path`` (of what a link points to when ``follow``); None when it is
    missing or its folder is missing or a file (the folder checks say which).

    Raises
    ------
    FileWriteError
        Any other refusal, named by its errno: a name or path too long (ENAMETOOLONG), a
        loop of symbolic links (ELOOP), no permission to look (EACCES).
    """
    try:
        return (os.stat if follow else os.lstat)(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise FileWriteError(path, exc.errno, field) from None


def check_target(path, field: str = "path") -> Path:
    """``path`` as a Path if a file can be written there: its folder exists, and ``path``
    is missing or a regular file (a link is not followed).

    Raises
    ------
    NotRegularFileError
        ``path`` is a symbolic link, a FIFO, a socket or a device (a ConfigError).
    MissingFileError
        The folder of ``path`` does not exist (nothing is created).
    ConfigError
        ``path`` is an existing folder (or a link to one), or its "folder" is a file.
    FileWriteError
        The system refuses to look at the path, named by its errno: a name longer than
        the file system allows or a path longer than the system's (ENAMETOOLONG), a loop
        of symbolic links (ELOOP), no permission (EACCES).
    """
    path = Path(path)
    parent = path.parent
    mode = _mode(path, field, follow=False)
    if mode is not None and stat.S_ISLNK(mode):
        try:
            target = os.stat(path).st_mode
        except OSError:   # a dangling link, a loop: still a link
            target = mode
        mode = target if stat.S_ISDIR(target) else mode
    if mode is not None and stat.S_ISDIR(mode):
        raise ConfigError(field, str(path), "is a folder; give the path of a file to write")
    if mode is not None and kind_text(mode) != "a regular file":
        raise NotRegularFileError(field, path, kind_text(mode))
    folder = _mode(parent, field, follow=True)
    if folder is None:
        raise MissingFileError(field, path, f"its folder {str(parent)!r} does not exist")
    if not stat.S_ISDIR(folder):
        raise ConfigError(field, str(path), f"{str(parent)!r} is not a folder")
    return path


def fsync_dir(folder) -> None:
    """Flush ``folder``'s entries to disk (``fsync`` of the folder itself), so a file
    created or renamed in it is still there after a power cut. Best effort: where a folder
    cannot be opened or fsync'ed (not POSIX, some network file systems) nothing happens."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(folder, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_target(path, *, durable: bool = True, field: str = "path"):
    """Yield a temporary path next to ``path``; rename it onto ``path`` if the block succeeds.

    The temporary file is removed if the block raises, so ``path`` is either the old file or
    the complete new one (``os.replace`` is atomic on POSIX) with the old one's permission
    bits (a new file has ``mkstemp``'s 0600); with ``durable`` the folder is
    fsync'ed after the rename (:func:`fsync_dir`; the block fsyncs the file itself). Its
    name records this process (:func:`dyna.fileio.tempfiles.make_temp_file`); temporaries
    of ``path`` left by writers that have ended (a killed export) are removed first
    (:func:`dyna.fileio.tempfiles.clean_orphans`), those of live writers never.

    Raises
    ------
    MissingFileError, ConfigError, NotRegularFileError
        See :func:`check_target` (a missing folder, a folder, a link or a special file as
        the target; ``field`` names it); nothing is created.
    FileWriteError
        The system refused a write of the temporary file or the rename (a full disk, no
        permission), in the block or here, or refused the path (a name too long, a loop
        of links, a folder such as ``/proc/self`` where no file can be made:
        :data:`dyna.fileio.failures.PATH_ERRNOS`); ``path`` is as it was and no
        temporary is left.
    """
    path = check_target(path, field)
    clean_orphans(path)
    tmp = None
    try:
        with write_errors(path, field):
            tmp = make_temp_file(path)
            yield tmp
            check_target(path, field)     # (nothing replaced a file by a link meanwhile)
            old = _mode(path, field, follow=False)
            if old is not None:           # a replaced file keeps its permissions
                os.chmod(tmp, stat.S_IMODE(old) & 0o777)   # never set-id bits
            os.replace(tmp, path)
            if durable:
                fsync_dir(path.parent)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write(path: Path, data: str | bytes, *, durable: bool = True,
                 field: str = "path") -> None:
    """Replace ``path`` with ``data`` atomically: readers see the old or the new file, never
    a part of it.

    The data goes to a temporary file in the same folder (:func:`atomic_target`), is
    flushed (and fsync'ed when ``durable``, with the folder after the rename) and then
    renamed over ``path``. Text is written as UTF-8 with the newlines it contains (no
    platform translation).

    Raises
    ------
    ConfigError
        Text that UTF-8 cannot encode (a lone surrogate: a byte that was not UTF-8, read
        with ``surrogateescape``), naming ``field``; nothing is written.
    NotRegularFileError
        ``path`` exists and is not a regular file (a device such as ``/dev/null``, a FIFO,
        a socket, a symbolic link: renaming over it would replace it); an ``OSError`` too.
    FileWriteError
        The system refused the write (a full disk, no permission); an ``OSError`` too.
    MissingFileError
        The folder of ``path`` does not exist.

    ``path`` is unchanged after any of them.
    """
    if isinstance(data, str):
        data = check_utf8(field, data, str(path)).encode("utf-8")
    with atomic_target(path, durable=durable, field=field) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())


def place_new(tmp, path) -> None:
    """Put the finished file ``tmp`` at ``path``, never over an existing file: a hard link
    (which fails when ``path`` exists), or, on a file system without hard links, a rename
    after checking that ``path`` does not exist. ``tmp`` stays where it is after a link
    (the caller removes it).

    Raises
    ------
    FileExistsError
        ``path`` exists; nothing is written or renamed.
    OSError
        Neither a link nor a rename was possible.
    """
    try:
        os.link(tmp, path)   # fails if path appeared meanwhile: never overwrites
    except FileExistsError:
        raise
    except OSError:  # no hard links here: rename (the caller checked the target before)
        if Path(path).exists():
            raise FileExistsError(errno.EEXIST, "exists already", str(path)) from None
        os.replace(tmp, path)
