"""Drift of the agent tasks' hidden world: a family's procedure changes between episodes.

:class:`TaskDrift` is a base class of :class:`envs.agent_tasks.AgentTaskEnv` (after
:class:`envs.agent_task_world.TaskWorld`, whose world it changes). Every draw comes from
the world's drift stream, so the same seed gives every agent the same drifts. Each drift
is appended to ``drift_log`` as a dict ``episode, family, step, what, old, new``.
"""

from __future__ import annotations

__all__ = ["TaskDrift"]


class TaskDrift:
    """The drift mechanics of :class:`envs.agent_tasks.AgentTaskEnv` (``drift_at``,
    ``drift_rate``, ``drift_kind``; see its module docstring)."""

    def _drift_once(self, episode: int) -> dict:
        """One drift before ``episode``: with no ``drift_kind`` (v0's rule) one step's tool
        or value (50/50) of a family drawn by arrival frequency; else
        :meth:`_drift_kind_once`. Returns the event, also appended to ``drift_log``."""
        rng = self._rng_drift
        f = self._drift_target(rng)
        if self.drift_kind:
            return self._drift_kind_once(episode, f)
        k = int(rng.integers(self.length))
        change_tool = self.n_values < 2 or (self.n_tools >= 2 and rng.random() < 0.5)
        if change_tool and self.n_tools >= 2:
            old = int(self.tools[f, k])
            new = (old + 1 + int(rng.integers(self.n_tools - 1))) % self.n_tools
            self.tools[f, k] = new
            what = "tool"
        elif self.n_values >= 2:
            old = int(self.values[f, k])
            new = (old + 1 + int(rng.integers(self.n_values - 1))) % self.n_values
            self.values[f, k] = new
            what = "value"
        else:  # one tool, one value: nothing can change
            old = new = 0
            what = "none"
        event = {"episode": episode, "family": f, "step": k, "what": what, "old": old,
                 "new": new}
        self.drift_log.append(event)
        return event

    def _drift_target(self, rng) -> int:
        """The family a drift changes: drawn by arrival frequency from the drift stream."""
        return self._family_of_uniform(rng.random())

    @staticmethod
    def _other(rng, old: int, choices) -> int:
        """A uniform draw among ``choices`` other than ``old`` (``old`` if there is none)."""
        others = [c for c in choices if c != old]
        return int(others[int(rng.integers(len(others)))]) if others else old

    def _drift_kind_once(self, episode: int, f: int) -> dict:
        """A drift of one of :attr:`drift_kind` (drawn uniformly when several) to family
        ``f``; draws from the drift stream only."""
        rng = self._rng_drift
        kind = self.drift_kind[int(rng.integers(len(self.drift_kind)))] \
            if len(self.drift_kind) > 1 else self.drift_kind[0]
        k = int(rng.integers(self.length))
        tools = list(self.callable_tools())
        event = {"episode": episode, "family": f, "step": k, "what": kind}
        if kind == "value":
            old = int(self.values[f, k])
            new = self._other(rng, old, range(self.n_values))
            self.values[f, k] = new
        elif kind == "tool":
            old = int(self.tools[f, k])
            new = self._other(rng, old, tools)
            self.tools[f, k] = new
            if self.destructive[f] not in self.tools[f]:
                self.destructive[f] = new   # still one of the procedure's tools
        elif kind == "rename":
            old, new = self._rename(f, k, event)
        else:  # "procedure"
            old, new = self._replace_procedure(rng, f, tools)
        event.update(old=old, new=new)
        self.drift_log.append(event)
        return event

    def _rename(self, f: int, k: int, event: dict) -> tuple[int, int]:
        """Rename the tool of step ``k`` of family ``f``: the old name stops existing (every
        call of it errors, for every family), the tool moves to the next spare slot under
        ``<old name>_v2`` with the old tool's trust. Returns ``(old slot, new slot)`` and
        adds ``old_name`` and ``new_name`` to ``event``."""
        old = int(self.tools[f, k])
        new = self.n_tools + 1 + self._spare_next
        self._spare_next += 1
        names = list(self.tool_names)
        names[new] = f"{names[old]}_v2"
        self.tool_names = tuple(names)
        trusted = list(self.tool_trusted)
        trusted[new] = trusted[old]
        self.tool_trusted = tuple(trusted)
        self.installed[old], self.installed[new] = False, True
        self.tools[self.tools == old] = new        # every family's use of it
        self.destructive[self.destructive == old] = new
        event.update(old_name=names[old], new_name=names[new])
        return old, new

    def _replace_procedure(self, rng, f: int, tools: list) -> tuple[list, list]:
        """Redraw every step of family ``f``'s procedure until it differs (at most 1,000
        times: a 1 x 1 world has a single procedure), then its destructive tool among the
        new procedure's tools. Returns ``(old, new)``, each ``[tools, values]``."""
        old = [list(map(int, self.tools[f])), list(map(int, self.values[f]))]
        new = old
        for _ in range(1000):
            self.tools[f] = [tools[int(rng.integers(len(tools)))] for _ in range(self.length)]
            self.values[f] = rng.integers(0, self.n_values, size=self.length)
            new = [list(map(int, self.tools[f])), list(map(int, self.values[f]))]
            if new != old:
                break
        self.destructive[f] = self.tools[f, int(rng.integers(self.length))]
        return old, new
