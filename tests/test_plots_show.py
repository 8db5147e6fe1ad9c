"""The plots show the effect, tested on the figure objects: Figure 8.2's log axis and the
book's legend words, a colour per variant in every panel, events as vertical lines, legends
outside the data (the tabular, escalation and agent-tasks kinds)."""

import numpy as np
import polars as pl
import pytest

from dyna.experiment.backends import InProcessBackend
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import load_output, run_experiment


def _snapshot(fig) -> dict:
    """What a test reads of a figure before it is saved and cleared: per axes its scales,
    lines (label, colour, whether vertical, x), legend texts and whether the legend's box
    overlaps the axes' data area; the figure legends' boxes and texts."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        box = ax.get_window_extent(renderer)
        lines = []
        for ln in ax.get_lines():
            x, y = np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float)
            vertical = x.size == 2 and x[0] == x[1] and list(y) == [0.0, 1.0]
            lines.append({"label": ln.get_label(), "color": ln.get_color(),
                          "vertical": vertical, "x": float(x[0]) if x.size else None})
        leg = ax.get_legend()
        legend = None
        if leg is not None:
            lb = leg.get_window_extent(renderer)
            legend = {"texts": [t.get_text() for t in leg.get_texts()],
                      "overlaps": lb.overlaps(box), "below": lb.y1 <= box.y0 + 1,
                      "right": lb.x0 >= box.x1 - 1}
        axes.append({"yscale": ax.get_yscale(), "xscale": ax.get_xscale(), "lines": lines,
                     "legend": legend, "box": box})
    legends = [{"texts": [t.get_text() for t in leg.get_texts()],
                "box": leg.get_window_extent(renderer)} for leg in fig.legends]
    return {"axes": axes, "legends": legends, "title": fig._suptitle.get_text()
            if fig._suptitle is not None else ""}


@pytest.fixture
def captured(monkeypatch):
    """``capture(module)``: from then on every figure the module saves is also recorded
    (:func:`_snapshot`), by file stem, in the dict returned."""
    shots = {}

    def capture(module):
        real = module.save

        def save(fig, stem, *args, **kw):
            shots[stem.name] = _snapshot(fig)
            return real(fig, stem, *args, **kw)

        monkeypatch.setattr(module, "save", save)
        return shots
    return capture


def _colors_by_label(shot, labels) -> dict:
    """Per label, the set of colours it is drawn in across the figure's axes, and in how
    many axes it appears."""
    seen = {}
    for ax in shot["axes"]:
        for ln in ax["lines"]:
            if ln["label"] in labels:
                c, n = seen.get(ln["label"], (set(), 0))
                seen[ln["label"]] = (c | {ln["color"]}, n + 1)
    return seen


# ------------------------------------------------------------------------------ tabular

def test_figure_8_2_is_log_scaled_with_the_book_legend_outside(tmp_path, captured):
    import dyna.experiment.kinds.tabular.plots as tp

    shots = captured(tp)
    data = {"name": "fig82", "runs": 2, "seed": 0, "env": {"id": "dyna/DynaMaze-v0"},
            "schedule": {"episodes": 8}, "defaults": {"agent": "dyna_q"},
            "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=5", "n_planning": 5},
                         {"name": "n=50", "n_planning": 50}],
            "analysis": {"first_episode": 2, "n_resamples": 200}}
    run_experiment(parse_experiment(data), tmp_path / "o", backend=InProcessBackend(),
                   progress=False)
    (ax,) = shots["steps_per_episode"]["axes"]
    assert ax["yscale"] == "log"      # episode 2 of n = 0 takes hundreds of steps, n = 50 tens
    assert ax["legend"]["texts"] == ["0 planning steps (direct RL only)", "5 planning steps",
                                     "50 planning steps", "shortest path (14 steps)"]
    assert ax["legend"]["right"] and not ax["legend"]["overlaps"]
    colors = {ln["label"]: ln["color"] for ln in ax["lines"]}
    assert len({colors[k] for k in ax["legend"]["texts"][:3]}) == 3


def test_book_labels_only_for_names_that_state_n():
    from dyna.experiment.kinds.tabular.plots import book_label

    cfg = parse_experiment({"name": "x", "runs": 1, "env": {"id": "dyna/DynaMaze-v0"},
                            "schedule": {"episodes": 2}, "defaults": {"agent": "dyna_q"},
                            "variants": [{"name": "n = 1", "n_planning": 1},
                                         {"name": "Dyna-Q n=10", "n_planning": 10},
                                         {"name": "q", "agent": "q_learning"}]})
    assert [book_label(v) for v in cfg.variants] == ["1 planning step", "Dyna-Q n=10", "q"]


def test_a_maze_change_is_a_vertical_line_and_colours_follow_the_variant(tmp_path, captured):
    import dyna.experiment.kinds.tabular.plots as tp

    shots = captured(tp)
    data = {"name": "block", "runs": 2, "seed": 0,
            "env": {"id": "dyna/BlockingMaze-v0", "kwargs": {"change_at": 150}},
            "schedule": {"total_steps": 300}, "defaults": {"n_planning": 5},
            "variants": [{"name": "Dyna-Q", "agent": "dyna_q"},
                         {"name": "Dyna-Q+", "agent": "dyna_q_plus"}],
            "analysis": {"metrics": ["cumulative_reward"], "n_resamples": 200}}
    folder = run_experiment(parse_experiment(data), tmp_path / "o",
                            backend=InProcessBackend(), progress=False)
    (ax,) = shots["cumulative_reward"]["axes"]
    events = [ln["x"] for ln in ax["lines"] if ln["vertical"]]
    assert events == [150.0]
    assert ax["legend"]["texts"] == ["Dyna-Q", "Dyna-Q+", "environment changes"]
    assert not ax["legend"]["overlaps"]
    out = load_output(folder)
    want = tp.variant_colors(out)
    drawn = {ln["label"]: ln["color"] for ln in ax["lines"] if not ln["vertical"]}
    assert {k: tuple(v) if not isinstance(v, str) else v for k, v in drawn.items()} == {
        k: tuple(v) for k, v in want.items()}


# ---------------------------------------------------------------------------- escalation

def test_escalation_plots_keep_colours_log_costs_and_legends_off_the_curves(tmp_path,
                                                                           captured):
    import dyna.experiment.kinds.escalation.plots as ep

    shots = captured(ep)
    data = {"kind": "escalation", "name": "plots_esc", "runs": 2, "seed": 1,
            "risk_classes": ["low_stakes"], "feedback": ["censored", "full"],
            "costs": {"c_escalate": 1.0, "p_star": [0.5, 0.9]},
            "scenarios": [{"name": "flat", "rates": [0.3, 0.95], "steps": 200},
                          {"name": "shift", "rates": [0.3, 0.95], "steps": 200,
                           "change_at": [120], "rates_after": [[0.95, 0.3]]}],
            "variants": [{"name": n, "rule": n} for n in ("never", "always", "mean",
                                                           "thompson")],
            "analysis": {"n_resamples": 200, "svg": False, "checkpoints": 5}}
    run_experiment(parse_experiment(data), tmp_path / "o", backend=InProcessBackend(),
                   progress=False)
    names = ["never", "always", "mean", "thompson"]
    # regret: every panel symmetric-log, each policy one colour in all 4 panels, a
    # legend right of each row (which policies coincide depends on the cost setting)
    regret = shots["regret_flat_full"]
    assert [ax["yscale"] for ax in regret["axes"]] == ["symlog"] * 4
    assert [ax["xscale"] for ax in regret["axes"]] == ["linear", "log"] * 2
    seen = _colors_by_label(regret, names)
    assert {k: (len(c), n) for k, (c, n) in seen.items()} == {k: (1, 4) for k in names}
    assert regret["legends"] == []
    assert [ax["legend"] is None for ax in regret["axes"]] == [True, False] * 2
    for ax in regret["axes"][1::2]:
        assert ax["legend"]["texts"] == names
        assert ax["legend"]["right"] and not ax["legend"]["overlaps"]
    # under censoring at p* = 0.9 mean never acts (the trap): one curve with always, one
    # legend entry naming both
    censored = shots["regret_flat_censored"]
    assert censored["axes"][3]["legend"]["texts"] == [
        "never", "always, mean (identical here)", "thompson"]
    assert "symmetric log" in regret["title"]
    # risk-coverage: a legend under every panel, none on the curves
    rc = shots["risk_coverage_flat"]
    assert len(rc["axes"]) == 2
    for ax in rc["axes"]:
        assert ax["legend"]["below"] and not ax["legend"]["overlaps"]
    # with full feedback every policy sees every outcome: one posterior, one curve
    # censored: always escalates every task, so its score ranks at random; mean and
    # thompson lie on never's curve at most points, drawn dashed on top of it
    assert [ax["legend"]["texts"] for ax in rc["axes"]] == [
        ["never", "always", "mean\n(on never at 11 of 20 points; dashed)",
         "thompson\n(on never at 11 of 20 points; dashed)",
         "random score (failure rate)\nalways escalates every task: its score never\n"
         "moves, so it ranks at random"],
        ["never, always, mean, thompson\n(identical here)", "random score (failure rate)"]]
    # cost grid: never and always do not flatten the rest (symlog, said in the title)
    grid = shots["cost_grid_flat"]
    assert [ax["yscale"] for ax in grid["axes"]] == ["symlog", "symlog"]
    assert "y: symmetric log" in grid["title"]
    for ax in grid["axes"]:
        assert ax["legend"]["below"] and not ax["legend"]["overlaps"]
    colors = {name: c for name, (c, _) in _colors_by_label(grid, names).items()}
    assert colors == {name: c for name, (c, _) in _colors_by_label(regret, names).items()}
    # the change point: a vertical line in every regret panel, named once in the legend
    shift = shots["regret_shift_full"]
    assert all([ln["x"] for ln in ax["lines"] if ln["vertical"]] == [120.0]
               for ax in shift["axes"])
    assert all(not any(ln["vertical"] for ln in ax["lines"]) for ax in regret["axes"])
    assert shift["axes"][1]["legend"]["texts"] == names + ["rates change"]


def test_escalation_colours_are_distinct_past_ten_policies():
    from dyna.experiment.kinds.escalation.plots import OTHER_COLORS, POLICY_COLORS

    assert len(POLICY_COLORS) == 12 and len(set(POLICY_COLORS.values())) == 12
    assert not set(OTHER_COLORS) & set(POLICY_COLORS.values())
    # never and always are not one colour in two shades
    assert (POLICY_COLORS["never"], POLICY_COLORS["always"]) == ("#d62728", "#7f7f7f")


# --------------------------------------------------------------------------- agent tasks

def test_agent_task_figure_marks_drifts_and_keeps_each_variant_colour(tmp_path, captured,
                                                                      monkeypatch):
    import dyna.experiment.kinds.agent_tasks.plots as ap

    monkeypatch.setenv("DYNA_RENDER", "serial")
    shots = captured(ap)
    data = {"kind": "agent_tasks", "name": "plots_at", "runs": 2, "episodes": 30, "seed": 0,
            "variants": ["no_learning", "naive_loop", "skill_loop", "skill_loop-no_dating",
                         "dyna_q"],
            "env": {"n_families": 2},
            "scenarios": [{"name": "drift", "env": {"drift_at": [10, 20]}}],
            "analysis": {"final_window": 5, "n_resamples": 200, "window": 5}}
    folder = run_experiment(parse_experiment(data), tmp_path / "o",
                            backend=InProcessBackend(), progress=False)
    shot = shots["scenario_drift"]
    # drift_at = [10, 20]: the tasks change after episodes 10 and 20, flagged on the next
    drifts = sorted(set(pl.read_parquet(folder / "episodes.parquet")
                        .filter(pl.col("drift"))["episode"].to_list()))
    assert drifts == [11, 21]
    labels = ["no_learning", "naive_loop", "skill_loop", "no_dating", "dyna_q"]
    seen = _colors_by_label(shot, labels)
    assert all(len(c) == 1 for c, _ in seen.values())
    # the full loop is in every column: 3 columns (baselines, tabular, ablations) x 5 rows
    assert seen["skill_loop"][1] == 15
    assert seen["skill_loop"][0] == {"#000000"}
    for ax in shot["axes"]:
        assert sorted(ln["x"] for ln in ax["lines"] if ln["vertical"]) == [11.0, 21.0]
    legends = [ax["legend"] for ax in shot["axes"] if ax["legend"] is not None]
    assert len(legends) == 3 and all(leg["below"] for leg in legends)


def test_no_two_agent_task_variants_share_a_colour():
    """The scenario figures put baselines, tabular learners and ablations in panels of one
    figure: a colour names one variant there (no_outcome_gate must not take dyna_q's blue,
    nor no_cap_eviction dyna_q_plus's orange)."""
    from dyna.experiment.kinds.agent_tasks.figure_style import (
        ADDED_COLORS, LOOP_VARIANT_COLORS, SWITCH_COLORS, VARIANT_COLORS, variant_color)

    colors = [*VARIANT_COLORS.values(), *SWITCH_COLORS.values(), *ADDED_COLORS.values(),
              *LOOP_VARIANT_COLORS.values(), "#000000"]
    assert len(set(colors)) == len(colors)
    assert variant_color("skill_loop-no_outcome_gate", "skill") != variant_color("dyna_q",
                                                                                "skill")
    assert variant_color("skill_loop-no_cap_eviction", "skill") == "#a6761d"
    assert variant_color("naive_loop+cap_eviction", "skill") == "#734066"


# -------------------------------------------------------------------------- trajectories

def test_trajectory_curves_keep_their_legends_under_the_panels(tmp_path, captured):
    """The entries and lessons figures: one legend under each panel naming its variants,
    none over the curves."""
    import json
    from pathlib import Path

    import dyna.experiment.kinds.trajectories.plots as tp

    full = (Path(__file__).resolve().parents[1] / "data" / "agent_trajectories"
            / "taubench_airline_gpt4o_trajectories.json")
    runs = [r for r in json.loads(full.read_text()) if r["task_id"] < 6]
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    shots = captured(tp)
    data = {"kind": "trajectories", "name": "plots_tr", "runs": 1, "seed": 0,
            "data": str(tmp_path / "runs.json"),
            "variants": ["naive_loop", "memory_loop", "awm", "expel"],
            "analysis": {"n_resamples": 100}}
    run_experiment(parse_experiment(data), tmp_path / "o", backend=InProcessBackend(),
                   progress=False)
    for stem in ("entries", "lessons_from_failed"):
        loops, baselines = shots[stem]["axes"]
        assert loops["legend"]["texts"] == ["naive_loop", "memory_loop"]
        assert baselines["legend"]["texts"] == ["awm", "expel"]
        for ax in (loops, baselines):
            assert ax["legend"]["below"] and not ax["legend"]["overlaps"]


def test_a_count_row_shows_its_highest_curve_whole():
    """The poisoned-entries row (linear) spans every point drawn: one variant's 12 entries
    among panels of zeros is not clipped; a token row (log) still clips extreme points."""
    from dyna.experiment.kinds.agent_tasks.plots import _limits

    zeros = [np.zeros(1000)] * 5
    lo, hi = _limits([*zeros, np.linspace(0.0, 12.0, 50)], "linear")
    assert lo < 0 and hi >= 12.0
    tokens = [np.full(1000, 100.0), np.array([100.0, 1e9])]
    assert _limits(tokens, "log")[1] < 1e9
