"""Statistics over runs: intervals, paired tests, multiple-testing control, aggregates.

Every interval is a bootstrap interval from :func:`scipy.stats.bootstrap` (Efron & Tibshirani,
*An Introduction to the Bootstrap*, 1993; BCa by default), computed for many points at once
(``vectorized=True`` along the run axis), with a seeded generator so the same data and seed
give the same interval bit for bit. The interquartile mean (IQM, the 25%-trimmed mean of
Agarwal et al., "Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021) is offered
as a robust alternative to the mean.

Comparisons of variants are *paired*: run ``r`` of every variant shares its random numbers
(common random numbers), so the unit of analysis is the per-run difference ``d_r = x_r -
y_r``: :func:`paired_diff_ci` (bootstrap interval of the mean difference),
:func:`sign_flip_test` (the randomisation test of a zero-centred symmetric difference,
exact over all ``2^n`` sign patterns up to ``n = 16``), :func:`min_detectable_difference`.
Families of tests are corrected by Holm's step-down method (:func:`holm`; family-wise
error) or Benjamini-Hochberg (:func:`benjamini_hochberg`; false discovery rate).
Aggregates across tasks follow rliable (Agarwal et al. 2021): :func:`stratified_iqm`,
:func:`probability_of_improvement`, :func:`performance_profile`, each with a stratified
bootstrap (runs resampled within each task). Proportions get Wilson intervals
(:func:`proportion_ci`), which keep their width at 0/n and n/n.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import stats as _sps

__all__ = ["Interval", "benjamini_hochberg", "bootstrap_ci", "curve_ci", "diff_ci", "holm",
           "iqm", "min_detectable_difference", "paired_diff_ci", "per_run_ci",
           "performance_profile", "probability_of_improvement", "proportion_ci",
           "sign_flip_test", "stratified_iqm"]

#: The bootstrap method of every interval unless named otherwise, for reports and manifests.
INTERVAL_METHOD = "BCa bootstrap (percentile where BCa is undefined)"
#: The method of the stratified (rliable-style) aggregate intervals.
AGGREGATE_METHOD = "percentile stratified bootstrap (runs resampled within each task)"

#: Resamples drawn per batch; fixed so a column's interval never depends on the other columns.
_BATCH = 250


def iqm(x, axis=0):
    """Interquartile mean: the mean of the middle 50% of values (25% trimmed each side).

    Parameters
    ----------
    x : array_like
        Samples.
    axis : int
        Axis along which to reduce.

    Returns
    -------
    numpy.ndarray or float
        ``scipy.stats.trim_mean(x, 0.25, axis)``.
    """
    return _sps.trim_mean(x, 0.25, axis=axis)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


_STATISTICS = {"mean": _mean, "iqm": iqm}


@dataclass(frozen=True)
class Interval:
    """Point estimates with confidence bounds, one per column of the input.

    Attributes
    ----------
    estimate, low, high : numpy.ndarray, float64, shape (k,)
        Statistic over runs and its bootstrap interval. ``low``/``high`` are NaN when
        fewer than two runs were given (no interval exists) and equal ``estimate`` when all
        runs agree (zero spread).
    n : int
        Number of runs (samples per column).
    """

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n: int


def bootstrap_ci(samples, *, statistic: str = "mean", confidence: float = 0.95,
                 n_resamples: int = 2000, seed: int = 0, method: str = "BCa") -> Interval:
    """Statistic over runs with a bootstrap confidence interval, per column.

    Parameters
    ----------
    samples : array_like, float, shape (n_runs,) or (n_runs, k)
        One row per run; each column is an independent quantity (e.g. one episode).
        Values must be finite.
    statistic : {"mean", "iqm"}
        Statistic whose interval is computed.
    confidence : float
        Confidence level in (0, 1); 0.95 gives a 95% interval.
    n_resamples : int
        Bootstrap resamples.
    seed : int
        Seed of the resampling generator; the result is a deterministic function of
        ``(samples column, seed, n_resamples, method)``.
    method : {"BCa", "percentile", "basic"}
        :func:`scipy.stats.bootstrap` method. Columns where BCa is undefined fall back to
        the percentile interval.

    Returns
    -------
    Interval
        Arrays of shape ``(k,)`` (or 0-d for 1-D input).

    Raises
    ------
    ValueError
        Empty or non-finite samples, or an unknown statistic.
    """
    if statistic not in _STATISTICS:
        raise ValueError(f"statistic={statistic!r}: must be one of {sorted(_STATISTICS)}")
    x = np.asarray(samples, dtype=np.float64)
    one_d = x.ndim == 1
    if one_d:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"samples: expected shape (n_runs, k) with n_runs >= 1, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples: values must be finite")
    stat = _STATISTICS[statistic]
    n, k = x.shape
    estimate = np.asarray(stat(x, axis=0), dtype=np.float64)
    low = np.full(k, np.nan)
    high = np.full(k, np.nan)
    if n >= 2:
        flat = np.ptp(x, axis=0) == 0
        low[flat] = high[flat] = estimate[flat]
        cols = np.flatnonzero(~flat)
        if cols.size:
            lo, hi = _scipy_ci(x[:, cols], stat, confidence, n_resamples, seed, method)
            bad = ~(np.isfinite(lo) & np.isfinite(hi))
            if bad.any() and method != "percentile":
                plo, phi = _scipy_ci(x[:, cols[bad]], stat, confidence, n_resamples, seed,
                                     "percentile")
                lo[bad], hi[bad] = plo, phi
            low[cols], high[cols] = lo, hi
    if one_d:
        return Interval(estimate[0], low[0], high[0], n)
    return Interval(estimate, low, high, n)


def _scipy_ci(x, stat, confidence, n_resamples, seed, method):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        res = _sps.bootstrap((x,), stat, n_resamples=n_resamples, batch=_BATCH,
                             vectorized=True, axis=0, confidence_level=confidence,
                             method=method, rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return (np.atleast_1d(np.asarray(ci.low, dtype=np.float64)).copy(),
            np.atleast_1d(np.asarray(ci.high, dtype=np.float64)).copy())


def curve_ci(frame: pl.DataFrame, *, by: list[str], x: str, y: str, run: str = "run",
             statistic: str = "mean", confidence: float = 0.95, n_resamples: int = 2000,
             seed: int = 0) -> pl.DataFrame:
    """Per group and x value, the statistic of ``y`` over runs with its bootstrap interval.

    Parameters
    ----------
    frame : polars.DataFrame
        Tidy rows with columns ``by + [run, x, y]``; one row per (group, run, x).
    by : list of str
        Grouping columns (e.g. ``["variant"]`` or ``["variant", "resolution"]``); the output
        keeps their first-appearance order.
    x, y : str
        The x column (e.g. ``episode``) and the value column (e.g. ``steps``).
    run : str
        Run-index column.
    statistic, confidence, n_resamples, seed
        As in :func:`bootstrap_ci`.

    Returns
    -------
    polars.DataFrame
        Columns ``by + [x, "n", "estimate", "low", "high"]`` (float64 for the last three),
        sorted by group (first appearance) then ``x``. Where some runs lack an x value
        (runs that stopped early) the interval at that x uses the runs that have it.
    """
    pieces = []
    opts = dict(statistic=statistic, confidence=confidence, n_resamples=n_resamples,
                seed=seed)
    for key, group in frame.group_by(by, maintain_order=True) if by else [((), frame)]:
        wide = (group.select(run, x, y)
                .pivot(on=x, index=run, values=y, sort_columns=False)
                .sort(run))
        xs_sorted = np.sort(group.get_column(x).unique().to_numpy())
        names = [str(v) for v in xs_sorted]
        values = wide.select(names).to_numpy().astype(np.float64) if names else \
            np.zeros((0, 0))
        complete = ~np.isnan(values)
        if complete.all():
            ci = bootstrap_ci(values, **opts)
            n = np.full(len(xs_sorted), values.shape[0], dtype=np.int64)
            est, low, high = ci.estimate, ci.low, ci.high
        else:
            est, low, high = (np.empty(len(xs_sorted)) for _ in range(3))
            n = complete.sum(axis=0).astype(np.int64)
            for j in range(len(xs_sorted)):
                ci = bootstrap_ci(values[complete[:, j], j], **opts)
                est[j], low[j], high[j] = ci.estimate, ci.low, ci.high
        data = {col: [val] * len(xs_sorted) for col, val in zip(by, key)}
        data.update({x: xs_sorted, "n": n, "estimate": est, "low": low, "high": high})
        piece = pl.DataFrame(data)
        piece = piece.with_columns(
            [pl.col(c).cast(frame.schema[c]) for c in by] + [pl.col(x).cast(frame.schema[x])])
        pieces.append(piece)
    return pl.concat(pieces, how="vertical") if pieces else pl.DataFrame()


def per_run_ci(values, **opts) -> Interval:
    """Interval of one scalar per run (e.g. final cumulative reward), as :func:`bootstrap_ci`.

    Parameters
    ----------
    values : array_like, shape (n_runs,)
        One value per run.
    **opts
        Passed to :func:`bootstrap_ci`.

    Returns
    -------
    Interval
        0-d fields; ``estimate`` is NaN when ``values`` is empty.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        nan = np.float64(np.nan)
        return Interval(nan, nan, nan, 0)
    return bootstrap_ci(v, **opts)


def diff_ci(a, b, *, statistic: str = "mean", confidence: float = 0.95,
            n_resamples: int = 2000, seed: int = 0) -> Interval:
    """Difference ``stat(a) - stat(b)`` of two independent samples, with a bootstrap interval.

    Each sample is resampled independently (``scipy.stats.bootstrap`` with two samples,
    ``paired=False``, percentile method).

    Parameters
    ----------
    a, b : array_like, shape (n_a,), (n_b,)
        One value per run of each variant (finite).
    statistic, confidence, n_resamples, seed
        As in :func:`bootstrap_ci`.

    Returns
    -------
    Interval
        0-d fields; ``n = min(n_a, n_b)``. Bounds are NaN when either sample has fewer than
        two values, and equal the estimate when both samples are constant.
    """
    stat = _STATISTICS[statistic]
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.size == 0 or y.size == 0:
        nan = np.float64(np.nan)
        return Interval(nan, nan, nan, 0)
    est = np.float64(stat(x, axis=0) - stat(y, axis=0))
    n = int(min(x.size, y.size))
    if n < 2:
        return Interval(est, np.float64(np.nan), np.float64(np.nan), n)
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        return Interval(est, est, est, n)

    def _diff(u, v, axis=-1):
        return stat(u, axis=axis) - stat(v, axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _sps.DegenerateDataWarning)
        res = _sps.bootstrap((x, y), _diff, n_resamples=n_resamples, batch=_BATCH,
                             vectorized=True, paired=False, confidence_level=confidence,
                             method="percentile", rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Interval(est, np.float64(ci.low), np.float64(ci.high), n)


# --------------------------------------------------------------------------- paired tests

def _paired(a, b) -> np.ndarray:
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"paired samples need equal lengths, got {x.size} and {y.size}")
    d = x - y
    if not np.all(np.isfinite(d)):
        raise ValueError("paired samples: values must be finite")
    return d


def paired_diff_ci(a, b, *, confidence: float = 0.95, n_resamples: int = 2000,
                   seed: int = 0) -> Interval:
    """Mean of the paired differences ``a_r - b_r`` with a bootstrap interval.

    The differences are resampled as one sample (runs are the unit: the pairs share their
    random numbers), by :func:`bootstrap_ci` (BCa, percentile where BCa is undefined).

    Parameters
    ----------
    a, b : array_like, float, shape (n,)
        One value per run, run ``r`` of ``a`` paired with run ``r`` of ``b``.
    confidence, n_resamples, seed
        As in :func:`bootstrap_ci`.

    Returns
    -------
    Interval
        0-d fields. NaN bounds for n < 2; bounds equal to the estimate when every
        difference is the same (test that with ``np.ptp`` before reading it as "no
        uncertainty").

    Raises
    ------
    ValueError
        Unequal lengths, no pairs, or non-finite values.
    """
    d = _paired(a, b)
    if d.size == 0:
        raise ValueError("paired samples: no pairs")
    return bootstrap_ci(d, confidence=confidence, n_resamples=n_resamples, seed=seed)


#: Up to this many pairs the sign-flip test enumerates every sign pattern (exact).
EXACT_SIGN_FLIP_MAX = 16


def sign_flip_test(d, *, alternative: str = "two-sided", n_resamples: int = 9999,
                   seed: int = 0) -> float:
    """p-value of the sign-flip (randomisation) test that paired differences centre on 0.

    Under the null hypothesis each difference is as likely to have either sign, so the
    observed mean is compared with the means of ``d * s`` over sign vectors ``s``
    (Fisher 1935; Good, *Permutation Tests*, 2000). With ``n <= 16`` differences all
    ``2^n`` sign vectors are enumerated (exact; the smallest possible p-value is
    ``2^-n``, so 5 runs can reach 0.031 and 10 runs 0.001); above that ``n_resamples``
    random ones, by :func:`scipy.stats.permutation_test` with
    ``permutation_type="samples"``, which counts the observed pattern too.

    Parameters
    ----------
    d : array_like, float, shape (n,)
        Paired differences (finite).
    alternative : {"two-sided", "greater", "less"}
        ``"greater"``: the mean difference is positive.
    n_resamples : int
        Random sign vectors when ``n > 16``.
    seed : int

    Returns
    -------
    float
        In (0, 1]; 1.0 when every difference is 0.

    Raises
    ------
    ValueError
        Empty or non-finite ``d``, or an unknown ``alternative``.
    """
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative={alternative!r}: must be 'two-sided', 'greater' or 'less'")
    d = np.asarray(d, dtype=np.float64).ravel()
    if d.size == 0 or not np.all(np.isfinite(d)):
        raise ValueError("d: need at least one finite difference")
    if not np.any(d):
        return 1.0

    def mean(x, axis=-1):
        return np.mean(x, axis=axis)

    budget = np.inf if d.size <= EXACT_SIGN_FLIP_MAX else n_resamples
    res = _sps.permutation_test((d,), mean, permutation_type="samples", vectorized=True,
                                n_resamples=budget, alternative=alternative,
                                rng=np.random.default_rng(seed))
    return float(min(1.0, res.pvalue))


def min_detectable_difference(d, *, alpha: float = 0.05, power: float = 0.8,
                              alternative: str = "greater") -> float:
    """The smallest mean paired difference the runs could detect (a sensitivity figure).

    ``(t_{1-alpha', n-1} + t_{power, n-1}) * s_d / sqrt(n)`` with ``s_d`` the standard
    deviation of the differences and ``alpha' = alpha`` for a one-sided test (``alpha /
    2`` two-sided): the effect a paired t-test at level ``alpha'`` would find with
    probability ``power`` (Cohen 1988, ch. 2). Reported beside "does not hold", so that a
    failed test is not read as "no effect" when the runs could not have seen one.

    Parameters
    ----------
    d : array_like, float, shape (n,)
    alpha, power : float
        In (0, 1).
    alternative : {"greater", "less", "two-sided"}

    Returns
    -------
    float
        NaN for n < 2; 0.0 when every difference is the same.
    """
    d = np.asarray(d, dtype=np.float64).ravel()
    n = d.size
    if n < 2:
        return float("nan")
    a = alpha / 2 if alternative == "two-sided" else alpha
    s = float(np.std(d, ddof=1))
    return float((_sps.t.ppf(1 - a, n - 1) + _sps.t.ppf(power, n - 1)) * s / np.sqrt(n))


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control; Holm 1979).

    Sorted ascending, ``p_(i)`` becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``; reject
    hypothesis ``i`` at level ``alpha`` when its adjusted p-value is ``<= alpha``.

    Parameters
    ----------
    pvalues : array_like, float, shape (m,)
        In [0, 1].

    Returns
    -------
    numpy.ndarray, float64, shape (m,)
        Adjusted p-values in the input order.

    Raises
    ------
    ValueError
        A p-value outside [0, 1] or NaN.
    """
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    if p.size and (np.any(~np.isfinite(p)) or p.min() < 0 or p.max() > 1):
        raise ValueError("pvalues: must be in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adj = np.maximum.accumulate(adj)
    out = np.empty(m)
    out[order] = adj
    return out


def benjamini_hochberg(pvalues) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (false discovery rate; Benjamini & Hochberg
    1995), by :func:`scipy.stats.false_discovery_control` (``method="bh"``).

    Parameters
    ----------
    pvalues : array_like, float, shape (m,)

    Returns
    -------
    numpy.ndarray, float64, shape (m,)
        In the input order (empty input gives an empty array).
    """
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    if p.size == 0:
        return p
    return np.asarray(_sps.false_discovery_control(p, method="bh"), dtype=np.float64)


def proportion_ci(successes: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``successes / n`` (Wilson 1927).

    Unlike a bootstrap of 0/1 outcomes it keeps a width at 0/n and n/n: 0 of 10 gives
    (0, 0.278) and 3 of 3 (0.439, 1) at 95% (:func:`dyna.competence.wilson_interval`).

    Returns
    -------
    (float, float)
        ``(nan, nan)`` when ``n == 0``.

    Raises
    ------
    ValueError
        ``successes`` outside ``0..n``.
    """
    from dyna.competence import wilson_interval

    n, k = int(n), int(successes)
    if n == 0:
        return (float("nan"), float("nan"))
    if not 0 <= k <= n:
        raise ValueError(f"successes={k}: must be in 0..{n}")
    lo, hi = wilson_interval(k, n, confidence)
    return (float(lo), float(hi))


# --------------------------------------------------------------------------- aggregates

def _stratified_indices(rng: np.random.Generator, n_runs: int, n_tasks: int,
                        n_resamples: int) -> np.ndarray:
    """Run indices, shape (n_resamples, n_runs, n_tasks): runs drawn with replacement
    within each task (a stratified bootstrap)."""
    return rng.integers(0, n_runs, size=(n_resamples, n_runs, n_tasks))


def _check_scores(scores) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"scores: expected shape (n_runs, n_tasks), got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("scores: values must be finite")
    return x


def _percentile_interval(boot: np.ndarray, confidence: float) -> tuple:
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(boot, [tail, 100 - tail], axis=0)
    return lo, hi


def stratified_iqm(scores, *, confidence: float = 0.95, n_resamples: int = 2000,
                   seed: int = 0) -> Interval:
    """Interquartile mean of all scores with a stratified bootstrap interval (rliable).

    The IQM is the 25%-trimmed mean of the ``n_runs * n_tasks`` scores pooled
    (``scipy.stats.trim_mean(scores, 0.25, axis=None)``, as ``rliable.metrics
    .aggregate_iqm``); its interval resamples runs with replacement within each task and
    takes percentiles (Agarwal et al., NeurIPS 2021, section 4).

    Parameters
    ----------
    scores : array_like, float, shape (n_runs, n_tasks)
        One score per run and task (here: scenario), on a common scale.
    confidence, n_resamples, seed
        As in :func:`bootstrap_ci`.

    Returns
    -------
    Interval
        0-d fields; ``n`` is ``n_runs``. NaN bounds for one run.
    """
    x = _check_scores(scores)
    est = np.float64(_sps.trim_mean(x, 0.25, axis=None))
    if x.shape[0] < 2:
        return Interval(est, np.float64(np.nan), np.float64(np.nan), x.shape[0])
    idx = _stratified_indices(np.random.default_rng(seed), *x.shape, n_resamples)
    cols = np.arange(x.shape[1])
    boot = _sps.trim_mean(x[idx, cols].reshape(n_resamples, -1), 0.25, axis=1)
    lo, hi = _percentile_interval(boot, confidence)
    return Interval(est, np.float64(lo), np.float64(hi), x.shape[0])


def _poi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 per task, averaged; x, y shape (..., n_runs, n_tasks)."""
    gt = (x[..., :, None, :] > y[..., None, :, :]).mean(axis=(-3, -2))
    eq = (x[..., :, None, :] == y[..., None, :, :]).mean(axis=(-3, -2))
    return (gt + 0.5 * eq).mean(axis=-1)


def probability_of_improvement(scores_x, scores_y, *, confidence: float = 0.95,
                               n_resamples: int = 2000, seed: int = 0) -> Interval:
    """P(X > Y): the probability that a run of X scores above a run of Y on a random task.

    Per task the Mann-Whitney statistic ``P(X > Y) + P(X = Y) / 2`` over all run pairs,
    averaged over tasks (``rliable.metrics.probability_of_improvement``), with a
    stratified bootstrap percentile interval (each algorithm's runs resampled within
    each task). 0.5 means no tendency either way.

    Parameters
    ----------
    scores_x, scores_y : array_like, float, shape (n_runs_x, n_tasks), (n_runs_y, n_tasks)

    Returns
    -------
    Interval
        0-d fields.

    Raises
    ------
    ValueError
        Different numbers of tasks, or bad scores.
    """
    x, y = _check_scores(scores_x), _check_scores(scores_y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"scores: {x.shape[1]} and {y.shape[1]} tasks")
    est = np.float64(_poi(x, y))
    n = min(x.shape[0], y.shape[0])
    if n < 2:
        return Interval(est, np.float64(np.nan), np.float64(np.nan), n)
    rng = np.random.default_rng(seed)
    cols = np.arange(x.shape[1])
    boot = np.empty(n_resamples)
    for lo in range(0, n_resamples, _BATCH):
        k = min(_BATCH, n_resamples - lo)
        bx = x[_stratified_indices(rng, x.shape[0], x.shape[1], k), cols]
        by = y[_stratified_indices(rng, y.shape[0], y.shape[1], k), cols]
        boot[lo:lo + k] = _poi(bx, by)
    low, high = _percentile_interval(boot, confidence)
    return Interval(est, np.float64(low), np.float64(high), n)


def performance_profile(scores, taus, *, confidence: float = 0.95, n_resamples: int = 2000,
                        seed: int = 0) -> Interval:
    """Fraction of runs (over all tasks) scoring above each threshold tau (rliable's score
    distribution; Dolan & More 2002, Agarwal et al. 2021), with stratified bootstrap
    percentile bands.

    Parameters
    ----------
    scores : array_like, float, shape (n_runs, n_tasks)
    taus : array_like, float, shape (k,)

    Returns
    -------
    Interval
        Fields of shape (k,): ``estimate[j] = mean(scores > taus[j])``.
    """
    x = _check_scores(scores)
    t = np.asarray(taus, dtype=np.float64).ravel()
    est = (x.reshape(-1)[:, None] > t[None, :]).mean(axis=0)
    if x.shape[0] < 2:
        nan = np.full(t.shape, np.nan)
        return Interval(est, nan, nan.copy(), x.shape[0])
    idx = _stratified_indices(np.random.default_rng(seed), *x.shape, n_resamples)
    cols = np.arange(x.shape[1])
    flat = x[idx, cols].reshape(n_resamples, -1)
    boot = (flat[:, :, None] > t[None, None, :]).mean(axis=1)
    lo, hi = _percentile_interval(boot, confidence)
    return Interval(est, lo, hi, x.shape[0])
