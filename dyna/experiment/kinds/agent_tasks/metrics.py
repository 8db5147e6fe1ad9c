"""Kind ``agent_tasks``: per-run summary metrics and recovery after drift (numpy only)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["HYPOTHESIS_METRICS", "RUN_METRICS", "run_summaries"]

#: Columns of the ``runs`` table a declared hypothesis may test (:func:`run_summaries`).
HYPOTHESIS_METRICS = ("final_success", "success_rate", "tokens_per_success", "learning_share",
                      "final_tokens_per_run", "tokens_growth", "incidents", "escalations",
                      "poisoned_final", "poisoned_max", "stale_final", "library_final",
                      "recovery", "staged_per_1000", "approved", "rejected",
                      "late_success", "late_tokens_per_success", "incidents_per_1000",
                      "drift_calls_per_success")


#: Per-run metrics of the ``runs`` table shown in the report: column -> label.
RUN_METRICS = {
    "final_success": "final success rate",
    "tokens_per_success": "tokens per success",
    "learning_share": "learning cost share",
    "incidents": "incidents",
    "poisoned_final": "poisoned entries",
    "stale_final": "stale entries",
    "recovery": "recovery (episodes)",
    "staged_per_1000": "staged per 1,000 episodes",
    "late_success": "success rate, episodes late_from..end",
    "late_tokens_per_success": "tokens per success, last tokens_window episodes",
    "incidents_per_1000": "incidents per 1,000 episodes",
    "drift_calls_per_success": "calls per success, drifted family after the drift",
}


def _drift_calls(success: np.ndarray, steps: np.ndarray, family: np.ndarray,
                 drift_family: np.ndarray, n: int) -> float:
    """Tool calls per success on the first drifted family's next ``n`` episodes from its
    drift (the drift episode included); NaN without a drift. Without a success the calls
    count as for one success (*censored*, a lower bound of the true cost), so the worst
    runs stay in the paired comparison instead of dropping out."""
    drifts = np.flatnonzero(drift_family >= 0)
    if not drifts.size:
        return math.nan
    d = drifts[0]
    f = drift_family[d]
    idx = np.flatnonzero(family == f)
    after = idx[idx >= d][:n]
    if not after.size:
        return math.nan
    wins = float(success[after].sum())
    calls = float(steps[after].sum())
    return calls / max(wins, 1.0)


def _recovery(success: np.ndarray, family: np.ndarray, drift_family: np.ndarray,
              window: int, points: float) -> tuple[float, int, int]:
    """Mean episodes until the drifted family's success rate is back within ``points`` of
    its level before the drift; also (drifts measured, drifts recovered).

    For a drift at episode d on family f: ``pre`` is the success rate of f's last
    ``window`` episodes before d; the recovery time is the number of episodes from d to the
    first episode of f from which the next ``window`` episodes of f reach ``pre - points``.
    A drift with fewer than ``window`` episodes of f before it or after it is not measured.
    One never recovered before the next drift (or the end) is *censored*: it counts as the
    episodes from d to the next drift (or the end), a lower bound of its true recovery
    time, so the worst runs stay in the comparison instead of dropping out as NaN; the
    third return value says how many drifts did recover.
    """
    drifts = np.flatnonzero(drift_family >= 0)
    times, measured, recovered = [], 0, 0
    for j, d in enumerate(drifts):
        f = drift_family[d]
        end = drifts[j + 1] if j + 1 < len(drifts) else len(success)
        idx = np.flatnonzero(family == f)
        before = idx[idx < d][-window:]
        after = idx[(idx >= d) & (idx < end)]
        if len(before) < window or len(after) < window:
            continue
        measured += 1
        pre = success[before].mean()
        s = success[after].astype(np.float64)
        roll = np.convolve(s, np.ones(window) / window, mode="valid")
        ok = np.flatnonzero(roll >= pre - points - 1e-12)
        if ok.size:
            times.append(float(after[ok[0]] - d))
            recovered += 1
        else:
            times.append(float(end - d))
    rec = float(np.mean(times)) if times else math.nan
    return rec, measured, recovered


def run_summaries(arrays: dict, analysis: dict) -> dict[str, np.ndarray]:
    """Per-run summary metrics from a group's episode arrays (shape ``(runs, episodes)``).

    Returns
    -------
    dict of numpy.ndarray, shape (runs,)
        ``final_success`` (success rate over the last ``final_window`` episodes),
        ``success_rate`` (all episodes), ``tokens_per_success`` (run + learning +
        escalation tokens over all episodes / successes; NaN without a success),
        ``learning_share`` (learning tokens / all tokens), ``final_tokens_per_run`` (mean
        run tokens over the last ``final_window``), ``tokens_growth`` (mean run tokens of
        the last quarter minus the second quarter), ``incidents``, ``escalations``,
        ``poisoned_final``, ``poisoned_max``, ``stale_final``, ``library_final``,
        ``recovery`` (NaN when no drift was measured; a drift never recovered counts,
        censored, as the episodes to the next drift or the end), ``drifts_measured``,
        ``drifts_recovered``, and ``acted_<switch>`` for every per-episode count of
        decisions a safeguard changed (:meth:`dyna.loops.LearningLoop.safeguard_counts`),
        summed over the run; ``staged_per_1000`` (proposals staged for approval per 1,000
        episodes), ``approved`` and ``rejected`` (the simulated approver's answers);
        the agent-tasks v2 primary metrics ``late_success`` (success rate over episodes
        ``late_from`` .. end, 1-based), ``late_tokens_per_success`` (run + learning tokens
        over successes in the last ``tokens_window`` episodes; without a success, censored:
        the tokens as for one success),
        ``incidents_per_1000`` and ``drift_calls_per_success`` (:func:`_drift_calls` over
        ``drift_episodes`` episodes).
    """
    succ = arrays["success"].astype(np.float64)
    R, E = succ.shape
    w = min(int(analysis["final_window"]), E)
    tok = arrays["tokens"].astype(np.float64)
    learn = arrays["learning_tokens"].astype(np.float64)
    total = tok.sum(1) + learn.sum(1)
    n_succ = succ.sum(1)
    q = max(1, E // 4)
    out = {
        "final_success": succ[:, -w:].mean(1),
        "success_rate": succ.mean(1),
        "tokens_per_success": np.where(n_succ > 0, total / np.maximum(n_succ, 1), np.nan),
        "learning_share": np.where(total > 0, learn.sum(1) / np.maximum(total, 1), 0.0),
        "final_tokens_per_run": tok[:, -w:].mean(1),
        "tokens_growth": tok[:, -q:].mean(1) - tok[:, q:2 * q].mean(1),
        "incidents": arrays["incident"].sum(1).astype(np.int64),
        "escalations": arrays["escalated"].sum(1).astype(np.int64),
        "poisoned_final": arrays["poisoned"][:, -1].astype(np.int64),
        "poisoned_max": arrays["poisoned"].max(1).astype(np.int64),
        "stale_final": arrays["stale"][:, -1].astype(np.int64),
        "library_final": arrays["library_size"][:, -1].astype(np.int64),
    }
    rec = [_recovery(arrays["success"][r], arrays["family"][r], arrays["drift_family"][r],
                     int(analysis["recovery_window"]), float(analysis["recovery_points"]))
           for r in range(R)]
    out["recovery"] = np.array([x[0] for x in rec], dtype=np.float64)
    out["drifts_measured"] = np.array([x[1] for x in rec], dtype=np.int64)
    out["drifts_recovered"] = np.array([x[2] for x in rec], dtype=np.int64)
    for k in sorted(arrays):
        if k.startswith("acted_"):   # how often each safeguard changed a decision
            out[k] = arrays[k].sum(1).astype(np.int64)
    late = min(max(int(analysis.get("late_from", 501)), 1), E)
    out["late_success"] = succ[:, late - 1:].mean(1)
    tw = min(int(analysis.get("tokens_window", 200)), E)
    late_tok = tok[:, -tw:].sum(1) + learn[:, -tw:].sum(1)
    late_succ = succ[:, -tw:].sum(1)
    # censored like drift_calls_per_success: without a success the tokens count as for one
    # (a lower bound), so the worst runs stay in the paired comparisons
    out["late_tokens_per_success"] = late_tok / np.maximum(late_succ, 1)
    out["incidents_per_1000"] = arrays["incident"].sum(1) * 1000.0 / E
    n_drift = int(analysis.get("drift_episodes", 50))
    out["drift_calls_per_success"] = np.array(
        [_drift_calls(arrays["success"][r], arrays["steps"][r], arrays["family"][r],
                      arrays["drift_family"][r], n_drift) if "steps" in arrays else math.nan
         for r in range(R)], dtype=np.float64)
    if "acted_approval_for_untrusted" in arrays:
        out["staged_per_1000"] = arrays["acted_approval_for_untrusted"].sum(1) * 1000.0 / E
    for k in ("approved", "rejected"):   # the simulated approver's answers
        if k in arrays:
            out[k] = arrays[k].sum(1).astype(np.int64)
    return out
