"""Kind ``agent_tasks``: rare events (incidents, poisoned-entry follows) per episode.

Beside the run-level means (one number per run, compared by the paired tests of
:mod:`.analysis`), a rare event is modelled per episode: ``logit P(event in episode) =
b0 + b1 * [variant]`` over the episodes of two variants in one scenario, fitted by
generalised estimating equations (Liang & Zeger 1986) with
:class:`statsmodels.genmod.generalized_estimating_equations.GEE`, Binomial family (logit
link), clustered by run index: run ``r`` of both variants is one cluster, because the two
share their tasks and random numbers (common random numbers) and a run's episodes share
its store. The working correlation is *independence*: the point estimate is then the
pooled logistic regression's (the 2 x 2 table's odds ratio) and the robust (sandwich)
standard error carries the within-run correlation, whatever its form; an exchangeable
working correlation over a thousand episodes per cluster would buy little efficiency for a
one-parameter contrast and makes the estimate depend on how runs differ in length. The
odds ratio ``exp(b1)`` comes with its Wald interval and p-value from that robust error
(Hardin & Hilbe, *Generalized Estimating Equations*, 2nd ed. 2013, ch. 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

__all__ = ["EVENT_OF_METRIC", "OddsRatio", "gee_odds_ratio", "rare_event_pairs"]

#: Run-level metric -> the per-episode field whose event (a value above 0) it counts.
EVENT_OF_METRIC = {
    "incidents": "incident",
    "incidents_per_1000": "incident",
    "lesson_incidents_per_1000": "incident_lesson",
    "direct_incidents_per_1000": "incident_direct",
    "poisoned_follows_per_1000": "poisoned_follows",
}


@dataclass(frozen=True)
class OddsRatio:
    """The per-episode odds ratio of an event, ``variant`` against ``versus``.

    Attributes
    ----------
    scenario, variant, versus, event : str
        ``event`` is the episode field (an episode has the event when it is above 0).
    status : {"fitted", "no interval", "no events", "one variant only", "missing"}
        "one variant only": every event is in one variant, so the odds ratio is 0 or
        infinite (not estimable); "missing": the episodes table has no such field;
        "no interval": the fit's robust variance of ``b1`` is not positive (too few
        clusters with events), so the odds ratio has no interval and no p-value.
    episodes : tuple of (int, int)
        Episodes of ``variant`` and of ``versus``.
    events : tuple of (int, int)
        Episodes with the event, of each.
    per_1000 : tuple of (float, float)
        The run-level means: events per 1,000 episodes, averaged over runs, of each.
    odds_ratio, low, high : float
        ``exp(b1)`` and its Wald interval at the requested confidence (NaN unless
        fitted). Above 1: the event is more likely per episode under ``variant``.
    p : float
        Two-sided Wald p-value of ``b1 = 0`` with the robust standard error.
    clusters : int
        Run indices (clusters).
    """

    scenario: str
    variant: str
    versus: str
    event: str
    status: str
    episodes: tuple = (0, 0)
    events: tuple = (0, 0)
    per_1000: tuple = (math.nan, math.nan)
    odds_ratio: float = math.nan
    low: float = math.nan
    high: float = math.nan
    p: float = math.nan
    clusters: int = 0


def _per_1000(frame: pl.DataFrame) -> float:
    """Mean over runs of events per 1,000 episodes (column ``y``)."""
    per_run = frame.group_by("run").agg(pl.col("y").mean() * 1000.0)
    return float(per_run["y"].mean()) if per_run.height else math.nan


def gee_odds_ratio(episodes: pl.DataFrame, scenario: str, variant: str, versus: str,
                   event: str, *, confidence: float = 0.95) -> OddsRatio:
    """The GEE odds ratio of ``event`` per episode, ``variant`` against ``versus``
    (module docstring).

    Parameters
    ----------
    episodes : polars.DataFrame
        The episodes table: ``scenario, variant, run, episode`` and ``event``.
    event : str
        Episode field (bool or count): the event is a value above 0.
    confidence : float
        Level of the interval, in (0, 1).

    Returns
    -------
    OddsRatio
    """
    import statsmodels.api as sm
    from statsmodels.genmod.cov_struct import Independence
    from statsmodels.genmod.generalized_estimating_equations import GEE

    base = dict(scenario=scenario, variant=variant, versus=versus, event=event)
    if event not in episodes.columns:
        return OddsRatio(status="missing", **base)
    sel = (episodes.filter((pl.col("scenario") == scenario)
                           & pl.col("variant").is_in([variant, versus]))
           .select("variant", "run", "episode",
                   y=(pl.col(event).cast(pl.Float64) > 0).cast(pl.Float64))
           .sort("run", "variant", "episode"))
    parts = [sel.filter(pl.col("variant") == v) for v in (variant, versus)]
    counts = dict(episodes=tuple(p.height for p in parts),
                  events=tuple(int(p["y"].sum()) for p in parts),
                  per_1000=tuple(_per_1000(p) for p in parts),
                  clusters=int(sel["run"].n_unique()))
    if sum(counts["events"]) == 0:
        return OddsRatio(status="no events", **base, **counts)
    if min(counts["events"]) == 0 or any(e == n for e, n in zip(counts["events"],
                                                               counts["episodes"])):
        return OddsRatio(status="one variant only", **base, **counts)
    x = (sel["variant"] == variant).cast(pl.Float64).to_numpy()
    model = GEE(sel["y"].to_numpy(), sm.add_constant(x, prepend=True),
                groups=sel["run"].to_numpy(), family=sm.families.Binomial(),
                cov_struct=Independence())
    # a robust variance that is not positive gives NaN here, said by the status
    with np.errstate(invalid="ignore"):
        res = model.fit()
        lo, hi = np.asarray(res.conf_int(alpha=1.0 - confidence))[1]
        p = float(np.asarray(res.pvalues)[1])
    b1 = float(np.asarray(res.params)[1])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return OddsRatio(status="no interval", **base, **counts, odds_ratio=math.exp(b1))
    return OddsRatio(status="fitted", **base, **counts, odds_ratio=math.exp(b1),
                     low=math.exp(float(lo)), high=math.exp(float(hi)),
                     p=p)


def rare_event_pairs(cfg) -> list[tuple[str, str, str, str]]:
    """``(scenario, variant, versus, event)`` of every hypothesis comparison on a
    rare-event metric (:data:`EVENT_OF_METRIC`): sign hypotheses in their scenario, slope
    hypotheses at every point of their sweep; each once, in file order."""
    sweeps = {sw.name: sw for sw in getattr(cfg, "sweeps", ())}
    out = []
    for h in cfg.hypotheses:
        where = ([sc for sc, _ in sweeps[h.sweep].points()]
                 if getattr(h, "test", "sign") == "slope" else [h.scenario])
        for v, w, metric, _ in h.components():
            if metric in EVENT_OF_METRIC:
                out += [(sc, v, w, EVENT_OF_METRIC[metric]) for sc in where]
    return list(dict.fromkeys(out))
