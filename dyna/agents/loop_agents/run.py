"""One run of one loop-agent variant: the entry point the agent-tasks experiments call."""

from __future__ import annotations

import numpy as np

from dyna.agents.loop_agents.agent import LoopAgent
from dyna.agents.loop_agents.fields import EPISODE_FIELDS
from dyna.agents.loop_agents.params import PolicyParams
from dyna.agents.loop_agents.variants import make_variant
from dyna.errors import check_range
from dyna.loops import LoopConfig

__all__ = ["run_loop_agent"]


def run_loop_agent(variant: str, *, store: str = "skill", env_kwargs: dict | None = None,
                   episodes: int = 100, seed: int = 0, run_index: int = 0,
                   params: PolicyParams | dict | None = None,
                   loop_config: LoopConfig | dict | None = None,
                   chosen_family: int = 0) -> dict[str, np.ndarray]:
    """One run (one seed) of one variant on a fresh :class:`AgentTaskEnv`.

    Every random stream depends only on ``(seed, run_index)`` (common random numbers): every
    variant meets the same world, tasks, drifts and injections (the env is reset first
    with the seed ``SeedSequence([seed, run_index]).generate_state(1)[0]``), and the
    agent's own streams (:func:`~dyna.agents.loop_agents.agent_streams`: one policy
    substream per episode, the reviewer's, the tabular agents') are the same for every
    variant, so two variants that make the same decisions give bit-identical episodes.

    Parameters
    ----------
    variant : str
        See :func:`~dyna.agents.loop_agents.make_variant`.
    store : {"skill", "memory"}
    env_kwargs : dict
        The environment's keywords and its ``id`` (:func:`envs.make_agent_task_env`).
    episodes : int
        >= 1.
    seed, run_index : int
        >= 0.
    params : PolicyParams or dict
    loop_config : LoopConfig or dict
        Base settings of the full loop.
    chosen_family : int
        The family of the ``comp_chosen_*`` fields (the experiment's
        ``analysis.chosen_family``), in ``[0, n_families)``.

    Returns
    -------
    dict of numpy.ndarray
        Each field of :data:`~dyna.agents.loop_agents.EPISODE_FIELDS`, shape
        ``(episodes,)``.

    Raises
    ------
    ConfigError
        Bad variant, env keyword, parameter, ``chosen_family``.
    """
    from envs import make_agent_task_env

    episodes = check_range("episodes", episodes, 1, None, integer=True)
    seed = check_range("seed", seed, 0, None, integer=True)
    run_index = check_range("run_index", run_index, 0, None, integer=True)
    if isinstance(params, dict):
        params = PolicyParams(**params)
    if isinstance(loop_config, dict):
        loop_config = LoopConfig(**loop_config)
    spec = make_variant(variant, store, loop_config)
    env = make_agent_task_env(env_kwargs)
    env_seed = int(np.random.SeedSequence([seed, run_index]).generate_state(1)[0])
    agent = LoopAgent(spec, env, (seed, run_index), params, env_seed, chosen_family)
    out = {k: np.empty(episodes, dtype=dt) for k, dt in EPISODE_FIELDS.items()}
    for e in range(episodes):
        row = agent.episode()
        for k, arr in out.items():
            arr[e] = row[k]
    if agent.loop is not None:
        agent.loop.close()
    return out
