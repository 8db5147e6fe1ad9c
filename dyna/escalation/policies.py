"""Vectorised escalation policies: act or escalate for many task types at once.

A :class:`Policy` reads the Beta(a, b) posteriors and the counted evidence ``n`` of ``k``
task types and answers ``act(a, b, n, u) -> bool array`` (True: act, False: escalate); the
table of policies and their sources is in :mod:`dyna.escalation`. :func:`make_policy` builds
one by rule name, wrapped in the gates asked for; :func:`chow_threshold` is the cost-sensitive
threshold p*.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import special

from dyna.errors import ConfigError, check_range
from dyna.ties import as_fraction, means_below

__all__ = ["POLICY_RULES", "AlwaysEscalate", "CostSensitive", "EpsilonExplore",
           "LowerBoundThreshold", "MeanThreshold", "MinEpisodes", "NeverEscalate", "Policy",
           "ThompsonSampling", "chow_threshold", "make_policy"]


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
        """True where the mean ``a / (a + b)`` reaches p*, compared exactly
        (:func:`dyna.ties.means_below`, as :class:`~dyna.escalation.ThresholdPolicy`
        does): a mean equal to p* acts. ``a`` and ``b`` broadcast; the result has their
        broadcast shape, dtype bool."""
        return ~means_below(a, b, self.p_star)


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

    The comparison follows the tie rule exactly: p* is computed as a rational from the
    costs (each taken as the number written, :func:`dyna.ties.as_fraction`), and a mean
    equal to it acts (:func:`dyna.ties.means_below`). A cost derived from a declared p*
    (``c_escalate / (1 - p*)``) is passed as a :class:`fractions.Fraction` to keep that p*
    exact.

    Parameters
    ----------
    c_escalate, c_failure : float or Fraction
        Cost of an escalation and of a failed attempt.
    c_act : float or Fraction
        Cost of every attempt (e.g. API cost).
    value : float or Fraction
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
        """The rule's threshold (may lie outside [0, 1]), as the float nearest it."""
        return float(self.exact_p_star)

    @property
    def exact_p_star(self) -> Fraction:
        """The rule's threshold as an exact rational, from the costs as written."""
        c_e, c_f, c_a, v = (as_fraction(x) for x in (self.c_escalate, self.c_failure,
                                                      self.c_act, self.value))
        return 1 - (c_e - c_a) / (c_f + v)

    def act(self, a, b, n, u=None):
        return ~means_below(a, b, self.exact_p_star)


@dataclass(frozen=True)
class MinEpisodes(Policy):
    """Escalate until ``min_episodes`` outcomes count, then follow ``inner``.

    Rule: act iff ``n >= min_episodes`` and ``inner`` acts -- the warm-up gate of
    :func:`dyna.escalation.should_escalate`, here around any policy. Under censored feedback it
    can only add escalations: it never creates the evidence it waits for.
    """

    inner: Policy
    min_episodes: int = 10

    def __post_init__(self):
        check_range("min_episodes", self.min_episodes, 0, None, integer=True)

    @property
    def name(self) -> str:
        """The inner policy's name and the gate, e.g. ``mean+min10``."""
        return f"{self.inner.name}+min{self.min_episodes}"

    @property
    def randomised(self) -> bool:
        """Whether the inner policy reads uniforms."""
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
        """The inner policy's name and the exploration rate, e.g. ``mean+eps0.05``."""
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

