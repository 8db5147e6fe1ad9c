"""Kind ``tabular``: selecting one group's rows and reducing them to one number per run.

Shared by the report's sections (:mod:`.report`) and its headline (:mod:`.headline`). A
group is one variant at one sweep point; run ``r`` of every group draws from the stream
``(seed, r)`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:  # pragma: no cover
    from dyna.experiment.protocol import ExperimentOutput

__all__ = ["groups", "per_run", "point_label", "select", "stat_options"]


def stat_options(out: "ExperimentOutput") -> dict:
    """Keyword arguments of :func:`dyna.experiment.stats.per_run_ci` for ``out``: the
    analysis' statistic, confidence and resamples, and the experiment's seed."""
    a = out.config.analysis
    return dict(statistic=a.statistic, confidence=a.confidence, n_resamples=a.n_resamples,
                seed=out.config.seed)


def groups(out: "ExperimentOutput"):
    """Yield ``(variant, point index, point dict)`` in canonical order (variants, then
    sweep points)."""
    for variant in out.config.variants:
        for p, point in enumerate(out.config.sweep_points()):
            yield variant, p, point


def select(frame: pl.DataFrame, variant: str, point: dict) -> pl.DataFrame:
    """The rows of ``frame`` of variant ``variant`` at sweep point ``point``."""
    sel = frame.filter(pl.col("variant") == variant)
    for key, value in point.items():
        sel = sel.filter(pl.col(key) == value)
    return sel


def point_label(point: dict) -> str:
    """A sweep point in words: ``"resolution=2, alpha=0.5"`` (empty without a sweep)."""
    return ", ".join(f"{k}={v}" for k, v in point.items())


def per_run(frame: pl.DataFrame, value: str, *, last: int | None = None,
            agg: str = "mean") -> np.ndarray:
    """One number per run, ordered by run: ``agg`` (a polars aggregation name) of
    ``value`` over each run's last ``last`` rows (by episode, else by step; all rows when
    ``last`` is None). float64, shape (runs,)."""
    order = "episode" if "episode" in frame.columns else "step"
    f = frame.sort(["run", order])
    if last is not None:
        f = f.group_by("run", maintain_order=True).tail(last)
    expr = getattr(pl.col(value).cast(pl.Float64), agg)()
    return (f.group_by("run", maintain_order=True).agg(expr.alias("v"))
            .sort("run").get_column("v").to_numpy())
