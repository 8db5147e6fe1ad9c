"""Everyday CLI mistakes: each one line naming the field, exit 2,
nothing written."""

import io
import json

import pytest

from dyna.cli import main
from dyna.experience import ExperienceStore


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "s.db"
    s = ExperienceStore(path, dim=4)
    for tenant, n in (("alice", 3), ("bob", 2)):
        for i in range(n):
            s.record(tenant, task_type="a" if i else "b", action_type="x", outcome="success",
                     reward=1.0)
    s.close()
    return path


def _one_line(capsys, *words):
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    for w in words:
        assert w in err, err
    return err


def test_a_folder_or_a_file_of_the_wrong_kind_is_named_as_such(tmp_path, capsys):
    f = tmp_path / "f.txt"
    f.write_text("x")
    assert main(["store", "stats", str(tmp_path)]) == 2
    _one_line(capsys, "DB=", "is a folder, not a store file")
    assert main(["skills", "list", str(f)]) == 2
    _one_line(capsys, "DIR=", "is a file, not a skill library folder")
    assert main(["skills", "list", str(tmp_path / "missing")]) == 2
    _one_line(capsys, "no such folder")
    assert main(["memory", "show", str(tmp_path)]) == 2
    _one_line(capsys, "PATH=", "is a folder")


def test_skills_show_says_why_a_skill_failed_and_refuses_an_invalid_name(tmp_path, capsys):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "SKILL.md").write_text("---\nname: [oops\n---\n")
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "SKILL.md").write_text("---\nname: good\ndescription: Fine.\n---\nb\n")
    assert main(["skills", "show", str(tmp_path), "bad"]) == 2
    _one_line(capsys, "name='bad': failed to load:", "SKILL.md:3")
    assert main(["skills", "show", str(tmp_path), "../../etc"]) == 2
    err = _one_line(capsys, "name='../../etc'")
    assert "no such skill" not in err
    assert main(["skills", "show", str(tmp_path), "nope"]) == 2
    _one_line(capsys, "no such skill")
    # list shows every row whole and says how many failed
    assert main(["skills", "list", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "1 failed to load" in out.out and "invalid YAML" in out.out


def test_export_takes_its_format_from_the_suffix_or_refuses(db, tmp_path, capsys):
    assert main(["store", "export", str(db), "--tenant", "alice", "--out",
                 str(tmp_path / "e.csv")]) == 2
    _one_line(capsys, "--out=", "'.csv' names no export format")
    assert not (tmp_path / "e.csv").exists()
    assert main(["store", "export", str(db), "--tenant", "alice", "--out",
                 str(tmp_path / "e.parquet")]) == 0
    assert (tmp_path / "e.parquet").read_bytes()[:4] == b"PAR1"
    capsys.readouterr()
    assert main(["store", "export", str(db), "--tenant", "alice", "--out",
                 str(tmp_path / "e.csv"), "--format", "jsonl"]) == 0


def test_export_refuses_an_unknown_tenant_and_a_bad_suffix_before_opening(db, tmp_path,
                                                                           capsys):
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]
    assert main(["store", "export", str(db), "--tenant", "alice", "--out",
                 str(tmp_path / "e.csv")]) == 2
    _one_line(capsys, "--out=")
    # the store was not opened: no -wal / -shm companions left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]
    out = tmp_path / "e.jsonl"
    assert main(["store", "export", str(db), "--tenant", "alcie", "--out", str(out)]) == 2
    _one_line(capsys, "--tenant='alcie'", "has no episodes", "'alice', 'bob'")
    assert not out.exists()   # (an empty file with exit 0 before)
    # a known tenant whose selectors match nothing is an export of 0 episodes
    assert main(["store", "export", str(db), "--tenant", "alice", "--task-type", "zz",
                 "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 0 and out.read_text() == ""


def test_an_error_line_never_echoes_a_secret_typed_as_an_argument(db, tmp_path, capsys):
    token = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"
    for argv in (["store", "delete", str(db), "--tenant", token],
                 ["store", "export", str(db), "--tenant", token, "--out",
                  str(tmp_path / "e.jsonl")],
                 ["skills", "undo-run", str(tmp_path), token]):
        assert main(argv) == 2, argv
        err = _one_line(capsys, "[REDACTED]")
        assert token not in err and token[4:] not in err, err
    with pytest.raises(SystemExit):   # argparse's own usage errors go through it too
        main(["store", "compact", str(db), "--keep", token])
    err = _one_line(capsys, "argument --keep", "[REDACTED]")
    assert token[4:20] not in err, err


def test_compact_names_the_keep_flag(db, capsys):
    assert main(["store", "compact", str(db), "--keep", "-1"]) == 2
    err = _one_line(capsys, "--keep", "-1", ">= 0")
    assert "compact_keep_records" not in err


def test_delete_refuses_an_unknown_tenant_counts_and_asks(db, capsys, monkeypatch):
    assert main(["store", "delete", str(db), "--tenant", "alcie"]) == 2
    _one_line(capsys, "--tenant='alcie'", "has no episodes", "'alice', 'bob'")
    assert main(["store", "delete", str(db), "--tenant", "alice", "--task-type", "a",
                 "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == {"matched": 2, "deleted": 0,
                                                   "dry_run": True}
    # no terminal, no --yes: refused, never waits for input
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["store", "delete", str(db), "--tenant", "alice"]) == 2
    err = _one_line(capsys, "--yes", "would delete 3 episodes")
    assert err == ("dyna: error: would delete 3 episodes: give --yes to delete without a "
                   "terminal (or --dry-run to count)\n")
    # a terminal: asks; "n" deletes nothing
    tty = io.StringIO("n\n")
    tty.isatty = lambda: True
    monkeypatch.setattr("sys.stdin", tty)
    assert main(["store", "delete", str(db), "--tenant", "alice"]) == 1
    assert "nothing deleted" in capsys.readouterr().err
    assert main(["store", "delete", str(db), "--tenant", "bob", "--yes"]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == 2
    s = ExperienceStore(db, dim=4, read_only=True)
    assert s.tenant_ids() == ["alice"] and s.count_matching("alice") == 3
    s.close()


@pytest.mark.parametrize("value", ["-5", "nan", "inf"])
def test_prune_names_the_flag(db, value, capsys):
    assert main(["store", "prune", str(db), f"--max-age={value}"]) == 2
    err = _one_line(capsys, "--max-age=")
    assert "max_age_seconds" not in err


def test_mcp_refuses_a_missing_export_dir(db, tmp_path, capsys):
    pytest.importorskip("mcp")
    missing = tmp_path / "nonexistent"
    assert main(["mcp", "--db", str(db), "--export-dir", str(missing)]) == 2
    _one_line(capsys, "export_dir=", "no such folder")
    assert not missing.exists()
