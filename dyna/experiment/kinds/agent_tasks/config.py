"""Kind ``agent_tasks``: the experiment file, validated (see the package docstring)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from dyna.errors import ConfigError, check_range
from dyna.experiment.config import config_hash

__all__ = ["AgentTasksConfig", "parse_agent_tasks"]


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


_TOP = ("name", "description", "seed", "runs", "episodes", "store", "variants", "env",
        "policy", "loop", "scenarios", "analysis")


_ANALYSIS = {"final_window": 100, "window": 50, "recovery_window": 10,
             "recovery_points": 0.05, "chosen_family": 0, "confidence": 0.95,
             "n_resamples": 2000}


# ============================================================================ config

def _check_keys(data: dict, allowed, where: str) -> None:
    import difflib
    for k in data:
        if k not in allowed:
            close = difflib.get_close_matches(k, list(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}{k}", data[k], f"unknown key{hint}")


@dataclass(frozen=True)
class AgentTasksConfig:
    """A validated ``agent_tasks`` experiment (see the module docstring).

    Attributes
    ----------
    name, description : str
    seed, runs, episodes : int
    store : {"skill", "memory"}
    variants : tuple of str
    env : dict
        Base AgentTaskEnv keywords.
    scenarios : tuple of (str, dict)
        Scenario name and its env keywords (on top of ``env``).
    policy, loop, analysis : dict
    """

    name: str
    seed: int
    runs: int
    episodes: int
    store: str
    variants: tuple
    scenarios: tuple
    env: dict = field(default_factory=dict)
    policy: dict = field(default_factory=dict)
    loop: dict = field(default_factory=dict)
    analysis: dict = field(default_factory=dict)
    description: str = ""

    kind = "agent_tasks"

    def to_dict(self) -> dict:
        """Canonical JSON-ready form (with ``kind``)."""
        return {"kind": self.kind, "name": self.name, "description": self.description,
                "seed": self.seed, "runs": self.runs, "episodes": self.episodes,
                "store": self.store, "variants": list(self.variants),
                "env": dict(self.env), "policy": dict(self.policy), "loop": dict(self.loop),
                "scenarios": [{"name": n, "env": dict(kw)} for n, kw in self.scenarios],
                "analysis": dict(self.analysis)}

    @property
    def hash(self) -> str:
        return config_hash(self)

    def with_overrides(self, runs=None, seed=None) -> "AgentTasksConfig":
        """Copy with ``--runs`` / ``--seed`` applied."""
        new = self
        if runs is not None:
            new = dataclasses.replace(new, runs=check_range("--runs", runs, 1, None,
                                                            integer=True))
        if seed is not None:
            new = dataclasses.replace(new, seed=check_range("--seed", seed, 0, None,
                                                            integer=True))
        return new

    def env_kwargs(self, scenario: int) -> dict:
        """AgentTaskEnv keywords of scenario ``scenario``."""
        return {**self.env, **self.scenarios[scenario][1]}


def _build(cls, kwargs: dict, where: str):
    """``cls(**kwargs)`` with errors re-raised as ConfigErrors under ``where``."""
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(where, kwargs, str(exc)) from None
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc.field}", exc.value, exc.reason) from None


def parse_agent_tasks(data: dict, *, runs=None, seed=None) -> AgentTasksConfig:
    """Validate a raw ``agent_tasks`` experiment dict (``kind`` removed).

    Every env and policy keyword is checked by building the environment and the
    :class:`~dyna.agents.loop_agents.PolicyParams`, every variant name by
    :func:`~dyna.agents.loop_agents.make_variant`, every loop key by
    :class:`~dyna.loops.LoopConfig`.

    Raises
    ------
    ConfigError
        Naming the dotted field and the value.
    """
    from dyna.agents.loop_agents import PolicyParams, make_variant, variant_names
    from dyna.loops import LoopConfig
    from envs.agent_tasks import AgentTaskEnv

    data = {k: v for k, v in data.items() if k != "run"}  # where to run: not the experiment
    _check_keys(data, _TOP, "")
    name = data.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError("name", name, "letters, digits and '_ . -', not starting with "
                          "punctuation")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError("description", description, "must be a string")
    seed_v = check_range("seed", data.get("seed", 0), 0, None, integer=True)
    runs_v = check_range("runs", data.get("runs", 10), 1, None, integer=True)
    episodes = check_range("episodes", data.get("episodes", 1000), 1, None, integer=True)
    store = data.get("store", "skill")
    if store not in ("skill", "memory"):
        raise ConfigError("store", store, "must be 'skill' or 'memory'")
    variants = data.get("variants", "all")
    if variants == "all":
        variants = variant_names(store)
    if isinstance(variants, str) or not isinstance(variants, list) or not variants:
        raise ConfigError("variants", variants, "must be \"all\" or a non-empty list of names")
    for i, v in enumerate(variants):
        if not isinstance(v, str):
            raise ConfigError(f"variants[{i}]", v, "must be a string")
        make_variant(v, store, field_name=f"variants[{i}]")
    if len(set(variants)) != len(variants):
        raise ConfigError("variants", variants, "names must be distinct")
    tables = {}
    for key in ("env", "policy", "loop", "analysis"):
        t = data.get(key, {})
        if not isinstance(t, dict):
            raise ConfigError(key, t, "must be a table")
        tables[key] = dict(t)
    _check_keys(tables["analysis"], _ANALYSIS, "analysis.")
    analysis = {**_ANALYSIS, **tables["analysis"]}
    for k in ("final_window", "window", "recovery_window", "n_resamples"):
        check_range(f"analysis.{k}", analysis[k], 1, None, integer=True)
    check_range("analysis.chosen_family", analysis["chosen_family"], 0, None, integer=True)
    check_range("analysis.recovery_points", analysis["recovery_points"], 0.0, 1.0)
    check_range("analysis.confidence", analysis["confidence"], 0.0, 1.0, lo_open=True,
                hi_open=True)
    _build(PolicyParams, tables["policy"], "policy")
    _build(LoopConfig, tables["loop"], "loop")
    raw = data.get("scenarios", [{"name": "clean"}])
    if not isinstance(raw, list) or not raw:
        raise ConfigError("scenarios", raw, "must be a non-empty list of tables")
    scenarios = []
    for i, sc in enumerate(raw):
        if not isinstance(sc, dict):
            raise ConfigError(f"scenarios[{i}]", sc, "must be a table")
        _check_keys(sc, ("name", "env"), f"scenarios[{i}].")
        sname = sc.get("name")
        if not isinstance(sname, str) or not _NAME_RE.match(sname):
            raise ConfigError(f"scenarios[{i}].name", sname, "must be a name")
        kw = sc.get("env", {})
        if not isinstance(kw, dict):
            raise ConfigError(f"scenarios[{i}].env", kw, "must be a table")
        env = _build(AgentTaskEnv, {**tables["env"], **kw}, f"scenarios[{i}].env")
        if analysis["chosen_family"] >= env.n_families:
            raise ConfigError("analysis.chosen_family", analysis["chosen_family"],
                              f"scenario {sname!r} has {env.n_families} families")
        scenarios.append((sname, dict(kw)))
    if len({n for n, _ in scenarios}) != len(scenarios):
        raise ConfigError("scenarios", [n for n, _ in scenarios], "names must be distinct")
    cfg = AgentTasksConfig(name=name, seed=seed_v, runs=runs_v, episodes=episodes,
                           store=store, variants=tuple(variants), scenarios=tuple(scenarios),
                           env=tables["env"], policy=tables["policy"], loop=tables["loop"],
                           analysis=analysis, description=description)
    return cfg.with_overrides(runs=runs, seed=seed)
