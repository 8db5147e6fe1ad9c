"""One escalation decision for one task type: evidence, rules, risk classes.

:func:`should_escalate` reads one task type's record (a :class:`~dyna.competence.BetaCompetence`
or a history of outcomes), counts the outcomes its risk class trusts (:func:`evidence_from_history`,
:func:`has_provenance`) and applies the class's rule (:class:`ThresholdPolicy` unless another
:class:`EscalationPolicy` is given), answering an :class:`EscalationDecision`. The risk
classes and the tie rule are described in :mod:`dyna.escalation`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from dyna.competence import BetaCompetence, beta_interval, prior_shapes
from dyna.errors import ConfigError, check_range
from dyna.escalation.policies import LowerBoundThreshold, MeanThreshold, Policy
from dyna.ties import mean_below

__all__ = ["RISK_CLASSES", "SUCCESS_LABEL", "EscalationDecision", "EscalationPolicy",
           "Evidence", "RiskClass", "ThresholdPolicy", "evidence_from_history",
           "has_provenance", "should_escalate"]

#: The outcome label that counts as a success in a history.
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
    """Interface of a rule that decides for one task type (:func:`should_escalate`).

    ``decide`` turns the :class:`Evidence` of one task type into an
    :class:`EscalationDecision`; ``risk_class`` is filled in by the caller.
    """

    name: str

    def decide(self, evidence: Evidence, *, threshold: float, min_episodes: int,
               level: float, risk_class: str) -> EscalationDecision:
        """The decision for one task type's evidence under a risk class."""


@dataclass(frozen=True)
class ThresholdPolicy:
    """Minimum-episodes gate, then a threshold on the posterior mean or lower bound.

    Rule: escalate iff ``n_evidence < min_episodes`` or ``s < threshold`` with
    ``s = a / (a + b)`` (``statistic="mean"``) or ``s = B^-1((1 - level) / 2; a, b)``
    (``statistic="lower"``, the lower end of the equal-tailed credible interval). Ties do
    not escalate: the mean, a rational of the inputs, is compared exactly
    (:func:`dyna.ties.mean_below`, so 8 successes of 10 reach a threshold of 0.8);
    the lower bound, irrational in general, as a float.
    """

    statistic: str = "mean"

    def __post_init__(self):
        if self.statistic not in ("mean", "lower"):
            raise ConfigError("statistic", self.statistic, "must be 'mean' or 'lower'")

    @property
    def name(self) -> str:
        """``threshold_mean`` or ``threshold_lower``."""
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
        elif (mean_below(evidence.a, evidence.b, threshold) if self.statistic == "mean"
              else stat < threshold):
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

    def preset_policy(self) -> Policy:
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

