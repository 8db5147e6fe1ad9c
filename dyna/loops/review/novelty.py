"""Novelty: how close a proposal's lesson is to a stored skill or memory fact.

Similarity is 1 for the same fact (:func:`dyna.loops._text.fact_key`), else the Jaccard
similarity of content words. A stored skill's features are remembered by its texts
(:func:`_skill_features`), and the rows of a library state by the tuple of its skills,
so a review's two comparisons (validate, grade) read them once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

from dyna.loops._text import (
    FEATURE_CACHE_SIZE,
    TextFeatures,
    content_words,
    jaccard,
    text_features,
)
from dyna.loops.memory import MemoryEntry, MemorySnapshot, MemoryStore
from dyna.loops.review.proposal import Proposal
from dyna.loops.skills import Skill, SkillLibrary, SkillSnapshot

__all__ = ["closest", "memory_of", "skills_of"]


@lru_cache(maxsize=FEATURE_CACHE_SIZE)
def _skill_features(description: str, body: str, actions: tuple[str, ...]
                    ) -> tuple[TextFeatures, TextFeatures, frozenset]:
    """Features of a skill's description, of description + body, and its content words
    (description, body and actions), memoised by the texts themselves: a skill whose text
    changes is looked up under its new text, so the cache cannot go stale."""
    return (text_features(description), text_features(" ".join([description, body])),
            frozenset(content_words(" ".join([description, body, " ".join(actions)]))))


#: The rows of :func:`closest` for the last tuple of skills it was given (a library's
#: active skills by name, :meth:`SkillLibrary._active_by_name`: a new tuple after every
#: change), so a review's two comparisons (validate, grade) read the features once. One
#: entry; the tuple is held, so its identity cannot pass to another one.
_LAST_ROWS: tuple = ((), [])

#: Rows of :func:`_skill_row` by skill object (``id`` -> row; the row holds the skill, so
#: the id cannot pass to another object while it is here): after a library change, the
#: skills that did not change keep their rows. Emptied past :data:`_ROW_OF_MAX` entries.
_ROW_OF: dict[int, tuple] = {}
_ROW_OF_MAX = 4096


def _skill_rows(skills) -> list:
    """``(skill, description, body, actions, (description features, description + body
    features), words)`` per stored skill, in the given order; a remembered row is used
    only while its skill still holds those very texts (a skill changed in place is
    looked up again)."""
    global _LAST_ROWS
    last = _LAST_ROWS
    if type(skills) is tuple and last[0] is skills:
        rows = last[1]
        for i, (s, d, b, a, _, _) in enumerate(rows):
            if s.description is not d or s.body is not b or s.actions is not a:
                rows[i] = _skill_row(s)
        return rows
    memo = _ROW_OF
    rows = []
    for s in (skills.values() if isinstance(skills, Mapping) else skills):
        row = memo.get(id(s))
        if (row is None or row[0] is not s or row[1] is not s.description
                or row[2] is not s.body or row[3] is not s.actions):
            row = memo[id(s)] = _skill_row(s)
        rows.append(row)
    if len(memo) > _ROW_OF_MAX:
        memo.clear()
    if type(skills) is tuple:
        _LAST_ROWS = (skills, rows)
    return rows


def _skill_row(s: Skill) -> tuple:
    """The row of one stored skill (see :func:`_skill_rows`)."""
    d, b, a = s.description, s.body, s.actions
    desc, desc_body, words = _skill_features(d, b, a)
    return (s, d, b, a, (desc, desc_body), words)


def closest(proposal: Proposal, skills, memory, same_parts: bool = False) -> tuple[float, str]:
    """Highest similarity of the proposal's lesson to a stored skill or memory, and what.

    Similarity is 1 for the same fact (:func:`dyna.loops._text.fact_key`), else the
    Jaccard similarity of content words; with ``same_parts`` only lessons with the same
    concrete parts (numbers, names, files) count, since those are different facts however
    alike their words.
    Each stored text's key, parts and words come from :func:`text_features` (memoised).
    The first of equally close lessons (skills in the order given, then facts) is named.
    """
    mine = text_features(proposal.lesson_text())
    words, key = mine.words, mine.key
    parts = mine.parts if same_parts else None
    best, what = 0.0, ""
    for s, _, _, _, features, s_words in _skill_rows(skills):
        for f in features:
            if f.key == key:
                sim = 1.0
            elif parts is not None and f.parts != parts:
                continue                      # a different fact: never the closest
            else:
                sim = jaccard(words, s_words)
            if sim > best:
                best, what = sim, f"skill {s.name}"
    for e in memory:
        f = text_features(e.text)
        if f.key == key:
            sim = 1.0
        elif parts is not None and f.parts != parts:
            continue
        else:
            sim = jaccard(words, f.words)
        if sim > best:
            best, what = sim, f"memory {e.text!r}"
    return best, what


def skills_of(skills):
    """The stored skills :func:`closest` compares with: a mapping, or a library's active
    skills sorted by name (remembered until the library changes)."""
    if isinstance(skills, (SkillLibrary, SkillSnapshot)):
        return skills.skills if isinstance(skills, SkillSnapshot) else \
            skills._active_by_name()
    return skills or {}


def memory_of(memory) -> Sequence[MemoryEntry]:
    """The stored facts :func:`closest` compares with: a store's or a snapshot's entries,
    or the given sequence."""
    if isinstance(memory, (MemoryStore, MemorySnapshot)):
        return tuple(memory)
    return memory or ()
