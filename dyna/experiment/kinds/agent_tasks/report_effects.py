"""Kind ``agent_tasks``: the sections of ``report.md`` that identify safeguard effects.

After the declared hypotheses: the agent-tasks v3 metrics per scenario, each safeguard's
effect added to the naive loop and removed from the full loop with their interaction
(:mod:`.interactions`), recovery after drift as survival (:mod:`.survival`), rare events
per episode (:mod:`.rare_events`), the volume cost split (:mod:`.volume`), the aggregate
over scenarios on the normalised score (:mod:`.aggregate`) and the exploratory robustness
table (:mod:`.robustness`). Each section is left out when the experiment has nothing for
it. Nothing here computes a statistic of its own; it renders those modules' results.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from dyna.experiment.kinds.agent_tasks.ablation_report import metric_label
from dyna.experiment.kinds.agent_tasks.aggregate import normalised_aggregates
from dyna.experiment.kinds.agent_tasks.analysis import (MIN_RUNS_CLAIMS, base_scenarios,
                                                       values)
from dyna.experiment.kinds.agent_tasks.interactions import interactions
from dyna.experiment.kinds.agent_tasks.metrics import V3_METRICS, harmful_stored_source
from dyna.experiment.kinds.agent_tasks.rare_events import gee_odds_ratio, rare_event_pairs
from dyna.experiment.kinds.agent_tasks.robustness import ODDS_SCALED, robustness_rows
from dyna.experiment.kinds.agent_tasks.survival import (drift_scenarios, kaplan_meier,
                                                       logrank_by_run, survival_at,
                                                       survival_pairs)
from dyna.experiment.kinds.agent_tasks.volume import ratio_of_sums_ci, volume_scenarios
from dyna.experiment.reporting import ci, fmt, md_table
from dyna.experiment.stats import AGGREGATE_METHOD, per_run_ci

__all__ = ["effect_sections"]

#: Times (episodes after the drift) at which the Kaplan-Meier curves are tabulated.
KM_TIMES = (25, 50, 100, 200, 400)


def _p(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x:.2g}" if x >= 0.001 else f"{x:.1e}"


def _opts(cfg) -> dict:
    a = cfg.analysis
    return {"confidence": float(a["confidence"]), "n_resamples": int(a["n_resamples"]),
            "seed": cfg.seed}


def _mean_ci(x: np.ndarray, opts: dict) -> str:
    x = x[np.isfinite(x)]
    return ci(per_run_ci(x, **opts)) if x.size else "n/a"


def _comparison(c) -> str:
    """A comparison's mean difference [CI], or why it has none."""
    if c.status == "tested" or (c.status == "no difference" and c.interval is not None):
        return ci(c.interval)
    return {"inert": "inert", "too few pairs": f"n/a ({c.n} pairs)"}.get(c.status, c.status)


def _metrics_section(cfg, runs: pl.DataFrame, episodes: pl.DataFrame | None) -> list[str]:
    opts = _opts(cfg)
    blocks = []
    for s in base_scenarios(cfg):
        cols = [m for m in V3_METRICS if m in runs.columns and any(
            np.isfinite(values(runs, s, v, m)).any() for v in cfg.variants)]
        if not cols:
            continue
        rows = [[f"`{v}`"] + [_mean_ci(values(runs, s, v, m), opts) for m in cols]
                for v in cfg.variants]
        names = [metric_label(cfg, m) for m in cols]
        blocks += [f"`{s}`:", ""] + md_table(["variant"] + names, rows) + [""]
    if not blocks:
        return []
    source = harmful_stored_source(episodes.columns) if episodes is not None else None
    said = {None: "no episode field records it (the column is n/a)",
            "harmful_entries (max)": "the store's count of harmful entries, its maximum "
                                     "over the run",
            "harmful_proposed (sum)": "the proposals that carried a harmful call, summed "
                                      "over the run: an upper bound, every one counted as "
                                      "stored (no episode field records the store's "
                                      "harmful entries)"}[source]
    return ["## Agent tasks v3 metrics", "",
            "Mean over runs [95% CI] of the per-run metrics (metrics.py): the drifted "
            "family's success over its next 100 arrivals from the drift on (fewer when the "
            "run ends first: `drift_arrivals` in the runs table), poisoned-entry follows, "
            "incidents split into lesson-mediated and direct obedience to the last tool "
            "output (the floor no learning safeguard can touch), and, over the last "
            f"{min(int(cfg.analysis['tokens_window']), cfg.episodes)} episodes, catalog and "
            "context tokens per "
            "episode and the precision@k of injected entries. Harmful entries stored: "
            f"{said}.", ""] + blocks


def _interaction_section(cfg, runs: pl.DataFrame) -> list[str]:
    res = interactions(cfg, runs)
    if not res:
        return []
    loop = f"{cfg.store}_loop"
    rows = [[f"`{r.switch}`", f"`{r.scenario}`", r.metric, _comparison(r.added),
             _comparison(r.removed), _comparison(r.interaction),
             _p(r.interaction.p) if r.interaction.tested and cfg.runs >= MIN_RUNS_CLAIMS
             else "-"]
            for r in res]
    return ["## Each safeguard added and removed, and their interaction", "",
            f"Per safeguard X, scenario and primary metric: X added to the naive loop "
            f"(`naive_loop+X - naive_loop`) and X removed from the full loop (`{loop} - "
            f"{loop}-no_X`), each a mean paired difference [95% CI], and the interaction, "
            "the second minus the first per run (0 when X does the same alone and with "
            "the other safeguards), with its two-sided sign-flip p. Exploratory: no "
            "correction.", ""] + md_table(
        ["safeguard", "scenario", "metric", "added to naive loop", "removed from full loop",
         "interaction (removed - added)", "p"], rows) + [""]


def _survival_section(cfg, runs: pl.DataFrame) -> list[str]:
    scen = drift_scenarios(cfg, runs)
    if not scen:
        return []
    conf = float(cfg.analysis["confidence"])
    w = cfg.analysis["recovery_window"]
    lines = ["## Time to a streak of successes after drift (survival)", "",
             f"Time to a streak: episodes from the drift until the drifted family's first "
             f"streak of {w} successful arrivals, counting both ends; a run that ends first "
             "is censored at its end. (A stricter measure than the scenario tables' "
             "recovery, which asks only that the family's success rate come back within "
             f"{cfg.analysis['recovery_points'] * 100:g} points of its pre-drift rate.) "
             "Per variant the Kaplan-Meier estimate S(t) of not "
             f"having had such a streak t episodes after the drift, and the median with its "
             f"{conf:.0%} interval (n/a: not reached); between two variants the log-rank "
             "test stratified by run (each stratum the pair of runs that share their tasks "
             "and drift), two-sided.", ""]
    for s in scen:
        kms = [k for k in (kaplan_meier(runs, s, v, confidence=conf) for v in cfg.variants)
               if k is not None]
        horizon = max((float(np.nanmax(values(runs, s, v, "recovery_time")))
                       for v in cfg.variants
                       if np.isfinite(values(runs, s, v, "recovery_time")).any()),
                      default=0.0)
        times = [t for t in KM_TIMES if t <= horizon]
        rows = [[f"`{k.variant}`", k.n, k.events,
                 f"{fmt(k.median)} [{fmt(k.median_low)}, {fmt(k.median_high)}]"]
                + [fmt(survival_at(k, t)) for t in times] for k in kms]
        lines += [f"`{s}`:", ""] + md_table(
            ["variant", "runs with a drift", "reached a streak", "median episodes [CI]"]
            + [f"S({t})" for t in times], rows) + [""]
        tests = [logrank_by_run(runs, s, v, vs) for v, vs in survival_pairs(cfg, s)]
        if tests:
            lines += md_table(["first vs second", "strata (runs)", "streaks reached",
                               "log-rank chi2", "p"],
                              [[f"{t.variant} vs {t.versus}", t.strata,
                                f"{t.events[0]} vs {t.events[1]}", fmt(t.chisq), _p(t.p)]
                               for t in tests]) + [""]
    return lines


def _rare_events_section(cfg, out_tables: dict) -> list[str]:
    pairs = rare_event_pairs(cfg)
    episodes = out_tables.get("episodes")
    if not pairs or episodes is None:
        return []
    conf = float(cfg.analysis["confidence"])
    rows = []
    for s, v, w, ev in pairs:
        r = gee_odds_ratio(episodes, s, v, w, ev, confidence=conf)
        text = {"fitted": f"{fmt(r.odds_ratio)} [{fmt(r.low)}, {fmt(r.high)}]",
                "no events": "no events", "missing": "not recorded",
                "one variant only": "events in one variant only",
                "no interval": f"{fmt(r.odds_ratio)} (no interval: robust variance not "
                               "positive)"}[r.status]
        rows.append([f"`{s}`", f"`{ev}`", f"{v} vs {w}",
                     f"{fmt(r.per_1000[0])} vs {fmt(r.per_1000[1])}",
                     f"{r.events[0]} vs {r.events[1]}", text, _p(r.p), r.clusters])
    return ["## Rare events per episode (GEE)", "",
            "For each hypothesis comparison on incidents or poisoned follows: beside the "
            "run-level means (events per 1,000 episodes, averaged over runs), a logistic "
            "model of the per-episode event (the field above 0) on the variant, fitted by "
            "GEE (statsmodels; Binomial, logit link) clustered by run index (run r of both "
            "variants one cluster: they share tasks and random numbers), independence "
            "working correlation with the robust (sandwich) standard error: the odds ratio "
            f"(first against second; above 1, more likely under the first) with its "
            f"{conf:.0%} Wald interval and two-sided p.", ""] + md_table(
        ["scenario", "event", "first vs second", "per 1,000 episodes (run means)",
         "episodes with the event", "odds ratio [CI]", "p", "clusters"], rows) + [""]


def _volume_section(cfg, runs: pl.DataFrame) -> list[str]:
    scen = volume_scenarios(cfg, runs)
    if not scen:
        return []
    opts = _opts(cfg)
    tw = min(int(cfg.analysis["tokens_window"]), cfg.episodes)
    lines = ["## Volume: the cost split", "",
             f"Over the last {tw} episodes, mean over runs [95% CI] of catalog tokens per "
             "episode (the stored entries listed), context tokens per episode (the entries "
             "injected) and precision@k (injected entries about the task's family / "
             "injected entries), and tokens per success as a ratio of sums over runs "
             "(run + learning tokens of all runs / their successes) with a percentile "
             "bootstrap interval that resamples runs (inf: a resample without a "
             "success).", ""]
    for s in scen:
        rows = []
        for v in cfg.variants:
            tps = ratio_of_sums_ci(values(runs, s, v, "late_tokens"),
                                   values(runs, s, v, "late_successes"), **opts)
            est = float(tps.estimate)
            tps_text = ("n/a (no success)" if not math.isfinite(est) else
                        f"{fmt(est)} [{fmt(tps.low)}, "
                        f"{'inf' if math.isinf(float(tps.high)) else fmt(tps.high)}]")
            rows.append([f"`{v}`"] + [_mean_ci(values(runs, s, v, m), opts) for m in
                                      ("catalog_tokens_per_episode",
                                       "context_tokens_per_episode", "precision_at_k",
                                       "library_final")] + [tps_text])
        lines += [f"`{s}`:", ""] + md_table(
            ["variant", "catalog tokens / episode", "context tokens / episode",
             "precision@k", "library size at the end", "tokens per success (ratio of sums)"],
            rows) + [""]
    return lines


def _normalised_section(cfg, runs: pl.DataFrame) -> list[str]:
    agg = normalised_aggregates(cfg, runs)
    if not agg:
        return []
    rows = [[f"`{g.variant}`", g.scenarios, ci(g.iqm), ci(g.poi)] for g in agg]
    return ["## Across scenarios, normalised (no learning 0, oracle 1)", "",
            "Each scenario's score (its first primary metric: the sweep's metric, else the "
            "first hypothesis metric on it, else late success) normalised as (x - mean of "
            "no learning) / (mean of the oracle - mean of no learning) in that scenario, "
            "then pooled over scenarios x runs (robustness copies left out; a scenario "
            "whose two references are equal cannot be normalised and is left out): the "
            "interquartile mean, and the probability of improvement over no learning "
            "(P(X > Y) + P(X = Y) / 2 per scenario over all pairs of runs, averaged over "
            f"scenarios; 0.5: no tendency), as rliable defines them. Intervals: "
            f"{AGGREGATE_METHOD}, {cfg.analysis['n_resamples']} resamples.", ""] + md_table(
        ["variant", "scenarios pooled", "IQM of the normalised score [95% CI]",
         "P(better than no learning) [95% CI]"], rows) + [""]


def _robustness_section(cfg, runs: pl.DataFrame) -> list[str]:
    rows = robustness_rows(cfg, runs)
    if not rows:
        return []
    claims = cfg.runs >= MIN_RUNS_CLAIMS
    table = []
    for h, copy, c, base in rows:
        how = "odds x" if copy.param in ODDS_SCALED else "x"
        table.append([h.name, f"{c.variant} - {c.versus}, {c.metric}",
                      f"`{copy.param}` {how}{copy.factor:g} = {fmt(copy.value)}",
                      _comparison(base), _comparison(c),
                      _p(c.p) if c.tested and claims else "-"])
    return ["## Robustness to the policy (exploratory)", "",
            "**Exploratory.** Each primary comparison re-run in a copy of its scenario with "
            "one policy parameter scaled (a probability on the odds scale, p / (1 - p) "
            "times the factor; other numbers multiplied), beside the base scenario: mean "
            "paired difference [95% CI] and the one-sided sign-flip p toward the "
            "hypothesis's direction, uncorrected. No claim rests on this table.", ""
            ] + md_table(["hypothesis", "comparison", "policy", "base scenario",
                          "scaled", "p (one-sided, uncorrected)"], table) + [""]


def effect_sections(cfg, tables: dict) -> list[str]:
    """The lines of the report's safeguard-effect sections (module docstring), in order.

    Parameters
    ----------
    cfg : AgentTasksConfig
    tables : dict of polars.DataFrame
        The experiment's ``runs`` and (for the per-episode models) ``episodes`` tables.
    """
    runs = tables["runs"]
    lines = _metrics_section(cfg, runs, tables.get("episodes"))
    lines += _interaction_section(cfg, runs)
    lines += _survival_section(cfg, runs)
    lines += _rare_events_section(cfg, tables)
    lines += _volume_section(cfg, runs)
    lines += _normalised_section(cfg, runs)
    lines += _robustness_section(cfg, runs)
    return lines
