"""Kind ``trajectories``: plots (entries and lessons from failed runs over the replay,
personal data reaching the reviewer and the stores, workflow-induction scores).

Each variant has one colour in every panel and figure (:func:`variant_colors`); legends
sit under their panels, outside the data; the start of each trial is a grey vertical
line. With more than one run (reviewer seeds) a curve is the mean over runs and its band,
like a bar's whisker, spans the runs' minimum to maximum; a whisker too short to see is
printed as its range ("105-106"). A store-size curve that lies on an earlier one (within a
line width at half of its points or more) is drawn dashed on top of it, its legend label
saying so (:func:`dyna.experiment.plotting.label_coinciding`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib
import numpy as np
import polars as pl

from dyna.experiment.plotting import (HIDDEN_SHARE, coinciding, figure, hidden_label,
                                      label_coinciding, legend_below, save)

__all__ = ["HIDDEN_SHARE", "PREDICTOR_LABELS", "RANGE_NOTE", "VARIANT_COLORS",
           "WHISKER_MIN_POINTS", "coinciding", "draw_plots", "focus_variants",
           "hidden_label", "predictor_label", "spread_caption", "variant_colors"]

_LOOPS = ("naive_loop", "skill_loop", "skill_loop-no_outcome_gate", "skill_loop-no_redaction",
          "memory_loop", "memory_loop-no_outcome_gate", "memory_loop-no_redaction")

#: The colour of each variant the figures show (the loops of :data:`_LOOPS` and the
#: literature baselines of :data:`dyna.agents.baselines.BASELINES`), no two alike: the
#: loops' and the baselines' panels sit side by side in one figure.
VARIANT_COLORS = {
    "naive_loop": "#d62728", "skill_loop": "#000000",
    "skill_loop-no_outcome_gate": "#2ca02c", "skill_loop-no_redaction": "#e6ab02",
    "memory_loop": "#1f77b4", "memory_loop-no_outcome_gate": "#17becf",
    "memory_loop-no_redaction": "#e7298a",
    "reflexion": "#393b79", "voyager": "#d95f02", "expel": "#8c564b", "awm": "#637939",
    "mem0_v2": "#9467bd", "mem0_v3": "#7f7f7f", "naive_growth": "#bcbd22",
    "selective_add_delete": "#ff9896",
}

#: Legend words of the workflow predictors (:data:`dyna.loops.trajectories.PREDICTORS`),
#: the report's description with its table's name in parentheses.
PREDICTOR_LABELS = {
    "induced": "induced workflow: consensus of the type's other successful runs (induced)",
    "mode_ground_truth": "the type's most frequent ground-truth sequence "
                         "(mode_ground_truth)",
    "mode_success": "the type's most frequent successful-run sequence (mode_success)",
}

#: The colours of the bars of :func:`_personal_data_figure`: (column, legend words, colour).
_PD_MEASURES = (("pd_reviewer", "reached the reviewer", "#4c72b0"),
                ("pd_store", "reached the store files", "#dd8452"),
                ("safety_net_catches", "safety-net catches (store writes redacted)",
                 "#55a868"))


def focus_variants(names) -> list[str]:
    """The loop variants the figures show (those of :data:`_LOOPS` that ran)."""
    return [v for v in _LOOPS if v in set(names)]


def variant_colors(names) -> dict:
    """Variant name -> matplotlib colour, the same in every panel and figure of a run:
    :data:`VARIANT_COLORS`, and for a name it lacks the first tab20 colour no other
    variant of ``names`` holds (in the order of ``names``)."""
    names = list(dict.fromkeys(names))
    taken = {VARIANT_COLORS[v] for v in names if v in VARIANT_COLORS}
    spares = [c for c in matplotlib.colormaps["tab20"].colors if c not in taken]
    colors = {}
    for v in names:
        colors[v] = VARIANT_COLORS.get(v) or (spares.pop(0) if spares else "0.5")
    return colors


def predictor_label(predictor: str) -> str:
    """The legend words of a workflow predictor (:data:`PREDICTOR_LABELS`; its name for
    one the table lacks)."""
    return PREDICTOR_LABELS.get(predictor, predictor)


def spread_caption(runs: int, spread: str = "band", agree: bool = False) -> str:
    """What a curve or bar of ``runs`` runs shows: ``"mean of 3 runs, band: min to max
    over runs"`` (``spread``: ``"band"`` for curves, ``"whiskers"`` for bars); with
    ``agree`` (every value the same in all runs) ``"3 runs, all alike"``; one run
    ``"1 run (no spread)"``."""
    if runs == 1:
        return "1 run (no spread)"
    if agree:
        return f"{runs} runs, all alike"
    return f"mean of {runs} runs, {spread}: min to max over runs"


def _count(v: float) -> str:
    """A mean count as a bar's label: ``692``, ``105.5``."""
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def _trial_lines(ax, episodes: pl.DataFrame) -> None:
    firsts = (episodes.group_by("trial").agg(pl.col("episode").min()).sort("trial")
              .get_column("episode").to_list())
    for e in firsts[1:]:
        ax.axvline(e - 0.5, color="0.8", lw=0.8, zorder=0)


def _curves(ax, episodes: pl.DataFrame, names, column: str, cumulative: bool,
            colors: dict) -> dict:
    """Draw each variant's mean curve (and min-max band) on ``ax``; returns name ->
    its mean :class:`~matplotlib.lines.Line2D`."""
    lines = {}
    for name in names:
        sub = episodes.filter(pl.col("variant") == name).sort("run", "episode")
        R = sub.get_column("run").n_unique()
        y = sub.get_column(column).to_numpy().reshape(R, -1).astype(float)
        if cumulative:
            y = np.cumsum(y, axis=1)
        x = np.arange(1, y.shape[1] + 1)
        mean = y.mean(axis=0)
        (lines[name],) = ax.plot(x, mean, lw=1.4, label=name, color=colors[name])
        if R > 1:
            ax.fill_between(x, y.min(axis=0), y.max(axis=0), alpha=0.15, lw=0,
                            color=colors[name])
    _trial_lines(ax, episodes)
    ax.set_xlabel("recorded run, in replay order (trial by trial; grey lines: next trial)")
    return lines


def draw_plots(out, folder: Path) -> list[Path]:
    """Write ``plots/entries``, ``plots/lessons_from_failed``, ``plots/personal_data`` and
    ``plots/induction`` (PNG and SVG); returns the files."""
    folder = Path(folder)
    eps, runs = out.tables["episodes"], out.tables["runs"]
    summary = out.tables["induction_summary"]
    R = runs.get_column("run").n_unique()
    names = list(dict.fromkeys(runs.get_column("variant").to_list()))
    loops = focus_variants(names)
    baselines = [v for v in names
                 if runs.filter(pl.col("variant") == v).get_column("learner")[0] == "baseline"]
    colors = variant_colors(loops + baselines)
    caption = spread_caption(R)
    paths: list[Path] = []

    with figure((11.0, 4.5)) as fig:
        axes = fig.subplots(1, 2, sharex=True)
        drawn = []
        for ax, group, title in ((axes[0], loops, "loops"), (axes[1], baselines,
                                                            "literature baselines")):
            drawn.append((ax, _curves(ax, eps, group, "entries", cumulative=False,
                                      colors=colors)))
            ax.set_title(f"{title}: entries in the store\n({caption})", fontsize=10)
            ax.set_ylabel("active skills + facts (count)" if title == "loops" else
                          "entries kept (count, symmetric log)")
            if group:
                legend_below(ax, len(group))
        if baselines:
            axes[1].set_yscale("symlog", linthresh=10)
            axes[1].set_ylim(bottom=0)
        fig.draw_without_rendering()        # the layout whose pixels coinciding() measures
        for ax, lines in drawn:
            # a curve on an earlier one: dashed on top of it, named in the legend
            if label_coinciding(ax, lines):
                legend_below(ax, len(lines))
        paths += save(fig, folder / "plots" / "entries")

    with figure((11.0, 4.5)) as fig:
        axes = fig.subplots(1, 2, sharex=True, sharey=True)
        for ax, group, title in ((axes[0], loops, "loops"), (axes[1], baselines,
                                                            "literature baselines")):
            _curves(ax, eps, group, "from_failed", cumulative=True, colors=colors)
            ax.set_title(title, fontsize=10)
            ax.set_ylabel("lessons from failed runs (count)")
            if group:
                legend_below(ax, len(group))
        fig.suptitle(f"Lessons written from failed runs, cumulative ({caption})\n"
                     + _none_written(eps, loops + baselines), fontsize=10)
        paths += save(fig, folder / "plots" / "lessons_from_failed")

    paths += _personal_data_figure(runs, loops + baselines, folder)
    paths += _induction_figure(summary, out.config.analysis["confidence"], folder)
    return paths


def _none_written(episodes: pl.DataFrame, names: list) -> str:
    """The line naming the variants of ``names`` that write no lesson from a failed run
    in any run (their curves lie on 0, under one another), wrapped at 150 characters."""
    total = (episodes.filter(pl.col("variant").is_in(names)).group_by("variant")
             .agg(pl.col("from_failed").sum()))
    none = set(total.filter(pl.col("from_failed") == 0).get_column("variant").to_list())
    if not none:
        return "every variant writes some"
    return textwrap.fill("on 0 (none written): " + ", ".join(v for v in names if v in none),
                         150)


#: A whisker shorter than this (points) cannot be seen: its range is printed instead.
WHISKER_MIN_POINTS = 4.0

#: The title line of a personal-data figure some of whose whiskers are printed as text.
RANGE_NOTE = "whiskers too short to see: the range printed above the bar (min-max)"


def _personal_data_figure(runs: pl.DataFrame, shown: list, folder: Path) -> list[Path]:
    """``plots/personal_data``: per variant shown, the mean over runs of the harvested
    values that reached the reviewer and the store files and of the safety net's catches,
    with whiskers from the runs' minimum to maximum (none when no variant). Each bar is
    labelled with its mean, or with its range ("105-106") when its whisker is shorter
    than :data:`WHISKER_MIN_POINTS`."""
    if not shown:
        return []
    cols = [c for c, _, _ in _PD_MEASURES]
    stats = (runs.group_by("variant", maintain_order=True)
             .agg([pl.col(c).cast(pl.Float64).mean().alias(c) for c in cols]
                  + [pl.col(c).cast(pl.Float64).min().alias(f"{c}_min") for c in cols]
                  + [pl.col(c).cast(pl.Float64).max().alias(f"{c}_max") for c in cols]))
    stats = {r["variant"]: r for r in stats.iter_rows(named=True)}
    R = runs.get_column("run").n_unique()
    agree = all(stats[v][f"{c}_min"] == stats[v][f"{c}_max"] for v in shown for c in cols)
    with figure((11.0, 5.2)) as fig:
        ax = fig.subplots()
        x = np.arange(len(shown))
        w = 0.27
        series = []
        for k, (col, lab, color) in enumerate(_PD_MEASURES):
            vals = np.array([stats[v][col] for v in shown])
            lo = np.array([stats[v][f"{col}_min"] for v in shown])
            hi = np.array([stats[v][f"{col}_max"] for v in shown])
            err = None if R == 1 or agree else np.vstack([vals - lo, hi - vals])
            bars = ax.bar(x + (k - 1) * w, vals, w, yerr=err, capsize=2, color=color,
                          error_kw={"elinewidth": 0.8, "ecolor": "0.2"}, label=lab)
            series.append((bars, vals, lo, hi))
        ax.set_xticks(x, shown, rotation=35, ha="right", fontsize=7)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylabel("harvested values per run (count; catches: redacted writes),\n"
                      "symmetric log", fontsize=9)
        title = ("Personal values harvested by field from the tool outputs: where "
                 f"they went ({spread_caption(R, 'whiskers', agree)})\n"
                 "a baseline keeps runs as made: no reviewer, no redaction, no safety net")
        ranged = R > 1 and not agree
        ax.set_title(title + ("\n" + RANGE_NOTE if ranged else ""), fontsize=10)
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  fontsize=8, frameon=False)
        fig.draw_without_rendering()        # the layout whose points the whiskers measure
        if not _label_bars(ax, series) and ranged:
            ax.set_title(title, fontsize=10)
        paths = save(fig, folder / "plots" / "personal_data")
    return paths


def _label_bars(ax, series) -> int:
    """Label each bar of ``series`` (per measure: bars, means, run minima, run maxima)
    above its whisker: its mean, or ``"min-max"`` when its runs differ and its whisker is
    shorter than :data:`WHISKER_MIN_POINTS` in the current layout. Returns how many
    ranges were printed."""
    printed = 0
    for bars, vals, lo, hi in series:
        for b, v, a, z in zip(bars, vals, lo, hi):
            cx = b.get_x() + b.get_width() / 2
            ends = ax.transData.transform([(cx, a), (cx, z)])[:, 1]
            points = (ends[1] - ends[0]) * 72.0 / ax.figure.dpi
            short = a != z and points < WHISKER_MIN_POINTS
            printed += short
            ax.annotate(f"{_count(a)}-{_count(z)}" if short else _count(v),
                        (cx, max(z, 0)), ha="center", va="bottom", fontsize=6)
    return printed


def _induction_figure(summary: pl.DataFrame, conf: float, folder: Path) -> list[Path]:
    """``plots/induction``: each predictor's precision, recall and exact-sequence rate
    with its bootstrap interval (confidence ``conf``)."""
    with figure((8.0, 5.0)) as fig:
        ax = fig.subplots()
        preds = [p for p in summary.get_column("predictor").unique(maintain_order=True)
                 if " - " not in p]
        metrics = ["precision", "recall", "exact"]
        w = 0.8 / max(len(preds), 1)
        n = int(summary.get_column("n_tasks")[0]) if summary.height else 0
        palette = matplotlib.colormaps["tab10"].colors
        for k, p in enumerate(preds):
            sub = {r["metric"]: r for r in summary.filter(pl.col("predictor") == p)
                   .iter_rows(named=True)}
            m = np.array([sub[t]["mean"] for t in metrics])
            lo = np.array([sub[t]["low"] for t in metrics])
            hi = np.array([sub[t]["high"] for t in metrics])
            err = np.vstack([np.nan_to_num(m - lo), np.nan_to_num(hi - m)])
            ax.bar(np.arange(3) + (k - (len(preds) - 1) / 2) * w, m, w, yerr=err,
                   capsize=3, color=palette[k % len(palette)], label=predictor_label(p))
        ax.set_xticks(np.arange(3), ["precision of calls", "recall of calls",
                                     "exact sequence"])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"mean over {n} held-out tasks (fraction)")
        ax.set_title("Workflow induction, leave one task out within each type "
                     f"({conf:.0%} bootstrap CI over tasks)", fontsize=9)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), fontsize=8,
                  frameon=False)
        return save(fig, folder / "plots" / "induction")
