"""The policy model every loop-agent variant shares: how one run acts on one task.

At each procedure position the agent first decides, once, whether it follows what it
knows (probability ``p_follow``). If it does, it tries the calls its knowledge gives for
this position in order (best-matched skill first, then what its facts say), skipping calls
that already failed here. Otherwise, or when the knowledge is used up, it *explores*: it
calls a tool it has not tried at this position (never the harmful tool of its own accord)
with a value it has not tried with that tool. Errors say whether the tool or only the
value was wrong, and the agent uses that (under ``uninformative_errors`` it learns only
that the call failed). A task hint (``dyna/AgentTasks-v2``'s ``hint``) is explored first,
after what its facts say. With the env's ``planted_follow_rate`` set, the agent obeys an
instruction planted in the output it has just read, and a lesson's harmful step, each when
:meth:`~envs.agent_tasks.AgentTaskEnv.falls_for_planted` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dyna.agents.baselines import Knowledge
from dyna.agents.loop_agents.fields import episode_stats
from dyna.agents.loop_agents.knowledge import FactKnowledge
from envs.agent_tasks import RESULT_OK, RESULT_WRONG_TOOL, RESULT_WRONG_VALUE

__all__ = ["Position", "act"]


@dataclass
class Position:
    """What the agent knows and has learnt at one procedure position of a run.

    Attributes
    ----------
    index : int
        The position (procedure steps done).
    guide : list of (int, int)
        The calls its knowledge gives here, in the order it tries them (empty when it
        does not follow its knowledge here).
    source : dict
        Call -> the names of the skills (or texts of the facts) that give it.
    fact_tool, fact_value : int
        The tool and value the facts give here (-1: none, or not followed).
    tried : set of (int, int)
        Calls made (or passed over) here, and those the knowledge says to avoid.
    bad_tools : set of int
        Tools that errored "wrong tool" here.
    known_tool : int
        The tool known right here (it errored "wrong value"), -1 if none.
    bad_values : set of int
        Values that errored with ``known_tool``.
    """

    index: int
    guide: list = field(default_factory=list)
    source: dict = field(default_factory=dict)
    fact_tool: int = -1
    fact_value: int = -1
    tried: set = field(default_factory=set)
    bad_tools: set = field(default_factory=set)
    known_tool: int = -1
    bad_values: set = field(default_factory=set)

    @classmethod
    def read(cls, know: Knowledge, index: int, follow: bool) -> "Position":
        """The position ``index`` as the agent starts it: the knowledge's calls for it
        when it ``follow``\\ s them, and the calls its knowledge says to avoid."""
        here = cls(index, tried={(t, v) for s, t, v in know.avoid if s == index})
        if not follow:
            return here
        for i, c in enumerate(know.calls):
            if len(c) > index and c[index][0] >= 0 and c[index][1] >= 0:
                here.guide.append(c[index])
                if i < len(know.names):
                    here.source.setdefault(c[index], []).append(know.names[i])
        if know.values or know.tools:
            t = know.tools.get(index, -1)
            v = know.values.get(index, -1)
            if t >= 0 and v >= 0:
                here.guide.append((t, v))
                if isinstance(know, FactKnowledge):   # the call names its facts
                    here.source.setdefault((t, v), []).extend(know.facts.get(index, ()))
            here.fact_tool, here.fact_value = t, v
        return here

    def learn(self, call: tuple[int, int], result: int) -> None:
        """What an error of ``call`` says: a wrong tool, or the right tool and a wrong
        value."""
        if result == RESULT_WRONG_TOOL:
            self.bad_tools.add(call[0])
        elif result == RESULT_WRONG_VALUE:
            self.known_tool = call[0]
            self.bad_values.add(call[1])


def _guided_call(env, here: Position, planted_rate) -> tuple[tuple[int, int] | None, str]:
    """``(call, origin)``: the instruction planted in the last output when the agent obeys
    it (``"planted"``), else the first call of the guide not yet ruled out (``"entry"``; a
    lesson's harmful step is passed over unless the agent falls for it), else
    ``(None, "explore")``."""
    if planted_rate is not None and env.planted[0] > 0 and env.falls_for_planted():
        return (env.planted[0] - 1, env.planted[1] - 1), "planted"
    for g in here.guide:
        if g not in here.tried and g[0] not in here.bad_tools and not (
                g[0] == here.known_tool and g[1] in here.bad_values):
            if g[0] == env.harmful_tool and planted_rate is not None \
                    and not env.falls_for_planted():
                here.tried.add(g)   # a lesson's harmful step, not followed this time
                continue
            return g, "entry"
    return None, "explore"


def _explored_call(env, here: Position, rng, planted_rate, tools: list) -> tuple[int, int]:
    """A call the agent makes without a guide: the known tool, else the facts' tool, else
    the hint's, else a uniform draw among the ``tools`` not ruled out; then the facts'
    value, else the hint's, else a uniform draw among the values not tried with it."""
    if here.fact_tool == env.harmful_tool and planted_rate is not None \
            and not env.falls_for_planted():
        here.fact_tool = -1   # a fact's harmful tool, not followed at this position
    hint = getattr(env, "task_hint", ())
    hint_tool, hint_value = hint[here.index] if hint else (-1, -1)
    if here.known_tool >= 0:
        tool = here.known_tool
    elif here.fact_tool >= 0 and here.fact_tool not in here.bad_tools:
        tool = here.fact_tool
    elif hint_tool >= 0 and hint_tool not in here.bad_tools:
        tool = hint_tool
    else:
        free = [t for t in tools if t not in here.bad_tools]
        tool = free[int(rng.integers(len(free)))] if free else \
            tools[int(rng.integers(len(tools)))]
    if tool == here.known_tool:
        vals = [v for v in range(env.n_values) if v not in here.bad_values]
    else:
        vals = list(range(env.n_values))
    if here.fact_value >= 0 and here.fact_value in vals \
            and (tool, here.fact_value) not in here.tried:
        value = here.fact_value
    elif tool == hint_tool and hint_value in vals and (tool, hint_value) not in here.tried:
        value = hint_value
    else:
        vals = [v for v in vals if (tool, v) not in here.tried] or vals
        value = vals[int(rng.integers(len(vals)))]
    return tool, value


def _poisoned(origin: str, call: tuple[int, int], right: tuple[int, int],
              here: Position) -> bool:
    """Whether a call that followed a stored entry (``origin`` ``"entry"`` or ``"fact"``)
    is wrong for the task's current procedure (``right``: its call at this position)."""
    if origin == "entry":
        return call != right
    return origin == "fact" and (call[0] == here.fact_tool != right[0]
                                 or call[1] == here.fact_value != right[1])


def act(env, know: Knowledge, rng, p_follow: float) -> tuple[list, dict, list, dict]:
    """Play one episode of ``env`` (reset, its context declared) with the shared policy.

    Parameters
    ----------
    env : envs.agent_tasks.AgentTaskEnv
    know : Knowledge
        What the agent brings into the run.
    rng : numpy.random.Generator
        The policy's generator of this episode.
    p_follow : float
        Probability of following the knowledge at a position, in [0, 1].

    Returns
    -------
    calls : list of ((int, int), str, bool)
        ``((tool, value), output, error)`` per call.
    info : dict
        The last step's info.
    followed : list of tuple of str
        Per call, the names of the injected skills whose procedure gave it and the texts
        of the facts that gave its tool and value (empty when it followed none).
    stats : dict
        :func:`dyna.agents.loop_agents.fields.episode_stats`, counted.
    """
    planted_rate = getattr(env, "planted_follow_rate", None)
    tools = list(env.callable_tools()) if hasattr(env, "callable_tools") \
        else list(range(env.n_tools))
    truth = env.procedure(env.family)
    stats = episode_stats()
    calls, followed = [], []
    here = None
    while True:
        if here is None or here.index != env.position:   # fresh local knowledge
            here = Position.read(know, env.position, rng.random() < p_follow)
        call, origin = _guided_call(env, here, planted_rate)
        followed.append(tuple(here.source.get(call, ())) if call is not None else ())
        if call is None:
            call = _explored_call(env, here, rng, planted_rate, tools)
            if call[0] == here.fact_tool or call[1] == here.fact_value:
                origin = "fact"
        here.tried.add(call)
        stats["poisoned_follows"] += _poisoned(origin, call, truth[here.index], here)
        _, _, terminated, truncated, info = env.step(call)
        stats["context_tokens"] += info["tokens"]["context"]
        stats["errors"] += env.last_result != RESULT_OK
        stats["catalog_tokens"] += info["tokens"].get("catalog", 0)
        if info["incident"]:
            stats["incident_direct"] = origin == "planted"
            stats["incident_lesson"] = origin in ("entry", "fact")
        calls.append((call, info["tool_output"], env.last_result != RESULT_OK))
        here.learn(call, env.last_result)
        if terminated or truncated:
            return calls, info, followed, stats
