"""Kind ``agent_tasks``: the cost of volume, split into its parts.

A growing store costs in three places: the catalog shown every episode (tokens per stored
entry), the entries injected into the context (tokens per injected entry), and the
quality of retrieval (precision@k: the share of injected entries that are about the
task's family). Each is a per-run column of the ``runs`` table over the last
``analysis.tokens_window`` episodes (:func:`.metrics.run_summaries`).

Tokens per success over that window is a *ratio of sums* across runs, ``sum_r tokens_r /
sum_r successes_r``, not the mean of per-run ratios: a run with one success would
otherwise weigh as much as one with a hundred, and a run with none has no ratio at all.
Its interval resamples runs with replacement and recomputes the ratio of sums
(:func:`ratio_of_sums_ci`; Efron & Tibshirani 1993, ch. 10 on ratio estimates).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import polars as pl
from scipy import stats as sps

from dyna.experiment.kinds.agent_tasks.analysis import (base_scenarios, scenario_metrics,
                                                       values)
from dyna.experiment.stats import Interval

__all__ = ["TOKEN_METRICS", "ratio_of_sums_ci", "volume_scenarios"]

#: Metrics that make a scenario a volume scenario (its volume table is shown).
TOKEN_METRICS = ("tokens_per_success", "late_tokens_per_success", "final_tokens_per_run",
                 "tokens_growth", "catalog_tokens_per_episode",
                 "context_tokens_per_episode", "precision_at_k")


def _ratio(num, den, axis=-1):
    """``sum(num) / sum(den)`` along ``axis``; inf where the denominator sums to 0 with
    a positive numerator (no success at all in a resample)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sum(num, axis=axis) / np.sum(den, axis=axis)


def ratio_of_sums_ci(num, den, *, confidence: float = 0.95, n_resamples: int = 2000,
                     seed: int = 0) -> Interval:
    """``sum(num) / sum(den)`` over runs with a percentile bootstrap interval that
    resamples runs (each run's pair ``(num_r, den_r)`` kept together) by
    :func:`scipy.stats.bootstrap` (``paired=True``).

    The percentile method, not BCa: a resample with no success in any run has an
    infinite ratio, which the percentiles take as it is (an unbounded upper end) and BCa's
    jackknife cannot.

    Parameters
    ----------
    num, den : array_like, float, shape (n_runs,)
        Per run, the numerator (e.g. tokens) and the denominator (e.g. successes).
    confidence, n_resamples, seed
        As in :func:`dyna.experiment.stats.bootstrap_ci`.

    Returns
    -------
    Interval
        0-d fields; the estimate is NaN when ``den`` sums to 0 (no ratio), and the bounds
        NaN for fewer than two runs.

    Raises
    ------
    ValueError
        Unequal lengths or non-finite values.
    """
    x = np.asarray(num, dtype=np.float64).ravel()
    y = np.asarray(den, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"num and den: {x.size} and {y.size} runs")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("num and den: values must be finite")
    nan = np.float64(math.nan)
    if x.size == 0 or y.sum() == 0:
        return Interval(nan, nan, nan, int(x.size))
    est = np.float64(x.sum() / y.sum())
    if x.size < 2:
        return Interval(est, nan, nan, 1)
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        return Interval(est, est, est, int(x.size))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.bootstrap((x, y), _ratio, paired=True, vectorized=True,
                            n_resamples=n_resamples, confidence_level=confidence,
                            method="percentile", rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Interval(est, np.float64(ci.low), np.float64(ci.high), int(x.size))


def volume_scenarios(cfg, runs: pl.DataFrame) -> list[str]:
    """The scenarios (config order, robustness copies left out) whose primary metric is a token or
    retrieval metric (:data:`TOKEN_METRICS`) and whose runs recorded the cost split (a finite
    ``catalog_tokens_per_episode``)."""
    if "catalog_tokens_per_episode" not in runs.columns:
        return []
    out = []
    for s in base_scenarios(cfg):
        if not set(scenario_metrics(cfg, s)) & set(TOKEN_METRICS):
            continue
        if any(np.isfinite(values(runs, s, v, "catalog_tokens_per_episode")).any()
               for v in cfg.variants):
            out.append(s)
    return out
