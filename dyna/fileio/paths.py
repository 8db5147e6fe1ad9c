"""Safe paths: no symbolic link followed, no escape from a root folder, no special file.

A library or memory folder may sit where others can write (a shared checkout, a folder an
agent's tools can reach), so dyna never writes through a symbolic link below such a
folder, reads a file dyna keeps only without following a link, and opens a file whose
name a user or a folder listing gave only when it is a regular file (a FIFO would block,
a device would never end or be replaced by a rename).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from dyna.errors import ConfigError

__all__ = ["SymlinkError", "check_no_symlink", "file_kind", "file_mark", "open_nofollow",
           "open_regular", "open_write_nofollow", "read_bytes_nofollow", "read_bytes_within",
           "resolve_in_folder"]


class SymlinkError(ConfigError):
    """A path inside a library (or memory) folder is a symbolic link, which dyna refuses to
    write through (or, for a file pointing outside the folder, to read); nothing was
    written. A :class:`dyna.errors.ConfigError` with ``field`` ``"path"`` and ``value`` the
    link.
    """

    def __init__(self, path: object, reason: str = "is a symbolic link; dyna does not "
                 "write through links inside a library folder"):
        super().__init__("path", str(path), reason)

    def __reduce__(self):
        return (type(self), (self.value, self.reason))


def check_no_symlink(root: Path, path: Path) -> Path:
    """Return ``path`` after checking that neither it nor any folder between ``root``
    (exclusive; the library folder itself may be a link) and it is a symbolic link.

    Raises
    ------
    SymlinkError
        Naming the first link found.
    dyna.errors.ConfigError
        ``path`` is not inside ``root``.
    """
    root, path = Path(root), Path(path)
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise ConfigError("path", str(path), f"is not inside {root}") from None
    cur = root
    for part in rel.parts:
        if part in ("..", ""):
            raise ConfigError("path", str(path), "must not contain '..'")
        cur = cur / part
        if cur.is_symlink():
            raise SymlinkError(cur)
    return path


#: Errors of ``lstat`` that mean "nothing there" (as :meth:`pathlib.Path.exists` reads
#: them): no such entry, a file where a folder is named, a link loop.
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def file_kind(path) -> str:
    """What is at ``path``, without following a link: ``"missing"``, ``"link"`` (a
    symbolic link, dangling or not), ``"folder"``, ``"regular"`` (a regular file) or
    ``"special"`` (a FIFO, a socket, a character or block device).

    A path the file system cannot name (a NUL byte) or that names nothing (a file used as
    a folder, a link loop) is ``"missing"``, as :meth:`pathlib.Path.exists` reads it.

    Raises
    ------
    OSError
        The entry cannot be examined (no permission on a folder above it).
    """
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        if exc.errno in _ABSENT:
            return "missing"
        raise
    except ValueError:
        return "missing"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "folder"
    return "regular" if stat.S_ISREG(mode) else "special"


def file_mark(path) -> tuple[int, int, int] | None:
    """``(inode, size, mtime in ns)`` of ``path`` itself (a link is not followed), or None
    when it does not exist: a cheap sign that a file was written since it was last read."""
    try:
        s = os.lstat(path)
    except FileNotFoundError:
        return None
    return s.st_ino, s.st_size, s.st_mtime_ns


def open_nofollow(path: Path) -> int | None:
    """A read-only descriptor of ``path`` (None when missing), opened with ``O_NOFOLLOW``.

    Raises
    ------
    SymlinkError
        ``path`` is a symbolic link.
    OSError
        Any other reason it cannot be opened.
    """
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        if Path(path).is_symlink():
            raise SymlinkError(path) from None
        raise


def open_write_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """A descriptor of ``path`` opened with ``os.open(path, flags | O_NOFOLLOW, mode)``, for
    writing (``flags`` such as ``os.O_WRONLY | os.O_APPEND | os.O_CREAT``; ``mode`` is the
    permission bits of a file it creates), so nothing is written through a link.

    Raises
    ------
    SymlinkError
        ``path`` is a symbolic link; nothing is opened.
    OSError
        Any other reason it cannot be opened.
    """
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError:
        if Path(path).is_symlink():
            raise SymlinkError(path) from None
        raise


def read_bytes_nofollow(path: Path) -> bytes | None:
    """A file's bytes (None when missing), opened with ``O_NOFOLLOW``.

    Raises
    ------
    SymlinkError
        ``path`` is a symbolic link.
    """
    fd = open_nofollow(Path(path))
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def read_bytes_within(real_root: Path, path: Path) -> bytes:
    """The bytes of ``path``, which may be or pass through a symbolic link as long as the
    file it resolves to lies inside ``real_root`` (an already resolved folder).

    Raises
    ------
    SymlinkError
        ``path`` resolves outside ``real_root`` (the message names where); nothing is read.
    OSError
        The file cannot be read.
    """
    real = Path(path).resolve()
    if not real.is_relative_to(real_root):
        raise SymlinkError(path, f"links outside the library folder (to {real}); not read")
    return Path(path).read_bytes()


def resolve_in_folder(real_folder: Path, name: str, where: str = "the folder") -> Path:
    """The real path of the entry ``name`` of ``real_folder`` (an already resolved folder),
    symbolic links followed, when it is an entry of that very folder: a name that is (or
    passes through) a link to anywhere else, a subfolder's file and the folder itself
    included, or that climbs out with ``..``, is refused.

    Raises
    ------
    dyna.errors.ConfigError
        Field ``path``, value ``name``, reason ``"resolves outside <where>"``.
    """
    target = (Path(real_folder) / name).resolve()
    if target.parent != Path(real_folder):
        raise ConfigError("path", name, f"resolves outside {where}")
    return target


def open_regular(path: Path):
    """``path`` opened for reading in binary, only if it is a regular file (a link is
    followed). The check is made on the opened descriptor, so a FIFO or device named like
    the expected file neither blocks the open nor gets read.

    Raises
    ------
    OSError
        ``path`` cannot be opened, or is not a regular file (nothing is read).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
