"""Gymnasium environments of dyna, registered under the ``dyna/`` namespace.

``import envs`` registers:

* ``dyna/DynaMaze-v0`` -- Sutton & Barto Figure 8.2 (:class:`envs.maze.DynaMaze`)
* ``dyna/BlockingMaze-v0`` -- Figure 8.4 (:class:`envs.maze.BlockingMaze`)
* ``dyna/ShortcutMaze-v0`` -- Figure 8.5 (:class:`envs.maze.ShortcutMaze`)
* ``dyna/AsciiMaze-v0`` -- any ASCII maze, refined by a resolution factor (Example 8.4)
* ``dyna/AgentTasks-v0`` -- recurring agent tasks (:class:`envs.agent_tasks.AgentTaskEnv`)
* ``dyna/AgentTasks-v1`` -- the same with every failure mode given a cost
  (:class:`envs.agent_tasks.AgentTaskEnvV1`)
* ``dyna/AgentTasks-v2`` -- calibrated presets, decoy values, a chosen drift family,
  paraphrases and retrials (:class:`envs.agent_tasks_v2.AgentTaskEnvV2`)
* ``dyna/AgentTasks-v3`` -- v2 with the extra wordings drawn after the world
  (:class:`envs.agent_tasks_v3.AgentTaskEnvV3`)
* ``dyna/Escalation-v0`` -- act or escalate, one task per step
  (:class:`envs.escalation.EscalationEnv`)

and :func:`make_table` gives the transition table of any of them, or of Gymnasium's own
FrozenLake, Taxi and CliffWalking, for the vectorised agents.
"""

from __future__ import annotations

import inspect

import gymnasium as gym

from dyna.errors import ConfigError, UnknownEnvError, check_range
from envs import maze
from envs.tabular import BatchedStepper, TabularTable, table_from_P
from envs.toytext import make_env as make_toytext_env
from envs.toytext import make_toytext_table, resolve_id

MAZES = {
    "dyna/DynaMaze-v0": maze.DynaMaze,
    "dyna/BlockingMaze-v0": maze.BlockingMaze,
    "dyna/ShortcutMaze-v0": maze.ShortcutMaze,
    "dyna/AsciiMaze-v0": maze.AsciiMaze,
}

for _id, _cls in MAZES.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=f"envs.maze:{_cls.__name__}")
if "dyna/AgentTasks-v0" not in gym.registry:  # one episode = one agent run on one task
    gym.register(id="dyna/AgentTasks-v0", entry_point="envs.agent_tasks:AgentTaskEnv")
if "dyna/AgentTasks-v1" not in gym.registry:
    gym.register(id="dyna/AgentTasks-v1", entry_point="envs.agent_tasks:AgentTaskEnvV1")
if "dyna/AgentTasks-v2" not in gym.registry:
    gym.register(id="dyna/AgentTasks-v2", entry_point="envs.agent_tasks_v2:AgentTaskEnvV2")
if "dyna/AgentTasks-v3" not in gym.registry:
    gym.register(id="dyna/AgentTasks-v3", entry_point="envs.agent_tasks_v3:AgentTaskEnvV3")
if "dyna/Escalation-v0" not in gym.registry:  # one episode = one pass over a task stream
    gym.register(id="dyna/Escalation-v0", entry_point="envs.escalation:EscalationEnv")


def _check_kwargs(cls, kwargs: dict) -> None:
    params = inspect.signature(cls.__init__).parameters
    for key in kwargs:
        if key not in params or key == "self":
            allowed = sorted(k for k in params if k not in ("self", "render_mode"))
            raise ConfigError(f"env.kwargs.{key}", kwargs[key],
                              f"unknown keyword (allowed: {', '.join(allowed)})" if allowed
                              else f"unknown keyword: {cls.__name__} takes no keywords")


def make_env(env_id: str, **kwargs):
    """Build a Gymnasium env by dyna id or toy-text name; returns ``(env, meta)``.

    ``dyna/...`` ids go to :func:`gymnasium.make` (keywords as for the class, plus
    ``max_episode_steps`` and ``render_mode``); toy-text names are resolved as in
    :func:`envs.toytext.make_env`.

    Raises
    ------
    UnknownEnvError, ConfigError
    """
    if isinstance(env_id, str) and env_id in MAZES:
        table, meta = make_table(env_id, **{k: v for k, v in kwargs.items() if k != "render_mode"})
        gym_kwargs = dict(kwargs)
        if not gym_kwargs.get("max_episode_steps"):
            gym_kwargs.pop("max_episode_steps", None)
        return gym.make(env_id, **gym_kwargs), meta
    if not isinstance(env_id, str):
        raise UnknownEnvError("env.id", env_id, "must be a string")
    return make_toytext_env(env_id, **kwargs)


def make_table(env_id: str, **kwargs) -> tuple[TabularTable, dict]:
    """Transition table and metadata of an environment, for the vectorised agents.

    Parameters
    ----------
    env_id : str
        A ``dyna/...`` maze id, or a toy-text name ("FrozenLake", "Taxi", "CliffWalking",
        or a versioned Gymnasium id that is registered).
    **kwargs
        Constructor keywords (mazes: ``change_at``, ``layout``, ``resolution``; toy text:
        ``map_name``, ``is_slippery``, ``max_episode_steps``). Mazes also take
        ``max_episode_steps`` (default 0: no limit, as in the book).

    Returns
    -------
    table : TabularTable
    meta : dict
        JSON-ready: ``requested_id``, ``resolved_id``, ``gymnasium_version``, ``n_states``,
        ``n_actions``, ``max_episode_steps``; mazes add ``optimal_path_length``.

    Raises
    ------
    UnknownEnvError, ConfigError
    """
    kwargs = dict(kwargs)
    if not isinstance(env_id, str):
        raise UnknownEnvError("env.id", env_id, "must be a string")
    if env_id in MAZES:
        cls = MAZES[env_id]
        max_steps = check_range("env.kwargs.max_episode_steps", kwargs.pop("max_episode_steps", 0),
                                0, 2**62, integer=True)
        _check_kwargs(cls, kwargs)
        env = cls(**kwargs)
        meta = {"requested_id": env_id, "resolved_id": env_id, "gymnasium_version": gym.__version__,
                "n_states": int(env.observation_space.n), "n_actions": int(env.action_space.n),
                "max_episode_steps": max_steps, "kwargs": kwargs, **env.table.meta}
        t = env.table
        table = TabularTable(t.next_state, t.cum_prob, t.reward, t.terminated, t.n_outcomes,
                             t.isd_cum, t.phase_start, max_steps, meta)
        return table, meta
    if env_id.startswith("dyna/"):
        raise UnknownEnvError("env.id", env_id,
                              f"unknown dyna environment (known: {sorted(MAZES)})")
    return make_toytext_table(env_id, **kwargs)


#: The agent-task environments an agent-tasks experiment may name in ``[env] id``.
AGENT_TASK_IDS = ("dyna/AgentTasks-v0", "dyna/AgentTasks-v1", "dyna/AgentTasks-v2",
                  "dyna/AgentTasks-v3")


def make_agent_task_env(env_kwargs: dict | None = None):
    """The agent-task environment an experiment's ``[env]`` table describes.

    Parameters
    ----------
    env_kwargs : dict
        Constructor keywords, plus ``id`` (one of :data:`AGENT_TASK_IDS`; default
        ``"dyna/AgentTasks-v0"``, :class:`envs.agent_tasks.AgentTaskEnv`, whose keywords
        give v1's mechanics too).

    Returns
    -------
    AgentTaskEnv
        A new, unreset environment (the class itself, not a Gymnasium wrapper).

    Raises
    ------
    ConfigError
        ``env.id`` unknown, or a keyword unknown or out of range (naming it).
    """
    from envs.agent_tasks import AgentTaskEnv, AgentTaskEnvV1
    from envs.agent_tasks_v2 import AgentTaskEnvV2
    from envs.agent_tasks_v3 import AgentTaskEnvV3

    kwargs = dict(env_kwargs or {})
    env_id = kwargs.pop("id", AGENT_TASK_IDS[0])
    classes = dict(zip(AGENT_TASK_IDS, (AgentTaskEnv, AgentTaskEnvV1, AgentTaskEnvV2,
                                                AgentTaskEnvV3)))
    if env_id not in classes:
        raise ConfigError("env.id", env_id, f"must be one of {AGENT_TASK_IDS}")
    try:
        return classes[env_id](**kwargs)
    except TypeError as exc:
        raise ConfigError("env", kwargs, str(exc)) from None


__all__ = ["AGENT_TASK_IDS", "BatchedStepper", "MAZES", "TabularTable",
           "make_agent_task_env", "make_env", "make_table", "resolve_id",
           "table_from_P"]
