"""Mem0 as its open-source library stands in April 2026: ADD with MD5 dedup, hybrid search."""

from __future__ import annotations

import hashlib

import numpy as np

from dyna.agents.baselines.common import Knowledge, RunRecord, steps
from dyna.agents.baselines.mem0 import Fact, Mem0
from dyna.loops.bm25 import BM25Index, document_terms, query_terms


def _bm25_params(n_terms: int) -> tuple[float, float]:
    """mem0's sigmoid ``(midpoint, steepness)`` for a query of ``n_terms`` terms
    (``mem0.utils.scoring.get_bm25_params``)."""
    for most, params in ((3, (5.0, 0.7)), (6, (7.0, 0.6)), (9, (9.0, 0.5)),
                         (15, (10.0, 0.5))):
        if n_terms <= most:
            return params
    return (12.0, 0.5)


class Mem0V3(Mem0):
    """Mem0 as its open-source library stands in April 2026 (the "v3 pipeline",
    mem0ai/mem0 a488e19 of 2026-04-14, ``Memory._add_to_vector_store`` and
    ``_search_vector_store``): additive memory with exact-hash dedup, hybrid search.

    When it writes
        Every interaction: the 10 memories most similar to the run's messages (the task
        text and the calls' tool and value names) are retrieved, then one extraction call
        (``tokens_per_review``) returns the facts: every ok call gives "<key> step k call
        is <tool> with <value>" (as :class:`Mem0V2`). A fact is ADDed unless the MD5 hash
        of its text is the hash of one of those 10 memories or of a fact already taken
        from this run (the code compares with the retrieved memories' hashes only, so a
        duplicate of a memory outside them is added again). Nothing is updated or
        deleted: conflicting facts coexist.
    Retrieval (the code's hybrid scoring)
        Candidates: the ``max(4 * top_k, 60)`` most similar memories (cosine of the
        memory's words and the task's content words), those under the semantic threshold
        0.1 dropped; BM25 (:class:`dyna.loops.bm25.BM25Index` over the memories' texts,
        stemmed: the code lemmatises) squashed by mem0's sigmoid for the query's length;
        score ``(semantic + bm25) / 2`` (``/ 1`` when no memory matches a query term);
        top-k 20. The code's entity boost needs named entities, which these texts do not
        have, so it is left out. Of the memories about the task, the most recent fact
        per step goes to :attr:`Knowledge.values` / :attr:`Knowledge.tools` and is also
        the first procedure of :attr:`Knowledge.calls`; each older coexisting fact for a
        step is a further procedure (the j-th most recent call per step in
        ``calls[j]``), so the agent gets every conflicting value, the newest first (it
        tries ``calls`` before facts, so the newest must lead there too). No storage
        cap.
    """

    name = "mem0_v3"
    #: Existing memories retrieved for an ``add`` (their hashes are the dedup set).
    ADD_CONTEXT_K = 10
    #: Minimum semantic score of a search result.
    THRESHOLD = 0.1

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        self.hashes: dict[int, str] = {}       # write time -> MD5 of the memory's text
        self._bm25 = BM25Index()

    @staticmethod
    def digest(text: str) -> str:
        """The MD5 hex digest a memory is deduplicated by."""
        return hashlib.md5(text.encode("utf-8")).hexdigest()

    def learn(self, run: RunRecord) -> int:
        key = self.key(run.task)
        if not key:
            return self.tokens_per_review
        said = set(self._words(run.task))
        for _, call, _ in steps(run):
            said.update(self._named(call))
        seen = {self.hashes[m.t] for _, m in self._semantic(frozenset(said),
                                                              self.ADD_CONTEXT_K)}
        for pos, call, err in self._facts(run):
            if err:
                continue
            fact = Fact(key, pos, call, 0)
            h = self.digest(fact.text)
            if h in seen:
                self.ops["NONE"] += 1
                continue
            seen.add(h)
            fact.t = self._tick()
            self.hashes[fact.t] = h
            self._bm25.add(str(fact.t), document_terms("", fact.text))
            self.memories.append(fact)
            self.ops["ADD"] += 1
        return self.tokens_per_review

    def search(self, task: str) -> list[Fact]:
        words = self._words(task)
        pool = max(4 * self.TOP_K, 60)
        cands = [(sem, m) for sem, m in self._semantic(words, pool) if sem >= self.THRESHOLD]
        terms = query_terms(task)
        mid, steep = _bm25_params(max(1, len(terms)))
        bm25 = {k: 1.0 / (1.0 + float(np.exp(-steep * (raw - mid))))
                for raw, k in self._bm25.scores(terms, pool) if raw > 0}
        most = 2.0 if bm25 else 1.0
        scored = [(min((sem + bm25.get(str(m.t), 0.0)) / most, 1.0), m) for sem, m in cands]
        scored.sort(key=lambda x: -x[0])                 # stable: semantic order on ties
        return [m for _, m in scored[:self.TOP_K]]

    def knowledge(self, task: str, *, task_instance: int) -> Knowledge:
        words = self._words(task)
        got = self.search(task)
        k = Knowledge(entries=len(got))
        per_step: dict = {}
        for m in sorted(got, key=lambda m: -m.t):
            if self._about(m.key, words):
                seen = per_step.setdefault(m.step, [])
                call = self._ix(m.call)
                if call not in seen:
                    seen.append(call)
            else:
                k.irrelevant += 1
        if per_step:
            for s, calls in per_step.items():
                k.tools[s], k.values[s] = calls[0]
            n = max(per_step) + 1
            for j in range(max(len(c) for c in per_step.values())):
                k.calls.append([per_step[s][j] if s in per_step and j < len(per_step[s])
                                else (-1, -1) for s in range(n)])
        return k
