"""What a library or a store may create, and ``memory approve`` on a nearly full disk.

- ``MemoryStore(path)`` and ``SkillLibrary(dir)`` never make a missing parent folder unless
  the caller passes ``create=True`` (as ``ExperienceStore`` never makes its file's folder):
  :class:`dyna.errors.MissingFileError` names the folder and nothing is created. A missing
  MEMORY.md or library folder in an existing folder is still made, as the CLI relies on.
- ``dyna mcp`` refuses a 0-byte file as "empty file, not a store" unless ``--create``.
- ``dyna memory approve`` writes MEMORY.md (whole) before it drops the pending fact and logs
  the history: on a disk with room for the small pending file but not for MEMORY.md, the
  fact stays pending and nothing changes (a real 512 KiB tmpfs, root only).
"""

import os

import pytest
import small_tmpfs

from dyna.cli import main
from dyna.errors import MissingFileError
from dyna.experience import ExperienceStore
from dyna.loops.memory import MemoryStore
from dyna.loops.skills import Skill, SkillLibrary

ENOSPC = "no space left on device (ENOSPC)"


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------ parent folders
def test_memory_store_refuses_a_missing_folder_unless_asked(tmp_path):
    path = tmp_path / "no" / "such" / "MEMORY.md"
    with pytest.raises(MissingFileError) as e:
        MemoryStore(path)
    assert (e.value.field, e.value.value) == ("path", tmp_path / "no" / "such")
    assert str(e.value) == (f"path={str(tmp_path / 'no' / 'such')!r}: no such folder "
                            "(MEMORY.md's folder is made only with create=True)")
    assert os.listdir(tmp_path) == []
    mem = MemoryStore(path, create=True)
    assert mem.add("The deploy host is alpha.example.org", trust="user").status == "added"
    assert path.read_text().count("alpha.example.org") == 1
    # a missing MEMORY.md in an existing folder is made at the first write, as before
    mem = MemoryStore(tmp_path / "MEMORY.md")
    assert not (tmp_path / "MEMORY.md").exists()
    mem.add("The build host is beta.example.org", trust="user")
    assert len(MemoryStore(tmp_path / "MEMORY.md")) == 1


def test_skill_library_refuses_a_missing_parent_unless_asked(tmp_path):
    folder = tmp_path / "a" / "b" / "skills"
    with pytest.raises(MissingFileError) as e:
        SkillLibrary(folder)
    assert (e.value.field, e.value.value) == ("dir", tmp_path / "a" / "b")
    assert "create=True" in str(e.value)
    assert os.listdir(tmp_path) == []
    lib = SkillLibrary(folder, create=True)
    lib.add(Skill("git-push", "Push safely to the remote", triggers="git"), "r1")
    assert (folder / "git-push" / "SKILL.md").is_file()
    # the library folder itself, in an existing folder, is made as before
    lib = SkillLibrary(tmp_path / "new-lib")
    assert (tmp_path / "new-lib").is_dir() and lib.skills() == []


def test_cli_adds_into_a_new_library_or_memory_file_but_never_a_new_parent(tmp_path, capsys):
    body = tmp_path / "body.md"
    body.write_text("Run `make rollback-staging`, then open the health page.\n")
    add = ["--name", "rollback-staging", "--description", "Roll back the staging web app",
           "--trigger", "rollback", "--body", body]
    rc, out, _ = run(capsys, "skills", "add", tmp_path / "lib", *add)
    assert rc == 0 and (tmp_path / "lib" / "rollback-staging" / "SKILL.md").is_file()
    rc, out, _ = run(capsys, "memory", "add", tmp_path / "MEMORY.md",
                     "The test port is 8080 today")
    assert rc == 0 and "8080" in (tmp_path / "MEMORY.md").read_text()
    for argv in (["skills", "add", tmp_path / "x" / "lib", *add],
                 ["memory", "add", tmp_path / "y" / "MEMORY.md", "The port is 8080"]):
        rc, out, err = run(capsys, *argv)
        assert (rc, out, err.count("\n"), "no such folder" in err) == (2, "", 1, True)
    assert sorted(os.listdir(tmp_path)) == [".dyna", "MEMORY.md", "body.md", "lib"]


# ------------------------------------------------------------------ dyna mcp --create
def test_mcp_refuses_an_empty_file_unless_create(tmp_path, capsys):
    pytest.importorskip("mcp", reason="the MCP SDK (extra 'mcp') is not installed")
    from dyna.mcp_server.command import _open_store
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    rc, out, err = run(capsys, "mcp", "--db", empty)
    assert (rc, out) == (2, "")
    assert err == (f"dyna: error: DB={empty}: empty file, not a store (0 bytes); nothing was "
                   "written to it (create=True, or --create, makes a new store in it)\n")
    rc, _, err = run(capsys, "mcp", "--db", empty, "--create", "--read-only")
    assert rc == 2 and err.startswith("dyna: error: --create=True: not with --read-only")
    assert empty.stat().st_size == 0 and os.listdir(tmp_path) == ["empty.db"]
    # --create never makes a folder
    with pytest.raises(MissingFileError):
        _open_store(str(tmp_path / "none" / "s.db"), None, False, True)
    store = _open_store(str(empty), 8, False, True)     # what --create opens
    store.record("agent", task_type="t", action_type="a", outcome="success", reward=1.0)
    store.close()
    with ExperienceStore(empty, dim=8, read_only=True) as again:
        assert again.get_stats()["n_records"] == 1


# ------------------------------------------------------------------ approve, disk full
def test_memory_approve_on_a_nearly_full_disk_keeps_the_fact_pending(tmp_path, capsys):
    with small_tmpfs.mounted(tmp_path / "disk") as disk:
        mem = MemoryStore(disk / "MEMORY.md", cap=None)
        for i in range(120):             # MEMORY.md of 3 pages, the pending file of 1
            mem.add(f"Fact number {i} says host h{i}.example.org serves port {8000 + i}",
                    "person", "user", "r1")
        mem.stage("The build server is beta.example.org", "web", "r2")
        (disk / "gap").write_bytes(b"\0" * 8192)            # 2 pages, freed after the fill
        with open(disk / "filler", "wb", buffering=0) as fh:
            try:
                while fh.write(b"\0" * 4096):
                    pass
            except OSError:
                pass
        (disk / "gap").unlink()
        before = {p: p.read_bytes() for p in disk.rglob("*") if p.is_file()}
        n_hist = len(mem.history())
        rc, out, err = run(capsys, "memory", "approve", disk / "MEMORY.md", "m0001")
        assert (rc, out, err.count("\n"), ENOSPC in err) == (2, "", 1, True)
        assert {p: p.read_bytes() for p in disk.rglob("*") if p.is_file()} == before
        again = MemoryStore(disk / "MEMORY.md", cap=None)
        assert [p.id for p in again.pending()] == ["m0001"] and len(again) == 120
        assert len(again.history()) == n_hist
        (disk / "filler").unlink()                           # room again: approved
        rc, out, err = run(capsys, "memory", "approve", disk / "MEMORY.md", "m0001")
        assert (rc, err) == (0, "")
        again = MemoryStore(disk / "MEMORY.md", cap=None)
        assert again.pending() == [] and len(again) == 121
        assert "beta.example.org" in (disk / "MEMORY.md").read_text()
        assert [h["op"] for h in again.history()[n_hist:]] == ["approve", "add"]
