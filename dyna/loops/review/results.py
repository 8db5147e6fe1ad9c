"""What a review and an episode leave behind: the decision on each proposal, the
learning cost, the review's result, the episode's context and its ledger record."""

from __future__ import annotations

from dataclasses import dataclass

from dyna.loops.memory import MemorySnapshot
from dyna.loops.review.proposal import Proposal
from dyna.loops.review.safeguards import Grade
from dyna.loops.skills import Match, SkillSnapshot

__all__ = ["Decision", "EpisodeContext", "EpisodeRecord", "LearningCost", "ReviewResult"]


@dataclass(frozen=True)
class Decision:
    """What happened to one proposal: ``action`` is ``committed``, ``staged``,
    ``invalid``, ``rejected`` (grade), ``dropped`` (over ``max_lessons``) or ``refused``
    (a reviewer's tool call that never became a proposal, :attr:`ReviewerOutput.refused`).

    Attributes
    ----------
    proposal : Proposal
        As decided on: its provenance includes the run's untrusted sources
        (:meth:`Digest.taint`).
    action : str
        One of the above.
    detail : str
        ``committed``: what the store did (``"written"``, ``"evicted NAME"``, ``"added"``,
        ``"superseded"``, ...); ``staged``: the pending id (``p0001`` a skill, ``m0001`` a
        fact), then ``": "`` and the reason when it is not only untrusted provenance;
        ``invalid``: the validation reasons joined by ``"; "``; ``rejected``: the grade's
        reason.
    grade : Grade or None
        None when the proposal was not graded (``invalid``, ``dropped``, ``refused``).
    """

    proposal: Proposal
    action: str
    detail: str = ""
    grade: Grade | None = None


@dataclass(frozen=True)
class LearningCost:
    """Learning cost of one review, apart from the run's own cost.

    Attributes
    ----------
    reviewer_tokens : int
    grading_calls : int
        Proposals graded.
    prompt_tokens, completion_tokens : int
        The reviewer's split of ``reviewer_tokens``, when it reports one (a model does).
    turns : int
        Requests the reviewer made to its model (0 for a rule-based reviewer).
    seconds : float
        Wall-clock seconds of the review (reported, never part of a results table).
    """

    reviewer_tokens: int = 0
    grading_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    turns: int = 0
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        """``reviewer_tokens`` (what :attr:`EpisodeRecord.learning_tokens` records)."""
        return self.reviewer_tokens


@dataclass(frozen=True)
class ReviewResult:
    """Outcome of reviewing one run: ``status`` is ``reviewed``, ``skipped`` (policy),
    ``incomplete`` (the reviewer ran out of budget, was rate-limited or timed out) or
    ``failed`` (the reviewer raised or its endpoint kept failing; logged, never raised to
    the run).

    Attributes
    ----------
    run_id : str
    status : str
        One of the above.
    reason : str
        ``"N proposals"``, the policy's reason for ``skipped``, or the error / the
        reviewer's reason.
    decisions : tuple of Decision
        One per proposal (and per refused tool call), in the reviewer's order; empty
        unless ``reviewed`` or ``incomplete``.
    cost : LearningCost
        This review's learning cost (zero when skipped).
    """

    run_id: str
    status: str
    reason: str = ""
    decisions: tuple[Decision, ...] = ()
    cost: LearningCost = LearningCost()


@dataclass(frozen=True)
class EpisodeContext:
    """What an episode starts with: matched skills and the memory snapshot.

    Attributes
    ----------
    run_id, task : str
    skills : tuple of Match
        Skills to inject (at most ``match_limit``).
    memory : MemorySnapshot
    skill_snapshot : SkillSnapshot
        The library as the run started.
    """

    run_id: str
    task: str
    skills: tuple[Match, ...]
    memory: MemorySnapshot
    skill_snapshot: SkillSnapshot

    @property
    def active_lessons(self) -> int:
        """Lessons in effect: injected skills plus memory facts."""
        return len(self.skills) + len(self.memory)


@dataclass
class EpisodeRecord:
    """One episode in the learning ledger (:attr:`LearningLoop.records`).

    Attributes
    ----------
    run_id : str
    success : bool or None
        The run's outcome as the digest gave it.
    tokens, steps : int
        The run's own cost, as the digest gave it (never changed by its review).
    active_lessons : int
        Skills injected plus memory facts the run saw.
    learning_tokens : int
        The review's tokens, filled in when the review ends (also for a background
        review; 0 until then and when skipped).
    review : ReviewResult or None
        None until the review ends (background) or when none was started.
    retired : tuple of str
        Skills the episode's outcome reports retired on contradiction.
    retired_facts : tuple of str
        Memory facts (their texts) the episode's outcome retired on contradiction.
    """

    run_id: str
    success: bool | None
    tokens: int
    steps: int
    active_lessons: int
    learning_tokens: int = 0
    review: ReviewResult | None = None
    retired: tuple[str, ...] = ()
    retired_facts: tuple[str, ...] = ()
