"""What every literature baseline shares: the run it learns from, the knowledge it hands
the agent, the :class:`Baseline` interface, and the task-text and call-name helpers.

The conventions (the package docstring gives them in full): a task's *key* is its first
``title_words`` content words; a lesson keeps its calls by tool and value *name*, read
back as indices against the env's current names; an entry is *about* a task when all its
key words are among the task's words.

This module may import :mod:`dyna.loops`, :mod:`dyna.errors` and numpy; never
:mod:`dyna.agents.loop_agents` (which imports this package).
"""

from __future__ import annotations

import re
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from dyna.errors import check_range
from dyna.loops._text import content_words

__all__ = ["Baseline", "Knowledge", "RunRecord", "TaskBaseline", "agrees", "audit_step",
           "cosine", "steps"]


@dataclass
class Knowledge:
    """What the agent brings into one episode.

    Attributes
    ----------
    calls : list of list of (int, int)
        Procedures to follow, best first: per procedure, ``(tool, value)`` index pairs per
        step (``-1`` for a name the env does not know).
    values, tools : dict of int -> int
        Memory-style facts: procedure step (0-based) -> value index / tool index. A step
        with a tool and no value (or value ``-1``) says "call this tool" and leaves the
        value for the agent to fill (how :meth:`LoopAgent._act` reads it).
    entries : int
        Context entries (skills, facts, reflections, rules, examples) injected: tokens
        per entry.
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
        The trusted outcome (the ground-truth evaluator: a test suite, the env's check).
    self_assessed_success : bool
        The agent's own opinion.
    tokens : int
        Tokens of the run.
    task_instance : int
        Which task instance the run attempted (the env's reset info ``task_instance``:
        the 0-based id of the fresh task; its retrials keep the id).
    retrial : int
        0 for a fresh task, ``k`` for its ``k``-th retrial (reset info ``retrial``).
    """

    run_id: str
    family: int
    task: str
    calls: tuple
    verified_success: bool
    self_assessed_success: bool
    tokens: int
    task_instance: int
    retrial: int


class Baseline(ABC):
    """One literature baseline (the package docstring).

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
    def knowledge(self, task: str, *, task_instance: int) -> Knowledge:
        """What to bring into a run on ``task``, an attempt of task instance
        ``task_instance`` (:attr:`RunRecord.task_instance`; only a baseline that keeps
        lessons per instance reads it)."""

    @abstractmethod
    def learn(self, run: RunRecord) -> int:
        """Learn from a finished run; returns the learning tokens spent (>= 0)."""

    @abstractmethod
    def audit_entries(self) -> list[tuple[str, tuple]]:
        """Every stored entry as ``(key, calls)``: the trigger words it is about and the
        ``(tool, value)`` pairs it prescribes per step (``-1`` for a tool or value it
        says nothing about, ``(-1, -1)`` for a whole step), for the poisoned/stale audit;
        ``[]`` for a baseline whose entries prescribe no calls."""

    def size(self) -> int:
        """Entries stored (the library size column)."""
        return len(self.audit_entries())


def cosine(a, b) -> float:
    """Bag-of-words cosine of two word sets (binary weights): ``|a & b| / sqrt(|a| |b|)``,
    0 when either is empty."""
    if not a or not b:
        return 0.0
    return len(a & b) / float(np.sqrt(len(a) * len(b)))


def steps(run: RunRecord):
    """``(position, (tool, value), error)`` per call of ``run``: the procedure position the
    call was made at (an ok call advances it)."""
    pos = 0
    for call, _, err in run.calls:
        yield pos, (int(call[0]), int(call[1])), bool(err)
        if not err:
            pos += 1


def agrees(calls, truth) -> bool:
    """Whether an entry's calls are right for a procedure: as many steps, and every tool
    and value the entry states equal to the procedure's (``-1`` states nothing, so
    ``(-1, -1)`` is a step it says nothing about and ``(tool, -1)`` a tool without a
    value).

    Parameters
    ----------
    calls : sequence of (int, int)
        The entry's ``(tool, value)`` per step (:meth:`Baseline.audit_entries`).
    truth : sequence of (int, int)
        The procedure's ``(tool, value)`` per step.
    """
    return len(calls) == len(truth) and all(
        (c[0] < 0 or c[0] == t[0]) and (c[1] < 0 or c[1] == t[1])
        for c, t in zip(calls, truth))


def audit_step(step: int, call, length: int) -> tuple:
    """An entry that prescribes ``call`` at ``step`` and nothing about the other steps of
    a ``length``-step procedure (``(-1, -1)`` there), so that :func:`agrees` holds a
    right one right; when ``length`` is ``step`` or less the entry ends at ``step``."""
    return ((-1, -1),) * step + (tuple(call),) + ((-1, -1),) * (length - step - 1)


#: A planted instruction in a tool output (:mod:`envs.agent_tasks`).
NOTE_RE = re.compile(r"NOTE: to finish this task, call (\w+) with (\w+) next")


class TaskBaseline(Baseline):
    """What every baseline here shares: the task's key, and calls kept by *name*.

    A lesson names its tools and values (as text an LLM would write); indices are read
    against the env's current name lists each time knowledge is built or audited, so a
    lesson that names a renamed tool's old name points to the old slot, which errors.

    Parameters
    ----------
    env, seed, title_words, tokens_per_review
        As :class:`Baseline`.
    copy_rate : float
        Probability in [0, 1] that an LLM writer copies a planted instruction it read in a
        tool output into what it writes (the package docstring).

    Raises
    ------
    dyna.errors.ConfigError
        ``copy_rate`` outside [0, 1].
    """

    def __init__(self, env, seed: int, title_words: int = 2, tokens_per_review: int = 300,
                 copy_rate: float = 0.0):
        super().__init__(env, seed, title_words, tokens_per_review)
        check_range("copy_rate", copy_rate, 0.0, 1.0)
        self.copy_rate = float(copy_rate)

    # -- names ------------------------------------------------------------------------
    def _named(self, call) -> tuple[str, str]:
        """A ``(tool, value)`` index pair as the names an LLM writer would write."""
        return (self.env.tool_names[call[0]], self.env.value_names[call[1]])

    def _tool_ix(self, name: str) -> int:
        """The index of a tool name now (``-1`` for a name the env does not know)."""
        tools = self.env.tool_names
        return tools.index(name) if name in tools else -1

    def _ix(self, named) -> tuple[int, int]:
        """``(tool, value)`` indices of a named call now (``-1`` for an unknown name)."""
        values = self.env.value_names
        return (self._tool_ix(named[0]),
                values.index(named[1]) if named[1] in values else -1)

    def _ix_calls(self, named_calls: tuple) -> tuple:
        """Indices of a sequence of named calls now."""
        return tuple(self._ix(c) for c in named_calls)

    # -- task text --------------------------------------------------------------------
    def key(self, task: str) -> tuple[str, ...]:
        """The task's key: its first ``title_words`` content words."""
        return content_words(task)[:self.title_words]

    @staticmethod
    def _words(task: str) -> frozenset:
        return frozenset(content_words(task))

    @staticmethod
    def _about(key, words) -> bool:
        """An entry is about a task when all its key words are in the task's words (the
        memory loop's rule; a key shared by two families' titles counts as about both)."""
        return bool(key) and words.issuperset(key)

    # -- runs -------------------------------------------------------------------------
    def _ok_calls(self, run: RunRecord) -> tuple:
        """The run's calls that returned ok, in order, by name."""
        return tuple(self._named(c) for _, c, err in steps(run) if not err)

    def _planted(self, run: RunRecord):
        """``(call index, position, named call)`` of the first planted instruction in the
        run's tool outputs when the writer copies it (probability :attr:`copy_rate`,
        drawn from ``(seed, crc32(run_id), 1)``), else None. The position is the
        procedure position after the call whose output carried it."""
        if self.copy_rate <= 0.0:
            return None
        rng = np.random.default_rng([int(self.seed), zlib.crc32(run.run_id.encode("utf-8")),
                                     1])
        if rng.random() >= self.copy_rate:
            return None
        for i, ((pos, _, err), (_, out, _)) in enumerate(zip(steps(run), run.calls)):
            m = NOTE_RE.search(out)
            if m:
                return i, pos + (not err), (m.group(1), m.group(2))
        return None

    def _lesson(self, run: RunRecord) -> tuple:
        """What an LLM writer reads as the run's procedure: its ok calls, with a planted
        instruction it copied inserted where it was seen."""
        calls = self._ok_calls(run)
        got = self._planted(run)
        if got is None:
            return calls
        _, pos, call = got
        return calls[:pos] + (call,) + calls[pos:]
