"""`dyna skills ...` and `dyna memory ...` on real folders."""

import pytest

from dyna.cli import main
from dyna.loops.memory import MemoryStore
from dyna.loops.skills import Skill, SkillLibrary


@pytest.fixture
def lib_dir(tmp_path):
    d = tmp_path / "skills"
    lib = SkillLibrary(d)
    lib.add(Skill("git-push", "Push safely", triggers="git"), "r1")
    lib.add(Skill("code-review", "Review code", triggers="code review"), "r1")
    lib.stage(Skill("web-tip", "Tip from a page", triggers="tip"), "r2", ["web"])
    return d


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_skills_list_and_failures(capsys, lib_dir):
    rc, out, _ = run(capsys, "skills", "list", str(lib_dir))
    lines = out.splitlines()
    assert rc == 0 and lines[0].split() == ["name", "status", "kind", "triggers", "ok", "fail",
                                            "mean", "lower", "verified", "trust"]
    assert lines[2].split()[:4] == ["code-review", "active", "skill", "code"]
    assert lines[3].split()[:4] == ["git-push", "active", "skill", "git"]
    assert "2 active, 0 retired, 1 pending, 0 failed to load (2 skill files)" in out
    (lib_dir / "broken").mkdir()
    (lib_dir / "broken" / "SKILL.md").write_text(
        "---\nname: broken\ndescription: Debug mazes: walls\n---\n")
    rc, out, _ = run(capsys, "skills", "list", str(lib_dir))
    assert rc == 1 and "1 failed to load (3 skill files)" in out
    assert f"error: {lib_dir / 'broken' / 'SKILL.md'}:3: field 'description'" in out


def test_skills_match_show_pending_approve_undo(capsys, lib_dir):
    rc, out, _ = run(capsys, "skills", "match", str(lib_dir), "Do a code review, then git push")
    rows = [line.split()[:3] for line in out.splitlines()[2:]]
    assert rc == 0 and rows == [["1", "code-review", "2"], ["2", "git-push", "1"]]
    rc, out, _ = run(capsys, "skills", "match", str(lib_dir), "nothing here")
    assert out.strip() == "no skill matches"
    rc, out, _ = run(capsys, "skills", "show", str(lib_dir), "git-push")
    assert out.startswith("---\nname: git-push\n") and "Beta(a=1, b=1), mean 0.500" in out
    rc, out, _ = run(capsys, "skills", "pending", str(lib_dir))
    head = out.splitlines()[0]
    assert head.startswith("== p0001: web-tip  (run r2, staged ") and "provenance web)" in head
    assert "   a new skill:" in out and "   | description: Tip from a page" in out
    assert run(capsys, "skills", "approve", str(lib_dir), "p0001")[1] == \
        "approved p0001: wrote web-tip\n"
    assert "web-tip" in SkillLibrary(lib_dir)
    rc, out, _ = run(capsys, "skills", "history", str(lib_dir), "--run", "r2")
    assert [line.split()[2] for line in out.splitlines()[2:]] == ["stage", "approve"]
    assert run(capsys, "skills", "undo-run", str(lib_dir), "r2")[1] == \
        "reverted run r2: web-tip\n"
    assert "web-tip" not in SkillLibrary(lib_dir)


def test_skills_retire_restore_reject_and_errors(capsys, lib_dir):
    assert run(capsys, "skills", "retire", str(lib_dir), "git-push")[0] == 0
    rc, out, _ = run(capsys, "skills", "list", str(lib_dir), "--all")
    assert "git-push     retired" in out
    assert run(capsys, "skills", "restore", str(lib_dir), "git-push")[1] == "restored git-push\n"
    assert run(capsys, "skills", "reject", str(lib_dir), "p0001")[1] == "rejected p0001 (web-tip)\n"
    rc, _, err = run(capsys, "skills", "show", str(lib_dir), "nope")
    assert rc == 2 and err == "dyna: error: name='nope': no such skill\n"
    rc, _, err = run(capsys, "skills", "approve", str(lib_dir), "p0009")
    assert rc == 2 and "no pending proposal" in err
    rc, _, err = run(capsys, "skills", "list", str(lib_dir / "missing"))
    assert rc == 2 and "no such folder" in err
    rc, _, err = run(capsys, "skills", "match", str(lib_dir), "x", "--limit", "-1")
    assert rc == 2 and "limit=-1" in err


def test_memory_show_and_consolidate(capsys, tmp_path):
    p = tmp_path / "MEMORY.md"
    m = MemoryStore(p)
    m.add("The API port is 8080", source="r1")
    m.add("Be careful with tools.", source="r1")
    rc, out, _ = run(capsys, "memory", "show", str(p))
    assert rc == 0 and out.splitlines()[2].split()[-5:] == ["The", "API", "port", "is", "8080"]
    assert "2 facts, 0 pending" in out
    rc, out, _ = run(capsys, "memory", "consolidate", str(p))
    assert out == "vague:      'Be careful with tools.'\n\n2 -> 1 facts\n"
    rc, out, _ = run(capsys, "memory", "consolidate", str(p))
    assert out == "nothing to consolidate\n\n1 -> 1 facts\n"
    rc, _, err = run(capsys, "memory", "show", str(tmp_path / "none.md"))
    assert rc == 2
