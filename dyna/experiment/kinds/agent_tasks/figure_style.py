"""How the agent-task figures draw a variant: its fixed colour (the same in every panel and
every figure of an experiment, far from every other variant's in a figure), its short name
in labels, and the bootstrap resamples of the plotted bands. Shared by the scenario figures
(:mod:`dyna.experiment.kinds.agent_tasks.plots`) and the per-run figures
(:mod:`dyna.experiment.kinds.agent_tasks.run_plots`)."""

from __future__ import annotations

import zlib

import matplotlib
import numpy as np

from dyna.experiment.kinds.agent_tasks.analysis import ablated_switch
from dyna.experiment.plotting import delta_e

__all__ = ["MIN_DELTA_E", "PLOT_RESAMPLES", "SPARE_COLORS", "SWITCH_COLORS", "VARIANT_COLORS",
           "short_name", "variant_color", "variant_colors"]

#: Bootstrap resamples of the plotted bands (named in the figure).
PLOT_RESAMPLES = 500

#: The fixed colour of each variant (matplotlib colours), the same in every figure. The
#: variants that switch one safeguard on or off (``<store>_loop-no_<switch>``,
#: ``naive_loop+<switch>``) take the colour of their safeguard (:data:`SWITCH_COLORS`).
VARIANT_COLORS = {
    "no_learning": "#7f7f7f", "oracle": "#8db600", "naive_loop": "#d62728",
    "self_reflection": "#9467bd", "episodic": "#c2b280", "dyna_q": "#1f77b4",
    "dyna_q_plus": "#ff7f0e", "reflexion": "#393b79", "voyager": "#d95f02",
    "expel": "#66a61e", "awm": "#637939", "mem0_v2": "#843c39", "mem0_v3": "#e7969c",
    "naive_growth": "#6b6ecf", "selective_add_delete": "#de9ed6",
}
#: The colour of each safeguard (:attr:`dyna.loops.LoopConfig.SWITCHES`), none of them one
#: of the base variants' in :data:`VARIANT_COLORS`: the panels of one figure hold both.
#: The five safeguards of each ablation panel (switches in order, five a panel) take five
#: hues at least 40 degrees apart (green, mustard, cyan, magenta, slate; brown, pink,
#: petrol, violet, leaf green), so no two lines of a panel differ by shade alone.
SWITCH_COLORS = {
    "outcome_gate": "#2ca02c", "redaction": "#e6ab02", "secret_scan": "#17becf",
    "novelty_check": "#e7298a", "grading": "#7570b3", "cap_eviction": "#a6761d",
    "dating": "#f781bf", "retire_on_contradiction": "#00798c",
    "approval_for_untrusted": "#6a3d9a", "consolidation_every": "#4d9221",
}


#: Colours a variant takes when its own (:func:`variant_color`) is too close to one an
#: earlier variant of the figure holds (:data:`MIN_DELTA_E`). In order: mid and dark
#: colours first (a thin line on white), the pale tab20 ones last.
SPARE_COLORS = ("#1f77b4", "#ff7f0e", "#17becf", "#e6ab02", "#f781bf", "#08519c",
                "#7570b3", "#9467bd", "#8c564b", "#bcbd22", "#66a61e", "#e7298a",
                "#a6761d", "#2ca02c", "#1b9e77", "#6a3d9a", "#393b79", "#843c39",
                "#0067a5", "#882d17", "#b3446c", "#e25822", "#654522", "#604e97",
                "#de9ed6", "#6b6ecf", "#e7969c", "#637939", "#d95f02", "#7f7f7f")
#: The least CIE76 colour difference (:func:`delta_e`) between two variants of a figure.
MIN_DELTA_E = 25.0


def variant_colors(variants, store: str) -> dict:
    """The colour of each of ``variants`` in one figure (and every figure of an
    experiment, which all pass its ``config.variants``): each its own, the same in every
    panel, at least :data:`MIN_DELTA_E` from every other variant's. A variant keeps
    :func:`variant_color` unless it is that close to an earlier one's; the
    ``naive_loop+<switch>`` variants come last, so the loop without a safeguard keeps the
    safeguard's colour and the naive loop with it takes a spare one: the first of
    :data:`SPARE_COLORS` (then tab20) far enough from every colour taken, or when none is,
    the one farthest from its nearest.

    Returns
    -------
    dict
        variant -> matplotlib colour (a hex string).
    """
    names = list(dict.fromkeys(variants))
    order = [v for v in names if not v.startswith("naive_loop+")] + \
        [v for v in names if v.startswith("naive_loop+")]
    spares = [*SPARE_COLORS, *map(matplotlib.colors.to_hex,
                                  matplotlib.colormaps["tab20"].colors)]
    taken: dict = {}

    def nearest(color) -> float:
        return min([delta_e(color, c) for c in taken.values()] + [np.inf])

    for v in order:
        color = matplotlib.colors.to_hex(variant_color(v, store))
        if nearest(color) < MIN_DELTA_E:
            color = next((c for c in spares if nearest(c) >= MIN_DELTA_E),
                         max(spares, key=nearest))
        taken[v] = color
    return {v: taken[v] for v in names}


def variant_color(variant: str, store: str):
    """The colour of ``variant`` in every figure: black for the full loop
    (``<store>_loop``), its safeguard's colour for a variant that switches one safeguard
    off or on, :data:`VARIANT_COLORS` for the others, and for a name none of these know a
    tab20 colour chosen by the name's CRC-32 (fixed, but not guaranteed distinct)."""
    if variant == f"{store}_loop":
        return "#000000"
    switch = ablated_switch(variant, store)
    head, plus, added = variant.partition("+")
    if switch is None and head == "naive_loop" and plus:
        switch = added
    if switch in SWITCH_COLORS:
        return SWITCH_COLORS[switch]
    if variant in VARIANT_COLORS:
        return VARIANT_COLORS[variant]
    return matplotlib.colormaps["tab20"](zlib.crc32(variant.encode()) % 20)


def short_name(variant: str, store: str) -> str:
    """A variant's name in every figure's labels: ``skill_loop-no_dating`` reads
    ``no_dating`` (the loop without that safeguard), other names as they are."""
    return variant.replace(f"{store}_loop-", "", 1)
