"""The impact report: episodes before the first active lesson against episodes from it
on, with intervals (Wilson and Newcombe for the success rate, percentile bootstrap for the
medians)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dyna.errors import check_range

__all__ = ["ImpactReport", "impact_report"]


@dataclass(frozen=True)
class ImpactReport:
    """Before/after comparison of episodes around the first active lesson.

    Attributes
    ----------
    n_before, n_after : int
        Episodes before the first episode with an active lesson, and from it on.
    first_active : int or None
        Index of that episode (None: no lesson was ever active).
    metrics : dict
        For each of ``success_rate``, ``median_tokens``, ``median_steps`` and
        ``median_learning_tokens``: ``{"before", "after", "diff", "before_ci",
        "after_ci", "diff_ci"}``; intervals are None until each cohort has >= 2 episodes.
    level : float
    """

    n_before: int
    n_after: int
    first_active: int | None
    metrics: dict
    level: float

    def __str__(self) -> str:
        def ci(x):
            return "-" if x is None else f"[{x[0]:.3g}, {x[1]:.3g}]"

        def num(x):
            return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.3g}"
        lines = [f"episodes before first lesson: {self.n_before}, after: {self.n_after}",
                 f"{'metric':<24}{'before':>10}{'after':>10}{'diff':>10}  "
                 f"{int(self.level * 100)}% interval of diff"]
        for k, m in self.metrics.items():
            lines.append(f"{k:<24}{num(m['before']):>10}{num(m['after']):>10}"
                         f"{num(m['diff']):>10}  {ci(m['diff_ci'])}")
        return "\n".join(lines)


def _median(x, axis=-1):
    return np.median(x, axis=axis)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def impact_report(records: Sequence[EpisodeRecord], *, level: float = 0.95,
                  n_resamples: int = 2000, seed: int = 0) -> ImpactReport:
    """Compare episodes before the first active lesson with episodes from it on.

    Metrics: success rate, median run tokens, median steps, median learning tokens, each
    with intervals for each cohort and for the difference after - before once each cohort
    has at least two episodes. The success rate, a proportion, gets Wilson score intervals
    (:func:`dyna.competence.wilson_interval`) and Newcombe's hybrid score interval for the
    difference (:func:`dyna.competence.newcombe_diff`): unlike a bootstrap of 0/1 outcomes
    they keep a width when a cohort always (or never) succeeds (0 of 10 before: (0,
    0.278); 3 of 3 after: (0.439, 1)). The medians get percentile bootstrap intervals
    (:func:`scipy.stats.bootstrap`, Efron & Tibshirani 1993, ch. 13; independent resampling
    of the two cohorts for the difference).

    Parameters
    ----------
    records : sequence of EpisodeRecord
        In episode order; episodes with unknown success count as failures in the rate.
    level : float
        Confidence level in (0, 1).
    n_resamples : int
    seed : int
        Seed of the bootstrap generator (same seed, same intervals).

    Returns
    -------
    ImpactReport
    """
    from scipy import stats

    level = float(check_range("level", level, 0.0, 1.0, lo_open=True, hi_open=True))
    n_resamples = check_range("n_resamples", n_resamples, 1, None, integer=True)
    first = next((i for i, r in enumerate(records) if r.active_lessons > 0), None)
    split = len(records) if first is None else first
    before, after = records[:split], records[split:]

    def arrays(rs):
        return {"success_rate": np.array([1.0 if r.success else 0.0 for r in rs]),
                "median_tokens": np.array([r.tokens for r in rs], dtype=float),
                "median_steps": np.array([r.steps for r in rs], dtype=float),
                "median_learning_tokens": np.array([r.learning_tokens for r in rs],
                                                   dtype=float)}

    a, b = arrays(before), arrays(after)
    enough = len(before) >= 2 and len(after) >= 2
    rng = np.random.default_rng(seed)
    metrics = {}
    for k in a:
        stat = _mean if k == "success_rate" else _median
        x, y = a[k], b[k]
        if k == "success_rate":
            from dyna.competence import newcombe_diff, wilson_interval

            vb = float(x.mean()) if len(x) else None
            va = float(y.mean()) if len(y) else None
            m = {"before": vb, "after": va,
                 "diff": None if vb is None or va is None else va - vb,
                 "before_ci": None, "after_ci": None, "diff_ci": None}
            if enough:
                kb, ka = int(x.sum()), int(y.sum())
                m["before_ci"] = tuple(float(v) for v in wilson_interval(kb, len(x), level))
                m["after_ci"] = tuple(float(v) for v in wilson_interval(ka, len(y), level))
                m["diff_ci"] = newcombe_diff(kb, len(x), ka, len(y), level)
            metrics[k] = m
            continue
        vb = float(stat(x)) if len(x) else None
        va = float(stat(y)) if len(y) else None
        m = {"before": vb, "after": va,
             "diff": None if vb is None or va is None else va - vb,
             "before_ci": None, "after_ci": None, "diff_ci": None}
        if enough:
            kw = dict(n_resamples=n_resamples, confidence_level=level, method="percentile",
                      vectorized=True, rng=rng)
            for name, data in (("before_ci", x), ("after_ci", y)):
                ci = stats.bootstrap((data,), stat, **kw).confidence_interval
                m[name] = (float(ci.low), float(ci.high))

            def diff(u, v, axis=-1, _s=stat):
                return _s(v, axis=axis) - _s(u, axis=axis)
            ci = stats.bootstrap((x, y), diff, paired=False, **kw).confidence_interval
            m["diff_ci"] = (float(ci.low), float(ci.high))
        metrics[k] = m
    return ImpactReport(len(before), len(after), first, metrics, level)
