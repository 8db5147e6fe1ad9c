"""Kind ``agent_tasks``: what the report of a full safeguard ablation says first, and its
per-scenario tables.

A *full ablation* (:func:`is_full_ablation`, e.g. ``experiments/skill_loop_ablation.toml``)
runs the full loop and one variant per safeguard switched off, for every safeguard of
:attr:`dyna.loops.LoopConfig.SWITCHES`, without ``[calibration]``. Its question is which
safeguard matters where, so its headline (:func:`ablation_lines`) names, after what was run
and the primary hypotheses:

* per scenario, the largest effect of switching one safeguard off, over the metrics of
  :data:`~dyna.experiment.kinds.agent_tasks.analysis.EXPLORATORY_METRICS`: the largest
  standardised paired effect (d_z) among those whose interval excludes 0, with its mean
  difference, interval and the full loop's mean (:func:`largest_effects`);
* the safeguards that never acted in any scenario (their ablations are the full loop's runs
  again);
* scenarios whose per-run results are bit-identical to another scenario's for most
  variants (the scenario's setting changed nothing for them).

Its scenario tables (:func:`scenario_tables`) are split by question (learning, cost,
safety), name their episode windows ("episodes 501-1,000") and give one statistic per cell
unless the runs make the mean and the interquartile mean differ.

Reports of other agent-tasks experiments (the calibrated v3 files, sweeps) keep their own
layout (:mod:`.report`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import polars as pl

from dyna.experiment.kinds.agent_tasks.analysis import ablated_switch, inert_switches, values
from dyna.experiment.kinds.agent_tasks.metrics import RUN_METRICS, V3_METRICS
from dyna.experiment.reporting import ci, fmt, md_table
from dyna.experiment.stats import Interval, per_run_ci

__all__ = ["QUESTIONS", "Effect", "ablation_lines", "identical_scenarios", "is_full_ablation",
           "largest_effects", "metric_label", "scenario_tables"]

#: The scenario tables of a full ablation: (question, runs-table columns).
QUESTIONS = (
    ("Does it learn?", ("final_success", "late_success", "recovery",
                        "drift_calls_per_success")),
    ("At what cost?", ("tokens_per_success", "late_tokens_per_success", "learning_share",
                       "staged_per_1000")),
    ("Is it safe?", ("incidents", "incidents_per_1000", "poisoned_final", "stale_final")),
)

#: A scenario is named as identical to another when more than this fraction of the
#: variants have bit-identical episodes in both.
IDENTICAL_SHARE = 0.5


def is_full_ablation(cfg) -> bool:
    """Whether ``cfg`` (an agent-tasks config) is a full safeguard ablation (module
    docstring): no ``[calibration]``, and ``<store>_loop`` and ``<store>_loop-no_<switch>``
    for every switch of :attr:`dyna.loops.LoopConfig.SWITCHES` among its variants."""
    from dyna.loops import LoopConfig

    if getattr(cfg, "calibration", None) is not None:
        return False
    loop = f"{cfg.store}_loop"
    wanted = {loop} | {f"{loop}-no_{s}" for s in LoopConfig.SWITCHES}
    return wanted <= set(cfg.variants)


def metric_label(cfg, metric: str) -> str:
    """The words of a runs-table column (:data:`.metrics.RUN_METRICS`,
    :data:`.metrics.V3_METRICS`) with its episode window named ("final success rate,
    episodes 901-1,000"), from the config's ``[analysis]`` windows."""
    E = int(cfg.episodes)
    a = cfg.analysis

    def window(first: int) -> str:
        return f"episodes {max(1, min(first, E)):,}-{E:,}"

    if metric == "final_success":
        return f"final success rate, {window(E - int(a['final_window']) + 1)}"
    tokens = window(E - min(int(a.get("tokens_window", 200)), E) + 1)
    text = RUN_METRICS.get(metric, V3_METRICS.get(metric, metric))
    return (text.replace("episodes late_from..end", window(int(a.get("late_from", 501))))
            .replace("last tokens_window episodes", tokens)
            .replace("last tokens_window", tokens))


def _cell(v: np.ndarray, opts: dict) -> str:
    """Mean [CI] over runs, and the IQM [CI] only when it reads differently."""
    v = v[np.isfinite(v)]
    if v.size == 0:
        return "n/a"
    m = ci(per_run_ci(v, statistic="mean", **opts))
    q = ci(per_run_ci(v, statistic="iqm", **opts))
    return m if q == m else f"{m}; IQM {q}"


def scenario_tables(cfg, runs: pl.DataFrame, opts: dict) -> list[str]:
    """Per scenario, one table per question of :data:`QUESTIONS` (a column per metric the
    runs table has), a row per variant."""
    lines = []
    for s, _ in cfg.scenarios:
        lines += [f"## Scenario `{s}`", "",
                  "Mean over runs [95% CI]; the interquartile mean (IQM) follows where it "
                  "differs.", ""]
        for question, metrics in QUESTIONS:
            cols = [m for m in metrics if m in runs.columns]
            if not cols:
                continue
            rows = [[f"`{v}`"] + [_cell(values(runs, s, v, m), opts) for m in cols]
                    for v in cfg.variants]
            lines += [f"### {question}", "",
                      *md_table(["variant"] + [metric_label(cfg, m) for m in cols], rows), ""]
    return lines


class Effect(NamedTuple):
    """The effect of switching one safeguard off on one metric in one scenario.

    Attributes
    ----------
    switch : str
        The safeguard (a :attr:`dyna.loops.LoopConfig.SWITCHES` name).
    metric : str
        The runs-table column.
    interval : Interval
        Mean paired difference ``<loop>-no_X`` minus ``<loop>`` with its bootstrap interval,
        in the metric's unit.
    d_z : float
        The standardised paired effect: the mean difference over the standard deviation
        of the per-run differences (unitless, finite).
    base : float
        The full loop's mean of the metric over runs (NaN when it has no value).
    """

    switch: str
    metric: str
    interval: Interval
    d_z: float
    base: float


def largest_effects(cfg, runs: pl.DataFrame, cells) -> dict[str, Effect]:
    """Per scenario, the comparison (``<loop>-no_X`` minus ``<loop>``) with the largest
    standardised paired effect ``|d_z|`` (mean paired difference over the standard
    deviation of the differences) among the tested comparisons whose interval excludes 0.

    The rule is free of the metrics' scales and never divides by a mean: a rare metric
    going from 0 to 0.2 incidents is as large as its runs make it, not infinitely large.
    Comparisons whose per-run differences are all equal (no spread, ``d_z`` undefined)
    are not ranked. A scenario without such a comparison is absent; ties keep the first
    cell in ``cells`` order.

    Parameters
    ----------
    cells : list of Comparison
        Every scenario's comparisons (:func:`.analysis.exploratory_cells` without leaving
        out the primary ones).
    """
    loop = f"{cfg.store}_loop"
    best: dict[str, Effect] = {}
    for c in cells:
        if not c.tested or not math.isfinite(c.d_z):
            continue
        if not (float(c.interval.low) > 0 or float(c.interval.high) < 0):
            continue
        if c.scenario in best and abs(c.d_z) <= abs(best[c.scenario].d_z):
            continue
        base = values(runs, c.scenario, loop, c.metric)
        base = float(np.nanmean(base)) if np.isfinite(base).any() else math.nan
        best[c.scenario] = Effect(ablated_switch(c.variant, cfg.store), c.metric, c.interval,
                                  float(c.d_z), base)
    return best


def identical_scenarios(cfg, runs: pl.DataFrame) -> list[tuple[str, str, int, int]]:
    """Scenarios whose per-run results equal an earlier scenario's for most variants:
    ``(scenario, earlier scenario, variants identical, variants compared)``, where more
    than :data:`IDENTICAL_SHARE` of the variants run in both have bit-identical rows of the
    runs table (every column but ``scenario``, in run order)."""
    cols = [c for c in runs.columns if c != "scenario"]
    rows = {(s, v): g.sort("run").select(cols)
            for (s, v), g in runs.group_by(["scenario", "variant"], maintain_order=True)}
    names = [s for s, _ in cfg.scenarios]
    found = []
    for j, s in enumerate(names):
        for earlier in names[:j]:
            both = [v for v in cfg.variants if (s, v) in rows and (earlier, v) in rows]
            same = sum(rows[(s, v)].equals(rows[(earlier, v)]) for v in both)
            if both and same > IDENTICAL_SHARE * len(both):
                found.append((s, earlier, same, len(both)))
                break
    return found


def _effect_words(cfg, effect: Effect) -> str:
    """``"dating (off: poisoned entries +9 [5, 13] from the loop's 0.2, d_z 2.1)"``."""
    iv = effect.interval
    d = float(iv.estimate)
    return (f"{effect.switch} (off: {metric_label(cfg, effect.metric)} "
            f"{'+' if d > 0 else ''}{fmt(d)} [{fmt(iv.low)}, {fmt(iv.high)}] from the "
            f"loop's {fmt(effect.base)}, d_z {fmt(effect.d_z)})")


def ablation_lines(cfg, runs: pl.DataFrame, cells) -> list[str]:
    """The headline lines of a full ablation after what was run and the hypotheses (module
    docstring): the largest effect per scenario, the safeguards inert everywhere, the
    scenarios identical to another for most variants. At most three lines."""
    effects = largest_effects(cfg, runs, cells)
    said: dict[str, list[str]] = {}   # the words of an effect -> its scenarios
    for s, _ in cfg.scenarios:
        if s in effects:
            said.setdefault(_effect_words(cfg, effects[s]), []).append(f"`{s}`")
    quiet = [f"`{s}`" for s, _ in cfg.scenarios if s not in effects]
    level = f"{float(cfg.analysis['confidence']):.0%}"
    lines = ["- safeguard that matters most, per scenario: "
             + ("; ".join(f"{', '.join(where)}: {words}" for words, where in said.items())
                if said else "none found")
             + (f"; none in {', '.join(quiet)}" if quiet and said else "")
             + f". Ranked by d_z (the mean paired difference, no_X minus the full loop, over "
             f"its standard deviation) among effects whose {level} CI excludes 0."]
    inert = inert_switches(runs, cfg.store)
    every = sorted(set.intersection(*inert.values())) if inert else []
    if every:
        lines.append(f"- never acted in any scenario ({len(every)} safeguards, their "
                     f"ablations repeat the full loop's runs): "
                     + ", ".join(f"`{sw}`" for sw in every) + ".")
    same = identical_scenarios(cfg, runs)
    if same:
        lines.append("- " + "; ".join(f"`{s}` is bit-identical to `{e}` for {k} of {n} "
                                      "variants" for s, e, k, n in same)
                     + " (every per-run result: the scenario's setting changed nothing "
                     "for them).")
    return lines
