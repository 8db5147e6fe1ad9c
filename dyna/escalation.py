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
otherwise it escalates when the statistic is below ``threshold``. Using the lower bound of the
equal-tailed credible interval for high stakes asks for evidence that competence is high, not
only an estimate that it is (a one-sided test at level (1 - level) / 2).

The structure is open for more policies (issue 6): a policy is any object with a ``name`` and
``decide(evidence, threshold=..., min_episodes=..., level=...) -> EscalationDecision``
(the :class:`EscalationPolicy` protocol); :class:`ThresholdPolicy` is the rule above, and a
:class:`RiskClass` says which evidence a class counts and which policy it uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from dyna.competence import BetaCompetence, beta_interval, prior_shapes
from dyna.errors import ConfigError, check_range

__all__ = [
    "EscalationDecision", "EscalationPolicy", "Evidence", "RISK_CLASSES", "RiskClass",
    "ThresholdPolicy", "evidence_from_history", "has_provenance", "should_escalate",
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
    """A named risk class: which outcomes count, and the policy applied.

    Attributes
    ----------
    name : str
    requires_provenance : bool
        Count only outcomes whose ``outcome_verified_by`` and ``anti_gaming_policy`` are set.
    policy : EscalationPolicy
    """

    name: str
    requires_provenance: bool
    policy: EscalationPolicy


RISK_CLASSES: dict[str, RiskClass] = {
    "low_stakes": RiskClass("low_stakes", False, ThresholdPolicy("mean")),
    "elevated": RiskClass("elevated", True, ThresholdPolicy("mean")),
    "high_stakes": RiskClass("high_stakes", True, ThresholdPolicy("lower")),
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
