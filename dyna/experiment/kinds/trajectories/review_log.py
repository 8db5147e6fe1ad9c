"""Kind ``trajectories``: what an ``[llm]`` reviewer did, review by review and lesson by
lesson (the ``llm_reviews`` and ``llm_lessons`` tables).

Per review (one per recorded run the loop finished): its status (``reviewed``,
``incomplete``, ``failed``, or ``skipped`` by the loop's policy, e.g. the outcome gate),
the reason, turns, prompt and completion tokens, and seconds (the sum of the requests'
recorded seconds, so a replay gives the same numbers). Per lesson (every decision of a
review: committed, staged, invalid, rejected, dropped, or refused before it became a
proposal): the lesson text, the decision and its reason, and the verdicts of
:mod:`dyna.experiment.kinds.trajectories.lessons` (junk reason, quoting the digest,
misattributing a failure) and the harvested personal values it holds.
"""

from __future__ import annotations

from dyna.experiment.kinds.trajectories.lessons import (
    junk_reason,
    lesson_text,
    misattributes,
    quotes_digest,
)
from dyna.loops.trajectories import find_personal_values

__all__ = ["LESSON_COLUMNS", "REVIEW_COLUMNS", "ReviewLog", "reason_key"]

#: Columns of ``llm_reviews`` after ``variant``.
REVIEW_COLUMNS = ("run", "episode", "run_id", "success", "status", "reason", "turns",
                  "prompt_tokens", "completion_tokens", "seconds")
#: Columns of ``llm_lessons`` after ``variant``.
LESSON_COLUMNS = ("run", "episode", "run_id", "success", "kind", "lesson", "action",
                  "detail", "why", "junk", "quotes_digest", "misattributes", "personal")
_DETAIL_CHARS = 200


def reason_key(action: str, detail: str) -> str:
    """The kind of reason of a decision, for counting: its text up to the first ``:``,
    ``(`` or ``;`` (``"unknown_action"``, ``"duplicate"``), the grade's first clause for
    ``rejected``; "" for ``committed`` and ``staged``."""
    if action in ("committed", "staged"):
        return ""
    head = str(detail)
    for sep in (":", "(", ";", ","):
        head = head.split(sep, 1)[0]
    return head.strip()[:60]


class ReviewLog:
    """Rows of ``llm_reviews`` and ``llm_lessons`` for one replay of one variant.

    Parameters
    ----------
    run : int
        The run index (reviewer seed) of the replay.
    """

    def __init__(self, run: int):
        self.run = run
        self.reviews: list[dict] = []
        self.lessons: list[dict] = []

    def add(self, episode: int, trajectory, digest, result, seconds: float,
            shown: str, values) -> None:
        """Record one finished run.

        Parameters
        ----------
        episode : int
            1-based position in the replay.
        trajectory : dyna.loops.trajectories.TrajectoryRun
        digest : Digest
            What the loop handed the reviewer.
        result : ReviewResult or None
            The loop's review of the run.
        seconds : float
            Seconds the reviewer's requests took.
        shown : str
            The text the reviewer was shown (prompt, digest and tool schema).
        values : frozenset of str
            The run's harvested personal values.
        """
        base = {"run": self.run, "episode": episode, "run_id": trajectory.run_id,
                "success": bool(trajectory.success)}
        cost = getattr(result, "cost", None)
        self.reviews.append({
            **base, "status": "none" if result is None else result.status,
            "reason": "" if result is None else str(result.reason)[:_DETAIL_CHARS],
            "turns": getattr(cost, "turns", 0),
            "prompt_tokens": getattr(cost, "prompt_tokens", 0),
            "completion_tokens": getattr(cost, "completion_tokens", 0),
            "seconds": round(float(seconds), 3)})
        if result is None:
            return
        tools = sorted({c.name for c in digest.tool_calls})
        arg_names = sorted({k for c in digest.tool_calls for k in c.args})
        for dec in result.decisions:
            text = lesson_text(dec.proposal)
            self.lessons.append({
                **base, "kind": dec.proposal.kind, "lesson": text, "action": dec.action,
                "detail": str(dec.detail)[:_DETAIL_CHARS],
                "why": reason_key(dec.action, dec.detail),
                "junk": junk_reason(text, shown, tools, arg_names),
                "quotes_digest": quotes_digest(text, shown),
                "misattributes": misattributes(text, trajectory.success, tools),
                "personal": len(find_personal_values(text, values))})
