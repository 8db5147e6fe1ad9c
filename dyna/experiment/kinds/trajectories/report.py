"""Kind ``trajectories``: ``report.md``."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dyna.experiment.reporting import fmt, md_table, plots_section, short_hash
from dyna.experiment.stats import per_run_ci

__all__ = ["build_report"]

_PAIRS = (("skill_loop", "skill_loop-no_redaction"), ("memory_loop", "memory_loop-no_redaction"))
_GATES = (("skill_loop", "skill_loop-no_outcome_gate"),
          ("memory_loop", "memory_loop-no_outcome_gate"))


def _means(runs: pl.DataFrame) -> dict[str, dict]:
    cols = [c for c in runs.columns if c not in ("variant", "learner", "run")]
    frame = runs.group_by("variant", maintain_order=True).agg(
        [pl.col(c).mean() for c in cols] + [pl.col("learner").first()])
    return {r["variant"]: r for r in frame.iter_rows(named=True)}


def _n(x) -> str:
    """A count or a mean of counts: a whole number as one ("692", not "692.0" beside
    "74"), else :func:`fmt`."""
    if x is None:
        return "n/a"
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**53 else fmt(x)


def _ci(row) -> str:
    if row is None:
        return "n/a"
    return f"{fmt(row['mean'])} [{fmt(row['low'])}, {fmt(row['high'])}]"


def build_report(out, folder: Path) -> str:
    """The report: headline, data, personal data, the outcome gate, what each variant
    wrote, the baselines, the importer's store, workflow induction, plots."""
    cfg, man = out.config, out.manifest
    runs, induction = out.tables["runs"], out.tables["induction"]
    summary = out.tables["induction_summary"]
    data = man.get("data", {})
    m = _means(runs)
    loops = [v for v in m if m[v]["learner"] == "loop"]
    baselines = [v for v in m if m[v]["learner"] == "baseline"]
    summ = {(r["predictor"], r["metric"]): r for r in summary.iter_rows(named=True)}
    lines = [f"# {cfg.name}", ""]
    model = None
    if "llm_reviews" in out.tables:
        from dyna.experiment.kinds.trajectories.report_llm import llm_headline
        model = llm_headline(cfg, out)
    lines += _headline(cfg, data, runs, m, loops, baselines, summ, model)
    lines += _setup(cfg, man, data)
    lines += _personal_data(runs, m, loops)
    lines += _outcome_gate(m)
    lines += _loop_variants(cfg, runs, m, loops)
    lines += _baselines(m, baselines)
    lines += _store_episodes(out)
    lines += _induction(cfg, induction, summary, summ)
    if "llm_reviews" in out.tables:
        from dyna.experiment.kinds.trajectories.report_llm import llm_section
        lines += llm_section(cfg, out)
    lines += plots_section(Path(folder))
    return "\n".join(lines) + "\n"


def _headline(cfg, data: dict, runs: pl.DataFrame, m: dict, loops: list, baselines: list,
              summ: dict, model: list[str] | None = None) -> list[str]:
    """The headline, at most five short lines: what was replayed, what a model reviewer
    wrote (``model``, its own lines), personal values reaching the reviewer and the store
    files, lessons from failed runs, workflow induction. Means per replay carry intervals
    over the reviewer seeds (runs) where there are two or more; induction's intervals are
    over the held-out tasks."""
    R = runs.get_column("run").n_unique()
    pct = f"{int(cfg.analysis['confidence'] * 100)}%"
    through = _plural(len(loops), "loop variant") + (
        f" and {_plural(len(baselines), 'baseline')}" if baselines else "")
    seeds = (f"mean per replay [{pct} CI over {R} reviewer seeds]" if R >= 2
             else "1 reviewer seed: no interval over seeds")
    head = [f"- Replayed {data.get('runs', '?')} recorded runs ({data.get('tasks', '?')} tasks "
            f"x {_plural(data.get('trials', '?'), 'trial')}, {data.get('successes', '?')} "
            f"rewarded 1) through {through}; {seeds}."]
    head += model or []

    def pair(col: str, on: str, off: str) -> str:
        return f"{on} {_seed_ci(cfg, runs, on, col)} vs {_seed_ci(cfg, runs, off, col)}"

    pairs = [(on, off) for on, off in _PAIRS if on in m and off in m]
    if pairs:
        stores = [m[v]["pd_store"] for p in pairs for v in p]
        store = (f"0 in the {len(stores)} stores" if not any(stores) else
                 f"NOT 0 in {sum(x > 0 for x in stores)} of the {len(stores)} stores")
        head.append("- Personal values to the reviewer, redaction on vs off: "
                    + ", ".join(pair("pd_reviewer", *p) for p in pairs) + f"; {store}.")
    gates = [(on, off) for on, off in _GATES if on in m and off in m]
    if gates:
        head.append("- Lessons from failed runs, outcome gate on vs off: "
                    + ", ".join(pair("lessons_from_failed", *p) for p in gates) + ".")
    n = summ[("induced", "recall")]["n_tasks"] if ("induced", "recall") in summ else None
    if n == 0:
        head.append("- Workflow induction: no held-out task scored (section \"Workflow "
                    "induction\" says why).")
    elif n is not None:
        head.append(f"- Workflow induction on {n} held-out tasks: recall "
                    f"{_ci(summ[('induced', 'recall')])}, precision "
                    f"{_ci(summ[('induced', 'precision')])} ({pct} CI over tasks).")
        head.append("- The type's most frequent ground-truth sequence: recall "
                    f"{_ci(summ.get(('mode_ground_truth', 'recall')))}, precision "
                    f"{_ci(summ.get(('mode_ground_truth', 'precision')))}.")
    return ["## Headline", ""] + head[:5] + [""]


def _plural(k, noun: str) -> str:
    """``"1 trial"``, ``"4 trials"`` (``k`` may be ``"?"``)."""
    return f"{k} {noun}{'' if k == 1 else 's'}"


def _seed_ci(cfg, runs: pl.DataFrame, variant: str, col: str) -> str:
    """``col``'s mean over the runs (reviewer seeds) of ``variant``, with its bootstrap
    interval (:func:`dyna.experiment.stats.per_run_ci`, ``[analysis]`` confidence and
    resamples) where there are two or more runs: ``"94.5 [93, 96]"``, ``"0"`` for one run."""
    values = runs.filter(pl.col("variant") == variant).sort("run").get_column(col).to_numpy()
    iv = per_run_ci(values, confidence=cfg.analysis["confidence"],
                    n_resamples=cfg.analysis["n_resamples"], seed=cfg.seed)
    if iv.n < 2:
        return _n(iv.estimate)
    return f"{_n(iv.estimate)} [{_n(iv.low)}, {_n(iv.high)}]"


def _setup(cfg, man: dict, data: dict) -> list[str]:
    """The setup: the data file, task types, personal values, the replay, redaction."""
    lines: list[str] = []
    lines += ["## Setup", "",
              f"- Data: `{Path(data.get('path', cfg.data)).name}`, sha256 "
              f"`{short_hash(data.get('sha256'))}`, {data.get('tool_calls', '?')} tool calls; "
              f"token counts recorded: {data.get('tokens_recorded', 0)} (tau-bench logs "
              "carry none, so learning cost is the reviewer's "
              + ("simulated tokens only)." if getattr(cfg, "llm", None) is None else
                 "tokens only: the model's prompt and completion tokens)."),
              "- Task types (first state-changing tool of the ground truth; tasks): "
              + ", ".join(f"{k} {v}" for k, v in data.get("task_types", {}).items()) + ".",
              "- Personal values harvested by field from the structured tool outputs: "
              + ", ".join(f"{k} {v}" for k, v in data.get("personal_values", {}).items())
              + " (distinct values over all runs).",
              "- Replay: trial by trial (all tasks of trial 0, then trial 1, ...). The runs are "
              "not re-acted: what a variant injects does not change a recorded run, so the "
              "tables say what each variant *would have written*. Reviewer: "
              + _reviewer_text(cfg) + ".",
              f"- Digest redaction: the redactor's keys plus "
              f"{', '.join(cfg.digest['extra_sensitive_keys']) or 'nothing'}; the tool calls are "
              f"{'declared trusted' if cfg.digest['tools_trusted'] else 'untrusted'} "
              f"(`[digest] tools_trusted = {str(cfg.digest['tools_trusted']).lower()}`). "
              f"Config hash "
              f"`{short_hash(man.get('config_hash'))}`.", ""]
    return lines


def _reviewer_text(cfg) -> str:
    """The reviewer, as the setup names it."""
    llm = getattr(cfg, "llm", None)
    if llm is not None:
        first = getattr(cfg, "first_runs", None)
        return (f"the model `{llm['model']}` (section \"The model reviewer\")"
                + (f"; only the first {first} recorded runs in replay order" if first
                   else ""))
    return "rule-based, " + ", ".join(f"{k} = {v}" for k, v in cfg.reviewer.items())


def _personal_data(runs: pl.DataFrame, m: dict, loops: list) -> list[str]:
    """Personal values per loop variant, and each redaction pair's verdict."""
    lines: list[str] = []
    cats = [c.removeprefix("pd_store_") for c in runs.columns if c.startswith("pd_store_")]
    lines += ["## Personal data", "",
              "Counts are distinct (run, value) pairs for the reviewer and distinct values for "
              "the store files (every file under the library folder and MEMORY.md: SKILL.md "
              "files, retired skills, staged proposals, history logs), mean per run. "
              "`safety net` counts the always-on redaction of the stores (catches per "
              "write).", ""]
    rows = []
    for v in loops:
        r = m[v]
        rows.append([v, _n(r["pd_digest"]), _n(r["pd_proposals"]), _n(r["pd_reviewer"]),
                     _n(r["pd_store"]),
                     ", ".join(f"{c} {_n(r.get('pd_store_' + c))}" for c in cats
                               if r.get("pd_store_" + c)) or "-",
                     _n(r["safety_net_catches"])])
    lines += md_table(["variant", "in digests", "in proposals", "reached the reviewer",
                       "in store files", "store, by category", "safety net"], rows) + [""]
    for on, off in _PAIRS:
        if on in m and off in m:
            ok_on = m[on]["pd_reviewer"] == 0
            ok_off = m[off]["pd_reviewer"] > 0
            store0 = m[on]["pd_store"] == 0 and m[off]["pd_store"] == 0
            if store0:
                store = "0 in both"
            else:
                missed = ", ".join(f"{c} {_n(m[off].get('pd_store_' + c))}" for c in cats
                                   if m[off].get("pd_store_" + c))
                store = (f"NOT 0: {_n(m[on]['pd_store'])} with redaction, "
                         f"{_n(m[off]['pd_store'])} without ({missed or '-'}), values the "
                         "stores' always-on safety net "
                         f"({_n(m[off]['safety_net_catches'])} catches) did not redact")
            lines.append(
                f"- {on}: reviewer {'0 with redaction' if ok_on else 'NOT 0 with redaction'}"
                f", {'> 0' if ok_off else '0 (the measurement is vacuous)'} without; store "
                f"files {store}.")
    lines.append("")
    return lines


def _outcome_gate(m: dict) -> list[str]:
    """The outcome gate's variants and the naive loop: reviews blocked, lessons from
    failed runs."""
    lines: list[str] = []
    lines += ["## The outcome gate and lessons from failed runs", ""]
    rows = []
    for on, off in _GATES:
        for v in (on, off):
            if v in m:
                rows.append([v, _n(m[v]["reviews"]), _n(m[v]["acted_outcome_gate"]),
                             _n(m[v]["lessons_from_failed"]),
                             _n(m[v]["committed_from_failed"]), _n(m[v]["entries_end"])])
    if "naive_loop" in m:
        v = "naive_loop"
        rows.append([v, _n(m[v]["reviews"]), _n(m[v]["acted_outcome_gate"]),
                     _n(m[v]["lessons_from_failed"]), _n(m[v]["committed_from_failed"]),
                     _n(m[v]["entries_end"])])
    lines += md_table(["variant", "reviews", "reviews the gate blocked",
                       "lessons from failed runs (committed + staged)",
                       "committed from failed runs", "entries at the end"], rows) + [""]
    return lines


def _loop_variants(cfg, runs: pl.DataFrame, m: dict, loops: list) -> list[str]:
    """What each loop variant wrote, and the safeguards that never acted."""
    lines: list[str] = []
    lines += ["## What each loop variant wrote", "",
              "Mean per run. `near-dup` = pairs of stored lessons with content-word Jaccard "
              f">= {cfg.analysis['near_duplicate']}.", ""]
    rows = [[v, _n(m[v]["reviews"]), _n(m[v]["proposals"]), _n(m[v]["committed"]),
             _n(m[v]["staged"]), _n(m[v]["invalid"]), _n(m[v]["rejected"]),
             _n(m[v]["lessons_from_failed"]), _n(m[v]["near_duplicates"]),
             _n(m[v]["skills_end"]), _n(m[v]["facts_end"]), _n(m[v]["pending_end"]),
             _n(m[v]["learning_tokens"])] for v in loops]
    lines += md_table(["variant", "reviews", "proposals", "committed", "staged", "invalid",
                       "rejected", "from failed", "near-dup", "skills", "facts", "pending",
                       "learning tokens"], rows) + [""]
    inert = [s for s in ("outcome_gate", "redaction", "secret_scan", "novelty_check",
                         "grading", "cap_eviction", "dating", "retire_on_contradiction",
                         "approval_for_untrusted", "consolidation_every")
             if f"acted_{s}" in runs.columns
             and runs.filter(pl.col("learner") == "loop").get_column(f"acted_{s}").max() == 0]
    if inert:
        lines += [f"Safeguards that never acted in any loop run (their ablation is the same "
                  f"replay as the full loop): {', '.join(inert)}.", ""]
    return lines


def _baselines(m: dict, baselines: list) -> list[str]:
    """The literature baselines' writes and what their stores hold (empty without one)."""
    lines: list[str] = []
    if baselines:
        lines += ["## Literature baselines", "",
                  "Each baseline's own rule on the same runs (dyna/agents/baselines/), with "
                  "the reward as its judge (tau-bench records no self-assessment) and calls "
                  "kept as they were made: no redaction step, so `personal values kept` is "
                  "what their stores hold. `writes` = runs after which the entries it "
                  "stores (its `audit_entries`) changed.", ""]
        rows = [[v, _n(m[v]["committed"]), _n(m[v]["lessons_from_failed"]),
                 _n(m[v]["entries_end"]), _n(m[v]["pd_store"]),
                 _n(m[v]["learning_tokens"])] for v in baselines]
        lines += md_table(["baseline", "writes", "writes after failed runs", "entries at the end",
                           "personal values kept", "learning tokens"], rows) + [""]
    return lines


def _store_episodes(out) -> list[str]:
    """The importer's experience-store episodes (empty without the table)."""
    lines: list[str] = []
    se = out.tables.get("store_episodes")
    if se is not None:
        lines += ["## The importer's experience-store episodes", "",
                  f"{int(se.get_column('episodes')[0])} episodes recorded in an in-memory "
                  "ExperienceStore and exported; harvested values found in the export:", ""]
        lines += md_table(["category", "harvested", "in the store"],
                          [[r["category"], r["harvested"], r["in_store"]]
                           for r in se.iter_rows(named=True)]) + [""]
    return lines


def _induction(cfg, induction: pl.DataFrame, summary: pl.DataFrame, summ: dict) -> list[str]:
    """Workflow induction: the predictors' scores, tasks reported apart, scores by type."""
    lines: list[str] = []
    status = induction.group_by("status").len().sort("status")
    lines += ["## Workflow induction (leave one task out within each task type)", "",
              "Induced: the consensus of the other tasks' successful runs of the type (calls "
              "in more than half of them, arguments abstracted to their names, AWM's "
              "abstraction); baselines: the type's most frequent ground-truth sequence and "
              "its most frequent successful-run sequence. Scored against the held-out task's "
              f"ground truth; {int(cfg.analysis['confidence'] * 100)}% percentile bootstrap "
              "intervals over tasks.", "",
              "Tasks: " + ", ".join(f"{r['status']} {r['len']}"
                                    for r in status.iter_rows(named=True)) + ".", ""]
    rows = []
    for p in dict.fromkeys(summary.get_column("predictor").to_list()):
        rows.append([p] + [_ci(summ.get((p, t))) for t in ("precision", "recall", "exact")])
    lines += md_table(["predictor", "precision", "recall", "exact sequence"], rows) + [""]
    apart = induction.filter(pl.col("status") != "scored")
    if apart.height:
        lines += ["Reported apart:", ""]
        lines += md_table(["task", "type", "status", "examples", "ground-truth calls",
                           "induced calls"],
                          [[r["task_id"], r["task_type"], r["status"], r["n_examples"],
                            r["n_truth"], r["induced_len"]]
                           for r in apart.iter_rows(named=True)]) + [""]
    by_type = (induction.filter(pl.col("status") == "scored").group_by("task_type")
               .agg(pl.len().alias("tasks"), pl.col("induced_recall").mean(),
                    pl.col("mode_ground_truth_recall").mean(),
                    pl.col("induced_precision").mean(),
                    pl.col("mode_ground_truth_precision").mean())
               .sort("tasks", "task_type", descending=[True, False]))
    if by_type.height:
        lines += md_table(["type", "tasks", "recall induced", "recall mode GT",
                           "precision induced", "precision mode GT"],
                          [[r["task_type"], r["tasks"], fmt(r["induced_recall"]),
                            fmt(r["mode_ground_truth_recall"]), fmt(r["induced_precision"]),
                            fmt(r["mode_ground_truth_precision"])]
                           for r in by_type.iter_rows(named=True)]) + [""]
    return lines
