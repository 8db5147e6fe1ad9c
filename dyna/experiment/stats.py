"""Statistics over runs: mean (or IQM) with bootstrap confidence intervals.

Every interval is a bootstrap interval from :func:`scipy.stats.bootstrap` (Efron & Tibshirani,
*An Introduction to the Bootstrap*, 1993; BCa by default), computed for many points at once
(``vectorized=True`` along the run axis), with a seeded generator so the same data and seed
give the same interval bit for bit. The interquartile mean (IQM, the 25%-trimmed mean of
Agarwal et al., "Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021) is offered
as a robust alternative to the mean.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import stats as _sps

__all__ = ["Interval", "bootstrap_ci", "curve_ci", "diff_ci", "iqm", "per_run_ci"]

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
