"""How the agent-task figures draw a variant: its fixed colour (a function of its name alone,
the same in every panel and every figure, far from every other variant's), its short name
in labels, and the bootstrap resamples of the plotted bands. Shared by the scenario figures
(:mod:`dyna.experiment.kinds.agent_tasks.plots`) and the per-run figures
(:mod:`dyna.experiment.kinds.agent_tasks.run_plots`)."""

from __future__ import annotations

import zlib

import matplotlib
import numpy as np

from dyna.experiment.kinds.agent_tasks.analysis import ablated_switch
from dyna.experiment.plotting import delta_e

__all__ = ["ADDED_COLORS", "LOOP_VARIANT_COLORS", "MIN_DELTA_E", "PLOT_RESAMPLES",
           "SPARE_COLORS", "SWITCH_COLORS", "VARIANT_COLORS", "fixed_color", "short_name",
           "variant_color", "variant_colors"]

#: Bootstrap resamples of the plotted bands (named in the figure).
PLOT_RESAMPLES = 500

#: The colour of each base variant (matplotlib colours), the same in every figure.
#: Together with :data:`SWITCH_COLORS`, :data:`ADDED_COLORS`, :data:`LOOP_VARIANT_COLORS`
#: and the full loop's black, every two of these are at least :data:`MIN_DELTA_E` apart,
#: so any variants of one figure are told apart without a colour of their figure's own.
#: The colours beyond matplotlib's tab10, tab20b and Dark2 come from a search of the sRGB
#: cube (L* 30-66) under that bound, assigned so that the lines of each shipped
#: experiment's crossover map differ by 25 or more in CIEDE2000 and any two variants of
#: one shipped experiment by 12 or more.
VARIANT_COLORS = {
    "no_learning": "#7f7f7f", "oracle": "#8db600", "naive_loop": "#d62728",
    "self_reflection": "#7366ff", "episodic": "#c2b280", "dyna_q": "#1f77b4",
    "dyna_q_plus": "#ff7f0e", "reflexion": "#bf80f2", "voyager": "#0d59cc",
    "expel": "#b20d99", "awm": "#637939", "mem0_v2": "#843c39", "mem0_v3": "#e7969c",
    "naive_growth": "#008066", "selective_add_delete": "#735933",
}
#: The colour of the loop without one safeguard, ``<store>_loop-no_<switch>``
#: (:attr:`dyna.loops.LoopConfig.SWITCHES`). The five safeguards of each ablation panel
#: (switches in order, five a panel) take five hues at least 40 degrees apart (green,
#: mustard, cyan, magenta, lilac; brown, pink, petrol, violet, dark green), so no two
#: lines of a panel differ by shade alone.
SWITCH_COLORS = {
    "outcome_gate": "#2ca02c", "redaction": "#e6ab02", "secret_scan": "#17becf",
    "novelty_check": "#e7298a", "grading": "#a484ac", "cap_eviction": "#a6761d",
    "dating": "#f781bf", "retire_on_contradiction": "#00798c",
    "approval_for_untrusted": "#6a3d9a", "consolidation_every": "#005900",
}
#: The colour of the naive loop with one safeguard, ``naive_loop+<switch>``: its own,
#: never its safeguard's colour of :data:`SWITCH_COLORS` (the two are drawn together).
ADDED_COLORS = {
    "outcome_gate": "#1fb57a", "redaction": "#f20059", "secret_scan": "#f26673",
    "novelty_check": "#0000ff", "grading": "#99004c", "cap_eviction": "#734066",
    "dating": "#ff4000", "retire_on_contradiction": "#6699ff",
    "approval_for_untrusted": "#ff08e8", "consolidation_every": "#b200ff",
}
#: The colour of the other variants of the full loop, ``<store>_loop-<what>``.
LOOP_VARIANT_COLORS = {"self_gate": "#803300", "whole_memory": "#cc734c"}

#: Colours a variant without a fixed colour (:func:`fixed_color` None) takes when its
#: hashed one is too close to another of its figure (:data:`MIN_DELTA_E`), the first far
#: enough from every colour taken. In order: mid and dark colours first (a thin line on
#: white), the pale ones last.
SPARE_COLORS = ("#08519c", "#8c564b", "#bcbd22", "#1b9e77", "#393b79", "#0067a5",
                "#882d17", "#b3446c", "#e25822", "#654522", "#604e97", "#de9ed6",
                "#6b6ecf", "#d95f02", "#66a61e", "#9467bd", "#7570b3", "#4d9221")
#: The least CIE76 colour difference (:func:`delta_e`) between two variants of a figure.
MIN_DELTA_E = 25.0


def variant_colors(variants, store: str) -> dict:
    """The colour of each of ``variants`` in one figure: each its own, the same in every
    panel, at least :data:`MIN_DELTA_E` from every other variant's. A variant with a
    fixed colour (:func:`fixed_color`) keeps it in every figure, whatever else the figure
    draws; a name without one takes its hashed colour (:func:`variant_color`) unless that
    is too close to a colour taken before it (the fixed ones first), then the first of
    :data:`SPARE_COLORS` (then tab20) far enough from every colour taken, or when none
    is, the one farthest from its nearest.

    Returns
    -------
    dict
        variant -> matplotlib colour (a hex string).
    """
    names = list(dict.fromkeys(variants))
    taken = {v: fixed_color(v, store) for v in names if fixed_color(v, store) is not None}
    spares = [*SPARE_COLORS, *map(matplotlib.colors.to_hex,
                                  matplotlib.colormaps["tab20"].colors)]

    def nearest(color) -> float:
        return min([delta_e(color, c) for c in taken.values()] + [np.inf])

    for v in names:
        if v in taken:
            continue
        color = matplotlib.colors.to_hex(variant_color(v, store))
        if nearest(color) < MIN_DELTA_E:
            color = next((c for c in spares if nearest(c) >= MIN_DELTA_E),
                         max(spares, key=nearest))
        taken[v] = color
    return {v: taken[v] for v in names}


def fixed_color(variant: str, store: str) -> str | None:
    """The colour ``variant`` has in every figure, or None for a name none of the tables
    know: black for the full loop (``<store>_loop``), :data:`SWITCH_COLORS` for
    ``<store>_loop-no_<switch>``, :data:`ADDED_COLORS` for ``naive_loop+<switch>``,
    :data:`LOOP_VARIANT_COLORS` for ``<store>_loop-<what>``, :data:`VARIANT_COLORS` for the
    others (a hex string)."""
    loop = f"{store}_loop"
    if variant == loop:
        return "#000000"
    switch = ablated_switch(variant, store)
    if switch in SWITCH_COLORS:
        return SWITCH_COLORS[switch]
    head, plus, added = variant.partition("+")
    if head == "naive_loop" and plus:
        return ADDED_COLORS.get(added)
    if variant.startswith(loop + "-"):
        return LOOP_VARIANT_COLORS.get(variant[len(loop) + 1:])
    return VARIANT_COLORS.get(variant)


def variant_color(variant: str, store: str):
    """The colour of ``variant``: :func:`fixed_color`, and for a name none of its tables
    know a tab20 colour chosen by the name's CRC-32 (fixed, but not guaranteed distinct:
    :func:`variant_colors` moves it off a colour its figure holds already)."""
    color = fixed_color(variant, store)
    if color is not None:
        return color
    return matplotlib.colormaps["tab20"](zlib.crc32(variant.encode()) % 20)


def short_name(variant: str, store: str) -> str:
    """A variant's name in every figure's labels: ``skill_loop-no_dating`` reads
    ``no_dating`` (the loop without that safeguard), other names as they are."""
    return variant.replace(f"{store}_loop-", "", 1)
