"""Atomic file writes, append-only JSON-lines logs and the redaction safety net used by the
loop stores."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import filelock

from dyna._json import DuplicateKeyError, loads_unique
from dyna.errors import ConfigError, DynaError
from dyna.redact import redact, scan, scan_found
from dyna.store.jsonl import atomic_target


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
        for p in (lock.parent, lock):
            if p.is_symlink():
                raise SymlinkError(p)
        lock.parent.mkdir(parents=True, exist_ok=True)
        try:
            return super().acquire(timeout, *args, **kwargs)
        except filelock.Timeout:
            raise LibraryLockTimeout(self.lock_file,
                                     self.timeout if timeout is None else timeout) from None


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
    from dyna.errors import check_range

    check_range("timeout", timeout, 0, lo_open=True)
    path = lock_path(folder_or_file)
    for p in (path.parent, path):
        if p.is_symlink():
            raise SymlinkError(p)
    return _LibraryFileLock(str(path), timeout=timeout)


def _refuse_non_regular(path: Path) -> None:
    """OSError(EINVAL) when ``path`` exists (as a link or not) and is not a regular file."""
    import errno
    import stat

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "exists and is not a regular file (a device, FIFO, "
                      "socket or link is never written over)", str(path))


def atomic_write(path: Path, data: str | bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically: readers see the old or the new file, never
    a part of it.

    The data goes to a temporary file in the same folder (:func:`dyna.store.jsonl.atomic_target`),
    is flushed (and fsync'ed when ``durable``) and then renamed over ``path``. Text is written
    as UTF-8 with the newlines it contains (no platform translation); lone surrogates
    (bytes that were not UTF-8, read with ``surrogateescape``) are written back as the
    original bytes.

    Raises
    ------
    OSError
        The folder is not writable, or ``path`` exists and is not a regular file (a device
        such as ``/dev/null``, a FIFO, a socket, a symbolic link: renaming over it would
        replace it); ``path`` is then unchanged.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    _refuse_non_regular(path)
    with atomic_target(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())


def read_text_exact(path: Path) -> str | None:
    """File content as text that :func:`atomic_write` writes back byte for byte, or None
    when the file does not exist."""
    try:
        return Path(path).read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return None


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


class CorruptFileError(DynaError, ValueError):
    """A library file dyna keeps (``.dyna/history.jsonl``, a pending proposal, the state
    file) cannot be read: not UTF-8, not JSON, an object naming one key twice, or not the
    expected record. Nothing is dropped or rewritten; fix or remove the file.

    Attributes
    ----------
    path : str
    line : int or None
        1-based line (None for a whole-file error).
    reason : str
    """

    def __init__(self, path: object, line: int | None, reason: str):
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):
        return (type(self), (self.path, self.line, self.reason))


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


def append_jsonl(path: Path, record: dict, *, durable: bool = True) -> None:
    """Append one JSON record as a line to ``path`` (created with its folder if missing).

    A torn last line left by a crash during an earlier append (no final newline) is cut off
    first, so the new record starts a line of its own; a last line that lacks only its
    newline (a whole JSON object: an edit dropped it) is kept and ended. The file is opened
    with
    ``O_NOFOLLOW``: a symbolic link at ``path`` raises :class:`SymlinkError` (the caller
    checks the folders above it with :func:`check_no_symlink`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, ensure_ascii=True, sort_keys=True) + "\n"
    try:
        # owner-only, as the skills and facts it records changes of
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError:
        if path.is_symlink():
            raise SymlinkError(path) from None
        raise
    with os.fdopen(fd, "r+b") as fh:
        size = os.fstat(fd).st_size
        if size:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":            # no final newline
                start = _last_newline(fh, size) + 1
                fh.seek(start)
                try:
                    whole = whole_record(fh.read(size - start))
                except DuplicateKeyError as exc:   # a record, damaged: not to be cut
                    raise CorruptFileError(path, None, f"corrupt last log line ({exc})") \
                        from None
                if whole is not None:
                    line = "\n" + line            # a whole record: end its line
                else:                            # torn tail of a crashed append: cut
                    fh.truncate(start)
        fh.write(line.encode("ascii"))
        fh.flush()
        if durable:
            os.fsync(fh.fileno())


def whole_record(line: bytes) -> dict | None:
    """The JSON object ``line`` holds, else None. A last line without its newline is a
    whole record when it parses as an object: an object's text ends at its closing brace,
    so no cut-off prefix of one parses as an object; anything else is a torn tail."""
    try:
        rec = loads_unique(line.decode("ascii"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None   # (a DuplicateKeyError is no torn tail: it reaches the caller)
    return rec if isinstance(rec, dict) else None


def _last_newline(fh, size: int) -> int:
    """Offset of the last newline of an open file (-1 if none), read backwards."""
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        fh.seek(start)
        chunk = fh.read(pos - start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i
        pos = start
    return -1


def _open_nofollow(path: Path) -> int | None:
    """A read-only descriptor of ``path`` (None when missing), never through a link."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
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
    fd = _open_nofollow(Path(path))
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def read_jsonl(path: Path) -> list[dict]:
    """All complete records of a JSON-lines file ([] when missing).

    A torn last line (a crash during an append: the file does not end with a newline, and
    its last line is not a whole JSON object) is not a record and is left out;
    :func:`append_jsonl` cuts it off before the next append. A last line that lacks only
    its newline is a record.

    Raises
    ------
    CorruptFileError
        Naming the file and line: a line that is not ASCII JSON of an object (anywhere but
        a torn tail), so nothing is ever silently dropped.
    SymlinkError
        ``path`` is a symbolic link.
    """
    raw = read_bytes_nofollow(path)
    if raw is None:
        return []
    lines = raw.split(b"\n")
    torn = not raw.endswith(b"\n")
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            if torn and i == len(lines) - 1:
                rec = whole_record(line)
                if rec is not None:
                    out.append(rec)
                break
            rec = loads_unique(line.decode("ascii"))
        except (UnicodeDecodeError, ValueError) as exc:   # (not JSON, a key twice)
            raise CorruptFileError(path, i + 1, f"corrupt log line ({exc})") from None
        if not isinstance(rec, dict):
            raise CorruptFileError(path, i + 1, "corrupt log line (not a JSON object)")
        out.append(rec)
    return out


def read_last_jsonl(path: Path) -> dict | None:
    """The last complete record of a JSON-lines file (None when there is none), read from
    the end of the file (constant work for a long log).

    Raises
    ------
    CorruptFileError
        The last complete line is not a JSON object.
    """
    path = Path(path)
    fd = _open_nofollow(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fd).st_size
        end = _last_newline(fh, size)          # end of the last complete line
        if end < size - 1:                     # a last line without its newline
            fh.seek(end + 1)
            try:
                rec = whole_record(fh.read(size - end - 1))
            except DuplicateKeyError as exc:
                raise CorruptFileError(path, None, f"corrupt last log line ({exc})") from None
            if rec is not None:
                return rec
        if end < 0:
            return None
        start = _last_newline(fh, end) + 1
        fh.seek(start)
        line = fh.read(end - start)
    if not line.strip():
        return None
    try:
        rec = loads_unique(line.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:   # (not JSON, a key twice)
        raise CorruptFileError(path, None, f"corrupt last log line ({exc})") from None
    if not isinstance(rec, dict):
        raise CorruptFileError(path, None, "corrupt last log line (not a JSON object)")
    return rec


def read_json(path: Path):
    """A JSON file's value (None when missing), opened without following a link.

    Raises
    ------
    CorruptFileError
        Not UTF-8 or not JSON; names the file and the line.
    SymlinkError
        ``path`` is a symbolic link.
    """
    raw = read_bytes_nofollow(path)
    if raw is None:
        return None
    try:
        return loads_unique(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, raw[:exc.start].count(b"\n") + 1,
                               f"not UTF-8 ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise CorruptFileError(path, exc.lineno, f"not JSON ({exc.msg})") from None
    except DuplicateKeyError as exc:
        raise CorruptFileError(path, None, str(exc)) from None


class SafetyNet:
    """The always-on redaction under every write of a loop library (skills, memory,
    pending items, history records), with its catches counted per detector.

    Independent of a loop's ``redaction`` switch (which governs only the digest a reviewer
    sees): whatever reaches a library is passed through here before it is written.
    :meth:`values` redacts string values only (:func:`dyna.redact.redact` with no sensitive
    key names), for records whose keys are schema fields (a SKILL.md's ``name`` is not a
    person's name); :meth:`free` also redacts the values of sensitive keys of a free-form
    mapping (frontmatter ``extra`` entries). ``counts`` maps detector name -> catches
    (:func:`dyna.redact.scan`; ``"sensitive_key"`` for a value redacted by its key name).
    """

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()

    def values(self, obj):
        found = scan_found(obj)
        if not found:
            return obj
        self.counts.update(found)
        return redact(obj, (), values=True)

    def free(self, obj):
        out = redact(obj)
        if out == obj:
            return obj
        found = scan(obj)
        if found:
            self.counts.update(found)
        else:
            self.counts["sensitive_key"] += 1
        return out
