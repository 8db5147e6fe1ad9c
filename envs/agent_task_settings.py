"""The settings of the agent tasks: each keyword checked, and what follows from it.

:class:`TaskSettings` is a base class of :class:`envs.agent_tasks.AgentTaskEnv`, whose
``__init__`` calls its setters in a fixed order (so the first bad keyword is the one named).
Each setter raises :class:`dyna.errors.ConfigError` naming the keyword it refuses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dyna.errors import ConfigError, check_range
from envs.agent_task_world import tool_name, word_list

__all__ = ["DRIFT_KINDS", "HARMFUL_TOOL", "TaskSettings"]

HARMFUL_TOOL = "send_secrets"
#: Drift kinds: a step's value, a step's tool, a tool renamed (the old name stops existing:
#: every call of it errors, for every family), the family's whole procedure replaced.
DRIFT_KINDS = ("value", "tool", "rename", "procedure")


class TaskSettings:
    """Setters of :class:`envs.agent_tasks.AgentTaskEnv`'s settings (its parameters)."""

    def _set_sizes(self, ints: dict, step_slack: int | None) -> None:
        """Check and set the integer settings (``name -> (value, lower bound)``) and the
        step budget (``length + step_slack`` when a slack is given)."""
        for name, (value, lo) in ints.items():
            setattr(self, name, check_range(name, value, lo, None, integer=True))
        if self.n_tools > 64:
            raise ConfigError("n_tools", ints["n_tools"][0], "must be at most 64")
        if self.n_distractor_words < self.n_distractors:
            raise ConfigError("n_distractor_words", ints["n_distractor_words"][0],
                              f"must be >= n_distractors={self.n_distractors}")
        if step_slack is not None:
            self.step_slack = check_range("step_slack", step_slack, 0, None, integer=True)
            self.max_steps = self.length + self.step_slack
        else:
            self.step_slack = None
        if self.max_steps < self.length:
            raise ConfigError("max_steps", ints["max_steps"][0],
                              f"must be >= length={self.length}")

    def _set_vocabulary_size(self, shared_trigger_fraction: float) -> None:
        """Set the shared trigger pool's sizes and ``vocab_size``, the words a world draws
        (each family's own triggers, the distractor pool, the shared pool)."""
        self.shared_trigger_fraction = float(check_range(
            "shared_trigger_fraction", shared_trigger_fraction, 0.0, 1.0))
        #: Trigger slots per family taken from the shared pool (never all of them: a
        #: family keeps at least one trigger word of its own).
        self.n_shared_triggers = min(self.n_triggers - 1,
                                     int(np.floor(self.shared_trigger_fraction
                                                  * self.n_triggers + 0.5)))
        #: Size of the shared trigger pool (0 without sharing).
        self.n_shared_words = (max(2, self.n_families // 4) * self.n_shared_triggers
                               if self.n_shared_triggers else 0)
        words_needed = (self.n_families * self.n_triggers + self.n_distractor_words
                        + self.n_shared_words)
        if words_needed > len(word_list()):
            raise ConfigError("n_families", self.n_families,
                              f"needs {words_needed} words, more than {len(word_list())}")
        self.vocab_size = words_needed

    def _set_drift(self, drift_at, drift_kind, n_spare_tools) -> None:
        """Check and set ``drift_at``, ``drift_kind`` and ``n_spare_tools`` (one spare
        tool slot per scheduled rename by default)."""
        if isinstance(drift_at, (str, bytes)) or not isinstance(drift_at, Sequence):
            raise ConfigError("drift_at", drift_at, "must be a list of episode indices")
        self.drift_at = tuple(sorted(check_range("drift_at", e, 0, None, integer=True)
                                     for e in drift_at))
        if drift_kind is None:
            kinds: tuple = ()
        elif isinstance(drift_kind, str):
            kinds = (drift_kind,)
        elif isinstance(drift_kind, Sequence) and drift_kind:
            kinds = tuple(drift_kind)
        else:
            raise ConfigError("drift_kind", drift_kind, f"must be one of {DRIFT_KINDS}, a "
                              "non-empty list of them, or None")
        for k in kinds:
            if k not in DRIFT_KINDS:
                raise ConfigError("drift_kind", k, f"must be one of {DRIFT_KINDS}")
        #: Drift kinds drawn from (uniformly); () is v0's rule (tool or value, 50/50).
        self.drift_kind = kinds
        renames = "rename" in kinds
        if n_spare_tools is None:
            n_spare_tools = len(self.drift_at) if renames else 0
        self.n_spare_tools = check_range("n_spare_tools", n_spare_tools, 0, 64, integer=True)
        if renames and (self.drift_rate > 0.0 or self.n_spare_tools < len(self.drift_at)):
            raise ConfigError("drift_kind", "rename", "a rename needs a spare tool slot: use "
                              "drift_at (not drift_rate) and n_spare_tools >= len(drift_at)")

    def _set_tools(self, untrusted_tools: int | None) -> None:
        """Set the tool slots' names and trust, and the values' names."""
        if untrusted_tools is None:
            untrusted_tools = self.n_tools
        self.untrusted_tools = check_range("untrusted_tools", untrusted_tools, 0, self.n_tools,
                                           integer=True)
        self.harmful_tool = self.n_tools
        # an uninstalled spare slot's name can never be a renamed tool's (``<old>_v2``)
        self._base_names = (tuple(tool_name(i) for i in range(self.n_tools)) + (HARMFUL_TOOL,)
                            + tuple(f"spare_{j}" for j in range(self.n_spare_tools)))
        self.tool_names = self._base_names
        #: Per tool (the harmful one after the ordinary ones, then the spare slots): its
        #: output is trusted (an internal service). A spare slot is untrusted until a
        #: rename installs a tool there, which then keeps the renamed tool's trust.
        self.tool_trusted = (tuple(i < self.n_tools - self.untrusted_tools
                                   for i in range(self.n_tools)) + (False,)
                             + (False,) * self.n_spare_tools)
        self._base_trusted = self.tool_trusted
        self.value_names = tuple(f"val_{j}" for j in range(self.n_values))

    def _set_arrivals(self, p: np.ndarray) -> None:
        """Set the families' arrival probabilities ``p`` (float64, shape (n_families,),
        summing to 1) and their cumulative sums (the last one exactly 1)."""
        self.arrival_p = p
        cum = np.cumsum(p)
        cum[-1] = 1.0
        self._arrival_cum = cum
