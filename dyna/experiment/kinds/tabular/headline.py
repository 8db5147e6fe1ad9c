"""Kind ``tabular``: the report's headline, at most five lines that answer the experiment's
question with intervals.

* An ``episodes`` schedule (Sutton & Barto Figure 8.2): the steps in episode 2 per variant
  (the figure's point: planning agents learn the maze from one episode of experience), and
  the episode from which each variant's mean steps per episode are within 10% of its
  plateau (the mean over the last ``analysis.final_episodes`` episodes), with a bootstrap
  interval over runs.
* With a greedy evaluation (FrozenLake, Taxi): the last evaluation score, then the
  training return over the final window.
* With a sweep (a parameter study): final steps per episode against the swept value.
* A ``total_steps`` schedule (Figures 8.4 and 8.5): each variant's final cumulative
  reward, and Dyna-Q+ minus Dyna-Q.
* ``stop_at_optimal`` (Example 8.4): which variant needs the fewest updates until an
  optimal path, and the ratio Dyna-Q / prioritized sweeping per maze size.

The last lines count the checks against the book (the inconsistent ones named) and the
declared summaries that differ from the reference implementation (named). Every line
holds at most :data:`LINE` characters.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dyna.experiment.kinds.tabular.plots import optimal_rule
from dyna.experiment.kinds.tabular.reference import ALPHA
from dyna.experiment.kinds.tabular.selection import (groups, per_run, point_label, select,
                                                     stat_options)
from dyna.experiment.reporting import ci
from dyna.experiment.stats import Interval, diff_ci, per_run_ci

if TYPE_CHECKING:  # pragma: no cover
    from dyna.experiment.protocol import ExperimentOutput

__all__ = ["LINE", "PLATEAU_TOLERANCE", "fit", "headline", "overlaps", "plateau_episode",
           "ratio_ci"]

#: "At its plateau" means within this fraction of the plateau (the mean over the last
#: ``analysis.final_episodes`` episodes).
PLATEAU_TOLERANCE = 0.1
#: A headline line has at most this many characters (the items past it are counted).
LINE = 160
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


def fit(head: str, items: list[str], tail: str = ".") -> str:
    """``head`` + ``items`` joined by "; " + ``tail``, at most :data:`LINE` characters:
    the items that do not fit are counted ("; and 2 more"); the first is always kept,
    so one long item can pass the limit."""
    if not items:
        return head + tail
    for k in range(len(items), 0, -1):
        more = len(items) - k
        text = head + "; ".join(items[:k]) + (f"; and {more} more" if more else "") + tail
        if len(text) <= LINE:
            return text
    return text


def _named(entries: list[tuple]) -> list[str]:
    """Headline items of ``(variant name, point, text, estimate)`` entries: without a
    sweep, each name and its text; with one, per variant its lowest and highest estimate
    with their points, and the variants whose text (or estimate, when the intervals alone
    differ) is the same at every point after "the same at every sweep point:" once."""
    by: dict[str, list[tuple]] = {}
    for name, point, text, est in entries:
        by.setdefault(name, []).append((point, text, est))
    varying, same = [], []
    for name, got in by.items():
        if len(got) == 1:
            varying.append(f"{name} {got[0][1]}")
        elif len({text for _, text, _ in got}) == 1:
            same.append(f"{name} {got[0][1]}")
        elif len({est for _, _, est in got}) == 1:     # the intervals alone differ
            same.append(f"{name} {got[0][1].split(' [')[0]}")
        else:
            finite = [g for g in got if math.isfinite(g[2])] or got
            lo = min(finite, key=lambda g: g[2])
            hi = max(finite, key=lambda g: g[2])
            varying.append(f"{name} {lo[1]} ({point_label(lo[0])}) to {hi[1]} "
                           f"({point_label(hi[0])})")
    if same:
        same[0] = "the same at every sweep point: " + same[0]
    return varying + same


def _smoothed_steps(out: "ExperimentOutput") -> pl.DataFrame:
    """The results with each run's ``steps`` as the plots draw them (the trailing moving
    average over ``analysis.smooth`` episodes when that is above 1)."""
    a = out.config.analysis
    if a.smooth <= 1:
        return out.results
    from dyna.experiment.kinds.tabular.plots import smoothed

    return smoothed(out.results, ["variant", *out.sweep_keys, "run"], a.smooth)


def _stat_words(out: "ExperimentOutput") -> str:
    """"mean [95% CI]" (or "IQM [...]"): how the headline's cells read."""
    a = out.config.analysis
    return f"{'IQM' if a.statistic == 'iqm' else 'mean'} [{a.confidence:.0%} CI]"


def _window(out: "ExperimentOutput") -> str:
    """The final window in words, "episodes 41-50"."""
    E = out.config.schedule.episodes
    K = min(out.config.analysis.final_episodes, E)
    return f"episodes {E - K + 1:,}-{E:,}"


def _final_values(out: "ExperimentOutput", column: str) -> list[tuple]:
    """Per group ``(variant name, point, interval text, estimate)`` of each run's mean
    ``column`` over the final window."""
    K = min(out.config.analysis.final_episodes, out.config.schedule.episodes)
    got = []
    for variant, _p, point in groups(out):
        iv = per_run_ci(per_run(select(out.results, variant.name, point), column, last=K),
                        **stat_options(out))
        got.append((variant.name, point, ci(iv), float(iv.estimate)))
    return got


def _episode_lines(out: "ExperimentOutput") -> list[str]:
    """The episode-2 and the plateau lines (the learning speed Figure 8.2 is about)."""
    c = out.config
    opts = stat_options(out)
    E = c.schedule.episodes
    K = min(c.analysis.final_episodes, E)
    smooth = _smoothed_steps(out)
    second, plateau = [], []
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
    smooth_words = (f", each run's {c.analysis.smooth}-episode moving average"
                    if c.analysis.smooth > 1 else "")
    return [fit(f"- steps in episode 2 ({_stat_words(out)}): ", _named(second)),
            fit(f"- at its plateau (within {PLATEAU_TOLERANCE:.0%} of its mean over "
                f"{_window(out)}{smooth_words}) from episode: ", _named(plateau))]


def _eval_lines(out: "ExperimentOutput") -> list[str]:
    """With a greedy evaluation: its last score, then the training return over the final
    window (FrozenLake's and Taxi's question: how well does the learnt policy do)."""
    opts = stat_options(out)
    last = int(out.evals.get_column("episode").max())
    evals = []
    for variant, _p, point in groups(out):
        ev = per_run_ci(per_run(select(out.evals, variant.name, point), "score", last=1),
                        **opts)
        evals.append((variant.name, point, ci(ev), float(ev.estimate)))
    return [fit(f"- greedy evaluation at episode {last:,} ({_stat_words(out)}): ",
                _named(evals)),
            fit(f"- training return, {_window(out)} ({_stat_words(out)}): ",
                _named(_final_values(out, "return")))]


def _sweep_lines(out: "ExperimentOutput", room: int) -> list[str]:
    """A one-key sweep's question, final steps per episode against the swept value: a
    line naming the values, then a line per variant of its intervals in that order
    (at most ``room`` lines); one line of each variant's range when they do not fit."""
    c = out.config
    finals = _final_values(out, "steps")
    head = f"- final steps per episode ({_window(out)}, {_stat_words(out)})"
    keys = list(c.sweep)
    if len(keys) == 1 and 1 + len(c.variants) <= room:
        values = ", ".join(str(p[keys[0]]) for p in c.sweep_points())
        lines = [f"{head} at {keys[0]} = {values}:"]
        for v in c.variants:
            mine = [t for n, _pt, t, _e in finals if n == v.name]
            lines.append(f"- {v.name}: " + (f"{mine[0]} at every {keys[0]}."
                                             if len(set(mine)) == 1 else "; ".join(mine) + "."))
        if max(map(len, lines)) <= LINE:
            return lines
    return [fit(f"{head}: ", _named(finals))]


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
    lines = [fit(f"- cumulative reward at step {c.schedule.total_steps:,}: ", _named(text))]
    if "dyna_q_plus" in finals and "dyna_q" in finals and len(c.sweep_points()) == 1:
        d = diff_ci(finals["dyna_q_plus"], finals["dyna_q"], **opts)
        lines.append(f"- Dyna-Q+ minus Dyna-Q: {ci(d)} reward "
                     f"({'Dyna-Q+ ahead' if float(d.low) > 0 else 'not shown apart'}; "
                     "book: Dyna-Q+ ahead).")
    return lines


def ratio_ci(a, b, *, confidence: float = 0.95, n_resamples: int = 2000,
             seed: int = 0) -> Interval:
    """``mean(a) / mean(b)`` of two independent samples with a percentile bootstrap
    interval (each sample resampled with replacement on its own).

    Parameters
    ----------
    a, b : array_like, shape (n_a,), (n_b,)
        One positive value per run (e.g. updates until optimal).
    confidence, n_resamples, seed
        As in :func:`dyna.experiment.stats.bootstrap_ci`.

    Returns
    -------
    Interval
        0-d fields, ``n = min(n_a, n_b)``; NaN bounds when either has fewer than 2 values,
        a NaN estimate when either is empty or ``mean(b)`` is not positive.
    """
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    nan = np.float64(np.nan)
    n = int(min(x.size, y.size))
    if n == 0 or y.mean() <= 0:
        return Interval(nan, nan, nan, n)
    est = np.float64(x.mean() / y.mean())
    if n < 2:
        return Interval(est, nan, nan, n)
    rng = np.random.default_rng(seed)
    bx = rng.choice(x, (n_resamples, x.size)).mean(axis=1)
    by = rng.choice(y, (n_resamples, y.size)).mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(bx / by, [tail, 100 - tail])
    return Interval(est, np.float64(lo), np.float64(hi), n)


def _sizes(out: "ExperimentOutput") -> list[str]:
    """Each sweep point as the figure names it: a maze's free states ("188"), else its
    label ("alpha=0.1")."""
    points = out.config.sweep_points()
    metas = out.env_metas
    if len(metas) == len(points) and all("free_states" in m for m in metas):
        return [f"{int(m['free_states']):,}" for m in metas]
    return [point_label(pt) or "the maze" for pt in points]


def _updates_lines(out: "ExperimentOutput") -> list[str]:
    """For ``stop_at_optimal`` runs: which variant needs the fewest mean updates until
    optimal at how many sweep points, and (with a Dyna-Q and a prioritized-sweeping
    variant) the ratio of their means per maze size with a bootstrap interval (Example
    8.4's measure)."""
    c = out.config
    wins: dict[str, int] = {}
    points = c.sweep_points()
    found: list[dict] = []
    for point in points:
        runs = {}
        for v in c.variants:
            got = select(out.runs, v.name, point).get_column("updates_to_optimal")
            got = got.drop_nulls().to_numpy()
            if got.size:
                runs.setdefault(v.agent, got)
                runs[v.name] = got
        found.append(runs)
        named = {v.name: runs[v.name].mean() for v in c.variants if v.name in runs}
        if named:
            w = min(named, key=named.get)
            wins[w] = wins.get(w, 0) + 1
    where = "maze sizes" if _sizes(out)[0][:1].isdigit() else "sweep points"
    told = []
    for v, n in sorted(wins.items(), key=lambda kv: -kv[1]):
        told.append(v if len(points) == 1 else f"{v} at all {n} {where}"
                    if n == len(points) else f"{v} at {n} of {len(points)} {where}")
    rule = optimal_rule(c.schedule)
    pair = ("dyna_q", "prioritized_sweeping")
    ratios = [(size, ratio_ci(runs[pair[0]], runs[pair[1]], confidence=c.analysis.confidence,
                              n_resamples=c.analysis.n_resamples, seed=c.seed))
              for size, runs in zip(_sizes(out), found) if all(a in runs for a in pair)]
    if not ratios:
        return [fit(f"- fewest updates until optimal ({rule}): ", told or ["none found"])]
    runs_n = min(int(iv.n) for _, iv in ratios)
    how = f"{c.analysis.confidence:.0%} CI" if runs_n >= 2 else f"{runs_n} run: no interval"
    values = [f"{size}: {ci(iv)}".replace(" (one run: no interval)", "")
              for size, iv in ratios]
    if where == "maze sizes":
        values[0] = values[0].replace(":", " free states:", 1)
    head = (f"- updates until optimal ({rule}), Dyna-Q / prioritized sweeping per "
            f"{where[:-1]} ({how}; book: 5 to 10):")
    if len(head) > LINE:    # the rule is in the Setup section too
        head = head.replace(f" ({rule})", "")
    return [head, fit("- ", values)]


#: A verdict line of the Checks section: "- <what> (book: ...[; consistent <rule>]) ->
#: <verdict>".
_VERDICT = re.compile(r"^- (?P<name>.+?) \(book: [^;)]*(?:; consistent (?P<rule>[^)]*))?.*"
                      r"-> (?P<verdict>NOT consistent|consistent|partly consistent|"
                      r"inconsistent)\b")


def _checks_lines(check_lines: list[str]) -> list[str]:
    """The Checks section's verdicts in two lines: the book's (how many consistent, the
    others named) and the reference implementation's (how many declared summaries
    differ, those named); none without checks."""
    verdicts = [m for m in map(_VERDICT.match, check_lines) if m]
    lines = []
    if verdicts:
        bad = [m["name"].replace(": ", " ", 1) + (f" (needs: {m['rule']})" if m["rule"] else "")
               for m in verdicts if m["verdict"] != "consistent"]
        lines.append(fit(f"- checks against the book: {len(verdicts) - len(bad)} of "
                         f"{len(verdicts)} consistent" + ("; not: " if bad else ""), bad))
    rows = [[cell.strip() for cell in row.strip().strip("|").split("|")]
            for row in check_lines if row.startswith("| ")]
    differ = [r[0] for r in rows if "**differs**" in r]
    tested = [r for r in rows if "no difference detected" in r or "**differs**" in r]
    if tested:
        equiv = sum("equivalent" in r for r in rows)
        shown = sum("equivalent" in r or "equivalence not shown" in r for r in rows)
        tost = f"; {equiv} of {shown} shown equivalent (TOST)" if shown else ""
        lines.append(fit(f"- reference implementation: {len(differ)} of {len(tested)} "
                         f"summaries differ (Welch, Holm {ALPHA:g})"
                         + (": " if differ else ""), differ, tost + "."))
    return lines


def headline(out: "ExperimentOutput", check_lines: list[str]) -> list[str]:
    """The report's "## Headline" section (module docstring): a title, at most five lines
    starting "- " and a blank line.

    Parameters
    ----------
    out : ExperimentOutput
    check_lines : list of str
        The Checks section's lines, whose verdicts the last lines count and name.
    """
    c = out.config
    s = c.schedule
    n_pts = len(c.sweep_points())
    sched = (f"{s.episodes:,} episodes each" if s.episodes
             else f"{s.total_steps:,} time steps each")
    if s.stop_at_optimal:
        sched = f"at most {sched} (a run stops once its greedy path is optimal)"
    what = "maze sizes" if list(c.sweep) == ["resolution"] else "sweep points"
    where = f" x {n_pts} {what}" if n_pts > 1 else ""
    many = "s" if len(c.variants) != 1 else ""
    lines = [f"- {len(c.variants)} variant{many}{where} x {c.runs} runs on `{c.env.id}`, {sched}."]
    checks = _checks_lines(check_lines)
    if s.stop_at_optimal:
        lines += _updates_lines(out)
    elif s.episodes is not None and s.eval_every and out.evals is not None:
        lines += _eval_lines(out)
    elif s.episodes is not None and n_pts > 1:
        lines += _sweep_lines(out, room=4 - len(checks))
    elif s.episodes is not None:
        lines += _episode_lines(out)
    else:
        lines += _reward_lines(out)
    return ["## Headline", "", *(lines + checks)[:5], ""]
