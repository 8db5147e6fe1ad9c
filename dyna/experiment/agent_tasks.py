"""Experiment kind ``agent_tasks``: loop agents against baselines on agent tasks, per
failure-mode scenario, with the safeguard ablation.

An experiment file (``experiments/skill_loop_ablation.toml``)::

    kind = "agent_tasks"
    name = "skill_loop_ablation"
    seed = 0
    runs = 10                  # seeds per variant and scenario
    episodes = 1000
    store = "skill"            # what the loops keep: "skill" or "memory"
    variants = "all"           # or a list of names (dyna.agents.loop_agents.make_variant)

    [env]                      # AgentTaskEnv keywords shared by every scenario
    n_families = 8

    [policy]                   # PolicyParams (p_follow, tokens_per_review, copy_rate, ...)
    [loop]                     # LoopConfig settings of the full loop (skill_cap, ...)

    [[scenarios]]
    name = "clean"
    [[scenarios]]
    name = "drift"
    env = { drift_at = [300, 600] }

    [analysis]
    final_window = 100         # episodes at the end that give the "final" numbers
    window = 50                # rolling window of the curves (episodes)
    recovery_window = 10       # drifted-family episodes averaged to judge recovery
    recovery_points = 0.05     # back within 5 points of the pre-drift success rate
    chosen_family = 0          # family of the per-family competence plot

A group is one variant in one scenario; run ``r`` of every group uses the same task
stream (the env seed depends on ``(seed, r)`` only).

Tables written: ``episodes`` (one row per variant x scenario x run x episode, the fields of
:data:`dyna.agents.loop_agents.EPISODE_FIELDS`) and ``runs`` (one row per run: final success
rate, tokens per success, learning cost share, incidents, poisoned and stale entries,
recovery time after drifts, ...). Plots and ``report.md`` as described in
:func:`draw_plots` and :func:`build_report`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from dyna.errors import ConfigError, check_range
from dyna.experiment.backends import Job, split_runs
from dyna.experiment.kinds import ExperimentKind, Prepared

__all__ = ["AgentTasksConfig", "KIND", "RUN_METRICS", "execute_agent_job", "run_summaries"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_TOP = ("name", "description", "seed", "runs", "episodes", "store", "variants", "env",
        "policy", "loop", "scenarios", "analysis")
_ANALYSIS = {"final_window": 100, "window": 50, "recovery_window": 10,
             "recovery_points": 0.05, "chosen_family": 0, "confidence": 0.95,
             "n_resamples": 2000}

#: Per-run metrics of the ``runs`` table shown in the report: column -> label.
RUN_METRICS = {
    "final_success": "final success rate",
    "tokens_per_success": "tokens per success",
    "learning_share": "learning cost share",
    "incidents": "incidents",
    "poisoned_final": "poisoned entries",
    "stale_final": "stale entries",
    "recovery": "recovery (episodes)",
}


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
        from dyna.experiment.config import config_hash
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


# ============================================================================ jobs

def execute_agent_job(job: Job) -> dict:
    """Run one job: every run of one variant in one scenario.

    Returns
    -------
    dict of numpy.ndarray
        Each field of :data:`~dyna.agents.loop_agents.EPISODE_FIELDS` with shape
        ``(len(job.run_indices), episodes)``.
    """
    from dyna.agents.loop_agents import EPISODE_FIELDS, run_loop_agent

    p = job.payload
    rows = [run_loop_agent(p["variant_name"], store=p["store"], env_kwargs=p["env_kwargs"],
                           episodes=p["episodes"], seed=p["seed"], run_index=r,
                           params=p["policy"], loop_config=p["loop"])
            for r in job.run_indices]
    return {k: np.stack([r[k] for r in rows]) for k in EPISODE_FIELDS}


def _recovery(success: np.ndarray, family: np.ndarray, drift_family: np.ndarray,
              window: int, points: float) -> tuple[float, int, int]:
    """Mean episodes until the drifted family's success rate is back within ``points`` of
    its level before the drift; also (drifts measured, drifts recovered).

    For a drift at episode d on family f: ``pre`` is the success rate of f's last
    ``window`` episodes before d; the recovery time is the number of episodes from d to the
    first episode of f from which the next ``window`` episodes of f reach ``pre - points``.
    A drift with fewer than ``window`` episodes of f before it or after it is not measured;
    one never recovered before the next drift (or the end) counts as not recovered.
    """
    drifts = np.flatnonzero(drift_family >= 0)
    times, measured = [], 0
    for j, d in enumerate(drifts):
        f = drift_family[d]
        end = drifts[j + 1] if j + 1 < len(drifts) else len(success)
        idx = np.flatnonzero(family == f)
        before = idx[idx < d][-window:]
        after = idx[(idx >= d) & (idx < end)]
        if len(before) < window or len(after) < window:
            continue
        measured += 1
        pre = success[before].mean()
        s = success[after].astype(np.float64)
        roll = np.convolve(s, np.ones(window) / window, mode="valid")
        ok = np.flatnonzero(roll >= pre - points - 1e-12)
        if ok.size:
            times.append(float(after[ok[0]] - d))
    rec = float(np.mean(times)) if times else math.nan
    return rec, measured, len(times)


def run_summaries(arrays: dict, analysis: dict) -> dict[str, np.ndarray]:
    """Per-run summary metrics from a group's episode arrays (shape ``(runs, episodes)``).

    Returns
    -------
    dict of numpy.ndarray, shape (runs,)
        ``final_success`` (success rate over the last ``final_window`` episodes),
        ``success_rate`` (all episodes), ``tokens_per_success`` (run + learning +
        escalation tokens over all episodes / successes; NaN without a success),
        ``learning_share`` (learning tokens / all tokens), ``final_tokens_per_run`` (mean
        run tokens over the last ``final_window``), ``tokens_growth`` (mean run tokens of
        the last quarter minus the second quarter), ``incidents``, ``escalations``,
        ``poisoned_final``, ``poisoned_max``, ``stale_final``, ``library_final``,
        ``recovery`` (NaN when not measured or never recovered), ``drifts_measured``,
        ``drifts_recovered``.
    """
    succ = arrays["success"].astype(np.float64)
    R, E = succ.shape
    w = min(int(analysis["final_window"]), E)
    tok = arrays["tokens"].astype(np.float64)
    learn = arrays["learning_tokens"].astype(np.float64)
    total = tok.sum(1) + learn.sum(1)
    n_succ = succ.sum(1)
    q = max(1, E // 4)
    out = {
        "final_success": succ[:, -w:].mean(1),
        "success_rate": succ.mean(1),
        "tokens_per_success": np.where(n_succ > 0, total / np.maximum(n_succ, 1), np.nan),
        "learning_share": np.where(total > 0, learn.sum(1) / np.maximum(total, 1), 0.0),
        "final_tokens_per_run": tok[:, -w:].mean(1),
        "tokens_growth": tok[:, -q:].mean(1) - tok[:, q:2 * q].mean(1),
        "incidents": arrays["incident"].sum(1).astype(np.int64),
        "escalations": arrays["escalated"].sum(1).astype(np.int64),
        "poisoned_final": arrays["poisoned"][:, -1].astype(np.int64),
        "poisoned_max": arrays["poisoned"].max(1).astype(np.int64),
        "stale_final": arrays["stale"][:, -1].astype(np.int64),
        "library_final": arrays["library_size"][:, -1].astype(np.int64),
    }
    rec = [_recovery(arrays["success"][r], arrays["family"][r], arrays["drift_family"][r],
                     int(analysis["recovery_window"]), float(analysis["recovery_points"]))
           for r in range(R)]
    out["recovery"] = np.array([x[0] for x in rec], dtype=np.float64)
    out["drifts_measured"] = np.array([x[1] for x in rec], dtype=np.int64)
    out["drifts_recovered"] = np.array([x[2] for x in rec], dtype=np.int64)
    return out


# ============================================================================ the kind

class AgentTasksKind(ExperimentKind):
    """Kind ``agent_tasks`` (module docstring)."""

    name = "agent_tasks"
    progress_unit = "run"

    def parse(self, data, *, runs=None, seed=None):
        return parse_agent_tasks(data, runs=runs, seed=seed)

    def prepare(self, config: AgentTasksConfig) -> Prepared:
        from envs.agent_tasks import AgentTaskEnv
        scen = []
        for i, (name, _) in enumerate(config.scenarios):
            kw = config.env_kwargs(i)
            env = AgentTaskEnv(**kw)
            scen.append({"scenario": name, "env_kwargs": kw, "n_families": env.n_families,
                         "arrival_p": env.arrival_p.tolist()})
        return Prepared(manifest={"scenarios": scen})

    def n_groups(self, config) -> int:
        return len(config.variants) * len(config.scenarios)

    def plan_jobs(self, config, prepared, *, block_size):
        jobs = []
        for v, variant in enumerate(config.variants):
            for p, (sname, _) in enumerate(config.scenarios):
                payload = {"variant_name": variant, "point_kwargs": {"scenario": sname},
                           "store": config.store, "env_kwargs": config.env_kwargs(p),
                           "episodes": config.episodes, "seed": config.seed,
                           "policy": dict(config.policy), "loop": dict(config.loop)}
                for block in split_runs(config.runs, block_size):
                    jobs.append(Job(variant=v, point=p, run_indices=block, payload=payload))
        return jobs

    @property
    def job_function(self):
        return execute_agent_job

    def build_tables(self, config, prepared, jobs, results):
        from dyna.agents.loop_agents import EPISODE_FIELDS
        groups: dict[tuple, list] = {}
        for job, res in zip(jobs, results):
            groups.setdefault((job.variant, job.point), []).append(res)
        ep_frames, run_frames = [], []
        E = config.episodes
        for (v, p), parts in sorted(groups.items()):
            arrays = {k: np.concatenate([x[k] for x in parts]) for k in EPISODE_FIELDS}
            R = arrays["success"].shape[0]
            ids = {"variant": pl.Series([config.variants[v]] * (R * E), dtype=pl.String),
                   "scenario": pl.Series([config.scenarios[p][0]] * (R * E),
                                         dtype=pl.String),
                   "run": np.repeat(np.arange(R, dtype=np.int64), E),
                   "episode": np.tile(np.arange(1, E + 1, dtype=np.int64), R)}
            ep_frames.append(pl.DataFrame({**ids, **{k: a.ravel() for k, a in
                                                     arrays.items()}}))
            summ = run_summaries(arrays, config.analysis)
            run_frames.append(pl.DataFrame({
                "variant": pl.Series([config.variants[v]] * R, dtype=pl.String),
                "scenario": pl.Series([config.scenarios[p][0]] * R, dtype=pl.String),
                "run": np.arange(R, dtype=np.int64), **summ}))
        return {"episodes": pl.concat(ep_frames), "runs": pl.concat(run_frames)}

    def draw_plots(self, out, folder):
        return draw_plots(out, Path(folder))

    def write_report(self, out, folder):
        path = Path(folder) / "report.md"
        drawn = sorted(p.stem for p in (Path(folder) / "plots").glob("*.png"))
        path.write_text(build_report(out, drawn))
        return path

    def required_tables(self):
        return ("episodes", "runs")


KIND = AgentTasksKind()


# ============================================================================ plots

def _curves(ep: pl.DataFrame, value: str, window: int, stride: int) -> pl.DataFrame:
    """Per (scenario, variant, run): rolling mean of ``value`` over ``window`` episodes,
    kept every ``stride`` episodes (columns scenario, variant, run, episode, y)."""
    return (ep.sort("scenario", "variant", "run", "episode")
            .with_columns(pl.col(value).cast(pl.Float64).rolling_mean(window, min_samples=1)
                          .over("scenario", "variant", "run").alias("y"))
            .filter((pl.col("episode") % stride == 0) | (pl.col("episode") == 1))
            .select("scenario", "variant", "run", "episode", "y"))


def _panel_plot(out, frame: pl.DataFrame, *, ylabel: str, title: str, stem: Path,
                band: bool = True) -> list[Path]:
    """One panel per scenario, one line per variant; mean over runs with a 95% bootstrap
    band (:func:`dyna.experiment.stats.curve_ci`) or, with ``band=False``, the mean only."""
    from dyna.experiment.plots import _figure, _save
    from dyna.experiment.stats import curve_ci

    cfg = out.config
    scen = [n for n, _ in cfg.scenarios]
    with _figure(figsize=(4.2 * len(scen), 4.2)) as fig:
        axes = fig.subplots(1, len(scen), squeeze=False)[0]
        colors = _colors(len(cfg.variants))
        for ax, s in zip(axes, scen):
            sub = frame.filter(pl.col("scenario") == s)
            if band:
                ci = curve_ci(sub.drop("scenario"), by=["variant"], x="episode", y="y",
                              n_resamples=200, seed=cfg.seed)
            for i, v in enumerate(cfg.variants):
                if band:
                    g = ci.filter(pl.col("variant") == v)
                    x, est = g["episode"].to_numpy(), g["estimate"].to_numpy()
                    ax.fill_between(x, g["low"].to_numpy(), g["high"].to_numpy(),
                                    color=colors[i], alpha=0.12, linewidth=0)
                else:
                    g = (sub.filter(pl.col("variant") == v).group_by("episode")
                         .agg(pl.col("y").mean()).sort("episode"))
                    x, est = g["episode"].to_numpy(), g["y"].to_numpy()
                ax.plot(x, est, color=colors[i], lw=1.2, label=v)
            ax.set_title(s)
            ax.set_xlabel("episode")
            ax.set_ylabel(ylabel)
        axes[-1].legend(fontsize=6, loc="best")
        fig.suptitle(title)
        return _save(fig, stem, svg=False)


def _colors(n: int):
    import matplotlib
    cmap = matplotlib.colormaps["tab20"]
    return [cmap(i % 20) for i in range(n)]


def _competence_plot(out, ep: pl.DataFrame, folder: Path, stride: int) -> list[Path]:
    """Posterior mean with the 90% credible band, averaged over runs: for the chosen family
    (its Beta(a, b) after each episode) and averaged over families (each family's posterior
    rebuilt from the runs' own outcomes: a = 1 + successes, b = 1 + failures)."""
    from scipy.stats import beta

    from dyna.experiment.plots import _figure, _save

    cfg = out.config
    fam = int(cfg.analysis["chosen_family"])
    scen = [n for n, _ in cfg.scenarios]
    paths = []
    E = cfg.episodes
    keep = np.unique(np.r_[np.arange(stride - 1, E, stride), E - 1])
    for which in ("chosen_family", "all_families"):
        with _figure(figsize=(4.2 * len(scen), 4.2)) as fig:
            axes = fig.subplots(1, len(scen), squeeze=False)[0]
            colors = _colors(len(cfg.variants))
            for ax, s in zip(axes, scen):
                n_fam = _n_families(out, s)
                for i, v in enumerate(cfg.variants):
                    g = ep.filter((pl.col("scenario") == s) & (pl.col("variant") == v))
                    R = g["run"].n_unique()
                    if which == "chosen_family":
                        a = g["comp_f0_a"].to_numpy().reshape(R, E) if fam == 0 else None
                        b = g["comp_f0_b"].to_numpy().reshape(R, E) if fam == 0 else None
                        if a is None:
                            a, b = _rebuild(g, R, E, fam)
                        a, b = a[:, keep], b[:, keep]
                        mean = (a / (a + b)).mean(0)
                        lo = beta.ppf(0.05, a, b).mean(0)
                        hi = beta.ppf(0.95, a, b).mean(0)
                    else:
                        ms, ls, hs = [], [], []
                        for f in range(n_fam):
                            a, b = _rebuild(g, R, E, f)
                            a, b = a[:, keep], b[:, keep]
                            ms.append(a / (a + b))
                            ls.append(beta.ppf(0.05, a, b))
                            hs.append(beta.ppf(0.95, a, b))
                        mean = np.mean(ms, axis=0).mean(0)
                        lo = np.mean(ls, axis=0).mean(0)
                        hi = np.mean(hs, axis=0).mean(0)
                    x = keep + 1
                    ax.fill_between(x, lo, hi, color=colors[i], alpha=0.10, linewidth=0)
                    ax.plot(x, mean, color=colors[i], lw=1.2, label=v)
                ax.set_ylim(0, 1)
                ax.set_title(s)
                ax.set_xlabel("episode")
                ax.set_ylabel("competence (posterior mean, 90% band)")
            axes[-1].legend(fontsize=6, loc="lower right")
            title = (f"competence of family {fam}" if which == "chosen_family"
                     else "competence averaged over families")
            fig.suptitle(title)
            paths += _save(fig, folder / "plots" / f"competence_{which}", svg=False)
    return paths


def _n_families(out, scenario: str) -> int:
    """Number of families of a scenario (manifest, else the config)."""
    for s in out.manifest.get("scenarios", []):
        if s["scenario"] == scenario:
            return int(s["n_families"])
    from envs.agent_tasks import AgentTaskEnv
    i = [n for n, _ in out.config.scenarios].index(scenario)
    return AgentTaskEnv(**out.config.env_kwargs(i)).n_families


def _rebuild(g: pl.DataFrame, R: int, E: int, f: int):
    """Beta(1 + successes, 1 + failures) of family ``f`` after each episode, from the
    runs' own (not escalated) outcomes; arrays (R, E)."""
    fam = g["family"].to_numpy().reshape(R, E)
    own = (fam == f) & ~g["escalated"].to_numpy().reshape(R, E)
    s = g["success"].to_numpy().reshape(R, E)
    a = 1.0 + np.cumsum(own & s, axis=1)
    b = 1.0 + np.cumsum(own & ~s, axis=1)
    return a, b


def draw_plots(out, folder: Path) -> list[Path]:
    """The standard plots of an agent-tasks experiment into ``folder/plots``:

    * ``competence_chosen_family``, ``competence_all_families``: posterior mean with the
      90% credible band, per scenario and variant;
    * ``success_rate``: rolling success rate (``analysis.window`` episodes), mean over runs
      with a 95% bootstrap band;
    * ``tokens_per_success``: rolling run + learning tokens per successful run;
    * ``library_size``, ``poisoned_entries``, ``stale_entries``: over episodes (means);
    * ``recovery``: recovery time after drifts per variant (mean with 95% bootstrap
      interval), for scenarios with drifts.
    """
    from dyna.experiment.plots import _figure, _save
    from dyna.experiment.stats import per_run_ci

    cfg = out.config
    ep = out.tables["episodes"]
    W = int(cfg.analysis["window"])
    stride = max(1, cfg.episodes // 100)
    plots = folder / "plots"
    paths = _competence_plot(out, ep, folder, stride)
    paths += _panel_plot(out, _curves(ep, "success", W, stride), ylabel="success rate",
                         title=f"success rate (rolling {W} episodes)",
                         stem=plots / "success_rate")
    tps = (ep.sort("scenario", "variant", "run", "episode")
           .with_columns((pl.col("tokens") + pl.col("learning_tokens")).cast(pl.Float64)
                         .rolling_sum(W, min_samples=1).over("scenario", "variant", "run")
                         .alias("tok"),
                         pl.col("success").cast(pl.Float64).rolling_sum(W, min_samples=1)
                         .over("scenario", "variant", "run").alias("ns"))
           .with_columns((pl.col("tok") / pl.max_horizontal(pl.col("ns"), pl.lit(1.0)))
                         .alias("y"))
           .filter((pl.col("episode") % stride == 0) | (pl.col("episode") == 1))
           .select("scenario", "variant", "run", "episode", "y"))
    paths += _panel_plot(out, tps, ylabel="tokens per success",
                         title=f"tokens per successful run (rolling {W} episodes)",
                         stem=plots / "tokens_per_success")
    for col, label in (("library_size", "library size (active entries)"),
                       ("poisoned", "poisoned entries"), ("stale", "stale entries")):
        frame = (ep.filter((pl.col("episode") % stride == 0) | (pl.col("episode") == 1))
                 .select("scenario", "variant", "run", "episode",
                         pl.col(col).cast(pl.Float64).alias("y")))
        name = {"poisoned": "poisoned_entries", "stale": "stale_entries"}.get(col, col)
        paths += _panel_plot(out, frame, ylabel=label, title=label, stem=plots / name,
                             band=False)
    runs = out.tables["runs"]
    drift_scen = [s for s in runs["scenario"].unique(maintain_order=True)
                  if runs.filter(pl.col("scenario") == s)["drifts_measured"].sum() > 0]
    if drift_scen:
        with _figure(figsize=(max(6.0, 0.5 * len(cfg.variants)) , 4.0 * len(drift_scen))) as fig:
            axes = fig.subplots(len(drift_scen), 1, squeeze=False)[:, 0]
            for ax, s in zip(axes, drift_scen):
                est, lo, hi = [], [], []
                for v in cfg.variants:
                    x = runs.filter((pl.col("scenario") == s) & (pl.col("variant") == v))
                    vals = x["recovery"].to_numpy()
                    iv = per_run_ci(vals[np.isfinite(vals)], seed=cfg.seed, n_resamples=500)
                    est.append(float(iv.estimate))
                    lo.append(float(iv.low))
                    hi.append(float(iv.high))
                xs = np.arange(len(cfg.variants))
                e = np.array(est)
                err = np.array([e - np.array(lo), np.array(hi) - e])
                ax.bar(xs, np.nan_to_num(e), color=_colors(len(xs)))
                ax.errorbar(xs, e, yerr=np.nan_to_num(err), fmt="none", ecolor="k", lw=1)
                ax.set_xticks(xs, cfg.variants, rotation=60, ha="right", fontsize=7)
                ax.set_ylabel("episodes to recover")
                ax.set_title(f"{s}: recovery after a drift (within "
                             f"{cfg.analysis['recovery_points'] * 100:g} points)")
            paths += _save(fig, plots / "recovery", svg=False)
    return paths


# ============================================================================ report

def _interval_text(values, opts) -> str:
    from dyna.experiment.report import _ci
    from dyna.experiment.stats import per_run_ci
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return "n/a"
    m = _ci(per_run_ci(v, statistic="mean", **opts))
    q = _ci(per_run_ci(v, statistic="iqm", **opts))
    miss = "" if v.size == len(values) else f" (n={v.size})"
    return f"{m}; IQM {q}{miss}"


def _vals(runs: pl.DataFrame, scenario: str, variant: str, col: str) -> np.ndarray:
    return runs.filter((pl.col("scenario") == scenario) & (pl.col("variant") == variant))[
        col].to_numpy().astype(np.float64)


def _diff(runs, scenario, a, b, col, opts):
    """diff_ci of stat(a) - stat(b) over runs (NaNs dropped); None if impossible."""
    from dyna.experiment.stats import diff_ci
    x, y = _vals(runs, scenario, a, col), _vals(runs, scenario, b, col)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if x.size < 2 or y.size < 2:
        return None
    return diff_ci(x, y, confidence=opts["confidence"], n_resamples=opts["n_resamples"],
                   seed=opts["seed"])


def _diff_text(iv) -> str:
    from dyna.experiment.report import _ci
    if iv is None:
        return "n/a"
    lo, hi = float(iv.low), float(iv.high)
    excl = (lo > 0 or hi < 0) if math.isfinite(lo) and math.isfinite(hi) else False
    return _ci(iv) + (" *" if excl else "")


def _excludes_zero(iv, sign: int) -> bool:
    """The interval lies strictly on the ``sign`` side of zero."""
    if iv is None or not (math.isfinite(float(iv.low)) and math.isfinite(float(iv.high))):
        return False
    return float(iv.low) > 0 if sign > 0 else float(iv.high) < 0


def _scenario_like(names, *words):
    for n in names:
        if any(w in n for w in words):
            return n
    return None


def _hypotheses(cfg, runs: pl.DataFrame, opts) -> list[str]:
    """Each hypothesis of the issue, measured: holds / does not hold, with the numbers."""
    store = cfg.store
    loop = f"{store}_loop"
    scen = [n for n, _ in cfg.scenarios]
    have = set(cfg.variants)
    lines = ["## Hypotheses, as measured", "",
             "An interval is a 95% bootstrap interval of the difference of means over runs "
             "(first minus second); a hypothesis *holds* only when its interval excludes zero "
             "in the predicted direction. Nothing in the environment was tuned after seeing "
             "these numbers.", ""]

    def say(title, ok, detail):
        verdict = "**holds**" if ok else "**does not hold**"
        lines.append(f"- {title}: {verdict}. {detail}")

    clean = _scenario_like(scen, "clean")
    if clean and "no_learning" in have:
        learners = [v for v in cfg.variants if v not in ("no_learning", "oracle")]
        bad = []
        parts = []
        for v in learners:
            iv = _diff(runs, clean, v, "no_learning", "tokens_per_success", opts)
            parts.append(f"{v} {_diff_text(iv)}")
            if not _excludes_zero(iv, -1):
                bad.append(v)
        say(f"clean: every learning variant beats no_learning on tokens per success",
            not bad, ("failing: " + ", ".join(bad) + ". " if bad else "")
            + "Differences (variant - no_learning): " + "; ".join(parts) + ".")
        if "oracle" in have:
            bad = []
            for v in cfg.variants:
                if v == "oracle":
                    continue
                t_o = np.nanmean(_vals(runs, clean, "oracle", "tokens_per_success"))
                t_v = np.nanmean(_vals(runs, clean, v, "tokens_per_success"))
                s_o = np.nanmean(_vals(runs, clean, "oracle", "final_success"))
                s_v = np.nanmean(_vals(runs, clean, v, "final_success"))
                if t_o > t_v or s_o < s_v:
                    bad.append(v)
            say("clean: oracle bounds every variant (fewest tokens per success, highest "
                "final success rate, mean over runs)", not bad,
                ("exceeded by: " + ", ".join(bad) + "." if bad else ""))
    noisy = _scenario_like(scen, "noisy", "self_assess")
    if noisy and loop in have:
        for v in ("naive_loop", "self_reflection"):
            if v not in have:
                continue
            iv = _diff(runs, noisy, v, loop, "final_success", opts)
            pm = np.nanmean(_vals(runs, noisy, v, "poisoned_max"))
            pl_ = np.nanmean(_vals(runs, noisy, loop, "poisoned_max"))
            say(f"{noisy}: {v} succeeds less than {loop}", _excludes_zero(iv, -1),
                f"final success {v} - {loop}: {_diff_text(iv)}; wrong entries kept (max "
                f"over a run, mean over runs): {v} {pm:.3g}, {loop} {pl_:.3g}.")
    drift = _scenario_like(scen, "drift")
    abl = f"{loop}-no_retire_on_contradiction"
    if drift and loop in have and abl in have:
        iv = _diff(runs, drift, abl, loop, "recovery", opts)
        say(f"{drift}: without retire-on-contradiction recovery is slower",
            _excludes_zero(iv, +1), f"recovery episodes {abl} - {loop}: {_diff_text(iv)}.")
    volume = _scenario_like(scen, "volume")
    if volume and loop in have:
        for sw in ("novelty_check", "cap_eviction"):
            v = f"{loop}-no_{sw}"
            if v not in have:
                continue
            iv = _diff(runs, volume, v, loop, "final_tokens_per_run", opts)
            g = _vals(runs, volume, v, "tokens_growth")
            from dyna.experiment.stats import per_run_ci
            giv = per_run_ci(g, seed=opts["seed"], n_resamples=opts["n_resamples"])
            say(f"{volume}: without {sw} the tokens per run keep growing",
                _excludes_zero(iv, +1) and float(giv.low) > 0,
                f"final tokens per run {v} - {loop}: {_diff_text(iv)}; growth of {v} "
                f"(last quarter - second quarter): {_diff_text(giv)}.")
    inj = _scenario_like(scen, "inject")
    abl = f"{loop}-no_approval_for_untrusted"
    if inj and loop in have and abl in have:
        iv = _diff(runs, inj, abl, loop, "incidents", opts)
        none_full = float(np.nansum(_vals(runs, inj, loop, "incidents")))
        say(f"{inj}: without approval incidents happen, with it none do",
            _excludes_zero(iv, +1) and none_full == 0,
            f"incidents {abl} - {loop}: {_diff_text(iv)}; incidents of {loop} over all runs: "
            f"{none_full:g}.")
    return lines + [""]


def build_report(out, plots=None) -> str:
    """``report.md``: setup, a table per scenario (final success rate, tokens per success,
    learning cost share, incidents, poisoned and stale entries, recovery time: mean and IQM
    over runs with 95% bootstrap intervals), the effect of removing each safeguard (the
    ablated loop minus the full loop, 95% interval; ``*`` where it excludes zero), the
    hypotheses as measured, and the plots (``plots``: the names drawn; default all)."""
    from dyna.experiment.report import _table, short_hash

    cfg = out.config
    runs = out.tables["runs"]
    opts = {"confidence": float(cfg.analysis["confidence"]),
            "n_resamples": int(cfg.analysis["n_resamples"]), "seed": cfg.seed}
    ci_opts = dict(opts)
    lines = [f"# {cfg.name}", "", cfg.description or "", "",
             "## Setup", "",
             f"- kind `agent_tasks`; config sha256 "
             f"`{short_hash(out.manifest.get('config_hash', cfg.hash))}` (in full in "
             "manifest.json)",
             f"- store `{cfg.store}`, {cfg.runs} runs (seeds) per variant "
             f"and scenario, {cfg.episodes} episodes per run, seed {cfg.seed}",
             f"- base environment: `{cfg.env}`; policy: `{cfg.policy}`; loop: `{cfg.loop}`",
             f"- variants: {', '.join(cfg.variants)}",
             "- scenarios: " + "; ".join(f"`{n}` {kw}" for n, kw in cfg.scenarios),
             f"- final numbers over the last {cfg.analysis['final_window']} episodes; "
             "tokens per success = (run + learning + escalation tokens) / successes over the "
             "whole run; recovery = episodes after a drift until the drifted family's "
             f"success rate over {cfg.analysis['recovery_window']} of its episodes is back "
             f"within {cfg.analysis['recovery_points'] * 100:g} points of its pre-drift rate",
             ""]
    timing = out.manifest.get("timing", {})
    if timing.get("run_time_s"):
        n_ep = cfg.runs * cfg.episodes * len(cfg.variants) * len(cfg.scenarios)
        lines += [f"- {n_ep} episodes in {timing['run_time_s']:.1f} s of run time "
                  f"({n_ep / timing['run_time_s']:.0f} episodes/s)", ""]
    for s, _ in cfg.scenarios:
        lines += [f"## Scenario `{s}`", ""]
        header = ["variant"] + list(RUN_METRICS.values())
        rows = []
        for v in cfg.variants:
            rows.append([f"`{v}`"] + [_interval_text(_vals(runs, s, v, c), ci_opts)
                                      for c in RUN_METRICS])
        lines += _table(header, rows) + [""]
        loop = f"{cfg.store}_loop"
        ablations = [v for v in cfg.variants if v.startswith(loop + "-no_")]
        if loop in cfg.variants and ablations:
            lines += [f"Effect of removing each safeguard (`{loop}-no_X` minus `{loop}`; "
                      "95% interval, `*` excludes zero):", ""]
            cols = ["final_success", "tokens_per_success", "incidents", "poisoned_final",
                    "stale_final", "recovery"]
            rows = [[f"`{v.split('-no_')[1]}`"] + [_diff_text(_diff(runs, s, v, loop, c, opts))
                                                   for c in cols] for v in ablations]
            lines += _table(["safeguard off"] + [RUN_METRICS[c] for c in cols], rows) + [""]
    lines += _hypotheses(cfg, runs, opts)
    lines += ["## Plots", ""]
    for name in ("competence_chosen_family", "competence_all_families", "success_rate",
                 "tokens_per_success", "library_size", "poisoned_entries", "stale_entries",
                 "recovery"):
        if plots is not None and name not in plots:
            continue
        lines.append(f"- ![{name}](plots/{name}.png)")
    return "\n".join(lines) + "\n"
