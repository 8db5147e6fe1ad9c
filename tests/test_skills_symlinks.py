"""A skill library never writes through a symbolic link below its folder, never reads a
skill file that links outside it, and reports a corrupt history or pending file as a typed
error naming the file and line."""

import json
import os

import pytest

from dyna.cli import main
from dyna.fileio import CorruptFileError, SymlinkError
from dyna.loops.skills import Skill, SkillLibrary

SECRET = b"root:x:0:0:root:/root:/bin/bash\n"


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "passwd").write_bytes(SECRET)
    return d


def tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def test_skill_file_linking_outside_is_not_read_nor_written(tmp_path, outside):
    lib_dir = tmp_path / "lib"
    lib = SkillLibrary(lib_dir)
    lib.add(Skill("a", "skill a", triggers="a"), "r1")
    lib.add(Skill("b", "skill b", triggers="b"), "r1")
    md = lib_dir / "a" / "SKILL.md"
    md.unlink()
    os.symlink(outside / "passwd", md)
    lib = SkillLibrary(lib_dir)
    assert list(lib) == ["b"]
    assert [(e.path, e.field) for e in lib.errors] == [(str(md), "path")]
    assert "links outside the library folder" in str(lib.errors[0])
    assert lib.summary()["failed"] == 1
    hist = (lib_dir / ".dyna" / "history.jsonl").read_bytes()
    # no write goes through it, nothing of it reaches the history, undo refuses
    with pytest.raises(SymlinkError) as exc:
        lib.add(Skill("a", "new a"), "r2")
    assert exc.value.value == str(md)
    with pytest.raises(SymlinkError):
        lib.undo_run("r1")
    assert (outside / "passwd").read_bytes() == SECRET
    assert md.is_symlink()
    assert b"root:x" not in (lib_dir / ".dyna" / "history.jsonl").read_bytes()
    assert (lib_dir / ".dyna" / "history.jsonl").read_bytes() == hist
    assert lib.get("b").active                      # the rest is untouched


def test_link_inside_the_folder_may_be_read_never_written(tmp_path):
    lib_dir = tmp_path / "lib"
    (lib_dir / "shared").mkdir(parents=True)
    (lib_dir / "shared" / "c.md").write_text("---\nname: c\ndescription: skill c\n---\nDo c.\n")
    (lib_dir / "c").mkdir()
    os.symlink("../shared/c.md", lib_dir / "c" / "SKILL.md")
    lib = SkillLibrary(lib_dir)
    assert list(lib) == ["c"] and lib.errors == [] and lib["c"].body == "Do c."
    with pytest.raises(SymlinkError) as exc:
        lib.patch("c", "r1", body="changed")
    assert exc.value.value == str(lib_dir / "c" / "SKILL.md")
    assert (lib_dir / "shared" / "c.md").read_text().endswith("Do c.\n")


@pytest.mark.parametrize("link", [".dyna", ".dyna/history.jsonl", ".dyna/pending",
                                  ".dyna/retired", ".dyna/state.json", "d"])
def test_meta_links_are_not_written_through(tmp_path, outside, link):
    lib_dir = tmp_path / "lib"
    lib = SkillLibrary(lib_dir)
    lib.add(Skill("a", "skill a", triggers="a"), "r1")
    target = outside / "passwd" if link.endswith((".jsonl", ".json")) else outside
    p = lib_dir / link
    if p.is_dir():
        for q in sorted(p.rglob("*"), reverse=True):
            q.rmdir() if q.is_dir() else q.unlink()
        p.rmdir()
    elif p.exists():
        p.unlink()
    os.symlink(target, p)
    before = tree(outside)
    with pytest.raises(SymlinkError) as exc:
        lib = SkillLibrary(lib_dir)
        lib.stage(Skill("s", "staged"), "r2", ["web"])
        lib.retire("a", "r2")
        lib.add(Skill("d", "skill d"), "r2")
        lib.undo_run("r1")
    assert exc.value.value == str(p)
    assert tree(outside) == before and (outside / "passwd").read_bytes() == SECRET


def test_corrupt_history_names_file_and_line(tmp_path, capsys):
    lib = SkillLibrary(tmp_path)
    lib.add(Skill("a", "skill a"), "r1")
    lib.add(Skill("b", "skill b"), "r1")
    h = tmp_path / ".dyna" / "history.jsonl"
    lines = h.read_bytes().split(b"\n")
    h.write_bytes(b"\n".join([lines[0], b"{not json", *lines[1:]]))
    with pytest.raises(CorruptFileError) as exc:
        SkillLibrary(tmp_path)
    assert (exc.value.path, exc.value.line) == (str(h), 2)
    assert main(["skills", "list", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dyna: error: {h}:2: corrupt log line")
    # a record without its fields is corrupt too
    h.write_bytes(lines[0] + b"\n" + b'{"seq": "two"}\n')
    with pytest.raises(CorruptFileError) as exc:
        SkillLibrary(tmp_path).history()
    assert (exc.value.path, exc.value.line) == (str(h), 2)


def test_corrupt_pending_names_file_and_line(tmp_path, capsys):
    lib = SkillLibrary(tmp_path)
    item = lib.stage(Skill("s", "staged"), "r1", ["web"])
    p = tmp_path / ".dyna" / "pending" / f"{item.id}.json"
    p.write_text('{\n "id": "p0001",\n "dest": s\n}\n')
    with pytest.raises(CorruptFileError) as exc:
        lib.pending()
    assert (exc.value.path, exc.value.line) == (str(p), 3)
    assert main(["skills", "pending", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"dyna: error: {p}:3: not JSON (Expecting value)\n"
    p.write_text(json.dumps({"id": "p0001"}))
    with pytest.raises(CorruptFileError, match="missing dest, text, run_id"):
        lib.pending()
    p.write_bytes(b'{"id": "\xff"}')
    with pytest.raises(CorruptFileError) as exc:
        lib.pending()
    assert (exc.value.line, exc.value.reason) == (1, "not UTF-8 (invalid start byte)")


def test_corrupt_state_file_names_file_and_line(tmp_path, capsys):
    lib = SkillLibrary(tmp_path)
    lib.add(Skill("a", "skill a"), "r1")
    st = tmp_path / ".dyna" / "state.json"
    st.write_text('{"skills": {\n "a": {"successes": 1,}\n}}\n')
    with pytest.raises(CorruptFileError) as exc:
        SkillLibrary(tmp_path)
    assert (exc.value.path, exc.value.line) == (str(st), 2)
    st.write_text('{"skills": []}\n')
    with pytest.raises(CorruptFileError, match='expected {"skills": {name: {...}}}'):
        lib.record_outcome(["a"], True, "r2")
    assert st.read_text() == '{"skills": []}\n'
    assert main(["skills", "list", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
