"""``load_output`` checks each table against its kind's ``table_schema``: an output folder
whose table lost a column, holds it as text or holds NaN where finite numbers are needed
(with manifest.json's sha256 fixed to match) makes ``dyna plot`` and ``dyna report`` print
one line naming the table and column, exit 2 and change no file."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dyna.cli import main
from dyna.experiment.registry import get_kind, parse_experiment
from dyna.experiment.runner import load_output, run_experiment

REPO = Path(__file__).resolve().parents[1]

ESCALATION = {
    "kind": "escalation", "name": "schema_esc", "seed": 3, "runs": 2,
    "risk_classes": ["low_stakes"], "feedback": ["censored"], "costs": {"c_escalate": 1.0},
    "scenarios": [{"name": "flat", "rates": [0.3, 0.9], "steps": 60, "verified_prob": 0.5}],
    "variants": [{"name": "mean", "rule": "mean"}],
    "analysis": {"checkpoints": 5, "recovery_window": 10, "n_resamples": 100, "svg": False},
}


@pytest.fixture(scope="module")
def tabular(tmp_path_factory):
    folder = tmp_path_factory.mktemp("schema") / "m"
    assert main(["run", str(REPO / "experiments" / "dyna_maze.toml"), "--runs", "2",
                 "--out", str(folder), "--no-progress"]) == 0
    return folder


@pytest.fixture(scope="module")
def escalation(tmp_path_factory):
    folder = tmp_path_factory.mktemp("schema") / "esc"
    run_experiment(parse_experiment(ESCALATION), folder, block_size=2)
    return folder


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory):
    where = tmp_path_factory.mktemp("schema")
    full = REPO / "data" / "agent_trajectories" / "taubench_airline_gpt4o_trajectories.json"
    (where / "runs.json").write_text(json.dumps(
        [r for r in json.loads(full.read_text()) if r["task_id"] < 4]))
    (where / "t.toml").write_text(
        'kind = "trajectories"\nname = "small"\nruns = 1\ndata = "runs.json"\n'
        'variants = ["memory_loop", "naive_loop"]\n[analysis]\nn_resamples = 200\n')
    assert main(["run", str(where / "t.toml"), "--out", str(where / "traj"),
                 "--no-progress"]) == 0
    return where / "traj"


@pytest.fixture(scope="module")
def agent_tasks(tmp_path_factory):
    """A small agent-tasks run (report only: its plots are other tests')."""
    from dyna.experiment.kinds.agent_tasks.kind import AgentTasksKind

    folder = tmp_path_factory.mktemp("schema") / "agent"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AgentTasksKind, "render",
                   lambda self, out, where: [self.write_report(out, where)])
        run_experiment(parse_experiment(AGENT_TASKS), folder)
    return folder


AGENT_TASKS = {"kind": "agent_tasks", "name": "schema_agent", "runs": 2, "episodes": 20,
               "seed": 1, "store": "skill", "variants": ["no_learning", "skill_loop"],
               "env": {"n_families": 3, "n_tools": 6, "max_steps": 12},
               "analysis": {"final_window": 5, "n_resamples": 100, "late_from": 11,
                            "tokens_window": 5}}


def _tampered(folder: Path, to: Path, table: str, edit) -> Path:
    """A copy of ``folder`` with ``edit(table) -> table`` applied to ``<table>.parquet``
    and that file's sha256 in manifest.json set to the new bytes'."""
    shutil.copytree(folder, to)
    path = to / f"{table}.parquet"
    edit(pl.read_parquet(path)).write_parquet(path)
    manifest = json.loads((to / "manifest.json").read_text())
    manifest["tables"][f"{table}.parquet"]["sha256"] = hashlib.sha256(
        path.read_bytes()).hexdigest()
    (to / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return to


def _files(folder: Path) -> dict:
    return {p.relative_to(folder): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _edit(table: pl.DataFrame, how, col: str) -> pl.DataFrame:
    """``table`` without ``col`` (``how="drop"``), with NaN in row 1 of it (``"nan"``), or
    with it cast to the dtype ``how``."""
    if how == "drop":
        return table.drop(col)
    if how == "nan":
        values = table[col].cast(pl.Float64).to_numpy().copy()
        values[1] = np.nan
        return table.with_columns(pl.Series(col, values))
    return table.with_columns(pl.col(col).cast(how))


NAN = "holds NaN or inf (row 1)"
EDITS = [  # (kind fixture, table, edit, column, what the error says of the column)
    ("tabular", "results", "drop", "steps", "missing"),
    ("tabular", "results", pl.String, "steps", "is String, not integer"),
    ("tabular", "results", "nan", "steps", NAN),
    ("tabular", "results", "nan", "return", NAN),
    ("tabular", "runs", pl.String, "total_steps", "is String, not integer"),
    ("escalation", "runs", "drop", "total_cost", "missing"),
    ("escalation", "runs", pl.String, "total_cost", "is String, not numeric"),
    ("escalation", "runs", "nan", "total_cost", NAN),
    ("escalation", "curves", "drop", "cum_cost", "missing"),
    ("escalation", "curves", "nan", "cum_cost", NAN),
    ("escalation", "curves", pl.Categorical, "scenario", "is Categorical, not text"),
    ("trajectories", "episodes", "drop", "success", "missing"),
    ("trajectories", "episodes", pl.Int64, "success", "is Int64, not boolean"),
    ("trajectories", "episodes", "nan", "entries", NAN),
    ("trajectories", "induction_summary", pl.String, "mean", "is String, not numeric"),
    ("agent_tasks", "episodes", "drop", "drift_family", "missing"),
    ("agent_tasks", "episodes", pl.String, "tokens", "is String, not integer"),
    ("agent_tasks", "episodes", pl.Int64, "success", "is Int64, not boolean"),
    ("agent_tasks", "runs", "drop", "scenario", "missing"),
]


@pytest.mark.parametrize("kind, table, how, column, reason", EDITS,
                         ids=[f"{k}-{t}-{c}-{h}" for k, t, h, c, _ in EDITS])
def test_a_bad_column_is_one_line_exit_2_and_no_file_changed(kind, table, how, column,
                                                              reason, request, tmp_path,
                                                              capsys):
    folder = _tampered(request.getfixturevalue(kind), tmp_path / "bad", table,
                       lambda t: _edit(t, how, column))
    before = _files(folder)
    capsys.readouterr()
    for command in ("plot", "report"):
        assert main([command, str(folder)]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err == (f"dyna: error: DIR='{folder / table}.parquet': damaged: column "
                       f"{column!r} {reason}\n")
    assert _files(folder) == before


def test_healthy_folders_load_with_every_declared_column(tabular, escalation, trajectories,
                                                         agent_tasks):
    # dyna_maze: 3 variants x 2 runs x 50 episodes; escalation: 1 variant x 2 runs, the
    # curves at 8 checkpoints; trajectories: 2 variants x 1 run x the 16 trajectories of
    # tasks 0-3, 4 tasks, (3 predictors + 2 paired differences) x 3 metrics; agent tasks:
    for folder, kind, tables in (
            (tabular, "tabular", {"results": 300, "runs": 6}),
            (escalation, "escalation", {"runs": 2, "curves": 16}),
            (trajectories, "trajectories", {"episodes": 32, "runs": 2, "induction": 4,
                                            "induction_summary": 15}),
            # 2 variants x 1 scenario x 2 runs x 20 episodes
            (agent_tasks, "agent_tasks", {"episodes": 80, "runs": 4})):
        out = load_output(folder)
        schema = get_kind(kind).table_schema(out.config)
        assert sorted(schema) == sorted(tables)
        for name, height in tables.items():
            assert out.tables[name].height == height
            assert set(schema[name]) <= set(out.tables[name].columns)
