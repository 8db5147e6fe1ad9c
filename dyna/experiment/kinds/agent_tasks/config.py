"""Kind ``agent_tasks``: the experiment file, validated (see the package docstring)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import ClassVar

from dyna.errors import ConfigError, check_range
from dyna.experiment.config import MAX_EPISODES, config_hash
from dyna.experiment.kinds.agent_tasks.checks import parse_calibrated
from dyna.experiment.kinds.agent_tasks.metrics import HYPOTHESIS_METRICS
from dyna.experiment.kinds.agent_tasks.robustness import parse_robustness

__all__ = ["AgentTasksConfig", "DIRECTIONS", "Hypothesis", "Sweep", "TESTS",
           "parse_agent_tasks"]

#: Directions a hypothesis may predict for ``mean(variant - versus)``.
DIRECTIONS = ("greater", "less")


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


_TOP = ("name", "description", "seed", "runs", "episodes", "store", "variants", "env",
        "policy", "loop", "scenarios", "sweeps", "analysis", "hypotheses", "agent", "llm",
        "robustness", "calibration", "checks")
#: Who acts: the simulated policy of :mod:`dyna.agents.loop_agents`, or a chat model
#: (:mod:`dyna.agents.llm`, with an ``[llm]`` table).
AGENTS = ("simulated", "llm")


_ANALYSIS = {"final_window": 100, "window": 50, "recovery_window": 10,
             "recovery_points": 0.05, "chosen_family": 0, "confidence": 0.95,
             "n_resamples": 2000, "alpha": 0.05, "fdr": 0.05, "late_from": 501,
             "tokens_window": 200, "drift_episodes": 50}

_HYPOTHESIS = ("name", "scenario", "sweep", "test", "metric", "variant", "versus",
               "direction", "smallest_effect", "checks")
_SWEEP = ("name", "knob", "values", "env", "metric", "better", "safeguards")
#: Tests a hypothesis may declare: the sign of the paired difference in one scenario, or
#: the sign of its per-run slope over a sweep's ordered severity grid.
TESTS = ("sign", "slope")


@dataclass(frozen=True)
class Sweep:
    """A severity sweep (bsuite's way: an experiment is a sweep, its result a curve): one
    env keyword varied from the base setting, least to most severe.

    Each point is a scenario named ``<name>-<value>``, whose env is the base env, then the
    sweep's ``env``, then ``{knob: value}``.

    Attributes
    ----------
    name : str
        The failure mode, e.g. ``"learning_from_failure"``.
    knob : str
        The AgentTaskEnv keyword varied.
    values : tuple
        The grid, least to most severe.
    env : dict
        Keywords common to every point (e.g. ``drift_at``).
    metric : str
        The primary metric (:data:`HYPOTHESIS_METRICS`).
    better : {"greater", "less"}
        Which way the metric is better (success: greater; tokens, incidents: less).
    safeguards : tuple of str
        The safeguards compared (``LoopConfig.SWITCHES``), for the crossover map.
    ordered : bool
        True when every value is a number: the grid has an order and a slope.
    """

    name: str
    knob: str
    values: tuple
    env: dict
    metric: str
    better: str
    safeguards: tuple = ()

    @property
    def ordered(self) -> bool:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool)
                   for v in self.values)

    @property
    def direction(self) -> int:
        """+1 if the numeric grid increases strictly, -1 if it decreases strictly (the knob
        grows less severe, e.g. a step slack), 0 otherwise (or not numeric)."""
        if not self.ordered:
            return 0
        d = [b - a for a, b in zip(self.values, self.values[1:])]
        return 1 if all(x > 0 for x in d) else -1 if all(x < 0 for x in d) else 0

    def severity(self) -> list[float]:
        """The grid as severity, increasing: the values times :attr:`direction`."""
        return [float(v) * self.direction for v in self.values]

    def scenario(self, i: int) -> str:
        """Scenario name of grid point ``i``."""
        return f"{self.name}-{self.values[i]}"

    def points(self) -> list[tuple[str, object]]:
        """``(scenario, value)`` of every grid point, in order."""
        return [(self.scenario(i), v) for i, v in enumerate(self.values)]

    def to_dict(self) -> dict:
        return {"name": self.name, "knob": self.knob, "values": list(self.values),
                "env": dict(self.env), "metric": self.metric, "better": self.better,
                "safeguards": list(self.safeguards)}


@dataclass(frozen=True)
class Hypothesis:
    """A primary hypothesis, declared in the experiment file before it runs.

    It predicts, in one scenario, that ``mean over runs of (variant - versus)`` of each
    metric has the given sign, for every pair of ``variants`` x ``versus``; the runs are
    paired by run index (common random numbers). With several components it holds only
    when each does (an intersection-union test: its p-value is the largest component
    p-value, Berger 1982).

    Attributes
    ----------
    name : str
    scenario : str
    metrics : tuple of str
        Columns of the runs table
        (:data:`~dyna.experiment.kinds.agent_tasks.metrics.HYPOTHESIS_METRICS`).
    directions : tuple of str
        ``"greater"`` or ``"less"``, one per metric.
    variants, versus : tuple of str
        The first and the second variants of each comparison.
    test : {"sign", "slope"}
        ``"slope"``: over the ordered grid of sweep ``sweep`` (``scenario`` is then the
        sweep's name), the per-run least-squares slope of ``variant - versus`` against the
        severity values has the predicted sign ("the gap grows with severity"), tested by
        a sign flip over runs.
    sweep : str or None
    smallest_effect : float or None
        The smallest effect of interest, in the metric's units (> 0; for a slope, per unit
        of the knob); required in a file with ``[calibration]``
        (:mod:`dyna.experiment.calibration`), where it sizes the runs and bounds the
        equivalence test.
    checks : tuple of str
        The manipulation checks (``[[checks]]``) it needs besides the required ones.
    """

    name: str
    scenario: str
    metrics: tuple
    directions: tuple
    variants: tuple
    versus: tuple
    test: str = "sign"
    sweep: str | None = None
    smallest_effect: float | None = None
    checks: tuple = ()

    def components(self) -> list[tuple[str, str, str, str]]:
        """``(variant, versus, metric, direction)`` of every comparison, in file order."""
        return [(v, w, m, d) for m, d in zip(self.metrics, self.directions)
                for v in self.variants for w in self.versus if v != w]

    def to_dict(self) -> dict:
        """The TOML form (lists for lists, strings for single values)."""
        one = (lambda t: t[0] if len(t) == 1 else list(t))
        where = ({"sweep": self.sweep, "test": self.test} if self.test == "slope"
                 else {"scenario": self.scenario})
        return {"name": self.name, **where, "metric": one(self.metrics),
                "direction": one(self.directions), "variant": one(self.variants),
                "versus": one(self.versus),
                **({"smallest_effect": self.smallest_effect}
                   if self.smallest_effect is not None else {}),
                **({"checks": list(self.checks)} if self.checks else {})}


def _names(value, allowed, fname: str, what: str) -> tuple:
    """A name or a non-empty list of names, each in ``allowed``."""
    import difflib
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(fname, value, f"must be a {what} or a non-empty list of them")
    for j, item in enumerate(items):
        where = fname if isinstance(value, str) else f"{fname}[{j}]"
        if item not in allowed:
            close = difflib.get_close_matches(str(item), list(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else \
                f"; expected one of {', '.join(allowed)}"
            raise ConfigError(where, item, f"unknown {what}{hint}")
    if len(set(items)) != len(items):
        raise ConfigError(fname, value, "names must be distinct")
    return tuple(items)


def _parse_hypotheses(raw, variants: tuple, scenarios: tuple, sweeps: tuple = ()) -> tuple:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("hypotheses", raw, "must be an array of tables ([[hypotheses]])")
    out, seen = [], set()
    for i, h in enumerate(raw):
        where = f"hypotheses[{i}]"
        if not isinstance(h, dict):
            raise ConfigError(where, h, "must be a table")
        _check_keys(h, _HYPOTHESIS, f"{where}.")
        test = h.get("test", "sign")
        if test not in TESTS:
            raise ConfigError(f"{where}.test", test, f"must be one of {TESTS}")
        for key in ("scenario" if test == "sign" else "sweep", "metric", "variant", "versus",
                    "direction"):
            if key not in h:
                raise ConfigError(f"{where}.{key}", None, "missing")
        if test == "slope":
            if "scenario" in h:
                raise ConfigError(f"{where}.scenario", h["scenario"],
                                  "a slope test is over a sweep: give sweep, not scenario")
            by_name = {sw.name: sw for sw in sweeps}
            sweep = _names(h["sweep"], tuple(by_name), f"{where}.sweep", "sweep")
            if len(sweep) != 1:
                raise ConfigError(f"{where}.sweep", h["sweep"], "must be one sweep")
            if not by_name[sweep[0]].ordered or len(by_name[sweep[0]].values) < 3:
                raise ConfigError(f"{where}.sweep", sweep[0], "a slope needs an ordered "
                                  "numeric grid of at least 3 points")
            if by_name[sweep[0]].direction == 0:
                raise ConfigError(f"{where}.sweep", sweep[0], "a slope needs a strictly "
                                  "increasing or decreasing grid (least to most severe)")
            scenario = sweep
        else:
            if "sweep" in h:
                raise ConfigError(f"{where}.sweep", h["sweep"], "only with test = 'slope'")
            scenario = _names(h["scenario"], scenarios, f"{where}.scenario", "scenario")
            if len(scenario) != 1:
                raise ConfigError(f"{where}.scenario", h["scenario"], "must be one scenario")
        metrics = _names(h["metric"], HYPOTHESIS_METRICS, f"{where}.metric", "metric")
        directions = _names(h["direction"], DIRECTIONS, f"{where}.direction", "direction") \
            if isinstance(h["direction"], str) else None
        if directions is None:
            d = h["direction"]
            if not isinstance(d, list) or len(d) != len(metrics):
                raise ConfigError(f"{where}.direction", d,
                                  f"must be one direction or one per metric ({len(metrics)})")
            for j, x in enumerate(d):
                if x not in DIRECTIONS:
                    raise ConfigError(f"{where}.direction[{j}]", x,
                                      "must be 'greater' or 'less'")
            directions = tuple(d)
        elif len(metrics) > 1:
            directions = directions * len(metrics)
        first = _names(h["variant"], variants, f"{where}.variant", "variant")
        second = _names(h["versus"], variants, f"{where}.versus", "variant")
        if set(first) & set(second) and len(first) == len(second) == 1:
            raise ConfigError(f"{where}.versus", h["versus"], "compares a variant with itself")
        name = h.get("name", f"{scenario[0]}: {' '.join(metrics)}")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}.name", name, "must be a non-empty string")
        if name in seen:
            raise ConfigError(f"{where}.name", name, "duplicate hypothesis name")
        seen.add(name)
        smallest = h.get("smallest_effect")
        if smallest is not None:
            smallest = float(check_range(f"{where}.smallest_effect", smallest, 0.0, math.inf,
                                         lo_open=True, hi_open=True))
        needs = h.get("checks", [])
        if (not isinstance(needs, list) or not all(isinstance(n, str) for n in needs)
                or len(set(needs)) != len(needs)):
            raise ConfigError(f"{where}.checks", needs, "must be a list of distinct check "
                              "names")
        out.append(Hypothesis(name, scenario[0], metrics, directions, first, second,
                              test=test, sweep=scenario[0] if test == "slope" else None,
                              smallest_effect=smallest, checks=tuple(needs)))
    return tuple(out)


def _parse_sweeps(raw, base_env: dict, variants=()) -> tuple:
    """``[[sweeps]]`` tables -> :class:`Sweep` objects (each point's env is built later)."""
    from dyna.loops import LoopConfig
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise ConfigError("sweeps", raw, "must be a non-empty array of tables ([[sweeps]])")
    out, seen = [], set()
    for i, sw in enumerate(raw):
        where = f"sweeps[{i}]"
        if not isinstance(sw, dict):
            raise ConfigError(where, sw, "must be a table")
        _check_keys(sw, _SWEEP, f"{where}.")
        for key in ("name", "knob", "values", "metric", "better"):
            if key not in sw:
                raise ConfigError(f"{where}.{key}", None, "missing")
        name = sw["name"]
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigError(f"{where}.name", name, "must be a name")
        if name in seen:
            raise ConfigError(f"{where}.name", name, "duplicate sweep name")
        seen.add(name)
        knob = sw["knob"]
        if not isinstance(knob, str) or not knob:
            raise ConfigError(f"{where}.knob", knob, "must be an env keyword")
        vals = sw["values"]
        if not isinstance(vals, list) or len(vals) < 2:
            raise ConfigError(f"{where}.values", vals, "must be a list of at least 2 values")
        for j, v in enumerate(vals):
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise ConfigError(f"{where}.values[{j}]", v, "must be a number or a name")
            if isinstance(v, str) and not _NAME_RE.match(v):
                raise ConfigError(f"{where}.values[{j}]", v, "must be a name")
        if len(set(map(str, vals))) != len(vals):
            raise ConfigError(f"{where}.values", vals, "values must be distinct")
        env = sw.get("env", {})
        if not isinstance(env, dict):
            raise ConfigError(f"{where}.env", env, "must be a table")
        if knob in env:
            raise ConfigError(f"{where}.env.{knob}", env[knob], "is the swept knob")
        metric = _names(sw["metric"], HYPOTHESIS_METRICS, f"{where}.metric", "metric")
        if len(metric) != 1:
            raise ConfigError(f"{where}.metric", sw["metric"], "must be one metric")
        if sw["better"] not in DIRECTIONS:
            raise ConfigError(f"{where}.better", sw["better"], "must be 'greater' or 'less'")
        guards = sw.get("safeguards", [])
        guards = [guards] if isinstance(guards, str) else guards
        if not isinstance(guards, list):
            raise ConfigError(f"{where}.safeguards", guards, "must be a list of switches")
        for j, g in enumerate(guards):
            if g not in LoopConfig.SWITCHES:
                raise ConfigError(f"{where}.safeguards[{j}]", g,
                                  f"must be one of {LoopConfig.SWITCHES}")
        out.append(Sweep(name, knob, tuple(vals), dict(env), metric[0], sw["better"],
                         tuple(guards)))
    return tuple(out)


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
    hypotheses : tuple of Hypothesis
        The primary hypotheses declared in the file (``[[hypotheses]]``); the report tests
        exactly these, with Holm's correction over them.
    sweeps : tuple of Sweep
        Severity sweeps (``[[sweeps]]``); their points are scenarios after the declared
        ``[[scenarios]]``.
    robustness : Robustness or None
        ``[robustness]`` (:mod:`.robustness`); its scenario copies come last.
    calibration : dyna.experiment.calibration.Calibration or None
        ``[calibration]``: pilot, confirmatory and replication seeds, the required checks,
        the power, the freeze record; None without the table (and then no ``checks``).
    checks : tuple of Check
        The manipulation checks (``[[checks]]``, :mod:`.checks`).
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
    hypotheses: tuple = ()
    sweeps: tuple = ()
    #: ``[robustness]``: scenario copies with the policy scaled (:mod:`.robustness`),
    #: the last of :attr:`scenarios`; None without the table.
    robustness: object = None
    calibration: object = None
    checks: tuple = ()
    agent: str = "simulated"
    llm: dict = field(default_factory=dict)
    #: ``--replay DIR``: answer the model's requests from DIR's recording (not hashed).
    replay: str | None = None

    kind = "agent_tasks"

    def to_dict(self) -> dict:
        """Canonical JSON-ready form (with ``kind``)."""
        return {"kind": self.kind, "name": self.name, "description": self.description,
                "seed": self.seed, "runs": self.runs, "episodes": self.episodes,
                "store": self.store, "variants": list(self.variants),
                "env": dict(self.env), "policy": dict(self.policy), "loop": dict(self.loop),
                "scenarios": [{"name": n, "env": dict(kw)}
                              for n, kw in self.declared_scenarios],
                "analysis": dict(self.analysis),
                **({"sweeps": [sw.to_dict() for sw in self.sweeps]} if self.sweeps else {}),
                **({"hypotheses": [h.to_dict() for h in self.hypotheses]}
                   if self.hypotheses else {}),
                **({"robustness": self.robustness.to_dict()} if self.robustness else {}),
                **({"calibration": self.calibration.to_dict(),
                    "checks": [c.to_dict() for c in self.checks]}
                   if self.calibration is not None else {}),
                **({"agent": self.agent, "llm": dict(self.llm)}
                   if self.agent != "simulated" else {})}

    @property
    def declared_scenarios(self) -> tuple:
        """The ``[[scenarios]]`` of the file (the sweeps' points, which follow them in
        :attr:`scenarios`, are left out: the sweeps make them again)."""
        n = sum(len(sw.values) for sw in self.sweeps)
        n += len(self.robustness.copies) if self.robustness else 0
        return self.scenarios[:len(self.scenarios) - n]

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

    #: Columns a recording (``llm_exchanges.parquet``) must have for ``--replay``.
    replay_columns: ClassVar[tuple[str, ...]] = (
        "variant", "scenario", "run", "seq", "key", "request", "response", "status",
        "reason", "attempts")

    def with_replay(self, folder) -> "AgentTasksConfig":
        """Copy that answers the model's requests from ``folder``'s recording.

        Raises
        ------
        ConfigError
            The experiment has no model (``agent`` is not ``"llm"``).
        """
        if self.agent != "llm":
            raise ConfigError("--replay", str(folder), "only for an experiment with "
                              "agent = 'llm' (nothing else asks a model)")
        return dataclasses.replace(self, replay=str(folder))

    def policy_kwargs(self, scenario: int) -> dict:
        """PolicyParams keywords of scenario ``scenario``: ``policy``, with one parameter
        scaled in a robustness copy (:mod:`.robustness`)."""
        over = (self.robustness.policy_overrides(self.scenarios[scenario][0])
                if self.robustness else {})
        return {**self.policy, **over}

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
    from dyna.agents.loop_agents import PolicyParams
    from dyna.loops import LoopConfig

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
    variants = _parse_variants(data.get("variants", "all"), store)
    tables = {}
    for key in ("env", "policy", "loop", "analysis"):
        t = data.get(key, {})
        if not isinstance(t, dict):
            raise ConfigError(key, t, "must be a table")
        tables[key] = dict(t)
    analysis = _parse_analysis(tables["analysis"])
    _build(PolicyParams, tables["policy"], "policy")
    _build(LoopConfig, tables["loop"], "loop")
    sweeps = _parse_sweeps(data.get("sweeps"), tables["env"])
    scenarios = _parse_scenarios(data, tables["env"], sweeps, analysis["chosen_family"])
    agent, llm = _parse_agent(data, variants, store)
    hypotheses = _parse_hypotheses(data.get("hypotheses"), tuple(variants),
                                   tuple(n for n, _ in scenarios), sweeps)
    robustness = parse_robustness(data.get("robustness"), tables["policy"], tuple(scenarios),
                                  hypotheses)
    if robustness is not None:   # the copies follow every other scenario
        kws = dict(scenarios)
        scenarios += [(c.scenario, dict(kws[c.source])) for c in robustness.copies]
    calibration, checks = parse_calibrated(data, tuple(variants),
                                           tuple(n for n, _ in scenarios), episodes,
                                           hypotheses)
    if calibration is not None and "seed" not in data:
        seed_v = calibration.confirmatory_seed
    cfg = AgentTasksConfig(name=name, seed=seed_v, runs=runs_v, episodes=episodes,
                           store=store, variants=tuple(variants), scenarios=tuple(scenarios),
                           env=tables["env"], policy=tables["policy"], loop=tables["loop"],
                           analysis=analysis, description=description,
                           hypotheses=hypotheses, sweeps=sweeps, robustness=robustness,
                           calibration=calibration, checks=checks, agent=agent, llm=llm)
    return cfg.with_overrides(runs=runs, seed=seed)


def _parse_variants(variants, store: str) -> list[str]:
    """The variant names (``"all"``: every variant of ``store``), each known to
    :func:`~dyna.agents.loop_agents.make_variant`, distinct.

    Raises
    ------
    ConfigError
        Field ``variants`` or ``variants[i]``.
    """
    from dyna.agents.loop_agents import make_variant, variant_names

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
    return variants


#: The ``[analysis]`` keys that count episodes of a run, at most :data:`MAX_EPISODES`
#: (a window longer than a run covers the whole run).
_EPISODE_COUNTS = ("final_window", "window", "recovery_window", "late_from",
                   "tokens_window", "drift_episodes")


def _parse_analysis(table: dict) -> dict:
    """The ``[analysis]`` table over its defaults (:data:`_ANALYSIS`), each value checked.

    Raises
    ------
    ConfigError
        Field ``analysis.<key>``: an episode count (:data:`_EPISODE_COUNTS`) that is not
        an integer in [1, MAX_EPISODES].
    """
    _check_keys(table, _ANALYSIS, "analysis.")
    analysis = {**_ANALYSIS, **table}
    for k in _EPISODE_COUNTS:
        check_range(f"analysis.{k}", analysis[k], 1, MAX_EPISODES, integer=True)
    check_range("analysis.n_resamples", analysis["n_resamples"], 1, None, integer=True)
    check_range("analysis.chosen_family", analysis["chosen_family"], 0, None, integer=True)
    check_range("analysis.recovery_points", analysis["recovery_points"], 0.0, 1.0)
    for k in ("confidence", "alpha", "fdr"):
        check_range(f"analysis.{k}", analysis[k], 0.0, 1.0, lo_open=True, hi_open=True)
    return analysis


def _parse_scenarios(data: dict, env_table: dict, sweeps: tuple,
                     chosen_family: int) -> list:
    """``(name, env keywords)`` of every scenario: those of ``scenarios``, then each sweep's
    points; each env is built once to check its keywords (over the ``[env]`` table), and
    must have more than ``chosen_family`` families.

    Raises
    ------
    ConfigError
        Naming the scenario's field (``scenarios[i]...`` or ``sweeps[k].values[j]``).
    """
    from envs import make_agent_task_env

    raw = data.get("scenarios", [] if sweeps else [{"name": "clean"}])
    if not isinstance(raw, list) or (not raw and not sweeps):
        raise ConfigError("scenarios", raw, "must be a non-empty list of tables")
    raw = list(raw)
    labels = [f"scenarios[{i}]" for i in range(len(raw))]
    for k, sw in enumerate(sweeps):
        for j, (sname, v) in enumerate(sw.points()):
            raw.append({"name": sname, "env": {**sw.env, sw.knob: v}})
            labels.append(f"sweeps[{k}].values[{j}]")
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
        where = f"{labels[i]}.env" if labels[i].startswith("scenarios") else labels[i]
        try:
            env = make_agent_task_env({**env_table, **kw})
        except ConfigError as exc:   # "env" (a bad keyword), "env.id" or a keyword's name
            field = (where + exc.field.removeprefix("env") if exc.field.split(".")[0] == "env"
                     else f"{where}.{exc.field}")
            raise ConfigError(field, exc.value, exc.reason) from None
        if chosen_family >= env.n_families:
            raise ConfigError("analysis.chosen_family", chosen_family,
                              f"scenario {sname!r} has {env.n_families} families")
        scenarios.append((sname, dict(kw)))
    if len({n for n, _ in scenarios}) != len(scenarios):
        raise ConfigError("scenarios", [n for n, _ in scenarios], "names must be distinct")
    return scenarios


def _parse_agent(data: dict, variants: list, store: str) -> tuple[str, dict]:
    """The agent (:data:`AGENTS`) and, for ``agent = "llm"``, its ``[llm]`` table, every
    variant checked to run with it.

    Raises
    ------
    ConfigError
        Field ``agent``, ``llm`` or ``variants[i]``.
    """
    from dyna.agents.loop_agents import make_variant

    agent = data.get("agent", "simulated")
    if agent not in AGENTS:
        raise ConfigError("agent", agent, f"must be one of {AGENTS}")
    llm = {}
    if agent == "llm":
        from dyna.agents.llm import check_llm_variant, parse_llm_table
        llm = parse_llm_table(data.get("llm", {}))
        for i, v in enumerate(variants):
            check_llm_variant(v, make_variant(v, store).learner, f"variants[{i}]")
    elif "llm" in data:
        raise ConfigError("llm", "(table)", "only with agent = 'llm'")
    return agent, llm
