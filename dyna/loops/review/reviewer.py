"""Reviewers: what turns a run's digest into proposals. :class:`Reviewer` is the
protocol, :class:`RuleBasedReviewer` a deterministic one for experiments."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from dyna.errors import ConfigError, check_range
from dyna.loops._text import content_words
from dyna.loops.memory import MemorySnapshot
from dyna.loops.review.digest import Digest, ToolCall
from dyna.loops.review.proposal import KINDS, Proposal
from dyna.loops.skills import SkillSnapshot

__all__ = ["ReviewContext", "Reviewer", "ReviewerOutput", "RuleBasedReviewer"]


@dataclass(frozen=True)
class ReviewContext:
    """What a reviewer may look at besides the digest (read-only views).

    Attributes
    ----------
    skills : SkillSnapshot
        The library's active skills as the run started (or as the review starts).
    memory : MemorySnapshot
        The facts, likewise.
    max_lessons : int
        At most this many proposals are considered (later ones are ``dropped``).
    """

    skills: SkillSnapshot
    memory: MemorySnapshot
    max_lessons: int


@dataclass(frozen=True)
class ReviewerOutput:
    """A reviewer's answer: proposals (possibly none) and its token usage.

    A reviewer that talks to a model (:class:`dyna.loops.llm.LLMReviewer`) also says how
    the review ended and what it refused before anything became a proposal.

    Attributes
    ----------
    proposals : tuple of Proposal
    tokens : int
        Learning cost in tokens (prompt + completion).
    status : {"reviewed", "incomplete", "failed"}
        ``incomplete``: a budget (tokens, turns), rate limit or timeout ended the review
        early; ``failed``: the endpoint kept failing. Either way the run is unchanged.
    reason : str
        Why (empty: the loop writes the number of proposals).
    refused : tuple of Decision
        The reviewer's tool calls that could not become a proposal (action
        ``"refused"``, the reason first in ``detail``, e.g. ``malformed_arguments``).
    prompt_tokens, completion_tokens, turns : int
    seconds : float
        Wall-clock time of the review (never part of a results table).
    """

    proposals: tuple[Proposal, ...] = ()
    tokens: int = 0
    status: str = "reviewed"
    reason: str = ""
    refused: tuple = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    turns: int = 0
    seconds: float = 0.0


@runtime_checkable
class Reviewer(Protocol):
    """Turns a digest into proposals: any object with ``review(digest, context)``.

    ``review`` returns a :class:`ReviewerOutput` (proposals, tokens, how the review ended)
    or a sequence of :class:`Proposal`; an empty answer ("nothing learned") is valid. It
    sees only the redacted :class:`Digest` and the read-only :class:`ReviewContext`, and
    writes nothing: every proposal goes through :func:`validate` and :func:`grade` in
    :meth:`LearningLoop.review`, so a reviewer needs no safeguard of its own. Whatever it
    raises is caught by :meth:`LearningLoop.finish` (the review ends ``failed``, the run is
    unchanged). :class:`RuleBasedReviewer` is deterministic; :class:`dyna.loops.llm.LLMReviewer`
    asks an OpenAI-compatible chat-completions model.
    """

    def review(self, digest: Digest, context: ReviewContext):  # pragma: no cover - protocol
        """Proposals for ``digest``: a :class:`ReviewerOutput` or a sequence of
        :class:`Proposal` (empty: nothing learned)."""


def _slug(words: Sequence[str], prefix: str) -> str:
    """A skill name from ``prefix`` and ``words``: lowercase letters, digits and single
    hyphens, at most 64 characters (``prefix`` alone when nothing else is left)."""
    parts = [prefix] + [re.sub(r"[^a-z0-9]+", "-", w.casefold()).strip("-") for w in words]
    name = "-".join(p for p in parts if p)
    name = re.sub(r"-+", "-", name)[:64].strip("-")
    return name or prefix


class RuleBasedReviewer:
    """A deterministic reviewer for experiments.

    From a digest it can propose: a *skill* for a recovery (a tool call that failed and a
    later call of the same tool that worked), a *memory* fact (the arguments of the last
    successful call), and a *workflow* (the run's action sequence). Randomness comes from
    a generator seeded by ``(seed, crc32(run_id))``, so the same run gets the same answer
    in every process.

    Parameters
    ----------
    seed : int
    propose_rate : float
        Probability of proposing anything for a run, in [0, 1].
    specificity : float
        Probability that a lesson names the concrete tool and arguments; otherwise it is
        vague ("Retry tools that fail."), which grading rejects.
    copy_rate : float
        Probability that a lesson copies text from a tool output (its provenance then
        includes ``"tool_output"``, so it is untrusted).
    kinds : tuple of str
        Kinds it may propose, from ``("skill", "memory", "workflow")``.
    tokens_per_review : int
        Simulated reviewer cost, counted as learning cost.
    """

    def __init__(self, seed: int = 0, propose_rate: float = 1.0, specificity: float = 1.0,
                 copy_rate: float = 0.0, kinds: Sequence[str] = ("skill", "memory"),
                 tokens_per_review: int = 0):
        self.seed = check_range("seed", seed, 0, None, integer=True)
        self.propose_rate = float(check_range("propose_rate", propose_rate, 0.0, 1.0))
        self.specificity = float(check_range("specificity", specificity, 0.0, 1.0))
        self.copy_rate = float(check_range("copy_rate", copy_rate, 0.0, 1.0))
        for k in kinds:
            if k not in KINDS:
                raise ConfigError("kinds", k, f"must be among {KINDS}")
        self.kinds = tuple(kinds)
        self.tokens_per_review = check_range("tokens_per_review", tokens_per_review, 0, None,
                                             integer=True)

    def rng(self, run_id: str) -> np.random.Generator:
        """The generator used for ``run_id``."""
        return np.random.default_rng([self.seed, zlib.crc32(run_id.encode("utf-8"))])

    def review(self, digest: Digest, context: ReviewContext) -> ReviewerOutput:
        """Proposals for ``digest`` (see the class docstring); the same for the same
        ``(seed, run_id)`` in every process.

        Returns
        -------
        ReviewerOutput
            At most one proposal per kind in :attr:`kinds` (0-3), in the order skill,
            memory, workflow; ``tokens`` is ``tokens_per_review``.
        """
        rng = self.rng(digest.run_id)
        cost = self.tokens_per_review
        if rng.random() >= self.propose_rate:
            return ReviewerOutput((), cost)
        words = content_words(digest.task)[:2]
        triggers = tuple(words)
        out: list[Proposal] = []
        calls = digest.tool_calls
        ok_calls = [c for c in calls if not c.error]

        def copy(text: str, prov: tuple) -> tuple[str, tuple]:
            outputs = [c.output for c in calls if c.output]
            if outputs and rng.random() < self.copy_rate:
                return f"{text} Tool said: {outputs[-1][:80]}", prov + ("tool_output",)
            return text, prov

        def fmt(c: ToolCall) -> str:
            args = " ".join(f"{k}={v}" for k, v in sorted(c.args.items()))
            return f"`{c.name} {args}`".replace(" `", "`") if args else f"`{c.name}`"

        if "skill" in self.kinds:
            failed = next((c for c in calls if c.error), None)
            fix = next((c for c in reversed(ok_calls) if failed and c.name == failed.name),
                       None)
            if failed is not None and fix is not None:
                specific = rng.random() < self.specificity
                if specific:
                    desc = f"Recover when {failed.name} fails: call {fmt(fix)}"
                    body = f"If {fmt(failed)} fails, call {fmt(fix)} instead."
                else:
                    desc, body = "Retry tools that fail.", "Try again with other settings."
                body, prov = copy(body, ())
                out.append(Proposal("skill", _slug((failed.name,) + words, "recover"), desc,
                                    body, triggers or (failed.name,), provenance=prov))
        if "memory" in self.kinds and ok_calls:
            c = ok_calls[-1]
            specific = rng.random() < self.specificity
            text = (f"For {' '.join(words) or 'this task'}, {fmt(c)} works" if specific
                    else "Be careful with tools.")
            text, prov = copy(text, ())
            out.append(Proposal("memory", text=text, provenance=prov))
        if "workflow" in self.kinds and len(digest.actions) >= 2:
            out.append(Proposal("workflow", _slug(words, "flow"),
                                f"Run {' then '.join(digest.actions)} for "
                                f"{' '.join(words) or 'this task'}",
                                triggers=triggers or tuple(digest.actions[:1]),
                                actions=digest.actions))
        return ReviewerOutput(tuple(out), cost)
