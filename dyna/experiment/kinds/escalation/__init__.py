"""Kind ``escalation``: the escalation benchmark, its metrics, plots, report and CLI.

When should an agent act on a task and when should it hand it over? Every policy of
:mod:`dyna.escalation` is run on task streams -- synthetic ones with known true success
rates (stationary, with change points, drifting) and replays of real agent outcome logs
(:mod:`envs.escalation`) -- and scored with the standard metrics of selective prediction and
bandits.

Metrics (:mod:`.metrics`, used by the job and the report, tested on hand-made tables)
-----------------------------------------------------------------------------------
Costs per task: acting costs ``c_act`` plus ``c_failure`` on failure, escalating costs
``c_escalate`` (:func:`dyna.escalation.run_policies`).

* **Total cost** and **regret** against two oracles on the same stream: the *type oracle*
  knows each task type's true rate p and acts iff ``c_act + (1 - p) c_failure <=
  c_escalate`` (iff p >= Chow's p*); the *task oracle* knows each task's outcome and acts
  iff the agent would succeed (and acting is cheaper). Realised regret is the cost
  difference on the realised outcomes; the *pseudo-regret* (the bandit quantity, used for
  the log-T check) sums the expected-cost gap ``|c_act + (1 - p_t) c_failure - c_escalate|``
  over the steps where the policy's action differs from the type oracle's.
* **Escalation rate** (escalated tasks / tasks) and **failure rate** (failed attempts /
  tasks).
* **Risk-coverage curve** (El-Yaniv & Wiener 2010; Geifman, Uziel & El-Yaniv, "Bias-reduced
  uncertainty estimation for deep neural classifiers", ICLR 2019): order tasks by the
  competence score the policy had when the task arrived (posterior mean of its type,
  highest first); at coverage k/n the risk is the failure rate of the agent on the first k
  tasks. **AURC** is the mean risk over k = 1..n; **E-AURC** subtracts the AURC of the
  perfect score (all successes first).
  *Ties*: per-type scores tie massively, and the order within a tie is arbitrary. The
  curve here is the *expectation over a uniformly random order within each tie*: inside a
  block of m tied tasks with f failures, entered after k0 tasks with F0 failures, the risk
  at k0 + j is ``(F0 + j f / m) / (k0 + j)`` (exact, because the denominator is fixed).
  A constant score therefore has AURC equal to the failure rate -- the AURC of a random
  score in expectation -- and the result never depends on sort stability.
* **Competence vs truth**: the posterior mean of every type against its true rate at log-
  spaced checkpoints (mean absolute error, and the full posterior for run 0).
* **Recovery after a change point**: the agreement curve g(t) = fraction of runs whose
  action at step t equals the type oracle's. With ĝ the mean of g over the ``window``
  steps before the change, recovery takes the smallest j >= 0 such that the mean of g over
  steps ``[c + j, c + j + window)`` is at least ``ĝ - tolerance``; reported in tasks
  (steps) after the change, or "not recovered" before the next change or the end.

Experiment file (``kind = "escalation"``)
-----------------------------------------
::

    kind = "escalation"
    name = "escalation_policies"
    seed = 0
    runs = 20
    risk_classes = ["low_stakes", "elevated", "high_stakes"]
    feedback = ["censored", "full"]

    [costs]                # c_failure defaults to c_escalate / (1 - p*) of each risk class
    c_escalate = 1.0
    # p_star = [0.4, 0.6, 0.8]   optional cost-setting grid: each value a cost setting

    [[scenarios]]
    name = "stationary"
    source = "synthetic"
    rates = [0.3, 0.6, 0.86, 0.97]
    steps = 2000

    [[scenarios]]
    name = "swebench"
    source = "replay"
    data = "data/swebench_verified_bash_only.csv"
    systems = "all"          # or a list, or "all_by_date"

    [defaults]
    prior = "uniform"

    [[variants]]
    name = "thompson"
    rule = "thompson"

A *variant* is a policy (``rule`` in :data:`dyna.escalation.POLICY_RULES` or ``"preset"``,
the risk class's own (p*, delta) rule; ``p_star``, ``delta``, ``min_episodes``, ``epsilon``,
``prior``, ``discount``); each variant runs under every cost setting (groups are variant x
cost setting: a risk class at its preset p*, or with ``costs.p_star`` a risk class at each
grid value, failure cost ``c_escalate / (1 - p*)``); each scenario stream (one per system for
replays) runs under every feedback mode (points). Runs differ in the stream's random draws and
order; a run's stream depends only on ``(seed, scenario, system, run)``, so every policy and both
feedback modes see the same tasks (common random numbers).

Tables: ``runs`` (one row per group x point x run: costs, regrets, rates, AURC ...),
``curves`` (cumulative quantities at checkpoints per run), ``risk_coverage`` (risk at a
coverage grid per run), ``agreement`` (agreement with the type oracle per step, summed over
runs), ``competence`` (run 0: every type's posterior at the checkpoints with the true rate).

Modules: ``metrics`` (numpy only), ``config`` (the file), ``job`` (streams, policies, one
group for a block of runs), ``tables``, ``kind`` (the
:class:`~dyna.experiment.protocol.ExperimentKind`), ``plots``, ``report`` and ``cli``
(``dyna escalation check|replay``). The package imports the experiment machinery it needs,
:mod:`dyna.escalation`, :mod:`dyna.competence` and :mod:`envs.escalation`; never another
kind, the registry or the runner.
"""

from dyna._lazy import lazy_getattr

# Loaded on first use, so that `dyna --help` (which imports this package's cli) does not
# import the kind, its policies and scipy.
_LAZY = {"KIND": "kind", "EscalationKind": "kind"}

__all__ = ["KIND", "EscalationKind"]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
