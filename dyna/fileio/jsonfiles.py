"""Files of JSON that dyna keeps: whole JSON files and append-only JSON-lines logs.

Both are read without following a symbolic link (:func:`dyna.fileio.paths.open_nofollow`)
and refuse an object that names a key twice (:func:`dyna.fileio.unique_json.loads_unique`).
A file that cannot be read is a :class:`CorruptFileError` naming the file and line; nothing
is dropped or rewritten.

The log (:func:`append_record`, :func:`read_records`, :func:`read_last_record`) is the
history of a skill library or memory file: one ASCII JSON object per line, appended under
the writer's lock. A crash during an append leaves a torn last line, which readers leave
out and the next append cuts off. (The experience store's import and export format, with
its checksummed batches, is :mod:`dyna.store.jsonl`.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dyna.errors import DynaError
from dyna.fileio.failures import write_errors
from dyna.fileio.paths import open_nofollow, open_write_nofollow, read_bytes_nofollow
from dyna.fileio.unique_json import DuplicateKeyError, loads_unique

__all__ = ["CorruptFileError", "append_record", "read_json", "read_last_record", "read_records",
           "whole_record"]


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


def append_record(path: Path, record: dict, *, durable: bool = True) -> None:
    """Append one JSON record as a line to ``path`` (created with its folder if missing).

    A torn last line left by a crash during an earlier append (no final newline) is cut off
    first, so the new record starts a line of its own; a last line that lacks only its
    newline (a whole JSON object: an edit dropped it) is kept and ended. The file is opened
    with ``O_NOFOLLOW``: a symbolic link at ``path`` raises
    :class:`~dyna.fileio.paths.SymlinkError` (the caller checks the folders above it with
    :func:`~dyna.fileio.paths.check_no_symlink`).

    Raises
    ------
    SymlinkError
        ``path`` is a symbolic link; nothing is written.
    FileWriteError
        The system refused the write (a full disk, no permission); no whole record was
        added (a torn part of one is cut off by the next append).
    CorruptFileError
        The last line lacks its newline and is an object naming a key twice (a damaged
        record, never cut off); nothing is written.
    """
    path = Path(path)
    line = json.dumps(record, ensure_ascii=True, sort_keys=True) + "\n"
    with write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        _append_line(path, line, durable)


def _append_line(path: Path, line: str, durable: bool) -> None:
    """:func:`append_record`'s write of one line (a torn tail cut, an open one ended)."""
    # owner-only, as the skills and facts it records changes of
    fd = open_write_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
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


def read_records(path: Path) -> list[dict]:
    """All complete records of a JSON-lines file ([] when missing).

    A torn last line (a crash during an append: the file does not end with a newline, and
    its last line is not a whole JSON object) is not a record and is left out;
    :func:`append_record` cuts it off before the next append. A last line that lacks only
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


def read_last_record(path: Path) -> dict | None:
    """The last complete record of a JSON-lines file (None when there is none), read from
    the end of the file (constant work for a long log).

    Raises
    ------
    CorruptFileError
        The last complete line is not a JSON object.
    """
    path = Path(path)
    fd = open_nofollow(path)
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
