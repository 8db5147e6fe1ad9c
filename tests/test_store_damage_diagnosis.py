"""Damage told apart from a full disk, an empty file and a read-only file system.

- 4 KB of damage in the middle of a ``-wal`` left by a crash made SQLite drop every
  transaction after the damaged frame without a word (``stats``: fewer rows, status ok);
  the frames are checked before SQLite opens the file, and the loss is reported.
- A file of 0 bytes is "empty file, not a store" for every open unless ``create=True``.
- A read-only command on a damaged store leaves no ``-wal`` / ``-shm`` behind.
- A read-only file system is named as such (EROFS), never as damage.
"""

import hashlib
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest
import small_tmpfs

from dyna.cli import main
from dyna.errors import NotAStoreError, StoreDamagedError, StoreError
from dyna.experience import ExperienceStore
from dyna.store.sqlite_file import EmptyStoreFileError
from dyna.store.wal_check import check_wal, read_wal

ROWS, BATCH = 1000, 10


def _episodes(lo, hi):
    return [dict(task_type="a", action_type="x", outcome="success", reward=float(i),
                 timestamp=float(i), metadata={"note": "n" * 40}) for i in range(lo, hi)]


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """A store and its -wal as a crash leaves them: 1,000 rows committed in 100
    transactions, the files copied while the writer still had them open (no checkpoint)."""
    folder = tmp_path_factory.mktemp("crashed")
    live = folder / "live.db"
    store = ExperienceStore(live, dim=4)
    for lo in range(0, ROWS, BATCH):
        store.record("t1", episodes=_episodes(lo, lo + BATCH))
    shutil.copy(live, folder / "c.db")
    shutil.copy(f"{live}-wal", folder / "c.db-wal")
    store.close()
    return folder / "c.db"


def _copy(src, dst, damage: bool = False, cut: int = 0):
    shutil.copy(src, dst)
    data = bytearray(Path(f"{src}-wal").read_bytes())
    if damage:       # 4 KB of seeded random bytes in the middle
        mid = len(data) // 2
        data[mid:mid + 4096] = np.random.default_rng(36).bytes(4096)
    if cut:
        del data[-cut:]
    with open(f"{dst}-wal", "wb") as fh:
        fh.write(data)
    return dst


def _sqlite_rows(path) -> int:
    """Rows SQLite itself shows (on a copy: SQLite's open would replay and cut the log)."""
    view = path.parent / "sqlite-view"
    view.mkdir()
    copy = view / path.name
    shutil.copy(path, copy)
    shutil.copy(f"{path}-wal", f"{copy}-wal")
    conn = sqlite3.connect(copy)
    try:
        return conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    finally:
        conn.close()


def test_an_intact_crash_wal_is_checked_and_every_row_is_there(crashed, tmp_path, capsys):
    db = _copy(crashed, tmp_path / "ok.db")
    report = read_wal(Path(f"{db}-wal").read_bytes())
    assert report.first_bad is None and report.valid == report.frames > 100
    assert report.lost == report.lost_commits == 0
    assert main(["store", "stats", str(db)]) == 0
    out = capsys.readouterr().out
    assert '"n_records": 1000' in out and '"persistence_status": "ok"' in out


def test_wal_damage_in_the_middle_is_reported_by_every_open(crashed, tmp_path, capsys):
    db = _copy(crashed, tmp_path / "bad.db", damage=True)
    shown = _sqlite_rows(db)
    assert 0 < shown < ROWS        # what SQLite alone shows, silently: rows lost
    sha, wal_sha = _sha(db), _sha(f"{db}-wal")
    report = read_wal(Path(f"{db}-wal").read_bytes())
    assert report.first_bad is not None and report.valid == report.first_bad
    assert report.lost > 0 and report.lost_commits > 0
    refused = 0
    assert main(["store", "stats", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "damaged SQLite store" in err
    assert (f"bad.db-wal: frame {report.first_bad + 1} of {report.frames} fails its checksum, "
            f"and {report.lost} frames written after it ({report.lost_commits} commits) would "
            "be dropped silently by SQLite") in err
    refused += 1
    for kw in ({}, {"read_only": True}):
        with pytest.raises(StoreDamagedError) as e:
            ExperienceStore(db, dim=4, **kw)
        assert f"frame {report.first_bad + 1} of {report.frames}" in e.value.detail
        refused += 1
    assert refused == 3
    assert (_sha(db), _sha(f"{db}-wal")) == (sha, wal_sha)   # nothing opened or replayed
    assert sorted(os.listdir(tmp_path)) == ["bad.db", "bad.db-wal", "sqlite-view"]


def test_a_torn_last_frame_is_a_crash_not_damage(crashed, tmp_path):
    """A crash in the middle of an append leaves a partial last frame: nothing after it was
    written, nothing acknowledged is lost, so the store opens."""
    db = _copy(crashed, tmp_path / "torn.db", cut=2000)
    report = check_wal(db)
    assert report.first_bad is None and not report.damaged
    with ExperienceStore(db, dim=4, read_only=True) as store:
        assert 0 < store.get_stats()["n_records"] <= ROWS


def test_a_damaged_wal_header_before_committed_frames_is_reported(tmp_path, capsys):
    """250 rows checkpointed, 250 more in the -wal, one bit flipped in salt-2: SQLite
    ignores the whole log (250 rows, status ok); the check names the damage."""
    live = tmp_path / "live" / "s.db"
    live.parent.mkdir()
    store = ExperienceStore(live, dim=4)
    store.record("t1", episodes=_episodes(0, 250))
    store._db.checkpoint()
    for lo in range(250, 500, 50):
        store.record("t1", episodes=_episodes(lo, lo + 50))
    db = _copy(live, tmp_path / "h.db")
    store.close()
    data = bytearray(Path(f"{db}-wal").read_bytes())
    data[20] ^= 1
    Path(f"{db}-wal").write_bytes(data)
    assert _sqlite_rows(db) == 250
    report = read_wal(bytes(data))
    assert report.header_damaged and report.valid == 0 and report.first_bad == 0
    assert report.lost == report.frames and report.lost_commits == 5
    assert main(["store", "stats", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (f"h.db-wal: the -wal header is damaged; {report.frames} frames after it "
            "(5 commits) may hold committed rows") in err
    fresh = bytes(data[:32]) + bytes(4096 * 3)
    assert read_wal(fresh) is None and read_wal(bytes(data[:32])) is None


def test_a_wal_header_sqlite_ignores_is_not_read(tmp_path):
    assert read_wal(b"") is None
    assert read_wal(b"\0" * 4096) is None
    assert check_wal(tmp_path / "none.db") is None


# ------------------------------------------------------------------ an empty file
def test_an_empty_file_is_not_a_store_unless_create(tmp_path, capsys):
    empty = tmp_path / "e.db"
    empty.write_bytes(b"")
    refused = 0
    for kw in ({}, {"read_only": True}):
        with pytest.raises(EmptyStoreFileError) as e:
            ExperienceStore(empty, dim=4, **kw)
        assert isinstance(e.value, NotAStoreError)
        assert str(e.value).startswith(f"DB={empty}: empty file, not a store (0 bytes)")
        refused += 1
    for argv in (["store", "stats", empty], ["store", "cache", empty],
                 ["store", "delete", empty, "--tenant", "t1", "--yes"]):
        assert main([str(a) for a in argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "empty file, not a store" in err
        refused += 1
    assert refused == 5
    assert sorted(os.listdir(tmp_path)) == ["e.db"] and empty.stat().st_size == 0
    with ExperienceStore(empty, dim=4, create=True) as store:
        store.record("t1", episodes=_episodes(0, 3))
        assert store.get_stats()["n_records"] == 3


# ------------------------------------------------------------------ companions
@pytest.fixture
def damaged(tmp_path):
    """A closed store (no companions) with 4 KB of random bytes in its middle."""
    path = tmp_path / "d.db"
    with ExperienceStore(path, dim=4) as store:
        store.record("t1", episodes=_episodes(0, 2000))
    assert not any(os.path.exists(f"{path}{s}") for s in ("-wal", "-shm"))
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(np.random.default_rng(7).bytes(4096))
    return path


def test_read_only_commands_on_a_damaged_store_leave_no_companions(damaged, tmp_path,
                                                                   capsys):
    sha = _sha(damaged)
    failed = 0
    for argv in (["store", "stats", damaged],
                 ["store", "export", damaged, "--tenant", "t1", "--out", tmp_path / "e.jsonl"]):
        assert main([str(a) for a in argv]) == 2
        assert "damaged SQLite store" in capsys.readouterr().err
        failed += 1
    with pytest.raises(StoreDamagedError):
        ExperienceStore(damaged, dim=4, read_only=True)
    failed += 1
    assert main(["store", "recover", str(damaged), "--out", str(tmp_path / "new.db")]) == 0
    capsys.readouterr()
    assert failed == 3
    assert sorted(os.listdir(tmp_path)) == ["d.db", "new.db"]
    assert _sha(damaged) == sha


def test_a_companion_another_connection_uses_is_never_removed(tmp_path):
    """The clean-up takes SQLite's own lock on the -shm index first: while a writer has
    the store open, a failed reader removes nothing."""
    from dyna.store.sqlite_file import drop_new_companions

    db = tmp_path / "s.db"
    with ExperienceStore(db, dim=4) as store:
        store.record("t1", episodes=_episodes(0, 5))
        assert drop_new_companions(db, set()) == []
        assert sorted(os.listdir(tmp_path)) == ["s.db", "s.db-shm", "s.db-wal"]


_REPLACE = """
import os, sys
for name in sys.argv[1:]:
    with open(name + ".new", "wb") as fh:
        fh.write(b"")
    os.replace(name + ".new", name)     # a new file (a new inode) in the companion's place
"""


def test_companions_another_process_made_after_the_open_are_never_removed(damaged, tmp_path,
                                                                          monkeypatch):
    """Between the failed open (which records its companions' identities) and their
    removal, another process puts its own -wal and -shm in their place: they stay, for a
    read-only open and for recover; without it the open's own are removed."""
    import sys

    from dyna.store import sqlite_file
    from dyna.store.recover import recover

    real, seen, theirs = sqlite_file._has_locks, [], []
    names = [f"{damaged}{s}" for s in ("-wal", "-shm")]

    def another_process_meanwhile(paths):
        seen.append(sorted(os.listdir(tmp_path)))
        subprocess.run([sys.executable, "-c", _REPLACE, *names], check=True)
        theirs.append([os.stat(n).st_ino for n in names])
        return real(paths)

    monkeypatch.setattr(sqlite_file, "_has_locks", another_process_meanwhile)
    kept = []
    with pytest.raises(StoreDamagedError):
        ExperienceStore(damaged, dim=4, read_only=True)
    kept.append([os.stat(n).st_ino for n in names])
    for n in names:                # (theirs: removed by hand for the next case)
        os.unlink(n)
    assert recover(damaged, tmp_path / "new.db")["out"] == str(tmp_path / "new.db")
    kept.append([os.stat(n).st_ino for n in names])
    assert seen == [["d.db", "d.db-shm", "d.db-wal"], ["d.db", "d.db-shm", "d.db-wal", "new.db"]]
    assert kept == theirs and len(kept) == 2
    assert sorted(os.listdir(tmp_path)) == ["d.db", "d.db-shm", "d.db-wal", "new.db"]
    for n in names:
        os.unlink(n)
    monkeypatch.setattr(sqlite_file, "_has_locks", real)
    with pytest.raises(StoreDamagedError):
        ExperienceStore(damaged, dim=4, read_only=True)
    assert sorted(os.listdir(tmp_path)) == ["d.db", "new.db"]       # its own: removed


# ------------------------------------------------------------------ the file system
@pytest.fixture
def read_only_fs(tmp_path):
    """A tmpfs holding a closed store, remounted read-only."""
    with small_tmpfs.mounted(tmp_path / "ro", "1m") as root:
        with ExperienceStore(root / "s.db", dim=4) as store:
            store.record("t1", episodes=_episodes(0, 5))
        subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)
        yield root


def test_a_read_only_file_system_is_named_never_damage(read_only_fs, capsys):
    db = read_only_fs / "s.db"
    named = 0
    for argv in (["store", "stats", db], ["store", "cache", db],
                 ["store", "recover", db, "--out", read_only_fs / "n.db"]):
        assert main([str(a) for a in argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "read-only file system (EROFS)" in err, err
        assert "damaged SQLite store" not in err and "not a dyna" not in err
        named += 1
    with pytest.raises(StoreError) as e:
        ExperienceStore(db, dim=4)
    assert "read-only file system (EROFS)" in str(e.value)
    assert "not damaged" in str(e.value)
    assert named == 3
    assert sorted(os.listdir(read_only_fs)) == ["s.db"]


def test_a_wal_removed_while_it_is_checked_is_no_wal(crashed, tmp_path, monkeypatch):
    """The last connection of a live store removes its -wal while the check reads it: no
    -wal, never damage and never FileNotFoundError."""
    from dyna.store import wal_check

    db = _copy(crashed, tmp_path / "gone.db", damage=True)
    with pytest.raises(StoreDamagedError):
        check_wal(db)
    real = wal_check.read_wal

    def read_then_remove(source, *rest):
        report = real(source, *rest)
        os.unlink(f"{db}-wal")
        return report

    monkeypatch.setattr(wal_check, "read_wal", read_then_remove)
    assert check_wal(db) is None
    assert sorted(os.listdir(tmp_path)) == ["gone.db"]


def test_recover_beside_an_existing_wal_keeps_the_wal_and_leaves_its_index(crashed, tmp_path,
                                                                          capsys):
    """The -wal holds frames of the source: recover reads them through a -shm index, and
    keeps both (only a store without a -wal is left without companions)."""
    db = _copy(crashed, tmp_path / "w.db")
    wal_sha = _sha(f"{db}-wal")
    assert main(["store", "recover", str(db), "--out", str(tmp_path / "new.db")]) == 0
    capsys.readouterr()
    assert sorted(os.listdir(tmp_path)) == ["new.db", "w.db", "w.db-shm", "w.db-wal"]
    assert _sha(f"{db}-wal") == wal_sha


# ------------------------------------------------------------------ a large -wal, streamed
@pytest.fixture(scope="module")
def big_wal(tmp_path_factory):
    """A SQLite database and its 64 MiB -wal as a crash leaves them: 64 transactions of
    1 MiB of seeded random blobs each, never checkpointed."""
    folder = tmp_path_factory.mktemp("big")
    conn = sqlite3.connect(folder / "live.db", isolation_level=None)
    for pragma in ("page_size = 4096", "journal_mode = WAL", "wal_autocheckpoint = 0"):
        conn.execute(f"PRAGMA {pragma}")
    conn.execute("CREATE TABLE t (b BLOB)")
    blob = np.random.default_rng(64).bytes(2 ** 20)
    for _ in range(64):
        conn.execute("BEGIN")
        for j in range(16):
            conn.execute("INSERT INTO t VALUES (?)", (blob[j * 65536:(j + 1) * 65536],))
        conn.execute("COMMIT")
    shutil.copy(folder / "live.db", folder / "c.db")
    shutil.copy(folder / "live.db-wal", folder / "c.db-wal")
    conn.close()
    return folder / "c.db"


def _peak(fn):
    """``fn()``'s result (or the error it raised) and the peak of memory it allocated
    (bytes, as tracemalloc counts Python and numpy allocations)."""
    import tracemalloc

    tracemalloc.start()
    try:
        out = fn()
    except StoreDamagedError as exc:
        out = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return out, peak


def test_a_64_mib_wal_is_checked_in_bounded_memory_with_the_same_verdicts(big_wal, tmp_path):
    size = os.path.getsize(f"{big_wal}-wal")
    assert size >= 64 * 2 ** 20
    frames = (size - 32) // (24 + 4096)
    report, peak = _peak(lambda: check_wal(big_wal))
    assert (report.frames, report.valid, report.first_bad) == (frames, frames, None)
    assert peak < 8 * 2 ** 20
    whole = read_wal(Path(f"{big_wal}-wal").read_bytes())   # the bytes at once: the same
    assert repr(whole) == repr(report)

    db = _copy(big_wal, tmp_path / "bad.db", damage=True)
    err, peak = _peak(lambda: check_wal(db))
    assert isinstance(err, StoreDamagedError) and peak < 8 * 2 ** 20
    whole = read_wal(Path(f"{db}-wal").read_bytes())
    first_bad = (size // 2 - 32) // (24 + 4096)        # the frame the damage begins in
    assert (whole.frames, whole.first_bad, whole.valid) == (frames, first_bad, first_bad)
    # the 4 KiB of damage end in the next frame's header (its salts): lost are the rest
    assert whole.lost == frames - first_bad - 2 and whole.lost_commits == 32
    assert (f"bad.db-wal: frame {first_bad + 1} of {frames} fails its checksum, and "
            f"{whole.lost} frames written after it (32 commits)") in err.detail


# ------------------------------------------------------------------ a damaged header field
@pytest.fixture(scope="module")
def half_in_wal(tmp_path_factory):
    """250 rows checkpointed and 250 more in the -wal (5 commits), as a crash leaves them."""
    folder = tmp_path_factory.mktemp("half")
    store = ExperienceStore(folder / "s.db", dim=4)
    store.record("t1", episodes=_episodes(0, 250))
    store._db.checkpoint()
    for lo in range(250, 500, 50):
        store.record("t1", episodes=_episodes(lo, lo + 50))
    db = _copy(folder / "s.db", folder / "h.db")
    store.close()
    return db


@pytest.mark.parametrize("field,offset,value", [
    ("magic", 0, b"\x37\x7f\x06\x92"),             # not 0x377f0682 nor 0x377f0683
    ("page size (not a power of two)", 8, (4097).to_bytes(4, "big")),
    ("page size (a wrong power of two)", 8, (8192).to_bytes(4, "big")),
])
def test_a_damaged_magic_or_page_size_is_reported_as_damage(half_in_wal, tmp_path, capsys,
                                                            field, offset, value):
    """SQLite ignores a -wal whose magic number or page size is damaged (250 rows, status
    ok): the frames after it are found with the database's page size and reported."""
    db = _copy(half_in_wal, tmp_path / "h.db")
    data = bytearray(Path(f"{db}-wal").read_bytes())
    frames = (len(data) - 32) // (24 + 4096)
    assert data[offset:offset + 4] != value
    data[offset:offset + 4] = value
    Path(f"{db}-wal").write_bytes(data)
    assert _sqlite_rows(db) == 250
    sha = _sha(f"{db}-wal")
    for report in (read_wal(bytes(data)), read_wal(bytes(data), 4096)):
        assert (report.header_damaged, report.valid, report.first_bad) == (True, 0, 0)
        assert (report.frames, report.lost, report.lost_commits) == (frames, frames, 5)
    with pytest.raises(StoreDamagedError) as e:
        check_wal(db)
    assert main(["store", "stats", str(db)]) == 2
    err = capsys.readouterr().err
    line = (f"h.db-wal: the -wal header is damaged; {frames} frames after it (5 commits) may "
            "hold committed rows that SQLite would ignore silently")
    assert err.count("\n") == 1 and line in err and line in e.value.detail
    assert _sha(f"{db}-wal") == sha and sorted(os.listdir(tmp_path)) == [
        "h.db", "h.db-wal", "sqlite-view"]
