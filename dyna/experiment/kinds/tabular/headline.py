"""Kind ``tabular``: the report's headline, at most five lines that answer the experiment's
question with intervals.

* An ``episodes`` schedule (Sutton & Barto Figure 8.2, Taxi, FrozenLake): the steps in
  episode 2 per variant (the figure's point: planning agents learn the maze from one
  episode of experience), and the episode from which each variant's mean steps per episode
  are within 10% of its plateau (the mean over the last ``analysis.final_episodes``
  episodes), with a bootstrap interval over runs; a greedy evaluation's final score when
  there is one.
* A ``total_steps`` schedule (Figures 8.4 and 8.5): each variant's final cumulative
  reward, and Dyna-Q+ minus Dyna-Q.
* ``stop_at_optimal`` (Example 8.4): which variant needs the fewest updates until an
  optimal path, per sweep point.

The last line counts the checks against the book and the reference implementation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dyna.experiment.kinds.tabular.reference import ALPHA
from dyna.experiment.kinds.tabular.selection import (groups, per_run, point_label, select,
                                                     stat_options)
from dyna.experiment.reporting import ci
from dyna.experiment.stats import Interval, diff_ci, per_run_ci

if TYPE_CHECKING:  # pragma: no cover
    from dyna.experiment.protocol import ExperimentOutput

__all__ = ["PLATEAU_TOLERANCE", "headline", "overlaps", "plateau_episode"]

#: "At its plateau" means within this fraction of the plateau (the mean over the last
#: ``analysis.final_episodes`` episodes).
PLATEAU_TOLERANCE = 0.1
#: At most this many groups are named on one headline line (the tables list them all).
MAX_NAMED = 6
#: At most this many resamples for the plateau episode's interval (a curve per resample).
PLATEAU_RESAMPLES = 1000


def _first_within(means: np.ndarray, last: int, tolerance: float) -> np.ndarray:
    """Per row of ``means`` (curves, shape (k, episodes)): the 1-based index of the first
    episode within ``tolerance`` x the plateau (mean of the last ``last`` episodes) of the
    plateau; NaN where none is. float64, shape (k,)."""
    plateau = means[:, -last:].mean(axis=1, keepdims=True)
    within = np.abs(means - plateau) <= tolerance * np.abs(plateau)
    first = within.argmax(axis=1).astype(np.float64) + 1
    first[~within.any(axis=1)] = np.nan
    return first


def plateau_episode(steps: np.ndarray, last: int, *, tolerance: float = PLATEAU_TOLERANCE,
                    confidence: float = 0.95, n_resamples: int = PLATEAU_RESAMPLES,
                    seed: int = 0) -> Interval:
    """The first episode at which the mean curve over runs is within ``tolerance`` of its
    plateau, with a percentile bootstrap interval over runs.

    Parameters
    ----------
    steps : ndarray, shape (runs, episodes)
        Steps per episode (episode 1 first) of each run.
    last : int
        The plateau is the mean curve's mean over its last ``last`` episodes (>= 1).
    tolerance : float
        Within ``tolerance x plateau`` of the plateau counts as at it.
    confidence, n_resamples, seed
        The interval: resample the runs with replacement ``n_resamples`` times (at most
        :data:`PLATEAU_RESAMPLES`), recompute the mean curve and its first episode.

    Returns
    -------
    Interval
        ``estimate`` the episode (1-based), NaN bounds with one run; NaN when the curve is
        never within the tolerance.
    """
    x = np.asarray(steps, dtype=np.float64)
    R = x.shape[0]
    nan = np.float64(np.nan)
    if R == 0:          # every run of the variant failed: no curve
        return Interval(nan, nan, nan, 0)
    est = _first_within(x.mean(axis=0, keepdims=True), last, tolerance)[0]
    if R < 2:
        return Interval(np.float64(est), nan, nan, R)
    rng = np.random.default_rng(seed)
    B = min(int(n_resamples), PLATEAU_RESAMPLES)
    weights = np.zeros((B, R))
    np.add.at(weights, (np.repeat(np.arange(B), R), rng.integers(0, R, B * R)), 1.0)
    boot = _first_within(weights @ x / R, last, tolerance)
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return Interval(np.float64(est), nan, nan, R)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return Interval(np.float64(est), np.float64(lo), np.float64(hi), R)


def overlaps(a, b) -> bool:
    """Whether two intervals share a point; an interval that is not finite (one run)
    overlaps everything (nothing is shown apart)."""
    lo = (float(a.low), float(b.low))
    hi = (float(a.high), float(b.high))
    if not all(map(math.isfinite, lo + hi)):
        return True
    return lo[0] <= hi[1] and lo[1] <= hi[0]


def _episode_text(iv: Interval) -> str:
    """An episode number with its interval, as integers ("14 [10, 20]")."""
    if not math.isfinite(float(iv.estimate)):
        return "never"
    if not (math.isfinite(float(iv.low)) and math.isfinite(float(iv.high))):
        return f"{float(iv.estimate):.0f} (one run)"
    return f"{float(iv.estimate):.0f} [{float(iv.low):.0f}, {float(iv.high):.0f}]"


def _named(entries: list[tuple]) -> str:
    """Headline text of ``(variant name, point, text, estimate)`` entries: without a
    sweep, each name and its text joined by "; " (the first :data:`MAX_NAMED` and how many
    more); with one, per variant its text when every point gives the same one, else its
    lowest and highest estimate with their points (the estimate alone when only the
    intervals differ)."""
    by: dict[str, list[tuple]] = {}
    for name, point, text, est in entries:
        by.setdefault(name, []).append((point, text, est))
    items = []
    for name, got in by.items():
        if len(got) == 1:
            items.append(f"{name} {got[0][1]}")
        elif len({text for _, text, _ in got}) == 1:
            items.append(f"{name} {got[0][1]} at every sweep point")
        elif len({est for _, _, est in got}) == 1:     # the intervals alone differ
            items.append(f"{name} {got[0][1].split(' [')[0]} at every sweep point")
        else:
            finite = [g for g in got if math.isfinite(g[2])] or got
            lo = min(finite, key=lambda g: g[2])
            hi = max(finite, key=lambda g: g[2])
            items.append(f"{name} {lo[1]} ({point_label(lo[0])}) to {hi[1]} "
                         f"({point_label(hi[0])})")
    more = len(items) - MAX_NAMED
    return "; ".join(items[:MAX_NAMED]) + (f"; and {more} more" if more > 0 else "")


def _smoothed_steps(out: "ExperimentOutput") -> pl.DataFrame:
    """The results with each run's ``steps`` as the plots draw them (the trailing moving
    average over ``analysis.smooth`` episodes when that is above 1)."""
    a = out.config.analysis
    if a.smooth <= 1:
        return out.results
    from dyna.experiment.kinds.tabular.plots import smoothed

    return smoothed(out.results, ["variant", *out.sweep_keys, "run"], a.smooth)


def _episode_lines(out: "ExperimentOutput") -> list[str]:
    """The episode-2 and the plateau lines (and the final evaluation score's)."""
    c = out.config
    opts = stat_options(out)
    E = c.schedule.episodes
    K = min(c.analysis.final_episodes, E)
    stat = "IQM" if c.analysis.statistic == "iqm" else "mean"
    smooth = _smoothed_steps(out)
    second, plateau, evals = [], [], []
    for variant, _p, point in groups(out):
        res = select(out.results, variant.name, point)
        ep2 = res.filter(pl.col("episode") == 2).sort("run").get_column("steps").to_numpy()
        iv2 = per_run_ci(ep2, **opts)
        second.append((variant.name, point, ci(iv2), float(iv2.estimate)))
        curves = (select(smooth, variant.name, point).sort("run", "episode")
                  .get_column("steps").cast(pl.Float64).to_numpy().reshape(-1, E))
        iv = plateau_episode(curves, K, confidence=c.analysis.confidence,
                             n_resamples=c.analysis.n_resamples, seed=c.seed)
        plateau.append((variant.name, point, _episode_text(iv), float(iv.estimate)))
        if c.schedule.eval_every and out.evals is not None:
            ev = per_run_ci(per_run(select(out.evals, variant.name, point), "score", last=1),
                            **opts)
            evals.append((variant.name, point, ci(ev), float(ev.estimate)))
    smooth_words = (f", each run's {c.analysis.smooth}-episode moving average"
                    if c.analysis.smooth > 1 else "")
    lines = [f"- steps in episode 2 ({stat} [{c.analysis.confidence:.0%} CI]): "
             f"{_named(second)}.",
             f"- at its plateau (within {PLATEAU_TOLERANCE:.0%} of its mean over episodes "
             f"{E - K + 1:,}-{E:,}{smooth_words}) from episode: {_named(plateau)}."]
    if evals:
        lines.append(f"- final greedy evaluation score: {_named(evals)}.")
    return lines


def _reward_lines(out: "ExperimentOutput") -> list[str]:
    """Final cumulative reward per variant, and Dyna-Q+ minus Dyna-Q."""
    c = out.config
    opts = stat_options(out)
    finals, text = {}, []
    for variant, _p, point in groups(out):
        final = per_run(select(out.results, variant.name, point), "cumulative_reward", last=1)
        finals.setdefault(variant.agent, final)
        iv = per_run_ci(final, **opts)
        text.append((variant.name, point, ci(iv), float(iv.estimate)))
    lines = [f"- cumulative reward at step {c.schedule.total_steps:,}: {_named(text)}."]
    if "dyna_q_plus" in finals and "dyna_q" in finals and len(c.sweep_points()) == 1:
        d = diff_ci(finals["dyna_q_plus"], finals["dyna_q"], **opts)
        lines.append(f"- Dyna-Q+ minus Dyna-Q: {ci(d)} reward "
                     f"({'Dyna-Q+ ahead' if float(d.low) > 0 else 'not shown apart'}; "
                     "book: Dyna-Q+ ahead).")
    return lines


def _updates_lines(out: "ExperimentOutput") -> list[str]:
    """For ``stop_at_optimal`` runs: which variant needs the fewest mean updates until
    optimal at how many sweep points, and (with a Dyna-Q and a prioritized-sweeping
    variant) the ratio of their means per sweep point (Example 8.4's measure)."""
    c = out.config
    wins: dict[str, int] = {}
    points = c.sweep_points()
    per_point = []
    for point in points:
        means = {}
        for v in c.variants:
            found = select(out.runs, v.name, point).get_column("updates_to_optimal")
            found = found.drop_nulls().to_numpy()
            if found.size:
                means[v.agent] = means.get(v.agent, float(found.mean()))
                means[v.name] = float(found.mean())
        per_point.append(means)
        named = {v.name: means[v.name] for v in c.variants if v.name in means}
        if named:
            w = min(named, key=named.get)
            wins[w] = wins.get(w, 0) + 1
    tol = f"optimal_tolerance = {c.schedule.optimal_tolerance:g}"
    told = ", ".join(f"`{v}` at {n} of {len(points)}" for v, n in
                     sorted(wins.items(), key=lambda kv: -kv[1]))
    lines = [f"- fewest mean updates until optimal ({tol}, protocol "
             f"{c.schedule.optimal_protocol!r}) per sweep point: {told or 'none found'}."]
    pair = ("dyna_q", "prioritized_sweeping")
    ratios = [f"{point_label(pt) or 'the maze'}: {m[pair[0]] / m[pair[1]]:.2g}"
              for pt, m in zip(points, per_point) if all(m.get(a, 0) > 0 for a in pair)]
    if ratios:
        lines.append("- updates until optimal, Dyna-Q / prioritized sweeping (book: 5 to 10, "
                     f"growing with the maze): {'; '.join(ratios)}.")
    return lines


def _checks_line(check_lines: list[str]) -> list[str]:
    """One line counting the verdicts of the Checks section (none without checks)."""
    text = "\n".join(check_lines)
    good = text.count("-> consistent")
    bad = (text.count("NOT consistent") + text.count("-> inconsistent")
           + text.count("-> partly consistent"))
    parts = []
    if check_lines and good + bad:
        parts.append(f"checks against the book: {good} consistent, {bad} not")
    differ, same = text.count("| **differs** |"), text.count("| no difference detected |")
    if differ + same:
        equiv = text.count("| equivalent |")
        tested = equiv + text.count("| equivalence not shown |")
        extra = f", {equiv} of {tested} shown equivalent (TOST)" if tested else ""
        parts.append(f"against the reference implementation {differ} of {differ + same} "
                     f"declared summaries differ (Welch, Holm {ALPHA:g}){extra}")
    return [f"- {'; '.join(parts)} (see Checks)."] if parts else []


def headline(out: "ExperimentOutput", check_lines: list[str]) -> list[str]:
    """The report's "## Headline" section (module docstring): a title, at most five lines
    starting "- " and a blank line.

    Parameters
    ----------
    out : ExperimentOutput
    check_lines : list of str
        The Checks section's lines, whose verdicts the last line counts.
    """
    c = out.config
    n_pts = len(c.sweep_points())
    sched = (f"{c.schedule.episodes:,} episodes" if c.schedule.episodes
             else f"{c.schedule.total_steps:,} time steps")
    where = f" x {n_pts} sweep points" if n_pts > 1 else ""
    lines = [f"- {len(c.variants)} variants{where} x {c.runs} runs on `{c.env.id}`, "
             f"{sched} each."]
    if c.schedule.stop_at_optimal:
        lines += _updates_lines(out)
    elif c.schedule.episodes is not None:
        lines += _episode_lines(out)
    else:
        lines += _reward_lines(out)
    lines += _checks_line(check_lines)
    return ["## Headline", "", *lines[:5], ""]
