"""Kind ``agent_tasks``: aggregates across scenarios on a normalised score.

Scenarios measure different things (a success rate, tokens per success, incidents per
1,000 episodes), so before they are pooled each scenario's score is normalised between
its two reference variants, as rliable normalises Atari scores between a random and a
human player (Agarwal et al., "Deep RL at the Edge of the Statistical Precipice", NeurIPS
2021, section 2): ``(x - mean(no_learning)) / (mean(oracle) - mean(no_learning))``, the
means over that scenario's runs; no learning scores 0 and the oracle (perfect entries,
the same policy) 1, whichever way the metric is better. A scenario where the two
references have the same mean cannot be normalised and is left out (the table says how
many scenarios each row pools). The score of a scenario is its first primary metric
(:func:`~dyna.experiment.kinds.agent_tasks.analysis.scenario_metrics`); the robustness
copies are left out (they repeat a scenario with the policy changed).

Per variant: the interquartile mean of the normalised scores over scenarios x runs with
its stratified bootstrap interval (runs resampled within each scenario;
:func:`dyna.experiment.stats.stratified_iqm`), and the probability of improvement over no
learning, ``P(X > Y) + P(X = Y) / 2`` per scenario averaged over scenarios, rliable's
definition (:func:`dyna.experiment.stats.probability_of_improvement`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from dyna.errors import ConfigError
from dyna.experiment.kinds.agent_tasks.analysis import (base_scenarios, scenario_metrics,
                                                       values)
from dyna.experiment.stats import Interval, probability_of_improvement, stratified_iqm

__all__ = ["NormalisedAggregate", "normalise", "normalised_aggregates",
           "normalised_scores"]


def normalise(x: np.ndarray, zero: float, one: float) -> np.ndarray:
    """``(x - zero) / (one - zero)``: the reference ``zero`` maps to 0, ``one`` to 1.

    Parameters
    ----------
    x : numpy.ndarray, float64, any shape
    zero, one : float
        The two reference scores (distinct).

    Raises
    ------
    ValueError
        ``one == zero`` or either is not finite.
    """
    if not (np.isfinite(zero) and np.isfinite(one)) or one == zero:
        raise ValueError(f"references zero={zero}, one={one}: must be finite and distinct")
    return (np.asarray(x, dtype=np.float64) - zero) / (one - zero)


def normalised_scores(cfg, runs: pl.DataFrame, variant: str) -> dict[str, np.ndarray]:
    """Scenario -> the variant's normalised scores, shape (runs,), for every pooled
    scenario whose references differ and whose scores are all finite.

    Raises
    ------
    ConfigError
        ``no_learning`` or ``oracle`` is not a variant of ``cfg`` (field ``variants``).
    """
    if not {"no_learning", "oracle"} <= set(cfg.variants):
        raise ConfigError("variants", list(cfg.variants), "normalised scores need the "
                          "no_learning and oracle variants")
    out = {}
    for s in base_scenarios(cfg):
        metric = scenario_metrics(cfg, s)[0]
        refs = [values(runs, s, v, metric) for v in ("no_learning", "oracle")]
        x = values(runs, s, variant, metric)
        if not (refs[0].size and refs[1].size and x.size) or not np.all(np.isfinite(x)):
            continue
        try:
            out[s] = normalise(x, float(np.mean(refs[0])), float(np.mean(refs[1])))
        except ValueError:   # the references are equal or missing: no scale
            continue
    return out


@dataclass(frozen=True)
class NormalisedAggregate:
    """One variant's aggregate over scenarios on the normalised score.

    Attributes
    ----------
    variant : str
    scenarios : int
        Scenarios pooled (normalisable and with finite scores for the variant and for no
        learning).
    iqm : Interval
        Interquartile mean of the normalised scores, stratified bootstrap interval.
    poi : Interval
        Probability of improvement over no learning, stratified bootstrap interval.
    """

    variant: str
    scenarios: int
    iqm: Interval
    poi: Interval


def normalised_aggregates(cfg, runs: pl.DataFrame) -> list[NormalisedAggregate]:
    """Per variant (config order) its :class:`NormalisedAggregate` (module docstring);
    empty without both ``no_learning`` and ``oracle``, and a variant with no pooled
    scenario is left out."""
    if not {"no_learning", "oracle"} <= set(cfg.variants):
        return []
    a = cfg.analysis
    opts = dict(confidence=float(a["confidence"]), n_resamples=int(a["n_resamples"]),
                seed=cfg.seed)
    base = normalised_scores(cfg, runs, "no_learning")
    out = []
    for v in cfg.variants:
        mine = normalised_scores(cfg, runs, v)
        common = [s for s in mine if s in base]
        if not common:
            continue
        x = np.stack([mine[s] for s in common], axis=1)        # (runs, scenarios)
        y = np.stack([base[s] for s in common], axis=1)
        out.append(NormalisedAggregate(v, len(common), stratified_iqm(x, **opts),
                                       probability_of_improvement(x, y, **opts)))
    return out
