"""PostgreSQL persistence of experience records (stores shared between machines).

:class:`PostgresStore` has the interface of :class:`dyna.store.sqlite.SQLiteStore` (append,
append_from, read, delete, delete_ids, prune, keep_newest, reset, vacuum, count, stats,
close ...) and gives the same results bit for bit: it stores values, never computes with
them. Counts and ids are integers; every statistic is computed by dyna from the rows read
back, never by a SQL aggregate whose float sum depends on the order rows are met.
``ExperienceStore("postgresql://...")`` selects it. Uses psycopg 3.

Tables (in the connection's current schema, named by ``search_path``)
    ``episodes`` (``id bigint`` primary key, then the caller's schema: ``int`` -> bigint,
    ``float`` -> float8, ``str`` / ``json`` -> text (JSON kept as the exact text dyna wrote,
    not jsonb, which would reorder keys and reformat numbers), ``vector`` -> bytea holding
    ``dim`` little-endian float32 values), ``meta`` (``dim``, ``next_id``, ``generation``,
    ``created_at``) and
    ``schema_version``. Floats travel in binary and are stored as float8: lossless. The
    database must use the UTF8 encoding.

Ids and concurrent writers
    Every write is one transaction that first locks the ``next_id`` row of ``meta``
    (``SELECT ... FOR UPDATE``): writers from any number of processes or machines queue on
    that row, get unique consecutive ids that are never reused, and commit in id order, so a
    reader that has seen id k has seen every id below k. A batch is sent with one ``COPY ...
    FROM STDIN (FORMAT BINARY)``: straight into ``episodes`` for a session that bypasses
    row-level security, else (PostgreSQL refuses ``COPY FROM`` where policies apply) into a
    temporary staging table and from there by one ``INSERT ... SELECT``, which the policy
    checks. A single record (:meth:`PostgresStore.append_row`) is one statement whose
    ``UPDATE`` of the counter takes the same row lock. A lock not granted within
    ``timeout`` seconds (``lock_timeout``) raises :class:`dyna.errors.StoreBusyError`
    (retryable, nothing written); so do a deadlock and a serialisation failure.

Live view (as :mod:`dyna.store.sqlite`)
    ``generation`` moves, in the same transaction, with every write that deletes rows (and
    with an insert of explicit ids below the counter); ``read(after_id=m)`` returns the
    rows committed since a reader saw id m; :meth:`PostgresStore.snapshot` holds one
    ``REPEATABLE READ`` transaction. The change token :meth:`PostgresStore.data_version` is
    ``next_id + generation``: unlike SQLite's ``PRAGMA data_version`` it moves with this
    connection's own commits too, which costs a reader one cheap catch-up read and never
    hides another connection's commit.

Tenant isolation (row-level security)
    ``episodes`` has row-level security enabled and forced (the table's owner is subject to
    it too) with one policy: a row is visible and writable when its ``tenant_id`` equals the
    session setting ``dyna.tenant``, or when ``dyna.all_tenants`` is ``on``. A session with
    neither set sees no row at all (fails closed). ``PostgresStore(dsn, ..., tenant="t1")``
    opens a session for one tenant; the default (``tenant=None``, what
    :class:`dyna.experience.ExperienceStore` uses, since its maintenance operations span
    tenants) sets ``dyna.all_tenants``. The settings are chosen by the client (any session
    may run ``set_config('dyna.all_tenants', 'on', false)``), so the policy guards a trusted
    application against a query that forgot its tenant filter; it is no boundary between
    clients that do not trust each other. Such clients need a role per tenant and a policy
    keyed on the role (e.g. ``tenant_id = current_user``) in place of dyna's, which this
    backend does not install (and then reports ``rls_enforced`` false), and no write
    privilege on ``meta``: its ``next_id`` and ``generation`` rows are shared by all
    tenants, as are ``data_version()`` and the table sizes of ``stats()``, which therefore
    show a tenant session how much the other tenants write. PostgreSQL lets superusers and roles
    with ``BYPASSRLS`` skip every policy, and the table's owner when row-level security is
    not forced: :meth:`PostgresStore.stats` reports ``rls_enforced`` false for such a
    session, and for a table whose row-level security was disabled or whose policies are
    not dyna's single policy. A tenant session (``tenant=...``) that the policy would not
    bind is refused with :class:`dyna.errors.ConfigError` (it fails closed) rather than
    opened reading every tenant's rows.

Secrets
    Records arrive redacted (:class:`dyna.experience.ExperienceStore` redacts in memory
    before it hands a batch to :meth:`append_from`). The DSN's password never appears in
    ``path``, ``stats()``, an error message or a log: :func:`display_dsn` rebuilds the DSN
    without it, and error texts from the server or libpq pass through :func:`_scrub` (the
    password replaced, then :func:`dyna.redact.redact_text`).

Status and errors (as :mod:`dyna.store.sqlite`)
    ``status`` is ``missing`` when this open created the tables (``ok`` after the first
    write), ``write_degraded`` after a write the server refused (read-only transaction,
    missing privilege, full disk; ``ok`` again after the next committed write). A failed
    write raises :class:`dyna.errors.StoreWriteError` and leaves nothing behind. Corruption
    the server reports (SQLSTATE class XX001/XX002) raises
    :class:`dyna.errors.StoreDamagedError`. Tables named like dyna's without dyna's ``meta``
    raise :class:`dyna.errors.NotAStoreError` before anything is written. ``read_only=True``
    sets ``default_transaction_read_only`` and never creates or migrates tables; a missing
    store then raises :class:`dyna.errors.MissingFileError`.

Space
    :meth:`PostgresStore.vacuum` runs ``VACUUM (FULL, ANALYZE)`` on the three tables: the
    table is rewritten without dead rows and the space returned to the file system, under an
    exclusive lock for its duration (as SQLite's ``VACUUM`` locks the whole file).
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dyna.errors import (ConfigError, MissingFileError, NotAStoreError, StoreBusyError,
                         StoreDamagedError, StoreError, StoreReadOnlyError, StoreWriteError,
                         check_range)
from dyna.redact import REDACTED, redact_text
from dyna.store.sqlite import (FILTER_COLUMNS, READ_CHUNK, TABLE, SQLiteStore,
                               _encode_labels, _gc_paused, _unencodable, check_schema)

__all__ = ["PG_TYPES", "PostgresStore", "SCHEMA_VERSION", "display_dsn", "is_dsn", "stored_dim"]

#: Schema version of the PostgreSQL tables (its own line of versions; version 1 already
#: has the ``generation`` counter that SQLite stores gained in their version 2). Version 2
#: indexes ``tenant_id`` and ``task_type`` by hash instead of one B-tree over both, whose
#: entries are limited to 2,704 bytes: a longer (incompressible) label was refused by the
#: server alone, where SQLite and memory store it. Version 1 stores are read as they are and
#: migrated by the first writing open of a role owning the table.
SCHEMA_VERSION = 2

#: Column types of each schema kind (see :data:`dyna.store.sqlite.KINDS`).
PG_TYPES = {"int": "bigint", "float": "float8", "str": "text", "json": "text",
            "vector": "bytea"}
#: COPY (FORMAT BINARY) type names of each kind.
_COPY_TYPES = {"int": "int8", "float": "float8", "str": "text", "json": "text",
               "vector": "bytea"}
#: Tables of a dyna store; the same names as the SQLite backend's.
STORE_TABLES = (TABLE, "meta", "schema_version")
_POLICY = "dyna_tenant_isolation"
_STAGE = "pg_temp.dyna_staging"
_VISIBLE = ("(current_setting('dyna.all_tenants', true) = 'on' "
            "OR tenant_id = current_setting('dyna.tenant', true))")
# an advisory lock key shared by every dyna process creating or migrating a store
_INIT_LOCK = 0x64796E61  # "dyna"


def is_dsn(target) -> bool:
    """Whether ``target`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def display_dsn(dsn: str) -> str:
    """The DSN without its password, for messages, stats and manifests.

    ``postgresql://user:secret@host:5432/db?options=...`` ->
    ``postgresql://user@host:5432/db`` (the connection options other than user, host, port
    and database are left out: any of them may carry a secret).
    """
    try:
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415
        parts = conninfo_to_dict(dsn)
    except Exception:  # unparsable, or no psycopg: show nothing of it
        return "postgresql://[DSN not shown]"
    user = parts.get("user")
    host = parts.get("host") or ""
    port = parts.get("port")
    db = parts.get("dbname") or ""
    return (f"postgresql://{user + '@' if user else ''}{host}{':' + port if port else ''}"
            f"/{db}")


def _password(dsn: str) -> tuple[str, ...]:
    """Every form of the DSN's password that a message may echo: the one libpq parses and,
    for a DSN libpq cannot parse (whose error quotes the offending token), the URI's
    password and ``password=`` query values as written and percent-decoded (``sslpassword``
    too)."""
    found = set()
    with contextlib.suppress(Exception):
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415
        parts = conninfo_to_dict(dsn)
        found |= {parts.get("password") or "", parts.get("sslpassword") or ""}
    with contextlib.suppress(Exception):
        parts = urllib.parse.urlsplit(dsn)
        netloc = parts.netloc.rpartition("@")[0]
        if ":" in netloc:
            found.add(netloc.split(":", 1)[1])
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
            if key in ("password", "sslpassword"):
                found.add(value)
        for pw in [raw.split("&")[0] for raw in parts.query.split("password=")[1:]]:
            found.add(pw)
    found |= {urllib.parse.unquote(pw) for pw in found}
    return tuple(sorted((pw for pw in found if pw), key=len, reverse=True))


def _scrub(text: object, secret: Sequence[str] | None) -> str:
    """An error text with the DSN's password (every form of :func:`_password`) and any
    other secret :func:`dyna.redact.redact_text` finds redacted, on one line."""
    text = " ".join(str(text).split())  # libpq's messages span lines: one line here
    for pw in secret or ():
        text = text.replace(pw, REDACTED)
    return redact_text(text)


def _from_psycopg(err: BaseException) -> bool:
    """Whether a psycopg error is anywhere in ``err``'s chain of causes and contexts."""
    seen, todo = set(), [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if type(e).__module__.startswith("psycopg"):
            return True
        todo += [e.__cause__, e.__context__]
    return False


def _detached(fn):
    """Wrap a method (or function) so that the typed error it raises carries no exception
    chain: each psycopg error it replaces stays out of ``__context__`` (``raise ... from
    None`` only hides it from a traceback), since a connection error's ``pgconn`` holds the
    DSN's password and a parse error's text may quote it. A psycopg error that escaped
    unmapped becomes the typed error of :meth:`PostgresStore._typed`."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised below, detached
            err = exc
        if type(err).__module__.startswith("psycopg"):
            owner = args[0] if args and isinstance(args[0], PostgresStore) else None
            err = (owner._typed(err, "read") if owner is not None
                   else StoreError(f"PostgreSQL: {_scrub(err, None)}"))
        if _from_psycopg(err):
            err.__context__ = err.__cause__ = None
        raise err

    return call


def _psycopg(dsn: str):
    """The psycopg module, or a StoreError saying how to install it."""
    try:
        import psycopg  # noqa: PLC0415
    except ImportError:
        raise StoreError(f"DB={display_dsn(dsn)}: the PostgreSQL backend needs psycopg 3: "
                         "pip install 'dyna[postgres]'") from None
    return psycopg


@_detached
def stored_dim(dsn: str, timeout: float = 10.0) -> int | None:
    """The vector dim of the dyna store in the DSN's schema, or None when it holds none.

    Reads only (``meta``'s ``dim`` row; nothing is created). Raises
    :class:`dyna.errors.StoreError` when the server cannot be reached (no password in it).
    """
    psycopg = _psycopg(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True,
                             connect_timeout=max(1, int(round(timeout)))) as conn:
            ns = conn.execute("SELECT pg_catalog.current_schema()").fetchone()[0]
            if ns is None or conn.execute("SELECT pg_catalog.to_regclass(%s)",
                                          (f"{_qid(ns)}.meta",)).fetchone()[0] is None:
                return None
            row = conn.execute(f"SELECT value FROM {_qid(ns)}.meta WHERE key = 'dim'"
                               ).fetchone()
    except psycopg.Error as exc:
        raise StoreError(f"DB={display_dsn(dsn)}: {_scrub(exc, _password(dsn))}") from None
    try:
        return int(row[0]) if row else None
    except ValueError:
        return None


def _qid(name: str) -> str:
    """A double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


class PostgresStore:
    """Experience records in one PostgreSQL schema.

    Parameters
    ----------
    dsn : str
        libpq connection URI (``postgresql://user:pass@host:port/db``); the tables live in
        the first schema of the connection's ``search_path`` (e.g.
        ``?options=-csearch_path%3Dmyschema``).
    schema : sequence of (str, str)
        Columns after ``id``: name and kind (:data:`dyna.store.sqlite.KINDS`); must include
        ``tenant_id``, ``task_type`` and ``timestamp``.
    dim : int
        Length of every ``vector`` column (float32 values).
    timeout : float
        Seconds to wait for a lock (``lock_timeout``) and for the connection.
    verify : bool
        Accepted for the SQLite backend's signature; the server checks its own pages.
    read_only : bool
        Never create, migrate or write (``default_transaction_read_only``).
    tenant : str, optional
        Open a session for this tenant only (row-level security); default: all tenants.

    Raises
    ------
    ConfigError
        Bad schema, dim or tenant, a store of another dim, or a tenant session that
        row-level security would not bind (superuser / BYPASSRLS role, security disabled or
        not forced for the owner, policies other than dyna's).
    MissingFileError
        ``read_only`` and no dyna store in that schema.
    NotAStoreError
        Tables named like dyna's that are not a dyna store; nothing was written.
    StoreError
        The server cannot be reached, the database is not UTF8, no schema to create the
        tables in, or a store of a newer schema version (the password is never shown).
    StoreBusyError
        Another session held a lock longer than ``timeout``.
    """

    backend = "postgresql"

    def __init__(self, dsn: str, schema: Sequence[tuple[str, str]], dim: int, *,
                 timeout: float = 10.0, verify: bool = True, read_only: bool = False,
                 tenant: str | None = None):
        del verify  # the server checks its pages; kept for SQLiteStore's signature
        self.dim = check_range("dim", dim, 1, None, integer=True)
        self.timeout = float(check_range("timeout", timeout, 0.0, None))
        self.schema = check_schema(schema)
        if sys.byteorder != "little":
            raise StoreError("PostgreSQL stores hold little-endian float32 vectors; this "
                             "machine is big-endian")
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise ConfigError("tenant", tenant, "must be a non-empty string or None")
        if tenant is not None and "\x00" in tenant:
            raise ConfigError("tenant", "\\x00", "PostgreSQL text cannot hold a NUL character")
        self._kinds = dict(self.schema)
        self.tenant = tenant
        self.path = display_dsn(str(dsn))
        self._secret = _password(str(dsn))
        self.persistent = True
        self.read_only = bool(read_only)
        self.status = "ok"
        self._lock = threading.RLock()
        #: Called as ``on_write(self)`` inside each write transaction, after the id
        #: counter's row lock is taken (no other writer can commit until it ends).
        self.on_write: Callable[[PostgresStore], None] | None = None
        #: The generation this connection's last destructive write committed (None before).
        self.last_generation: int | None = None
        self._staged = False
        self._row_insert: str | None = None
        self._closed = False
        target = str(dsn)  # held by the closure only: never in an attribute's repr
        self._reconnect = lambda: self._connect(target)
        self._conn = self._connect(target)
        try:
            self._open()
        except BaseException:
            self._conn.close()
            raise

    # ----------------------------------------------------------------- opening
    def _scrub(self, text: object) -> str:
        return _scrub(text, self._secret)

    def _connect(self, dsn: str):
        psycopg = _psycopg(dsn)

        try:
            conn = psycopg.connect(dsn, autocommit=True,
                                   connect_timeout=max(1, int(round(self.timeout))))
        except psycopg.Error as exc:
            raise StoreError(f"DB={self.path}: cannot connect: {self._scrub(exc)}") from None
        try:
            # The store's schema is the first of the DSN's search_path; the session then
            # searches pg_catalog first and that schema only, so no function, operator or
            # type of another schema on the path (one where a less trusted role can create
            # objects) shadows the built-ins this class calls, e.g. a set_config that would
            # turn a tenant session into an all-tenant one.
            self._ns = conn.execute("SELECT pg_catalog.current_schema()").fetchone()[0]
            conn.execute("SELECT pg_catalog.set_config('search_path', %s, false)",
                         ("pg_catalog" + (f", {_qid(self._ns)}" if self._ns else ""),))
            # whole milliseconds, at least 1: PostgreSQL reads lock_timeout = 0 as "wait
            # forever", the opposite of a zero timeout
            conn.execute("SELECT set_config('lock_timeout', %s, false)",
                         (f"{max(1, math.ceil(self.timeout * 1000))}ms",))
            if self.tenant is None:
                conn.execute("SELECT set_config('dyna.all_tenants', 'on', false)")
            else:
                conn.execute("SELECT set_config('dyna.all_tenants', 'off', false), "
                             "set_config('dyna.tenant', %s, false)", (self.tenant,))
            if self.read_only:
                conn.execute("SET default_transaction_read_only = on")
            enc = conn.execute("SHOW server_encoding").fetchone()[0]
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"DB={self.path}: {self._scrub(exc)}") from None
        if enc.upper() not in ("UTF8", "UTF-8"):
            conn.close()
            raise StoreError(f"DB={self.path}: database encoding {enc}; a dyna store needs "
                             "UTF8 (text must round-trip exactly)")
        return conn

    def _open(self) -> None:
        import psycopg  # noqa: PLC0415

        try:
            with self._lock:
                ns = self._ns  # the DSN's, read before the search_path was pinned
                if ns is None:
                    raise StoreError(f"DB={self.path}: no schema in search_path to hold the "
                                     "store")
                self.namespace = ns
                self._t = {t: f"{_qid(ns)}.{_qid(t)}" for t in STORE_TABLES}
                if self.read_only:
                    if not self._tables():
                        raise MissingFileError("DB", self.path, "no dyna store in schema "
                                               f"{ns!r} (a read-only open never creates one)")
                    self._check(self._version())
                else:
                    self._init_schema()
                why_not = self._rls_gap()
                self._rls_enforced = why_not is None
                if self.tenant is not None and why_not is not None:
                    # a tenant session that the policy does not bind would read, change and
                    # delete every tenant's rows: refuse it (fail closed)
                    raise ConfigError("tenant", self.tenant, "this session cannot be held "
                                      f"to one tenant: {why_not}; connect as a role "
                                      "subject to row-level security, or open all tenants")
                # PostgreSQL refuses COPY FROM into a table whose policies apply to the
                # session: such a session copies through the staging table
                self._policed = bool(self._conn.execute(
                    "SELECT row_security_active(%s::regclass)", (self._t[TABLE],)
                ).fetchone()[0])
                if self._policed and not self.read_only:
                    self._staging()
        except psycopg.Error as exc:
            raise self._typed(exc, "open") from None

    def _rls_gap(self) -> str | None:
        """Why row-level security does not bind this session to the policy on ``episodes``
        (None when it does): a superuser or BYPASSRLS role, row-level security disabled or
        (for the table's owner) not forced, or policies other than dyna's single policy
        (an added permissive policy widens what a tenant sees)."""
        bypass, owner, on, forced = self._conn.execute(
            "SELECT r.rolsuper OR r.rolbypassrls, pg_has_role(c.relowner, 'USAGE'), "
            "c.relrowsecurity, c.relforcerowsecurity FROM pg_class c, pg_roles r "
            "WHERE c.oid = %s::regclass AND r.rolname = current_user",
            (self._t[TABLE],)).fetchone()
        policies = self._conn.execute(
            "SELECT polname, polpermissive, polcmd, pg_get_expr(polqual, polrelid), "
            "pg_get_expr(polwithcheck, polrelid) FROM pg_policy WHERE polrelid = "
            "%s::regclass", (self._t[TABLE],)).fetchall()
        if bypass:
            return "its role is a superuser or has BYPASSRLS"
        if not on:
            return f"row-level security is disabled on {self._t[TABLE]}"
        if owner and not forced:
            return f"the role owns {self._t[TABLE]} and row-level security is not forced"
        if (len(policies) != 1 or policies[0][:3] != (_POLICY, True, "*")
                or policies[0][3] != policies[0][4]
                or "dyna.tenant" not in (policies[0][3] or "")):
            return f"the policies on {self._t[TABLE]} are not dyna's single {_POLICY}"
        return None

    def _tables(self) -> set[str]:
        rows = self._conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename = ANY(%s)",
            (self.namespace, list(STORE_TABLES))).fetchall()
        have = {r[0] for r in rows}
        if have and "meta" not in have:
            raise NotAStoreError(self.path, f"tables {sorted(have)} in schema "
                                 f"{self.namespace!r} without a meta table")
        if have and self._conn.execute(f"SELECT 1 FROM {self._t['meta']} WHERE key = 'dim'"
                                       ).fetchone() is None:
            raise NotAStoreError(self.path, "its meta table holds no dyna 'dim' entry")
        return have

    def _version(self) -> int | None:
        return self._conn.execute(f"SELECT MAX(version) FROM {self._t['schema_version']}"
                                  ).fetchone()[0]

    def _check(self, version: int | None) -> None:
        """Version, dim and columns of an existing store (reads only)."""
        if version is None or version > SCHEMA_VERSION:
            raise StoreError(f"DB={self.path}: schema version {version} is newer than this "
                             f"dyna ({SCHEMA_VERSION}); upgrade dyna")
        stored = int(self._conn.execute(f"SELECT value FROM {self._t['meta']} WHERE key = "
                                        "'dim'").fetchone()[0])
        if stored != self.dim:
            raise ConfigError("dim", self.dim, f"store {self.path} holds vectors of dim "
                              f"{stored}")
        cols = {r[0] for r in self._conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s", (self.namespace, TABLE))}
        missing = [n for n, _ in self.schema if n not in cols]
        if missing:
            raise StoreError(f"DB={self.path}: columns {missing} missing from {TABLE}")

    def _create_sql(self) -> list[str]:
        t = self._t
        cols = ", ".join(f"{_qid(n)} {PG_TYPES[k]}" for n, k in self.schema)
        return [
            f"CREATE TABLE {t[TABLE]} (id bigint PRIMARY KEY, {cols})",
            *self._label_indexes(),
            f"CREATE INDEX ON {t[TABLE]} (\"timestamp\")",
            f"CREATE TABLE {t['meta']} (key text PRIMARY KEY, value text NOT NULL)",
            f"CREATE TABLE {t['schema_version']} (version integer PRIMARY KEY, "
            "applied_at float8 NOT NULL)",
            f"ALTER TABLE {t[TABLE]} ENABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {t[TABLE]} FORCE ROW LEVEL SECURITY",
            f"CREATE POLICY {_POLICY} ON {t[TABLE]} USING {_VISIBLE} WITH CHECK {_VISIBLE}",
        ]

    def _label_indexes(self) -> list[str]:
        # hash indexes: any label length (a B-tree entry is limited to 2,704 bytes)
        return [f"CREATE INDEX ON {self._t[TABLE]} USING hash ({col})"
                for col in ("tenant_id", "task_type")]

    def _migrate_1_to_2(self) -> None:
        """Inside the init transaction: the B-tree over (tenant_id, task_type) replaced by
        the hash indexes (by a role owning the table; another role keeps version 1)."""
        conn = self._conn
        if not conn.execute("SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid "
                            "= %s::regclass", (self._t[TABLE],)).fetchone()[0]:
            return
        for (name,) in conn.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = %s::regclass AND "
                "a.amname = 'btree' AND NOT i.indisprimary AND i.indkey[0] = (SELECT attnum "
                "FROM pg_attribute WHERE attrelid = i.indrelid AND attname = 'tenant_id')",
                (self._t[TABLE],)).fetchall():
            conn.execute(f"DROP INDEX {_qid(self.namespace)}.{_qid(name)}")
        for sql in self._label_indexes():
            conn.execute(sql)
        conn.execute(f"INSERT INTO {self._t['schema_version']} VALUES (2, %s)", (time.time(),))

    def _init_schema(self) -> None:
        conn = self._conn
        with conn.transaction():
            # serialise concurrent first opens (CREATE TABLE IF NOT EXISTS races otherwise)
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_INIT_LOCK,))
            if self._tables():
                version = self._version()
                self._check(version)
                if version == 1:
                    self._migrate_1_to_2()
                return
            for sql in self._create_sql():
                conn.execute(sql)
            now = time.time()
            conn.execute(f"INSERT INTO {self._t['schema_version']} VALUES (%s, %s)",
                         (SCHEMA_VERSION, now))
            conn.cursor().executemany(f"INSERT INTO {self._t['meta']} VALUES (%s, %s)",
                                      [("dim", str(self.dim)), ("next_id", "0"),
                                       ("generation", "0"), ("created_at", repr(now))])
            self.status = "missing"

    # ----------------------------------------------------------------- errors
    def _typed(self, exc, doing: str, unknown: bool = False) -> Exception:
        """A psycopg error as the typed error dyna raises (password never shown).

        ``unknown``: the error may have come after the server committed (the connection was
        lost during ``COMMIT`` or during an autocommit statement); when the connection is
        gone, the outcome is unknown and the error (a :class:`dyna.errors.StoreError`, not
        a :class:`dyna.errors.StoreWriteError`, which promises nothing was stored) says so.
        """
        from psycopg import errors as pe  # noqa: PLC0415

        msg = self._scrub(exc)
        if unknown and self._conn.closed:
            self.status = "write_degraded"
            return StoreError(f"DB={self.path}: {doing}: the connection to the server was "
                              f"lost while the write committed ({msg}); whether it was "
                              "stored is unknown: the next read shows it if it was")
        if isinstance(exc, (pe.LockNotAvailable, pe.DeadlockDetected, pe.SerializationFailure,
                            pe.QueryCanceled)):
            return StoreBusyError(f"DB={self.path}: {doing}: locked by another session for "
                                  f"more than {self.timeout:g} s ({msg}); nothing was written, "
                                  "retry")
        if isinstance(exc, (pe.DataCorrupted, pe.IndexCorrupted)):
            return StoreDamagedError(self.path, msg)
        if doing == "write":
            self.status = "write_degraded"
            return StoreWriteError(self.path, msg)
        return StoreError(f"DB={self.path}: {doing} failed: {msg}")

    def _alive(self) -> None:
        """Open a new session when the server ended this one (a restart, a failover,
        ``pg_terminate_backend``, an idle timeout): the operation that met the loss raised
        its typed error; the next one reconnects with the same settings. After
        :meth:`close`, never."""
        if self._closed or not self._conn.closed:
            return
        self._conn = self._reconnect()
        self._staged = False
        if self._policed and not self.read_only:
            self._staging()

    @contextlib.contextmanager
    def _reading(self):
        import psycopg  # noqa: PLC0415

        with self._lock:
            self._alive()
            try:
                yield self._conn
            except psycopg.Error as exc:
                raise self._typed(exc, "read") from None

    # ----------------------------------------------------------------- writing
    def _write(self, fn, hook: bool = True):
        """Run ``fn(conn, start)`` in one transaction holding the id counter's row lock
        (``on_write`` runs first unless ``hook`` is False)."""
        import psycopg  # noqa: PLC0415

        if self.read_only:
            raise StoreReadOnlyError(f"DB={self.path}: opened read-only; nothing was written")
        with self._lock:
            self._alive()
            committing = False
            try:
                with self._conn.transaction():
                    start = int(self._conn.execute(
                        f"SELECT value FROM {self._t['meta']} WHERE key = 'next_id' "
                        "FOR UPDATE").fetchone()[0])
                    if hook and self.on_write is not None:
                        self.on_write(self)
                    out = fn(self._conn, start)
                    committing = True
            except psycopg.errors.UniqueViolation:
                raise ConfigError("ids", "given", "an id is already stored") from None
            except psycopg.Error as exc:
                raise self._typed(exc, "write", unknown=committing) from None
            if self.status in ("missing", "write_degraded"):
                self.status = "ok"
            return out

    # Column conversion shared with the SQLite backend (one implementation): vectors as
    # float32 bytes in native order, which __init__ checks is little-endian.
    _prepare_values = SQLiteStore._prepare
    _join_vectors = SQLiteStore._join_vectors
    _read_names = SQLiteStore._read_names
    _column = SQLiteStore._column

    def _prepare(self, columns: Mapping[str, object], n: int) -> list[list]:
        """Validated per-column lists in schema order (:meth:`SQLiteStore._prepare`), with
        text holding NUL refused (PostgreSQL text cannot store it)."""
        cols = self._prepare_values(columns, n)
        for (name, kind), vals in zip(self.schema, cols):
            if kind in ("str", "json"):
                for i, v in enumerate(vals):
                    if isinstance(v, str) and "\x00" in v:
                        raise ConfigError(f"{name}[{i}]", "\\x00", "PostgreSQL text cannot "
                                          "hold a NUL character")
        return cols

    def _staging(self) -> str:
        """The session's temporary staging table (created once per connection, outside any
        write transaction, so a rolled-back write cannot take it away)."""
        if not self._staged:
            self._conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} (LIKE "
                               f"{self._t[TABLE]}) ON COMMIT DELETE ROWS")
            self._staged = True
        return _STAGE

    def _insert(self, conn, cols: list[list], ids: np.ndarray, start: int) -> None:
        """Send a batch by one binary COPY, straight into ``episodes`` when this session
        bypasses row-level security, else into the staging table and from there by one
        ``INSERT ... SELECT`` (PostgreSQL refuses ``COPY FROM`` into a table whose policies
        apply to the session; the INSERT is checked by the policy)."""
        names = ", ".join(["id"] + [_qid(c) for c, _ in self.schema])
        types = ["int8"] + [_COPY_TYPES[k] for _, k in self.schema]
        target = _STAGE if self._policed else self._t[TABLE]
        try:
            with conn.cursor().copy(f"COPY {target} ({names}) FROM STDIN "
                                    "(FORMAT BINARY)") as cp:
                cp.set_types(types)
                for row in zip(ids.tolist(), *cols):
                    cp.write_row(row)
        except UnicodeEncodeError:  # a lone surrogate: name the column and row
            raise _unencodable(self.schema, cols) from None
        if target == _STAGE:
            conn.execute(f"INSERT INTO {self._t[TABLE]} ({names}) SELECT {names} FROM {_STAGE}")
            conn.execute(f"TRUNCATE {_STAGE}")
        top = int(ids.max()) + 1
        if top > start:
            conn.execute(f"UPDATE {self._t['meta']} SET value = %s WHERE key = 'next_id'",
                         (str(top),))
        if int(ids.min()) < start:
            # explicit ids below the counter (append(ids=...)): rows appeared below ids a
            # reader may have seen, so a read after its highest id would miss them; count
            # it as a rewrite (the generation moves), and readers read everything again
            self._bump(conn)

    def next_id(self) -> int:
        """The id the next :meth:`append` without explicit ids would start at."""
        with self._reading() as conn:
            return int(conn.execute(f"SELECT value FROM {self._t['meta']} WHERE key = "
                                    "'next_id'").fetchone()[0])

    def append(self, columns: Mapping[str, object], n: int | None = None, *,
               ids=None) -> np.ndarray:
        """Insert a batch of records in one transaction (one binary COPY); return their ids.

        Parameters, returns and errors as :meth:`dyna.store.sqlite.SQLiteStore.append`
        (ConfigError also for a text holding NUL, which PostgreSQL text cannot store).
        """
        n = len(columns["tenant_id"]) if n is None else int(n)
        cols = self._prepare(columns, n)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        given = None if ids is None else np.asarray(ids, dtype=np.int64).reshape(-1)
        if given is not None and given.shape != (n,):
            raise ConfigError("ids", given.shape, f"must have shape ({n},)")

        def do(conn, start):
            out = np.arange(start, start + n, dtype=np.int64) if given is None else given
            self._insert(conn, cols, out, start)
            return out

        return self._write(do)

    def append_row(self, values: Sequence[object]) -> int:
        """Insert one record and return its id (the fast single write of
        :meth:`dyna.store.sqlite.SQLiteStore.append_row`).

        One statement, hence one round trip and its own transaction: ``UPDATE`` of the id
        counter ``RETURNING`` the id (the row lock orders it after every other writer, as
        :meth:`append` does) feeding the ``INSERT``. It returns after its commit.
        ``on_write`` is not run: the caller's in-memory view catches up on its next read.

        Parameters
        ----------
        values : sequence
            One value per schema column, in schema order (None for NULL); a vector column as
            ``bytes`` of ``dim`` float32 values (native byte order, little-endian here).

        Raises
        ------
        ConfigError
            The wrong number of values, a vector of the wrong length, text holding NUL or
            that UTF-8 cannot encode (nothing written).
        StoreBusyError, StoreWriteError, StoreDamagedError
            As :meth:`append`; nothing written.
        """
        import psycopg  # noqa: PLC0415

        if self.read_only:
            raise StoreReadOnlyError(f"DB={self.path}: opened read-only; nothing was written")
        values = list(values)
        if len(values) != len(self.schema):
            raise ConfigError("values", len(values), f"must have {len(self.schema)} values")
        for (name, kind), v in zip(self.schema, values):
            if kind == "vector" and v is not None:
                if type(v) is not bytes or len(v) != 4 * self.dim:
                    raise ConfigError(name, type(v).__name__, f"must be bytes of {self.dim} "
                                      "float32 values")
            elif isinstance(v, str) and "\x00" in v:
                raise ConfigError(name, "\\x00", "PostgreSQL text cannot hold a NUL character")
        with self._lock:
            self._alive()
            try:
                row = self._conn.execute(self._row_sql(), values).fetchone()
            except UnicodeEncodeError:
                raise _unencodable(self.schema, [[v] for v in values]) from None
            except psycopg.Error as exc:  # autocommit: a lost connection may have committed
                raise self._typed(exc, "write", unknown=True) from None
        if self.status in ("missing", "write_degraded"):
            self.status = "ok"
        return int(row[0])

    def _row_sql(self) -> str:
        if self._row_insert is None:
            names = ", ".join(["id"] + [_qid(c) for c, _ in self.schema])
            marks = ", ".join(f"%s::{PG_TYPES[k]}" for _, k in self.schema)
            self._row_insert = (
                f"WITH c AS (UPDATE {self._t['meta']} SET value = (value::bigint + 1)::text "
                "WHERE key = 'next_id' RETURNING value::bigint - 1 AS id) "
                f"INSERT INTO {self._t[TABLE]} ({names}) SELECT c.id, {marks} FROM c "
                "RETURNING id")
        return self._row_insert

    def append_from(self, make: Callable[[int], tuple[Mapping[str, object], np.ndarray]]
                    ) -> np.ndarray:
        """Build and insert a batch inside one write transaction.

        ``make(start)`` runs with the id counter's row locked and returns ``(columns, ids)``
        with ids >= ``start``; if it raises, nothing is written and no id is consumed (see
        :meth:`dyna.store.sqlite.SQLiteStore.append_from`).
        """
        def do(conn, start):
            columns, ids = make(start)
            ids = np.asarray(ids, dtype=np.int64).reshape(-1)
            if ids.size:
                if int(ids.min()) < start:
                    raise ConfigError("ids", int(ids.min()), f"must be >= next id {start}")
                self._insert(conn, self._prepare(columns, ids.size), ids, start)
            return ids

        return self._write(do)

    def _where(self, where: Mapping[str, object] | None) -> tuple[str, list]:
        if not where:
            return "", []
        parts, args = [], []
        for k, v in where.items():
            if k not in FILTER_COLUMNS or (k != "id" and k not in self._kinds):
                raise ConfigError(k, v, f"filter column must be one of {list(FILTER_COLUMNS)}")
            pg = "bigint" if k == "id" else PG_TYPES[self._kinds[k]]
            if isinstance(v, (list, tuple, np.ndarray)):
                vals = list(v.tolist() if isinstance(v, np.ndarray) else v)
                if pg == "text":  # text holding NUL is never stored, so it matches nothing
                    vals = [x for x in vals if x is None or "\x00" not in str(x)]
                parts.append(f"{_qid(k)} = ANY(%s::{pg}[])")
                args.append([None if x is None else (str(x) if pg == "text" else x)
                             for x in vals])
            elif pg == "text" and v is not None and "\x00" in str(v):
                parts.append("FALSE")  # as above: no stored text holds NUL
            else:
                parts.append(f"{_qid(k)} = %s::{pg}")  # exact match: never LIKE
                args.append(str(v) if pg == "text" and v is not None else v)
        return " WHERE " + " AND ".join(parts), args

    def _execute_count(self, sql: str, args=()) -> int:
        """Run one destructive statement in a write transaction; when it touched rows, add
        one to the ``generation`` counter in the same transaction. Returns rows touched."""
        def do(conn, _):
            n = conn.execute(sql, args).rowcount
            if n:
                self._bump(conn)
            return n

        return self._write(do)

    def _bump(self, conn) -> None:
        """Inside a write transaction: add one to the ``generation`` counter."""
        gen = self._generation(conn) + 1
        conn.execute(f"UPDATE {self._t['meta']} SET value = %s WHERE key = 'generation'",
                     (str(gen),))
        self.last_generation = gen

    def _generation(self, conn) -> int:
        return int(conn.execute(f"SELECT value FROM {self._t['meta']} WHERE key = "
                                "'generation'").fetchone()[0])

    def delete(self, where: Mapping[str, object]) -> int:
        """Delete the rows matching every ``column = value`` of ``where`` exactly (a list:
        any of its values); an empty ``where`` is refused (use :meth:`reset`)."""
        if not where:
            raise ConfigError("where", where, "must name at least one column; use reset()")
        clause, args = self._where(where)
        return self._execute_count(f"DELETE FROM {self._t[TABLE]}{clause}", args)

    def delete_ids(self, ids) -> int:
        """Delete rows by id (int64 array or sequence); returns rows deleted."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not ids.size:
            return 0
        return self._execute_count(f"DELETE FROM {self._t[TABLE]} WHERE id = ANY(%s::bigint[])",
                                   (ids.tolist(),))

    def prune(self, cutoff: float, where: Mapping[str, object] | None = None) -> int:
        """Delete rows with ``timestamp < cutoff`` (seconds, UTC); returns rows deleted."""
        cutoff = float(check_range("cutoff", cutoff))
        clause, args = self._where(where)
        clause = (clause + " AND" if clause else " WHERE") + ' "timestamp" < %s::float8'
        return self._execute_count(f"DELETE FROM {self._t[TABLE]}{clause}", args + [cutoff])

    def keep_newest(self, n: int, by: Sequence[str] = ("tenant_id", "task_type")) -> int:
        """Keep the newest ``n`` rows (by timestamp, then id) per group; returns rows deleted."""
        n = check_range("compact_keep_records", n, 0, None, integer=True)
        for col in by:
            if col not in self._kinds:
                raise ConfigError("by", col, "unknown column")
        part = ", ".join(_qid(c) for c in by)
        t = self._t[TABLE]
        return self._execute_count(
            f"DELETE FROM {t} WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER "
            f'(PARTITION BY {part} ORDER BY "timestamp" DESC, id DESC) AS r FROM {t}) AS w '
            "WHERE r > %s)", (n,))

    def reset(self) -> int:
        """Delete every (visible) row; the id counter keeps counting. Returns rows deleted."""
        return self._execute_count(f"DELETE FROM {self._t[TABLE]}")

    def vacuum(self) -> dict:
        """``VACUUM (FULL, ANALYZE)`` of the store's tables: dead rows' space goes back to the
        file system (an exclusive lock on each table while it is rewritten).

        Returns
        -------
        dict
            ``bytes_before`` / ``bytes_after`` (:meth:`file_bytes`), ``freelist_count`` (0: a
            table rewritten by VACUUM FULL has no free space) and ``checkpoint`` ([0, 0, 0]).
        """
        import psycopg  # noqa: PLC0415

        if self.read_only:
            raise StoreReadOnlyError(f"DB={self.path}: opened read-only; VACUUM not run")
        with self._lock:
            before = self.file_bytes()
            try:
                self._conn.execute("VACUUM (FULL, ANALYZE) " + ", ".join(self._t.values()))
            except psycopg.Error as exc:
                raise self._typed(exc, "write") from None
            return {"bytes_before": before, "bytes_after": self.file_bytes(),
                    "freelist_count": 0, "checkpoint": [0, 0, 0]}

    def checkpoint(self) -> tuple[int, int, int]:
        """Nothing to do (the server manages its WAL); ``(0, 0, 0)`` as in memory."""
        return (0, 0, 0)

    # ----------------------------------------------------------------- reading
    def read(self, where: Mapping[str, object] | None = None, *,
             columns: Sequence[str] | None = None,
             categories: Sequence[str] = (), after_id: int | None = None
             ) -> dict[str, object]:
        """Rows matching ``where`` (exact), in id order, as numpy columns.

        The same columns, dtypes and conventions as :meth:`dyna.store.sqlite.SQLiteStore.read`
        (one binary ``SELECT`` fetched in chunks of :data:`dyna.store.sqlite.READ_CHUNK`
        rows; floats arrive as the float8 bits stored). ``after_id``: only rows with
        ``id > after_id`` (ids commit in increasing order, so these are exactly the rows
        committed since a reader saw id ``after_id``).
        """
        names = self._read_names(columns, categories)
        clause, args = self._where(where)
        if after_id is not None:
            clause = (clause + " AND" if clause else " WHERE") + " id > %s::bigint"
            args = args + [int(after_id)]
        sql = (f"SELECT {', '.join(_qid(n) for n in names)} FROM {self._t[TABLE]}{clause} "
               "ORDER BY id")
        kinds = ["int" if name == "id" else self._kinds[name] for name in names]
        acc: list[list] = [[] for _ in names]
        vec = [j for j, kind in enumerate(kinds) if kind == "vector"]
        with self._reading() as conn, _gc_paused():
            cur = conn.cursor(binary=True)
            cur.execute(sql, args)
            while chunk := cur.fetchmany(READ_CHUNK):
                cols = list(zip(*chunk))
                for j in vec:
                    acc[j].append(self._join_vectors(cols[j]))
                    cols[j] = ()
                for col, vals in zip(acc, cols):
                    col.extend(vals)
        cats = set(categories)
        return {name: _encode_labels(vals) if name in cats else self._column(kind, vals)
                for name, kind, vals in zip(names, kinds, acc)}

    def count(self, where: Mapping[str, object] | None = None) -> int:
        """Number of (visible) rows matching ``where`` exactly."""
        clause, args = self._where(where)
        with self._reading() as conn:
            return int(conn.execute(f"SELECT count(*) FROM {self._t[TABLE]}{clause}", args)
                       .fetchone()[0])

    # ----------------------------------------------------------------- live view
    def data_version(self) -> int:
        """A change token: ``next_id + generation`` from ``meta`` (one indexed read). Both
        only grow, inserts move the first and destructive writes the second, so the token
        changes with every committed change (this connection's own included, unlike
        SQLite's ``PRAGMA data_version``) and never without one."""
        with self._reading() as conn:
            return int(conn.execute(
                f"SELECT sum(value::bigint) FROM {self._t['meta']} WHERE key IN "
                "('next_id', 'generation')").fetchone()[0])

    def generation(self) -> int:
        """The counter of destructive writes (``meta.generation``): it changes only when rows
        were deleted."""
        with self._reading() as conn:
            return self._generation(conn)

    def max_id(self) -> int:
        """The highest id this session can see, -1 when it sees no row."""
        with self._reading() as conn:
            top = conn.execute(f"SELECT max(id) FROM {self._t[TABLE]}").fetchone()[0]
        return -1 if top is None else int(top)

    @contextlib.contextmanager
    def snapshot(self):
        """Hold one ``REPEATABLE READ`` transaction: every read inside sees the same committed
        state. Inside a write transaction (e.g. from ``on_write``) it adds nothing."""
        from psycopg.pq import TransactionStatus  # noqa: PLC0415

        with self._lock:
            with self._reading():
                pass  # reconnects a session the server ended
            if self._conn.info.transaction_status != TransactionStatus.IDLE:
                yield self
                return
            with self._reading() as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield self
            finally:
                with contextlib.suppress(Exception):
                    self._conn.execute("COMMIT")

    def summary(self, where: Mapping[str, object] | None = None) -> dict:
        """Counts and time span of the rows matching ``where``, from SQL (no row is loaded):
        ``n_records``, ``n_tenants``, ``n_task_types`` (NULL as the empty label), ``oldest`` /
        ``newest`` (min / max timestamp; None without rows). Counts and min / max only: exact
        whatever the row order (as :meth:`dyna.store.sqlite.SQLiteStore.summary`)."""
        clause, args = self._where(where)
        sql = ("SELECT count(*), count(DISTINCT COALESCE(tenant_id, '')), "
               "count(DISTINCT COALESCE(task_type, '')), min(\"timestamp\"), "
               f"max(\"timestamp\") FROM {self._t[TABLE]}{clause}")
        with self._reading() as conn:
            n, nt, nk, lo, hi = conn.execute(sql, args).fetchone()
        return {"n_records": int(n), "n_tenants": int(nt), "n_task_types": int(nk),
                "oldest": None if lo is None else float(lo),
                "newest": None if hi is None else float(hi)}

    def consumption(self, where: Mapping[str, object] | None = None) -> list[dict]:
        """Records and bytes per (tenant, task type), from SQL (integer sums only), counted as
        :meth:`dyna.store.sqlite.SQLiteStore.consumption` does (8 per number, 4 d per vector,
        the UTF-8 length of each text)."""
        parts = ["8"]
        for name, kind in self.schema:
            if kind in ("int", "float"):
                parts.append("8")
            elif kind == "vector":
                parts.append(str(4 * self.dim))
            else:
                parts.append(f"COALESCE(octet_length({_qid(name)}), 0)")
        clause, args = self._where(where)
        sql = (f"SELECT COALESCE(tenant_id, ''), COALESCE(task_type, ''), count(*), "
               f"sum({' + '.join(parts)})::bigint FROM {self._t[TABLE]}{clause} GROUP BY 1, 2")
        with self._reading() as conn:
            rows = conn.execute(sql, args).fetchall()
        out = [{"tenant_id": t, "task_type": k, "records": int(n), "bytes": int(b)}
               for t, k, n, b in rows]
        out.sort(key=lambda r: (r["tenant_id"], r["task_type"]))
        return out

    def file_bytes(self) -> int:
        """Bytes on the server of the store's tables with their indexes and TOAST data."""
        with self._reading() as conn:
            tables = list(self._t.values())  # names passed as values, never spliced in
            return int(conn.execute(
                "SELECT " + " + ".join(["pg_total_relation_size(%s::regclass)"] * len(tables)),
                tables).fetchone()[0])

    def schema_version(self) -> int:
        """Highest applied schema version."""
        with self._reading():
            return int(self._version())

    def stats(self) -> dict:
        """Rows, pages, sizes and status of the store (JSON-ready; no password)."""
        with self._reading() as conn:
            rows = conn.execute(f"SELECT count(*) FROM {self._t[TABLE]}").fetchone()[0]
            page_size = int(conn.execute("SHOW block_size").fetchone()[0])
            table_bytes = conn.execute("SELECT pg_relation_size(%s::regclass)",
                                       (self._t[TABLE],)).fetchone()[0]
        return {"path": self.path, "backend": self.backend, "persistent": True,
                "status": self.status, "rows": int(rows),
                "page_count": int(table_bytes) // page_size, "freelist_count": 0,
                "page_size": page_size, "file_bytes": self.file_bytes(),
                "schema_version": self.schema_version(), "busy_timeout_s": self.timeout,
                "read_only": self.read_only, "namespace": self.namespace,
                "tenant": self.tenant, "rls_enforced": self._rls_enforced}

    def close(self) -> None:
        """Close the connection (idempotent); an open transaction left on ``_conn`` is rolled
        back and :class:`dyna.errors.StoreWriteError` raised after closing."""
        from psycopg.pq import TransactionStatus  # noqa: PLC0415

        with self._lock:
            self._closed = True
            if self._conn.closed:
                return
            open_tx = self._conn.info.transaction_status not in (TransactionStatus.IDLE,
                                                                 TransactionStatus.UNKNOWN)
            with contextlib.suppress(Exception):
                if open_tx:
                    self._conn.rollback()
            self._conn.close()
            if open_tx:
                raise StoreWriteError(self.path, "an uncommitted transaction was open at "
                                      "close and was rolled back")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# every public method (and opening) raises its typed errors detached from the psycopg error
# they replace (see _detached); snapshot() is a context manager and maps its own errors
for _name, _method in list(vars(PostgresStore).items()):
    if callable(_method) and (_name == "__init__" or not _name.startswith("_")) \
            and _name != "snapshot":
        setattr(PostgresStore, _name, _detached(_method))
del _name, _method
