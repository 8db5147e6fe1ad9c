"""Agent Workflow Memory (Wang, Mao, Fried, Neubig, ICML 2025): workflows induced from
successful trajectories with their concrete values abstracted."""

from __future__ import annotations

import zlib

import numpy as np

from dyna.agents.baselines.common import Knowledge, RunRecord, TaskBaseline


class AWM(TaskBaseline):
    """Agent Workflow Memory (Wang, Mao, Fried, Neubig, ICML 2025, arXiv 2409.07429; code:
    zorazrw/agent-workflow-memory), online: workflows induced from the successful
    trajectories so far, with the concrete values abstracted, the whole workflow file
    induced again after every task.

    When it writes
        Every task's trajectory is judged (the WebArena pipeline's default ``--criteria
        autoeval``, an LLM judge: here ``self_assessed_success``); a judged success is
        kept (its ok calls in order: a call that errored does not advance the procedure
        the agent follows). After every task (success or not) the whole workflow file is
        induced again from all kept trajectories (both online pipelines run the induction
        after each task, ``induce_steps = 1`` in Mind2Web's): one induction call,
        ``tokens_per_review``, once there is a trajectory to induce from (0 before).
    The induction (the paper's and the Mind2Web online code's abstraction)
        A workflow is a trajectory with its task-specific values made variables: the
        Mind2Web online induction (``online_induction.py`` with
        ``prompt/one_shot_action.txt``) has an LM rewrite ``TYPE: Seattle`` as ``TYPE:
        {your-origin-city}``, as the paper describes. Here a workflow step is the tool to
        call, its value a variable the agent fills at run time: the workflow names no
        concrete value. Which trajectories are abstracted follows WebArena's
        ``workflow_induction.py``: one kept trajectory per task template (here: per task
        key) sampled at random, then one at random per distinct abstract action sequence
        (the code dedups by action names and element ids, its arguments dropped: here
        the tool sequence). The draws come from ``(seed, crc32(run_id))``. WebArena's
        rule-based script then writes the chosen trajectories as concrete examples;
        this class writes them abstracted, as the paper and the Mind2Web online code do.
        Nothing is ever forgotten: every success stays a candidate, so after a change in
        the world an old trajectory can be drawn again.
    Retrieval
        The whole workflow file in context (entries = workflow count). For the workflows
        about the task, step k's tool goes to :attr:`Knowledge.tools` (the first such
        workflow in the file wins a step) with no value: the agent calls that tool and
        chooses the value itself (:meth:`LoopAgent._act` reads a tool without a value so).
        The others count as irrelevant entries. No cap.
    """

    name = "awm"

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: key -> every kept successful trajectory (named ok calls), oldest first.
        self.trajectories: dict[tuple, list] = {}
        #: The current workflow file: ``(key, tools)`` per workflow, ``tools`` the tool
        #: name per step (the values are variables).
        self.workflows: list[tuple] = []

    def induce(self, run_id: str) -> list[tuple]:
        """The workflow file induced from the kept trajectories (class docstring):
        ``(key, tool names)`` per workflow."""
        rng = np.random.default_rng([int(self.seed), zlib.crc32(run_id.encode("utf-8"))])
        picked = [(k, v[int(rng.integers(len(v)))]) for k, v in self.trajectories.items()]
        groups: dict = {}
        for k, calls in picked:
            tools = tuple(tool for tool, _ in calls)
            groups.setdefault(tools, []).append((k, tools))
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
        for key, tools in self.workflows:
            if self._about(key, words):
                for step, tool in enumerate(tools):
                    k.tools.setdefault(step, self._tool_ix(tool))
            else:
                k.irrelevant += 1
        return k

    def audit_entries(self) -> list[tuple[str, tuple]]:
        """Each workflow's key and, per step, ``(tool, -1)``: a tool and no value."""
        return [(" ".join(k), tuple((self._tool_ix(t), -1) for t in tools))
                for k, tools in self.workflows]
