"""Simulation against reality: the ``tau_airline`` preset of ``dyna/AgentTasks-v2`` beside
the 200 GPT-4o tau-bench airline runs it is matched to.

Both sides give the same statistics, each with a 95% percentile bootstrap interval that
resamples the data's independent units: tasks for the real runs (50 tasks, 4 trials each),
runs for the simulation (one seed of the no-learning variant each):

* ``overall success``: the share of runs rewarded (real: 84 of 200);
* ``success, <type>``: per task type with at least :data:`MIN_TYPE_RUNS` runs (real:
  ``no_change`` 57/80, ``update_reservation_flights`` 11/44, ``cancel_reservation`` 9/40);
  the simulation's family ``i`` is the ``i``-th most frequent type (the preset's order);
* ``calls per run, mean`` and ``calls per run, median``;
* ``error share``: calls that returned an error over all calls (real: 73 of 1,164), a ratio
  of sums.

A statistic *matches* when the simulation's value lies inside the real data's interval.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

__all__ = ["MIN_TYPE_RUNS", "TAU_TYPES", "compare", "real_units", "sim_units"]

#: Task types with at least this many runs have their success matched.
MIN_TYPE_RUNS = 40
#: The tau-bench airline task types, most frequent first: the ``tau_airline`` preset's
#: families 0..6.
TAU_TYPES = ("no_change", "update_reservation_flights", "cancel_reservation",
             "book_reservation", "send_certificate", "update_reservation_baggages",
             "update_reservation_passengers")
#: The real runs, shipped with the project (licence beside them).
DATA = Path(__file__).resolve().parents[4] / "data" / "agent_trajectories" / \
    "taubench_airline_gpt4o_trajectories.json"


def real_units(path: str | Path = DATA) -> list[dict]:
    """The real runs grouped by task: one dict per task with numpy arrays ``type`` (str),
    ``success`` (bool), ``calls`` and ``errors`` (int64), one entry per trial.

    Raises
    ------
    dyna.loops.trajectories.TrajectoryError
        The file is missing or malformed.
    """
    from dyna.loops.trajectories import load_trajectories

    by_task: dict[int, list] = {}
    for run in load_trajectories(path):
        by_task.setdefault(run.task_id, []).append(run)
    return [{"type": np.array([r.task_type for r in runs]),
             "success": np.array([r.reward > 0 for r in runs]),
             "calls": np.array([len(r.tool_calls) for r in runs], dtype=np.int64),
             "errors": np.array([sum(bool(c["error"]) for c in r.tool_calls) for r in runs],
                                dtype=np.int64)}
            for _, runs in sorted(by_task.items())]


def sim_units(episodes: pl.DataFrame) -> list[dict]:
    """The simulated episodes grouped by run (the ``episodes`` table of one variant in one
    scenario: columns ``run``, ``family``, ``success``, ``steps``, ``errors``), as
    :func:`real_units` gives the real ones; family ``i`` is named ``TAU_TYPES[i]``."""
    units = []
    for part in episodes.sort("run", "episode").partition_by("run", maintain_order=True):
        units.append({"type": np.array(TAU_TYPES, dtype=object)[part["family"].to_numpy()],
                      "success": part["success"].to_numpy(),
                      "calls": part["steps"].to_numpy(),
                      "errors": part["errors"].to_numpy()})
    return units


def _statistics() -> dict[str, Callable[[dict], float]]:
    """Name -> function of the pooled arrays of a set of units."""
    stats = {"overall success": lambda d: float(d["success"].mean())}
    for t in TAU_TYPES[:3]:
        stats[f"success, {t}"] = (lambda d, t=t: float(d["success"][d["type"] == t].mean())
                                  if (d["type"] == t).any() else float("nan"))
    stats["calls per run, mean"] = lambda d: float(d["calls"].mean())
    stats["calls per run, median"] = lambda d: float(np.median(d["calls"]))
    stats["error share"] = lambda d: float(d["errors"].sum() / max(d["calls"].sum(), 1))
    return stats


def _pool(units: list[dict]) -> dict:
    return {k: np.concatenate([u[k] for u in units]) for k in units[0]}


def _cluster_bootstrap(units: list[dict], fn, n_resamples: int, rng) -> tuple[float, float]:
    """95% percentile interval of ``fn`` over resamples of whole units."""
    n = len(units)
    vals = []
    for _ in range(n_resamples):
        pick = rng.integers(n, size=n)
        vals.append(fn(_pool([units[i] for i in pick])))
    vals = np.asarray(vals)
    if np.isnan(vals).all():   # the statistic exists in no resample (a missing type)
        return float("nan"), float("nan")
    lo, hi = np.nanpercentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


def compare(sim: list[dict], real: list[dict] | None = None, n_resamples: int = 2000,
            seed: int = 0) -> pl.DataFrame:
    """The side-by-side table: per statistic the real value and interval, the simulated
    value and interval, and whether the simulated value lies inside the real interval.

    Parameters
    ----------
    sim : list of dict
        :func:`sim_units` of the no-learning variant's episodes.
    real : list of dict, optional
        :func:`real_units` (default: the shipped data).
    n_resamples : int
        Bootstrap resamples per interval.
    seed : int
        Seed of the bootstrap's generator (the same table for the same inputs).

    Returns
    -------
    polars.DataFrame
        Columns ``statistic``, ``real``, ``real_lo``, ``real_hi``, ``sim``, ``sim_lo``,
        ``sim_hi`` (float64) and ``match`` (bool).
    """
    real = real_units() if real is None else real
    rng = np.random.default_rng(seed)
    rows = []
    for name, fn in _statistics().items():
        r = fn(_pool(real))
        s = fn(_pool(sim))
        r_lo, r_hi = _cluster_bootstrap(real, fn, n_resamples, rng)
        s_lo, s_hi = _cluster_bootstrap(sim, fn, n_resamples, rng)
        rows.append({"statistic": name, "real": r, "real_lo": r_lo, "real_hi": r_hi,
                     "sim": s, "sim_lo": s_lo, "sim_hi": s_hi,
                     "match": bool(r_lo <= s <= r_hi)})
    return pl.DataFrame(rows)
