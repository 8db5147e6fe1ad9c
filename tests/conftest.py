"""Shared fixtures: the PostgreSQL cluster of the store tests and the backend parameter.

``pg_dsn`` (session): ``DYNA_TEST_POSTGRES_DSN`` when set (``.ci/run`` starts one cluster for
the whole run), else a throw-away cluster started here (:mod:`pg_cluster`) and stopped at
the end of the session; the tests that need it are skipped, with the reason, when neither is
available. ``pg_store_dsn``: a DSN whose ``search_path`` is a fresh schema of its own, so
every test starts from an empty store at the cost of one ``CREATE SCHEMA``.
``store_target``: parametrises a store test over the three backends (``memory``,
``sqlite``, ``postgresql``), returning what :class:`dyna.experience.ExperienceStore` takes;
``persistent_target`` over the two persistent ones.
``tables_only()``: a context in which an experiment run writes its tables and
``manifest.json`` but draws no plots and writes no report, for the runs a test reads only
the tables of (rendering is most of a small run's time).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import urllib.parse

import pytest

import pg_cluster

BACKENDS = ("memory", "sqlite", "postgresql")
PERSISTENT = ("sqlite", "postgresql")
_schemas = itertools.count()


@pytest.fixture
def tau_bench_formats():
    """Redaction with the tau-bench id formats of the trajectories importer
    (:data:`dyna.loops.trajectories.TAU_BENCH_FORMATS`: the general formats and tau-bench's
    user and payment-method ids) for the test; the secret corpus holds such ids."""
    from dyna.loops.trajectories import TAU_BENCH_FORMATS
    from dyna.redact import redaction_formats
    with redaction_formats(TAU_BENCH_FORMATS):
        yield TAU_BENCH_FORMATS


@contextlib.contextmanager
def tables_only():
    """Within: :func:`dyna.experiment.runner.run_experiment` writes the tables and
    ``manifest.json`` of its output folder (the same table bytes; no ``output_time_s`` and
    ``wall_time_s`` in the manifest's timing) but no ``plots/`` and no ``report.md``: the
    kind's render is skipped."""
    from dyna.experiment import runner

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "render_output", lambda *args, **kwargs: None)
        yield


@pytest.fixture(scope="session")
def pg_dsn():
    """Superuser DSN of a PostgreSQL server for the tests (see the module notes)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")
    with pg_cluster.running() as dsn:
        if dsn is None:
            pytest.skip(pg_cluster.NO_SERVER)
        if dsn.startswith("cannot start"):
            pytest.skip(dsn)
        yield dsn


def with_schema(dsn: str, schema: str) -> str:
    """``dsn`` with its ``search_path`` set to ``schema`` (a libpq ``options`` parameter)."""
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options={urllib.parse.quote(f'-csearch_path={schema}')}"


@pytest.fixture
def pg_schema(pg_dsn):
    """A fresh, empty schema (name) on the test server, dropped after the test."""
    import psycopg

    name = f"t{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    yield name
    _drop_schema(pg_dsn, name)


def _drop_schema(dsn: str, name: str) -> None:
    """Drop a test schema; a store a test left open cannot hang the teardown (lock_timeout:
    the schema then stays, on a throw-away server)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '5s'")
        try:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        except psycopg.errors.LockNotAvailable:
            pass


@pytest.fixture
def pg_store_dsn(pg_dsn, pg_schema):
    """A DSN whose tables go to a fresh schema of this test."""
    return with_schema(pg_dsn, pg_schema)


@pytest.fixture(params=BACKENDS)
def store_target(request, tmp_path):
    """What ExperienceStore takes for each backend: ``""``, a file, a PostgreSQL DSN."""
    if request.param == "memory":
        return ""
    if request.param == "sqlite":
        return tmp_path / "x.db"
    return request.getfixturevalue("pg_store_dsn")


@pytest.fixture(params=PERSISTENT)
def persistent_target(request, tmp_path):
    """The persistent backends only: a SQLite file or a PostgreSQL DSN (fresh each test)."""
    if request.param == "sqlite":
        return tmp_path / "x.db"
    return request.getfixturevalue("pg_store_dsn")


def stored_rows(store, tenant_id: str | None = None) -> int:
    """Rows the store's persistence holds (of one tenant); in memory, the buffer's rows."""
    if store._db is None:
        return len(store) if tenant_id is None else store.count_matching(tenant_id)
    return store._db.count(None if tenant_id is None else {"tenant_id": tenant_id})


def block_writes(store, on: bool) -> None:
    """Make the store's connection refuse (or take again) every write, as a read-only file
    or a read-only server would."""
    if getattr(store._db, "backend", "sqlite") == "postgresql":
        store._db._conn.execute(f"SET default_transaction_read_only = {'on' if on else 'off'}")
    else:
        store._db._conn.execute(f"PRAGMA query_only = {'ON' if on else 'OFF'}")


def open_backend(target, schema, dim, **kw):
    """The store-level backend for ``target``: :class:`dyna.store.postgres.PostgresStore`
    for a DSN, else :class:`dyna.store.sqlite.SQLiteStore` (``""``: in memory)."""
    from dyna.store.postgres import PostgresStore, is_dsn
    from dyna.store.sqlite import SQLiteStore

    target = str(target)
    return (PostgresStore if is_dsn(target) else SQLiteStore)(target, schema, dim, **kw)


@pytest.fixture
def second_target(request, persistent_target):
    """Another empty store of the same backend as ``persistent_target`` (a second file, or a
    second fresh schema dropped after the test)."""
    if not isinstance(persistent_target, str):
        return persistent_target.with_name("second.db")
    import psycopg

    dsn = request.getfixturevalue("pg_dsn")
    name = f"t{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")

    request.addfinalizer(lambda: _drop_schema(dsn, name))
    return with_schema(dsn, name)


def stored_table(target) -> list[tuple]:
    """Every stored row of a store, as its backend returns it (id order, all tenants)."""
    if isinstance(target, str):
        import psycopg
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("SELECT set_config('dyna.all_tenants', 'on', false)")
            return conn.cursor(binary=True).execute("SELECT * FROM episodes ORDER BY id"
                                                    ).fetchall()
    import sqlite3
    con = sqlite3.connect(target)
    try:
        return con.execute("SELECT * FROM episodes ORDER BY id").fetchall()
    finally:
        con.close()
