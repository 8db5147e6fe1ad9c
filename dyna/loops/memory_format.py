"""MEMORY.md, the memory store's file: a fact and its line, and the pending file.

MEMORY.md holds one fact per line, with its date, source and trust::

    # Memory

    - [2024-05-01 | run-12 | trusted] The test command is `make test-fast`.
    - [2024-05-02 | run-14 | approved] API port: 8080

A fact with outcome counts (:attr:`MemoryEntry.successes`, :attr:`MemoryEntry.failures`)
carries them as a fourth field::

    - [2024-05-03 | run-20 | trusted | successes 4, failures 1] Deploy host is web-2

and, once a store that forgets old outcomes (evidence discount below 1) has updated it,
its Beta posterior of competence (:attr:`MemoryEntry.a`, :attr:`MemoryEntry.b`), each float
written as :func:`repr` writes it, so that it reads back bit for bit. Uniform prior,
discount 0.9, outcomes success, success, failure::

    - [2024-05-04 | run-21 | trusted | successes 2, failures 1, a 2.71, b 2.0] Host: web-2

A fact without ``a`` and ``b`` has the posterior prior + counts.

A line ``- fact`` without the bracket (written by hand) is read as a fact with no date,
no source, trust ``user`` and no outcomes. Other lines (headings, prose, comments) are not
facts and are kept byte for byte: a write changes only the lines of the facts it adds, removes or
updates (new facts go after the last fact line). Facts waiting for approval are in
``.dyna/MEMORY.md.pending.json`` (:class:`PendingFact`).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from dataclasses import dataclass, field

from dyna.fileio import check_utf8, loads_unique
from dyna.errors import ConfigError, check_range
from dyna.loops._text import text_features
from dyna.loops.fact_attributes import ENGLISH_FACTS, Attribute
from dyna.loops.frontmatter import shown

__all__ = ["HEADER", "MAX_FACT", "MemoryEntry", "MemoryFileError", "PERSON", "PendingFact",
           "StoreResult", "TRUST", "parse_lines", "parse_memory", "pending_from_json",
           "pending_to_json", "render_document", "render_memory"]

TRUST = ("trusted", "approved", "untrusted", "user")
#: Trust levels of facts a person wrote or approved.
PERSON = ("user", "approved")
MAX_FACT = 500
_FIELD_BAD = re.compile(r"[|\]\n\r]")
_LINE_RE = re.compile(r"^\s*[-*]\s+(?:\[(?P<meta>[^\]]*)\]\s+)?(?P<text>\S.*?)\s*$")
#: The fourth field of a fact's bracket: its outcome counts, then its posterior (optional).
_COUNTS_RE = re.compile(r"successes (\d+), failures (\d+)"
                        r"(?:, a ([0-9.eE+-]+), b ([0-9.eE+-]+))?")
HEADER = "# Memory\n\n<!-- One fact per line: \"- [date | source | trust] fact\". -->\n"


class MemoryFileError(ConfigError):
    """A file of the memory store cannot be read: MEMORY.md is not UTF-8 (``value`` names
    the byte offset), or a history or pending file is corrupt (``field`` is ``path:line``).
    ``field`` always names the file."""


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
    successes, failures : int
        Outcome counts, >= 0: runs in which the fact was in context and a tool call that
        followed it succeeded (``successes``) or returned an error (``failures``: the run
        contradicted it). They make the fact's Beta posterior for retirement on
        contradiction (:meth:`dyna.loops.memory.MemoryStore.record_outcomes`).
    a, b : float or None
        The fact's Beta posterior of competence after its outcomes, both finite and > 0,
        given together; None (both): the posterior is the store's prior plus the counts,
        ``(a0 + successes, b0 + failures)``. A store with an evidence discount below 1
        sets them (:class:`dyna.competence.BetaCompetence`'s update rule), since then the
        counts alone do not give the posterior.

    Raises
    ------
    ConfigError
        Naming the field and the value.
    """

    text: str
    date: str = ""
    source: str = ""
    trust: str = "trusted"
    successes: int = 0
    failures: int = 0
    a: float | None = None
    b: float | None = None

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise ConfigError("text", self.text, "must be a string")
        text = " ".join(check_utf8("text", self.text).split())   # (a byte not UTF-8: refused)
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
        for name in ("successes", "failures"):
            object.__setattr__(self, name, check_range(name, getattr(self, name), 0, None,
                                                       integer=True))
        if (self.a is None) != (self.b is None):
            raise ConfigError("a", self.a, "a and b are given together or not at all")
        if self.a is not None:
            for name in ("a", "b"):
                v = float(check_range(name, getattr(self, name), 0.0, None, lo_open=True))
                if not math.isfinite(v):
                    raise ConfigError(name, v, "must be finite")
                object.__setattr__(self, name, v)

    @property
    def uses(self) -> int:
        """Runs with an outcome for this fact: ``successes + failures``."""
        return self.successes + self.failures

    @property
    def key(self) -> str:
        """Identity of the fact (see :func:`dyna.loops._text.fact_key`; memoised by text)."""
        return text_features(self.text).key

    @property
    def subject(self) -> tuple[str, str] | None:
        """``(subject, value)`` by the English fact rule, or None
        (:meth:`dyna.loops.fact_attributes.EnglishFactRule.subject`)."""
        return ENGLISH_FACTS.subject(self.text)

    def to_line(self) -> str:
        """The MEMORY.md line of this fact (the counts only when it has an outcome or a
        posterior; the posterior, when set, in :func:`repr` form, which reads back to the
        same float)."""
        if self.a is not None:
            return (f"- [{self.date} | {self.source} | {self.trust} | successes "
                    f"{self.successes}, failures {self.failures}, a {self.a!r}, "
                    f"b {self.b!r}] {self.text}")
        if self.uses:
            return (f"- [{self.date} | {self.source} | {self.trust} | successes "
                    f"{self.successes}, failures {self.failures}] {self.text}")
        if not (self.date or self.source) and self.trust == "user":
            return f"- {self.text}"
        return f"- [{self.date} | {self.source} | {self.trust}] {self.text}"

    @property
    def attribute(self) -> Attribute | None:
        """The typed attribute it states by the English fact rule, or None
        (:meth:`dyna.loops.fact_attributes.EnglishFactRule.attribute`)."""
        return ENGLISH_FACTS.attribute(self.text)


_LINE_SPLIT_RE = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")


def parse_lines(text: str, path) -> list[tuple[str, MemoryEntry | None]]:
    """``(raw line with its line ending, fact or None)`` for every line of a MEMORY.md
    ``text`` (what :func:`render_document` rewrites).

    Raises
    ------
    ConfigError
        A fact line whose bracket is malformed or has bad fields (field ``path:line``).
    """
    out = []
    pieces = [p for p in _LINE_SPLIT_RE.split(text) if p]
    for i, raw in enumerate(pieces, 1):
        line = raw.rstrip("\r\n")
        if i == 1:
            line = line.lstrip("\ufeff")
        m = _LINE_RE.match(line)
        if not m:
            out.append((raw, None))
            continue
        meta = m.group("meta")
        try:
            if meta is None:
                out.append((raw, MemoryEntry(m.group("text"), trust="user")))
                continue
            parts = [p.strip() for p in meta.split("|")]
            if len(parts) not in (3, 4):
                raise ConfigError("meta", meta, "must be [date | source | trust] or [date | "
                                  "source | trust | successes N, failures M(, a X, b Y)]")
            counts = (0, 0, None, None)
            if len(parts) == 4:
                got = _COUNTS_RE.fullmatch(parts[3])
                try:
                    if got is None:
                        raise ValueError
                    a, b = (None, None) if got.group(3) is None else (
                        float(got.group(3)), float(got.group(4)))
                except ValueError:
                    raise ConfigError("counts", parts[3], "must be 'successes N, failures M' "
                                      "or 'successes N, failures M, a X, b Y'") from None
                counts = (int(got.group(1)), int(got.group(2)), a, b)
            out.append((raw, MemoryEntry(m.group("text"), parts[0], parts[1], parts[2],
                                         *counts)))
        except ConfigError as exc:
            raise ConfigError(f"{path}:{i}", line, f"{exc.field}: {exc.reason}") from None
    return out


def parse_memory(text: str, path="<text>") -> list[MemoryEntry]:
    """Facts of a MEMORY.md text, in file order.

    Raises
    ------
    ConfigError
        A fact line whose bracket is malformed or has bad fields (field ``path:line``).
    """
    return [e for _, e in parse_lines(text, path) if e is not None]


def render_memory(entries) -> str:
    """MEMORY.md text of ``entries`` (header, blank line, one line per fact)."""
    lines = [e.to_line() for e in entries]
    return HEADER + ("\n" + "\n".join(lines) + "\n" if lines else "")


def render_document(lines, entries, subst=None) -> str:
    """MEMORY.md text keeping every line that is not a fact, and every kept fact's line,
    byte for byte; removed facts' lines go, new facts go after the last fact line (at the
    end when there is none). ``lines`` is :func:`parse_lines`' output (None: no file
    yet); ``subst`` maps ``id(fact)`` to a redacted copy to write instead."""
    if not lines:
        return render_memory([(subst or {}).get(id(e), e) for e in entries])
    subst = subst or {}
    keep = {id(e) for e in entries}
    known = {id(e) for _, e in lines if e is not None}
    new = [e for e in entries if id(e) not in known]
    out: list[str] = []
    last_fact = -1
    eol = "\n"
    for raw, e in lines:
        if e is None:
            out.append(raw)
            continue
        if id(e) not in keep:
            continue
        eol = raw[len(raw.rstrip("\r\n")):] or eol
        c = subst.get(id(e))
        out.append(raw if c is None else c.to_line() + (raw[len(raw.rstrip("\r\n")):]))
        last_fact = len(out) - 1
    if not new:
        return "".join(out)
    add = [subst.get(id(e), e).to_line() + eol for e in new]
    if last_fact < 0:          # no fact line left: after the text, past a blank line
        if out and not out[-1].endswith(("\n", "\r")):
            out[-1] += eol
        if out and out[-1].strip():
            out.append(eol)
        out += add
    else:
        if not out[last_fact].endswith(("\n", "\r")):
            out[last_fact] += eol
        out[last_fact + 1:last_fact + 1] = add
    return "".join(out)


@dataclass(frozen=True)
class PendingFact:
    """A fact staged for approval (its destination, this store, is fixed).

    Attributes
    ----------
    id : str
        ``m0001``, ``m0002``, ... in staging order, unique across processes sharing the
        file.
    entry : MemoryEntry
        The fact as it would be written (text redacted, trust ``untrusted`` until
        approved).
    run_id : str
        The run (or ``cli``) that proposed it.
    staged_at : str
        ISO time, seconds, UTC.
    provenance : tuple of str
        The sources it was drawn from (redacted).
    reason : str
        Why it waits (e.g. it would replace a fact a person wrote); empty for an
        untrusted source alone.
    """

    id: str
    entry: MemoryEntry
    run_id: str
    staged_at: str
    provenance: tuple[str, ...] = field(default=())
    reason: str = ""

    @property
    def summary(self) -> str:
        """One line: ``fact: TEXT`` (what an approver is asked about)."""
        return f"fact: {self.entry.text}"


def pending_to_json(items) -> str:
    """The pending file's JSON text of the staged facts ``items`` (:class:`PendingFact`)."""
    return json.dumps([{"id": p.id, "entry": {"text": p.entry.text, "date": p.entry.date,
                                              "source": p.entry.source,
                                              "trust": p.entry.trust},
                        "run_id": p.run_id, "staged_at": p.staged_at,
                        "provenance": list(p.provenance), "reason": p.reason}
                       for p in items], indent=1)


def pending_from_json(raw: bytes, path) -> list[PendingFact]:
    """The staged facts of a pending file's bytes ``raw`` (:func:`pending_to_json`).

    Raises
    ------
    MemoryFileError
        The file is not such a list (field ``path``; the complaint shown redacted).
    """
    try:
        recs = loads_unique(raw)
        if not isinstance(recs, list):
            raise TypeError("not a list")
        return [PendingFact(r["id"], MemoryEntry(**r["entry"]), r["run_id"], r["staged_at"],
                            tuple(r["provenance"]), r["reason"]) for r in recs]
    except (ValueError, TypeError, KeyError) as exc:
        # the complaint can quote the file (an unknown key): shown redacted, cut short
        raise MemoryFileError(str(path), "pending",
                              f"corrupt pending file ({shown(str(exc), 200)})") from None


@dataclass(frozen=True)
class StoreResult:
    """What :meth:`dyna.loops.memory.MemoryStore.add` did.

    Attributes
    ----------
    status : {"added", "duplicate", "superseded", "staged"}
    entry : MemoryEntry
        The stored fact (for "duplicate", the existing one; for "staged", the new one).
    superseded : tuple of MemoryEntry
        Facts it replaced (same attribute, different value); for "staged", the facts it
        would replace once approved.
    evicted : tuple of MemoryEntry
        Facts evicted at the cap.
    flagged : tuple of MemoryEntry
        Stored facts kept beside it that may contradict it (:func:`relation` "unsure").
    pending : PendingFact or None
        The staged item, for "staged".
    """

    status: str
    entry: MemoryEntry
    superseded: tuple[MemoryEntry, ...] = ()
    evicted: tuple[MemoryEntry, ...] = ()
    flagged: tuple[MemoryEntry, ...] = ()
    pending: "PendingFact | None" = None
