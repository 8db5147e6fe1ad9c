"""Tenant isolation on PostgreSQL holds against the tenant's own connection.

A tenant role (mapped to one tenant by :func:`dyna.store.postgres.grant_tenant`)
connects with its own credentials and tries what a hostile client would: set the session's
tenant settings (``set_config``, ``SET``), take another role (``SET ROLE``, ``SET SESSION
AUTHORIZATION``), switch row-level security off, read, delete, truncate and insert another
tenant's rows, rewrite the policies, and rewind or rewrite ``meta``. Counted: rows of another
tenant read 0, deleted 0, and ``next_id`` never lowered. ``stats()["rls_enforced"]`` is true
exactly when the role is held to its tenant (checked against a role given too much).
"""

import pytest

from conftest import with_schema
from test_store_postgres import DIM, SCHEMA, batch

psycopg = pytest.importorskip("psycopg")
from dyna.errors import ConfigError, StoreWriteError  # noqa: E402
from dyna.store.postgres import PostgresStore, grant_tenant  # noqa: E402

OWNER, T1, T2 = "dyna_iso_owner", "dyna_iso_t1", "dyna_iso_t2"


def _login(pg_dsn, schema, role):
    return with_schema(pg_dsn.replace("postgres@", f"{role}@"), schema)


def _make_roles(pg_dsn, schema):
    """The owner role (all rights on ``schema``) and the tenant roles (its use only: the
    schema's owner grants it, as the tables' owner holds no grant option on it)."""
    with psycopg.connect(pg_dsn, autocommit=True) as su:
        for role in (OWNER, T1, T2):
            if su.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() \
                    is None:
                su.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS")
        su.execute(f"GRANT ALL ON SCHEMA {schema} TO {OWNER}")
        su.execute(f"GRANT USAGE ON SCHEMA {schema} TO {T1}, {T2}")


@pytest.fixture
def roles(pg_dsn, pg_schema):
    """DSNs of the tables' owner and of two tenant roles (t1, t2) over a store holding 5 rows
    of t1 (ids 0-4) and 3 of t2 (ids 5-7)."""
    _make_roles(pg_dsn, pg_schema)
    owner = _login(pg_dsn, pg_schema, OWNER)
    with PostgresStore(owner, SCHEMA, DIM) as st:
        st.append(batch(5, "t1"))
        st.append(batch(3, "t2", start=5))
        grant_tenant(st, T1, "t1")
        grant_tenant(st, T2, "t2")
    return owner, _login(pg_dsn, pg_schema, T1), _login(pg_dsn, pg_schema, T2)


def _refused(conn, sql, args=()):
    """Whether the server refuses ``sql`` (any error; the connection stays usable)."""
    try:
        conn.execute(sql, args)
    except psycopg.Error:
        return True
    return False


def test_tenant_role_store_sees_and_writes_only_its_tenant(roles):
    owner, t1, t2 = roles
    with PostgresStore(t1, SCHEMA, DIM, tenant="t1") as one, PostgresStore(t1, SCHEMA, DIM) \
            as same:
        s = one.stats()
        assert s["rls_enforced"] is True and s["isolation"] == "role" and s["rows"] == 5
        assert same.tenant == "t1" and same.count() == 5 and same.count({"tenant_id": "t2"}) == 0
        # writes take ids from the shared counter through the owner's functions
        assert one.append(batch(2, "t1", start=8)).tolist() == [8, 9]
        assert one.append_row(["t1", "x", "success", 1.0, 9.0, None, None,
                               b"\0" * 4 * DIM]) == 10
        gen = one.generation()
        assert one.delete({"tenant_id": "t2"}) == 0 and one.reset() == 8
        assert one.generation() == gen + 1 and one.next_id() == 11
        with pytest.raises(ConfigError) as e:  # t1's role asking for t2
            PostgresStore(t1, SCHEMA, DIM, tenant="t2")
        assert e.value.field == "tenant"
    with PostgresStore(t2, SCHEMA, DIM) as two:
        assert two.read()["id"].tolist() == [5, 6, 7]
    with PostgresStore(owner, SCHEMA, DIM) as st:
        assert st.count() == 3 and st.next_id() == 11
        assert st.stats()["rls_enforced"] is False and st.stats()["isolation"] == "advisory"


def test_tenant_connection_reads_0_deletes_0_and_cannot_rewind_next_id(roles, pg_schema):
    owner, t1, _ = roles
    ep, meta = f"{pg_schema}.episodes", f"{pg_schema}.meta"
    count_t2 = f"SELECT count(*) FROM {ep} WHERE tenant_id = 't2'"
    read, deleted, rewound = 0, 0, 0
    with psycopg.connect(t1, autocommit=True) as raw:
        widen = ["SELECT set_config('dyna.all_tenants', 'on', false)",
                 "SELECT set_config('dyna.tenant', 't2', false)",
                 "SET dyna.all_tenants = on", "SET dyna.tenant = 't2'",
                 "SELECT set_config('dyna.all_tenants', 'on', true)"]
        for sql in widen:
            raw.execute(sql)
            read += raw.execute(count_t2).fetchone()[0]
            read += raw.execute(f"SELECT count(*) FROM {ep}").fetchone()[0] - 5
            deleted += raw.execute(f"DELETE FROM {ep} WHERE tenant_id = 't2'").rowcount
            deleted += raw.execute(f"DELETE FROM {ep} WHERE id >= 5").rowcount
        # another role, security off, the table and the policies themselves: all refused
        refused = [_refused(raw, sql) for sql in [
            f"SET ROLE {OWNER}", f"SET ROLE {T2}", "SET ROLE postgres",
            "SET SESSION AUTHORIZATION postgres",
            f"TRUNCATE {ep}", f"ALTER TABLE {ep} DISABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {ep} NO FORCE ROW LEVEL SECURITY",
            f"DROP POLICY dyna_tenant_isolation ON {ep}",
            f"CREATE POLICY wide ON {ep} USING (true)",
            f"INSERT INTO {ep} (id, tenant_id, task_type, \"timestamp\") VALUES (99, 't2', "
            "'x', 0)",
            f"UPDATE {ep} SET tenant_id = 't1'",
            # its own tenant's row, but with an id the counter never gave: the next writer
            # of any tenant would meet a duplicate id
            f"INSERT INTO {ep} (id, tenant_id, task_type, \"timestamp\") VALUES (8, 't1', "
            "'x', 0)",
            f"INSERT INTO {ep} (id, tenant_id, task_type, \"timestamp\") VALUES "
            "(1000000000000, 't1', 'x', 0)",
            f"INSERT INTO {pg_schema}.tenant_roles VALUES ('{T1}x', 't2')",
            f"UPDATE {pg_schema}.tenant_roles SET tenant_id = 't2'",
            f"DELETE FROM {pg_schema}.tenant_roles"]]
        assert all(refused), refused
        raw.execute("SET row_security = off")  # a role the policy binds then reads nothing
        assert _refused(raw, count_t2)
        raw.execute("SET row_security = on")
        assert raw.execute(f"SELECT count(*) FROM {pg_schema}.tenant_roles").fetchone()[0] == 1
        # meta: no direct write; the functions only move the counters forward
        before = int(raw.execute(f"SELECT value FROM {meta} WHERE key = 'next_id'"
                                 ).fetchone()[0])
        for sql in [f"UPDATE {meta} SET value = '0' WHERE key = 'next_id'",
                    f"DELETE FROM {meta} WHERE key = 'next_id'",
                    f"INSERT INTO {meta} VALUES ('x', '0')",
                    f"SELECT value FROM {meta} WHERE key = 'next_id' FOR UPDATE"]:
            assert _refused(raw, sql), sql
        raw.execute(f"SELECT {pg_schema}.dyna_advance_next_id(0)")
        raw.execute(f"SELECT {pg_schema}.dyna_advance_next_id(-5)")
        after = int(raw.execute(f"SELECT value FROM {meta} WHERE key = 'next_id'"
                                ).fetchone()[0])
        rewound += after < before
    assert (read, deleted, rewound) == (0, 0, 0)
    with PostgresStore(owner, SCHEMA, DIM) as st:
        assert st.count({"tenant_id": "t2"}) == 3 and st.count() == 8 and st.next_id() == 8


def test_rls_enforced_is_false_for_a_role_that_could_widen_its_view(roles, pg_dsn,
                                                                    pg_schema):
    _, t1, _ = roles
    for grant, undo, why in [
            (f"GRANT UPDATE ON {pg_schema}.meta TO {T1}",
             f"REVOKE UPDATE ON {pg_schema}.meta FROM {T1}", "write meta"),
            (f"GRANT INSERT ON {pg_schema}.tenant_roles TO {T1}",
             f"REVOKE INSERT ON {pg_schema}.tenant_roles FROM {T1}", "write meta"),
            (f"GRANT {OWNER} TO {T1}", f"REVOKE {OWNER} FROM {T1}", "owner"),
            ("ALTER ROLE dyna_iso_t2 BYPASSRLS; GRANT dyna_iso_t2 TO dyna_iso_t1",
             "ALTER ROLE dyna_iso_t2 NOBYPASSRLS; REVOKE dyna_iso_t2 FROM dyna_iso_t1",
             "superuser's or BYPASSRLS"),
            (f"DELETE FROM {pg_schema}.tenant_roles WHERE role = '{T1}'",
             f"INSERT INTO {pg_schema}.tenant_roles VALUES ('{T1}', 't1')", "to no tenant"),
            (f"GRANT {T2} TO {T1}", f"REVOKE {T2} FROM {T1}", "another role")]:
        with psycopg.connect(pg_dsn, autocommit=True) as su:
            for sql in grant.split(";"):
                su.execute(sql)
        try:
            with PostgresStore(t1, SCHEMA, DIM) as one:
                assert one.stats()["rls_enforced"] is False, grant
                assert one.stats()["isolation"] != "role", grant
                assert why in one.stats()["rls_gap"], grant
        finally:
            with psycopg.connect(pg_dsn, autocommit=True) as su:
                for sql in undo.split(";"):
                    su.execute(sql)
    with PostgresStore(t1, SCHEMA, DIM) as one:
        s = one.stats()
        assert s["rls_enforced"] is True and s["rls_gap"] is None
        assert one.count({"tenant_id": "t2"}) == 0


def test_grant_tenant_refuses_a_role_mapped_to_another_tenant(roles):
    owner, _, _ = roles
    with PostgresStore(owner, SCHEMA, DIM) as st:
        grant_tenant(st, T1, "t1")  # the same mapping again: nothing changes
        with pytest.raises(ConfigError) as e:
            grant_tenant(st, T1, "t2")
        assert e.value.field == "role"


def test_experience_store_of_a_tenant_role_sees_its_tenant_only(pg_dsn, pg_schema):
    from dyna.experience import ExperienceStore

    _make_roles(pg_dsn, pg_schema)
    eps = [dict(task_type="triage", action_type="a", outcome="success", reward=1.0,
                timestamp=1.7e9 + i) for i in range(3)]
    owner = ExperienceStore(_login(pg_dsn, pg_schema, OWNER), dim=DIM)
    owner.record("t1", episodes=eps)
    owner.record("t2", episodes=eps)
    grant_tenant(owner._db, T1, "t1")
    one = ExperienceStore(_login(pg_dsn, pg_schema, T1), dim=DIM)
    try:
        assert one._db.stats()["rls_enforced"] is True
        assert len(one.export_data("t1")["records"]) == 3
        assert len(one.export_data("t2")["records"]) == 0
        assert one.record("t1", episodes=eps[:1])["ids"] == [6]
        with pytest.raises(StoreWriteError):  # the policy refuses a row of another tenant
            one.record("t2", episodes=eps[:1])
        assert one.reset("t2")["deleted"] == 0
    finally:
        one.close()
    owner.close()
