"""Kind ``agent_tasks``: the figures of per-run metrics, drawn by
:func:`dyna.experiment.kinds.agent_tasks.plots.draw_plots`.

* ``recovery``: per scenario with drifts, how each variant's drifted family fared after
  each drift: episodes to recover (:func:`drift_outcomes`), the drifts never recovered,
  and the drifts after which there was nothing to recover from;
* ``crossover``: per severity sweep, the sweep's metric against severity for no
  learning, the naive loop, the full loop, the naive loop with one safeguard and the
  literature baselines; a log y axis where the curves span :data:`LOG_SPAN` or more, a
  panel whose runs are the same at every setting says so in its title, and a curve lying
  on another is drawn dashed on top of it and named under its panel
  (:func:`mark_coinciding`).

Titles and notes break only between phrases
(:func:`dyna.experiment.plotting.phrase_lines`).

Colours are :func:`dyna.experiment.kinds.agent_tasks.figure_style.variant_colors`, the same as
in the scenario figures.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.ticker import FuncFormatter

from dyna.experiment.kinds.agent_tasks.metrics import DRIFT_ARRIVALS
from dyna.experiment.kinds.agent_tasks.figure_style import (
    PLOT_RESAMPLES,
    short_name,
    variant_colors,
)
from dyna.experiment.plotting import (coinciding_words, dash_coinciding, figure, over_runs,
                                      phrase_lines, save)
from dyna.experiment.stats import per_run_ci

__all__ = ["KNOB_WORDS", "LOG_SPAN", "STILL", "crossover_figure", "drift_outcomes",
           "mark_coinciding", "metric_words", "phrase_lines", "recovery_figure", "thousands"]


#: Drift outcomes without a recovery time: nothing to recover from (:func:`drift_outcomes`).
STILL = ("none before", "held")


def drift_outcomes(success: np.ndarray, family: np.ndarray, drift_family: np.ndarray,
                   window: int, points: float) -> list[tuple[str, float]]:
    """What became of each measured drift of one run, under the definition of the
    ``recovery`` metric (:func:`dyna.experiment.kinds.agent_tasks.metrics.run_summaries`):
    for a drift at episode index d on family f, ``pre`` is f's success rate over its last
    ``window`` episodes before d, and the drift is measured when f has ``window``
    episodes before d and ``window`` from d to the next drift (or the end).

    Each measured drift is one of

    * ``("none before", nan)``: ``pre <= points``, no level to fall from (the variant had
      not learned f);
    * ``("held", nan)``: the first ``window`` episodes of f from d on are already within
      ``points`` of ``pre``: the drift did not bring f's success down.

      In both the metric counts the episodes from d to f's first arrival after it, which
      depend on the arrivals alone, the same for every variant: there was nothing to
      recover from, and there is no recovery time;
    * ``("recovered", t)``: t episodes from d to the first episode of f from which f's
      next ``window`` episodes are back within ``points`` of ``pre``;
    * ``("never", t)``: not back before the next drift (or the end), t episodes away (a
      lower bound of the recovery time; the metric counts it so, censored).

    Parameters
    ----------
    success, family, drift_family : numpy.ndarray, shape (episodes,)
        One run's episode fields (``drift_family`` >= 0 at a drift episode).
    window : int
        ``analysis.recovery_window``, episodes of the drifted family.
    points : float
        ``analysis.recovery_points``, a proportion (0.05: 5 points).

    Returns
    -------
    list of (str, float)
        One per measured drift, in order; times in episodes.
    """
    drifts = np.flatnonzero(drift_family >= 0)
    out = []
    for j, d in enumerate(drifts):
        end = drifts[j + 1] if j + 1 < len(drifts) else len(success)
        idx = np.flatnonzero(family == drift_family[d])
        before, after = idx[idx < d][-window:], idx[(idx >= d) & (idx < end)]
        if len(before) < window or len(after) < window:
            continue
        level = float(success[before].mean()) - points - 1e-12
        roll = np.convolve(success[after].astype(np.float64), np.ones(window) / window,
                           mode="valid")
        back = np.flatnonzero(roll >= level)
        if level < 0:
            out.append(("none before", float("nan")))
        elif back.size and back[0] == 0:
            out.append(("held", float("nan")))
        elif back.size:
            out.append(("recovered", float(after[back[0]] - d)))
        else:
            out.append(("never", float(end - d)))
    return out


def _outcomes(ep: pl.DataFrame, scenario: str, variant: str, analysis) -> list:
    """:func:`drift_outcomes` of every run of ``variant`` in ``scenario``, pooled."""
    sub = ep.filter((pl.col("scenario") == scenario) & (pl.col("variant") == variant))
    got = []
    for _, g in sub.sort("run", "episode").group_by("run", maintain_order=True):
        got += drift_outcomes(g["success"].to_numpy(), g["family"].to_numpy(),
                              g["drift_family"].to_numpy(), int(analysis["recovery_window"]),
                              float(analysis["recovery_points"]))
    return got


def km_median(got: list) -> float:
    """The Kaplan-Meier median of episodes to recovery over the drift outcomes ``got``
    (:func:`drift_outcomes`): a recovered drift is an event at its time, a drift never
    recovered is censored at its lower bound; drifts with nothing to recover from are not
    counted. The median is the first time the curve falls below one half
    (``SurvfuncRight.quantile(0.5)`` of statsmodels): of drifts recovered at 2 and 4, 4.
    NaN when the curve never falls below one half or there is no measured drift."""
    from statsmodels.duration.survfunc import SurvfuncRight

    timed = [(t, k == "recovered") for k, t in got if k in ("recovered", "never")]
    if not any(event for _, event in timed):
        return math.nan
    sf = SurvfuncRight(np.array([t for t, _ in timed], dtype=np.float64),
                       np.array([e for _, e in timed], dtype=np.int64))
    return float(sf.quantile(0.5))


def _recovery_row(ax, y: float, got: list, color) -> tuple[float, str]:
    """One variant's row of a recovery panel: a dot at each recovered drift's episodes to
    recovery, a hollow triangle at each never-recovered drift's lower bound (spread over
    the row's height in the order of the runs, so equal times stay countable) and a black
    tick at the Kaplan-Meier median over both (:func:`km_median`); returns the largest x
    drawn and the counts in words (:func:`_counts`)."""
    timed = [(k, t) for k, t in got if k in ("recovered", "never")]
    offsets = np.linspace(-0.25, 0.25, len(timed)) if len(timed) > 1 else np.zeros(1)
    top = 0.0
    for kind, marker, fill in (("recovered", "o", color), ("never", ">", "none")):
        at = [(t, y + o) for (k, t), o in zip(timed, offsets) if k == kind]
        if at:
            ax.plot([t for t, _ in at], [yy for _, yy in at], ls="none", marker=marker,
                    ms=4, color=color, mfc=fill, mew=1.0, alpha=0.8)
            top = max(top, max(t for t, _ in at))
    median = km_median(got)
    if math.isfinite(median):
        ax.plot([median], [y], ls="none", marker="|", ms=14, mew=2.0, color="k")
    return top, _counts(got)


def _counts(got: list) -> str:
    """Drift outcomes in words: "2 recovered, 1 never, 3 held" ("not measured": none)."""
    n = {k: sum(kind == k for kind, _ in got) for k in ("recovered", "never", *STILL)}
    return ", ".join(f"{c} {k}" for k, c in n.items() if c) or "not measured"


def recovery_figure(out, folder: Path) -> list[Path]:
    """``folder/recovery.png|.svg``: a panel per scenario in which some variant's drifted
    family fell below its level after a drift, a row per variant (:func:`_recovery_row`);
    the scenarios with measured drifts but no such fall are named, with their counts, in
    the title instead of a panel of nothing. No figure without a measured drift."""
    cfg = out.config
    runs, ep = out.tables["runs"], out.tables["episodes"]
    drift = [s for s in runs["scenario"].unique(maintain_order=True)
             if runs.filter(pl.col("scenario") == s)["drifts_measured"].sum() > 0]
    if not drift:
        return []
    got = {s: {v: _outcomes(ep, s, v, cfg.analysis) for v in cfg.variants} for s in drift}
    shown = [s for s in drift if any(k not in STILL for per in got[s].values()
                                     for k, _ in per)]
    flat = [f"{s} ({_counts([x for per in got[s].values() for x in per])})"
            for s in drift if s not in shown]
    colors = variant_colors(cfg.variants, cfg.store)
    w, pts = cfg.analysis["recovery_window"], cfg.analysis["recovery_points"] * 100
    n = len(cfg.variants)
    lines = [f"{cfg.name}: recovery after a drift",
             (f"recovered: the drifted family's success over {w} of its episodes back within "
              f"{pts:g} points of its level before the drift"),
             "dot: a recovered drift; hollow >: a drift never recovered, at least this many "
             "episodes",
             ("black |: the Kaplan-Meier median over both (the never recovered censored), "
              "the first time the curve falls below one half; none where it never does"),
             (f"nothing to recover from, so no time: \"none before\", the family's success "
              f"before the drift at most {pts:g} points; \"held\", within {pts:g} points of "
              f"it in its first {w} episodes after")]
    if flat:
        lines.append("no panel, nothing to recover from for any variant: " + "; ".join(flat))
    heading = "\n".join(phrase_lines(x, 125) for x in lines)
    height = (0.28 * n + 1.0) * len(shown) + 0.5 + 0.14 * heading.count("\n")
    with figure(figsize=(8.0, max(height, 1.2 + 0.14 * heading.count("\n")))) as fig:
        for ax, s in zip(fig.subplots(len(shown), 1, squeeze=False)[:, 0] if shown else [],
                         shown):
            ys = np.arange(n)[::-1]
            rows = [_recovery_row(ax, y, got[s][v], colors[v])
                    for y, v in zip(ys, cfg.variants)]
            ax.set_xlim(0, max(1.0, *(top for top, _ in rows)) * 1.05)
            ax.set_yticks(ys, [f"{short_name(v, cfg.store)} ({words})"
                               for v, (_, words) in zip(cfg.variants, rows)], fontsize=7)
            for tick, v in zip(ax.get_yticklabels(), cfg.variants):
                tick.set_color(colors[v] if colors[v] != "#000000" else "k")
            ax.set_xlabel("episodes from the drift to recovery", fontsize=8)
            ax.set_title(s, fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(axis="x", alpha=0.3)
        fig.suptitle(heading, fontsize=8)
        return save(fig, folder / "recovery")


#: Words for a sweep's knob on the crossover map's x axis (the env field it sets).
KNOB_WORDS = {
    "false_success_rate": "false success rate (probability)",
    "drift_kind": "what the drift changes",
    "shared_trigger_fraction": "shared trigger words (fraction)",
    "planted_follow_rate": "planted-instruction follow rate (probability)",
    "step_slack": "step slack (tool calls beyond the procedure)",
    "n_paraphrases": "wordings per task family",
}


def metric_words(metric: str, cfg) -> str:
    """A per-run metric (a ``runs`` column) in words with its unit and its window in
    episodes, read from ``cfg.analysis`` and ``cfg.episodes``: ``late_success`` reads
    "success rate, episodes 501-1,000"; a metric not listed here, its name with spaces."""
    a, end = cfg.analysis, int(cfg.episodes)
    late = min(max(int(a.get("late_from", 501)), 1), end)
    tw = min(int(a.get("tokens_window", 200)), end)
    fw = min(int(a.get("final_window", 100)), end)
    words = {
        "late_success": f"success rate, episodes {late:,}-{end:,}",
        "final_success": f"success rate, last {fw:,} episodes",
        "success_rate": "success rate, all episodes",
        "late_tokens_per_success": f"tokens per success, last {tw:,} episodes",
        "tokens_per_success": "tokens per success, all episodes",
        "final_tokens_per_run": f"tokens per episode, last {fw:,} episodes",
        "incidents": "incidents per run",
        "incidents_per_1000": "incidents per 1,000 episodes",
        "lesson_incidents_per_1000": "lesson-mediated incidents per 1,000 episodes",
        "poisoned_follows_per_1000": "poisoned-entry follows per 1,000 episodes",
        "drift_calls_per_success": "tool calls per success, drifted family, "
                                   f"{int(a.get('drift_episodes', 50)):,} episodes from the "
                                   "drift",
        "drift_success_next100": "drifted family's success rate, next "
                                 f"{DRIFT_ARRIVALS} arrivals",
        "recovery": "episodes to recover after a drift",
    }
    return words.get(metric, metric.replace("_", " "))


def thousands(x: float, _pos=None) -> str:
    """A tick label in plain digits with thousands separators ("800,000", not "8e5" with
    an offset), and small numbers as they are ("0.25")."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:g}"


def _sweep_curve(runs: pl.DataFrame, pts, variant: str, metric: str, seed: int):
    """Mean and 95% bootstrap CI across runs of ``metric`` at each sweep point (NaN
    where no run has a value): three lists."""
    est, lo, hi = [], [], []
    for sc, _ in pts:
        vals = runs.filter((pl.col("scenario") == sc) & (pl.col("variant") == variant)
                           )[metric].cast(pl.Float64).to_numpy()
        vals = vals[np.isfinite(vals)]
        if vals.size == 0:
            est.append(np.nan), lo.append(np.nan), hi.append(np.nan)
            continue
        iv = per_run_ci(vals, seed=seed, n_resamples=PLOT_RESAMPLES)
        est.append(float(iv.estimate)), lo.append(float(iv.low)), hi.append(float(iv.high))
    return est, lo, hi


#: A crossover panel whose curves' largest mean is at least this many times their
#: smallest (all above 0) is drawn on a log y axis (:func:`_log_worthy`).
LOG_SPAN = 10.0


def _log_worthy(curves) -> bool:
    """Whether a crossover panel's mean ``curves`` span :data:`LOG_SPAN` or more, all of
    their values above 0 and some above 1 (a rate in [0, 1] stays linear): on a linear
    axis the small ones would lie on the floor."""
    v = np.concatenate([np.asarray(c, float) for c in curves]) if curves else np.zeros(0)
    v = v[np.isfinite(v)]
    return v.size > 0 and bool(np.all(v > 0)) and v.max() > 1 and v.max() >= LOG_SPAN * v.min()


def _same_at_every_point(runs: pl.DataFrame, pts, shown, metric: str) -> bool:
    """Whether each variant of ``shown`` has the same ``metric`` in every run at every
    sweep point (``pts``): the knob changed nothing, the lines are flat."""
    for v in shown:
        got = [runs.filter((pl.col("scenario") == sc) & (pl.col("variant") == v))
               .sort("run")[metric].to_list() for sc, _ in pts]
        if any(g != got[0] for g in got[1:]):
            return False
    return bool(pts) and bool(shown)


def crossover_figure(out, folder: Path) -> list[Path]:
    """``folder/crossover.png|.svg``: per sweep, its metric (in words,
    :func:`metric_words`) against severity for no learning, the naive loop, the full loop,
    each naive loop + one safeguard and each literature baseline run
    (:data:`dyna.agents.baselines.BASELINES`), mean over runs with its 95% CI; a curve
    lying on another at every setting drawn dashed on top of it and named under its panel
    (:func:`mark_coinciding`). No figure without a sweep."""
    cfg = out.config
    sweeps = getattr(cfg, "sweeps", ())
    if not sweeps:
        return []
    runs = out.tables["runs"]
    loop = f"{cfg.store}_loop"
    from dyna.agents.baselines import BASELINES

    shown = [v for v in ("no_learning", "naive_loop", loop) if v in cfg.variants] + \
        [v for v in cfg.variants if v.startswith("naive_loop+") or v in BASELINES]
    colors = variant_colors(cfg.variants, cfg.store)
    rows = -(-len(shown) // 4)
    width = max(6.0, 3.6 * len(sweeps))
    with figure(figsize=(width, 4.0 + 0.16 * rows)) as fig:
        axes = fig.subplots(1, len(sweeps), squeeze=False)[0]
        drawn = []
        for ax, sw in zip(axes, sweeps):
            pts = sw.points()
            xs = np.arange(len(pts))
            tops, lines = [], {}
            for v in shown:
                est, lo, hi = _sweep_curve(runs, pts, v, sw.metric, cfg.seed)
                style = "--" if v == "no_learning" else "-"
                (lines[v],) = ax.plot(xs, est, style, marker="o", ms=3, lw=1.2,
                                      color=colors[v], label=v)
                ax.fill_between(xs, lo, hi, color=colors[v], alpha=0.12, lw=0)
                tops.append(est)
            drawn.append((ax, lines))
            log = _log_worthy(tops)
            if log:
                ax.set_yscale("log")
            title = sw.name.replace("_", " ")
            if _same_at_every_point(runs, pts, shown, sw.metric):
                every = "both" if len(pts) == 2 else f"all {len(pts)}"
                title += f"\nflat: at {every} settings, each variant's runs identical"
            ax.set_xticks(xs, [str(v) for _, v in pts], fontsize=7)
            knob = KNOB_WORDS.get(sw.knob, sw.knob.replace("_", " "))
            ax.set_xlabel(f"{knob},\nleast to most severe", fontsize=8)
            ax.set_ylabel(textwrap.fill(metric_words(sw.metric, cfg) + (" (log)" if log else ""),
                                        34), fontsize=8)
            ax.yaxis.set_major_formatter(FuncFormatter(thousands))
            ax.set_title(phrase_lines(title, int(13 * width / len(sweeps))), fontsize=9)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
        # every panel draws the same variants: one legend, under the panels
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", fontsize=7, frameon=False,
                   ncol=min(len(labels), 4))
        fig.suptitle(f"{cfg.name}: crossover map\n({over_runs('mean', cfg.runs)})",
                     fontsize=9)
        fig.draw_without_rendering()        # the layout whose pixels coinciding() measures
        notes = [mark_coinciding(ax, lines, int(15 * width / len(sweeps)))
                 for ax, lines in drawn]
        # room for the notes under the panels
        fig.set_size_inches(width, fig.get_figheight() + 0.13 * max(notes))
        return save(fig, folder / "crossover")


def mark_coinciding(ax, lines: dict, width: int) -> int:
    """Draw each curve of ``lines`` (variant -> line on ``ax``, in drawing order) that lies
    within a line width of an earlier one at every point dashed on top of it
    (:func:`dyna.experiment.plotting.dash_coinciding`; lay the figure out first), and name
    it in a note under the panel, in lines of at most ``width`` characters: "dashed, on
    the curve under it:", then "naive_loop+cap_eviction, identical to naive_loop here" a
    curve. The figure's legend keeps the solid style: a curve is dashed only in the panels
    where it lies on another. Returns the lines of the note (0: none)."""
    hidden = dash_coinciding(ax, lines, share=1.0)
    if not hidden:
        return 0
    text = "\n".join(["dashed, on the curve under it:"] + [
        phrase_lines(f"{name}, {coinciding_words(*how)}", width)
        for name, how in hidden.items()])
    # 48 points down: under the tick labels and the two lines of the x label
    ax.annotate(text, xy=(0.0, 0.0), xycoords="axes fraction", xytext=(0, -48),
                textcoords="offset points", va="top", ha="left", fontsize=7, color="0.2")
    return text.count("\n") + 1
