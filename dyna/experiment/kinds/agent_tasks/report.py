"""Kind ``agent_tasks``: report.md (see :func:`build_report`).

It opens with what a reader needs to trust the numbers: the number of runs (a warning
below 10; below 5 no significance claims at all), the interval and test methods, the config
hash and the git commit. Then the declared hypotheses (Holm-corrected), the sections that
identify safeguard effects (:mod:`.report_effects`: interactions, survival after drift, rare
events per episode, the volume cost split, normalised aggregates, robustness), what each
safeguard did (its counts; a switch that never acted is *inert in this scenario* and its cells are
not tested), a table per scenario, the exploratory effects of removing each safeguard
(Benjamini-Hochberg over all of them), the aggregates across scenarios (rliable) and the
plots. The statistics come from :mod:`.analysis`, the headline from :mod:`.headline`. A
full safeguard ablation's headline, its table of the safeguard that matters most per
scenario (after the warnings) and its scenario tables are :mod:`.ablation_report`'s.
"""

from __future__ import annotations

import math

from dyna.experiment.kinds.agent_tasks.ablation_report import (ablation_lines,
                                                               is_full_ablation,
                                                               metric_label,
                                                               matters_section,
                                                               scenario_tables)
from dyna.experiment.kinds.agent_tasks.analysis import (EXPLORATORY_METRICS, MIN_RUNS_CLAIMS,
                                                       MIN_RUNS_NO_WARNING,
                                                       ablated_switch, aggregates, bh_marks,
                                                       evaluate_hypotheses, exploratory_cells,
                                                       inert_switches, safeguard_activity)
from dyna.experiment.kinds.agent_tasks.headline import headline, verdict_counts
from dyna.experiment.kinds.agent_tasks.report_effects import effect_sections
from dyna.experiment.reporting import ci, fmt, md_table, provenance, short_hash
from dyna.experiment.stats import AGGREGATE_METHOD, INTERVAL_METHOD

__all__ = ["COUNTED", "build_report", "report_body", "statistics_manifest"]

#: What each switch's count counts, for the activity table.
COUNTED = {
    "outcome_gate": "reviews blocked (no verified success)",
    "redaction": "digest texts redacted",
    "secret_scan": "proposals refused for a secret",
    "novelty_check": "proposals refused as not novel, or graded out by novelty",
    "grading": "proposals rejected by the grade",
    "cap_eviction": "entries evicted at the cap",
    "dating": "matches changed by dating",
    "retire_on_contradiction": "skills retired on contradiction",
    "approval_for_untrusted": "proposals staged for approval (the simulated approver answers "
                              "each after 10 episodes: approved and rejected are in the runs "
                              "table)",
    "consolidation_every": "facts merged, superseded or dropped by consolidation",
}


def statistics_manifest(cfg) -> dict:
    """The statistical methods, for ``manifest.json`` (and the report's setup)."""
    a = cfg.analysis
    return {"intervals": INTERVAL_METHOD, "aggregate_intervals": AGGREGATE_METHOD,
            "n_resamples": int(a["n_resamples"]), "confidence": float(a["confidence"]),
            "pairing": "by run index (common random numbers)",
            "test": "sign-flip randomisation test of the paired differences (exact up to 16 "
                    "runs)",
            "primary": f"Holm over the {len(cfg.hypotheses)} declared hypotheses at alpha "
                       f"{a['alpha']}; intersection-union within a hypothesis",
            "exploratory": f"Benjamini-Hochberg over all testable cells at FDR {a['fdr']}"}


def _comparison_text(c) -> str:
    if c.status == "inert":
        return "inert in this scenario"
    if c.status == "inert knob":
        return f"inert knob: no value changed across the grid ({c.n} runs)"
    if c.status == "no difference":
        return f"no difference in any run ({c.n})"
    if c.status == "too few pairs":
        return f"n/a ({c.n} pairs)"
    return ci(c.interval)


def _p(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x:.2g}" if x >= 0.001 else f"{x:.1e}"


def _warnings(cfg) -> list[str]:
    if cfg.runs < MIN_RUNS_CLAIMS:
        return [f"> **No significance claims.** {cfg.runs} run(s) per variant: a sign-flip "
                f"test over n runs cannot give p below 2^-n ({2.0 ** -cfg.runs:.3g}), so no "
                "hypothesis is tested and no cell is starred. Intervals are shown as "
                "descriptions only.", ""]
    out = []
    if cfg.runs < MIN_RUNS_NO_WARNING:
        out += [f"> **Warning: {cfg.runs} runs per variant** (fewer than "
                f"{MIN_RUNS_NO_WARNING}). Tests have little power and intervals are wide; "
                "read a hypothesis that does not hold beside its smallest detectable "
                "difference.", ""]
    m, alpha = len(cfg.hypotheses), float(cfg.analysis["alpha"])
    floor = m * 2.0 ** -cfg.runs
    if m and floor > alpha:
        out += [f"> **No declared hypothesis can hold with {cfg.runs} runs**: the smallest "
                f"Holm-adjusted p of {m} one-sided sign-flip tests is {m} x 2^-{cfg.runs} = "
                f"{floor:.3g} > alpha {alpha}.", ""]
    if 2.0 ** (1 - cfg.runs) > float(cfg.analysis["fdr"]):
        out += [f"> **No exploratory cell can be starred with {cfg.runs} runs**: the "
                f"smallest two-sided sign-flip p is 2^(1-{cfg.runs}) = "
                f"{2.0 ** (1 - cfg.runs):.3g}.", ""]
    return out


def _setup(cfg, out) -> list[str]:
    m = out.manifest
    where = provenance(m)
    lines = ["## Setup", "",
             f"- kind `agent_tasks`; config sha256 "
             f"`{short_hash(m.get('config_hash', cfg.hash))}` (in full in manifest.json); "
             f"{where}",
             f"- store `{cfg.store}`, {cfg.runs} runs (seeds) per variant and scenario, "
             f"{cfg.episodes} episodes per run, seed {cfg.seed}; run r of every variant "
             "meets the same tasks and draws the same random numbers (common random numbers)",
             f"- base environment: `{cfg.env}`; policy: `{cfg.policy}`; loop: `{cfg.loop}`",
             f"- variants: {', '.join(cfg.variants)}",
             "- scenarios: " + "; ".join(f"`{n}` {kw}" for n, kw in cfg.scenarios),
             f"- final numbers over the last {min(int(cfg.analysis['final_window']), cfg.episodes)}"
             " episodes; "
             "tokens per success = (run + learning + escalation tokens) / successes over the "
             "whole run; recovery = episodes after a drift until the drifted family's "
             f"success rate over {cfg.analysis['recovery_window']} of its episodes is back "
             f"within {cfg.analysis['recovery_points'] * 100:g} points of its pre-drift rate "
             "(a drift never recovered counts, censored, as the episodes to the next drift or "
             "the end; one whose pre-drift rate is within those points of 0 has nothing to "
             "recover from and is not measured)",
             f"- intervals: {INTERVAL_METHOD}, {cfg.analysis['n_resamples']} resamples, "
             f"{float(cfg.analysis['confidence']):.0%}; differences are paired by run; "
             "p-values from the sign-flip test of the paired differences (exact up to 16 runs)",
             ""]
    timing = m.get("timing", {})
    if timing.get("run_time_s"):
        n_ep = cfg.runs * cfg.episodes * len(cfg.variants) * len(cfg.scenarios)
        lines += [f"- {n_ep} episodes in {timing['run_time_s']:.1f} s of run time "
                  f"({n_ep / timing['run_time_s']:.0f} episodes/s)", ""]
    return lines


def _hypotheses_section(cfg, results) -> list[str]:
    a = cfg.analysis
    m = len(results)
    lines = ["## Primary hypotheses", ""]
    if not results:
        return lines + ["None declared (`[[hypotheses]]` in the experiment file); every "
                        "comparison below is exploratory.", ""]
    lines += [f"Declared in the experiment file before it ran. Each predicts the sign of "
              "the mean paired difference (first minus second) in one scenario; one with "
              "several comparisons holds only if every one does (its p is the largest). "
              f"Holm's correction over the {m} at alpha = {a['alpha']}. The smallest "
              f"detectable difference is the mean difference a one-sided paired test at "
              f"level {a['alpha']}/{m} would find with 80% power, so *does not hold* "
              "next to a large one means the runs could not have told.", ""]
    rows = []
    claims = cfg.runs >= MIN_RUNS_CLAIMS
    for r in results:
        w = r.weakest
        rows.append([r.hypothesis.name, f"**{r.verdict}**", _p(r.p) if claims else "-",
                     _p(r.p_holm) if claims else "-",
                     f"{w.variant} - {w.versus}, {w.metric}" if w else "",
                     _comparison_text(w) if w else "",
                     fmt(w.d_z) if w and w.tested else "",
                     fmt(w.mdd) if w and w.tested else ""])
    lines += md_table(["hypothesis", "verdict", "p (IUT)", "p (Holm)", "weakest comparison",
                       "mean difference [95% CI]", "d_z", "smallest detectable"], rows)
    lines += [""]
    for r in results:
        if len(r.comparisons) <= 1:
            continue
        lines += [f"<details><summary>{r.hypothesis.name}: all {len(r.comparisons)} "
                  "comparisons</summary>", ""]
        lines += md_table(["first - second", "metric", "predicted", "mean difference",
                           "p (one-sided)"],
                          [[f"{c.variant} - {c.versus}", c.metric, c.direction,
                            _comparison_text(c), _p(c.p) if c.tested and claims else ""]
                           for c in r.comparisons])
        lines += ["", "</details>", ""]
    return lines


def _ablation_headline(cfg, runs, results, cells) -> list[str]:
    """A full ablation's headline: what was run with the primary hypotheses' verdicts on
    one line, then :func:`.ablation_report.ablation_lines` (at most five lines)."""
    said = (f"primary hypotheses ({len(results)}, Holm): {verdict_counts(results)}" if results
            else "no primary hypotheses declared")
    return ["## Headline", "",
            f"- {len(cfg.variants)} variants x {len(cfg.scenarios)} scenarios x {cfg.runs} "
            f"runs x {cfg.episodes} episodes, {cfg.store} store; {said}.",
            *ablation_lines(cfg, runs, cells), ""]


def _checks_section(cfg, checked) -> list[str]:
    """The manipulation-check table, recomputed from this run's tables (a calibrated
    experiment's first section; :mod:`.checks`)."""
    from dyna.experiment.calibration_stats import checks_table

    if checked is None:
        return []
    conf = float(cfg.analysis["confidence"])
    return (["## Manipulation checks", "", _run_status(cfg), "",
             f"Declared with the hypotheses before the pilot and recomputed here from these "
             f"{cfg.runs} runs (base seed {cfg.seed}): the mean over runs of each check's "
             f"per-run measure with its {conf:.0%} interval (Wilson for 0/1 measures, "
             "percentile bootstrap otherwise), passing when it lies within the threshold. "
             "A hypothesis is *not testable* when one of its checks or a required one "
             f"({', '.join(cfg.calibration.required) or 'none'}) fails, never *does not "
             "hold*; one that does not hold is reported as *no effect as large as its "
             "smallest effect of interest* when the equivalence test (TOST: the "
             "1 - 2 alpha t-interval of every comparison's paired difference inside "
             "(-smallest effect, +smallest effect), alpha the family's over the number of "
             "hypotheses) passes.", ""]
            + checks_table(checked, conf) + [""])


def _run_status(cfg) -> str:
    """What kind of run of a calibrated file this is: confirmatory (frozen file, its
    confirmatory or replication seed) or not, said in bold when not."""
    cal = cfg.calibration
    seeds = {cal.confirmatory_seed: "confirmatory", cal.replication_seed: "replication",
             cal.pilot_seed: "pilot"}
    kind = seeds.get(cfg.seed, "undeclared")
    if cal.frozen is None:
        return (f"**Not a confirmatory run: the file is not frozen** (seed {cfg.seed}, "
                f"the {kind} seed); its verdicts are exploratory.")
    if kind not in ("confirmatory", "replication"):
        return (f"**Not a confirmatory run: seed {cfg.seed} is the file's {kind} seed**; "
                "its verdicts are exploratory.")
    return (f"The {kind} run of the file frozen at commit `{cal.frozen.commit[:12]}` "
            f"(sha256 `{cal.frozen.sha256[:12]}`).")


def _crossover_section(cfg, runs) -> list[str]:
    """The crossover map: the headline of a severity-sweep experiment."""
    from dyna.experiment.kinds.agent_tasks.analysis import crossover_map
    if not getattr(cfg, "sweeps", ()):
        return []
    lines = ["## Crossover map", ""]
    cmap = crossover_map(cfg, runs)
    if not cmap:
        return lines + ["Needs the variants `naive_loop` and `no_learning`.", ""]
    conf = int(round(float(cfg.analysis["confidence"]) * 100))
    lines += [f"Per failure mode (severity sweep), the first severity at which the naive "
              f"loop is worse than no learning on the sweep's primary metric: by its "
              f"paired mean difference, and with the whole {conf}% interval on the worse "
              "side; at the latter, the single safeguards (`naive_loop+<switch>`) that "
              "restore the benefit, best first (the rule is under the table). Exploratory "
              "(no correction); the primary hypotheses above carry the claims.", ""]
    rows = []
    for cx in cmap:
        sw = next(x for x in cfg.sweeps if x.name == cx.sweep)
        gaps = "; ".join(f"{v}: {_comparison_text(c)}" for (_, v), c in
                         zip(sw.points(), cx.points))
        rest = ", ".join(f"`{g}` {_comparison_text_iv(iv)}" for g, iv in cx.restores) \
            if cx.restores else ("" if cx.at is None else "needs the `oracle` variant"
                                 if cx.oracle_gap is None else "none of the variants run")
        rows.append([f"`{cx.sweep}`", f"`{sw.knob}`", f"{cx.metric} ({sw.better} is better)",
                     "never" if cx.estimate_at is None else str(cx.estimate_at),
                     "never" if cx.at is None else str(cx.at), rest, gaps])
    lines += md_table(["failure mode", "knob", "metric", "worse from (mean)",
                       f"worse from ({conf}% CI)", "single safeguard restoring it",
                       "naive - no learning per grid point"], rows)
    lines += ["", "Rule: `naive_loop+X` restores the benefit where the naive loop is worse "
              f"(whole {conf}% CI) when both hold there: it is not worse than no learning "
              f"(its {conf}% interval against no learning does not lie wholly on the worse "
              "side), and its mean paired gain over no learning is at least half of the "
              "oracle's (`oracle - no_learning`, same policy with perfect entries). A "
              "safeguard that merely stops learning meets the first and not the second.",
              "", "![crossover](plots/crossover.png)", ""]
    return lines + _baselines_on_map(cfg, runs, cmap, conf)


def _baselines_on_map(cfg, runs, cmap, conf: int) -> list[str]:
    """The literature baselines on the crossover map (nothing without a baseline)."""
    from dyna.experiment.kinds.agent_tasks.analysis import baseline_crossovers
    rows = []
    for lc in baseline_crossovers(cfg, runs, cmap):
        sw = next(x for x in cfg.sweeps if x.name == lc.sweep)
        gaps = "; ".join(f"{v}: {_comparison_text(c)}" for (_, v), c in
                         zip(sw.points(), lc.points))
        restores = {None: "", True: "yes", False: "no"}[lc.restores]
        rows.append([f"`{lc.sweep}`", f"`{lc.variant}`",
                     "never" if lc.estimate_at is None else str(lc.estimate_at),
                     "never" if lc.at is None else str(lc.at),
                     "" if lc.gain is None else _comparison_text_iv(lc.gain), restores, gaps])
    if not rows:
        return []
    return ["### The literature baselines on the map", "",
            "Each baseline against no learning on every sweep: the first severity at which "
            f"it is worse (by its mean, and with the whole {conf}% interval on the worse "
            "side), and, where the naive loop is worse (whole interval), its paired gain "
            "over no learning there and whether it restores the benefit by the rule above. "
            "Exploratory (no correction).", "",
            *md_table(["failure mode", "baseline", "worse from (mean)",
                       f"worse from ({conf}% CI)", "gain where the naive loop is worse",
                       "restores the benefit", "baseline - no learning per grid point"],
                      rows), ""]


def _comparison_text_iv(iv) -> str:
    return f"{fmt(float(iv.estimate))} [{fmt(float(iv.low))}, {fmt(float(iv.high))}]"


def _activity_section(cfg, runs) -> list[str]:
    act = safeguard_activity(cfg, runs)
    if not act:
        return []
    scen = [s for s, _ in cfg.scenarios]
    lines = ["## What each safeguard did", "",
             f"How often each safeguard of `{cfg.store}_loop` changed a decision (a verdict "
             "other than the one the loop would reach in the same state with that switch "
             "off), total over runs (min-max per run). A switch that never acted in a "
             "scenario is *inert* there: with common random numbers its ablation is the "
             "same runs as the full loop, so its cells are not tested.", ""]
    rows = []
    for sw, per in act.items():
        cells = []
        for s in scen:
            tot, lo, hi = per.get(s, (0, 0, 0))
            cells.append("inert in this scenario" if tot == 0 else f"{tot} ({lo}-{hi})")
        rows.append([f"`{sw}`", COUNTED.get(sw, "")] + cells)
    lines += md_table(["safeguard", "counts"] + [f"`{s}`" for s in scen], rows)
    return lines + [""]


def _exploratory_section(cfg, runs, cells) -> list[str]:
    loop = f"{cfg.store}_loop"
    if not cells:
        return []
    q = bh_marks(cells, float(cfg.analysis["fdr"]), cfg.runs)
    n_tested = sum(c.tested for c in cells)
    n_star = sum(1 for i, v in q.items() if v <= float(cfg.analysis["fdr"]))
    lines = ["## Effect of removing each safeguard (exploratory)", "",
             f"`{loop}-no_X` minus `{loop}`, paired by run: mean difference [95% CI]. Every "
             f"cell is exploratory: of {len(cells)} cells, {n_tested} could be tested "
             f"(the others are inert or equal in every run); `*` marks the {n_star} whose "
             f"two-sided sign-flip p survives Benjamini-Hochberg control at FDR "
             f"{cfg.analysis['fdr']} over those {n_tested}"
             + ("" if cfg.runs >= MIN_RUNS_CLAIMS else " (none: too few runs)") + ".", ""]
    by_s: dict = {}
    for i, c in enumerate(cells):
        by_s.setdefault(c.scenario, {}).setdefault(c.variant, {})[c.metric] = (i, c)
    for s, per in by_s.items():
        lines += [f"`{s}`:", ""]
        rows, inert = [], []
        for v, mets in per.items():
            if all(c.status == "inert" for _, c in mets.values()):
                inert.append(f"`{ablated_switch(v, cfg.store)}`")
                continue
            row = [f"`{ablated_switch(v, cfg.store)}`"]
            for met in EXPLORATORY_METRICS:
                if met not in mets:
                    row.append("(primary)")
                    continue
                i, c = mets[met]
                text = _comparison_text(c)
                if i in q and q[i] <= float(cfg.analysis["fdr"]):
                    text += " *"
                row.append(text)
            rows.append(row)
        if rows:
            lines += md_table(["safeguard off"] + [metric_label(cfg, m) for m in
                                                   EXPLORATORY_METRICS], rows) + [""]
        if inert:
            lines += [f"Inert in this scenario (never acted; not tested): {', '.join(inert)}.",
                      ""]
    return lines


def _aggregate_section(cfg, runs) -> list[str]:
    agg = aggregates(cfg, runs)
    if not agg["iqm"]:
        return []
    lines = ["## Across scenarios (rliable)", "",
             f"Final success rate pooled over the {len(cfg.scenarios)} scenarios x "
             f"{cfg.runs} runs, as Agarwal et al. (NeurIPS 2021) report aggregates: the "
             "interquartile mean, and the probability of improvement P(full loop > loop "
             f"without the safeguard) per scenario averaged (0.5: no tendency). Intervals: "
             f"{AGGREGATE_METHOD}, {agg['n_resamples']} resamples. P(X > Y) compares runs "
             "unpaired, as rliable defines it.", ""]
    lines += md_table(["variant", "IQM of final success [95% CI]"],
                      [[f"`{v}`", ci(iv)] for v, iv in agg["iqm"].items()]) + [""]
    if agg["poi"]:
        inert = inert_switches(runs, cfg.store)
        every = set.intersection(*inert.values()) if inert else set()
        lines += md_table(["safeguard", f"P({cfg.store}_loop > without it) [95% CI]"],
                          [[f"`{sw}`", "inert in every scenario" if sw in every else ci(iv)]
                           for sw, iv in agg["poi"].items()]) + [""]
    lines += ["Performance profiles (fraction of runs above each final success rate, "
              "over all scenarios): `plots/performance_profiles.png`.", ""]
    return lines


def build_report(out, plots=None, body: list[str] | None = None) -> str:
    """``report.md`` of an agent-tasks experiment (sections in the module docstring).

    Parameters
    ----------
    out : ExperimentOutput
    plots : list of str, optional
        Stems of the plots drawn (default: link every standard plot).
    body : list of str, optional
        :func:`report_body` of ``out``, computed already (the kind computes it while its
        figures are drawn by other processes).
    """
    cfg = out.config
    lines = list(report_body(out) if body is None else body)
    stems = [f"scenario_{s}" for s, _ in cfg.scenarios] + ["performance_profiles",
                                                           "recovery"]
    for name in stems:
        if plots is not None and name not in plots:
            continue
        lines.append(f"- ![{name}](plots/{name}.png)")
    return "\n".join(lines) + "\n"


def report_body(out) -> list[str]:
    """The lines of ``report.md`` up to the list of plots: every statistic of the report
    (the part that takes time), independent of which plots were drawn."""
    cfg = out.config
    runs = out.tables["runs"]
    opts = {"confidence": float(cfg.analysis["confidence"]),
            "n_resamples": int(cfg.analysis["n_resamples"]), "seed": cfg.seed}
    results = evaluate_hypotheses(cfg, runs)
    checked = None
    if getattr(cfg, "calibration", None) is not None:
        from dyna.experiment.kinds.agent_tasks.checks import (calibrated_hypotheses,
                                                              check_results)
        checked = check_results(cfg, out.tables)
        results = calibrated_hypotheses(cfg, out.tables, results, checked)
    primary = {(c.scenario, c.variant, c.versus, c.metric)
               for r in results for c in r.comparisons}
    lines = [f"# {cfg.name}", "", cfg.description or "", ""]
    ablation = is_full_ablation(cfg)
    if ablation:   # every cell, the primary ones too: the headline names the largest
        every = exploratory_cells(cfg, runs)
        cells = [c for c in every if (c.scenario, c.variant, c.versus, c.metric)
                 not in primary]
        lines += _ablation_headline(cfg, runs, results, every)
    else:
        cells = exploratory_cells(cfg, runs, primary)
        lines += headline(cfg, runs, results, checked)
    lines += _checks_section(cfg, checked)
    lines += _warnings(cfg)
    lines += matters_section(cfg, runs, every) if ablation else []
    lines += _setup(cfg, out)
    lines += _crossover_section(cfg, runs)
    lines += _hypotheses_section(cfg, results)
    lines += effect_sections(cfg, out.tables)
    lines += _activity_section(cfg, runs)
    lines += scenario_tables(cfg, runs, opts)
    lines += _exploratory_section(cfg, runs, cells)
    lines += _aggregate_section(cfg, runs)
    lines += ["## Plots", "",
              "Bands of success, tokens and poisoned entries are 95% bootstrap confidence "
              "intervals across runs of the plotted per-episode quantity. The competence "
              "rows are Beta posteriors of each run's own, verified, outcomes under an "
              "empirical-Bayes prior (its mean the run's pooled success rate, its strength "
              "2 runs): the arrival-weighted competence over the families seen so far and "
              f"family {int(cfg.analysis['chosen_family'])}'s, each with its 95% credible "
              "interval (averaged over runs) and, dashed, the true rolling success.", ""]
    return lines
