"""Why a write was refused or did not reach the disk, as typed errors naming the file.

A write dyna makes either happens whole or not at all (:mod:`dyna.fileio.atomic`); when it
does not happen, the reason is one of these, so the CLI prints one line and exits 2:

- :class:`NotRegularFileError`: the target is a symbolic link, a FIFO, a socket or a
  device (``/dev/stdout`` is a link), which a rename would replace;
- :class:`FileWriteError`: the operating system refused the write, named by its errno
  (``no space left on device (ENOSPC)``, ``permission denied (EACCES)``, a read-only file
  system, a quota, an I/O error), never as damage of a file; or refused its path
  (:data:`PATH_ERRNOS`: a name or path too long, a folder that is missing or is a file, a
  loop of symbolic links, a folder where the file goes, a place such as ``/proc`` where
  no file can be made);
- :class:`HistoryWriteError`: the change was saved, its history record was not (the
  message says so, never "nothing was written");
- :func:`check_utf8`: text that UTF-8 cannot encode (a lone surrogate: a byte that was not
  UTF-8, read with ``surrogateescape``) is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from dyna.errors import ConfigError, DynaError

__all__ = ["FULL_BELOW", "PATH_ERRNOS", "WRITE_ERRNOS", "FileWriteError",
           "HistoryWriteError", "NotRegularFileError", "check_utf8", "kind_text",
           "path_refusal", "space_refusal", "write_errors"]

#: errno values that mean "the system refused the write" (not a bug, not damage).
WRITE_ERRNOS = frozenset(getattr(errno, n) for n in (
    "ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EIO", "EACCES", "EPERM") if hasattr(errno, n))
#: errno values that mean "no file can be written at this path": a name longer than the
#: file system allows (255 bytes) or a path longer than the system's (4,096 bytes), a
#: missing folder (or one such as ``/proc/self`` where no file can be made), a file where
#: a folder should be, a loop of symbolic links, a folder where the file should be.
PATH_ERRNOS = frozenset(getattr(errno, n) for n in (
    "ENAMETOOLONG", "ENOENT", "ENOTDIR", "ELOOP", "EISDIR") if hasattr(errno, n))


def kind_text(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``"a FIFO"``, ``"a symbolic
    link"``, ``"a character device"``, ...)."""
    for test, text in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return text
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


class NotRegularFileError(ConfigError, OSError):
    """The target of a write exists and is not a regular file (a symbolic link, a FIFO, a
    socket, a device): renaming a new file over it would replace it, so nothing was
    written. A :class:`dyna.errors.ConfigError` (and an ``OSError``) with ``field`` the
    name the caller gave the path (``"path"``, ``"--out"``) and ``value`` the path.

    Attributes
    ----------
    kind : str
        What is there, in words (:func:`kind_text`).
    """

    def __init__(self, field: str, path: object, kind: str):
        self.kind = kind
        ConfigError.__init__(self, field, str(path), f"is {kind}, not a regular file; dyna "
                             "never writes over one (nothing was written)")

    def __reduce__(self):
        return (type(self), (self.field, self.value, self.kind))


class FileWriteError(DynaError, OSError):
    """The operating system refused a write (a full disk, a quota, a read-only file system,
    no permission, an I/O error); the target is as it was and nothing of the write stayed.

    Its ``errno``, ``strerror`` and ``filename`` are those of the refusal; the message is
    one line: ``path='X': write failed: no space left on device (ENOSPC); nothing was
    written``.

    Attributes
    ----------
    path : str
        The file that was to be written.
    field : str
        How the caller named it (``"path"``, ``"--out"``).
    """

    def __init__(self, path: object, code: int, field: str = "path"):
        OSError.__init__(self, code, os.strerror(code).lower(), str(path))
        self.path = str(path)
        self.field = field

    def __str__(self) -> str:
        name = errno.errorcode.get(self.errno, str(self.errno))
        return (f"{self.field}={self.path!r}: write failed: {self.strerror} ({name}); "
                "nothing was written")

    def __reduce__(self):
        return (type(self), (self.path, self.errno, self.field))


class HistoryWriteError(FileWriteError):
    """A change was saved whole (MEMORY.md, a pending file), but the history record that
    logs it could not be appended (a full disk, no permission): the file holds the change
    and the history lacks it, which the message says instead of "nothing was written".

    The message is one line: ``path='X.history.jsonl': the fact is saved; its history
    record could not be written: no space left on device (ENOSPC)``.

    Attributes
    ----------
    saved : str
        What was saved, in words (``"the fact is saved"``).
    """

    def __init__(self, path: object, code: int, saved: str, field: str = "path"):
        super().__init__(path, code, field)
        self.saved = saved

    def __str__(self) -> str:
        name = errno.errorcode.get(self.errno, str(self.errno))
        return (f"{self.field}={self.path!r}: {self.saved}; its history record could not "
                f"be written: {self.strerror} ({name})")

    def __reduce__(self):
        return (type(self), (self.path, self.errno, self.saved, self.field))


#: Free bytes in a folder below which its file system counts as full (a page of SQLite's,
#: its ``-shm`` index of 32 KiB, a frame header: a write needs at least that much).
FULL_BELOW = 64 * 1024


def space_refusal(folder) -> int | None:
    """``errno.ENOSPC`` when the file system holding ``folder`` has less than
    :data:`FULL_BELOW` bytes free (for root, counting the blocks reserved for it),
    ``errno.EROFS`` when it is mounted read-only, else None (also when it cannot be
    examined). For writers that report a full disk without its errno (SQLite's ``disk I/O
    error``, a Parquet writer's ``IO error``)."""
    try:
        vfs = os.statvfs(folder)
    except OSError:
        return None
    if vfs.f_flag & os.ST_RDONLY:
        return errno.EROFS
    free = (vfs.f_bfree if os.geteuid() == 0 else vfs.f_bavail) * vfs.f_frsize
    return errno.ENOSPC if free < FULL_BELOW else None


def _folder(name) -> str:
    """The absolute folder of file ``name`` (no system call: a path too long to resolve
    is compared as written)."""
    return os.path.dirname(os.path.abspath(os.fsdecode(name)))


def path_refusal(exc: OSError, path) -> bool:
    """True when ``exc`` says no file can be written at ``path``: its errno is in
    :data:`PATH_ERRNOS` and it names ``path`` or a file beside it (its temporary), or no
    file at all; a missing file elsewhere (an input the block reads) is not the target's."""
    if exc.errno not in PATH_ERRNOS:
        return False
    names = [n for n in (exc.filename, exc.filename2) if n is not None]
    return not names or any(_folder(n) == _folder(path) for n in names)


@contextlib.contextmanager
def write_errors(path, field: str = "path"):
    """Turn an ``OSError`` of the block whose errno is in :data:`WRITE_ERRNOS`, or which
    refuses the path itself (:func:`path_refusal`), into a :class:`FileWriteError` naming
    ``path``; so too any other error (not dyna's own) raised while the folder of ``path``
    is full or read-only (:func:`space_refusal`: a library that writes files reports
    ENOSPC in its own words). Typed errors of dyna and other errors pass unchanged."""
    try:
        yield
    except DynaError:
        raise
    except OSError as exc:
        if exc.errno in WRITE_ERRNOS or path_refusal(exc, path):
            raise FileWriteError(path, exc.errno, field) from exc
        raise
    except Exception as exc:
        code = space_refusal(os.path.dirname(os.path.abspath(path)))
        if code is not None:
            raise FileWriteError(path, code, field) from exc
        raise


def check_utf8(field: str, text: str, shown: object = None) -> str:
    """``text`` if UTF-8 can encode it; a lone surrogate (U+D800-U+DFFF: a byte that was
    not UTF-8, read with ``surrogateescape``, as a command-line argument is) is refused.

    Raises
    ------
    dyna.errors.ConfigError
        Naming ``field``, the value ``shown`` (default: the text's length, never the text)
        and the byte and its offset.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        what = (f"a byte that is not UTF-8 (0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF
                else f"a lone surrogate (U+{code:04X}")
        raise ConfigError(field, f"<text of {len(text)} characters>" if shown is None
                          else shown, f"the text holds {what} at character {exc.start}); "
                          "nothing was written") from None
    return text
