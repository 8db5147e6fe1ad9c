"""Learning-loop baselines from the literature, for the agent tasks.

Each baseline is a :class:`Baseline`: what it keeps, when it writes, how it retrieves and
its limit, as its paper and released code state them (../shared/BASELINES.md gives the
rules; each class's docstring names its source and says where paper and code differ). They
run inside :class:`dyna.agents.loop_agents.LoopAgent` on the same policy model as every
other variant: the agent asks :meth:`Baseline.knowledge` for what to bring into a run,
acts, and hands the finished run to :meth:`Baseline.learn`. A baseline never reads the
hidden world (``env.procedure``); it sees the task text, the tool and value names and the
run's calls with their outputs, like any loop.

This module may import :mod:`dyna.loops`, :mod:`dyna.experience`, :mod:`dyna.index`,
:mod:`envs`, numpy; never :mod:`dyna.agents.loop_agents` (which imports it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

__all__ = ["BASELINES", "Baseline", "Knowledge", "RunRecord", "make_baseline"]


@dataclass
class Knowledge:
    """What the agent brings into one episode.

    Attributes
    ----------
    calls : list of list of (int, int)
        Procedures to follow, best first: per procedure, ``(tool, value)`` index pairs per
        step (``-1`` for a name the env does not know).
    values, tools : dict of int -> int
        Memory-style facts: procedure step (0-based) -> value index / tool index.
    entries : int
        Context entries (skills, facts, reflections, rules) injected: tokens per entry.
    irrelevant : int
        How many of them are not about this task (the env's ``follow_factor``).
    names : tuple of str
        Names of the injected skills, parallel to ``calls`` (a call that followed one
        names it in the digest).
    avoid : set of (int, int, int)
        ``(step, tool, value)`` calls to skip at a step (a reflection's "do not").
    """

    calls: list = field(default_factory=list)
    values: dict = field(default_factory=dict)
    tools: dict = field(default_factory=dict)
    entries: int = 0
    irrelevant: int = 0
    names: tuple = ()
    avoid: set = field(default_factory=set)


@dataclass(frozen=True)
class RunRecord:
    """A finished run as a baseline sees it.

    Attributes
    ----------
    run_id : str
    family : int
        Used only for the audit (poisoned/stale counts), never for retrieval.
    task : str
        The task text.
    calls : tuple of ((int, int), str, bool)
        ``((tool, value), output, error)`` per call, in order.
    verified_success : bool
        The trusted outcome (a test suite).
    self_assessed_success : bool
        The agent's own opinion.
    tokens : int
        Tokens of the run.
    """

    run_id: str
    family: int
    task: str
    calls: tuple
    verified_success: bool
    self_assessed_success: bool
    tokens: int


class Baseline(ABC):
    """One literature baseline (module docstring).

    Parameters
    ----------
    env : envs.agent_tasks.AgentTaskEnv
        For tool and value names and the task vocabulary only.
    seed : int
        The run's reviewer stream (any randomness of the baseline comes from it).
    title_words : int
        Words of the task text taken as its key (as the reviewer does).
    tokens_per_review : int
        Learning tokens per write (an LLM call), >= 0.
    """

    #: Variant name.
    name: str = ""

    def __init__(self, env, seed: int, title_words: int = 2, tokens_per_review: int = 300):
        self.env = env
        self.seed = seed
        self.title_words = title_words
        self.tokens_per_review = tokens_per_review

    @abstractmethod
    def knowledge(self, task: str) -> Knowledge:
        """What to bring into a run on ``task``."""

    @abstractmethod
    def learn(self, run: RunRecord) -> int:
        """Learn from a finished run; returns the learning tokens spent (>= 0)."""

    @abstractmethod
    def audit_entries(self) -> list[tuple[str, tuple]]:
        """Every stored entry as ``(key, calls)``: the trigger words it is about and the
        ``(tool, value)`` pairs it prescribes per step (``(-1, -1)`` for a step it says
        nothing about), for the poisoned/stale audit; ``[]`` for a baseline whose entries
        prescribe no calls."""

    def size(self) -> int:
        """Entries stored (the library size column)."""
        return len(self.audit_entries())


#: Baseline variant name -> class; filled by the implementations below.
BASELINES: dict[str, type] = {}


def make_baseline(name: str, env, seed: int, **kwargs) -> Baseline:
    """The baseline called ``name`` (a key of :data:`BASELINES`).

    Raises
    ------
    KeyError
        Unknown name (callers check with :data:`BASELINES` first).
    """
    return BASELINES[name](env, seed, **kwargs)
