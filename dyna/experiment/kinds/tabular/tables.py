"""Kind ``tabular``: the tidy tables (``results``, ``runs``, ``evals``) from merged job results.

``results``
    One row per variant x sweep point x run x episode (``episodes`` schedule:
    ``variant, agent, <sweep keys>, run, episode, steps, return, terminated, updates``) or per
    logged time step (``total_steps`` schedule: ``variant, agent, <sweep keys>, run, step,
    reward, cumulative_reward``).
``evals``
    When evaluating: ``variant, agent, <sweep keys>, run, episode, score`` (no row for an
    evaluation a run did not reach because it had stopped at the optimal path).
``runs``
    One row per run: totals and, for ``stop_at_optimal``, ``updates_to_optimal`` (null if
    the run never found an optimal path).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from dyna.experiment.kinds.tabular.config import ExperimentConfig

__all__ = ["build_tables"]


# --------------------------------------------------------------------------- tables

def _id_columns(n: int, variant, point: dict, runs: np.ndarray) -> dict:
    cols = {
        "variant": pl.Series("variant", [variant.name] * n, dtype=pl.String),
        "agent": pl.Series("agent", [variant.agent] * n, dtype=pl.String),
    }
    for key, value in point.items():
        cols[key] = pl.Series(key, [value] * n)
    cols["run"] = pl.Series("run", runs, dtype=pl.Int64)
    return cols


def build_tables(config: ExperimentConfig, merged: dict) -> dict[str, pl.DataFrame]:
    """Tidy tables from merged results, in canonical row order.

    Parameters
    ----------
    config : ExperimentConfig
    merged : dict
        ``(variant index, point index) -> arrays`` as from the runner's merge step.

    Returns
    -------
    dict of polars.DataFrame
        ``"results"``, ``"runs"`` and, when evaluating, ``"evals"`` (columns in the module
        docstring).
    """
    s = config.schedule
    points = config.sweep_points()
    results, runs_rows, evals = [], [], []
    for v, variant in enumerate(config.variants):
        for p, point in enumerate(points):
            if (v, p) not in merged:   # a failed group left out of a partial output
                continue
            a = merged[(v, p)]
            R = config.runs
            run_idx = np.arange(R, dtype=np.int64)
            if s.episodes is not None:
                steps = a["episode_steps"].astype(np.int64)
                E = steps.shape[1]
                frame = pl.DataFrame({
                    **_id_columns(R * E, variant, point, np.repeat(run_idx, E)),
                    "episode": np.tile(np.arange(1, E + 1, dtype=np.int64), R),
                    "steps": steps.ravel(),
                    "return": a["episode_return"].astype(np.float64).ravel(),
                    "terminated": a["episode_terminated"].astype(bool).ravel(),
                    "updates": a["episode_updates"].astype(np.int64).ravel(),
                })
                if s.stop_at_optimal:  # episodes after a run stopped were never played
                    frame = frame.filter(pl.col("steps") > 0)
                played = steps > 0
                summary = {
                    "episodes": played.sum(axis=1).astype(np.int64),
                    "total_steps": np.where(played, steps, 0).sum(axis=1),
                    "total_return": np.where(played, a["episode_return"], 0.0).sum(axis=1),
                    "updates": a["episode_updates"].astype(np.int64).max(axis=1,
                                                                         initial=0),
                }
            else:
                rewards = a["step_reward"].astype(np.float64)
                T = rewards.shape[1]
                starts = np.arange(0, T, s.log_every)
                ends = np.minimum(starts + s.log_every, T)  # logged at step `end`
                window = np.add.reduceat(rewards, starts, axis=1)
                cum = np.cumsum(rewards, axis=1)[:, ends - 1]
                L = len(starts)
                frame = pl.DataFrame({
                    **_id_columns(R * L, variant, point, np.repeat(run_idx, L)),
                    "step": np.tile(ends.astype(np.int64), R),
                    "reward": window.ravel(),
                    "cumulative_reward": cum.ravel(),
                })
                summary = {"total_steps": np.full(R, T, dtype=np.int64),
                           "total_return": rewards.sum(axis=1)}
            results.append(frame)
            greedy = a["final_greedy_steps"].astype(np.int64)
            summary["final_greedy_steps"] = pl.Series(
                [int(g) if g >= 0 else None for g in greedy], dtype=pl.Int64)
            run_frame = pl.DataFrame({**_id_columns(R, variant, point, run_idx), **summary})
            if s.stop_at_optimal:
                uto = a["updates_to_optimal"].astype(np.int64)
                run_frame = run_frame.with_columns(
                    pl.Series("updates_to_optimal", [int(u) if u >= 0 else None for u in uto],
                              dtype=pl.Int64),
                    pl.Series("found", uto >= 0, dtype=pl.Boolean))
            runs_rows.append(run_frame)
            if s.eval_every:
                scores = a["eval_score"].astype(np.float64)
                ep = a["eval_episode"].astype(np.int64)
                K = len(ep)
                evals.append(pl.DataFrame({
                    **_id_columns(R * K, variant, point, np.repeat(run_idx, K)),
                    "episode": np.tile(ep, R),
                    "score": scores.ravel(),
                }).filter(pl.col("score").is_not_nan()))  # NaN: run had stopped (optimal)
    tables = {"results": pl.concat(results, how="vertical"),
              "runs": pl.concat(runs_rows, how="vertical")}
    if evals:
        tables["evals"] = pl.concat(evals, how="vertical")
    return tables
