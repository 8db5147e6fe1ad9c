"""SQLite persistence of experience records (the embedded default store).

One table ``episodes`` holds one row per record; its columns are given by the caller as a
schema of ``(name, kind)`` pairs (kinds: ``int``, ``float``, ``str``, ``json`` (TEXT holding
JSON), ``vector`` (a float32 BLOB of ``dim`` values, native byte order);
:mod:`dyna.store.columns`). ``id`` is the INTEGER PRIMARY KEY, assigned by the store inside
the write transaction from a counter in the ``meta`` table, so ids are unique across
processes sharing a file and never reused. :class:`SQLiteStore` implements the backend
protocol :class:`dyna.store.backend.StoreBackend`. Opening a file (what makes it a dyna
store, damage, read-only opens, schema versions and migrations) is
:mod:`dyna.store.sqlite_file`.

Concurrency and durability (case PERS-01)
    Connections use WAL (readers never block the writer), ``synchronous=NORMAL`` (a killed
    process loses nothing committed; a power cut may lose the last transactions) and a busy
    timeout (default 10 s): a second writer waits for the lock instead of failing at once.
    Every write is one short ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction; a batch of
    records is one ``executemany``. A writer killed in the middle of a batch leaves no trace
    of that batch and every earlier batch intact. A lock held longer than the timeout raises
    :class:`dyna.errors.StoreBusyError` (retryable; nothing was written).

Status (``status`` attribute)
    ``ok``; ``missing`` (the file did not exist or was empty and a new store was created; it
    becomes ``ok`` after the first committed write); ``write_degraded`` (the last write failed
    for a reason other than a busy lock, e.g. a read-only file or a full disk; it becomes
    ``ok`` after the next committed write). A failed write raises
    :class:`dyna.errors.StoreWriteError` naming the file and SQLite's message; its
    transaction was rolled back, so nothing of it is in the file. A write that returns is
    committed: acknowledged means durable (against a killed process; ``synchronous=NORMAL``
    in WAL mode may lose the last transactions to a power cut).
    A store opened with ``path=""`` lives in memory (status ``ok``).

Live view: change tokens
    Several connections and processes share one file. A reader finds out cheaply whether
    anything changed since it last looked, and what:

    * :meth:`SQLiteStore.data_version` is SQLite's ``PRAGMA data_version`` of this
      connection: it changes when *another* connection commits (never for this one's own
      commits) and costs one PRAGMA, no table read.
    * :meth:`SQLiteStore.generation` is a counter in ``meta`` (``key = 'generation'``) that
      every write deleting or rewriting rows (``delete``, ``delete_ids``, ``prune``,
      ``keep_newest``, ``reset``, scrub) increases by one in its own transaction. Inserts
      never change it: ids only grow (the ``next_id`` counter), so a reader that has seen
      every row up to id m and the same generation catches up with
      ``read(after_id=m)``; another generation means rows it holds may be gone or changed
      (then it reads everything again).
    * :meth:`SQLiteStore.snapshot` holds one read transaction, so a generation and the rows
      read after it are of the same committed state.
    * ``on_write`` (attribute, default None): a callable ``on_write(store)`` run inside every
      write transaction right after ``BEGIN IMMEDIATE``, before the write itself; no other
      writer can commit until this transaction ends, so what it reads is exactly the state
      the write applies to. :class:`dyna.experience.ExperienceStore` uses it to bring its
      in-memory view up to date before recording or deleting.
      :attr:`SQLiteStore.last_generation` is the generation this connection's last write
      left (set inside the transaction).

Space (case PERS-05)
    ``DELETE`` (prune, delete) frees pages to the freelist but never shrinks the file;
    :meth:`SQLiteStore.vacuum` runs ``VACUUM`` outside any transaction and then
    ``PRAGMA wal_checkpoint(TRUNCATE)``, which returns the space to the file system.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dyna.errors import ConfigError, check_range
from dyna.store.backend import StoreBackend
from dyna.store.columns import (FILTER_COLUMNS, KINDS, READ_CHUNK, TABLE, check_filter,
                                check_group_by, check_row, check_schema, collect_chunks,
                                consumption_rows, given_ids, made_ids, prepare_columns,
                                read_names, row_bytes_sql, summary_dict, to_columns,
                                unencodable)
from dyna.store.sqlite_conn import VERIFY_IN_BACKGROUND_BYTES, SQLiteConnection
from dyna.store.sqlite_file import (MAX_DIM, MIGRATIONS, READ_ONLY_VERSIONS, SCHEMA_VERSION,
                                    SQLITE_HEADER, STORE_TABLES, check_file_state,
                                    check_is_store, check_meta_counters, stored_dim)

__all__ = ["FILTER_COLUMNS", "KINDS", "MAX_DIM", "MIGRATIONS", "READ_CHUNK",
           "READ_ONLY_VERSIONS", "SCHEMA_VERSION", "SQLITE_HEADER", "STATUSES", "STORE_TABLES",
           "TABLE", "VERIFY_IN_BACKGROUND_BYTES", "SQLiteStore", "check_file_state",
           "check_is_store", "check_meta_counters", "check_schema", "stored_dim"]

STATUSES = ("ok", "missing", "write_degraded")

#: The next id: past the ``next_id`` counter and past every stored id (a single-row insert
#: leaves the counter alone; destructive writes move it past the rows they delete first).
_NEXT_ID = (f"SELECT MAX(COALESCE((SELECT MAX(id) + 1 FROM {TABLE}), 0), "
            "(SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'next_id'))")
#: Before a delete: the counter moves past every stored id, so no id is ever given again.
_HOLD_IDS = (f"UPDATE meta SET value = MAX(CAST(value AS INTEGER), COALESCE((SELECT MAX(id) + 1 "
             f"FROM {TABLE}), 0)) WHERE key = 'next_id'")


def _where(where: Mapping[str, object] | None, kinds: Mapping[str, str]) -> tuple[str, list]:
    """A ``WHERE`` clause matching every ``column = value`` exactly (a list: ``IN``)."""
    if not where:
        return "", []
    parts, args = [], []
    for k, v in where.items():
        check_filter(k, v, kinds)
        if isinstance(v, (list, tuple, np.ndarray)):
            vals = list(v.tolist() if isinstance(v, np.ndarray) else v)
            if not vals:
                parts.append("0")
                continue
            parts.append(f"{k} IN ({', '.join('?' * len(vals))})")
            args.extend(vals)
        else:
            parts.append(f"{k} = ?")  # exact match: never LIKE or GLOB
            args.append(v)
    return " WHERE " + " AND ".join(parts), args


def _insert(conn: sqlite3.Connection, sql: str, schema: Sequence[tuple[str, str]],
            cols: list[list], ids: np.ndarray) -> None:
    """Inside a write transaction: insert prepared columns with ``ids`` (one
    ``executemany``) and move the id counter past them."""
    try:
        conn.executemany(sql, zip(ids.tolist(), *cols))
    except sqlite3.IntegrityError as exc:
        raise ConfigError("ids", int(ids[0]), f"an id is already stored ({exc})") from None
    except UnicodeEncodeError:  # a lone surrogate in some text: name the column and row
        raise unencodable(schema, cols) from None
    start = int(conn.execute(_NEXT_ID).fetchone()[0])
    if ids.size and int(ids.max()) + 1 > start:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'next_id'",
                     (str(int(ids.max()) + 1),))


def _hold(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Inside a write transaction, before deleting: move the ``next_id`` counter past every
    stored id (single-row inserts do not advance it), so a deleted row's id is never given
    again. Returns ``conn``."""
    conn.execute(_HOLD_IDS)
    return conn


def _generation(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    return 0 if row is None else int(row[0])


def _distinct(conn: sqlite3.Connection, column: str, tenant: str | None = None) -> list:
    """Distinct non-NULL values of ``tenant_id``, or of ``task_type`` within one tenant,
    by a skip-scan of the (tenant_id, task_type) index: one index probe per value."""
    cond, args = ("tenant_id = ?1 AND ", [tenant]) if tenant is not None else ("", [])
    sql = (f"WITH RECURSIVE d(x) AS (SELECT (SELECT MIN({column}) FROM {TABLE} WHERE "
           f"{cond}{column} IS NOT NULL) UNION ALL SELECT (SELECT MIN({column}) FROM "
           f"{TABLE} WHERE {cond}{column} > d.x) FROM d WHERE d.x IS NOT NULL) "
           "SELECT x FROM d WHERE x IS NOT NULL")
    return [r[0] for r in conn.execute(sql, args)]


class SQLiteStore(StoreBackend):
    """Experience records in one SQLite file.

    Parameters
    ----------
    path : str or Path
        Database file; ``""`` or ``":memory:"`` for an in-memory store.
    schema : sequence of (str, str)
        Columns after ``id``: name and kind (one of :data:`KINDS`). Must include
        ``tenant_id``, ``task_type`` and ``timestamp`` (float seconds, UTC).
    dim : int
        Length of every ``vector`` column (float32 values).
    timeout : float
        Busy timeout in seconds (>= 5 recommended; PERS-01).
    verify : bool
        Run ``PRAGMA quick_check`` when opening an existing file (O(file size)): before the
        open returns for a file up to :data:`VERIFY_IN_BACKGROUND_BYTES`, in the background
        for a larger one (the open returns at once; once the check has found damage, every
        read and write raises StoreDamagedError; :meth:`wait_verified` waits for it).
    read_only : bool
        Open with ``mode=ro``: never create, migrate or write the file.
    create : bool
        Make a new store in an existing empty file (0 bytes); without it such a file is
        refused (:class:`dyna.store.sqlite_file.EmptyStoreFileError`).

    Raises
    ------
    ConfigError
        Bad schema or dim, or a file whose stored dim differs.
    StoreDamagedError
        SQLite reports the file as corrupt or not a database (on open, or later on a read or
        write); the file is left as it was.
    NotAStoreError
        A SQLite database that is not a dyna store; nothing was written to it.
    MissingFileError
        ``read_only`` and the file does not exist.
    StoreError
        A store written by a newer schema version, or a file that cannot be created.
    StoreBusyError
        The file stayed locked by another writer for longer than ``timeout``.
    """

    backend = "sqlite"

    def __init__(self, path, schema: Sequence[tuple[str, str]], dim: int, *,
                 timeout: float = 10.0, verify: bool = True, read_only: bool = False,
                 create: bool = False):
        self.dim = check_range("dim", dim, 1, None, integer=True)
        self.timeout = float(check_range("timeout", timeout, 0.0, None))
        self.schema = check_schema(schema)
        names = [n for n, _ in self.schema]
        self._kinds = dict(self.schema)
        self._insert_sql = (f"INSERT INTO {TABLE} ({', '.join(['id'] + names)}) "
                            f"VALUES ({', '.join('?' * (len(names) + 1))})")
        self._insert_one_sql = (f"INSERT INTO {TABLE} ({', '.join(['id'] + names)}) "
                                f"VALUES (({_NEXT_ID}), {', '.join('?' * len(names))}) "
                                "RETURNING id")
        self.path = "" if str(path) in ("", ":memory:") else str(path)
        self.persistent = bool(self.path)
        self.read_only = bool(read_only)
        if self.read_only and not self.persistent:
            raise ConfigError("read_only", True, "an in-memory store cannot be read-only")
        #: Called as ``on_write(self)`` inside each write transaction (see the module notes).
        self.on_write: Callable[[SQLiteStore], None] | None = None
        #: The generation this connection's last destructive write committed (None before).
        self.last_generation: int | None = None
        #: The connection to the file: its lock, transactions and typed errors.
        self.connection = SQLiteConnection(self.path, self.schema, self.dim,
                                           timeout=self.timeout, verify=verify,
                                           read_only=self.read_only, create=create)
        self._conn = self.connection.conn

    @property
    def status(self) -> str:
        """``ok``, ``missing`` (this open created the store; ``ok`` after the first write) or
        ``write_degraded`` (the last write failed; ``ok`` after the next one)."""
        return self.connection.status

    def wait_verified(self, timeout: float | None = None) -> bool:
        """Wait for the background ``quick_check`` of a large file (if any).

        Returns
        -------
        bool
            True when the file was checked and found sound (or checked at open, or not
            checked because ``verify`` was False); False when the check is still running
            after ``timeout`` seconds or ended without a verdict.

        Raises
        ------
        StoreDamagedError
            The check found the file damaged.
        """
        return self.connection.wait_verified(timeout)

    def _write(self, fn, hook: bool = True, begin: bool = True):
        """Run ``fn(conn)`` in one write transaction (:meth:`SQLiteConnection.write`),
        ``on_write`` first unless ``hook`` is False."""
        before = (lambda: self.on_write(self)) if hook and self.on_write is not None else None
        return self.connection.write(fn, before=before, begin=begin)

    # ----------------------------------------------------------------- writing
    def next_id(self) -> int:
        """The id the next :meth:`append` without explicit ids would start at."""
        with self.connection.lock:
            return int(self._conn.execute(_NEXT_ID).fetchone()[0])

    def append(self, columns: Mapping[str, object], n: int | None = None, *,
               ids=None) -> np.ndarray:
        """Insert a batch of records in one transaction and return their ids.

        Parameters
        ----------
        columns : mapping of column name to sequence
            Each of length n; vector columns as float32 arrays of shape (n, dim). Missing
            columns are stored as NULL. An ``id`` entry is ignored (see ``ids``).
        n : int, optional
            Number of records (default: length of ``tenant_id``).
        ids : array_like of int, optional
            Explicit ids (unique, not yet stored); the id counter moves past the largest.
            An id below the next id (a deleted row's) also moves the ``generation``: a
            live reader that has read past it catches up with ``read(after_id=)`` and
            would never see it. Default: consecutive ids from the counter.

        Returns
        -------
        ndarray of int64, shape (n,)
            The ids, unique across every process writing to this file.

        Raises
        ------
        ConfigError
            A column of the wrong length or shape, or an id already stored (nothing written).
        StoreBusyError
            Locked by another writer for longer than the timeout; nothing written (retry).
        StoreWriteError
            The write did not reach the file (full disk, read-only file, I/O error); its
            transaction was rolled back, nothing written.
        StoreDamagedError
            SQLite found the file corrupt; nothing written.
        """
        n = len(columns["tenant_id"]) if n is None else int(n)
        cols = prepare_columns(self.schema, self.dim, columns, n)  # before the lock is taken
        if n == 0:
            return np.empty(0, dtype=np.int64)
        given = given_ids(ids, n)

        def do(conn):
            start = int(conn.execute(_NEXT_ID).fetchone()[0])
            out = np.arange(start, start + n, dtype=np.int64) if given is None else given
            _insert(conn, self._insert_sql, self.schema, cols, out)
            if int(out.min()) < start:  # below ids a reader may hold: a rewrite for it
                self._bump(conn, 1)
            return out

        return self._write(do)

    def append_row(self, values: Sequence[object]) -> int:
        """Insert one record in its own transaction and return its id (the fast single write).

        One ``INSERT ... RETURNING id`` statement in autocommit mode (a statement is its own
        transaction in SQLite): the id is computed inside it (past the ``next_id`` counter
        and every stored id), so it is unique across processes and never reused; the
        counter row is not written (destructive writes move it past the ids they delete).
        It returns after its own commit, with the durability of every write (see the module
        notes). ``on_write`` is not run: the caller's in-memory view catches up on its next
        read.

        Parameters
        ----------
        values : sequence
            One value per schema column, in schema order (None for NULL); a vector column as
            ``bytes`` of ``dim`` float32 values (native byte order).

        Returns
        -------
        int
            The id, unique across every process writing to this file.

        Raises
        ------
        ConfigError
            The wrong number of values, a vector of the wrong length, text UTF-8 cannot
            encode (nothing written).
        StoreBusyError, StoreWriteError, StoreDamagedError
            As :meth:`append`; nothing written.
        """
        values = check_row(self.schema, self.dim, values)

        def do(conn):
            try:
                return int(conn.execute(self._insert_one_sql, values).fetchall()[0][0])
            except UnicodeEncodeError:
                raise unencodable(self.schema, [[v] for v in values]) from None

        return self._write(do, hook=False, begin=False)

    def append_from(self, make: Callable[[int], tuple[Mapping[str, object], np.ndarray]]
                    ) -> np.ndarray:
        """Build and insert a batch inside one write transaction.

        ``make(start)`` is called with the write lock held and the counter's next id; it
        returns ``(columns, ids)`` with ids >= ``start`` (e.g. after validating and
        recording the batch in memory). If ``make`` raises, the transaction is rolled back and
        the error propagates: nothing is written and no id is consumed. This is how
        :class:`dyna.experience.ExperienceStore` gives a batch the same ids in memory and on
        disk, unique across processes.

        Returns
        -------
        ndarray of int64
            The ids inserted.
        """
        def do(conn):
            start = int(conn.execute(_NEXT_ID).fetchone()[0])
            columns, ids = make(start)
            ids = made_ids(ids, start)
            if ids.size:
                _insert(conn, self._insert_sql, self.schema,
                        prepare_columns(self.schema, self.dim, columns, ids.size), ids)
            return ids

        return self._write(do)

    def delete(self, where: Mapping[str, object]) -> int:
        """Delete the rows matching every ``column = value`` of ``where`` exactly.

        A list value matches any of its elements (``IN``). An empty ``where`` is refused
        (use :meth:`reset`). Returns the number of rows deleted.
        """
        if not where:
            raise ConfigError("where", where, "must name at least one column; use reset()")
        clause, args = _where(where, self._kinds)
        return self._write(lambda c: self._bump(c, _hold(c).execute(
            f"DELETE FROM {TABLE}{clause}", args).rowcount))

    def _bump(self, conn: sqlite3.Connection, n: int) -> int:
        """Inside a write transaction that deleted or changed ``n`` rows: when n > 0, add one
        to the ``generation`` counter (and note it in :attr:`last_generation`); returns n."""
        if n:
            gen = _generation(conn) + 1
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('generation', ?)", (str(gen),))
            self.last_generation = gen
        return n

    def delete_ids(self, ids) -> int:
        """Delete rows by id (int64 array or sequence; an id given twice is deleted once);
        returns rows deleted."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)

        def do(conn):
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS _del (id INTEGER PRIMARY KEY)")
            conn.execute("DELETE FROM _del")
            conn.executemany("INSERT OR IGNORE INTO _del VALUES (?)", ((i,) for i in ids.tolist()))
            n = _hold(conn).execute(
                f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM _del)").rowcount
            conn.execute("DELETE FROM _del")
            return self._bump(conn, n)

        return self._write(do) if ids.size else 0

    def prune(self, cutoff: float, where: Mapping[str, object] | None = None) -> int:
        """Delete rows with ``timestamp < cutoff`` (seconds, UTC); returns rows deleted.

        The file does not shrink (the pages go to the freelist) until :meth:`vacuum`.
        """
        cutoff = float(check_range("cutoff", cutoff))
        clause, args = _where(where, self._kinds)
        clause = (clause + " AND" if clause else " WHERE") + " timestamp < ?"
        return self._write(lambda c: self._bump(
            c, _hold(c).execute(f"DELETE FROM {TABLE}{clause}", args + [cutoff]).rowcount))

    def keep_newest(self, n: int, by: Sequence[str] = ("tenant_id", "task_type")) -> int:
        """Keep the newest ``n`` rows (by timestamp, then id) per group; returns rows deleted."""
        n = check_range("compact_keep_records", n, 0, None, integer=True)
        check_group_by(by, self._kinds)
        part = ", ".join(by)
        sql = (f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() "
               f"OVER (PARTITION BY {part} ORDER BY timestamp DESC, id DESC) AS r "
               f"FROM {TABLE}) WHERE r > ?)")
        return self._write(lambda c: self._bump(c, _hold(c).execute(sql, (n,)).rowcount))

    def reset(self) -> int:
        """Delete every row (the id counter keeps counting); returns rows deleted."""
        return self._write(lambda c: self._bump(
            c, _hold(c).execute(f"DELETE FROM {TABLE}").rowcount))

    def vacuum(self) -> dict:
        """Rebuild the file without free pages and truncate the WAL (PERS-05).

        Runs ``VACUUM`` outside any transaction (it cannot run inside one), then
        ``PRAGMA wal_checkpoint(TRUNCATE)``.

        Returns
        -------
        dict
            ``bytes_before`` / ``bytes_after`` (file plus WAL), ``freelist_count`` after,
            ``checkpoint`` (busy, log frames, checkpointed frames).
        """
        return self.connection.vacuum()

    def checkpoint(self) -> tuple[int, int, int]:
        """Copy the WAL into the database file and truncate it; (busy, frames, copied)."""
        if not self.persistent or self.read_only:
            return (0, 0, 0)
        return tuple(self.connection.query("PRAGMA wal_checkpoint(TRUNCATE)")[0])

    # ----------------------------------------------------------------- reading
    def read(self, where: Mapping[str, object] | None = None, *,
             columns: Sequence[str] | None = None,
             categories: Sequence[str] = (), after_id: int | None = None
             ) -> dict[str, object]:
        """Rows matching ``where`` (exact), in id order, as numpy columns.

        One ``SELECT`` is stepped in chunks of :data:`dyna.store.columns.READ_CHUNK` rows;
        each chunk is transposed once and every column is converted in bulk (vector BLOBs
        joined and decoded by one ``np.frombuffer``; :func:`dyna.store.columns.to_columns`).

        Parameters
        ----------
        where : mapping, optional
            Exact filters (see :meth:`delete`).
        columns : sequence of str, optional
            Columns to read (default all); ``id`` always comes first.
        categories : sequence of str
            ``str`` columns to return dictionary-encoded instead of as object arrays.
        after_id : int, optional
            Only rows with ``id > after_id`` (the rows committed since a reader saw id
            ``after_id``; see the module notes on the live view).

        Returns
        -------
        dict of str to ndarray or (ndarray, list)
            ``id`` int64 (n,); int columns int64 (NULL -> 0 is refused: NULL ints come back
            as an object array); float columns float64 (NULL -> NaN); str/json columns
            object arrays (None for NULL); vector columns float32 (n, dim), NULL or a BLOB
            of the wrong length -> zeros. A column named in ``categories`` is a pair
            ``(codes, labels)``: int32 codes (n,) into the list of its distinct values in
            order of first appearance (None for NULL), so ``labels[codes[i]]`` is row i.

        Raises
        ------
        ConfigError
            An unknown column, or a ``categories`` entry that is not a ``str`` column.
        StoreDamagedError
            SQLite found the file corrupt while reading (the file is left as it was).
        StoreError
            Another read error.
        """
        names = read_names(self.schema, columns, categories)
        clause, args = _where(where, self._kinds)
        if after_id is not None:
            clause = (clause + " AND" if clause else " WHERE") + " id > ?"
            args = args + [int(after_id)]
        sql = f"SELECT {', '.join(names)} FROM {TABLE}{clause} ORDER BY id"
        kinds = ["int" if name == "id" else self._kinds[name] for name in names]
        acc = collect_chunks(self.connection.scan(sql, args), kinds, self.dim)
        return to_columns(names, kinds, acc, categories, self.dim, self.path)

    def count(self, where: Mapping[str, object] | None = None) -> int:
        """Number of rows matching ``where`` exactly."""
        clause, args = _where(where, self._kinds)
        return int(self.connection.query(f"SELECT COUNT(*) FROM {TABLE}{clause}", args)[0][0])

    # ----------------------------------------------------------------- live view
    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version`` of this connection: it changes when another
        connection (this process or another) commits, never for this connection's own
        commits. One PRAGMA, no table read; 0 for an in-memory store."""
        if not self.persistent:
            return 0
        return int(self.connection.query("PRAGMA data_version")[0][0])

    def generation(self) -> int:
        """The counter of destructive writes (``meta.generation``; 0 when a version-1 file
        opened read-only lacks it). It changes only when rows were deleted or rewritten."""
        c = self.connection
        with c.lock, c.reading():
            return _generation(c.conn)

    def max_id(self) -> int:
        """The highest stored id, -1 for an empty table."""
        top = self.connection.query(f"SELECT MAX(id) FROM {TABLE}")[0][0]
        return -1 if top is None else int(top)

    @contextlib.contextmanager
    def snapshot(self):
        """Hold one read transaction: every read inside sees the same committed state.

        Inside a write transaction (e.g. from ``on_write``) it adds nothing: the write
        transaction already is one state. The lock of this object is held throughout.
        """
        with self.connection.snapshot():
            yield self

    def summary(self, where: Mapping[str, object] | None = None) -> dict:
        """Counts and time span of the rows matching ``where``, from SQL (no row is loaded).

        For all rows or one tenant (``{"tenant_id": t}``) it reads indexes only, in time
        that grows with the number of distinct labels, not of rows (besides one ``COUNT``):
        distinct tenants and task types by skip-scans of the (tenant_id, task_type) index,
        the oldest and newest timestamps by the timestamp index (``MIN`` / ``MAX``, or the
        first row of the tenant in time order from either end). Other filters are one
        aggregate query.

        Returns
        -------
        dict
            ``n_records``, ``n_tenants``, ``n_task_types`` (distinct labels; NULL counts as
            the empty label), ``oldest`` / ``newest`` (min / max ``timestamp``, seconds; None
            when no row matches). Only counts and min / max: exact, whatever the row order.
        """
        clause, args = _where(where, self._kinds)
        tenant = where.get("tenant_id") if where else None
        if where and (set(where) != {"tenant_id"} or not isinstance(tenant, str)):
            sql = (f"SELECT COUNT(*), COUNT(DISTINCT COALESCE(tenant_id, '')), "
                   f"COUNT(DISTINCT COALESCE(task_type, '')), MIN(timestamp), MAX(timestamp) "
                   f"FROM {TABLE}{clause}")
            return summary_dict(*self.connection.query(sql, args)[0])
        c = self.connection
        with c.lock, c.reading():
            q = c.conn.execute
            n = q(f"SELECT COUNT(*) FROM {TABLE}{clause}", args).fetchone()[0]
            tenants = [tenant] if tenant is not None else _distinct(c.conn, "tenant_id")
            nt = len(tenants) + (tenant is None and "" not in tenants and q(
                f"SELECT EXISTS(SELECT 1 FROM {TABLE} WHERE tenant_id IS NULL)"
            ).fetchone()[0]) if n else 0
            tasks: set = set()
            for t in tenants:
                tasks.update(_distinct(c.conn, "task_type", t))
            nk = len(tasks) + ("" not in tasks and q(
                f"SELECT EXISTS(SELECT 1 FROM {TABLE}{clause}"
                f"{' AND' if clause else ' WHERE'} task_type IS NULL)", args).fetchone()[0]
            ) if n else 0
            if tenant is None:
                lo = q(f"SELECT MIN(timestamp) FROM {TABLE}").fetchone()[0]
                hi = q(f"SELECT MAX(timestamp) FROM {TABLE}").fetchone()[0]
            else:
                lo, hi = (q(f"SELECT timestamp FROM {TABLE} INDEXED BY ix_{TABLE}_timestamp"
                            f"{clause} AND timestamp IS NOT NULL ORDER BY timestamp {o} "
                            "LIMIT 1", args).fetchone() for o in ("ASC", "DESC"))
                lo, hi = (None if r is None else r[0] for r in (lo, hi))
        return summary_dict(n, nt, nk, lo, hi)

    def consumption(self, where: Mapping[str, object] | None = None) -> list[dict]:
        """Records and bytes per (tenant, task type), from SQL (integer sums only).

        Bytes of a row: 8 per int or float column (``id`` included), 4 d per vector column,
        and the UTF-8 length of each text (``str`` / ``json``) value (NULL: 0).

        Returns
        -------
        list of dict
            ``{"tenant_id", "task_type", "records", "bytes"}`` sorted by tenant then task
            type (NULL labels as "").
        """
        size = row_bytes_sql(self.schema, self.dim,
                             lambda name: f"COALESCE(LENGTH(CAST({name} AS BLOB)), 0)")
        clause, args = _where(where, self._kinds)
        sql = (f"SELECT COALESCE(tenant_id, ''), COALESCE(task_type, ''), COUNT(*), "
               f"SUM({size}) FROM {TABLE}{clause} GROUP BY 1, 2")
        return consumption_rows(self.connection.query(sql, args))

    # ----------------------------------------------------------------- the file
    def file_bytes(self) -> int:
        """Size of the database file plus its WAL, in bytes (0 in memory)."""
        return self.connection.file_bytes()

    def schema_version(self) -> int:
        """Highest applied schema version."""
        return int(self.connection.query("SELECT MAX(version) FROM schema_version")[0][0])

    def stats(self) -> dict:
        """Rows, pages, freelist, sizes and status of the store (JSON-ready)."""
        c = self.connection
        with c.lock, c.reading():
            q = c.conn.execute
            page_count = q("PRAGMA page_count").fetchone()[0]
            freelist = q("PRAGMA freelist_count").fetchone()[0]
            page_size = q("PRAGMA page_size").fetchone()[0]
            rows = q(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0]
        return {"path": self.path, "persistent": self.persistent, "status": self.status,
                "rows": int(rows), "page_count": int(page_count),
                "freelist_count": int(freelist), "page_size": int(page_size),
                "file_bytes": self.file_bytes(), "schema_version": self.schema_version(),
                "busy_timeout_s": self.timeout, "read_only": self.read_only}

    def close(self) -> None:
        """Close the connection (idempotent).

        Every write of this class commits before it returns, so nothing is pending here. A
        transaction someone left open on the connection (``store._conn``) is rolled back and
        :class:`dyna.errors.StoreWriteError` raised after closing: its changes were never
        acknowledged by this class and are not in the file.
        """
        self.connection.close()
