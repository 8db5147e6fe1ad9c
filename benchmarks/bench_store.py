"""Benchmarks: SQLite insert and store opening against bare sqlite3 peers.

Target: inserting a batch of records with :meth:`dyna.store.sqlite.SQLiteStore.append`
(numpy columns in, ids assigned, one transaction) takes at most 1.25x the time of the bare
peer: one ``executemany`` of the same rows, already built as Python tuples, in one
transaction on a connection with the same pragmas (WAL, synchronous=NORMAL), into the same
table. Both are measured in the same run, each a test and a pytest-benchmark entry of its
own (:mod:`conftest`); the ratio of the medians is printed and asserted in the test after
them.
Size: ``DYNA_BENCH_STORE_N`` records (default 1,000,000) of d = 64.

Target: opening an :class:`dyna.experience.ExperienceStore` on a file of those records (every
row loaded into the in-memory buffer: labels dictionary-encoded, features decoded, the stored
redacted JSON kept, quick_check run) takes at most 1.5x the time of the bare peer: one
``SELECT`` of the same columns in id order, ``fetchall``, and the columns made numpy arrays
(object arrays for text, float64, the feature BLOBs joined and decoded by ``np.frombuffer``).
The file is built once per module; each contestant is a test of its own, the ratio asserted
in the test after them.
"""

import os
import sqlite3

import numpy as np
import pytest

from dyna.experience import RECORD_SCHEMA, ExperienceStore
from dyna.store.sqlite import SQLiteStore

N = int(os.environ.get("DYNA_BENCH_STORE_N", 1_000_000))
DIM = 64
ROUNDS = 3
SCHEMA = [("tenant_id", "str"), ("task_type", "str"), ("action_type", "str"), ("outcome", "str"),
          ("reward", "float"), ("timestamp", "float"), ("run_id", "str"), ("task_id", "str"),
          ("features", "vector")]


def make_columns(n):
    rng = np.random.default_rng(0)
    tenants = np.array([f"tenant{i}" for i in range(10)], dtype=object)
    tasks = np.array([f"task{i}" for i in range(100)], dtype=object)
    return {"tenant_id": tenants[rng.integers(0, 10, n)],
            "task_type": tasks[rng.integers(0, 100, n)],
            "action_type": tasks[rng.integers(0, 5, n)],
            "outcome": np.where(rng.random(n) < 0.7, "success", "failure").astype(object),
            "reward": rng.standard_normal(n), "timestamp": 1.7e9 + np.arange(n, dtype=float),
            "run_id": tasks[rng.integers(0, 100, n)], "task_id": tasks[rng.integers(0, 100, n)],
            "features": rng.standard_normal((n, DIM)).astype(np.float32)}


def fresh(path):
    for s in ("", "-wal", "-shm"):
        if os.path.exists(str(path) + s):
            os.unlink(str(path) + s)
    return SQLiteStore(path, SCHEMA, DIM)


@pytest.fixture(scope="module")
def insert_rows():
    """The columns, the same rows as Python tuples (features as bytes), and the peer's SQL."""
    cols = make_columns(N)
    w = DIM * 4
    raw = cols["features"].tobytes()
    names = [n for n, _ in SCHEMA]
    rows = list(zip(range(N), *[cols[n].tolist() for n in names[:-1]],
                    [raw[i:i + w] for i in range(0, N * w, w)]))
    sql = (f"INSERT INTO episodes (id, {', '.join(names)}) "
           f"VALUES ({', '.join('?' * (len(names) + 1))})")
    return cols, rows, sql


@pytest.mark.benchmark(group=f"SQLite insert of {N} records (d={DIM})")
@pytest.mark.parametrize("contestant", ["dyna", "bare executemany"])
def test_sqlite_insert(benchmark, insert_rows, tmp_path, contestant):
    cols, rows, sql = insert_rows
    path = tmp_path / "b.db"
    stores = []

    def fresh_store():
        if stores:
            stores[-1].close()
        stores.append(fresh(path))
        return (stores[-1],), {}

    def ours(store):
        ids = store.append(cols)
        assert ids.shape == (N,)

    def fresh_connection():
        fresh(path).close()
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return (conn,), {}

    def peer(conn):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, rows)
        conn.execute("COMMIT")

    if contestant == "dyna":
        benchmark.pedantic(ours, setup=fresh_store, rounds=ROUNDS)
        assert stores[-1].count() == N
        stores[-1].close()
    else:
        benchmark.pedantic(peer, setup=fresh_connection, teardown=lambda conn: conn.close(),
                           rounds=ROUNDS)


@pytest.mark.ratio(of="test_sqlite_insert")
def test_sqlite_insert_within_1_25x_of_bare_executemany(medians):
    print(f"    dyna: {N / medians['dyna']:,.0f} records/s")
    assert medians.ratio("dyna", "bare executemany") <= 1.25


@pytest.fixture(scope="module")
def store_file(tmp_path_factory):
    """A store of N records (d = 64) with two redacted JSON dict columns, built once."""
    path = tmp_path_factory.mktemp("open") / "open.db"
    st = SQLiteStore(path, RECORD_SCHEMA, DIM)
    step = 100_000
    for start in range(0, N, step):
        cols = make_columns(min(step, N - start))
        ids = range(start, start + len(cols["reward"]))
        cols["timestamp"] = cols["timestamp"] + start
        cols["state_before"] = [f'{{"pos":{i},"x":[1,2.5]}}' for i in ids]
        cols["metadata"] = [f'{{"note":"n{i}","api_key":"[REDACTED]"}}' for i in ids]
        st.append(cols)
    st.checkpoint()
    st.close()
    return path


@pytest.mark.benchmark(group=f"open a store of {N} records (d={DIM})")
@pytest.mark.parametrize("contestant", ["dyna", "bare select"])
def test_open_store(benchmark, store_file, contestant):
    names = ["id"] + [n for n, _ in RECORD_SCHEMA]
    kinds = ["int"] + [k for _, k in RECORD_SCHEMA]
    sql = f"SELECT {', '.join(names)} FROM episodes ORDER BY id"

    def peer():
        conn = sqlite3.connect(store_file)
        cols = list(zip(*conn.execute(sql).fetchall()))
        conn.close()
        out = {}
        for name, kind, vals in zip(names, kinds, cols):
            if kind == "vector":
                out[name] = np.frombuffer(b"".join(vals), np.float32).reshape(-1, DIM)
            elif kind in ("int", "float"):
                out[name] = np.array(vals, dtype=np.int64 if kind == "int" else np.float64)
            else:
                out[name] = np.empty(len(vals), dtype=object)
                out[name][:] = vals
        assert out["features"].shape == (N, DIM)

    def ours():
        s = ExperienceStore(store_file, dim=DIM)
        assert len(s) == N and s.persistence_status == "ok"
        s.close()

    benchmark.pedantic(ours if contestant == "dyna" else peer, rounds=3, warmup_rounds=1)


@pytest.mark.ratio(of="test_open_store")
def test_open_store_within_1_5x_of_bare_select(medians):
    assert medians.ratio("dyna", "bare select") <= 1.5
