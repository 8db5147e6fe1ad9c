"""Kind ``agent_tasks``: the standard plots (see :func:`draw_plots`).

One figure per scenario as small multiples: a row per metric, a column per group of at
most six variants (the baselines, the tabular learners, the safeguard ablations in groups
of five; the full loop, in black, in every column as the reference), the legend of each
column under its bottom panel, outside the data. Each variant has its own colour, the
same in every panel and figure and far from every other variant's (:func:`variant_colors`),
and a dotted vertical line marks each drift episode. A panel names what its lines hide
(:func:`_mark_panel`): the variants at 0 in a count row, a variant without a success in
the token row, and a curve lying on another at every point, drawn dashed on top of it
("no_outcome_gate dashed, identical to memory_loop here"); ``(= loop)`` in the legend
marks a variant whose episodes equal the full loop's. The
token row's log axis spans the 0.5th-99.5th percentiles of what is drawn, so one
exploding early value cannot flatten the rest; the poisoned-entries row gives each panel
its own y scale (:data:`OWN_SCALE_ROWS`), so one variant's hundreds do not squash another
panel's few to a line at zero, and a panel whose curves span orders of
magnitude is logarithmic above 1 (:func:`_spread`). A scenario whose curves equal
another's for every variant, or for most, names it in its title. Bands of the success,
token and poisoned-entry rows are 95% bootstrap confidence intervals across runs
(:func:`dyna.experiment.stats.curve_ci`) of the per-episode quantity.

The two competence rows show what the agent's Beta posteriors say against what happened
(:func:`dyna.agents.loop_agents.competence_fields`): the arrival-weighted competence over
the families seen so far, and the competence of the family ``analysis.chosen_family``
names, each a solid line (the posterior mean, under an empirical-Bayes prior centred on
the agent's pooled success rate) in a band (the 95% credible interval), beside a dashed
line of the same colour: the true success of the agent's own runs over the last
``analysis.window`` episodes (for the chosen family: over its last ``analysis.window``
arrivals). Over several runs the lines are means over runs and the band the mean of the
runs' interval ends (quantile averaging: Lichtendahl, Grushka-Cockayne & Winkler 2013,
"Is it better to average probabilities or quantiles?", Management Science 59(7)).
``dyna plot DIR --only competence`` draws these two rows alone (:func:`draw_competence`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D
import polars as pl

from dyna.competence import beta_interval
from dyna.errors import ConfigError, check_range
from dyna.experiment.kinds.agent_tasks.analysis import PROFILE_TAUS, aggregates, ablated_switch
from dyna.experiment.kinds.agent_tasks.figure_style import (PLOT_RESAMPLES, short_name,
                                                            variant_colors)
from dyna.experiment.plotting import (coinciding_words, dash_coinciding, figure, over_runs,
                                      phrase_lines, save)
from dyna.experiment.stats import curve_ci

__all__ = ["MAX_LINES", "MIN_FIGURES_PER_PROCESS", "draw_competence", "draw_plots",
           "plot_processes", "scenario_figure", "scenario_job", "variant_panels"]

#: At most this many lines in one panel.
MAX_LINES = 6
#: Rows of a scenario figure: (name, y label, scale): "unit" is [0, 1], "log" a log axis
#: (token costs span orders of magnitude), "linear" limits from the data.
ROWS = (("success", "success rate", "unit"),
        ("tokens_per_success", "tokens per success (log)", "log"),
        ("competence", "competence,\narrival-weighted", "unit"),
        ("competence_chosen", "competence,\nfamily {chosen}", "unit"),
        ("poisoned", "poisoned entries", "linear"))
#: Rows with a y scale per panel (counts: one panel's hundreds would squash the others'
#: few to a line at zero).
OWN_SCALE_ROWS = ("poisoned",)
#: The rows drawn as a posterior (mean, credible band) beside the true rolling success.
COMPETENCE_ROWS = ("competence", "competence_chosen")

def variant_panels(variants, store: str) -> list[tuple[str, list[str]]]:
    """Columns of a scenario figure: ``(title, variants)``, each at most
    :data:`MAX_LINES` lines including the full loop (drawn in every column)."""
    loop = f"{store}_loop"
    has_loop = loop in variants
    room = MAX_LINES - (1 if has_loop else 0)
    base = [v for v in variants if v != loop and ablated_switch(v, store) is None]
    abl = [v for v in variants if ablated_switch(v, store) is not None]
    tabular = [v for v in base if v in ("dyna_q", "dyna_q_plus")]
    base = [v for v in base if v not in tabular]
    panels = []
    for title, group in (("baselines", base), ("tabular Dyna baselines", tabular),
                         ("one safeguard off", abl)):
        chunks = [group[i:i + room] for i in range(0, len(group), room)]
        for j, chunk in enumerate(chunks):
            name = title if len(chunks) == 1 else f"{title} ({j + 1}/{len(chunks)})"
            panels.append((name, ([loop] if has_loop else []) + chunk))
    if not panels and has_loop:
        panels.append(("full loop", [loop]))
    return panels


def _label(variant: str, store: str, same: set) -> str:
    """The legend label of ``variant``: :func:`short_name`, and ``(= loop)`` when it is in
    ``same`` (its line lies under the full loop's)."""
    return short_name(variant, store) + (" (= loop)" if variant in same else "")


def _zorder(variant: str, store: str, same: set) -> float:
    """Drawing order: the full loop (the reference of every panel) on top, the variants
    equal to it underneath every other line."""
    return 3.0 if variant == f"{store}_loop" else 1.5 if variant in same else 2.0


def _same_as_loop(ep: pl.DataFrame, scenario: str, loop: str) -> set[str]:
    """Variants whose episodes equal the full loop's in every run of ``scenario`` (an
    inert ablation, or one that changed nothing): their lines lie under the loop's."""
    sub = ep.filter(pl.col("scenario") == scenario)
    cols = [c for c in sub.columns if c not in ("variant", "scenario")
            and not c.startswith("acted_")]
    ref = sub.filter(pl.col("variant") == loop).select(cols)
    if ref.is_empty():
        return set()
    return {v for v in sub["variant"].unique().to_list() if v != loop
            and sub.filter(pl.col("variant") == v).select(cols).equals(ref)}


#: The episode fields a scenario figure draws (:func:`_series`), besides the keys
#: scenario, variant, run and episode.
DRAWN_FIELDS = ("success", "tokens", "learning_tokens", "poisoned", "escalated", "family",
                "drift", "comp_weighted_mean", "comp_weighted_lower", "comp_weighted_upper",
                "comp_chosen_a", "comp_chosen_b")


def _series(ep: pl.DataFrame, window: int, stride: int, *,
            chosen_family: int) -> dict[str, pl.DataFrame]:
    """Per-run, per-episode curves of each row metric (columns scenario, variant, run,
    episode, drift, y; the competence rows also lo, hi and truth), kept every ``stride``
    episodes and at every drift episode."""
    keyed = ep.sort("scenario", "variant", "run", "episode")
    over = ("scenario", "variant", "run")

    def thin(f, *extra):
        return f.filter((pl.col("episode") % stride == 0) | (pl.col("episode") == 1)
                        | pl.col("drift")) \
            .select("scenario", "variant", "run", "episode", "drift", "y", *extra)

    succ = keyed.with_columns(pl.col("success").cast(pl.Float64)
                              .rolling_mean(window, min_samples=1).over(over).alias("y"))
    tps = (keyed.with_columns((pl.col("tokens") + pl.col("learning_tokens")).cast(pl.Float64)
                              .rolling_sum(window, min_samples=1).over(over).alias("tok"),
                              pl.col("success").cast(pl.Float64)
                              .rolling_sum(window, min_samples=1).over(over).alias("ns"))
           .with_columns((pl.col("tok") / pl.max_horizontal(pl.col("ns"), pl.lit(1.0)))
                         .alias("y")))
    pois = keyed.with_columns(pl.col("poisoned").cast(pl.Float64).alias("y"))
    comp, chosen = _competence_series(keyed, window, chosen_family)
    return {"success": thin(succ), "tokens_per_success": thin(tps),
            "competence": thin(comp, "lo", "hi", "truth"),
            "competence_chosen": thin(chosen, "lo", "hi", "truth"),
            "poisoned": thin(pois)}


def _competence_series(keyed: pl.DataFrame, window: int, chosen_family: int):
    """The two competence rows' per-run curves (``keyed``: the episodes sorted by
    scenario, variant, run, episode): y (posterior mean), lo and hi (its 95% credible
    interval) and truth, the success rate of the agent's own (not escalated) runs over the
    last ``window`` episodes, or for the chosen family over its last ``window`` arrivals
    (carried forward between them; null before its first).

    Raises
    ------
    ConfigError
        The table lacks the ``comp_weighted_*`` / ``comp_chosen_*`` columns (an output
        folder written before they were recorded).
    """
    need = ("comp_weighted_mean", "comp_weighted_lower", "comp_weighted_upper",
            "comp_chosen_a", "comp_chosen_b")
    missing = [c for c in need if c not in keyed.columns]
    if missing:
        raise ConfigError("episodes", ", ".join(missing), "missing from the episodes table: "
                          "it was written before the competence fields were recorded; "
                          "run the experiment again")
    over = ("scenario", "variant", "run")
    own = ~pl.col("escalated")
    succ = (pl.col("success") & own).cast(pl.Float64)
    num = succ.rolling_sum(window, min_samples=1).over(over)
    den = own.cast(pl.Float64).rolling_sum(window, min_samples=1).over(over)
    weighted = keyed.with_columns(
        pl.col("comp_weighted_mean").alias("y"), pl.col("comp_weighted_lower").alias("lo"),
        pl.col("comp_weighted_upper").alias("hi"),
        pl.when(den > 0).then(num / den).otherwise(None).alias("truth"))
    a = keyed["comp_chosen_a"].to_numpy()
    b = keyed["comp_chosen_b"].to_numpy()
    lo, hi = beta_interval(a, b, 0.95)
    fam = (keyed.filter((pl.col("family") == chosen_family) & own)
           .with_columns(pl.col("success").cast(pl.Float64)
                         .rolling_mean(window, min_samples=1).over(over).alias("truth"))
           .select(*over, "episode", "truth"))
    chosen = (keyed.with_columns(y=pl.Series(a / (a + b)), lo=pl.Series(lo),
                                 hi=pl.Series(hi))
              .join(fam, on=[*over, "episode"], how="left", maintain_order="left")
              .with_columns(pl.col("truth").forward_fill().over(over)))
    return weighted, chosen


def _limits(values: list[np.ndarray], scale: str) -> tuple[float, float]:
    """y-limits of a row from the plotted mean curves: [0, 1] for rates; for a log axis
    (tokens) the 0.5th-99.5th percentiles of every point drawn, in log10, so a few extreme
    points are clipped instead of flattening every line; for a linear axis (counts of
    poisoned entries, mostly 0 in most panels) every point, so no curve is cut off."""
    if scale == "unit":
        return (-0.02, 1.02)
    v = np.concatenate([x[np.isfinite(x)] for x in values]) if values else np.zeros(0)
    if scale == "log":
        v = np.log10(v[v > 0])
    if v.size == 0:
        return (1.0, 10.0) if scale == "log" else (0.0, 1.0)
    lo, hi = ((float(q) for q in np.percentile(v, [0.5, 99.5])) if scale == "log"
              else (float(v.min()), float(v.max())))
    if scale == "log":
        pad = 0.05 * max(hi - lo, 0.1)
        return (10 ** (lo - pad), 10 ** (hi + pad))
    lo = min(0.0, lo)
    hi = hi if hi > lo else lo + 1.0
    # a margin below as well, so a line at 0 shows above the axis instead of on it
    return (lo - 0.04 * (hi - lo), hi + 0.05 * (hi - lo))


def scenario_job(out, scenario: str, series: dict, folder: Path, rows=None,
                 twins: tuple = ()) -> tuple:
    """The arguments of :func:`scenario_figure` for one scenario: only what it draws
    (the config, the scenario's rows of each series, the variants equal to the loop, the
    note on scenarios it equals), so a figure can be drawn in another process. ``rows``:
    the keys of the rows to draw (default every row of :data:`ROWS`); ``twins``: the
    scenarios whose curves equal this one's (:func:`_identical_scenarios`)."""
    cfg = out.config
    keys = [key for key, _, _ in ROWS] if rows is None else list(rows)
    sub = {key: series[key].filter(pl.col("scenario") == scenario).drop("scenario")
           for key in keys}
    same = _same_as_loop(out.tables["episodes"], scenario, f"{cfg.store}_loop")
    return cfg, scenario, sub, same, Path(folder), _twin_note(twins)


def _identical_scenarios(ep: pl.DataFrame, order) -> dict[str, tuple]:
    """Per scenario of ``order``, the other scenarios (in that order) whose episodes equal
    its own in every field a scenario figure draws (:data:`DRAWN_FIELDS`), for every run
    and episode of every variant, or of more than half of them: ``(other, fields,
    unequal, n)``. ``unequal``: the variants whose curves differ (empty: the figures are
    the same below the title), of ``n`` variants in the two; ``fields``, when ``unequal``
    is empty: the other episode fields (but ``scenario``) in which the two differ, in
    column order (empty: equal episodes). Scenarios without such a twin are left out."""
    keys = ["variant", "run", "episode"]
    keyed = ep.sort(keys)
    frames = {s: keyed.filter(pl.col("scenario") == s).drop("scenario") for s in order}
    drawn = {s: f.select(*keys, *DRAWN_FIELDS) for s, f in frames.items()}
    digest = {s: _variant_digests(f) for s, f in drawn.items()}
    twins = {}
    for s in order:
        found = []
        for o in order:
            names = sorted(set(digest[s]) | set(digest[o]))
            unequal = tuple(v for v in names if digest[s].get(v) != digest[o].get(v))
            if o == s or 2 * len(unequal) >= len(names):
                continue
            same = pl.col("variant").is_in(unequal).not_()
            if not drawn[s].filter(same).equals(drawn[o].filter(same)):
                continue
            fields = () if unequal else tuple(c for c in frames[s].columns
                                              if not frames[s][c].equals(frames[o][c]))
            found.append((o, fields, unequal, len(names)))
        if found:
            twins[s] = tuple(found)
    return twins


def _variant_digests(frame: pl.DataFrame) -> dict[str, bytes]:
    """Per variant, the bytes of the row hashes of its rows of ``frame`` (sorted by
    variant, run, episode): equal for equal rows."""
    hashes = frame.hash_rows(seed=0).to_numpy()
    names, first = np.unique(frame["variant"].to_numpy(), return_index=True)
    bounds = [*first[1:], len(hashes)]
    return {str(v): hashes[a:b].tobytes() for v, a, b in zip(names, first, bounds)}


def _twin_note(twins) -> str:
    """The title line of a scenario figure whose curves equal other scenarios' (``twins``
    of :func:`_identical_scenarios`), for every variant or for most; empty without one."""
    groups: dict[tuple, list[str]] = {}
    for other, fields, unequal, _ in twins:
        if not unequal:
            groups.setdefault(fields, []).append(other)
    parts = [", ".join(names) + (f" (episodes differing only in {', '.join(cols)})" if cols
                                 else " (equal episodes)" if len(groups) > 1 else "")
             for cols, names in groups.items()]
    lines = [f"every curve identical, for every variant and run, to {'; '.join(parts)}"
             ] if parts else []
    most: dict[tuple, list[str]] = {}
    for other, _, unequal, n in twins:
        if unequal:
            most.setdefault((unequal, n), []).append(f"{other}'s")
    lines += [f"curves identical for {n - len(unequal)} of {n} variants (all but "
              f"{', '.join(unequal)}) to {_and(names)}" for (unequal, n), names in most.items()]
    return "; ".join(lines)


def _and(names: list[str]) -> str:
    """``["a", "b", "c"]`` as "a, b and c"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _draw_row(ax, key: str, curves: pl.DataFrame, group, cfg, same: set, colors,
              skip: set = frozenset()) -> tuple[dict, list]:
    """One panel: each variant of ``group`` (but those in ``skip``) in its colour
    (``colors``), its band and, in a competence row, its true rolling success dashed.
    Returns the mean curves drawn (variant -> :class:`~matplotlib.lines.Line2D`, in
    drawing order) and the notes naming the variants left out, for :func:`_mark_panel`
    once the row is scaled."""
    lines = {}
    for v in group:
        g = curves.filter(pl.col("variant") == v)
        if g.is_empty() or v in skip:
            continue
        x = g["episode"].to_numpy()
        est, lo, hi = (g[k].to_numpy() for k in ("estimate", "low", "high"))
        color = colors[v]
        # a variant equal to the loop lies under the loop's line (drawn on top, in black)
        # without a band of its own, which would only darken the loop's
        if v not in same:
            ax.fill_between(x, lo, hi, color=color, alpha=0.15, linewidth=0)
        (lines[v],) = ax.plot(x, est, color=color, lw=1.1, label=_label(v, cfg.store, same),
                              zorder=_zorder(v, cfg.store, same))
        if key in COMPETENCE_ROWS:
            truth = g["truth"].cast(pl.Float64).fill_null(np.nan).to_numpy()
            ax.plot(x, truth, color=color, lw=0.9, ls=(0, (3, 2)))
    notes = [f"{short_name(v, cfg.store)}: no successes, no tokens per success"
             for v in group if v in skip]
    return lines, notes


def _mark_panel(ax, key: str, lines: dict, store: str, same: set, notes: list) -> None:
    """Name on the panel what its lines hide, under ``notes``, once its row is scaled: in a
    count row (:data:`OWN_SCALE_ROWS`) the variants whose curve is 0 at every episode
    ("none stored" when every curve is); and draw each curve of ``lines`` (variant -> mean
    curve, in drawing order) lying within a line width of an earlier one at every point
    dashed on top of it (:func:`dyna.experiment.plotting.dash_coinciding`), named
    "no_outcome_gate dashed, identical to skill_loop here" unless named already: at 0, or
    with episodes equal to the full loop's (``same``, "(= loop)" in the legend)."""
    zero = [v for v, ln in lines.items()
            if key in OWN_SCALE_ROWS and np.all(np.nan_to_num(ln.get_ydata()) == 0)]
    if zero and len(zero) == len(lines):
        notes = [*notes, "none stored: every curve at 0"]
    elif zero:
        notes = [*notes, "at 0: " + ", ".join(short_name(v, store) for v in zero)]
    ax.get_xlim(), ax.get_ylim()        # pending autoscaling applied: the pixels measured
    hidden = dash_coinciding(ax, lines, share=1.0)
    notes = [*notes, *(f"{short_name(v, store)} dashed, "
                       + coinciding_words(short_name(lead, store), near, total, equal)
                       for v, (lead, near, total, equal) in hidden.items()
                       if v not in same and v not in zero)]
    if notes:
        ax.text(0.02, 0.97, phrase_lines("; ".join(notes), 60), transform=ax.transAxes,
                fontsize=6, va="top", color="0.25", zorder=4,
                bbox={"facecolor": "white", "alpha": 0.8, "lw": 0, "pad": 1})


def _curves(key: str, frame: pl.DataFrame, cfg) -> pl.DataFrame:
    """Per variant and episode: ``estimate``, ``low``, ``high`` (and ``truth`` in a
    competence row): a bootstrap interval across runs of the mean, or for competence the
    mean over runs of the posterior mean, of each interval end and of the true success."""
    if key not in COMPETENCE_ROWS:
        return curve_ci(frame, by=["variant"], x="episode", y="y",
                        n_resamples=PLOT_RESAMPLES, seed=cfg.seed)
    return (frame.group_by("variant", "episode", maintain_order=True)
            .agg(pl.col("y").mean().alias("estimate"), pl.col("lo").mean().alias("low"),
                 pl.col("hi").mean().alias("high"), pl.col("truth").mean())
            .sort("variant", "episode"))


def _heading(cfg, scenario: str, rows, drifts, note: str, width: float) -> str:
    """The title of a scenario figure: what is drawn, each line broken between its phrases
    (:func:`dyna.experiment.plotting.phrase_lines`) to the figure's ``width`` (inches; ~13
    characters per inch at 9 points), so a long scenario name stays inside."""
    W = int(cfg.analysis["window"])
    chosen = int(cfg.analysis["chosen_family"])
    lines = [f"{cfg.name}, scenario {scenario}"]
    if note:
        lines.append(note)
    if any(key not in COMPETENCE_ROWS for key, _, _ in rows):
        band = (f"{over_runs('mean', cfg.runs)} across runs ({PLOT_RESAMPLES} resamples)"
                if cfg.runs > 1 else over_runs("mean", 1))
        lines.append(f"{band}; success and tokens rolling over {W} episodes"
                     + ("; dotted vertical lines: drifts" if drifts else ""))
    if any(key in COMPETENCE_ROWS for key, _, _ in rows):
        where = "" if cfg.runs == 1 else f", means over {cfg.runs} runs"
        lines.append(f"competence: solid, posterior mean (empirical-Bayes prior), band 95% "
                     f"credible interval{where}; dashed, true success over the last {W} "
                     f"episodes (family {chosen}: {W} arrivals)")
    elif drifts:
        lines.append("dotted vertical lines: drifts")
    return "\n".join(phrase_lines(line, max(20, int(13 * width))) for line in lines)


def _scale_row(axes_row, drawn: list[list], scale: str, own: bool) -> None:
    """y scale and limits of one row of panels (``drawn``: the mean curves of each
    panel): one for the whole row, or with ``own`` each panel its own (a count row, whose
    largest panel would squash the others), with its tick labels."""
    # a row with no positive value cannot be log-scaled (matplotlib would warn on
    # the terminal): it stays linear
    flat = [d for got in drawn for d in got]
    positive = any(np.any(np.asarray(d, float) > 0) for d in flat)
    row_scale = scale if scale != "log" or positive else "linear"
    ylim = _limits(flat, row_scale)
    for ax, got in zip(axes_row, drawn):
        if row_scale == "log":
            ax.set_yscale("log")
        ax.set_ylim(*(_limits(got, row_scale) if own else ylim))
        if own:
            ax.tick_params(labelleft=True)
            if _spread(got):
                # linear from 0 to 1, logarithmic above: 0, 3 and 300 entries apart
                ax.set_yscale("symlog", linthresh=1.0)
                ax.set_ylim(-0.3, max(float(np.nanmax(d)) for d in got) * 1.6)
                ax.text(0.98, 0.97, "log scale above 1", transform=ax.transAxes,
                        fontsize=6, va="top", ha="right", color="0.3")


#: A count panel whose largest curve is this many times another's (non-zero) largest is
#: drawn on a symmetric log axis (:func:`_spread`).
SPREAD = 10.0


def _spread(curves: list) -> bool:
    """Whether a count panel's curves span orders of magnitude: the largest curve's
    highest point is at least :data:`SPREAD` times another curve's highest point above
    zero, so a linear axis would flatten the smaller curve onto the zero line."""
    tops = [float(np.nanmax(c)) for c in curves if np.isfinite(c).any()]
    positive = [t for t in tops if t > 0]
    return len(positive) > 0 and len(tops) > 1 and max(positive) >= SPREAD * min(
        [t for t in positive if t < max(positive)] or [max(positive)])


def _legends(axes_row, styles: bool, W: int) -> None:
    """The legend of each column under its bottom panel (``axes_row``), outside the data;
    with ``styles`` the competence rows' line styles after a gap, named as styles so that
    their grey is not read as a variant's."""
    for ax in axes_row:
        handles, labels = ax.get_legend_handles_labels()
        if styles:
            handles += [Line2D([], [], lw=0), Line2D([], [], color="0.6", lw=1.1),
                        Line2D([], [], color="0.6", lw=0.9, ls=(0, (3, 2)))]
            labels += ["", "solid line: competence (posterior)",
                       f"dashed line: true success (rolling {W})"]
        ax.legend(handles, labels, fontsize=6.5, loc="upper left",
                  bbox_to_anchor=(0.0, -0.28), ncol=1, frameon=False)


def scenario_figure(cfg, scenario: str, sub: dict, same: set, folder: Path, note: str = "",
                    stem: str = "scenario", svg: bool = True) -> list[Path]:
    """Draw and save one scenario's figure (module docstring) from :func:`scenario_job`'s
    arguments: a row per key of ``sub`` (in :data:`ROWS` order), ``note`` (if any) under
    the title, saved as ``<stem>_<scenario>.png`` (and ``.svg`` with ``svg``)."""
    rows = [r for r in ROWS if r[0] in sub]
    panels = variant_panels(cfg.variants, cfg.store)
    n_rows, n_cols = len(rows), len(panels)
    chosen = int(cfg.analysis["chosen_family"])
    curves = {key: _curves(key, sub[key], cfg) for key, _, _ in rows}
    colors = variant_colors(cfg.variants, cfg.store)
    never = _never_succeeded(sub.get("success"))
    first = sub[rows[0][0]]
    drifts = sorted(set(first.filter(pl.col("drift"))["episode"].to_list()))
    styles = any(key in COMPETENCE_ROWS for key, _, _ in rows)
    own = any(key in OWN_SCALE_ROWS for key, _, _ in rows) and n_cols > 1
    legend = 1.75 + (0.45 if styles else 0.0)   # inches: the line-style key takes 3 lines
    width, height = 3.3 * n_cols, 2.3 * n_rows + legend + 0.05
    heading = _heading(cfg, scenario, rows, drifts, note, width)
    with figure(figsize=(width, height), layout=None) as fig:
        # fixed margins in inches (the layout engine took ~40% of a figure's drawing
        # time): the y labels on the left (a log axis may label minor ticks, "2 x 10^3"),
        # the title (0.16 inch a line) and the panel titles on top, the legends (one
        # entry a line, MAX_LINES at most) below the bottom row; room between the
        # columns for the tick labels of a row with a y scale per panel
        fig.subplots_adjust(left=0.95 / width, right=1 - 0.12 / width,
                            top=1 - (0.48 + 0.16 * heading.count("\n")) / height,
                            bottom=legend / height, wspace=0.14 if own else 0.06,
                            hspace=0.12)
        axes = fig.subplots(n_rows, n_cols, squeeze=False, sharex=True)
        marks = []
        for r, (key, ylabel, scale) in enumerate(rows):
            drawn = []
            for c, (title, group) in enumerate(panels):
                ax = axes[r, c]
                if c and key not in OWN_SCALE_ROWS:
                    ax.sharey(axes[r, 0])
                    ax.tick_params(labelleft=False)
                lines, notes = _draw_row(ax, key, curves[key], group, cfg, same, colors,
                                         never if key == "tokens_per_success" else set())
                drawn.append([ln.get_ydata() for ln in lines.values()])
                marks.append((ax, key, lines, notes))
                for e in drifts:
                    ax.axvline(e, color="0.35", lw=0.8, ls=":", zorder=0)
                if r == 0:
                    ax.set_title(title, fontsize=9)
                if c == 0:
                    label = ylabel.format(chosen=chosen)
                    ax.set_ylabel(label + ("\n(own y scale per panel)"
                                           if own and key in OWN_SCALE_ROWS else ""),
                                  fontsize=8)
                if r == n_rows - 1:
                    ax.set_xlabel("episode", fontsize=8)
                ax.tick_params(labelsize=7)
                ax.grid(alpha=0.3)
            _scale_row(axes[r], drawn, scale, own and key in OWN_SCALE_ROWS)
        # the legends first: their keys stay solid, a curve is dashed only in the panels
        # where it lies on another
        _legends(axes[-1], styles, int(cfg.analysis["window"]))
        for ax, key, lines, notes in marks:
            _mark_panel(ax, key, lines, cfg.store, same, notes)
        fig.suptitle(heading, fontsize=9, y=1 - 0.08 / height, va="top")
        return save(fig, folder / f"{stem}_{scenario}", svg=svg)


def _never_succeeded(success: pl.DataFrame | None) -> set[str]:
    """The variants whose success rate (a success series of :func:`_series`) is 0 in
    every run and episode drawn: they have no tokens per success to draw."""
    if success is None:
        return set()
    top = success.group_by("variant").agg(pl.col("y").max())
    return set(top.filter(pl.col("y") == 0)["variant"].to_list())


def _profiles_figure(out, folder: Path) -> list[Path]:
    cfg = out.config
    agg = aggregates(cfg, out.tables["runs"])
    if not agg["profiles"]:
        return []
    panels = variant_panels([v for v in cfg.variants if v in agg["profiles"]], cfg.store)
    colors = variant_colors(cfg.variants, cfg.store)
    same = _same_final_success(out.tables["runs"], f"{cfg.store}_loop")
    with figure(figsize=(3.3 * len(panels), 4.4)) as fig:
        axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
        for ax, (title, group) in zip(axes, panels):
            for v in group:
                iv = agg["profiles"][v]
                if v not in same:
                    ax.fill_between(PROFILE_TAUS, iv.low, iv.high, color=colors[v],
                                    alpha=0.15, linewidth=0, step="post")
                ax.step(PROFILE_TAUS, iv.estimate, where="post", color=colors[v], lw=1.1,
                        label=_label(v, cfg.store, same), zorder=_zorder(v, cfg.store, same))
            zoom = _profile_span([agg["profiles"][v] for v in group])
            if zoom is not None:
                ax.set_xlim(*zoom)
                title += f"\n(x zoomed to {zoom[0]:.2f}-{zoom[1]:.2f}: 1 below, 0 above)"
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("final success rate tau", fontsize=8)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(0.0, -0.22), ncol=1,
                      frameon=False)
        axes[0].set_ylabel("fraction of runs > tau", fontsize=8)
        fig.suptitle(f"{cfg.name}: performance profiles over {len(cfg.scenarios)} scenarios "
                     f"x {cfg.runs} runs (stratified bootstrap 95% CI, "
                     f"{agg['n_resamples']} resamples)", fontsize=9)
        return save(fig, folder / "performance_profiles")


def _profile_span(profiles) -> tuple[float, float] | None:
    """The tau range in which some of ``profiles`` (intervals of curves over
    :data:`PROFILE_TAUS`) is neither 1 nor 0, with a margin of a tenth of it (at least
    0.02), when it is under half of [0, 1]; None when it is not."""
    taus = np.asarray(PROFILE_TAUS)
    ends = [np.asarray(c, float) for iv in profiles for c in (iv.estimate, iv.low, iv.high)]
    below = np.flatnonzero(np.any([c < 1 for c in ends], axis=0))
    above = np.flatnonzero(np.any([c > 0 for c in ends], axis=0))
    if not ends or below.size == 0 or above.size == 0:
        return None
    lo, hi = taus[max(below[0] - 1, 0)], taus[min(above[-1] + 1, len(taus) - 1)]
    if hi - lo >= 0.5:
        return None
    pad = max(0.1 * (hi - lo), 0.02)
    return max(0.0, lo - pad), min(1.0, hi + pad)


def _same_final_success(runs: pl.DataFrame, loop: str) -> set[str]:
    """Variants whose final success rate equals the full loop's in every scenario and run
    (their performance profile is the loop's)."""
    keyed = runs.sort("scenario", "run")
    ref = keyed.filter(pl.col("variant") == loop)["final_success"]
    if ref.is_empty():
        return set()
    return {v for v in keyed["variant"].unique().to_list() if v != loop
            and keyed.filter(pl.col("variant") == v)["final_success"].equals(ref)}


#: A scenario figure takes about 2 s to draw and a drawing process about 1.5 s to start
#: (it imports matplotlib and polars): fewer figures than this are drawn here.
MIN_FIGURES_PER_PROCESS = 4


def plot_processes(n_figures: int, processes: int | None = None) -> int:
    """How many processes draw ``n_figures`` scenario figures: ``processes`` if given; 1
    with ``DYNA_RENDER=serial`` (environment: everything drawn in this process,
    :func:`dyna.experiment.helper_process.helpers_allowed`); else one per usable core
    (``os.sched_getaffinity``) but at most one per :data:`MIN_FIGURES_PER_PROCESS`
    figures. 1 means this process draws them all; otherwise
    :func:`dyna.experiment.kinds.agent_tasks.figure_worker.draw_all` shares them out.

    Raises
    ------
    ConfigError
        ``processes`` is not an integer >= 1 (field ``processes``); ``DYNA_RENDER`` is
        neither auto nor serial.
    """
    if processes is not None:
        return int(check_range("processes", processes, lo=1, integer=True))
    from dyna.experiment.helper_process import helpers_allowed, usable_cores

    if not helpers_allowed():
        return 1
    return max(1, min(usable_cores(), n_figures // MIN_FIGURES_PER_PROCESS))


def draw_plots(out, folder: Path, processes: int | None = None, also=None) -> list[Path]:
    """The standard plots of an agent-tasks experiment into ``folder/plots`` (PNG and SVG):

    * ``scenario_<name>``: per scenario, small multiples (module docstring) of the success
      rate and tokens per success (rolling ``analysis.window`` episodes), the
      arrival-weighted competence and the chosen family's, each with its credible band
      and the true rolling success, and the poisoned entries, over episodes;
    * ``performance_profiles``: the fraction of runs whose final success rate exceeds each
      tau, over all scenarios (rliable), with stratified bootstrap bands;
    * ``recovery`` and ``crossover``: the per-run metrics' figures of
      :mod:`dyna.experiment.kinds.agent_tasks.run_plots` (recovery after a drift per
      variant, for scenarios with drifts; per severity sweep, its metric against
      severity).

    The scenario figures are drawn in :func:`plot_processes` processes (default: one per
    core, when there are enough figures to repay starting them); the files do not depend
    on it. This process draws the three summary figures (and runs ``also``, a callable
    without arguments, e.g. the report's statistics) while the helpers start and draw,
    then takes scenario figures from the same queue
    (:func:`dyna.experiment.kinds.agent_tasks.figure_worker.draw_all`).

    Returns
    -------
    list of Path
        The files written: the scenario figures in scenario order, then the summary
        figures (whichever process drew them).

    Raises
    ------
    ConfigError
        ``processes`` is not an integer >= 1.
    Exception
        Whatever ``also`` or drawing a figure raises (after every helper is stopped).
    """
    cfg = out.config
    dest = Path(folder) / "plots"
    series = _all_series(out)
    twins = _identical_scenarios(out.tables["episodes"], [s for s, _ in cfg.scenarios])
    jobs = [scenario_job(out, s, series, dest, twins=twins.get(s, ()))
            for s, _ in cfg.scenarios]
    summary: list[list[Path]] = []
    from dyna.experiment.kinds.agent_tasks.figure_worker import draw_all
    from dyna.experiment.kinds.agent_tasks.run_plots import crossover_figure, recovery_figure

    def here():
        for fig in (_profiles_figure, recovery_figure, crossover_figure):
            summary.append(fig(out, dest))
        if also is not None:
            also()

    drawn = draw_all(jobs, plot_processes(len(jobs), processes), here,
                     draw=scenario_figure, rows=[key for key, _, _ in ROWS])
    return [p for got in drawn + summary for p in got]


def _all_series(out) -> dict[str, pl.DataFrame]:
    """:func:`_series` of an output's episodes, thinned to about 100 points a curve."""
    cfg = out.config
    return _series(out.tables["episodes"], int(cfg.analysis["window"]),
                   max(1, cfg.episodes // 100),
                   chosen_family=int(cfg.analysis["chosen_family"]))


def draw_competence(out, folder: Path) -> list[Path]:
    """Only the competence over episodes (``dyna plot DIR --only competence``): per
    scenario, ``folder/plots/competence_<name>.png`` (no SVG: a quick look; the scenario
    figures of :func:`draw_plots` hold the same rows in both formats), the two competence
    rows of the scenario figure (module docstring) drawn alone, in this process.

    Returns
    -------
    list of Path
        The files written, in scenario order.

    Raises
    ------
    ConfigError
        The episodes table lacks the competence fields (written by an older version).
    """
    cfg = out.config
    dest = Path(folder) / "plots"
    series = _all_series(out)
    twins = _identical_scenarios(out.tables["episodes"], [s for s, _ in cfg.scenarios])
    return [p for s, _ in cfg.scenarios
            for p in scenario_figure(*scenario_job(out, s, series, dest, COMPETENCE_ROWS,
                                                   twins=twins.get(s, ())),
                                      stem="competence", svg=False)]
