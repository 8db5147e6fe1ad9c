"""Gymnasium's own toy-text environments (FrozenLake, Taxi, CliffWalking) for dyna.

Gymnasium bumps toy-text versions now and then (Taxi-v3 became Taxi-v4 and CliffWalking-v0
became CliffWalking-v1 in Gymnasium 1.x, and the old ids raise ``DeprecatedEnv``). dyna names
these tasks without a version ("FrozenLake", "Taxi", "CliffWalking", case and punctuation
free) and resolves each to the highest version the *installed* Gymnasium registers; the
resolved id goes into the run metadata. An explicitly versioned id is taken as it is, and
an id the installed Gymnasium does not register is an error: dyna never silently swaps one
version for another, since versions differ in dynamics.

Step limits: FrozenLake 4x4 keeps its registered 100 steps, FrozenLake 8x8 is built from
``FrozenLake8x8-v1`` (200 steps), Taxi 200 steps. CliffWalking has no step limit in
Gymnasium; dyna imposes :data:`CLIFFWALKING_MAX_STEPS` (overridable) and reports it.
"""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import find_highest_version

from dyna.errors import ConfigError, UnknownEnvError
from envs.tabular import TabularTable, table_from_P

#: Step limit dyna imposes on CliffWalking (Gymnasium registers none).
CLIFFWALKING_MAX_STEPS = 500

_CANONICAL = {"frozenlake": "FrozenLake", "taxi": "Taxi", "cliffwalking": "CliffWalking"}


def canonical_name(name: str) -> str | None:
    """``"frozen_lake"``, ``"FrozenLake"``, ``"taxi"`` ... -> Gymnasium's name, or None."""
    key = re.sub(r"[^a-z0-9]", "", str(name).lower())
    return _CANONICAL.get(key)


def resolve_id(name: str, map_name: str | None = None) -> str:
    """The Gymnasium id to build for a toy-text task name.

    ``"FrozenLake"`` with ``map_name="8x8"`` resolves to ``FrozenLake8x8-v<N>`` so that the
    registered 200-step limit applies. Versioned ids (``"Taxi-v4"``) are checked, not changed.

    Raises
    ------
    UnknownEnvError
        The name is not a toy-text task, or the versioned id is not registered (for
        example ``Taxi-v3`` under Gymnasium 1.4).
    """
    m = re.fullmatch(r"([A-Za-z0-9]+)-v(\d+)", str(name))
    if m:
        if name not in gym.registry:
            latest = find_highest_version(None, m.group(1))
            hint = (f"; the installed Gymnasium {gym.__version__} has {m.group(1)}-v{latest}"
                    if latest is not None else "")
            raise UnknownEnvError("env.id", name, f"is not registered{hint}")
        return name
    base = canonical_name(name)
    if base is None:
        raise UnknownEnvError("env.id", name,
                              "unknown environment (dyna/DynaMaze-v0, dyna/BlockingMaze-v0, "
                              "dyna/ShortcutMaze-v0, dyna/AsciiMaze-v0, FrozenLake, Taxi, "
                              "CliffWalking)")
    if base == "FrozenLake" and map_name == "8x8":
        base = "FrozenLake8x8"
    version = find_highest_version(None, base)
    if version is None:
        raise UnknownEnvError("env.id", name, f"Gymnasium {gym.__version__} registers no {base}")
    return f"{base}-v{version}"


def make_env(name: str, **kwargs) -> tuple[gym.Env, dict]:
    """Build a toy-text env by dyna name; returns ``(env, meta)``.

    Keyword arguments go to :func:`gymnasium.make` (``is_slippery``, ``map_name``,
    ``max_episode_steps``, ``render_mode``...). FrozenLake's ``is_slippery`` is always passed
    explicitly (default True, Gymnasium's own default) and recorded in ``meta``.

    Raises
    ------
    UnknownEnvError
        Unknown name or unregistered version.
    ConfigError
        A keyword the environment does not accept (named as ``env.kwargs.<key>``), or an
        env whose observation or action space is not Discrete (``CartPole-v1``), named as
        ``env.id``.
    """
    from dyna.errors import check_range

    kwargs = dict(kwargs)
    if not isinstance(name, str):
        raise UnknownEnvError("env.id", name, "must be a string")
    map_name = kwargs.get("map_name")
    resolved = resolve_id(name, map_name)
    base = resolved.split("-v")[0]
    if base.startswith("FrozenLake"):
        kwargs.setdefault("is_slippery", True)
        if not isinstance(kwargs["is_slippery"], bool):
            raise ConfigError("env.kwargs.is_slippery", kwargs["is_slippery"],
                              "must be true or false")
        if map_name is not None and map_name not in ("4x4", "8x8"):
            raise ConfigError("env.kwargs.map_name", map_name, 'must be "4x4" or "8x8"')
        if base == "FrozenLake8x8":
            kwargs.pop("map_name", None)
    if "max_episode_steps" in kwargs:
        kwargs["max_episode_steps"] = check_range("env.kwargs.max_episode_steps",
                                                  kwargs["max_episode_steps"], 1, 2**62,
                                                  integer=True)
    imposed = False
    if base == "CliffWalking" and "max_episode_steps" not in kwargs:
        kwargs["max_episode_steps"] = CLIFFWALKING_MAX_STEPS
        imposed = True
    try:
        env = gym.make(resolved, **kwargs)
    except TypeError as exc:
        bad = re.search(r"argument '(\w+)'", str(exc))
        if bad is None:
            raise ConfigError("env.kwargs", kwargs, f"not accepted by {resolved}: {exc}") from None
        key = bad.group(1)
        raise ConfigError(f"env.kwargs.{key}", kwargs.get(key),
                          f"not accepted by {resolved}") from None
    spaces = {"observation": env.observation_space, "action": env.action_space}
    for what, space in spaces.items():
        if not isinstance(space, gym.spaces.Discrete):
            env.close()
            raise ConfigError("env.id", name, f"has a {type(space).__name__} {what} space: "
                              "the tabular agents need Discrete observation and action "
                              "spaces")
    spec = env.spec
    meta = {
        "requested_id": name,
        "resolved_id": resolved,
        "gymnasium_version": gym.__version__,
        "n_states": int(env.observation_space.n),
        "n_actions": int(env.action_space.n),
        "max_episode_steps": int(spec.max_episode_steps or 0),
        "max_episode_steps_imposed_by_dyna": imposed,
        "kwargs": {k: v for k, v in kwargs.items() if k != "render_mode"},
    }
    if base.startswith("FrozenLake"):
        meta["is_slippery"] = bool(kwargs["is_slippery"])
        meta["map_name"] = "8x8" if base == "FrozenLake8x8" else kwargs.get("map_name", "4x4")
    return env, meta


def make_toytext_table(name: str, **kwargs) -> tuple[TabularTable, dict]:
    """Transition table of a toy-text env (its ``P`` and initial-state distribution)."""
    env, meta = make_env(name, **kwargs)
    u = env.unwrapped
    if not isinstance(getattr(u, "P", None), dict) or not hasattr(u, "initial_state_distrib"):
        env.close()
        raise ConfigError("env.id", name, "has no transition table (the P and "
                          "initial_state_distrib of Gymnasium's toy-text envs), which the "
                          "tabular agents' model is built from")
    table = table_from_P(u.P, np.asarray(u.initial_state_distrib, dtype=np.float64),
                         max_episode_steps=meta["max_episode_steps"], meta=meta)
    env.close()
    return table, meta
