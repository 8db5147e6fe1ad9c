"""Selective addition with history-based deletion (Xiong et al. 2025)."""

from __future__ import annotations

from fractions import Fraction

from dyna.agents.baselines.common import RunRecord
from dyna.agents.baselines.records import Records
from dyna.ties import above


class SelectiveAddDelete(Records):
    """Selective addition with history-based deletion (Xiong et al. 2025, arXiv
    2505.16067, code: yuplin2333/agent_memory_manage ``main_strict.py`` and
    ``ExperienceMemory.find_worst_memory``): only good records are added; records whose
    reuse keeps leading to failures are deleted.

    When it writes
        A run is added (a raw record as in :class:`NaiveGrowth`: no LLM call, 0 tokens)
        only when it succeeded. The paper uses future task outcomes as labels (the
        "strict" evaluator compares with the ground truth), so the label is
        ``verified_success``. A success has no failing last call, so a record holds the
        calls that went through.
    When it deletes (the code's rule)
        Every task's outcome is recorded against the record it reused (``record_l2``);
        after the task (and after its own addition), when more than ``MIN_SIZE`` records
        are stored, the one record reused at least ``MIN_REUSES`` times whose mean outcome
        is worse than the success threshold, here a failure rate above ``MAX_FAILURE``
        (the ratio of counts compared exactly: a rate equal to it is not above),
        is deleted, the worst first (ties: the oldest); at most one per task. The values
        are the code's deletion settings (``DELETION_RETREIVAL_N_TIMES = 3``,
        ``DELETION_L2_THRESHOLD`` = the success threshold, ``MIN_MEMORY_SIZE = 1``). The
        code retrieves one record per task and credits the task's outcome to it, so the
        record retrieved for the run is the one reused, whether or not the run made its
        calls.
    Retrieval
        As :class:`NaiveGrowth`: the one most similar record by task text (the released
        code's k = 1).
    """

    name = "selective_add_delete"
    #: Reuses a record needs before it can be deleted.
    MIN_REUSES = 3
    #: Failure rate of its reuses above which a record can be deleted.
    MAX_FAILURE = 0.5
    #: No deletion while this few records (or fewer) are stored.
    MIN_SIZE = 1

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: Record id -> outcomes of the runs that reused it (True: failed).
        self.reuses: dict[int, list] = {}
        #: Records deleted after failed reuses.
        self.deleted = 0

    def learn(self, run: RunRecord) -> int:
        task, rids = self._retrieved
        self._retrieved = (None, [])
        if task == run.task:
            for rid in rids:
                if rid in self.records:
                    self.reuses.setdefault(rid, []).append(not run.verified_success)
        if run.verified_success:
            calls = self._ok_calls(run)
            if calls:
                self._store(run, calls)
        if len(self.records) > self.MIN_SIZE:
            worst = None
            for rid, outcomes in self.reuses.items():
                rate = Fraction(sum(outcomes), len(outcomes))    # exact: a tie is no worse
                if len(outcomes) >= self.MIN_REUSES and above(rate, self.MAX_FAILURE) and (
                        worst is None or rate > worst[0]):
                    worst = (rate, rid)
            if worst is not None:
                del self.records[worst[1]], self.reuses[worst[1]]
                self.deleted += 1
        return 0
