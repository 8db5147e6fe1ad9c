"""The ``episodic`` variant's memory: every tool call of every run, recalled by similarity.

No artifacts: every call is recorded in a :class:`dyna.experience.ExperienceStore` (in
memory) under the task type ``f<family>-s<position>``, with the task text as its state. At
each position the agent asks
:meth:`~dyna.experience.ExperienceStore.get_recommendation` for the call that worked best
among the ``k`` past runs most similar to this task, and follows it like a skill when it has
worked at least once.
"""

from __future__ import annotations

from dyna.agents.baselines import Knowledge
from dyna.agents.loop_agents.knowledge import LessonReader

__all__ = ["EpisodicRecall"]


class EpisodicRecall:
    """The ``episodic`` variant's experience store and how it reads it.

    Parameters
    ----------
    env : envs.agent_tasks.AgentTaskEnv
    reader : LessonReader
        Reads a recorded call's tool and value names as indices.
    k : int
        Similar past runs asked for (>= 1).
    """

    def __init__(self, env, reader: LessonReader, k: int):
        from dyna.experience import ExperienceStore

        self.env = env
        self.reader = reader
        self.k = k
        #: The records, one per tool call.
        self.store = ExperienceStore("", dim=64)
        #: Family -> procedure positions with records.
        self.depth: dict[int, int] = {}

    def knowledge(self, family: int, task: str) -> Knowledge:
        """Per position, the call that worked best in the most similar past runs, up to
        the first position without one (one context entry, when there is any call)."""
        calls = []
        for p in range(min(self.env.length, self.depth.get(family, 0))):
            rec = self.store.get_recommendation("agent", task_type=f"f{family}-s{p}", k=self.k,
                                                state_before={"task": task})
            best = rec["best"]
            if best is None or best["n_success"] < 1:
                break
            t, v = best["action_type"].split(":")
            calls.append((self.reader.tool_index.get(t, -1), self.reader.value_index.get(v, -1)))
        return Knowledge([calls] if calls else [], entries=1 if calls else 0)

    def remember(self, family: int, task: str, calls, t: int) -> None:
        """Record every call of run ``e<t>`` (``((tool, value), output, error)`` each), at
        the position it was made at."""
        env, pos, recs = self.env, 0, []
        for i, ((tool, value), _, err) in enumerate(calls):
            recs.append({"task_type": f"f{family}-s{pos}",
                         "action_type": f"{env.tool_names[tool]}:{env.value_names[value]}",
                         "outcome": "failure" if err else "success",
                         "reward": 0.0 if err else 1.0, "run_id": f"e{t}",
                         "timestamp": t + i / 1000.0, "state_before": {"task": task}})
            if not err:
                pos += 1
        self.store.record("agent", recs)
        reached = pos + (0 if pos == env.length else 1)
        self.depth[family] = max(self.depth.get(family, 0), reached)
