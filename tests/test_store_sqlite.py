"""Tests of dyna.store.sqlite: transactions, concurrency, crash safety, status, space
(PERS-01, PERS-05)."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from conftest import open_backend
from dyna.errors import (ConfigError, MissingFileError, NotAStoreError, StoreBusyError,
                         StoreDamagedError, StoreError, StoreReadOnlyError)
from dyna.store import sqlite_file
from dyna.store.sqlite import SQLiteStore

SCHEMA = [("tenant_id", "str"), ("task_type", "str"), ("outcome", "str"), ("reward", "float"),
          ("timestamp", "float"), ("run_id", "str"), ("metadata", "json"),
          ("features", "vector")]
DIM = 4


def batch(n, start=0, tenant="t1", dim=DIM, meta=None):
    i = np.arange(start, start + n)
    return {"tenant_id": [tenant] * n, "task_type": [f"task{j % 3}" for j in i],
            "outcome": ["success" if j % 2 else "failure" for j in i],
            "reward": i * 0.5, "timestamp": i.astype(float),
            "run_id": [f"r{j // 10}" for j in i],
            "metadata": [meta if meta is not None else f'{{"i": {j}}}' for j in i],
            "features": np.tile(i[:, None].astype(np.float32), (1, dim))}


def test_append_read_round_trip_and_ids(persistent_target):
    st = open_backend(persistent_target, SCHEMA, DIM)
    assert st.status == "missing"
    ids = st.append(batch(5))
    assert ids.tolist() == [0, 1, 2, 3, 4] and st.status == "ok"
    ids2 = st.append(batch(3, start=5))
    assert ids2.tolist() == [5, 6, 7]
    cols = st.read()
    b = batch(8)
    assert cols["id"].tolist() == list(range(8))
    assert cols["tenant_id"].tolist() == b["tenant_id"]
    np.testing.assert_array_equal(cols["reward"], b["reward"])
    np.testing.assert_array_equal(cols["features"], b["features"])
    assert cols["features"].dtype == np.float32 and cols["features"].shape == (8, DIM)
    assert cols["metadata"][3] == '{"i": 3}'
    st.close()
    with open_backend(persistent_target, SCHEMA, DIM) as st:
        assert st.status == "ok" and st.count() == 8
        # deleted ids are never reused
        st.delete({"id": [6, 7]})
        assert st.append(batch(1)).tolist() == [8]
        version = sys.modules[type(st).__module__].SCHEMA_VERSION
        assert st.stats()["schema_version"] == version


def test_wal_and_busy_timeout_configured(tmp_path):
    st = SQLiteStore(tmp_path / "s.db", SCHEMA, DIM)
    assert st._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert st._conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000


def test_exact_delete_never_prefix(store_target):
    with open_backend(store_target, SCHEMA, DIM) as st:
        st.append(batch(4, tenant="t1"))
        st.append(batch(4, tenant="t10"))
        st.append(batch(4, tenant="t%"))
        assert st.delete({"tenant_id": "t1"}) == 4
        assert st.delete({"tenant_id": "t_"}) == 0
        assert sorted(set(st.read()["tenant_id"])) == ["t%", "t10"]
        assert st.delete({"tenant_id": "t%", "run_id": "r0"}) == 4
        with pytest.raises(ConfigError):
            st.delete({})
        with pytest.raises(ConfigError) as e:
            st.delete({"metadata": "x"})
        assert e.value.field == "metadata"


def test_bad_column_writes_nothing(store_target):
    with open_backend(store_target, SCHEMA, DIM) as st:
        b = batch(3)
        b["features"] = np.zeros((3, DIM + 1), np.float32)
        with pytest.raises(ConfigError) as e:
            st.append(b)
        assert e.value.field == "features"
        assert st.count() == 0


def test_pers01_second_connection_waits_for_lock(tmp_path):
    path = tmp_path / "s.db"
    st = SQLiteStore(path, SCHEMA, DIM)
    st.append(batch(1, start=1))
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE meta SET value = value WHERE key = 'dim'")

    def release():
        time.sleep(0.5)
        holder.execute("COMMIT")

    t = threading.Thread(target=release)
    t0 = time.perf_counter()
    t.start()
    st.append(batch(1, start=3))
    waited = time.perf_counter() - t0
    t.join()
    assert waited >= 0.4
    assert st.read()["timestamp"].tolist() == [1.0, 3.0]


def test_pers01_lock_longer_than_timeout_is_retryable_error(tmp_path):
    path = tmp_path / "s.db"
    SQLiteStore(path, SCHEMA, DIM).close()
    st = SQLiteStore(path, SCHEMA, DIM, timeout=0.1)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreBusyError) as e:
        st.append(batch(5))
    assert isinstance(e.value, TimeoutError) and "retry" in str(e.value)
    holder.execute("ROLLBACK")
    assert st.count() == 0  # nothing partial
    st.append(batch(5))  # retry succeeds
    assert st.count() == 5


WRITER = textwrap.dedent("""
    import sys, time, numpy as np
    sys.path.insert(0, {tests!r})
    from test_store_sqlite import SCHEMA, DIM, batch
    from dyna.store.sqlite import SQLiteStore
    path, tag = sys.argv[1], sys.argv[2]
    n_batches, size, go = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    st = SQLiteStore(path, SCHEMA, DIM)
    while time.time() < go:
        time.sleep(0.001)
    for k in range(n_batches):
        print("begin", k, flush=True)
        st.append(batch(size, start=k * size, tenant=tag))
        print("committed", k, flush=True)
""")


def _spawn(script, path, tag, n_batches, size, go):
    return subprocess.Popen([sys.executable, "-c", script, str(path), tag, str(n_batches),
                             str(size), str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.parametrize("n_proc,n_batches,size", [(2, 50, 1), (4, 25, 20)])
def test_pers01_concurrent_processes_lose_nothing(tmp_path, n_proc, n_batches, size):
    path = tmp_path / "s.db"
    SQLiteStore(path, SCHEMA, DIM).close()
    script = WRITER.format(tests=os.path.dirname(__file__))
    go = time.time() + 1.5  # all start writing at the same moment
    procs = [_spawn(script, path, f"p{i}", n_batches, size, go) for i in range(n_proc)]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "locked" not in err
    cols = SQLiteStore(path, SCHEMA, DIM).read()
    assert len(cols["id"]) == n_proc * n_batches * size
    assert len(set(cols["id"].tolist())) == len(cols["id"])
    for i in range(n_proc):
        mine = cols["tenant_id"] == f"p{i}"
        assert sorted(cols["timestamp"][mine].tolist()) == list(map(float, range(n_batches * size)))


def test_pers01_sigkill_mid_batch_keeps_earlier_batches(tmp_path):
    path = tmp_path / "s.db"
    SQLiteStore(path, SCHEMA, DIM).close()
    script = WRITER.format(tests=os.path.dirname(__file__))
    size = 100_000
    p = _spawn(script, path, "k", 100, size, 0.0)
    committed = -1
    for line in p.stdout:
        word, k = line.split()
        if word == "committed":
            committed = int(k)
        if word == "begin" and int(k) == 3:
            time.sleep(0.25)  # inside the fourth batch
            p.send_signal(signal.SIGKILL)
            break
    p.communicate(timeout=30)  # reads to the end and closes the pipes
    assert p.returncode == -signal.SIGKILL
    st = SQLiteStore(path, SCHEMA, DIM)
    assert st.status == "ok"
    n = st.count()
    assert committed == 2 and n in (3 * size, 4 * size)  # the last batch all or nothing
    cols = st.read(columns=["timestamp", "features"])
    np.testing.assert_array_equal(cols["timestamp"], np.arange(n, dtype=float))
    np.testing.assert_array_equal(cols["features"][:, 0], cols["timestamp"].astype(np.float32))
    assert st._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_pers05_prune_then_vacuum_reclaims_space(tmp_path):
    path = tmp_path / "s.db"
    st = SQLiteStore(path, SCHEMA, DIM)
    st.append(batch(2000, meta="x" * 2048))
    st.checkpoint()
    before = st.file_bytes()
    pages = st.stats()["page_count"]
    assert before > 8_000_000
    assert st.prune(1800.0) == 1800
    s = st.stats()
    assert s["rows"] == 200 and s["page_count"] == pages
    assert s["freelist_count"] >= 1800
    out = st.vacuum()
    assert out["freelist_count"] == 0
    assert st.stats()["freelist_count"] == 0
    assert out["bytes_after"] < 0.15 * before and os.path.getsize(path) < 0.15 * before
    cols = st.read()
    assert cols["timestamp"].tolist() == list(map(float, range(1800, 2000)))
    assert set(cols["metadata"].tolist()) == {"x" * 2048}


def test_vacuum_with_open_transaction_commits_first(tmp_path):
    st = SQLiteStore(tmp_path / "s.db", SCHEMA, DIM)
    st.append(batch(10))
    st._conn.execute("BEGIN")
    st.vacuum()  # must not raise "cannot VACUUM from within a transaction"
    assert st.count() == 10


def test_keep_newest_per_group_and_prune_filter(store_target):
    with open_backend(store_target, SCHEMA, DIM) as st:
        st.append(batch(30))
        # task0/1/2 each have 10 rows; keep newest 2 of each
        assert st.keep_newest(2) == 24
        cols = st.read()
        assert sorted(cols["timestamp"].tolist()) == [24.0, 25.0, 26.0, 27.0, 28.0, 29.0]
        st.append(batch(5, start=100, tenant="t2"))
        assert st.prune(1000.0, where={"tenant_id": "t2"}) == 5
        assert st.count() == 6


def _listing(path):
    return sorted(p.name for p in path.parent.iterdir())


def test_not_a_database_is_refused_not_moved(tmp_path):
    path = tmp_path / "bad.db"
    path.write_bytes(b"this is not a database" * 200)
    before = _listing(path)
    with pytest.raises(NotAStoreError, match="bad.db: not a dyna experience store"):
        SQLiteStore(path, SCHEMA, DIM)
    assert _listing(path) == before
    assert path.read_bytes().startswith(b"this is not")


def _scribbled_db(tmp_path):
    """A real store file whose middle pages are overwritten with 0xff."""
    path = tmp_path / "t.db"
    st = SQLiteStore(path, SCHEMA, DIM)
    st.append(batch(3000, meta="y" * 500))
    st.checkpoint()
    st.close()
    with open(path, "r+b") as fh:
        fh.seek(os.path.getsize(path) // 2)
        fh.write(b"\xff" * 20000)
    return path


def test_corrupt_pages_found_on_open_raise_typed_error(tmp_path):
    path = _scribbled_db(tmp_path)
    data = path.read_bytes()
    for read_only in (False, True):
        with pytest.raises(StoreDamagedError, match="quick_check"):
            SQLiteStore(path, SCHEMA, DIM, read_only=read_only)
    assert path.read_bytes() == data
    assert not [n for n in _listing(path) if ".corrupt" in n]


def test_corruption_found_on_read_raises_and_keeps_file(tmp_path):
    path = _scribbled_db(tmp_path)
    st = SQLiteStore(path, SCHEMA, DIM, verify=False)
    with pytest.raises(StoreDamagedError, match="integrity_check"):
        st.read()
    assert st.status == "ok" and os.path.exists(path)
    st.close()


def test_read_only_open_never_creates_or_writes(tmp_path):
    with pytest.raises(MissingFileError):
        SQLiteStore(tmp_path / "none.db", SCHEMA, DIM, read_only=True)
    assert not list(tmp_path.iterdir())
    path = tmp_path / "s.db"
    with SQLiteStore(path, SCHEMA, DIM) as st:
        st.append(batch(3))
        st.checkpoint()
    data = path.read_bytes()
    st = SQLiteStore(path, SCHEMA, DIM, read_only=True)
    assert st.count() == 3 and st.read()["id"].tolist() == [0, 1, 2]
    with pytest.raises(StoreReadOnlyError):
        st.append(batch(1))
    with pytest.raises(StoreReadOnlyError):
        st.vacuum()
    st.close()
    assert path.read_bytes() == data


def test_foreign_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                       "INSERT INTO meta VALUES ('dim', '4');"
                       "CREATE TABLE episodes (id INTEGER PRIMARY KEY, x);")
    conn.close()
    data = path.read_bytes()
    for read_only in (False, True):
        with pytest.raises(NotAStoreError, match="app.db"):
            SQLiteStore(path, SCHEMA, DIM, read_only=read_only)
    assert path.read_bytes() == data and _listing(path) == ["app.db"]
    # a dyna store with a table someone else added is refused too
    other = tmp_path / "s.db"
    SQLiteStore(other, SCHEMA, DIM).close()
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE theirs (x)")
    conn.close()
    with pytest.raises(NotAStoreError, match="theirs"):
        SQLiteStore(other, SCHEMA, DIM)


def test_write_degraded_on_readonly_failure(tmp_path):
    st = SQLiteStore(tmp_path / "s.db", SCHEMA, DIM)
    st.append(batch(1))
    st._conn.execute("PRAGMA query_only = ON")
    with pytest.raises(StoreError) as e:
        st.append(batch(2))
    assert not isinstance(e.value, StoreBusyError)
    assert st.status == "write_degraded"
    st._conn.execute("PRAGMA query_only = OFF")
    st.append(batch(1))
    assert st.status == "ok" and st.count() == 2


def test_migration_path_and_newer_schema_refused(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    SQLiteStore(path, SCHEMA, DIM).append(batch(2))
    ran = []
    now = sqlite_file.SCHEMA_VERSION

    def next_step(conn, schema, dim):
        conn.execute("ALTER TABLE episodes ADD COLUMN extra TEXT")
        ran.append(dim)

    monkeypatch.setattr(sqlite_file, "SCHEMA_VERSION", now + 1)
    monkeypatch.setitem(sqlite_file.MIGRATIONS, now, next_step)
    st = SQLiteStore(path, SCHEMA, DIM)
    assert ran == [DIM] and st.schema_version() == now + 1 and st.count() == 2
    st.close()
    monkeypatch.setattr(sqlite_file, "SCHEMA_VERSION", now)
    with pytest.raises(StoreError, match="newer"):
        SQLiteStore(path, SCHEMA, DIM)


def test_dim_mismatch_and_bad_schema(tmp_path):
    SQLiteStore(tmp_path / "d.db", SCHEMA, DIM).close()
    with pytest.raises(ConfigError) as e:
        SQLiteStore(tmp_path / "d.db", SCHEMA, DIM + 1)
    assert e.value.field == "dim"
    with pytest.raises(ConfigError):
        SQLiteStore("", [("tenant_id", "str")], DIM)
    with pytest.raises(ConfigError):
        SQLiteStore("", SCHEMA + [("x", "blob")], DIM)
