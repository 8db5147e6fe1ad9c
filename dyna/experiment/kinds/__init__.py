"""The experiment kinds shipped with dyna, one package each.

* :mod:`dyna.experiment.kinds.tabular` -- tabular Dyna agents on Gymnasium tables
  (Sutton & Barto ch. 8; FrozenLake, Taxi, CliffWalking); the default kind.
* :mod:`dyna.experiment.kinds.escalation` -- escalation policies on task streams.
* :mod:`dyna.experiment.kinds.agent_tasks` -- skill and memory loops on agent tasks.

Each package holds its config section, jobs, tables, plots and report, and exposes its
:class:`~dyna.experiment.protocol.ExperimentKind` instance as ``KIND``. A kind imports the
shared machinery (:mod:`dyna.experiment.protocol`, :mod:`~dyna.experiment.config`,
:mod:`~dyna.experiment.backends`, :mod:`~dyna.experiment.stats`,
:mod:`~dyna.experiment.plotting`, :mod:`~dyna.experiment.reporting`), the library below
it and ``envs``; never another kind, the registry or the runner. The runner finds kinds
through :data:`dyna.experiment.registry.KINDS`; this package imports none of them.
"""



