"""Kind ``agent_tasks``: each safeguard's effect on both sides, and their interaction.

A safeguard ``X`` can be judged two ways: added to the loop that has none,
``naive_loop+X - naive_loop`` (its effect alone), and taken out of the loop that has every
one, ``<store>_loop - <store>_loop-no_X`` (its effect given the others; the memory store's
loop is ``memory_loop``). When the safeguards do not interact the two are equal; their
difference is the interaction of ``X`` with the other safeguards (a contrast of a 2 x 2
design: the other safeguards off or on, by ``X`` off or on; Montgomery, *Design and
Analysis of Experiments*, 9th ed. 2017, ch. 5 and 6). Run ``r`` of all four variants meets
the same tasks and random numbers, so the interaction is estimated per run,

    i_r = (loop_r - loop-no_X_r) - (naive_loop+X_r - naive_loop_r),

and judged like any paired difference (:func:`.analysis.judge_differences`: bootstrap
interval of the mean, two-sided sign-flip p). Exploratory: no correction; a claim about an
interaction belongs in the declared hypotheses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from dyna.experiment.kinds.agent_tasks.analysis import (Comparison, base_scenarios,
                                                       compare, judge_differences,
                                                       ran, scenario_metrics, values)

__all__ = ["Interaction", "interactions"]


@dataclass(frozen=True)
class Interaction:
    """One safeguard's two contrasts and their interaction in one scenario and metric.

    Attributes
    ----------
    scenario, switch, metric : str
    added : Comparison
        ``naive_loop+X - naive_loop``, paired by run, two-sided.
    removed : Comparison
        ``<store>_loop - <store>_loop-no_X``, paired by run, two-sided.
    interaction : Comparison
        ``removed - added`` per run (``variant`` and ``versus`` name the two contrasts);
        its interval is of the mean of ``i_r`` over the runs where all four values exist.
    """

    scenario: str
    switch: str
    metric: str
    added: Comparison
    removed: Comparison
    interaction: Comparison


def interactions(cfg, runs: pl.DataFrame) -> list[Interaction]:
    """Every :class:`Interaction` the config's variants allow (module docstring): per
    safeguard ``X`` with all four of ``naive_loop``, ``naive_loop+X``, ``<store>_loop``
    and ``<store>_loop-no_X`` run, per scenario (config order, robustness copies left
    out) and primary metric of the scenario (:func:`~.analysis.scenario_metrics`).

    Returns
    -------
    list of Interaction
    """
    from dyna.loops import LoopConfig

    loop = f"{cfg.store}_loop"
    have = set(cfg.variants)
    a = cfg.analysis
    opts = dict(alpha=float(a["alpha"]), confidence=float(a["confidence"]),
                n_resamples=int(a["n_resamples"]), seed=cfg.seed)
    out = []
    for x in LoopConfig.SWITCHES:
        plus, minus = f"naive_loop+{x}", f"{loop}-no_{x}"
        if not {"naive_loop", plus, loop, minus} <= have:
            continue
        for s in base_scenarios(cfg):
            if not all(ran(runs, s, v) for v in (loop, minus, plus, "naive_loop")):
                continue   # not all four run here (a scoped confirmatory run)
            for met in scenario_metrics(cfg, s):
                added = compare(runs, s, plus, "naive_loop", met, store=cfg.store, inert={},
                                **opts)
                removed = compare(runs, s, loop, minus, met, store=cfg.store, inert={},
                                  **opts)
                four = [values(runs, s, v, met) for v in (loop, minus, plus, "naive_loop")]
                d = (four[0] - four[1]) - (four[2] - four[3])
                base = dict(scenario=s, variant=f"{loop} - {minus}",
                            versus=f"{plus} - naive_loop", metric=met, direction=None)
                inter = judge_differences(d[np.isfinite(d)], base, False, **opts)
                out.append(Interaction(s, x, met, added, removed, inter))
    return out
