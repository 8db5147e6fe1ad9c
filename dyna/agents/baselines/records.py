"""What the two memory-management regimes of Xiong et al. 2025 share: raw run records."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from dyna.agents.baselines.common import Knowledge, RunRecord, TaskBaseline


@dataclass
class Record:
    """One stored run: its task text's words and key, the calls by name, an id."""

    rid: int
    key: tuple
    words: frozenset
    calls: tuple


class Records(TaskBaseline):
    """Shared by the two memory-management regimes of Xiong et al.: records of runs,
    retrieved by task similarity."""

    #: Records retrieved per task (the released code's driving agent retrieves one).
    TOP_K = 1

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        self.records: dict[int, Record] = {}
        self._next = 0
        self._postings: dict[str, list] = {}   # word -> ids of the records that have it
        self._retrieved: tuple = (None, [])

    def _store(self, run: RunRecord, calls: tuple) -> None:
        rec = Record(self._next, self.key(run.task), self._words(run.task), calls)
        self.records[rec.rid] = rec
        for w in rec.words:
            self._postings.setdefault(w, []).append(rec.rid)
        self._next += 1

    def retrieve(self, task: str) -> list[Record]:
        """The top-k records by cosine of the task texts' content words, best first
        (ties: the most recent first; records sharing no word score 0)."""
        words = self._words(task)
        shared: dict[int, int] = {}
        for w in words:
            for rid in self._postings.get(w, ()):
                if rid in self.records:
                    shared[rid] = shared.get(rid, 0) + 1
        recs = self.records
        best = heapq.nsmallest(self.TOP_K, shared.items(), key=lambda x: (
            -x[1] / np.sqrt(len(recs[x[0]].words) * len(words)), -x[0]))
        got = [recs[rid] for rid, _ in best]
        if len(got) < self.TOP_K:                   # then the most recent others (score 0)
            for rid in reversed(recs):
                if rid not in shared:
                    got.append(recs[rid])
                    if len(got) == self.TOP_K:
                        break
        return got

    def knowledge(self, task: str, *, task_instance: int) -> Knowledge:
        words = self._words(task)
        got = self.retrieve(task)
        self._retrieved = (task, [r.rid for r in got])
        return Knowledge(calls=[list(self._ix_calls(r.calls)) for r in got], entries=len(got),
                         irrelevant=sum(not self._about(r.key, words) for r in got))

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(r.key), self._ix_calls(r.calls)) for r in self.records.values()]

    def size(self) -> int:
        return len(self.records)
