"""Mem0 as in its paper (Chhikara et al. 2025): ADD, UPDATE, DELETE or NONE."""

from __future__ import annotations

import heapq

from dyna.agents.baselines.common import Knowledge, RunRecord
from dyna.agents.baselines.mem0 import Fact, Mem0
from dyna.loops._text import jaccard


class Mem0V2(Mem0):
    """Mem0 as in its paper (Chhikara et al. 2025, arXiv 2504.19413) and its library
    before the v3 pipeline: extract, then compare each fact with its most similar
    memories and ADD, UPDATE, DELETE or NONE.

    When it writes
        Every interaction (every run, whatever its outcome): an extraction call and, when
        facts were extracted, an update call (the library's two LLM calls per ``add``): 2 x
        ``tokens_per_review`` per run.
    Extraction
        Per call of the run, in order: an ok call at step k gives the fact "<key> step k
        call is <tool> with <value>" (one memory names the step's tool and value together:
        the audit prescribes whole calls); a call that errored at step k gives the
        contradiction "that call is wrong at step k".
    Update (the simulated LLM over the fact's 5 most similar memories, the library's
        ``vector_store.search(query=new_mem, top_k=5)``)
        Similarity of two facts: ``4 x`` the Jaccard similarity of their keys' words, ``+
        2`` for the same step, ``+ 0.5`` each for the same tool and the same value; ties
        the most recent. The memories of the same key and step (score >= 6) always rank
        above every other (< 6), and only they can decide, so only they are looked up.
        NONE when one of them is the same fact; UPDATE the first of them (it names another
        call: text replaced, write time renewed); ADD when there is none. A contradiction
        DELETEs the one among them that names the erring call, and is NONE otherwise.
    Retrieval
        Search top-k 20 by similarity (cosine of the memory's words, key, tool and value,
        with the task's content words; ties the most recent), no threshold (the
        library's default ``threshold=None``; its default ``top_k`` is 100, 20 is
        ../shared/BASELINES.md's figure, :attr:`TOP_K`). The memories about the task give
        :attr:`Knowledge.values` / :attr:`Knowledge.tools` per step (the first in rank
        wins), the others count as irrelevant. No storage cap.
    """

    name = "mem0_v2"
    #: Memories an extracted fact is compared with.
    COMPARE_K = 5

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        self._slots: dict[tuple, list] = {}    # (key, step) -> its memories

    @staticmethod
    def similarity(a: Fact, b: Fact) -> float:
        """How similar two facts are (class docstring)."""
        return (4.0 * jaccard(frozenset(a.key), frozenset(b.key)) + 2.0 * (a.step == b.step)
                + 0.5 * (a.call[0] == b.call[0]) + 0.5 * (a.call[1] == b.call[1]))

    def _similar(self, fact: Fact) -> list[Fact]:
        """The fact's most similar memories that can decide: those of its key and step
        among its top 5 (best first)."""
        slot = self._slots.get((fact.key, fact.step), [])
        return heapq.nsmallest(self.COMPARE_K, slot,
                               key=lambda m: (-self.similarity(m, fact), -m.t))

    def learn(self, run: RunRecord) -> int:
        key = self.key(run.task)
        tokens = self.tokens_per_review                     # the extraction call
        facts = self._facts(run)
        if not key or not facts:
            return tokens
        tokens += self.tokens_per_review                    # the update call
        for pos, call, err in facts:
            here = self._similar(Fact(key, pos, call, 0))
            if err:
                hit = next((m for m in here if m.call == call), None)
                if hit is None:
                    self.ops["NONE"] += 1
                else:
                    self.memories.remove(hit)
                    self._slots[(key, pos)].remove(hit)
                    self.ops["DELETE"] += 1
            elif any(m.call == call for m in here):
                self.ops["NONE"] += 1
            elif here:
                here[0].call, here[0].t = call, self._tick()
                self.ops["UPDATE"] += 1
            else:
                fact = Fact(key, pos, call, self._tick())
                self.memories.append(fact)
                self._slots.setdefault((key, pos), []).append(fact)
                self.ops["ADD"] += 1
        return tokens

    def knowledge(self, task: str, *, task_instance: int) -> Knowledge:
        words = self._words(task)
        got = self.search(task)
        k = Knowledge(entries=len(got))
        for m in got:
            if self._about(m.key, words):
                t, v = self._ix(m.call)
                k.tools.setdefault(m.step, t)
                k.values.setdefault(m.step, v)
            else:
                k.irrelevant += 1
        return k
