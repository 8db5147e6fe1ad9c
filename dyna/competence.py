"""Beta-posterior competence estimators.

Competence is the probability that an attempt at something (a task type of a tenant, a skill,
any hashable key) succeeds. Each key carries a Beta(a, b) posterior over that probability,
the conjugate update of a Bernoulli likelihood: a success adds its weight to ``a``, a failure
to ``b`` (Gelman et al., *Bayesian Data Analysis*, 3rd ed., section 2.4). The posterior mean
is ``a / (a + b)`` and the equal-tailed credible interval at level L is
``[F^-1((1-L)/2), F^-1((1+L)/2)]`` with ``F^-1`` the Beta quantile function
(:func:`scipy.stats.beta.ppf`, computed by the routine it calls,
:func:`scipy.special.betaincinv`).

Because the prior shapes are required to be strictly positive, every quantile is well
defined, also at 0 and at n successes and with no data at all: no bound is ever NaN or
outside [0, 1] (a shape of 0, as in ``ppf(q, 0, n + 1)``, would make the quantile NaN).

Non-stationary competence is handled with a discount factor ``discount`` (gamma_d in (0, 1]),
following discounted Thompson sampling (Raj & Kalyani 2017, "Taming non-stationary bandits:
a Bayesian approach", arXiv:1707.09727). There every arm's success and failure counts are
multiplied by gamma at every time step. Here time is counted per key: *before each update of
a key* its evidence (the part of ``a`` and ``b`` above the prior) decays,

    a <- a0 + discount * (a - a0),    b <- b0 + discount * (b - b0),

and then the new outcome is added with its weight. After m updates with outcomes
``s_1..s_m`` (1 success, 0 failure) and weights ``w_1..w_m`` a key's posterior is

    a = a0 + discount**m * (a_start - a0) + sum_j discount**(m - j) * w_j * s_j

(and likewise ``b`` with ``1 - s_j``), so the j-th most recent outcome counts
``discount**(j - 1)``; the effective number of observations is bounded by
``1 / (1 - discount)``. ``discount = 1`` is the stationary conjugate update.

A decision on a posterior mean at a threshold (escalation, retirement) is computed without
floating-point rounding by :func:`dyna.ties.mean_below`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable

import numpy as np

from dyna.errors import ConfigError, check_range

__all__ = ["EB_PRIOR_STRENGTH", "BetaCompetence", "beta_interval", "clopper_pearson",
           "empirical_bayes_prior", "newcombe_diff", "posterior_path", "prior_shapes",
           "weighted_beta_mean", "wilson_interval"]

_PRIORS = {"uniform": (1.0, 1.0), "jeffreys": (0.5, 0.5)}


def _beta_ppf(q, a, b):
    """Beta(a, b) quantile at ``q``: :func:`scipy.special.betaincinv` ``(a, b, q)``, the
    inverse regularised incomplete beta function. It is the routine
    :func:`scipy.stats.beta.ppf` calls (Boost's ``ibeta_inv``) without the distribution
    framework's argument handling around it, which cost about 45 us per call against
    1.4 us (the eviction candidate of a capped skill library asks for one bound per
    placement). The values are the same bits on every shape and level tested
    (``tests/test_competence.py``: 600,000 shapes at six levels up to 0.999); at extreme
    levels (``1 - 1e-9`` with shape 0.5) ``beta.ppf``'s root finding can stop early, and
    this value is the accurate one. scipy.special is imported on first use."""
    from scipy import special

    return special.betaincinv(a, b, q)


def _norm_ppf(q) -> float:
    """Standard normal quantile: :func:`scipy.special.ndtri`, the routine
    :func:`scipy.stats.norm.ppf` calls (the same bits)."""
    from scipy import special

    return float(special.ndtri(q))

def prior_shapes(prior) -> tuple[float, float]:
    """Resolve a prior specification to its Beta shapes ``(a0, b0)``.

    Parameters
    ----------
    prior : {"uniform", "jeffreys"} or (float, float)
        ``"uniform"`` is Beta(1, 1), ``"jeffreys"`` is Beta(1/2, 1/2) (the Jeffreys prior of
        a Bernoulli parameter), a pair gives the shapes directly.

    Returns
    -------
    (float, float)
        Strictly positive, finite shapes.

    Raises
    ------
    ConfigError
        Unknown name, or a shape that is not finite and > 0 (an improper Beta(0, 0) prior has
        NaN quantiles without data).
    """
    if isinstance(prior, str):
        if prior not in _PRIORS:
            raise ConfigError("prior", prior, f"must be one of {sorted(_PRIORS)} or (a0, b0)")
        return _PRIORS[prior]
    try:
        a0, b0 = prior
    except (TypeError, ValueError):
        raise ConfigError("prior", prior, "must be 'uniform', 'jeffreys' or a pair (a0, b0)")
    for name, v in (("prior.a0", a0), ("prior.b0", b0)):
        check_range(name, v, 0.0, None, lo_open=True)
        if not math.isfinite(v):
            raise ConfigError(name, v, "must be finite")
    return float(a0), float(b0)


def _check_level(level) -> float:
    check_range("level", level, 0.0, 1.0, lo_open=True, hi_open=True)
    return float(level)


def _scalar_or_array(x: np.ndarray, scalar: bool):
    return float(x) if scalar else x


def beta_interval(a, b, level: float = 0.95):
    """Equal-tailed credible interval of Beta(a, b), vectorised.

    Parameters
    ----------
    a, b : float or array_like of float64
        Shape parameters, any broadcastable shapes; each must be finite and > 0.
    level : float
        Credible level in (0, 1), e.g. 0.95.

    Returns
    -------
    lo, hi : float or ndarray of float64
        ``beta.ppf((1 - level) / 2, a, b)`` and ``beta.ppf((1 + level) / 2, a, b)`` with the
        broadcast shape of ``a`` and ``b`` (Python floats when both are scalars). Always
        finite, within [0, 1], and ``lo <= hi``.

    Raises
    ------
    ConfigError
        A shape that is not finite and > 0 (field ``a`` or ``b``), or a level outside (0, 1).

    Examples
    --------
    Beta(1, 19) (uniform prior, 0 successes in 18) at 95%: ``(0.0013316, 0.1764669)``.
    """
    level = _check_level(level)
    scalar = np.ndim(a) == 0 and np.ndim(b) == 0
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    for name, v in (("a", a), ("b", b)):
        bad = ~(np.isfinite(v) & (v > 0))
        if bad.any():
            raise ConfigError(name, v[bad].flat[0] if v.ndim else float(v),
                              "Beta shape must be finite and > 0")
    tail = (1.0 - level) / 2.0
    lo = np.clip(_beta_ppf(tail, a, b), 0.0, 1.0)
    hi = np.clip(_beta_ppf(1.0 - tail, a, b), 0.0, 1.0)
    return _scalar_or_array(lo, scalar), _scalar_or_array(hi, scalar)


def _counts(k, n):
    """``(k, n, scalar)``: success and trial counts as broadcast float arrays, checked.

    Raises
    ------
    ConfigError
        Negative or non-integral counts (field ``k`` or ``n``), or ``k > n``.
    """
    scalar = np.ndim(k) == 0 and np.ndim(n) == 0
    k_arr = np.asarray(k, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    for name, v in (("k", k_arr), ("n", n_arr)):
        bad = ~(np.isfinite(v) & (v >= 0) & (v == np.floor(v)))
        if bad.any():
            raise ConfigError(name, v[bad].flat[0] if v.ndim else float(v),
                              "must be a non-negative integer")
    k_arr, n_arr = np.broadcast_arrays(k_arr, n_arr)
    if (k_arr > n_arr).any():
        raise ConfigError("k", k, "must be <= n")
    return k_arr, n_arr, scalar


def wilson_interval(k, n, level: float = 0.95):
    """Wilson score interval of a binomial proportion ``k / n`` (Wilson 1927), vectorised.

    ``(p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)`` with ``p = k/n`` and ``z``
    the normal quantile of ``(1 + level) / 2``. It keeps a width at the edges, where a
    bootstrap of 0/1 outcomes collapses to a point: 0/10 gives (0, 0.2775) and 3/3
    (0.4385, 1) at 95% (Brown, Cai & DasGupta, Statistical Science 2001, recommend it
    over the Wald interval for small n).

    Parameters
    ----------
    k, n : int or array_like of int
        Successes and trials, ``0 <= k <= n``; ``n = 0`` gives (0, 1).
    level : float
        Confidence level in (0, 1).

    Returns
    -------
    lo, hi : float or ndarray of float64

    Raises
    ------
    ConfigError
        Negative or non-integral counts, ``k > n``, or a level outside (0, 1).
    """
    level = _check_level(level)
    k_arr, n_arr, scalar = _counts(k, n)
    z = _norm_ppf(0.5 + level / 2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(n_arr > 0, k_arr / np.maximum(n_arr, 1), 0.5)
        nn = np.maximum(n_arr, 1)
        centre = (p + z * z / (2 * nn)) / (1 + z * z / nn)
        half = z * np.sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn)) / (1 + z * z / nn)
    lo = np.where(n_arr > 0, np.clip(centre - half, 0.0, 1.0), 0.0)
    hi = np.where(n_arr > 0, np.clip(centre + half, 0.0, 1.0), 1.0)
    lo = np.where(k_arr == 0, 0.0, lo)
    hi = np.where(k_arr == n_arr, 1.0, hi)
    return _scalar_or_array(lo, scalar), _scalar_or_array(hi, scalar)


def newcombe_diff(k1, n1, k2, n2, level: float = 0.95) -> tuple[float, float]:
    """Interval of the difference of two independent proportions ``k2/n2 - k1/n1``, by
    Newcombe's hybrid score method from the two Wilson intervals (Newcombe, Statistics in
    Medicine 1998, method 10); it has width even when both samples are constant.

    Returns
    -------
    (float, float)

    Raises
    ------
    ConfigError
        As :func:`wilson_interval`; ``n1`` or ``n2`` of 0.
    """
    if int(n1) == 0 or int(n2) == 0:
        raise ConfigError("n", (n1, n2), "both samples need at least one trial")
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_interval(k1, n1, level)
    l2, u2 = wilson_interval(k2, n2, level)
    d = p2 - p1
    return (float(d - np.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)),
            float(d + np.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)))


def clopper_pearson(k, n, level: float = 0.95):
    """Exact (Clopper–Pearson) confidence interval of a binomial proportion, vectorised.

    The bounds are Beta quantiles, ``lo = B^-1(t; k, n - k + 1)`` and
    ``hi = B^-1(1 - t; k + 1, n - k)`` with ``t = (1 - level) / 2`` (Clopper & Pearson 1934),
    except at the edges where a shape would be 0: ``lo = 0`` when ``k = 0`` and ``hi = 1``
    when ``k = n`` (as statsmodels does, its GitHub #2609). ``n = 0`` gives (0, 1).

    Parameters
    ----------
    k, n : int or array_like of int
        Successes and trials, broadcastable, ``0 <= k <= n``.
    level : float
        Confidence level in (0, 1).

    Returns
    -------
    lo, hi : float or ndarray of float64
        Finite bounds in [0, 1]; Python floats when both inputs are scalars.

    Raises
    ------
    ConfigError
        Negative or non-integral counts, ``k > n``, or a level outside (0, 1).

    Examples
    --------
    At 99%, 0/18 gives (0.0, 0.2549850) and 18/18 gives (0.7450150, 1.0).
    """
    level = _check_level(level)
    k_arr, n_arr, scalar = _counts(k, n)
    tail = (1.0 - level) / 2.0
    at_zero = k_arr == 0
    at_n = k_arr == n_arr
    # Substitute harmless shapes where the formula is not used, so ppf never sees a 0 shape.
    lo = _beta_ppf(tail, np.where(at_zero, 1.0, k_arr), n_arr - k_arr + 1.0)
    hi = _beta_ppf(1.0 - tail, k_arr + 1.0, np.where(at_n, 1.0, n_arr - k_arr))
    lo = np.clip(np.where(at_zero, 0.0, lo), 0.0, 1.0)
    hi = np.clip(np.where(at_n, 1.0, hi), 0.0, 1.0)
    return _scalar_or_array(lo, scalar), _scalar_or_array(hi, scalar)


#: Prior strength ``a0 + b0`` (in pseudo-outcomes) of :func:`empirical_bayes_prior`.
EB_PRIOR_STRENGTH = 2.0


def _nonnegative(name: str, x) -> np.ndarray:
    """``x`` as a float64 array, every value finite and >= 0.

    Raises
    ------
    ConfigError
        Naming ``name`` and the first bad value.
    """
    v = np.asarray(x, dtype=np.float64)
    bad = ~(np.isfinite(v) & (v >= 0))
    if bad.any():
        raise ConfigError(name, float(v[bad].flat[0]), "must be finite and >= 0")
    return v


def empirical_bayes_prior(successes, failures, strength: float = EB_PRIOR_STRENGTH):
    """Beta prior of many keys' success probabilities, centred on their pooled success rate.

    Empirical Bayes for the prior mean in the beta-binomial model (Gelman et al., *Bayesian
    Data Analysis*, 3rd ed., section 5.3, where the hyperparameters of the keys' common Beta
    prior are estimated from the keys' data): the prior mean is the pooled rate

        m = (K + 1/2) / (N + 1),

    ``K`` the successes and ``N`` the outcomes summed over the keys (the half-counts of the
    Jeffreys prior keep ``m`` inside (0, 1), also with no data, where ``m = 1/2``). The
    strength ``a0 + b0`` is fixed, not estimated (with a handful of keys its moment
    estimate is unstable and can be negative), so the prior is ``Beta(strength * m,
    strength * (1 - m))``: a key with few outcomes reads near the pooled rate instead of
    1/2.

    Parameters
    ----------
    successes, failures : array_like of float64, shape (..., n)
        Each key's success and failure counts (:meth:`BetaCompetence.evidence`), finite and
        >= 0, broadcastable; the last axis runs over the keys.
    strength : float
        ``a0 + b0`` in pseudo-outcomes, finite and > 0 (default :data:`EB_PRIOR_STRENGTH`).

    Returns
    -------
    a0, b0 : float or ndarray of float64, shape (...)
        Strictly positive prior shapes; Python floats for 1-D input.

    Raises
    ------
    ConfigError
        A negative or non-finite count (field ``successes`` or ``failures``), or a bad
        ``strength``.

    Examples
    --------
    Successes (3, 0) and failures (1, 4): ``K = 3``, ``N = 8``, ``m = 3.5 / 9``, so
    ``(a0, b0) = (7/9, 11/9)`` with strength 2.
    """
    check_range("strength", strength, 0.0, None, lo_open=True)
    if not math.isfinite(strength):
        raise ConfigError("strength", strength, "must be finite")
    s = _nonnegative("successes", successes)
    f = _nonnegative("failures", failures)
    s, f = np.broadcast_arrays(s, f)
    k = s.sum(axis=-1)
    n = k + f.sum(axis=-1)
    m = (k + 0.5) / (n + 1.0)
    scalar = s.ndim <= 1
    return (_scalar_or_array(strength * m, scalar),
            _scalar_or_array(strength * (1.0 - m), scalar))


def weighted_beta_mean(a, b, weights, level: float = 0.95):
    """Mean and credible interval of a weighted mean of independent Beta probabilities.

    With ``p_i ~ Beta(a_i, b_i)`` independent and weights ``w_i >= 0`` (normalised to
    ``v_i = w_i / sum_j w_j``), the weighted mean ``M = sum_i v_i p_i`` has

        E[M] = mu = sum_i v_i a_i / (a_i + b_i),
        Var[M] = sum_i v_i^2 a_i b_i / ((a_i + b_i)^2 (a_i + b_i + 1))

    (the Beta moments: Gelman et al., *Bayesian Data Analysis*, 3rd ed., appendix A). Its
    distribution is approximated by the Beta with these two moments (method of moments),
    ``Beta(mu nu, (1 - mu) nu)`` with ``nu = mu (1 - mu) / Var[M] - 1``, and the interval is
    that Beta's equal-tailed credible interval (:func:`beta_interval`). ``nu`` is always
    > 0 (``Var[M] <= sum_i v_i Var[p_i] < sum_i v_i mu_i (1 - mu_i) <= mu (1 - mu)``), and
    with one key of positive weight the result is that key's own Beta (up to rounding). A key of
    weight 0 does not enter. No random draw is made.

    Parameters
    ----------
    a, b : array_like of float64, shape (..., n)
        Shapes, finite and > 0; the last axis runs over the keys.
    weights : array_like of float64, shape (..., n)
        Finite and >= 0, with a positive sum over the last axis (e.g. each key's arrival
        count). All three broadcast together.
    level : float
        Credible level in (0, 1).

    Returns
    -------
    mean, lower, upper : float or ndarray of float64, shape (...)
        ``mu`` and the interval's ends, within [0, 1]; Python floats for 1-D input.

    Raises
    ------
    ConfigError
        A shape that is not finite and > 0 (field ``a`` or ``b``), a negative or
        non-finite weight or weights summing to 0 (field ``weights``), a level outside
        (0, 1).

    Examples
    --------
    Beta(4, 2) and Beta(1, 5) with weights 1 and 3: ``mu = (2/3 + 3/6) / 4 = 7/24``,
    ``Var[M] = (1/16)(8/252) + (9/16)(5/252) = 53/4032``.
    """
    level = _check_level(level)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    for name, v in (("a", a), ("b", b)):
        bad = ~(np.isfinite(v) & (v > 0))
        if bad.any():
            raise ConfigError(name, float(v[bad].flat[0]), "Beta shape must be finite and > 0")
    w = _nonnegative("weights", weights)
    a, b, w = np.broadcast_arrays(a, b, w)
    total = w.sum(axis=-1, keepdims=True)
    if (total <= 0).any():
        raise ConfigError("weights", 0.0, "must have a positive sum over the keys")
    v = w / total
    n = a + b
    mu = (v * (a / n)).sum(axis=-1)
    var = (v * v * (a * b / (n * n * (n + 1.0)))).sum(axis=-1)
    nu = mu * (1.0 - mu) / var - 1.0
    lo, hi = beta_interval(mu * nu, (1.0 - mu) * nu, level)
    scalar = a.ndim <= 1
    return (_scalar_or_array(mu, scalar), _scalar_or_array(np.asarray(lo), scalar),
            _scalar_or_array(np.asarray(hi), scalar))


def posterior_path(successes, prior="uniform", discount: float = 1.0):
    """The Beta posterior of one key after each of its outcomes, in order, vectorised.

    The path :class:`BetaCompetence` takes when the outcomes are given to :meth:`update`
    one by one (module docstring): after the t-th outcome

        a_t = a0 + sum_{j <= t} discount**(t - j) s_j,
        b_t = b0 + sum_{j <= t} discount**(t - j) (1 - s_j),

    a running sum for ``discount = 1`` and otherwise the first-order recursion
    ``e_t = discount * e_(t-1) + s_t`` (:func:`scipy.signal.lfilter`).

    Parameters
    ----------
    successes : array_like of bool, shape (n,)
        The outcomes in order (True a success).
    prior : see :func:`prior_shapes`
    discount : float
        In (0, 1].

    Returns
    -------
    a, b : ndarray of float64, shape (n,)

    Raises
    ------
    ConfigError
        A bad prior or discount, or ``successes`` not 1-D.
    """
    a0, b0 = prior_shapes(prior)
    d = float(check_range("discount", discount, 0.0, 1.0, lo_open=True))
    s = np.asarray(successes, dtype=bool)
    if s.ndim != 1:
        raise ConfigError("successes", s.shape, "must be one outcome per entry (1-D)")
    x = s.astype(np.float64)
    if d == 1.0:
        ks, kf = np.cumsum(x), np.cumsum(1.0 - x)
    else:
        from scipy import signal

        ks = signal.lfilter([1.0], [1.0, -d], x)
        kf = signal.lfilter([1.0], [1.0, -d], 1.0 - x)
    return a0 + ks, b0 + kf


class BetaCompetence:
    """Beta(a, b) success posteriors for many keys, vectorised.

    Keys are any hashables: ``(tenant, task_type)``, a skill name, an arm index. Rows of the
    float64 arrays ``a`` and ``b`` (grown by amortised doubling) belong to keys in order of
    first appearance; an unseen key reads as the prior.

    Many-key methods take either one key or a *list* (or 1-D object array) of keys. A tuple
    is one key (so ``("t1", "triage")`` is a single (tenant, task type) key); for a single
    key they return Python floats, for a list arrays of shape ``(len(keys),)``.

    Parameters
    ----------
    prior : {"uniform", "jeffreys"} or (float, float)
        Beta prior; shapes must be finite and > 0 (see :func:`prior_shapes`).
    discount : float
        gamma_d in (0, 1]: the factor by which a key's evidence decays before each of its
        updates (module docstring; Raj & Kalyani 2017). 1 means no forgetting.

    Raises
    ------
    ConfigError
        Bad prior or discount.
    """

    def __init__(self, prior="uniform", discount: float = 1.0):
        self.a0, self.b0 = prior_shapes(prior)
        self.discount = float(check_range("discount", discount, 0.0, 1.0, lo_open=True))
        self._rows: dict[Hashable, int] = {}
        self._keys: list[Hashable] = []
        self._a = np.empty(8, dtype=np.float64)
        self._b = np.empty(8, dtype=np.float64)

    # ----------------------------------------------------------------- storage
    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key) -> bool:
        return key in self._rows

    def keys(self) -> list:
        """Keys seen so far, in order of first update."""
        return list(self._keys)

    def _row(self, key) -> int:
        """Row of ``key``, creating it at the prior."""
        row = self._rows.get(key)
        if row is None:
            row = len(self._keys)
            if row == self._a.shape[0]:
                cap = 2 * row
                for name in ("_a", "_b"):
                    old = getattr(self, name)
                    new = np.empty(cap, dtype=np.float64)
                    new[:row] = old[:row]
                    setattr(self, name, new)
            self._a[row] = self.a0
            self._b[row] = self.b0
            self._rows[key] = row
            self._keys.append(key)
        return row

    @staticmethod
    def _is_many(keys) -> bool:
        return isinstance(keys, list) or (isinstance(keys, np.ndarray) and keys.ndim == 1)

    def _shapes(self, keys):
        """Shapes (a, b) for one key (floats) or many (arrays); unseen keys get the prior."""
        if not self._is_many(keys):
            row = self._rows.get(keys)
            if row is None:
                return self.a0, self.b0
            return float(self._a[row]), float(self._b[row])
        rows = np.fromiter((self._rows.get(k, -1) for k in keys), dtype=np.int64,
                           count=len(keys))
        seen = rows >= 0
        a = np.full(rows.shape, self.a0)
        b = np.full(rows.shape, self.b0)
        a[seen] = self._a[rows[seen]]
        b[seen] = self._b[rows[seen]]
        return a, b

    # ----------------------------------------------------------------- updates
    def update(self, key, success: bool, weight: float = 1.0) -> None:
        """Add one outcome to ``key``'s posterior (after decaying its evidence).

        Parameters
        ----------
        key : hashable
        success : bool
            True adds ``weight`` to ``a``, False to ``b``.
        weight : float
            Non-negative, finite evidence weight (1 for one episode).

        Raises
        ------
        ConfigError
            Negative, infinite or NaN weight.
        """
        weight = float(check_range("weight", weight, 0.0, None))
        if not math.isfinite(weight):
            raise ConfigError("weight", weight, "must be finite")
        row = self._row(key)
        d = self.discount
        if d != 1.0:
            self._a[row] = self.a0 + d * (self._a[row] - self.a0)
            self._b[row] = self.b0 + d * (self._b[row] - self.b0)
        if success:
            self._a[row] += weight
        else:
            self._b[row] += weight

    def record(self, key, success: bool) -> tuple[float, float]:
        """``update(key, success)`` (weight 1), then ``posterior(key)``: the posterior
        shapes ``(a, b)`` after the outcome, as floats (a library reads them back after
        every outcome it reports).

        Parameters
        ----------
        key : hashable
            A single key (as :meth:`posterior` takes it).
        success : bool

        Returns
        -------
        tuple of float
            The same values ``update`` then ``posterior`` give.
        """
        self.update(key, success)
        return self.posterior(key)

    def update_many(self, keys: Iterable, successes, weights=None) -> None:
        """Add many outcomes at once, same result as calling :meth:`update` in order.

        Parameters
        ----------
        keys : sequence of hashable, length n
            Keys may repeat; later entries are more recent.
        successes : array_like of bool, shape (n,)
        weights : array_like of float64, shape (n,), optional
            Non-negative finite weights (default 1).

        Raises
        ------
        ConfigError
            Length mismatch or bad weights; nothing is updated then.

        Notes
        -----
        With a discount, the i-th outcome of a key that receives m outcomes in this batch
        contributes ``discount**(m - i)`` of its weight, and the key's prior evidence decays by
        ``discount**m`` (the closed form of the per-update rule). Sums are taken with
        ``np.add.at``, so results equal the sequential loop up to float rounding.
        """
        keys = list(keys)
        s = np.asarray(successes, dtype=bool).reshape(-1)
        n = len(keys)
        if s.shape[0] != n:
            raise ConfigError("successes", s.shape[0], f"length must equal len(keys)={n}")
        if weights is None:
            w = np.ones(n, dtype=np.float64)
        else:
            w = np.asarray(weights, dtype=np.float64).reshape(-1)
            if w.shape[0] != n:
                raise ConfigError("weights", w.shape[0], f"length must equal len(keys)={n}")
            bad = ~(np.isfinite(w) & (w >= 0))
            if bad.any():
                raise ConfigError("weights", float(w[bad][0]), "must be finite and >= 0")
        if n == 0:
            return
        rows = np.fromiter((self._row(k) for k in keys), dtype=np.int64, count=n)
        d = self.discount
        if d == 1.0:
            np.add.at(self._a, rows, np.where(s, w, 0.0))
            np.add.at(self._b, rows, np.where(s, 0.0, w))
            return
        # occurrence index of each entry within its key (0-based, in batch order)
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        starts = np.flatnonzero(np.r_[True, sorted_rows[1:] != sorted_rows[:-1]])
        counts = np.diff(np.r_[starts, n])
        occ_sorted = np.arange(n) - np.repeat(starts, counts)
        m_sorted = np.repeat(counts, counts)
        factor = np.empty(n, dtype=np.float64)
        factor[order] = d ** (m_sorted - 1 - occ_sorted).astype(np.float64)
        uniq = sorted_rows[starts]
        decay = d ** counts.astype(np.float64)
        self._a[uniq] = self.a0 + decay * (self._a[uniq] - self.a0)
        self._b[uniq] = self.b0 + decay * (self._b[uniq] - self.b0)
        fw = factor * w
        np.add.at(self._a, rows, np.where(s, fw, 0.0))
        np.add.at(self._b, rows, np.where(s, 0.0, fw))

    def set_posterior(self, key, a: float, b: float) -> None:
        """Overwrite ``key``'s posterior with Beta(a, b) (restoring saved state).

        Raises
        ------
        ConfigError
            ``a`` or ``b`` not finite and > 0.
        """
        for name, v in (("a", a), ("b", b)):
            check_range(name, v, 0.0, None, lo_open=True)
            if not math.isfinite(v):
                raise ConfigError(name, v, "must be finite")
        row = self._row(key)
        self._a[row], self._b[row] = float(a), float(b)

    def reset(self, key=None) -> None:
        """Forget ``key`` (back to the prior), or every key when ``key`` is None."""
        if key is None:
            self._rows.clear()
            self._keys.clear()
            return
        row = self._rows.get(key)
        if row is not None:
            self._a[row], self._b[row] = self.a0, self.b0

    # ----------------------------------------------------------------- queries
    def posterior(self, key) -> tuple[float, float]:
        """Posterior shapes ``(a, b)`` of one key (the prior if unseen)."""
        a, b = self._shapes(key)
        return float(a), float(b)

    def counts(self, key) -> tuple[float, float]:
        """Effective ``(n_success, n_failure)`` of one key: ``(a - a0, b - b0)``.

        With a discount these are the decayed (possibly fractional) counts.
        """
        a, b = self.posterior(key)
        return a - self.a0, b - self.b0

    def evidence(self, keys) -> tuple[np.ndarray, np.ndarray]:
        """Effective ``(n_success, n_failure)`` of many keys, as :meth:`counts` gives them
        for one: ``(a - a0, b - b0)``, 0 for an unseen key.

        Parameters
        ----------
        keys : iterable of hashable
            Each entry one key (a tuple entry is one key), length n.

        Returns
        -------
        successes, failures : ndarray of float64, shape (n,)
            Non-negative; fractional under a discount. Add another prior's shapes to them
            to read the same outcomes under that prior (:func:`empirical_bayes_prior`).
        """
        a, b = self._shapes(list(keys))
        return a - self.a0, b - self.b0

    def mean(self, keys):
        """Posterior mean ``a / (a + b)``; float for one key, ndarray (n,) for a list."""
        a, b = self._shapes(keys)
        return a / (a + b)

    def interval(self, keys, level: float = 0.95):
        """Equal-tailed credible interval ``(lo, hi)`` (see :func:`beta_interval`)."""
        a, b = self._shapes(keys)
        return beta_interval(a, b, level)

    def lower_bound(self, keys, level: float = 0.95):
        """Lower end of the equal-tailed interval at ``level``."""
        return self.interval(keys, level)[0]

    def upper_bound(self, keys, level: float = 0.95):
        """Upper end of the equal-tailed interval at ``level``."""
        return self.interval(keys, level)[1]

    def sample(self, keys, rng):
        """One posterior draw per key (Thompson sampling; Thompson 1933).

        Parameters
        ----------
        keys : hashable or list of hashable
        rng : numpy.random.Generator or int
            Generator (or seed for :func:`numpy.random.default_rng`); same seed, same draws.

        Returns
        -------
        float or ndarray of float64, shape (n,)
        """
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        a, b = self._shapes(keys)
        draw = rng.beta(a, b)
        return float(draw) if not self._is_many(keys) else draw

    def summary(self, keys, level: float = 0.95) -> dict:
        """JSON-ready summary: a, b, n_success, n_failure, mean, lower, upper (lists or floats)."""
        a, b = self._shapes(keys)
        lo, hi = beta_interval(a, b, level)
        out = {"a": a, "b": b, "n_success": np.subtract(a, self.a0),
               "n_failure": np.subtract(b, self.b0), "mean": np.divide(a, np.add(a, b)),
               "lower": lo, "upper": hi, "level": level}
        return {k: (v.tolist() if isinstance(v, np.ndarray) else float(v))
                for k, v in out.items()}

    def __repr__(self) -> str:
        return (f"BetaCompetence(prior=({self.a0}, {self.b0}), discount={self.discount}, "
                f"keys={len(self)})")
