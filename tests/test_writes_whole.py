"""Every writing command writes whole or not at all: on a full disk, with a special file as
its output, and with text that is not UTF-8.

The full disk is real: a 512 KiB tmpfs mounted by the test (root only; skipped with the
reason otherwise) and filled to the last byte. Each case compares the bytes of every file
before and after, and counts the history records, so a change that did not happen leaves no
record and a failed command leaves nothing half-made.
"""

import os
import stat
from pathlib import Path

import pytest
import small_tmpfs

from dyna.cli import main
from dyna.errors import StoreWriteError
from dyna.experience import ExperienceStore
from dyna.loops.memory import MemoryStore
from dyna.loops.skills import Skill, SkillLibrary

ENOSPC = "no space left on device (ENOSPC)"


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def episodes(n, start=0):
    return [dict(task_type="a", action_type="x", outcome="success", reward=float(i),
                 timestamp=float(i)) for i in range(start, start + n)]


@pytest.fixture
def disk(tmp_path):
    """A small tmpfs of its own (512 KiB), unmounted at the end."""
    with small_tmpfs.mounted(tmp_path / "disk") as root:
        yield root


def fill(root):
    """Write filler files until the file system refuses another byte."""
    for name, size in (("filler", 4096), ("filler-bytes", 1)):
        with open(root / name, "wb", buffering=0) as fh:
            try:
                while fh.write(b"\0" * size):
                    pass
            except OSError:
                pass
    with pytest.raises(OSError):
        (root / "probe").write_bytes(b"x" * 4096)
    (root / "probe").unlink()


def snapshot(root) -> dict:
    """Every file below ``root`` but the fillers: relative path -> bytes (or the kind)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in files + dirs:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if rel.startswith(("filler", "probe")):
                continue
            mode = os.lstat(p).st_mode
            out[rel] = Path(p).read_bytes() if stat.S_ISREG(mode) else stat.S_IFMT(mode)
    return out


def make_library(root):
    lib = SkillLibrary(root / "skills")
    lib.add(Skill("git-push", "Push safely to the remote", triggers="git"), "r1")
    lib.add(Skill("old-one", "An old skill to bring back", triggers="old"), "r1")
    lib.retire("old-one", "r1", "test")
    lib.stage(Skill("web-tip", "Tip from a page", triggers="tip"), "r2", ["web"])
    mem = MemoryStore(root / "MEMORY.md")
    mem.add("The deploy host is alpha.example.org", "person", "user", "r1")
    mem.stage("The build server is beta.example.org", "web", "r2")
    for text in ("The build cache lives in /var/cache/build",       # to merge
                 "The build cache lives in /var/cache/build now", "Always be careful"):
        mem.add(text, "loop", "trusted", "r3")
    (root / "body.md").write_text("Run `make rollback-staging`, then open the health page.\n")


def make_store(path, n=20):
    s = ExperienceStore(path, dim=4)
    s.record("t1", episodes=episodes(n))
    s.close()


def histories(root) -> tuple[int, int]:
    """(memory history records, skill history records) below ``root``."""
    mem = len(MemoryStore(root / "MEMORY.md").history()) if (root / "MEMORY.md").exists() \
        else 0
    lib = len(SkillLibrary(root / "skills").history()) if (root / "skills").exists() else 0
    return mem, lib


# ------------------------------------------------------------------ a full disk
#: Commands whose every file lives on the full disk: argv after ``dyna`` (DISK is the disk).
LIBRARY_COMMANDS = {
    "memory add": ["memory", "add", "DISK/MEMORY.md", "The test port is 8080 today"],
    "memory approve": ["memory", "approve", "DISK/MEMORY.md", "m0001"],
    "memory reject": ["memory", "reject", "DISK/MEMORY.md", "m0001"],
    "memory consolidate": ["memory", "consolidate", "DISK/MEMORY.md"],
    "skills add": ["skills", "add", "DISK/skills", "--name", "rollback-staging",
                   "--description", "Roll back the staging web app", "--trigger", "rollback",
                   "--body", "DISK/body.md"],
    "skills retire": ["skills", "retire", "DISK/skills", "git-push"],
    "skills restore": ["skills", "restore", "DISK/skills", "old-one"],
    "skills approve": ["skills", "approve", "DISK/skills", "p0001"],
}


def test_every_library_command_on_a_full_disk_changes_nothing_and_says_enospc(disk, capsys):
    make_library(disk)
    fill(disk)
    done = {}
    for name, argv in LIBRARY_COMMANDS.items():
        before, logs = snapshot(disk), histories(disk)
        rc, out, err = run(capsys, *[a.replace("DISK", str(disk)) for a in argv])
        done[name] = (rc, err.count("\n"), ENOSPC in err, snapshot(disk) == before,
                      histories(disk) == logs)
        assert err.startswith("dyna: error: ") and "Traceback" not in err, (name, err)
    assert done == {name: (2, 1, True, True, True) for name in LIBRARY_COMMANDS}
    assert len(done) == 8


def test_store_commands_on_a_full_disk_name_enospc_never_damage(disk, capsys, tmp_path):
    db = disk / "s.db"
    make_store(db)
    elsewhere = tmp_path / "ok.db"
    make_store(elsewhere)
    fill(disk)
    cases = {
        "stats": ["store", "stats", db],
        "export": ["store", "export", db, "--tenant", "t1", "--out", tmp_path / "e.jsonl"],
        "delete": ["store", "delete", db, "--tenant", "t1", "--yes"],
        "compact": ["store", "compact", db, "--keep", "1"],
        "cache": ["store", "cache", db],
        "recover (source on the full disk)": ["store", "recover", db, "--out",
                                              tmp_path / "new.db"],
        "scrub": ["store", "scrub", db],
        "export to the full disk": ["store", "export", elsewhere, "--tenant", "t1", "--out",
                                    disk / "e.jsonl"],
        "export parquet to the full disk": ["store", "export", elsewhere, "--tenant", "t1",
                                            "--out", disk / "e.parquet"],
        "recover to the full disk": ["store", "recover", elsewhere, "--out", disk / "n.db"],
    }
    before = snapshot(disk)
    done = {}
    for name, argv in cases.items():
        rc, out, err = run(capsys, *argv)
        done[name] = (rc, err.count("\n"), ENOSPC in err, "damaged SQLite store" in err,
                      "not a dyna experience store" in err, "unreadable" in err)
    assert done == {name: (2, 1, True, False, False, False) for name in cases}
    # the store's own files as they were, but the companions scrub's writable open made
    after = snapshot(disk)
    assert {k: v for k, v in after.items() if not k.endswith(("-wal", "-shm"))} == \
        {k: v for k, v in before.items() if not k.endswith(("-wal", "-shm"))}
    assert sorted(after) == ["s.db", "s.db-shm", "s.db-wal"]
    assert not (tmp_path / "e.jsonl").exists() and not (tmp_path / "new.db").exists()
    assert len(done) == 10


def test_store_companions_left_by_a_failed_read_only_open_are_removed(disk, capsys):
    """Read-only commands on a full disk (SQLite cannot make its -shm index) leave no -wal
    or -shm behind."""
    db = disk / "s.db"
    make_store(db)
    fill(disk)
    for argv in (["store", "stats", db], ["store", "recover", db, "--out", disk / "n.db"]):
        rc, _, err = run(capsys, *argv)
        assert rc == 2 and ENOSPC in err
        assert sorted(os.listdir(disk)) == ["filler", "filler-bytes", "s.db"]


def test_record_and_import_on_a_full_disk_raise_typed_errors_and_store_nothing(disk,
                                                                              tmp_path):
    db = disk / "s.db"
    make_store(db, n=5)
    src = ExperienceStore(tmp_path / "src.db", dim=4)
    src.record("t2", episodes=[dict(e, metadata={"pad": "x" * 2000}) for e in episodes(200)])
    src.export_data("t2", str(tmp_path / "t2.jsonl"))
    src.close()
    store = ExperienceStore(db, dim=4)
    try:
        fill(disk)
        with pytest.raises(StoreWriteError) as e:
            store.record("t1", episodes=[dict(x, metadata={"pad": "y" * 3000})
                                         for x in episodes(200, 100)])
        assert "database or disk is full" in str(e.value) and ENOSPC in str(e.value)
        assert len(str(e.value).splitlines()) == 1
        with pytest.raises(StoreWriteError) as e:
            store.import_data(str(tmp_path / "t2.jsonl"))
        assert ENOSPC in str(e.value)
        assert store.get_stats()["n_records"] == 5
    finally:
        store.close()
    assert ExperienceStore(db, dim=4, read_only=True).get_stats()["n_records"] == 5


# ------------------------------------------------------------------ special files
def special_files(tmp_path):
    """name -> a path holding a FIFO, a symbolic link, a character device (a node like
    /dev/null, made here: root only) and a dangling link."""
    (tmp_path / "target.txt").write_text("keep me\n")
    out = {}
    os.mkfifo(tmp_path / "fifo")
    out["fifo"] = tmp_path / "fifo"
    (tmp_path / "link").symlink_to(tmp_path / "target.txt")
    out["link"] = tmp_path / "link"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    out["dangling link"] = tmp_path / "dangling"
    try:
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        out["device"] = tmp_path / "null"
    except PermissionError:
        pass
    return out


def test_every_writing_command_refuses_a_special_file_as_its_output(tmp_path, capsys):
    db = tmp_path / "s.db"
    make_store(db)
    specials = special_files(tmp_path)
    (tmp_path / "body.md").write_text("Run `make rollback-staging`, then open the health "
                                      "page.\n")
    commands = {
        "store export": lambda p: ["store", "export", db, "--tenant", "t1", "--out", p,
                                   "--format", "jsonl"],
        "store export parquet": lambda p: ["store", "export", db, "--tenant", "t1", "--out",
                                           p, "--format", "parquet"],
        "store recover": lambda p: ["store", "recover", db, "--out", p],
        "memory add": lambda p: ["memory", "add", p, "The test port is 8080 today"],
        "memory approve": lambda p: ["memory", "approve", p, "m0001"],
        "memory consolidate": lambda p: ["memory", "consolidate", p],
    }
    kinds = {"fifo": "a FIFO", "link": "a symbolic link", "dangling link": "a symbolic link",
             "device": "a character device"}
    before = snapshot(tmp_path)
    refused = {}
    for cmd, argv in commands.items():
        for kind, p in specials.items():
            rc, out, err = run(capsys, *argv(p))
            refused[cmd, kind] = (rc, err.count("\n"), out)
            assert str(p) in err, (cmd, kind, err)
            if cmd.startswith("store export"):
                assert err == (f"dyna: error: --out={str(p)!r}: is {kinds[kind]}, not a "
                               "regular file; dyna never writes over one (nothing was "
                               "written)\n")
    assert set(refused.values()) == {(2, 1, "")}
    assert len(refused) == 6 * len(specials) and len(specials) in (3, 4)
    assert snapshot(tmp_path) == before        # every FIFO, link and node as it was
    assert os.readlink(tmp_path / "link") == str(tmp_path / "target.txt")


def test_the_boundary_refuses_special_files_for_every_writer(tmp_path):
    from dyna.fileio import NotRegularFileError, atomic_write
    from dyna.fileio.atomic import atomic_target

    specials = special_files(tmp_path)
    before = snapshot(tmp_path)
    n = 0
    for kind, p in specials.items():
        with pytest.raises(NotRegularFileError) as e:
            atomic_write(p, "x")
        assert e.value.field == "path" and isinstance(e.value, OSError)
        with pytest.raises(NotRegularFileError):
            with atomic_target(p, field="--out"):
                pass
        n += 2
    assert n == 2 * len(specials)
    assert snapshot(tmp_path) == before


def test_dev_stdout_is_refused_before_anything_opens_it(tmp_path, capsys):
    """``--out /dev/stdout`` (a symbolic link) is refused by the check alone: the store is
    not even opened."""
    rc, out, err = run(capsys, "store", "export", tmp_path / "missing.db", "--tenant", "t1",
                       "--out", "/dev/stdout", "--format", "jsonl")
    assert (rc, out) == (2, "")
    assert err == ("dyna: error: --out='/dev/stdout': is a symbolic link, not a regular file; "
                   "dyna never writes over one (nothing was written)\n")
    assert os.path.islink("/dev/stdout")


# ------------------------------------------------------------------ text that is not UTF-8
def test_text_that_is_not_utf8_is_refused_before_anything_is_written(tmp_path, capsys):
    mem = tmp_path / "MEMORY.md"
    MemoryStore(mem).add("The deploy host is alpha.example.org", "person", "user", "r1")
    lib = tmp_path / "skills"
    SkillLibrary(lib).add(Skill("git-push", "Push safely to the remote", triggers="git"), "r1")
    body = tmp_path / "body.md"
    body.write_text("Run `make rollback-staging`, then open the health page.\n")
    bad_body = tmp_path / "bad.md"
    bad_body.write_bytes(b"Run \xff the linter first.\n")
    toml = tmp_path / "x.toml"
    toml.write_bytes(b'kind = "dyna_maze"\nname = "caf\xe9"\n')
    bad = "The deploy port is \udcff 8080 now"      # argv's byte 0xff (surrogateescape)
    add = ["skills", "add", lib, "--name", "rollback-staging", "--body", body]
    cases = {
        "memory add TEXT": ["memory", "add", mem, bad],
        "skills add --description": [*add, "--description", "Roll back \udcff staging"],
        "skills add --trigger": [*add, "--description", "Roll back the staging web app",
                                 "--trigger", "roll\udce9back"],
        "skills add --body": ["skills", "add", lib, "--name", "rollback-staging",
                              "--description", "Roll back the staging web app", "--body",
                              bad_body],
        "run TOML": ["run", toml, "--out", tmp_path / "out"],
    }
    before = snapshot(tmp_path)
    done = {}
    for name, argv in cases.items():
        rc, out, err = run(capsys, *argv)
        done[name] = (rc, err.count("\n"), "UTF-8" in err or "utf-8" in err)
        assert "\udcff" not in err and "Traceback" not in err
    assert done == {name: (2, 1, True) for name in cases}
    assert snapshot(tmp_path) == before
    rc, out, _ = run(capsys, "memory", "show", mem)
    assert rc == 0 and "alpha.example.org" in out and "1 facts, 0 pending" in out
    rc, out, err = run(capsys, "memory", "add", mem, "The test port is 8080 today")
    assert (rc, err) == (0, "")


def test_the_memory_library_and_the_boundary_refuse_lone_surrogates(tmp_path):
    from dyna.errors import ConfigError
    from dyna.fileio import atomic_write

    mem = MemoryStore(tmp_path / "MEMORY.md")
    with pytest.raises(ConfigError) as e:
        mem.add("The deploy port is \udcff 8080 now", "person", "user", "r1")
    assert str(e.value) == ("text='<text of 29 characters>': the text holds a byte that is "
                            "not UTF-8 (0xff at character 19); nothing was written")
    assert sorted(os.listdir(tmp_path)) == []           # not even the lock folder
    with pytest.raises(ConfigError) as e:
        atomic_write(tmp_path / "f.txt", "caf\udce9")
    assert e.value.field == "path" and "(0xe9 at character 3)" in str(e.value)
    assert not (tmp_path / "f.txt").exists()


# ------------------------------------------------------------------ folders and errors
def test_a_store_never_creates_missing_folders(tmp_path):
    from dyna.errors import MissingFileError

    path = tmp_path / "any" / "missing" / "dirs" / "x.db"
    with pytest.raises(MissingFileError) as e:
        ExperienceStore(path, dim=4)
    assert e.value.field == "DB" and e.value.value == path
    assert str(path.parent) in str(e.value)
    assert sorted(os.listdir(tmp_path)) == []


def test_file_write_error_is_one_line_with_errno(tmp_path):
    import errno
    import pickle

    from dyna.fileio import FileWriteError

    e = FileWriteError(tmp_path / "a", errno.ENOSPC, "--out")
    assert str(e) == (f"--out={str(tmp_path / 'a')!r}: write failed: no space left on device "
                      "(ENOSPC); nothing was written")
    assert e.errno == errno.ENOSPC and isinstance(e, OSError)
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == str(e) and back.errno == errno.ENOSPC


def test_a_plot_output_refuses_a_fifo_and_a_link(tmp_path, capsys):
    """``dyna store competence --out PNG`` draws through the same boundary."""
    db = tmp_path / "s.db"
    make_store(db, n=5)
    os.mkfifo(tmp_path / "fifo.png")
    (tmp_path / "target.png").write_bytes(b"not a plot")
    (tmp_path / "link.png").symlink_to(tmp_path / "target.png")
    before = snapshot(tmp_path)
    refused = 0
    for name, kind in (("fifo.png", "a FIFO"), ("link.png", "a symbolic link")):
        rc, out, err = run(capsys, "store", "competence", db, "--tenant", "t1",
                           "--task-type", "a", "--out", tmp_path / name)
        assert (rc, out, err.count("\n")) == (2, "", 1)
        assert f"is {kind}, not a regular file" in err and str(tmp_path / name) in err
        refused += 1
    assert refused == 2
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.endswith(("-wal", "-shm"))} == \
        {k: v for k, v in before.items() if not k.endswith(("-wal", "-shm"))}
