"""Kind ``agent_tasks``: time to recovery after a drift, analysed as survival data.

Each run with a drift gives one observation (:func:`.metrics._time_to_recovery`): the
episodes from the drift until the drifted family's first streak of
``analysis.recovery_window`` successful arrivals (event), or until the run's end
(censored). Per variant the Kaplan-Meier estimate of the probability of not having
recovered yet, ``S(t)`` (Kaplan & Meier 1958), by
:class:`statsmodels.duration.survfunc.SurvfuncRight`, with its median and the median's
interval; between two variants the log-rank test stratified by run index
(:func:`statsmodels.duration.survfunc.survdiff` with ``strata``): run ``r`` of every
variant meets the same tasks and drift (common random numbers), so each stratum holds the
pair of runs that share them, and the test compares the variants within pairs only
(Collett, *Modelling Survival Data in Medical Research*, 3rd ed. 2015, sections 2.2 and
2.6; Klein & Moeschberger 2003, section 7.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from dyna.experiment.kinds.agent_tasks.analysis import base_scenarios

__all__ = ["KaplanMeier", "LogRank", "drift_scenarios", "kaplan_meier", "logrank_by_run",
           "survival_at", "survival_pairs"]


@dataclass(frozen=True)
class KaplanMeier:
    """The Kaplan-Meier estimate of time to recovery of one variant in one scenario.

    Attributes
    ----------
    variant : str
    n : int
        Runs with a drift.
    events : int
        Of them, runs that recovered before their end.
    times : numpy.ndarray, float64, shape (k,)
        Distinct event times (episodes after the drift).
    survival : numpy.ndarray, float64, shape (k,)
        ``S(t)`` just after each of ``times``: the estimated probability of not having
        recovered by then.
    median, median_low, median_high : float
        Median time to recovery (episodes) with its interval (statsmodels'
        ``quantile_ci``, complementary log-log transform, at the requested confidence);
        NaN without a recovery, and a bound is NaN or inf where the curve's band does not
        reach 0.5 (an open end).
    """

    variant: str
    n: int
    events: int
    times: np.ndarray
    survival: np.ndarray
    median: float
    median_low: float
    median_high: float


def _observations(runs: pl.DataFrame, scenario: str, variant: str) -> pl.DataFrame:
    """``run, recovery_time, recovery_event`` of the runs of one variant with a drift."""
    return (runs.filter((pl.col("scenario") == scenario) & (pl.col("variant") == variant)
                        & pl.col("recovery_time").is_not_nan())
            .sort("run").select("run", "recovery_time", "recovery_event"))


def kaplan_meier(runs: pl.DataFrame, scenario: str, variant: str, *,
                 confidence: float = 0.95) -> KaplanMeier | None:
    """The Kaplan-Meier curve of time to recovery (module docstring).

    Parameters
    ----------
    runs : polars.DataFrame
        The runs table (``scenario, variant, run, recovery_time, recovery_event``).
    confidence : float
        Level of the median's interval, in (0, 1).

    Returns
    -------
    KaplanMeier or None
        None when no run of the variant had a drift.
    """
    from statsmodels.duration.survfunc import SurvfuncRight

    obs = _observations(runs, scenario, variant)
    if obs.is_empty():
        return None
    time = obs["recovery_time"].to_numpy().astype(np.float64)
    status = obs["recovery_event"].to_numpy().astype(np.int64)
    sf = SurvfuncRight(time, status)
    median = lo = hi = math.nan
    if status.any():
        median = float(sf.quantile(0.5))
        with np.errstate(all="ignore"):
            lo, hi = (float(x) for x in sf.quantile_ci(0.5, alpha=1.0 - confidence))
    return KaplanMeier(variant, int(time.size), int(status.sum()),
                       np.asarray(sf.surv_times, dtype=np.float64),
                       np.asarray(sf.surv_prob, dtype=np.float64), median, lo, hi)


def survival_at(km: KaplanMeier, t: float) -> float:
    """``S(t)`` of a Kaplan-Meier step curve: 1 before the first event time, then the
    value after the last event time at or before ``t``."""
    i = int(np.searchsorted(km.times, t, side="right"))
    return 1.0 if i == 0 else float(km.survival[i - 1])


@dataclass(frozen=True)
class LogRank:
    """The log-rank test of two variants' times to recovery, stratified by run.

    Attributes
    ----------
    scenario, variant, versus : str
    chisq : float
        The stratified log-rank statistic (chi-square, 1 degree of freedom); NaN when no
        stratum holds information (no event time with both runs at risk).
    p : float
        Its p-value (two-sided); NaN with ``chisq``.
    strata : int
        Run indices with a drift in both variants.
    events : tuple of (int, int)
        Recoveries of ``variant`` and of ``versus`` in those runs.
    """

    scenario: str
    variant: str
    versus: str
    chisq: float
    p: float
    strata: int
    events: tuple


def logrank_by_run(runs: pl.DataFrame, scenario: str, variant: str,
                   versus: str) -> LogRank:
    """The log-rank test of ``variant`` against ``versus`` stratified by run index
    (module docstring), over the runs with a drift in both.

    Returns
    -------
    LogRank
    """
    from statsmodels.duration.survfunc import survdiff

    x = _observations(runs, scenario, variant)
    y = _observations(runs, scenario, versus)
    both = set(x["run"].to_list()) & set(y["run"].to_list())
    x = x.filter(pl.col("run").is_in(both))
    y = y.filter(pl.col("run").is_in(both))
    events = (int(x["recovery_event"].sum()), int(y["recovery_event"].sum()))
    chisq = p = math.nan
    if both and sum(events):
        time = np.concatenate([x["recovery_time"].to_numpy(), y["recovery_time"].to_numpy()])
        status = np.concatenate([x["recovery_event"].to_numpy(),
                                 y["recovery_event"].to_numpy()]).astype(np.int64)
        group = np.repeat([1, 0], [x.height, y.height])
        strata = np.concatenate([x["run"].to_numpy(), y["run"].to_numpy()])
        try:
            chisq, p = (float(v) for v in survdiff(time.astype(np.float64), status, group,
                                                   strata=strata))
        except np.linalg.LinAlgError:   # every stratum's variance is 0: no information
            chisq = p = math.nan
    return LogRank(scenario, variant, versus, chisq, p, len(both), events)


def drift_scenarios(cfg, runs: pl.DataFrame) -> list[str]:
    """The scenarios (in config order, robustness copies left out) where some run had a
    drift (a finite ``recovery_time``)."""
    if "recovery_time" not in runs.columns:
        return []
    seen = set(runs.filter(pl.col("recovery_time").is_not_nan())["scenario"].to_list())
    return [s for s in base_scenarios(cfg) if s in seen]


def survival_pairs(cfg, scenario: str) -> list[tuple[str, str]]:
    """The variant pairs the report tests in a drift scenario: those of the hypotheses
    about it (sign hypotheses on it, slope hypotheses over a sweep it is a point of), then
    the full loop against no learning; each pair once."""
    on = {sw.name for sw in getattr(cfg, "sweeps", ())
          if scenario in {sc for sc, _ in sw.points()}}
    pairs = [(v, w) for h in cfg.hypotheses
             if (getattr(h, "test", "sign") == "sign" and h.scenario == scenario)
             or (getattr(h, "test", "sign") == "slope" and h.sweep in on)
             for v, w, _, _ in h.components()]
    loop = f"{cfg.store}_loop"
    if {loop, "no_learning"} <= set(cfg.variants):
        pairs.append((loop, "no_learning"))
    return list(dict.fromkeys(pairs))
