"""Redact what an older version stored in an experience store (``dyna store scrub DB``).

Older versions of dyna redacted fewer formats than :mod:`dyna.redact` does now, so a store
written by one may hold secrets in clear. :func:`scrub` re-redacts it in place:

* every JSON column (the free-form dicts ``state_before``, ``action_taken``, ``state_after``,
  ``metadata``) is parsed and redacted again with the current rules
  (:func:`dyna.redact.redact` under :data:`dyna.redact.DEFAULT_SENSITIVE_KEYS`) and written
  back (compact JSON) when that changed it; a stored text that is not JSON is redacted as
  text (:func:`dyna.redact.redact_text`);
* every label column (``tenant_id``, ``task_type``, ``run_id``, ...) is searched with the
  detectors, and a label holding a secret is *reported* by row id, field and detector names
  (never its value) and left unchanged: a redacted label would merge competence buckets and
  break undo, so a person decides (delete the rows with ``dyna store delete``, or re-record);
* ids, numbers, vectors and rows are never changed, added or removed.

The rewrite is one ``BEGIN IMMEDIATE`` transaction run with ``PRAGMA secure_delete = ON``
(freed space is overwritten with zeros); after it commits, ``PRAGMA wal_checkpoint(TRUNCATE)``
copies the new pages into the main file and empties the ``-wal``, then ``VACUUM`` rebuilds the
file without free pages and a last ``wal_checkpoint(TRUNCATE)`` empties the ``-wal`` again, so
the old text is gone from the main file, its free pages and the write-ahead log. With
``dry_run`` the file is opened read-only (``mode=ro``) and only counted.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from dyna.errors import MissingFileError, StoreBusyError, StoreDamagedError, StoreError
from dyna.redact import DEFAULT_SENSITIVE_KEYS, detect, redact, redact_text, scan
from dyna.store.columns import TABLE
from dyna.store.sqlite_file import (CORRUPT, check_file_state, check_is_store, errname,
                                    open_failure)

__all__ = ["scrub"]

_CHUNK = 2048


def _redacted_json(text: str, counts: Counter) -> str:
    """``text`` re-redacted (the same string when nothing changed); counts catches."""
    try:
        parsed = json.loads(text)
    except ValueError:
        new = redact_text(text)
        if new != text:
            counts.update(detect(text))
        return new
    out = redact(parsed, DEFAULT_SENSITIVE_KEYS)
    if out == parsed:
        return text
    counts.update(scan(parsed))
    return json.dumps(out, separators=(",", ":"), allow_nan=False)


def scrub(db, schema: Sequence[tuple[str, str]], *, dry_run: bool = False,
          timeout: float = 10.0) -> dict:
    """Re-redact the JSON columns of the store ``db`` in place; report labels with secrets.

    Parameters
    ----------
    db : str or Path
        An existing dyna store (SQLite file).
    schema : sequence of (str, str)
        Column names and kinds as :class:`dyna.store.sqlite.SQLiteStore` declares them
        (``json`` columns are re-redacted, ``str`` columns are checked labels).
    dry_run : bool
        Count only; the file is opened read-only and never written.
    timeout : float
        Busy timeout in seconds.

    Returns
    -------
    dict
        ``values_changed`` (JSON cells rewritten, or that would be), ``rows_changed``,
        ``rows`` (rows in the store), ``by_detector`` (catches per detector name),
        ``labels_with_secrets`` (a list of ``{"id", "field", "detectors"}``, values never
        included), ``dry_run``, ``path``, and after a real run ``vacuumed`` and
        ``checkpoint`` (busy, log frames, checkpointed frames of the last checkpoint).

    Raises
    ------
    MissingFileError
        ``db`` does not exist.
    NotAStoreError
        ``db`` is not a dyna store.
    StoreDamagedError
        SQLite reports the file as damaged (``quick_check``), or its ``meta`` is (a dim
        out of range or contradicted by its vectors, a bad counter); nothing was written.
    StoreError
        A schema version newer than this dyna's (:func:`dyna.store.sqlite_file.check_file_state`);
        nothing was written.
    StoreBusyError
        Another writer held the file for longer than ``timeout``; nothing was written.
    """
    path = Path(db)
    if not path.is_file():
        raise MissingFileError("DB", path)
    kinds = dict(schema)
    if dry_run:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                               timeout=timeout, isolation_level=None)
    else:
        conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        try:
            check_is_store(conn, str(path), allow_empty=False)
            res = conn.execute("PRAGMA quick_check(3)").fetchall()
            if res == [("ok",)]:   # what every other command refuses, scrub does not write
                check_file_state(conn, str(path))
        except sqlite3.DatabaseError as exc:   # (a full disk is named, never damage)
            if errname(exc) not in CORRUPT:
                raise open_failure(str(path), exc, dry_run, "checked") from exc
            raise StoreDamagedError(str(path), f"quick_check: {exc}") from exc
        if res != [("ok",)]:
            raise StoreDamagedError(str(path), "quick_check: " + "; ".join(
                " ".join(str(r[0]).split()) for r in res))
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({TABLE})").fetchall()]
        json_cols = [c for c in cols if kinds.get(c) == "json"]
        label_cols = [c for c in cols if kinds.get(c) == "str"]
        try:
            if not dry_run:
                conn.execute("PRAGMA secure_delete = ON")
                conn.execute("BEGIN IMMEDIATE")
            out = _rewrite(conn, json_cols, label_cols, dry_run)
            if not dry_run:
                if out["rows_changed"]:  # rows were rewritten: live readers read them again
                    # (a version-1 file has no generation row yet: readers take it as 0)
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('generation', "
                                 "COALESCE((SELECT CAST(value AS INTEGER) + 1 FROM meta "
                                 "WHERE key = 'generation'), 1))")
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if "locked" in str(exc).lower() or "busy" in str(exc).lower():
                raise StoreBusyError(f"{path}: locked by another writer for more than "
                                     f"{timeout:g} s; nothing was scrubbed, retry") from exc
            raise StoreError(f"{path}: scrub failed ({exc}); nothing was changed") from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if not dry_run:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
            ckpt = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            out["vacuumed"] = True
            out["checkpoint"] = list(ckpt)
    finally:
        conn.close()
    out["dry_run"] = bool(dry_run)
    out["path"] = str(path)
    return out


def _rewrite(conn: sqlite3.Connection, json_cols: list[str], label_cols: list[str],
             dry_run: bool) -> dict:
    counts: Counter = Counter()
    labels: list[dict] = []
    values_changed = rows_changed = n_rows = 0
    names = ["id"] + json_cols + label_cols
    last = None
    while True:
        where, args = ("", ()) if last is None else (" WHERE id > ?", (last,))
        rows = conn.execute(f"SELECT {', '.join(names)} FROM {TABLE}{where} ORDER BY id "
                            f"LIMIT {_CHUNK}", args).fetchall()
        if not rows:
            break
        last = rows[-1][0]
        updates = []
        for row in rows:
            n_rows += 1
            ident = row[0]
            changed = {}
            for col, text in zip(json_cols, row[1:1 + len(json_cols)]):
                if isinstance(text, str):
                    new = _redacted_json(text, counts)
                    if new != text:
                        changed[col] = new
            for col, text in zip(label_cols, row[1 + len(json_cols):]):
                if isinstance(text, str) and text:
                    found = detect(text)
                    if found:
                        labels.append({"id": int(ident), "field": col, "detectors": found})
            if changed:
                rows_changed += 1
                values_changed += len(changed)
                updates.append((ident, changed))
        if not dry_run:
            for ident, changed in updates:
                sets = ", ".join(f"{c} = ?" for c in changed)
                conn.execute(f"UPDATE {TABLE} SET {sets} WHERE id = ?",
                             (*changed.values(), ident))
    return {"values_changed": values_changed, "rows_changed": rows_changed, "rows": n_rows,
            "by_detector": dict(sorted(counts.items())), "labels_with_secrets": labels}
