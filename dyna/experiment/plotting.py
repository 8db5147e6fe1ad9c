"""Shared plotting helpers of every experiment kind: headless figures, saved as PNG and SVG.

Figures are :class:`matplotlib.figure.Figure` objects rendered through the Agg canvas
(:class:`matplotlib.backends.backend_agg.FigureCanvasAgg`) and never registered with pyplot:
they need no display whatever ``MPLBACKEND`` says, never count towards pyplot's
"More than 20 figures have been opened" warning, and are released (``fig.clear()``) in a
``finally`` block as soon as they are saved, so long sweeps do not leak memory
(matplotlib PR #1919). SVG output is reproducible (fixed hash salt, no date).

Part of the experiment machinery: imports no experiment kind.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dyna.fileio.atomic import atomic_target

__all__ = ["figure", "legend_below", "over_runs", "save"]


_RC = {"svg.hashsalt": "dyna", "svg.fonttype": "none", "figure.dpi": 100}


@contextmanager
def figure(figsize=(7.0, 4.5), layout: str | None = "constrained"):
    """A pyplot-free Agg figure, cleared when the block exits (even on error).
    ``layout``: matplotlib's layout engine (``"constrained"``; None for a figure that
    places its axes itself, e.g. with ``subplots_adjust``)."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=figsize, layout=layout)
        FigureCanvasAgg(fig)
        try:
            yield fig
        finally:
            fig.clear()


def legend_below(ax, n_entries: int) -> None:
    """The legend of ``ax`` under its x label, outside the data, in columns of at most
    five entries (``n_entries``: how many labelled artists the axes holds)."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=7, frameon=False,
              ncol=max(1, math.ceil(n_entries / 5)))


def save(fig: Figure, stem: Path, svg: bool = True) -> list[Path]:
    """Write ``<stem>.png`` (and ``<stem>.svg``); the suffix is appended, never put in
    place of a dot in the stem (``scenario_volume-0.25`` and ``scenario_volume-0.5`` were
    both written as ``scenario_volume-0.png``).

    The layout engine (constrained layout) runs once, for the PNG; the SVG is drawn with
    the positions it found (the engine is switched off after the PNG), so the two files
    show the same layout and a figure's text is not laid out twice (about a quarter of a
    many-panel figure's drawing time). ``fig`` keeps no layout engine afterwards."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_name(stem.name + ".png")]
    _save_whole(fig, paths[0], "png", dpi=120, metadata={"Software": None})
    if svg:
        fig.set_layout_engine("none")     # keep the positions the PNG's layout found
        paths.append(stem.with_name(stem.name + ".svg"))
        _save_whole(fig, paths[1], "svg", metadata={"Date": None})
    return paths


def _save_whole(fig: Figure, path: Path, fmt: str, **opts) -> None:
    """``fig.savefig`` into a hidden sibling (:func:`dyna.fileio.atomic.atomic_target`),
    then renamed onto ``path``: a drawing that fails or is killed halfway (the SVG writer
    opens its file before it draws) never leaves a truncated figure under the real name,
    as ``dyna plot DIR`` redraws in place."""
    with atomic_target(path, durable=False) as tmp:
        os.unlink(tmp)    # savefig creates it anew: the umask's mode, not a temporary's 0600
        fig.savefig(tmp, format=fmt, **opts)


def over_runs(statistic: str, runs: int, confidence: float = 0.95,
              interval: str = "bootstrap CI") -> str:
    """A plot's caption for a statistic over runs: ``"mean of 10 runs, 95% bootstrap
    CI"``; with one run ``"1 run (no interval)"``: one run has no mean over runs and no
    interval, and the plot must not claim one.

    Parameters
    ----------
    statistic : str
        ``"mean"``, ``"IQM"``, ...
    runs : int
    confidence : float
        In (0, 1).
    interval : str
        What the band is (``"bootstrap CI"``, ``"bootstrap band"``).
    """
    if runs == 1:
        return "1 run (no interval)"
    return f"{statistic} of {runs} runs, {confidence:.0%} {interval}"

