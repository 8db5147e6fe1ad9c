"""Kind ``escalation``: the tidy tables from the job results (see the package docstring)."""

from __future__ import annotations

import numpy as np
import polars as pl

from dyna.experiment.kinds.escalation.config import EscalationConfig

__all__ = ["SWITCH_SCHEMA", "build_tables", "switch_table", "with_cost_settings"]


def with_cost_settings(tables: dict, config: EscalationConfig) -> dict:
    """Tables of an output folder written before cost settings existed, completed: every
    table gets ``cost_setting`` (the risk class's name, as :meth:`EscalationConfig.settings`
    names it without a grid), ``runs`` also ``p_star`` (the class's preset) and
    ``aurc_type_oracle`` (null: not measured then). Newer tables are returned unchanged."""
    from dyna.escalation import RISK_CLASSES

    out = {}
    for name, t in tables.items():
        if "risk_class" in t.columns and "cost_setting" not in t.columns:
            t = t.with_columns(pl.col("risk_class").alias("cost_setting"))
            if name == "runs":
                t = t.with_columns(
                    pl.col("risk_class").replace_strict(
                        {k: v.p_star for k, v in RISK_CLASSES.items()},
                        return_dtype=pl.Float64).alias("p_star"),
                    pl.lit(None, dtype=pl.Float64).alias("aurc_type_oracle"))
        out[name] = t
    return out


#: Columns of the ``switches`` table (:func:`switch_table`).
SWITCH_SCHEMA = {"scenario": pl.String, "system": pl.String, "switch": pl.Int64,
                 "step": pl.Int64, "from_system": pl.String, "to_system": pl.String}


def switch_table(points: list[dict], jobs, results) -> pl.DataFrame:
    """The switches of every stream, from the jobs' ``change_at`` and ``stream_systems``.

    One row per (scenario, system, switch) in canonical order: ``switch`` counts a stream's
    switches from 1, ``step`` is the number of tasks before it (the next task comes from
    the next system, or from the new rates of a synthetic scenario; int64), ``from_system``
    and ``to_system`` name the systems of a date-ordered replay (null where the stream
    does not name them: a synthetic scenario's rate changes). ``system`` is the stream's
    name as in the other tables (``all_by_date`` for a date-ordered replay, empty for a
    synthetic scenario). Every job of a stream replays the same switches, so the first
    job of each stream gives them. A stream without switches has no row; no switches at
    all give an empty table with the columns of :data:`SWITCH_SCHEMA`.
    """
    rows, seen = [], set()
    for job, res in zip(jobs, results):
        pt = points[job.point]
        key = (pt["scenario"], pt["system"])
        if key in seen:
            continue
        seen.add(key)
        steps = [int(x) for x in res["change_at"]]
        order = list(res.get("stream_systems", []))
        named = len(order) == len(steps) + 1
        for k, step in enumerate(steps):
            rows.append({"scenario": key[0], "system": key[1], "switch": k + 1, "step": step,
                         "from_system": order[k] if named else None,
                         "to_system": order[k + 1] if named else None})
    return pl.DataFrame(rows, schema=SWITCH_SCHEMA)


def build_tables(config: EscalationConfig, points: list[dict], sc_info: dict, jobs,
                 results) -> dict[str, pl.DataFrame]:
    """Tidy tables from the job results (canonical order).

    Returns
    -------
    dict of polars.DataFrame
        ``runs``: variant, rule, risk_class, cost_setting, scenario, system, feedback,
        p_star, run, steps, total_cost, oracle_type_cost, oracle_task_cost, regret_type,
        regret_task, pseudo_regret, escalation_rate, failure_rate, agent_failure_rate,
        evidence, agreement, aurc, aurc_optimal, aurc_type_oracle, e_aurc,
        final_abs_error. ``cost_setting`` names the :class:`CostSetting` (the risk class
        without a ``costs.p_star`` grid) and ``p_star`` is its threshold;
        ``aurc_type_oracle`` is the AURC of the type oracle's score (the true rate of the task's
        type), the baseline a learnt competence can at best approach. Costs are totals over the
        run's ``steps`` tasks; rates are per task (``failure_rate``: failed attempts,
        ``agent_failure_rate``: tasks the agent would fail); ``evidence`` is the counted
        evidence at the end, summed over types (decayed for discounted variants);
        ``agreement`` the fraction of tasks where the action equals the type oracle's;
        ``final_abs_error`` the mean over types of |posterior mean - true rate| at the end.
        ``curves``: ids + step, cum_cost, cum_regret_type, cum_regret_task,
        cum_pseudo_regret, cum_escalations, abs_error.
        ``risk_coverage``: ids + coverage, risk.
        Every table's ids include ``cost_setting`` after ``risk_class``.
        ``agreement``: variant, risk_class, scenario, system, feedback, step, agreement
        (fraction of runs), only for streams with change points.
        ``competence``: variant, risk_class, scenario, system, feedback, step, task_type,
        a, b, mean, lower, upper (95% equal-tailed), rate (run 0 of the competence variant).
        ``switches``: scenario, system, switch, step, from_system, to_system
        (:func:`switch_table`; empty, with its columns, when no stream switches).
    """
    from dyna.competence import beta_interval

    groups = config.groups()
    runs_f, curves_f, rc_f, agree_f, comp_f = [], [], [], [], []
    slots: dict[tuple, list] = {}
    for job, res in zip(jobs, results):
        slots.setdefault((job.variant, job.point), []).append((job, res))
    for (g, pi), parts in slots.items():
        variant, st = groups[g]
        pt = points[pi]
        ids = {"variant": variant.name, "rule": variant.rule, "risk_class": st.risk_class,
               "cost_setting": st.name,
               "scenario": pt["scenario"], "system": pt["system"],
               "feedback": pt["feedback"]}

        def cat(name):
            return np.concatenate([r[name] for _, r in parts], axis=0)

        run_idx = np.concatenate([np.asarray(j.run_indices, dtype=np.int64)
                                  for j, _ in parts])
        R = run_idx.size
        steps = cat("steps").astype(np.float64)
        idcols = {k: pl.Series(k, [v] * R, dtype=pl.String) for k, v in ids.items()}
        runs_f.append(pl.DataFrame({
            **idcols, "p_star": np.full(R, st.p_star), "run": run_idx, "steps": cat("steps"),
            "total_cost": cat("total_cost"), "oracle_type_cost": cat("oracle_type_cost"),
            "oracle_task_cost": cat("oracle_task_cost"),
            "regret_type": cat("total_cost") - cat("oracle_type_cost"),
            "regret_task": cat("total_cost") - cat("oracle_task_cost"),
            "pseudo_regret": cat("pseudo_regret"),
            "escalation_rate": cat("escalations") / steps,
            "failure_rate": cat("failures") / steps,
            "agent_failure_rate": cat("agent_failures") / steps,
            "evidence": cat("evidence"), "agreement": cat("agreement"),
            "aurc": cat("aurc"), "aurc_optimal": cat("aurc_optimal"),
            "aurc_type_oracle": cat("aurc_type_oracle"),
            "e_aurc": cat("aurc") - cat("aurc_optimal"),
            "final_abs_error": cat("final_abs_error"),
        }))
        ck = parts[0][1]["checkpoints"]
        C = ck.size
        cid = {k: pl.Series(k, [v] * (R * C), dtype=pl.String) for k, v in ids.items()}
        curves_f.append(pl.DataFrame({
            **cid, "run": np.repeat(run_idx, C), "step": np.tile(ck, R),
            **{name: cat(name).ravel() for name in
               ("cum_cost", "cum_regret_type", "cum_regret_task", "cum_pseudo_regret",
                "cum_escalations", "abs_error")}}))
        grid = parts[0][1]["coverage"]
        Gn = grid.size
        gid = {k: pl.Series(k, [v] * (R * Gn), dtype=pl.String) for k, v in ids.items()}
        rc_f.append(pl.DataFrame({**gid, "run": np.repeat(run_idx, Gn),
                                  "coverage": np.tile(grid, R), "risk": cat("risk").ravel()}))
        change = parts[0][1]["change_at"]
        if change.size:
            total = np.sum([r["agreement_sum"] for _, r in parts], axis=0)
            T = total.size
            aid = {k: pl.Series(k, [v] * T, dtype=pl.String) for k, v in ids.items()
                   if k != "rule"}
            agree_f.append(pl.DataFrame({**aid, "step": np.arange(1, T + 1, dtype=np.int64),
                                         "agreement": total / config.runs}))
        comp = next((r["competence"] for _, r in parts if "competence" in r), None)
        if comp is not None:
            names = sc_info[pt["scenario"]]["type_names"]
            K = len(names)
            a, b = comp["a"].ravel(), comp["b"].ravel()
            lo, hi = beta_interval(a, b, 0.95)
            n = C * K
            kid = {k: pl.Series(k, [v] * n, dtype=pl.String) for k, v in ids.items()
                   if k != "rule"}
            comp_f.append(pl.DataFrame({
                **kid, "step": np.repeat(ck, K), "task_type": np.tile(names, C),
                "a": a, "b": b, "mean": a / (a + b), "lower": lo, "upper": hi,
                "rate": comp["rate"].ravel()}))
    tables = {"runs": pl.concat(runs_f), "curves": pl.concat(curves_f),
              "risk_coverage": pl.concat(rc_f)}
    if agree_f:
        tables["agreement"] = pl.concat(agree_f)
    if comp_f:
        tables["competence"] = pl.concat(comp_f)
    tables["switches"] = switch_table(points, jobs, results)
    return tables
