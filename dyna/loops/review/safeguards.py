"""The safeguards a proposal passes before it is written: :func:`validate` (kind, format
and size, secrets, a path-safe name, workflow actions, novelty) and :func:`grade` (a score
for specificity, novelty and agreement with stored learning)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from dyna.errors import ConfigError
from dyna.loops._text import (
    CODE_RE,
    COMMAND_RE,
    FEATURE_CACHE_SIZE,
    concrete_parts,
    is_concrete,
)
from dyna.loops.memory import MemoryEntry, MemoryStore, relation
from dyna.loops.provenance import mixed_scripts, skeleton
from dyna.loops.review.config import LoopConfig
from dyna.loops.review.digest import has_secret
from dyna.loops.review.novelty import closest, memory_of, skills_of
from dyna.loops.review.proposal import KINDS, Proposal
from dyna.loops.skills import ACTION_RE, SkillLibrary, check_skill_name
from dyna.ties import at_least, weighted_sum_below

__all__ = ["AGREEMENT_WEIGHT", "CONTRADICTED_AGREEMENT", "NOVELTY_WEIGHT", "SPECIFICITY_WEIGHT",
           "Grade", "Validation", "accepted_without_novelty", "grade", "look_alike",
           "score_without_novelty", "specificity", "validate"]

_SHELL_RE = re.compile(r"[;|&$`<>(){}\\\s'\"]")

#: The weights of a grade's score: specificity, novelty and agreement (summing to 1), so a
#: vague lesson (specificity 0) scores at most ``NOVELTY_WEIGHT + AGREEMENT_WEIGHT``.
SPECIFICITY_WEIGHT = 0.6
NOVELTY_WEIGHT = 0.25
AGREEMENT_WEIGHT = 0.15
#: The agreement of a lesson that contradicts stored learning (1 otherwise).
CONTRADICTED_AGREEMENT = 0.5


@dataclass(frozen=True)
class Validation:
    """Result of :func:`validate`.

    Attributes
    ----------
    ok : bool
        The proposal may go on to :func:`grade`.
    reasons : tuple of str
        Why not (empty when ``ok``), e.g. ``"secret-looking value in body"``,
        ``"not novel: 0.83 similar to memory '...'"``.
    """

    ok: bool
    reasons: tuple[str, ...] = ()


def validate(proposal: Proposal, skills=None, memory=None,
             config: LoopConfig | None = None) -> Validation:
    """Check a proposal before it can be written.

    Checks: kind; format and size limits (a valid :class:`Skill` or
    :class:`MemoryEntry`, body at most ``config.max_body_chars``); a secret scan of every
    text field (``config.secret_scan``); a path-safe name in one script; a workflow made
    only of action names (no code, no shell) from ``config.allowed_actions`` when set;
    novelty against stored skills *and* memories (``config.novelty_check``: not novel when
    the similarity, an exact ratio of word counts, is at least ``config.novelty_threshold``;
    a similarity equal to the threshold is not novel).

    Parameters
    ----------
    proposal : Proposal
    skills : SkillLibrary, SkillSnapshot or Mapping[str, Skill], optional
    memory : MemoryStore, MemorySnapshot or sequence of MemoryEntry, optional
    config : LoopConfig, optional

    Returns
    -------
    Validation
    """
    config = config or LoopConfig()
    reasons: list[str] = []
    if proposal.kind not in KINDS:
        return Validation(False, (f"kind {proposal.kind!r} is not one of {KINDS}",))
    if config.secret_scan:
        for f in ("name", "description", "body", "text"):
            if has_secret(getattr(proposal, f)):
                reasons.append(f"secret-looking value in {f}")
        if any(has_secret(t) for t in proposal.triggers + proposal.actions):
            reasons.append("secret-looking value in triggers or actions")
    if proposal.kind == "memory":
        try:
            MemoryEntry(proposal.text)
            if "\n" in proposal.text.strip():
                reasons.append("a memory fact is one line")
        except ConfigError as exc:
            reasons.append(f"{exc.field}: {exc.reason}")
    else:
        try:
            check_skill_name(proposal.name)
        except ConfigError as exc:
            reasons.append(f"name {proposal.name!r} is not path-safe: {exc.reason}")
        else:
            mixed = mixed_scripts(proposal.name)
            if mixed:
                reasons.append(f"name {proposal.name!r} mixes the scripts "
                               f"{', '.join(mixed)}: a look-alike of another name")
            if len(proposal.body) > config.max_body_chars:
                reasons.append(f"body has {len(proposal.body)} characters > "
                               f"{config.max_body_chars}")
            if proposal.kind == "workflow":
                bad = [a for a in proposal.actions
                       if _SHELL_RE.search(a) or not ACTION_RE.fullmatch(a)]
                if bad or not proposal.actions:
                    reasons.append(f"workflow actions must be action names, got {bad or '[]'}")
                elif config.allowed_actions is not None:
                    extra = [a for a in proposal.actions if a not in config.allowed_actions]
                    if extra:
                        reasons.append(f"actions not allowed: {extra}")
            try:
                proposal.to_skill()
            except ConfigError as exc:
                reasons.append(f"{exc.field}: {exc.reason}")
    if config.novelty_check and not reasons:
        sim, what = closest(proposal, skills_of(skills), memory_of(memory), same_parts=True)
        if at_least(sim, config.novelty_threshold):      # exactly: a tie is not novel
            reasons.append(f"not novel: {float(sim):.2f} similar to {what}")
    return Validation(not reasons, tuple(reasons))


def look_alike(name: str, skills) -> str | None:
    """The name of a stored skill (active, or retired for a library) that ``name`` is a
    look-alike of: another name with the same confusable skeleton
    (:func:`dyna.loops.provenance.skeleton`, Unicode's confusables data), such as
    ``deploy-staging`` for ``deploy-stɑging`` or ``workflow`` for ``vvorkflow``; None when
    there is none (a skill called ``name`` itself is not a look-alike).

    Parameters
    ----------
    name : str
    skills : SkillLibrary, SkillSnapshot or Mapping[str, Skill], optional
    """
    if isinstance(skills, SkillLibrary):
        others = [s.name for s in skills.look_alikes(name)]
    else:
        key = skeleton(name)
        others = sorted(n for n in skills_of(skills) if skeleton(n) == key)
    return next((n for n in others if n != name), None)


@dataclass(frozen=True)
class Grade:
    """Result of :func:`grade`.

    Attributes
    ----------
    score : float
        ``SPECIFICITY_WEIGHT * specificity + NOVELTY_WEIGHT * novelty + AGREEMENT_WEIGHT
        * agreement`` (the module's weights), in [0, 1].
    specificity : float
        ``min(1, n / 2)`` with n the concrete parts, code spans and command lines named.
    novelty : float
        1 minus the highest similarity to a stored skill or memory (1 when the novelty
        check is off).
    agreement : float
        1, or :data:`CONTRADICTED_AGREEMENT` when it contradicts stored learning (a fact
        giving another value for
        the same attribute, :func:`dyna.loops.memory.relation` "conflict", or a skill of
        the same name retired as contradicted).
    accepted : bool
    reason : str
    """

    score: float
    specificity: float
    novelty: float
    agreement: float
    accepted: bool
    reason: str


def specificity(text: str) -> float:
    """``min(1, n / 2)``: n counts concrete parts, code spans and command lines."""
    return _specificity(text)


@lru_cache(maxsize=FEATURE_CACHE_SIZE)
def _specificity(text: str) -> float:
    """:func:`specificity`, remembered by text."""
    n = len(concrete_parts(text)) + len(CODE_RE.findall(text)) + len(COMMAND_RE.findall(text))
    if n == 0 and is_concrete(text):
        n = 1
    return min(1.0, n / 2.0)


def grade(proposal: Proposal, skills=None, memory=None,
          config: LoopConfig | None = None) -> Grade:
    """Score a proposal for specificity, novelty and agreement with existing learning.

    Below ``config.grade_threshold`` it is rejected with the reason (when
    ``config.grading`` is off everything is accepted, the score still reported); the
    weighted score is compared exactly (novelty as 1 minus the exact Jaccard ratio, not its
    float), and a score equal to the threshold passes. Grade
    only what :func:`validate` passed: grading does not look for secrets or bad names.

    Parameters
    ----------
    proposal : Proposal
    skills : SkillLibrary, SkillSnapshot or Mapping[str, Skill], optional
        Stored skills, for novelty (and, for a library, agreement with a skill of the
        same name retired as contradicted).
    memory : MemoryStore, MemorySnapshot or sequence of MemoryEntry, optional
        Stored facts, for novelty and agreement.
    config : LoopConfig, optional
        ``grading``, ``grade_threshold`` and ``novelty_check`` (defaults: on, 0.5, on).

    Returns
    -------
    Grade
        Scores in [0, 1]; see :class:`Grade` for the formula.
    """
    config = config or LoopConfig()
    text = proposal.lesson_text()
    spec = specificity(text)
    # the stored facts are read only where they count (novelty, a fact's agreement)
    store = memory if isinstance(memory, MemoryStore) else None
    mem = (memory_of(memory) if config.novelty_check
           or (proposal.kind == "memory" and store is None) else ())
    novelty = exact_novelty = 1.0
    if config.novelty_check:
        sim = closest(proposal, skills_of(skills), mem)[0]
        novelty, exact_novelty = 1.0 - float(sim), 1 - sim
    agreement = 1.0
    if proposal.kind == "memory" and (
            any(r == "conflict" for _, r in store.relations(proposal.text))
            if store is not None   # (a store compares only facts of the same subject)
            else any(relation(proposal.text, e.text) == "conflict" for e in mem)):
        agreement = CONTRADICTED_AGREEMENT
    if proposal.kind != "memory" and isinstance(skills, SkillLibrary):
        old = skills.get(proposal.name)
        if old is not None and not old.active and old.retired_reason.startswith("contradicted"):
            agreement = CONTRADICTED_AGREEMENT
    score = SPECIFICITY_WEIGHT * spec + NOVELTY_WEIGHT * novelty + AGREEMENT_WEIGHT * agreement
    detail = f"specificity {spec:.2f}, novelty {novelty:.2f}, agreement {agreement:.2f}"
    if config.grading and weighted_sum_below(_terms(spec, exact_novelty, agreement),
                                             config.grade_threshold):
        return Grade(score, spec, novelty, agreement, False,
                     f"score {score:.2f} < {config.grade_threshold} ({detail})")
    return Grade(score, spec, novelty, agreement, True, f"score {score:.2f} ({detail})")


def _terms(spec: float, novelty, agreement: float) -> tuple:
    """The grade's weighted terms ``(weight, value)``, as :func:`weighted_sum_below` takes
    them."""
    return ((SPECIFICITY_WEIGHT, spec), (NOVELTY_WEIGHT, novelty),
            (AGREEMENT_WEIGHT, agreement))


def accepted_without_novelty(g: Grade, threshold: float) -> bool:
    """Whether ``g`` would pass ``threshold`` with the novelty check off (novelty 1), the
    rest the same, decided exactly as :func:`grade` decides (a tie passes)."""
    return not weighted_sum_below(_terms(g.specificity, 1.0, g.agreement), threshold)


def score_without_novelty(g: Grade) -> float:
    """The score ``g`` would have with the novelty check off (novelty 1), the rest the
    same: how much the novelty term decided a verdict."""
    return g.score + NOVELTY_WEIGHT * (1.0 - g.novelty)
