"""SQLite persistence of experience records (the embedded default store).

One table ``episodes`` holds one row per record; its columns are given by the caller as a
schema of ``(name, kind)`` pairs (kinds: ``int``, ``float``, ``str``, ``json`` (TEXT holding
JSON), ``vector`` (a float32 BLOB of ``dim`` values, native byte order)). ``id`` is the
INTEGER PRIMARY KEY, assigned by the store inside the write transaction from a counter in
the ``meta`` table, so ids are unique across processes sharing a file and never reused.

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

Damage and foreign files (never silently replaced)
    A file SQLite reports as corrupt (``PRAGMA quick_check`` on open, or an error met while
    reading or writing) raises :class:`dyna.errors.StoreDamagedError` naming the file and
    what SQLite found; the file is never renamed, replaced or written. Its readable rows are
    copied out with :func:`dyna.store.recover.recover` (``dyna store recover DB --out NEW``).
    A SQLite database that is not a dyna store (no ``schema_version`` table or no ``dim`` in
    its ``meta`` table, or objects dyna did not create) raises
    :class:`dyna.errors.NotAStoreError` before anything is written to it. A ``meta`` row
    dyna relies on that is missing or not an integer (``next_id``; ``dim``, ``generation``
    when present) or an empty ``schema_version`` table is damage too
    (:class:`dyna.errors.StoreDamagedError`, read-only and writable opens alike).

Read-only opens (``read_only=True``)
    The file is opened with ``mode=ro``: nothing is created, migrated or written (SQLite's
    own ``-wal`` / ``-shm`` companions excepted); a missing file raises
    :class:`dyna.errors.MissingFileError`, a write :class:`dyna.errors.StoreReadOnlyError`.
    A WAL reader needs both companions (the shared index of the log): when no writer has
    the store open they are missing, and a read-only open creates them (with the store
    file's mode, owned by the reader) and leaves them; in a folder it cannot write it cannot
    open the store then (a :class:`dyna.errors.StoreError` says so; it can while a writer
    holds the store open). Companions another user's read-only open left are not writable
    by the store's owner, so its writes fail (:class:`dyna.errors.StoreWriteError` names
    them): let readers of other accounts open the store only while its writer runs, or
    give them a copy.

Schema versions
    Table ``schema_version`` keeps one row per applied version. On open, a store older than
    :data:`SCHEMA_VERSION` is migrated step by step with the functions in
    :data:`MIGRATIONS` (``MIGRATIONS[v]`` upgrades v to v + 1) in one transaction; a store
    newer than this code raises :class:`dyna.errors.StoreError`.

Live view: change tokens (issue 19)
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
import gc
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from dyna.errors import (ConfigError, MissingFileError, NotAStoreError, StoreBusyError,
                         StoreDamagedError, StoreError, StoreReadOnlyError, StoreWriteError,
                         check_range)

__all__ = ["KINDS", "MIGRATIONS", "SCHEMA_VERSION", "SQLiteStore", "STATUSES", "stored_dim"]

SCHEMA_VERSION = 2
STATUSES = ("ok", "missing", "write_degraded")
KINDS = {"int": "INTEGER", "float": "REAL", "str": "TEXT", "json": "TEXT", "vector": "BLOB"}
TABLE = "episodes"
#: Columns a filter may match exactly (``delete``, ``read``, ``count``).
FILTER_COLUMNS = ("id", "tenant_id", "task_type", "action_type", "outcome", "run_id",
                  "task_id", "request_id")

#: ``MIGRATIONS[v](conn, schema, dim)`` upgrades a store from version v to v + 1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection, Sequence[tuple[str, str]], int], None]] = {}


def _v1_to_v2(conn: sqlite3.Connection, schema, dim) -> None:
    """Version 2 (issue 19) adds the ``generation`` counter of destructive writes to ``meta``
    (0: a version-1 file's deletions were all before any live reader could hold rows)."""
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")


MIGRATIONS[1] = _v1_to_v2
#: Versions a read-only open accepts without migrating: version 1 lacks only the
#: ``generation`` row, which a reader takes as 0.
READ_ONLY_VERSIONS = (1, 2)

#: Rows fetched per step of :meth:`SQLiteStore.read` (small enough to stay in cache).
READ_CHUNK = 4096

#: The next id: past the ``next_id`` counter and past every stored id (a single-row insert
#: leaves the counter alone; destructive writes move it past the rows they delete first).
_NEXT_ID = (f"SELECT MAX(COALESCE((SELECT MAX(id) + 1 FROM {TABLE}), 0), "
            "(SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'next_id'))")
#: Before a delete: the counter moves past every stored id, so no id is ever given again.
_HOLD_IDS = (f"UPDATE meta SET value = MAX(CAST(value AS INTEGER), COALESCE((SELECT MAX(id) + 1 "
             f"FROM {TABLE}), 0)) WHERE key = 'next_id'")
_CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}
_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}


def _errname(exc: sqlite3.Error) -> str:
    name = getattr(exc, "sqlite_errorname", "") or ""
    if not name:  # older builds: fall back on the message
        msg = str(exc).lower()
        if "locked" in msg or "busy" in msg:
            return "SQLITE_BUSY"
        if "not a database" in msg or "malformed" in msg:
            return "SQLITE_CORRUPT"
    return name.split("_")[0] + "_" + name.split("_")[1] if name.count("_") >= 2 else name


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector (restored on exit, even on error)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _encode_labels(vals: list) -> tuple[np.ndarray, list]:
    """Dictionary-encode a list of labels: int32 codes and distinct labels (first seen)."""
    if not vals or (vals[0] is None and vals.count(None) == len(vals)):  # all NULL
        return np.zeros(len(vals), dtype=np.int32), [None]
    lookup = dict.fromkeys(vals)
    for code, label in enumerate(lookup):
        lookup[label] = code
    codes = np.fromiter(map(lookup.__getitem__, vals), dtype=np.int32, count=len(vals))
    return codes, list(lookup)


#: The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: Largest vector dim a store accepts (float32 values per vector; 2**16: 256 KiB a row).
MAX_DIM = 2 ** 16

#: A file larger than this (bytes) is verified in the background at open (``quick_check``
#: on its own read connection, about 7 s for a 10M-episode store of d = 64, 6.4 GB): the
#: open returns at once, and every read and write after the check found damage raises
#: :class:`dyna.errors.StoreDamagedError`. Smaller files are checked before open returns.
VERIFY_IN_BACKGROUND_BYTES = 256 * 2**20
#: Tables a dyna store holds (besides SQLite's own ``sqlite_*`` tables).
STORE_TABLES = (TABLE, "meta", "schema_version")


def _damage_detail(conn: sqlite3.Connection | None, exc: BaseException | None) -> str:
    """What SQLite finds wrong: ``exc`` and the first lines of ``PRAGMA integrity_check``."""
    found = ""
    if conn is not None:
        try:
            lines = [" ".join(str(r[0]).split())
                     for r in conn.execute("PRAGMA integrity_check(3)").fetchall()]
            found = "" if lines == ["ok"] else "; ".join(lines)
        except sqlite3.Error as err:  # the check itself stops at the first bad page
            found = str(err)
    if not found:
        return str(exc) if exc is not None else "integrity_check: ok"
    if exc is None or str(exc) == found:
        return f"integrity_check: {found}"
    return f"{exc}; integrity_check: {found}"


def _unencodable(schema: Sequence[tuple[str, str]], cols: list[list]) -> ConfigError:
    """ConfigError naming the first text value of ``cols`` that UTF-8 cannot encode."""
    for (name, _), vals in zip(schema, cols):
        for i, v in enumerate(vals):
            if isinstance(v, str) and not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as exc:
                    return ConfigError(f"{name}[{i}]", v[exc.start], "a lone surrogate "
                                       f"at position {exc.start}; text must be valid Unicode")
    return ConfigError("columns", "text", "holds text that UTF-8 cannot encode")


def _meta_int(path: str, key: str, value, lo: int) -> int:
    """A ``meta`` value that must be the decimal text of an integer >= ``lo``; a damaged one
    (other text, a number below ``lo``) raises :class:`StoreDamagedError` naming it."""
    text = value if isinstance(value, str) else None
    if text is None or not text.isascii() or not text.isdigit() or int(text) < lo:
        raise StoreDamagedError(path, f"meta.{key} is {str(value)[:40]!r}, not an integer "
                                f">= {lo}")
    return int(text)


def check_meta_counters(conn: sqlite3.Connection, path: str) -> None:
    """Raise :class:`StoreDamagedError` unless the id counter ``meta.next_id`` is there and
    it and the ``generation`` counter (when there; absent counts as 0) are integers >= 0.
    A missing or unreadable counter gave ids again after a delete (``MAX`` with a NULL is
    NULL, and SQLite then picks the highest stored id + 1) and ``int()`` errors on open;
    the file is left as it is (``dyna store recover`` copies its rows out)."""
    meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN "
                             "('next_id', 'generation')").fetchall())
    if "next_id" not in meta:
        raise StoreDamagedError(path, "its meta table holds no 'next_id' counter")
    for key, value in meta.items():
        _meta_int(path, key, value, 0)


def check_is_store(conn: sqlite3.Connection, path: str, *, allow_empty: bool) -> bool:
    """Raise :class:`NotAStoreError` unless ``conn`` holds a dyna store; read-only.

    Returns False for a database without any table (``allow_empty``: a new store may be
    created in it), True for a dyna store. sqlite3 errors (corruption) propagate.
    """
    objs = conn.execute("SELECT type, name, tbl_name FROM sqlite_master").fetchall()
    if not objs:
        if allow_empty:
            return False
        raise NotAStoreError(path, "an empty SQLite database")
    tables = {n for t, n, _ in objs if t == "table" and not n.startswith("sqlite_")}
    missing = [t for t in ("schema_version", "meta") if t not in tables]
    if missing:
        raise NotAStoreError(path, f"no {' and no '.join(missing)} table; tables: "
                             f"{sorted(tables)}")
    if conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone() is None:
        raise NotAStoreError(path, "its meta table holds no dyna 'dim' entry")
    foreign = sorted(n for t, n, tbl in objs if not n.startswith("sqlite_")
                     and (t in ("view", "trigger") or tbl not in STORE_TABLES))
    if foreign:
        raise NotAStoreError(path, f"objects dyna did not create: {foreign}")
    return True


def check_file_state(conn: sqlite3.Connection, path: str) -> None:
    """Refuse, as opening the store would, a dyna store file no command may write: a schema
    version missing or newer than this dyna's, a ``meta.dim`` that is not an integer in
    [1, :data:`MAX_DIM`] or that its stored vectors contradict, a damaged counter
    (:func:`check_meta_counters`). Reads only; for commands that work on the file itself
    (``dyna store scrub``).

    Raises
    ------
    StoreDamagedError, StoreError
        Naming the file and what is wrong.
    """
    version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    if version is None:
        raise StoreDamagedError(path, "its schema_version table holds no version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise StoreError(f"{path}: schema version {version!r} is newer than this dyna "
                         f"({SCHEMA_VERSION}); upgrade dyna")
    row = conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
    if row is None:
        raise NotAStoreError(path, "its meta table holds no dyna 'dim' entry")
    _stored_dim_of(conn, path, row[0])
    check_meta_counters(conn, path)


def check_schema(schema: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """A store's columns after ``id`` as ``(name, kind)`` pairs, checked (every backend).

    Raises
    ------
    ConfigError
        A kind not in :data:`KINDS`, a name that is not an identifier or is ``id``, or no
        ``tenant_id``, ``task_type`` or ``timestamp`` column.
    """
    out = tuple((str(n), str(k)) for n, k in schema)
    names = [n for n, _ in out]
    for n, k in out:
        if k not in KINDS:
            raise ConfigError(f"schema.{n}", k, f"kind must be one of {sorted(KINDS)}")
        if not n.isidentifier() or n == "id":
            raise ConfigError("schema", n, "column names must be identifiers other than id")
    for need in ("tenant_id", "task_type", "timestamp"):
        if need not in names:
            raise ConfigError("schema", names, f"must contain {need!r}")
    return out


def _quick_check(conn: sqlite3.Connection, path: str) -> StoreDamagedError | None:
    """``PRAGMA quick_check(3)`` on ``conn``: None when the file is sound, else the error to
    raise (the first three problems SQLite names)."""
    try:
        res = conn.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as exc:
        if _errname(exc) not in _CORRUPT:
            raise
        return StoreDamagedError(path, f"quick_check: {exc}")
    if res != [("ok",)]:
        return StoreDamagedError(path, "quick_check: " + "; ".join(
            " ".join(str(r[0]).split()) for r in res))
    return None


class SQLiteStore:
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

    def __init__(self, path, schema: Sequence[tuple[str, str]], dim: int, *,
                 timeout: float = 10.0, verify: bool = True, read_only: bool = False):
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
        self._lock = threading.RLock()
        self.status = "ok"
        #: Called as ``on_write(self)`` inside each write transaction (see the module notes).
        self.on_write: Callable[[SQLiteStore], None] | None = None
        #: The generation this connection's last destructive write committed (None before).
        self.last_generation: int | None = None
        if self.persistent:
            p = Path(self.path)
            if not p.exists() or p.stat().st_size == 0:
                if self.read_only:
                    raise MissingFileError("DB", p, "no such store (a read-only open never "
                                           "creates one)")
                self.status = "missing"
            elif p.is_file():
                with open(p, "rb") as fh:
                    if fh.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                        raise NotAStoreError(p, "not a SQLite database: no SQLite header")
        self._verifier: threading.Thread | None = None   # background quick_check
        self._verify_conn: sqlite3.Connection | None = None
        self._found_damage: StoreDamagedError | None = None
        self._conn = self._open(verify)

    # ----------------------------------------------------------------- opening
    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            target, uri = f"{Path(self.path).resolve().as_uri()}?mode=ro", True
        else:
            target, uri = (self.path if self.persistent else ":memory:"), False
            if self.persistent:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(target, timeout=self.timeout, isolation_level=None,
                               check_same_thread=False, uri=uri)
        conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        return conn

    def _damaged(self, exc: BaseException | None, conn: sqlite3.Connection | None = None
                 ) -> StoreDamagedError:
        return StoreDamagedError(self.path or ":memory:", _damage_detail(conn, exc))

    def _start_background_check(self) -> None:
        """Run ``quick_check`` on a connection of its own in a daemon thread (see
        :data:`VERIFY_IN_BACKGROUND_BYTES`); its verdict is kept for :meth:`_check_damage`."""
        conn = self._connect()
        conn.execute("PRAGMA query_only = 1")
        self._verify_conn = conn

        def check():
            try:
                self._found_damage = _quick_check(conn, self.path)
            except sqlite3.Error:      # interrupted by close(), or busy: no verdict
                pass
            finally:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass

        self._verifier = threading.Thread(target=check, daemon=True,
                                          name=f"dyna-quick-check {Path(self.path).name}")
        self._verifier.start()

    def _check_damage(self) -> None:
        """Raise what a background ``quick_check`` found (a new error each time)."""
        found = self._found_damage
        if found is not None:
            raise StoreDamagedError(found.path, found.detail)

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
        t = self._verifier
        if t is not None:
            t.join(timeout)
            if t.is_alive():
                return False
        self._check_damage()
        return True

    def _open(self, verify: bool) -> sqlite3.Connection:
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            if _errname(exc) in _CORRUPT:
                raise self._damaged(exc) from exc
            raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
        try:
            existing = self.persistent and self.status != "missing"
            if existing:
                # before anything is written (even the WAL header): is this a dyna store?
                existing = check_is_store(conn, self.path, allow_empty=not self.read_only)
            if verify and existing and os.path.getsize(self.path) > VERIFY_IN_BACKGROUND_BYTES:
                self._start_background_check()
            elif verify and existing:
                damage = _quick_check(conn, self.path)
                if damage is not None:
                    raise damage
            if self.persistent and not self.read_only:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode.lower() != "wal":
                    raise StoreError(f"{self.path}: could not enable WAL (got {mode})")
            if not self.read_only:
                conn.execute("PRAGMA synchronous = NORMAL")
                self._init_schema(conn)
            else:
                self._check_schema(conn, conn.execute(
                    "SELECT MAX(version) FROM schema_version").fetchone()[0])
        except sqlite3.Error as exc:
            name = _errname(exc)
            try:
                if name in _CORRUPT:
                    raise self._damaged(exc, conn) from exc
                if name in _BUSY:
                    raise StoreBusyError(f"{self.path}: locked by another writer for more "
                                         f"than {self.timeout:g} s while opening; retry") from exc
                raise StoreError(f"{self.path}: {exc}{self._companion_hint()}") from exc
            finally:
                conn.close()
        except BaseException:
            conn.close()
            raise
        return conn

    def _companion_hint(self) -> str:
        """Why SQLite may refuse to open a WAL store: its ``-wal`` / ``-shm`` companions.

        A WAL reader needs both (the shared index of the log): a read-only open creates
        them when they are missing and the folder is writable, and cannot open the store
        when they are missing and the folder is not. A companion this process cannot write
        (left by a read-only open of another user) stops every write. Returns "" when
        neither applies, else the explanation to append to SQLite's message.
        """
        if not self.persistent:
            return ""
        names = [self.path + s for s in ("-wal", "-shm")]
        locked = [n for n in names if os.path.exists(n) and not os.access(n, os.W_OK)]
        if locked and not self.read_only:
            owners = ", ".join(f"{Path(n).name} (uid {os.stat(n).st_uid})" for n in locked)
            return (f"; SQLite's companion files {owners} are not writable by this process "
                    f"(uid {os.getuid()}): a read-only open by another user may have left "
                    "them; remove them while no process has the store open")
        folder = Path(self.path).resolve().parent
        if self.read_only and not all(os.path.exists(n) for n in names) \
                and not os.access(folder, os.W_OK):
            return (f"; a WAL store is read through {Path(names[0]).name} and "
                    f"{Path(names[1]).name} (SQLite's shared index of the log): they are "
                    f"missing and {folder} is not writable by this process, so it can be "
                    "read only while a writer has the store open (or from a copy in a "
                    "writable folder)")
        return ""

    def _create_sql(self) -> list[str]:
        cols = ", ".join(f"{n} {KINDS[k]}" for n, k in self.schema)
        return [
            f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY, {cols})",
            f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_tenant_task ON {TABLE}"
            "(tenant_id, task_type)",
            f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_timestamp ON {TABLE}(timestamp)",
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
            "applied_at REAL NOT NULL)",
        ]

    def _check_schema(self, conn: sqlite3.Connection, version: int) -> None:
        """Version, dim, counters and columns of an existing store (reads only)."""
        if version is None:
            raise StoreDamagedError(self.path, "its schema_version table holds no version")
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {version} is newer than "
                             f"this dyna ({SCHEMA_VERSION}); upgrade dyna")
        if version < SCHEMA_VERSION and self.read_only and version not in READ_ONLY_VERSIONS:
            raise StoreError(f"{self.path}: schema version {version} is older than this "
                             f"dyna ({SCHEMA_VERSION}); open it writable once to migrate")
        row = conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        if row is None:
            raise NotAStoreError(self.path, "its meta table holds no dyna 'dim' entry")
        stored = _stored_dim_of(conn, self.path, row[0])
        check_meta_counters(conn, self.path)
        if stored != self.dim:
            raise ConfigError("dim", self.dim, f"store {self.path} holds vectors of "
                              f"dim {stored}")
        cols = {r[1] for r in conn.execute(f"PRAGMA table_info({TABLE})")}
        missing = [n for n, _ in self.schema if n not in cols]
        if missing:
            raise StoreError(f"{self.path}: columns {missing} missing from {TABLE}")

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            have = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "schema_version" not in have:
                if have - {"sqlite_sequence", "sqlite_stat1"}:
                    # another program's tables appeared since the check on open
                    raise NotAStoreError(self.path, f"tables {sorted(have)} without a "
                                         "schema_version table")
                for sql in self._create_sql():
                    conn.execute(sql)
                conn.execute("INSERT INTO schema_version VALUES (?, ?)",
                             (SCHEMA_VERSION, time.time()))
                conn.executemany("INSERT INTO meta VALUES (?, ?)",
                                 [("dim", str(self.dim)), ("next_id", "0"),
                                  ("generation", "0"),
                                  ("created_at", repr(time.time()))])
            else:
                version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
                self._check_schema(conn, version)
                while version < SCHEMA_VERSION:
                    if version not in MIGRATIONS:
                        raise StoreError(f"{self.path}: no migration from schema version "
                                         f"{version}")
                    MIGRATIONS[version](conn, self.schema, self.dim)
                    version += 1
                    conn.execute("INSERT INTO schema_version VALUES (?, ?)",
                                 (version, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # ----------------------------------------------------------------- writing
    def _write(self, fn, hook: bool = True, begin: bool = True):
        """Run ``fn(conn)`` in one IMMEDIATE transaction, mapping errors to typed ones
        (``on_write`` runs first unless ``hook`` is False; ``begin=False``: ``fn`` runs one
        statement in autocommit mode, its own transaction)."""
        if self.read_only:
            raise StoreReadOnlyError(f"DB={self.path}: opened read-only; nothing was written")
        self._check_damage()
        with self._lock:
            conn = self._conn
            try:
                if begin:
                    conn.execute("BEGIN IMMEDIATE")
                    if hook and self.on_write is not None:
                        self.on_write(self)
                    out = fn(conn)
                    conn.execute("COMMIT")
                else:
                    out = fn(conn)
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                if _errname(exc) in _BUSY:
                    raise StoreBusyError(f"{self.path or ':memory:'}: locked by another writer "
                                         f"for more than {self.timeout:g} s; nothing was "
                                         "written, retry") from exc
                if _errname(exc) in _CORRUPT:  # never replaced; nothing was written
                    raise self._damaged(exc, conn) from exc
                self.status = "write_degraded"
                hint = self._companion_hint() if "READONLY" in _errname(exc) else ""
                raise StoreWriteError(self.path or ":memory:", f"{exc}{hint}") from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if self.status in ("missing", "write_degraded"):
                self.status = "ok"
            return out

    def _prepare(self, columns: Mapping[str, object], n: int) -> list[list]:
        """Validated per-column Python lists (vectors as float32 bytes), in schema order."""
        cols: list[list] = []
        for name, kind in self.schema:
            v = columns.get(name)
            if v is None:
                cols.append([None] * n)
            elif kind == "vector":
                arr = np.ascontiguousarray(v, dtype=np.float32)
                if arr.shape != (n, self.dim):
                    raise ConfigError(name, arr.shape, f"must have shape ({n}, {self.dim})")
                raw = arr.tobytes()
                w = self.dim * 4
                cols.append([raw[i:i + w] for i in range(0, n * w, w)])
            else:
                vals = v.tolist() if isinstance(v, np.ndarray) else list(v)
                if len(vals) != n:
                    raise ConfigError(name, len(vals), f"column length must be {n}")
                cols.append(vals)
        return cols

    def _insert(self, conn: sqlite3.Connection, cols: list[list], ids: np.ndarray) -> None:
        try:
            conn.executemany(self._insert_sql, zip(ids.tolist(), *cols))
        except sqlite3.IntegrityError as exc:
            raise ConfigError("ids", int(ids[0]), f"an id is already stored ({exc})") from None
        except UnicodeEncodeError:  # a lone surrogate in some text: name the column and row
            raise _unencodable(self.schema, cols) from None
        start = int(conn.execute(_NEXT_ID).fetchone()[0])
        if ids.size and int(ids.max()) + 1 > start:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'next_id'",
                         (str(int(ids.max()) + 1),))

    def next_id(self) -> int:
        """The id the next :meth:`append` without explicit ids would start at."""
        with self._lock:
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
        cols = self._prepare(columns, n)  # validated before the lock is taken
        if n == 0:
            return np.empty(0, dtype=np.int64)
        given = None if ids is None else np.asarray(ids, dtype=np.int64).reshape(-1)
        if given is not None and given.shape != (n,):
            raise ConfigError("ids", given.shape, f"must have shape ({n},)")

        def do(conn):
            start = int(conn.execute(_NEXT_ID).fetchone()[0])
            out = np.arange(start, start + n, dtype=np.int64) if given is None else given
            self._insert(conn, cols, out)
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
        values = tuple(values)
        if len(values) != len(self.schema):
            raise ConfigError("values", len(values), f"must have {len(self.schema)} values")
        for (name, kind), v in zip(self.schema, values):
            if kind == "vector" and v is not None and (type(v) is not bytes
                                                        or len(v) != 4 * self.dim):
                raise ConfigError(name, type(v).__name__, f"must be bytes of {self.dim} "
                                  "float32 values")

        def do(conn):
            try:
                return int(conn.execute(self._insert_one_sql, values).fetchall()[0][0])
            except UnicodeEncodeError:
                raise _unencodable(self.schema, [[v] for v in values]) from None

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
            ids = np.asarray(ids, dtype=np.int64).reshape(-1)
            if ids.size:
                if int(ids.min()) < start:
                    raise ConfigError("ids", int(ids.min()), f"must be >= next id {start}")
                self._insert(conn, self._prepare(columns, ids.size), ids)
            return ids

        return self._write(do)

    def _where(self, where: Mapping[str, object] | None) -> tuple[str, list]:
        if not where:
            return "", []
        parts, args = [], []
        for k, v in where.items():
            if k not in FILTER_COLUMNS or (k != "id" and k not in self._kinds):
                raise ConfigError(k, v, f"filter column must be one of {list(FILTER_COLUMNS)}")
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

    def delete(self, where: Mapping[str, object]) -> int:
        """Delete the rows matching every ``column = value`` of ``where`` exactly.

        A list value matches any of its elements (``IN``). An empty ``where`` is refused
        (use :meth:`reset`). Returns the number of rows deleted.
        """
        if not where:
            raise ConfigError("where", where, "must name at least one column; use reset()")
        clause, args = self._where(where)
        return self._write(lambda c: self._bump(c, self._hold(c).execute(
            f"DELETE FROM {TABLE}{clause}", args).rowcount))

    def _bump(self, conn: sqlite3.Connection, n: int) -> int:
        """Inside a write transaction that deleted or changed ``n`` rows: when n > 0, add one
        to the ``generation`` counter (and note it in :attr:`last_generation`); returns n."""
        if n:
            gen = self._generation(conn) + 1
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('generation', ?)", (str(gen),))
            self.last_generation = gen
        return n

    @staticmethod
    def _hold(conn: sqlite3.Connection) -> sqlite3.Connection:
        """Inside a write transaction, before deleting: move the ``next_id`` counter past
        every stored id (single-row inserts do not advance it), so a deleted row's id is
        never given again. Returns ``conn``."""
        conn.execute(_HOLD_IDS)
        return conn

    @staticmethod
    def _generation(conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return 0 if row is None else int(row[0])

    def delete_ids(self, ids) -> int:
        """Delete rows by id (int64 array or sequence); returns rows deleted."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)

        def do(conn):
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS _del (id INTEGER PRIMARY KEY)")
            conn.execute("DELETE FROM _del")
            conn.executemany("INSERT OR IGNORE INTO _del VALUES (?)", ((i,) for i in ids.tolist()))
            n = self._hold(conn).execute(
                f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM _del)").rowcount
            conn.execute("DELETE FROM _del")
            return self._bump(conn, n)

        return self._write(do) if ids.size else 0

    def prune(self, cutoff: float, where: Mapping[str, object] | None = None) -> int:
        """Delete rows with ``timestamp < cutoff`` (seconds, UTC); returns rows deleted.

        The file does not shrink (the pages go to the freelist) until :meth:`vacuum`.
        """
        cutoff = float(check_range("cutoff", cutoff))
        clause, args = self._where(where)
        clause = (clause + " AND" if clause else " WHERE") + " timestamp < ?"
        return self._write(lambda c: self._bump(
            c, self._hold(c).execute(f"DELETE FROM {TABLE}{clause}", args + [cutoff]).rowcount))

    def keep_newest(self, n: int, by: Sequence[str] = ("tenant_id", "task_type")) -> int:
        """Keep the newest ``n`` rows (by timestamp, then id) per group; returns rows deleted."""
        n = check_range("compact_keep_records", n, 0, None, integer=True)
        for col in by:
            if col not in self._kinds:
                raise ConfigError("by", col, "unknown column")
        part = ", ".join(by)
        sql = (f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() "
               f"OVER (PARTITION BY {part} ORDER BY timestamp DESC, id DESC) AS r "
               f"FROM {TABLE}) WHERE r > ?)")
        return self._write(lambda c: self._bump(c, self._hold(c).execute(sql, (n,)).rowcount))

    def reset(self) -> int:
        """Delete every row (the id counter keeps counting); returns rows deleted."""
        return self._write(lambda c: self._bump(
            c, self._hold(c).execute(f"DELETE FROM {TABLE}").rowcount))

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
        if self.read_only:
            raise StoreReadOnlyError(f"DB={self.path}: opened read-only; VACUUM not run")
        with self._lock:
            before = self.file_bytes()
            if self._conn.in_transaction:  # never VACUUM inside a transaction
                self._conn.execute("COMMIT")
            try:
                self._conn.execute("VACUUM")
                ckpt = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone() \
                    if self.persistent else (0, 0, 0)
            except sqlite3.Error as exc:
                if _errname(exc) in _BUSY:
                    raise StoreBusyError(f"{self.path}: busy, VACUUM not done; retry") from exc
                if _errname(exc) in _CORRUPT:
                    raise self._damaged(exc, self._conn) from exc
                raise StoreWriteError(self.path or ":memory:", f"VACUUM: {exc}") from exc
            free = self._conn.execute("PRAGMA freelist_count").fetchone()[0]
            return {"bytes_before": before, "bytes_after": self.file_bytes(),
                    "freelist_count": int(free), "checkpoint": list(ckpt)}

    def checkpoint(self) -> tuple[int, int, int]:
        """Copy the WAL into the database file and truncate it; (busy, frames, copied)."""
        if not self.persistent or self.read_only:
            return (0, 0, 0)
        with self._lock, self._reading():
            return tuple(self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone())

    @contextlib.contextmanager
    def _reading(self):
        """Map sqlite3 errors of a read to typed ones (corruption -> StoreDamagedError)."""
        self._check_damage()
        try:
            yield
        except sqlite3.Error as exc:
            name = _errname(exc)
            if name in _CORRUPT:
                raise self._damaged(exc, self._conn) from exc
            if name in _BUSY:
                raise StoreBusyError(f"{self.path}: busy for more than {self.timeout:g} s; "
                                     "retry") from exc
            raise StoreError(f"{self.path}: read failed: {exc}") from exc

    # ----------------------------------------------------------------- reading
    def read(self, where: Mapping[str, object] | None = None, *,
             columns: Sequence[str] | None = None,
             categories: Sequence[str] = (), after_id: int | None = None
             ) -> dict[str, object]:
        """Rows matching ``where`` (exact), in id order, as numpy columns.

        One ``SELECT`` is stepped in chunks of :data:`READ_CHUNK` rows; each chunk is
        transposed once and every column is converted in bulk (vector BLOBs joined and
        decoded by one ``np.frombuffer``), with the cyclic garbage collector paused (the
        rows are millions of short-lived tuples that cannot form cycles).

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
        names = self._read_names(columns, categories)
        clause, args = self._where(where)
        if after_id is not None:
            clause = (clause + " AND" if clause else " WHERE") + " id > ?"
            args = args + [int(after_id)]
        sql = f"SELECT {', '.join(names)} FROM {TABLE}{clause} ORDER BY id"
        kinds = ["int" if name == "id" else self._kinds[name] for name in names]
        acc: list[list] = [[] for _ in names]
        # vector columns are joined chunk by chunk (no million BLOB objects alive at once)
        blobs = [(acc[j], j) for j, kind in enumerate(kinds) if kind == "vector"]
        with self._lock, self._reading(), _gc_paused():
            cur = self._conn.execute(sql, args)
            while chunk := cur.fetchmany(READ_CHUNK):
                cols = list(zip(*chunk))
                for col, j in blobs:
                    col.append(self._join_vectors(cols[j]))
                    cols[j] = ()
                for col, vals in zip(acc, cols):
                    col.extend(vals)
        cats = set(categories)
        out: dict[str, object] = {}
        for name, kind, vals in zip(names, kinds, acc):
            if name in cats:
                out[name] = _encode_labels(vals)
                continue
            try:
                out[name] = self._column(kind, vals)
            except (TypeError, ValueError):   # another program wrote text in a number column
                bad = next((v for v in vals if v is not None
                            and not isinstance(v, (int, float))), None)
                raise StoreDamagedError(self.path, f"a stored {name} value is {bad!r:.40}, "
                                        f"not a number") from None
        return out

    def _read_names(self, columns: Sequence[str] | None, categories: Sequence[str]
                    ) -> list[str]:
        """The columns :meth:`read` returns (``id`` first), checked with ``categories``."""
        names = ["id"] + [c for c, _ in self.schema] if columns is None else \
            ["id"] + [c for c in columns if c != "id"]
        for c in names[1:]:
            if c not in self._kinds:
                raise ConfigError("columns", c, "unknown column")
        for c in categories:
            if self._kinds.get(c) != "str":
                raise ConfigError("categories", c, "must name a str column")
        return names

    def _join_vectors(self, vals) -> bytes:
        """One chunk of vector BLOBs as one bytes object; NULL or a wrong length -> zeros."""
        w = self.dim * 4
        if None not in vals:
            raw = b"".join(vals)
            if len(raw) == len(vals) * w and set(map(len, vals)) == {w}:
                return raw
        zero = bytes(w)
        return b"".join(v if isinstance(v, bytes) and len(v) == w else zero for v in vals)

    def _column(self, kind: str, vals: list) -> np.ndarray:
        """One column of fetched values as a numpy array (see :meth:`read`).

        A vector column arrives as a list of joined chunks (:meth:`_join_vectors`).
        """
        n = len(vals)
        if kind == "vector":
            raw = bytearray().join(vals)  # writable, so frombuffer needs no copy
            return np.frombuffer(raw, dtype=np.float32).reshape(-1, self.dim)
        if kind == "float":
            if None in vals:
                vals = [np.nan if v is None else v for v in vals]
            return np.array(vals, dtype=np.float64).reshape(n)
        if kind == "int":
            if None in vals:
                arr = np.empty(n, dtype=object)
                arr[:] = vals
                return arr
            return np.array(vals, dtype=np.int64).reshape(n)
        arr = np.empty(n, dtype=object)
        arr[:] = vals
        return arr

    def count(self, where: Mapping[str, object] | None = None) -> int:
        """Number of rows matching ``where`` exactly."""
        clause, args = self._where(where)
        with self._lock, self._reading():
            return int(self._conn.execute(f"SELECT COUNT(*) FROM {TABLE}{clause}", args)
                       .fetchone()[0])

    # ----------------------------------------------------------------- live view
    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version`` of this connection: it changes when another
        connection (this process or another) commits, never for this connection's own
        commits. One PRAGMA, no table read; 0 for an in-memory store."""
        if not self.persistent:
            return 0
        with self._lock, self._reading():
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def generation(self) -> int:
        """The counter of destructive writes (``meta.generation``; 0 when a version-1 file
        opened read-only lacks it). It changes only when rows were deleted or rewritten."""
        with self._lock, self._reading():
            return self._generation(self._conn)

    def max_id(self) -> int:
        """The highest stored id, -1 for an empty table."""
        with self._lock, self._reading():
            row = self._conn.execute(f"SELECT MAX(id) FROM {TABLE}").fetchone()
        return -1 if row[0] is None else int(row[0])

    @contextlib.contextmanager
    def snapshot(self):
        """Hold one read transaction: every read inside sees the same committed state.

        Inside a write transaction (e.g. from ``on_write``) it adds nothing: the write
        transaction already is one state. The lock of this object is held throughout.
        """
        with self._lock:
            if self._conn.in_transaction:
                yield self
                return
            with self._reading():
                self._conn.execute("BEGIN")
            try:
                yield self
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                raise
            with self._reading():
                if self._conn.in_transaction:
                    self._conn.execute("COMMIT")

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
        clause, args = self._where(where)
        tenant = where.get("tenant_id") if where else None
        if where and (set(where) != {"tenant_id"} or not isinstance(tenant, str)):
            sql = (f"SELECT COUNT(*), COUNT(DISTINCT COALESCE(tenant_id, '')), "
                   f"COUNT(DISTINCT COALESCE(task_type, '')), MIN(timestamp), MAX(timestamp) "
                   f"FROM {TABLE}{clause}")
            with self._lock, self._reading():
                n, nt, nk, lo, hi = self._conn.execute(sql, args).fetchone()
        else:
            with self._lock, self._reading():
                q = self._conn.execute
                n = q(f"SELECT COUNT(*) FROM {TABLE}{clause}", args).fetchone()[0]
                tenants = [tenant] if tenant is not None else self._distinct("tenant_id")
                nt = len(tenants) + (tenant is None and "" not in tenants and q(
                    f"SELECT EXISTS(SELECT 1 FROM {TABLE} WHERE tenant_id IS NULL)"
                ).fetchone()[0]) if n else 0
                tasks: set = set()
                for t in tenants:
                    tasks.update(self._distinct("task_type", t))
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
        return {"n_records": int(n), "n_tenants": int(nt), "n_task_types": int(nk),
                "oldest": None if lo is None else float(lo),
                "newest": None if hi is None else float(hi)}

    def _distinct(self, column: str, tenant: str | None = None) -> list:
        """Distinct non-NULL values of ``tenant_id``, or of ``task_type`` within one tenant,
        by a skip-scan of the (tenant_id, task_type) index: one index probe per value."""
        cond, args = ("tenant_id = ?1 AND ", [tenant]) if tenant is not None else ("", [])
        sql = (f"WITH RECURSIVE d(x) AS (SELECT (SELECT MIN({column}) FROM {TABLE} WHERE "
               f"{cond}{column} IS NOT NULL) UNION ALL SELECT (SELECT MIN({column}) FROM "
               f"{TABLE} WHERE {cond}{column} > d.x) FROM d WHERE d.x IS NOT NULL) "
               "SELECT x FROM d WHERE x IS NOT NULL")
        return [r[0] for r in self._conn.execute(sql, args)]

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
        parts = ["8"]
        for name, kind in self.schema:
            if kind in ("int", "float"):
                parts.append("8")
            elif kind == "vector":
                parts.append(str(4 * self.dim))
            else:
                parts.append(f"COALESCE(LENGTH(CAST({name} AS BLOB)), 0)")
        clause, args = self._where(where)
        sql = (f"SELECT COALESCE(tenant_id, ''), COALESCE(task_type, ''), COUNT(*), "
               f"SUM({' + '.join(parts)}) FROM {TABLE}{clause} GROUP BY 1, 2")
        with self._lock, self._reading():
            rows = self._conn.execute(sql, args).fetchall()
        out = [{"tenant_id": t, "task_type": k, "records": int(n), "bytes": int(b)}
               for t, k, n, b in rows]
        out.sort(key=lambda r: (r["tenant_id"], r["task_type"]))
        return out

    def file_bytes(self) -> int:
        """Size of the database file plus its WAL, in bytes (0 in memory)."""
        if not self.persistent:
            return 0
        return sum(os.path.getsize(self.path + s) for s in ("", "-wal")
                   if os.path.exists(self.path + s))

    def schema_version(self) -> int:
        """Highest applied schema version."""
        with self._lock, self._reading():
            return int(self._conn.execute("SELECT MAX(version) FROM schema_version")
                       .fetchone()[0])

    def stats(self) -> dict:
        """Rows, pages, freelist, sizes and status of the store (JSON-ready)."""
        with self._lock, self._reading():
            q = self._conn.execute
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
        if self._verifier is not None and self._verifier.is_alive():
            try:
                self._verify_conn.interrupt()   # a close never waits for the check
            except sqlite3.Error:
                pass
            self._verifier.join(5.0)
        with self._lock:
            open_tx = False
            try:
                open_tx = self._conn.in_transaction
                if open_tx:
                    self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            finally:
                try:
                    self._conn.close()
                except sqlite3.Error:
                    pass
            if open_tx:
                raise StoreWriteError(self.path or ":memory:", "an uncommitted transaction "
                                      "was open at close and was rolled back")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def stored_dim(path) -> int | None:
    """The vector dim recorded in an existing store file, or None if it has none.

    Opens the file read-only (``mode=ro`` URI), so it never creates or changes anything
    (SQLite's ``-shm`` companion of a WAL file excepted). Returns None for a database that
    is not a dyna store (no ``dim`` in a ``meta`` table); raises
    :class:`dyna.errors.StoreDamagedError` for a file SQLite reports as corrupt or not a
    database, or whose ``dim`` is not an integer >= 1 (it said "no dim": not a store).
    """
    try:
        with open(path, "rb") as fh:
            if fh.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                return None  # not a SQLite database at all
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
    except (OSError, sqlite3.Error):
        return None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        if row is None:
            return None
        return _stored_dim_of(conn, str(path), row[0])
    except sqlite3.Error as exc:
        if _errname(exc) in _CORRUPT:
            raise StoreDamagedError(path, _damage_detail(conn, exc)) from exc
        return None
    finally:
        conn.close()


def _stored_dim_of(conn: sqlite3.Connection, path: str, value) -> int:
    """``meta.dim``'s value checked: an integer in [1, :data:`MAX_DIM`] that the stored
    vectors do not contradict (:func:`_check_vector_length`), else
    :class:`StoreDamagedError` naming it."""
    dim = _meta_int(path, "dim", value, 1)
    if dim > MAX_DIM:
        raise StoreDamagedError(path, f"meta.dim is {dim}, more than {MAX_DIM}")
    _check_vector_length(conn, path, dim)
    return dim


def _check_vector_length(conn: sqlite3.Connection, path: str, dim: int) -> None:
    """Raise :class:`StoreDamagedError` when the first and the last stored vector (a BLOB
    column of the episodes table, by id) both differ from ``dim`` float32 values: a
    ``meta.dim`` changed after the rows were written, which would read every vector as
    zeros. One damaged row (read as zeros, as before) is not enough. Two look-ups by the
    primary key: constant work for any store size."""
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({TABLE})").fetchall()
            if str(r[2]).upper() == "BLOB"]
    for col in cols:
        ends = [conn.execute(f'SELECT length("{col}") FROM {TABLE} WHERE "{col}" IS NOT NULL '
                             f"ORDER BY id {order} LIMIT 1").fetchone()
                for order in ("ASC", "DESC")]
        if ends[0] is not None and all(e[0] != 4 * dim for e in ends):
            raise StoreDamagedError(path, f"meta.dim is {dim}, but the stored {col} vectors "
                                    f"hold {ends[0][0]} bytes, not {4 * dim}")
