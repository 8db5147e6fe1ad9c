"""Kind ``agent_tasks``: the job, every run of one variant in one scenario."""

from __future__ import annotations

import numpy as np

from dyna.experiment.backends import Job

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
    rows = [run_loop_agent(p["variant_name"], store=p["store"], env_kwargs=p["env_kwargs"],
                           episodes=p["episodes"], seed=p["seed"], run_index=r,
                           params=p["policy"], loop_config=p["loop"])
            for r in job.run_indices]
    return {k: np.stack([r[k] for r in rows]) for k in EPISODE_FIELDS}
