"""Kind ``tabular``: the env tables and the job (a variant at a sweep point, a block of runs).

A job builds (or reuses, cached per process) the transition table of its env
(:func:`envs.make_table`) and advances all its runs at once with
:func:`dyna.agents.run_agent`; run ``r`` draws only from the stream ``(seed, r)``, so results
do not depend on how runs were split into jobs or on the backend.
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np

from dyna.errors import ConfigError, DynaError
from dyna.experiment.backends import Job, split_runs
from dyna.experiment.config import canonical_json
from dyna.experiment.kinds.tabular.config import ExperimentConfig

__all__ = ["RESULT_FIELDS", "count_real_steps", "execute_job", "make_env_table",
           "merge_results", "optimal_length", "plan_jobs"]


RESULT_FIELDS = ("episode_steps", "episode_return", "episode_terminated", "episode_updates",
                 "step_reward", "eval_score", "eval_episode", "updates_to_optimal",
                 "final_greedy_steps")


# --------------------------------------------------------------------------- environments

@functools.lru_cache(maxsize=16)
def _cached_table(env_id: str, kwargs_json: str):
    import envs

    return envs.make_table(env_id, **json.loads(kwargs_json))


def make_env_table(env_id: str, kwargs: dict):
    """``envs.make_table(env_id, **kwargs)``, cached per process.

    Returns
    -------
    (envs.tabular.TabularTable, dict)
        The table and its JSON-ready metadata.

    Raises
    ------
    UnknownEnvError, ConfigError
        From :func:`envs.make_table`; a ``TypeError`` for a wrong keyword becomes a
        ConfigError on ``env.kwargs``.
    """
    try:
        return _cached_table(env_id, canonical_json(kwargs))
    except DynaError:
        raise
    except TypeError as exc:
        raise ConfigError("env.kwargs", kwargs, str(exc)) from None


# --------------------------------------------------------------------------- jobs

def optimal_length(meta: dict, tolerance: float = 1.0, protocol: str = "dyna") -> int:
    """Greedy path length (steps) accepted as optimal: ``floor(L * tolerance + 1e-9)``.

    ``L`` is the environment's ``optimal_path_length`` (Example 8.4 of Sutton & Barto);
    under the ``"reference"`` protocol (:class:`~.config.Schedule`) it is ``k * L1``, the
    resolution times the unrefined maze's shortest path (the reference code's
    ``14 * resolution``; 14 k is longer than the k x k goal block's 13 k + 1).

    Raises
    ------
    ConfigError
        ``"reference"`` with an env whose metadata lack ``resolution`` or
        ``unscaled_optimal_path_length`` (not a refined maze).
    """
    if protocol == "reference":
        if not meta.get("unscaled_optimal_path_length") or not meta.get("resolution"):
            raise ConfigError("schedule.optimal_protocol", protocol,
                              f"needs a refined maze (dyna/AsciiMaze-v0); env "
                              f"{meta.get('resolved_id', '?')!r} has no resolution")
        length = int(meta["unscaled_optimal_path_length"]) * int(meta["resolution"])
    else:
        length = int(meta["optimal_path_length"])
    return int(math.floor(length * tolerance + 1e-9))


def plan_jobs(config: ExperimentConfig, metas: list[dict], *, block_size: int) -> list[Job]:
    """Split the experiment into jobs, in canonical order.

    Parameters
    ----------
    config : ExperimentConfig
    metas : list of dict
        Environment metadata per sweep point (from :func:`envs.make_table`); gives
        ``optimal_path_length`` when ``schedule.stop_at_optimal``.
    block_size : int
        Maximum runs per job.

    Returns
    -------
    list of Job
        Ordered by (variant, sweep point, first run index).
    """
    from dyna.agents.tabular import OPTIMAL_CHECKS

    s = config.schedule
    jobs = []
    for v, variant in enumerate(config.variants):
        for p, point in enumerate(config.sweep_points()):
            optimal = (optimal_length(metas[p], s.optimal_tolerance, s.optimal_protocol)
                       if s.stop_at_optimal else 0)
            reference = s.stop_at_optimal and s.optimal_protocol == "reference"
            payload = {
                "variant_name": variant.name, "agent": variant.agent,
                "hparams": config.hparams(variant, point), "env_id": config.env.id,
                "env_kwargs": config.env_kwargs(point), "point_kwargs": dict(point),
                "seed": config.seed, "episodes": s.episodes, "total_steps": s.total_steps,
                "eval_every": s.eval_every, "eval_episodes": s.eval_episodes,
                "optimal_length": optimal,
                "optimal_checks": 1 if reference else OPTIMAL_CHECKS,
                # the reference code counts (backups + 1) per real step for prioritized
                # sweeping (Dyna-Q's 1 + n already counts the direct update)
                "count_real_steps": reference and variant.agent == "prioritized_sweeping",
            }
            for block in split_runs(config.runs, block_size):
                jobs.append(Job(variant=v, point=p, run_indices=block, payload=payload))
    return jobs


def execute_job(job: Job) -> dict:
    """Run one job (top-level, so process pools can pickle it).

    Returns
    -------
    dict
        The :class:`dyna.agents.RunResult` fields as numpy arrays (see
        :data:`RESULT_FIELDS`), with a leading axis of ``len(job.run_indices)`` runs
        (``eval_episode`` has shape ``(n_eval,)``).
    """
    from dyna.agents import run_agent

    p = job.payload
    table, _ = make_env_table(p["env_id"], p["env_kwargs"])
    result = run_agent(p["agent"], p["hparams"], table, seed=p["seed"],
                       run_indices=list(job.run_indices), episodes=p["episodes"],
                       total_steps=p["total_steps"], eval_every=p["eval_every"],
                       eval_episodes=p["eval_episodes"], optimal_length=p["optimal_length"],
                       optimal_checks=p["optimal_checks"])
    out = {name: np.asarray(getattr(result, name)) for name in RESULT_FIELDS}
    if p.get("count_real_steps"):
        out.update(count_real_steps(out["episode_steps"], out["episode_updates"],
                                    out["updates_to_optimal"]))
    n = len(job.run_indices)
    for name, arr in out.items():
        if name != "eval_episode" and arr.shape[:1] != (n,):
            raise RuntimeError(f"run_agent returned {name} of shape {arr.shape} for {n} runs")
    return out


def count_real_steps(episode_steps: np.ndarray, episode_updates: np.ndarray,
                     updates_to_optimal: np.ndarray) -> dict:
    """Add one update per real step, as the reference implementation of Example 8.4 counts
    prioritized sweeping (its ``+ 1``; :class:`~.config.Schedule` ``optimal_protocol``).

    Parameters
    ----------
    episode_steps : int64 (R, E)
        Steps per episode, -1 for episodes not played.
    episode_updates : int64 (R, E)
        Cumulative updates at the end of each episode.
    updates_to_optimal : int64 (R,)
        Cumulative updates when the check first passed, -1 if never.

    Returns
    -------
    dict
        ``episode_updates`` and ``updates_to_optimal`` with the cumulative real steps added
        (played episodes only; -1 stays -1).
    """
    played = episode_steps >= 0
    cum = np.cumsum(np.where(played, episode_steps, 0), axis=1)
    total = cum[:, -1] if cum.shape[1] else np.zeros(len(updates_to_optimal), np.int64)
    return {"episode_updates": np.where(played, episode_updates + cum, episode_updates),
            "updates_to_optimal": np.where(updates_to_optimal >= 0,
                                           updates_to_optimal + total, updates_to_optimal)}


def merge_results(jobs: list[Job], results: list[dict], config: ExperimentConfig) -> dict:
    """Concatenate job results per (variant, point) along the run axis, in run order."""
    merged: dict[tuple, dict] = {}
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].key)
    for i in order:
        job, res = jobs[i], results[i]
        slot = merged.setdefault((job.variant, job.point), {"runs": [], "parts": []})
        slot["runs"].extend(job.run_indices)
        slot["parts"].append(res)
    out = {}
    for key, slot in merged.items():
        if slot["runs"] != list(range(config.runs)):
            raise RuntimeError(f"jobs of {key} covered runs {slot['runs']}, "
                               f"expected 0..{config.runs - 1}")
        parts = slot["parts"]
        arrays = {name: np.concatenate([p[name] for p in parts], axis=0)
                  for name in RESULT_FIELDS if name != "eval_episode"}
        arrays["eval_episode"] = parts[0]["eval_episode"]
        out[key] = arrays
    return out
