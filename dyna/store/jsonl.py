"""JSON Lines import and export that survive a crash in the middle of a write.

One JSON object per line, UTF-8, ``\\n`` line ends. Reading never dies on a bad line: a line
that is not a JSON object (a torn last line left by a killed writer, or a corrupt line in the
middle) is skipped, counted and reported with its line number; blank lines are ignored.

Batches (all of a batch or none of it)
    :func:`append_jsonl` writes each call's records as one batch: a header line
    ``{"__dyna_batch__": {"n": N, "sha256": H}}`` and then the N record lines, where H is
    the SHA-256 (hex) of those N lines' bytes, newlines included. :func:`read_jsonl` returns
    a batch's records only when all N lines follow its header and their checksum matches; a
    batch cut short by a killed writer (fewer lines before the end of the file or before the
    next header, a torn last line) or damaged later is dropped whole and reported in
    :attr:`JsonlReport.dropped_batches`, never read as valid records. Lines outside any
    batch (files of other writers, :func:`write_jsonl` exports) are read one by one as
    before. A record whose only key is ``__dyna_batch__`` is refused by the writers.
    Appending first ends a torn last line with ``\\n``, so the new batch starts on its own
    line and is not glued to the fragment (case PERS-02).

Whole files
    :func:`write_jsonl` (exports) writes to a temporary file in the same directory, fsyncs
    it and renames it into place (atomic on POSIX, :func:`dyna.fileio.atomic.atomic_target`):
    a reader sees the old file or the whole new one. The temporary file's name records its
    writer's process id and start time (:mod:`dyna.fileio.tempfiles`), so the next write of
    the same file removes one left by a killed writer, and never one of a live writer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dyna.errors import ConfigError, MissingFileError, StoreWriteError
from dyna.fileio.atomic import atomic_target

__all__ = ["BATCH_KEY", "JsonlReport", "append_jsonl", "dumps_record", "read_jsonl",
           "write_jsonl"]


@dataclass
class JsonlReport:
    """What a read found.

    Attributes
    ----------
    n_lines : int
        Non-blank lines read (batch headers included).
    n_records : int
        Records returned.
    skipped : list of (int, str)
        1-based line number and reason of every skipped line outside a batch (torn or
        corrupt).
    dropped_batches : list of (int, int, str)
        Batches dropped whole: the 1-based line number of the header, the number of record
        lines that followed it, and why (incomplete, checksum mismatch).
    """

    n_lines: int = 0
    n_records: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    dropped_batches: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def n_skipped(self) -> int:
        """Number of skipped (torn or corrupt) lines outside batches."""
        return len(self.skipped)

    @property
    def n_dropped_records(self) -> int:
        """Record lines dropped with their incomplete or damaged batch."""
        return sum(k for _, k, _ in self.dropped_batches)

    def to_dict(self) -> dict:
        """The report as JSON-ready dict (counts and the line numbers with reasons)."""
        return {"n_lines": self.n_lines, "n_records": self.n_records,
                "n_skipped": self.n_skipped,
                "skipped": [{"line": n, "reason": r} for n, r in self.skipped],
                "n_dropped_batches": len(self.dropped_batches),
                "n_dropped_records": self.n_dropped_records,
                "dropped_batches": [{"line": n, "lines": k, "reason": r}
                                    for n, k, r in self.dropped_batches]}


#: The key of a batch header line (see the module docstring).
BATCH_KEY = "__dyna_batch__"
_HEADER_PREFIX = b'{"' + BATCH_KEY.encode() + b'"'
_HEX = frozenset("0123456789abcdef")


def _header(raw: bytes) -> tuple[int, str] | None:
    """``(n, sha256)`` when the line is a well-formed batch header, else None."""
    if not raw.startswith(_HEADER_PREFIX) or not raw.endswith(b"\n"):
        return None  # (a header without its newline is torn: skipped as a line)
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or list(obj) != [BATCH_KEY]:
        return None
    h = obj[BATCH_KEY]
    if not isinstance(h, dict) or set(h) != {"n", "sha256"}:
        return None
    n, sha = h["n"], h["sha256"]
    if type(n) is not int or n < 1 or not isinstance(sha, str) or len(sha) != 64 \
            or not _HEX.issuperset(sha):
        return None
    return n, sha


def _check_records(records: list[dict]) -> None:
    for i, r in enumerate(records):
        if isinstance(r, dict) and list(r) == [BATCH_KEY]:
            raise ConfigError(f"records[{i}]", BATCH_KEY, "a record whose only key is "
                              f"{BATCH_KEY!r} would read as a batch header")


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
    if path.is_dir():
        raise ConfigError("path", str(path), "is a folder, not a JSON Lines file")
    records: list[dict] = []
    report = JsonlReport()
    batch = None  # the open batch: [header line, n, sha256, [(line number, raw), ...]]

    def drop(reason: str) -> None:
        report.dropped_batches.append((batch[0], len(batch[3]), reason))

    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            report.n_lines += 1
            head = _header(raw)
            if head is not None:
                if batch is not None:
                    drop(f"incomplete batch: {len(batch[3])} of {batch[1]} lines before the "
                         f"next batch (its writer was killed mid-batch)")
                batch = [lineno, head[0], head[1], []]
                continue
            if batch is None:
                if raw.startswith(_HEADER_PREFIX):  # a header cut short: no record follows
                    report.skipped.append((lineno, "torn or malformed batch header"))
                else:
                    _parse_line(lineno, raw, records, report)
                continue
            batch[3].append((lineno, raw))
            if len(batch[3]) < batch[1]:
                continue
            lines = batch[3]
            if hashlib.sha256(b"".join(r for _, r in lines)).hexdigest() != batch[2]:
                drop("checksum mismatch: the batch's lines are not the ones written")
            else:
                for n, r in lines:
                    _parse_line(n, r, records, report)
            batch = None
    if batch is not None:
        drop(f"incomplete batch: {len(batch[3])} of {batch[1]} lines at the end of the file "
             "(its writer was killed mid-batch)")
    report.n_records = len(records)
    return records, report


def _parse_line(lineno: int, raw: bytes, records: list, report: JsonlReport) -> None:
    """Parse one line into ``records``, or note it in ``report.skipped``."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        torn = not raw.endswith(b"\n")
        report.skipped.append((lineno, ("torn line (no newline): " if torn else "")
                               + f"{type(exc).__name__}: {exc}"[:200]))
        return
    if not isinstance(obj, dict):
        report.skipped.append((lineno, f"not a JSON object: {type(obj).__name__}"))
        return
    records.append(obj)


def append_jsonl(path, records: Iterable[dict], *, fsync: bool = True) -> int:
    """Append records to a JSON Lines file as one batch: a reader sees all of them or none.

    The batch is a header line with the record count and the SHA-256 of the record lines,
    then one line per record (see the module docstring). If the file does not end with a
    newline (a torn last line), one is written first, so the fragment stays alone on its
    line and is skipped by :func:`read_jsonl`.

    Parameters
    ----------
    path : str or Path
        Created if missing.
    records : iterable of dict
        All are encoded before anything is written; an unencodable record (NaN, a set, a
        lone surrogate) raises ``ValueError``/``TypeError`` and nothing is appended.
    fsync : bool
        Flush to disk before returning (then a returned call is durable).

    Returns
    -------
    int
        Records appended (0 writes nothing).

    Raises
    ------
    ConfigError
        A record whose only key is ``__dyna_batch__`` (it would read as a header).
    StoreWriteError
        The file could not take the batch (e.g. a full disk): what was written of it is cut
        off again where possible, and a reader drops it in any case (incomplete batch).
    """
    records = list(records)
    _check_records(records)
    body = "".join(dumps_record(r) + "\n" for r in records).encode("utf-8")
    if not records:
        return 0
    head = dumps_record({BATCH_KEY: {"n": len(records),
                                     "sha256": hashlib.sha256(body).hexdigest()}}) + "\n"
    data = head.encode("utf-8") + body
    with open(path, "ab+") as fh:
        end = fh.seek(0, os.SEEK_END)
        if end > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                data = b"\n" + data
        try:
            fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        except OSError as exc:
            with contextlib.suppress(OSError):
                fh.truncate(end)
            raise StoreWriteError(path, f"{exc.strerror or exc}", field="path") from exc
    return len(records)


def write_jsonl(path, records: Iterable[dict]) -> int:
    """Write records to a new JSON Lines file atomically (temp file + rename).

    Plain lines, one record each (no batch header: the rename makes the whole file one
    batch).

    Returns
    -------
    int
        Records written.

    Raises
    ------
    MissingFileError, ConfigError
        See :func:`dyna.fileio.atomic.atomic_target` (a missing folder, a folder as the
        target).
    ValueError, TypeError
        A record JSON cannot encode; the old file is left as it was.
    """
    records = list(records)
    _check_records(records)
    lines = [dumps_record(r) + "\n" for r in records]
    data = "".join(lines)
    with atomic_target(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
    return len(lines)
