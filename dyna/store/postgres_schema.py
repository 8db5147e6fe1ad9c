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
    (:data:`POLICY`): a row is visible and writable when its ``tenant_id`` equals the
    session setting ``dyna.tenant``, or when ``dyna.all_tenants`` is ``on``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import NamedTuple

from dyna.errors import ConfigError, MissingFileError, NotAStoreError, StoreError
from dyna.store.columns import STORE_TABLES, TABLE
from dyna.store.postgres_dsn import load_psycopg, quote_ident, scrubbed

__all__ = ["PG_TYPES", "POLICY", "SCHEMA_VERSION", "Tables", "connect", "open_tables"]

#: Schema version of the PostgreSQL tables (its own line of versions; version 1 already
#: has the ``generation`` counter that SQLite stores gained in their version 2). Version 2
#: indexes ``tenant_id`` and ``task_type`` by hash instead of one B-tree over both, whose
#: entries are limited to 2,704 bytes: a longer (incompressible) label was refused by the
#: server alone, where SQLite and memory store it. Version 1 stores are read as they are and
#: migrated by the first writing open of a role owning the table.
SCHEMA_VERSION = 2

#: Column types of each schema kind (see :data:`dyna.store.columns.KINDS`).
PG_TYPES = {"int": "bigint", "float": "float8", "str": "text", "json": "text",
            "vector": "bytea"}
#: The row-level security policy on ``episodes``.
POLICY = "dyna_tenant_isolation"
_VISIBLE = ("(current_setting('dyna.all_tenants', true) = 'on' "
            "OR tenant_id = current_setting('dyna.tenant', true))")
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
    if enc.upper() not in ("UTF8", "UTF-8"):
        conn.close()
        raise StoreError(f"DB={path}: database encoding {enc}; a dyna store needs "
                         "UTF8 (text must round-trip exactly)")
    return conn, ns


class Tables(NamedTuple):
    """What :func:`open_tables` found: the tables' schema, their qualified names by table,
    whether this open created them, and row-level security for the session."""

    namespace: str
    names: dict[str, str]
    created: bool
    rls_enforced: bool
    policed: bool


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
        A store of another dim, or a tenant session the policy would not bind.
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
    # PostgreSQL refuses COPY FROM into a table whose policies apply to the session: such
    # a session copies through a staging table
    policed = bool(conn.execute("SELECT row_security_active(%s::regclass)",
                                (t[TABLE],)).fetchone()[0])
    return Tables(ns, t, created, why_not is None, policed)


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
        f"CREATE POLICY {POLICY} ON {t[TABLE]} USING {_VISIBLE} WITH CHECK {_VISIBLE}",
    ]


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
            return False
        for sql in _create_sql(t, schema):
            conn.execute(sql)
        now = time.time()
        conn.execute(f"INSERT INTO {t['schema_version']} VALUES (%s, %s)", (SCHEMA_VERSION, now))
        conn.cursor().executemany(f"INSERT INTO {t['meta']} VALUES (%s, %s)",
                                  [("dim", str(dim)), ("next_id", "0"),
                                   ("generation", "0"), ("created_at", repr(now))])
        return True
