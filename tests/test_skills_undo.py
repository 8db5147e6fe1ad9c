"""Undo restores everything: a retired or evicted skill comes back with its
whole folder (scripts/, reference/, ...), byte for byte; history holds diffs."""

import datetime as dt
import json

import pytest

from dyna.errors import ConfigError
from dyna.loops.skills import Skill, SkillLibrary


def clock():
    return dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)


def tree(root):
    """Every file's bytes under root but the append-only history and the lock file."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in ("history.jsonl", "lock")}


RESOURCES = {
    "scripts/fill.py": b"#!/usr/bin/env python3\nprint('fill')\n",
    "scripts/lib/util.py": b"X = 1\r\n",
    "reference/forms.md": "# Forms\n\nNon-ASCII: \u00e9\u00e8 \u2014 ok\n".encode(),
    "LICENSE.txt": b"terms\n",
    "data.bin": bytes(range(256)),
}


def with_resources(root, name):
    for rel, data in RESOURCES.items():
        p = root / name / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


@pytest.mark.parametrize("person_wrote_it", [False, True])
def test_undo_of_a_retire_restores_the_whole_folder(tmp_path, person_wrote_it):
    lib = SkillLibrary(tmp_path, clock=clock)
    if person_wrote_it:
        (tmp_path / "pdf").mkdir()
        (tmp_path / "pdf" / "SKILL.md").write_bytes(
            b"---\nname: pdf\ndescription: \"Work with PDF files: fill, merge.\"\n"
            b"license: see LICENSE.txt\n---\n\n# PDF\n")
    else:
        lib.add(Skill("pdf", "Work with PDF files", body="# PDF", triggers="pdf"), "r1")
    with_resources(tmp_path, "pdf")
    lib = SkillLibrary(tmp_path, clock=clock)
    before = tree(tmp_path)
    lib.retire("pdf", "r2", "obsolete")
    retired = tmp_path / ".dyna" / "retired" / "pdf"
    assert sorted(p.relative_to(retired).as_posix() for p in retired.rglob("*")
                  if p.is_file()) == sorted(["SKILL.md", *RESOURCES])
    assert not (tmp_path / "pdf").exists()
    assert lib.undo_run("r2") == ["pdf"]
    assert tree(tmp_path) == before
    assert not retired.exists()
    assert SkillLibrary(tmp_path, clock=clock)["pdf"].active


def test_undo_of_an_eviction_and_a_restore(tmp_path):
    lib = SkillLibrary(tmp_path, cap=1, clock=clock)
    lib.add(Skill("old", "the old skill", triggers="old"), "r1")
    with_resources(tmp_path, "old")
    before = tree(tmp_path)
    res = lib.add(Skill("new", "the new skill", triggers="new"), "r2")
    assert res.evicted.name == "old"
    assert (tmp_path / ".dyna" / "retired" / "old" / "scripts" / "fill.py").is_file()
    assert lib.undo_run("r2") == ["new", "old"]
    assert tree(tmp_path) == before
    # retire, then restore in another run; undoing the restore moves it all back again
    lib.retire("old", "r3")
    mid = tree(tmp_path)
    lib.restore("old", "r4")
    assert tree(tmp_path) == before | {".dyna/state.json": tree(tmp_path)[".dyna/state.json"]}
    lib.undo_run("r4")
    assert tree(tmp_path) == mid


def test_undo_refuses_a_file_edited_outside_dyna(tmp_path):
    lib = SkillLibrary(tmp_path, clock=clock)
    lib.add(Skill("a", "one", body="line 1\nline 2"), "r1")
    lib.patch("a", "r2", body="line 1\nline two")
    md = tmp_path / "a" / "SKILL.md"
    md.write_text(md.read_text().replace("line two", "edited by hand"))
    with pytest.raises(ConfigError, match="changed by later runs: a"):
        lib.undo_run("r2")
    with pytest.raises(ConfigError, match="edited outside dyna since history record 2"):
        lib.undo_run("r2", force=True)
    assert "edited by hand" in md.read_text()


def test_history_holds_diffs_not_whole_texts(tmp_path):
    body = "\n".join(f"Step {i}: do the thing number {i} carefully." for i in range(400))
    lib = SkillLibrary(tmp_path, clock=clock, retire_below=None)
    lib.add(Skill("big", "a big skill", body=body, triggers="big"), "r1")
    start = tree(tmp_path)
    for i in range(4):
        lib.record_outcome(["big"], i % 2 == 0, "r2")
    lib.patch("big", "r2", triggers="big, large")
    lib.retire("big", "r2")
    lib.restore("big", "r2")
    lib.patch("big", "r2", description="a big skill, patched")
    lib.record_outcome(["big"], True, "r2")
    lib.retire("big", "r2")
    assert len(lib.history()) == 11
    raw = (tmp_path / ".dyna" / "history.jsonl").read_text()
    # the body is in the log once (the create), never again
    assert raw.count("do the thing number 399 carefully.") == 1
    assert len(raw) < len(body) + 11 * 3000
    recs = [json.loads(line) for line in raw.splitlines()]
    assert all("before" not in r and "after" not in r for r in recs)
    assert recs[-1]["loc_before"] == "active" and recs[-1]["loc_after"] == "retired"
    assert lib.undo_run("r2") == ["big"]
    assert tree(tmp_path) == start


def test_an_undo_that_meets_a_damaged_pending_file_changes_nothing(tmp_path):
    """The pending folder is read before the skills are reverted: a damaged pending file
    raises with SKILL.md, state.json and the history unchanged."""
    from dyna.fileio import CorruptFileError

    lib = SkillLibrary(tmp_path, clock=clock)
    lib.add(Skill("deploy-app", "Deploy the app.", "1. call `make deploy`"), run_id="e1")
    lib.patch("deploy-app", run_id="e2", body="1. call `make up`")
    item = lib.stage(Skill("fix-ci", "Fix CI.", "1. rerun"), "e2", ("tool_output",))
    pending = next((tmp_path / ".dyna").rglob(f"{item.id}*.json"))
    text = pending.read_text()
    assert text.count('"dest": ') == 1
    pending.write_text(text.replace('"dest": ', '"dest": "deploy-app", "dest": ', 1))
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    with pytest.raises(CorruptFileError, match="duplicate key 'dest'"):
        SkillLibrary(tmp_path, clock=clock).undo_run("e2")
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before
