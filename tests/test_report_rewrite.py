"""``dyna report DIR``: the report written again from a folder's tables, the runs untouched,
both commits named; a damaged folder or a failing analysis leaves every file as it was."""

import hashlib
import json

import pytest

from dyna.cli import main
from dyna.experiment import runner
from dyna.experiment.backends import InProcessBackend
from dyna.experiment.registry import parse_experiment

RUN_GIT = {"commit": "a" * 40, "dirty": False}
NOW_GIT = {"commit": "b" * 40, "dirty": False}


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def agent_folder(tmp_path_factory):
    """A small agent-tasks run at commit ``aaaa...`` (report only: no plots drawn)."""
    from dyna.experiment.kinds.agent_tasks.kind import AgentTasksKind

    cfg = parse_experiment({"kind": "agent_tasks", "name": "rewrite", "runs": 2,
                            "episodes": 30, "seed": 3, "store": "skill",
                            "variants": ["no_learning", "skill_loop"],
                            "env": {"n_families": 3, "n_tools": 6, "max_steps": 12},
                            "analysis": {"final_window": 10, "n_resamples": 200,
                                         "late_from": 11, "tokens_window": 10}})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AgentTasksKind, "render",
                   lambda self, out, folder: [self.write_report(out, folder)])
        mp.setattr(runner, "project_revision", lambda: dict(RUN_GIT))
        return runner.run_experiment(cfg, tmp_path_factory.mktemp("r") / "run",
                                     backend=InProcessBackend(), progress=False)


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_the_report_is_written_again_naming_both_commits(agent_folder, tmp_path,
                                                         monkeypatch, capsys):
    folder = _copy(agent_folder, tmp_path / "f")
    before = (folder / "report.md").read_text()
    tables = {n: d for n, d in _digests(folder).items() if n.endswith(".parquet")}
    monkeypatch.setattr(runner, "project_revision", lambda: dict(NOW_GIT))
    assert main(["report", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{folder / 'report.md'}\n"
    assert err.startswith("headline:\n  - ")
    after = (folder / "report.md").read_text()
    old_line = "git commit `aaaaaaaaaaaa`"
    assert before.count(old_line) == 1
    # the same report but for its provenance: both commits named
    assert after == before.replace(old_line, old_line + "; this report written at git "
                                   "commit `bbbbbbbbbbbb` from the run's tables")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["git"] == RUN_GIT and manifest["report"]["git"] == NOW_GIT
    assert manifest["report"]["created_utc"].endswith("+00:00")
    assert {n: d for n, d in _digests(folder).items() if n.endswith(".parquet")} == tables


def test_a_report_written_again_at_the_runs_commit_is_the_same(agent_folder, tmp_path,
                                                              monkeypatch):
    folder = _copy(agent_folder, tmp_path / "f")
    before = (folder / "report.md").read_text()
    monkeypatch.setattr(runner, "project_revision", lambda: dict(RUN_GIT))
    assert runner.rewrite_report(folder) == folder / "report.md"
    assert (folder / "report.md").read_text() == before


def test_a_damaged_folder_or_failing_analysis_changes_no_file(agent_folder, tmp_path,
                                                               monkeypatch, capsys):
    from dyna.experiment.kinds.agent_tasks import report

    edited = _copy(agent_folder, tmp_path / "e")
    (edited / "runs.parquet").write_bytes(b"PAR1 not the run's table")
    before = _digests(edited)
    assert main(["report", str(edited)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sha256" in err and "runs.parquet" in err
    assert _digests(edited) == before

    failing = _copy(agent_folder, tmp_path / "x")
    before = _digests(failing)

    def boom(*a, **k):
        raise RuntimeError("analysis failed")

    monkeypatch.setattr(report, "report_body", boom)
    with pytest.raises(RuntimeError, match="analysis failed"):
        runner.rewrite_report(failing)
    assert _digests(failing) == before
    assert sorted(p.name for p in failing.iterdir()) == sorted(before)


def test_report_of_a_file_or_a_missing_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "f.toml").write_text("x")
    assert main(["report", str(tmp_path / "f.toml")]) == 2
    assert main(["report", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "is a file" in err[0] and "no such folder" in err[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.toml"]


def test_the_per_run_metrics_are_computed_again_from_the_episodes(agent_folder, tmp_path,
                                                                  monkeypatch):
    from dyna.experiment.kinds.agent_tasks import kind

    folder = _copy(agent_folder, tmp_path / "f")
    before = _digests(folder)
    runner.rewrite_report(folder)
    # this checkout's metrics give the stored table: it is not written again
    assert json.loads((folder / "manifest.json").read_text())["report"][
        "tables_recomputed"] == []
    assert _digests(folder)["runs.parquet"] == before["runs.parquet"]
    old = runner.load_output(folder).tables["runs"]

    def plus_one(arrays, analysis):   # a changed metric: final success 1 higher
        got = dict(real(arrays, analysis))
        got["final_success"] = got["final_success"] + 1.0
        return got

    real = kind.run_summaries
    monkeypatch.setattr(kind, "run_summaries", plus_one)
    runner.rewrite_report(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["report"]["tables_recomputed"] == ["runs"]
    new = runner.load_output(folder)     # the manifest records the new table's sha256
    assert (new.tables["runs"]["final_success"] - old["final_success"]).to_list() == [1.0] * 4
    assert new.tables["episodes"].equals(runner.load_output(agent_folder).tables["episodes"])
    assert _digests(folder)["episodes.parquet"] == before["episodes.parquet"]
    fs = old.filter(variant="skill_loop")["final_success"].to_numpy()
    assert f"skill_loop {fs.mean() + 1:.3g}" in (folder / "report.md").read_text()


def test_a_linked_manifest_or_table_stops_the_rewrite_before_any_write(agent_folder, tmp_path,
                                                                      monkeypatch, capsys):
    from dyna.experiment.kinds.agent_tasks import kind

    outside = tmp_path / "outside.json"
    linked = _copy(agent_folder, tmp_path / "m")
    outside.write_bytes((linked / "manifest.json").read_bytes())
    (linked / "manifest.json").unlink()
    (linked / "manifest.json").symlink_to(outside)
    before = _digests(linked)
    assert main(["report", str(linked)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "manifest.json" in err and "link" in err
    assert _digests(linked) == before     # report.md too: nothing replaced
    assert hashlib.sha256(outside.read_bytes()).hexdigest() == before["manifest.json"]
    # a runs table to write again that is a link: not even the report is replaced
    table = _copy(agent_folder, tmp_path / "t")
    runs = tmp_path / "outside.parquet"
    runs.write_bytes((table / "runs.parquet").read_bytes())
    (table / "runs.parquet").unlink()
    (table / "runs.parquet").symlink_to(runs)
    real = kind.run_summaries
    monkeypatch.setattr(kind, "run_summaries", lambda a, an: {
        **real(a, an), "final_success": real(a, an)["final_success"] + 1.0})
    before = _digests(table)
    assert main(["report", str(table)]) == 2
    assert "runs.parquet" in capsys.readouterr().err
    assert _digests(table) == before
    assert hashlib.sha256(runs.read_bytes()).hexdigest() == before["runs.parquet"]


def test_a_manifest_naming_a_table_outside_the_folder_is_refused(agent_folder, tmp_path,
                                                                 capsys):
    folder = _copy(agent_folder, tmp_path / "f")
    m = json.loads((folder / "manifest.json").read_text())
    for name in ("../../episodes.parquet", "/etc/hostname", "sub/x.parquet", ".parquet"):
        m["tables"] = {**m["tables"], name: {"rows": 1}}
        (folder / "manifest.json").write_text(json.dumps(m))
        before = _digests(folder)
        assert main(["report", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not a .parquet file name of this folder" in err
        assert _digests(folder) == before
        del m["tables"][name]


def test_an_episodes_table_the_metrics_cannot_read_is_one_line(agent_folder, tmp_path,
                                                               capsys):
    import polars as pl

    def edited(name, frame):
        folder = _copy(agent_folder, tmp_path / name)
        frame.write_parquet(folder / "episodes.parquet")
        m = json.loads((folder / "manifest.json").read_text())
        m["tables"]["episodes.parquet"]["sha256"] = hashlib.sha256(
            (folder / "episodes.parquet").read_bytes()).hexdigest()
        (folder / "manifest.json").write_text(json.dumps(m))
        return folder

    ep = runner.load_output(agent_folder).tables["episodes"]
    # a missing or mistyped column is the kind's table_schema's (load_output), the rest
    # runs_table's
    cases = {"nocol": (ep.drop("success"), "damaged: column 'success' missing"),
             "empty": (ep.head(0), "no rows"),
             "text": (ep.with_columns(pl.col("tokens").cast(pl.String)),
                      "damaged: column 'tokens' is String, not integer"),
             "dup": (pl.concat([ep, ep.head(3)]), "not 30 episodes 1..30 per run"),
             "order": (ep.reverse(), "not 30 episodes 1..30 per run")}
    for name, (frame, words) in cases.items():
        folder = edited(name, frame)
        before = _digests(folder)
        assert main(["report", str(folder)]) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "episodes.parquet" in err, err
        assert _digests(folder) == before
