"""The trajectories kind's figures and the tabular kind's sweep figures say what they draw,
tested on the figure objects: the personal-data whiskers its caption names (their range
printed where too short to see), the induction legend in words, one colour per variant
across panels, curves on another drawn dashed and named, units in the y labels, and in a
sweep one visual channel per swept parameter with the same mapping in every panel."""

import json
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dyna.experiment.backends import InProcessBackend
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import load_output, run_experiment

DATA = (Path(__file__).resolve().parents[1] / "data" / "agent_trajectories"
        / "taubench_airline_gpt4o_trajectories.json")


def _shot(fig) -> dict:
    """Per axes: title, y label, y scale, x tick labels, box, lines (label, colour, dash
    pattern), texts (the bars' labels) and the y each points at, the whiskers of each
    error-bar series (y from, y to) and the legend (texts, bold texts, box); the figure's
    legends and suptitle. Boxes in display pixels, frozen before ``save`` redraws at
    another dpi."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    axes = []
    for ax in fig.axes:
        leg = ax.get_legend()
        axes.append({
            "title": ax.get_title(), "ylabel": ax.get_ylabel(), "yscale": ax.get_yscale(),
            "xticks": [t.get_text() for t in ax.get_xticklabels()],
            "yticks": [t.get_text() for t in ax.get_yticklabels()],
            "box": ax.get_window_extent(r).frozen(),
            # matplotlib reports every dash tuple as "--": the pattern tells them apart
            "lines": [(ln.get_label(), ln.get_color(), ln._unscaled_dash_pattern)
                      for ln in ax.get_lines()],
            "texts": [t.get_text() for t in ax.texts],
            "text_y": [float(getattr(t, "xy", (0, np.nan))[1]) for t in ax.texts],
            "whiskers": [[tuple(np.round(seg[:, 1], 6)) for seg in
                          c.lines[2][0].get_segments()]
                         for c in ax.containers if getattr(c, "has_yerr", False)],
            "legend": None if leg is None else {
                "texts": [t.get_text() for t in leg.get_texts()],
                "bold": [t.get_text() for t in leg.get_texts()
                         if t.get_fontweight() == "bold"],
                "box": leg.get_window_extent(r)}})
    return {"axes": axes, "suptitle": fig._suptitle.get_text() if fig._suptitle else "",
            "supxlabel": fig._supxlabel.get_text() if fig._supxlabel else "",
            "legends": [{"texts": [t.get_text() for t in leg.get_texts()],
                         "box": leg.get_window_extent(r)} for leg in fig.legends]}


def _recording(monkeypatch, module) -> dict:
    """From now on every figure ``module`` saves is also recorded (:func:`_shot`) in the
    dict returned, by file stem."""
    seen: dict = {}
    monkeypatch.setattr(module, "save", partial(_record_and_save, seen, module.save))
    return seen


def _record_and_save(seen: dict, real_save, fig, stem, *args, **kw):
    seen[stem.name] = _shot(fig)
    return real_save(fig, stem, *args, **kw)


# -------------------------------------------------------------------------- trajectories

@pytest.fixture(scope="module")
def trajectory_run(tmp_path_factory):
    """A two-run replay of tasks 0-5 (24 recorded runs); the figures it draws."""
    import dyna.experiment.kinds.trajectories.plots as tp

    tmp = tmp_path_factory.mktemp("tr")
    mp = pytest.MonkeyPatch()
    seen = _recording(mp, tp)
    (tmp / "runs.json").write_text(json.dumps(
        [r for r in json.loads(DATA.read_text()) if r["task_id"] < 6]))
    data = {"kind": "trajectories", "name": "say", "runs": 2, "seed": 0,
            "data": str(tmp / "runs.json"),
            "variants": ["naive_loop", "memory_loop", "memory_loop-no_redaction", "awm",
                         "expel"],
            "reviewer": {"copy_rate": 0.5}, "analysis": {"n_resamples": 100}}
    try:
        folder = run_experiment(parse_experiment(data), tmp / "o",
                                backend=InProcessBackend(), progress=False)
    finally:
        mp.undo()
    return seen, pl.read_parquet(folder / "runs.parquet")


def test_personal_data_says_when_the_runs_agree(trajectory_run):
    seen, runs = trajectory_run
    (ax,) = seen["personal_data"]["axes"]
    cols = ["pd_reviewer", "pd_store", "safety_net_catches"]
    spread = runs.group_by("variant").agg([pl.col(c).n_unique() for c in cols])
    # the reviewer seeds' copy draws leave these 24 recorded runs' counts alike
    assert spread.select(pl.max_horizontal(cols).max()).item() == 1
    assert "where they went (2 runs, all alike)" in ax["title"]
    assert ax["whiskers"] == []
    assert ax["legend"]["texts"] == ["reached the reviewer", "reached the store files",
                                     "safety-net catches (store writes redacted)"]
    assert ax["legend"]["box"].x0 >= ax["box"].x1       # right of the bars
    assert ax["ylabel"].startswith("harvested values per run (count;")
    assert ax["ylabel"].endswith("symmetric log") and ax["yscale"] == "symlog"


def _personal_data(monkeypatch, tmp_path, reviewer, store, catches) -> dict:
    """The recorded axes (:func:`_shot`) of the personal-data figure of variants a and b
    with these counts per run (a's two runs, then b's)."""
    import dyna.experiment.kinds.trajectories.plots as tp

    seen = _recording(monkeypatch, tp)
    runs = pl.DataFrame({"variant": ["a", "a", "b", "b"], "run": [0, 1, 0, 1],
                         "pd_reviewer": reviewer, "pd_store": store,
                         "safety_net_catches": catches})
    tp._personal_data_figure(runs, ["a", "b"], tmp_path)
    (ax,) = seen["personal_data"]["axes"]
    return ax


def test_personal_data_whiskers_span_the_runs(tmp_path, monkeypatch):
    ax = _personal_data(monkeypatch, tmp_path, [10, 30, 0, 0], [0, 0, 4, 4], [100, 110, 0, 0])
    assert "(mean of 2 runs, whiskers: min to max over runs)" in ax["title"]
    # per measure, per variant: the whisker from the runs' min to their max
    assert ax["whiskers"] == [[(10.0, 30.0), (0.0, 0.0)], [(0.0, 0.0), (4.0, 4.0)],
                              [(100.0, 110.0), (0.0, 0.0)]]
    # each bar labelled with its mean at the top of its whisker (a: 10 to 30, mean 20)
    assert ax["texts"][:4] == ["20", "0", "0", "4"]
    assert ax["text_y"] == [30.0, 0.0, 0.0, 4.0, 110.0, 0.0]


def test_personal_data_prints_a_range_only_where_its_whisker_is_too_short(tmp_path,
                                                                          monkeypatch):
    from dyna.experiment.kinds.trajectories.plots import RANGE_NOTE

    # the shipped replay's one spread: the naive loop's 105 and 106 safety-net catches
    ax = _personal_data(monkeypatch, tmp_path, [692, 692, 0, 2], [0, 0, 39, 39],
                        [105, 106, 0, 0])
    assert ax["whiskers"][2] == [(105.0, 106.0), (0.0, 0.0)]
    # 0 to 2 spans a visible whisker (its mean printed), 105 to 106 does not
    assert ax["texts"] == ["692", "1", "0", "39", "105-106", "0"]
    assert RANGE_NOTE == "whiskers too short to see: the range printed above the bar (min-max)"
    assert ax["title"].splitlines() == [
        "Personal values harvested by field from the tool outputs: where they went (mean "
        "of 2 runs, whiskers: min to max over runs)",
        "a baseline keeps runs as made: no reviewer, no redaction, no safety net", RANGE_NOTE]
    # every whisker visible: no range printed, no note
    ax = _personal_data(monkeypatch, tmp_path, [692, 692, 0, 2], [0, 0, 39, 39],
                        [10, 100, 0, 0])
    assert ax["texts"] == ["692", "1", "0", "39", "55", "0"]
    assert len(ax["title"].splitlines()) == 2


def test_spread_caption_says_exactly_what_is_drawn():
    from dyna.experiment.kinds.trajectories.plots import spread_caption

    assert [spread_caption(1), spread_caption(3), spread_caption(2, "whiskers"),
            spread_caption(2, "whiskers", agree=True)] == [
        "1 run (no spread)", "mean of 3 runs, band: min to max over runs",
        "mean of 2 runs, whiskers: min to max over runs", "2 runs, all alike"]


def test_induction_legend_in_words_under_the_bars(trajectory_run):
    seen, _ = trajectory_run
    (ax,) = seen["induction"]["axes"]
    assert ax["legend"]["texts"] == [
        "induced workflow: consensus of the type's other successful runs (induced)",
        "the type's most frequent ground-truth sequence (mode_ground_truth)",
        "the type's most frequent successful-run sequence (mode_success)"]
    assert ax["legend"]["box"].y1 <= ax["box"].y0 + 1      # below the axes
    assert ax["ylabel"].endswith("held-out tasks (fraction)")


def test_each_trajectory_variant_keeps_one_colour_of_its_own(trajectory_run):
    from dyna.experiment.kinds.trajectories.plots import VARIANT_COLORS

    seen, _ = trajectory_run
    names = ["naive_loop", "memory_loop", "memory_loop-no_redaction", "awm", "expel"]
    for stem in ("entries", "lessons_from_failed"):
        colours = {}
        for ax in seen[stem]["axes"]:
            for label, colour, _ in ax["lines"]:
                if label in names:
                    colours.setdefault(label, set()).add(colour)
        assert colours == {n: {VARIANT_COLORS[n]} for n in names}
    assert len({VARIANT_COLORS[n] for n in names}) == 5
    assert len(set(VARIANT_COLORS.values())) == len(VARIANT_COLORS) == 15
    loops, baselines = seen["entries"]["axes"]
    assert (loops["ylabel"], baselines["ylabel"]) == (
        "active skills + facts (count)", "entries kept (count, symmetric log)")
    lessons = seen["lessons_from_failed"]
    assert [ax["title"] for ax in lessons["axes"]] == ["loops", "literature baselines"]
    # the gated memory loops review successful runs only: their curves lie on 0, named
    assert lessons["suptitle"] == ("Lessons written from failed runs, cumulative (mean of 2 "
                                   "runs, band: min to max over runs)\non 0 (none written): "
                                   "memory_loop, memory_loop-no_redaction")


def _curves_drawn(ys: dict):
    """The curves ``ys`` (name -> y at x = 0..9) drawn 1.4 points wide on a laid-out 4-inch
    axes at 100 dpi, y from 0 to 100: a line width is about 0.6 of a unit, so 0.3 apart
    is on a curve. Returns the axes and name -> line."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 4), dpi=100)
    ax = fig.subplots()
    ax.set_ylim(0, 100)
    fig.draw_without_rendering()
    return ax, {n: ax.plot(np.arange(10.0), y, lw=1.4, label=n)[0] for n, y in ys.items()}


def test_curves_on_an_earlier_one_are_drawn_dashed_on_top_and_named():
    from dyna.experiment.kinds.trajectories.plots import coinciding
    from dyna.experiment.plotting import label_coinciding, legend_below

    x = np.arange(10.0)
    ax, lines = _curves_drawn({"a": x, "b": x.copy(), "c": x + np.r_[[0.3] * 6, [5.0] * 4],
                               "d": x + 0.3, "e": x + 5.0,
                               "f": x + np.r_[[0.3] * 4, [9.0] * 6]})
    assert coinciding(ax, lines) == {"b": ("a", 10, 10, True), "c": ("a", 6, 10, False),
                                     "d": ("a", 10, 10, False)}
    assert label_coinciding(ax, lines) == {"b": ("a", 10, 10, True),
                                           "c": ("a", 6, 10, False),
                                           "d": ("a", 10, 10, False)}
    legend_below(ax, len(lines))
    # the three on a: 3-point dashes every 12 points, side by side, over a
    assert [lines[n]._unscaled_dash_pattern for n in "bcd"] == [
        (0.0, (3.0, 9.0)), (9.0, (3.0, 9.0)), (6.0, (3.0, 9.0))]
    assert [lines[n].get_zorder() for n in "abcdef"] == [2, 2.1, 2.1, 2.1, 2, 2]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "a", "b\n(identical to a here; dashed)", "c\n(on a at 6 of 10 points; dashed)",
        "d\n(within a line width of a; dashed)", "e", "f"]


def test_a_kept_curve_keeps_its_look_and_labels_wrap_to_a_width():
    from dyna.experiment.plotting import hidden_label, label_coinciding

    x = np.arange(10.0)
    ax, lines = _curves_drawn({"a": x, "group": x.copy(), "b": x.copy(),
                               "c": x + np.r_[[0.3] * 6, [5.0] * 4]})
    hidden = label_coinciding(ax, lines, keep={"group"}, width=20)
    assert hidden == {"b": ("a", 10, 10, True), "c": ("a", 6, 10, False)}
    # the kept curve is left solid, unlabelled, and takes no place among the dashes
    assert [lines[n]._unscaled_dash_pattern for n in ("group", "b", "c")] == [
        (0, None), (0.0, (3.0, 6.0)), (6.0, (3.0, 6.0))]
    assert [lines[n].get_label() for n in ("a", "group", "b", "c")] == [
        "a", "group", "b\n(identical to a\nhere; dashed)", "c\n(on a at 6 of 10\npoints; dashed)"]
    assert hidden_label("c", "a", 6, 10, False) == "c\n(on a at 6 of 10 points; dashed)"


def test_the_entries_figure_says_which_loops_coincide(tmp_path, monkeypatch):
    import dyna.experiment.kinds.trajectories.plots as tp

    seen = _recording(monkeypatch, tp)
    (tmp_path / "runs.json").write_text(json.dumps(
        [r for r in json.loads(DATA.read_text()) if r["task_id"] < 6]))
    data = {"kind": "trajectories", "name": "same", "runs": 1, "seed": 0,
            "data": str(tmp_path / "runs.json"),
            "variants": ["skill_loop", "skill_loop-no_redaction", "skill_loop-no_outcome_gate"],
            "reviewer": {"copy_rate": 0.5}, "analysis": {"n_resamples": 100}}
    run_experiment(parse_experiment(data), tmp_path / "o", backend=InProcessBackend(),
                   progress=False)
    loops = seen["entries"]["axes"][0]
    # without redaction the skill loop writes what it writes with it on these 24 runs
    assert [(label, dashes) for label, _, dashes in loops["lines"][:3]] == [
        ("skill_loop", (0, None)), ("skill_loop-no_outcome_gate", (0, None)),
        ("skill_loop-no_redaction\n(identical to skill_loop here; dashed)",
         (0.0, (3.0, 3.0)))]
    assert loops["legend"]["texts"] == [
        "skill_loop", "skill_loop-no_outcome_gate",
        "skill_loop-no_redaction\n(identical to skill_loop here; dashed)"]
    assert loops["legend"]["box"].y1 <= loops["box"].y0 + 1      # under the axes


def test_a_variant_without_a_fixed_colour_takes_a_free_one():
    from dyna.experiment.kinds.trajectories.plots import VARIANT_COLORS, variant_colors

    colours = variant_colors(["naive_loop", "new_one", "awm"])
    assert colours["naive_loop"] == VARIANT_COLORS["naive_loop"]
    assert colours["new_one"] not in VARIANT_COLORS.values()


# ------------------------------------------------------------------------- tabular sweep

ALPHAS = [0.05, 0.1, 0.2, 0.4, 0.8]


def test_a_sweep_is_a_line_style_per_alpha_in_every_panel(tmp_path, monkeypatch):
    import dyna.experiment.kinds.tabular.plots as tp

    seen = _recording(monkeypatch, tp)
    data = {"name": "sw", "runs": 2, "seed": 0, "env": {"id": "dyna/DynaMaze-v0"},
            "schedule": {"episodes": 4}, "defaults": {"agent": "dyna_q"},
            "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=5", "n_planning": 5}],
            "sweep": {"alpha": ALPHAS},
            "analysis": {"first_episode": 2, "final_episodes": 2, "n_resamples": 100}}
    folder = run_experiment(parse_experiment(data), tmp_path / "o",
                            backend=InProcessBackend(), progress=False)
    shot = seen["steps_per_episode"]
    assert [ax["title"].split("\n")[0] for ax in shot["axes"]] == [
        "0 planning steps (direct RL only)", "5 planning steps"]
    dash = {}
    for ax in shot["axes"]:
        curves = [(lab, c, d) for lab, c, d in ax["lines"] if "(alpha=" in lab]
        assert len(curves) == 5 and len({c for _, c, _ in curves}) == 1
        for lab, _, d in curves:
            dash.setdefault(lab.split("(alpha=")[1].rstrip(")"), set()).add(str(d))
    # each alpha one dash pattern in both panels, no two alphas alike
    assert sorted(dash, key=float) == [str(a) for a in ALPHAS]
    assert all(len(d) == 1 for d in dash.values())
    assert len({next(iter(d)) for d in dash.values()}) == 5
    want = tp.variant_colors(load_output(folder))
    assert [ax["lines"][0][1] for ax in shot["axes"]] == [want["n=0"], want["n=5"]]
    (legend,) = shot["legends"]
    assert legend["texts"] == ["colour = planning steps (n)",
                               "0 planning steps (direct RL only)", "5 planning steps",
                               "line style = alpha", *map(str, ALPHAS),
                               "shortest path (14 steps)"]
    assert all(legend["box"].x0 >= ax["box"].x1 for ax in shot["axes"])
    (sens,) = seen["sensitivity_alpha"]["axes"]
    assert sens["legend"]["texts"] == ["colour = planning steps (n)",
                                       "0 planning steps (direct RL only)",
                                       "5 planning steps"]
    assert sens["legend"]["bold"] == ["colour = planning steps (n)"]
    assert sens["legend"]["box"].x0 >= sens["box"].x1


def test_sweep_points_styles_and_colour_heading():
    from dyna.experiment.kinds.tabular.plots import colour_title, sweep_combos, sweep_styles

    cfg = parse_experiment({"name": "x", "runs": 1, "env": {"id": "dyna/AsciiMaze-v0"},
                            "schedule": {"episodes": 2}, "defaults": {"agent": "dyna_q"},
                            "variants": [{"name": "n=0", "n_planning": 0}],
                            "sweep": {"alpha": [0.2, 1.0], "resolution": [10, 2]}})
    assert sweep_combos(cfg, ["resolution"]) == [(10,), (2,)]        # the grid's order
    assert sweep_combos(cfg, ["alpha", "resolution"]) == [(0.2, 10), (0.2, 2), (1.0, 10),
                                                          (1.0, 2)]
    assert sweep_combos(cfg, []) == [()]
    styles = sweep_styles(9)
    assert len({(str(s["linestyle"]), s["marker"]) for s in styles}) == 9
    assert styles[0] == {"linestyle": "-", "marker": None} and styles[8]["marker"] == "o"
    other = parse_experiment({"name": "y", "runs": 1, "env": {"id": "dyna/DynaMaze-v0"},
                              "schedule": {"episodes": 2}, "defaults": {"agent": "dyna_q"},
                              "variants": [{"name": "n=5", "n_planning": 5},
                                           {"name": "q", "agent": "q_learning"}]})
    assert colour_title(cfg.variants) == "colour = planning steps (n)"
    assert colour_title(other.variants) == "colour = variant"


def test_the_lessons_figure_names_the_variants_on_zero():
    from dyna.experiment.kinds.trajectories.plots import _none_written

    eps = pl.DataFrame({"variant": ["a", "a", "b", "b", "c"], "from_failed": [0, 0, 1, 0, 0]})
    assert _none_written(eps, ["c", "b", "a"]) == "on 0 (none written): c, a"
    assert _none_written(eps, ["b"]) == "every variant writes some"


def test_updates_to_optimal_reads_the_maze_sizes_in_plain_numbers(tmp_path, monkeypatch):
    import dyna.experiment.kinds.tabular.plots as tp

    seen = _recording(monkeypatch, tp)
    data = {"name": "ps", "runs": 2, "seed": 0, "env": {"id": "dyna/AsciiMaze-v0"},
            "sweep": {"resolution": [1, 2]},
            "schedule": {"episodes": 2000, "stop_at_optimal": True,
                         "optimal_tolerance": 1.2},
            "defaults": {"alpha": 0.5, "n_planning": 5, "theta": 1e-4},
            "variants": [{"name": "Dyna-Q", "agent": "dyna_q"},
                         {"name": "prioritized sweeping", "agent": "prioritized_sweeping"}],
            "analysis": {"metrics": ["updates_to_optimal"], "n_resamples": 100}}
    folder = run_experiment(parse_experiment(data), tmp_path / "o",
                            backend=InProcessBackend(), progress=False)
    (ax,) = seen["updates_to_optimal"]["axes"]
    assert ax["yscale"] == "log" and ax["xticks"] == ["47", "188"]    # free states
    assert ax["ylabel"] == "updates until an optimal path\n(log scale)"
    assert ax["title"].endswith("optimal: 5 greedy rollouts within 1.2 x the shortest path)")
    assert ax["legend"]["texts"] == ["Dyna-Q", "prioritized sweeping"]
    assert ax["legend"]["box"].x0 >= ax["box"].x1
    big = [t for t in ax["yticks"] if t and float(t.replace(",", "")) >= 1000]
    assert big and all(f"{float(t.replace(',', '')):,.0f}" == t for t in big), ax["yticks"]
    runs = pl.read_parquet(folder / "runs.parquet")
    found = {v: [int(runs.filter((pl.col("variant") == v) & (pl.col("resolution") == k))
                     ["updates_to_optimal"].is_not_null().sum()) for k in (1, 2)]
             for v in ("Dyna-Q", "prioritized sweeping")}
    counts = "; ".join(f"{v} {n[0]}/2 at every size" if n[0] == n[1]
                       else f"{v} {n[0]}/2, {n[1]}/2" for v, n in found.items())
    assert seen["updates_to_optimal"]["supxlabel"].split("\n")[0] == (
        f"runs that found an optimal path: {counts}")


def test_a_whisker_hidden_by_its_marker_is_said_zero_or_narrow():
    from matplotlib.figure import Figure

    from dyna.experiment.kinds.tabular.plots import hidden_whiskers

    fig = Figure(figsize=(6, 4), dpi=100)
    ax = fig.add_subplot()
    ax.set_yscale("log")
    ax.set_ylim(100, 100_000)
    ax.set_xlim(10, 1000)
    drawn = [("A", [47, 188], np.array([1000.0, 5000.0]), np.array([1000.0, 2000.0]),
              np.array([1000.0, 9000.0])),
             ("B", [47, 188], np.array([900.0, 8000.0]), np.array([890.0, 7900.0]),
              np.array([910.0, 8100.0]))]
    ax.autoscale(False)
    assert hidden_whiskers(ax, drawn) == [
        "no whisker: the interval is zero (every run the same) for A at 47",
        "no whisker: the interval is narrower than the marker (not zero) for B at 47, 188"]


def test_a_sweep_panel_says_how_close_its_curves_lie():
    from dyna.experiment.kinds.tabular.plots import closeness

    xs = np.arange(2, 12.0)                           # 10 episodes: the gap from episode 4
    flat = np.full(10, 20.0)
    near = flat + np.r_[300.0, 100.0, 1.0, -2.0, 0, 0, 0, 0, 0, 2.5]
    assert closeness([(xs, flat), (xs, flat.copy())], "episode", "steps") == \
        "\n(the 2 curves coincide)"
    assert closeness([(xs, flat), (xs, near)], "episode", "steps") == \
        "\n(the 2 curves lie within 2.5 steps\nof each other from episode 4)"
    assert closeness([(xs, flat), (xs, near)], "episode", None) == ""
    assert closeness([(xs, flat)], "episode", "steps") == ""
