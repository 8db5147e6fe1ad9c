"""Novelty: how close a proposal's lesson is to a stored skill or memory fact.

Similarity is 1 for the same fact (:func:`dyna.loops._text.fact_key`), else the Jaccard
similarity of content words, as an exact ratio of counts so that a threshold decision on it
keeps its tie rule (:mod:`dyna.ties`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from dyna.loops._text import TextFeatures, content_words, jaccard_ratio, text_features
from dyna.loops.memory import MemoryEntry, MemorySnapshot, MemoryStore
from dyna.loops.review.proposal import Proposal
from dyna.loops.skills import SkillLibrary, SkillSnapshot

__all__ = ["closest", "memory_of", "skills_of"]


def _skill_features(description: str, body: str, actions: tuple[str, ...]
                    ) -> tuple[TextFeatures, TextFeatures, frozenset]:
    """Features of a skill's description, of description + body, and its content words
    (description, body and actions)."""
    return (text_features(description), text_features(" ".join([description, body])),
            frozenset(content_words(" ".join([description, body, " ".join(actions)]))))


def closest(proposal: Proposal, skills, memory,
            same_parts: bool = False) -> tuple[Fraction, str]:
    """Highest similarity of the proposal's lesson to a stored skill or memory, and what.

    Similarity is 1 for the same fact (:func:`dyna.loops._text.fact_key`), else the
    Jaccard similarity of content words (:func:`dyna.loops._text.jaccard_ratio`, an exact
    :class:`fractions.Fraction` in [0, 1]; 0 and ``""`` when nothing is stored); with
    ``same_parts`` only lessons with the same concrete parts (numbers, names, files)
    count, since those are different facts however alike their words.
    Each stored text's key, parts and words come from :func:`text_features` (memoised).
    The first of equally close lessons (skills in the order given, then facts) is named.
    """
    mine = text_features(proposal.lesson_text())
    words, key = mine.words, mine.key
    parts = mine.parts if same_parts else None
    best, what = Fraction(0), ""
    for s in (skills.values() if isinstance(skills, Mapping) else skills):
        desc, desc_body, s_words = _skill_features(s.description, s.body, s.actions)
        for f in (desc, desc_body):
            if f.key == key:
                sim = Fraction(1)
            elif parts is not None and f.parts != parts:
                continue                      # a different fact: never the closest
            else:
                sim = jaccard_ratio(words, s_words)
            if sim > best:
                best, what = sim, f"skill {s.name}"
    for e in memory:
        f = text_features(e.text)
        if f.key == key:
            sim = Fraction(1)
        elif parts is not None and f.parts != parts:
            continue
        else:
            sim = jaccard_ratio(words, f.words)
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
