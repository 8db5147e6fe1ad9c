"""Matching skills to a situation: whole-word trigger phrases first, then BM25 over the
descriptions of skills without triggers, with dating (suspect skills score less).

:class:`SkillMatcher` holds the matching that :class:`SkillSnapshot` (a frozen view) and
:class:`dyna.loops.skills.library.SkillLibrary` share.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from dyna.errors import ConfigError, check_range, check_time
from dyna.loops._text import identity_text, tokenize
from dyna.loops.bm25 import BM25Index, document_terms, query_terms
from dyna.loops.skills.fields import MAX_DESCRIPTION
from dyna.loops.skills.names import folded_name
from dyna.loops.skills.record import Skill

__all__ = ["Match", "MatchIndex", "SkillMatcher", "SkillSnapshot"]


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
    mentions such as "Do NOT use for PDFs" left out). Only the first
    :data:`~dyna.loops.skills.fields.MAX_DESCRIPTION` (1,024) characters of a description
    are indexed: a longer one (the specification's limit, loaded leniently with a warning)
    cannot outrank a short relevant description by listing more words. BM25's length
    normalisation (``b``) already discounts each term of a long description; the cap
    bounds how many terms it can match at all.
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
            # (a description over the limit, loaded with a warning, is indexed up to it)
            self._bm25.add(name, document_terms(name, skill.description[:MAX_DESCRIPTION]))
            self._keys[name] = None
            return
        tset = []
        for trig in skill.triggers:
            toks, glue = tokenize(trig)
            weight = float(max(1, sum(1 for t in toks if t[0].isalnum() or t[0] == "_")))
            tset.append((identity_text(trig), toks, glue, weight))
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


class SkillMatcher:
    """Matching over ``_skills`` (active skills by name) and ``_index`` (their
    :class:`MatchIndex`): the part a library and its snapshots share. A subclass sets
    ``_skills``, ``_index``, ``max_age_days``, ``suspect_factor`` and ``_clock``."""

    _skills: Mapping[str, Skill]
    _index: MatchIndex
    max_age_days: float | None
    suspect_factor: float
    _clock: Callable[[], _dt.datetime]

    def __len__(self) -> int:
        """Number of active skills."""
        return len(self._skills)

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
        """The clock's time, checked to be a timezone-aware :class:`datetime.datetime`, in
        UTC (:func:`dyna.errors.check_time`), so :meth:`today` is the UTC date.

        Raises
        ------
        ConfigError
            ``clock`` returned something else (its type is named) or a naive datetime.
        """
        return check_time("clock", self._clock())

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
            (ascending), so ties are broken the same way in every run.
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
        return [Match(name, -neg, tuple(sorted(matched)) if tier == 0 else matched, suspect,
                      skills[name], tier == 0)
                for tier, neg, name, suspect, matched in best]


class SkillSnapshot(SkillMatcher):
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
        """The active skills at snapshot time, keyed by their stored names (read-only; a
        lookup that folds the name as a library does is :meth:`get`)."""
        return self._skills

    def stored_name(self, name) -> str | None:
        """The name under which the snapshot holds the active skill called ``name``, compared
        as a library compares names (:func:`dyna.loops.skills.names.folded_name`: the exact
        spelling, else the first stored name in sorted order that folds like it, NFKC and
        case-folded); None if there is none."""
        return folded_name(name, self._skills)

    def get(self, name: str) -> Skill | None:
        """The active skill called ``name`` as the snapshot was taken, compared after folding
        (:meth:`stored_name`: ``"Ｄeploy"`` finds ``deploy``); None if there is none."""
        name = self.stored_name(name)
        return None if name is None else self._skills[name]

    def __contains__(self, name) -> bool:
        """Whether the snapshot holds an active skill called ``name`` (compared after
        folding)."""
        return self.stored_name(name) is not None

