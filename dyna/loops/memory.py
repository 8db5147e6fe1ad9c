"""The memory store: facts an agent keeps between runs, in a MEMORY.md file.

MEMORY.md holds one fact per line, with its date, source and trust::

    # Memory

    - [2024-05-01 | run-12 | trusted] The test command is `make test-fast`.
    - [2024-05-02 | run-14 | approved] API port: 8080

A line ``- fact`` without the bracket (written by hand) is read as a fact with no date,
no source and trust ``user``. Other lines (headings, prose, comments) are not facts and are
kept byte for byte: a write changes only the lines of the facts it adds or removes (new
facts go after the last fact line). Superseded, evicted and merged facts are kept in an
append-only history beside it (``.dyna/MEMORY.md.history.jsonl``), and facts waiting for
approval in ``.dyna/MEMORY.md.pending.json``.

Identity of facts (:func:`dyna.loops._text.fact_key`): entries that differ only in case,
spacing or punctuation are one fact; entries that differ in a number or a name are
different facts.

Conflicts (:func:`attribute_of`, :func:`relation`): a fact of the form "<subject> is/are/:/=
<value>" states one typed *attribute* of its subject: a port, a version, a date, a path, a
URL, a command, a count, an on/off state, or, when the subject itself names a single-valued
attribute ("deploy host", "step 3 tool"), that attribute. A new fact replaces a stored one
only when both give the same attribute of the same subject different values ("API port:
8080" and "API port: 9090"); facts about different attributes of one subject ("The deploy
queue is paused on Fridays", "The deploy queue is FIFO") are both kept; when it cannot tell
("The cache is redis", "The cache is fast") both are kept and the pair is flagged
(:meth:`MemoryStore.unsure_pairs`, listed by ``dyna memory show`` and ``consolidate``).

Who may replace what (:meth:`MemoryStore.add`): a person's fact (trust ``user`` or
``approved``) is replaced at once only by a person (``user``/``approved``); a trusted loop
fact replacing a loop-written fact is applied and logged (drift recovery needs it); a
replacement of a person's fact by a loop, or any replacement from an untrusted source, is
staged for approval.

Several processes may share one MEMORY.md: every write takes an inter-process file lock
(:func:`dyna.loops._io.library_lock`, ``.dyna/MEMORY.md.lock``) and re-reads the file and the
history under it. Files the store writes (MEMORY.md, ``.dyna`` and its files) are never
written through a symlink.

``MemoryStore(None)`` keeps everything in memory (same code, no files).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import operator
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from dyna._json import DuplicateKeyError, loads_unique
from dyna._quick import quick_init
from dyna.errors import ConfigError, check_range
from dyna.redact import check_label
from dyna.loops._io import SafetyNet, _whole_record, atomic_write, library_lock
from dyna.loops._text import (_COMMAND_RE, FEATURE_CACHE_SIZE, fact_key, is_concrete,
                              jaccard, similarity_matrix, text_features)
from dyna.loops.frontmatter import _shown

__all__ = ["Attribute", "ConsolidationReport", "MemoryEntry", "MemoryFileError",
           "MemorySnapshot", "MemoryStore", "PendingFact", "StoreResult", "attribute_of",
           "relation", "subject_of"]

TRUST = ("trusted", "approved", "untrusted", "user")
#: Trust levels of facts a person wrote or approved.
PERSON = ("user", "approved")
MAX_FACT = 500
_FIELD_BAD = re.compile(r"[|\]\n\r]")
_LINE_RE = re.compile(r"^\s*[-*]\s+(?:\[(?P<meta>[^\]]*)\]\s+)?(?P<text>\S.*?)\s*$")
_SUBJECT_RE = re.compile(
    r"^(?P<s>[^:=]{1,80}?)\s*(?:\s(?:is|are|equals|should be|must be|defaults to)\s|:\s|=)"
    r"\s*(?P<v>\S.*)$", re.IGNORECASE)
HEADER = "# Memory\n\n<!-- One fact per line: \"- [date | source | trust] fact\". -->\n"


class MemoryFileError(ConfigError):
    """A file of the memory store cannot be read: MEMORY.md is not UTF-8 (``value`` names
    the byte offset), or a history or pending file is corrupt (``field`` is ``path:line``).
    ``field`` always names the file."""


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

# ---------------------------------------------------------------------- typed attributes

#: A subject whose head noun names an attribute states that attribute: its kind.
#: ``value`` kinds are single-valued names compared as a whole ("deploy host", "step 3 tool").
_NOUN_KIND = {
    **dict.fromkeys(("port", "ports"), "port"),
    **dict.fromkeys(("version", "release"), "version"),
    **dict.fromkeys(("date", "day", "deadline"), "date"),
    **dict.fromkeys(("path", "dir", "directory", "folder", "file", "location"), "path"),
    **dict.fromkeys(("count", "number", "limit", "size", "max", "maximum", "min", "minimum",
                     "timeout", "retries", "threshold", "workers", "replicas"), "number"),
    **dict.fromkeys(("command", "cmd", "script"), "command"),
    **dict.fromkeys(("url", "endpoint", "uri"), "url"),
    **dict.fromkeys(("state", "status"), "state"),
    **dict.fromkeys(("host", "hostname", "server", "branch", "region", "name", "owner",
                     "tool", "value", "default", "image", "tag", "channel", "cluster",
                     "zone", "database", "provider", "backend", "mode", "shell", "editor",
                     "encoding", "timezone", "locale", "license", "maintainer", "manager"),
                    "value"),
}
#: On/off states: a value whose first word is one of these states the subject's state.
_STATES = frozenset("""
    on off enabled disabled active inactive paused running stopped started open closed up down
    locked unlocked frozen unfrozen live offline online available unavailable suspended
    resumed blocked unblocked true false yes no allowed forbidden required optional
    deprecated broken healthy unhealthy idle busy empty full
    protected unprotected private public shared readonly read-only writable slow fast flaky
    stable unstable experimental pinned unpinned
""".split())
#: State words that are also prepositions: a state only as the whole value ("is on").
_PREPOSITIONS = frozenset("on off up down open in no yes".split())
#: Words that do not change which attribute a value states ("is set to 8080" = "is 8080").
_FILLER = frozenset("the a an now currently still today set to at in on of be by".split())
_URL_RE = re.compile(r"https?://\S+")
_DATE_RE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sept?|oct"
                      r"|nov|dec)[a-z]*\.? \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?\b", re.I)
_CODE_SPAN_RE = re.compile(r"`([^`]+)`")
_PATH_TOKEN_RE = re.compile(
    r"(?<![\w:/.])(?:~|\.{1,2})?/[\w.\-/]*\w|(?<![\w/.])[\w.\-]+/[\w.\-/]*\w"
    r"|(?<![\w/.])[\w\-]+\.(?:py|md|toml|json|ya?ml|txt|cfg|ini|sh|lock|csv|env|conf|js|ts"
    r"|rs|go|sql|log|html|css)\b")
_VERSION_RE = re.compile(r"(?<![\w.])v?\d+(?:\.\d+){1,3}(?:[a-z]+\d*)?(?![\w.])", re.I)
_PORT_RE = re.compile(r"\bport\s+(\d{1,5})\b", re.I)
_NUMBER_TOKEN_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_SPLIT_HEAD_RE = re.compile(r" (?:of|for|in|on|at|to|used by) ")


class Attribute(NamedTuple):
    """The typed attribute a fact states (:func:`attribute_of`).

    Attributes
    ----------
    subject : str
        Normalised subject (:func:`subject_of`).
    kind : str or None
        ``port``, ``version``, ``date``, ``path``, ``url``, ``command``, ``number``,
        ``state``, ``value`` (a single-valued attribute named by the subject), or None
        (a value of no known type).
    value : str
        The attribute's value (the port number, the path, the state word...), normalised.
    rest : str
        The value's other content words (a qualifier such as "on fridays"); two facts
        with different rests may state the attribute under different conditions.
    """

    subject: str
    kind: str | None
    value: str
    rest: str


def _norm(text: str) -> str:
    return " ".join(w for w in fact_key(text).split() if w not in _FILLER)


def _token(kind: str, v: str):
    """``(token, start, end)`` of the first value of ``kind`` in ``v``, or None."""
    if kind == "state":
        words = v.casefold().split()
        i = 0
        while i < len(words) and words[i] in ("currently", "now", "still", "always"):
            i += 1
        neg = i < len(words) and words[i] == "not"
        w = words[i + neg].strip(".,;:!") if i + neg < len(words) else ""
        if w not in _STATES or (w in _PREPOSITIONS and i + neg + 1 < len(words)):
            return None          # "on port 6379", "up to 5": a preposition, not a state
        m = re.search(r"\b(?:not\s+)?" + re.escape(w) + r"\b", v, re.I)
        return (("not " if neg else "") + w, m.start(), m.end()) if m else None
    if kind == "command" or kind == "path":
        m = _CODE_SPAN_RE.search(v)
        if m is not None:
            inner = m.group(1).strip()
            is_path = _PATH_TOKEN_RE.fullmatch(inner) is not None
            if (kind == "path") == is_path or kind == "command":
                return " ".join(inner.split()), m.start(), m.end()
        if kind == "command":
            return None
    rx = {"url": _URL_RE, "date": _DATE_RE, "path": _PATH_TOKEN_RE, "version": _VERSION_RE,
          "port": _PORT_RE, "number": _NUMBER_TOKEN_RE}[kind]
    m = rx.search(v)
    if m is None and kind == "port":
        m = _NUMBER_TOKEN_RE.search(v)
        return (m.group(0), m.start(), m.end()) if m else None
    if m is None:
        return None
    tok = m.group(1) if kind == "port" and m.re is _PORT_RE else m.group(0)
    return tok.casefold().rstrip(".,;:"), m.start(), m.end()


def attribute_of(text: str) -> Attribute | None:
    """The typed attribute a fact "<subject> is <value>" states, or None (no such form).

    The kind comes from the subject's head noun when it names one ("API port", "Python
    version", "deploy host"), else from the value's shape, first match of: an on/off state
    word first, a URL, a date, a command in backticks, a path, a version, ``port N``, a
    number. The value is then that token and ``rest`` the value's other words (minus
    fillers such as "now", "set to"); a value of no known shape has kind None.

    Examples
    --------
    >>> attribute_of("API port: 8080")
    Attribute(subject='api port', kind='port', value='8080', rest='')
    >>> attribute_of("The deploy queue is paused on Fridays")
    Attribute(subject='deploy queue', kind='state', value='paused', rest='fridays')
    >>> attribute_of("The deploy queue is FIFO")
    Attribute(subject='deploy queue', kind=None, value='fifo', rest='')
    """
    st = subject_of(text)
    if st is None:
        return None
    m = _SUBJECT_RE.match(text.strip())
    if "`" in m.group("s"):      # "For x, `f(a=1)` works": the "=" is code, not a verb
        return None
    subj = st[0]
    v = m.group("v").strip().rstrip(".;,!")
    head = _SPLIT_HEAD_RE.split(f" {subj} ".replace("  ", " ").strip(), maxsplit=1)[0]
    kind = _NOUN_KIND.get(head.split()[-1]) if head.split() else None
    state = _token("state", v)
    if kind == "value":
        # a single-valued name ("deploy host", "step 3 tool") takes one identifier; a
        # state ("is down") or a description ("is behind the VPN") is another attribute
        words = (_norm(v) or fact_key(v)).split()
        if state is None and len(words) == 1:
            return Attribute(subj, "value", words[0], "")
        kind = None
    elif kind is not None:
        got = _token(kind, v)
        if got is not None:
            tok, i, j = got
            return Attribute(subj, kind, tok, _norm(v[:i] + " " + v[j:]))
        if kind == "command" and state is None and _COMMAND_RE.match(v):
            return Attribute(subj, kind, _norm(v), "")      # "make deploy" without backticks
        kind = None         # "The API port is closed": not a port number, try its shape
    for kind in ("state", "url", "date", "command", "path", "version", "port", "number"):
        if kind == "command":
            m = _CODE_SPAN_RE.search(v)
            if m is None or _PATH_TOKEN_RE.fullmatch(m.group(1).strip()):
                continue
        if kind == "port" and not _PORT_RE.search(v):
            continue
        got = _token(kind, v)
        if got is not None:
            tok, i, j = got
            return Attribute(subj, kind, tok, _norm(v[:i] + " " + v[j:]))
    return Attribute(subj, None, _norm(v) or fact_key(v), "")


#: A fact's text (for the index of :meth:`MemoryStore._lookup`).
_TEXT_OF = operator.attrgetter("text")

#: :func:`attribute_of` memoised by the text itself.
_attribute_memo = lru_cache(maxsize=FEATURE_CACHE_SIZE)(attribute_of)


def relation(new: str, old: str) -> str:
    """How two facts relate, by their typed attributes (:func:`attribute_of`).

    Returns
    -------
    str
        ``"unrelated"`` (no common subject, or a fact without the subject form);
        ``"different"`` (different attributes of one subject: both kept);
        ``"restated"`` (same attribute, same value, other words);
        ``"conflict"`` (same attribute and qualifier, different values: the newer
        replaces the older); ``"unsure"`` (one subject, and the attribute cannot be
        told apart: values of no known type, or one attribute under different
        qualifiers; both kept and the pair flagged).

    Examples
    --------
    >>> relation("API port: 9090", "The API port is 8080")
    'conflict'
    >>> relation("The deploy queue is FIFO", "The deploy queue is paused on Fridays")
    'different'
    >>> relation("The cache is memcached", "The cache is redis")
    'unsure'
    """
    a, b = _attribute_memo(new), _attribute_memo(old)
    if a is None or b is None or a.subject != b.subject:
        return "unrelated"
    if a.kind != b.kind:
        return "different"
    if a.rest != b.rest:
        return "unsure"
    if a.value == b.value:
        return "restated"
    return "conflict" if a.kind is not None else "unsure"


@quick_init
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

    @property
    def attribute(self) -> Attribute | None:
        """The typed attribute it states (see :func:`attribute_of`; memoised by text)."""
        return _attribute_memo(self.text)


_LINE_SPLIT_RE = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")


def _parse_lines(text: str, path) -> list[tuple[str, MemoryEntry | None]]:
    """``(raw line with its line ending, fact or None)`` for every line of ``text``."""
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
            if len(parts) != 3:
                raise ConfigError("meta", meta, "must be [date | source | trust]")
            out.append((raw, MemoryEntry(m.group("text"), parts[0], parts[1], parts[2])))
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
    return [e for _, e in _parse_lines(text, path) if e is not None]


def render_memory(entries) -> str:
    """MEMORY.md text of ``entries`` (header, blank line, one line per fact)."""
    lines = [e.to_line() for e in entries]
    return HEADER + ("\n" + "\n".join(lines) + "\n" if lines else "")


def _render_doc(lines, entries, subst=None) -> str:
    """MEMORY.md text keeping every line that is not a fact, and every kept fact's line,
    byte for byte; removed facts' lines go, new facts go after the last fact line (at the
    end when there is none). ``lines`` is :func:`_parse_lines`' output (None: no file
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


@quick_init
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


@quick_init
@dataclass(frozen=True)
class StoreResult:
    """What :meth:`MemoryStore.add` did.

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


@dataclass(frozen=True)
class ConsolidationReport:
    """What :meth:`MemoryStore.consolidate` changed (or, with ``dry_run``, would change).

    Attributes
    ----------
    merged : tuple of (str, tuple of str)
        ``(kept, dropped)``: near-duplicates merged into the newest.
    superseded : tuple of (str, str)
        ``(dropped, by)``: older facts giving another value for the same attribute.
    vague : tuple of str
        Dropped: no concrete command, file, value or name.
    evicted : tuple of str
        Dropped at the cap (oldest first).
    unsure : tuple of (str, str)
        Kept, flagged: pairs that may contradict each other (:func:`relation` "unsure");
        check them by hand.
    dry_run : bool
        Nothing was written.
    """

    merged: tuple = ()
    superseded: tuple = ()
    vague: tuple = ()
    evicted: tuple = ()
    unsure: tuple = ()
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        """True when anything was (or, with ``dry_run``, would be) dropped or merged."""
        return bool(self.merged or self.superseded or self.vague or self.evicted)

    @property
    def n_removed(self) -> int:
        """Number of facts removed."""
        return (sum(len(d) for _, d in self.merged) + len(self.superseded) + len(self.vague)
                + len(self.evicted))

    def __str__(self) -> str:
        lines = []
        for kept, dropped in self.merged:
            lines += [f"merged:     {d!r} -> {kept!r}" for d in dropped]
        lines += [f"superseded: {d!r} by {b!r}" for d, b in self.superseded]
        lines += [f"vague:      {v!r}" for v in self.vague]
        lines += [f"evicted:    {v!r}" for v in self.evicted]
        if not lines:
            lines = ["nothing to consolidate"]
        lines += [f"unsure:     {a!r} / {b!r} (both kept; check by hand)"
                  for a, b in self.unsure]
        return "\n".join(lines)


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


def _pending_to_json(items) -> str:
    return json.dumps([{"id": p.id, "entry": {"text": p.entry.text, "date": p.entry.date,
                                              "source": p.entry.source,
                                              "trust": p.entry.trust},
                        "run_id": p.run_id, "staged_at": p.staged_at,
                        "provenance": list(p.provenance), "reason": p.reason}
                       for p in items], indent=1)


def _pending_from_json(raw: bytes, path) -> list[PendingFact]:
    try:
        recs = loads_unique(raw)
        if not isinstance(recs, list):
            raise TypeError("not a list")
        return [PendingFact(r["id"], MemoryEntry(**r["entry"]), r["run_id"], r["staged_at"],
                            tuple(r["provenance"]), r["reason"]) for r in recs]
    except (ValueError, TypeError, KeyError) as exc:
        # the complaint can quote the file (an unknown key): shown redacted, cut short
        raise MemoryFileError(str(path), "pending",
                              f"corrupt pending file ({_shown(str(exc), 200)})") from None


class _MemoryBackend:
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
    """Raise a ConfigError naming ``p`` (field ``path``) when it is a symbolic link."""
    if p.is_symlink():
        raise ConfigError("path", str(p), f"is a symlink; refusing to {what} it")


class _HistoryLog:
    """The append-only history file, read incrementally (a write re-reads only what other
    processes appended since)."""

    def __init__(self, path: Path, durable: bool):
        self.path = path
        self.durable = durable
        self.pos = 0          # bytes consumed (complete lines)
        self.lines = 0        # lines consumed
        self.seq = 0
        self.staged = 0
        self.torn = False     # an incomplete last line (a writer died mid-append)
        self.open_tail = False   # the last record read has no newline (an edit dropped it)

    def _parse(self, data: bytes, first_line: int, collect=None):
        """The records of ``data``: its complete lines, and a last line without its newline
        when it is a whole JSON object (an object's text ends at its closing brace, so no
        cut-off prefix of one parses as an object; anything else is a torn tail, left
        unread). Returns bytes consumed and lines consumed; sets :attr:`open_tail`."""
        used = n = 0
        pieces = data.split(b"\n")
        tail = pieces.pop()
        self.open_tail = False
        if tail.strip():
            try:
                whole = _whole_record(tail) is not None
            except DuplicateKeyError:
                whole = True   # a whole record, damaged: refused below, never cut
            if whole:
                pieces.append(tail)
                self.open_tail = True
        for i, piece in enumerate(pieces):
            n += 1
            used += len(piece) + (0 if self.open_tail and i == len(pieces) - 1 else 1)
            if not piece.strip():
                continue
            try:
                rec = loads_unique(piece)
                if not isinstance(rec, dict) or not isinstance(rec.get("seq"), int) \
                        or not isinstance(rec.get("op"), str):
                    raise ValueError("not a history record")
            except ValueError as exc:
                # the line redacted before it is cut (a cut can leave a secret too short
                # for its detector)
                raise MemoryFileError(f"{self.path}:{first_line + n}", _shown(
                    piece[:4096].decode("utf-8", "replace"), 60),
                    f"corrupt history line ({exc})") from None
            self.seq = max(self.seq, rec["seq"])
            self.staged += rec["op"] == "stage"
            if collect is not None:
                collect.append(rec)
        return used, n

    def refresh(self) -> None:
        _refuse_symlink(self.path.parent, "read through")   # dyna's own file: never a link
        _refuse_symlink(self.path, "read through")
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < self.pos:               # replaced or truncated: read it again
                    self.pos = self.lines = self.seq = self.staged = 0
                fh.seek(self.pos)
                data = fh.read()
        except FileNotFoundError:
            self.pos = self.lines = self.seq = self.staged = 0
            self.torn = False
            return
        was_open = self.open_tail
        used, n = self._parse(data, self.lines)
        if not data:
            self.open_tail = was_open   # nothing new: the last record still has no newline
        self.pos += used
        self.lines += n
        self.torn = used < len(data)

    def records(self) -> list[dict]:
        _refuse_symlink(self.path.parent, "read through")
        _refuse_symlink(self.path, "read through")
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out: list[dict] = []
        fresh = _HistoryLog(self.path, self.durable)
        fresh._parse(data, 0, out)
        return out

    def append(self, rec: dict) -> None:
        """Append under the store's lock: a torn last line left by a dead writer is cut
        off first, so it never ends up in the middle of the file; a whole last record
        without its newline gets one first (it is kept)."""
        _refuse_symlink(self.path.parent)
        _refuse_symlink(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(rec, ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")
        with open(self.path, "ab") as fh:
            if self.torn:
                fh.truncate(self.pos)
                self.torn = False
            elif self.open_tail:
                line = b"\n" + line
                self.open_tail = False
            fh.write(line)
            fh.flush()
            if self.durable:
                os.fsync(fh.fileno())
        self.pos += len(line)
        self.lines += 1
        self.seq = max(self.seq, rec["seq"])
        self.staged += rec["op"] == "stage"


class _FileBackend:
    def __init__(self, path, durable=True, lock_timeout=30.0):
        self.path = Path(path)
        if self.path.is_dir():
            raise ConfigError("path", str(path), "is a folder; give the MEMORY.md file")
        if self.path.is_symlink() or (self.path.exists() and not self.path.is_file()):
            # a device (/dev/null), FIFO or socket would be replaced by the atomic rename,
            # and a link would write elsewhere: refused before anything is created
            raise ConfigError("path", str(path), "is not a regular file (a device, FIFO, "
                              "socket or symbolic link); give a MEMORY.md file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
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
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            changed = self._stat is not None or self._lines is None
            self._stat, self._lines, self._entries = None, [], []
            return [] if changed else None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key == self._stat:
            return None
        raw = self.path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MemoryFileError(str(self.path), f"byte {exc.start}",
                                  f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                                  f"{exc.start} cannot be decoded)") from None
        self._lines = _parse_lines(text, self.path)
        self._entries = [e for _, e in self._lines if e is not None]
        self._stat = key
        return list(self._entries)

    def read(self):
        got = self.refresh()
        return list(self._entries) if got is None else got

    def write(self, entries, subst=None):
        for p in (self.path, self._side):
            _refuse_symlink(p)
        text = _render_doc(self._lines, entries, subst)
        atomic_write(self.path, text, durable=self.durable)
        self._stat = None
        return self.read()

    def append_history(self, rec):
        _refuse_symlink(self._side)
        self._log.append(rec)

    def history(self):
        return self._log.records()

    def read_pending(self):
        for p in (self._side, self._pend):
            _refuse_symlink(p, "read through")
        try:
            raw = self._pend.read_bytes()
        except FileNotFoundError:
            return []
        return _pending_from_json(raw, self._pend)

    def write_pending(self, items):
        for p in (self._side, self._pend):
            _refuse_symlink(p)
        self._pend.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self._pend, _pending_to_json(items), durable=self.durable)


def _unsure_pairs(entries) -> list[tuple[MemoryEntry, MemoryEntry]]:
    """(earlier, later) pairs of ``entries`` whose :func:`relation` is ``"unsure"``."""
    by_subj: dict[str, list[MemoryEntry]] = {}
    for e in entries:
        a = e.attribute
        if a is not None:
            by_subj.setdefault(a.subject, []).append(e)
    out = []
    for group in by_subj.values():
        for j in range(1, len(group)):
            for i in range(j):
                if relation(group[j].text, group[i].text) == "unsure":
                    out.append((group[i], group[j]))
    return out


class MemoryStore:
    """Facts in MEMORY.md with de-duplication, superseding on real conflicts, a cap and
    consolidation.

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
    lock_timeout : float
        Seconds a write waits for another process's lock (file backend) before
        :class:`dyna.loops._io.LibraryLockTimeout`.

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
    MemoryFileError
        MEMORY.md is not UTF-8 (the byte offset is named), or a history line is corrupt
        (``path:line``).
    """

    def __init__(self, path=None, *, cap: int | None = 30, similarity: float = 0.8,
                 clock: Callable[[], _dt.datetime] | None = None, durable: bool = True,
                 lock_timeout: float = 30.0):
        if cap is not None:
            cap = check_range("cap", cap, 1, None, integer=True)
        self.cap = cap
        self.similarity = float(check_range("similarity", similarity, 0.0, 1.0, lo_open=True))
        self._clock = clock or (lambda: _dt.datetime.now(_dt.timezone.utc))
        self.backend = (_MemoryBackend() if path is None
                        else _FileBackend(path, durable, lock_timeout))
        self._lock = threading.RLock()
        self._net = SafetyNet()
        # facts (by identity) the net passed unchanged: scanning one again finds nothing
        # again (scan is a function of the text; a MemoryEntry is frozen). Only the
        # entries in the store at the last save are kept (strong references, so an id is
        # never reused while it is here), and the last new fact _entry passed
        self._netted: dict[int, MemoryEntry] = {}
        self._fresh: MemoryEntry | None = None
        self._entries: tuple[MemoryEntry, ...] = tuple(self.backend.read())
        self._index: tuple | None = None   # _lookup's (entries, by key, by subject)

    @classmethod
    def in_memory(cls, **kwargs) -> "MemoryStore":
        """A store with no files."""
        return cls(None, **kwargs)

    @property
    def location(self) -> Path | None:
        """The MEMORY.md file (None in memory)."""
        return self.backend.location

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def entries(self) -> tuple[MemoryEntry, ...]:
        """Current facts in file order (as of the last read or write; see :meth:`reload`)."""
        return self._entries

    def reload(self) -> tuple[MemoryEntry, ...]:
        """Re-read MEMORY.md if another writer changed it; returns the facts."""
        with self._lock:
            self._reread()
            return self._entries

    def snapshot(self) -> MemorySnapshot:
        """What a run starting now sees (unchanged by later writes)."""
        return MemorySnapshot(self._entries)

    def history(self) -> list[dict]:
        """Append-only log: ``seq, time, op, run_id, text, reason`` per change.

        Raises
        ------
        MemoryFileError
            A corrupt line (field ``path:line``).
        """
        return self.backend.history()

    def _today(self) -> str:
        return self._clock().date().isoformat()

    @property
    def redactions(self) -> dict[str, int]:
        """Catches of the redaction safety net so far, per detector name."""
        return dict(self._net.counts)

    @contextlib.contextmanager
    def _writing(self):
        """Thread lock, inter-process file lock, and the facts re-read under them."""
        with self._lock, self.backend.locked():
            self._reread()
            yield

    def _reread(self) -> None:
        """The facts as the backend holds them now; the same tuple kept when they are the
        very same objects in the same order (so what is remembered of it stays valid)."""
        new = self.backend.read()
        old = self._entries
        if not (len(new) == len(old) and all(map(operator.is_, new, old))):
            self._entries = tuple(new)

    def _log(self, op: str, text: str, run_id: str, reason: str = "") -> None:
        # "time" is not scanned: datetime's own isoformat (whatever a subclass the clock
        # returns overrides) writes digits and "-:T+" only, which no detector catches
        now = _dt.datetime.isoformat(self._clock(), timespec="seconds")
        rec = self._net.values({"seq": self.backend.seq + 1, "op": op, "run_id": run_id,
                                "text": text, "reason": reason})
        self.backend.append_history({"seq": rec["seq"], "time": now, **rec})

    def _entry(self, text, date: str, source: str, trust: str, run_id: str) -> MemoryEntry:
        """A new fact, its text redacted; a source or run id holding a secret is refused."""
        check_label("source", source)
        check_label("run_id", run_id)
        entry = MemoryEntry(text, date, source, trust)   # validates (and joins white space)
        clean = self._net.values(entry.text)
        if clean is entry.text:
            self._fresh = entry
            return entry
        return replace(entry, text=clean)

    def _save(self, entries: list[MemoryEntry]) -> None:
        # the net under every write of MEMORY.md (facts read from a hand-written file too);
        # a fact it already passed unchanged is not scanned again (the same result)
        subst = {}
        netted, fresh = self._netted, self._fresh
        clean = {}
        for e in entries:
            if e is fresh or netted.get(id(e)) is e:
                clean[id(e)] = e
                continue
            t = self._net.values(e.text)
            if t is not e.text:
                subst[id(e)] = replace(e, text=t)
            else:
                clean[id(e)] = e
        self._entries = tuple(self.backend.write(entries, subst))
        self._netted = clean

    def _lookup(self) -> tuple:
        """``(entries, their texts, first fact by key, facts by attribute subject)`` of the
        stored facts now, in their order; rebuilt when the facts changed: another tuple of
        other objects (a write re-reads them into a new tuple of the same objects; a fact
        read again from a file is another object), or a fact whose text was changed in
        place (each text is compared by identity with the one indexed)."""
        entries = self._entries
        got = self._index
        if got is None or not (
                (got[0] is entries or (len(got[0]) == len(entries)
                                       and all(map(operator.is_, got[0], entries))))
                and all(map(operator.is_, got[1], map(_TEXT_OF, entries)))):
            by_key: dict = {}
            by_subject: dict = {}
            texts = tuple(map(_TEXT_OF, entries))
            for e, text in zip(entries, texts):
                by_key.setdefault(fact_key(text), e)
                a = _attribute_memo(text)
                if a is not None:
                    by_subject.setdefault(a.subject, []).append(e)
            got = self._index = (entries, texts, by_key, by_subject)
        return got

    def find(self, text: str) -> MemoryEntry | None:
        """The stored fact that is the same fact as ``text`` (None if none): the first
        with its :func:`fact_key`."""
        return self._lookup()[2].get(fact_key(text))

    def relations(self, text: str) -> list[tuple[MemoryEntry, str]]:
        """Stored facts about the same subject as ``text`` that a write of it would touch,
        with their :func:`relation` to it: ``"conflict"`` (replaced), ``"restated"`` (same
        value, other words) or ``"unsure"`` (kept beside it, flagged); in the facts' order.
        Only facts of the same attribute subject are compared (any other is
        ``"unrelated"``, as is every fact when ``text`` has no subject form)."""
        a = _attribute_memo(text)
        if a is None:
            return []
        out = []
        for e in self._lookup()[3].get(a.subject, ()):
            r = relation(text, e.text)
            if r in ("conflict", "restated", "unsure"):
                out.append((e, r))
        return out

    def unsure_pairs(self) -> list[tuple[MemoryEntry, MemoryEntry]]:
        """Pairs of stored facts (earlier, later) that may contradict each other and were
        both kept (:func:`relation` ``"unsure"``): check them by hand."""
        return _unsure_pairs(self._entries)

    def _evict_over_cap(self, entries: list[MemoryEntry], keep: MemoryEntry | None,
                        run_id: str, log: bool = True) -> list[MemoryEntry]:
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
            if log:
                self._log("evict", gone.text, run_id, f"cap {self.cap}")
        return evicted

    def add(self, text: str, source: str = "", trust: str = "untrusted", run_id: str = "",
            date: str | None = None, *, approval: bool = True) -> StoreResult:
        """Write a fact.

        ``trust`` defaults to ``"untrusted"``: a caller vouches for a fact by saying
        ``"trusted"`` (a trusted loop review), ``"approved"`` (a person approved it) or
        ``"user"`` (a person wrote it).

        - A fact equal to a stored one (:func:`fact_key`), or restating a stored fact's
          attribute with the same value, is not written again (``"duplicate"``; a person's
          restatement replaces a loop's wording).
        - One giving another value for the same attribute of a stored fact
          (:func:`relation` ``"conflict"``) replaces it (``"superseded"``; the old text
          goes to the history), except that with ``approval`` a replacement from an
          untrusted source, or by a loop (``trusted``) of a fact a person wrote or
          approved, is staged instead (``"staged"``, :meth:`stage`). ``approval=False``
          (the loop's ``approval_for_untrusted`` ablation) applies it at once.
        - Otherwise it is appended (``"added"``); stored facts it may contradict
          (``"unsure"``) are kept and returned in ``flagged``.

        Past the cap the oldest facts are evicted.

        Returns
        -------
        StoreResult

        Raises
        ------
        ConfigError
            Invalid text, source, trust or date.
        """
        entry = self._entry(text, date or self._today(), source or run_id, trust, run_id)
        with self._writing():
            same = self.find(entry.text)
            if same is not None:
                return StoreResult("duplicate", same)
            rels = self.relations(entry.text)
            flagged = tuple(e for e, r in rels if r == "unsure")
            replaced = [e for e, r in rels if r == "conflict"
                        or (r == "restated" and entry.trust in PERSON
                            and e.trust not in PERSON)]
            restated = [e for e, r in rels if r == "restated" and e not in replaced]
            if restated and not replaced:
                return StoreResult("duplicate", restated[0], flagged=flagged)
            if replaced and approval and (
                    entry.trust == "untrusted"
                    or (entry.trust == "trusted" and any(e.trust in PERSON for e in replaced))):
                who = [e for e in replaced if e.trust in PERSON]
                reason = (f"would replace a fact a person wrote or approved: {who[0].text!r}"
                          if who else f"untrusted replacement of {replaced[0].text!r}")
                item = self.stage(entry.text, entry.source, run_id, reason=reason)
                return StoreResult("staged", entry, tuple(replaced), flagged=flagged,
                                   pending=item)
            gone = {id(e) for e in replaced}
            entries = [e for e in self._entries if id(e) not in gone]
            for e in replaced:
                self._log("supersede", e.text, run_id, f"by: {entry.text}")
            entries.append(entry)
            self._log("add", entry.text, run_id, entry.source)
            evicted = self._evict_over_cap(entries, entry, run_id)
            self._save(entries)
            return StoreResult("superseded" if replaced else "added", entry,
                               tuple(replaced), tuple(evicted), flagged)

    def remove(self, text: str, run_id: str = "", reason: str = "removed") -> MemoryEntry:
        """Remove the fact equal to ``text`` (kept in the history).

        Raises
        ------
        ConfigError
            No such fact.
        """
        with self._writing():
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
    @contextlib.contextmanager
    def _reading(self):
        with self._lock:
            self._reread()
            yield

    def consolidate(self, run_id: str = "", *, dry_run: bool = False) -> ConsolidationReport:
        """Merge near-duplicates, drop superseded and vague facts, enforce the cap.

        Steps, each on what the previous left:

        1. *vague*: loop facts with no concrete command, file, value or name
           (:func:`dyna.loops._text.is_concrete`) are dropped;
        2. *superseded*: of facts giving values for the same attribute (same subject, kind
           and qualifier, :func:`attribute_of`) one stays: a person's latest line (trust
           ``user``, by position in the file) if there is one, else the newest approved
           fact, else the newest (date, then position). A person's line is dropped only
           for a later line of a person giving another value (their own correction);
        3. *merged*: facts with equal concrete parts and content-word Jaccard similarity
           >= ``similarity`` are linked, and each connected group keeps its newest fact
           (a person's, if any; a person's lines are never merged away);
        4. *evicted*: oldest loop facts past the cap.

        Pairs that may contradict each other but cannot be told apart are kept and
        listed (``unsure``). Lines that are not facts (headings, prose) are kept byte for
        byte. Different groups share no link, so a second pass finds nothing:
        consolidation is idempotent and then reports no change (and writes nothing).

        Parameters
        ----------
        run_id : str
            Recorded in the history.
        dry_run : bool
            Report what would change; write nothing, create no file.

        Returns
        -------
        ConsolidationReport
        """
        with (self._reading() if dry_run else self._writing()):
            entries = list(self._entries)
            vague = [e for e in entries if e.trust != "user" and not is_concrete(e.text)]
            gone = {id(e) for e in vague}
            entries = [e for e in entries if id(e) not in gone]

            def newest(idx):
                return max(idx, key=lambda i: (entries[i].date, i))

            superseded = []
            groups: dict[tuple, list[int]] = {}
            for i, e in enumerate(entries):
                a = e.attribute
                if a is not None and a.kind is not None:
                    groups.setdefault((a.subject, a.kind, a.rest), []).append(i)
            drop = set()
            for idx in groups.values():
                if len(idx) < 2:
                    continue
                users = [i for i in idx if entries[i].trust == "user"]
                approved = [i for i in idx if entries[i].trust == "approved"]
                keep = max(users) if users else newest(approved or idx)
                kv = entries[keep].attribute.value
                for i in idx:
                    if i == keep:
                        continue
                    e = entries[i]
                    if e.trust == "user" and (i > keep or e.attribute.value == kv):
                        continue         # a person's line goes only for their correction
                    drop.add(i)
                    superseded.append((e.text, entries[keep].text))
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
                groups2: dict[int, list[int]] = {}
                for i in range(n):
                    groups2.setdefault(find(i), []).append(i)
                drop = set()
                for idx in groups2.values():
                    if len(idx) > 1:
                        users = [i for i in idx if entries[i].trust == "user"]
                        keep = max(users) if users else newest(idx)
                        lost = [i for i in idx if i != keep and entries[i].trust != "user"]
                        if lost:
                            drop.update(lost)
                            merged.append((entries[keep].text,
                                           tuple(entries[i].text for i in lost)))
                entries = [e for i, e in enumerate(entries) if i not in drop]

            if not dry_run:
                for v in vague:
                    self._log("drop-vague", v.text, run_id,
                              "no concrete command, file, value or name")
                for d, b in superseded:
                    self._log("supersede", d, run_id, f"by: {b}")
                for kept, lost in merged:
                    for g in lost:
                        self._log("merge", g, run_id, f"into: {kept}")
            evicted = self._evict_over_cap(entries, None, run_id, log=not dry_run)
            unsure = [(a.text, b.text) for a, b in _unsure_pairs(entries)]
            report = ConsolidationReport(tuple(merged), tuple(superseded),
                                         tuple(v.text for v in vague),
                                         tuple(e.text for e in evicted), tuple(unsure),
                                         dry_run)
            if report.changed and not dry_run:
                self._save(entries)
            return report

    # ------------------------------------------------------------------ approval
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
        with self._writing():
            entry = self._entry(text, self._today(), source or run_id, "untrusted", run_id)
            items = self.pending()
            used = [int(p.id[1:]) for p in items if re.fullmatch(r"m\d+", p.id)]
            n = max([self.backend.staged, *used]) + 1
            clean = self._net.values({"provenance": list(provenance), "reason": reason})
            item = PendingFact(f"m{n:04d}", entry, run_id,
                               _dt.datetime.isoformat(self._clock(), timespec="seconds"),
                               tuple(clean["provenance"]), clean["reason"])
            self.backend.write_pending(items + [item])
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
        """Write a staged fact (trust ``approved``: it may replace any fact).

        Raises
        ------
        ConfigError
            Unknown id.
        """
        with self._writing():
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
        with self._writing():
            p = self._take_pending(pid)
            self._log("reject", p.entry.text, p.run_id, pid)
            return p
