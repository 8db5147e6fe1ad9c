"""The statistics of calibration before confirmation (:mod:`dyna.experiment.calibration`):
a manipulation check's value with its interval, the run count sized from a pilot, and a
hypothesis's verdict with the equivalence test.

* :func:`summarise_check` -- the mean over runs of a check's per-run values, with a Wilson
  score interval for 0/1 values (Wilson 1927) or a percentile bootstrap interval
  (:func:`scipy.stats.bootstrap`) otherwise; :class:`CheckResult` says whether it lies
  within the check's thresholds.
* :func:`size_runs` -- per comparison of a hypothesis, the pilot's standard deviation of the
  per-run paired difference, its 80% upper confidence bound (chi-square; Browne, "On the
  use of a pilot sample for sample size determination", Statistics in Medicine 1995) and
  the runs that make the smallest detectable difference (Cohen 1988, ch. 2) at most the
  smallest effect of interest.
* :func:`calibrated_verdict` -- *not testable* when a check the hypothesis needs fails;
  else the kind's verdict, with *does not hold* turned into *no effect as large as its
  smallest effect of interest* when the equivalence test passes: two one-sided tests
  (TOST; Schuirmann, J. Pharmacokinetics and Biopharmaceutics 1987; Lakens, Social
  Psychological and Personality Science 2017), :func:`equivalence_interval`.

Part of the experiment machinery: imports no kind; it neither runs nor writes anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["CheckResult", "Contrast", "NOT_TESTABLE", "NO_EFFECT", "PERCENTILE",
           "SD_BOUND_LEVEL", "SizingRow", "WILSON", "calibrated_verdict", "checks_frame",
           "checks_table", "equivalence_interval", "recommendation", "runs_needed",
           "sd_upper_bound", "size_runs", "sizing_frame", "sizing_lines",
           "smallest_detectable", "summarise_check"]

#: Verdict of a hypothesis a failing manipulation check leaves without a test.
NOT_TESTABLE = "not testable"
#: Verdict of a hypothesis whose equivalence test passes (TOST).
NO_EFFECT = "no effect as large as its smallest effect of interest"
#: Level of the one-sided upper confidence bound of the pilot's standard deviation.
SD_BOUND_LEVEL = 0.8


# ============================================================================ checks

@dataclass(frozen=True)
class CheckResult:
    """A manipulation check as measured: the mean over runs of a per-run quantity.

    Attributes
    ----------
    name : str
    value, low, high : float
        Mean over runs and its interval (NaN without a run; ``low``/``high`` NaN with one).
    n : int
        Runs with a value.
    minimum, maximum : float or None
        The thresholds: the check passes when ``minimum <= value <= maximum``.
    method : str
        How the interval was computed.
    """

    name: str
    value: float
    low: float
    high: float
    n: int
    minimum: float | None
    maximum: float | None
    method: str

    @property
    def passed(self) -> bool:
        """Whether the mean lies within the thresholds (False without a value)."""
        return (math.isfinite(self.value)
                and (self.minimum is None or self.value >= self.minimum)
                and (self.maximum is None or self.value <= self.maximum))

    def threshold(self) -> str:
        """``"0.15 <= x <= 0.35"``, ``">= 0.85"`` or ``"<= 0.3"``."""
        if self.minimum is not None and self.maximum is not None:
            return f"{self.minimum:g} <= x <= {self.maximum:g}"
        return f">= {self.minimum:g}" if self.minimum is not None else f"<= {self.maximum:g}"

    def to_dict(self) -> dict:
        """The pilot log's form (None for a missing number)."""
        num = (lambda x: float(x) if math.isfinite(x) else None)
        return {"check": self.name, "value": num(self.value), "low": num(self.low),
                "high": num(self.high), "n": self.n, "threshold": self.threshold(),
                "pass": self.passed}


#: Interval methods of :func:`summarise_check`.
WILSON = "Wilson score interval"
PERCENTILE = "percentile bootstrap (scipy.stats.bootstrap)"


def summarise_check(name: str, values, *, binary: bool, minimum=None, maximum=None,
                    confidence: float = 0.95, n_resamples: int = 2000,
                    seed: int = 0) -> CheckResult:
    """The mean over runs of a check's per-run values, with its interval.

    Parameters
    ----------
    values : array_like, float, shape (runs,)
        One value per run; NaN (no value in that run) is left out.
    binary : bool
        The values are 0 or 1: a Wilson score interval of the proportion (Wilson 1927),
        else a percentile bootstrap interval of the mean (:func:`scipy.stats.bootstrap`,
        seeded with ``seed``).
    minimum, maximum : float or None
        The check's thresholds.

    Raises
    ------
    ValueError
        ``binary`` with a value other than 0 or 1.
    """
    from dyna.experiment.stats import bootstrap_ci, proportion_ci

    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    base = dict(name=name, n=int(v.size), minimum=minimum, maximum=maximum,
                method=WILSON if binary else PERCENTILE)
    if v.size == 0:
        return CheckResult(value=math.nan, low=math.nan, high=math.nan, **base)
    if binary:
        if not np.all((v == 0) | (v == 1)):
            raise ValueError(f"check {name!r}: a 0/1 measure gave {sorted(set(v.tolist()))}")
        k = int(v.sum())
        lo, hi = proportion_ci(k, v.size, confidence=confidence)
        return CheckResult(value=k / v.size, low=lo, high=hi, **base)
    iv = bootstrap_ci(v, confidence=confidence, n_resamples=n_resamples, seed=seed,
                      method="percentile")
    return CheckResult(value=float(iv.estimate), low=float(iv.low), high=float(iv.high),
                       **base)


def checks_table(results: list[CheckResult], confidence: float = 0.95) -> list[str]:
    """Markdown lines of the check table: check, value with its interval, threshold,
    pass or fail."""
    from dyna.experiment.reporting import fmt, md_table

    def value(r):
        if r.n == 0:
            return "n/a (no run has a value)"
        if not math.isfinite(r.low):
            return f"{fmt(r.value)} (one run: no interval)"
        return f"{fmt(r.value)} [{fmt(r.low)}, {fmt(r.high)}]"

    return md_table(["check", f"value [{confidence:.0%} CI]", "threshold", "pass"],
                    [[r.name, value(r), r.threshold(), "pass" if r.passed else "**fail**"]
                     for r in results])


def checks_frame(results: list[CheckResult]):
    """The check table as a polars DataFrame (``checks.parquet``): one row per check with
    ``check`` (String), ``value``, ``low``, ``high`` (Float64; NaN without a value), ``n``
    (Int64, runs with a value), ``threshold`` (String), ``pass`` (Boolean), ``interval``
    (String, the interval's method)."""
    import polars as pl

    return pl.DataFrame({"check": [r.name for r in results],
                         "value": [r.value for r in results],
                         "low": [r.low for r in results], "high": [r.high for r in results],
                         "n": [r.n for r in results],
                         "threshold": [r.threshold() for r in results],
                         "pass": [r.passed for r in results],
                         "interval": [r.method for r in results]},
                        schema={"check": pl.String, "value": pl.Float64, "low": pl.Float64,
                                "high": pl.Float64, "n": pl.Int64, "threshold": pl.String,
                                "pass": pl.Boolean, "interval": pl.String})


# ============================================================================ sizing

@dataclass(frozen=True)
class Contrast:
    """One comparison of a hypothesis, as a pilot measured it.

    Attributes
    ----------
    hypothesis, comparison : str
        The hypothesis's name and which comparison of it (variants, metric, scenario).
    differences : numpy.ndarray, float64, shape (n,)
        Per-run paired differences (or, for a slope hypothesis, per-run slopes), runs
        without a value left out.
    smallest_effect : float
        The hypothesis's smallest effect of interest, in the same units (> 0).
    """

    hypothesis: str
    comparison: str
    differences: np.ndarray
    smallest_effect: float


def sd_upper_bound(sd: float, n: int, level: float = SD_BOUND_LEVEL) -> float:
    """One-sided upper confidence bound at ``level`` of a standard deviation estimated from
    ``n`` values: ``sd * sqrt((n - 1) / chi2_{1 - level, n - 1})``, with ``chi2_q`` the
    ``q`` quantile of the chi-square distribution (Browne 1995). NaN for ``n < 2``."""
    from scipy.stats import chi2

    if n < 2:
        return math.nan
    return float(sd * math.sqrt((n - 1) / chi2.ppf(1.0 - level, n - 1)))


def smallest_detectable(sd: float, n: int, *, alpha: float, power: float) -> float:
    """Smallest mean paired difference a two-sided paired t-test at level ``alpha`` finds
    with probability ``power`` over ``n`` runs: ``(t_{1 - alpha/2, n-1} + t_{power, n-1})
    * sd / sqrt(n)`` (Cohen 1988, ch. 2), in the units of ``sd``."""
    from scipy.stats import t

    return float((t.ppf(1.0 - alpha / 2.0, n - 1) + t.ppf(power, n - 1)) * sd / math.sqrt(n))


def runs_needed(sd: float, smallest_effect: float, *, alpha: float, power: float,
                limit: int = 1_000_000) -> int | None:
    """The fewest runs ``n >= 2`` whose :func:`smallest_detectable` difference is at most
    ``smallest_effect`` (it falls as ``n`` grows: found by doubling, then bisection).

    Returns
    -------
    int or None
        2 when ``sd`` is 0; None when ``sd`` is NaN or not even ``limit`` runs suffice.
    """
    if not math.isfinite(sd):
        return None
    if sd == 0:
        return 2

    def enough(n):
        return smallest_detectable(sd, n, alpha=alpha, power=power) <= smallest_effect

    hi = 2
    while not enough(hi):
        if hi >= limit:
            return None
        hi = min(2 * hi, limit)
    lo = max(2, hi // 2)
    if enough(lo):
        return lo
    while hi - lo > 1:                      # enough(hi) and not enough(lo)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class SizingRow:
    """The sizing of one :class:`Contrast`: ``n`` pilot pairs, their standard deviation
    ``sd`` (ddof 1), its upper bound ``sd_upper`` (:func:`sd_upper_bound`), and the runs
    that make the smallest detectable difference at most ``smallest_effect`` (None: not
    sizeable)."""

    hypothesis: str
    comparison: str
    n: int
    sd: float
    sd_upper: float
    smallest_effect: float
    runs: int | None


def size_runs(contrasts: list[Contrast], *, alpha: float, power: float
              ) -> tuple[list[SizingRow], int | None, int]:
    """Size the confirmatory run count from a pilot.

    Each contrast's standard deviation is bounded above at 80% (:func:`sd_upper_bound`);
    its run count is :func:`runs_needed` at the two-sided level ``alpha / m``, ``m`` the
    number of hypotheses (conservative for Holm's correction, whose first step is that
    level), and ``power``.

    Returns
    -------
    rows : list of SizingRow
    recommended : int or None
        The largest run count over the contrasts, and at least ``floor``; None when a
        contrast cannot be sized (fewer than 2 pilot pairs, or too many runs) or there is
        none.
    floor : int
        The fewest runs with which ``m`` one-sided sign-flip tests can pass Holm at
        ``alpha``: the smallest ``n`` with ``m * 2^-n <= alpha`` (a sign-flip p is at
        least ``2^-n``).
    """
    m = max(1, len({c.hypothesis for c in contrasts}))
    level = alpha / m
    rows = []
    for c in contrasts:
        d = np.asarray(c.differences, dtype=np.float64)
        sd = float(np.std(d, ddof=1)) if d.size >= 2 else math.nan
        upper = sd_upper_bound(sd, d.size)
        rows.append(SizingRow(c.hypothesis, c.comparison, int(d.size), sd, upper,
                              float(c.smallest_effect),
                              runs_needed(upper, c.smallest_effect, alpha=level,
                                          power=power)))
    floor = max(1, math.ceil(math.log2(m / alpha) - 1e-12))
    sized = [r.runs for r in rows]
    recommended = max([floor, *sized]) if rows and None not in sized else None
    return rows, recommended, floor


def sizing_frame(rows: list[SizingRow]):
    """The sizing as a polars DataFrame (``pilot_sd.parquet``): one row per comparison with
    ``hypothesis``, ``comparison`` (String), ``pilot_pairs`` (Int64), ``sd`` and
    ``sd_upper80`` (Float64, the metric's units), ``smallest_effect`` (Float64) and
    ``runs_needed`` (Int64, null when not sizeable)."""
    import polars as pl

    return pl.DataFrame({"hypothesis": [r.hypothesis for r in rows],
                         "comparison": [r.comparison for r in rows],
                         "pilot_pairs": [r.n for r in rows], "sd": [r.sd for r in rows],
                         "sd_upper80": [r.sd_upper for r in rows],
                         "smallest_effect": [r.smallest_effect for r in rows],
                         "runs_needed": [r.runs for r in rows]},
                        schema={"hypothesis": pl.String, "comparison": pl.String,
                                "pilot_pairs": pl.Int64, "sd": pl.Float64,
                                "sd_upper80": pl.Float64, "smallest_effect": pl.Float64,
                                "runs_needed": pl.Int64})


def sizing_lines(rows, recommended, floor, *, alpha, power) -> list[str]:
    """Markdown lines of ``pilot_sd.md`` from :func:`size_runs`'s results: how the runs
    are sized, the table of :class:`SizingRow`, and :func:`recommendation`. No
    hypothesis's effect or test appears."""
    from dyna.experiment.reporting import fmt, md_table

    m = max(1, len({r.hypothesis for r in rows}))
    lines = ["# Pilot: standard deviations and run count", "",
             "Per comparison of each hypothesis: the standard deviation of the per-run paired "
             "difference over the pilot runs (for a slope hypothesis, of the per-run slope), "
             f"its {SD_BOUND_LEVEL:.0%} upper confidence bound (chi-square), and the runs "
             "with which a two-sided paired test at level "
             f"{alpha:g}/{m} finds the smallest effect of interest with power {power:g}.",
             ""]
    lines += md_table(["hypothesis", "comparison", "pilot pairs", "sd",
                       f"sd, {SD_BOUND_LEVEL:.0%} upper bound", "smallest effect",
                       "runs needed"],
                      [[r.hypothesis, r.comparison, r.n, fmt(r.sd), fmt(r.sd_upper),
                        f"{r.smallest_effect:g}", "n/a" if r.runs is None else r.runs]
                       for r in rows])
    lines += ["", recommendation(rows, recommended, floor, alpha=alpha)]
    return lines


def recommendation(rows, recommended, floor, *, alpha) -> str:
    """One line: the recommended ``runs`` of :func:`size_runs`, and why it is not lower."""
    if not rows:
        return "No hypotheses declared: nothing to size."
    if recommended is None:
        return ("Recommended `runs`: none (a comparison has fewer than 2 pilot pairs or needs "
                "more runs than can be sized).")
    m = len({r.hypothesis for r in rows})
    return (f"Recommended `runs`: {recommended} (the largest above, and at least {floor}: "
            f"with fewer, {m} one-sided sign-flip tests cannot pass Holm at {alpha:g}).")


# ============================================================================ verdicts

def equivalence_interval(d, alpha: float) -> tuple[float, float]:
    """The ``1 - 2 alpha`` t-interval of the mean paired difference: ``mean -+ t_{1 -
    alpha, n-1} * sd / sqrt(n)`` (ddof 1). Lying inside ``(-delta, delta)`` is the two
    one-sided tests (TOST) at level ``alpha`` rejecting both ``mean <= -delta`` and ``mean
    >= delta`` (Schuirmann 1987).

    Parameters
    ----------
    d : array_like, float, shape (n,)
        Per-run paired differences, finite.
    alpha : float
        In (0, 0.5).

    Returns
    -------
    (float, float)
        ``(nan, nan)`` for ``n < 2``.
    """
    from scipy.stats import t

    d = np.asarray(d, dtype=np.float64).ravel()
    if d.size < 2:
        return (math.nan, math.nan)
    half = float(t.ppf(1.0 - alpha, d.size - 1) * np.std(d, ddof=1) / math.sqrt(d.size))
    mean = float(np.mean(d))
    return (mean - half, mean + half)


def calibrated_verdict(verdict: str, *, checks_pass: bool, differences: list,
                       smallest_effect: float, alpha: float) -> str:
    """A hypothesis's verdict in a calibrated experiment.

    Parameters
    ----------
    verdict : str
        The kind's verdict from its tests ("holds" when the Holm-adjusted p is at most the
        family's alpha in the predicted direction, "does not hold", or a verdict of no
        test such as "inert" or "not tested").
    checks_pass : bool
        Every check the hypothesis needs (its own and the required ones) passed.
    differences : list of array_like
        Per-run paired differences of each of its comparisons.
    smallest_effect : float
        The smallest effect of interest, > 0.
    alpha : float
        Level of each one-sided test of the equivalence test (the kind passes the family's
        alpha over the number of hypotheses).

    Returns
    -------
    str
        :data:`NOT_TESTABLE` when a check fails (never "does not hold"); else the kind's
        verdict unless it is "does not hold"; then :data:`NO_EFFECT` when every
        comparison's :func:`equivalence_interval` lies inside ``(-smallest_effect,
        +smallest_effect)`` (TOST), else "does not hold".
    """
    if not checks_pass:
        return NOT_TESTABLE
    if verdict != "does not hold":
        return verdict
    inside = [(-smallest_effect < lo and hi < smallest_effect)
              for lo, hi in (equivalence_interval(d, alpha) for d in differences)]
    return NO_EFFECT if inside and all(inside) else verdict
