"""PostgreSQL persistence of experience records (stores shared between machines).

:class:`PostgresStore` implements the backend protocol
:class:`dyna.store.backend.StoreBackend`, as :class:`dyna.store.sqlite.SQLiteStore` does, and
gives the same results bit for bit: it stores values, never computes with them. Counts and
ids are integers; every statistic is computed by dyna from the rows read back, never by a
SQL aggregate whose float sum depends on the order rows are met.
``ExperienceStore("postgresql://...")`` selects it. Uses psycopg 3. Opening a session and
the tables is :mod:`dyna.store.postgres_schema`; keeping the DSN's password out of every
text is :mod:`dyna.store.postgres_dsn`.

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
    (``SELECT ... FOR UPDATE``, in the owner's function ``dyna_lock_next_id`` on a store of
    schema version 3): writers from any number of processes or machines queue on
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
    it too) with one policy (:mod:`dyna.store.postgres_schema`). A tenant role, mapped to one
    tenant in ``tenant_roles`` (:func:`grant_tenant`), sees and writes that tenant's rows
    only, whatever its session sets; it reads ``meta`` and moves its counters only through
    the owner's ``SECURITY DEFINER`` functions, which never lower them, and an insert
    trigger refuses ids at or above ``next_id``. The tables' owner (and roles granted it) is
    the trusted application: its session sees the rows of the tenant in its ``dyna.tenant``
    setting (``PostgresStore(dsn, ..., tenant="t1")``), or all with ``dyna.all_tenants`` on
    (``tenant=None``, what :class:`dyna.experience.ExperienceStore` uses, since its
    maintenance operations span tenants), and none with neither (fails closed); for it
    the settings are advisory. :meth:`PostgresStore.stats` reports ``rls_enforced`` true
    only when the catalogs show the server holds the session's role to one tenant
    (:func:`dyna.store.postgres_schema.role_isolation`), ``isolation`` (``"role"``,
    ``"advisory"``, ``"none"``) and ``rls_gap`` (why not). A tenant session
    (``tenant=...``) that the policy would not bind at all (superuser, ``BYPASSRLS``,
    security disabled or not forced for the owner, policies not dyna's), or a tenant role
    asking for another tenant than its own, is refused with
    :class:`dyna.errors.ConfigError`. ``next_id``, ``generation``, ``data_version()`` and the
    table sizes of ``stats()`` are shared by all tenants, so they show a tenant session how
    much the others write.

Secrets
    Records arrive redacted (:class:`dyna.experience.ExperienceStore` redacts in memory
    before it hands a batch to :meth:`append_from`). The DSN's password never appears in
    ``path``, ``stats()``, an error message or a log: :func:`display_dsn` rebuilds the DSN
    without it, and error texts from the server or libpq pass through
    :func:`dyna.store.postgres_dsn.scrubbed` (the password replaced, then
    :func:`dyna.redact.redact_text`).

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
import sys
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dyna.errors import (ConfigError, StoreBusyError, StoreDamagedError, StoreError,
                         StoreReadOnlyError, StoreWriteError, check_range)
from dyna.store.columns import check_tenant
from dyna.store import columns as _columns
from dyna.store.backend import StoreBackend
from dyna.store.columns import (TABLE, check_filter, check_group_by, check_row,
                                check_schema, collect_chunks, consumption_rows, given_ids,
                                made_ids, prepare_columns, read_names, row_bytes_sql,
                                summary_dict, to_columns, unencodable)
from dyna.store.postgres_dsn import (detached, display_dsn, is_dsn, password_forms,
                                     quote_ident, scrubbed, stored_dim)
from dyna.store.postgres_schema import (PG_TYPES, SCHEMA_VERSION, connect,
                                        grant_tenant_sql, open_tables, schema_version)

__all__ = ["PG_TYPES", "PostgresStore", "SCHEMA_VERSION", "display_dsn", "grant_tenant", "is_dsn",
           "stored_dim"]

#: COPY (FORMAT BINARY) type names of each kind.
_COPY_TYPES = {"int": "int8", "float": "float8", "str": "text", "json": "text",
               "vector": "bytea"}
_STAGE = "pg_temp.dyna_staging"


def _refuse_nul(schema: Sequence[tuple[str, str]], cols: list[list]) -> None:
    """Refuse text holding NUL in prepared columns (PostgreSQL text cannot store it)."""
    for (name, kind), vals in zip(schema, cols):
        if kind in ("str", "json"):
            for i, v in enumerate(vals):
                if isinstance(v, str) and "\x00" in v:
                    raise ConfigError(f"{name}[{i}]", "\\x00", "PostgreSQL text cannot "
                                      "hold a NUL character")


def _where(where: Mapping[str, object] | None, kinds: Mapping[str, str]) -> tuple[str, list]:
    """A ``WHERE`` clause matching every ``column = value`` exactly (a list: any of its
    values); text holding NUL is never stored, so it matches nothing."""
    if not where:
        return "", []
    parts, args = [], []
    for k, v in where.items():
        check_filter(k, v, kinds)
        pg = "bigint" if k == "id" else PG_TYPES[kinds[k]]
        if isinstance(v, (list, tuple, np.ndarray)):
            vals = list(v.tolist() if isinstance(v, np.ndarray) else v)
            if pg == "text":
                vals = [x for x in vals if x is None or "\x00" not in str(x)]
            parts.append(f"{quote_ident(k)} = ANY(%s::{pg}[])")
            args.append([None if x is None else (str(x) if pg == "text" else x)
                         for x in vals])
        elif pg == "text" and v is not None and "\x00" in str(v):
            parts.append("FALSE")
        else:
            parts.append(f"{quote_ident(k)} = %s::{pg}")  # exact match: never LIKE
            args.append(str(v) if pg == "text" and v is not None else v)
    return " WHERE " + " AND ".join(parts), args


def _create_staging(conn, episodes: str) -> None:
    """The session's temporary staging table (created once per connection, outside any
    write transaction, so a rolled-back write cannot take it away)."""
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} (LIKE {episodes}) "
                 "ON COMMIT DELETE ROWS")


def _insert(conn, cols: list[list], ids: np.ndarray, start: int, *,
            schema: Sequence[tuple[str, str]], tables: Mapping[str, str], policed: bool,
            advance: str) -> None:
    """Send a batch by one binary COPY and move the id counter past it.

    Straight into ``episodes`` for a session that bypasses row-level security, else into
    the staging table and from there by one ``INSERT ... SELECT`` (PostgreSQL refuses
    ``COPY FROM`` into a table whose policies apply to the session; the INSERT is checked
    by the policy). ``advance``: the statement raising ``next_id`` (:func:`counter_sql`).
    """
    names = ", ".join(["id"] + [quote_ident(c) for c, _ in schema])
    types = ["int8"] + [_COPY_TYPES[k] for _, k in schema]
    target = _STAGE if policed else tables[TABLE]
    top = int(ids.max()) + 1
    if top > start:  # first: the store's insert trigger admits only ids below the counter
        conn.execute(advance, (top,))
    try:
        with conn.cursor().copy(f"COPY {target} ({names}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(types)
            for row in zip(ids.tolist(), *cols):
                cp.write_row(row)
    except UnicodeEncodeError:  # a lone surrogate: name the column and row
        raise unencodable(schema, cols) from None
    if target == _STAGE:
        conn.execute(f"INSERT INTO {tables[TABLE]} ({names}) SELECT {names} FROM {_STAGE}")
        conn.execute(f"TRUNCATE {_STAGE}")


def _row_sql(tables: Mapping[str, str], schema: Sequence[tuple[str, str]],
            take: str | None) -> str:
    """The single-record insert: one statement whose ``UPDATE`` of the id counter (the row
    lock every writer takes; ``take``: the owner's function doing it, None: directly) gives
    the id to the ``INSERT``."""
    names = ", ".join(["id"] + [quote_ident(c) for c, _ in schema])
    marks = ", ".join(f"%s::{PG_TYPES[k]}" for _, k in schema)
    if take is not None:
        return f"INSERT INTO {tables[TABLE]} ({names}) SELECT {take}, {marks} RETURNING id"
    return (f"WITH c AS (UPDATE {tables['meta']} SET value = (value::bigint + 1)::text "
            "WHERE key = 'next_id' RETURNING value::bigint - 1 AS id) "
            f"INSERT INTO {tables[TABLE]} ({names}) SELECT c.id, {marks} FROM c RETURNING id")


def _generation(conn, meta: str) -> int:
    return int(conn.execute(f"SELECT value FROM {meta} WHERE key = 'generation'").fetchone()[0])


class PostgresStore(StoreBackend):
    """Experience records in one PostgreSQL schema.

    Parameters
    ----------
    dsn : str
        libpq connection URI (``postgresql://user:pass@host:port/db``); the tables live in
        the first schema of the connection's ``search_path`` (e.g.
        ``?options=-csearch_path%3Dmyschema``).
    schema : sequence of (str, str)
        Columns after ``id``: name and kind (:data:`dyna.store.columns.KINDS`); must
        include ``tenant_id``, ``task_type`` and ``timestamp``.
    dim : int
        Length of every ``vector`` column (float32 values).
    timeout : float
        Seconds to wait for a lock (``lock_timeout``) and for the connection.
    verify : bool
        Accepted for the SQLite backend's signature; the server checks its own pages.
    read_only : bool
        Never create, migrate or write (``default_transaction_read_only``).
    tenant : str, optional
        Open a session for this tenant only (row-level security); default: all it may see.

    Raises
    ------
    ConfigError
        Bad schema, dim or tenant, a store of another dim, a tenant session that
        row-level security would not bind (superuser / BYPASSRLS role, security disabled or
        not forced for the owner, policies other than dyna's), or a tenant role asking for
        another tenant than the one ``tenant_roles`` maps it to.
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
        import psycopg  # noqa: PLC0415

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
        self._secret = secret = password_forms(str(dsn))
        self.persistent = True
        self.read_only = bool(read_only)
        self.status = "ok"
        self._lock = threading.RLock()
        #: Called as ``on_write(self)`` inside each write transaction, after the id
        #: counter's row lock is taken (no other writer can commit until it ends).
        self.on_write: Callable[[PostgresStore], None] | None = None
        #: The generation this connection's last destructive write committed (None before).
        self.last_generation: int | None = None
        self._closed = False
        target = str(dsn)  # held by the closure only: never in an attribute's repr
        self._reconnect = lambda: connect(target, path=self.path, secret=secret,
                                          timeout=self.timeout, tenant=tenant,
                                          read_only=self.read_only)[0]
        self._conn, ns = connect(target, path=self.path, secret=secret, timeout=self.timeout,
                                 tenant=tenant, read_only=self.read_only)
        try:
            try:
                tables = open_tables(self._conn, ns, path=self.path, schema=self.schema,
                                     dim=self.dim, read_only=self.read_only, tenant=tenant)
                if tables.policed and not self.read_only:
                    _create_staging(self._conn, tables.names[TABLE])
            except psycopg.Error as exc:
                raise self._typed(exc, "open") from None
            self.namespace, self._t = tables.namespace, tables.names
            self._policed, self._counters = tables.policed, tables.counters
            self._isolation = {"rls_enforced": tables.rls_enforced,
                               "isolation": tables.isolation, "rls_gap": tables.gap}
            if tenant is None and tables.isolation == "role":  # the one tenant it can see
                self.tenant = tables.role_tenant
            self.status = "missing" if tables.created else "ok"
            self._row_insert = _row_sql(self._t, self.schema, self._counters["take"])
        except BaseException:
            self._conn.close()
            raise

    # ----------------------------------------------------------------- errors
    def _typed(self, exc, doing: str, unknown: bool = False) -> Exception:
        """A psycopg error as the typed error dyna raises (password never shown).

        ``unknown``: the error may have come after the server committed (the connection was
        lost during ``COMMIT`` or during an autocommit statement); when the connection is
        gone, the outcome is unknown and the error (a :class:`dyna.errors.StoreError`, not
        a :class:`dyna.errors.StoreWriteError`, which promises nothing was stored) says so.
        """
        from psycopg import errors as pe  # noqa: PLC0415

        msg = scrubbed(exc, self._secret)
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
        if self._policed and not self.read_only:
            _create_staging(self._conn, self._t[TABLE])

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
                    start = int(self._conn.execute(self._counters["lock"]).fetchone()[0])
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

    def _bump(self, conn) -> None:
        """Inside a write transaction: add one to the ``generation`` counter."""
        self.last_generation = int(conn.execute(self._counters["bump"]).fetchone()[0])

    def _execute_count(self, sql: str, args=()) -> int:
        """Run one destructive statement in a write transaction; when it touched rows, add
        one to the ``generation`` counter in the same transaction. Returns rows touched."""
        def do(conn, _):
            n = conn.execute(sql, args).rowcount
            if n:
                self._bump(conn)
            return n

        return self._write(do)

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
        cols = prepare_columns(self.schema, self.dim, columns, n)
        _refuse_nul(self.schema, cols)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        given = given_ids(ids, n)

        def do(conn, start):
            out = np.arange(start, start + n, dtype=np.int64) if given is None else given
            _insert(conn, cols, out, start, schema=self.schema, tables=self._t,
                    policed=self._policed,
                    advance=self._counters["advance"])
            if int(out.min()) < start:
                # explicit ids below the counter: rows appeared below ids a reader may have
                # seen, so a read after its highest id would miss them; count it as a
                # rewrite (the generation moves), and readers read everything again
                self._bump(conn)
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
        values = list(check_row(self.schema, self.dim, values, refuse_nul=True))
        with self._lock:
            self._alive()
            try:
                row = self._conn.execute(self._row_insert, values).fetchone()
            except UnicodeEncodeError:
                raise unencodable(self.schema, [[v] for v in values]) from None
            except psycopg.Error as exc:  # autocommit: a lost connection may have committed
                raise self._typed(exc, "write", unknown=True) from None
        if self.status in ("missing", "write_degraded"):
            self.status = "ok"
        return int(row[0])

    def append_from(self, make: Callable[[int], tuple[Mapping[str, object], np.ndarray]]
                    ) -> np.ndarray:
        """Build and insert a batch inside one write transaction.

        ``make(start)`` runs with the id counter's row locked and returns ``(columns, ids)``
        with ids >= ``start``; if it raises, nothing is written and no id is consumed (see
        :meth:`dyna.store.sqlite.SQLiteStore.append_from`).
        """
        def do(conn, start):
            columns, ids = make(start)
            ids = made_ids(ids, start)
            if ids.size:
                cols = prepare_columns(self.schema, self.dim, columns, ids.size)
                _refuse_nul(self.schema, cols)
                _insert(conn, cols, ids, start, schema=self.schema, tables=self._t,
                        policed=self._policed,
                    advance=self._counters["advance"])
            return ids

        return self._write(do)

    def delete(self, where: Mapping[str, object]) -> int:
        """Delete the rows matching every ``column = value`` of ``where`` exactly (a list:
        any of its values); an empty ``where`` is refused (use :meth:`reset`)."""
        if not where:
            raise ConfigError("where", where, "must name at least one column; use reset()")
        clause, args = _where(where, self._kinds)
        return self._execute_count(f"DELETE FROM {self._t[TABLE]}{clause}", args)

    def delete_ids(self, ids) -> int:
        """Delete rows by id (an id given twice is deleted once); returns rows deleted."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not ids.size:
            return 0
        return self._execute_count(f"DELETE FROM {self._t[TABLE]} WHERE id = ANY(%s::bigint[])",
                                   (ids.tolist(),))

    def prune(self, cutoff: float, where: Mapping[str, object] | None = None) -> int:
        """Delete rows with ``timestamp < cutoff`` (seconds, UTC); returns rows deleted."""
        cutoff = float(check_range("cutoff", cutoff))
        clause, args = _where(where, self._kinds)
        clause = (clause + " AND" if clause else " WHERE") + ' "timestamp" < %s::float8'
        return self._execute_count(f"DELETE FROM {self._t[TABLE]}{clause}", args + [cutoff])

    def keep_newest(self, n: int, by: Sequence[str] = ("tenant_id", "task_type")) -> int:
        """Keep the newest ``n`` rows (by timestamp, then id) per group; returns rows deleted."""
        n = check_range("compact_keep_records", n, 0, None, integer=True)
        check_group_by(by, self._kinds)
        part = ", ".join(quote_ident(c) for c in by)
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
        (one binary ``SELECT`` fetched in chunks of :data:`dyna.store.columns.READ_CHUNK`
        rows; floats arrive as the float8 bits stored). ``after_id``: only rows with
        ``id > after_id`` (ids commit in increasing order, so these are exactly the rows
        committed since a reader saw id ``after_id``).
        """
        names = read_names(self.schema, columns, categories)
        clause, args = _where(where, self._kinds)
        if after_id is not None:
            clause = (clause + " AND" if clause else " WHERE") + " id > %s::bigint"
            args = args + [int(after_id)]
        sql = (f"SELECT {', '.join(quote_ident(n) for n in names)} FROM {self._t[TABLE]}"
               f"{clause} ORDER BY id")
        kinds = ["int" if name == "id" else self._kinds[name] for name in names]
        with self._reading() as conn:
            cur = conn.cursor(binary=True)
            cur.execute(sql, args)
            acc = collect_chunks(iter(lambda: cur.fetchmany(_columns.READ_CHUNK), []), kinds,
                                 self.dim)
        return to_columns(names, kinds, acc, categories, self.dim, self.path)

    def count(self, where: Mapping[str, object] | None = None) -> int:
        """Number of (visible) rows matching ``where`` exactly."""
        clause, args = _where(where, self._kinds)
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
            return _generation(conn, self._t["meta"])

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
        clause, args = _where(where, self._kinds)
        sql = ("SELECT count(*), count(DISTINCT COALESCE(tenant_id, '')), "
               "count(DISTINCT COALESCE(task_type, '')), min(\"timestamp\"), "
               f"max(\"timestamp\") FROM {self._t[TABLE]}{clause}")
        with self._reading() as conn:
            return summary_dict(*conn.execute(sql, args).fetchone())

    def consumption(self, where: Mapping[str, object] | None = None) -> list[dict]:
        """Records and bytes per (tenant, task type), from SQL (integer sums only), counted as
        :meth:`dyna.store.sqlite.SQLiteStore.consumption` does (8 per number, 4 d per vector,
        the UTF-8 length of each text)."""
        size = row_bytes_sql(self.schema, self.dim,
                             lambda name: f"COALESCE(octet_length({quote_ident(name)}), 0)")
        clause, args = _where(where, self._kinds)
        sql = (f"SELECT COALESCE(tenant_id, ''), COALESCE(task_type, ''), count(*), "
               f"sum({size})::bigint FROM {self._t[TABLE]}{clause} GROUP BY 1, 2")
        with self._reading() as conn:
            return consumption_rows(conn.execute(sql, args).fetchall())

    # ----------------------------------------------------------------- the store
    def file_bytes(self) -> int:
        """Bytes on the server of the store's tables with their indexes and TOAST data."""
        with self._reading() as conn:
            tables = list(self._t.values())  # names passed as values, never spliced in
            return int(conn.execute(
                "SELECT " + " + ".join(["pg_total_relation_size(%s::regclass)"] * len(tables)),
                tables).fetchone()[0])

    def schema_version(self) -> int:
        """Highest applied schema version."""
        with self._reading() as conn:
            return int(schema_version(conn, self._t))

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
                "tenant": self.tenant, **self._isolation}

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


def grant_tenant(store: PostgresStore, role: str, tenant: str) -> None:
    """Map the database role ``role`` (which must exist) to ``tenant`` in
    ``tenant_roles`` and grant it what a tenant session needs
    (:func:`dyna.store.postgres_schema.grant_tenant_sql`): it then reads, writes and
    deletes that tenant's rows only, whatever its session sets, and moves the id
    counter only forward. ``store``: a session of the tables' owner (or a superuser).

    Raises
    ------
    ConfigError
        An empty role or one with a NUL, a tenant that breaks the tenant rule
        (:func:`dyna.store.columns.check_tenant`: length, control characters, NUL,
        NFKC form; checked before connecting), or a role already mapped to another tenant.
    StoreWriteError
        The server refused (e.g. this session's role does not own the tables).
    """
    if not isinstance(role, str) or not role or "\x00" in role:
        raise ConfigError("role", repr(role)[:40], "must be a non-empty string without NUL")
    check_tenant(tenant, "tenant")   # the rows' tenant_id is compared byte for byte

    def do(conn, _):
        roles = store._t["meta"].rsplit(".", 1)[0] + '."tenant_roles"'
        had = conn.execute(f"SELECT tenant_id FROM {roles} WHERE role = %s",
                           (role,)).fetchone()
        if had is not None and had[0] != tenant:
            raise ConfigError("role", role, "is mapped to another tenant")
        if had is None:
            conn.execute(f"INSERT INTO {roles} VALUES (%s, %s)", (role, tenant))
        for sql in grant_tenant_sql(store._t, role):
            conn.execute(sql)

    store._write(do, hook=False)


def _typed_read(store: PostgresStore, err: BaseException) -> Exception:
    return store._typed(err, "read")


# every public method (and opening) raises its typed errors detached from the psycopg error
# they replace (see dyna.store.postgres_dsn.detached); snapshot() is a context manager and
# maps its own errors
for _name, _method in list(vars(PostgresStore).items()):
    if callable(_method) and (_name == "__init__" or not _name.startswith("_")) \
            and _name != "snapshot":
        setattr(PostgresStore, _name, detached(_method, _typed_read))
del _name, _method
