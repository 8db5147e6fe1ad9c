"""Benchmark: PostgreSQL batched insert against a bare COPY of the same rows.

Target: :meth:`dyna.store.postgres.PostgresStore.append` of a batch (numpy columns in, the
id counter's row locked, ids assigned, vectors packed, one binary ``COPY``, the counter
moved, one transaction) takes at most 1.5x the time of the bare peer: one ``COPY ... FROM
STDIN (FORMAT BINARY)`` of the same rows, already built as Python tuples (features already
bytes), into a table of the same columns and indexes, in one transaction on its own
connection. Both tables are emptied (``TRUNCATE``, outside the timing) before every call;
each contestant is a test and a pytest-benchmark entry of its own (:mod:`conftest`), the
ratio of medians printed and asserted in the test after them.

Also measured and asserted in the same run: the store opened as a role that row-level
security binds (PostgreSQL refuses ``COPY FROM`` there, so the batch goes through a
temporary staging table and one ``INSERT ... SELECT``) against the same bare COPY.
Measured on the 2-core machine (100,000 rows, two runs): 1.10-1.21x direct, 1.28-1.36x
RLS-bound.

Size: ``DYNA_BENCH_PG_N`` rows (default 100,000) of d = 64. The server is the one in
``DYNA_TEST_POSTGRES_DSN`` or a throw-away cluster started here (skipped without binaries).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import pg_cluster  # noqa: E402

from bench_store import DIM, make_columns as store_columns  # noqa: E402
from dyna.store.postgres import PG_TYPES, PostgresStore  # noqa: E402

N = int(os.environ.get("DYNA_BENCH_PG_N", 100_000))
ROUNDS = 5
SCHEMA = [("tenant_id", "str"), ("task_type", "str"), ("action_type", "str"), ("outcome", "str"),
          ("reward", "float"), ("timestamp", "float"), ("run_id", "str"), ("task_id", "str"),
          ("metadata", "json"), ("features", "vector")]
COPY_TYPES = ["int8"] + [{"bytea": "bytea", "float8": "float8", "text": "text"}[PG_TYPES[k]]
                         for _, k in SCHEMA]


def make_columns(n):
    """bench_store's columns (the SQLite insert benchmark's rows) plus a JSON text column."""
    return store_columns(n) | {"metadata": np.array(
        [f'{{"step":{i},"note":"n{i % 7}"}}' for i in range(n)], dtype=object)}


@pytest.fixture(scope="module")
def server():
    with pg_cluster.running() as dsn:
        if dsn is None:
            pytest.skip(pg_cluster.NO_SERVER)
        yield dsn


@pytest.fixture(scope="module")
def stores(server):
    """An admin connection, the superuser's store, the RLS-bound role's store, the peer's
    table, and the columns; the schemas are dropped afterwards."""
    admin = psycopg.connect(server, autocommit=True)
    admin.execute("DROP SCHEMA IF EXISTS bench_pg, bench_pg_rls CASCADE")
    admin.execute("CREATE SCHEMA bench_pg")
    if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = 'dyna_bench'").fetchone() is None:
        admin.execute("CREATE ROLE dyna_bench LOGIN NOSUPERUSER NOBYPASSRLS")
    admin.execute("GRANT ALL ON SCHEMA bench_pg TO dyna_bench")
    opts = "?options=-csearch_path%3Dbench_pg"
    store = PostgresStore(server + opts, SCHEMA, DIM)  # superuser: straight COPY
    bound_dsn = server.replace("postgres@", "dyna_bench@") + opts
    admin.execute("SET search_path = bench_pg")
    # the RLS-bound role writes into a second store of its own (same columns)
    admin.execute("CREATE SCHEMA bench_pg_rls AUTHORIZATION dyna_bench")
    bound = PostgresStore(bound_dsn.replace("bench_pg", "bench_pg_rls"), SCHEMA, DIM)
    assert (bound.stats()["isolation"], store.stats()["isolation"]) == ("advisory", "none")
    admin.execute("CREATE TABLE peer (LIKE episodes INCLUDING INDEXES)")
    peer_conn = psycopg.connect(server + opts)
    yield {"admin": admin, "dyna": store, "dyna RLS-bound": bound, "peer": peer_conn,
           "cols": make_columns(N)}
    store.close()
    bound.close()
    peer_conn.close()
    admin.execute("DROP SCHEMA bench_pg CASCADE")
    admin.execute("DROP SCHEMA bench_pg_rls CASCADE")
    admin.close()


def _bare_copy(admin, conn, cols):
    """The peer: TRUNCATE (untimed, as setup) and one binary COPY of the rows as tuples."""
    names = ", ".join(["id"] + [f'"{n}"' for n, _ in SCHEMA])
    w = DIM * 4
    raw = cols["features"].astype("<f4").tobytes()
    rows = list(zip(range(N), *[cols[n].tolist() for n, k in SCHEMA if k != "vector"],
                    [raw[i:i + w] for i in range(0, N * w, w)]))

    def empty():
        admin.execute("TRUNCATE bench_pg.peer")

    def copy():
        with conn.transaction(), conn.cursor().copy(
                f"COPY peer ({names}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(COPY_TYPES)
            for row in rows:
                cp.write_row(row)
    return empty, copy


@pytest.mark.benchmark(group=f"PostgreSQL append of {N:,} rows (d={DIM}) vs bare COPY")
@pytest.mark.parametrize("contestant", ["dyna", "dyna RLS-bound", "bare copy"])
def test_postgres_batched_insert(stores, benchmark, contestant):
    admin, cols = stores["admin"], stores["cols"]
    if contestant == "bare copy":
        empty, copy = _bare_copy(admin, stores["peer"], cols)
        benchmark.pedantic(copy, setup=empty, rounds=ROUNDS, warmup_rounds=1)
        assert admin.execute("SELECT count(*) FROM bench_pg.peer").fetchone()[0] == N
        return
    store = stores[contestant]

    def empty():  # the stores' tables, before each timed call
        admin.execute("TRUNCATE bench_pg.episodes, bench_pg_rls.episodes")

    benchmark.pedantic(lambda: store.append(cols), setup=empty, rounds=ROUNDS, warmup_rounds=1)
    empty()  # once more, untimed: the store holds the batch, bit for bit
    store.append(cols)
    assert store.count() == N
    back = store.read(columns=["reward", "features"])
    assert back["reward"].tobytes() == cols["reward"].tobytes()
    assert back["features"].tobytes() == cols["features"].tobytes()


@pytest.mark.ratio(of="test_postgres_batched_insert")
def test_postgres_batched_insert_within_1_5x_of_bare_copy(medians):
    assert medians.ratio("dyna", "bare copy") <= 1.5
    assert medians.ratio("dyna RLS-bound", "bare copy") <= 1.5
