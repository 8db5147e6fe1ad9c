"""What a loop agent knows in an episode: its lessons read as calls, and the knowledge it
brings into a run (:class:`dyna.agents.baselines.Knowledge`).

A lesson names tools and values; :class:`LessonReader` reads those names against the
env's current tool list, so a lesson naming a renamed tool maps to its old slot, which
errors. A skill (:func:`skill_knowledge`) gives a whole procedure; memory facts
(:func:`fact_knowledge`) give one step's tool or value each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dyna.agents.baselines import Knowledge

__all__ = ["FactKnowledge", "LessonReader", "fact_knowledge", "skill_knowledge"]

#: One step of a skill's body: ``N. call `tool` with `value```.
SKILL_CALL_RE = re.compile(r"call `(\w+)` with `(\w+)`")
#: A memory fact: ``"<key words> step <k> <value|tool> is <name>"``.
FACT_RE = re.compile(r"^(.+?) step (\d+) (value|tool) is (\w+)$")


@dataclass
class FactKnowledge(Knowledge):
    """What a memory loop brings into one episode: :class:`Knowledge` whose ``tools`` and
    ``values`` come from memory facts, with the facts they came from.

    Attributes
    ----------
    facts : dict of int -> tuple of str
        Procedure step (0-based) -> the texts of the facts that gave ``tools[step]`` and
        ``values[step]``. A call made from both names them in the digest
        (:attr:`dyna.loops.ToolCall.skills`), so a call that returns an error contradicts
        them (:meth:`dyna.loops.LearningLoop.finish`).
    """

    facts: dict = field(default_factory=dict)


class LessonReader:
    """Reads lessons (skill bodies, memory facts) as tool and value indices of ``env``.

    The tool names are read again by :meth:`sync` (the agent is given the current tool
    list with each task); until then a lesson is read against the names of the last sync.

    Parameters
    ----------
    env : envs.agent_tasks.AgentTaskEnv
    """

    def __init__(self, env):
        self.env = env
        self.tool_names = env.tool_names
        #: Tool name -> slot, as of the last :meth:`sync`.
        self.tool_index = {n: i for i, n in enumerate(env.tool_names)}
        #: Value name -> index.
        self.value_index = {n: i for i, n in enumerate(env.value_names)}

    def sync(self) -> None:
        """Read the env's tool names again when they changed (a renamed tool)."""
        names = self.env.tool_names
        if names != self.tool_names:
            self.tool_names = names
            self.tool_index = {n: i for i, n in enumerate(names)}

    def skill_calls(self, body: str) -> list[tuple[int, int]]:
        """The ``(tool, value)`` indices of a skill body's steps, in order (-1 for a name
        the env does not know)."""
        return [(self.tool_index.get(t, -1), self.value_index.get(v, -1))
                for t, v in SKILL_CALL_RE.findall(body)]

    def fact(self, text: str) -> tuple[tuple[str, ...] | None, int, str, int]:
        """``(key words, step, kind, index)`` of a memory fact: its key words, its step
        (1-based), ``"value"`` or ``"tool"``, and the value's or tool's index (-1 for a
        name the env does not know); ``(None, 0, "", -1)`` for a text that is no fact."""
        m = FACT_RE.match(text)
        if m is None:
            return None, 0, "", -1
        kind = m.group(3)
        ix = (self.value_index if kind == "value" else self.tool_index).get(m.group(4), -1)
        return tuple(m.group(1).split()), int(m.group(2)), kind, ix

    def family_of_key(self, words) -> int | None:
        """The family a lesson's key words name
        (:meth:`envs.agent_tasks.AgentTaskEnv.family_of_key`)."""
        return self.env.family_of_key(tuple(words))


def skill_knowledge(matches, reader: LessonReader, family: int) -> Knowledge:
    """The knowledge of the skills a loop injected for a task (``matches``, best first,
    each with ``.name`` and ``.skill``): each skill's procedure, its name, and whether it
    is about another family than the task's (``irrelevant``)."""
    k = Knowledge()
    for m in matches:
        k.calls.append(reader.skill_calls(m.skill.body))
        if reader.family_of_key(m.skill.triggers) != family:
            k.irrelevant += 1
    k.entries = len(matches)
    k.names = tuple(m.name for m in matches)
    return k


def fact_knowledge(entries, reader: LessonReader, task: str) -> FactKnowledge:
    """The knowledge of the memory facts a loop put in context for ``task``: per step the
    first tool fact and the first value fact (in context order) whose key words the task's
    words hold (what the agent reads, never the family the env hides); the other facts
    count as irrelevant."""
    k = FactKnowledge()
    words = set(task.split())
    for e in entries:
        key, step, kind, ix = reader.fact(e.text)
        if key is None or not words.issuperset(key):
            k.irrelevant += 1
            continue
        got = k.values if kind == "value" else k.tools
        if step - 1 not in got:
            got[step - 1] = ix
            k.facts[step - 1] = k.facts.get(step - 1, ()) + (e.text,)
    k.entries = len(entries)
    return k
