"""Tests of ``dyna store ...`` (dyna.store.cli) through dyna.cli.main."""

import json

import polars as pl
import pytest

from dyna.cli import main
from dyna.experience import ExperienceStore
from dyna.store.jsonl import read_jsonl


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.db"
    s = ExperienceStore(path, dim=4)
    for tenant in ("t1", "t10"):
        s.record(tenant, episodes=[dict(task_type=("a", "b")[i % 2], action_type="x",
                                        outcome="success", reward=float(i), timestamp=float(i),
                                        run_id=f"r{i % 3}", metadata={"i": i})
                                   for i in range(12)])
    s.close()
    return path


def run(capsys, *argv):
    rc = main(["store", *argv])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else None), err


def test_stats(db, capsys):
    rc, out, _ = run(capsys, "stats", str(db))
    assert rc == 0 and out["n_records"] == 24 and out["n_tenants"] == 2
    assert out["persistence_status"] == "ok" and out["store"]["rows"] == 24
    assert {(c["tenant_id"], c["task_type"]): c["records"] for c in out["consumption"]} == \
        {("t1", "a"): 6, ("t1", "b"): 6, ("t10", "a"): 6, ("t10", "b"): 6}
    rc, out, _ = run(capsys, "stats", str(db), "--tenant", "t1")
    assert out["n_records"] == 12 and len(out["consumption"]) == 2


def test_export_jsonl_and_parquet(db, capsys, tmp_path):
    rc, out, _ = run(capsys, "export", str(db), "--tenant", "t1", "--out",
                     str(tmp_path / "e.jsonl"), "--task-type", "a")
    assert rc == 0 and out["n"] == 6
    recs, rep = read_jsonl(tmp_path / "e.jsonl")
    assert rep.n_skipped == 0 and {r["tenant_id"] for r in recs} == {"t1"}
    assert [r["metadata"]["i"] for r in recs] == [0, 2, 4, 6, 8, 10]
    rc, out, _ = run(capsys, "export", str(db), "--tenant", "t10", "--out",
                     str(tmp_path / "e.parquet"))
    assert rc == 0 and out["format"] == "parquet"
    assert pl.read_parquet(tmp_path / "e.parquet").height == 12


def test_delete_exact_prune_compact(db, capsys):
    rc, out, _ = run(capsys, "delete", str(db), "--tenant", "t1", "--run-id", "r", "--yes")
    assert rc == 0 and out["deleted"] == 0
    rc, out, _ = run(capsys, "delete", str(db), "--tenant", "t1", "--run-id", "r0", "--yes")
    assert out["deleted"] == 4
    rc, out, _ = run(capsys, "prune", str(db), "--max-age", "1e15", "--tenant", "t10")
    assert rc == 0 and out["deleted"] == 0
    rc, out, _ = run(capsys, "compact", str(db), "--keep", "2")
    assert rc == 0 and out["deleted"] == 12 and out["freelist_count"] == 0  # 20 - 4 * 2
    rc, out, _ = run(capsys, "stats", str(db))
    assert out["n_records"] == 8


def test_bad_input_exits_2_with_one_line(db, capsys, tmp_path):
    for argv in (["prune", str(db), "--max-age", "-5"],
                 ["stats", str(tmp_path / "missing.db")],
                 ["compact", str(db), "--keep", "-1"]):
        rc, _, err = run(capsys, *argv)
        assert rc == 2 and len(err.strip().splitlines()) == 1, argv
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite" * 100)
    rc, _, err = run(capsys, "stats", str(junk))
    assert rc == 2 and "not a dyna experience store" in err
    assert junk.read_bytes() == b"not sqlite" * 100  # never touched
    assert not (tmp_path / "missing.db").exists()  # never created


def test_compact_keep_0_asks_first_as_delete_does(db, capsys, monkeypatch):
    """``--keep 0`` deletes every record: without a terminal it needs --yes (exit 2, one
    line, the store unchanged); on a terminal a "no" deletes nothing; --yes compacts."""
    before = db.read_bytes()
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    rc, _, err = run(capsys, "compact", str(db), "--keep", "0")
    assert rc == 2 and err.count("\n") == 1
    assert err == ("dyna: error: --keep 0 would delete all 24 episodes: give "
                   "--yes to do it without a terminal\n")
    rc, _, err = run(capsys, "compact", str(db), "--keep", "0", "--tenant", "t1")
    assert rc == 2 and "would delete all 12 episodes" in err
    rc, _, err = run(capsys, "compact", str(db), "--keep", "0", "--tenant", "t2")
    assert rc == 2 and "--tenant" in err and "'t1', 't10'" in err
    assert db.read_bytes() == before
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    rc, _, err = run(capsys, "compact", str(db), "--keep", "0", "--tenant", "t10")
    assert rc == 1 and err == "dyna: nothing deleted\n" and db.read_bytes() == before
    rc, out, _ = run(capsys, "compact", str(db), "--keep", "0", "--tenant", "t10", "--yes")
    assert rc == 0
    rc, out, _ = run(capsys, "stats", str(db))
    assert out["n_records"] == 12 and {c["tenant_id"] for c in out["consumption"]} == {"t1"}


def test_prune_that_would_empty_the_store_asks_first(db, capsys, monkeypatch):
    """Every episode older than --max-age (0 here: all of them): asked first as delete
    does, or --yes; a prune that leaves some episodes runs as before."""
    before = db.read_bytes()
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    rc, _, err = run(capsys, "prune", str(db), "--max-age", "0")
    assert (rc, err) == (2, "dyna: error: --max-age 0 would delete all 24 "
                            "episodes: give --yes to do it without a terminal\n")
    rc, _, err = run(capsys, "prune", str(db), "--max-age", "0", "--tenant", "t1")
    assert rc == 2 and "would delete all 12 episodes" in err
    assert db.read_bytes() == before
    # timestamps are 0..11 s after the epoch: 1e15 s keeps every episode, asks nothing
    rc, out, _ = run(capsys, "prune", str(db), "--max-age", "1e15")
    assert rc == 0 and out["deleted"] == 0
    rc, out, _ = run(capsys, "prune", str(db), "--max-age", "0", "--tenant", "t1", "--yes")
    assert rc == 0 and out["deleted"] == 12
