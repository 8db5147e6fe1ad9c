"""The review pipeline: what an agent learns from a finished run, and the safeguards.

    Digest -> Reviewer -> Proposal -> validate -> grade -> commit, or stage for approval

- :mod:`~dyna.loops.review.digest`: :class:`Digest`, the finished run, redacted
  (sensitive keys and secret-looking values become ``"[REDACTED]"``) with tool outputs
  cut to 200 characters.
- :mod:`~dyna.loops.review.config`: :class:`ReviewPolicy`, whether to review (outcome
  gate, minimum tool calls) and how (inline or in the background; a background review
  never blocks the run, a failing review never fails it, and a review cannot trigger
  another review); :class:`LoopConfig`, every safeguard as a switch, so experiments can
  ablate one at a time.
- :mod:`~dyna.loops.review.proposal`: :class:`Proposal`, a lesson drawn from a run.
- :mod:`~dyna.loops.review.reviewer`: :class:`Reviewer`, any object with
  ``review(digest, context)``; :class:`RuleBasedReviewer` is a deterministic one with
  knobs for experiments (how often it proposes, how specific its lessons are, how often
  it copies text from tool outputs).
- :mod:`~dyna.loops.review.safeguards` (with :mod:`~dyna.loops.review.novelty`):
  :func:`validate` and :func:`grade`: format, size, secrets, path-safe names, allowed
  workflow actions, novelty across skills *and* memories; a score for specificity,
  novelty and agreement.
- :mod:`~dyna.loops.review.loop`: :class:`LearningLoop` wires it all together and keeps
  the learning cost apart from the run's own cost (:mod:`~dyna.loops.review.results`:
  what a review and an episode leave behind).
- :mod:`~dyna.loops.review.impact`: :func:`impact_report` compares episodes before the
  first active lesson with episodes after, with intervals.
"""

from dyna.loops.review.config import GATES, MODES, LoopConfig, ReviewPolicy
from dyna.loops.review.digest import (
                                       OUTPUT_CHARS,
                                       REDACTED_MARK,
                                       Digest,
                                       ToolCall,
                                       has_secret,
)
from dyna.loops.review.impact import ImpactReport, impact_report
from dyna.loops.review.loop import LearningLoop
from dyna.loops.review.proposal import KINDS, Proposal
from dyna.loops.review.results import (
                                       Decision,
                                       EpisodeContext,
                                       EpisodeRecord,
                                       LearningCost,
                                       ReviewResult,
)
from dyna.loops.review.reviewer import (
                                       ReviewContext,
                                       Reviewer,
                                       ReviewerOutput,
                                       RuleBasedReviewer,
)
from dyna.loops.review.safeguards import Grade, Validation, grade, specificity, validate

__all__ = [
    "GATES", "KINDS", "MODES", "OUTPUT_CHARS", "REDACTED_MARK",
    "Decision", "Digest", "EpisodeContext", "EpisodeRecord", "Grade", "ImpactReport",
    "LearningCost", "LearningLoop", "LoopConfig", "Proposal", "ReviewContext", "ReviewPolicy",
    "ReviewResult", "Reviewer", "ReviewerOutput", "RuleBasedReviewer", "ToolCall",
    "Validation", "grade", "has_secret", "impact_report", "specificity", "validate",
]
