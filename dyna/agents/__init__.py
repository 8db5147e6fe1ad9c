"""Tabular Dyna agents, vectorised across runs.

Contract used by :mod:`dyna.experiment` (implemented in :mod:`dyna.agents.tabular`):

``run_agent(agent, hparams, table, *, seed, run_indices, episodes=None, total_steps=None,
eval_every=0, eval_episodes=0, optimal_length=0, optimal_checks=5) -> RunResult``

* ``agent``: one of :data:`AGENTS`.
* ``hparams``: dict of ``alpha, gamma, epsilon, n_planning, kappa, theta, q_init``
  (validated by :func:`validate_hparams`, which raises :class:`dyna.errors.ConfigError`).
* ``table``: :class:`envs.tabular.TabularTable` from :func:`envs.make_table`.
* ``seed``, ``run_indices``: a run's random stream depends only on ``(seed, run_index)``.
* exactly one of ``episodes`` or ``total_steps``.

:class:`RunResult` fields (R = len(run_indices), E = episodes, T = total_steps):

* ``episode_steps`` int64 (R, E) — steps in each episode (episodes mode; else shape (R, 0))
* ``episode_return`` float64 (R, E) — undiscounted return of each episode
* ``episode_terminated`` bool (R, E) — episode ended by termination (not truncation)
* ``episode_updates`` int64 (R, E) — cumulative Q updates (real + planning) at episode end
* ``step_reward`` float64 (R, T) — reward of every time step (total_steps mode; else (R, 0))
* ``eval_score`` float64 (R, n_eval) — greedy-policy mean return over ``eval_episodes``
  evaluation episodes, taken after every ``eval_every`` training episodes
* ``updates_to_optimal`` int64 (R,) — Q updates until the greedy policy from the start
  follows a path of ``optimal_length`` steps (-1 if never; only when ``optimal_length > 0``)
"""


# The names and checks need no numba; the kernels' names load dyna.agents.tabular (numba,
# which creates its cache folder when a cached kernel is defined) on first use, so
# validating a config (``from dyna.agents import HPARAMS, validate_hparams``) writes nothing.
from dyna._lazy import lazy_getattr
from dyna.agents.hparams import AGENTS, HPARAMS, validate_hparams

__all__ = ["AGENTS", "HPARAMS", "DynaAgent", "RunResult", "run_agent", "validate_hparams", "warmup"]

__getattr__ = lazy_getattr(__name__, {name: "tabular" for name in
                                      ("DynaAgent", "RunResult", "run_agent", "warmup")},
                           globals())
