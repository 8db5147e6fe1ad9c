"""The skill library: procedures an agent keeps between runs, as Agent Skills SKILL.md files.

Layout of a library folder ``DIR`` (readable by any tool that reads Agent Skills)::

    DIR/<name>/SKILL.md                 active skills (with their scripts/, reference/, ...;
                                        a lowercase skill.md is read too)
    DIR/.dyna/retired/<name>/           retired or evicted skills, whole folders (restorable)
    DIR/.dyna/history.jsonl             append-only log of every change, as diffs
    DIR/.dyna/pending/<id>.json         proposals waiting for approval
    DIR/.dyna/state.json                dyna's bookkeeping (outcome counts, posteriors) and
                                        the sha256 of every file dyna wrote itself
    DIR/.dyna/lock                      the file lock every write holds (several processes)

A SKILL.md has YAML frontmatter with ``name`` (1-64 characters after NFKC: lowercase
letters of any script, digits, single hyphens, the reference validator's rule; equal to the
folder name) and ``description`` (1-1,024 characters); all of dyna's own fields live under
``metadata`` as strings (triggers as a comma-separated list, dates as ISO dates, counts as
decimal strings), so the files stay valid Agent Skills. Files dyna did not write are read
leniently (a long description, a name that differs from its folder: loaded with a
:class:`LoadWarning`, never written back) and never rewritten for bookkeeping.

The same :class:`SkillLibrary` runs on an in-memory backend (``SkillLibrary(None)``): the
same code path with no files, for simulations with many episodes.
"""

from __future__ import annotations

import bisect

import contextlib
import datetime as _dt
import functools
import heapq
import json
import math
import operator
import os
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from dyna._quick import quick_init
from dyna.competence import BetaCompetence
from dyna.errors import ConfigError, check_range
from dyna.redact import check_label, known_clean, scan_found
from dyna.loops._io import (CorruptFileError, SafetyNet, SymlinkError, append_jsonl,
                            atomic_write, check_no_symlink, library_lock, read_bytes_nofollow,
                            read_json, read_jsonl, read_last_jsonl)
from dyna.loops._text import apply_diff, text_diff, tokenize
from dyna.loops.bm25 import BM25Index, document_terms, query_terms
from dyna.loops.frontmatter import FrontmatterError, dump_frontmatter, parse_frontmatter
from dyna.loops.provenance import TRUSTED, Source, skeleton
from dyna.loops.provenance import is_untrusted as _is_untrusted
from dyna.loops.retirement import retirement_reason

__all__ = [
    "UNTRUSTED_SOURCES", "AddResult", "HistoryEntry", "LoadWarning", "Match", "MatchIndex",
    "PendingItem", "Skill", "SkillLibrary", "SkillSnapshot", "check_skill_name",
    "is_untrusted",
]


NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
ACTION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_TRIGGER = 128

UNTRUSTED_SOURCES = frozenset(s.value for s in Source if s not in TRUSTED)
"""Provenance sources that make a proposal untrusted (:class:`dyna.loops.provenance.Source`):
tool output and arguments, fetched pages, user files, e-mail, retrieved documents, and any
source name that is not one of the trusted ones (:func:`is_untrusted` parses)."""

KINDS = ("skill", "workflow")
TRUST_LEVELS = ("trusted", "approved", "untrusted")
STATUSES = ("active", "retired")


def is_untrusted(provenance: Iterable[str]) -> bool:
    """True when any provenance source is not a trusted one
    (:func:`dyna.loops.provenance.is_untrusted`: parsed, so ``"Tool_Output"``, ``"browser"``
    and a misspelt or unknown source are untrusted too)."""
    return _is_untrusted(provenance)


def check_skill_name(name, field_name: str = "name") -> str:
    """Validate a skill name and return it NFKC-normalised (the rule of the Agent Skills
    reference validator, ``skills-ref``'s ``_validate_name``).

    After NFKC normalisation a name is 1-64 characters, lowercase (``name == name.lower()``),
    made of letters and digits of any script (``str.isalnum``) and single hyphens, and does
    not start or end with a hyphen; so it can never contain ``/``, ``.`` or white space.
    ``"café-notes"`` and ``"данные"`` are names; two names are compared after NFKC (and,
    for look-alikes, after :func:`dyna.loops.provenance.skeleton`).

    Raises
    ------
    ConfigError
        Anything else, e.g. ``"../x"``, ``"/etc"``, ``"Deploy"``, ``"a--b"``, ``"a_b"``.
    """
    if not isinstance(name, str):
        raise ConfigError(field_name, name, "must be a string")
    return _checked_name(name, field_name)


@functools.lru_cache(maxsize=1 << 14)
def _checked_name(name: str, field_name: str) -> str:
    """:func:`check_skill_name` of a string (a valid name is remembered)."""
    norm = unicodedata.normalize("NFKC", name)
    if not 1 <= len(norm) <= MAX_NAME:
        raise ConfigError(field_name, name, f"must have 1-{MAX_NAME} characters")
    # (no hyphen at either end, so a name is never all hyphens: what is left without
    # them is non-empty, and isalnum() is every character's isalnum())
    if (norm != norm.lower() or norm.startswith("-") or norm.endswith("-") or "--" in norm
            or not norm.replace("-", "").isalnum()):
        raise ConfigError(field_name, name, "must be lowercase letters, digits and single "
                          "hyphens (no path separators)")
    return norm


@dataclass(frozen=True)
class LoadWarning:
    """A skill file loaded although it breaks a rule of the Agent Skills specification (as
    the specification's client guide asks); dyna refuses to write such a skill until the
    file is fixed.

    Attributes
    ----------
    path : str
        The skill file.
    rule : str
        ``"description-length"`` (over 1,024 characters), ``"name-folder"`` (the
        frontmatter ``name`` differs from the folder; loaded under the folder name) or
        ``"look-alike-name"`` (two skills whose names share a confusable skeleton).
    message : str
    """

    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}: {self.message}"


def _split_list(value, field_name: str, sep: str) -> tuple[str, ...]:
    """A string (split on ``sep``) or a list of strings -> tuple of stripped, distinct items."""
    if value is None:
        return ()
    if type(value) is tuple and all(type(v) is str for v in value):
        return _split_tuple(value, sep)   # a skill's own triggers, provenance: remembered
    return _split_any(value, field_name, sep)


@functools.lru_cache(maxsize=4096)
def _split_tuple(value: tuple[str, ...], sep: str) -> tuple[str, ...]:
    return _split_any(value, "", sep)   # (a tuple of strings raises nothing)


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _frozen(value) -> bool:
    """True when ``value`` cannot change in place: an exact str, int, float, bool or None,
    or a tuple of such values (a list, dict, set or any other object can)."""
    t = type(value)
    return t in _ATOMS or (t is tuple and all(_frozen(v) for v in value))


def _frozen_values(items: tuple) -> bool:
    """True when every value of ``items`` (a Skill's ``extra`` pairs) is :func:`_frozen`."""
    return all(_frozen(v) for _, v in items)


def _split_any(value, field_name: str, sep: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items = value.split(sep) if sep else value.split()
    elif isinstance(value, (list, tuple)):
        items = []
        for v in value:
            if not isinstance(v, str):
                raise ConfigError(field_name, value, "items must be strings")
            items.extend(v.split(sep) if sep else v.split())
    else:
        raise ConfigError(field_name, value, "must be a string or a list of strings")
    out: dict[str, str] = {}
    for it in items:
        it = " ".join(it.split())
        if it:
            out.setdefault(it.casefold(), it)
    return tuple(out.values())


def _check_date(field_name: str, value) -> str:
    if value in ("", None):
        return ""
    if not isinstance(value, str):
        raise ConfigError(field_name, value, "must be an ISO date string YYYY-MM-DD")
    try:
        _dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(field_name, value, "must be an ISO date YYYY-MM-DD") from None
    if len(value) != 10:
        raise ConfigError(field_name, value, "must be an ISO date YYYY-MM-DD")
    return value


_OUR_KEYS = ("triggers", "kind", "actions", "created", "last_verified", "source_run",
             "provenance", "trust", "successes", "failures", "a", "b", "status",
             "retired_reason")


@quick_init
@dataclass(frozen=True)
class Skill:
    """One skill: a procedure to follow when a situation arises (or a learned workflow).

    Construction validates and normalises every field (so two skills that read the same
    are equal): triggers and actions given as a string are split on commas (actions also
    on whitespace), stripped and de-duplicated case-insensitively; the body loses leading
    and trailing newlines and CRLF becomes LF.

    Parameters
    ----------
    name : str
        Folder name and identifier, see :func:`check_skill_name`.
    description : str
        1-1,024 characters: what the skill does and when to use it.
    body : str
        Markdown instructions.
    triggers : str or sequence of str
        Words or phrases (no commas, <= 128 characters) that select the skill in
        :meth:`SkillLibrary.match`; empty means "match on the description".
    kind : {"skill", "workflow"}
        A workflow is a checked action sequence callable as one action; it needs
        ``actions``.
    actions : str or sequence of str
        Action names of a workflow, in order (names only: no code, no shell).
    created, last_verified : str
        ISO dates (``YYYY-MM-DD``) of creation and of the last successful use.
    source_run : str
        Id of the run that wrote the skill.
    provenance : str or sequence of str
        What the lesson was learned from, e.g. ``("verified_outcome", "tool_output")``.
    trust : {"trusted", "approved", "untrusted"}
    successes, failures : int
        Outcomes of episodes in which the skill was injected.
    a, b : float or None
        Beta posterior of the skill's competence (None: the library's prior).
    status : {"active", "retired"}
    retired_reason : str
    extra : tuple of (str, object)
        Other top-level frontmatter fields (``license``, ``allowed-tools``, ...), kept as
        read.
    extra_metadata : tuple of (str, object)
        Other ``metadata`` entries, kept as read.
    lenient : tuple of str
        Rules waived when the skill was read from a file (:class:`LoadWarning` rules);
        set by the loader only. Such a skill is never written back until fixed.

    Raises
    ------
    ConfigError
        Naming the offending field and value.
    """

    name: str
    description: str
    body: str = ""
    triggers: tuple[str, ...] = ()
    kind: str = "skill"
    actions: tuple[str, ...] = ()
    created: str = ""
    last_verified: str = ""
    source_run: str = ""
    provenance: tuple[str, ...] = ()
    trust: str = "trusted"
    successes: int = 0
    failures: int = 0
    a: float | None = None
    b: float | None = None
    status: str = "active"
    retired_reason: str = ""
    extra: tuple = ()
    extra_metadata: tuple = ()
    lenient: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        put = object.__setattr__
        put(self, "name", check_skill_name(self.name))
        if not isinstance(self.description, str) or not self.description.strip():
            raise ConfigError("description", self.description, "must be a non-empty string")
        if len(self.description) > MAX_DESCRIPTION and "description-length" not in self.lenient:
            raise ConfigError("description", self.description[:40] + "...",
                              f"must have at most {MAX_DESCRIPTION} characters "
                              f"(has {len(self.description)})")
        if not isinstance(self.body, str):
            raise ConfigError("body", self.body, "must be a string")
        put(self, "body", self.body.replace("\r\n", "\n").replace("\r", "\n").strip("\n"))
        trig = _split_list(self.triggers, "triggers", ",")
        for t in trig:
            if len(t) > MAX_TRIGGER:
                raise ConfigError("triggers", t, f"a trigger has at most {MAX_TRIGGER} characters")
            if not tokenize(t)[0]:
                raise ConfigError("triggers", t, "a trigger needs a word or a symbol")
        put(self, "triggers", trig)
        if self.kind not in KINDS:
            raise ConfigError("kind", self.kind, f"must be one of {KINDS}")
        acts = _split_list(self.actions, "actions", "")
        acts = tuple(a for part in acts for a in part.split(",") if a)
        for act in acts:
            if not ACTION_RE.fullmatch(act):
                raise ConfigError("actions", act, "an action is a name (letters, digits, "
                                  "'_.:-'), not code or a shell command")
        put(self, "actions", acts)
        if self.kind == "workflow" and not acts:
            raise ConfigError("actions", self.actions, "a workflow needs at least one action")
        self._check_book(_BOOK_FIELDS)
        for f in ("extra", "extra_metadata"):
            v = getattr(self, f)
            if isinstance(v, Mapping):
                v = tuple(v.items())
            put(self, f, tuple((str(k), x) for k, x in v))
        for k, _ in self.extra:
            if k in ("name", "description", "metadata", "triggers"):
                raise ConfigError("extra", k, "is a field of its own")
        for k, _ in self.extra_metadata:
            if k in _OUR_KEYS:
                raise ConfigError("extra_metadata", k, "is a field of its own")

    def _check_book(self, names) -> None:
        """Validate and normalise the bookkeeping fields ``names`` (in
        :data:`_BOOK_FIELDS` order), in place: the part of :meth:`__post_init__` that
        :func:`_evolve` runs for the fields it changes."""
        put = object.__setattr__
        for f in names:
            v = getattr(self, f)
            if f in ("created", "last_verified"):
                put(self, f, _check_date(f, v))
            elif f in ("source_run", "retired_reason"):
                if not isinstance(v, str):
                    raise ConfigError(f, v, "must be a string")
                put(self, f, " ".join(v.split()))
            elif f == "provenance":
                put(self, f, _split_list(v, "provenance", ","))
            elif f == "trust":
                if v not in TRUST_LEVELS:
                    raise ConfigError("trust", v, f"must be one of {TRUST_LEVELS}")
            elif f == "status":
                if v not in STATUSES:
                    raise ConfigError("status", v, f"must be one of {STATUSES}")
            elif f in ("successes", "failures"):
                put(self, f, check_range(f, v, 0, None, integer=True))
            elif f == "a":   # a and b together
                if (self.a is None) != (self.b is None):
                    raise ConfigError("a", self.a, "a and b are given together or not at all")
                for g in ("a", "b"):
                    x = getattr(self, g)
                    if x is not None:
                        x = float(check_range(g, x, 0.0, None, lo_open=True))
                        if not math.isfinite(x):
                            raise ConfigError(g, x, "must be finite")
                        put(self, g, x)

    def evolve(self, **changes) -> "Skill":
        """``dataclasses.replace(self, **changes)``: the same skill, the same errors;
        faster when only bookkeeping fields change (dates, run, provenance, trust,
        status, counts, posterior), whose checks are the only ones run again.

        Raises
        ------
        ConfigError
            A changed field's value is invalid (as :class:`Skill` says).
        """
        return _evolve(self, **changes)

    # ------------------------------------------------------------------ properties
    @property
    def uses(self) -> int:
        """Episodes with a reported outcome in which the skill was injected."""
        return self.successes + self.failures

    @property
    def active(self) -> bool:
        return self.status == "active"

    # ------------------------------------------------------------------ file format
    def to_frontmatter(self) -> dict:
        """The frontmatter mapping written to SKILL.md (dyna's fields under ``metadata``,
        all values strings)."""
        meta: dict = {"triggers": ", ".join(self.triggers)}
        if self.kind != "skill":
            meta["kind"] = self.kind
        if self.actions:
            meta["actions"] = " ".join(self.actions)
        meta.update(created=self.created, last_verified=self.last_verified,
                    source_run=self.source_run, provenance=", ".join(self.provenance),
                    trust=self.trust, successes=str(self.successes),
                    failures=str(self.failures))
        if self.a is not None:
            meta["a"] = repr(self.a)
            meta["b"] = repr(self.b)
        meta["status"] = self.status
        if self.retired_reason:
            meta["retired_reason"] = self.retired_reason
        meta.update(self.extra_metadata)
        out = {"name": self.name, "description": self.description}
        out.update(self.extra)
        out["metadata"] = meta
        return out

    def to_text(self) -> str:
        """The SKILL.md text of this skill."""
        return dump_frontmatter(self.to_frontmatter(), self.body)

    @classmethod
    def from_text(cls, text: str | bytes, path="<text>", folder: str | None = None, *,
                  lenient: bool = False, warnings: list | None = None) -> "Skill":
        """Parse SKILL.md text.

        Parameters
        ----------
        text : str or bytes
            File content (BOM and CRLF accepted).
        path : str or Path
            For error messages.
        folder : str, optional
            Name of the folder holding the file; the skill's name must equal it (after
            NFKC normalisation).
        lenient : bool
            Load a description over 1,024 characters and a name that differs from the
            folder (then the skill is named after its folder), each with a
            :class:`LoadWarning` appended to ``warnings``, as the Agent Skills client guide
            asks; :attr:`lenient` records the waived rules so the skill is not written back.
        warnings : list, optional
            Receives the :class:`LoadWarning` objects (with ``lenient``).

        Raises
        ------
        FrontmatterError
            Naming the file, the line and the field: bad YAML, missing or invalid
            ``name``/``description``, a name that differs from the folder (unless
            ``lenient``), bad metadata.
        """
        meta, body = parse_frontmatter(text, path)
        raw = _normalised_text(text)

        def fail(field_name, reason, value=None, key=None):
            raise FrontmatterError(path, _line_of(raw, key or field_name.split(".")[0]),
                                   field_name, reason, value)

        for req in ("name", "description"):
            if req not in meta:
                fail(req, "is required")
            if not isinstance(meta[req], str):
                fail(req, "must be a string", meta[req])
        md = meta.get("metadata", {})
        if md in ("", None):
            md = {}
        if not isinstance(md, dict):
            fail("metadata", "must be a mapping", md)
        kw: dict = {"name": meta["name"], "description": meta["description"], "body": body}
        trig = meta.get("triggers")
        if "triggers" in md:
            trig = md["triggers"] if trig is None else [trig, md["triggers"]]
        kw["triggers"] = _flatten(trig)
        extra_md = []
        for k, v in md.items():
            k = str(k)
            if k == "triggers":
                continue
            if k not in _OUR_KEYS:
                extra_md.append((k, v))
                continue
            try:
                if k in ("successes", "failures"):
                    v = int(v) if isinstance(v, str) and v.strip().isdigit() else v
                    if isinstance(v, str):
                        raise ValueError
                elif k in ("a", "b"):
                    v = float(v)
            except (TypeError, ValueError):
                fail(f"metadata.{k}", "must be a number", v, key="metadata")
            kw[k] = v
        kw["extra_metadata"] = tuple(extra_md)
        kw["extra"] = tuple((str(k), v) for k, v in meta.items()
                            if k not in ("name", "description", "metadata", "triggers"))
        waived = []
        if lenient:
            if len(kw["description"]) > MAX_DESCRIPTION:
                waived.append("description-length")
                _warn(warnings, path, "description-length",
                      f"description has {len(kw['description'])} characters (limit "
                      f"{MAX_DESCRIPTION}); loaded anyway, not written back until shortened")
            if folder is not None:
                folder_n = check_skill_name(folder, "folder")
                try:
                    given = check_skill_name(kw["name"])
                except ConfigError:
                    given = None
                if given is not None and given != folder_n:
                    waived.append("name-folder")
                    _warn(warnings, path, "name-folder",
                          f"name {kw['name']!r} differs from its folder {folder!r}; loaded as "
                          f"{folder_n!r}, not written back until fixed")
                    kw["name"] = folder_n
        kw["lenient"] = tuple(waived)
        try:
            skill = cls(**kw)
        except ConfigError as exc:
            top = exc.field if exc.field in meta else ("metadata" if exc.field in md else "name")
            fail(exc.field if top != "metadata" else f"metadata.{exc.field}", exc.reason,
                 exc.value, key=top)
        if folder is not None and skill.name != unicodedata.normalize("NFKC", folder):
            fail("name", f"must equal the folder name {folder!r}", skill.name)
        return skill


def _warn(warnings: list | None, path, rule: str, message: str) -> None:
    if warnings is not None:
        warnings.append(LoadWarning(str(path), rule, message))


def _flatten(trig):
    if isinstance(trig, list) and any(isinstance(t, list) for t in trig):
        out = []
        for t in trig:
            out.extend(t if isinstance(t, list) else [t])
        return out
    return trig


def _normalised_text(text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _line_of(text: str, key: str) -> int | None:
    """1-based line of top-level ``key:`` in a frontmatter text (None if absent)."""
    rx = re.compile(rf"^['\"]?{re.escape(key)}['\"]?\s*:")
    for i, line in enumerate(text.split("\n")):
        if i and line.rstrip() == "---":
            return None
        if rx.match(line):
            return i + 1
    return None


# ============================================================================ matching

@quick_init
@dataclass(frozen=True)
class Match:
    """One result of :meth:`SkillLibrary.match`.

    Attributes
    ----------
    name : str
    score : float
        Sum over matched triggers of their word count (a phrase of two words scores 2),
        or, for a skill without triggers, its BM25 score over name and description
        (:mod:`dyna.loops.bm25`); times the library's ``suspect_factor`` when the skill is
        suspect. Trigger matches always rank before description matches.
    matched : tuple of str
        The triggers found, or the query's stems found in the description, sorted.
    by_trigger : bool
        Matched by a trigger (else by its description).
    suspect : bool
        Not verified for longer than the library's ``max_age_days``.
    skill : Skill
    """

    name: str
    score: float
    matched: tuple[str, ...]
    suspect: bool
    skill: Skill
    by_trigger: bool = True


def _match(name, score, matched, suspect, skill, by_trigger) -> Match:
    """``Match(name, score, matched, suspect, skill, by_trigger)`` without the frozen
    dataclass's ``__init__`` (a ``__setattr__`` per field): the same object."""
    m = object.__new__(Match)
    m.__dict__.update(name=name, score=score, matched=matched, suspect=suspect, skill=skill,
                      by_trigger=by_trigger)
    return m


class MatchIndex:
    """Inverted index from first token to triggers, for whole-word and phrase matching,
    and a BM25 index of the descriptions of skills without triggers.

    Every trigger is tokenised with :func:`dyna.loops._text.tokenize`; it matches where the
    query has the same tokens in a row with the same spacing between them (so ``"/plan"``
    matches ``"run /plan now"``, ``"git"`` never matches ``"github"`` and ``"deploy"``
    never matches ``"redeployment-notes"``). Skills with the same triggers share their
    postings (a *trigger set*: a loop writes many skills under one task's key words), so a
    query costs one dictionary look-up per query token plus the distinct trigger sets with
    a trigger that starts with that token. A skill without triggers is ranked
    by :class:`dyna.loops.bm25.BM25Index` over its name and description (stemmed; negated
    mentions such as "Do NOT use for PDFs" left out).
    """

    def __init__(self):
        # first token -> ((trigger set, label, tokens, glue, weight), ...) and trigger set
        # -> its skills' names, sorted; tuples, replaced (never changed in place) by every
        # add or remove, so that a copy shares them
        self._post: dict[str, tuple[tuple, ...]] = {}
        self._names: dict[tuple, tuple[str, ...]] = {}
        self._keys: dict[str, tuple | None] = {}   # name -> its trigger set (None: BM25)
        self._bm25 = BM25Index()

    def __len__(self) -> int:
        return len(self._keys)

    def copy(self) -> "MatchIndex":
        """An independent copy (the tuples are shared: they are immutable and replaced,
        not changed, by later adds and removes)."""
        new = MatchIndex()
        new._post = dict(self._post)
        new._names = dict(self._names)
        new._keys = dict(self._keys)
        new._bm25 = self._bm25.copy()
        return new

    def add(self, skill: Skill) -> None:
        """Index an active skill's triggers (or its description words)."""
        name = skill.name
        if name in self._keys:
            self.remove(name)
        if not skill.triggers:
            self._bm25.add(name, document_terms(name, skill.description))
            self._keys[name] = None
            return
        tset = []
        for trig in skill.triggers:
            toks, glue = tokenize(trig)
            weight = float(max(1, sum(1 for t in toks if t[0].isalnum() or t[0] == "_")))
            tset.append((trig.casefold(), toks, glue, weight))
        tset = tuple(sorted(tset))   # labels are distinct within a skill
        names = self._names.get(tset)
        if names is None:
            self._names[tset] = (name,)
            for label, toks, glue, weight in tset:
                self._post[toks[0]] = self._post.get(toks[0], ()) + (
                    (tset, label, toks, glue, weight),)
        else:
            i = bisect.bisect(names, name)
            self._names[tset] = names[:i] + (name,) + names[i:]
        self._keys[name] = tset

    def remove(self, name: str) -> None:
        """Drop a skill from the index (no-op if absent)."""
        if name not in self._keys:
            return
        tset = self._keys.pop(name)
        if tset is None:
            self._bm25.remove(name)
            return
        names = tuple(n for n in self._names[tset] if n != name)
        if names:
            self._names[tset] = names
            return
        del self._names[tset]
        for tok in {t[1][0] for t in tset}:
            lst = tuple(e for e in self._post[tok] if e[0] != tset)
            if lst:
                self._post[tok] = lst
            else:
                del self._post[tok]

    def set_hits(self, text: str) -> dict[tuple, tuple[tuple[str, ...], dict[str, float]]]:
        """Matched triggers per trigger set: ``{trigger set: (its skills' names, sorted,
        {trigger: weight})}``."""
        toks, glue = tokenize(text)
        post = self._post
        n = len(toks)
        out: dict = {}
        for i, tok in enumerate(toks):
            entries = post.get(tok)
            if entries is None:
                continue
            for tset, label, ttoks, tglue, w in entries:
                k = len(ttoks)
                if k > 1 and (i + k > n or toks[i:i + k] != ttoks
                              or glue[i + 1:i + k] != tglue[1:]):
                    continue
                h = out.get(tset)
                if h is None:
                    out[tset] = {label: w}
                else:
                    h[label] = w
        names = self._names
        return {tset: (names[tset], h) for tset, h in out.items()}

    def hits(self, text: str) -> dict[str, dict[str, float]]:
        """Matched triggers per skill: ``{name: {trigger: weight}}``."""
        return {name: dict(h) for names, h in self.set_hits(text).values() for name in names}

    def described(self, text: str, limit: int | None = None) -> list[tuple[float, str, tuple]]:
        """Skills without triggers ranked by BM25 for ``text``: ``(score, name, stems
        matched)``, best first, at most ``limit`` (default all with a positive score)."""
        terms = query_terms(text)
        docs = self._bm25._docs
        ranked = self._bm25.scores(terms, len(docs) if limit is None else limit)
        return [(s, n, tuple(sorted(t for t in terms if t in docs[n]))) for s, n in ranked]


class _Matcher:
    """match() over ``_skills`` and ``_index`` (shared by the library and its snapshots)."""

    _skills: Mapping[str, Skill]
    _index: MatchIndex
    max_age_days: float | None
    suspect_factor: float
    _clock: Callable[[], _dt.datetime]

    def __len__(self) -> int:
        """Number of active skills."""
        return len(self._skills)

    def __contains__(self, name) -> bool:
        return name in self._skills

    def __iter__(self):
        """Names of the active skills, sorted."""
        return iter(sorted(self._skills))

    def today(self) -> _dt.date:
        """Today's date by the library clock (UTC by default).

        Raises
        ------
        ConfigError
            The clock returned something other than a :class:`datetime.datetime`.
        """
        return self._read_clock().date()

    def _read_clock(self) -> _dt.datetime:
        """The clock's time, checked to be a :class:`datetime.datetime`.

        Raises
        ------
        ConfigError
            ``clock`` returned something else (its type is named).
        """
        now = self._clock()
        if not isinstance(now, _dt.datetime):
            raise ConfigError("clock", type(now).__name__, "must return a datetime.datetime")
        return now

    def is_suspect(self, skill: Skill, today: _dt.date | None = None) -> bool:
        """True when dating is on and ``skill`` was last verified (or, never verified,
        created) more than ``max_age_days`` days before ``today``; a skill with neither
        date is suspect."""
        if self.max_age_days is None:
            return False
        stamp = skill.last_verified or skill.created
        if not stamp:
            return True
        today = today or self.today()
        return (today - _dt.date.fromisoformat(stamp)).days > self.max_age_days

    def match(self, text: str, limit: int = 3, *, dating: bool = True) -> list[Match]:
        """Skills whose triggers occur in ``text`` as whole words or phrases, then skills
        without triggers whose description matches (BM25), best first.

        Parameters
        ----------
        text : str
            The situation, e.g. the task statement.
        limit : int
            At most this many results, >= 0; 0 gives []. Never unlimited.
        dating : bool
            Apply the library's dating (suspect skills score ``suspect_factor`` times
            less); False ranks as if dating were off (used to tell whether dating changed
            a match).

        Returns
        -------
        list of Match, length <= limit
            Skills matched by a trigger first, then skills without triggers matched by
            their description (BM25); each group by score (descending), then name
            (ascending), so ties are broken the same way in every run (case SKL-03).
            Retired skills are never returned.

        Raises
        ------
        ConfigError
            ``limit`` not an integer >= 0 (None included) or ``text`` not a string.
        """
        if limit is None or isinstance(limit, bool):
            raise ConfigError("limit", limit, "must be an integer >= 0")
        limit = check_range("limit", limit, 0, None, integer=True)
        if not isinstance(text, str):
            raise ConfigError("text", text, "must be a string")
        if limit == 0:
            return []
        dated = dating and self.max_age_days is not None
        today = self.today() if dated else None
        ranked = []
        skills = self._skills
        for names, h in self._index.set_hits(text).values():
            score = sum(h.values())
            if not dated:
                # a trigger set's skills score alike and rank by name: its first
                # ``limit`` names are the only ones that can be among the results
                ranked += [(0, -score, name, False, h) for name in names[:limit]]
                continue
            for name in names:
                suspect = self.is_suspect(skills[name], today)
                ranked.append((0, -score * self.suspect_factor if suspect else -score,
                               name, suspect, h))
        if len(ranked) < limit and len(self._index._bm25):
            # dating can reorder description matches: then rank them all, else the top ones
            for score, name, stems in self._index.described(
                    text, None if dated else limit - len(ranked)):
                suspect = dated and self.is_suspect(skills[name], today)
                if suspect:
                    score *= self.suspect_factor
                ranked.append((1, -score, name, suspect, stems))
        # (tier, -score, name) is unique (a name is in one tier once), so the tuples order
        # by it alone; a trigger match's triggers are sorted only for the results
        # (sorted()[:limit] is what heapq.nsmallest returns, and quicker on a few dozen)
        best = sorted(ranked)[:limit] if len(ranked) <= 64 else heapq.nsmallest(limit, ranked)
        return [_match(name, -neg, tuple(sorted(matched)) if tier == 0 else matched, suspect,
                       skills[name], tier == 0)
                for tier, neg, name, suspect, matched in best]


class SkillSnapshot(_Matcher):
    """A frozen view of a library's active skills at one moment.

    A run takes a snapshot when it starts and matches against it, so it keeps the skills
    it started with while reviews of other runs change the library.

    Attributes
    ----------
    skills : Mapping[str, Skill]
        Read-only mapping of the active skills at snapshot time.
    """

    def __init__(self, skills: dict, index: MatchIndex, max_age_days, suspect_factor, clock):
        self._skills = MappingProxyType(skills)
        self._index = index
        self.max_age_days = max_age_days
        self.suspect_factor = suspect_factor
        self._clock = clock

    @property
    def skills(self) -> Mapping[str, Skill]:
        return self._skills

    def get(self, name: str) -> Skill | None:
        """The active skill called ``name`` as the snapshot was taken (None if none)."""
        return self._skills.get(name)


# ============================================================================ storage

@dataclass(frozen=True)
class HistoryEntry:
    """One change in the append-only history.

    Attributes
    ----------
    seq : int
        1, 2, ... in order of the change.
    time : str
        ISO 8601 timestamp (library clock).
    op : str
        ``create``, ``patch``, ``outcome``, ``retire``, ``restore``, ``evict``, ``stage``,
        ``approve``, ``reject`` or ``undo``.
    name : str
        The skill (or, for ``stage``/``reject``, the staged destination).
    run_id : str
        The run that caused the change (``undo:<run>`` for an undo).
    reason : str
    before, after : object
        In memory: the :class:`Skill` before and after (None for a library folder).
    change : mapping
        For a library folder: the change as recorded (``diff``, a unified diff of the
        SKILL.md text as a list of lines; ``loc_before``/``loc_after``, ``"active"``,
        ``"retired"`` or None; ``sha_after``; ``book_before``/``book_after``, the
        bookkeeping in the state file); empty for ``stage``/``reject``.
    """

    seq: int
    time: str
    op: str
    name: str
    run_id: str
    reason: str
    before: object = field(default=None, repr=False, compare=False)
    after: object = field(default=None, repr=False, compare=False)
    change: Mapping = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class PendingItem:
    """A proposal staged for approval.

    Attributes
    ----------
    id : str
        ``p0001``, ``p0002``, ... in staging order.
    dest : str
        The skill name it will be written to; fixed when staged.
    skill : Skill
    run_id : str
    staged_at : str
    provenance : tuple of str
    reason : str
    """

    id: str
    dest: str
    skill: Skill
    run_id: str
    staged_at: str
    provenance: tuple[str, ...]
    reason: str = ""

    @property
    def summary(self) -> str:
        """One line: ``skill NAME: DESCRIPTION`` (what an approver is asked about; the
        whole text is in :attr:`skill`, shown by ``dyna skills pending``)."""
        return f"{self.skill.kind} {self.dest}: {' '.join(self.skill.description.split())}"


class _Later:
    """A history record still to make: ``build(*args)`` (:meth:`MemorySkillBackend.
    append_history_later`)."""

    __slots__ = ("build", "args")

    def __init__(self, build, args):
        self.build = build
        self.args = args


class MemorySkillBackend:
    """Skills, history and pending proposals held in memory (no files).

    The state of a skill is the :class:`Skill` object itself (or None); a history record
    keeps the objects before and after a change (``before``/``after``)."""

    location = None
    lock = None

    def __init__(self):
        self._skills: dict[str, Skill] = {}
        self._history: list = []   # records, and records still to make (_Later)
        self._later_from = 0   # every record before this index is made
        self._later_lock = threading.Lock()
        self._pending: dict[str, PendingItem] = {}

    def scan(self):
        return [self._skills[k] for k in sorted(self._skills)], [], []

    def mark(self):
        return None

    def tail(self) -> dict | None:
        hist = self._made()
        return hist[-1] if hist else None

    def write(self, skill: Skill, *, content: bool = True, log: bool = True,
              clean=None) -> dict:
        before = self._skills.get(skill.name)
        self._skills[skill.name] = skill
        return {"before": before, "after": skill}

    def matches(self, name: str, rec: dict) -> bool:
        return self._skills.get(name) == rec.get("after")

    def revert(self, name: str, records: list[dict], clean=None) -> tuple[Skill | None, dict]:
        before = self._skills.get(name)
        target = records[-1].get("before")
        if target is None:
            self._skills.pop(name, None)
        else:
            self._skills[name] = target
        return target, {"before": before, "after": target}

    def append_history(self, rec: dict) -> None:
        self._history.append(rec)

    def append_history_later(self, build: Callable[..., dict], *args) -> None:
        """Append the record ``build(*args)`` makes, made when the history is first read
        (:meth:`tail`, :meth:`history`): nothing here reaches a file, and a run that never
        reads its history never pays for its records (the redaction of each, its time's
        text). ``args`` must be immutable or no longer changed by the caller."""
        self._history.append(_Later(build, args))

    def _made(self) -> list[dict]:
        """The records appended so far, each made (a copy of the list)."""
        hist = self._history
        with self._later_lock:   # one thread makes a record, once
            end = len(hist)   # (a record another thread appends now: the next read's)
            for i in range(self._later_from, end):
                rec = hist[i]
                if type(rec) is _Later:
                    hist[i] = rec.build(*rec.args)
            self._later_from = end
        return hist[:end]

    def history(self) -> list[dict]:
        return self._made()

    def put_pending(self, item: PendingItem) -> None:
        self._pending[item.id] = item

    def pending(self) -> list[PendingItem]:
        return [self._pending[k] for k in sorted(self._pending)]

    def drop_pending(self, pid: str) -> None:
        self._pending.pop(pid, None)

    def pending_numbers(self) -> list[int]:
        return [int(k[1:]) for k in self._pending]


_BOOK = ("successes", "failures", "a", "b", "last_verified", "retired_reason")
"""Dyna's bookkeeping of a skill, kept in ``.dyna/state.json`` (and, only in a file dyna
wrote itself, also in its frontmatter)."""

_LOCS = ("active", "retired")


def _sha256(text: str) -> str:
    import hashlib
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


class FileSkillBackend:
    """Skills as ``DIR/<name>/SKILL.md`` (see the module docstring for the layout).

    * Bookkeeping (outcome counts, posterior, last verified date, retired reason) lives in
      ``DIR/.dyna/state.json``; it is also written into a skill's frontmatter only when
      dyna wrote that file itself, as the state file records (path and sha256 of the text
      dyna wrote; the skill's own frontmatter is never trusted for this). A file written by
      someone else is never rewritten for bookkeeping: retiring moves its folder, an
      outcome changes only the state file.
    * ``history.jsonl`` records each change as a unified diff of the SKILL.md text
      (:func:`dyna.loops._text.text_diff`), the folder it moved from and to, the sha256 of
      the text after, and the bookkeeping before and after, so undo reverses the changes
      exactly (the whole skill folder moves back, resources included).
    * Every write is atomic (write-then-rename) and refuses to go through a symbolic link
      below the library folder; a skill file that links outside the folder is not read.
    * ``SKILL.md`` is preferred, a lowercase ``skill.md`` accepted (and written back under
      its own name).

    Raises
    ------
    ConfigError
        A name that is not a valid skill name; :class:`dyna.loops._io.SymlinkError` (a
        ConfigError) for a symbolic link in the way.
    CorruptFileError
        ``history.jsonl``, a pending file or ``state.json`` cannot be read (file and line).
    """

    def __init__(self, root, durable: bool = True):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._real = self.root.resolve()
        self.meta = self.root / ".dyna"
        self.durable = durable
        self.lock = library_lock(self.root)

    @property
    def location(self) -> Path:
        return self.root

    # ------------------------------------------------------------------ paths
    def _folder(self, name: str, retired: bool) -> Path:
        check_skill_name(name)
        base = self.meta / "retired" if retired else self.root
        folder = base / name
        if folder.is_symlink():
            real = folder.resolve()
            where = ("outside the library" if not real.is_relative_to(self._real)
                     else "inside the library")
            raise SymlinkError(folder, f"is a symbolic link (to {where}); skill folder "
                               "resolves outside its place, dyna does not write through it")
        check_no_symlink(self.root, folder)
        return folder

    def path(self, name: str, retired: bool = False) -> Path:
        """Path of the skill file of ``name`` (active or retired): ``SKILL.md``, or an
        existing lowercase ``skill.md``."""
        folder = self._folder(name, retired)
        return _skill_file(folder) or folder / "SKILL.md"

    def _rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix()

    def _read(self, md: Path) -> bytes:
        """A skill file's bytes; a symbolic link (of the file or a folder above it) is
        followed only to a file inside the library folder."""
        real = md.resolve()
        if not real.is_relative_to(self._real):
            raise SymlinkError(md, f"links outside the library folder (to {real}); not read")
        return md.read_bytes()

    def locate(self, name: str) -> tuple[str | None, Path | None]:
        """Where ``name`` is: ``("active", file)``, ``("retired", file)`` or
        ``(None, None)``."""
        for loc in _LOCS:
            md = _skill_file(self._folder(name, loc == "retired"))
            if md is not None:
                return loc, md
        return None, None

    def _text(self, md: Path | None) -> str | None:
        if md is None:
            return None
        return self._read(md).decode("utf-8", "surrogateescape")

    # ------------------------------------------------------------------ state file
    def _state_path(self) -> Path:
        return self.meta / "state.json"

    def load_state(self) -> dict:
        """``.dyna/state.json``: ``{"skills": {name: {bookkeeping..., "path", "sha256"}}}``
        (empty when missing).

        Raises
        ------
        CorruptFileError
            Not JSON, or not that shape.
        """
        p = self._state_path()
        st = read_json(p)
        if st is None:
            return {"skills": {}}
        if (not isinstance(st, dict) or not isinstance(st.get("skills"), dict)
                or not all(isinstance(v, dict) for v in st["skills"].values())):
            raise CorruptFileError(p, None, 'expected {"skills": {name: {...}}}')
        return st

    def _save_state(self, st: dict) -> None:
        p = check_no_symlink(self.root, self._state_path())
        if not st["skills"]:          # nothing kept: no file (an undo restores its absence)
            p.unlink(missing_ok=True)
            return
        p.parent.mkdir(exist_ok=True)
        # one line per skill (readable, and dumped by the C encoder: indent= is pure Python)
        lines = [f" {json.dumps(k)}: {json.dumps(st['skills'][k], sort_keys=True)}"
                 for k in sorted(st["skills"])]
        atomic_write(p, '{"skills": {\n' + ",\n".join(lines) + "\n}}\n",
                     durable=self.durable)

    def _owned(self, entry: dict | None, md: Path | None, text: str | None) -> bool:
        """True when dyna wrote this file itself (path and sha256 in the state file)."""
        return bool(entry and md is not None and text is not None
                    and entry.get("path") == self._rel(md)
                    and entry.get("sha256") == _sha256(text))

    def mark(self):
        """A fingerprint of the library's log and state files: it changes with every write
        by any process (the library re-reads its state when it did). The log only grows
        (its size says it); the state file is compared by content, since an atomic
        replacement can reuse an inode number and keep size and (coarse) mtime, as an
        unlogged outcome 1 -> 2 does."""
        import hashlib

        try:
            s = os.lstat(self.meta / "history.jsonl")
            log = (s.st_ino, s.st_size, s.st_mtime_ns)
        except FileNotFoundError:
            log = None
        raw = read_bytes_nofollow(self._state_path())
        return log, None if raw is None else hashlib.sha256(raw).digest()

    # ------------------------------------------------------------------ reading
    def scan(self):
        """(skills, errors, warnings) of every skill folder, active and retired."""
        skills, errors, warnings = [], [], []
        st = self.load_state()["skills"]
        for retired, base in ((False, self.root), (True, self.meta / "retired")):
            if not base.is_dir() or (retired and (self.meta.is_symlink()
                                                  or base.is_symlink())):
                continue
            for entry in sorted(base.iterdir()):
                if entry.name.startswith(".") or not entry.is_dir():
                    continue
                md = _skill_file(entry)
                if md is None:
                    continue
                try:
                    check_skill_name(entry.name, "folder")
                    raw = self._read(md)
                    w: list = []
                    skill = Skill.from_text(raw, md, folder=entry.name, lenient=True,
                                            warnings=w)
                    skill = self._overlay(skill, st.get(skill.name), md, raw, retired)
                    skills.append(skill)
                    warnings.extend(w)
                except FrontmatterError as exc:
                    errors.append(exc)
                except ConfigError as exc:
                    errors.append(FrontmatterError(md, None, exc.field, exc.reason, exc.value))
        return skills, errors, warnings

    def _overlay(self, skill: Skill, entry: dict | None, md: Path, raw: bytes,
                 retired: bool) -> Skill:
        """The skill as dyna knows it: bookkeeping from the state file (when it has an
        entry), status from the folder."""
        changes: dict = {}
        want = "retired" if retired else "active"
        if skill.status != want:
            changes["status"] = want
        if entry:
            for k in _BOOK:
                if k in entry:
                    changes[k] = entry[k]
        return replace(skill, **changes) if changes else skill

    def skill_at(self, name: str) -> Skill | None:
        """The skill ``name`` as it is on disk now (None if there is no file)."""
        loc, md = self.locate(name)
        if md is None:
            return None
        raw = self._read(md)
        skill = Skill.from_text(raw, md, folder=name, lenient=True, warnings=[])
        return self._overlay(skill, self.load_state()["skills"].get(name), md, raw,
                             loc == "retired")

    # ------------------------------------------------------------------ writing
    def _move(self, name: str, src_loc: str, dst_loc: str) -> None:
        """Move the whole folder of ``name`` (resources included)."""
        src = self._folder(name, src_loc == "retired")
        dst = self._folder(name, dst_loc == "retired")
        if dst.exists():
            _rmdir_if_empty(dst)
            if dst.exists():
                raise ConfigError("name", name, f"cannot move {src} to {dst}: it exists")
        dst.parent.mkdir(parents=True, exist_ok=True)
        check_no_symlink(self.root, dst.parent)
        src.rename(dst)

    def _put_text(self, name: str, loc: str, filename: str, text: str | None) -> Path:
        folder = self._folder(name, loc == "retired")
        md = check_no_symlink(self.root, folder / filename)
        if text is None:
            md.unlink(missing_ok=True)
            _rmdir_if_empty(folder)
            return md
        folder.parent.mkdir(parents=True, exist_ok=True)
        check_no_symlink(self.root, folder)
        folder.mkdir(exist_ok=True)
        atomic_write(md, text, durable=self.durable)
        return md

    def write(self, skill: Skill, *, content: bool = True, log: bool = True,
              clean=None) -> dict:
        """Write ``skill`` (its text and/or its bookkeeping and place) and return the change
        record for the history.

        ``content``: the skill's text changed (create, patch, approve): the file is
        rewritten. Otherwise (outcome, retire, restore, evict) a file dyna did not write
        keeps its bytes (it moves when the status changes) and only the state file
        changes; a file dyna wrote gets the new bookkeeping in its frontmatter too, unless
        ``log`` is off (an unlogged change never touches a file, so undo still applies).
        ``clean`` (the library's redaction safety net) is applied to the text before the
        change when diffing, so the history never holds a secret the old file had (an
        undo then restores the redacted text).

        Raises
        ------
        ConfigError
            A skill loaded leniently (description over 1,024 characters, name differing
            from its folder) whose text would be rewritten: fix it first.
        """
        name = skill.name
        st = self.load_state()
        entry_b = st["skills"].get(name)
        loc_b, md_b = self.locate(name)
        text_b = self._text(md_b)
        owned = self._owned(entry_b, md_b, text_b)
        loc_a = "active" if skill.active else "retired"
        if loc_b is not None and loc_b != loc_a:
            self._move(name, loc_b, loc_a)
        filename = md_b.name if md_b is not None else "SKILL.md"
        rewrite = content or text_b is None or (owned and log)
        if rewrite:
            _check_writable(skill, self._folder(name, loc_a) / filename)
            text_a = skill.to_text()
            md_a = self._put_text(name, loc_a, filename, text_a)
        else:
            text_a = text_b
            md_a = self._folder(name, loc_a) / filename
        entry_a = {k: getattr(skill, k) for k in _BOOK}
        if rewrite or owned:
            entry_a.update(path=self._rel(md_a), sha256=_sha256(text_a))
        st["skills"][name] = entry_a
        self._save_state(st)
        return {"loc_before": loc_b, "loc_after": loc_a, "file": filename,
                "diff": text_diff(_cleaned(clean, text_b), text_a),
                "sha_after": _sha256(text_a),
                "book_before": entry_b, "book_after": entry_a}

    def matches(self, name: str, rec: dict) -> bool:
        """True when ``name`` is now as the change ``rec`` left it (place and text)."""
        loc, md = self.locate(name)
        if "diff" not in rec:                        # a record of an older dyna
            return [self._text(md) if loc == "active" else None,
                    self._text(md) if loc == "retired" else None] == rec.get("after")
        text = self._text(md)
        return loc == rec["loc_after"] and (None if text is None else _sha256(text)) == \
            rec["sha_after"]

    def revert(self, name: str, records: list[dict], clean=None) -> tuple[Skill | None, dict]:
        """Undo the changes ``records`` (newest first) made to ``name``: reverse each diff,
        move the folder back, restore the bookkeeping; returns the skill now in place and
        the change record of the undo.

        Raises
        ------
        ConfigError
            The file changed outside dyna since (a diff no longer applies).
        """
        st = self.load_state()
        loc0, md0 = self.locate(name)
        text0 = self._text(md0)
        filename = md0.name if md0 is not None else "SKILL.md"
        loc, text, entry = loc0, text0, st["skills"].get(name)
        for rec in records:
            if "diff" not in rec:                    # older dyna: whole texts
                act, ret = rec.get("before") or [None, None]
                loc = "active" if act is not None else ("retired" if ret is not None else None)
                text = act if act is not None else ret
                continue
            if loc != rec["loc_after"]:
                raise ConfigError("name", name, f"changed outside dyna since history record "
                                  f"{rec['seq']} (it is {loc or 'absent'}); cannot undo")
            try:
                text = apply_diff(text or "", rec["diff"], reverse=True)
            except ValueError as exc:
                raise ConfigError("name", name, f"edited outside dyna since history record "
                                  f"{rec['seq']} ({exc}); cannot undo") from None
            loc = rec["loc_before"]
            text = None if loc is None else text
            entry = rec["book_before"]
            filename = rec.get("file", filename)
        # apply the target state: folder place first, then the text
        if loc0 is not None and loc is not None and loc0 != loc:
            self._move(name, loc0, loc)
        if loc is None:
            if loc0 is not None:
                self._put_text(name, loc0, (md0.name if md0 else filename), None)
        elif text != text0 or loc0 is None:
            if md0 is not None and md0.name != filename and loc0 is not None:
                self._put_text(name, loc, md0.name, None)
            self._put_text(name, loc, filename, text)
        if entry is None:
            st["skills"].pop(name, None)
        else:
            st["skills"][name] = entry
        entry_b = self.load_state()["skills"].get(name)
        self._save_state(st)
        skill = self.skill_at(name)
        return skill, {"loc_before": loc0, "loc_after": loc, "file": filename,
                       "diff": text_diff(_cleaned(clean, text0), text or ""),
                       "sha_after": None if text is None else _sha256(text),
                       "book_before": entry_b, "book_after": entry}

    # ------------------------------------------------------------------ log and queue
    def _meta_file(self, *parts) -> Path:
        return check_no_symlink(self.root, self.meta.joinpath(*parts))

    def append_history(self, rec: dict) -> None:
        append_jsonl(self._meta_file("history.jsonl"), rec, durable=self.durable)

    def history(self) -> list[dict]:
        return _checked_history(read_jsonl(self._meta_file("history.jsonl")),
                                self.meta / "history.jsonl")

    def tail(self) -> dict | None:
        """The last history record (read from the end of the file)."""
        return read_last_jsonl(self._meta_file("history.jsonl"))

    def put_pending(self, item: PendingItem) -> None:
        folder = self._meta_file("pending")
        folder.mkdir(parents=True, exist_ok=True)
        rec = {"id": item.id, "dest": item.dest, "text": item.skill.to_text(),
               "run_id": item.run_id, "staged_at": item.staged_at,
               "provenance": list(item.provenance), "reason": item.reason}
        p = self._meta_file("pending", f"{item.id}.json")
        if p.exists():
            raise ConfigError("id", item.id, f"{p} exists; not overwritten")
        atomic_write(p, json.dumps(rec, indent=1, sort_keys=True), durable=self.durable)

    def pending(self) -> list[PendingItem]:
        """Staged proposals, by id.

        Raises
        ------
        CorruptFileError
            A pending file that is not JSON of a proposal (file and line).
        """
        folder = self._meta_file("pending")
        if not folder.is_dir():
            return []
        out = []
        for p in sorted(folder.glob("p*.json")):
            rec = read_json(check_no_symlink(self.root, p))
            keys = ("id", "dest", "text", "run_id", "staged_at", "provenance", "reason")
            if not isinstance(rec, dict) or any(k not in rec for k in keys):
                missing = [k for k in keys if not isinstance(rec, dict) or k not in rec]
                raise CorruptFileError(p, None, "not a pending proposal (missing "
                                       f"{', '.join(missing)})")
            if not (isinstance(rec["text"], str) and isinstance(rec["provenance"], list)
                    and all(isinstance(rec[k], str) for k in ("id", "dest", "run_id",
                                                              "staged_at", "reason"))):
                raise CorruptFileError(p, None, "not a pending proposal (wrong field types)")
            skill = Skill.from_text(rec["text"], p)
            out.append(PendingItem(rec["id"], rec["dest"], skill, rec["run_id"],
                                   rec["staged_at"], tuple(rec["provenance"]), rec["reason"]))
        return out

    def drop_pending(self, pid: str) -> None:
        if not re.fullmatch(r"p\d+", pid):
            raise ConfigError("id", pid, "not a pending id")
        self._meta_file("pending", f"{pid}.json").unlink(missing_ok=True)

    def pending_numbers(self) -> list[int]:
        """The numbers of the pending files' ids (from their names, unparsed)."""
        folder = self._meta_file("pending")
        if not folder.is_dir():
            return []
        return [int(p.stem[1:]) for p in folder.glob("p*.json") if p.stem[1:].isdigit()]


def _cleaned(clean, text: str | None) -> str:
    if text is None:
        return ""
    return clean(text) if clean is not None else text


def _skill_file(folder: Path) -> Path | None:
    """``folder/SKILL.md``, else an existing lowercase ``folder/skill.md``, else None."""
    for n in ("SKILL.md", "skill.md"):
        p = folder / n
        if p.is_file() or p.is_symlink():
            return p
    return None


_HISTORY_KEYS = {"seq": int, "time": str, "op": str, "name": str, "run_id": str, "reason": str}


def _checked_history(recs: list[dict], path: Path) -> list[dict]:
    """History records with their fields checked (CorruptFileError names file and line).

    An undo acts on what the history says (which skill, which file, which place, which
    diff), so a record that says what dyna never writes is refused: a name that is not a
    skill name (``../x``), a file other than ``SKILL.md`` / ``skill.md`` (``run.sh``,
    ``../x/SKILL.md``), a place other than active, retired or absent, a diff that is not
    a list of lines."""
    for i, r in enumerate(recs):
        for k, t in _HISTORY_KEYS.items():
            if not isinstance(r.get(k), t) or (t is int and isinstance(r.get(k), bool)):
                raise CorruptFileError(path, i + 1,
                                       f"history record has no valid {k!r}")
        try:
            check_skill_name(r["name"])
        except ConfigError:
            raise CorruptFileError(path, i + 1, "history record's 'name' is not a skill "
                                   "name") from None
        if "file" in r and r["file"] not in ("SKILL.md", "skill.md"):
            raise CorruptFileError(path, i + 1, "history record's 'file' is not SKILL.md "
                                   "or skill.md")
        for k in ("loc_before", "loc_after"):
            if k in r and r[k] not in _LOCS and r[k] is not None:
                raise CorruptFileError(path, i + 1, f"history record's {k!r} is not "
                                       "active, retired or null")
        d = r.get("diff", [])
        if not isinstance(d, list) or not all(isinstance(x, str) for x in d):
            raise CorruptFileError(path, i + 1, "history record's 'diff' is not a list of "
                                   "lines")
        if "diff" in r:   # what an undo of a file change reads besides the diff
            for k in ("loc_before", "loc_after", "book_before", "book_after"):
                if k not in r:
                    raise CorruptFileError(path, i + 1, f"history record has no {k!r}")
        for k in ("book_before", "book_after"):
            why = _bad_book(r[k]) if k in r else None
            if why is not None:
                raise CorruptFileError(path, i + 1, f"history record's {k!r} {why}")
    return recs


def _bad_book(entry) -> str | None:
    """Why ``entry`` is not a state-file entry dyna writes (None: it is one, or null): a
    mapping whose bookkeeping fields (:data:`_BOOK`), ``path`` and ``sha256`` are each of
    the type the skill's own checks accept, so an undo never writes a state file that no
    later open can read (other fields are never read back)."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        return "is not a mapping"
    for k, v in entry.items():
        if k in ("successes", "failures"):
            ok = type(v) is int and v >= 0
        elif k in ("a", "b"):
            ok = v is None or (type(v) in (int, float) and math.isfinite(v) and v > 0)
        elif k == "last_verified":
            try:
                ok = _check_date(k, v) is not None
            except ConfigError:
                ok = False
        elif k in ("retired_reason", "path", "sha256"):
            ok = isinstance(v, str)
        else:
            continue   # (not read back: the skill takes only the bookkeeping fields)
        if not ok:
            return f"has a bad {k!r}"
    if ("a" in entry) != ("b" in entry) or (entry.get("a") is None) != (entry.get("b") is None):
        return "has 'a' and 'b' not given together"
    return None


def _check_writable(skill: Skill, md: Path) -> None:
    """Refuse to write a skill that was loaded only leniently (rules waived on reading)."""
    if "description-length" in skill.lenient and len(skill.description) > MAX_DESCRIPTION:
        raise ConfigError("description", skill.description[:40] + "...",
                          f"must have at most {MAX_DESCRIPTION} characters (has "
                          f"{len(skill.description)}); {md} was loaded with a warning and is "
                          "not rewritten until the description is shortened")
    if "name-folder" in skill.lenient:
        raise ConfigError("name", skill.name, f"{md}: its frontmatter name differs from its "
                          "folder (loaded with a warning); fix the file before dyna writes it")


def _look_alikes(skills: list, backend) -> list:
    """A :class:`LoadWarning` for each skill whose name has the confusable skeleton of an
    earlier one (``deploy`` and ``dep1oy``)."""
    seen: dict[str, str] = {}
    out = []
    for s in sorted(skills, key=lambda s: s.name):
        k = skeleton(s.name)
        if k in seen and seen[k] != s.name:
            path = backend.path(s.name, not s.active) if backend.location else s.name
            out.append(LoadWarning(str(path), "look-alike-name",
                                   f"name {s.name!r} looks like {seen[k]!r} (same "
                                   "confusable skeleton); both loaded"))
        seen.setdefault(k, s.name)
    return out


def _rmdir_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


# ============================================================================ library

@quick_init
@dataclass(frozen=True)
class AddResult:
    """What :meth:`SkillLibrary.add` did.

    Attributes
    ----------
    skill : Skill
        The skill as written.
    evicted : Skill or None
        The skill evicted to make room at the cap (moved to the retired folder).
    """

    skill: Skill
    evicted: Skill | None = None


_NAME = operator.attrgetter("name")

#: The bookkeeping fields of a :class:`Skill`, in the order its construction checks them
#: (``"a"`` stands for the pair ``a``, ``b``).
_BOOK_FIELDS = ("created", "last_verified", "source_run", "retired_reason", "provenance",
                "trust", "status", "successes", "failures", "a")


def _copy_skill(skill: "Skill") -> "Skill":
    """A shallow copy of ``skill`` (no validation: its fields are valid already)."""
    new = object.__new__(Skill)
    new.__dict__.update(skill.__dict__)
    return new


def _evolve(skill: "Skill", **changes) -> "Skill":
    """``dataclasses.replace(skill, **changes)``, re-checking only the changed fields
    when they are all bookkeeping (:data:`_BOOK_FIELDS`, ``b`` included): the other
    fields were checked and normalised when ``skill`` was built, and their checks do not
    depend on these; same result, same errors. Other changes go through ``replace``."""
    names = [f for f in _BOOK_FIELDS if f in changes or (f == "a" and "b" in changes)]
    if len(changes) != len(names) + ("a" in changes and "b" in changes):
        return replace(skill, **changes)
    new = _copy_skill(skill)
    for k, v in changes.items():
        object.__setattr__(new, k, v)
    new._check_book(names)
    return new


def _check_write(run_id, reason) -> None:
    """The run id and reason of a write are texts (what the history's reader accepts), the
    run id a label without a secret (:func:`dyna.redact.check_label`); checked before
    anything is changed.

    Raises
    ------
    ConfigError
        ``run_id`` or ``reason`` not a string (the value shown is its type, never the
        value), or a run id holding a secret.
    """
    if not isinstance(run_id, str):
        raise ConfigError("run_id", type(run_id).__name__, "must be a string")
    if not isinstance(reason, str):
        raise ConfigError("reason", type(reason).__name__, "must be a string")
    check_label("run_id", run_id)


def _history_record(net: SafetyNet, now, seq: int, op: str, name: str, run_id: str,
                    reason: str, staged: int, change: dict | None) -> dict:
    """One history record of a :class:`SkillLibrary`, its values through the safety net
    ``net``; ``now`` is its time's text, or a datetime formatted to the second."""
    if not isinstance(now, str):
        now = _dt.datetime.isoformat(now, timespec="seconds")
    # "time" is not scanned: _now formats a datetime itself (digits, "-", ":", "T",
    # "+"), and no detector catches such a text (60,000 random ones checked)
    rec = {"seq": seq, "op": op, "name": name,
           "run_id": run_id, "reason": reason, "staged": staged}
    change = dict(change or {})
    # hashes are not text (a hex digest can look like a phone number to a detector)
    # and a diff is made of texts the net has seen (its "+" prefix can make a date
    # look like a phone number)
    hashes = {k: change.pop(k) for k in ("sha_after", "diff") if k in change}
    for k in ("before", "after"):
        # the in-memory backend's skill objects: the scan does not look into a Skill
        # (nor None), so they are passed, not walked (the same record, quicker)
        if k in change and (change[k] is None or type(change[k]) is Skill):
            hashes[k] = change.pop(k)
    books = {}
    for k in ("book_before", "book_after"):
        b = change.get(k)
        if isinstance(b, dict) and "sha256" in b:
            books[k] = b["sha256"]
            change[k] = {x: v for x, v in b.items() if x != "sha256"}
    rec.update(change)
    # values only: the keys are the record's schema (``name`` is the skill's identifier)
    rec = net.values(rec)
    rec = {"seq": rec["seq"], "time": now, **rec}   # the key order as before
    rec.update(hashes)
    for k, h in books.items():
        rec[k] = dict(rec[k], sha256=h)
    return rec


class SkillLibrary(_Matcher):
    """A library of skills with matching, competence, a cap, dating, history and approval.

    Parameters
    ----------
    dir : str or Path or None
        Library folder (created if missing); None keeps everything in memory.
    cap : int or None
        Maximum number of active skills; at the cap a new skill replaces the weakest one
        (lowest lower credible bound of competence, then oldest ``created``, then name),
        and the eviction is recorded. None: no cap.
    max_age_days : float or None
        Dating: a skill not verified for longer is *suspect* and scores
        ``suspect_factor`` times less in :meth:`match`. None: no dating.
    suspect_factor : float
        In [0, 1].
    retire_below : float or None
        Retire on contradiction: after a failure, a skill with at least
        ``retire_min_uses`` outcomes whose posterior mean competence ``a / (a + b)`` is
        below this is retired. None: never.
    retire_min_uses : int
    level : float
        Credible level of the lower bound used for eviction, in (0, 1).
    prior, discount :
        Of the :class:`dyna.competence.BetaCompetence` estimator (Beta prior, and the
        per-update evidence discount in (0, 1]).
    clock : callable returning an aware datetime, optional
        Time source (UTC now by default); tests and simulations pass their own.
    log_outcomes : bool
        Record every outcome report in the history (so :meth:`undo_run` also reverts a
        run's outcome counts). Simulations with very many episodes may turn it off.
    durable : bool
        fsync every file write (folder backend).

    Attributes
    ----------
    errors : list of FrontmatterError
        Skill files that could not be read at load time; each names the file, the line
        and the field (case SKL-01). They count in :meth:`summary`.
    warnings : list of LoadWarning
        Skill files loaded although they break a rule (a description over 1,024
        characters, a name that differs from its folder, a look-alike name).
    competence : BetaCompetence
        Per-skill posteriors, keyed by skill name.
    redactions : dict of str to int
        Catches of the always-on redaction safety net, per detector name: every skill
        written (description, body, triggers and the other frontmatter values; the schema
        field ``name`` is an identifier, never redacted), every staged proposal and every
        history record is redacted first (:class:`dyna.loops._io.SafetyNet`). A ``run_id``
        holding a secret is refused (:func:`dyna.redact.check_label`): undo finds runs by it.

    Several processes (or several objects) may share one folder: every write holds the
    folder's file lock (:func:`dyna.loops._io.library_lock`, ``.dyna/lock``) and first
    re-reads the folder when anyone else wrote to it since; reads use the state as of the
    last write or :meth:`refresh`.

    Raises
    ------
    ConfigError
        Bad parameters; :class:`dyna.loops._io.SymlinkError` for a symbolic link below the
        folder in the way of a write.
    CorruptFileError
        ``.dyna/history.jsonl``, ``.dyna/state.json`` or a pending file cannot be read
        (names the file and the line; at open or at the write that reads it).
    LibraryLockTimeout
        Another writer held the lock for longer than 30 s.
    """

    def __init__(self, dir=None, *, cap: int | None = None, max_age_days: float | None = None,
                 suspect_factor: float = 0.5, retire_below: float | None = 0.4,
                 retire_min_uses: int = 3, level: float = 0.95, prior="uniform",
                 discount: float = 1.0, clock: Callable[[], _dt.datetime] | None = None,
                 log_outcomes: bool = True, durable: bool = True):
        if cap is not None:
            cap = check_range("cap", cap, 1, None, integer=True)
        if max_age_days is not None:
            check_range("max_age_days", max_age_days, 0, None)
        if retire_below is not None:
            check_range("retire_below", retire_below, 0.0, 1.0)
        self.cap = cap
        self.max_age_days = max_age_days
        self.suspect_factor = float(check_range("suspect_factor", suspect_factor, 0.0, 1.0))
        self.retire_below = retire_below
        self.retire_min_uses = check_range("retire_min_uses", retire_min_uses, 0, None,
                                           integer=True)
        self.level = float(check_range("level", level, 0.0, 1.0, lo_open=True, hi_open=True))
        self.competence = BetaCompetence(prior, discount)
        self._clock = clock or _utc_now
        self._now_text: tuple | None = None   # ((second, utcoffset), ISO text): _now's memo
        #: (the clock's last datetime, its ISO time, its ISO date): for a clock that gives
        #: the very same datetime object again (an agent's clock, fixed per episode)
        self._clock_memo: tuple | None = None
        self.log_outcomes = bool(log_outcomes)
        self.backend = (MemorySkillBackend() if dir is None
                        else FileSkillBackend(dir, durable=durable))
        self._lock = threading.RLock()
        self._flock = self.backend.lock
        self._depth = 0
        self._mark = None
        self._net = SafetyNet()
        # skills (by identity) whose text went through the safety net: an outcome changes
        # only numbers, so its copy needs no second scan. Strong references (an id is not
        # reused while its skill is here), pruned to the skills in the library when it
        # outgrows them (_mark_clean): a plain dict, cheaper than a WeakValueDictionary
        self._cleaned: dict[int, Skill] = {}
        self._cleaned_limit = 256
        # (description, body, triggers) of skills the net passed unchanged, by value (exact
        # strings only: a str subclass could compare equal to a text it is not); at most
        # 1,024 kept. The library holds these texts anyway, and they hold no catch.
        self._clean_texts: dict[tuple, None] = {}
        self._skills: dict[str, Skill] = {}
        self._retired: dict[str, Skill] = {}
        self._skeletons: dict[str, set[str]] = {}   # skeleton -> names, active or retired
        self._journal: list[str] = []   # names placed since _journal_base (placed_since)
        self._journal_base = 0
        self._by_name: tuple | None = None   # (journal mark, active skills by name)
        self._index = MatchIndex()
        self._shared = False
        self.errors: list = []
        self.warnings: list[LoadWarning] = []
        self._seq = self._staged = 0
        if self.location is not None:
            self.backend.history()      # a corrupt log is reported at once (file and line)
            self._refresh(force=True)

    # ------------------------------------------------------------------ processes
    def _writing(self):
        """Hold the thread lock and, for a folder, the library's file lock
        (:func:`dyna.loops._io.library_lock`) around a write, re-reading the library first
        when another process (or library object) wrote since we last looked."""
        if self._flock is None:   # in memory: the (re-entrant) thread lock alone
            return self._lock
        return self._writing_folder()

    @contextlib.contextmanager
    def _writing_folder(self):
        with self._lock:
            with self._flock:
                outer = self._depth == 0
                if outer:
                    self._refresh()
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                    if outer:
                        self._mark = self.backend.mark()

    def refresh(self) -> None:
        """Re-read the library folder now if anyone wrote to it since this object last
        looked (writes do this by themselves, under the file lock).

        Raises
        ------
        CorruptFileError
            The state file or the history cannot be read (file and line).
        """
        with self._lock:
            if self._flock is None:
                return
            with self._flock:
                self._refresh()

    def _refresh(self, force: bool = False) -> None:
        mark = self.backend.mark()
        if not force and mark == self._mark:
            return
        skills, self.errors, warnings = self.backend.scan()
        self.warnings = warnings + _look_alikes(skills, self.backend)
        gone = (set(self._skills) | set(self._retired)) - {s.name for s in skills}
        for name in gone:
            self._place(None, name)
        for s in skills:
            self._place(s)
        tail = self.backend.tail()
        path = self.location / ".dyna" / "history.jsonl"
        if tail is not None and (not isinstance(tail.get("seq"), int)
                                 or isinstance(tail.get("seq"), bool)):
            raise CorruptFileError(path, None, "last history record has no valid 'seq'")
        self._seq = tail["seq"] if tail else 0
        if tail is not None and isinstance(tail.get("staged"), int):
            staged = tail["staged"]
        else:   # a log written by an older dyna: count its stage records
            staged = sum(1 for h in self.backend.history() if h["op"] == "stage")
        self._staged = max([staged] + self.backend.pending_numbers())
        self._mark = mark

    @classmethod
    def in_memory(cls, **kwargs) -> "SkillLibrary":
        """A library with no files (same behaviour, for simulations)."""
        return cls(None, **kwargs)

    # ------------------------------------------------------------------ reading
    @property
    def location(self) -> Path | None:
        """The library folder (None in memory)."""
        return self.backend.location

    def get(self, name: str) -> Skill | None:
        """The active or retired skill called ``name`` (None if there is none)."""
        return self._skills.get(name) or self._retired.get(name)

    def __getitem__(self, name: str) -> Skill:
        """The active or retired skill called ``name``.

        Raises
        ------
        ConfigError
            No such skill (``name='x': no such skill``).
        """
        skill = self.get(name)
        if skill is None:
            raise ConfigError("name", name, "no such skill")
        return skill

    def _active_by_name(self) -> tuple[Skill, ...]:
        """The active skills sorted by name, as :meth:`skills` gives them, built again only
        after a placement (every change of ``_skills`` goes through :meth:`_place`, which
        advances the journal's mark)."""
        mark = self._journal_base + len(self._journal)
        got = self._by_name
        if got is None or got[0] != mark:
            got = self._by_name = (mark, tuple(sorted(self._skills.values(), key=_NAME)))
        return got[1]

    def skills(self, include_retired: bool = False) -> list[Skill]:
        """Active skills (and retired ones if asked), sorted by name."""
        out = list(self._skills.values())
        if include_retired:
            out += list(self._retired.values())
        # a name is active or retired, never both: (name, status) orders as name alone
        out.sort(key=_NAME)
        return out

    def look_alikes(self, name: str) -> list[Skill]:
        """The active and retired skills whose name has the confusable skeleton of
        ``name`` (:func:`dyna.loops.provenance.skeleton`; a skill called ``name`` among
        them), sorted by name."""
        names = self._skeletons.get(skeleton(name), ())
        return sorted((self._skills.get(n) or self._retired[n] for n in names), key=_NAME)

    def summary(self) -> dict:
        """Counts shown to users: ``active``, ``retired``, ``pending``, ``failed`` (files
        that could not be read), ``warned`` (loaded with a :class:`LoadWarning`, counted
        among active or retired too) and ``total`` (active + retired + failed)."""
        d = {"active": len(self._skills), "retired": len(self._retired),
             "pending": len(self.pending()), "failed": len(self.errors),
             "warned": len({w.path for w in self.warnings})}
        d["total"] = d["active"] + d["retired"] + d["failed"]
        return d

    def posterior(self, name: str) -> tuple[float, float]:
        """Beta posterior ``(a, b)`` of a skill's competence."""
        return self.competence.posterior(name)

    def snapshot(self) -> SkillSnapshot:
        """A frozen view of the active skills now (copy-on-write: O(n) once)."""
        with self._lock:
            self._shared = True
            return SkillSnapshot(dict(self._skills), self._index, self.max_age_days,
                                 self.suspect_factor, self._clock)

    # ------------------------------------------------------------------ internals
    def placed_since(self, mark: int | None) -> tuple[list[str] | None, int]:
        """The names of the skills whose in-memory state changed (written, counted,
        retired, restored, evicted, removed, re-read) since ``mark``, oldest first, with
        repeats, and the mark of now; None instead of the names when ``mark`` is None or
        older than the journal kept (then look at every skill). For a reader that keeps a
        view of the library up to date (the agent-task audit)."""
        end = self._journal_base + len(self._journal)
        if mark is None or mark < self._journal_base:
            return None, end
        return self._journal[mark - self._journal_base:], end

    def _place(self, skill: Skill | None, name: str | None = None, *,
               posterior_held: bool = False) -> None:
        """Put ``skill`` in the in-memory view (index, competence); None removes ``name``.
        ``posterior_held``: the competence estimator holds ``(skill.a, skill.b)`` for it
        already (an outcome just updated both), so that check is skipped."""
        name = skill.name if skill is not None else name
        journal = self._journal
        if len(journal) >= 4096 + 4 * (len(self._skills) + len(self._retired)):
            self._journal_base += len(journal)   # older marks now read everything again
            journal.clear()
        journal.append(name)
        old = self._skills.get(name) if skill is not None else None
        if (old is not None and skill.active and old.triggers == skill.triggers
                and old.description == skill.description):
            # still active, indexed under the same triggers and description (an outcome, a
            # patched body): the index is unchanged, and the skill keeps its place (every
            # reader sorts by name; a dict without holes is copied in one block by the
            # next snapshot, ~1 us for 300 skills against ~10 with the holes a removal
            # and an insertion leave)
            self._skills[name] = skill
            comp = self.competence
            if posterior_held:
                return
            if skill.a is None:
                comp.reset(name)
            elif name not in comp or comp.posterior(name) != (skill.a, skill.b):
                comp.set_posterior(name, skill.a, skill.b)   # else it holds them already
            return
        if self._shared:
            self._index = self._index.copy()
            self._shared = False
        self._skills.pop(name, None)
        self._retired.pop(name, None)
        self._index.remove(name)
        if skill is None:
            same = self._skeletons.get(skeleton(name))
            if same is not None:
                same.discard(name)
            self.competence.reset(name)
            return
        self._skeletons.setdefault(skeleton(name), set()).add(name)
        if skill.active:
            self._skills[name] = skill
            self._index.add(skill)
        else:
            self._retired[name] = skill
        if skill.a is not None:
            self.competence.set_posterior(name, skill.a, skill.b)
        else:
            self.competence.reset(name)

    def _today_text(self) -> str:
        """``self.today().isoformat()``, remembered for the clock's last datetime (an
        exact :class:`datetime.datetime`, immutable: the same object, the same date)."""
        now = self._read_clock()
        memo = self._clock_memo
        if memo is not None and memo[0] is now and memo[2] is not None:
            return memo[2]
        text = now.date().isoformat()
        if type(now) is _dt.datetime:
            self._clock_memo = (now, memo[1] if memo is not None and memo[0] is now
                                else None, text)
        return text

    def _now(self, now: _dt.datetime | None = None) -> str:
        """The time's text (``now``, else the clock's) to the second."""
        if now is None:
            now = self._read_clock()
        memo = self._clock_memo
        if memo is not None and memo[0] is now and memo[1] is not None:
            return memo[1]   # the same (exact, immutable) datetime: the same text
        if type(now) is not _dt.datetime:
            return self._now_uncached(now)
        text = _dt.datetime.isoformat(now, timespec="seconds")   # (as _now_uncached's)
        self._clock_memo = (now, text, memo[2] if memo is not None and memo[0] is now
                            else None)
        return text

    def _now_uncached(self, now) -> str:
        # the same second and offset: the same text (isoformat drops the microseconds)
        key = (now.replace(microsecond=0), now.utcoffset())
        last = self._now_text
        if last is not None and last[0] == key:
            return last[1]
        # datetime's own isoformat, whatever a subclass the clock returns overrides: the
        # text is digits and "-:T+" only (_log relies on it)
        text = _dt.datetime.isoformat(now, timespec="seconds")
        self._now_text = (key, text)
        return text

    @property
    def redactions(self) -> dict[str, int]:
        """Catches of the redaction safety net so far, per detector name."""
        made = getattr(self.backend, "_made", None)
        if made is not None:
            made()   # the in-memory history's records still to make are scanned now
        return dict(self._net.counts)

    def _clean(self, skill: Skill) -> Skill:
        """``skill`` with every free-text frontmatter value and the body redacted (the
        schema field ``name`` is kept: an identifier, not a person's name)."""
        if self._cleaned.get(id(skill)) is skill:   # its text was through the safety net
            return skill
        net = self._net
        texts = None
        if (not skill.extra and not skill.extra_metadata and type(skill.description) is str
                and type(skill.body) is str and type(skill.triggers) is tuple
                and all(type(t) is str for t in skill.triggers)):
            texts = (skill.description, skill.body, skill.triggers)
        if texts is not None and texts in self._clean_texts:
            # the same description, body and triggers came through the net unchanged
            # before, in a skill with nothing else to catch: the scan of the whole record
            # is theirs (nothing) plus the rest's, entry by entry (the rest's keys are
            # no cue of any detector, so each value is scanned alone; a short or
            # known-clean text, a run id most often, is not scanned again)
            rest = (skill.source_run, skill.retired_reason, *skill.provenance)
            if all(map(known_clean, rest)) or not scan_found(
                    {"source_run": skill.source_run, "provenance": list(skill.provenance),
                     "retired_reason": skill.retired_reason}):
                self._mark_clean(skill)
                return skill
        fields = {"description": skill.description, "body": skill.body,
                  "triggers": list(skill.triggers), "source_run": skill.source_run,
                  "provenance": list(skill.provenance), "retired_reason": skill.retired_reason}
        out = net.values(fields)
        extra = net.free(dict(skill.extra)) if skill.extra else {}
        meta = net.free(dict(skill.extra_metadata)) if skill.extra_metadata else {}
        if out is fields and extra == dict(skill.extra) and meta == dict(skill.extra_metadata):
            self._mark_clean(skill)
            if texts is not None:
                if len(self._clean_texts) >= 1024:
                    self._clean_texts.clear()
                self._clean_texts[texts] = None
            return skill
        clean = replace(skill, description=out["description"], body=out["body"],
                        triggers=tuple(out["triggers"]), source_run=out["source_run"],
                        provenance=tuple(out["provenance"]),
                        retired_reason=out["retired_reason"], extra=tuple(extra.items()),
                        extra_metadata=tuple(meta.items()))
        self._mark_clean(clean)
        return clean

    def _mark_clean(self, skill: Skill) -> None:
        """Remember that ``skill``'s text went through the net; past a limit, forget every
        skill no longer in the library (active or retired), so the memo stays within about
        twice the library's size."""
        if ((skill.extra and not _frozen_values(skill.extra))
                or (skill.extra_metadata and not _frozen_values(skill.extra_metadata))):
            # a list or dict among them can change after this scan (the skill is frozen,
            # its values need not be): such a skill is scanned on every write
            return
        memo = self._cleaned
        memo[id(skill)] = skill
        if len(memo) > self._cleaned_limit:
            keep = {id(s): s for d in (self._skills, self._retired) for s in d.values()
                    if memo.get(id(s)) is s}
            keep[id(skill)] = skill
            self._cleaned = keep
            self._cleaned_limit = 2 * len(keep) + 256

    def _commit(self, op: str, skill: Skill, run_id: str, reason: str = "", *,
                content: bool = True) -> Skill:
        """Write ``skill`` (or, ``content`` False, only its bookkeeping and status),
        redacted, and log the change; returns the skill as written."""
        _check_write(run_id, reason)
        now = self._read_clock()   # (a clock that fails, fails before the write)
        skill = self._clean(skill)
        change = self.backend.write(skill, content=content, clean=self._net.values)
        self._place(skill)
        self._log(op, skill.name, run_id, reason, change, now)
        return skill

    def _log(self, op, name, run_id, reason, change: dict | None = None,
             now: _dt.datetime | None = None) -> None:
        """Append the history record of a change made at ``now`` (read from the clock
        once, by the caller before it changed anything, or here)."""
        if now is None:
            now = self._read_clock()
        self._seq += 1
        later = getattr(self.backend, "append_history_later", None)
        if (later is not None and type(now) is _dt.datetime
                and (now.tzinfo is None or type(now.tzinfo) is _dt.timezone)):
            # an in-memory history: the record (its redaction, its time's text) is made
            # when it is first read, from these values (an exact datetime with a fixed
            # offset formats the same then; the texts are immutable; change holds
            # immutable Skill objects or None)
            later(_history_record, self._net, now, self._seq, op, name, run_id, reason,
                  self._staged, change)
            return
        self.backend.append_history(_history_record(self._net, self._now(now), self._seq, op,
                                                    name, run_id, reason, self._staged,
                                                    change))

    def _weakest(self) -> Skill | None:
        """The eviction candidate: the loop-written skill (one with a ``source_run``,
        approved or not) with the lowest competence lower bound (then oldest, then name). A
        skill a person wrote (no ``source_run``) is never evicted; None when only such
        skills are left."""
        names = sorted(n for n, s in self._skills.items() if s.source_run)
        if not names:
            return None
        lb = self.competence.lower_bound(names, self.level)
        order = sorted(range(len(names)),
                       key=lambda i: (lb[i], self._skills[names[i]].created, names[i]))
        return self._skills[names[order[0]]]

    def _make_room(self, incoming: str, run_id: str) -> Skill | None:
        if self.cap is None or len(self._skills) < self.cap:
            return None
        victim = self._weakest()
        if victim is None:   # only skills a person wrote or approved: stay over the cap
            return None
        reason = f"evicted at cap {self.cap} for {incoming}"
        self._commit("evict", _evolve(victim, status="retired", retired_reason=reason),
                     run_id, reason, content=False)
        return victim

    # ------------------------------------------------------------------ writing
    def add(self, skill: Skill, run_id: str = "", reason: str = "", *,
            op: str = "create") -> AddResult:
        """Create a skill (dated today; ``source_run`` defaults to ``run_id``).

        At the cap the weakest active skill is evicted first (recorded as ``evict``). A
        retired skill of the same name is replaced (its text is kept in the history).

        Returns
        -------
        AddResult

        Raises
        ------
        ConfigError
            An active skill with this name exists (use :meth:`patch`).
        """
        if not isinstance(skill, Skill):
            raise ConfigError("skill", skill, "must be a Skill")
        _check_write(run_id, reason)
        with self._writing():
            if skill.name in self._skills:
                raise ConfigError("name", skill.name, "an active skill has this name; "
                                  "use patch()")
            today = self._today_text()
            skill = _evolve(skill, status="active", retired_reason="",
                            created=skill.created or today,
                            last_verified=skill.last_verified or skill.created or today,
                            source_run=skill.source_run or run_id)
            evicted = self._make_room(skill.name, run_id)
            skill = self._commit(op, skill, run_id, reason)
            return AddResult(skill, evicted)

    def patch(self, name: str, run_id: str = "", reason: str = "", **changes) -> Skill:
        """Change fields of an active skill (``description``, ``body``, ``triggers``, ...).

        Raises
        ------
        ConfigError
            No active skill ``name``; a change of ``name`` or ``status`` (use
            :meth:`retire` / :meth:`restore`); an invalid value.
        """
        _check_write(run_id, reason)
        with self._writing():
            if name not in self._skills:
                raise ConfigError("name", name, "no active skill with this name")
            for k in ("name", "status"):
                if k in changes:
                    raise ConfigError(k, changes[k], "cannot be patched")
            skill = replace(self._skills[name], **changes)
            return self._commit("patch", skill, run_id, reason)

    def retire(self, name: str, run_id: str = "", reason: str = "retired") -> Skill:
        """Move an active skill to the retired folder (restorable).

        Raises
        ------
        ConfigError
            No active skill ``name``.
        """
        _check_write(run_id, reason)
        with self._writing():
            if name not in self._skills:
                raise ConfigError("name", name, "no active skill with this name")
            skill = _evolve(self._skills[name], status="retired", retired_reason=reason)
            return self._commit("retire", skill, run_id, reason, content=False)

    def restore(self, name: str, run_id: str = "", reason: str = "restored") -> AddResult:
        """Bring a retired (or evicted) skill back; at the cap the weakest other skill is
        evicted.

        Raises
        ------
        ConfigError
            No retired skill ``name``.
        """
        _check_write(run_id, reason)
        with self._writing():
            if name not in self._retired:
                raise ConfigError("name", name, "no retired skill with this name")
            evicted = self._make_room(name, run_id)
            skill = _evolve(self._retired[name], status="active", retired_reason="")
            skill = self._commit("restore", skill, run_id, reason, content=False)
            return AddResult(skill, evicted)

    def record_outcome(self, names: Iterable[str], success: bool, run_id: str = "") -> list[str]:
        """Report the outcome of an episode in which ``names`` were injected.

        Each skill's Beta posterior gets the outcome (:meth:`BetaCompetence.update`); a
        success also marks it verified today. After a failure, retire-on-contradiction
        applies (see ``retire_below``). Names no longer active (retired meanwhile) are
        ignored.

        Returns
        -------
        list of str
            The skills retired by this report.
        """
        success = bool(success)
        _check_write(run_id, "")
        retired = []
        with self._writing():
            for name in dict.fromkeys(names):
                skill = self._skills.get(name)
                if skill is None:
                    continue
                a, b = self.competence.record(name, success)
                # a copy with the new counts, without Skill.__post_init__'s validation of the
                # text, which they cannot change (record() gives floats, as it leaves them)
                new = object.__new__(Skill)
                d = new.__dict__
                d.update(skill.__dict__)
                d["a"], d["b"] = a, b
                if success:
                    d["successes"] = skill.successes + 1
                    d["last_verified"] = self._today_text()
                else:
                    d["failures"] = skill.failures + 1
                memo = self._cleaned
                known = memo.get(id(skill)) is skill
                if known:   # same text: not scanned again
                    # the copy replaces the skill in the memo: an outcome's skill is held
                    # by the library alone, and the memo does not keep every one alive
                    del memo[id(skill)]
                    if skill.extra or skill.extra_metadata:
                        self._mark_clean(new)
                    else:   # (_mark_clean's common case, without the call)
                        memo[id(new)] = new
                        if len(memo) > self._cleaned_limit:
                            self._mark_clean(new)
                if self.log_outcomes:
                    self._commit("outcome", new, run_id, "success" if success else "failure",
                                 content=False)
                else:
                    if not known:
                        new = self._clean(new)
                    self.backend.write(new, content=False, log=False)
                    # the estimator holds (a, b): they were read from it just now, unless
                    # the net changed the skill (then its numbers are still a, b)
                    self._place(new, posterior_held=True)
                why = None if success else retirement_reason(
                    a, b, new.uses, self.retire_below, self.retire_min_uses)
                if why is not None:
                    self.retire(name, run_id, why)
                    retired.append(name)
        return retired

    # ------------------------------------------------------------------ approval queue
    def stage(self, skill: Skill, run_id: str = "", provenance: Iterable[str] = (),
              reason: str = "") -> PendingItem:
        """Stage a proposal for approval instead of writing it; its destination (the
        skill name) is fixed now."""
        if not isinstance(skill, Skill):
            raise ConfigError("skill", skill, "must be a Skill")
        _check_write(run_id, reason)
        with self._writing():
            self._staged += 1
            taken = set(self.backend.pending_numbers())
            while self._staged in taken:
                self._staged += 1
            prov = tuple(dict.fromkeys(provenance))
            skill = _evolve(skill, trust="untrusted", source_run=skill.source_run or run_id,
                            provenance=tuple(dict.fromkeys(skill.provenance + prov)))
            skill = self._clean(skill)
            clean = self._net.values({"provenance": list(prov), "reason": reason})
            now = self._read_clock()
            item = PendingItem(f"p{self._staged:04d}", skill.name, skill, run_id,
                               self._now(now), tuple(clean["provenance"]), clean["reason"])
            self.backend.put_pending(item)
            self._log("stage", item.dest, run_id, f"{item.id}: {reason}".rstrip(": "),
                      now=now)
            return item

    def propose(self, skill: Skill, run_id: str = "", provenance: Iterable[str] = (),
                require_approval: bool = True, reason: str = "") -> AddResult | PendingItem:
        """Write a trusted proposal (create, or patch if the name exists); stage an
        untrusted one (provenance with tool output, web pages or user files) when
        ``require_approval``."""
        provenance = tuple(provenance)
        _check_write(run_id, reason)
        if require_approval and is_untrusted(provenance):
            return self.stage(skill, run_id, provenance, reason)
        changes = {}
        prov = tuple(dict.fromkeys(skill.provenance + provenance))
        if prov != skill.provenance:
            changes["provenance"] = prov
        if is_untrusted(provenance) and skill.trust != "untrusted":
            changes["trust"] = "untrusted"
        if changes:   # (a skill's own provenance, again, and its trust: the same skill)
            skill = _evolve(skill, **changes)
        return self._upsert(skill, run_id, reason, "create")

    def _upsert(self, skill: Skill, run_id: str, reason: str, op: str) -> AddResult:
        with self._writing():
            if skill.name in self._skills:
                old = self._skills[skill.name]
                # status and today's date (date.isoformat's own text: valid) and, kept from
                # the active skill, whose values were checked when it was made, its dates
                # and counts: set as they are (the same skill as _evolve gives)
                new = _copy_skill(skill)
                put = object.__setattr__
                put(new, "status", "active")
                put(new, "last_verified", self._today_text())
                for f in ("created", "successes", "failures", "a", "b"):
                    put(new, f, getattr(old, f))
                new = self._commit(op if op != "create" else "patch", new, run_id, reason)
                return AddResult(new)
            return self.add(skill, run_id, reason, op=op)

    def pending(self) -> list[PendingItem]:
        """Staged proposals, oldest first."""
        return self.backend.pending()

    def _pending_item(self, pid: str) -> PendingItem:
        for item in self.pending():
            if item.id == pid:
                return item
        raise ConfigError("id", pid, "no pending proposal with this id")

    def approve(self, pid: str, reason: str = "approved") -> AddResult:
        """Write a staged proposal to its fixed destination (trust becomes ``approved``).

        The change is recorded under the run that proposed it, so :meth:`undo_run` of that
        run also reverts it.

        Raises
        ------
        ConfigError
            Unknown id, or a pending record whose skill name differs from its destination.
        """
        with self._writing():
            item = self._pending_item(pid)
            if item.skill.name != item.dest:
                raise ConfigError("dest", item.skill.name,
                                  f"pending {pid} was staged for {item.dest!r}")
            skill = _evolve(item.skill, trust="approved")
            result = self._upsert(skill, item.run_id, f"{pid}: {reason}", "approve")
            self.backend.drop_pending(pid)
            return result

    def reject(self, pid: str, reason: str = "rejected") -> PendingItem:
        """Drop a staged proposal (recorded in the history).

        Raises
        ------
        ConfigError
            Unknown id.
        """
        with self._writing():
            item = self._pending_item(pid)
            self.backend.drop_pending(pid)
            self._log("reject", item.dest, item.run_id, f"{pid}: {reason}")
            return item

    # ------------------------------------------------------------------ history
    def history(self, name: str | None = None, run_id: str | None = None) -> list[HistoryEntry]:
        """The change log, oldest first, optionally for one skill and/or one run."""
        out = []
        for h in self.backend.history():
            if (name is None or h["name"] == name) and (run_id is None or h["run_id"] == run_id):
                change = {k: h[k] for k in ("loc_before", "loc_after", "file", "diff",
                                            "sha_after", "book_before", "book_after") if k in h}
                out.append(HistoryEntry(h["seq"], h["time"], h["op"], h["name"], h["run_id"],
                                        h["reason"], h.get("before"), h.get("after"), change))
        return out

    def undo_run(self, run_id: str, force: bool = False) -> list[str]:
        """Revert everything run ``run_id`` wrote: each skill it changed goes back to its
        state before the run's first change (files byte for byte), and proposals it staged
        are dropped. The undo itself is logged (run id ``undo:<run_id>``).

        Parameters
        ----------
        run_id : str
        force : bool
            Revert even skills that later runs changed after this one (their later
            changes are lost). Without it such a conflict raises.

        Returns
        -------
        list of str
            Names of the skills reverted, sorted.

        Raises
        ------
        ConfigError
            ``run_id`` wrote nothing, or (without ``force``) later changes conflict.
        """
        if not isinstance(run_id, str) or not run_id:
            raise ConfigError("run_id", run_id, "must be a non-empty string")
        with self._writing():
            recs = self.backend.history()
            if not any(h["run_id"] == run_id for h in recs):
                raise ConfigError("run_id", run_id, "no change in the history has this run id")
            first: dict[str, int] = {}
            last: dict[str, dict] = {}
            for h in recs:
                if h["run_id"] != run_id or h["op"] in ("stage", "reject"):
                    continue
                first.setdefault(h["name"], h["seq"])
                last[h["name"]] = h
            conflicts = [n for n in sorted(first) if not self.backend.matches(n, last[n])]
            if conflicts and not force:
                raise ConfigError("run_id", run_id, "skills changed by later runs: "
                                  f"{', '.join(conflicts)} (use force to revert anyway)")
            # every file the undo reads is read (a damaged one raises) before it changes one
            staged = [item for item in self.pending() if item.run_id == run_id]
            for name in sorted(first):
                chain = [h for h in recs if h["name"] == name and h["seq"] >= first[name]
                         and h["op"] not in ("stage", "reject")]
                skill, change = self.backend.revert(name, chain[::-1], clean=self._net.values)
                self._place(skill, name)
                self._log("undo", name, f"undo:{run_id}", f"reverted run {run_id}", change)
            for item in staged:
                self.backend.drop_pending(item.id)
                self._log("reject", item.dest, f"undo:{run_id}",
                          f"{item.id}: run {run_id} undone")
            return sorted(first)
