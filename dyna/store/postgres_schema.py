"""Opening a PostgreSQL store: the session's settings, the tables, row-level security.

:class:`dyna.store.postgres.PostgresStore` opens a session with :func:`connect` (search path
pinned, lock timeout, tenant settings, read-only, UTF8 checked) and then its tables with
:func:`open_tables` (created, or checked and migrated; whether row-level security binds the
session). The functions here raise psycopg errors as they come; the store turns them into
typed errors.

Tables (in the connection's current schema, named by ``search_path``)
    ``episodes`` (``id bigint`` primary key, then the caller's schema: ``int`` -> bigint,
    ``float`` -> float8, ``str`` / ``json`` -> text, ``vector`` -> bytea; :data:`PG_TYPES`),
    ``meta`` (``dim``, ``next_id``, ``generation``, ``created_at``) and ``schema_version``.
    ``episodes`` has row-level security enabled and forced with one policy
    (:data:`POLICY`): a row is visible and writable to a tenant role when its ``tenant_id``
    is the one ``tenant_roles`` maps that role to; to the table's owner (and roles it is
    granted to) when its ``tenant_id`` equals the session setting ``dyna.tenant`` or when
    ``dyna.all_tenants`` is ``on``. ``tenant_roles`` (``role`` -> ``tenant_id``) shows each
    role its own row only. The counters in ``meta`` move only through the owner's
    ``SECURITY DEFINER`` functions (:data:`FUNCTIONS`), which never lower them; tenant roles
    read ``meta`` and may not write it (:func:`grant_tenant_sql`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import NamedTuple

from dyna.errors import ConfigError, MissingFileError, NotAStoreError, StoreError
from dyna.store.columns import STORE_TABLES, TABLE
from dyna.store.postgres_dsn import load_psycopg, quote_ident, scrubbed

__all__ = ["FUNCTIONS", "PG_TYPES", "POLICY", "SCHEMA_VERSION", "Tables", "connect",
           "counter_sql", "grant_tenant_sql", "open_tables", "role_isolation"]

#: Schema version of the PostgreSQL tables (its own line of versions; version 1 already
#: has the ``generation`` counter that SQLite stores gained in their version 2). Version 2
#: indexes ``tenant_id`` and ``task_type`` by hash instead of one B-tree over both, whose
#: entries are limited to 2,704 bytes: a longer (incompressible) label was refused by the
#: server alone, where SQLite and memory store it. Version 1 stores are read as they are and
#: migrated by the first writing open of a role owning the table.
SCHEMA_VERSION = 3

#: Column types of each schema kind (see :data:`dyna.store.columns.KINDS`).
PG_TYPES = {"int": "bigint", "float": "float8", "str": "text", "json": "text",
            "vector": "bytea"}
#: The row-level security policy on ``episodes``.
POLICY = "dyna_tenant_isolation"
_VISIBLE = ("(current_setting('dyna.all_tenants', true) = 'on' "
            "OR tenant_id = current_setting('dyna.tenant', true))")


def _roles(t: dict[str, str]) -> str:
    """The qualified name of ``tenant_roles`` beside the store's other tables."""
    return t["meta"].rsplit(".", 1)[0] + '."tenant_roles"' if "." in t["meta"] \
        else "tenant_roles"


def _visible(t: dict[str, str]) -> str:
    """The policy's expression: the tenant a role is mapped to, or (for the table's owner
    and roles granted it only) the session's tenant settings."""
    return (f"(tenant_id = (SELECT r.tenant_id FROM {_roles(t)} r WHERE r.role = "
            f"current_user) OR (pg_has_role((SELECT c.relowner FROM pg_class c WHERE c.oid = "
            f"'{t[TABLE]}'::regclass), 'USAGE') AND {_VISIBLE}))")
#: The owner's SECURITY DEFINER functions, the only writers of ``meta`` for tenant roles.
FUNCTIONS = ("dyna_lock_next_id", "dyna_take_id", "dyna_advance_next_id",
             "dyna_bump_generation", "dyna_check_ids")
# an advisory lock key shared by every dyna process creating or migrating a store
_INIT_LOCK = 0x64796E61  # "dyna"


def connect(dsn: str, *, path: str, secret: Sequence[str], timeout: float,
            tenant: str | None, read_only: bool):
    """A session for a store: ``(connection, schema name)``.

    The connection is in autocommit mode; its search path is pinned to ``pg_catalog`` and
    the store's schema (the first of the DSN's search path; None when there is none), its
    ``lock_timeout`` is ``timeout`` (at least 1 ms: PostgreSQL reads 0 as "wait forever"),
    and its tenant settings select one tenant or all.

    Raises
    ------
    StoreError
        The server cannot be reached, a setting fails, or the database is not UTF8 (the
        message is scrubbed of ``secret``, the forms of the DSN's password).
    """
    psycopg = load_psycopg(dsn)
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(round(timeout))))
    except psycopg.Error as exc:
        raise StoreError(f"DB={path}: cannot connect: {scrubbed(exc, secret)}") from None
    try:
        # The store's schema is the first of the DSN's search_path; the session then
        # searches pg_catalog first and that schema only, so no function, operator or
        # type of another schema on the path (one where a less trusted role can create
        # objects) shadows the built-ins the store calls, e.g. a set_config that would
        # turn a tenant session into an all-tenant one.
        ns = conn.execute("SELECT pg_catalog.current_schema()").fetchone()[0]
        conn.execute("SELECT pg_catalog.set_config('search_path', %s, false)",
                     ("pg_catalog" + (f", {quote_ident(ns)}" if ns else ""),))
        conn.execute("SELECT set_config('lock_timeout', %s, false)",
                     (f"{max(1, math.ceil(timeout * 1000))}ms",))
        if tenant is None:
            conn.execute("SELECT set_config('dyna.all_tenants', 'on', false)")
        else:
            conn.execute("SELECT set_config('dyna.all_tenants', 'off', false), "
                         "set_config('dyna.tenant', %s, false)", (tenant,))
        if read_only:
            conn.execute("SET default_transaction_read_only = on")
        enc = conn.execute("SHOW server_encoding").fetchone()[0]
    except psycopg.Error as exc:
        conn.close()
        raise StoreError(f"DB={path}: {scrubbed(exc, secret)}") from None
    except BaseException:  # e.g. KeyboardInterrupt: the session is not handed out
        conn.close()
        raise
    if enc.upper() not in ("UTF8", "UTF-8"):
        conn.close()
        raise StoreError(f"DB={path}: database encoding {enc}; a dyna store needs "
                         "UTF8 (text must round-trip exactly)")
    return conn, ns


class Tables(NamedTuple):
    """What :func:`open_tables` found: the tables' schema, their qualified names by table,
    whether this open created them, row-level security for the session (``rls_enforced``:
    the server holds this session's role to one tenant whatever the session sets;
    ``isolation``: ``"role"``, ``"advisory"`` (the owner's session narrowed by its
    settings) or ``"none"``), whether the policy applies (``policed``), the counter
    statements (:func:`counter_sql`), the tenant the role is mapped to and why the role is
    not held to one tenant (``gap``; None when it is)."""

    namespace: str
    names: dict[str, str]
    created: bool
    rls_enforced: bool
    policed: bool
    isolation: str
    counters: dict[str, str]
    role_tenant: str | None
    gap: str | None


def open_tables(conn, ns: str | None, *, path: str, schema: Sequence[tuple[str, str]],
                dim: int, read_only: bool, tenant: str | None) -> Tables:
    """Find, check and (unless ``read_only``) create or migrate the store's tables in
    schema ``ns``, and check row-level security for this session.

    Raises
    ------
    StoreError
        No schema in the search path, or a store of a newer schema version.
    MissingFileError
        ``read_only`` and no store in the schema.
    NotAStoreError
        Tables named like dyna's that are not a dyna store; nothing was written.
    ConfigError
        A store of another dim, a tenant session the policy would not bind, or a tenant
        role asking for another tenant than the one it is mapped to.
    psycopg.Error
        Any other error of the server (typed by the caller).
    """
    if ns is None:
        raise StoreError(f"DB={path}: no schema in search_path to hold the store")
    t = {name: f"{quote_ident(ns)}.{quote_ident(name)}" for name in STORE_TABLES}
    created = False
    if read_only:
        if not _tables(conn, ns, t, path):
            raise MissingFileError("DB", path, "no dyna store in schema "
                                   f"{ns!r} (a read-only open never creates one)")
        _check(conn, ns, t, path, schema, dim, schema_version(conn, t))
    else:
        created = _init_schema(conn, ns, t, path, schema, dim)
    why_not = _rls_gap(conn, t[TABLE])
    if tenant is not None and why_not is not None:
        # a tenant session that the policy does not bind would read, change and
        # delete every tenant's rows: refuse it (fail closed)
        raise ConfigError("tenant", tenant, "this session cannot be held "
                          f"to one tenant: {why_not}; connect as a role "
                          "subject to row-level security, or open all tenants")
    mapped, unbound = role_isolation(conn, t) if why_not is None else (None, why_not)
    if tenant is not None and mapped is not None and tenant != mapped:
        raise ConfigError("tenant", tenant, "this role is mapped to another tenant in "
                          "tenant_roles and can read and write only that tenant's rows")
    isolation = "none" if why_not else ("role" if unbound is None else "advisory")
    functions = conn.execute("SELECT count(*) FROM pg_proc WHERE pronamespace = %s::regnamespace"
                             " AND proname = ANY(%s)", (quote_ident(ns), list(FUNCTIONS))
                             ).fetchone()[0] == len(FUNCTIONS)
    # PostgreSQL refuses COPY FROM into a table whose policies apply to the session: such
    # a session copies through a staging table
    policed = bool(conn.execute("SELECT row_security_active(%s::regclass)",
                                (t[TABLE],)).fetchone()[0])
    return Tables(ns, t, created, unbound is None, policed, isolation,
                  counter_sql(t, functions), mapped, unbound)


def role_isolation(conn, t: dict[str, str]) -> tuple[str | None, str | None]:
    """``(tenant, why_not)``: the tenant this session's role is mapped to in
    ``tenant_roles`` (None: none), and why the server would not hold the role to it
    whatever the session sets (None when it would): the role may take the owner's
    rights or a superuser's / BYPASSRLS role's or any other role's (by ``SET ROLE``), may
    write ``meta`` or
    ``tenant_roles``, or the policies are not version 3's. Reads the catalogs only; call
    after :func:`_rls_gap` found nothing."""
    roles = _roles(t)
    if conn.execute("SELECT to_regclass(%s)", (roles,)).fetchone()[0] is None:
        return None, "the store has no tenant_roles table (schema version 2)"
    qual = conn.execute("SELECT pg_get_expr(polqual, polrelid) FROM pg_policy WHERE polrelid"
                        " = %s::regclass", (t[TABLE],)).fetchone()[0]
    if "tenant_roles" not in qual or "pg_has_role" not in qual:
        return None, f"the policy on {t[TABLE]} is not keyed on tenant_roles"
    row = conn.execute(f"SELECT tenant_id FROM {roles} WHERE role = current_user").fetchone()
    mapped = None if row is None else row[0]
    owner, elevated, member, writes, own_roles, roles_rls, role_pols = conn.execute(
        "SELECT pg_has_role(c.relowner, 'MEMBER'), EXISTS (SELECT 1 FROM pg_roles r WHERE "
        "(r.rolsuper OR r.rolbypassrls) AND pg_has_role(r.oid, 'MEMBER')), EXISTS (SELECT 1 "
        "FROM pg_roles r WHERE r.rolname <> current_user AND pg_has_role(r.oid, 'MEMBER')), "
        "has_table_privilege(%s, 'INSERT,UPDATE,DELETE,TRUNCATE') OR "
        "has_table_privilege(%s, 'INSERT,UPDATE,DELETE,TRUNCATE'), "
        "pg_has_role(k.relowner, 'MEMBER'), k.relrowsecurity, (SELECT array_agg(polname::text)"
        " FROM pg_policy WHERE polrelid = k.oid) FROM pg_class c, pg_class k WHERE c.oid = "
        "%s::regclass AND k.oid = %s::regclass", (t["meta"], roles, t[TABLE], roles)
    ).fetchone()
    for bad, why in [(owner, "the role owns the store or is granted its owner"),
                     (elevated, "the role can take a superuser's or BYPASSRLS role's rights"),
                     (member, "the role is granted another role (SET ROLE would change "
                      "what it sees)"),
                     (writes or own_roles, "the role may write meta or tenant_roles"),
                     (not roles_rls or role_pols != ["dyna_own_role"],
                      "tenant_roles does not show each role only its own row"),
                     (mapped is None, "the role is mapped to no tenant in tenant_roles")]:
        if bad:
            return mapped, why
    return mapped, None


def _rls_gap(conn, episodes: str) -> str | None:
    """Why row-level security does not bind this session to the policy on ``episodes``
    (None when it does): a superuser or BYPASSRLS role, row-level security disabled or
    (for the table's owner) not forced, or policies other than dyna's single policy
    (an added permissive policy widens what a tenant sees)."""
    bypass, owner, on, forced = conn.execute(
        "SELECT r.rolsuper OR r.rolbypassrls, pg_has_role(c.relowner, 'USAGE'), "
        "c.relrowsecurity, c.relforcerowsecurity FROM pg_class c, pg_roles r "
        "WHERE c.oid = %s::regclass AND r.rolname = current_user", (episodes,)).fetchone()
    policies = conn.execute(
        "SELECT polname, polpermissive, polcmd, pg_get_expr(polqual, polrelid), "
        "pg_get_expr(polwithcheck, polrelid) FROM pg_policy WHERE polrelid = "
        "%s::regclass", (episodes,)).fetchall()
    if bypass:
        return "its role is a superuser or has BYPASSRLS"
    if not on:
        return f"row-level security is disabled on {episodes}"
    if owner and not forced:
        return f"the role owns {episodes} and row-level security is not forced"
    if (len(policies) != 1 or policies[0][:3] != (POLICY, True, "*")
            or policies[0][3] != policies[0][4]
            or "dyna.tenant" not in (policies[0][3] or "")):
        return f"the policies on {episodes} are not dyna's single {POLICY}"
    return None


def _tables(conn, ns: str, t: dict[str, str], path: str) -> set[str]:
    """The store's tables present in schema ``ns``; NotAStoreError for tables named like
    dyna's without its ``meta`` table or ``dim`` row."""
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename = ANY(%s)",
        (ns, list(STORE_TABLES))).fetchall()
    have = {r[0] for r in rows}
    if have and "meta" not in have:
        raise NotAStoreError(path, f"tables {sorted(have)} in schema "
                             f"{ns!r} without a meta table")
    if have and conn.execute(f"SELECT 1 FROM {t['meta']} WHERE key = 'dim'"
                             ).fetchone() is None:
        raise NotAStoreError(path, "its meta table holds no dyna 'dim' entry")
    return have


def schema_version(conn, t: dict[str, str]) -> int | None:
    """Highest applied schema version (None: an empty ``schema_version`` table)."""
    return conn.execute(f"SELECT MAX(version) FROM {t['schema_version']}").fetchone()[0]


def _check(conn, ns: str, t: dict[str, str], path: str, schema: Sequence[tuple[str, str]],
           dim: int, version: int | None) -> None:
    """Version, dim and columns of an existing store (reads only)."""
    if version is None or version > SCHEMA_VERSION:
        raise StoreError(f"DB={path}: schema version {version} is newer than this "
                         f"dyna ({SCHEMA_VERSION}); upgrade dyna")
    stored = int(conn.execute(f"SELECT value FROM {t['meta']} WHERE key = 'dim'").fetchone()[0])
    if stored != dim:
        raise ConfigError("dim", dim, f"store {path} holds vectors of dim {stored}")
    cols = {r[0] for r in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = %s", (ns, TABLE))}
    missing = [n for n, _ in schema if n not in cols]
    if missing:
        raise StoreError(f"DB={path}: columns {missing} missing from {TABLE}")


def _label_indexes(t: dict[str, str]) -> list[str]:
    # hash indexes: any label length (a B-tree entry is limited to 2,704 bytes)
    return [f"CREATE INDEX ON {t[TABLE]} USING hash ({col})" for col in ("tenant_id", "task_type")]


def _create_sql(t: dict[str, str], schema: Sequence[tuple[str, str]]) -> list[str]:
    cols = ", ".join(f"{quote_ident(n)} {PG_TYPES[k]}" for n, k in schema)
    return [
        f"CREATE TABLE {t[TABLE]} (id bigint PRIMARY KEY, {cols})",
        *_label_indexes(t),
        f"CREATE INDEX ON {t[TABLE]} (\"timestamp\")",
        f"CREATE TABLE {t['meta']} (key text PRIMARY KEY, value text NOT NULL)",
        f"CREATE TABLE {t['schema_version']} (version integer PRIMARY KEY, "
        "applied_at float8 NOT NULL)",
        f"ALTER TABLE {t[TABLE]} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {t[TABLE]} FORCE ROW LEVEL SECURITY",
        *_v3_sql(t),
    ]


def _v3_sql(t: dict[str, str]) -> list[str]:
    """``tenant_roles``, the counter functions and the role-keyed policy (version 3)."""
    meta, roles = t["meta"], _roles(t)
    ns = meta.rsplit(".", 1)[0]
    head = "LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ "
    bodies = {
        "dyna_lock_next_id()": f"SELECT value::bigint FROM {meta} WHERE key = 'next_id' "
                               "FOR UPDATE",
        "dyna_take_id()": f"UPDATE {meta} SET value = (value::bigint + 1)::text WHERE key = "
                          "'next_id' RETURNING value::bigint - 1",
        "dyna_advance_next_id(top bigint)": f"UPDATE {meta} SET value = greatest(value::bigint,"
                                            " top)::text WHERE key = 'next_id' RETURNING "
                                            "value::bigint",
        "dyna_bump_generation()": f"UPDATE {meta} SET value = (value::bigint + 1)::text WHERE "
                                  "key = 'generation' RETURNING value::bigint"}
    out = [f"CREATE TABLE {roles} (role name PRIMARY KEY, tenant_id text NOT NULL)",
           f"ALTER TABLE {roles} ENABLE ROW LEVEL SECURITY",
           f"CREATE POLICY dyna_own_role ON {roles} FOR SELECT USING (role = current_user)"]
    for sig, body in bodies.items():
        out += [f"CREATE FUNCTION {ns}.{sig} RETURNS bigint {head}{body} $$",
                f"REVOKE ALL ON FUNCTION {ns}.{sig} FROM PUBLIC"]
    # every inserted id must have been taken from the counter first (a row placed above it
    # would make the next writer of any tenant fail on a duplicate id)
    out += [f"CREATE FUNCTION {ns}.dyna_check_ids() RETURNS trigger LANGUAGE plpgsql "
            "SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ BEGIN IF (SELECT "
            f"max(id) FROM new_rows) >= (SELECT value::bigint FROM {meta} WHERE key = "
            "'next_id') THEN RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = "
            "'dyna: an id above meta.next_id (ids are taken from the counter)'; END IF; "
            "RETURN NULL; END $$",
            f"REVOKE ALL ON FUNCTION {ns}.dyna_check_ids() FROM PUBLIC",
            f"CREATE TRIGGER dyna_ids_taken AFTER INSERT ON {t[TABLE]} REFERENCING NEW TABLE "
            f"AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {ns}.dyna_check_ids()"]
    vis = _visible(t)
    return out + [f"DROP POLICY IF EXISTS {POLICY} ON {t[TABLE]}",
                  f"CREATE POLICY {POLICY} ON {t[TABLE]} USING {vis} WITH CHECK {vis}"]


def grant_tenant_sql(t: dict[str, str], role: str) -> list[str]:
    """What a tenant role is granted: use of the schema, reading ``meta``,
    ``schema_version`` and its own ``tenant_roles`` row, reading, inserting and deleting
    its tenant's episodes (the policy limits which), and the counter functions; nothing
    that writes ``meta`` or ``tenant_roles``."""
    ns = t["meta"].rsplit(".", 1)[0]
    r = quote_ident(role)
    return ([f"GRANT USAGE ON SCHEMA {ns} TO {r}",
             f"GRANT SELECT ON {t['meta']}, {t['schema_version']}, {_roles(t)} TO {r}",
             f"GRANT SELECT, INSERT, DELETE ON {t[TABLE]} TO {r}"]
            + [f"GRANT EXECUTE ON FUNCTION {ns}.{f} TO {r}" for f in
               ("dyna_lock_next_id()", "dyna_take_id()", "dyna_advance_next_id(bigint)",
                "dyna_bump_generation()")])


def counter_sql(t: dict[str, str], functions: bool) -> dict[str, str]:
    """The statements that move ``meta``'s counters: through the owner's functions when the
    store has them (version 3), else directly (a version 2 store opened by a non-owner).
    Keys: ``lock`` (next_id, row locked), ``take`` (one id), ``advance`` (next_id raised to
    at least ``%s``), ``bump`` (generation plus one, returned)."""
    meta = t["meta"]
    if functions:
        ns = meta.rsplit(".", 1)[0]
        return {"lock": f"SELECT {ns}.dyna_lock_next_id()", "take": f"{ns}.dyna_take_id()",
                "advance": f"SELECT {ns}.dyna_advance_next_id(%s)",
                "bump": f"SELECT {ns}.dyna_bump_generation()"}
    return {"lock": f"SELECT value::bigint FROM {meta} WHERE key = 'next_id' FOR UPDATE",
            "take": None,
            "advance": f"UPDATE {meta} SET value = greatest(value::bigint, %s)::text "
                       "WHERE key = 'next_id'",
            "bump": f"UPDATE {meta} SET value = (value::bigint + 1)::text WHERE key = "
                    "'generation' RETURNING value::bigint"}


def _migrate_1_to_2(conn, ns: str, t: dict[str, str]) -> None:
    """Inside the init transaction: the B-tree over (tenant_id, task_type) replaced by
    the hash indexes (by a role owning the table; another role keeps version 1)."""
    if not conn.execute("SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid "
                        "= %s::regclass", (t[TABLE],)).fetchone()[0]:
        return
    for (name,) in conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = %s::regclass AND "
            "a.amname = 'btree' AND NOT i.indisprimary AND i.indkey[0] = (SELECT attnum "
            "FROM pg_attribute WHERE attrelid = i.indrelid AND attname = 'tenant_id')",
            (t[TABLE],)).fetchall():
        conn.execute(f"DROP INDEX {quote_ident(ns)}.{quote_ident(name)}")
    for sql in _label_indexes(t):
        conn.execute(sql)
    conn.execute(f"INSERT INTO {t['schema_version']} VALUES (2, %s)", (time.time(),))


def _migrate_2_to_3(conn, t: dict[str, str]) -> None:
    """Inside the init transaction: ``tenant_roles``, the counter functions and the
    role-keyed policy (by a role owning the table, once version 2 is applied)."""
    if not conn.execute("SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid "
                        "= %s::regclass", (t[TABLE],)).fetchone()[0] \
            or schema_version(conn, t) != 2:
        return
    for sql in _v3_sql(t):
        conn.execute(sql)
    conn.execute(f"INSERT INTO {t['schema_version']} VALUES (3, %s)", (time.time(),))


def _init_schema(conn, ns: str, t: dict[str, str], path: str,
                 schema: Sequence[tuple[str, str]], dim: int) -> bool:
    """Create the tables (True) or check and migrate existing ones (False), in one
    transaction serialised with every other dyna process's."""
    with conn.transaction():
        # serialise concurrent first opens (CREATE TABLE IF NOT EXISTS races otherwise)
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_INIT_LOCK,))
        if _tables(conn, ns, t, path):
            version = schema_version(conn, t)
            _check(conn, ns, t, path, schema, dim, version)
            if version == 1:
                _migrate_1_to_2(conn, ns, t)
            if version in (1, 2):
                _migrate_2_to_3(conn, t)
            return False
        for sql in _create_sql(t, schema):
            conn.execute(sql)
        now = time.time()
        conn.execute(f"INSERT INTO {t['schema_version']} VALUES (%s, %s)", (SCHEMA_VERSION, now))
        conn.cursor().executemany(f"INSERT INTO {t['meta']} VALUES (%s, %s)",
                                  [("dim", str(dim)), ("next_id", "0"),
                                   ("generation", "0"), ("created_at", repr(now))])
        return True
