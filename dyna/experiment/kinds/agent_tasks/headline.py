"""Kind ``agent_tasks``: the report's headline, the answer in at most five lines.

Each line is at most :data:`~.ablation_report.LINE` characters, and each says one thing,
in this order (lines that do not apply are left out; what is past the fifth is in the
sections below):

1. how many manipulation checks pass, the failing ones named, and how many primary
   hypotheses got each verdict (Holm); or, without hypotheses, that the experiment is
   exploratory and what was run;
2. a variant compared with three or more others on one metric in one scenario (the
   literature baselines): against which it holds and against which not
   (:func:`comparison_family_lines`);
3. the other hypotheses of the smaller side by name (:func:`named_verdicts`);
4. the hypotheses whose interval lies wholly on the side opposite to the prediction, with
   that interval (:func:`opposite_line`): a safeguard that costs what it was to save;
5. how many hypotheses have the predicted sign when the policy is scaled
   (:func:`robustness_line`);
6. in an exploratory severity sweep, the safeguard whose removal changes each failure
   mode's metric most (:func:`sweep_safeguard_line`);
7. where the naive loop is worse than no learning (:func:`crossover_line`), and which
   literature baselines restore the benefit there (:func:`baselines_line`);
8. the full loop's final success against no learning's;
9. what was run.
"""

from __future__ import annotations

import textwrap

import numpy as np
import polars as pl

from dyna.experiment.kinds.agent_tasks.ablation_report import LINE, fit_line
from dyna.experiment.reporting import ci
from dyna.experiment.stats import per_run_ci

__all__ = ["FAMILY_MIN", "baselines_line", "comparison_family_lines", "crossover_line",
           "headline", "named_verdicts", "opposite_line", "robustness_line",
           "sweep_safeguard_line", "verdict_counts"]

#: A variant compared with at least this many others on one metric in one scenario is
#: summarised on a line of its own (:func:`comparison_family_lines`).
FAMILY_MIN = 3

#: The headline's word for each verdict that is not "holds".
_WORD = {"does not hold": "does not hold", "not testable": "not testable",
         "no effect as large as its smallest effect of interest": "negligible (TOST)",
         "inert": "inert", "not tested": "not tested"}


def _word(verdict: str) -> str:
    return _WORD.get(verdict, verdict)


def headline(cfg, runs: pl.DataFrame, results, checked=None) -> list[str]:
    """The ``## Headline`` section of an agent-tasks report (module docstring).

    Parameters
    ----------
    cfg : AgentTasksConfig
    runs : polars.DataFrame
        The runs table (one row per variant, scenario and run).
    results : list of HypothesisResult
        The primary hypotheses as measured (:func:`.analysis.evaluate_hypotheses`, with the
        calibrated verdicts where the file is calibrated).
    checked : list of CheckResult, optional
        The manipulation checks of a calibrated file.

    Returns
    -------
    list of str
        ``["## Headline", "", <at most five lines>, ""]``.
    """
    lines = []
    if checked is not None:
        failing = [textwrap.shorten(c.name, 60, placeholder=" [...]")
                   for c in checked if not c.passed]
        head = (f"- checks {len(checked) - len(failing)} of {len(checked)} pass"
                + (f"; hypotheses ({len(results)}, Holm): {verdict_counts(results)}"
                   if results else ""))
        lines.append(fit_line(head + "; failing: ", failing, sep=", ",
                              more="{} more under Manipulation checks") if failing
                     else head + ".")
    elif results:
        lines.append(f"- hypotheses ({len(results)}, Holm): {verdict_counts(results)}.")
    ran = _what_ran(cfg, runs)
    if not results:
        lines.insert(0, f"- exploratory (no primary hypotheses): {ran}.")
    families, grouped = comparison_family_lines(results)
    lines += families
    opposite, reversed_ = opposite_line(cfg, results)
    named = named_verdicts([r for i, r in enumerate(results) if i not in grouped | reversed_],
                           results)
    from dyna.experiment.kinds.agent_tasks.analysis import crossover_map

    cmap = crossover_map(cfg, runs) if getattr(cfg, "sweeps", ()) else []
    for line in (named, opposite, robustness_line(cfg, runs),
                 *sweep_safeguard_line(cfg, runs, results), crossover_line(cfg, runs, cmap),
                 baselines_line(cfg, runs, cmap), _final_success_line(cfg, runs)):
        if line:
            lines.append(line)
    if results:
        lines.append(f"- {ran}.")
    return ["## Headline", "", *lines[:5], ""]


def _what_ran(cfg, runs) -> str:
    """``11 variants x 9 scenarios x 20 runs x 800 episodes, skill store``, with the pairs
    run when a calibrated file's scope left some out."""
    n_pairs = runs.select("variant", "scenario").unique().height
    grid = len(cfg.variants) * len(cfg.scenarios)
    scoped = (f"; {n_pairs} of the {grid} variant x scenario pairs run (the hypotheses' "
              "and checks')" if n_pairs < grid else "")
    return (f"{len(cfg.variants)} variants x {len(cfg.scenarios)} scenarios x {cfg.runs} "
            f"runs x {cfg.episodes} episodes, {cfg.store} store{scoped}")


def verdict_counts(results) -> str:
    """``"1 holds, 5 do not hold"``: how many primary hypotheses got each verdict."""
    from dyna.experiment.calibration_stats import NO_EFFECT, NOT_TESTABLE

    words = {"holds": ("holds", "hold"), "does not hold": ("does not hold", "do not hold"),
             NO_EFFECT: ("shows " + NO_EFFECT, "show no effect as large as their smallest "
                         "effect of interest"),
             NOT_TESTABLE: (NOT_TESTABLE, NOT_TESTABLE), "inert": ("inert", "inert"),
             "not tested": ("not tested", "not tested")}
    counts = {v: sum(r.verdict == v for r in results) for v in words}
    return ", ".join(f"{n} {words[v][n != 1]}" for v, n in counts.items() if n)


def _single_sign(r) -> tuple | None:
    """``(scenario, variant, metric, direction, versus)`` of a sign hypothesis with one
    comparison, else None."""
    h = r.hypothesis
    if getattr(h, "test", "sign") != "sign":
        return None
    parts = h.components()
    if len(parts) != 1:
        return None
    v, w, m, d = parts[0]
    return h.scenario, v, m, d, w


def comparison_family_lines(results) -> tuple[list[str], set[int]]:
    """One line per *comparison family*: a variant compared on one metric in one scenario,
    in one direction, with at least :data:`FAMILY_MIN` others, each its own hypothesis
    (a method against the literature baselines). The line says against which others the
    hypothesis holds and, by verdict, against which not::

        - `base`: skill_loop's late success greater than each of 8 (Holm): holds for 6;
          does not hold for expel; negligible (TOST) for selective_add_delete.

    (every name when they fit, else those it holds for counted, else every verdict
    counted).

    Returns
    -------
    (list of str, set of int)
        The lines, and the index in ``results`` of every result they cover (the
        named-verdicts line leaves those out).
    """
    families: dict[tuple, list] = {}
    for i, r in enumerate(results):
        key = _single_sign(r)
        if key is not None:
            families.setdefault(key[:4], []).append((key[4], r, i))
    lines, covered = [], set()
    for (scenario, variant, metric, direction), members in families.items():
        if len(members) < FAMILY_MIN:
            continue
        covered |= {i for _, _, i in members}
        by_verdict: dict[str, list[str]] = {}
        for versus, r, _ in members:
            by_verdict.setdefault(r.verdict, []).append(versus)
        order = sorted(by_verdict, key=lambda v: v != "holds")
        named = [f"{_word(v)} for {', '.join(by_verdict[v])}" for v in order]
        counted = [f"{_word(v)} for {len(by_verdict[v])}" for v in order]
        head = (f"- `{scenario}`: {variant}'s {metric.replace('_', ' ')} "
                f"{'greater' if direction == 'greater' else 'less'} than each of "
                f"{len(members)} (Holm): ")
        # every name; else the ones it holds for counted, the others named; else counts
        tries = [named, [counted[0]] + named[1:] if "holds" in by_verdict else named]
        fits = [head + "; ".join(t) + "." for t in tries if len(head + "; ".join(t)) < LINE]
        lines.append(fits[0] if fits else fit_line(
            head, counted, more="{} more under Primary hypotheses"))
    return lines, covered


def named_verdicts(named_from, results) -> str | None:
    """The hypotheses of the smaller side by name: those that do not hold, with their
    verdict, when at least half of ``results`` hold; else those that hold. Only those in
    ``named_from`` are named (the others have a line of their own). None when every
    hypothesis has the same verdict, or none of the smaller side is left to name."""
    if len({r.verdict for r in results}) < 2:
        return None
    held = sum(r.verdict == "holds" for r in results)
    minority_holds = 2 * held < len(results)
    named = [r for r in named_from if (r.verdict == "holds") == minority_holds]
    if not named:
        return None
    words = [_word(r.verdict) for r in named]
    # one item may take the whole line; several leave room for the verdicts of the rest
    width = LINE - 3 if len(named) == 1 else LINE - 40
    items = [textwrap.shorten(f"{w}: {r.hypothesis.name}", width, placeholder=" [...]")
             for w, r in zip(words, named)]
    return fit_line("- ", items, more="{} more under Primary hypotheses",
                    brief=[f"one {w}" for w in words])


def _opposite(c) -> bool:
    """Whether comparison ``c``'s whole interval lies on the side opposite to its
    predicted direction."""
    if not c.tested or c.interval is None or c.direction not in ("greater", "less"):
        return False
    low, high = float(c.interval.low), float(c.interval.high)
    return low > 0 if c.direction == "less" else high < 0


def opposite_line(cfg, results) -> tuple[str | None, set[int]]:
    """The hypotheses that do not hold because the effect went the other way: a
    comparison whose whole interval lies on the side opposite to the prediction, named
    with that mean difference and interval (the first such comparison of each).

    Returns
    -------
    (str or None, set of int)
        The line (None when there is none), and the index in ``results`` of every
        result it names.
    """
    conf = int(round(float(cfg.analysis["confidence"]) * 100))
    head, more = f"- opposite of the prediction ({conf}% CI, uncorrected): ", "{} more below"
    items, named = [], set()
    for i, r in enumerate(results):
        if r.verdict != "does not hold" or getattr(r.hypothesis, "test", "sign") != "sign":
            continue
        against = [c for c in r.comparisons if _opposite(c)]
        if against:
            c = against[0]
            which = (f"{c.variant} - {c.versus}, {c.metric}: " if len(r.comparisons) > 1
                     else "")
            numbers = f" ({which}{ci(c.interval)})"
            # the name is cut, never the numbers: room for them and a count of the rest
            room = LINE - len(head) - len(numbers) - len("; " + more.format(99) + ".")
            name = textwrap.shorten(r.hypothesis.name, max(room, 30), placeholder=" [...]")
            items.append(name + numbers)
            named.add(i)
    if not items:
        return None, named
    return fit_line(head, items, more=more), named


def robustness_line(cfg, runs: pl.DataFrame) -> str | None:
    """With ``[robustness]`` and at least :data:`~.analysis.MIN_RUNS_CLAIMS` runs: per
    scaled policy parameter and factor, how many sign hypotheses have the predicted sign
    with the whole interval (every comparison's) in the scaled copy, exploratory; those
    that do not are named when they fit. None otherwise."""
    from dyna.experiment.kinds.agent_tasks.analysis import MIN_RUNS_CLAIMS
    from dyna.experiment.kinds.agent_tasks.robustness import ODDS_SCALED, robustness_rows

    rows = robustness_rows(cfg, runs) if cfg.runs >= MIN_RUNS_CLAIMS else []
    if not rows:
        return None
    copies: dict[tuple, dict[str, bool]] = {}
    for h, copy, c, _base in rows:
        key = (copy.param, copy.factor, copy.value)
        kept = c.tested and c.interval is not None and (
            float(c.interval.low) > 0 if c.direction == "greater"
            else float(c.interval.high) < 0)
        per = copies.setdefault(key, {})
        per[h.name] = per.get(h.name, True) and kept
    counts, named = [], []
    for (param, factor, value), per in copies.items():
        how = "odds x" if param in ODDS_SCALED else "x"
        counts.append(f"`{param}` {how}{factor:g} = {value:.3g}: {sum(per.values())} of "
                      f"{len(per)}")
        lost = [textwrap.shorten(n, 40, placeholder=" [...]") for n, k in per.items()
                if not k]
        named.append(counts[-1] + (f" (not: {'; '.join(lost)})" if lost else ""))
    conf = int(round(float(cfg.analysis["confidence"]) * 100))
    head = f"- policy scaled (exploratory): hypotheses of the predicted sign, whole {conf}% CI: "
    # the ones that lose it by name when that fits, else the counts alone
    full = head + "; ".join(named) + "."
    return full if len(full) <= LINE else fit_line(
        head, counts, more="{} more under Robustness to the policy")


def sweep_safeguard_line(cfg, runs: pl.DataFrame, results) -> list[str]:
    """In an experiment without hypotheses that sweeps failure modes and removes
    safeguards one at a time (``<loop>-no_X`` variants), with at least
    :data:`~.analysis.MIN_RUNS_CLAIMS` runs: per sweep, the removal (``<loop>-no_X`` minus
    ``<loop>``) that changes the sweep's metric most, in the metric's units, among those
    whose two-sided interval excludes 0 at any grid point, shown as a share of the full
    loop's mean there in whole percent with its interval, on at most two lines.
    Exploratory and uncorrected: the largest of many comparisons. Empty otherwise."""
    from dyna.experiment.kinds.agent_tasks.ablation_report import Effect
    from dyna.experiment.kinds.agent_tasks.analysis import (MIN_RUNS_CLAIMS, ablated_switch,
                                                           compare, inert_switches, ran,
                                                           values)

    loop = f"{cfg.store}_loop"
    removed = [v for v in cfg.variants if ablated_switch(v, cfg.store) is not None]
    if (results or not getattr(cfg, "sweeps", ()) or not removed or loop not in cfg.variants
            or cfg.runs < MIN_RUNS_CLAIMS):
        return []
    a = cfg.analysis
    opts = dict(store=cfg.store, inert=inert_switches(runs, cfg.store),
                alpha=float(a["alpha"]), confidence=float(a["confidence"]),
                n_resamples=int(a["n_resamples"]), seed=cfg.seed)
    items, brief = [], []
    for sw in cfg.sweeps:
        best = None
        for sc, value in sw.points():
            base = values(runs, sc, loop, sw.metric)
            base = base[np.isfinite(base)]
            if base.size == 0 or float(np.mean(base)) == 0:
                continue
            for v in removed:
                if not (ran(runs, sc, v) and ran(runs, sc, loop)):
                    continue
                c = compare(runs, sc, v, loop, sw.metric, **opts)
                if not c.tested or not (float(c.interval.low) > 0
                                        or float(c.interval.high) < 0):
                    continue
                e = Effect(ablated_switch(v, cfg.store), sw.metric, c.interval,
                           float(np.mean(base)))
                # one metric over the sweep's points: ranked in its own units, so that a
                # point where the full loop's mean is near 0 does not win by its share
                if best is None or abs(float(c.interval.estimate)) > abs(
                        float(best[1].interval.estimate)):
                    best = (value, e)
        if best is None:
            items.append(f"{sw.name}: none separated")
            brief.append(f"{sw.name}: none")
            continue
        value, e = best
        at = f"{value:g}" if isinstance(value, float) else value
        est, low, high = (round(100 * x) for x in e.share)
        items.append(f"{sw.name}: {e.switch} {est:+d}% [{low}, {high}] at {at}")
        brief.append(f"{sw.name}: {e.switch}")
    conf = int(round(float(a["confidence"]) * 100))
    # as many sweeps as fit on a first line, the rest on a second
    head = f"- one safeguard off (%, {conf}% CI): "
    k = max([j for j in range(1, len(items) + 1)
             if len(head + "; ".join(items[:j]) + ".") <= LINE] or [1])
    lines = [fit_line(head, items[:k], more="{} more below")]
    if items[k:]:
        lines.append(fit_line("- also one safeguard off: ", items[k:], brief=brief[k:],
                              more="{} more under Effect of removing each safeguard"))
    return lines


def baselines_line(cfg, runs, cmap=None) -> str | None:
    """With literature baselines run beside the naive loop: per severity sweep where the
    naive loop is worse than no learning, the baselines that restore the benefit there
    (:func:`.analysis.baseline_crossovers`; "none" when none does). Exploratory. None
    without a baseline on the crossover map. ``cmap``: the config's
    :func:`.analysis.crossover_map` when the caller has it (computed when None)."""
    from dyna.experiment.kinds.agent_tasks.analysis import baseline_crossovers, crossover_map

    if not getattr(cfg, "sweeps", ()):
        return None
    found = baseline_crossovers(cfg, runs, crossover_map(cfg, runs) if cmap is None else cmap)
    per: dict[str, list[str]] = {}
    for lc in found:
        if lc.restores is not None:
            per.setdefault(lc.sweep, [])
            if lc.restores:
                per[lc.sweep].append(lc.variant)
    if not per:
        return None
    items = [f"{sweep}: {', '.join(names) if names else 'none'}"
             for sweep, names in per.items()]
    return fit_line("- baselines restoring the benefit (exploratory): ", items,
                    more="{} more in the crossover map")


def crossover_line(cfg, runs, cmap=None) -> str | None:
    """Per severity sweep, where the naive loop is worse than no learning with its whole
    interval (and the single safeguard restoring the benefit there), then the sweeps
    where it never is; a sweep compared at some grid points only says at which. ``cmap``:
    the config's :func:`.analysis.crossover_map` when the caller has it (computed when
    None)."""
    from dyna.experiment.kinds.agent_tasks.analysis import crossover_map, ran

    if not getattr(cfg, "sweeps", ()):
        return None
    cmap = crossover_map(cfg, runs) if cmap is None else cmap
    if not cmap:
        return None
    worse, never, brief = [], [], []
    for cx in cmap:
        sweep = next(sw for sw in cfg.sweeps if sw.name == cx.sweep)
        run_at = [v for sc, v in sweep.points()
                  if ran(runs, sc, "naive_loop") and ran(runs, sc, "no_learning")]
        if not run_at:
            continue
        some = len(run_at) < len(sweep.values)
        if cx.at is None:
            never.append(cx.sweep + (f" (at {', '.join(map(str, run_at))})" if some else ""))
        else:
            worse.append(f"{cx.sweep} {'at' if some else 'from'} {cx.at}"
                         + (f" (restored by {', '.join(g for g, _ in cx.restores)})"
                            if cx.restores else ""))
            brief.append(f"{cx.sweep} {'at' if some else 'from'} {cx.at}")
    conf = int(round(float(cfg.analysis["confidence"]) * 100))
    tail = [f"never: {', '.join(never)}"] if never else []
    if not worse + tail:
        return None
    head = f"- naive loop worse than no learning (exploratory, whole {conf}% CI): "
    # every sweep with its restoring safeguards when that fits, else every sweep without
    full = head + "; ".join(worse + tail) + "."
    if len(full) <= LINE:
        return full
    return fit_line(head, brief + tail, more="{} more in the crossover map")


def _final_success_line(cfg, runs) -> str | None:
    """The full loop's and no learning's final success in the first scenario."""
    loop = f"{cfg.store}_loop"
    if loop not in cfg.variants or "no_learning" not in cfg.variants:
        return None
    o = {"confidence": float(cfg.analysis["confidence"]),
         "n_resamples": int(cfg.analysis["n_resamples"]), "seed": cfg.seed}
    sc = cfg.scenarios[0][0]

    def fs(v):
        x = runs.filter((pl.col("scenario") == sc) & (pl.col("variant") == v))
        return ci(per_run_ci(x["final_success"].to_numpy(), **o))
    return f"- final success in `{sc}`: {loop} {fs(loop)}, no_learning {fs('no_learning')}."
