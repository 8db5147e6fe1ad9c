"""The memory store: facts an agent keeps between runs, in a MEMORY.md file.

MEMORY.md holds one fact per line, with its date, source and trust::

    # Memory

    - [2024-05-01 | run-12 | trusted] The test command is `make test-fast`.
    - [2024-05-02 | run-14 | approved] API port: 8080

A line ``- fact`` without the bracket (written by hand) is read as a fact with no date,
no source and trust ``user``. Other lines (headings, comments) are not facts; the file is
rewritten atomically from the facts on every change. Superseded, evicted and merged facts
are kept in an append-only history beside it (``.dyna/MEMORY.md.history.jsonl``), and
facts waiting for approval in ``.dyna/MEMORY.md.pending.json``.

Identity of facts (:func:`dyna.loops._text.fact_key`): entries that differ only in case,
spacing or punctuation are one fact; entries that differ in a number or a name are
different facts. A fact of the form "<subject> is/are/:/= <value>" has a *subject*; a new
fact with the same subject and a different value supersedes the old one.

``MemoryStore(None)`` keeps everything in memory (same code, no files).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from dyna.errors import ConfigError, check_range
from dyna.redact import check_label
from dyna.loops._io import SafetyNet, append_jsonl, atomic_write, read_jsonl
from dyna.loops._text import (FEATURE_CACHE_SIZE, fact_key, is_concrete, jaccard,
                              similarity_matrix, text_features)

__all__ = ["ConsolidationReport", "MemoryEntry", "MemorySnapshot", "MemoryStore",
           "PendingFact", "StoreResult", "subject_of"]

TRUST = ("trusted", "approved", "untrusted", "user")
MAX_FACT = 500
_FIELD_BAD = re.compile(r"[|\]\n\r]")
_LINE_RE = re.compile(r"^\s*[-*]\s+(?:\[(?P<meta>[^\]]*)\]\s+)?(?P<text>\S.*?)\s*$")
_SUBJECT_RE = re.compile(
    r"^(?P<s>[^:=]{1,80}?)\s*(?:\s(?:is|are|equals|should be|must be|defaults to)\s|:\s|=)"
    r"\s*(?P<v>\S.*)$", re.IGNORECASE)
HEADER = "# Memory\n\n<!-- One fact per line: \"- [date | source | trust] fact\". -->\n"


def subject_of(text: str) -> tuple[str, str] | None:
    """Split a fact "<subject> is <value>" (also ``are``, ``:``, ``=``, ``equals``,
    ``should be``, ``must be``, ``defaults to``) into normalised ``(subject, value)``.

    The subject is at most 6 words and loses a leading article. None when the fact has no
    such form.

    Examples
    --------
    >>> subject_of("The test command is `make test`.")
    ('test command', 'make test')
    >>> subject_of("API port: 8080")
    ('api port', '8080')
    """
    m = _SUBJECT_RE.match(text.strip())
    if not m:
        return None
    subj = fact_key(m.group("s"))
    subj = re.sub(r"^(?:the|a|an|our|my) ", "", subj)
    val = fact_key(m.group("v"))
    if not subj or not val or len(subj.split()) > 6:
        return None
    return subj, val


#: :func:`subject_of` memoised by the text itself (a changed text is a new key: never stale).
_subject_memo = lru_cache(maxsize=FEATURE_CACHE_SIZE)(subject_of)


@dataclass(frozen=True)
class MemoryEntry:
    """One fact.

    Parameters
    ----------
    text : str
        One line, 1-500 characters.
    date : str
        ISO date ``YYYY-MM-DD`` it was written (or "" if unknown).
    source : str
        The run (or person) it came from; no ``|``, ``]`` or newline.
    trust : {"trusted", "approved", "untrusted", "user"}

    Raises
    ------
    ConfigError
        Naming the field and the value.
    """

    text: str
    date: str = ""
    source: str = ""
    trust: str = "trusted"

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise ConfigError("text", self.text, "must be a string")
        text = " ".join(self.text.split())
        if not text:
            raise ConfigError("text", self.text, "must not be empty")
        if len(text) > MAX_FACT:
            raise ConfigError("text", text[:40] + "...", f"at most {MAX_FACT} characters")
        object.__setattr__(self, "text", text)
        if self.date:
            try:
                if len(self.date) != 10:
                    raise ValueError
                _dt.date.fromisoformat(self.date)
            except (TypeError, ValueError):
                raise ConfigError("date", self.date, "must be an ISO date YYYY-MM-DD") from None
        if not isinstance(self.source, str) or _FIELD_BAD.search(self.source):
            raise ConfigError("source", self.source, "must be a string without | ] or newline")
        object.__setattr__(self, "source", self.source.strip())
        if self.trust not in TRUST:
            raise ConfigError("trust", self.trust, f"must be one of {TRUST}")

    @property
    def key(self) -> str:
        """Identity of the fact (see :func:`dyna.loops._text.fact_key`; memoised by text)."""
        return text_features(self.text).key

    @property
    def subject(self) -> tuple[str, str] | None:
        """``(subject, value)`` or None (see :func:`subject_of`; memoised by text)."""
        return _subject_memo(self.text)

    def to_line(self) -> str:
        """The MEMORY.md line of this fact."""
        if not (self.date or self.source) and self.trust == "user":
            return f"- {self.text}"
        return f"- [{self.date} | {self.source} | {self.trust}] {self.text}"


def parse_memory(text: str, path="<text>") -> list[MemoryEntry]:
    """Facts of a MEMORY.md text, in file order.

    Raises
    ------
    ConfigError
        A fact line whose bracket is malformed or has bad fields (field ``path:line``).
    """
    out = []
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    for i, line in enumerate(text.split("\n"), 1):
        m = _LINE_RE.match(line)
        if not m:
            continue
        meta = m.group("meta")
        try:
            if meta is None:
                out.append(MemoryEntry(m.group("text"), trust="user"))
                continue
            parts = [p.strip() for p in meta.split("|")]
            if len(parts) != 3:
                raise ConfigError("meta", meta, "must be [date | source | trust]")
            out.append(MemoryEntry(m.group("text"), parts[0], parts[1], parts[2]))
        except ConfigError as exc:
            raise ConfigError(f"{path}:{i}", line, f"{exc.field}: {exc.reason}") from None
    return out


def render_memory(entries) -> str:
    """MEMORY.md text of ``entries`` (header, blank line, one line per fact)."""
    lines = [e.to_line() for e in entries]
    return HEADER + ("\n" + "\n".join(lines) + "\n" if lines else "")


@dataclass(frozen=True)
class MemorySnapshot:
    """The facts a run sees: taken at the run's start, unchanged afterwards.

    Attributes
    ----------
    entries : tuple of MemoryEntry
    """

    entries: tuple[MemoryEntry, ...]

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def texts(self) -> list[str]:
        """The facts' texts."""
        return [e.text for e in self.entries]

    def render(self) -> str:
        """MEMORY.md text of the snapshot (what an agent would read)."""
        return render_memory(self.entries)


@dataclass(frozen=True)
class StoreResult:
    """What :meth:`MemoryStore.add` did.

    Attributes
    ----------
    status : {"added", "duplicate", "superseded"}
    entry : MemoryEntry
        The stored fact (for "duplicate", the existing one).
    superseded : tuple of MemoryEntry
        Facts it replaced (same subject, different value).
    evicted : tuple of MemoryEntry
        Facts evicted at the cap.
    """

    status: str
    entry: MemoryEntry
    superseded: tuple[MemoryEntry, ...] = ()
    evicted: tuple[MemoryEntry, ...] = ()


@dataclass(frozen=True)
class ConsolidationReport:
    """What :meth:`MemoryStore.consolidate` changed.

    Attributes
    ----------
    merged : tuple of (str, tuple of str)
        ``(kept, dropped)``: near-duplicates merged into the newest.
    superseded : tuple of (str, str)
        ``(dropped, by)``: older facts about a subject with a newer value.
    vague : tuple of str
        Dropped: no concrete command, file, value or name.
    evicted : tuple of str
        Dropped at the cap (oldest first).
    """

    merged: tuple = ()
    superseded: tuple = ()
    vague: tuple = ()
    evicted: tuple = ()

    @property
    def changed(self) -> bool:
        """True when anything was dropped or merged."""
        return bool(self.merged or self.superseded or self.vague or self.evicted)

    @property
    def n_removed(self) -> int:
        """Number of facts removed."""
        return (sum(len(d) for _, d in self.merged) + len(self.superseded) + len(self.vague)
                + len(self.evicted))

    def __str__(self) -> str:
        if not self.changed:
            return "nothing to consolidate"
        lines = []
        for kept, dropped in self.merged:
            lines += [f"merged:     {d!r} -> {kept!r}" for d in dropped]
        lines += [f"superseded: {d!r} by {b!r}" for d, b in self.superseded]
        lines += [f"vague:      {v!r}" for v in self.vague]
        lines += [f"evicted:    {v!r}" for v in self.evicted]
        return "\n".join(lines)


@dataclass(frozen=True)
class PendingFact:
    """A fact staged for approval (its destination, this store, is fixed)."""

    id: str
    entry: MemoryEntry
    run_id: str
    staged_at: str
    provenance: tuple[str, ...] = field(default=())
    reason: str = ""


class _MemoryBackend:
    location = None

    def __init__(self):
        self._entries: list[MemoryEntry] = []
        self._history: list[dict] = []
        self._pending: list[PendingFact] = []

    def read(self):
        return list(self._entries)

    def write(self, entries):
        self._entries = list(entries)

    def append_history(self, rec):
        self._history.append(rec)

    def history(self):
        return list(self._history)

    def read_pending(self):
        return list(self._pending)

    def write_pending(self, items):
        self._pending = list(items)


class _FileBackend:
    def __init__(self, path, durable=True):
        self.path = Path(path)
        if self.path.is_dir():
            raise ConfigError("path", str(path), "is a folder; give the MEMORY.md file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        side = self.path.parent / ".dyna"
        self._hist = side / f"{self.path.name}.history.jsonl"
        self._pend = side / f"{self.path.name}.pending.json"
        self.durable = durable

    @property
    def location(self):
        return self.path

    def read(self):
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return parse_memory(text, self.path)

    def write(self, entries):
        atomic_write(self.path, render_memory(entries), durable=self.durable)

    def append_history(self, rec):
        append_jsonl(self._hist, rec, durable=self.durable)

    def history(self):
        return read_jsonl(self._hist)

    def read_pending(self):
        try:
            recs = json.loads(self._pend.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        return [PendingFact(r["id"], MemoryEntry(**r["entry"]), r["run_id"], r["staged_at"],
                            tuple(r["provenance"]), r["reason"]) for r in recs]

    def write_pending(self, items):
        self._pend.parent.mkdir(parents=True, exist_ok=True)
        recs = [{"id": p.id, "entry": {"text": p.entry.text, "date": p.entry.date,
                                       "source": p.entry.source, "trust": p.entry.trust},
                 "run_id": p.run_id, "staged_at": p.staged_at,
                 "provenance": list(p.provenance), "reason": p.reason} for p in items]
        atomic_write(self._pend, json.dumps(recs, indent=1), durable=self.durable)


class MemoryStore:
    """Facts in MEMORY.md with de-duplication, superseding, a cap and consolidation.

    Parameters
    ----------
    path : str or Path or None
        The MEMORY.md file (created on first write); None keeps everything in memory.
    cap : int or None
        Maximum number of facts (30 by default). Past it the oldest facts (by date, then
        position) are evicted, never the one just written; each eviction is in the
        history and in the returned result. None: no cap.
    similarity : float
        Jaccard similarity of content words at or above which two facts with the same
        concrete parts are near-duplicates for :meth:`consolidate`, in (0, 1].
    clock : callable returning an aware datetime, optional
    durable : bool
        fsync every write (file backend).

    Attributes
    ----------
    redactions : dict of str to int
        Catches of the always-on redaction safety net, per detector name: every fact
        written to MEMORY.md, every staged fact and every history record is redacted first
        (:class:`dyna.loops._io.SafetyNet`), whatever the loop's ``redaction`` switch. A
        ``source`` or ``run_id`` holding a secret is refused (:func:`dyna.redact.check_label`).

    Raises
    ------
    ConfigError
        Bad parameters, or a MEMORY.md line that cannot be read.
    """

    def __init__(self, path=None, *, cap: int | None = 30, similarity: float = 0.8,
                 clock: Callable[[], _dt.datetime] | None = None, durable: bool = True):
        if cap is not None:
            cap = check_range("cap", cap, 1, None, integer=True)
        self.cap = cap
        self.similarity = float(check_range("similarity", similarity, 0.0, 1.0, lo_open=True))
        self._clock = clock or (lambda: _dt.datetime.now(_dt.timezone.utc))
        self.backend = _MemoryBackend() if path is None else _FileBackend(path, durable)
        self._lock = threading.RLock()
        self._net = SafetyNet()
        self._entries: tuple[MemoryEntry, ...] = tuple(self.backend.read())
        hist = self.backend.history()
        self._seq = hist[-1]["seq"] if hist else 0
        self._staged = sum(1 for h in hist if h["op"] == "stage")

    @classmethod
    def in_memory(cls, **kwargs) -> "MemoryStore":
        """A store with no files."""
        return cls(None, **kwargs)

    @property
    def location(self) -> Path | None:
        return self.backend.location

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def entries(self) -> tuple[MemoryEntry, ...]:
        """Current facts in file order."""
        return self._entries

    def snapshot(self) -> MemorySnapshot:
        """What a run starting now sees (unchanged by later writes)."""
        return MemorySnapshot(self._entries)

    def history(self) -> list[dict]:
        """Append-only log: ``seq, time, op, run_id, text, reason`` per change."""
        return self.backend.history()

    def _today(self) -> str:
        return self._clock().date().isoformat()

    @property
    def redactions(self) -> dict[str, int]:
        """Catches of the redaction safety net so far, per detector name."""
        return dict(self._net.counts)

    def _log(self, op: str, text: str, run_id: str, reason: str = "") -> None:
        self._seq += 1
        self.backend.append_history(self._net.values(
            {"seq": self._seq, "time": self._clock().isoformat(timespec="seconds"), "op": op,
             "run_id": run_id, "text": text, "reason": reason}))

    def _entry(self, text, date: str, source: str, trust: str, run_id: str) -> MemoryEntry:
        """A new fact, its text redacted; a source or run id holding a secret is refused."""
        check_label("source", source)
        check_label("run_id", run_id)
        entry = MemoryEntry(text, date, source, trust)   # validates (and joins white space)
        clean = self._net.values(entry.text)
        return entry if clean is entry.text else replace(entry, text=clean)

    def _save(self, entries: list[MemoryEntry]) -> None:
        # the net under every write of MEMORY.md (facts read from a hand-written file too)
        entries = [e if (t := self._net.values(e.text)) is e.text else replace(e, text=t)
                   for e in entries]
        self.backend.write(entries)
        self._entries = tuple(entries)

    def find(self, text: str) -> MemoryEntry | None:
        """The stored fact that is the same fact as ``text`` (None if none)."""
        key = fact_key(text)
        return next((e for e in self._entries if e.key == key), None)

    def _evict_over_cap(self, entries: list[MemoryEntry], keep: MemoryEntry | None,
                        run_id: str) -> list[MemoryEntry]:
        """Evict oldest facts (date, then position) until the cap holds; never ``keep`` and
        never a fact a person wrote (trust ``user``): when only those are left the store
        stays over its cap rather than drop them. An approved loop fact can be evicted like
        any loop fact (else approvals would make the cap ineffective)."""
        evicted = []
        if self.cap is None:
            return evicted
        while len(entries) > self.cap:
            cand = [(e.date, i) for i, e in enumerate(entries)
                    if e is not keep and e.trust != "user"]
            if not cand:
                break
            _, i = min(cand)
            gone = entries.pop(i)
            evicted.append(gone)
            self._log("evict", gone.text, run_id, f"cap {self.cap}")
        return evicted

    def add(self, text: str, source: str = "", trust: str = "untrusted", run_id: str = "",
            date: str | None = None) -> StoreResult:
        """Write a fact.

        ``trust`` defaults to ``"untrusted"``: a caller vouches for a fact by saying
        ``"trusted"`` (a trusted loop review), ``"approved"`` (a person approved it) or
        ``"user"`` (a person wrote it).

        A fact equal to a stored one (:func:`fact_key`) is not written again
        (``"duplicate"``); one with the subject of stored facts and another value replaces
        them (``"superseded"``; the old text goes to the history); otherwise it is appended
        (``"added"``). Past the cap the oldest facts are evicted.

        Returns
        -------
        StoreResult

        Raises
        ------
        ConfigError
            Invalid text, source, trust or date.
        """
        entry = self._entry(text, date or self._today(), source or run_id, trust, run_id)
        with self._lock:
            same = self.find(entry.text)
            if same is not None:
                return StoreResult("duplicate", same)
            entries = list(self._entries)
            superseded = []
            subj = entry.subject
            if subj is not None:
                for e in list(entries):
                    s = e.subject
                    if s is not None and s[0] == subj[0]:
                        entries.remove(e)
                        superseded.append(e)
                        self._log("supersede", e.text, run_id, f"by: {entry.text}")
            entries.append(entry)
            self._log("add", entry.text, run_id, entry.source)
            evicted = self._evict_over_cap(entries, entry, run_id)
            self._save(entries)
            return StoreResult("superseded" if superseded else "added", entry,
                               tuple(superseded), tuple(evicted))

    def remove(self, text: str, run_id: str = "", reason: str = "removed") -> MemoryEntry:
        """Remove the fact equal to ``text`` (kept in the history).

        Raises
        ------
        ConfigError
            No such fact.
        """
        with self._lock:
            e = self.find(text)
            if e is None:
                raise ConfigError("text", text, "no such fact")
            self._log("remove", e.text, run_id, reason)
            self._save([x for x in self._entries if x is not e])
            return e

    def similar(self, text: str, threshold: float | None = None) -> list[MemoryEntry]:
        """Stored facts that are the same fact as ``text`` or near-duplicates of it
        (content-word Jaccard >= ``threshold``, default the store's ``similarity``, with
        the same concrete parts)."""
        t = self.similarity if threshold is None else threshold
        key, sig, words = text_features(text)
        out = []
        for e in self._entries:
            f = text_features(e.text)
            if f.key == key or (f.parts == sig and jaccard(words, f.words) >= t):
                out.append(e)
        return out

    # ------------------------------------------------------------------ consolidation
    def consolidate(self, run_id: str = "") -> ConsolidationReport:
        """Merge near-duplicates, drop superseded and vague facts, enforce the cap.

        Steps, each on what the previous left:

        1. *vague*: facts with no concrete command, file, value or name
           (:func:`dyna.loops._text.is_concrete`) are dropped;
        2. *superseded*: of facts with the same subject only the newest (date, then
           position) stays;
        3. *merged*: facts with equal concrete parts and content-word Jaccard similarity
           >= ``similarity`` are linked, and each connected group keeps its newest fact;
        4. *evicted*: oldest facts past the cap.

        Different groups share no link, so a second pass finds nothing: consolidation is
        idempotent and then reports no change (and writes nothing).

        Returns
        -------
        ConsolidationReport
        """
        with self._lock:
            entries = list(self._entries)
            vague = [e for e in entries if not is_concrete(e.text)]
            entries = [e for e in entries if is_concrete(e.text)]

            def newest(idx):
                return max(idx, key=lambda i: (entries[i].date, i))

            superseded = []
            by_subj: dict[str, list[int]] = {}
            for i, e in enumerate(entries):
                s = e.subject
                if s is not None:
                    by_subj.setdefault(s[0], []).append(i)
            drop = set()
            for idx in by_subj.values():
                if len(idx) > 1:
                    keep = newest(idx)
                    for i in idx:
                        if i != keep:
                            drop.add(i)
                            superseded.append((entries[i].text, entries[keep].text))
            entries = [e for i, e in enumerate(entries) if i not in drop]

            merged = []
            n = len(entries)
            if n > 1:
                feats = [text_features(e.text) for e in entries]
                sims = similarity_matrix([f.words for f in feats])
                sigs = [f.parts for f in feats]
                parent = list(range(n))

                def find(i):
                    while parent[i] != i:
                        parent[i] = parent[parent[i]]
                        i = parent[i]
                    return i

                ii, jj = np.nonzero(np.triu(sims >= self.similarity, k=1))
                for i, j in zip(ii.tolist(), jj.tolist()):
                    if sigs[i] == sigs[j]:
                        ri, rj = find(i), find(j)
                        if ri != rj:
                            parent[max(ri, rj)] = min(ri, rj)
                groups: dict[int, list[int]] = {}
                for i in range(n):
                    groups.setdefault(find(i), []).append(i)
                drop = set()
                for idx in groups.values():
                    if len(idx) > 1:
                        keep = newest(idx)
                        gone = tuple(entries[i].text for i in idx if i != keep)
                        drop.update(i for i in idx if i != keep)
                        merged.append((entries[keep].text, gone))
                entries = [e for i, e in enumerate(entries) if i not in drop]

            for v in vague:
                self._log("drop-vague", v.text, run_id, "no concrete command, file, value or name")
            for d, b in superseded:
                self._log("supersede", d, run_id, f"by: {b}")
            for kept, gone in merged:
                for g in gone:
                    self._log("merge", g, run_id, f"into: {kept}")
            evicted = self._evict_over_cap(entries, None, run_id)
            report = ConsolidationReport(tuple(merged), tuple(superseded),
                                         tuple(v.text for v in vague),
                                         tuple(e.text for e in evicted))
            if report.changed:
                self._save(entries)
            return report

    # ------------------------------------------------------------------ approval
    def pending(self) -> list[PendingFact]:
        """Facts staged for approval, oldest first."""
        return self.backend.read_pending()

    def stage(self, text: str, source: str = "", run_id: str = "",
              provenance=(), reason: str = "") -> PendingFact:
        """Stage a fact from an untrusted run instead of writing it."""
        with self._lock:
            entry = self._entry(text, self._today(), source or run_id, "untrusted", run_id)
            self._staged += 1
            clean = self._net.values({"provenance": list(provenance), "reason": reason})
            item = PendingFact(f"m{self._staged:04d}", entry, run_id,
                               self._clock().isoformat(timespec="seconds"),
                               tuple(clean["provenance"]), clean["reason"])
            self.backend.write_pending(self.pending() + [item])
            self._log("stage", entry.text, run_id, item.id)
            return item

    def _take_pending(self, pid: str) -> PendingFact:
        items = self.pending()
        for p in items:
            if p.id == pid:
                self.backend.write_pending([q for q in items if q.id != pid])
                return p
        raise ConfigError("id", pid, "no pending fact with this id")

    def approve(self, pid: str) -> StoreResult:
        """Write a staged fact (trust ``approved``).

        Raises
        ------
        ConfigError
            Unknown id.
        """
        with self._lock:
            p = self._take_pending(pid)
            self._log("approve", p.entry.text, p.run_id, pid)
            return self.add(p.entry.text, p.entry.source, "approved", p.run_id, p.entry.date)

    def reject(self, pid: str) -> PendingFact:
        """Drop a staged fact (recorded in the history).

        Raises
        ------
        ConfigError
            Unknown id.
        """
        with self._lock:
            p = self._take_pending(pid)
            self._log("reject", p.entry.text, p.run_id, pid)
            return p
