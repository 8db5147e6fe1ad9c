"""Copy the readable rows of a damaged SQLite store into a new one (``dyna store recover``).

A damaged store is never repaired in place or replaced (see :mod:`dyna.store.sqlite`); its
readable rows are copied into a new file instead. The damaged file is opened read-only
(``mode=ro``) and never written. Rows of ``episodes`` are read by ranges of ids: a range
whose read raises is split in two, down to single ids, so one bad page loses only the rows
stored on it. The schema (the ``CREATE`` statements), the ``meta`` and ``schema_version``
rows and every readable row are copied as stored: tenant ids and the redacted JSON texts
are byte for byte what the damaged file held, so redaction and tenant scoping carry over.

The new store is built in a temporary file next to ``out`` and linked to ``out`` at the end
(never over an existing file, :func:`dyna.fileio.atomic.place_new`), so ``out`` either does
not exist or is complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path

from dyna.errors import ConfigError, MissingFileError, StoreError, StoreWriteError
from dyna.fileio.atomic import place_new
from dyna.fileio.failures import write_errors
from dyna.fileio.tempfiles import clean_orphans, make_temp_file
from dyna.store.columns import STORE_TABLES, TABLE
from dyna.store.sqlite_file import (CORRUPT, MAX_DIM, SCHEMA_VERSION, companions, disk_refusal,
                                    drop_new_companions, errname, new_companions,
                                    open_failure)

__all__ = ["recover"]

#: Ids read per range at first (a range that raises is bisected).
RANGE = 4096
_ID_MIN, _ID_MAX = -(2 ** 63), 2 ** 63 - 1


def _try(conn: sqlite3.Connection, sql: str, args=()):
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.DatabaseError:
        return None


def _id_bounds(src: sqlite3.Connection) -> tuple[int, int]:
    """[lo, hi] of the ids to scan: from min/max(id), else the meta counter, else all."""
    lo = _try(src, f"SELECT MIN(id) FROM {TABLE}")
    hi = _try(src, f"SELECT MAX(id) FROM {TABLE}")
    lo = lo[0][0] if lo and lo[0][0] is not None else None
    hi = hi[0][0] if hi and hi[0][0] is not None else None
    nxt = _try(src, "SELECT value FROM meta WHERE key = 'next_id'")
    nxt = int(nxt[0][0]) - 1 if nxt and str(nxt[0][0]).lstrip("-").isdigit() else None
    hi = max(x for x in (hi, nxt) if x is not None) if hi is not None or nxt is not None \
        else _ID_MAX
    lo = min(lo, 0) if lo is not None else (0 if nxt is not None else _ID_MIN)
    return lo, hi


def _read_rows(src: sqlite3.Connection, names: list[str], lo: int, hi: int):
    """Readable rows with ids in [lo, hi] by id ranges, bisecting a range whose read raises.

    Returns (rows by id, ids whose single-id read raised).
    """
    sql = (f"SELECT {', '.join(names)} FROM {TABLE} WHERE id >= ? AND id <= ? ORDER BY id")
    got: dict[int, tuple] = {}
    failed: set[int] = set()
    # ranges of RANGE ids in order; an unknown span (no bounds readable) is bisected whole
    step = RANGE if hi - lo < 2 ** 32 else hi - lo + 1
    start = lo
    while start <= hi:
        end = min(hi, start + step - 1)
        stack = [(start, end)]
        while stack:
            a, b = stack.pop()
            rows = _try(src, sql, (a, b))
            if rows is not None:
                got.update((r[0], r) for r in rows)
                continue
            if a == b:
                failed.add(a)
                continue
            mid = a + (b - a) // 2
            stack.append((mid + 1, b))
            stack.append((a, mid))
        start = end + 1
    return got, failed


def _scan(src: sqlite3.Connection, sql: str) -> list[tuple]:
    """Rows of ``sql`` up to the first error (a damaged page ends the scan, not the rows)."""
    out: list[tuple] = []
    try:
        cur = src.execute(sql)
        while chunk := cur.fetchmany(256):
            out.extend(chunk)
    except sqlite3.DatabaseError:
        pass
    return out


def _readable_rows(src: sqlite3.Connection, names: list[str], lo: int, hi: int):
    """Every row SQLite can give back, by id; and the ids known to exist but unreadable.

    Three reads whose failures differ: id ranges bisected down to single ids (one bad page
    costs only its rows), a forward and a backward scan of the table b-tree (each stops at
    its first bad page; they reach rows whose parent page misleads a search by id), and
    the ids listed by the indexes (rows known to exist, to count the ones lost).
    """
    got, failed = _read_rows(src, names, lo, hi)
    cols = ", ".join(names)
    for order in ("ASC", "DESC"):
        for r in _scan(src, f"SELECT {cols} FROM {TABLE} ORDER BY id {order}"):
            if lo <= r[0] <= hi:  # a garbage cell can carry a garbage rowid
                got.setdefault(r[0], r)
    known: set[int] = set(failed)
    for ix in (r[0] for r in _try(src, "SELECT name FROM sqlite_master WHERE type = 'index' "
                                  "AND tbl_name = ?", (TABLE,)) or []):
        if ix.startswith("sqlite_"):
            continue
        known.update(r[0] for r in _scan(src, f'SELECT id FROM {TABLE} INDEXED BY "{ix}"'))
    for i in sorted(known - got.keys()):  # a last try, one id at a time
        rows = _try(src, f"SELECT {cols} FROM {TABLE} WHERE id = ?", (i,))
        if rows:
            got[i] = rows[0]
    lost = {i for i in known - got.keys() if lo <= i <= hi}
    return [got[i] for i in sorted(got)], len(lost)


def _schema_sql(src: sqlite3.Connection) -> list[str] | None:
    rows = _try(src, "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                "ORDER BY type = 'index', rowid")
    if not rows:
        return None
    return [sql for typ, name, sql in rows if not name.startswith("sqlite_")]


def recover(src, out, schema=None) -> dict:
    """Copy every readable row of the store at ``src`` into a new store at ``out``.

    Parameters
    ----------
    src : str or Path
        The (damaged) store; opened read-only, never written.
    out : str or Path
        The new store; must not exist.
    schema : sequence of (str, str), optional
        The store's ``(column, kind)`` pairs (``dyna.experience.RECORD_SCHEMA``): a row
        whose ``json`` value does not parse, or whose ``int`` / ``float`` value is not a
        number (text another program wrote there), is counted unreadable, not copied.

    Returns
    -------
    dict
        ``source``, ``out``, ``rows_recovered`` (episode rows copied), ``rows_unreadable``
        (ids whose read failed: the rows SQLite could not give back), ``id_range`` scanned,
        ``meta_recovered`` (meta entries copied), ``integrity_check`` of the new file.

    Raises
    ------
    MissingFileError
        ``src`` does not exist, or the folder of ``out`` does not.
    ConfigError
        ``out`` exists already, or is ``src``.
    StoreError
        ``src`` has no readable ``episodes`` schema and no dim could be found, or cannot
        be read for a reason of the disk or the permissions (named: ``no space left on
        device (ENOSPC)``, never an unreadable schema).
    StoreWriteError
        The new store could not be written (a full disk); nothing is left at ``out``.

    ``-wal`` / ``-shm`` companions of ``src`` that its read-only open made (those very
    files, recorded right after the open: never ones another process made meanwhile) are
    removed again (:func:`dyna.store.sqlite_file.drop_new_companions`) when ``src`` had no
    ``-wal``; beside an existing ``-wal`` (frames of ``src`` that SQLite reads through its
    index) the ``-shm`` the open made stays, as SQLite leaves it.
    """
    src_p, out_p = Path(src), Path(out)
    if not src_p.is_file():
        raise MissingFileError("DB", src_p)
    if out_p.exists() or os.path.lexists(out_p):
        raise ConfigError("out", str(out_p), "exists already; recover never overwrites a file")
    if not out_p.parent.is_dir():
        raise MissingFileError("out", out_p.parent)
    before = companions(src_p)
    made = None               # (taken at the removal when the open fails)
    try:
        conn = _open_source(src_p)
        made = new_companions(src_p, before)    # right after the open made them
        with contextlib.closing(conn):
            result = _copy_out(conn, src_p, out_p, dict(schema or ()))
    finally:
        drop_new_companions(src_p, before, made)   # companions of a store without a -wal
    result.update(source=str(src_p), out=str(out_p))
    return result


def _open_source(src_p: Path) -> sqlite3.Connection:
    """``src_p`` opened read-only, with its first page read: a failure that is the disk's
    or a permission's (a full disk: SQLite cannot make its ``-shm`` index) is named as such
    (:func:`dyna.store.sqlite_file.open_failure`), never taken for an unreadable schema."""
    try:
        conn = sqlite3.connect(f"{src_p.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise open_failure(str(src_p), exc, True, "read") from exc
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
    except sqlite3.Error as exc:
        if errname(exc) not in CORRUPT:     # (damage is what recover reads around)
            conn.close()
            raise open_failure(str(src_p), exc, True, "read") from exc
    return conn


def _copy_out(conn: sqlite3.Connection, src_p: Path, out_p: Path, kinds: dict) -> dict:
    """Copy into a temporary file beside ``out_p`` and put it in place; a write the system
    refuses (a full disk) is a :class:`dyna.errors.StoreWriteError` naming ``out`` and
    leaves nothing."""
    clean_orphans(out_p, suffix=".recover-tmp")  # a killed recover's temporary, if any
    tmp = None
    try:
        with write_errors(out_p, "out"):
            tmp = make_temp_file(out_p, suffix=".recover-tmp")
        try:
            result = _copy(conn, src_p, tmp, kinds)
        except sqlite3.Error as exc:   # (reads of the source never raise: see _try)
            refusal = disk_refusal(tmp)
            raise StoreWriteError(out_p, f"{exc}" + (f" ({refusal})" if refusal else ""),
                                  field="out") from exc
        try:
            with write_errors(out_p, "out"):
                place_new(tmp, out_p)   # never over a file that appeared meanwhile
        except FileExistsError:
            raise ConfigError("out", str(out_p), "appeared while recovering; not "
                              "overwritten") from None
    finally:
        for s in ("", "-wal", "-shm", "-journal"):
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp + s)
    return result


def _copy(src: sqlite3.Connection, src_p: Path, tmp: str, kinds: dict) -> dict:
    ddl = _schema_sql(src)
    names: list[str] | None = None
    cols = _try(src, f"PRAGMA table_info({TABLE})")
    if cols:
        names = [r[1] for r in cols]
    meta = _try(src, "SELECT key, value FROM meta") or []
    versions = _try(src, "SELECT version, applied_at FROM schema_version") or []
    if ddl is None or names is None:
        raise StoreError(f"DB={src_p}: its schema (page 1) is unreadable; nothing to recover")
    if names[0] != "id":
        raise StoreError(f"DB={src_p}: table {TABLE} has no id column; nothing to recover")
    dst = sqlite3.connect(tmp, isolation_level=None)
    try:
        dst.execute("PRAGMA journal_mode = WAL")
        dst.execute("PRAGMA synchronous = NORMAL")
        dst.execute("BEGIN IMMEDIATE")
        for sql in ddl:
            dst.execute(sql)
        have = {r[0] for r in dst.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = [t for t in STORE_TABLES if t not in have]
        if missing:
            raise StoreError(f"DB={src_p}: tables {missing} missing from its schema; "
                             "not a dyna store")
        lo, hi = _id_bounds(src)
        insert = (f"INSERT INTO {TABLE} ({', '.join(names)}) "
                  f"VALUES ({', '.join('?' * len(names))})")
        rows, bad = _readable_rows(src, names, lo, hi)
        if kinds:
            fit = [r for r in rows if _fits(r, names, kinds)]
            bad, rows = bad + len(rows) - len(fit), fit
        dst.executemany(insert, rows)
        n = len(rows)
        max_id = rows[-1][0] if rows else None
        meta_d = {str(k): str(v) for k, v in meta}
        # a damaged counter, dim or generation is re-derived, never copied (the new file
        # would be refused again) nor parsed into a traceback
        dropped = [k for k in ("next_id", "dim", "generation")
                   if k in meta_d and not _count(meta_d[k], positive=k == "dim")]
        for k in dropped:
            del meta_d[k]
        if "generation" in dropped:
            meta_d["generation"] = "0"     # a new file: nobody has read it yet
        guess = _guess_dim(dst, names)
        if "dim" in meta_d and (int(meta_d["dim"]) > MAX_DIM
                                or guess not in (None, int(meta_d["dim"]))):
            # a dim too large, or one the stored vectors contradict (changed after they
            # were written), is re-derived from the vectors too
            del meta_d["dim"]
        if "dim" not in meta_d:
            dim = guess
            if dim is None:
                raise StoreError(f"DB={src_p}: the meta table is unreadable and no vector "
                                 "dim could be found; nothing recovered")
            meta_d["dim"] = str(dim)
        if "features" in names:   # a vector of another length would read as zeros
            w = 4 * int(meta_d["dim"])
            dropped_v = dst.execute(f"DELETE FROM {TABLE} WHERE features IS NOT NULL AND "
                                    "length(features) != ?", (w,)).rowcount
            bad, n = bad + dropped_v, n - dropped_v   # (max_id stays: ids never reused)
        # ids are never reused: the counter stays past every id the damaged file handed out
        nxt = max(int(meta_d.get("next_id", 0) or 0), (max_id + 1) if max_id is not None else 0)
        meta_d["next_id"] = str(nxt)
        meta_d.setdefault("created_at", repr(time.time()))
        meta_d["recovered_from"] = str(src_p.resolve())
        meta_d["recovered_at"] = repr(time.time())
        dst.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", sorted(meta_d.items()))
        if not versions:
            versions = [(SCHEMA_VERSION, time.time())]
        dst.executemany("INSERT OR REPLACE INTO schema_version VALUES (?, ?)", versions)
        dst.execute("COMMIT")
        check = [r[0] for r in dst.execute("PRAGMA integrity_check").fetchall()]
        dst.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        dst.close()
    return {"rows_recovered": n, "rows_unreadable": int(bad), "id_range": [lo, hi],
            "meta_recovered": len(meta), "integrity_check": "; ".join(check)}


def _fits(row: tuple, names: list[str], kinds: dict) -> bool:
    """Whether every value of ``row`` is of its column's kind (NULL always is)."""
    for name, v in zip(names, row):
        kind = kinds.get(name)
        if v is None or kind is None:
            continue
        if kind in ("int", "float") and (isinstance(v, bool)
                                          or not isinstance(v, (int, float))):
            return False
        if kind == "json":
            try:
                json.loads(v)
            except (TypeError, ValueError):
                return False
    return True


def _count(value: str, positive: bool = False) -> bool:
    """``value`` is the decimal text of an integer >= 0 (> 0 when ``positive``)."""
    v = value.strip()
    return v.isascii() and v.isdigit() and (int(v) > 0 or not positive)


def _guess_dim(dst: sqlite3.Connection, names: list[str]) -> int | None:
    if "features" not in names:
        return None
    row = dst.execute(f"SELECT length(features) / 4 AS d, COUNT(*) FROM {TABLE} "
                      "WHERE features IS NOT NULL GROUP BY d ORDER BY 2 DESC LIMIT 1").fetchone()
    return int(row[0]) if row and row[0] else None

