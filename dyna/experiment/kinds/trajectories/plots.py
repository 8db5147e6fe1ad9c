"""Kind ``trajectories``: plots (entries and lessons from failed runs over the replay,
personal data reaching the reviewer and the stores, workflow-induction scores)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from dyna.experiment.plotting import figure, legend_below, save

__all__ = ["draw_plots", "focus_variants"]

_LOOPS = ("naive_loop", "skill_loop", "skill_loop-no_outcome_gate", "skill_loop-no_redaction",
          "memory_loop", "memory_loop-no_outcome_gate", "memory_loop-no_redaction")


def focus_variants(names) -> list[str]:
    """The loop variants the figures show (those of :data:`_LOOPS` that ran)."""
    return [v for v in _LOOPS if v in set(names)]


def _trial_lines(ax, episodes: pl.DataFrame) -> None:
    firsts = (episodes.group_by("trial").agg(pl.col("episode").min()).sort("trial")
              .get_column("episode").to_list())
    for e in firsts[1:]:
        ax.axvline(e - 0.5, color="0.8", lw=0.8, zorder=0)


def _curves(ax, episodes: pl.DataFrame, names, column: str, cumulative: bool) -> None:
    for name in names:
        sub = episodes.filter(pl.col("variant") == name).sort("run", "episode")
        R = sub.get_column("run").n_unique()
        y = sub.get_column(column).to_numpy().reshape(R, -1).astype(float)
        if cumulative:
            y = np.cumsum(y, axis=1)
        x = np.arange(1, y.shape[1] + 1)
        mean = y.mean(axis=0)
        ax.plot(x, mean, lw=1.4, label=name)
        if R > 1:
            ax.fill_between(x, y.min(axis=0), y.max(axis=0), alpha=0.15, lw=0)
    _trial_lines(ax, episodes)
    ax.set_xlabel("recorded run, in replay order (trial by trial; grey lines: next trial)")


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
    caption = f"mean of {R} runs, band min to max" if R > 1 else "1 run"
    paths: list[Path] = []

    with figure((11.0, 4.5)) as fig:
        axes = fig.subplots(1, 2, sharex=True)
        for ax, group, title in ((axes[0], loops, "loops"), (axes[1], baselines,
                                                            "literature baselines")):
            _curves(ax, eps, group, "entries", cumulative=False)
            ax.set_title(f"{title}: entries in the store\n({caption})", fontsize=10)
            ax.set_ylabel("active skills + facts" if title == "loops" else "entries kept")
            if group:
                legend_below(ax, len(group))
        if baselines:
            axes[1].set_yscale("symlog", linthresh=10)
            axes[1].set_ylim(bottom=0)
        paths += save(fig, folder / "plots" / "entries")

    with figure((11.0, 4.5)) as fig:
        axes = fig.subplots(1, 2, sharex=True, sharey=True)
        for ax, group, title in ((axes[0], loops, "loops"), (axes[1], baselines,
                                                            "literature baselines")):
            _curves(ax, eps, group, "from_failed", cumulative=True)
            ax.set_title(f"{title}: lessons written from failed runs, cumulative\n"
                         "(a variant that writes none lies on 0)", fontsize=10)
            ax.set_ylabel(f"lessons from failed runs ({caption})")
            if group:
                legend_below(ax, len(group))
        paths += save(fig, folder / "plots" / "lessons_from_failed")

    paths += _personal_data_figure(runs, loops + baselines, caption, folder)
    paths += _induction_figure(summary, out.config.analysis["confidence"], folder)
    return paths


def _personal_data_figure(runs: pl.DataFrame, shown: list, caption: str,
                          folder: Path) -> list[Path]:
    """``plots/personal_data``: per variant shown, the harvested values that reached the
    reviewer and the store files, and the safety net's catches (none when no variant)."""
    if not shown:
        return []
    paths: list[Path] = []
    means = (runs.group_by("variant", maintain_order=True)
             .agg([pl.col(c).mean() for c in ("pd_reviewer", "pd_store",
                                               "safety_net_catches")]))
    means = {r["variant"]: r for r in means.iter_rows(named=True)}
    with figure((11.0, 4.8)) as fig:
        ax = fig.subplots()
        x = np.arange(len(shown))
        w = 0.27
        for k, (col, lab) in enumerate((("pd_reviewer", "reached the reviewer"),
                                        ("pd_store", "reached the store files"),
                                        ("safety_net_catches", "safety-net catches"))):
            vals = [means[v][col] for v in shown]
            bars = ax.bar(x + (k - 1) * w, vals, w, label=lab)
            for b, v in zip(bars, vals):
                ax.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, max(v, 0)),
                            ha="center", va="bottom", fontsize=6)
        ax.set_xticks(x, shown, rotation=35, ha="right", fontsize=7)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylabel("harvested values (catches for the safety net), symlog")
        ax.set_title("Personal values harvested by field from the tool outputs: where "
                     f"they went ({caption})\na baseline keeps runs as made: no reviewer,"
                     " no redaction, no safety net", fontsize=10)
        ax.legend(fontsize=8)
        paths += save(fig, folder / "plots" / "personal_data")
    return paths


def _induction_figure(summary: pl.DataFrame, conf: float, folder: Path) -> list[Path]:
    """``plots/induction``: each predictor's precision, recall and exact-sequence rate
    with its bootstrap interval (confidence ``conf``)."""
    with figure((8.0, 4.5)) as fig:
        ax = fig.subplots()
        preds = [p for p in summary.get_column("predictor").unique(maintain_order=True)
                 if " - " not in p]
        metrics = ["precision", "recall", "exact"]
        w = 0.8 / max(len(preds), 1)
        n = int(summary.get_column("n_tasks")[0]) if summary.height else 0
        for k, p in enumerate(preds):
            sub = {r["metric"]: r for r in summary.filter(pl.col("predictor") == p)
                   .iter_rows(named=True)}
            m = np.array([sub[t]["mean"] for t in metrics])
            lo = np.array([sub[t]["low"] for t in metrics])
            hi = np.array([sub[t]["high"] for t in metrics])
            err = np.vstack([np.nan_to_num(m - lo), np.nan_to_num(hi - m)])
            ax.bar(np.arange(3) + (k - (len(preds) - 1) / 2) * w, m, w, yerr=err,
                   capsize=3, label=p)
        ax.set_xticks(np.arange(3), ["precision of calls", "recall of calls",
                                     "exact sequence"])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"mean over {n} held-out tasks")
        ax.set_title("Workflow induction, leave one task out within each type "
                     f"({conf:.0%} bootstrap CI over tasks)", fontsize=9)
        ax.legend(fontsize=8)
        return save(fig, folder / "plots" / "induction")
