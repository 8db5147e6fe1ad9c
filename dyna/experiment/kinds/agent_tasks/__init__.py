"""Kind ``agent_tasks``: loop agents against baselines on agent tasks, per
failure-mode scenario, with the safeguard ablation.

An experiment file (``experiments/skill_loop_ablation.toml``)::

    kind = "agent_tasks"
    name = "skill_loop_ablation"
    seed = 0
    runs = 10                  # seeds per variant and scenario
    episodes = 1000
    store = "skill"            # what the loops keep: "skill" or "memory"
    variants = "all"           # or a list of names (dyna.agents.loop_agents.make_variant)

    [env]                      # AgentTaskEnv keywords shared by every scenario
    n_families = 8

    [policy]                   # PolicyParams (p_follow, tokens_per_review, copy_rate, ...)
    [loop]                     # LoopConfig settings of the full loop (skill_cap, ...)

    [[scenarios]]
    name = "clean"
    [[scenarios]]
    name = "drift"
    env = { drift_at = [300, 600] }

    [analysis]
    final_window = 100         # episodes at the end that give the "final" numbers
    window = 50                # rolling window of the curves (episodes)
    recovery_window = 10       # drifted-family episodes averaged to judge recovery
    recovery_points = 0.05     # back within 5 points of the pre-drift success rate
    chosen_family = 0          # family of the per-family competence plot

A group is one variant in one scenario; run ``r`` of every group uses the same task
stream (the env seed depends on ``(seed, r)`` only).

Tables written: ``episodes`` (one row per variant x scenario x run x episode, the fields of
:data:`dyna.agents.loop_agents.EPISODE_FIELDS`) and ``runs`` (one row per run: final success
rate, tokens per success, learning cost share, incidents, poisoned and stale entries,
recovery time after drifts, ...). Plots and ``report.md`` as described in
:func:`draw_plots` and :func:`build_report`.

Modules: ``config`` (the file), ``job`` (one variant in one scenario for a block of runs),
``metrics`` (per-run summaries, recovery after drift), ``kind`` (the
:class:`~dyna.experiment.protocol.ExperimentKind`), ``plots`` and ``report``. The package
imports the experiment machinery it needs (protocol, config checks, backends' jobs, stats,
plotting and reporting helpers), :mod:`dyna.agents.loop_agents`, :mod:`dyna.loops` and
:mod:`envs.agent_tasks`; never another kind, the registry or the runner.
"""

from dyna.experiment.kinds.agent_tasks.kind import KIND, AgentTasksKind

__all__ = ["KIND", "AgentTasksKind"]



