"""What a memory fact states, and how two facts relate: the memory store's conflict rule.

A fact of the form "<subject> is/are/:/= <value>" states one typed *attribute* of its
subject (:func:`attribute_of`): a port, a version, a date, a path, a URL, a command, a
count, an on/off state, or, when the subject itself names a single-valued attribute
("deploy host", "step 3 tool"), that attribute. Two facts *conflict*
(:func:`compare_attributes`) only when both give the same attribute of the same subject
different values ("API port: 8080" and "API port: 9090"); facts about different attributes
of one subject ("The deploy queue is paused on Fridays", "The deploy queue is FIFO") do
not; when it cannot tell ("The cache is redis", "The cache is fast") the pair is "unsure".

Reading the attribute is language-specific; comparing two attributes is not. The memory
store (:mod:`dyna.loops.memory`) holds a *fact rule* (:class:`FactRule`: any object with an
``attribute`` method) and compares what it reads; its default is :data:`ENGLISH_FACTS`
(:class:`EnglishFactRule`), the reading of this module, for facts written in English.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple, Protocol

from dyna.loops._text import COMMAND_RE, FEATURE_CACHE_SIZE, fact_key, identity_text

__all__ = ["ENGLISH_FACTS", "Attribute", "EnglishFactRule", "FactRule", "attribute_of",
           "compare_attributes", "relation", "subject_of", "unsure_pairs"]

_SUBJECT_RE = re.compile(
    r"^(?P<s>[^:=]{1,80}?)\s*(?:\s(?:is|are|equals|should be|must be|defaults to)\s|:\s|=)"
    r"\s*(?P<v>\S.*)$", re.IGNORECASE)


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
    return identity_text(tok).rstrip(".,;:"), m.start(), m.end()


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
        if kind == "command" and state is None and COMMAND_RE.match(v):
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


class FactRule(Protocol):
    """What the memory store needs of a conflict rule: the typed attribute a fact states.

    A rule for facts in another language (or of another domain) implements
    :meth:`attribute` and is passed to :class:`dyna.loops.memory.MemoryStore` as ``rule``;
    the store compares the attributes it returns (:func:`compare_attributes`).
    """

    def attribute(self, text: str) -> Attribute | None:
        """The :class:`Attribute` the fact ``text`` states, or None when it states none
        (then it neither conflicts with nor restates any fact)."""


class EnglishFactRule:
    """The memory store's default conflict rule, for facts written in **English**.

    It matches a fact of the form "<subject> <verb> <value>", the verb being ``is``,
    ``are``, ``equals``, ``should be``, ``must be``, ``defaults to``, ``:`` or ``=``
    (:func:`subject_of`; a subject of at most 6 words, a leading "the", "a", "an", "our" or
    "my" dropped). The value's kind comes from the subject's English head noun ("port",
    "version", "host", ...), else from the value: an English on/off state word ("paused",
    "enabled", ...), a URL, a date (ISO, or an English month name), a command in
    backticks, a path, a version, "port N", a number (:func:`attribute_of`); English
    fillers ("now", "set to", ...) are left out of the qualifier. A fact of another form
    or language states no attribute, so it never conflicts with another fact.

    Both readings are memoised by the text itself (a changed text is another key).
    """

    #: The language of the facts this rule reads.
    language = "English"

    def attribute(self, text: str) -> Attribute | None:
        """The typed attribute ``text`` states (:func:`attribute_of`), or None."""
        return _ATTRIBUTES(text)

    def subject(self, text: str) -> tuple[str, str] | None:
        """``(subject, value)`` of ``text`` (:func:`subject_of`), or None."""
        return _SUBJECTS(text)


_ATTRIBUTES = lru_cache(maxsize=FEATURE_CACHE_SIZE)(attribute_of)
_SUBJECTS = lru_cache(maxsize=FEATURE_CACHE_SIZE)(subject_of)

#: The default rule of the memory store (:class:`EnglishFactRule`).
ENGLISH_FACTS = EnglishFactRule()


def compare_attributes(a: Attribute | None, b: Attribute | None) -> str:
    """How two facts relate, by the attributes they state (``a`` of the new fact, ``b``
    of the stored one; None: the fact states none).

    Returns
    -------
    str
        ``"unrelated"`` (no common subject, or a fact without an attribute);
        ``"different"`` (different attributes of one subject: both kept);
        ``"restated"`` (same attribute, same value, other words);
        ``"conflict"`` (same attribute and qualifier, different values: the newer
        replaces the older); ``"unsure"`` (one subject, and the attribute cannot be
        told apart: values of no known type, or one attribute under different
        qualifiers; both kept and the pair flagged).
    """
    if a is None or b is None or a.subject != b.subject:
        return "unrelated"
    if a.kind != b.kind:
        return "different"
    if a.rest != b.rest:
        return "unsure"
    if a.value == b.value:
        return "restated"
    return "conflict" if a.kind is not None else "unsure"


def relation(new: str, old: str, rule: FactRule = ENGLISH_FACTS) -> str:
    """How two facts relate (:func:`compare_attributes`) by the attributes ``rule`` reads
    in them (default :data:`ENGLISH_FACTS`).

    Examples
    --------
    >>> relation("API port: 9090", "The API port is 8080")
    'conflict'
    >>> relation("The deploy queue is FIFO", "The deploy queue is paused on Fridays")
    'different'
    >>> relation("The cache is memcached", "The cache is redis")
    'unsure'
    """
    return compare_attributes(rule.attribute(new), rule.attribute(old))


def unsure_pairs(entries, rule: FactRule = ENGLISH_FACTS) -> list[tuple]:
    """``(earlier, later)`` pairs of ``entries`` (objects with a ``text``, such as
    :class:`dyna.loops.memory.MemoryEntry`) whose :func:`relation` under ``rule`` is
    ``"unsure"``, in the entries' order."""
    by_subj: dict[str, list] = {}
    for e in entries:
        a = rule.attribute(e.text)
        if a is not None:
            by_subj.setdefault(a.subject, []).append((e, a))
    out = []
    for group in by_subj.values():
        for j in range(1, len(group)):
            for i in range(j):
                if compare_attributes(group[j][1], group[i][1]) == "unsure":
                    out.append((group[i][0], group[j][0]))
    return out
