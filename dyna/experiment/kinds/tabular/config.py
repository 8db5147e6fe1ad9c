"""Kind ``tabular``: the experiment file, validated into frozen dataclasses.

An experiment file names an environment, a schedule, the variants (agent + hyper-parameters),
how many runs (seeds) each variant gets, an optional sweep over environment kwargs and the
analysis to produce. Example (``experiments/dyna_maze.toml``, Sutton & Barto Figure 8.2)::

    name = "dyna_maze"
    description = "Dyna maze, Figure 8.2"
    seed = 0
    runs = 30

    [env]
    id = "dyna/DynaMaze-v0"

    [schedule]
    episodes = 50

    [defaults]                 # shared by every variant; overridden per variant
    agent = "dyna_q"
    alpha = 0.1
    gamma = 0.95
    epsilon = 0.1

    [[variants]]
    name = "n=0"
    n_planning = 0

    [analysis]
    metrics = ["steps_per_episode"]
    first_episode = 2
    checks = ["figure_8_2"]

Every key is checked: a misspelt key anywhere raises :class:`dyna.errors.ConfigError`
naming the dotted field (``schedule.episods``) and suggesting the close match; a value out of
range names the field and the value. Hyper-parameters are validated by
:func:`dyna.agents.validate_hparams`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass, field

from dyna.errors import ConfigError, check_range
from dyna.experiment.config import (MAX_EPISODES, NAME_RE, check_bool, check_keys, check_scalar,
                                    check_string, config_hash, name_list, table_of,
                                    with_run_overrides)

__all__ = [
    "AnalysisSpec", "EnvSpec", "ExperimentConfig", "METRICS", "CHECKS", "OPTIMAL_PROTOCOLS",
    "Schedule", "Variant", "parse_tabular",
]


#: Metrics (and their standard plots) the analysis can produce.
METRICS = ("steps_per_episode", "cumulative_reward", "eval_score", "updates_to_optimal")


#: Experiment-specific checks written into report.md.
CHECKS = ("figure_8_2", "blocking", "shortcut", "prioritized_sweeping")


#: Column names of the results tables, which a sweep key may not take.
RESERVED_COLUMNS = frozenset({
    "variant", "agent", "point", "run", "episode", "steps", "return", "terminated", "updates",
    "step", "reward", "cumulative_reward", "score", "updates_to_optimal", "found",
    "total_steps", "total_return", "episodes",
})


# --------------------------------------------------------------------------- dataclasses

@dataclass(frozen=True)
class EnvSpec:
    """The environment of an experiment.

    Attributes
    ----------
    id : str
        Environment id given to :func:`envs.make_table` (``"dyna/DynaMaze-v0"``,
        ``"FrozenLake"``, ...).
    kwargs : dict
        Keyword arguments for the environment (e.g. ``map_name``, ``resolution``).
    """

    id: str
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Schedule:
    """How long each run trains and how it is evaluated.

    Exactly one of ``episodes`` and ``total_steps`` is set.

    Attributes
    ----------
    episodes : int or None
        Training episodes per run.
    total_steps : int or None
        Training time steps per run (episodes restart as needed), as in Figures 8.4/8.5.
    log_every : int
        In ``total_steps`` mode, one results row every ``log_every`` steps.
    eval_every : int
        Evaluate the greedy policy after every ``eval_every`` training episodes (0: never).
    eval_episodes : int
        Evaluation episodes per evaluation.
    stop_at_optimal : bool
        Stop a run once its greedy policy follows an optimal path (Example 8.4); the optimal
        length comes from the environment's ``optimal_path_length``.
    optimal_tolerance : float
        With ``stop_at_optimal``, a greedy path of at most
        ``floor(optimal_path_length * optimal_tolerance)`` steps counts as optimal (>= 1;
        1.0 demands the shortest path).
    optimal_protocol : {"dyna", "reference"}
        With ``stop_at_optimal``, how Example 8.4 is measured. ``"dyna"`` (default): the
        env as configured (the refined Dyna maze keeps a single goal cell), the check
        passes when 5 greedy rollouts (ties random) all reach a goal within the limit
        above, and updates are counted as done (prioritized sweeping: its popped
        backups). ``"reference"``: the protocol of the widely used reference
        implementation (ShangtongZhang/reinforcement-learning-an-introduction,
        ``chapter08/maze.py``, ``example_8_4``): the goal is the k x k block (env keyword
        ``goal_block = true``, set by this key), one greedy rollout, the limit is
        ``floor(optimal_tolerance * k * L1)`` steps with ``L1`` the unrefined maze's
        shortest path (the code's ``14 * resolution * 1.2``), and prioritized sweeping
        counts one more update per real step (the code's ``+ 1``). The reference's greedy
        check breaks ties by lowest action index; here ties stay random.
    """

    episodes: int | None = None
    total_steps: int | None = None
    log_every: int = 1
    eval_every: int = 0
    eval_episodes: int = 0
    stop_at_optimal: bool = False
    optimal_tolerance: float = 1.0
    optimal_protocol: str = "dyna"


#: Values of ``schedule.optimal_protocol`` (see :class:`Schedule`).
OPTIMAL_PROTOCOLS = ("dyna", "reference")


@dataclass(frozen=True)
class Variant:
    """One agent configuration.

    Attributes
    ----------
    name : str
        Label used in tables, plots and the report.
    agent : str
        One of ``q_learning``, ``dyna_q``, ``dyna_q_plus``, ``prioritized_sweeping``.
    hparams : dict
        Validated hyper-parameters (``alpha``, ``gamma``, ``epsilon``, ``n_planning``, ...).
    """

    name: str
    agent: str
    hparams: dict


@dataclass(frozen=True)
class AnalysisSpec:
    """Which metrics, plots and checks to produce.

    Attributes
    ----------
    metrics : tuple of str
        Subset of :data:`METRICS`; each gets a standard plot and a report column.
    first_episode : int
        First episode drawn in the steps-per-episode plot (2 in Figure 8.2, because episode
        1 is the same for every n).
    final_episodes : int
        The last ``final_episodes`` episodes make the "final performance" of the report.
    checks : tuple of str
        Subset of :data:`CHECKS`, experiment-specific sections of report.md.
    per_run_plots : bool
        Also draw one PNG per run (variant x sweep point x run) of the first metric.
    confidence : float
        Confidence level of the bootstrap intervals.
    n_resamples : int
        Bootstrap resamples.
    statistic : str
        ``"mean"`` or ``"iqm"`` (interquartile mean) for curves and tables.
    log_y : bool
        Steps-per-episode plot on a log y axis (long early episodes, e.g. FrozenLake).
    smooth : int
        Steps-per-episode plot: each run's trailing moving average over this many episodes
        before the statistic over runs (1: raw). Tables are never smoothed.
    """

    metrics: tuple = ()
    first_episode: int = 1
    final_episodes: int = 10
    checks: tuple = ()
    per_run_plots: bool = False
    confidence: float = 0.95
    n_resamples: int = 2000
    statistic: str = "mean"
    log_y: bool = False
    smooth: int = 1


@dataclass(frozen=True)
class ExperimentConfig:
    """A validated experiment.

    Attributes
    ----------
    name, description : str
    seed : int
        Base seed; run ``r`` of every variant draws from the stream ``(seed, r)``.
    runs : int
        Independent runs (seeds) per variant and sweep point.
    env : EnvSpec
    schedule : Schedule
    variants : tuple of Variant
    sweep : dict
        Env kwarg or agent hyper-parameter (a name of :data:`dyna.agents.HPARAMS`) -> list
        of values; the grid (Cartesian product, keys in file order) crosses every variant.
        A swept hyper-parameter is set by the sweep point for every variant (it may not be
        set in ``[defaults]`` or a variant too).
    analysis : AnalysisSpec
    """

    name: str
    description: str
    seed: int
    runs: int
    env: EnvSpec
    schedule: Schedule
    variants: tuple
    sweep: dict = field(default_factory=dict)
    analysis: AnalysisSpec = field(default_factory=AnalysisSpec)

    # ------------------------------------------------------------------ derived values
    def sweep_points(self) -> list[dict]:
        """Sweep points as dicts of env kwargs, in canonical (row-major, file key) order.

        Returns ``[{}]`` when there is no sweep.
        """
        if not self.sweep:
            return [{}]
        keys = list(self.sweep)
        return [dict(zip(keys, values))
                for values in itertools.product(*(self.sweep[k] for k in keys))]

    @property
    def swept_hparams(self) -> tuple:
        """The swept keys that are agent hyper-parameters (the others are env kwargs)."""
        if not self.sweep:   # no sweep: nothing to ask dyna.agents (it imports numba)
            return ()
        known = set(_known_hparams())
        return tuple(k for k in self.sweep if k in known)

    def env_kwargs(self, point: dict) -> dict:
        """Environment kwargs of one sweep point (``env.kwargs`` updated by the point's env
        keys; ``goal_block = True`` under ``schedule.optimal_protocol = "reference"``)."""
        hp = set(self.swept_hparams)
        out = {**self.env.kwargs, **{k: v for k, v in point.items() if k not in hp}}
        if self.schedule.optimal_protocol == "reference":
            out["goal_block"] = True
        return out

    def hparams(self, variant, point: dict) -> dict:
        """A variant's hyper-parameters at one sweep point (the point's swept ones win)."""
        hp = set(self.swept_hparams)
        return {**variant.hparams, **{k: v for k, v in point.items() if k in hp}}

    def to_dict(self) -> dict:
        """Canonical plain-dict form, accepted back by :func:`parse_tabular`."""
        out = {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "runs": self.runs,
            "env": {"id": self.env.id, "kwargs": dict(self.env.kwargs)},
            # optimal_protocol at its default is left out, so older configs keep their hash
            "schedule": {k: v for k, v in dataclasses.asdict(self.schedule).items()
                         if v is not None and not (k == "optimal_protocol" and v == "dyna")},
            "variants": [{"name": v.name, "agent": v.agent,
                          **{k: x for k, x in v.hparams.items()
                             if k not in self.swept_hparams}}
                         for v in self.variants],
            # plot-only options at their defaults are left out, so older configs keep
            # their hash
            "analysis": {k: (list(v) if isinstance(v, tuple) else v)
                         for k, v in dataclasses.asdict(self.analysis).items()
                         if not (k == "log_y" and v is False or k == "smooth" and v == 1)},
        }
        if self.sweep:
            out["sweep"] = {k: list(v) for k, v in self.sweep.items()}
        return out

    def with_overrides(self, *, runs: int | None = None, seed: int | None = None
                       ) -> "ExperimentConfig":
        """Return a copy with the CLI overrides ``--runs`` / ``--seed`` applied.

        Raises
        ------
        ConfigError
            ``--runs`` < 1 or ``--seed`` < 0 (field ``"--runs"`` / ``"--seed"``).
        """
        return with_run_overrides(self, runs, seed)

    @property
    def hash(self) -> str:
        """sha256 (hex) of the canonical JSON of :meth:`to_dict`."""
        return config_hash(self)


# --------------------------------------------------------------------------- parsing

_TOP_KEYS = ("name", "description", "seed", "runs", "env", "schedule", "defaults",
             "variants", "sweep", "analysis")


_ENV_KEYS = ("id", "kwargs")


_SCHEDULE_KEYS = tuple(f.name for f in dataclasses.fields(Schedule))


_ANALYSIS_KEYS = tuple(f.name for f in dataclasses.fields(AnalysisSpec))


_VARIANT_META = ("name", "agent")


def _known_hparams() -> tuple:
    from dyna.agents import HPARAMS

    return tuple(HPARAMS)


def _validate_hparams(agent: str, hparams: dict, field_name: str) -> dict:
    from dyna.agents import validate_hparams

    return dict(validate_hparams(agent, hparams, field_name))


def _parse_schedule(raw: dict) -> Schedule:
    check_keys(raw, _SCHEDULE_KEYS, "schedule.")
    episodes, total_steps = raw.get("episodes"), raw.get("total_steps")
    if (episodes is None) == (total_steps is None):
        raise ConfigError("schedule", raw, "set exactly one of 'episodes' or 'total_steps'")
    if episodes is not None:
        # the same bound as an integer's (dyna.experiment.config.check_run_sizes), for a
        # number written as a float (episodes = 1e9)
        episodes = check_range("schedule.episodes", episodes, lo=1, integer=True)
        if episodes > MAX_EPISODES:
            raise ConfigError("schedule.episodes", episodes,
                              f"must be <= MAX_EPISODES={MAX_EPISODES}")
    if total_steps is not None:
        total_steps = check_range("schedule.total_steps", total_steps, lo=1, integer=True)
    log_every = check_range("schedule.log_every", raw.get("log_every", 1), lo=1, integer=True)
    if episodes is not None and log_every != 1:
        raise ConfigError("schedule.log_every", log_every, "only applies with total_steps")
    eval_every = check_range("schedule.eval_every", raw.get("eval_every", 0), lo=0,
                             integer=True)
    eval_episodes = check_range("schedule.eval_episodes", raw.get("eval_episodes", 0), lo=0,
                                integer=True)
    if eval_every and total_steps is not None:
        raise ConfigError("schedule.eval_every", eval_every,
                          "evaluation is taken between episodes: needs schedule.episodes")
    if eval_every and not eval_episodes:
        raise ConfigError("schedule.eval_episodes", eval_episodes,
                          "must be >= 1 when schedule.eval_every > 0")
    if eval_episodes and not eval_every:
        raise ConfigError("schedule.eval_every", eval_every,
                          "must be >= 1 when schedule.eval_episodes > 0")
    if episodes is not None and eval_every > episodes:
        raise ConfigError("schedule.eval_every", eval_every,
                          f"exceeds schedule.episodes={episodes}: no evaluation would be taken")
    stop = check_bool(raw.get("stop_at_optimal", False), "schedule.stop_at_optimal")
    if stop and total_steps is not None:
        raise ConfigError("schedule.stop_at_optimal", stop, "needs schedule.episodes")
    tolerance = float(check_range("schedule.optimal_tolerance",
                                  raw.get("optimal_tolerance", 1.0), lo=1.0))
    if "optimal_tolerance" in raw and not stop and tolerance != 1.0:
        raise ConfigError("schedule.optimal_tolerance", tolerance,
                          "only applies with schedule.stop_at_optimal = true")
    protocol = raw.get("optimal_protocol", "dyna")
    if protocol not in OPTIMAL_PROTOCOLS:
        raise ConfigError("schedule.optimal_protocol", protocol,
                          f"must be one of {', '.join(OPTIMAL_PROTOCOLS)}")
    if protocol != "dyna" and not stop:
        raise ConfigError("schedule.optimal_protocol", protocol,
                          "only applies with schedule.stop_at_optimal = true")
    return Schedule(episodes=episodes, total_steps=total_steps, log_every=log_every,
                    eval_every=eval_every, eval_episodes=eval_episodes, stop_at_optimal=stop,
                    optimal_tolerance=tolerance, optimal_protocol=protocol)


def _parse_variants(data: dict) -> tuple:
    defaults = table_of(data, "defaults", "defaults")
    known = _known_hparams()
    check_keys(defaults, ("agent",) + known, "defaults.")
    default_agent = defaults.get("agent")
    default_hparams = {k: v for k, v in defaults.items() if k != "agent"}
    if default_agent is not None:
        check_string(default_agent, "defaults.agent")
        # Validate the shared values once so an error names defaults.<key>.
        _validate_hparams(default_agent, default_hparams, "defaults")

    raw_variants = data.get("variants")
    if raw_variants is None:
        raw_variants = [{"name": default_agent or "default"}] if default_agent else None
    if not raw_variants or not isinstance(raw_variants, list):
        raise ConfigError("variants", raw_variants,
                          "must be a non-empty array of tables ([[variants]])")
    variants, seen = [], set()
    for i, raw in enumerate(raw_variants):
        if not isinstance(raw, dict):
            raise ConfigError(f"variants[{i}]", raw, "must be a table")
        name = raw.get("name", None)
        prefix = f"variants.{name}" if isinstance(name, str) and name else f"variants[{i}]"
        check_string(name, f"variants[{i}].name")
        if name in seen:
            raise ConfigError(f"variants[{i}].name", name, "duplicate variant name")
        seen.add(name)
        check_keys(raw, _VARIANT_META + known, prefix + ".")
        agent = raw.get("agent", default_agent)
        if agent is None:
            raise ConfigError(f"{prefix}.agent", None,
                              "missing (set it here or in [defaults])")
        check_string(agent, f"{prefix}.agent")
        merged = {**default_hparams, **{k: v for k, v in raw.items() if k not in _VARIANT_META}}
        hparams = _validate_hparams(agent, merged, prefix)
        variants.append(Variant(name=name, agent=agent, hparams=hparams))
    return tuple(variants)


def _parse_sweep(data: dict, env_kwargs: dict, variants: tuple = ()) -> dict:
    raw = table_of(data, "sweep", "sweep")
    known = set(_known_hparams())
    defaults = data.get("defaults") if isinstance(data.get("defaults"), dict) else {}
    raw_variants = [v for v in data.get("variants") or [] if isinstance(v, dict)]
    sweep = {}
    for key, values in raw.items():
        fname = f"sweep.{key}"
        if key in RESERVED_COLUMNS:
            raise ConfigError(fname, values, "is a results column name; rename the kwarg")
        if key in env_kwargs:
            raise ConfigError(fname, values, "also set in env.kwargs; set it in one place")
        if key in known:
            if key in defaults:
                raise ConfigError(fname, values, f"also set in defaults.{key}; a "
                                  "hyper-parameter is swept or set, not both")
            for i, rv in enumerate(raw_variants):
                if key in rv:
                    who = rv.get("name", i)
                    raise ConfigError(fname, values, f"also set in variants.{who}.{key}; "
                                      "a hyper-parameter is swept or set per variant, not "
                                      "both")
        if not isinstance(values, list) or not values:
            raise ConfigError(fname, values, "must be a non-empty array of values")
        checked = [check_scalar(v, f"{fname}[{j}]") for j, v in enumerate(values)]
        if len({json.dumps(v) for v in checked}) != len(checked):
            raise ConfigError(fname, values, "values must be distinct")
        if len({type(v) for v in checked}) != 1:
            raise ConfigError(fname, values, "values must all have the same type")
        if key in known:   # every value must suit every variant's agent
            for j, v in enumerate(checked):
                for var in variants:
                    _validate_hparams(var.agent, {**var.hparams, key: v}, f"{fname}[{j}]")
        sweep[key] = tuple(checked)
    return sweep


def _parse_analysis(raw: dict, schedule: Schedule) -> AnalysisSpec:
    check_keys(raw, _ANALYSIS_KEYS, "analysis.")
    if "metrics" in raw:
        metrics = name_list(raw["metrics"], METRICS, "analysis.metrics", "metric")
    else:  # defaults follow from the schedule
        metrics = ["steps_per_episode"] if schedule.episodes else ["cumulative_reward"]
        if schedule.eval_every:
            metrics.append("eval_score")
        if schedule.stop_at_optimal:
            metrics.append("updates_to_optimal")
    needs = {
        "steps_per_episode": (schedule.episodes is not None, "needs schedule.episodes"),
        "cumulative_reward": (schedule.total_steps is not None, "needs schedule.total_steps"),
        "eval_score": (schedule.eval_every > 0, "needs schedule.eval_every > 0"),
        "updates_to_optimal": (schedule.stop_at_optimal, "needs schedule.stop_at_optimal"),
    }
    for j, m in enumerate(metrics):
        ok, why = needs[m]
        if not ok:
            raise ConfigError(f"analysis.metrics[{j}]", m, why)
    checks = name_list(raw.get("checks", []), CHECKS, "analysis.checks", "check")
    check_needs = {
        "figure_8_2": "steps_per_episode", "blocking": "cumulative_reward",
        "shortcut": "cumulative_reward", "prioritized_sweeping": "updates_to_optimal",
    }
    for j, c in enumerate(checks):
        if check_needs[c] not in metrics:
            raise ConfigError(f"analysis.checks[{j}]", c,
                              f"needs metric {check_needs[c]!r} in analysis.metrics")
    first = check_range("analysis.first_episode", raw.get("first_episode", 1), lo=1,
                        integer=True)
    if schedule.episodes is not None and first > schedule.episodes:
        raise ConfigError("analysis.first_episode", first,
                          f"exceeds schedule.episodes={schedule.episodes}")
    final = check_range("analysis.final_episodes", raw.get("final_episodes", 10), lo=1,
                        integer=True)
    statistic = raw.get("statistic", "mean")
    if statistic not in ("mean", "iqm"):
        raise ConfigError("analysis.statistic", statistic, "must be 'mean' or 'iqm'")
    return AnalysisSpec(
        metrics=tuple(metrics), first_episode=first, final_episodes=final,
        checks=tuple(checks),
        per_run_plots=check_bool(raw.get("per_run_plots", False), "analysis.per_run_plots"),
        confidence=check_range("analysis.confidence", raw.get("confidence", 0.95), lo=0,
                               hi=1, lo_open=True, hi_open=True),
        n_resamples=check_range("analysis.n_resamples", raw.get("n_resamples", 2000), lo=100,
                                integer=True),
        statistic=statistic,
        log_y=check_bool(raw.get("log_y", False), "analysis.log_y"),
        smooth=check_range("analysis.smooth", raw.get("smooth", 1), lo=1, integer=True),
    )


def parse_tabular(data: dict, *, runs: int | None = None, seed: int | None = None
                 ) -> ExperimentConfig:
    """Validate a raw experiment dict (as read from TOML) into an :class:`ExperimentConfig`.

    Parameters
    ----------
    data : dict
        Parsed TOML (or :meth:`ExperimentConfig.to_dict` output); ``kind`` may be absent or
        ``"tabular"`` (files of other kinds go to their own kind through
        :func:`dyna.experiment.registry.parse_experiment`).
    runs, seed : int, optional
        CLI overrides, validated as ``--runs`` (>= 1) and ``--seed`` (>= 0).

    Raises
    ------
    ConfigError
        ``kind`` other than ``"tabular"``, a misspelt key (field = dotted path, with a close-match
        suggestion), a missing required key, or a value out of range; hyper-parameter errors come
        from :func:`dyna.agents.validate_hparams` with field ``variants.<name>.<key>`` or
        ``defaults.<key>``.
    """
    if not isinstance(data, dict):
        raise ConfigError("config", data, "must be a table")
    if data.get("kind", "tabular") != "tabular":
        raise ConfigError("kind", data["kind"], "not a tabular experiment")
    data = {k: v for k, v in data.items() if k != "kind"}
    if not data:
        raise ConfigError("name", None, "missing: the file is empty (an experiment needs "
                          "name, [env] and [schedule]; see experiments/dyna_maze.toml)")
    check_keys(data, _TOP_KEYS, "")
    if data.get("name") is None:
        raise ConfigError("name", None, 'missing: the file has no name = "..." (letters, '
                          "digits, _ . -; used in the output folder's name)")
    name = check_string(data.get("name"), "name", pattern=NAME_RE)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError("description", description, "must be a string")
    cfg_seed = check_range("seed", data.get("seed", 0), lo=0, integer=True)
    cfg_runs = check_range("runs", data.get("runs", 1), lo=1, integer=True)

    env_raw = table_of(data, "env", "env", required=True)
    check_keys(env_raw, _ENV_KEYS, "env.")
    env_id = check_string(env_raw.get("id"), "env.id")
    kwargs_raw = table_of(env_raw, "kwargs", "env.kwargs")
    kwargs = {}
    for key, value in kwargs_raw.items():
        kwargs[key] = value if isinstance(value, list | dict) else \
            check_scalar(value, f"env.kwargs.{key}")
    env = EnvSpec(id=env_id, kwargs=kwargs)

    schedule = _parse_schedule(table_of(data, "schedule", "schedule", required=True))
    variants = _parse_variants(data)
    sweep = _parse_sweep(data, kwargs, variants)
    analysis = _parse_analysis(table_of(data, "analysis", "analysis"), schedule)
    if schedule.optimal_protocol == "reference":
        if "goal_block" in sweep:
            raise ConfigError("sweep.goal_block", sweep["goal_block"],
                              "is set by schedule.optimal_protocol = 'reference'")
        if kwargs.get("goal_block", True) is not True:
            raise ConfigError("env.kwargs.goal_block", kwargs["goal_block"],
                              "must be true (or absent) with schedule.optimal_protocol = "
                              "'reference'")
    config = ExperimentConfig(name=name, description=description, seed=cfg_seed,
                              runs=cfg_runs, env=env, schedule=schedule, variants=variants,
                              sweep=sweep, analysis=analysis)
    return config.with_overrides(runs=runs, seed=seed)
