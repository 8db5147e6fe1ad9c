"""What the two Mem0 baselines share: facts from every interaction, top-k retrieval."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from dyna.agents.baselines.common import RunRecord, TaskBaseline, audit_step, cosine, steps


@dataclass
class Fact:
    """One memory: "<key> step k call is <tool> with <value>" (step 0-based here, 1-based
    in the text), ``t`` its write time (a counter; higher is more recent)."""

    key: tuple
    step: int
    call: tuple
    t: int

    @property
    def text(self) -> str:
        return (f"{' '.join(self.key)} step {self.step + 1} call is {self.call[0]} "
                f"with {self.call[1]}")

    @property
    def words(self) -> frozenset:
        """What the semantic similarity reads: the key words, the tool and the value."""
        return frozenset(self.key) | {self.call[0], self.call[1]}


class Mem0(TaskBaseline):
    """Shared by the two Mem0 styles: facts from every interaction, top-k retrieval."""

    #: Memories returned by a search (``top_k``).
    TOP_K = 20

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        self.memories: list[Fact] = []
        #: Operations decided, by kind (ADD, UPDATE, DELETE, NONE).
        self.ops: dict[str, int] = {"ADD": 0, "UPDATE": 0, "DELETE": 0, "NONE": 0}
        self._clock = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _facts(self, run: RunRecord) -> list:
        """``(step, named call, error)`` per call of the run, in order, and a planted
        instruction the extraction copied right after the call whose output carried it."""
        facts = [(pos, self._named(call), err) for pos, call, err in steps(run)]
        got = self._planted(run)
        if got is not None:
            i, pos, call = got
            facts.insert(i + 1, (pos, call, False))
        return facts

    def _semantic(self, words, limit: int) -> list[tuple[float, Fact]]:
        """The ``limit`` memories most similar to a bag of words (the vector search: a
        bag-of-words cosine; ties: the most recent first), with their scores."""
        best = heapq.nsmallest(limit, ((cosine(m.words, words), m) for m in self.memories),
                               key=lambda x: (-x[0], -x[1].t))
        return best

    def search(self, task: str) -> list[Fact]:
        """The memories retrieved for ``task``, best first."""
        return [m for _, m in self._semantic(self._words(task), self.TOP_K)]

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(m.key), audit_step(m.step, self._ix(m.call), self.env.length))
                for m in self.memories]

    def size(self) -> int:
        return len(self.memories)
