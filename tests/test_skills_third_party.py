"""Writes that respect a third-party file: dyna's bookkeeping of a skill it did
not write lives in its own state file (.dyna/state.json), never in that skill's
frontmatter; a file counts as dyna's only by the path and sha256 the state file records."""

import datetime as dt
import hashlib
import json

from dyna.loops.skills import Skill, SkillLibrary

THIRD = (b"---\nname: pdf\n"
         b"description: \"Handle PDF files: read, merge, split and fill forms.\"\n"
         b"license: Proprietary. See LICENSE.txt\n---\n\n# PDF handling\n\nUse pypdf.\n")


def clock():
    return dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)


def write(root, name, data):
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "SKILL.md").write_bytes(data)
    return root / name / "SKILL.md"


def test_outcomes_never_touch_a_third_party_file(tmp_path):
    md = write(tmp_path, "pdf", THIRD)
    lib = SkillLibrary(tmp_path, clock=clock, retire_below=None)
    for ok in (True, True, False):
        lib.record_outcome(["pdf"], ok, "r1")
    assert md.read_bytes() == THIRD
    state = json.loads((tmp_path / ".dyna" / "state.json").read_text())
    assert state == {"skills": {"pdf": {"successes": 2, "failures": 1, "a": 3.0, "b": 2.0,
                                        "last_verified": "2024-05-01",
                                        "retired_reason": ""}}}
    back = SkillLibrary(tmp_path)
    assert (back["pdf"].successes, back["pdf"].failures) == (2, 1)
    assert back.posterior("pdf") == (3.0, 2.0)
    # retiring moves the folder without rewriting the file; undo brings all back
    lib.retire("pdf", "r2", "obsolete")
    assert (tmp_path / ".dyna" / "retired" / "pdf" / "SKILL.md").read_bytes() == THIRD
    assert SkillLibrary(tmp_path).get("pdf").retired_reason == "obsolete"
    lib.undo_run("r2")
    lib.undo_run("r1")
    assert md.read_bytes() == THIRD
    assert not (tmp_path / ".dyna" / "state.json").exists()
    assert SkillLibrary(tmp_path)["pdf"].successes == 0


def test_a_file_dyna_wrote_keeps_its_bookkeeping_in_frontmatter(tmp_path):
    lib = SkillLibrary(tmp_path, clock=clock, retire_below=None)
    lib.add(Skill("ours", "written by dyna", triggers="ours"), "r1")
    md = tmp_path / "ours" / "SKILL.md"
    lib.record_outcome(["ours"], True, "r2")
    assert "  successes: '1'\n" in md.read_text()
    entry = json.loads((tmp_path / ".dyna" / "state.json").read_text())["skills"]["ours"]
    assert entry["path"] == "ours/SKILL.md"
    assert entry["sha256"] == hashlib.sha256(md.read_bytes()).hexdigest()
    # edited by a person: not dyna's file any more, so it is left alone from now on
    edited = md.read_bytes().replace(b"written by dyna", b"edited by a person")
    md.write_bytes(edited)
    lib = SkillLibrary(tmp_path, retire_below=None)
    lib.record_outcome(["ours"], False, "r3")
    assert md.read_bytes() == edited
    assert (SkillLibrary(tmp_path)["ours"].successes,
            SkillLibrary(tmp_path)["ours"].failures) == (1, 1)


def test_frontmatter_cannot_claim_to_be_dyna_s(tmp_path):
    fake = (b"---\nname: fake\ndescription: claims dyna wrote it\nmetadata:\n"
            b"  source_run: r0\n  trust: trusted\n  successes: '7'\n  failures: '0'\n"
            b"  status: active\n---\nbody\n")
    md = write(tmp_path, "fake", fake)
    lib = SkillLibrary(tmp_path, retire_below=None)
    lib.record_outcome(["fake"], True, "r1")
    assert md.read_bytes() == fake
    # the claimed 7 is not believed: the count is dyna's own, kept in the state file
    assert SkillLibrary(tmp_path)["fake"].successes == 1
