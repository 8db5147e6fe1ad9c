"""Kind ``tabular``: its standard plots (PNG and SVG), drawn headless.

Figures come from :func:`dyna.experiment.plotting.figure` (no pyplot, released at once).

Plots (each a function of an :class:`dyna.experiment.protocol.ExperimentOutput`):

* ``steps_per_episode`` -- Sutton & Barto Figure 8.2: mean steps per episode from
  ``analysis.first_episode`` on, with a bootstrap confidence band, one line per variant.
* ``cumulative_reward`` -- Figures 8.4 / 8.5: cumulative reward against time steps.
* ``eval_score`` -- greedy-policy evaluation score against training episodes.
* ``updates_to_optimal`` -- Example 8.4: updates until an optimal path is found against maze
  size (free states of a maze, else the table's states), log-log.
* ``sensitivity_<key>`` -- with a sweep (not with ``stop_at_optimal``, whose runs stop
  early): final performance against each swept value (a
  parameter study, as Sutton & Barto's Figures 8.2-8.4 discussions vary n and alpha), one
  line per variant (and per combination of the other swept values), with bootstrap
  intervals.
* per-run plots (``analysis.per_run_plots``): one PNG per run of the first curve metric.

Each variant has one colour in every plot (:func:`variant_colors`). With a sweep, a curve
plot has a panel per variant and a line style per sweep point, the same in every panel,
and the sensitivity plots a line style per combination of the other swept values; one
legend says both channels ("colour = planning steps (n)", "line style = alpha").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.ticker
import numpy as np
import polars as pl
from matplotlib.lines import Line2D

from dyna.experiment.plotting import figure, over_runs, save
from dyna.experiment.stats import curve_ci, per_run_ci

if TYPE_CHECKING:  # pragma: no cover
    from dyna.experiment.protocol import ExperimentOutput

__all__ = ["LINE_STYLES", "LOG_SPAN", "PLOTS", "book_label", "channel_legend",
           "closeness", "colour_title", "draw_plots", "hidden_whiskers", "legend_outside",
           "optimal_rule", "plot_cumulative_reward",
           "plot_eval_score", "plot_per_run", "plot_steps_per_episode",
           "plot_updates_to_optimal", "sweep_combos", "sweep_styles", "variant_colors"]

#: A steps-per-episode plot gets a log y-axis when its curves span more than this factor
#: (Figure 8.2: ~500 steps in episode 2 against a plateau of ~15, where a linear axis
#: squeezes every planning agent into its bottom 5%).
LOG_SPAN = 10.0


#: The line styles of a figure's sweep points, in the grid's order (the first solid): one
#: per point, the same in every panel; past these they repeat with markers
#: (:func:`sweep_styles`).
LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 3)), (0, (1, 4)),
               (0, (3, 1, 1, 1, 1, 1, 1, 1)))
_MARKERS = (None, "o", "s", "^", "v", "D")


#: At most this many x positions per curve get a bootstrap interval (long step curves are
#: thinned evenly, the last step always kept).
MAX_CURVE_POINTS = 300


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(text)).strip("_") or "x"


def _stat_opts(out: "ExperimentOutput") -> dict:
    a = out.config.analysis
    return dict(statistic=a.statistic, confidence=a.confidence, n_resamples=a.n_resamples,
                seed=out.config.seed)


def _stat_label(out: "ExperimentOutput") -> str:
    a = out.config.analysis
    name = "IQM" if a.statistic == "iqm" else "mean"
    return over_runs(name, out.config.runs, a.confidence)


def book_label(variant) -> str:
    """The legend words of a variant: Sutton & Barto's Figure 8.2 words ("0 planning steps
    (direct RL only)", "5 planning steps", ...) for a Dyna-Q variant whose name only states
    its ``n_planning`` (``n=5``), else its name."""
    n = variant.hparams.get("n_planning")
    if variant.agent != "dyna_q" or n is None:
        return variant.name
    if "".join(variant.name.split()) != f"n={int(n)}":
        return variant.name
    return ("0 planning steps (direct RL only)" if int(n) == 0 else
            f"{int(n)} planning step{'' if int(n) == 1 else 's'}")


def optimal_rule(schedule) -> str:
    """When a ``stop_at_optimal`` run counts its greedy path as optimal, in words
    (``schedule.optimal_tolerance`` and ``schedule.optimal_protocol``), e.g.
    ``"5 greedy rollouts within 1.2 x the shortest path"``."""
    tol = f"{schedule.optimal_tolerance:g}"
    if schedule.optimal_protocol == "reference":
        return f"1 greedy rollout within {tol} x k x the unrefined shortest path"
    return f"5 greedy rollouts within {tol} x the shortest path"


def variant_colors(out: "ExperimentOutput") -> dict:
    """The colour of each variant (by name), the same in every plot of ``out``: tab10 in
    the order of ``config.variants``."""
    colors = matplotlib.colormaps["tab10"].colors
    return {v.name: colors[i % len(colors)] for i, v in enumerate(out.config.variants)}


def legend_outside(ax, **kw) -> None:
    """The legend of ``ax`` right of its data area (upper left corner at the axes' upper
    right), so that no entry covers a curve; nothing without labelled artists."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  fontsize=8, **kw)


def sweep_combos(config, keys) -> list[tuple]:
    """The values of ``keys`` at each sweep point of ``config``, as tuples in the grid's
    order (:meth:`~dyna.experiment.kinds.tabular.config.ExperimentConfig.sweep_points`),
    each once; ``[()]`` when ``keys`` is empty."""
    return list(dict.fromkeys(tuple(p[k] for k in keys) for p in config.sweep_points()))


def sweep_styles(n: int) -> list[dict]:
    """Keyword arguments of :class:`matplotlib.lines.Line2D` (``linestyle``, ``marker``)
    for ``n`` sweep points, no two alike: :data:`LINE_STYLES` in order, then again with
    a marker each round."""
    k = len(LINE_STYLES)
    return [{"linestyle": LINE_STYLES[i % k], "marker": _MARKERS[(i // k) % len(_MARKERS)]}
            for i in range(n)]


def colour_title(variants) -> str:
    """The legend's heading for the colours of ``variants`` (config variants):
    ``"colour = planning steps (n)"`` when every variant is a Dyna-Q named by its
    ``n_planning`` (:func:`book_label` gives the book's words), else
    ``"colour = variant"``."""
    if variants and all(book_label(v) != v.name for v in variants):
        return "colour = planning steps (n)"
    return "colour = variant"


def channel_legend(target, colour_head: str, colours: dict, style_head: str = "",
                   styles: dict | None = None, extra=()):
    """One legend that says what each visual channel encodes: the bold heading
    ``colour_head`` (:func:`colour_title`) over a solid line per colour; with ``styles``
    the bold heading ``style_head`` over a grey line per style; then the ``extra``
    artists (a shortest path, events) by their labels. ``target``: a figure (the legend
    right of its panels, outside them) or an axes (right of its data area).

    Parameters
    ----------
    colours : dict
        ``{label: matplotlib colour}``.
    styles : dict, optional
        ``{label: Line2D keyword arguments}`` (:func:`sweep_styles`).

    Returns
    -------
    matplotlib.legend.Legend
    """
    blank = Line2D([], [], linestyle="none")
    handles = [blank] + [Line2D([], [], color=c) for c in colours.values()]
    labels = [colour_head, *colours]
    if styles:
        handles += [blank] + [Line2D([], [], color="0.25", **st) for st in styles.values()]
        labels += [style_head, *styles]
    handles += list(extra)
    labels += [artist.get_label() for artist in extra]
    opts = dict(fontsize=8, handlelength=3.0)
    if hasattr(target, "add_subplot"):
        leg = target.legend(handles, labels, loc="outside right upper", **opts)
    else:
        leg = target.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                            borderaxespad=0.0, **opts)
    for text in leg.get_texts():
        if text.get_text() in (colour_head, style_head):
            text.set_fontweight("bold")
    return leg


def _group_label(row: dict, keys: list[str], names: dict) -> str:
    label = names.get(row["variant"], row["variant"])
    extra = ", ".join(f"{k}={row[k]}" for k in keys)
    return f"{label} ({extra})" if extra else label


def _spans(values: list[np.ndarray]) -> bool:
    """Whether the positive finite values span more than :data:`LOG_SPAN` (and none is
    zero or negative: a log axis could not show them)."""
    v = np.concatenate([np.asarray(x, float) for x in values]) if values else np.zeros(0)
    v = v[np.isfinite(v)]
    return v.size > 0 and v.min() > 0 and v.max() / v.min() > LOG_SPAN


def closeness(curves: list[tuple], xlabel: str, unit: str | None) -> str:
    """A sweep panel's note on how close its curves lie, for its title: "" for one curve;
    ``"(the 5 curves coincide)"`` when they are equal; with a ``unit`` and a shared x,
    the largest gap between them after the first fifth of the x positions, e.g.
    ``"(the 5 curves lie within 6.5 steps / of each other from episode 11)"`` (two
    lines); else "".

    Parameters
    ----------
    curves : list of (ndarray, ndarray)
        Each curve's x positions and drawn estimates (float).
    xlabel : str
        The x axis's name ("episode").
    unit : str or None
        The y values' unit ("steps"); None: no gap is given.
    """
    n = len(curves)
    if n < 2:
        return ""
    if all(np.array_equal(est, curves[0][1]) for _, est in curves):
        return f"\n(the {n} curves coincide)"
    xs = curves[0][0]
    if unit is None or not all(np.array_equal(cx, xs) for cx, _ in curves):
        return ""
    start = len(xs) // 5
    y = np.vstack([est for _, est in curves])[:, start:]
    gap = float(np.nanmax(y.max(axis=0) - y.min(axis=0)))
    return (f"\n(the {n} curves lie within {gap:.2g} {unit}\nof each other from "
            f"{xlabel} {xs[start]:g})")


def _curve_plot(out, frame, *, x, y, xlabel, ylabel, title, stem, folder, logy=False,
                vlines=(), hline=None, unit=None):
    """One curve per variant (and sweep point) with its band, in the variant's colour
    (:func:`variant_colors`); ``vlines``: x positions of events (dotted, one legend
    entry); ``hline``: ``(y, label)``; ``logy``: True, False, or "auto" (log when the
    curves span more than :data:`LOG_SPAN`, said in the y label); ``unit``: the y
    values' unit, for a sweep panel's note on how close its curves lie
    (:func:`closeness`).

    Without a sweep: one panel, the legend right of it. With one: a panel per variant
    (one y axis), a line style per sweep point (:func:`sweep_styles`, the same in every
    panel) and one legend right of the panels that says both channels
    (:func:`channel_legend`)."""
    keys = out.sweep_keys
    summary = curve_ci(frame, by=["variant", *keys], x=x, y=y, **_stat_opts(out))
    colors = variant_colors(out)
    names = {v.name: book_label(v) for v in out.config.variants}
    points = sweep_combos(out.config, keys)
    styles = dict(zip(points, sweep_styles(len(points)))) if keys else \
        {(): {"linestyle": "-", "marker": None}}
    groups = {tuple(k): g for k, g in summary.group_by(["variant", *keys], maintain_order=True)}
    panels = [[v] for v in colors] if keys else [list(colors)]
    size = (2.0 + 3.4 * len(panels), 4.5) if keys else (8.5, 4.5)
    with figure(figsize=size) as fig:
        axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
        drawn, extra = [], []
        for i, (ax, panel) in enumerate(zip(axes, panels)):
            mine = []
            for name in panel:
                for point in points:
                    g = groups.get((name, *point))
                    if g is None:
                        continue
                    row = {"variant": name, **dict(zip(keys, point))}
                    mine.append((g.get_column(x).to_numpy(),
                                 _band_curve(ax, g, x, colors[name], styles[point],
                                             _group_label(row, keys, names))))
            drawn += [est for _, est in mine]
            extra = _events(ax, vlines, hline, labelled=i == 0) or extra
            ax.set_xlabel(xlabel)
            if keys:
                ax.set_title(names[panel[0]] + closeness(mine, xlabel, unit), fontsize=9)
        if logy == "auto":
            logy = _spans(drawn)
            ylabel += " (log scale)" if logy else ""
        for ax in axes:
            _y_axis(ax, logy)
        axes[0].set_ylabel(ylabel)
        head = f"{title}\n({_stat_label(out)})"
        if keys:
            fig.suptitle(head, fontsize=10)
            channel_legend(fig, colour_title(out.config.variants),
                           {names[v]: c for v, c in colors.items()},
                           "line style = " + ", ".join(keys),
                           {", ".join(map(str, p)): st for p, st in styles.items()}, extra)
        else:
            axes[0].set_title(head, fontsize=10)
            legend_outside(axes[0])
        return save(fig, folder / stem)


def _band_curve(ax, g: pl.DataFrame, x: str, color, style: dict, label: str) -> np.ndarray:
    """One summary curve (``estimate``) of ``g`` against column ``x`` with its
    ``low``-``high`` band, in ``color`` and ``style``; returns the estimates drawn."""
    xs, est = g.get_column(x).to_numpy(), g.get_column("estimate").to_numpy()
    ax.plot(xs, est, color=color, label=label, markevery=0.1, **style)
    low, high = g.get_column("low").to_numpy(), g.get_column("high").to_numpy()
    if np.isfinite(low).any():
        ax.fill_between(xs, low, high, color=color, alpha=0.2, linewidth=0)
    return est


def _events(ax, vlines, hline, labelled: bool) -> list:
    """Dotted vertical lines at ``vlines`` (events) and the dashed line ``hline``
    (``(y, label)``); legend labels only when ``labelled``. Returns the labelled ones,
    one per kind."""
    shown = []
    for j, xv in enumerate(vlines):
        line = ax.axvline(xv, color="0.4", linestyle=":", linewidth=1,
                          label="environment changes" if j == 0 and labelled else None)
        shown += [line] if j == 0 else []
    if hline is not None:
        shown.append(ax.axhline(hline[0], color="0.3", linestyle="--", linewidth=0.8,
                                label=hline[1] if labelled else None))
    return shown if labelled else []


def _plain(value: float, _pos=None) -> str:
    """A tick number as people write it: "0.5", "20", "100,000"."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:g}"


def _y_axis(ax, logy: bool) -> None:
    """A log y axis with plain tick numbers at 1, 2, 5 x 10^k when ``logy``; the grid."""
    if logy:
        ax.set_yscale("log")
        # plain numbers at 1, 2, 5 x 10^k: "20" and "50" read faster than "2 x 10^1"
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_plain))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.grid(alpha=0.3, which="both" if logy else "major")


def smoothed(frame: pl.DataFrame, by: list[str], window: int) -> pl.DataFrame:
    """``steps`` replaced by each group's trailing moving average over ``window`` episodes
    (the first ``window - 1`` episodes average what there is), float64, sorted by group
    and episode."""
    return (frame.sort([*by, "episode"])
            .with_columns(pl.col("steps").cast(pl.Float64)
                          .rolling_mean(window_size=window, min_samples=1).over(by)))


def plot_steps_per_episode(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Steps per episode against episode (Sutton & Barto Figure 8.2), a log y-axis when
    ``analysis.log_y`` or the curves span more than :data:`LOG_SPAN`, legend words as the
    book's (:func:`book_label`), the legend right of the axes.

    Parameters
    ----------
    out : ExperimentOutput
        Needs an ``episodes`` schedule (``results`` has ``episode``, ``steps``).
    folder : Path
        Destination; writes ``steps_per_episode.png`` and ``.svg``.

    Returns
    -------
    list of Path
    """
    a = out.config.analysis
    first = a.first_episode
    frame = out.results
    smooth = ""
    if a.smooth > 1:   # each run's trailing moving average, then the statistic over runs
        frame = smoothed(frame, ["variant", *out.sweep_keys, "run"], a.smooth)
        smooth = f", moving average over {a.smooth} episodes"
    frame = frame.filter(pl.col("episode") >= first)
    # One environment with a known shortest path (the mazes): draw it, as the book marks 14.
    lengths = {m.get("optimal_path_length") for m in out.env_metas}
    hline = None
    if len(lengths) == 1 and None not in lengths:
        L = int(lengths.pop())
        hline = (L, f"shortest path ({L} steps)")
    return _curve_plot(out, frame, x="episode", y="steps", xlabel="episode",
                       ylabel="steps per episode" + (" (log scale)" if a.log_y else ""),
                       title=f"{out.config.name}: steps per episode (episodes {first}+"
                             f"{smooth})",
                       stem="steps_per_episode", folder=folder, hline=hline,
                       logy=True if a.log_y else "auto", unit="steps")


def _thin_steps(frame: pl.DataFrame) -> pl.DataFrame:
    steps = np.unique(frame.get_column("step").to_numpy())
    if len(steps) <= MAX_CURVE_POINTS:
        return frame
    keep = steps[np.unique(np.linspace(0, len(steps) - 1, MAX_CURVE_POINTS).round()
                           .astype(np.int64))]
    return frame.filter(pl.col("step").is_in(keep.tolist()))


def plot_cumulative_reward(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Cumulative reward against time steps (Sutton & Barto Figures 8.4 and 8.5).

    Writes ``cumulative_reward.png`` / ``.svg``; vertical dotted lines mark the total time
    steps at which the environment changes (``change_at`` in the env metadata).
    """
    frame = _thin_steps(out.results)
    changes = sorted({int(c) for m in out.env_metas for c in m.get("change_at", [])})
    return _curve_plot(out, frame, x="step", y="cumulative_reward", xlabel="time steps",
                       ylabel="cumulative reward",
                       title=f"{out.config.name}: cumulative reward",
                       stem="cumulative_reward", folder=folder, vlines=changes)


def plot_eval_score(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Greedy-policy evaluation score against training episodes (``eval_score.png``/``.svg``)."""
    if out.evals is None or out.evals.is_empty():
        return []
    k = out.config.schedule.eval_episodes
    return _curve_plot(out, out.evals, x="episode", y="score",
                       xlabel="training episodes",
                       ylabel=f"greedy policy: mean return over {k} episodes",
                       title=f"{out.config.name}: evaluation score",
                       stem="eval_score", folder=folder)


def _size_axis(out: "ExperimentOutput") -> tuple[list, str]:
    metas = out.env_metas
    if metas and all("free_states" in m for m in metas):  # mazes: non-wall cells
        return [int(m["free_states"]) for m in metas], "maze size (free states)"
    if metas and all("n_states" in m for m in metas):
        return [int(m["n_states"]) for m in metas], "maze size (number of states)"
    keys = out.sweep_keys
    points = out.config.sweep_points()
    if len(keys) == 1:
        return [p[keys[0]] for p in points], keys[0]
    return list(range(len(points))), "sweep point"


def plot_updates_to_optimal(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Updates until an optimal path is found, against maze size (Example 8.4), log-log.

    Uses the runs that found an optimal path; markers give the statistic over those runs
    and error bars its bootstrap interval. A note under the axes says how many runs found
    the path at each size and, where a whisker is hidden by its marker, whether the
    interval is zero (:func:`hidden_whiskers`). Writes ``updates_to_optimal.png`` /
    ``.svg``.
    """
    runs = out.runs
    if "updates_to_optimal" not in runs.columns:
        return []
    xs, xlabel = _size_axis(out)
    points = out.config.sweep_points()
    colors = variant_colors(out)
    opts = _stat_opts(out)
    with figure(figsize=(8.5, 5.2)) as fig:
        ax = fig.add_subplot()
        drawn, counts = [], []
        for variant in out.config.variants:
            est, lo, hi, px, found_n = [], [], [], [], []
            for p, point in enumerate(points):
                sel = runs.filter(pl.col("variant") == variant.name)
                for key, value in point.items():
                    sel = sel.filter(pl.col(key) == value)
                found = sel.get_column("updates_to_optimal").drop_nulls().to_numpy()
                found_n.append(f"{found.size}/{sel.height}")
                if found.size == 0:
                    continue
                ci = per_run_ci(found, **opts)
                px.append(xs[p])
                est.append(float(ci.estimate))
                lo.append(float(ci.low) if np.isfinite(ci.low) else float(ci.estimate))
                hi.append(float(ci.high) if np.isfinite(ci.high) else float(ci.estimate))
            counts.append((book_label(variant), found_n))
            if not px:
                continue
            est_a = np.array(est)
            yerr = np.vstack([est_a - np.array(lo), np.array(hi) - est_a])
            ax.errorbar(px, est_a, yerr=yerr, marker="o", capsize=3,
                        color=colors[variant.name], label=book_label(variant))
            drawn.append((book_label(variant), px, est_a, np.array(lo), np.array(hi)))
        ax.set_xscale("log")
        # the sizes measured as plain numbers ("48", "189"), not "6 x 10^1" between them
        sizes = sorted(set(xs))
        ax.set_xticks(sizes, [f"{v:g}" for v in sizes])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        _y_axis(ax, True)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("updates until an optimal path\n(log scale)")
        sc = out.config.schedule
        ax.set_title(f"{out.config.name}: updates until an optimal path is found\n"
                     f"({_stat_label(out)}, over the runs that found it;\noptimal: "
                     f"{optimal_rule(sc)})", fontsize=10)
        legend_outside(ax)
        ax.grid(alpha=0.3, which="both")
        note = ["runs that found an optimal path: " + "; ".join(
            f"{name} {n[0]} at every size" if len(set(n)) == 1 else f"{name} {', '.join(n)}"
            for name, n in counts)]
        fig.canvas.draw()     # the layout sets the axes' size, and so the whiskers' pixels
        note += hidden_whiskers(ax, drawn)
        fig.supxlabel("\n".join(note), x=0.01, ha="left", fontsize=8)
        return save(fig, folder / "updates_to_optimal")


def hidden_whiskers(ax, drawn: list[tuple]) -> list[str]:
    """Notes on the error bars of ``ax`` too short to show beside their marker (6 pt
    across): per series, the sizes where the interval is zero (every run the same) and
    where it is only narrower than the marker.

    Parameters
    ----------
    ax : matplotlib Axes
        Its scales and limits set (the data are projected to display pixels).
    drawn : list of (str, list, ndarray, ndarray, ndarray)
        Per series: its label, x positions, estimates, lower and upper bounds.

    Returns
    -------
    list of str
        One line per kind of hidden whisker, e.g. ``"no whisker: the interval is
        narrower than the marker (not zero) for prioritized sweeping at 47, 188"``.
    """
    ax.autoscale_view()
    radius = 3 * ax.figure.dpi / 72
    zero, narrow = [], []
    for label, px, est, lo, hi in drawn:
        pixels = [ax.transData.transform(np.column_stack([px, v]))[:, 1] for v in (lo, est, hi)]
        short = np.maximum(pixels[1] - pixels[0], pixels[2] - pixels[1]) < radius
        flat = hi - lo == 0
        for where, mask in ((zero, short & flat), (narrow, short & ~flat)):
            if mask.any():
                where.append(f"{label} at " + ", ".join(f"{x:g}" for x in np.array(px)[mask]))
    lines = []
    if zero:
        lines.append("no whisker: the interval is zero (every run the same) for "
                     + "; ".join(zero))
    if narrow:
        lines.append("no whisker: the interval is narrower than the marker (not zero) for "
                     + "; ".join(narrow))
    return lines


_PER_RUN = {  # metric -> (table attribute, x, y, x label, y label)
    "steps_per_episode": ("results", "episode", "steps", "episode", "steps per episode"),
    "cumulative_reward": ("results", "step", "cumulative_reward", "time steps",
                          "cumulative reward"),
    "eval_score": ("evals", "episode", "score", "training episodes", "evaluation score"),
}


def plot_per_run(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """One PNG per run (variant x sweep point x run) of the first curve metric.

    Files go to ``runs/<variant>[-<key>=<value>...]-run<r>.png`` under ``folder``.
    """
    metric = next((m for m in out.config.analysis.metrics if m in _PER_RUN), None)
    if metric is None:
        return []
    attr, x, y, xlabel, ylabel = _PER_RUN[metric]
    frame = getattr(out, attr)
    if frame is None:
        return []
    keys = ["variant", *out.sweep_keys, "run"]
    paths = []
    for key, g in frame.group_by(keys, maintain_order=True):
        row = dict(zip(keys, key))
        parts = [_slug(row["variant"])] + [f"{k}={_slug(row[k])}" for k in out.sweep_keys]
        stem = folder / "runs" / f"{'-'.join(parts)}-run{row['run']}"
        with figure(figsize=(6.0, 4.0)) as fig:
            ax = fig.add_subplot()
            g = g.sort(x)
            ax.plot(g.get_column(x).to_numpy(), g.get_column(y).to_numpy())
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            extra = "".join(f", {k}={row[k]}" for k in out.sweep_keys)
            ax.set_title(f"{out.config.name}: {row['variant']}{extra}, run {row['run']}",
                         fontsize=10)
            ax.grid(alpha=0.3)
            paths += save(fig, stem, svg=False)
    return paths


#: metric name -> plot function.
PLOTS = {
    "steps_per_episode": plot_steps_per_episode,
    "cumulative_reward": plot_cumulative_reward,
    "eval_score": plot_eval_score,
    "updates_to_optimal": plot_updates_to_optimal,
}


def plot_sensitivity(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Final performance against each swept value (``sensitivity_<key>.png`` / ``.svg``).

    Final performance is, per run, the mean steps per episode over the last
    ``analysis.final_episodes`` episodes (or the final cumulative reward with a
    ``total_steps`` schedule); markers give the statistic over runs and error bars its
    bootstrap interval. Numeric values are placed on a log axis when they span more than a
    factor of 10 and are all positive.
    """
    cfg = out.config
    if not cfg.sweep or cfg.schedule.stop_at_optimal:  # runs stop: updates_to_optimal plots it
        return []
    episodic = cfg.schedule.episodes is not None
    value, last = ("steps", cfg.analysis.final_episodes) if episodic else \
        ("cumulative_reward", 1)
    ylabel = (f"steps per episode, last {last} episodes" if episodic
              else "final cumulative reward")
    res = out.results
    order = "episode" if episodic else "step"
    colors = variant_colors(out)
    opts = _stat_opts(out)
    paths = []
    for key in cfg.sweep:
        others = [k for k in cfg.sweep if k != key]
        values = list(cfg.sweep[key])
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        xs = values if numeric else list(range(len(values)))
        combos = sweep_combos(cfg, others)
        styles = {c: {"linestyle": st["linestyle"], "marker": st["marker"] or "o"}
                  for c, st in zip(combos, sweep_styles(len(combos)))}
        with figure(figsize=(8.5, 4.5)) as fig:
            ax = fig.add_subplot()
            for variant in cfg.variants:
                for combo in combos:
                    est, lo, hi, px = [], [], [], []
                    for x, v in zip(xs, values):
                        sel = res.filter((pl.col("variant") == variant.name)
                                         & (pl.col(key) == v))
                        for k, c in zip(others, combo):
                            sel = sel.filter(pl.col(k) == c)
                        if sel.is_empty():
                            continue
                        per = (sel.sort(["run", order]).group_by("run", maintain_order=True)
                               .tail(last).group_by("run", maintain_order=True)
                               .agg(pl.col(value).cast(pl.Float64).mean())
                               .sort("run")[value].to_numpy())
                        ci = per_run_ci(per, **opts)
                        e = float(ci.estimate)
                        px.append(x)
                        est.append(e)
                        lo.append(float(ci.low) if np.isfinite(ci.low) else e)
                        hi.append(float(ci.high) if np.isfinite(ci.high) else e)
                    if not px:
                        continue
                    label = book_label(variant) + "".join(f", {k}={c}"
                                                          for k, c in zip(others, combo))
                    est_a = np.array(est)
                    ax.errorbar(px, est_a, yerr=np.vstack([est_a - lo, np.array(hi) - est_a]),
                                capsize=3, color=colors[variant.name], label=label,
                                **styles[combo])
            if numeric and min(values) > 0 and max(values) / min(values) > 10:
                ax.set_xscale("log")
                ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.set_xticks(xs, [str(v) for v in values])
            ax.set_xlabel(key + (" (swept)" if key in cfg.swept_hparams else
                                 " (env, swept)"))
            ax.set_ylabel(ylabel)
            ax.set_title(f"{cfg.name}: sensitivity to {key}\n({_stat_label(out)})",
                         fontsize=10)
            channel_legend(ax, colour_title(cfg.variants),
                           {book_label(v): colors[v.name] for v in cfg.variants},
                           "line style = " + ", ".join(others),
                           {", ".join(map(str, c)): st for c, st in styles.items()}
                           if others else None)
            ax.grid(alpha=0.3, which="both")
            paths += save(fig, folder / f"sensitivity_{key}")
    return paths


def draw_plots(out: "ExperimentOutput", folder: str | Path) -> list[Path]:
    """Draw every plot the config's ``[analysis]`` asks for into ``folder/plots``.

    Parameters
    ----------
    out : ExperimentOutput
        Results and config (from the runner, or :func:`dyna.experiment.runner.load_output`).
    folder : str or Path
        The experiment's output folder.

    Returns
    -------
    list of Path
        Files written (PNG and SVG; per-run plots PNG only).
    """
    dest = Path(folder) / "plots"
    paths = []
    for metric in out.config.analysis.metrics:
        paths += PLOTS[metric](out, dest)
    paths += plot_sensitivity(out, dest)
    if out.config.analysis.per_run_plots:
        paths += plot_per_run(out, dest)
    return paths
