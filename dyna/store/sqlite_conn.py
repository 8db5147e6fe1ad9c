"""One connection to a SQLite store file: opening it, its lock, transactions, typed errors.

:class:`SQLiteConnection` opens a file (or memory), checks it is a dyna store and creates or
migrates its tables (:mod:`dyna.store.sqlite_file`), and runs every read and write of
:class:`dyna.store.sqlite.SQLiteStore` under one lock, turning SQLite's error codes into the
typed errors of :mod:`dyna.errors`: a lock held longer than the busy timeout
:class:`~dyna.errors.StoreBusyError`, damage :class:`~dyna.errors.StoreDamagedError`, any
other failed write :class:`~dyna.errors.StoreWriteError` (``status`` becomes
``write_degraded`` until a write succeeds).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from dyna.errors import (MissingFileError, NotAStoreError, StoreBusyError, StoreDamagedError,
                         StoreError, StoreReadOnlyError, StoreWriteError)
from dyna.store import columns as _columns
from dyna.store.sqlite_file import (BUSY, CORRUPT, SQLITE_HEADER, EmptyStoreFileError,
                                    check_is_store, check_store_schema, check_wal,
                                    companion_hint, companions, damaged, disk_refusal,
                                    drop_new_companions, errname, init_schema,
                                    new_companions, open_failure, quick_check)

__all__ = ["VERIFY_IN_BACKGROUND_BYTES", "QuickCheck", "SQLiteConnection"]

#: A file larger than this (bytes) is verified in the background at open (``quick_check``
#: on its own read connection, about 7 s for a 10M-episode store of d = 64, 6.4 GB): the
#: open returns at once, and every read and write after the check found damage raises
#: :class:`dyna.errors.StoreDamagedError`. Smaller files are checked before open returns.
VERIFY_IN_BACKGROUND_BYTES = 256 * 2**20


def _connect(path: str, timeout: float, read_only: bool) -> sqlite3.Connection:
    """A connection in autocommit mode with the busy timeout (``path`` ``""``: memory)."""
    if read_only:
        target, uri = f"{Path(path).resolve().as_uri()}?mode=ro", True
    else:
        target, uri = (path or ":memory:"), False
    conn = sqlite3.connect(target, timeout=timeout, isolation_level=None,
                           check_same_thread=False, uri=uri)
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    return conn


class QuickCheck(threading.Thread):
    """``PRAGMA quick_check`` of a large store file in a daemon thread, on a read-only
    connection of its own (see :data:`VERIFY_IN_BACKGROUND_BYTES`).

    Attributes
    ----------
    found : StoreDamagedError or None
        What the check found; None while it runs, when the file is sound, or when it ended
        without a verdict (interrupted by :meth:`stop`, or busy).
    """

    def __init__(self, path: str, conn: sqlite3.Connection):
        super().__init__(daemon=True, name=f"dyna-quick-check {Path(path).name}")
        conn.execute("PRAGMA query_only = 1")
        self.path = path
        self.found: StoreDamagedError | None = None
        self._conn = conn

    def run(self) -> None:
        try:
            self.found = quick_check(self._conn, self.path)
        except sqlite3.Error:      # interrupted by stop(), or busy: no verdict
            pass
        finally:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass

    def raise_found(self) -> None:
        """Raise what the check found (a new error each time); nothing when it found
        nothing (yet)."""
        found = self.found
        if found is not None:
            raise StoreDamagedError(found.path, found.detail)

    def stop(self) -> None:
        """Interrupt a check still running and wait for it (at most 5 s)."""
        if self.is_alive():
            try:
                self._conn.interrupt()   # a close never waits for the check
            except sqlite3.Error:
                pass
            self.join(5.0)


def _opening_error(exc: sqlite3.Error, conn: sqlite3.Connection, path: str, timeout: float,
                   read_only: bool) -> Exception:
    """The typed error for a sqlite3 error met while opening a store: damage only when
    SQLite says so, a full disk or a permission named as such (:func:`open_failure`)."""
    name = errname(exc)
    if name in CORRUPT:
        return damaged(path, exc, conn)
    if name in BUSY:
        return StoreBusyError(f"{path}: locked by another writer for more than {timeout:g} s "
                              "while opening; retry")
    return open_failure(path, exc, read_only)


def _open(path: str, schema: Sequence[tuple[str, str]], dim: int, *, timeout: float,
          verify: bool, read_only: bool, existing: bool
          ) -> tuple[sqlite3.Connection, QuickCheck | None]:
    """Open a store file (``path`` ``""``: memory), check it and create or migrate its
    tables; ``existing``: the file exists and is not empty, so it is checked to be a dyna
    store before anything is written to it, and verified when ``verify``. Returns the
    connection and the started background check of a large file (or None)."""
    try:
        conn = _connect(path, timeout, read_only)
    except sqlite3.Error as exc:
        raise open_failure(path, exc, read_only) from exc
    check = None
    try:
        if existing:
            # before anything is written (even the WAL header): is this a dyna store?
            existing = check_is_store(conn, path, allow_empty=not read_only)
        if verify and existing and os.path.getsize(path) > VERIFY_IN_BACKGROUND_BYTES:
            check = QuickCheck(path, _connect(path, timeout, read_only))
            check.start()
        elif verify and existing:
            damage = quick_check(conn, path)
            if damage is not None:
                raise damage
        if path and not read_only:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StoreError(f"{path}: could not enable WAL (got {mode})")
        if not read_only:
            conn.execute("PRAGMA synchronous = NORMAL")
            init_schema(conn, path, schema, dim)
        else:
            check_store_schema(conn, path, schema, dim, conn.execute(
                "SELECT MAX(version) FROM schema_version").fetchone()[0], read_only=True)
    except sqlite3.Error as exc:
        try:
            raise _opening_error(exc, conn, path, timeout, read_only) from exc
        finally:
            conn.close()
    except BaseException:
        conn.close()
        raise
    return conn, check


class SQLiteConnection:
    """One connection to a store file (or memory), with its lock and typed errors.

    Parameters
    ----------
    path : str
        Database file; ``""`` for memory.
    schema : sequence of (str, str)
        The store's columns after ``id`` (checked, :func:`dyna.store.columns.check_schema`).
    dim : int
        Length of every vector.
    timeout : float
        Busy timeout in seconds.
    verify : bool
        ``quick_check`` an existing file: before the open returns for a file up to
        :data:`VERIFY_IN_BACKGROUND_BYTES`, in the background (:class:`QuickCheck`) for a
        larger one.
    read_only : bool
        Open with ``mode=ro``: never create, migrate or write the file. Companions
        (``-wal``, ``-shm``) a failed read-only open made are removed again, those very
        files only (their identity recorded right after the open) and only while no
        other connection uses them (:func:`dyna.store.sqlite_file.drop_new_companions`).
    create : bool
        Make a new store in an existing file of 0 bytes (without it such a file is refused:
        :class:`dyna.store.sqlite_file.EmptyStoreFileError`). A missing file is created
        either way; its folder never is.

    Attributes
    ----------
    conn : sqlite3.Connection
        In autocommit mode; statements run under :attr:`lock`.
    lock : threading.RLock
    status : str
        ``ok``, ``missing`` (this open created the store) or ``write_degraded`` (the last
        write failed).
    verifier : QuickCheck or None
        The background check of a large file.

    Raises
    ------
    MissingFileError, NotAStoreError, StoreDamagedError, StoreBusyError, StoreError,
    ConfigError
        As :class:`dyna.store.sqlite.SQLiteStore` describes; a missing folder is a
        MissingFileError, a file of 0 bytes without ``create`` an EmptyStoreFileError (a
        NotAStoreError), damaged WAL frames a StoreDamagedError
        (:func:`dyna.store.wal_check.check_wal`), a full disk or a permission a StoreError
        naming it (never damage).
    """

    def __init__(self, path: str, schema: Sequence[tuple[str, str]], dim: int, *,
                 timeout: float, verify: bool, read_only: bool, create: bool = False):
        self.path = path
        self.persistent = bool(path)
        self.read_only = read_only
        self.timeout = timeout
        self.lock = threading.RLock()
        self.status = "ok"
        before = set()
        if self.persistent:
            self._check_file(Path(path), create)
            if self.status != "missing":
                check_wal(path)          # before SQLite replays (and silently cuts) the log
            before = companions(path)
        try:
            self.conn, self.verifier = _open(
                path, schema, dim, timeout=timeout, verify=verify, read_only=read_only,
                existing=self.persistent and self.status != "missing")
        except BaseException:
            if self.persistent and read_only:   # the failed open's own companions only
                drop_new_companions(path, before, new_companions(path, before))
            raise

    def _check_file(self, p: Path, create: bool) -> None:
        """Refuse what must not be opened as a store, before SQLite opens it: a missing
        folder, a missing file for a reader, an empty file without ``create``, a file
        without SQLite's header; sets :attr:`status` ``missing`` for a store to make."""
        if not p.parent.is_dir():
            raise MissingFileError("DB", p, f"its folder {str(p.parent)!r} does not exist "
                                   "(a store never creates folders)")
        if not p.exists():
            if self.read_only:
                raise MissingFileError("DB", p, "no such store (a read-only open never "
                                       "creates one)")
            self.status = "missing"
        elif p.is_file() and p.stat().st_size == 0:
            if self.read_only or not create:
                raise EmptyStoreFileError(p)
            self.status = "missing"
        elif p.is_file():
            with open(p, "rb") as fh:
                if fh.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                    raise NotAStoreError(p, "not a SQLite database: no SQLite header")

    def wait_verified(self, timeout: float | None = None) -> bool:
        """Wait for the background check (see :meth:`dyna.store.sqlite.SQLiteStore.
        wait_verified`); False while it still runs."""
        t = self.verifier
        if t is not None:
            t.join(timeout)
            if t.is_alive():
                return False
            t.raise_found()
        return True

    def write(self, fn: Callable[[sqlite3.Connection], object],
              before: Callable[[], None] | None = None, begin: bool = True):
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction and return its result.

        ``before()`` runs inside the transaction before ``fn`` (no other writer can commit
        until it ends); ``begin=False``: ``fn`` runs one statement in autocommit mode, its
        own transaction. On any error the transaction is rolled back.

        Raises
        ------
        StoreReadOnlyError
            A read-only open.
        StoreBusyError
            Another writer held the lock longer than the timeout; nothing written.
        StoreDamagedError
            SQLite found the file damaged (it is never replaced); nothing written.
        StoreWriteError
            Any other failure (full disk, read-only file); ``status`` becomes
            ``write_degraded``.
        """
        if self.read_only:
            raise StoreReadOnlyError(f"DB={self.path}: opened read-only; nothing was written")
        if self.verifier is not None:
            self.verifier.raise_found()
        with self.lock:
            conn = self.conn
            try:
                if begin:
                    conn.execute("BEGIN IMMEDIATE")
                    if before is not None:
                        before()
                    out = fn(conn)
                    conn.execute("COMMIT")
                else:
                    out = fn(conn)
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise self._write_error(exc) from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if self.status in ("missing", "write_degraded"):
                self.status = "ok"
            return out

    def _write_error(self, exc: sqlite3.Error) -> Exception:
        """The typed error of a failed write (``status`` set for a degraded one)."""
        if errname(exc) in BUSY:
            return StoreBusyError(f"{self.path or ':memory:'}: locked by another writer "
                                  f"for more than {self.timeout:g} s; nothing was "
                                  "written, retry")
        if errname(exc) in CORRUPT:  # never replaced; nothing was written
            return damaged(self.path, exc, self.conn)
        self.status = "write_degraded"
        hint = companion_hint(self.path, self.read_only) if "READONLY" in errname(exc) else ""
        refusal = disk_refusal(self.path)
        if refusal is not None:     # the errno SQLite does not give: ENOSPC, EACCES, EROFS
            hint += f" ({refusal})"
        return StoreWriteError(self.path or ":memory:", f"{exc}{hint}")

    @contextlib.contextmanager
    def reading(self):
        """Map sqlite3 errors of a read to typed ones (corruption -> StoreDamagedError,
        a lock -> StoreBusyError, else StoreError); raise what a background check found."""
        if self.verifier is not None:
            self.verifier.raise_found()
        try:
            yield
        except sqlite3.Error as exc:
            name = errname(exc)
            if name in CORRUPT:
                raise damaged(self.path, exc, self.conn) from exc
            if name in BUSY:
                raise StoreBusyError(f"{self.path}: busy for more than {self.timeout:g} s; "
                                     "retry") from exc
            raise StoreError(f"{self.path}: read failed: {exc}") from exc

    def query(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:
        """Every row of one read-only statement (a small result), with typed errors."""
        with self.lock, self.reading():
            return self.conn.execute(sql, args).fetchall()

    def scan(self, sql: str, args: Sequence[object] = (), size: int | None = None
             ) -> Iterator[list[tuple]]:
        """The rows of one read-only statement in chunks of ``size`` rows (default
        :data:`dyna.store.columns.READ_CHUNK`), with typed errors. The lock is held until
        the iteration ends: consume it whole."""
        with self.lock, self.reading():
            cur = self.conn.execute(sql, args)
            while chunk := cur.fetchmany(size or _columns.READ_CHUNK):
                yield chunk

    @contextlib.contextmanager
    def snapshot(self):
        """Hold one read transaction: every read inside sees the same committed state.

        Inside a write transaction it adds nothing: the write transaction already is one
        state. The lock is held throughout.
        """
        with self.lock:
            if self.conn.in_transaction:
                yield
                return
            with self.reading():
                self.conn.execute("BEGIN")
            try:
                yield
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                raise
            with self.reading():
                if self.conn.in_transaction:
                    self.conn.execute("COMMIT")

    def file_bytes(self) -> int:
        """Size of the database file plus its WAL, in bytes (0 in memory)."""
        if not self.persistent:
            return 0
        return sum(os.path.getsize(self.path + s) for s in ("", "-wal")
                   if os.path.exists(self.path + s))

    def vacuum(self) -> dict:
        """``VACUUM`` outside any transaction, then ``PRAGMA wal_checkpoint(TRUNCATE)``
        (see :meth:`dyna.store.sqlite.SQLiteStore.vacuum`)."""
        if self.read_only:
            raise StoreReadOnlyError(f"DB={self.path}: opened read-only; VACUUM not run")
        with self.lock:
            before = self.file_bytes()
            if self.conn.in_transaction:  # never VACUUM inside a transaction
                self.conn.execute("COMMIT")
            try:
                self.conn.execute("VACUUM")
                ckpt = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone() \
                    if self.persistent else (0, 0, 0)
            except sqlite3.Error as exc:
                if errname(exc) in BUSY:
                    raise StoreBusyError(f"{self.path}: busy, VACUUM not done; retry") from exc
                if errname(exc) in CORRUPT:
                    raise damaged(self.path, exc, self.conn) from exc
                raise StoreWriteError(self.path or ":memory:", f"VACUUM: {exc}") from exc
            free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
            return {"bytes_before": before, "bytes_after": self.file_bytes(),
                    "freelist_count": int(free), "checkpoint": list(ckpt)}

    def close(self) -> None:
        """Stop a background check and close the connection (idempotent); an open
        transaction is rolled back and :class:`dyna.errors.StoreWriteError` raised after
        closing."""
        if self.verifier is not None:
            self.verifier.stop()
        with self.lock:
            open_tx = False
            try:
                open_tx = self.conn.in_transaction
                if open_tx:
                    self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            finally:
                try:
                    self.conn.close()
                except sqlite3.Error:
                    pass
            if open_tx:
                raise StoreWriteError(self.path or ":memory:", "an uncommitted transaction "
                                      "was open at close and was rolled back")
