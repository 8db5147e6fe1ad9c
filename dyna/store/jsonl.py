"""JSON Lines import and export that survive a crash in the middle of a write.

One JSON object per line, UTF-8, ``\\n`` line ends. Reading never dies on a bad line: a line
that is not a JSON object (a torn last line left by a killed writer, or a corrupt line in the
middle) is skipped, counted and reported with its line number; blank lines are ignored.
Appending first ends a torn last line with ``\\n``, so the new record starts on its own line
and is not glued to the fragment (case PERS-02). Whole-file writes go to a temporary file
in the same directory and are renamed into place (atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dyna.errors import MissingFileError

__all__ = ["JsonlReport", "append_jsonl", "atomic_target", "dumps_record", "read_jsonl",
           "write_jsonl"]


@dataclass
class JsonlReport:
    """What a read found.

    Attributes
    ----------
    n_lines : int
        Non-blank lines read.
    n_records : int
        Lines that parsed to a JSON object.
    skipped : list of (int, str)
        1-based line number and reason of every skipped line.
    """

    n_lines: int = 0
    n_records: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)

    @property
    def n_skipped(self) -> int:
        """Number of skipped (torn or corrupt) lines."""
        return len(self.skipped)

    def to_dict(self) -> dict:
        return {"n_lines": self.n_lines, "n_records": self.n_records,
                "n_skipped": self.n_skipped,
                "skipped": [{"line": n, "reason": r} for n, r in self.skipped]}


def dumps_record(record: dict) -> str:
    """One record as a compact JSON line (no newline); NaN/inf are refused (ValueError)."""
    return json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def read_jsonl(path) -> tuple[list[dict], JsonlReport]:
    """Read every well-formed record of a JSON Lines file.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    records : list of dict
        In file order.
    report : JsonlReport
        Counts, and the line numbers of skipped lines.

    Raises
    ------
    MissingFileError
        The file does not exist.
    """
    path = Path(path)
    if not path.exists():
        raise MissingFileError("path", path)
    records: list[dict] = []
    report = JsonlReport()
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            report.n_lines += 1
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                torn = not raw.endswith(b"\n")
                report.skipped.append((lineno, ("torn line (no newline): " if torn else "")
                                       + f"{type(exc).__name__}: {exc}"[:200]))
                continue
            if not isinstance(obj, dict):
                report.skipped.append((lineno, f"not a JSON object: {type(obj).__name__}"))
                continue
            records.append(obj)
    report.n_records = len(records)
    return records, report


def append_jsonl(path, records: Iterable[dict], *, fsync: bool = True) -> int:
    """Append records to a JSON Lines file, each on its own line.

    If the file does not end with a newline (a torn last line), one is written first, so the
    fragment stays alone on its line and is skipped by :func:`read_jsonl`.

    Parameters
    ----------
    path : str or Path
        Created if missing.
    records : iterable of dict
        All are encoded before anything is written; an unencodable record (NaN, a set) raises
        ``ValueError``/``TypeError`` and nothing is appended.
    fsync : bool
        Flush to disk before returning.

    Returns
    -------
    int
        Records appended.
    """
    lines = [dumps_record(r) + "\n" for r in records]
    data = "".join(lines).encode("utf-8")
    with open(path, "ab+") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                data = b"\n" + data
        fh.write(data)
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())
    return len(lines)


@contextlib.contextmanager
def atomic_target(path):
    """Yield a temporary path next to ``path``; rename it onto ``path`` if the block succeeds.

    The temporary file is removed if the block raises, so ``path`` is either the old file or
    the complete new one (``os.replace`` is atomic on POSIX).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_jsonl(path, records: Iterable[dict]) -> int:
    """Write records to a new JSON Lines file atomically (temp file + rename).

    Returns
    -------
    int
        Records written.
    """
    lines = [dumps_record(r) + "\n" for r in records]
    data = "".join(lines)
    with atomic_target(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
    return len(lines)
