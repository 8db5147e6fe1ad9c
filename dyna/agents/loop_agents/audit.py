"""The audit of what a loop agent's store holds, against the hidden world.

Each entry (a skill, a memory fact, a literature baseline's entry) claims something about
one family's procedure. It is *right now* when the claim holds for the procedure now, and
*right when written* when it was right now at the first audit that saw it (remembered for
the run, so a restored entry keeps its verdict). *Poisoned* entries were not right when
written (a lesson from a failure or a planted instruction); *stale* entries were right
when written and are wrong now (the world drifted). A family is *covered* when the store
holds entries right for its whole procedure now.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dyna.agents.baselines import agrees
from dyna.agents.loop_agents.knowledge import LessonReader

__all__ = ["StoreAudit", "head_families"]


def head_families(arrival_p) -> frozenset:
    """The *head* families: the fewest most frequent families whose arrival probabilities
    (float array-like, summing to 1) sum to at least 0.8, ties broken by the lower family
    id."""
    p = np.asarray(arrival_p)
    order = np.argsort(-p, kind="stable")
    n = int(np.searchsorted(np.cumsum(p[order]), 0.8 - 1e-12)) + 1
    return frozenset(order[:n].tolist())


class StoreAudit:
    """Poisoned, stale and covered counts of one agent's store over a run.

    Parameters
    ----------
    env : envs.agent_tasks.AgentTaskEnv
        The hidden world (its current procedures).
    reader : LessonReader
        Reads skills and facts as calls.
    """

    def __init__(self, env, reader: LessonReader):
        self.env = env
        self.reader = reader
        #: Entry key -> whether it was right when first seen (for the run).
        self.written: dict = {}

    def counts(self, entries: Iterable[tuple[object, int | None, bool]]) -> tuple[int, int]:
        """``(poisoned, stale)`` of ``entries``, each ``(key, family, right now)``; an entry
        seen for the first time is judged right when written if it is right now."""
        poisoned = stale = 0
        for key, _, right_now in entries:
            if not self.written.setdefault(key, right_now):
                poisoned += 1
            elif not right_now:
                stale += 1
        return poisoned, stale

    @staticmethod
    def covered(entries: Iterable[tuple[object, int | None, bool]]) -> frozenset:
        """The families with an entry right now among ``entries`` (each ``(key, family,
        right now)``, an entry that prescribes a whole procedure)."""
        return frozenset(fam for _, fam, right in entries if right)

    # ------------------------------------------------------------------ entries
    def skill_entries(self, skills) -> list[tuple[tuple[str, str], int | None, bool]]:
        """``((name, body), family, right now)`` per skill: the family its triggers name,
        and whether its calls are that family's procedure now, call for call."""
        out = []
        for s in skills:
            fam = self.reader.family_of_key(s.triggers)
            right = fam is not None and (tuple(self.reader.skill_calls(s.body))
                                         == self.env.procedure(fam))
            out.append(((s.name, s.body), fam, right))
        return out

    def baseline_entries(self, baseline) -> list[tuple[tuple, int | None, bool]]:
        """``(("baseline", key, calls), family, right now)`` per entry of a literature
        baseline (:meth:`~dyna.agents.baselines.Baseline.audit_entries`; a tool or value an
        entry says nothing about, ``-1``, is not held against it:
        :func:`dyna.agents.baselines.agrees`)."""
        out = []
        for key, calls in baseline.audit_entries():
            fam = self.reader.family_of_key(key.split())
            right = fam is not None and agrees(calls, self.env.procedure(fam))
            out.append((("baseline", key, tuple(calls)), fam, right))
        return out

    def fact_claims(self, facts) -> list[tuple[str, int | None, int, str, int]]:
        """``(text, family, step, kind, index)`` per memory fact: what it claims, read by
        :meth:`LessonReader.fact`; family None when its key names no family or its step
        (1-based) is not one of the procedure's."""
        out = []
        for e in facts:
            words, step, kind, ix = self.reader.fact(e.text)
            fam = self.reader.family_of_key(words) if words else None
            if fam is not None and not 1 <= step <= self.env.length:
                fam = None
            out.append((e.text, fam, step, kind, ix))
        return out

    def fact_entries(self, claims) -> list[tuple[str, int | None, bool]]:
        """``(text, family, right now)`` per fact claim (:meth:`fact_claims`): its tool or
        value is that of its step of its family's procedure now."""
        procedure = self.env.procedure
        return [(text, fam, fam is not None and ix == procedure(fam)[step - 1][kind == "value"])
                for text, fam, step, kind, ix in claims]

    def covered_by_facts(self, claims, kinds: tuple[str, ...]) -> frozenset:
        """The families for which the fact claims (:meth:`fact_claims`) hold, for every step
        of the procedure now, a right fact of each of ``kinds`` (``"value"``, and ``"tool"``
        when the reviewer writes tool facts)."""
        known = {(fam, step - 1, kind, ix) for _, fam, step, kind, ix in claims
                 if fam is not None}
        env = self.env
        right = set()
        for fam in range(env.n_families):
            proc = env.procedure(fam)
            if all((fam, k, kind, proc[k][kind == "value"]) in known
                   for k in range(env.length) for kind in kinds):
                right.add(fam)
        return frozenset(right)
