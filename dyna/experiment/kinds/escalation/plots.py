"""Kind ``escalation``: its plots (PNG and SVG, headless, through
:mod:`dyna.experiment.plotting`).

* ``competence_<scenario>[_<system>]_<feedback>[_<variant>]`` -- posterior mean of every
  task type over tasks with its 95% credible band and the true rate (dashed), run 0 of each
  competence variant under the first risk class (first system of a replayed scenario
  only; the variant is named in the file when there are several);
* ``regret_<scenario>_<feedback>`` -- cumulative pseudo-regret against the type oracle per
  policy (mean over runs, and systems for replays, with a bootstrap band), a row per cost
  setting, linear and log-scaled task axis, a symmetric-log regret axis (never escalating
  grows ~100x faster than the rest), a legend right of each row;
* ``risk_coverage_<scenario>`` -- risk against coverage per policy (first cost setting), a
  panel per feedback mode, with the agent's failure rate (the expected curve of a random
  score; its legend entry names the policies that escalate every task under censored
  feedback and so rank at random), a legend under every panel;
* ``cost_grid_<scenario>`` -- with a ``costs.p_star`` grid: regret per task against p*, a
  line per policy, a panel per feedback mode, symmetric-log regret axis, a legend under
  every panel.

Each policy has one colour in every panel, figure and output folder (:data:`POLICY_COLORS`,
:func:`variant_colors`), and a colour always means that policy. Policies whose curves in a
panel are equal at every point are drawn once, as a black line with dashes in each member's
colour in turn (:func:`draw_group`), under one legend entry naming them all ("mean, chow
(identical here)", :func:`identical_groups`) whose handle shows the members' colours side by
side, so the legend lists every policy and a reader sees as many lines as it has entries.
A curve within a line width of an earlier one at half its points or more, after layout, is
drawn dashed on top of it, its legend label saying "on X at k of n points"
(:func:`show_near`). Titles say over how many runs (and systems) a curve is a mean.
Legends sit outside the data; a dotted vertical line marks each change point of a stream
(competence and regret plots, the plots with a task axis): the switches of a date-ordered
replay to the next system ("system switches", from the ``switches`` table) and the rate
changes of a synthetic scenario ("rates change"; from ``change_at`` in a folder without
that table); on a linear task axis each segment of a replay is numbered, and a key under
the figure names its system (:func:`segment_systems`). A true rate is drawn as level
pieces, without the vertical risers that would read as change lines. Costs are labelled
in USD where the experiment adds the log's logged USD cost unscaled, else in cost units
(:func:`cost_unit`).

SVG copies are written next to the PNGs unless ``analysis.svg = false``.
"""

from __future__ import annotations

import math
import re
import textwrap
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from matplotlib.legend import Legend
from matplotlib.legend_handler import HandlerLine2D
from matplotlib.lines import Line2D

from dyna.experiment.kinds.escalation.config import cost_unit
from dyna.experiment.plotting import (delta_e, figure, label_coinciding, legend_below,
                                      over_runs, save)
from dyna.experiment.stats import curve_ci

if TYPE_CHECKING:  # pragma: no cover
    from dyna.experiment.protocol import ExperimentOutput

__all__ = ["COMPETENCE_X", "COMPETENCE_Y", "COST_GRID_X", "GROUP_COLOR", "GROUP_DASH",
           "OTHER_COLORS", "OUTLINE_EXTRA", "POLICY_COLORS", "STRIPE_WIDTH",
           "SYMLOG_LINEAR", "GroupHandler", "GroupLine", "band_caption", "change_label",
           "change_points", "cost_unit", "delta_e", "draw_group", "draw_plots",
           "escalate_all", "group_label", "identical_groups", "over_systems", "policy_color",
           "pooled_caption", "random_label", "segment_systems", "show_near", "slug",
           "stat_options", "variant_colors"]


def stat_options(out) -> dict:
    """The keyword arguments of the bootstrap intervals of ``out``'s plots and report
    (:func:`dyna.experiment.stats.curve_ci`, :func:`~dyna.experiment.stats.per_run_ci`):
    the mean, the analysis' confidence and resamples, the experiment's seed."""
    a = out.config.analysis
    return dict(statistic="mean", confidence=a.confidence, n_resamples=a.n_resamples,
                seed=out.config.seed)


#: The colour of every policy name the kind knows: the rules of
#: :data:`dyna.escalation.POLICY_RULES`, ``preset`` and the variants of the shipped
#: ``experiments/escalation_*.toml`` files. Fixed by name, so a policy has one colour in every
#: escalation figure of every output folder: never escalating (acting on every task) red,
#: always escalating grey, the rest tab10's other hues, a dark teal and a mustard; every
#: two at least 25 apart in CIE76 delta-E (:func:`delta_e`), so that no two policies of
#: one figure, which may cross, look alike.
POLICY_COLORS = {
    "never": "#d62728",             # red
    "always": "#7f7f7f",            # grey
    "mean": "#1f77b4",              # blue
    "lower_bound": "#ff7f0e",       # orange
    "preset": "#2ca02c",            # green
    "mean_min10": "#9467bd",        # purple
    "chow": "#8c564b",              # brown
    "mean_eps05": "#e377c2",        # pink
    "mean_optimistic": "#bcbd22",   # olive
    "thompson": "#17becf",          # cyan
    "thompson_d0.99": "#0b5345",    # dark teal
    "mean_eps05_d0.99": "#e6ab02",  # mustard
}

#: Colours of policy names outside :data:`POLICY_COLORS`: tab20's light shades and
#: tab20b's mid ones, none of them a colour of the mapping.
OTHER_COLORS = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
                "#f7b6d2", "#dbdb8d", "#9edae5", "#5254a3", "#8ca252", "#bd9e39",
                "#ad494a", "#a55194")


def policy_color(name: str, taken: set[str] = frozenset()) -> str:
    """The colour of the policy ``name``: its :data:`POLICY_COLORS` entry, else the
    :data:`OTHER_COLORS` entry picked by the CRC-32 of the name, or the next one not in
    ``taken`` (colours already given to other policies of the figure), so an unknown name
    keeps its colour across files unless two such names meet in one. Returns a ``#rrggbb``
    string."""
    if name in POLICY_COLORS:
        return POLICY_COLORS[name]
    start = zlib.crc32(name.encode()) % len(OTHER_COLORS)
    for k in range(len(OTHER_COLORS)):
        color = OTHER_COLORS[(start + k) % len(OTHER_COLORS)]
        if color not in taken:
            return color
    return OTHER_COLORS[start]


def variant_colors(out) -> dict:
    """The colour of each policy of ``out`` (by name, :func:`policy_color`), the same in
    every panel and figure; names of the mapping first, so they never yield their colour."""
    names = [v.name for v in out.config.variants]
    colors = {n: POLICY_COLORS[n] for n in names if n in POLICY_COLORS}
    for n in names:
        if n not in colors:
            colors[n] = policy_color(n, set(colors.values()))
    return {n: colors[n] for n in names}


def identical_groups(curves: dict) -> list[list[str]]:
    """Policies whose curves are equal at every point, grouped.

    Parameters
    ----------
    curves : dict of str to tuple of ndarray
        Per policy the arrays a panel draws of it (x, estimate, band bounds ...), each 1-d.
        Two policies are identical when every array is equal element by element (exactly;
        NaN equals NaN).

    Returns
    -------
    list of list of str
        The groups in order of first appearance, each in the order of ``curves``; a policy
        equal to no other forms a group of one.
    """
    groups: list[list[str]] = []
    for name, arrays in curves.items():
        for group in groups:
            ref = curves[group[0]]
            if len(ref) == len(arrays) and all(
                    np.array_equal(a, b, equal_nan=True) for a, b in zip(ref, arrays)):
                group.append(name)
                break
        else:
            groups.append([name])
    return groups


def group_label(names: list[str], width: int = 36) -> str:
    """The legend text of policies drawn as one curve: the name alone, or
    ``"mean, chow, preset (identical here)"``, the names wrapped to lines of at most
    ``width`` characters and "(identical here)" kept whole."""
    if len(names) == 1:
        return names[0]
    lines = textwrap.wrap(", ".join(names), width=width, break_on_hyphens=False)
    note = "(identical here)"
    if len(lines[-1]) + 1 + len(note) <= width:
        lines[-1] += " " + note
    else:
        lines.append(note)
    return "\n".join(lines)


#: The colour of a line drawn for several coinciding policies: black, no policy's colour.
GROUP_COLOR = "#000000"

#: Length (points) of each member's dash on a group's line (:func:`draw_group`).
GROUP_DASH = 4.0

#: Line width (points) of a policy's curve and of each member's dashes on a group's line;
#: the group's black outline is :data:`OUTLINE_EXTRA` points wider.
STRIPE_WIDTH = 1.5
OUTLINE_EXTRA = 1.6


class GroupLine(Line2D):
    """The labelled line of policies whose curves coincide (:func:`identical_groups`): a
    black (:data:`GROUP_COLOR`) outline under dashes in each member's colour
    (:func:`draw_group`). ``member_colors``: the members' colours, in order; its legend
    entry (:class:`GroupHandler`) shows them side by side on the outline."""

    def __init__(self, *args, member_colors=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.member_colors = tuple(member_colors)


class GroupHandler(HandlerLine2D):
    """The legend entry of a :class:`GroupLine`: its black outline with its members'
    colours in equal segments along it."""

    def create_artists(self, legend, orig_handle, xdescent, ydescent, width, height,
                       fontsize, trans):
        """The outline (:class:`~matplotlib.legend_handler.HandlerLine2D`'s line) and a
        segment per member colour on it."""
        artists = super().create_artists(legend, orig_handle, xdescent, ydescent, width,
                                         height, fontsize, trans)
        xdata, _ = self.get_xdata(legend, xdescent, ydescent, width, height, fontsize)
        edges = np.linspace(xdata[0], xdata[-1], len(orig_handle.member_colors) + 1)
        y = (height - ydescent) / 2
        for color, x0, x1 in zip(orig_handle.member_colors, edges, edges[1:]):
            seg = Line2D([x0, x1], [y, y], color=color, linewidth=STRIPE_WIDTH,
                         solid_capstyle="butt", transform=trans)
            artists.append(seg)
        return artists


# every legend draws a GroupLine (and only it) with a GroupHandler
Legend.update_default_handler_map({GroupLine: GroupHandler()})


def draw_group(ax, x, y, names: list[str], colors: dict, marker: str | None = None):
    """Draw the curve ``(x, y)`` of the coinciding policies ``names`` on ``ax``: a black
    :class:`GroupLine` labelled with every member (:func:`group_label`), on it dashes of
    :data:`GROUP_DASH` points in each member's colour (``colors``: name -> colour) in
    turn, and black markers on top when ``marker`` is set, so that a colour always means
    one policy. Returns the :class:`GroupLine`."""
    outline = GroupLine(x, y, color=GROUP_COLOR, linewidth=STRIPE_WIDTH + OUTLINE_EXTRA,
                        label=group_label(names),
                        member_colors=[colors[n] for n in names])
    ax.add_line(outline)
    period = GROUP_DASH * len(names)
    for k, name in enumerate(names):
        ax.plot(x, y, color=colors[name], linewidth=STRIPE_WIDTH, label=f"_{name}",
                linestyle=((period - k * GROUP_DASH) % period,
                           (GROUP_DASH, period - GROUP_DASH)))
    if marker:
        ax.plot(x, y, color=GROUP_COLOR, linestyle="none", marker=marker,
                label="_markers")
    return outline


def _draw_groups(axes, curves: dict, colors: dict, band_alpha: float,
                 marker: str | None = None) -> list[dict]:
    """Draw each group of identical ``curves`` (:func:`identical_groups`) once on every
    axes of ``axes``: a policy alone in its colour, several as one :func:`draw_group` line
    labelled with every member (:func:`group_label`). ``curves``: per policy ``(x,
    estimate, low, high)``; the band (the policy's colour, grey for a group) is drawn
    where ``low`` is finite. Returns per axes the lines drawn, in drawing order, by the
    group's names joined with ", " (:func:`show_near`'s input)."""
    drawn: list[dict] = [{} for _ in axes]
    for group in identical_groups(curves):
        x, y, low, high = curves[group[0]]
        c = colors[group[0]] if len(group) == 1 else GROUP_COLOR
        for ax, lines in zip(axes, drawn):
            if len(group) == 1:
                (line,) = ax.plot(x, y, color=c, linewidth=STRIPE_WIDTH, marker=marker,
                                  label=group[0])
            else:
                line = draw_group(ax, x, y, group, colors, marker)
            lines[", ".join(group)] = line
            if np.isfinite(low).any():
                ax.fill_between(x, low, high, color=c, alpha=band_alpha, linewidth=0)
    return drawn


def show_near(ax, lines: dict) -> dict:
    """Draw each single policy's curve of ``lines`` (name -> line on ``ax``, in drawing
    order, :func:`_draw_groups`) that lies within a line width of an earlier curve at half
    its points or more dashed on top of it, its legend label saying which curve it lies on
    and where in lines of at most 44 characters ("thompson_d0.99", then "(on thompson at
    32 of 54 points; dashed)"; :func:`dyna.experiment.plotting.label_coinciding`, pixels
    of the current layout: lay the figure out first). A line of several identical
    policies (:class:`GroupLine`) keeps its look. Returns the curves restyled
    (:func:`dyna.experiment.plotting.coinciding`'s result); the caller redraws the
    legend."""
    groups = {n for n, line in lines.items() if isinstance(line, GroupLine)}
    return label_coinciding(ax, lines, keep=groups, width=44)


#: Linear range of the symmetric-log y-axes (cost units): below it the axis is linear.
SYMLOG_LINEAR = 1.0


def slug(text: str) -> str:
    """File-name-safe text without dots (``Path.with_suffix`` would cut at a dot): every run
    of other characters than letters, digits, ``_`` and ``-`` becomes ``-``; the part of a
    plot's file name that names a scenario, system or variant."""
    return re.sub(r"[^A-Za-z0-9_\-]+", "-", str(text)).strip("-") or "x"


def _first_systems(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows of the first system (in order of appearance) of each scenario."""
    firsts = frame.group_by("scenario", maintain_order=True).agg(pl.col("system").first())
    return frame.join(firsts, on=["scenario", "system"], how="semi")


def change_points(out, scenario: str, system: str | None = None) -> list[int]:
    """The tasks after which ``scenario``'s stream changes, increasing: from the
    ``switches`` table when the folder has one (the rows of ``system`` when given, else of
    every system of the scenario), else a synthetic scenario's ``change_at`` (an older
    folder: none for a replay or a stationary stream)."""
    switches = out.tables.get("switches")
    if switches is not None:
        rows = switches.filter(pl.col("scenario") == scenario)
        if system is not None:
            rows = rows.filter(pl.col("system") == system)
        return sorted({int(x) for x in rows.get_column("step").to_list()})
    sc = next((s for s in out.config.scenarios if s.name == scenario), None)
    if sc is None or sc.source != "synthetic":
        return []
    return [int(x) for x in sc.params.get("change_at", [])]


#: The most change lines a regret panel with a log task axis draws (more are drawn on its
#: linear twin only).
MAX_LOG_CHANGES = 5


def change_label(out, scenario: str) -> str:
    """The legend entry of ``scenario``'s change lines: "system switches" for a replay
    (the next tasks come from another system), "rates change" for a synthetic scenario."""
    sc = next((s for s in out.config.scenarios if s.name == scenario), None)
    return "rates change" if sc is None or sc.source == "synthetic" else "system switches"


def segment_systems(out, scenario: str, system: str | None = None) -> list[tuple[int, str]]:
    """``(first task, system)`` of each segment of a replayed stream between its system
    switches, in order: the first from 0 with the first switch's ``from_system``, then each
    switch's step with its ``to_system``. Empty without a ``switches`` table or switches
    (a synthetic stream's rate changes have no systems)."""
    switches = out.tables.get("switches")
    if switches is None:
        return []
    rows = switches.filter((pl.col("scenario") == scenario)
                           & pl.col("to_system").is_not_null())
    if system is not None:
        rows = rows.filter(pl.col("system") == system)
    rows = rows.sort("step")
    if rows.height == 0:
        return []
    return [(0, rows["from_system"][0])] + list(zip(rows["step"].to_list(),
                                                    rows["to_system"].to_list()))


def _mark_changes(ax, out, scenario: str, system: str | None = None) -> None:
    """A dotted vertical line at each change point of ``scenario`` (:func:`change_points`),
    one legend entry (:func:`change_label`); on a linear task axis, each segment of a
    replay numbered at the top of the panel (:func:`segment_systems`; the figure's key,
    :func:`_segment_key`, names the systems)."""
    label = change_label(out, scenario)
    for j, at in enumerate(change_points(out, scenario, system)):
        ax.axvline(at, color="0.35", lw=0.9, ls=":", zorder=0,
                   label=label if j == 0 else None)
    if ax.get_xscale() != "linear":
        return
    for i, (at, _) in enumerate(segment_systems(out, scenario, system), 1):
        ax.text(at, 0.99, f" {i}", transform=ax.get_xaxis_transform(), ha="left",
                va="top", fontsize=5.5, color="0.35", clip_on=True)


def _segment_key(fig, out, scenario: str, system: str | None = None) -> None:
    """Under the figure, the system of each numbered segment of a replayed stream
    (:func:`segment_systems`), in columns; nothing for a stream without systems."""
    segments = segment_systems(out, scenario, system)
    if not segments:
        return
    handles = [Line2D([], [], ls="none") for _ in segments]
    labels = [f"{i}  {name} (from task {at:,})" for i, (at, name) in enumerate(segments, 1)]
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=6,
               frameon=False, handlelength=0, handletextpad=0, columnspacing=2.0,
               title="systems of the stream, by the segment numbers at the top of the panels "
               "with a linear task axis",
               title_fontsize=7)


def _summary_curves(summary: pl.DataFrame, x: str) -> dict:
    """Per policy ``(x, estimate, low, high)`` arrays of a :func:`curve_ci` summary."""
    return {name: tuple(s.get_column(c).to_numpy() for c in (x, "estimate", "low", "high"))
            for (name,), s in summary.group_by(["variant"], maintain_order=True)}


def _point_name(scenario: str, system: str, feedback: str) -> str:
    parts = [scenario] + ([system] if system else []) + [feedback]
    return "_".join(slug(p) for p in parts)


# =========================================================================== plots

#: Axis labels of the competence panels.
COMPETENCE_X = "tasks seen (count)"
COMPETENCE_Y = "success probability (0-1)"


def _label_competence_axes(axes, n_panels: int) -> None:
    """Label the competence grid ``axes`` (rows x cols, the first ``n_panels`` shown): the
    y axis of each row's first panel, the x axis (with its tick labels, which a shared x
    axis hides above the last row) of each column's lowest shown panel."""
    cols = len(axes[0])
    for row in axes:
        row[0].set_ylabel(COMPETENCE_Y, fontsize=8)
    for c in range(min(cols, n_panels)):
        last = (n_panels - 1 - c) // cols
        ax = axes[last][c]
        ax.set_xlabel(COMPETENCE_X, fontsize=8)
        ax.xaxis.set_tick_params(labelbottom=True)


def _level_pieces(x: np.ndarray, y: np.ndarray) -> list[tuple[float, float, float]]:
    """A piecewise constant curve (a true rate at increasing checkpoints ``x``) as level
    pieces ``(y, from x, to x)``: each run of equal ``y`` from its first checkpoint to the
    next run's first (the last to the last checkpoint). Drawn as such, the curve has no
    vertical risers a reader would take for change lines."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size == 0:
        return []
    starts = np.concatenate([[0], np.flatnonzero(y[1:] != y[:-1]) + 1])
    ends = np.concatenate([starts[1:], [x.size - 1]])
    return [(float(y[a]), float(x[a]), float(x[b])) for a, b in zip(starts, ends)]


def plot_competence(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Competence over tasks per task type, with credible bands and the true rate."""
    comp = out.tables.get("competence")
    if comp is None or comp.height == 0:
        return []
    comp = _first_systems(comp.filter(pl.col("cost_setting") == out.config.settings()[0].name))
    paths = []
    several = comp["variant"].n_unique() > 1
    for (variant, scenario, system, feedback), g in comp.group_by(
            ["variant", "scenario", "system", "feedback"], maintain_order=True):
        names = list(dict.fromkeys(g.get_column("task_type").to_list()))
        K = len(names)
        cols = min(4, K)
        rows = math.ceil(K / cols)
        with figure(figsize=(3.2 * cols, 2.4 * rows + 0.6)) as fig:
            axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True)
            for i, name in enumerate(names):
                ax = axes[i // cols][i % cols]
                d = g.filter(pl.col("task_type") == name).sort("step")
                x = d.get_column("step").to_numpy()
                ax.fill_between(x, d.get_column("lower").to_numpy(),
                                d.get_column("upper").to_numpy(), alpha=0.25, linewidth=0)
                ax.plot(x, d.get_column("mean").to_numpy(), label="posterior mean")
                for j, (y, x0, x1) in enumerate(_level_pieces(x, d.get_column("rate")
                                                              .to_numpy())):
                    ax.plot([x0, x1], [y, y], "k--", linewidth=1,
                            label="true rate" if j == 0 else None)
                _mark_changes(ax, out, scenario, system)
                ax.set_title(name, fontsize=8)
                ax.set_ylim(0, 1)
                ax.grid(alpha=0.3)
            for j in range(K, rows * cols):
                axes[j // cols][j % cols].set_visible(False)
            _label_competence_axes(axes, K)
            handles, labels = axes[0][0].get_legend_handles_labels()
            fig.legend(handles, labels, loc="outside right upper", fontsize=7)
            _segment_key(fig, out, scenario, system)
            fig.suptitle(f"competence of {variant!r} ({out.config.settings()[0].name}, "
                         f"{feedback} feedback), run 0, {scenario} {system}\n"
                         "posterior mean with 95% credible band, true rate dashed",
                         fontsize=9)
            stem = _point_name(scenario, system, feedback)
            if several:
                stem += f"_{slug(variant)}"
            paths += save(fig, folder / f"competence_{stem}", svg=out.config.analysis.svg)
    return paths


def over_systems(frame: pl.DataFrame, keys: list[str], y: str) -> pl.DataFrame:
    """Mean of ``y`` over systems per ``keys`` and run: one row per run, the unit of the
    bands. A run index draws a new task order for every system, so these means are
    independent across runs, while a system's rows in different runs replay the same tasks
    (the report's run means)."""
    return frame.group_by([*keys, "run"], maintain_order=True).agg(pl.col(y).mean())


def band_caption(out, systems: int) -> str:
    """What a regret or cost-grid curve and its band are: ``"mean over 10 runs, 95%
    bootstrap band over runs"``, with ``systems`` > 1 ``"mean over 10 runs and 24 systems,
    95% bootstrap band over runs (of each run's mean over systems)"``; one run of one
    system: ``"1 run (no interval)"``."""
    runs = out.config.runs
    if runs == 1 and systems == 1:
        return over_runs("mean", 1)
    return (f"mean over {runs} run{'s' if runs > 1 else ''}"
            + (f" and {systems} systems" if systems > 1 else "")
            + f", {out.config.analysis.confidence:.0%} bootstrap band over runs"
            + (" (of each run's mean over systems)" if systems > 1 else ""))


def _regret_legend(ax) -> None:
    """The legend of a regret row, right of its second panel."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)


def plot_regret(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Cumulative pseudo-regret per policy: a row per cost setting, linear and log task
    axis."""
    curves = out.tables["curves"]
    classes = [st.name for st in out.config.settings()]
    colors, unit = variant_colors(out), cost_unit(out.config)
    paths = []
    for (scenario, feedback), g in curves.group_by(["scenario", "feedback"],
                                                   maintain_order=True):
        with figure(figsize=(12.5, 3.6 * len(classes) + 0.6)) as fig:
            axes = fig.subplots(len(classes), 2, squeeze=False)
            drawn = []
            for r, rc in enumerate(classes):
                summary = curve_ci(over_systems(g.filter(pl.col("cost_setting") == rc),
                                                 ["variant", "step"], "cum_pseudo_regret"),
                                   by=["variant"], x="step", y="cum_pseudo_regret", run="run",
                                   **stat_options(out))
                drawn.append(_draw_groups(axes[r], _summary_curves(summary, "step"), colors,
                                          0.15))
                axes[r][1].set_xscale("log")
                # on the log axis many change lines crowd into the last decade over the
                # curves: there they are drawn only when few (the linear panel has all)
                many = len(change_points(out, scenario)) > MAX_LOG_CHANGES
                for ax in axes[r] if not many else axes[r][:1]:
                    _mark_changes(ax, out, scenario)
                if many:   # the legend (right of the log panel) still names the lines
                    axes[r][1].plot([], [], color="0.35", lw=0.9, ls=":",
                                    label=f"{change_label(out, scenario)} (left panel)")
                for ax in axes[r]:
                    # never (or always) escalating grows ~100x faster than the rest: a
                    # symmetric log axis keeps the others apart
                    ax.set_yscale("symlog", linthresh=SYMLOG_LINEAR)
                    ax.set_ylim(bottom=0)
                    ax.set_title(rc, fontsize=9)
                    ax.set_xlabel("tasks")
                    ax.set_ylabel(f"cumulative pseudo-regret ({unit}, symlog)")
                    ax.grid(alpha=0.3)
                # a legend per row: which policies coincide depends on the cost setting
                _regret_legend(axes[r][1])
            _segment_key(fig, out, scenario)
            band = band_caption(out, g["system"].n_unique())
            fig.suptitle(f"regret vs the type oracle ({unit}): {scenario}, {feedback} "
                         f"feedback\n{band}; y: symmetric log (linear below "
                         f"{SYMLOG_LINEAR:g}); right: log x", fontsize=9)
            fig.draw_without_rendering()        # the layout whose pixels show_near measures
            for row, lines in zip(axes, drawn):
                for ax, ax_lines in zip(row, lines):
                    show_near(ax, ax_lines)
                _regret_legend(row[1])
            paths += save(fig, folder / f"regret_{slug(scenario)}_{feedback}",
                           svg=out.config.analysis.svg)
    return paths


def _show_near(fig, axes, drawn: list[dict]) -> None:
    """Lay ``fig`` out, then draw the near curves of each of ``axes`` (``drawn``: its
    lines, :func:`_draw_groups`) dashed on top (:func:`show_near`), the legend under it."""
    fig.draw_without_rendering()        # the layout whose pixels show_near measures
    for ax, lines in zip(axes, drawn):
        show_near(ax, lines)
        legend_below(ax, len(ax.get_legend_handles_labels()[0]))


def escalate_all(base: pl.DataFrame, feedback: str) -> list[str]:
    """The policies of ``base`` (rows of the runs table of one scenario and feedback mode)
    that escalate every task in every run under censored feedback (``escalation_rate``
    1): they never see an outcome, so their score never moves and their risk-coverage
    curve is that of a random score. Empty under full feedback."""
    if feedback != "censored" or "escalation_rate" not in base.columns:
        return []
    rates = base.group_by("variant", maintain_order=True).agg(
        pl.col("escalation_rate").min())
    return rates.filter(pl.col("escalation_rate") >= 1.0).get_column("variant").to_list()


def random_label(names: list[str], width: int = 44) -> str:
    """The legend label of the random score's line: ``"random score (failure rate)"``,
    with ``names`` (:func:`escalate_all`) why those policies lie on it, wrapped to lines of
    at most ``width`` characters."""
    label = "random score (failure rate)"
    if not names:
        return label
    why = (f"{', '.join(names)} escalate every task: their score never moves, so they "
           "rank at random" if len(names) > 1 else f"{names[0]} escalates every task: its "
           "score never moves, so it ranks at random")
    return "\n".join([label, *textwrap.wrap(why, width=width, break_on_hyphens=False)])


def pooled_caption(out, frame: pl.DataFrame) -> str:
    """What a risk-coverage curve is: ``"mean over 10 runs"``, ``"mean over 10 runs and
    24 systems (pooled)"`` when ``frame`` (one scenario's rows) holds several systems."""
    runs, systems = out.config.runs, frame.get_column("system").n_unique()
    return (f"mean over {runs} run{'s' if runs > 1 else ''}"
            + (f" and {systems} systems (pooled)" if systems > 1 else ""))


def plot_risk_coverage(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Risk-coverage curves per policy (first cost setting), a panel per feedback mode, with
    the agent's failure rate (the expected curve of a random score)."""
    rc0 = out.config.settings()[0].name
    rcov = out.tables["risk_coverage"].filter(pl.col("cost_setting") == rc0)
    runs = out.tables["runs"].filter(pl.col("cost_setting") == rc0)
    colors = variant_colors(out)
    paths = []
    for (scenario,), g in rcov.group_by(["scenario"], maintain_order=True):
        modes = list(dict.fromkeys(g["feedback"].to_list()))
        with figure(figsize=(5.5 * len(modes), 6.0)) as fig:
            axes = fig.subplots(1, len(modes), squeeze=False)[0]
            drawn = []
            for ax, feedback in zip(axes, modes):
                d = g.filter(pl.col("feedback") == feedback)
                mean = d.group_by("variant", "coverage", maintain_order=True).agg(
                    pl.col("risk").mean())
                base = runs.filter((pl.col("scenario") == scenario)
                                   & (pl.col("feedback") == feedback))
                curves = {}
                for (name,), s in mean.group_by(["variant"], maintain_order=True):
                    risk = s.get_column("risk").to_numpy()
                    none = np.full(risk.shape, np.nan)
                    curves[name] = (s.get_column("coverage").to_numpy(), risk, none, none)
                drawn.append(_draw_groups([ax], curves, colors, 0.0, marker=".")[0])
                # under the curves, thin: a group on the failure rate stays in view
                ax.axhline(float(base.get_column("agent_failure_rate").mean()), color="k",
                           linestyle=":", linewidth=1.0, zorder=1.5,
                           label=random_label(escalate_all(base, feedback)))
                oracle = base.get_column("aurc_type_oracle").mean()  # None: an older folder
                ax.set_title(f"{feedback} feedback" + (
                    "" if oracle is None else f"; AURC of the type oracle's score (true "
                    f"type rates): {oracle:.3f}"), fontsize=9)
                ax.set_xlabel("coverage (tasks accepted, highest competence first)")
                ax.set_ylabel("risk (agent failure rate among accepted)")
                ax.grid(alpha=0.3)
                legend_below(ax, len(ax.get_legend_handles_labels()[0]))
            fig.suptitle(f"risk-coverage: {scenario}, {rc0}; score: posterior mean of the "
                         f"task's type at arrival\n{pooled_caption(out, g)}", fontsize=9)
            _show_near(fig, axes, drawn)
            paths += save(fig, folder / f"risk_coverage_{slug(scenario)}",
                           svg=out.config.analysis.svg)
    return paths


#: The x label of the cost-grid panels.
COST_GRID_X = "risk threshold p* (each sets the failure cost c_escalate / (1 - p*))"


def plot_cost_grid(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Regret per task against the type oracle as a function of p* (the ``costs.p_star``
    grid), a line per policy, a panel per feedback mode; none without a grid."""
    if not out.config.costs.get("p_star"):
        return []
    runs = out.tables["runs"].with_columns(
        (pl.col("regret_type") / pl.col("steps")).alias("regret_per_task"))
    colors, unit = variant_colors(out), cost_unit(out.config)
    paths = []
    for (scenario,), g in runs.group_by(["scenario"], maintain_order=True):
        modes = list(dict.fromkeys(g["feedback"].to_list()))
        with figure(figsize=(5.5 * len(modes), 6.0)) as fig:
            axes = fig.subplots(1, len(modes), squeeze=False)[0]
            drawn = []
            for ax, feedback in zip(axes, modes):
                summary = curve_ci(over_systems(g.filter(pl.col("feedback") == feedback),
                                                 ["variant", "p_star"], "regret_per_task"),
                                   by=["variant"], x="p_star", y="regret_per_task", run="run",
                                   **stat_options(out))
                drawn.append(_draw_groups([ax], _summary_curves(summary, "p_star"), colors,
                                          0.12, marker=".")[0])
                ax.set_title(f"{feedback} feedback", fontsize=9)
                ax.set_xlabel(COST_GRID_X)
                # policies differ by orders of magnitude (never escalating, i.e. always
                # acting, at p* = 0.95 costs ~100x more than the rest): symmetric log,
                # linear within +-0.01
                ax.set_yscale("symlog", linthresh=0.01)
                ax.set_ylabel(f"regret per task vs the type oracle ({unit}, symlog)")
                ax.grid(alpha=0.3)
                legend_below(ax, len(ax.get_legend_handles_labels()[0]))
            fig.suptitle(f"regret by cost setting: {scenario}; "
                         f"{band_caption(out, g['system'].n_unique())}"
                         "\ny: symmetric log, linear within +-0.01", fontsize=9)
            _show_near(fig, axes, drawn)
            paths += save(fig, folder / f"cost_grid_{slug(scenario)}",
                          svg=out.config.analysis.svg)
    return paths


def draw_plots(out: "ExperimentOutput", folder: Path) -> list[Path]:
    """Every plot into ``folder / "plots"``; returns the files written."""
    dest = Path(folder) / "plots"
    return (plot_competence(out, dest) + plot_regret(out, dest) + plot_risk_coverage(out, dest)
            + plot_cost_grid(out, dest))
