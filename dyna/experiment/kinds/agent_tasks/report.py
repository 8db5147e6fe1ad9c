"""Kind ``agent_tasks``: report.md (see :func:`build_report`)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from dyna.experiment.kinds.agent_tasks.metrics import RUN_METRICS
from dyna.experiment.reporting import ci, md_table, short_hash
from dyna.experiment.stats import diff_ci, per_run_ci

__all__ = ["build_report"]


# ============================================================================ report

def _interval_text(values, opts) -> str:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return "n/a"
    m = ci(per_run_ci(v, statistic="mean", **opts))
    q = ci(per_run_ci(v, statistic="iqm", **opts))
    miss = "" if v.size == len(values) else f" (n={v.size})"
    return f"{m}; IQM {q}{miss}"


def _vals(runs: pl.DataFrame, scenario: str, variant: str, col: str) -> np.ndarray:
    return runs.filter((pl.col("scenario") == scenario) & (pl.col("variant") == variant))[
        col].to_numpy().astype(np.float64)


def _diff(runs, scenario, a, b, col, opts):
    """diff_ci of stat(a) - stat(b) over runs (NaNs dropped); None if impossible."""
    x, y = _vals(runs, scenario, a, col), _vals(runs, scenario, b, col)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if x.size < 2 or y.size < 2:
        return None
    return diff_ci(x, y, confidence=opts["confidence"], n_resamples=opts["n_resamples"],
                   seed=opts["seed"])


def _diff_text(iv) -> str:
    if iv is None:
        return "n/a"
    lo, hi = float(iv.low), float(iv.high)
    excl = (lo > 0 or hi < 0) if math.isfinite(lo) and math.isfinite(hi) else False
    return ci(iv) + (" *" if excl else "")


def _excludes_zero(iv, sign: int) -> bool:
    """The interval lies strictly on the ``sign`` side of zero."""
    if iv is None or not (math.isfinite(float(iv.low)) and math.isfinite(float(iv.high))):
        return False
    return float(iv.low) > 0 if sign > 0 else float(iv.high) < 0


def _scenario_like(names, *words):
    for n in names:
        if any(w in n for w in words):
            return n
    return None


def _hypotheses(cfg, runs: pl.DataFrame, opts) -> list[str]:
    """Each hypothesis of the issue, measured: holds / does not hold, with the numbers."""
    store = cfg.store
    loop = f"{store}_loop"
    scen = [n for n, _ in cfg.scenarios]
    have = set(cfg.variants)
    lines = ["## Hypotheses, as measured", "",
             "An interval is a 95% bootstrap interval of the difference of means over runs "
             "(first minus second); a hypothesis *holds* only when its interval excludes zero "
             "in the predicted direction. Nothing in the environment was tuned after seeing "
             "these numbers.", ""]

    def say(title, ok, detail):
        verdict = "**holds**" if ok else "**does not hold**"
        lines.append(f"- {title}: {verdict}. {detail}")

    clean = _scenario_like(scen, "clean")
    if clean and "no_learning" in have:
        learners = [v for v in cfg.variants if v not in ("no_learning", "oracle")]
        bad = []
        parts = []
        for v in learners:
            iv = _diff(runs, clean, v, "no_learning", "tokens_per_success", opts)
            parts.append(f"{v} {_diff_text(iv)}")
            if not _excludes_zero(iv, -1):
                bad.append(v)
        say(f"clean: every learning variant beats no_learning on tokens per success",
            not bad, ("failing: " + ", ".join(bad) + ". " if bad else "")
            + "Differences (variant - no_learning): " + "; ".join(parts) + ".")
        if "oracle" in have:
            bad = []
            for v in cfg.variants:
                if v == "oracle":
                    continue
                t_o = np.nanmean(_vals(runs, clean, "oracle", "tokens_per_success"))
                t_v = np.nanmean(_vals(runs, clean, v, "tokens_per_success"))
                s_o = np.nanmean(_vals(runs, clean, "oracle", "final_success"))
                s_v = np.nanmean(_vals(runs, clean, v, "final_success"))
                if t_o > t_v or s_o < s_v:
                    bad.append(v)
            say("clean: oracle bounds every variant (fewest tokens per success, highest "
                "final success rate, mean over runs)", not bad,
                ("exceeded by: " + ", ".join(bad) + "." if bad else ""))
    noisy = _scenario_like(scen, "noisy", "self_assess")
    if noisy and loop in have:
        for v in ("naive_loop", "self_reflection"):
            if v not in have:
                continue
            iv = _diff(runs, noisy, v, loop, "final_success", opts)
            pm = np.nanmean(_vals(runs, noisy, v, "poisoned_max"))
            pl_ = np.nanmean(_vals(runs, noisy, loop, "poisoned_max"))
            say(f"{noisy}: {v} succeeds less than {loop}", _excludes_zero(iv, -1),
                f"final success {v} - {loop}: {_diff_text(iv)}; wrong entries kept (max "
                f"over a run, mean over runs): {v} {pm:.3g}, {loop} {pl_:.3g}.")
    drift = _scenario_like(scen, "drift")
    abl = f"{loop}-no_retire_on_contradiction"
    if drift and loop in have and abl in have:
        iv = _diff(runs, drift, abl, loop, "recovery", opts)
        say(f"{drift}: without retire-on-contradiction recovery is slower",
            _excludes_zero(iv, +1), f"recovery episodes {abl} - {loop}: {_diff_text(iv)}.")
    volume = _scenario_like(scen, "volume")
    if volume and loop in have:
        for sw in ("novelty_check", "cap_eviction"):
            v = f"{loop}-no_{sw}"
            if v not in have:
                continue
            iv = _diff(runs, volume, v, loop, "final_tokens_per_run", opts)
            g = _vals(runs, volume, v, "tokens_growth")
            giv = per_run_ci(g, seed=opts["seed"], n_resamples=opts["n_resamples"])
            say(f"{volume}: without {sw} the tokens per run keep growing",
                _excludes_zero(iv, +1) and float(giv.low) > 0,
                f"final tokens per run {v} - {loop}: {_diff_text(iv)}; growth of {v} "
                f"(last quarter - second quarter): {_diff_text(giv)}.")
    inj = _scenario_like(scen, "inject")
    abl = f"{loop}-no_approval_for_untrusted"
    if inj and loop in have and abl in have:
        iv = _diff(runs, inj, abl, loop, "incidents", opts)
        none_full = float(np.nansum(_vals(runs, inj, loop, "incidents")))
        say(f"{inj}: without approval incidents happen, with it none do",
            _excludes_zero(iv, +1) and none_full == 0,
            f"incidents {abl} - {loop}: {_diff_text(iv)}; incidents of {loop} over all runs: "
            f"{none_full:g}.")
    return lines + [""]


def build_report(out, plots=None) -> str:
    """``report.md``: setup, a table per scenario (final success rate, tokens per success,
    learning cost share, incidents, poisoned and stale entries, recovery time: mean and IQM
    over runs with 95% bootstrap intervals), the effect of removing each safeguard (the
    ablated loop minus the full loop, 95% interval; ``*`` where it excludes zero), the
    hypotheses as measured, and the plots (``plots``: the names drawn; default all)."""

    cfg = out.config
    runs = out.tables["runs"]
    opts = {"confidence": float(cfg.analysis["confidence"]),
            "n_resamples": int(cfg.analysis["n_resamples"]), "seed": cfg.seed}
    ci_opts = dict(opts)
    lines = [f"# {cfg.name}", "", cfg.description or "", "",
             "## Setup", "",
             f"- kind `agent_tasks`; config sha256 "
             f"`{short_hash(out.manifest.get('config_hash', cfg.hash))}` (in full in "
             "manifest.json)",
             f"- store `{cfg.store}`, {cfg.runs} runs (seeds) per variant "
             f"and scenario, {cfg.episodes} episodes per run, seed {cfg.seed}",
             f"- base environment: `{cfg.env}`; policy: `{cfg.policy}`; loop: `{cfg.loop}`",
             f"- variants: {', '.join(cfg.variants)}",
             "- scenarios: " + "; ".join(f"`{n}` {kw}" for n, kw in cfg.scenarios),
             f"- final numbers over the last {cfg.analysis['final_window']} episodes; "
             "tokens per success = (run + learning + escalation tokens) / successes over the "
             "whole run; recovery = episodes after a drift until the drifted family's "
             f"success rate over {cfg.analysis['recovery_window']} of its episodes is back "
             f"within {cfg.analysis['recovery_points'] * 100:g} points of its pre-drift rate",
             ""]
    timing = out.manifest.get("timing", {})
    if timing.get("run_time_s"):
        n_ep = cfg.runs * cfg.episodes * len(cfg.variants) * len(cfg.scenarios)
        lines += [f"- {n_ep} episodes in {timing['run_time_s']:.1f} s of run time "
                  f"({n_ep / timing['run_time_s']:.0f} episodes/s)", ""]
    for s, _ in cfg.scenarios:
        lines += [f"## Scenario `{s}`", ""]
        header = ["variant"] + list(RUN_METRICS.values())
        rows = []
        for v in cfg.variants:
            rows.append([f"`{v}`"] + [_interval_text(_vals(runs, s, v, c), ci_opts)
                                      for c in RUN_METRICS])
        lines += md_table(header, rows) + [""]
        loop = f"{cfg.store}_loop"
        ablations = [v for v in cfg.variants if v.startswith(loop + "-no_")]
        if loop in cfg.variants and ablations:
            lines += [f"Effect of removing each safeguard (`{loop}-no_X` minus `{loop}`; "
                      "95% interval, `*` excludes zero):", ""]
            cols = ["final_success", "tokens_per_success", "incidents", "poisoned_final",
                    "stale_final", "recovery"]
            rows = [[f"`{v.split('-no_')[1]}`"] + [_diff_text(_diff(runs, s, v, loop, c, opts))
                                                   for c in cols] for v in ablations]
            lines += md_table(["safeguard off"] + [RUN_METRICS[c] for c in cols], rows) + [""]
    lines += _hypotheses(cfg, runs, opts)
    lines += ["## Plots", ""]
    for name in ("competence_chosen_family", "competence_all_families", "success_rate",
                 "tokens_per_success", "library_size", "poisoned_entries", "stale_entries",
                 "recovery"):
        if plots is not None and name not in plots:
            continue
        lines.append(f"- ![{name}](plots/{name}.png)")
    return "\n".join(lines) + "\n"
