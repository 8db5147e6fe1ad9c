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
import textwrap
from contextlib import contextmanager
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dyna.fileio.atomic import atomic_target

__all__ = ["COINCIDING_DASH", "HIDDEN_SHARE", "PHRASE_SEPARATORS", "cie_lab", "coinciding",
           "coinciding_words", "dash_coinciding", "delta_e", "figure", "hidden_label",
           "label_coinciding", "legend_below", "over_runs", "phrase_lines", "save"]


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


#: A curve within a line width of an earlier one at this share of its points or more lies
#: on it, covering it over that share of its length (:func:`coinciding`).
HIDDEN_SHARE = 0.5


def coinciding(ax, lines: dict, share: float = HIDDEN_SHARE) -> dict:
    """The curves of ``lines`` (name -> :class:`~matplotlib.lines.Line2D` on ``ax``, in
    drawing order) that lie on an earlier one, covering it: within its line width, in
    display pixels of the current layout, at ``share`` of their points or more (default
    :data:`HIDDEN_SHARE`; 1.0: at every point).

    Returns name -> (the earlier curve's name, points within a line width of it, points,
    whether the two are equal at every point); curves over other x values than the earlier
    one's never lie on it."""
    fig = ax.figure
    drawn = {n: ax.transData.transform(np.column_stack(ln.get_data())) for n, ln in
             lines.items()}
    leaders: list[str] = []
    hidden = {}
    for name, ln in lines.items():
        width = ln.get_linewidth() * fig.dpi / 72.0
        for lead in leaders:
            a, b = drawn[lead], drawn[name]
            if a.shape != b.shape or not np.array_equal(a[:, 0], b[:, 0]):
                continue
            near = int(np.sum(np.abs(a[:, 1] - b[:, 1]) <= width))
            if near >= share * len(b):
                same = np.array_equal(lines[lead].get_ydata(), ln.get_ydata())
                hidden[name] = (lead, near, len(b), same)
                break
        else:
            leaders.append(name)
    return hidden


def hidden_label(name: str, lead: str, near: int, total: int, same: bool,
                 width: int | None = None) -> str:
    """The legend label of curve ``name`` drawn dashed over curve ``lead``
    (:func:`coinciding`'s values): ``"skill_loop-no_redaction\n(on skill_loop at 188 of
    200 points; dashed)"``, "identical to skill_loop here" when equal at every point,
    "within a line width of skill_loop" when near it at every point. ``width``: the
    parenthesis wrapped at its spaces into lines of at most this many characters (None:
    one line)."""
    how = f"({coinciding_words(lead, near, total, same)}; dashed)"
    if width is not None:
        how = "\n".join(textwrap.wrap(how, width=width, break_on_hyphens=False))
    return f"{name}\n{how}"


def coinciding_words(lead: str, near: int, total: int, same: bool) -> str:
    """Where a curve lies on curve ``lead`` (:func:`coinciding`'s values), in words:
    "identical to skill_loop here" (equal at every point), "within a line width of
    skill_loop" (near it at every point), "on skill_loop at 188 of 200 points"."""
    if same:
        return f"identical to {lead} here"
    if near == total:
        return f"within a line width of {lead}"
    return f"on {lead} at {near} of {total} points"


#: Length (points) of each dash of a curve drawn over one it lies on
#: (:func:`dash_coinciding`).
COINCIDING_DASH = 3.0


def dash_coinciding(ax, lines: dict, share: float = HIDDEN_SHARE,
                    keep=frozenset()) -> dict:
    """Draw each curve of ``lines`` (name -> :class:`~matplotlib.lines.Line2D` on ``ax``, in
    drawing order) that lies on an earlier one at ``share`` of its points or more
    (:func:`coinciding`, pixels of the current layout: lay the figure out first) dashed on
    top of it, in dashes of :data:`COINCIDING_DASH` points, the dashes of several such
    curves side by side, so the curve under it shows between them. The curves named in
    ``keep`` keep their look (e.g. a line that already shows several curves). Labels are
    left to the caller (:func:`hidden_label`, :func:`label_coinciding`).

    Returns
    -------
    dict
        :func:`coinciding`'s result for the curves restyled: name -> (the earlier curve's
        name, points within a line width of it, points, whether the two are equal at
        every point).
    """
    hidden = {n: h for n, h in coinciding(ax, lines, share).items() if n not in keep}
    for name, (lead, _, _, _) in hidden.items():
        followers = [n for n, h in hidden.items() if h[0] == lead]
        k, period = followers.index(name), COINCIDING_DASH * (len(followers) + 1)
        lines[name].set_linestyle(((period - k * COINCIDING_DASH) % period,
                                   (COINCIDING_DASH, period - COINCIDING_DASH)))
        lines[name].set_zorder(lines[lead].get_zorder() + 0.1)
    return hidden


def label_coinciding(ax, lines: dict, share: float = HIDDEN_SHARE, keep=frozenset(),
                     width: int | None = None) -> dict:
    """:func:`dash_coinciding`, and the legend label of each curve it dashes saying which
    curve it lies on and where (:func:`hidden_label`, its parenthesis in lines of at most
    ``width`` characters). Returns :func:`dash_coinciding`'s result; the caller redraws
    the legend."""
    hidden = dash_coinciding(ax, lines, share, keep)
    for name, how in hidden.items():
        lines[name].set_label(hidden_label(name, *how, width=width))
    return hidden


#: Where :func:`phrase_lines` may break a line, in order of preference: between clauses
#: ("; ", dropped at a break), then between the items of a clause too long for a line
#: (", ", its comma kept).
PHRASE_SEPARATORS = ("; ", ", ")


def phrase_lines(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` characters, broken only between phrases: at
    "; " (dropped at the break), a clause longer than a line at ", " (the comma kept;
    never inside parentheses or quotes), and only a part longer than a line without
    either wrapped at its spaces. Lines are filled greedily."""
    return "\n".join(_phrase_wrap(text, width, PHRASE_SEPARATORS))


def _phrase_wrap(text: str, width: int, seps: tuple) -> list[str]:
    if len(text) <= width:
        return [text]
    if not seps:
        return textwrap.wrap(text, width, break_on_hyphens=False) or [""]
    sep, rest = seps[0], seps[1:]
    end = "" if sep.strip() == ";" else sep.rstrip()
    lines: list[str] = []
    for part in _split_outside(text, sep):
        if lines and len(lines[-1]) + len(sep) + len(part) <= width:
            lines[-1] += sep + part
            continue
        if lines:
            lines[-1] += end
        lines += _phrase_wrap(part, width, rest)
    return lines


def _split_outside(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` where it is outside parentheses and double quotes."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            quoted = not quoted
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if not depth and not quoted and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i = i + len(sep)
            continue
        i += 1
    return [*parts, text[start:]]


def cie_lab(color) -> np.ndarray:
    """CIE L*a*b* (D65 white) of a matplotlib colour read as sRGB: shape (3,), L* in
    [0, 100]. Source: IEC 61966-2-1 (sRGB transfer and matrix), CIE 15:2004 (Lab)."""
    rgb = np.asarray(matplotlib.colors.to_rgb(color), float)
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                    [0.0193, 0.1192, 0.9505]]) @ lin / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a, b) -> float:
    """CIE76 colour difference of two matplotlib colours: the Euclidean distance of
    their :func:`cie_lab` (about 2.3: just noticeable; 25 and more tells two thin crossing
    lines apart)."""
    return float(np.linalg.norm(cie_lab(a) - cie_lab(b)))
