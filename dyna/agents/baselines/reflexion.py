"""Reflexion (Shinn et al., NeurIPS 2023): verbal reflections after failed trials, kept
per task instance across its retrials."""

from __future__ import annotations

from dyna.agents.baselines.common import Knowledge, RunRecord, TaskBaseline, steps


class Reflexion(TaskBaseline):
    """Reflexion (Shinn et al., NeurIPS 2023, arXiv 2303.11366; code:
    noahshinn/reflexion ``alfworld_runs/alfworld_trial.py`` and
    ``generate_reflections.py``): verbal reflections after failed trials of one task,
    read on that task's next trials.

    When it writes
        After a trial the evaluator judges failed: the ground-truth outcome
        (``verified_success`` False), as the released decision-making code reads it (the
        ALFWorld runs take ``info['won']`` from the environment; the programming runs'
        self-written tests are the paper's other evaluator, not the one for tool-using
        agent tasks). One reflection (one LLM call, ``tokens_per_review``) per failed
        trial; nothing after a success (0 tokens). A run with neither an errored call
        nor an ok call gives nothing to reflect on (0 tokens).
    What it keeps
        Per task *instance* (:attr:`RunRecord.task_instance`: the env presents a failed
        instance again as a retrial, :attr:`RunRecord.retrial`), the reflection "at step
        k do not call <tool> with <value>" for the failing call (the last call that
        errored, at the procedure position it was made at) plus, when the run had ok
        calls, those calls as the plan it attempted. Reflections are never shared
        between instances, even of one family: the code keeps one ``memory`` list per
        environment. The code appends every reflection and reads the last 3
        (``memory[-3:]``; the paper bounds the memory at 1-3), so only the last
        :attr:`WINDOW` per instance are kept here. An instance that cannot reach a
        prompt any more is closed and its reflections dropped (the library size counts what
        can): after its verified success (the code skips a solved environment) and after
        a failure on its last retrial when the env declares ``max_retrials`` (an env
        without it is never taken to have run out).
    Retrieval
        The instance's reflections, prepended to the run (entries = their count): their
        "do not" calls as :attr:`Knowledge.avoid`, their plans as
        :attr:`Knowledge.calls`, the most recent first. Nothing for an instance with none.
    """

    name = "reflexion"
    #: Reflections read per task instance (the code's ``memory[-3:]``).
    WINDOW = 3

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: task instance -> ``(key, reflections)``: the task's key (for the audit) and a
        #: list of ``(avoid, plan)``, ``avoid`` None or ``(step, (tool, value))`` by name,
        #: ``plan`` a tuple of named calls; oldest first.
        self.reflections: dict[int, tuple] = {}

    def __repr__(self) -> str:
        return f"Reflexion(reflections={self.reflections!r})"

    def learn(self, run: RunRecord) -> int:
        instance = int(run.task_instance)
        if run.verified_success:
            self.reflections.pop(instance, None)
            return 0
        avoid = None
        for pos, call, err in steps(run):
            if err:
                avoid = (pos, self._named(call))
        plan = self._lesson(run)
        tokens = 0
        if avoid is not None or plan:
            _, kept = self.reflections.setdefault(instance, (self.key(run.task), []))
            kept.append((avoid, plan))
            del kept[:-self.WINDOW]
            tokens = self.tokens_per_review
        last = getattr(self.env, "max_retrials", None)
        if last is not None and run.retrial >= last:
            self.reflections.pop(instance, None)
        return tokens

    def knowledge(self, task: str, *, task_instance: int) -> Knowledge:
        _, kept = self.reflections.get(int(task_instance), ((), []))
        k = Knowledge(entries=len(kept))
        for avoid, plan in reversed(kept):
            if plan:
                k.calls.append(list(self._ix_calls(plan)))
            if avoid is not None:
                k.avoid.add((avoid[0], *self._ix(avoid[1])))
        return k

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(key), self._ix_calls(plan))
                for key, kept in self.reflections.values() for _, plan in kept]

    def size(self) -> int:
        return sum(len(kept) for _, kept in self.reflections.values())
