"""Kind ``escalation``: report.md.

Report sections: a headline of at most five lines (what was run and where its main plot
is; per cost setting the cheapest policy, its cost per task with an interval over runs,
beside always and never escalating); setup (with the system switches of a date-ordered
replay); the lowest-regret policy per cost setting (a risk class, or a value of the
``costs.p_star`` grid) with the rank of "always escalate", opened by the headline's detail
(ties, wins of always escalating, winners not separated from the runner-up); a cost table
per policy and cost setting for every scenario and feedback mode; the censoring trap;
Thompson sampling's regret growth against log T; recovery after change points; per-system
tables of replayed logs (cost, regret, AURC next to a random score).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dyna.experiment.kinds.escalation.config import cost_unit
from dyna.experiment.kinds.escalation.metrics import fit_log_growth, recovery_steps
from dyna.experiment.kinds.escalation.plots import over_systems, slug, stat_options
from dyna.experiment.reporting import (ci, fmt, label, md_table, plots_section, short_hash,
                                       write_report_file)
from dyna.experiment.stats import paired_diff_ci, per_run_ci

if TYPE_CHECKING:  # pragma: no cover
    from dyna.experiment.protocol import ExperimentOutput

__all__ = ["build_report", "write_report"]


# =========================================================================== report

def _per_task(frame: pl.DataFrame, col: str) -> np.ndarray:
    return (frame.get_column(col) / frame.get_column("steps")).to_numpy()


def _run_means(frame: pl.DataFrame, col: str) -> np.ndarray:
    """``col`` per task, one value per run index: the mean over the frame's systems.

    The unit of every interval of this report. A run index draws a fresh, independent task
    order for every system (and policy randomness), so these means are independent across
    runs; the (system, run) rows are not: a replayed system's tasks are the same in every
    run, and an order-free policy such as always-escalate costs exactly the same in all of
    them, so resampling those rows as independent samples would count each system's value
    once per run (pseudo-replication). The systems are the fixed logs replayed; the
    interval is over task orders.

    Returns
    -------
    ndarray of float64, shape (runs,)
        Ordered by run index (so two policies' arrays pair run r with run r: common
        random numbers).
    """
    per_task = frame.with_columns((pl.col(col) / pl.col("steps")).alias("_per_task"))
    return (over_systems(per_task, [], "_per_task").sort("run")
            .get_column("_per_task").to_numpy().astype(np.float64))


def _f3(x, digits: int = 3, minus: float | None = None) -> str:
    """``x`` to ``digits`` decimals, or with ``minus`` the signed difference ``x - minus``;
    "-" when a value is missing (a folder written before the type-oracle AURC existed)."""
    vals = [x] if minus is None else [x, minus]
    if any(v is None or not np.isfinite(v) for v in vals):
        return "-"
    return f"{x:.{digits}f}" if minus is None else f"{x - minus:+.{digits}f}"


def _systems_label(systems) -> str:
    return systems if isinstance(systems, str) else f"{len(systems)} listed"


def _task_list(steps: list[int]) -> str:
    """``"500, 1,000, ..., 11,500 (every 500)"`` for evenly spaced steps past four, else
    every step (the first three and the last past six)."""
    gaps = {b - a for a, b in zip(steps, steps[1:])}
    if len(steps) > 4 and len(gaps) == 1:
        return f"{steps[0]:,}, {steps[1]:,}, ..., {steps[-1]:,} (every {gaps.pop():,})"
    if len(steps) > 6:
        return ", ".join(f"{x:,}" for x in steps[:3]) + f", ..., {steps[-1]:,}"
    return ", ".join(f"{x:,}" for x in steps)


def _switch_line(out, scenario: str) -> list[str]:
    """One line under a replayed scenario: how many times its stream switches to the next
    system and after which tasks (the ``switches`` table); none without switches or
    without the table (an older folder)."""
    switches = out.tables.get("switches")
    if switches is None:
        return []
    steps = sorted({int(x) for x in switches.filter(pl.col("scenario") == scenario)
                    .get_column("step").to_list()})
    if not steps:
        return []
    n = len(steps)
    return [f"  - {n} system switch{'es' if n > 1 else ''} (dotted in the regret and "
            f"competence plots), after task{'s' if n > 1 else ''} {_task_list(steps)}"]


def _setup(out) -> list[str]:
    cfg, m = out.config, out.manifest
    lines = [f"# {cfg.name}", ""]
    if cfg.description:
        lines += [cfg.description, ""]
    lines += ["## Setup", "",
              f"- kind: escalation; config sha256 `{short_hash(m.get('config_hash'))}` (in "
              f"full in manifest.json); seed {cfg.seed}; {cfg.runs} runs per policy, cost "
              "setting, scenario and feedback mode",
              f"- risk classes: {', '.join(cfg.risk_classes)}; feedback: "
              f"{', '.join(cfg.feedback)}"]
    if cfg.costs.get("p_star"):
        grid = ", ".join(f"{p:g}" for p in cfg.costs["p_star"])
        lines.append(f"- cost-setting grid: p* in {grid} "
                     "(costs.p_star); each sets the failure cost c_escalate / (1 - p*) and the "
                     "threshold of every threshold rule that does not set its own")
    for rc, c in m.get("risk_class_costs", {}).items():
        act = " + logged API cost" if cfg.costs.get("act_cost") else ""
        lines.append(f"- costs under {rc}: escalation {c['c_escalate']:g}, failure "
                     f"{c['c_failure']:g}, attempt {c['c_act']:g}{act} (Chow p* = "
                     f"{1 - (c['c_escalate'] - c['c_act']) / c['c_failure']:.3f})")
    for sc in cfg.scenarios:
        if sc.source == "synthetic":
            prm = sc.params
            extra = ""
            if prm.get("change_at"):
                extra = "".join(f"; after task {at} the rates become {after}"
                                for at, after in zip(prm["change_at"], prm["rates_after"]))
            elif prm.get("drift_to"):
                extra = f"; linear drift to {prm['drift_to']}"
            lines.append(f"- scenario `{sc.name}`: synthetic, {prm['steps']} tasks, true rates "
                         f"{prm['rates']}{extra}; provenance probability "
                         f"{prm.get('verified_prob', 1.0):g}")
        else:
            d = m.get("data", {}).get(sc.name, {})
            lines.append(f"- scenario `{sc.name}`: replay of `{Path(d.get('path', '')).name}` "
                         f"(sha256 `{short_hash(d.get('sha256'))}`, {d.get('rows')} rows, "
                         f"{d.get('systems')} systems, {d.get('task_types')} task types), "
                         f"systems: {_systems_label(sc.params['systems'])}, "
                         f"order {sc.params['order']}")
            lines += _switch_line(out, sc.name)
    b, t = m.get("backend", {}), m.get("timing", {})
    lines.append(f"- backend {b.get('name')} ({b.get('jobs')} jobs); run time "
                 f"{t.get('run_time_s', float('nan')):.1f} s")
    lines += ["", f"Costs are in {cost_unit(cfg)} per task; regret is per task against the "
              "type oracle (knows each type's true rate) and the task oracle (knows each task's "
              "outcome). Competence error: mean over task types of |posterior mean - true "
              "rate| after the last task. Intervals: bootstrap over runs "
              f"({cfg.analysis.confidence:.0%}); where several systems are pooled, each "
              "run's mean over the systems is one sample (the systems are fixed logs; a run "
              "draws a new task order for each), so a policy whose cost does not depend on "
              "the order, such as always escalate, has no interval width."]
    if cfg.costs.get("act_cost"):
        lines[-1] += (" With logged API costs the type oracle decides each task with that "
                      "task's own logged cost (acts iff cost + (1 - p) c_failure <= "
                      "c_escalate), which a type-level oracle would know only on average; "
                      "its cost is the same for every policy, so rankings and gaps between "
                      "policies do not depend on it, only the level of the regret.")
    return lines


def _lowest(g: pl.DataFrame) -> tuple[dict, list]:
    """Mean regret per task (type oracle) per variant of one cost setting, and the
    variants within 1e-12 of the lowest."""
    per = {v: float(_per_task(s, "regret_type").mean())
           for (v,), s in g.group_by(["variant"], maintain_order=True)}
    if not per:
        return per, []
    low = min(per.values())
    return per, [v for v, r in per.items() if r <= low + 1e-12]


def _gap(out, g: pl.DataFrame, per: dict, winners: list):
    """The runner-up of one cost setting (the lowest-regret variant outside ``winners``) and
    its regret per task minus the lowest one's, paired by run (:func:`_run_means`) with a
    bootstrap interval over runs; ``(None, None)`` without a runner-up."""
    runner = next((v for v in sorted(per, key=lambda v: (per[v], v)) if v not in winners),
                  None)
    if runner is None:
        return None, None
    by = {v: _run_means(x, "regret_type") for (v,), x in g.group_by(["variant"])
          if v in (runner, winners[0])}
    if by[runner].size != by[winners[0]].size:
        return runner, None
    a = out.config.analysis
    return runner, paired_diff_ci(by[runner], by[winners[0]], confidence=a.confidence,
                                  n_resamples=a.n_resamples, seed=out.config.seed)


def _separated(iv) -> bool:
    """Whether a gap interval lies wholly above 0 (a single run: no interval, not shown)."""
    return iv is not None and np.isfinite(float(iv.low)) and float(iv.low) > 0


def _setting_means(frame: pl.DataFrame, col: str) -> np.ndarray:
    """``col`` per task, one value per run index: the mean over the frame's scenario/feedback
    settings of each setting's mean over its systems (:func:`_run_means` per setting), so a
    replay of 24 systems and a stream of one weigh the same. Returns float64, shape (runs,),
    ordered by run index."""
    per_task = frame.with_columns((pl.col(col) / pl.col("steps")).alias("_per_task"))
    per_setting = over_systems(per_task, ["scenario", "feedback"], "_per_task")
    return (per_setting.group_by("run").agg(pl.col("_per_task").mean()).sort("run")
            .get_column("_per_task").to_numpy().astype(np.float64))


def _cheapest(g: pl.DataFrame) -> tuple[list[str], dict, dict]:
    """The policies with the lowest mean cost per task in one cost setting's rows ``g``
    (:func:`_setting_means`; within 1e-12 of the lowest, in config order), and per policy
    its run means and their mean: ``(tied names, run means, means)``."""
    per = {v: _setting_means(x, "total_cost")
           for (v,), x in g.group_by(["variant"], maintain_order=True)}
    means = {v: float(np.mean(x)) for v, x in per.items()}
    low = min(means.values())
    return [v for v, m in means.items() if m <= low + 1e-12], per, means


def _cost_clause(out, g: pl.DataFrame, rules: dict) -> tuple[str, str]:
    """The cheapest policy of one cost setting's rows ``g`` (:func:`_cheapest`) with its
    interval over runs, beside the mean costs of always and never escalating:
    ``(best name, words)``, e.g. ``"`mean` 0.31 [0.3, 0.32] (always 1, never 0.9)"``;
    ``(+2 tied)`` after the name when two more policies cost the same."""
    tied, per, means = _cheapest(g)
    best = tied[0]
    words = f"`{best}`" + (f" (+{len(tied) - 1} tied)" if len(tied) > 1 else "")
    words += f" {ci(per_run_ci(per[best], **stat_options(out)))}"
    refs = []
    for rule in ("always", "never"):
        name = next((v for v in means if rules.get(v) == rule), None)
        if name is not None and name not in tied:
            refs.append(f"{rule} {fmt(means[name])}")
    return best, words + (f" ({', '.join(refs)})" if refs else "")


#: Longest headline line (characters) the packing aims for.
HEADLINE_CHARS = 160


def _pack(parts: list[str], max_lines: int) -> list[str]:
    """``parts`` as bullet lines: one a line when there are at most ``max_lines``, else
    joined by "; " into lines of at most :data:`HEADLINE_CHARS` characters (a part longer
    than that stands alone), or, when that takes more than ``max_lines`` lines, into
    ``max_lines`` lines of equal part counts."""
    if len(parts) <= max_lines:
        return [f"- {part}." for part in parts]
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(part) + 5 <= HEADLINE_CHARS:
            lines[-1] += "; " + part
        else:
            lines.append(part)
    if len(lines) > max_lines:
        per = math.ceil(len(parts) / max_lines)
        lines = ["; ".join(parts[k:k + per]) for k in range(0, len(parts), per)]
    return [f"- {line}." for line in lines]


def _headline(out) -> list[str]:
    """At most five short lines: what was run and where its plot is; per cost setting the
    cheapest policy (mean cost per task over the scenario/feedback settings) with its
    interval over runs, beside always and never escalating. Ties, wins of always escalating
    and unseparated winners are in the body (:func:`_winners_detail`)."""
    cfg = out.config
    runs = out.tables["runs"]
    n_pts = runs.select(["scenario", "feedback"]).unique().height
    grid = cfg.costs.get("p_star")
    what = (f"{len(cfg.settings())} cost settings (p* {grid[0]:g} to {grid[-1]:g})" if grid
            else f"{len(cfg.risk_classes)} risk classes")
    scenarios = list(dict.fromkeys(runs["scenario"].to_list()))
    if grid:
        stem = slug(scenarios[0]) if len(scenarios) == 1 else "<scenario>"
        plot = f"cost against p*: `plots/cost_grid_{stem}.png`"
    elif n_pts == 1:
        plot = (f"regret over tasks: `plots/regret_{slug(scenarios[0])}_"
                f"{runs['feedback'][0]}.png`")
    else:
        plot = "regret over tasks: `plots/regret_<scenario>_<feedback>.png`"
    points = f"{n_pts} scenario/feedback setting{'s' if n_pts > 1 else ''}"
    lines = ["## Headline", "",
             f"- {len(cfg.variants)} policies x {what} x {points} x {cfg.runs} runs; {plot}."]
    rules = {v.name: v.rule for v in cfg.variants}
    parts = [f"{st}: {_cost_clause(out, g, rules)[1]}"
             for (st,), g in runs.group_by(["cost_setting"], maintain_order=True)]
    over = f"mean of {n_pts} scenario/feedback settings, " if n_pts > 1 else ""
    parts[0] = (f"lowest cost per task ({over}{cfg.analysis.confidence:.0%} CI over runs) "
                f"at {parts[0]}")
    return lines + _pack(parts, 4) + [""]


def _winners_detail(out) -> list[str]:
    """The headline's detail, opening the per-setting section: the policies tied for the
    lowest cost per cost setting, in how many scenario/feedback/cost settings always
    escalating is (tied) best, and every setting whose lowest regret is not separated from
    the runner-up's."""
    cfg = out.config
    runs = out.tables["runs"]
    rules = {v.name: v.rule for v in cfg.variants}
    ties = []
    for (st,), g in runs.group_by(["cost_setting"], maintain_order=True):
        tied = _cheapest(g)[0]
        if len(tied) > 1:
            ties.append(f"{st}: {', '.join(f'`{v}`' for v in tied)}")
    always_wins, close, total = 0, [], 0
    for (sc, fb, st), g in runs.group_by(["scenario", "feedback", "cost_setting"],
                                         maintain_order=True):
        per, winners = _lowest(g)
        runner, gap = _gap(out, g, per, winners)
        if runner is not None and not _separated(gap):
            close.append(f"{sc}/{fb}/{st}")
        total += 1
        always_wins += any(rules.get(w) == "always" for w in winners)
    return [f"- Tied for the headline's lowest cost per task: {'; '.join(ties) or 'none'}.",
            f"- Always escalating is (tied) best in {always_wins} of {total} "
            "scenario/feedback/cost settings.",
            "- The lowest regret is not separated from the runner-up's (paired "
            f"{cfg.analysis.confidence:.0%} interval of the gap reaches 0) in: "
            f"{', '.join(close) or 'none'}.", ""]


def _per_setting(out) -> list[str]:
    """Per scenario and feedback mode, a row per cost setting: the policy with the lowest
    regret, the runner-up, and where "always escalate" stands."""
    cfg = out.config
    runs = out.tables["runs"]
    rules = {v.name: v.rule for v in cfg.variants}
    always = [v.name for v in cfg.variants if v.rule == "always"]
    lines = ["", "## Lowest regret per cost setting", "",
             "Mean regret per task against the type oracle (common random numbers: every "
             "policy sees the same tasks), pooled over systems and runs; a policy within "
             "1e-12 of the lowest is tied. A cost setting's p* is the threshold of the "
             "threshold rules and sets the failure cost c_escalate / (1 - p*), so the type "
             "oracle acts on a type iff its rate is >= p* (ties act) when attempts cost "
             "nothing. \"always\" is the always-escalate policy; its rank is among all "
             f"{len(cfg.variants)} policies (1 = lowest regret)."
             + (" Under censored feedback a threshold rule whose prior statistic sits below "
                "p*, or one that waits for counted outcomes (min_episodes > 0), never acts "
                "(the censoring trap, below), so it ties with always escalate exactly."
                if "censored" in cfg.feedback else "")
             + " The gap column is the runner-up's regret per task minus the lowest one's, "
             "paired by run (common random numbers) and averaged over systems per run, with "
             f"its {cfg.analysis.confidence:.0%} bootstrap interval over runs: an interval "
             "that reaches 0 does not separate the two.", ""] + _winners_detail(out)
    for (scenario, feedback), g in runs.group_by(["scenario", "feedback"], maintain_order=True):
        rows, wins = [], []
        for (st,), s in g.group_by(["cost_setting"], maintain_order=True):
            per, winners = _lowest(s)
            runner, gap = _gap(out, s, per, winners)
            row = [st, f"{float(s['p_star'][0]):g}", ", ".join(f"`{w}`" for w in winners),
                   fmt(per[winners[0]]),
                   f"`{runner}` ({fmt(per[runner])})" if runner else "-",
                   "-" if gap is None else ci(gap)]
            if always:
                a = always[0]
                rank = 1 + sum(per[v] < per[a] - 1e-12 for v in per)
                won = any(rules.get(w) == "always" for w in winners)
                row += [fmt(per[a]), str(rank), "yes" if won else "no"]
                if won:
                    wins.append(st)
            rows.append(row)
        lines += [f"### {scenario}, {feedback} feedback", ""]
        header = ["cost setting", "p*", "lowest regret", "regret/task", "runner-up",
                  "gap: runner-up - lowest [paired CI]"]
        if always:
            header += ["always: regret/task", "always: rank", "always escalate wins"]
        lines += md_table(header, rows)
        if always:
            lines += ["", "\"Always escalate\" wins (is tied) best at: "
                      + (", ".join(wins) if wins else "no cost setting") + "."]
        lines.append("")
    return lines


def _cost_tables(out) -> list[str]:
    """Per scenario and feedback mode, two tables: what each policy costs (cost, regrets,
    escalation and failure rates) and how well its competence estimates rank tasks (AURC
    beside the type oracle's, competence error), a row per policy and cost setting."""
    runs = out.tables["runs"]
    lines = ["", "## Cost per policy and cost setting", ""]
    opts = stat_options(out)
    for (scenario, feedback), g in runs.group_by(["scenario", "feedback"], maintain_order=True):
        pooled = " (mean over systems and runs)" if g["system"].n_unique() > 1 else ""
        lines += [f"### {scenario}, {feedback} feedback{pooled}", ""]
        cost, know = [], []
        for (variant, st), s in g.group_by(["variant", "cost_setting"], maintain_order=True):
            cost.append([variant, st, ci(per_run_ci(_run_means(s, "total_cost"), **opts)),
                         ci(per_run_ci(_run_means(s, "regret_type"), **opts)),
                         fmt(float(_per_task(s, "regret_task").mean())),
                         f"{s['escalation_rate'].mean():.3f}",
                         f"{s['failure_rate'].mean():.3f}"])
            know.append([variant, st, f"{s['aurc'].mean():.3f}",
                         _f3(s['aurc_type_oracle'].mean()),
                         f"{s['final_abs_error'].mean():.3f}"])
        lines += ["What each policy costs:", ""]
        lines += md_table(["policy", "cost setting", "cost/task", "regret/task (type oracle)",
                           "regret/task (task oracle)", "escalation rate", "failure rate"],
                          cost)
        lines += ["", "How well its competence estimates rank the tasks:", ""]
        lines += md_table(["policy", "cost setting", "AURC", "AURC of the type oracle",
                           "competence error"], know)
        lines.append("")
    return lines


def _censoring(out) -> list[str]:
    cfg = out.config
    if not {"censored", "full"} <= set(cfg.feedback):
        return []
    runs = out.tables["runs"]
    rc = cfg.settings()[0].name
    scenario = cfg.scenarios[0].name
    g = runs.filter((pl.col("scenario") == scenario) & (pl.col("cost_setting") == rc))
    lines = ["", "## The censoring trap", "",
             f"Scenario `{scenario}`, cost setting {rc}. Under censored feedback an escalated "
             "task does not reveal whether the agent would have succeeded. A rule that acts "
             "only when a statistic of the posterior reaches p* and whose prior statistic "
             "sits below p* (uniform prior: mean 0.5) escalates the first task of every "
             "type, learns nothing from it, and so escalates every later task too: it never "
             "acts and never learns. Shadow mode (full feedback) reveals the outcomes anyway "
             "and the same rule learns. Randomised exploration escapes: Thompson sampling "
             "acts with the posterior probability that acting is better, and epsilon-"
             "exploration acts on a fixed fraction of tasks.", ""]
    rows, trapped, escaped = [], [], []
    for (variant,), s in g.group_by(["variant"], maintain_order=True):
        rule = s["rule"][0]
        cen = s.filter(pl.col("feedback") == "censored")
        ful = s.filter(pl.col("feedback") == "full")
        esc_c, ev_c = cen["escalation_rate"].mean(), cen["evidence"].mean()
        rows.append([label(variant, rule), f"{esc_c:.3f}",
                     f"{ful['escalation_rate'].mean():.3f}",
                     f"{ev_c:.1f}", f"{ful['evidence'].mean():.1f}",
                     fmt(float(_per_task(cen, "regret_type").mean())),
                     fmt(float(_per_task(ful, "regret_type").mean()))])
        if rule in ("never", "always"):
            continue
        if esc_c >= 0.9995 and ev_c == 0 and ful["escalation_rate"].mean() < 0.9995:
            trapped.append(variant)
        elif ev_c > 0:
            escaped.append(variant)
    lines += md_table(["policy (rule)", "escalation rate (censored)", "escalation rate (full)",
                     "outcomes counted (censored)", "outcomes counted (full)",
                     "regret/task (censored)", "regret/task (full)"], rows)
    lines += ["", "Outcomes counted: the evidence in the posteriors after the last task, "
              "summed over task types, in tasks (decayed for discounted policies); mean over "
              "runs."]
    lines += ["", f"Trapped (never act and count no evidence under censoring, yet act under "
              f"full feedback): {', '.join(trapped) or 'none'}.",
              f"Learning under censoring: {', '.join(escaped) or 'none'}."]
    return lines


def _thompson(out) -> list[str]:
    cfg = out.config
    curves = out.tables["curves"]
    lines = []
    stationary = [s.name for s in cfg.scenarios if s.source == "synthetic"
                  and not s.params.get("change_at") and not s.params.get("drift_to")]
    thompson = [v.name for v in cfg.variants if v.rule == "thompson" and v.discount == 1.0]
    compare = [v.name for v in cfg.variants if v.rule in ("mean", "lower_bound")
               and v.discount == 1.0][:1]
    if not stationary or not thompson:
        return []

    lines += ["", "## Thompson sampling: regret against log T", "",
              "Mean cumulative pseudo-regret R(t) (expected-cost gap to the type oracle, summed "
              "over the tasks where the action differs) fitted as R = a + b ln t and as "
              "R = a + c t over the checkpoints t >= 10; `exponent` is the slope of ln R on "
              "ln t (1 for linear growth, near 0 for logarithmic).", ""]
    rows = []
    for sc in stationary:
        for name in thompson + compare:
            for rc in (st.name for st in cfg.settings()):
                for fb in cfg.feedback:
                    g = curves.filter((pl.col("scenario") == sc) & (pl.col("variant") == name)
                                      & (pl.col("cost_setting") == rc)
                                      & (pl.col("feedback") == fb))
                    m = g.group_by("step").agg(pl.col("cum_pseudo_regret").mean()).sort("step")
                    m = m.filter(pl.col("step") >= 10)
                    if m.height < 3:
                        continue
                    f = fit_log_growth(m["step"].to_numpy(), m["cum_pseudo_regret"].to_numpy())
                    growth = f["growth"] or "-"
                    if f["linear_growth"]:
                        growth = "**linear (flagged)**"
                    rows.append([sc, name, rc, fb, fmt(m["cum_pseudo_regret"][-1]),
                                 f"{f['slope_log']:.3g}", f"{f['r2_log']:.3f}",
                                 f"{f['r2_linear']:.3f}", f"{f['exponent']:.3f}", growth])
    lines += md_table(["scenario", "policy", "cost setting", "feedback",
                       f"R(T), {cost_unit(cfg)}",
                     "b (per ln t)",
                     "R² log fit", "R² linear fit", "exponent",
                     "best growth model (AIC: log, sqrt, linear)"], rows)
    return lines


def _recovery(out) -> list[str]:
    agree = out.tables.get("agreement")
    if agree is None:
        return []
    cfg = out.config

    w, tol = cfg.analysis.recovery_window, cfg.analysis.recovery_tolerance
    lines = ["", "## Recovery after change points", "",
             f"Agreement g(t): fraction of the {cfg.runs} runs whose action at task t equals "
             f"the type oracle's. Recovery: tasks after the change until the mean of g over "
             f"the next {w} tasks is back within {tol:g} of its mean over the {w} tasks "
             "before the change (\"not recovered\": not before the next change or the "
             "end).", ""]
    discount = {v.name: v.discount for v in cfg.variants}
    rows, summary = [], []
    for (variant, rc, scenario, system, feedback), g in agree.group_by(
            ["variant", "cost_setting", "scenario", "system", "feedback"], maintain_order=True):
        sc = next((s for s in cfg.scenarios if s.name == scenario), None)
        change = list(sc.params.get("change_at", [])) if sc and sc.source == "synthetic" \
            else []
        if not change:
            continue
        gv = g.sort("step")["agreement"].to_numpy()
        ends = change[1:] + [gv.size]
        rec = []
        for c, e in zip(change, ends):
            r = recovery_steps(gv, c, window=w, tolerance=tol, end=e)
            text = "not recovered" if r is None else "0 (no drop)" if r == 0 else str(r)
            rec.append(text)
            if discount.get(variant, 1.0) < 1.0:
                summary.append(f"`{variant}` ({rc}, {feedback}): "
                               + ("not recovered" if r is None else
                                  "no drop" if r == 0 else f"{r} tasks"))
        rows.append([scenario, variant, f"{discount.get(variant, 1.0):g}", rc, feedback,
                     ", ".join(rec),
                     f"{gv[max(0, change[0] - w):change[0]].mean():.3f}",
                     f"{gv[-w:].mean():.3f}"])
    if not rows:
        return []
    lines += md_table(["scenario", "policy", "discount", "cost setting", "feedback",
                     "recovery (tasks)", "agreement before", "agreement at end"], rows)
    if summary:
        lines += ["", "Discounted variants after the change: " + "; ".join(summary) + ". "
                  "Undiscounted posteriors keep the evidence of the old regime, so a "
                  "recovery there, if any, comes only from new failures outweighing old "
                  "successes (a type that turned bad); under censoring a type that turned good "
                  "while it was being escalated is never seen again by a threshold rule and "
                  "only rarely by undiscounted Thompson sampling."]
    return lines


def _replay(out) -> list[str]:
    cfg = out.config
    runs = out.tables["runs"]
    lines = []
    for sc in cfg.scenarios:
        if sc.source != "replay":
            continue
        g = runs.filter(pl.col("scenario") == sc.name)
        systems = list(dict.fromkeys(g["system"].to_list()))
        variants = [v.name for v in cfg.variants]
        for rc in (st.name for st in cfg.settings()):
            for fb in cfg.feedback:
                s = g.filter((pl.col("cost_setting") == rc) & (pl.col("feedback") == fb))
                agg = s.group_by("system", "variant", maintain_order=True).agg(
                    (pl.col("total_cost") / pl.col("steps")).mean().alias("cost"),
                    (pl.col("regret_type") / pl.col("steps")).mean().alias("regret"))
                cell = {(r["system"], r["variant"]): r for r in agg.iter_rows(named=True)}
                lines += ["", f"### `{sc.name}`: cost/task (regret/task vs type oracle) per "
                          f"system, {rc}, {fb} feedback", ""]
                rows = [[sy] + [f"{cell[(sy, v)]['cost']:.3g} ({cell[(sy, v)]['regret']:.3g})"
                                for v in variants] for sy in systems]
                lines += md_table(["system"] + variants, rows)
        # AURC of per-type competence (full feedback: every policy sees every outcome)
        fb = "full" if "full" in cfg.feedback else cfg.feedback[0]
        ref = next((v for v in cfg.variants if v.discount == 1.0), cfg.variants[0])
        s = g.filter((pl.col("feedback") == fb) & (pl.col("variant") == ref.name)
                     & (pl.col("cost_setting") == cfg.settings()[0].name))
        agg = s.group_by("system", maintain_order=True).agg(
            pl.col("aurc").mean(), pl.col("agent_failure_rate").mean(),
            pl.col("aurc_optimal").mean(), pl.col("e_aurc").mean(),
            pl.col("aurc_type_oracle").mean())
        lines += ["", f"### `{sc.name}`: AURC of per-type competence next to a random score",
                  "", f"Score: posterior mean of the task's type when the task arrives "
                  f"({fb} feedback, policy `{ref.name}`, prior {ref.prior}); loss: the "
                  "system fails the task. Tasks with equal scores (every task of a type "
                  "until its posterior moves) are averaged over all orders within the tie, "
                  "so a random (or constant) score has expected AURC equal to the failure "
                  "rate; the perfect score has the optimal AURC; E-AURC = AURC - optimal. "
                  "The type oracle's score (each type's true rate in the log) is the "
                  "baseline a per-type competence estimate can at best reach: the "
                  "remaining gap to the optimal AURC is within-type variation no per-type "
                  "score can see.", ""]
        rows = [[r["system"], f"{r['aurc']:.4f}", f"{r['agent_failure_rate']:.4f}",
                 f"{r['aurc'] - r['agent_failure_rate']:+.4f}",
                 _f3(r["aurc_type_oracle"], 4), _f3(r["aurc"], 4, minus=r["aurc_type_oracle"]),
                 f"{r['aurc_optimal']:.4f}",
                 f"{r['e_aurc']:.4f}"] for r in agg.iter_rows(named=True)]
        lines += md_table(["system", "AURC", "random score", "AURC - random",
                           "type oracle", "AURC - type oracle", "optimal", "E-AURC"], rows)
    if lines:
        lines = ["", "## Replayed outcome logs"] + lines
    return lines


def build_report(out: "ExperimentOutput", folder: str | Path | None = None) -> str:
    """The Markdown text of report.md (sections in the module docstring)."""
    setup = _setup(out)
    at = setup.index("## Setup")
    lines = (setup[:at] + _headline(out) + setup[at:] + _per_setting(out) + _cost_tables(out)
             + _censoring(out)
             + _thompson(out) + _recovery(out) + _replay(out))
    if folder is not None:
        lines += plots_section(Path(folder))
    return "\n".join(lines) + "\n"


def write_report(out: "ExperimentOutput", folder: str | Path) -> Path:
    """Write ``folder/report.md`` and return its path."""
    return write_report_file(folder, build_report(out, folder))
