"""Kind ``tabular`` (the default): tabular Dyna agents on Gymnasium tables.

Sutton & Barto, *Reinforcement Learning: An Introduction*, 2nd ed., chapter 8: Dyna-Q,
Dyna-Q+ and prioritized sweeping on the Dyna maze (Figure 8.2), the blocking and shortcut
mazes (Figures 8.4, 8.5) and mazes of growing size (Example 8.4), and the same agents on
Gymnasium's toy-text envs (FrozenLake, Taxi, CliffWalking) through their transition tables.

An experiment names an env (``[env]``), a schedule (episodes or time steps, evaluation,
stop at the optimal path), variants (agent and hyper-parameters), runs, an optional sweep
over env keywords and the analysis (metrics, checks against the book); see
:mod:`.config`. A group is one variant at one sweep point; run ``r`` of every group draws
from the stream ``(seed, r)`` only.

Modules: ``config`` (the file), ``job`` (env tables and the job), ``tables`` (``results``,
``runs``, ``evals``), ``kind`` (the :class:`~dyna.experiment.protocol.ExperimentKind`),
``plots``, ``report`` (with the book's checks) and ``reference`` (the declared comparisons
with the reference implementation's per-run values in ``data/sutton_barto_reference/``).
The package imports the experiment machinery it needs (protocol, config checks, backends'
jobs, stats, plotting and reporting helpers), :mod:`dyna.agents` and
:mod:`envs`; never another kind, the registry or the runner.
"""

from dyna.experiment.kinds.tabular.config import ExperimentConfig, parse_tabular
from dyna.experiment.kinds.tabular.kind import KIND, TabularKind

__all__ = ["ExperimentConfig", "KIND", "TabularKind", "parse_tabular"]
