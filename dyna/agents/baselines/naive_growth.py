"""Naive memory growth (Xiong et al. 2025): every run is added."""

from __future__ import annotations

from dyna.agents.baselines.common import RunRecord
from dyna.agents.baselines.records import Records


class NaiveGrowth(Records):
    """Naive memory growth (Xiong et al. 2025, "How memory management impacts LLM
    agents", arXiv 2505.16067): every episode's run is added to the memory.

    When it writes
        Every episode: the run as a record keyed by its task text (its key words for the
        audit), its calls as the agent made them: per procedure position the call that
        went through, and for the position where the run stopped its last call, even
        when that call errored (a record of a failure is a record of what was done, so it
        repeats the failure). The record is the raw run, no LLM call: 0 learning tokens.
    Retrieval
        The one record whose task text is most similar to the new task's (bag-of-words
        cosine of content words; ties: the most recent), followed as a procedure
        (:attr:`TOP_K` = 1: the released code's driving agent retrieves one record). No
        cap: the memory grows with every episode (the code's "always add" setting,
        ``SUCCESS_L2_THRESHOLD = 99999``, no deletion).
    """

    name = "naive_growth"

    def learn(self, run: RunRecord) -> int:
        calls = list(self._ok_calls(run))
        if run.calls and run.calls[-1][2]:
            calls.append(self._named(run.calls[-1][0]))
        self._store(run, tuple(calls))
        return 0
