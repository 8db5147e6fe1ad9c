"""A path no file can be written at is one line and exit 2, never a traceback.

A name over the file system's 255 bytes, a path over the system's 4,096, a place such as
``/proc/self`` where no file can be made, a folder that is a file or is missing, a loop of
symbolic links: each is refused by the one write boundary (:mod:`dyna.fileio`) as a typed
error naming the path, and nothing is written or left behind (no temporary). A target whose
name is at the 255-byte limit is still written: its temporaries are named after a hash of
the name (:func:`dyna.fileio.tempfiles.temp_key`).
"""

import errno
import os
import subprocess

import pytest
import small_tmpfs

from dyna.cli import main
from dyna.errors import ConfigError, DynaError, MissingFileError
from dyna.experience import ExperienceStore
from dyna.fileio import FileWriteError, atomic_write, write_errors
from dyna.fileio.failures import path_refusal
from dyna.fileio.tempfiles import NAME_MAX, SPARE, host_tag, temp_key
from dyna.store.jsonl import write_jsonl

LONG_NAME = "a" * 300 + ".jsonl"                                # 306 bytes
LONG_PATH = "/".join(["b" * 200] * 25) + "/x.jsonl"            # 5,033 characters
AT_LIMIT = "c" * 249 + ".jsonl"                                 # 255 bytes


def _listing(folder) -> list[str]:
    """The names in ``folder`` but SQLite's -wal and -shm of the store, which a read-only
    open of it leaves as every read-only open does."""
    return sorted(n for n in os.listdir(folder) if n not in ("s.db-wal", "s.db-shm"))


@pytest.fixture
def place(tmp_path):
    """A store with one episode, a file, a loop of two links, and nothing else."""
    db = tmp_path / "s.db"
    with ExperienceStore(db, dim=4) as store:
        store.record("t1", task_type="a", action_type="x", outcome="success", reward=1.0,
                     timestamp=1.7e9)
    for s in ("-wal", "-shm"):
        if os.path.exists(f"{db}{s}"):
            os.unlink(f"{db}{s}")
    (tmp_path / "afile").write_text("not a folder\n")
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    return tmp_path


#: --out (relative to the test's folder; absolute ones as given) -> the one line on stderr.
CASES = {
    "a name of 300 characters": (
        LONG_NAME, "--out='{out}': write failed: file name too long (ENAMETOOLONG); "
        "nothing was written"),
    "a path of 5,000 characters": (
        LONG_PATH, "--out='{out}': write failed: file name too long (ENAMETOOLONG); "
        "nothing was written"),
    "under /proc": (
        "/proc/self/x.jsonl", "path='/proc/self/x.jsonl': write failed: no such file or "
        "directory (ENOENT); nothing was written"),
    "a folder that is a file": (
        "afile/x.jsonl", "--out='{out}': '{tmp}/afile' is not a folder"),
    "a missing folder": (
        "missing/x.jsonl", "--out='{out}': its folder '{tmp}/missing' does not exist"),
    "a loop of links as the folder": (
        "loop1/x.jsonl", "--out='{out}': write failed: too many levels of symbolic links "
        "(ELOOP); nothing was written"),
    "a loop of links as the file": (
        "loop1", "--out='{out}': is a symbolic link, not a regular file; dyna never writes "
        "over one (nothing was written)"),
}


def test_export_to_a_path_no_file_can_be_at_is_one_line_exit_2(place, capsys):
    before = _listing(place)
    done = {}
    for name, (out, line) in CASES.items():
        out = out if out.startswith("/") else f"{place}/{out}"
        rc = main(["store", "export", str(place / "s.db"), "--tenant", "t1", "--out", out,
                   "--format", "jsonl"])
        got = capsys.readouterr()
        want = f"dyna: error: {line.format(out=out, tmp=place)}\n"
        done[name] = (rc, got.out, got.err == want, "Traceback" in got.err)
        assert got.err == want, name
        assert _listing(place) == before, name      # nothing written, no temporary
    assert done == {name: (2, "", True, False) for name in CASES}
    assert not os.path.exists("/proc/self/x.jsonl")


@pytest.mark.parametrize("out,kind,code", [
    (LONG_NAME, FileWriteError, errno.ENAMETOOLONG),
    (LONG_PATH, FileWriteError, errno.ENAMETOOLONG),
    ("/proc/self/x.jsonl", FileWriteError, errno.ENOENT),
    ("afile/x.jsonl", ConfigError, None),
    ("missing/x.jsonl", MissingFileError, None),
    ("loop1/x.jsonl", FileWriteError, errno.ELOOP),
])
def test_every_writer_through_the_boundary_raises_the_typed_error(place, out, kind, code):
    out = out if out.startswith("/") else f"{place}/{out}"
    before = _listing(place)
    for write in (lambda: atomic_write(out, "x\n"), lambda: write_jsonl(out, [{"a": 1}])):
        with pytest.raises(kind) as e:
            write()
        assert isinstance(e.value, DynaError) and "\n" not in str(e.value)
        assert str(out) in str(e.value)
        if code is not None:
            assert e.value.errno == code and e.value.path == out
    assert _listing(place) == before


def test_a_name_at_the_255_byte_limit_is_written_with_a_short_temporary(place, capsys):
    assert (len(AT_LIMIT.encode()), NAME_MAX, SPARE) == (255, 255, 68)
    key = temp_key(AT_LIMIT)
    assert key.startswith("~") and len(key) == 17 and key == temp_key(AT_LIMIT)
    assert temp_key("c" * 187) == "c" * 187 and temp_key("c" * 188).startswith("~")
    before = _listing(place)
    written = [place / AT_LIMIT, place / ("d" * 247 + ".parquet")]
    for out in written:
        assert len(out.name.encode()) == 255
        rc = main(["store", "export", str(place / "s.db"), "--tenant", "t1", "--out",
                   str(out)])
        assert rc == 0 and capsys.readouterr().err == ""
        assert out.stat().st_size > 0
    written.append(place / ("e" * 255))
    atomic_write(written[-1], "whole\n")
    assert written[-1].read_text() == "whole\n"
    assert sorted(set(_listing(place)) - set(before)) == sorted(p.name for p in written)


def test_the_orphan_of_a_long_named_target_is_found_by_its_hashed_name(tmp_path):
    """A killed writer's temporary of a 255-byte target is removed by the next write."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    orphan = tmp_path / f".{temp_key(AT_LIMIT)}.{ended.pid}-1-{host_tag()}.x1y2z3w4.tmp"
    orphan.write_text("half")
    assert len(orphan.name.encode()) <= NAME_MAX
    atomic_write(tmp_path / AT_LIMIT, "whole\n")
    assert _listing(tmp_path) == [AT_LIMIT]


@pytest.mark.parametrize("code,name", [
    (errno.EACCES, "EACCES"), (errno.EPERM, "EPERM"), (errno.EROFS, "EROFS"),
    (errno.EISDIR, "EISDIR"), (errno.ENAMETOOLONG, "ENAMETOOLONG"), (errno.ENOENT, "ENOENT"),
    (errno.ENOTDIR, "ENOTDIR"), (errno.ELOOP, "ELOOP"),
])
def test_each_refusal_of_the_target_is_named_by_its_errno(tmp_path, code, name):
    target = tmp_path / "out.jsonl"
    with pytest.raises(FileWriteError) as e:
        with write_errors(target, "--out"):
            raise OSError(code, os.strerror(code), str(tmp_path / ".out.jsonl.1-2-x.tmp"))
    assert str(e.value) == (f"--out={str(target)!r}: write failed: "
                            f"{os.strerror(code).lower()} ({name}); nothing was written")
    assert e.value.errno == code


def test_a_missing_input_elsewhere_is_not_taken_for_the_target(tmp_path):
    """ENOENT about a file the block reads in another folder passes unchanged."""
    elsewhere = FileNotFoundError(errno.ENOENT, "no such file", "/nonexistent/input.csv")
    assert not path_refusal(elsewhere, tmp_path / "out.jsonl")
    assert path_refusal(OSError(errno.ELOOP, "loop"), tmp_path / "out.jsonl")
    with pytest.raises(FileNotFoundError) as e:
        with write_errors(tmp_path / "out.jsonl"):
            raise elsewhere
    assert e.value is elsewhere


def test_a_read_only_file_system_is_named_erofs(tmp_path):
    with small_tmpfs.mounted(tmp_path / "ro", "64k") as root:
        subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)
        with pytest.raises(FileWriteError) as e:
            atomic_write(root / "x.txt", "x\n")
        assert e.value.errno == errno.EROFS and "read-only file system (EROFS)" in str(e.value)
        assert _listing(root) == []
