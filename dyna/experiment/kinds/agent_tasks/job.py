"""Kind ``agent_tasks``: the job, every run of one variant in one scenario."""

from __future__ import annotations

import numpy as np

from dyna.experiment.backends import Job
from dyna.experiment.kinds.agent_tasks.config import AgentTasksConfig

__all__ = ["execute_agent_job"]


# ============================================================================ jobs

def execute_agent_job(job: Job) -> dict:
    """Run one job: every run of one variant in one scenario.

    Returns
    -------
    dict of numpy.ndarray
        Each field of :data:`~dyna.agents.loop_agents.EPISODE_FIELDS` with shape
        ``(len(job.run_indices), episodes)``.
    """
    from dyna.agents.loop_agents import EPISODE_FIELDS, run_loop_agent

    p = job.payload
    if p.get("agent") == "llm":
        return _llm_job(job)
    rows = [run_loop_agent(p["variant_name"], store=p["store"], env_kwargs=p["env_kwargs"],
                           episodes=p["episodes"], seed=p["seed"], run_index=r,
                           params=p["policy"], loop_config=p["loop"],
                           chosen_family=p["chosen_family"])
            for r in job.run_indices]
    return {k: np.stack([r[k] for r in rows]) for k in EPISODE_FIELDS}


# ============================================================================ the LLM agent

#: Columns of the ``llm_exchanges`` table (one row per request of the LLM agent or its
#: reviewer: :class:`dyna.loops.llm.Recording`), after the run's variant, scenario, run.
EXCHANGE_COLUMNS = AgentTasksConfig.replay_columns[3:]   # seq, key, request, ... attempts


def _llm_job(job: Job) -> dict:
    """The runs of one job with the LLM agent (:func:`dyna.agents.llm.run_llm_agent`); each
    run's exchanges under ``"exchanges"`` (a list per run), answered from the recording
    of ``payload["replay"]`` when set."""
    from dyna.agents.llm import run_llm_agent
    from dyna.agents.loop_agents import EPISODE_FIELDS

    p = job.payload
    recorded = _recorded(p["replay"], p["variant_name"], p["point_kwargs"]["scenario"]) \
        if p.get("replay") else None
    rows = [run_llm_agent(p["variant_name"], llm=p["llm"], store=p["store"],
                          env_kwargs=p["env_kwargs"], episodes=p["episodes"], seed=p["seed"],
                          run_index=r, loop_config=p["loop"],
                          replay=None if recorded is None else recorded.get(r, []),
                          chosen_family=p["chosen_family"])
            for r in job.run_indices]
    out = {k: np.stack([r[k] for r in rows]) for k in EPISODE_FIELDS}
    out["exchanges"] = [r["exchanges"] for r in rows]
    return out


def _recorded(folder: str, variant: str, scenario: str) -> dict:
    """Run index -> that run's recorded exchanges, from ``folder/llm_exchanges.parquet``."""
    import polars as pl
    t = pl.read_parquet(f"{folder}/llm_exchanges.parquet").filter(
        (pl.col("variant") == variant) & (pl.col("scenario") == scenario))
    out: dict = {}
    for row in t.iter_rows(named=True):
        out.setdefault(int(row["run"]), []).append(row)
    return out


def exchanges_table(config, jobs, results):
    """The ``llm_exchanges`` table: every request and answer of every run, redacted
    (columns variant, scenario, run, then :data:`EXCHANGE_COLUMNS`)."""
    import polars as pl
    rows = []
    for job, res in zip(jobs, results):
        for r, exchanges in zip(job.run_indices, res["exchanges"]):
            for ex in exchanges:
                rows.append({"variant": config.variants[job.variant],
                             "scenario": config.scenarios[job.point][0], "run": int(r),
                             **{k: ex[k] for k in EXCHANGE_COLUMNS}})
    schema = {"variant": pl.String, "scenario": pl.String, "run": pl.Int64, "seq": pl.Int64,
              **{k: pl.String for k in EXCHANGE_COLUMNS[1:]}}
    return pl.DataFrame(rows, schema=schema).sort(["variant", "scenario", "run", "seq"])
