"""Escalation rules: when should an agent hand a task over instead of acting itself?

An escalation decision reads the competence posterior of one task type (a Beta(a, b) over the
probability that the agent succeeds; :mod:`dyna.competence`) and compares a statistic of it
with a threshold. Three risk classes say how much evidence is trusted and which statistic is
used:

============  ==========================================  ==========================
risk class    outcomes that count as evidence             statistic compared
============  ==========================================  ==========================
low_stakes    every recorded outcome                       posterior mean a / (a + b)
elevated      only outcomes with provenance                posterior mean
high_stakes   only outcomes with provenance                lower credible bound
============  ==========================================  ==========================

An outcome *has provenance* when both ``outcome_verified_by`` (who or what checked it) and
``anti_gaming_policy`` (the rule that kept the agent from grading itself) are set to
non-empty values. With fewer than ``min_episodes`` counted outcomes the rule always escalates;
otherwise it escalates when the statistic is below ``threshold``.

Ties: a statistic exactly at the threshold *acts* (``>=``), in every rule and policy here,
the type oracle included (it acts iff ``c_act + (1 - p) c_failure <= c_escalate``, iff
``p >= p*``): at ``p = p*`` acting and escalating cost the same, and acting keeps the
evidence flowing under censored feedback. Using the lower bound of the
equal-tailed credible interval for high stakes asks for evidence that competence is high, not
only an estimate that it is (a one-sided test at level (1 - level) / 2).

The package has three parts:

* :mod:`dyna.escalation.rules` -- one decision for one task type: the :class:`Evidence` a
  record gives, the :class:`EscalationPolicy` protocol (an object with a ``name`` and
  ``decide(evidence, threshold=..., min_episodes=..., level=...) -> EscalationDecision``),
  :class:`ThresholdPolicy` (the rule above), the :data:`RISK_CLASSES` and
  :func:`should_escalate`;
* :mod:`dyna.escalation.policies` -- vectorised policies for benchmarks and streams of many
  task types;
* :mod:`dyna.escalation.replay` -- :func:`run_policies`, the lockstep replay of outcome
  streams through those policies.

Vectorised policies
-------------------
Every policy of the escalation benchmark is a :class:`Policy` with one vectorised method,
``act(a, b, n, u) -> bool array`` (True: act, False: escalate), reading the Beta(a, b)
posteriors and the counted evidence ``n`` of ``k`` task types at once:

============================  ===================================================  =============
policy                        acts when                                            source
============================  ===================================================  =============
:class:`NeverEscalate`        always                                               baseline
:class:`AlwaysEscalate`       never                                                baseline
:class:`MeanThreshold`        ``a / (a + b) >= p*``                                Berger 1985
:class:`LowerBoundThreshold`  ``B^-1(delta; a, b) >= p*``                          Geifman 2017
:class:`ThompsonSampling`     ``theta >= p*``, ``theta ~ Beta(a, b)``              Thompson 1933
:class:`CostSensitive`        ``a / (a + b) >= p* = 1 - (c_e - c_act)/(c_f + v)``  Chow 1970
:class:`MinEpisodes`          ``n >= m`` and the inner policy acts                 warm-up gate
:class:`EpsilonExplore`       with probability epsilon, else the inner policy      S&B 2.2
============================  ===================================================  =============

Discounted posteriors for non-stationary competence (Raj & Kalyani 2017) are a property of
the estimator, not of the rule: :class:`dyna.competence.BetaCompetence` with
``discount < 1``, or :func:`run_policies` with a per-lane ``discount``.

:func:`run_policies` replays outcome streams through many policies in lockstep (one lane
per policy x stream), with censored or full feedback; it is the engine of the escalation
benchmark (:mod:`dyna.experiment.kinds.escalation`) and agrees step for step with
:class:`envs.escalation.EscalationEnv`.
"""

from dyna.escalation.policies import (POLICY_RULES, AlwaysEscalate, CostSensitive,
                                      EpsilonExplore, LowerBoundThreshold, MeanThreshold,
                                      MinEpisodes, NeverEscalate, Policy, ThompsonSampling,
                                      chow_threshold, make_policy)
from dyna.escalation.replay import run_policies
from dyna.escalation.rules import (RISK_CLASSES, EscalationDecision, EscalationPolicy,
                                   Evidence, RiskClass, ThresholdPolicy,
                                   evidence_from_history, has_provenance, should_escalate)

__all__ = [
    "AlwaysEscalate", "CostSensitive", "EpsilonExplore", "EscalationDecision",
    "EscalationPolicy", "Evidence", "LowerBoundThreshold", "MeanThreshold", "MinEpisodes",
    "NeverEscalate", "POLICY_RULES", "Policy", "RISK_CLASSES", "RiskClass",
    "ThompsonSampling", "ThresholdPolicy", "chow_threshold", "evidence_from_history",
    "has_provenance", "make_policy", "run_policies", "should_escalate",
]
