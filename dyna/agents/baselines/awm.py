"""Agent Workflow Memory (Wang, Mao, Fried, Neubig, ICML 2025): induced workflows."""

from __future__ import annotations

import zlib

import numpy as np

from dyna.agents.baselines.common import Knowledge, RunRecord, TaskBaseline


class AWM(TaskBaseline):
    """Agent Workflow Memory (Wang, Mao, Fried, Neubig, ICML 2025, arXiv 2409.07429),
    online: workflows induced from the successful trajectories so far, the workflow file
    rewritten after every task.

    When it writes
        Every task's trajectory is judged (the code's default ``--criteria autoeval``, an
        LLM judge: here ``self_assessed_success``); a judged success is kept (its ok calls
        in order: a call that errored does not advance the procedure the agent follows).
        After every task (success or not) the whole workflow file is induced again from
        all kept trajectories (``pipeline.py`` runs ``workflow_induction.py`` after each
        task): one induction call, ``tokens_per_review``, once there is a trajectory to
        induce from (0 before).
    The induction (paper and code differ)
        The paper has an LM abstract workflows from the examples; the online pipeline's
        ``workflow_induction.py`` samples one successful trajectory per task template
        (here: per task key) at random, then keeps one at random per distinct action
        sequence, and writes those. This class follows the code, drawing from
        ``(seed, crc32(run_id))``. Nothing is ever forgotten: every success stays a
        candidate, so after a change in the world an old trajectory can be drawn again.
    Retrieval
        The whole workflow file in context (entries = workflow count); the agent follows
        the workflows about its task, the others count as irrelevant entries. No cap.
    """

    name = "awm"

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: key -> every kept successful trajectory (named ok calls), oldest first.
        self.trajectories: dict[tuple, list] = {}
        #: The current workflow file: ``(key, calls)`` per workflow.
        self.workflows: list[tuple] = []

    def induce(self, run_id: str) -> list[tuple]:
        """The workflow file induced from the kept trajectories (class docstring)."""
        rng = np.random.default_rng([int(self.seed), zlib.crc32(run_id.encode("utf-8"))])
        picked = [(k, v[int(rng.integers(len(v)))]) for k, v in self.trajectories.items()]
        groups: dict = {}
        for k, calls in picked:
            groups.setdefault(calls, []).append((k, calls))
        return [g[int(rng.integers(len(g)))] for g in groups.values()]

    def learn(self, run: RunRecord) -> int:
        key = self.key(run.task)
        calls = self._ok_calls(run)
        if run.self_assessed_success and key and calls:
            self.trajectories.setdefault(key, []).append(calls)
        if not self.trajectories:
            return 0
        self.workflows = self.induce(run.run_id)
        return self.tokens_per_review

    def knowledge(self, task: str, *, task_instance: int) -> Knowledge:
        words = self._words(task)
        k = Knowledge(entries=len(self.workflows))
        for key, calls in self.workflows:
            if self._about(key, words):
                k.calls.append(list(self._ix_calls(calls)))
            else:
                k.irrelevant += 1
        return k

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(k), self._ix_calls(c)) for k, c in self.workflows]

    def size(self) -> int:
        return len(self.workflows)
