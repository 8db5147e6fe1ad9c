"""The escalation kind's ``switches`` table and the lines it draws: a date-ordered replay
switches to the next system after each system's last task, the table names the systems,
the competence and regret plots draw a dotted vertical line at each switch under one legend
entry, the report says how many and after which tasks, and a folder written without the
table still loads, plots (no switch lines for a replay) and reports."""

import json

import polars as pl
import pytest

import dyna.experiment.kinds.escalation.plots as ep
from dyna.experiment.backends import ProcessPoolBackend
from dyna.experiment.kinds.escalation.report import _task_list, build_report
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import load_output, run_experiment

# 3 systems, listed out of date order: by date a (4 tasks), b (3), c (5), so a date-ordered
# stream switches after task 4 (a -> b) and after task 4 + 3 = 7 (b -> c)
CSV = """system,task_id,task_type,success
20250102_b,t1,x,1
20250102_b,t2,y,0
20250102_b,t3,x,1
20250101_a,t1,x,0
20250101_a,t2,y,1
20250101_a,t3,x,0
20250101_a,t4,y,1
20250301_c,t1,x,1
20250301_c,t2,y,1
20250301_c,t3,x,0
20250301_c,t4,y,1
20250301_c,t5,x,1
"""

BY_DATE = {"name": "by_date", "source": "replay", "data": "outcomes.csv",
           "systems": "all_by_date"}
ONE = {"name": "one", "source": "replay", "data": "outcomes.csv", "systems": ["20250101_a"]}
JUMP = {"name": "jump", "rates": [0.3, 0.9], "steps": 12, "change_at": [6],
        "rates_after": [[0.9, 0.3]]}


def _config(tmp_path, scenarios):
    (tmp_path / "outcomes.csv").write_text(CSV)
    return parse_experiment({
        "kind": "escalation", "name": "switches", "seed": 3, "runs": 2,
        "risk_classes": ["low_stakes"], "feedback": ["censored", "full"],
        "costs": {"c_escalate": 1.0},
        "scenarios": scenarios,
        "variants": [{"name": "mean", "rule": "mean"}, {"name": "thompson",
                                                        "rule": "thompson"}],
        "analysis": {"checkpoints": 5, "n_resamples": 100, "svg": False}},
        base_dir=tmp_path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    base = tmp_path_factory.mktemp("switches")
    return run_experiment(_config(base, [BY_DATE, ONE, JUMP]), base / "out", block_size=1)


SWITCHES = [("by_date", "all_by_date", 1, 4, "20250101_a", "20250102_b"),
            ("by_date", "all_by_date", 2, 7, "20250102_b", "20250301_c"),
            ("jump", "", 1, 6, None, None)]


def test_the_table_has_a_row_per_switch_naming_the_systems(folder):
    table = pl.read_parquet(folder / "switches.parquet")
    assert table.columns == ["scenario", "system", "switch", "step", "from_system",
                             "to_system"]
    assert table.rows() == SWITCHES
    listed = json.loads((folder / "manifest.json").read_text())["tables"]
    assert listed["switches.parquet"]["rows"] == 3


def test_the_same_table_on_the_process_backend(folder, tmp_path):
    other = run_experiment(_config(tmp_path, [BY_DATE, ONE, JUMP]), tmp_path / "out",
                           block_size=2, backend=ProcessPoolBackend(1))
    for name in ("switches", "runs", "curves"):
        assert pl.read_parquet(other / f"{name}.parquet").equals(
            pl.read_parquet(folder / f"{name}.parquet")), name


def test_no_switches_give_an_empty_table_with_its_columns(tmp_path):
    out = run_experiment(_config(tmp_path, [ONE]), tmp_path / "out")
    table = pl.read_parquet(out / "switches.parquet")
    assert table.height == 0
    assert table.schema == pl.Schema(
        {"scenario": pl.String, "system": pl.String, "switch": pl.Int64, "step": pl.Int64,
         "from_system": pl.String, "to_system": pl.String})
    assert json.loads((out / "manifest.json").read_text())["tables"]["switches.parquet"][
        "rows"] == 0


@pytest.fixture
def figures(monkeypatch):
    """Per saved figure stem, per axes: the x of its vertical lines and its legend texts
    (the axes' legend, else the figure's)."""
    shots = {}

    def save(fig, stem, svg=True):
        fig.canvas.draw()
        shots[stem.name] = [
            {"vertical": [float(ln.get_xdata()[0]) for ln in ax.get_lines()
                          if ln.get_transform() == ax.get_xaxis_transform()],
             "segments": [(float(t.get_position()[0]), t.get_text().strip())
                          for t in ax.texts],
             "keys": [[t.get_text() for t in leg.get_texts()] for leg in fig.legends],
             "true_rate": [(list(ln.get_xdata()), list(ln.get_ydata()))
                           for ln in ax.get_lines()
                           if ln.get_color() == "k" and ln.get_linestyle() == "--"],
             "legend": [t.get_text() for t in (ax.get_legend() or fig.legends[0]).get_texts()]
             if ax.get_legend() or fig.legends else []}
            for ax in fig.axes if ax.get_visible()]
        return []

    monkeypatch.setattr(ep, "save", save)
    return shots


def test_the_task_axis_plots_draw_a_line_at_each_switch(folder, figures, tmp_path):
    out = load_output(folder)
    ep.draw_plots(out, tmp_path)
    steps = pl.read_parquet(folder / "switches.parquet").filter(
        pl.col("scenario") == "by_date")["step"].to_list()
    assert steps == [4, 7]
    for stem in ("regret_by_date_censored", "regret_by_date_full",
                 "competence_by_date_all_by_date_full"):
        for ax in figures[stem]:
            assert ax["vertical"] == [4.0, 7.0], stem
    # one legend entry for the two lines
    assert figures["regret_by_date_full"][1]["legend"].count("system switches") == 1
    assert figures["regret_by_date_full"][1]["legend"][-1] == "system switches"
    assert figures["competence_by_date_all_by_date_full"][0]["legend"] == [
        "posterior mean", "true rate", "system switches"]
    # each segment of the replay is numbered on the linear task axes, and a key under the
    # figure names its system
    numbered = [(0.0, "1"), (4.0, "2"), (7.0, "3")]
    key = ["1  20250101_a (from task 0)", "2  20250102_b (from task 4)",
           "3  20250301_c (from task 7)"]
    linear, log = figures["regret_by_date_full"]
    assert linear["segments"] == numbered and log["segments"] == []
    assert linear["keys"][-1] == key
    for ax in figures["competence_by_date_all_by_date_full"]:
        assert ax["segments"] == numbered and ax["keys"][-1] == key
        # the true rate in level pieces, each from its first checkpoint to the next
        # piece's: no riser joins two different rates
        pieces = ax["true_rate"]
        assert len(pieces) >= 2 and all(len(x) == 2 and y[0] == y[1] for x, y in pieces)
        assert all(a[0][1] == b[0][0] for a, b in zip(pieces, pieces[1:]))
    assert all(ax["segments"] == [] and ax["keys"] == [] for ax in figures["regret_jump_full"])
    # a synthetic scenario's rate change keeps its words; a stream without switches: none
    assert all(ax["vertical"] == [6.0] for ax in figures["regret_jump_full"])
    assert figures["regret_jump_full"][1]["legend"][-1] == "rates change"
    assert all(ax["vertical"] == [] for ax in figures["regret_one_full"])
    # risk-coverage and cost axes have no task axis: no lines
    assert all(ax["vertical"] == [] for ax in figures["risk_coverage_by_date"])


def test_many_switches_are_drawn_on_the_linear_regret_panel_only(folder, figures, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setattr(ep, "MAX_LOG_CHANGES", 1)     # by_date has 2 switches
    ep.draw_plots(load_output(folder), tmp_path)
    linear, log = figures["regret_by_date_full"]
    assert linear["vertical"] == [4.0, 7.0] and log["vertical"] == []
    assert log["legend"][-1] == "system switches (left panel)"
    # the jump scenario's one change stays on both panels
    assert all(ax["vertical"] == [6.0] for ax in figures["regret_jump_full"])


def test_the_report_says_how_many_switches_and_after_which_tasks(folder):
    text = build_report(load_output(folder))
    line = "  - 2 system switches (dotted in the regret and competence plots), after tasks 4, 7"
    assert text.count("system switches") == 1
    lines = text.splitlines()
    at = lines.index(line)
    assert lines[at - 1].startswith("- scenario `by_date`: replay of `outcomes.csv`")


def test_task_list_shortens_evenly_spaced_switches():
    assert _task_list(list(range(500, 12000, 500))) == "500, 1,000, ..., 11,500 (every 500)"
    assert _task_list([4, 7]) == "4, 7"
    assert _task_list([1, 2, 4, 8, 16, 32, 64]) == "1, 2, 4, ..., 64"


def test_a_folder_without_the_table_loads_plots_and_reports(folder, figures, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    for path in folder.iterdir():
        if path.suffix == ".parquet" and path.name != "switches.parquet":
            (old / path.name).write_bytes(path.read_bytes())
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["tables"]["switches.parquet"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    out = load_output(old)
    assert "switches" not in out.tables
    ep.draw_plots(out, tmp_path / "plots")
    # no lines for the replay, the synthetic change point from the config
    assert all(ax["vertical"] == [] for ax in figures["regret_by_date_full"])
    assert "system switches" not in figures["regret_by_date_full"][1]["legend"]
    assert all(ax["vertical"] == [6.0] for ax in figures["regret_jump_full"])
    assert all(ax["vertical"] == [6.0] for ax in figures["competence_jump_full"])
    assert "system switch" not in build_report(out)


def test_level_pieces_by_hand():
    assert ep._level_pieces([1, 2, 3, 5, 8], [0.5, 0.5, 0.9, 0.9, 0.2]) == [
        (0.5, 1.0, 3.0), (0.9, 3.0, 8.0), (0.2, 8.0, 8.0)]
    assert ep._level_pieces([1, 2], [0.3, 0.3]) == [(0.3, 1.0, 2.0)]
    assert ep._level_pieces([], []) == []
