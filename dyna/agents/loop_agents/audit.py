"""The audit of what a loop agent's store holds, against the hidden world.

Each entry (a skill, a memory fact, a literature baseline's entry) claims something about
one family's procedure: a skill its whole procedure, a fact one step's tool or value. It is
*right now* when the claim holds for the procedure now, and *right when written* when it
held at the first audit that saw it (remembered for the run, so a restored entry keeps its
verdict; see :class:`StoreAudit` for the procedure it is judged against). *Poisoned*
entries were not right when written (a lesson from a failure or a planted instruction);
*stale* entries were right when written and are wrong now (the world drifted). A family is
*covered* when the store holds entries right for its whole procedure now.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from dyna.agents.baselines import agrees
from dyna.agents.loop_agents.knowledge import LessonReader

__all__ = ["StoreAudit", "Verdict", "head_families"]


def head_families(arrival_p) -> frozenset:
    """The *head* families: the fewest most frequent families whose arrival probabilities
    (float array-like, summing to 1) sum to at least 0.8, ties broken by the lower family
    id."""
    p = np.asarray(arrival_p)
    order = np.argsort(-p, kind="stable")
    n = int(np.searchsorted(np.cumsum(p[order]), 0.8 - 1e-12)) + 1
    return frozenset(order[:n].tolist())


class Verdict(NamedTuple):
    """One store entry at one audit.

    Attributes
    ----------
    key : hashable
        The entry: a skill's ``(name, body)``, a fact's text, a baseline's ``("baseline",
        key, calls)``.
    family : int or None
        The family it is about (None: none, or no step of its procedure).
    group : tuple or None
        What it claims about: ``(family, None, "")`` for a whole procedure, ``(family, step,
        kind)`` for a fact (0-based step, ``"tool"`` or ``"value"``); None for an entry
        that names no family and for a baseline's entry.
    right_now : bool
        Its claim holds for the procedure now.
    right_before : bool
        Its claim held for the procedure as the previous audit read it (see
        :class:`StoreAudit`).
    """

    key: object
    family: int | None
    group: tuple | None
    right_now: bool
    right_before: bool


class StoreAudit:
    """Poisoned, stale and covered counts of one agent's store over a run.

    An entry first seen at an audit is right when written if its claim holds for the
    procedure now or for the procedure as the previous audit read it (when the store has held
    an entry about the same claim, :attr:`Verdict.group`, at an earlier audit of the run; a
    baseline's entries: now only). The two differ only for an entry first seen in an episode
    that began with a drift of what it claims about; such an entry may be a lesson of that
    episode (right for the drifted procedure) or a late review of an earlier run (right for
    the procedure before it), and neither is poisoned. One right only before is stale at once.

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
        #: Claim group -> its truth as the last audit read it, for every group the store
        #: has held an entry about.
        self.truths: dict = {}

    def procedures(self) -> list[tuple[tuple[int, int], ...]]:
        """Every family's procedure now (read once per audit)."""
        return [self.env.procedure(f) for f in range(self.env.n_families)]

    @staticmethod
    def truth(group: tuple, procedures: list):
        """What ``procedures`` (:meth:`procedures`) say about a claim group: a family's
        procedure (tuple of ``(tool, value)``), or one step's tool or value index."""
        fam, step, kind = group
        proc = procedures[fam]
        return proc if step is None else proc[step][kind == "value"]

    def judge(self, key, group: tuple | None, claim, procedures: list) -> Verdict:
        """The verdict on an entry that claims ``claim`` about ``group``, ``procedures``
        the procedures now."""
        if group is None:
            return Verdict(key, None, None, False, False)
        now = self.truth(group, procedures)
        before = self.truths.get(group, now)
        return Verdict(key, group[0], group, claim == now, claim == before)

    def counts(self, verdicts: Iterable[Verdict]) -> tuple[int, int]:
        """``(poisoned, stale)`` of the store's entries at this audit; remembers the
        verdict of each entry seen for the first time, and the truth now of every claim
        group seen so far."""
        poisoned = stale = 0
        groups = set(self.truths)
        for v in verdicts:
            if not self.written.setdefault(v.key, v.right_now or v.right_before):
                poisoned += 1
            elif not v.right_now:
                stale += 1
            if v.group is not None:
                groups.add(v.group)
        procedures = self.procedures()
        self.truths = {g: self.truth(g, procedures) for g in groups}
        return poisoned, stale

    @staticmethod
    def covered(verdicts: Iterable[Verdict]) -> frozenset:
        """The families with an entry right now among ``verdicts`` (entries that prescribe
        a whole procedure)."""
        return frozenset(v.family for v in verdicts if v.right_now)

    # ------------------------------------------------------------------ entries
    def skill_entries(self, skills) -> list[Verdict]:
        """A verdict per skill, keyed ``(name, body)``: its calls against the procedure of
        the family its triggers name."""
        procedures = self.procedures()
        out = []
        for s in skills:
            fam = self.reader.family_of_key(s.triggers)
            group = None if fam is None else (fam, None, "")
            out.append(self.judge((s.name, s.body), group,
                                  tuple(self.reader.skill_calls(s.body)), procedures))
        return out

    def baseline_entries(self, baseline) -> list[Verdict]:
        """A verdict per entry of a literature baseline, keyed ``("baseline", key,
        calls)`` (:meth:`~dyna.agents.baselines.Baseline.audit_entries`; a tool or value an
        entry says nothing about, ``-1``, is not held against it:
        :func:`dyna.agents.baselines.agrees`)."""
        procedures = self.procedures()
        out = []
        for key, calls in baseline.audit_entries():
            fam = self.reader.family_of_key(key.split())
            right = fam is not None and agrees(calls, procedures[fam])
            out.append(Verdict(("baseline", key, tuple(calls)), fam, None, right, right))
        return out

    @staticmethod
    def naming_tool(verdicts: Iterable[Verdict], tool: int) -> int:
        """How many of a baseline's entries (:meth:`baseline_entries`) name ``tool`` (an
        index of the env's tools) in one of their calls."""
        return sum(any(call[0] == tool for call in v.key[2]) for v in verdicts)

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

    def fact_entries(self, claims) -> list[Verdict]:
        """A verdict per fact claim (:meth:`fact_claims`), keyed by its text: its tool or
        value against that of its step of its family's procedure."""
        procedures = self.procedures()
        return [self.judge(text, None if fam is None else (fam, step - 1, kind), ix,
                           procedures)
                for text, fam, step, kind, ix in claims]

    def covered_by_facts(self, claims, kinds: tuple[str, ...]) -> frozenset:
        """The families for which the fact claims (:meth:`fact_claims`) hold, for every step
        of the procedure now, a right fact of each of ``kinds`` (``"value"``, and ``"tool"``
        when the reviewer writes tool facts)."""
        known = {(fam, step - 1, kind, ix) for _, fam, step, kind, ix in claims
                 if fam is not None}
        return frozenset(fam for fam, proc in enumerate(self.procedures())
                         if all((fam, k, kind, proc[k][kind == "value"]) in known
                                for k in range(len(proc)) for kind in kinds))
