"""Where the memory store keeps its facts: in memory, or in MEMORY.md with its history;
and its staged facts (:class:`PendingFacts`: stage, approve, reject).

Both backends give :class:`dyna.loops.memory.MemoryStore` the same operations (read and
write the facts, append to and read the history, read and write the pending facts); the
file backend writes MEMORY.md and the pending file atomically
(:func:`dyna.fileio.atomic_write`), appends the history under the store's lock, and
never writes through a symbolic link.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import re
from pathlib import Path

from dyna.errors import ConfigError, MissingFileError
from dyna.fileio import (CorruptFileError, SymlinkError, append_record, atomic_write, file_kind,
                         file_mark, library_lock, read_bytes_nofollow, read_records)
from dyna.fileio.failures import FileWriteError, HistoryWriteError
from dyna.loops.frontmatter import shown
from dyna.loops.memory_format import (MemoryEntry, MemoryFileError, PendingFact, StoreResult,
                                      parse_lines, pending_from_json, pending_to_json,
                                      render_document)

__all__ = ["FileMemoryBackend", "InMemoryBackend", "PendingFacts", "drop_pending",
           "find_pending", "next_pending_id", "take_pending"]


class InMemoryBackend:
    """The facts, history and pending facts of ``MemoryStore(None)``, in lists."""

    location = None

    def __init__(self):
        self._entries: list[MemoryEntry] = []
        self._history: list[dict] = []
        self._pending: list[PendingFact] = []
        self.seq = 0
        self.staged = 0

    @contextlib.contextmanager
    def locked(self):
        yield

    def refresh(self):
        return None

    def read(self):
        return list(self._entries)

    def write(self, entries, subst=None):
        self._entries = [(subst or {}).get(id(e), e) for e in entries]
        return list(self._entries)

    def append_history(self, rec):
        self._history.append(rec)
        self.seq = rec["seq"]
        self.staged += rec["op"] == "stage"

    def history(self):
        return list(self._history)

    def read_pending(self):
        return list(self._pending)

    def write_pending(self, items):
        self._pending = list(items)


def _refuse_symlink(p: Path, what: str = "write through") -> None:
    """Raise a :class:`~dyna.fileio.SymlinkError` (a ConfigError, field ``path``) naming
    ``p`` when it is a symbolic link."""
    if file_kind(p) == "link":
        raise SymlinkError(p, f"is a symlink; refusing to {what} it")


class _HistoryLog:
    """The append-only history file (:mod:`dyna.fileio.jsonfiles`: a torn last line is left
    out and cut off by the next append), with the two counters the store keeps from it: the
    highest ``seq`` and the number of ``stage`` records."""

    def __init__(self, path: Path, durable: bool):
        self.path = path
        self.durable = durable
        self.seq = 0
        self.staged = 0

    def _corrupt(self, line: int | None, reason: str) -> MemoryFileError:
        """The typed error for history line ``line``, showing the line redacted before it
        is cut (a cut can leave a secret too short for its detector)."""
        data = read_bytes_nofollow(self.path) or b""
        lines = data.split(b"\n")
        if line is None:                 # the last line, which lacks its newline
            line = len(lines)
        piece = lines[line - 1] if 0 < line <= len(lines) else b""
        return MemoryFileError(f"{self.path}:{line}", shown(
            piece[:4096].decode("utf-8", "replace"), 60),
            reason.replace("log line", "history line"))

    def refresh(self) -> None:
        """Re-read the counters from the file."""
        recs = self.records()
        self.seq = max((rec["seq"] for rec in recs), default=0)
        self.staged = sum(rec["op"] == "stage" for rec in recs)

    def records(self) -> list[dict]:
        """Every complete record, oldest first.

        Raises
        ------
        MemoryFileError
            A line is not a JSON object with an integer ``seq`` and a text ``op``
            (``field`` is ``path:line``).
        """
        _refuse_symlink(self.path.parent, "read through")   # dyna's own file: never a link
        _refuse_symlink(self.path, "read through")
        try:
            recs = read_records(self.path)
        except CorruptFileError as exc:
            raise self._corrupt(exc.line, exc.reason) from None
        for i, rec in enumerate(recs):
            if not isinstance(rec.get("seq"), int) or not isinstance(rec.get("op"), str):
                raise self._corrupt(self._line_of_record(i),
                                   "corrupt history line (not a history record)")
        return recs

    def _line_of_record(self, i: int) -> int:
        """The 1-based line of record ``i`` (the reader skips blank lines)."""
        data = read_bytes_nofollow(self.path) or b""
        filled = [k for k, piece in enumerate(data.split(b"\n")) if piece.strip()]
        return filled[i] + 1

    def append(self, rec: dict) -> None:
        """Append under the store's lock (:func:`dyna.fileio.append_record`: a torn last
        line left by a dead writer is cut off first; a whole last record without its
        newline gets one)."""
        _refuse_symlink(self.path.parent)
        _refuse_symlink(self.path)
        try:
            append_record(self.path, rec, durable=self.durable)
        except CorruptFileError as exc:
            raise self._corrupt(exc.line, exc.reason) from None
        self.seq = max(self.seq, rec["seq"])
        self.staged += rec["op"] == "stage"


#: What a history record's change left in the files, by its ``op``, for the message of
#: a history that could not be appended (:class:`dyna.fileio.failures.HistoryWriteError`).
_SAVED = {"add": "the fact is saved", "approve": "the fact is saved",
          "stage": "the fact is staged", "reject": "the staged fact is dropped",
          "remove": "the fact is removed", "retire": "the fact is retired"}


class FileMemoryBackend:
    """MEMORY.md at ``path``, with its history and pending file in ``.dyna`` beside it.

    Raises
    ------
    ConfigError
        ``path`` is a folder, a symbolic link or not a regular file.
    MissingFileError
        The folder of ``path`` does not exist and ``create`` is False (with True it is
        made, with its missing parents).
    """

    def __init__(self, path, durable=True, lock_timeout=30.0, create=False):
        self.path = Path(path)
        kind = file_kind(self.path)
        if kind == "folder":
            raise ConfigError("path", str(path), "is a folder; give the MEMORY.md file")
        if kind in ("link", "special"):
            # a device (/dev/null), FIFO or socket would be replaced by the atomic rename,
            # and a link would write elsewhere: refused before anything is created
            raise ConfigError("path", str(path), "is not a regular file (a device, FIFO, "
                              "socket or symbolic link); give a MEMORY.md file")
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.parent.is_dir():
            raise MissingFileError("path", self.path.parent, "no such folder (MEMORY.md's "
                                   "folder is made only with create=True)")
        self._side = self.path.parent / ".dyna"
        self._hist = self._side / f"{self.path.name}.history.jsonl"
        self._pend = self._side / f"{self.path.name}.pending.json"
        self.durable = durable
        self._log = _HistoryLog(self._hist, durable)
        self._lock_timeout = lock_timeout
        self._lock = None          # made at the first write: reading creates no file
        self._lines: list | None = None
        self._stat = None
        self._entries: list[MemoryEntry] = []

    @property
    def location(self):
        return self.path

    @property
    def seq(self):
        return self._log.seq

    @property
    def staged(self):
        return self._log.staged

    @contextlib.contextmanager
    def locked(self):
        """The inter-process lock, with the file and the history re-read under it."""
        if self._lock is None:
            # .dyna/MEMORY.md.lock, beside the history: no stray file next to MEMORY.md
            self._lock = library_lock(self._side / self.path.name, self._lock_timeout)
        with self._lock:
            # always re-read: inode numbers are reused and mtimes are coarse (a few ms),
            # so a same-size rewrite by another process could pass for "unchanged"
            self._stat = None
            self.refresh()
            yield

    def refresh(self):
        """Re-read MEMORY.md when it changed (inode, size, mtime) and the history's new
        lines; returns the facts, or None when MEMORY.md did not change."""
        self._log.refresh()
        key = file_mark(self.path)
        if key is not None and key == self._stat:
            return None
        raw = None if key is None else read_bytes_nofollow(self.path)
        if raw is None:                  # missing (or removed since its mark was taken)
            changed = self._stat is not None or self._lines is None
            self._stat, self._lines, self._entries = None, [], []
            return [] if changed else None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MemoryFileError(str(self.path), f"byte {exc.start}",
                                  f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                                  f"{exc.start} cannot be decoded)") from None
        self._lines = parse_lines(text, self.path)
        self._entries = [e for _, e in self._lines if e is not None]
        self._stat = key
        return list(self._entries)

    def read(self):
        got = self.refresh()
        return list(self._entries) if got is None else got

    def write(self, entries, subst=None):
        for p in (self.path, self._side):
            _refuse_symlink(p)
        text = render_document(self._lines, entries, subst)
        atomic_write(self.path, text, durable=self.durable)
        self._stat = None
        return self.read()

    def append_history(self, rec):
        """Append ``rec`` to the history, after the change it records was saved.

        Raises
        ------
        dyna.fileio.failures.HistoryWriteError
            The system refused the append (a full disk, no permission): the message says
            that the change is saved and its history record is not.
        """
        _refuse_symlink(self._side)
        try:
            self._log.append(rec)
        except FileWriteError as exc:
            saved = _SAVED.get(rec["op"], "the change is saved")
            raise HistoryWriteError(self._hist, exc.errno, saved) from exc

    def history(self):
        return self._log.records()

    def read_pending(self):
        _refuse_symlink(self._side, "read through")
        raw = read_bytes_nofollow(self._pend)
        if raw is None:
            return []
        return pending_from_json(raw, self._pend)

    def write_pending(self, items):
        for p in (self._side, self._pend):
            _refuse_symlink(p)
        self._pend.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self._pend, pending_to_json(items), durable=self.durable)



class PendingFacts:
    """The approval methods of :class:`dyna.loops.memory.MemoryStore`: facts staged for a
    person's approval, kept in the backend's pending facts until approved or rejected.

    A mixin: the store gives the write lock (``_writing``), the checks and redaction of a
    new fact (``_entry``, ``_net``), the clock, the history (``_log``) and the write of a
    fact (``_apply``, as :meth:`~dyna.loops.memory.MemoryStore.add` does it).
    """

    def pending(self) -> list[PendingFact]:
        """Facts staged for approval, oldest first.

        Raises
        ------
        MemoryFileError
            The pending file is corrupt.
        """
        return self.backend.read_pending()

    def stage(self, text: str, source: str = "", run_id: str = "",
              provenance=(), reason: str = "") -> PendingFact:
        """Stage a fact instead of writing it (trust ``untrusted`` until approved); ids
        ``m0001``, ``m0002``... are unique across processes sharing the file."""
        with self._writing() as at:
            entry = self._entry(text, at.date().isoformat(), source or run_id, "untrusted",
                                run_id)
            items = self.pending()
            clean = self._net.values({"provenance": list(provenance), "reason": reason})
            item = PendingFact(next_pending_id(self.backend, items), entry, run_id,
                               _dt.datetime.isoformat(at, timespec="seconds"),
                               tuple(clean["provenance"]), clean["reason"])
            self.backend.write_pending(items + [item])
            self._log("stage", entry.text, run_id, item.id, at)
            return item

    def approve(self, pid: str) -> StoreResult:
        """Write a staged fact (trust ``approved``: it may replace any fact): MEMORY.md
        first (whole), then the pending file without it, then the history, so a write that
        fails (a full disk) leaves the fact pending, never lost.

        Raises
        ------
        ConfigError
            Unknown id.
        """
        with self._writing() as at:
            p = find_pending(self.backend, pid)
            date = p.entry.date or at.date().isoformat()
            entry = self._entry(p.entry.text, date, p.entry.source or p.run_id, "approved",
                                p.run_id)
            result, records = self._apply(entry, p.run_id, True)
            drop_pending(self.backend, pid)
            self._log("approve", p.entry.text, p.run_id, pid, at)
            for op, e, why in records:
                self._log(op, e.text, p.run_id, why, at)
            return result

    def reject(self, pid: str) -> PendingFact:
        """Drop a staged fact (recorded in the history).

        Raises
        ------
        ConfigError
            Unknown id.
        """
        with self._writing() as at:
            p = take_pending(self.backend, pid)
            self._log("reject", p.entry.text, p.run_id, pid, at)
            return p


def find_pending(backend, pid: str) -> PendingFact:
    """The staged fact ``pid`` of ``backend``'s pending facts (left pending).

    Raises
    ------
    ConfigError
        No pending fact has this id (field ``id``).
    """
    for p in backend.read_pending():
        if p.id == pid:
            return p
    raise ConfigError("id", pid, "no pending fact with this id")


def drop_pending(backend, pid: str) -> None:
    """Rewrite ``backend``'s pending facts without the one with id ``pid`` (none: no write)."""
    items = backend.read_pending()
    if any(p.id == pid for p in items):
        backend.write_pending([q for q in items if q.id != pid])


def take_pending(backend, pid: str) -> PendingFact:
    """Remove the staged fact ``pid`` from ``backend``'s pending facts and return it.

    Raises
    ------
    ConfigError
        No pending fact has this id (field ``id``).
    """
    p = find_pending(backend, pid)
    drop_pending(backend, pid)
    return p


def next_pending_id(backend, items) -> str:
    """The id of the next staged fact: ``m`` and 4 digits, one past both the facts ever
    staged (the history's ``stage`` records) and the highest id of ``items`` (the pending
    facts now), so ids stay unique across processes sharing the files."""
    used = [int(p.id[1:]) for p in items if re.fullmatch(r"m\d+", p.id)]
    return f"m{max([backend.staged, *used]) + 1:04d}"
