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

    [env]                      # the environment, shared by every scenario
    id = "dyna/AgentTasks-v2"  # default dyna/AgentTasks-v0 (envs.make_agent_task_env)
    preset = "base"            # v2 only: "base" or "tau_airline" (envs.agent_tasks_v2)
    n_families = 8             # any keyword of the env overrides the preset

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

Calibration before confirmation (:mod:`dyna.experiment.calibration`): a file may declare,
before any pilot and in a commit of its own, its seed sets, its manipulation checks and
each hypothesis's smallest effect of interest::

    [calibration]
    pilot_seed = 1000          # base seed of the pilot runs (run indices 0 .. pilot_runs-1)
    pilot_runs = 6
    confirmatory_seed = 0      # base seed of the confirmatory run (the file's runs)
    replication_seed = 2000    # optional: a second confirmatory run on another seed set
    required = ["no-learning base rate", "oracle ceiling"]   # checks every hypothesis needs
    power = 0.8                # for sizing the run count
    scope = "hypotheses"       # optional: the confirmatory run covers only the pairs the
                               # hypotheses and checks compare, and no_learning and oracle
                               # everywhere (default "grid": every variant everywhere)
    frozen = { commit = "<40 hex>", sha256 = "<64 hex>" }    # absent until frozen

    [[checks]]
    name = "no-learning base rate"
    scenario = "base"          # a scenario or sweep point of the file
    variant = "no_learning"
    measure = "late_success"   # a runs-table column, or differs, coverage_at, drift_met,
                               # poisoned_followed, harmful_proposed, library_exceeds
    min = 0.15                 # pass when min <= the mean over runs <= max
    max = 0.35                 # (either may be absent, not both)
    # per measure: versus, versus_scenario (differs), episode (coverage_at),
    # cap (library_exceeds), min_arrivals (drift_met, default 100)

    [[hypotheses]]             # as above, plus:
    smallest_effect = 0.05     # required with [calibration]: in the metric's units, > 0
    checks = ["gate acts"]     # the checks it needs besides `required`

The seeds come from ``[calibration]`` only (a top-level ``seed`` is refused), and the three
seed sets must be distinct. ``dyna run FILE --pilot`` runs the groups the checks and
hypotheses read on the pilot seeds and writes only ``checks.md``/``.parquet`` and
``pilot_sd.md``/``.parquet`` (the standard deviations the run count is sized from, never a
hypothesis contrast), and appends a line to ``<folder of FILE>/results/<name>/pilot_log.jsonl``;
``dyna freeze FILE`` writes the ``frozen`` line once the last pilot of the file as it is
passed every check at the current commit with a clean tree (the hash leaves that line out);
``dyna run FILE`` (``--seeds replication``) then runs the confirmatory (replication) seeds,
and refuses an unfrozen file or one edited since. The measures are in :mod:`.checks`; the
report opens with "checks k of n pass; m hypotheses not testable" and the check table, and
a hypothesis whose checks fail is *not testable*, one that does not hold but passes the
equivalence test *no effect as large as its smallest effect of interest*.

Tables written: ``episodes`` (one row per variant x scenario x run x episode, the fields of
:data:`dyna.agents.loop_agents.EPISODE_FIELDS`) and ``runs`` (one row per run: final success
rate, tokens per success, learning cost share, incidents, poisoned and stale entries,
recovery time after drifts, ...). Plots and ``report.md`` as described in
:func:`draw_plots` and :func:`build_report`.

Modules: ``config`` (the file), ``checks`` (the manipulation checks of a calibrated file),
``job`` (one variant in one scenario for a block of runs),
``metrics`` (per-run summaries, recovery after drift), ``kind`` (the
:class:`~dyna.experiment.protocol.ExperimentKind`), ``analysis`` (paired comparisons,
crossover map, aggregates), ``interactions``, ``survival``, ``rare_events``,
``aggregate``, ``volume``, ``robustness`` (the v3 analyses, rendered by
``report_effects``), ``reality`` (the ``tau_airline`` preset beside the real tau-bench
runs), ``plots`` and ``report``. The package
imports the experiment machinery it needs (protocol, config checks, backends' jobs, stats,
plotting and reporting helpers), :mod:`dyna.agents.loop_agents`, :mod:`dyna.loops` and
:mod:`envs`; never another kind, the registry or the runner.
"""

from dyna.experiment.kinds.agent_tasks.kind import KIND, AgentTasksKind

__all__ = ["KIND", "AgentTasksKind"]



