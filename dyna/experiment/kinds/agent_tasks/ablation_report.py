"""Kind ``agent_tasks``: what the report of a full safeguard ablation says first, and its
per-scenario tables.

A *full ablation* (:func:`is_full_ablation`, e.g. ``experiments/skill_loop_ablation.toml``)
runs the full loop and one variant per safeguard switched off, for every safeguard of
:attr:`dyna.loops.LoopConfig.SWITCHES`, without ``[calibration]``. Its question is which
safeguard matters where, so its headline (:func:`ablation_lines`, at most five lines of
at most :data:`LINE` characters with what was run) names:

* per scenario, the safeguard that matters most (:func:`largest_effects`): the largest
  effect of switching one safeguard off, in the outcome's own units as a share of the full
  loop's mean, among the effects whose interval excludes 0, on final success, else on
  tokens per success (:data:`RANKED`); scenarios sharing the answer are grouped, and
  "none separated from 0 at N runs" where no effect does; the full table is
  :func:`matters_section`;
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

import textwrap
from typing import NamedTuple

import numpy as np
import polars as pl

from dyna.experiment.kinds.agent_tasks.analysis import ablated_switch, inert_switches, values
from dyna.experiment.kinds.agent_tasks.metrics import RUN_METRICS, V3_METRICS
from dyna.experiment.reporting import ci, fmt, md_table
from dyna.experiment.stats import Interval, per_run_ci

__all__ = ["LINE", "QUESTIONS", "RANKED", "Effect", "ablation_lines", "fit_line",
           "identical_scenarios", "is_full_ablation", "largest_effects", "matters_section",
           "metric_label", "scenario_tables", "separated_effects", "share_words"]

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
    """The effect of switching one safeguard off on one outcome in one scenario.

    Attributes
    ----------
    switch : str
        The safeguard (a :attr:`dyna.loops.LoopConfig.SWITCHES` name).
    metric : str
        The runs-table column (one of :data:`RANKED`).
    interval : Interval
        Mean paired difference ``<loop>-no_X`` minus ``<loop>`` with its bootstrap interval,
        in the metric's unit.
    base : float
        The full loop's mean of the metric over runs (finite, not 0).
    """

    switch: str
    metric: str
    interval: Interval
    base: float

    @property
    def share(self) -> tuple[float, float, float]:
        """The difference and its interval as shares of the full loop's mean: ``(estimate,
        low, high)``, unitless (-0.1: 10% below the full loop)."""
        iv = self.interval
        a, b = float(iv.low) / self.base, float(iv.high) / self.base
        return float(iv.estimate) / self.base, min(a, b), max(a, b)


#: The outcomes a full ablation's headline ranks, in order: per scenario, the safeguard
#: named is the one with the largest effect on the first of these on which any
#: safeguard's effect separates from 0 (success before its cost).
RANKED = ("final_success", "tokens_per_success")

#: The length (characters) a headline line of a full ablation stays within.
LINE = 160


def separated_effects(cfg, runs: pl.DataFrame, cells, metric: str) -> dict[str, Effect]:
    """Per scenario, the comparison (``<loop>-no_X`` minus ``<loop>``) on ``metric`` with
    the largest effect as a share of the full loop's mean, among the tested comparisons
    whose interval excludes 0.

    The rank is in the outcome's own units, relative to where the full loop stands: a
    difference of 28 tokens per success out of 1,747 (1.6%) ranks below one of 0.1 in a
    success rate of 0.5 (20%), however consistent the 28 tokens are over runs. A
    comparison whose full loop has no finite mean or a mean of 0 has no share and is not
    ranked. A scenario without a ranked comparison is absent; ties keep the first cell in
    ``cells`` order.

    Parameters
    ----------
    cells : list of Comparison
        Every scenario's comparisons (:func:`.analysis.exploratory_cells` without leaving
        out the primary ones).
    metric : str
        The runs-table column ranked.
    """
    loop = f"{cfg.store}_loop"
    best: dict[str, Effect] = {}
    for c in cells:
        if c.metric != metric or not c.tested:
            continue
        if not (float(c.interval.low) > 0 or float(c.interval.high) < 0):
            continue
        base = values(runs, c.scenario, loop, metric)
        base = base[np.isfinite(base)]
        if base.size == 0 or float(np.mean(base)) == 0:
            continue
        effect = Effect(ablated_switch(c.variant, cfg.store), metric, c.interval,
                        float(np.mean(base)))
        if c.scenario not in best or abs(effect.share[0]) > abs(best[c.scenario].share[0]):
            best[c.scenario] = effect
    return best


def largest_effects(cfg, runs: pl.DataFrame, cells) -> dict[str, Effect]:
    """Per scenario, the safeguard that matters most: :func:`separated_effects` on the
    first outcome of :data:`RANKED` on which the scenario has one (final success, else
    tokens per success). A scenario where no safeguard separates from 0 on any of them is
    absent."""
    best: dict[str, Effect] = {}
    for metric in RANKED:
        for s, effect in separated_effects(cfg, runs, cells, metric).items():
            best.setdefault(s, effect)
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


def _pct(x: float, sign: bool = False) -> str:
    """A share as a percentage, two significant figures below 10%: ``-1.6%``, ``+15%``."""
    v = 100 * x
    digits = 0 if abs(v) >= 10 else 1 if abs(v) >= 1 else 2
    return f"{v:{'+' if sign else ''}.{digits}f}%"


def share_words(effect: Effect) -> str:
    """``"-15% [-25%, -5%]"``: the effect as a share of the full loop's mean, its interval."""
    est, low, high = effect.share
    return f"{_pct(est, sign=True)} [{_pct(low)}, {_pct(high)}]"


def _group_words(group: list[Effect]) -> str:
    """One safeguard's effects in several scenarios: ``"-15% [-25%, -5%]"`` when they read
    alike, else the range of the estimates and the span of their intervals
    (``"+13% to +15% (CIs in [10%, 16%])"``)."""
    words = {share_words(e) for e in group}
    if len(words) == 1:
        return words.pop()
    est = sorted(e.share[0] for e in group)
    low, high = min(e.share[1] for e in group), max(e.share[2] for e in group)
    return (f"{_pct(est[0], sign=True)} to {_pct(est[-1], sign=True)} "
            f"(CIs in [{_pct(low)}, {_pct(high)}])")


def fit_line(head: str, items: list[str], sep: str = "; ",
             more: str = "{} more in the table below", brief: list[str] | None = None) -> str:
    """``head`` followed by ``items`` joined by ``sep``, as many of them as keep the line
    within :data:`LINE` characters, and a full stop. The items left out are named by their
    ``brief`` words after "also" when those fit, else counted by ``more`` (a format string
    of one ``{}``). When not even the first item fits with that count, it is cut, at a word,
    to fit."""
    if not items:
        return head.rstrip(": ") + "."
    for k in range(len(items), 0, -1):
        left = items[k:]
        tails = [[]] if not left else (
            ([["also " + ", ".join(brief[k:])]] if brief else []) + [[more.format(len(left))]])
        for tail in tails:
            text = head + sep.join(items[:k] + tail) + "."
            if len(text) <= LINE:
                return text
    tail = [more.format(len(items) - 1)] if len(items) > 1 else []
    room = LINE - len(head) - len(sep.join([""] + tail)) - 1
    first = textwrap.shorten(items[0], max(room, 20), placeholder=" [...]")
    return head + sep.join([first] + tail) + "."


def _grouped(effects: dict[str, Effect], scope: list[str],
             others: bool) -> tuple[list[str], list[str]]:
    """``"`outcome_gate` -15% [-25%, -5%] in `drift`, `volume`"``: one clause per
    safeguard, its scenarios together, largest effect first, and each clause in brief
    (``"`outcome_gate` (2 scenarios)"``). A safeguard named in every scenario of ``scope``
    is said to be so ("in every scenario", or "in the other 4 scenarios" when ``others``:
    the line covers those the line above left)."""
    by_switch: dict[str, list[str]] = {}
    for s in scope:
        if s in effects:
            by_switch.setdefault(effects[s].switch, []).append(s)
    clauses, brief = [], []
    for sw, where in sorted(by_switch.items(), key=lambda kv: -max(
            abs(effects[s].share[0]) for s in kv[1])):
        said = ", ".join(f"`{s}`" for s in where)
        if len(where) == len(scope) > 1:
            said = f"the other {len(scope)} scenarios" if others else "every scenario"
        clauses.append(f"`{sw}` {_group_words([effects[s] for s in where])} in {said}")
        brief.append(f"`{sw}` ({len(where)} scenario{'s' if len(where) > 1 else ''})")
    return clauses, brief


def _effect_lines(cfg, runs: pl.DataFrame, cells) -> list[str]:
    """The headline's safeguard that matters most per scenario: a line on final success,
    and for the scenarios where no safeguard separates on it, a line on tokens per
    success (which also names the scenarios where none separates on either)."""
    names = [s for s, _ in cfg.scenarios]
    none = f"none separated from 0 at {cfg.runs} runs"
    units = f"(off vs full loop, {float(cfg.analysis['confidence']):.0%} CI): "
    success = separated_effects(cfg, runs, cells, RANKED[0])
    rest = [s for s in names if s not in success]
    tokens = {s: e for s, e in separated_effects(cfg, runs, cells, RANKED[1]).items()
              if s in rest}
    if not (success or tokens):
        return [f"- matters most for final success, then tokens per success: {none} in any "
                "scenario."]
    if success:
        clauses, brief = _grouped(success, names, others=False)
        lines = [fit_line(f"- matters most for final success {units}", clauses, brief=brief)]
    else:
        lines = [f"- matters most for final success: {none} in any scenario."]
    if not rest:
        return lines
    quiet = [f"`{s}`" for s in rest if s not in tokens]
    if not tokens:
        return lines + [f"- else, for tokens per success: {none} in {', '.join(quiet)}."]
    clauses, brief = _grouped(tokens, rest, others=bool(success))
    if quiet:
        clauses.append(f"{none} in {', '.join(quiet)}")
        brief.append(f"none separated in {len(quiet)}")
    head = "- else, for tokens per success: " if success else \
        f"- else, for tokens per success {units}"
    return lines + [fit_line(head, clauses, brief=brief)]


def ablation_lines(cfg, runs: pl.DataFrame, cells) -> list[str]:
    """The headline lines of a full ablation after what was run and the hypotheses (module
    docstring): the safeguard that matters most per scenario (:func:`largest_effects`,
    one or two lines), the safeguards inert everywhere, the scenarios identical to another
    for most variants. At most four lines, each within :data:`LINE` characters; what does
    not fit is in :func:`matters_section`'s table and the activity table."""
    lines = _effect_lines(cfg, runs, cells)
    inert = inert_switches(runs, cfg.store)
    every = sorted(set.intersection(*inert.values())) if inert else []
    if every:
        lines.append(fit_line(f"- never acted in any scenario ({len(every)} safeguards): ",
                              [f"`{sw}`" for sw in every], sep=", ",
                              more="{} more (What each safeguard did)"))
    same = identical_scenarios(cfg, runs)
    if same:
        lines.append(fit_line("- ", [f"`{s}` is bit-identical to `{e}` for {k} of {n} "
                                     "variants" for s, e, k, n in same], more="{} more below"))
    return lines


def matters_section(cfg, runs: pl.DataFrame, cells) -> list[str]:
    """The table behind the headline's safeguard that matters most: per scenario and
    outcome of :data:`RANKED`, the safeguard with the largest effect whose interval
    excludes 0 (:func:`separated_effects`), its mean difference [CI] in the outcome's
    units and as a share of the full loop's mean, or that none separated; then the
    scenarios bit-identical to another for most variants (:func:`identical_scenarios`)."""
    loop = f"{cfg.store}_loop"
    conf = f"{float(cfg.analysis['confidence']):.0%}"
    found = {m: separated_effects(cfg, runs, cells, m) for m in RANKED}
    rows = []
    for s, _ in cfg.scenarios:
        for m in RANKED:
            e = found[m].get(s)
            rows.append([f"`{s}`", metric_label(cfg, m)] + (
                [f"`{e.switch}`", ci(e.interval), share_words(e), fmt(e.base)] if e else
                [f"none separated from 0 at {cfg.runs} runs", "", "", ""]))
    return ["## Which safeguard matters most, per scenario", "",
            f"`{loop}-no_X` minus `{loop}`, paired by run: the safeguard X whose effect is "
            f"largest as a share of the full loop's mean, among those whose {conf} interval "
            "excludes 0, on final success and on tokens per success. The headline names "
            "the one on final success, and on tokens per success where none separates on "
            "success. Exploratory: nothing here is corrected for the number of "
            "comparisons.", "",
            *md_table(["scenario", "outcome", "safeguard off", f"difference [{conf} CI]",
                        "as a share of the full loop's", "full loop's mean"], rows), "",
            *[f"`{s}` gives the same per-run results as `{e}`, bit for bit, for {k} of {n} "
              "variants: its setting changed nothing for them." for s, e, k, n in
              identical_scenarios(cfg, runs)], ""]
