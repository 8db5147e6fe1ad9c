"""Tests of dyna.store.postgres: lossless values, row-level security, concurrent writers from
many processes, redaction before the insert, the DSN's password kept out of every text."""

import multiprocessing
import secrets
import traceback

import numpy as np
import pytest

from conftest import with_schema
from dyna.errors import (ConfigError, MissingFileError, NotAStoreError, StoreBusyError,
                         StoreError, StoreReadOnlyError, StoreWriteError)
from dyna.experience import RECORD_SCHEMA, ExperienceStore
from dyna.store.sqlite import SQLiteStore

psycopg = pytest.importorskip("psycopg")
from dyna.store.postgres import PostgresStore, display_dsn, stored_dim  # noqa: E402
from dyna.store.postgres_schema import _VISIBLE, FUNCTIONS, POLICY  # noqa: E402

SCHEMA = [("tenant_id", "str"), ("task_type", "str"), ("outcome", "str"), ("reward", "float"),
          ("timestamp", "float"), ("run_id", "str"), ("metadata", "json"),
          ("features", "vector")]
DIM = 4


def batch(n, tenant="t1", start=0):
    i = np.arange(start, start + n)
    return {"tenant_id": [tenant] * n, "task_type": [f"task{j % 3}" for j in i],
            "outcome": ["success" if j % 2 else "failure" for j in i],
            "reward": i * 0.1, "timestamp": i.astype(float), "run_id": [f"r{j // 4}" for j in i],
            "metadata": [f'{{"i": {j}}}' for j in i],
            "features": np.tile(i[:, None].astype(np.float32) / 3, (1, DIM))}


def test_values_round_trip_bit_for_bit_and_ids_never_reused(pg_store_dsn):
    st = PostgresStore(pg_store_dsn, SCHEMA, DIM)
    assert st.status == "missing"
    rewards = np.array([0.1, 1 / 3, -0.0, 5e-324, 1.7976931348623157e308, -2.5e-10, 7.0])
    feats = np.random.default_rng(0).standard_normal((7, DIM)).astype(np.float32)
    feats[0, 0] = np.float32(1e-45)  # a float32 subnormal
    b = batch(7) | {"reward": rewards, "features": feats, "run_id": [None] * 7,
                    "metadata": ['{"k":"é ☃ \\u0000"}'] + [None] * 6}
    assert st.append(b).tolist() == list(range(7)) and st.status == "ok"
    cols = st.read(categories=["task_type"])
    assert cols["reward"].tobytes() == rewards.tobytes()  # -0.0 and the subnormal kept
    assert cols["features"].dtype == np.float32 and cols["features"].tobytes() == feats.tobytes()
    assert cols["metadata"][0] == '{"k":"é ☃ \\u0000"}' and cols["metadata"][1] is None
    assert cols["run_id"].tolist() == [None] * 7
    codes, labels = cols["task_type"]
    assert labels == ["task0", "task1", "task2"] and codes.tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert st.delete({"id": [5, 6]}) == 2 and st.generation() == 1
    assert st.append(batch(1)).tolist() == [7]  # deleted ids are never given again
    assert st.read(after_id=4)["id"].tolist() == [7] and st.max_id() == 7
    # an explicit id below the counter is a rewrite for live readers: the generation moves
    assert st.append(batch(1), ids=[6]).tolist() == [6] and st.generation() == 2
    assert st.next_id() == 8 and st.delete({"id": 6}) == 1 and st.generation() == 3
    assert st.stats()["schema_version"] == 3 and st.stats()["rows"] == 6
    # the fast single write: one statement, the next id, the same bits back
    vec = np.array([0.1, -0.0, 3.5, 1e-40], dtype=np.float32)
    row = ["t2", "task9", "success", 1 / 7, 12.5, None, '{"x":1}', vec.tobytes()]
    assert st.append_row(row) == 8 and st.append_row(row) == 9
    back = st.read({"id": 8})
    assert back["reward"][0] == 1 / 7 and back["features"][0].tobytes() == vec.tobytes()
    assert back["tenant_id"].tolist() == ["t2"] and back["run_id"].tolist() == [None]
    with pytest.raises(ConfigError) as e:
        st.append_row(row[:-1] + [b"short"])
    assert e.value.field == "features" and st.next_id() == 10
    st.close()


def test_exact_filters_prune_keep_newest_summary(pg_store_dsn):
    st = PostgresStore(pg_store_dsn, SCHEMA, DIM)
    st.append(batch(6, "t1"))
    st.append(batch(6, "t10", start=6))
    st.append(batch(3, "t%", start=12))
    assert st.count({"tenant_id": "t_"}) == 0 and st.count({"tenant_id": "t1"}) == 6
    assert st.delete({"tenant_id": "t%", "run_id": ["r3", "r9"]}) == 3
    with pytest.raises(ConfigError) as e:
        st.delete({"metadata": "x"})
    assert e.value.field == "metadata"
    # timestamps 0..5 (t1), 6..11 (t10): prune t10 below 8 -> ids 6, 7
    assert st.prune(8.0, where={"tenant_id": "t10"}) == 2
    # newest 1 per (tenant, task): t1 keeps ids 3, 4, 5; t10 keeps 9, 10, 11
    assert st.keep_newest(1) == 3 + 1
    assert st.read()["id"].tolist() == [3, 4, 5, 9, 10, 11]
    assert st.summary() == {"n_records": 6, "n_tenants": 2, "n_task_types": 3,
                            "oldest": 3.0, "newest": 11.0}
    # 8 (id) + 8 + 8 + 4 * DIM + len(tenant) + len(task) + len(outcome) + len(run) + len(json)
    t1_task0 = st.consumption({"tenant_id": "t1", "task_type": "task0"})
    assert t1_task0 == [{"tenant_id": "t1", "task_type": "task0", "records": 1,
                         "bytes": 24 + 16 + 2 + 5 + 7 + 2 + len('{"i": 3}')}]
    assert st.reset() == 6 and st.count() == 0
    st.close()


def _label_indexes(conn, schema):
    return sorted(conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND "
                               "tablename = 'episodes' AND (strpos(indexdef, 'tenant_id') > 0 "
                               "OR strpos(indexdef, 'task_type') > 0)", (schema,)).fetchall())


def back_to_version_2(c):
    """Undo version 3 in the connection's search_path schema: no tenant_roles, no counter
    functions, the setting-keyed policy."""
    c.execute("DROP TABLE tenant_roles CASCADE")  # with the policy that reads it
    for f in FUNCTIONS:
        c.execute(f"DROP FUNCTION {f} CASCADE")  # dyna_check_ids with its trigger
    c.execute(f"CREATE POLICY {POLICY} ON episodes USING {_VISIBLE} WITH CHECK {_VISIBLE}")
    c.execute("DELETE FROM schema_version WHERE version = 3")


def test_labels_longer_than_a_btree_entry_and_a_version_1_store_migrated(pg_dsn, pg_schema,
                                                                         tmp_path):
    dsn = with_schema(pg_dsn, pg_schema)
    with PostgresStore(dsn, SCHEMA, DIM) as st:
        st.append(batch(3))
    with psycopg.connect(pg_dsn, autocommit=True) as c:  # back to version 1's layout
        c.execute(f"SET search_path = {pg_schema}")
        for (name,) in c.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s "
                                 "AND indexdef LIKE '%%USING hash%%'", (pg_schema,)).fetchall():
            c.execute(f"DROP INDEX {name}")
        c.execute("CREATE INDEX ON episodes (tenant_id, task_type)")
        back_to_version_2(c)
        c.execute("DELETE FROM schema_version WHERE version = 2")
        c.execute("INSERT INTO schema_version VALUES (1, 0)")
        v1 = _label_indexes(c, pg_schema)
        assert len(v1) == 1 and "btree (tenant_id, task_type)" in v1[0][0]
    with PostgresStore(dsn, SCHEMA, DIM, read_only=True) as ro:  # read as it is
        assert ro.schema_version() == 1 and ro.count() == 3
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert _label_indexes(c, pg_schema) == v1
    # 6,000 incompressible bytes: a B-tree entry holds at most 2,704
    long_tenant, long_task = secrets.token_hex(3000), secrets.token_hex(3000)
    b = batch(2, long_tenant, start=3) | {"task_type": [long_task] * 2}
    with PostgresStore(dsn, SCHEMA, DIM) as st, \
            SQLiteStore(str(tmp_path / "x.db"), SCHEMA, DIM) as lite:
        assert st.schema_version() == 3 and st.count() == 3  # migrated, rows kept
        assert st.append(b).tolist() == [3, 4] and st.status == "ok"
        lite.append(batch(3))
        lite.append(b)
        assert st.count({"tenant_id": long_tenant, "task_type": long_task}) == 2
        mine, theirs = st.read(), lite.read()
        assert all(np.asarray(mine[k]).tolist() == np.asarray(theirs[k]).tolist()
                   for k in ("id", "tenant_id", "task_type", "run_id", "metadata"))
        assert mine["reward"].tobytes() == theirs["reward"].tobytes()
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert [r[0].split(" USING ")[1] for r in _label_indexes(c, pg_schema)] == [
            "hash (task_type)", "hash (tenant_id)"]


# ------------------------------------------------------------------ row-level security
def _role(pg_dsn, schema, name):
    """A login role without superuser or BYPASSRLS, owner of its store tables' schema."""
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone() is None:
            c.execute(f"CREATE ROLE {name} LOGIN NOSUPERUSER NOBYPASSRLS")
        c.execute(f"GRANT ALL ON SCHEMA {schema} TO {name}")
    return with_schema(pg_dsn.replace("postgres@", f"{name}@"), schema)


def test_rls_a_tenant_session_reads_zero_rows_of_another(pg_dsn, pg_schema):
    dsn = _role(pg_dsn, pg_schema, "dyna_test_owner")
    st = PostgresStore(dsn, SCHEMA, DIM)  # all-tenant session of the tables' owner
    st.append(batch(5, "t1"))
    st.append(batch(3, "t2", start=5))
    # the owner's session is narrowed by its own settings only: advisory, not enforced
    assert st.stats()["rls_enforced"] is False and st.stats()["isolation"] == "advisory"
    with psycopg.connect(dsn, autocommit=True) as raw:
        q = f"SELECT count(*) FROM {pg_schema}.episodes"
        assert raw.execute(q).fetchone()[0] == 0  # no setting: nothing (fails closed)
        raw.execute("SELECT set_config('dyna.tenant', 't1', false)")
        assert raw.execute(q).fetchone()[0] == 5
        assert raw.execute(q + " WHERE tenant_id = 't2'").fetchone()[0] == 0
        assert raw.execute(f"DELETE FROM {pg_schema}.episodes WHERE tenant_id = 't2'"
                           ).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            raw.execute(f"INSERT INTO {pg_schema}.episodes (id, tenant_id, task_type, "
                        "\"timestamp\") VALUES (99, 't2', 'x', 0)")
        raw.execute("SELECT set_config('dyna.tenant', 't2', false)")
        assert raw.execute(q).fetchone()[0] == 3
    one = PostgresStore(dsn, SCHEMA, DIM, tenant="t2")
    assert one.read()["id"].tolist() == [5, 6, 7] and one.count({"tenant_id": "t1"}) == 0
    assert one.reset() == 3 and st.count() == 5  # a tenant's reset reaches only its rows
    one.close()
    st.close()


def test_superuser_session_is_reported_and_a_tenant_session_of_it_refused(pg_store_dsn):
    st = PostgresStore(pg_store_dsn, SCHEMA, DIM)
    st.append(batch(2, "t2"))
    assert st.stats()["rls_enforced"] is False and st.stats()["tenant"] is None
    # a superuser bypasses every policy: a "t1" session would read t2's rows; refused
    with pytest.raises(ConfigError, match="superuser or has BYPASSRLS") as e:
        PostgresStore(pg_store_dsn, SCHEMA, DIM, tenant="t1")
    assert e.value.field == "tenant" and st.count() == 2
    st.close()


def test_rls_switched_off_or_widened_is_detected_and_tenant_sessions_fail_closed(
        pg_dsn, pg_schema):
    dsn = _role(pg_dsn, pg_schema, "dyna_test_owner")
    st = PostgresStore(dsn, SCHEMA, DIM)
    st.append(batch(3, "t2"))
    st.close()
    t = f"{pg_schema}.episodes"
    for change, undo, why in [
            (f"ALTER TABLE {t} DISABLE ROW LEVEL SECURITY",
             f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY", "disabled"),
            (f"ALTER TABLE {t} NO FORCE ROW LEVEL SECURITY",
             f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY", "not forced"),
            (f"CREATE POLICY wide ON {t} USING (true)", f"DROP POLICY wide ON {t}",
             "not dyna's single")]:
        with psycopg.connect(pg_dsn, autocommit=True) as su:
            su.execute(change)
        with PostgresStore(dsn, SCHEMA, DIM) as st:
            assert st.stats()["rls_enforced"] is False, change
        with pytest.raises(ConfigError, match=why) as e:
            PostgresStore(dsn, SCHEMA, DIM, tenant="t1")
        assert e.value.field == "tenant"
        with psycopg.connect(pg_dsn, autocommit=True) as su:
            su.execute(undo)
    with PostgresStore(dsn, SCHEMA, DIM, tenant="t1") as one:  # restored: t1 sees 0 of 3
        assert one.stats()["isolation"] == "advisory" and one.count() == 0


def test_hostile_tenant_ids_are_values_never_sql(pg_dsn, pg_schema):
    dsn = _role(pg_dsn, pg_schema, "dyna_test_owner")
    hostile = ["'; DROP TABLE episodes; --", 'x"); DELETE FROM meta; --', "é☃𝔘\u202e%_",
               "a" * 3000]
    with PostgresStore(dsn, SCHEMA, DIM) as st:
        for i, t in enumerate(hostile):
            assert st.append(batch(1, t, start=i)).tolist() == [i]
        st.append(batch(2, "t2", start=4))
        for t in hostile:
            with PostgresStore(dsn, SCHEMA, DIM, tenant=t) as one:
                assert one.count() == 1 and one.read()["tenant_id"].tolist() == [t]
                assert one.delete({"tenant_id": "t2"}) == 0
        # text holding NUL is never stored, so it matches nothing (as on SQLite), and a
        # tenant session for it is refused naming the field
        assert st.count({"tenant_id": "a\x00b"}) == 0
        assert st.count({"tenant_id": ["a\x00b", "t2"]}) == 2 and st.count() == 6
    with pytest.raises(ConfigError) as e:
        PostgresStore(dsn, SCHEMA, DIM, tenant="a\x00b")
    assert e.value.field == "tenant"


def test_functions_of_another_schema_on_the_search_path_shadow_nothing(pg_dsn, pg_schema):
    dsn = _role(pg_dsn, pg_schema, "dyna_test_owner")
    evil = f"{pg_schema}_evil"
    with psycopg.connect(pg_dsn, autocommit=True) as su:
        su.execute(f"CREATE SCHEMA {evil}")
        su.execute(f"GRANT USAGE ON SCHEMA {evil} TO PUBLIC")
        # a set_config that turns every session into an all-tenant one, and a
        # current_schema that points the store at another schema
        su.execute(f"CREATE FUNCTION {evil}.set_config(text, text, boolean) RETURNS text "
                   "LANGUAGE sql AS $$ SELECT pg_catalog.set_config('dyna.all_tenants', "
                   "'on', false) $$")
        su.execute(f"CREATE FUNCTION {evil}.current_schema() RETURNS name LANGUAGE sql AS "
                   f"$$ SELECT '{evil}'::name $$")
    try:
        hostile = dsn.replace(f"search_path%3D{pg_schema}",
                              f"search_path%3D{pg_schema}%2C{evil}%2Cpg_catalog")
        assert hostile != dsn
        with PostgresStore(hostile, SCHEMA, DIM) as st:
            assert st.namespace == pg_schema
            st.append(batch(2, "a"))
            st.append(batch(3, "b", start=2))
        with PostgresStore(hostile, SCHEMA, DIM, tenant="a") as one:
            assert one._conn.execute("SHOW dyna.all_tenants").fetchone()[0] == "off"
            assert one.count() == 2 and one.read()["tenant_id"].tolist() == ["a", "a"]
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as su:
            su.execute(f"DROP SCHEMA {evil} CASCADE")


def test_zero_timeout_fails_at_once_instead_of_waiting_forever(pg_store_dsn):
    st = PostgresStore(pg_store_dsn, SCHEMA, DIM, timeout=0.0)
    # PostgreSQL reads lock_timeout = 0 as "no limit"
    assert st._conn.execute("SHOW lock_timeout").fetchone()[0] == "1ms"
    with psycopg.connect(pg_store_dsn) as holder:
        holder.execute("SELECT value FROM meta WHERE key = 'next_id' FOR UPDATE")
        with pytest.raises(StoreBusyError):
            st.append(batch(1))
    assert st.count() == 0 and st.next_id() == 0
    st.close()


# ------------------------------------------------------------------ many writers
def _writer(dsn, tag):
    """One writer process: 10 batches of 20 episodes (forked: dyna is already imported)."""
    s = ExperienceStore(dsn, dim=4)
    for b in range(10):
        s.record(tag, episodes=[dict(task_type="t", action_type="a", outcome="success",
                                     reward=float(b), timestamp=float(i),
                                     state_features=[1.0, 0, 0, float(i)]) for i in range(20)])
    s.close()


def test_concurrent_writers_from_four_processes_lose_nothing(pg_store_dsn):
    ExperienceStore(pg_store_dsn, dim=4).close()
    warm = ExperienceStore("", dim=4)  # compiled kernels loaded once, before the fork
    warm.record("w", task_type="t", action_type="a", outcome="success", reward=0.0,
                state_features=[1.0, 0, 0, 0])
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(pg_store_dsn, f"p{i}")) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    s = ExperienceStore(pg_store_dsn, dim=4)
    assert len(s) == 800 and [s.get_stats(f"p{i}")["n_records"] for i in range(4)] == [200] * 4
    ids = s._db.read(columns=["tenant_id"])
    assert ids["id"].tolist() == list(range(800))  # unique, consecutive, none lost
    # each batch of 20 is one transaction: its ids are consecutive and of one writer
    tags = ids["tenant_id"].reshape(40, 20)
    assert all(len(set(row)) == 1 for row in tags.tolist())
    s.close()


def test_lock_held_longer_than_timeout_is_retryable_and_writes_nothing(pg_store_dsn):
    s = ExperienceStore(pg_store_dsn, dim=DIM, busy_timeout=0.2)
    s.record("t1", task_type="a", action_type="x", outcome="success", reward=1.0)
    with psycopg.connect(pg_store_dsn) as holder:  # a transaction holding the id counter
        holder.execute("SELECT value FROM meta WHERE key = 'next_id' FOR UPDATE")
        with pytest.raises(StoreBusyError, match="retry"):
            s.record("t1", task_type="a", action_type="x", outcome="failure", reward=0.0)
    assert len(s) == 1 and s._db.count() == 1
    assert s.record("t1", task_type="a", action_type="x", outcome="failure",
                    reward=0.0)["ids"] == [1]
    s.close()


def _terminate(pg_dsn, store):
    with psycopg.connect(pg_dsn, autocommit=True) as su:
        su.execute("SELECT pg_terminate_backend(%s)", (store._conn.info.backend_pid,))


def test_connection_ended_by_the_server_mid_write_is_typed_writes_nothing_and_recovers(
        pg_dsn, pg_store_dsn):
    st = PostgresStore(pg_store_dsn, SCHEMA, DIM)
    st.append(batch(2))
    st.on_write = lambda db: _terminate(pg_dsn, db)  # inside the write, counter locked
    with pytest.raises(StoreWriteError, match="terminating connection"):
        st.append(batch(5, start=2))
    st.on_write = None
    with PostgresStore(pg_store_dsn, SCHEMA, DIM) as other:
        assert other.count() == 2 and other.next_id() == 2  # nothing of the batch
    # the next operation opens a new session with the same settings
    assert st.count() == 2 and st.append(batch(1, start=2)).tolist() == [2]
    assert st._conn.execute("SHOW lock_timeout").fetchone()[0] == "10s"
    # an autocommit single write that loses its connection may or may not have committed:
    # not a StoreWriteError (which promises nothing was stored)
    _terminate(pg_dsn, st)
    row = ["t1", "a", "success", 1.0, 0.0, None, None, bytes(4 * DIM)]
    with pytest.raises(StoreError, match="unknown") as e:
        st.append_row(row)
    assert not isinstance(e.value, StoreWriteError) and st.status == "write_degraded"
    assert st.count() == 3 and st.append_row(row) == 3 and st.status == "ok"
    st.close()
    with pytest.raises(StoreError, match="closed"):  # a closed store never reconnects
        st.count()


# ------------------------------------------------------------------ secrets
def test_redaction_runs_before_the_rows_leave_the_process(pg_store_dsn, monkeypatch):
    from dyna.store import postgres

    sent = []  # every row handed to the server, by the batch path and the single-row path
    real_insert, real_row = postgres._insert, PostgresStore.append_row

    def spy_insert(conn, cols, ids, start, **kw):
        sent.extend(repr(row) for row in zip(*cols))
        return real_insert(conn, cols, ids, start, **kw)

    def spy_row(self, values):
        sent.append(repr(tuple(values)))
        return real_row(self, values)

    monkeypatch.setattr(postgres, "_insert", spy_insert)
    monkeypatch.setattr(PostgresStore, "append_row", spy_row)
    s = ExperienceStore(pg_store_dsn, dim=DIM)
    secret = dict(state_before={"password": "pw-9f8e7d6c", "note": "Bearer abcdef0123456789xyz"},
                  metadata={"api_key": "sk-live-0123456789abcdef"})
    for _ in range(2):  # the second one's labels are known: the single-row path may take it
        s.record("t1", task_type="a", action_type="x", outcome="success", reward=1.0, **secret)
    s.record("t1", episodes=[dict(task_type="a", action_type="x", outcome="failure",
                                  reward=0.0, **secret)])
    assert len(sent) == 3 and all("[REDACTED]" in row for row in sent)
    for secret_text in ("pw-9f8e7d6c", "abcdef0123456789xyz", "sk-live-0123456789abcdef"):
        assert not any(secret_text in row for row in sent)
    with psycopg.connect(pg_store_dsn, autocommit=True) as raw:
        raw.execute("SELECT set_config('dyna.all_tenants', 'on', false)")
        texts = [r[0] for r in raw.execute("SELECT state_before || metadata FROM episodes")]
    assert len(texts) == 3 and not any("pw-9f8e7d6c" in t or "sk-live" in t for t in texts)
    s.close()


def test_password_never_in_path_stats_capabilities_or_errors(pg_dsn, pg_schema):
    pw = "Zq7-very-secret-pw"
    dsn = with_schema(pg_dsn.replace("postgres@", f"postgres:{pw}@"), pg_schema)
    s = ExperienceStore(dsn, dim=DIM)  # the test cluster trusts local logins
    texts = [s._db.path, repr(s.get_stats()), repr(s.capabilities())]
    s._db._conn.execute("SET default_transaction_read_only = on")
    with pytest.raises(StoreWriteError) as e:
        s.record("t1", task_type="a", action_type="x", outcome="success", reward=1.0)
    texts.append(str(e.value))
    assert s.persistence_status == "write_degraded" and len(s) == 0
    s._db._conn.execute("SET default_transaction_read_only = off")
    assert s.dispatch("record", tenant_id="t1", task_type="a", action_type="x",
                      outcome="success", reward=1.0)["persistence_status"] == "ok"
    s.close()
    port = pg_dsn.rsplit(":", 1)[1].split("/")[0]
    with pytest.raises(StoreError) as e:  # nothing listens on the port below
        ExperienceStore(dsn.replace(f":{port}/", ":1/"), dim=DIM, busy_timeout=1)
    texts.append(str(e.value))
    assert all(pw not in t for t in texts), texts
    assert s._db.path == display_dsn(pg_dsn)


def _chain_texts(err):
    """str and repr of an error and of every exception in its chain, the traceback as
    printed, and the password of any libpq connection an exception holds (``pgconn``)."""
    texts, todo, seen = ["".join(traceback.format_exception(err))], [err], set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        texts += [str(e), repr(e), repr(getattr(e, "pgconn", None) and e.pgconn.password)]
        todo += [e.__cause__, e.__context__]
    return texts


def test_password_never_in_an_error_chain(pg_dsn, pg_schema):
    pw = "tulip-4e5f6a"  # nothing about it looks like a secret to dyna.redact
    port = pg_dsn.rsplit(":", 1)[1].split("/")[0]
    good = with_schema(pg_dsn.replace("postgres@", f"postgres:{pw}@"), pg_schema)
    bad = {"no server": good.replace(f":{port}/", ":1/"),
           "no database": good.replace("/postgres?", "/no_such_db?"),
           "unparsable": good.replace(f":{pw}@", f":{pw}%zz@"),
           "bad option": good + "&sslmode=bogus"}
    for name, dsn in bad.items():
        for open_it in (lambda d: ExperienceStore(d, dim=DIM, busy_timeout=1),
                        lambda d: stored_dim(d, 1)):
            with pytest.raises(StoreError) as e:
                open_it(dsn)
            texts = _chain_texts(e.value)
            assert not any(pw in t for t in texts), (name, texts)
    with ExperienceStore(good, dim=DIM) as s:  # a failed write on an open store
        s._db._conn.execute("SET default_transaction_read_only = on")
        with pytest.raises(StoreWriteError) as e:
            s.record("t1", task_type="a", action_type="x", outcome="success", reward=1.0)
        assert e.value.__context__ is None and not any(pw in t for t in _chain_texts(e.value))
    assert display_dsn(f"host=h user=u password={pw} dbname=d") == "postgresql://u@h/d"
    from dyna.store.postgres_dsn import password_forms
    assert set(password_forms(f"postgresql://u:{pw}@h/d?sslpassword=k%2Dey")) == {pw, "k%2Dey",
                                                                              "k-ey"}


# ------------------------------------------------------------------ opening
def test_read_only_missing_foreign_and_dim(pg_dsn, pg_schema, pg_store_dsn):
    with pytest.raises(MissingFileError, match="never creates"):
        ExperienceStore(pg_store_dsn, dim=DIM, read_only=True)
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s",
                         (pg_schema,)).fetchone()[0] == 0
        c.execute(f"CREATE TABLE {pg_schema}.episodes (x int)")
        c.execute(f"INSERT INTO {pg_schema}.episodes VALUES (1)")
    with pytest.raises(NotAStoreError, match="without a meta table"):
        ExperienceStore(pg_store_dsn, dim=DIM)
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert c.execute(f"SELECT x FROM {pg_schema}.episodes").fetchall() == [(1,)]
        c.execute(f"DROP TABLE {pg_schema}.episodes")
    ExperienceStore(pg_store_dsn, dim=DIM).close()
    with pytest.raises(ConfigError) as e:
        ExperienceStore(pg_store_dsn, dim=DIM + 1)
    assert e.value.field == "dim"
    ro = ExperienceStore(pg_store_dsn, dim=DIM, read_only=True)
    with pytest.raises(StoreReadOnlyError):
        ro.record("t1", task_type="a", action_type="x", outcome="success", reward=1.0)
    assert ro.get_stats()["n_records"] == 0
    ro.close()


@pytest.mark.parametrize("statement", ["SELECT pg_catalog.current_schema()",
                                       "SHOW server_encoding"])
def test_an_open_interrupted_while_setting_up_its_session_closes_it(pg_store_dsn,
                                                                      monkeypatch, statement):
    """Ctrl-C (KeyboardInterrupt) during the session's setup: the connection is closed."""
    opened = []
    execute = psycopg.Connection.execute

    def interrupted(conn, query, *args, **kwargs):
        if query == statement:
            opened.append(conn)
            raise KeyboardInterrupt
        return execute(conn, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", interrupted)
    with pytest.raises(KeyboardInterrupt):
        PostgresStore(pg_store_dsn, SCHEMA, DIM)
    assert len(opened) == 1 and opened[0].closed


def test_text_with_nul_is_refused_naming_the_field(pg_store_dsn):
    st = PostgresStore(pg_store_dsn, RECORD_SCHEMA, DIM)
    b = {"tenant_id": ["t1"], "task_type": ["a\x00b"], "reward": [1.0], "timestamp": [0.0],
         "features": np.zeros((1, DIM), np.float32)}
    with pytest.raises(ConfigError) as e:
        st.append(b)
    assert e.value.field == "task_type[0]" and st.count() == 0 and st.next_id() == 0
    st.close()


def test_store_cli_on_a_dsn_never_prints_the_password(pg_dsn, pg_schema, capsys):
    from dyna.cli import main
    pw = "Cli-secret-4f3e2d"
    dsn = with_schema(pg_dsn.replace("postgres@", f"postgres:{pw}@"), pg_schema)
    with ExperienceStore(dsn, dim=DIM) as s:
        s.record("t1", episodes=[dict(task_type="a", action_type="x", outcome="success",
                                      reward=float(i)) for i in range(3)])
    assert main(["store", "stats", dsn]) == 0
    out, err = capsys.readouterr()
    stats = __import__("json").loads(out)
    assert stats["n_records"] == 3 and stats["store"]["backend"] == "postgresql"
    assert stats["store"]["read_only"] is True and pw not in out + err
    other = with_schema(pg_dsn.replace("postgres@", f"postgres:{pw}@"), pg_schema + "x")
    port = pg_dsn.rsplit(":", 1)[1].split("/")[0]
    for target in (other, dsn.replace(f":{port}/", ":1/")):  # no store there / no server
        assert main(["store", "stats", target]) == 2
        out, err = capsys.readouterr()
        assert err.startswith("dyna: error: DB=") and err.count("\n") == 1, err
        assert pw not in out + err


def test_store_commands_never_echo_a_dsn_password(pg_dsn, pg_schema, capsys):
    from dyna.cli import main
    pw = "Echo-secret-9a8b7c"
    dsn = with_schema(pg_dsn.replace("postgres@", f"postgres:{pw}@"), pg_schema)
    ExperienceStore(dsn, dim=DIM).close()
    for argv in (["delete", dsn, "--tenant", "nobody", "--yes"], ["scrub", dsn],
                 ["recover", dsn, "--out", "x.db"]):
        assert main(["store", *argv]) == 2, argv
        out, err = capsys.readouterr()
        assert err.startswith("dyna: error: ") and pw not in out + err, err


def test_pers05_prune_then_compaction_gives_the_space_back(pg_store_dsn):
    """On PostgreSQL: a prune deletes rows but the tables keep
    their size; VACUUM FULL (the store's compaction) gives it back, the survivors intact.
    The 2 KiB payloads are random hex, so TOAST compression does not hide the size."""
    st = PostgresStore(pg_store_dsn, SCHEMA, DIM)
    rng = np.random.default_rng(5)
    n = 2000
    meta = [f'"{rng.bytes(1024).hex()}"' for _ in range(n)]
    st.append({"tenant_id": ["t1"] * n, "task_type": ["a"] * n, "outcome": ["success"] * n,
               "reward": np.zeros(n), "timestamp": np.arange(n, dtype=float),
               "run_id": ["r"] * n, "metadata": meta,
               "features": np.ones((n, DIM), np.float32)})
    before = st.file_bytes()
    assert before > 4_000_000
    assert st.prune(1800.0) == 1800
    assert st.count() == 200 and st.file_bytes() >= 0.95 * before   # deleted, not given back
    out = st.vacuum()
    assert out["bytes_before"] >= 0.95 * before
    assert out["bytes_after"] < 0.15 * before
    cols = st.read()
    assert cols["timestamp"].tolist() == list(map(float, range(1800, 2000)))
    assert cols["metadata"].tolist() == meta[1800:]
    st.close()
