"""What makes a SQLite file a dyna store: its tables, schema version, counters and dim.

The checks here read a file without writing it; :mod:`dyna.store.sqlite_conn` runs them when
it opens a store (and creates or migrates its tables with :func:`init_schema`), and the
commands that work on a file itself (``dyna store scrub``, ``recover``) run them without
opening a store.

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
    (:class:`dyna.errors.StoreDamagedError`, read-only and writable opens alike). A large
    file is checked in the background (:class:`dyna.store.sqlite_conn.QuickCheck`).

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
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dyna.errors import ConfigError, NotAStoreError, StoreDamagedError, StoreError
from dyna.fileio.failures import space_refusal
from dyna.store.columns import KINDS, STORE_TABLES, TABLE
from dyna.store.wal_check import check_wal

__all__ = ["BUSY", "CORRUPT", "MAX_DIM", "MIGRATIONS", "READ_ONLY_VERSIONS",
           "SCHEMA_VERSION", "SQLITE_HEADER", "STORE_TABLES", "EmptyStoreFileError",
           "check_file_state", "check_is_store", "check_meta_counters", "check_store_schema",
           "companion_hint", "companions", "damaged", "disk_refusal", "drop_new_companions",
           "errname", "init_schema", "new_companions", "open_failure", "quick_check",
           "stored_dim"]

SCHEMA_VERSION = 2

#: ``MIGRATIONS[v](conn, schema, dim)`` upgrades a store from version v to v + 1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection, Sequence[tuple[str, str]], int], None]] = {}


def _v1_to_v2(conn: sqlite3.Connection, schema, dim) -> None:
    """Version 2 adds the ``generation`` counter of destructive writes to ``meta`` (0: a
    version-1 file's deletions were all before any live reader could hold rows)."""
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")


MIGRATIONS[1] = _v1_to_v2
#: Versions a read-only open accepts without migrating: version 1 lacks only the
#: ``generation`` row, which a reader takes as 0.
READ_ONLY_VERSIONS = (1, 2)

#: The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: Largest vector dim a store accepts (float32 values per vector; 2**16: 256 KiB a row).
MAX_DIM = 2 ** 16

#: SQLite error names that mean damage, and that mean another writer holds the lock.
CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}
BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}


def errname(exc: sqlite3.Error) -> str:
    """SQLite's primary error name of ``exc`` (``SQLITE_BUSY``, ``SQLITE_CORRUPT``, ...)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if not name:  # older builds: fall back on the message
        msg = str(exc).lower()
        if "locked" in msg or "busy" in msg:
            return "SQLITE_BUSY"
        if "not a database" in msg or "malformed" in msg:
            return "SQLITE_CORRUPT"
    return name.split("_")[0] + "_" + name.split("_")[1] if name.count("_") >= 2 else name


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


def damaged(path, exc: BaseException | None,
            conn: sqlite3.Connection | None = None) -> StoreDamagedError:
    """The error for a file SQLite found damaged: ``exc`` and what ``integrity_check`` on
    ``conn`` finds (``path`` ``""``: the in-memory store)."""
    return StoreDamagedError(str(path) or ":memory:", _damage_detail(conn, exc))


class EmptyStoreFileError(NotAStoreError):
    """A store file of 0 bytes: an empty file, not a store. A writing open makes a new store
    in it only when asked to (``create=True``; ``dyna ... --create``): a file emptied by
    accident (a failed copy, a truncation) is never taken for a new store. Nothing was
    written to it."""

    def __init__(self, path: object, reason: str = "", field: str = "DB"):
        StoreError.__init__(self, f"{field}={path}: empty file, not a store (0 bytes); "
                            "nothing was written to it (create=True, or --create, makes a "
                            "new store in it)")
        self.path, self.reason, self.field = str(path), reason or "0 bytes", field


# ----------------------------------------------------------------------------- checks
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
    A missing or unreadable counter would give ids again after a delete (``MAX`` with a
    NULL is NULL, and SQLite then picks the highest stored id + 1) and break the open; the
    file is left as it is (``dyna store recover`` copies its rows out)."""
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


def quick_check(conn: sqlite3.Connection, path: str) -> StoreDamagedError | None:
    """``PRAGMA quick_check(3)`` on ``conn``: None when the file is sound, else the error to
    raise (the first three problems SQLite names)."""
    try:
        res = conn.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as exc:
        if errname(exc) not in CORRUPT:
            raise
        return StoreDamagedError(path, f"quick_check: {exc}")
    if res != [("ok",)]:
        return StoreDamagedError(path, "quick_check: " + "; ".join(
            " ".join(str(r[0]).split()) for r in res))
    return None


def stored_dim(path) -> int | None:
    """The vector dim recorded in an existing store file, or None if it has none.

    Opens the file read-only (``mode=ro`` URI), so it never creates or changes anything
    (``-wal`` / ``-shm`` companions it had to make are removed again,
    :func:`drop_new_companions`). Returns None for a database that is not a dyna store (no
    ``dim`` in a ``meta`` table).

    Raises
    ------
    EmptyStoreFileError
        A file of 0 bytes (a :class:`dyna.errors.NotAStoreError`).
    dyna.errors.StoreDamagedError
        A file SQLite reports as corrupt or not a database, whose ``dim`` is not an
        integer >= 1, or whose WAL holds frames lost to damage (:func:`check_wal`).
    dyna.errors.StoreError
        The file cannot be read for a reason of the disk or the permissions (a full disk,
        no read permission), named as such (:func:`open_failure`).
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"DB={path}: cannot be read: {os.strerror(exc.errno).lower()} "
                         f"({errno.errorcode.get(exc.errno, '?')})") from None
    if not head:
        raise EmptyStoreFileError(path)
    if head != SQLITE_HEADER:
        return None  # not a SQLite database at all
    check_wal(path)
    before = companions(path)
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        drop_new_companions(path, before)
        raise open_failure(str(path), exc, True, "read") from exc
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        if row is None:
            return None
        return _stored_dim_of(conn, str(path), row[0])
    except sqlite3.Error as exc:
        if errname(exc) in CORRUPT:
            raise StoreDamagedError(path, _damage_detail(conn, exc)) from exc
        if "no such table" in str(exc):
            return None
        raise open_failure(str(path), exc, True, "read") from exc
    finally:
        conn.close()
        drop_new_companions(path, before)


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
    zeros. One damaged row (read as zeros) is not enough. Two look-ups by the primary key:
    constant work for any store size."""
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({TABLE})").fetchall()
            if str(r[2]).upper() == "BLOB"]
    for col in cols:
        ends = [conn.execute(f'SELECT length("{col}") FROM {TABLE} WHERE "{col}" IS NOT NULL '
                             f"ORDER BY id {order} LIMIT 1").fetchone()
                for order in ("ASC", "DESC")]
        if ends[0] is not None and all(e[0] != 4 * dim for e in ends):
            raise StoreDamagedError(path, f"meta.dim is {dim}, but the stored {col} vectors "
                                    f"hold {ends[0][0]} bytes, not {4 * dim}")


def disk_refusal(path) -> str | None:
    """Why the operating system may refuse SQLite's reads and writes of the store at
    ``path``, when the reason is the disk or the permissions and not the file: ``"no space
    left on device (ENOSPC): N bytes free in DIR"``, ``"read-only file system (EROFS):
    DIR"``, ``"permission denied (EACCES): ..."``, or None (``path`` ``""``, memory: None).

    SQLite reports these as ``disk I/O error`` or ``unable to open database file`` without
    the errno, so the folder is examined instead
    (:func:`dyna.fileio.failures.space_refusal`, ``access``).
    """
    if not path:
        return None
    p = Path(path)
    folder = p.resolve().parent
    code = space_refusal(folder)
    if code == errno.EROFS:
        return f"read-only file system (EROFS): {folder}"
    if code == errno.ENOSPC:
        vfs = os.statvfs(folder)
        free = (vfs.f_bfree if os.geteuid() == 0 else vfs.f_bavail) * vfs.f_frsize
        return f"no space left on device (ENOSPC): {free} bytes free in {folder}"
    if p.exists() and not os.access(p, os.R_OK):
        return f"permission denied (EACCES): {p} is not readable by this process"
    return None


def open_failure(path: str, exc: sqlite3.Error, read_only: bool, doing: str = "opened"
                 ) -> StoreError:
    """The typed error for ``exc``, met opening (or reading) the store at ``path``:
    damage (:func:`damaged`) only when SQLite says so; a full disk, a read-only file system
    or a permission (:func:`disk_refusal`) named as such, never as damage; else SQLite's
    message with :func:`companion_hint`."""
    if errname(exc) in CORRUPT:
        return damaged(path, exc)
    refusal = disk_refusal(path) if errname(exc) not in BUSY else None
    if refusal is not None:
        return StoreError(f"DB={path}: cannot be {doing}: {refusal} (SQLite: {exc}"
                          f"{companion_hint(path, read_only)}); the store is not damaged and "
                          "was not changed")
    return StoreError(f"DB={path}: cannot be {doing}: {exc}"
                      f"{companion_hint(path, read_only)}")


#: Byte of the ``-shm`` file every connection using it holds a shared lock on (SQLite's
#: "dead man switch", WALINDEX_LOCK_OFFSET + 8 in os_unix.c), and the byte range of the
#: database file every open connection holds a shared lock in (SHARED_FIRST, SHARED_SIZE:
#: PENDING_BYTE + 2, 510 bytes), which a new connection takes before it opens the ``-shm``.
_SHM_DMS = (128, 1)
_DB_SHARED = (0x40000000 + 2, 510)


def companions(path) -> set[str]:
    """The suffixes (``"-wal"``, ``"-shm"``) of SQLite companions now beside ``path``."""
    return {s for s in ("-wal", "-shm") if os.path.lexists(f"{path}{s}")}


def _identity(name) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of file ``name`` (a link not followed), None when missing or
    unreadable."""
    try:
        st = os.lstat(name)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def new_companions(path, before) -> dict[str, tuple[int, int]]:
    """The companions of ``path`` not among ``before`` (suffixes, :func:`companions`), each
    with its ``(st_dev, st_ino)``: taken right after an open that may have made them, so
    that :func:`drop_new_companions` removes those very files and never one another
    process put in their place later."""
    ids = {s: _identity(f"{path}{s}") for s in ("-wal", "-shm") if s not in before}
    return {s: i for s, i in ids.items() if i is not None}


def _has_locks(paths) -> bool:
    """True when any process (this one included) holds a lock on one of ``paths``, by
    ``/proc/locks`` (True when it cannot be read: then nothing may be assumed)."""
    try:
        with open("/proc/locks") as fh:   # "1: POSIX ADVISORY READ pid maj:min:inode a b"
            rows = [line.split() for line in fh if line.strip()]
        held = {r[6] if r[1] == "->" else r[5] for r in rows}   # ("->": a waiter)
    except (OSError, IndexError):
        return True
    for p in paths:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        except OSError:
            return True
        if f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}" in held:
            return True
    return False


def _lock_exclusive(fd: int, where: tuple[int, int]) -> None:
    """An open-file-description write lock on bytes ``where`` (start, length) of ``fd``;
    OSError when anyone holds a lock there."""
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK,
                struct.pack("hhqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, *where, 0))


def drop_new_companions(path, before, made: dict | None = None) -> list[str]:
    """Remove the ``-wal`` / ``-shm`` companions of ``path`` that a read-only open made, as
    SQLite does when its last connection closes; returns the names removed. Best effort,
    never raises.

    The rule: only files this process made are removed, and only when no connection can
    be using them.

    - Made here: a companion that was not there before the open (``before``, the suffixes
      :func:`companions` gave) and is still the very file recorded right after the open
      (``made``, :func:`new_companions`: its ``(st_dev, st_ino)``; taken now when not
      given). The identity is checked again just before each removal, under the locks
      below, so a companion another process put in its place meanwhile is never
      removed; when the ``-wal`` is not this process's, nothing is.
    - Unused: no process holds a lock on the file or its ``-shm`` (``/proc/locks``,
      checked before any descriptor is opened, since closing one would drop this
      process's POSIX locks on the file); the database's shared-lock range and the
      index's dead-man-switch byte are locked exclusively while the files are removed (a
      new connection waits); and the ``-wal`` is empty (no frame of anyone's is lost).
    """
    made = new_companions(path, before) if made is None else dict(made)
    wal, shm = f"{path}-wal", f"{path}-shm"
    if not made or not hasattr(fcntl, "F_OFD_SETLK") or _has_locks((path, shm)):
        return []
    if os.path.lexists(wal) and ("-wal" not in made or os.path.getsize(wal) != 0):
        return []
    removed, fds = [], []
    try:
        try:        # (a write lock needs a descriptor open for writing)
            fds.append(os.open(path, os.O_RDWR | os.O_NOFOLLOW))
            _lock_exclusive(fds[-1], _DB_SHARED)
        except PermissionError:   # a file this process may not write: the index lock alone
            pass
        if os.path.lexists(shm):
            fds.append(os.open(shm, os.O_RDWR | os.O_NOFOLLOW))
            _lock_exclusive(fds[-1], _SHM_DMS)
        if os.path.lexists(wal) and _identity(wal) != made.get("-wal"):
            return []            # another process's -wal: its index stays with it
        for suffix in ("-wal", "-shm"):
            name = f"{path}{suffix}"
            if suffix in made and _identity(name) == made[suffix]:
                os.unlink(name)
                removed.append(Path(name).name)
    except OSError:
        pass
    finally:
        for fd in fds:
            os.close(fd)
    return removed


def companion_hint(path: str, read_only: bool) -> str:
    """Why SQLite may refuse to open a WAL store: its ``-wal`` / ``-shm`` companions.

    A WAL reader needs both (the shared index of the log): a read-only open creates
    them when they are missing and the folder is writable, and cannot open the store
    when they are missing and the folder is not. A companion this process cannot write
    (left by a read-only open of another user) stops every write. Returns "" when
    neither applies (or in memory, ``path`` ``""``), else the explanation to append to
    SQLite's message.
    """
    if not path:
        return ""
    names = [path + s for s in ("-wal", "-shm")]
    locked = [n for n in names if os.path.exists(n) and not os.access(n, os.W_OK)]
    if locked and not read_only:
        owners = ", ".join(f"{Path(n).name} (uid {os.stat(n).st_uid})" for n in locked)
        return (f"; SQLite's companion files {owners} are not writable by this process "
                f"(uid {os.getuid()}): a read-only open by another user may have left "
                "them; remove them while no process has the store open")
    folder = Path(path).resolve().parent
    if read_only and not all(os.path.exists(n) for n in names) \
            and not os.access(folder, os.W_OK):
        return (f"; a WAL store is read through {Path(names[0]).name} and "
                f"{Path(names[1]).name} (SQLite's shared index of the log): they are "
                f"missing and {folder} is not writable by this process, so it can be "
                "read only while a writer has the store open (or from a copy in a "
                "writable folder)")
    return ""


# ----------------------------------------------------------------------------- schema
def _create_sql(schema: Sequence[tuple[str, str]]) -> list[str]:
    cols = ", ".join(f"{n} {KINDS[k]}" for n, k in schema)
    return [
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY, {cols})",
        f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_tenant_task ON {TABLE}(tenant_id, task_type)",
        f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_timestamp ON {TABLE}(timestamp)",
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
        "applied_at REAL NOT NULL)",
    ]


def check_store_schema(conn: sqlite3.Connection, path: str, schema: Sequence[tuple[str, str]],
                  dim: int, version: int | None, read_only: bool) -> None:
    """Version, dim, counters and columns of an existing store (reads only)."""
    if version is None:
        raise StoreDamagedError(path, "its schema_version table holds no version")
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: schema version {version} is newer than "
                         f"this dyna ({SCHEMA_VERSION}); upgrade dyna")
    if version < SCHEMA_VERSION and read_only and version not in READ_ONLY_VERSIONS:
        raise StoreError(f"{path}: schema version {version} is older than this "
                         f"dyna ({SCHEMA_VERSION}); open it writable once to migrate")
    row = conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
    if row is None:
        raise NotAStoreError(path, "its meta table holds no dyna 'dim' entry")
    stored = _stored_dim_of(conn, path, row[0])
    check_meta_counters(conn, path)
    if stored != dim:
        raise ConfigError("dim", dim, f"store {path} holds vectors of dim {stored}")
    cols = {r[1] for r in conn.execute(f"PRAGMA table_info({TABLE})")}
    missing = [n for n, _ in schema if n not in cols]
    if missing:
        raise StoreError(f"{path}: columns {missing} missing from {TABLE}")


def init_schema(conn: sqlite3.Connection, path: str, schema: Sequence[tuple[str, str]],
                 dim: int) -> None:
    """Create the tables of a new store, or check an existing one and migrate it to
    :data:`SCHEMA_VERSION`, in one write transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "schema_version" not in have:
            if have - {"sqlite_sequence", "sqlite_stat1"}:
                # another program's tables appeared since the check on open
                raise NotAStoreError(path, f"tables {sorted(have)} without a schema_version "
                                     "table")
            for sql in _create_sql(schema):
                conn.execute(sql)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", (SCHEMA_VERSION, time.time()))
            conn.executemany("INSERT INTO meta VALUES (?, ?)",
                             [("dim", str(dim)), ("next_id", "0"), ("generation", "0"),
                              ("created_at", repr(time.time()))])
        else:
            version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
            check_store_schema(conn, path, schema, dim, version, read_only=False)
            while version < SCHEMA_VERSION:
                if version not in MIGRATIONS:
                    raise StoreError(f"{path}: no migration from schema version {version}")
                MIGRATIONS[version](conn, schema, dim)
                version += 1
                conn.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
