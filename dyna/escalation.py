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

The structure is open for more policies: a policy is any object with a ``name`` and
``decide(evidence, threshold=..., min_episodes=..., level=...) -> EscalationDecision``
(the :class:`EscalationPolicy` protocol); :class:`ThresholdPolicy` is the rule above, and a
:class:`RiskClass` says which evidence a class counts and which policy it uses.

Vectorised policies (issue 6)
-----------------------------
For benchmarks and streams of many task types, every policy of the escalation benchmark is a
:class:`Policy` with one vectorised method, ``act(a, b, n, u) -> bool array`` (True: act,
False: escalate), reading the Beta(a, b) posteriors and the counted evidence ``n`` of ``k``
task types at once:

============================  ===================================================  =============
policy                        acts when                                            source
============================  ===================================================  =============
:class:`NeverEscalate`        always                                               baseline
:class:`AlwaysEscalate`       never                                                baseline
:class:`MeanThreshold`        ``a / (a + b) >= p*``                                Berger 1985
:class:`LowerBoundThreshold`  ``B^-1(delta; a, b) >= p*``                          Geifman 2017
:class:`ThompsonSampling`     ``theta >= p*``, ``theta ~ Beta(a, b)``              Thompson 1933
:class:`CostSensitive`        ``a / (a + b) >= p* = 1 - (c_e - c_act)/(c_f + v)``  Chow 1970
:class:`MinEpisodes`          ``n >= m`` and the inner policy acts                 issue 3 gate
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

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

import math
from abc import ABC, abstractmethod

import numpy as np
from scipy import special

from dyna.competence import BetaCompetence, beta_interval, prior_shapes
from dyna.errors import ConfigError, check_range

__all__ = [
    "AlwaysEscalate", "CostSensitive", "EpsilonExplore", "EscalationDecision",
    "EscalationPolicy", "Evidence", "LowerBoundThreshold", "MeanThreshold", "MinEpisodes",
    "NeverEscalate", "POLICY_RULES", "Policy", "RISK_CLASSES", "RiskClass", "ThompsonSampling",
    "ThresholdPolicy", "chow_threshold", "evidence_from_history", "has_provenance",
    "make_policy", "run_policies", "should_escalate",
]

SUCCESS_LABEL = "success"


@dataclass(frozen=True)
class Evidence:
    """What a task type's record says, before any rule is applied.

    Attributes
    ----------
    task_type : str
    n_episodes : int
        Every recorded outcome of the task type.
    n_evidence : float
        Outcomes counted as evidence (all, or only those with provenance); fractional for a
        discounted competence.
    n_success : float
        Successes among the counted outcomes.
    a, b : float
        Beta posterior shapes: prior plus counted successes / failures.
    """

    task_type: str
    n_episodes: int
    n_evidence: float
    n_success: float
    a: float
    b: float


@dataclass(frozen=True)
class EscalationDecision:
    """The answer of an escalation rule, JSON-ready through :meth:`to_dict`.

    Attributes
    ----------
    escalate : bool
        True: hand the task over.
    reason : str
        Machine-readable code: ``insufficient_episodes`` (too few counted outcomes, none
        lacking provenance), ``unverified_evidence`` (enough episodes, but too few with
        provenance), ``below_threshold`` or ``competent``.
    escalation_block_reason : str
        One sentence with the numbers that gave the decision.
    task_type, risk_class : str
    n_episodes : int
        All recorded outcomes of the task type.
    n_evidence : float
        Outcomes that counted as evidence.
    n_success : float
    mean, lower, upper : float
        Posterior mean and equal-tailed credible bounds at ``level``; finite, in [0, 1].
    statistic : str
        ``"mean"`` or ``"lower"``: what was compared with ``threshold``.
    threshold, level : float
    min_episodes : int
    policy : str
    """

    escalate: bool
    reason: str
    escalation_block_reason: str
    task_type: str
    risk_class: str
    n_episodes: int
    n_evidence: float
    n_success: float
    mean: float
    lower: float
    upper: float
    statistic: str
    threshold: float
    level: float
    min_episodes: int
    policy: str

    def to_dict(self) -> dict:
        """Plain dict of every field."""
        return asdict(self)


@runtime_checkable
class EscalationPolicy(Protocol):
    """Interface of an escalation policy (more arrive with issue 6).

    ``decide`` turns the :class:`Evidence` of one task type into an
    :class:`EscalationDecision`; ``risk_class`` is filled in by the caller.
    """

    name: str

    def decide(self, evidence: Evidence, *, threshold: float, min_episodes: int,
               level: float, risk_class: str) -> EscalationDecision: ...


@dataclass(frozen=True)
class ThresholdPolicy:
    """Minimum-episodes gate, then a threshold on the posterior mean or lower bound.

    Rule: escalate iff ``n_evidence < min_episodes`` or ``s < threshold`` with
    ``s = a / (a + b)`` (``statistic="mean"``) or ``s = B^-1((1 - level) / 2; a, b)``
    (``statistic="lower"``, the lower end of the equal-tailed credible interval).
    """

    statistic: str = "mean"

    def __post_init__(self):
        if self.statistic not in ("mean", "lower"):
            raise ConfigError("statistic", self.statistic, "must be 'mean' or 'lower'")

    @property
    def name(self) -> str:
        return f"threshold_{self.statistic}"

    def decide(self, evidence: Evidence, *, threshold: float, min_episodes: int,
               level: float, risk_class: str) -> EscalationDecision:
        """Apply the rule; see the class docstring."""
        lo, hi = beta_interval(evidence.a, evidence.b, level)
        mean = evidence.a / (evidence.a + evidence.b)
        stat = mean if self.statistic == "mean" else lo
        counted = "outcomes with provenance" if RISK_CLASSES[risk_class].requires_provenance \
            else "outcomes"
        if evidence.n_evidence < min_episodes:
            unverified = evidence.n_episodes - evidence.n_evidence
            if RISK_CLASSES[risk_class].requires_provenance and unverified > 0 \
                    and evidence.n_episodes >= min_episodes:
                reason = "unverified_evidence"
                text = (f"only {evidence.n_evidence:g} of {evidence.n_episodes} episodes of "
                        f"{evidence.task_type!r} have provenance (outcome_verified_by and "
                        f"anti_gaming_policy); {risk_class} needs {min_episodes}")
            else:
                reason = "insufficient_episodes"
                text = (f"{evidence.n_evidence:g} {counted} of {evidence.task_type!r}, fewer "
                        f"than min_episodes={min_episodes}")
            escalate = True
        elif stat < threshold:
            escalate, reason = True, "below_threshold"
            text = (f"{self.statistic} competence {stat:.4f} of {evidence.task_type!r} "
                    f"({evidence.n_success:g}/{evidence.n_evidence:g} {counted}) is below "
                    f"threshold {threshold:g}")
        else:
            escalate, reason = False, "competent"
            text = (f"{self.statistic} competence {stat:.4f} of {evidence.task_type!r} "
                    f"({evidence.n_success:g}/{evidence.n_evidence:g} {counted}) reaches "
                    f"threshold {threshold:g}")
        return EscalationDecision(
            escalate=bool(escalate), reason=reason, escalation_block_reason=text,
            task_type=evidence.task_type, risk_class=risk_class,
            n_episodes=int(evidence.n_episodes), n_evidence=float(evidence.n_evidence),
            n_success=float(evidence.n_success), mean=float(mean), lower=float(lo),
            upper=float(hi), statistic=self.statistic, threshold=float(threshold),
            level=float(level), min_episodes=int(min_episodes), policy=self.name)


@dataclass(frozen=True)
class RiskClass:
    """A named risk class: which outcomes count, the policy applied, and its (p*, delta).

    Attributes
    ----------
    name : str
    requires_provenance : bool
        Count only outcomes whose ``outcome_verified_by`` and ``anti_gaming_policy`` are set.
    policy : EscalationPolicy
        The rule :func:`should_escalate` applies.
    p_star : float
        Preset competence threshold p* of the class (the benchmark's default threshold).
    delta : float or None
        Preset one-sided quantile of the lower-bound rule (act when
        ``B^-1(delta; a, b) >= p*``); None: the class compares the posterior mean.
    """

    name: str
    requires_provenance: bool
    policy: EscalationPolicy
    p_star: float = 0.8
    delta: float | None = None

    def preset_policy(self) -> "Policy":
        """The class's (p*, delta) preset as a vectorised :class:`Policy`."""
        if self.delta is None:
            return MeanThreshold(self.p_star)
        return LowerBoundThreshold(self.p_star, self.delta)


#: The three risk classes with their (p*, delta) presets: low_stakes (0.80, mean),
#: elevated (0.90, mean, provenance only), high_stakes (0.95, delta = 0.05, provenance only).
RISK_CLASSES: dict[str, RiskClass] = {
    "low_stakes": RiskClass("low_stakes", False, ThresholdPolicy("mean"), 0.80, None),
    "elevated": RiskClass("elevated", True, ThresholdPolicy("mean"), 0.90, None),
    "high_stakes": RiskClass("high_stakes", True, ThresholdPolicy("lower"), 0.95, 0.05),
}


def _risk_class(name) -> RiskClass:
    if name not in RISK_CLASSES:
        raise ConfigError("domain_risk_class", name, f"must be one of {list(RISK_CLASSES)}")
    return RISK_CLASSES[name]


def _is_set(values: np.ndarray) -> np.ndarray:
    """True where a provenance value is present: not None, not NaN, not blank."""
    out = np.zeros(values.shape[0], dtype=bool)
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and v != v):
            continue
        out[i] = bool(str(v).strip())
    return out


def has_provenance(outcome_verified_by, anti_gaming_policy) -> np.ndarray:
    """Elementwise: both provenance fields set (non-empty), shape (n,) bool."""
    ver = np.asarray(outcome_verified_by, dtype=object).reshape(-1)
    pol = np.asarray(anti_gaming_policy, dtype=object).reshape(-1)
    return _is_set(ver) & _is_set(pol)


def _columns(history) -> dict[str, np.ndarray]:
    """Normalise a history (records, dict of columns, polars DataFrame) to object columns."""
    if hasattr(history, "to_dict") and hasattr(history, "columns") and \
            not isinstance(history, Mapping):
        history = history.to_dict(as_series=False)  # polars DataFrame
    if isinstance(history, Mapping):
        cols = {k: np.asarray(v, dtype=object).reshape(-1) for k, v in history.items()}
    elif isinstance(history, Sequence) and not isinstance(history, (str, bytes)):
        names = ("task_type", "outcome", "outcome_verified_by", "anti_gaming_policy")
        # a column exists when some record has it; an empty history has no episodes at all
        cols = {k: np.array([r.get(k) for r in history], dtype=object) for k in names
                if not history or any(k in r for r in history)}
    else:
        raise ConfigError("history", type(history).__name__,
                          "must be a BetaCompetence, a list of records, a dict of columns "
                          "or a polars DataFrame")
    if "outcome" not in cols:
        raise ConfigError("history", sorted(cols), "has no 'outcome' column")
    return cols


def evidence_from_history(history, task_type: str, *, risk_class: str = "low_stakes",
                          prior="uniform") -> Evidence:
    """Count one task type's outcomes as evidence under a risk class.

    Parameters
    ----------
    history : list of dict, dict of columns, or polars DataFrame
        Fields ``outcome`` (``"success"`` or True is a success; any other label a failure),
        and optionally ``task_type`` (rows of other task types are ignored; without the
        column every row belongs to ``task_type``), ``outcome_verified_by`` and
        ``anti_gaming_policy``.
    task_type : str
    risk_class : str
        One of :data:`RISK_CLASSES`.
    prior : see :func:`dyna.competence.prior_shapes`

    Returns
    -------
    Evidence

    Raises
    ------
    ConfigError
        Unknown risk class, bad prior, or a history without ``outcome``.
    """
    rc = _risk_class(risk_class)
    a0, b0 = prior_shapes(prior)
    cols = _columns(history)
    outcome = cols["outcome"]
    rows = np.ones(outcome.shape[0], dtype=bool)
    if "task_type" in cols:
        rows = cols["task_type"] == task_type
    n = outcome.shape[0]
    counted = rows.copy()
    if rc.requires_provenance:
        none = np.full(n, None, dtype=object)
        counted &= has_provenance(cols.get("outcome_verified_by", none),
                                  cols.get("anti_gaming_policy", none))
    success = np.fromiter((o is True or o == SUCCESS_LABEL for o in outcome), dtype=bool,
                          count=n)
    n_ev = int(counted.sum())
    n_s = int((counted & success).sum())
    return Evidence(task_type=str(task_type), n_episodes=int(rows.sum()), n_evidence=n_ev,
                    n_success=n_s, a=a0 + n_s, b=b0 + (n_ev - n_s))


def should_escalate(competence_or_history, task_type: str, threshold: float = 0.8,
                    min_episodes: int = 10, domain_risk_class: str = "low_stakes", *,
                    level: float = 0.95, prior="uniform", key=None,
                    evidence_verified: bool = False,
                    policy: EscalationPolicy | None = None) -> EscalationDecision:
    """Decide whether to escalate a task of ``task_type``.

    Parameters
    ----------
    competence_or_history : BetaCompetence or history
        A history (see :func:`evidence_from_history`) from which the counted outcomes are
        selected by risk class, or a :class:`BetaCompetence` read at ``key`` (default
        ``task_type``). A competence object carries no provenance: for elevated and high
        stakes its counts are used only when the caller states ``evidence_verified=True``
        (it was fed only outcomes with provenance); otherwise none of them counts and the
        decision escalates with reason ``unverified_evidence``.
    task_type : str
    threshold : float
        Competence needed to act, in [0, 1].
    min_episodes : int
        Counted outcomes needed before the rule may act (>= 0).
    domain_risk_class : {"low_stakes", "elevated", "high_stakes"}
    level : float
        Credible level of the reported interval (and of the high-stakes lower bound).
    prior : prior of the posterior built from a history (ignored for a BetaCompetence).
    key : hashable, optional
        Key of a BetaCompetence; default ``task_type``.
    evidence_verified : bool
        See ``competence_or_history``.
    policy : EscalationPolicy, optional
        Replace the risk class's policy (the evidence selection stays the class's).

    Returns
    -------
    EscalationDecision

    Raises
    ------
    ConfigError
        Unknown risk class (field ``domain_risk_class``), threshold outside [0, 1], negative
        or non-integral ``min_episodes``, level outside (0, 1), malformed history.
    """
    rc = _risk_class(domain_risk_class)
    threshold = float(check_range("threshold", threshold, 0.0, 1.0))
    min_episodes = check_range("min_episodes", min_episodes, 0, None, integer=True)
    level = float(check_range("level", level, 0.0, 1.0, lo_open=True, hi_open=True))
    if isinstance(competence_or_history, BetaCompetence):
        comp = competence_or_history
        k = task_type if key is None else key
        n_s, n_f = comp.counts(k)
        n_all = n_s + n_f
        a, b = comp.posterior(k)
        if rc.requires_provenance and not evidence_verified:
            n_s, n_f = 0.0, 0.0
            a, b = comp.a0, comp.b0
        evidence = Evidence(task_type=str(task_type), n_episodes=int(round(n_all)),
                            n_evidence=n_s + n_f, n_success=n_s, a=a, b=b)
    else:
        evidence = evidence_from_history(competence_or_history, task_type,
                                         risk_class=domain_risk_class, prior=prior)
    pol = rc.policy if policy is None else policy
    return pol.decide(evidence, threshold=threshold, min_episodes=min_episodes, level=level,
                      risk_class=rc.name)


# =========================================================================== vectorised policies

def chow_threshold(c_escalate: float, c_failure: float, c_act: float = 0.0,
                   value: float = 0.0) -> float:
    """Competence threshold p* of the cost-sensitive (Chow) reject rule.

    Acting on a task costs ``c_act`` always and ``c_failure`` more when it fails, and earns
    ``value`` only when it succeeds; escalating costs ``c_escalate`` and always succeeds
    (earning ``value``). With success probability p, acting is at least as good as
    escalating iff

        p * value - c_act - (1 - p) * c_failure >= value - c_escalate
        <=>  p >= p* = 1 - (c_escalate - c_act) / (c_failure + value).

    With ``c_act = value = 0`` this is Chow's rule, p* = 1 - c_escalate / c_failure
    (C. K. Chow, "On optimum recognition error and reject tradeoff", IEEE Trans. Inf.
    Theory 16(1), 1970: reject when the best posterior probability is below 1 - t, with t
    the ratio of rejection to error cost).

    Parameters
    ----------
    c_escalate, c_failure, c_act, value : float
        Costs in any one unit (>= 0, finite); ``c_failure + value > 0``.

    Returns
    -------
    float
        p*; may lie outside [0, 1]: >= 1 means never act, <= 0 always act.

    Raises
    ------
    ConfigError
        A negative or non-finite cost, or ``c_failure + value == 0``.
    """
    for name, v in (("c_escalate", c_escalate), ("c_failure", c_failure), ("c_act", c_act),
                    ("value", value)):
        check_range(name, v, 0.0, None)
        if not math.isfinite(v):
            raise ConfigError(name, v, "must be finite")
    if c_failure + value <= 0:
        raise ConfigError("c_failure", c_failure, "c_failure + value must be > 0")
    return 1.0 - (c_escalate - c_act) / (c_failure + value)


def _p_star(value, field_name: str = "p_star") -> float:
    value = check_range(field_name, value, 0.0, 1.0)
    return float(value)


class Policy(ABC):
    """A vectorised escalation policy: act or escalate for ``k`` task types at once.

    Subclasses set :attr:`name` and implement :meth:`act`. ``randomised`` policies read
    the uniforms ``u``; passing the same ``u`` gives the same decisions (this is how
    :func:`run_policies` keeps a run's result independent of how runs are batched).
    """

    #: Short label used in tables.
    name: str = ""
    #: Whether :meth:`act` reads ``u``.
    randomised: bool = False

    @abstractmethod
    def act(self, a, b, n, u=None) -> np.ndarray:
        """Decide for ``k`` task types.

        Parameters
        ----------
        a, b : ndarray of float64, shape (k,)
            Beta posterior shapes (> 0) of each task's type.
        n : ndarray of float64, shape (k,)
            Counted evidence (outcomes, possibly discounted) behind each posterior.
        u : ndarray of float64, shape (2, k), optional
            Independent uniforms on [0, 1): row 0 for the policy's own draw (Thompson),
            row 1 for exploration. Required when :attr:`randomised`.

        Returns
        -------
        ndarray of bool, shape (k,)
            True: act; False: escalate.
        """

    def _need_u(self, u, k: int) -> np.ndarray:
        if u is None:
            raise ConfigError("u", None, f"policy {self.name!r} is randomised: pass uniforms")
        u = np.asarray(u, dtype=np.float64)
        if u.shape != (2, k):
            raise ConfigError("u", u.shape, f"must have shape (2, {k})")
        return u


@dataclass(frozen=True)
class NeverEscalate(Policy):
    """Always act (the agent's baseline, full autonomy): ``act = True``."""

    name = "never"

    def act(self, a, b, n, u=None):
        return np.ones(np.shape(a), dtype=bool)


@dataclass(frozen=True)
class AlwaysEscalate(Policy):
    """Always hand over (the human-only baseline): ``act = False``."""

    name = "always"

    def act(self, a, b, n, u=None):
        return np.zeros(np.shape(a), dtype=bool)


@dataclass(frozen=True)
class MeanThreshold(Policy):
    """Act when the posterior mean reaches p*: ``a / (a + b) >= p*``.

    The plug-in Bayes decision: when the loss of acting is linear in the success
    probability, its posterior expectation depends on the posterior only through the mean
    (J. O. Berger, *Statistical Decision Theory and Bayesian Analysis*, 2nd ed., 1985,
    section 4.4). With p* = 1 - c_escalate / c_failure it is :class:`CostSensitive`.

    Parameters
    ----------
    p_star : float
        Threshold in [0, 1].
    """

    p_star: float = 0.8
    name = "mean"

    def __post_init__(self):
        object.__setattr__(self, "p_star", _p_star(self.p_star))

    def act(self, a, b, n, u=None):
        a = np.asarray(a, dtype=np.float64)
        return a / (a + np.asarray(b, dtype=np.float64)) >= self.p_star


@dataclass(frozen=True)
class LowerBoundThreshold(Policy):
    """Act when the lower credible bound reaches p*: ``B^-1(delta; a, b) >= p*``.

    ``B^-1`` is the Beta quantile function. Because the Beta CDF ``I_x(a, b)`` is
    continuous and increasing in x, the rule is evaluated as the equivalent
    ``I_{p*}(a, b) <= delta`` (:func:`scipy.special.betainc`), one regularised incomplete
    beta per type instead of an inverse. From a uniform prior and s successes in a row
    the bound is ``delta ** (1 / (s + 1))``, so at delta = 0.05 the rule first acts after
    13, 58 and 298 successes for p* = 0.8, 0.95, 0.99.

    It is the Bayesian counterpart of accepting only where a high-probability bound on the
    risk holds, as in selective classification with guaranteed risk (Y. Geifman & R.
    El-Yaniv, "Selective classification for deep neural networks", NeurIPS 2017, which uses
    a binomial tail bound): act only when P(p < p* | data) <= delta.

    Parameters
    ----------
    p_star : float
        Threshold in [0, 1].
    delta : float
        One-sided quantile in (0, 1) (0.05: a 95% lower bound).
    """

    p_star: float = 0.8
    delta: float = 0.05
    name = "lower_bound"

    def __post_init__(self):
        object.__setattr__(self, "p_star", _p_star(self.p_star))
        object.__setattr__(self, "delta", float(check_range("delta", self.delta, 0.0, 1.0,
                                                            lo_open=True, hi_open=True)))

    def act(self, a, b, n, u=None):
        return special.betainc(a, b, self.p_star) <= self.delta

    def bound(self, a, b) -> np.ndarray:
        """The lower bound ``B^-1(delta; a, b)`` itself, float64 of the shape of ``a``."""
        return special.betaincinv(a, b, self.delta)


@dataclass(frozen=True)
class ThompsonSampling(Policy):
    """Act when a posterior draw reaches p*: ``theta >= p*`` with ``theta ~ Beta(a, b)``.

    The draw is ``theta = B^-1(u0; a, b)`` (inverse-CDF sampling), so the rule is
    evaluated as the equivalent ``u0 >= I_{p*}(a, b)``: the policy acts with probability
    ``P(theta >= p*)``, the posterior probability that acting is the better arm
    (W. R. Thompson, Biometrika 25, 1933; Russo, Van Roy, Kazerouni, Osband & Wen, "A
    tutorial on Thompson sampling", Found. Trends Mach. Learn. 11(1), 2018). Unlike the
    threshold rules it keeps acting now and then on a type whose posterior sits below p*,
    which is what lets it learn under censored feedback.

    Parameters
    ----------
    p_star : float
        Threshold in [0, 1].
    """

    p_star: float = 0.8
    name = "thompson"
    randomised = True

    def __post_init__(self):
        object.__setattr__(self, "p_star", _p_star(self.p_star))

    def act(self, a, b, n, u=None):
        u = self._need_u(u, np.shape(a)[0])
        return u[0] >= special.betainc(a, b, self.p_star)


@dataclass(frozen=True)
class CostSensitive(Policy):
    """Chow's cost-sensitive reject rule on the posterior mean.

    Acts when ``a / (a + b) >= p* = 1 - (c_escalate - c_act) / (c_failure + value)``
    (:func:`chow_threshold`; Chow 1970). The expected cost of acting is linear in the
    success probability p, so under a Beta posterior the Bayes decision for the next task
    plugs in the posterior mean.

    Parameters
    ----------
    c_escalate, c_failure : float
        Cost of an escalation and of a failed attempt.
    c_act : float
        Cost of every attempt (e.g. API cost).
    value : float
        Value of a solved task.
    """

    c_escalate: float = 1.0
    c_failure: float = 5.0
    c_act: float = 0.0
    value: float = 0.0
    name = "chow"

    def __post_init__(self):
        chow_threshold(self.c_escalate, self.c_failure, self.c_act, self.value)

    @property
    def p_star(self) -> float:
        """The rule's threshold (may lie outside [0, 1])."""
        return chow_threshold(self.c_escalate, self.c_failure, self.c_act, self.value)

    def act(self, a, b, n, u=None):
        a = np.asarray(a, dtype=np.float64)
        return a / (a + np.asarray(b, dtype=np.float64)) >= self.p_star


@dataclass(frozen=True)
class MinEpisodes(Policy):
    """Escalate until ``min_episodes`` outcomes count, then follow ``inner``.

    Rule: act iff ``n >= min_episodes`` and ``inner`` acts -- the warm-up gate of
    :func:`should_escalate` (issue 3), here around any policy. Under censored feedback it
    can only add escalations: it never creates the evidence it waits for.
    """

    inner: Policy
    min_episodes: int = 10

    def __post_init__(self):
        check_range("min_episodes", self.min_episodes, 0, None, integer=True)

    @property
    def name(self) -> str:
        return f"{self.inner.name}+min{self.min_episodes}"

    @property
    def randomised(self) -> bool:
        return self.inner.randomised

    def act(self, a, b, n, u=None):
        return (np.asarray(n) >= self.min_episodes) & self.inner.act(a, b, n, u)


@dataclass(frozen=True)
class EpsilonExplore(Policy):
    """Explicit exploration: act with probability epsilon whatever ``inner`` says.

    Rule: act iff ``u1 < epsilon`` or ``inner`` acts: epsilon-greedy exploration
    (Sutton & Barto, *Reinforcement Learning: An Introduction*, 2nd ed., 2018, section 2.2)
    with acting as the exploratory arm. Under censored feedback this is the simplest way out
    of the trap of a threshold rule that never acts and so never learns.
    """

    inner: Policy
    epsilon: float = 0.05
    randomised = True

    def __post_init__(self):
        check_range("epsilon", self.epsilon, 0.0, 1.0)

    @property
    def name(self) -> str:
        return f"{self.inner.name}+eps{self.epsilon:g}"

    def act(self, a, b, n, u=None):
        u = self._need_u(u, np.shape(a)[0])
        return (u[1] < self.epsilon) | self.inner.act(a, b, n, u)


#: Rule names accepted by :func:`make_policy`.
POLICY_RULES = ("never", "always", "mean", "lower_bound", "thompson", "chow")


def make_policy(rule: str, *, p_star: float = 0.8, delta: float = 0.05,
                min_episodes: int = 0, epsilon: float = 0.0, c_escalate: float = 1.0,
                c_failure: float = 5.0, c_act: float = 0.0, value: float = 0.0,
                field_prefix: str = "") -> Policy:
    """Build a policy by rule name, wrapped in the gates asked for.

    Parameters
    ----------
    rule : {"never", "always", "mean", "lower_bound", "thompson", "chow"}
    p_star, delta : float
        Threshold and quantile of the threshold rules and Thompson sampling.
    min_episodes : int
        > 0 wraps the rule in :class:`MinEpisodes`.
    epsilon : float
        > 0 wraps the rule in :class:`EpsilonExplore` (outermost).
    c_escalate, c_failure, c_act, value : float
        Costs of :class:`CostSensitive`.
    field_prefix : str
        Prefix of field names in errors (``"variants.x."``).

    Raises
    ------
    ConfigError
        Unknown rule or bad parameter, naming the (prefixed) field.
    """
    try:
        if rule == "never":
            pol: Policy = NeverEscalate()
        elif rule == "always":
            pol = AlwaysEscalate()
        elif rule == "mean":
            pol = MeanThreshold(p_star)
        elif rule == "lower_bound":
            pol = LowerBoundThreshold(p_star, delta)
        elif rule == "thompson":
            pol = ThompsonSampling(p_star)
        elif rule == "chow":
            pol = CostSensitive(c_escalate, c_failure, c_act, value)
        else:
            raise ConfigError("rule", rule, f"unknown policy rule; expected one of "
                              f"{', '.join(POLICY_RULES)}")
        if min_episodes:
            pol = MinEpisodes(pol, min_episodes)
        if epsilon:
            pol = EpsilonExplore(pol, epsilon)
    except ConfigError as exc:
        if field_prefix:
            raise ConfigError(field_prefix + exc.field, exc.value, exc.reason) from None
        raise
    return pol


# =========================================================================== lockstep replay

def run_policies(policies, lane_policy, types, outcomes, *, n_types: int,
                 c_escalate, c_failure, c_act=0.0, verified=None,
                 requires_provenance=False, prior=(1.0, 1.0), discount=1.0,
                 discount_clock: str = "step", feedback: str = "censored", u=None,
                 checkpoints=None) -> dict:
    """Replay outcome streams through policies, all lanes in lockstep.

    Each lane is one policy on one stream of ``T`` tasks. At step t the lane's task has
    type ``types[l, t]``; the policy reads that type's posterior and acts or escalates.
    Acting costs ``c_act`` plus ``c_failure`` if the agent fails (``outcomes[l, t]`` is
    False); escalating costs ``c_escalate`` and always succeeds. The outcome is observed
    when the lane acted, or always with ``feedback="full"`` (shadow mode); an observed
    outcome counts as evidence unless the lane ``requires_provenance`` and the outcome is
    not ``verified``.

    Discounting (Raj & Kalyani 2017) with the lane's ``discount`` d < 1 decays evidence as
    ``a <- a0 + d (a - a0)`` (and ``b``) on one of two clocks: ``discount_clock="step"``
    (discounted Thompson sampling as published: at every task *every* type decays, so a
    type that is no longer observed drifts back to the prior and gets explored again) or
    ``"update"`` (only the type being updated decays, just before its update -- the clock
    of :meth:`dyna.competence.BetaCompetence.update`).

    Parameters
    ----------
    policies : sequence of Policy
    lane_policy : array_like of int, shape (L,)
        Index into ``policies`` for each lane.
    types : array_like of int, shape (L, T)
        Task type of each step, in ``0 .. n_types - 1``.
    outcomes : array_like of bool, shape (L, T)
        Whether the agent would succeed on the task (revealed only as above).
    n_types : int
    c_escalate, c_failure : float or array_like, shape (L,)
    c_act : float or array_like, shape (L,) or (L, T)
        Cost of an attempt (e.g. per-task API cost).
    verified : array_like of bool, shape (L, T), optional
        Outcome has provenance (default all True).
    requires_provenance : bool or array_like of bool, shape (L,)
    prior : (float, float) or array_like, shape (L, 2)
        Beta prior shapes per lane.
    discount : float or array_like, shape (L,)
        In (0, 1].
    discount_clock : {"step", "update"}
    feedback : {"censored", "full"}
    u : array_like of float64, shape (L, T, 2), optional
        Uniforms for randomised policies (required if any is).
    checkpoints : array_like of int, optional
        Steps (1-based counts of tasks seen) after which every type's ``a`` and ``b`` are
        recorded.

    Returns
    -------
    dict of ndarray
        ``act`` (L, T) bool; ``observed`` (L, T) bool; ``cost`` (L, T) float64;
        ``score`` (L, T) float64, the posterior mean of the task's type at decision time;
        ``n_counted`` (L, T) float64, its counted evidence; and with ``checkpoints``
        ``a_ck``, ``b_ck`` of shape (C, L, n_types).

    Raises
    ------
    ConfigError
        Shape mismatch, a type outside the range, bad feedback mode, missing uniforms.
    """
    types = np.asarray(types)
    outcomes = np.asarray(outcomes, dtype=bool)
    if types.ndim != 2 or outcomes.shape != types.shape:
        raise ConfigError("outcomes", outcomes.shape, f"must match types {types.shape}, (L, T)")
    L, T = types.shape
    if L and T and (types.min() < 0 or types.max() >= n_types):
        raise ConfigError("types", int(types.max()), f"must lie in 0..{n_types - 1}")
    if feedback not in ("censored", "full"):
        raise ConfigError("feedback", feedback, "must be 'censored' or 'full'")
    if discount_clock not in ("step", "update"):
        raise ConfigError("discount_clock", discount_clock, "must be 'step' or 'update'")
    lane_policy = np.asarray(lane_policy, dtype=np.int64).reshape(L)
    verified = np.ones((L, T), dtype=bool) if verified is None else \
        np.asarray(verified, dtype=bool)
    need_prov = np.broadcast_to(np.asarray(requires_provenance, dtype=bool), (L,))
    prior = np.broadcast_to(np.asarray(prior, dtype=np.float64), (L, 2))
    a0, b0 = prior[:, 0].copy(), prior[:, 1].copy()
    disc = np.broadcast_to(np.asarray(discount, dtype=np.float64), (L,))
    c_e = np.broadcast_to(np.asarray(c_escalate, dtype=np.float64), (L,))
    c_f = np.broadcast_to(np.asarray(c_failure, dtype=np.float64), (L,))
    c_a = np.asarray(c_act, dtype=np.float64)
    c_a = np.broadcast_to(c_a[:, None] if c_a.ndim == 1 else c_a, (L, T))
    groups = [(pol, np.flatnonzero(lane_policy == i)) for i, pol in enumerate(policies)]
    # contiguous lane blocks are sliced (views) instead of gathered
    groups = [(pol, slice(int(lanes[0]), int(lanes[-1]) + 1)
               if lanes[-1] - lanes[0] + 1 == lanes.size else lanes)
              for pol, lanes in groups if lanes.size]
    if any(pol.randomised for pol, _ in groups):
        if u is None:
            raise ConfigError("u", None, "randomised policies need uniforms (L, T, 2)")
        u = np.asarray(u, dtype=np.float64)
        if u.shape != (L, T, 2):
            raise ConfigError("u", u.shape, f"must have shape ({L}, {T}, 2)")
    full = feedback == "full"
    whole = groups[0][0] if len(groups) == 1 and \
        np.arange(L)[groups[0][1]].size == L else None
    A = np.repeat(a0[:, None], n_types, axis=1)
    B = np.repeat(b0[:, None], n_types, axis=1)
    lanes_all = np.arange(L)
    act = np.zeros((L, T), dtype=bool)
    score = np.empty((L, T), dtype=np.float64)
    n_counted = np.empty((L, T), dtype=np.float64)
    ck = np.asarray([] if checkpoints is None else checkpoints, dtype=np.int64)
    a_ck = np.empty((ck.size, L, n_types))
    b_ck = np.empty((ck.size, L, n_types))
    ck_pos = {int(c): i for i, c in enumerate(ck)}
    discounting = bool((disc != 1.0).any())
    step_clock = discounting and discount_clock == "step"
    if step_clock:
        a0c, b0c, dc = a0[:, None], b0[:, None], disc[:, None]
    for t in range(T):
        k = types[:, t]
        a = A[lanes_all, k]
        b = B[lanes_all, k]
        n = (a - a0) + (b - b0)
        score[:, t] = a / (a + b)
        n_counted[:, t] = n
        if whole is not None:  # one policy on every lane: no gathers
            act[:, t] = whole.act(a, b, n, u[:, t].T if whole.randomised else None)
        else:
            for pol, lanes in groups:
                ut = u[lanes, t, :].T if pol.randomised else None
                act[lanes, t] = pol.act(a[lanes], b[lanes], n[lanes], ut)
        seen = act[:, t] | full
        upd = seen & (verified[:, t] | ~need_prov)
        if step_clock:
            A = a0c + dc * (A - a0c)
            B = b0c + dc * (B - b0c)
        if upd.any():
            li, ki = lanes_all[upd], k[upd]
            if discounting and not step_clock:
                d = disc[upd]
                A[li, ki] = a0[upd] + d * (A[li, ki] - a0[upd])
                B[li, ki] = b0[upd] + d * (B[li, ki] - b0[upd])
            win = outcomes[upd, t]
            A[li, ki] += win
            B[li, ki] += ~win
        if t + 1 in ck_pos:
            a_ck[ck_pos[t + 1]] = A
            b_ck[ck_pos[t + 1]] = B
    observed = act | full
    cost = np.where(act, c_a + np.where(outcomes, 0.0, c_f[:, None]), c_e[:, None])
    out = {"act": act, "observed": observed, "cost": cost, "score": score,
           "n_counted": n_counted}
    if checkpoints is not None:
        out["a_ck"], out["b_ck"] = a_ck, b_ck
    return out
