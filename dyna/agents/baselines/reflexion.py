"""Reflexion (Shinn et al., NeurIPS 2023): verbal reflections after failed trials."""

from __future__ import annotations

from dyna.agents.baselines.common import Knowledge, RunRecord, TaskBaseline, steps


class Reflexion(TaskBaseline):
    """Reflexion (Shinn et al., NeurIPS 2023, arXiv 2303.11366): verbal reflections after
    failed trials, kept per task.

    When it writes
        After a trial the evaluator judges failed: here the agent's self-assessment
        (``self_assessed_success`` False), the evaluator an agent has without a test suite
        (the paper's self-written tests for code; the released ALFWorld runs read the
        environment's ``won`` flag instead). One reflection (one LLM call,
        ``tokens_per_review``) per failed trial; nothing after a success (0 tokens).
    What it keeps
        Per task key, the reflection "at step k do not call <tool> with <value>" for the
        failing call (the last call that errored, at the procedure position it was made
        at) plus, when the run had ok calls, those calls as the plan it attempted. Only the
        last 3 reflections per key are kept. The released code appends every reflection
        to the task's memory and puts the last 3 (``memory[-3:]`` in ``alfworld_trial.py``
        and ``generate_reflections.py``) in the prompt; the paper bounds the memory at
        1-3. The older ones are never read again, so they are not kept here (the library
        size counts what can reach a prompt).
    Retrieval
        All of the task's reflections (entries = their count): their "do not" calls as
        :attr:`Knowledge.avoid`, their plans as :attr:`Knowledge.calls`, the most recent
        first.
    """

    name = "reflexion"
    #: Reflections kept per task key (the code's ``memory[-3:]``).
    WINDOW = 3

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: key -> list of ``(avoid, plan)``: ``avoid`` None or ``(step, (tool, value))``
        #: by name, ``plan`` a tuple of named calls; oldest first.
        self.reflections: dict[tuple, list] = {}

    def learn(self, run: RunRecord) -> int:
        key = self.key(run.task)
        if run.self_assessed_success or not key:
            return 0
        avoid = None
        for pos, call, err in steps(run):
            if err:
                avoid = (pos, self._named(call))
        plan = self._lesson(run)
        if avoid is None and not plan:
            return 0
        kept = self.reflections.setdefault(key, [])
        kept.append((avoid, plan))
        del kept[:-self.WINDOW]
        return self.tokens_per_review

    def knowledge(self, task: str) -> Knowledge:
        kept = self.reflections.get(self.key(task), [])
        k = Knowledge(entries=len(kept))
        for avoid, plan in reversed(kept):
            if plan:
                k.calls.append(list(self._ix_calls(plan)))
            if avoid is not None:
                k.avoid.add((avoid[0], *self._ix(avoid[1])))
        return k

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(key), self._ix_calls(plan))
                for key, kept in self.reflections.items() for _, plan in kept]

    def size(self) -> int:
        return sum(len(v) for v in self.reflections.values())
