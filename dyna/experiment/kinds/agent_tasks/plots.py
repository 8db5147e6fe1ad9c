"""Kind ``agent_tasks``: the standard plots (see :func:`draw_plots`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import polars as pl

from dyna.experiment.plotting import figure, save
from dyna.experiment.stats import curve_ci, per_run_ci

__all__ = ["draw_plots"]


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

    cfg = out.config
    scen = [n for n, _ in cfg.scenarios]
    with figure(figsize=(4.2 * len(scen), 4.2)) as fig:
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
        return save(fig, stem, svg=False)


def _colors(n: int):
    cmap = matplotlib.colormaps["tab20"]
    return [cmap(i % 20) for i in range(n)]


def _competence_plot(out, ep: pl.DataFrame, folder: Path, stride: int) -> list[Path]:
    """Posterior mean with the 90% credible band, averaged over runs: for the chosen family
    (its Beta(a, b) after each episode) and averaged over families (each family's posterior
    rebuilt from the runs' own outcomes: a = 1 + successes, b = 1 + failures)."""
    from scipy.stats import beta


    cfg = out.config
    fam = int(cfg.analysis["chosen_family"])
    scen = [n for n, _ in cfg.scenarios]
    paths = []
    E = cfg.episodes
    keep = np.unique(np.r_[np.arange(stride - 1, E, stride), E - 1])
    for which in ("chosen_family", "all_families"):
        with figure(figsize=(4.2 * len(scen), 4.2)) as fig:
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
            paths += save(fig, folder / "plots" / f"competence_{which}", svg=False)
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
        with figure(figsize=(max(6.0, 0.5 * len(cfg.variants)) , 4.0 * len(drift_scen))) as fig:
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
            paths += save(fig, plots / "recovery", svg=False)
    return paths
