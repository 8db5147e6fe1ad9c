"""The maintenance operations of the experience store: delete, prune, compact, move records.

:class:`StoreMaintenance` holds the operations of :class:`dyna.experience.ExperienceStore`
that delete episodes, reclaim space, move episodes in and out (JSONL, Parquet, a polars
table) and write the feature cache. A store opened read-only refuses those that change
records (:class:`dyna.errors.StoreReadOnlyError`). Deletions go to the backend first: its
write transaction catches the live view up (``on_write``) before deleting, so both then
drop the same rows. Only ``prune_old``, ``compact`` and ``reset`` with ``all_tenants`` may
span tenants, and only when no tenant is given.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dyna.buffer.schema import clock_seconds
from dyna.errors import ConfigError
from dyna.experience.cached_search import CachedSearch
from dyna.experience.episodes import (RECORD_SCHEMA, batch_kwargs, check_tenant, checked,
                                      columns_from_records, records_from_columns, selection)
from dyna.experience.operations import MAX_KEEP
from dyna.experience.stored import redacted_for_export
from dyna.experience.view import LiveView
from dyna.fileio.atomic import check_target
from dyna.store import featcache
from dyna.store import jsonl as store_jsonl
from dyna.store import parquet as store_parquet
from dyna.store.backend import StoreBackend
from dyna.store.columns import iso_times
from dyna.store.sqlite import SQLiteStore

__all__ = ["StoreMaintenance", "newest_excess"]


def newest_excess(view: LiveView, tenant_id: str, keep: int) -> np.ndarray:
    """Buffer rows of a tenant beyond the newest ``keep`` of each task type (by timestamp,
    then id), sorted."""
    buf = view.buf
    rows = view.rows(tenant_id)
    ts = buf.column("timestamp")[rows]
    ident = buf.column("id")[rows]
    task = buf.column("task_type")[rows]
    order = np.lexsort((-ident, -ts, task))  # by task, newest first
    t_sorted = task[order]
    start = np.flatnonzero(np.r_[True, t_sorted[1:] != t_sorted[:-1]])
    rank = np.arange(order.size) - np.repeat(start, np.diff(np.r_[start, order.size]))
    return np.sort(rows[order[rank >= keep]])


class StoreMaintenance:
    """The maintenance operations of :class:`dyna.experience.ExperienceStore` (a part of
    it: the store's constructor sets the attributes below)."""

    dim: int
    clock: Any
    redact_keys: frozenset
    _db: StoreBackend | None
    _live: LiveView
    _cached: CachedSearch

    def prune_old(self, max_age_seconds: float, tenant_id: str | None = None,
                  now: float | None = None) -> dict:
        """Delete episodes with ``timestamp < now - max_age_seconds``.

        Returns
        -------
        dict
            ``deleted`` (rows), ``cutoff`` (seconds). The file shrinks only at
            :meth:`compact`.
        """
        live = self._live
        live.refuse_if_read_only("prune_old")
        age = checked("max_age_seconds", max_age_seconds, 0.0, None)
        if not math.isfinite(age):
            raise ConfigError("max_age_seconds", age, "must be finite")
        if tenant_id is not None:
            tenant_id = check_tenant(tenant_id)
        now = clock_seconds(self.clock) if now is None else float(checked("now", now))
        cutoff = now - age
        with live.lock:
            if self._db is not None:
                self._db.prune(cutoff, where=None if tenant_id is None
                               else {"tenant_id": tenant_id})
            if tenant_id is None:
                n = live.buf.prune_older_than(cutoff)
            else:
                rows = live.rows(tenant_id)
                n = live.buf.delete(rows[live.buf.column("timestamp")[rows] < cutoff])
            live.deleted(n)
        return {"deleted": int(n), "cutoff": cutoff}

    def compact(self, compact_keep_records: int | None = None,
                tenant_id: str | None = None) -> dict:
        """Keep the newest ``compact_keep_records`` per (tenant, task type); reclaim space.

        Without ``compact_keep_records`` nothing is deleted and only the file is compacted
        (``VACUUM`` and a WAL checkpoint; case PERS-05).

        Returns
        -------
        dict
            ``deleted``, ``bytes_before``, ``bytes_after``, ``freelist_count``.
        """
        live = self._live
        live.refuse_if_read_only("compact")
        if compact_keep_records is not None:
            keep = checked("compact_keep_records", compact_keep_records, 0, MAX_KEEP,
                           integer=True)
        if tenant_id is not None:
            tenant_id = check_tenant(tenant_id)
        deleted = 0
        with live.hold():
            if compact_keep_records is not None:
                if tenant_id is None:
                    if self._db is not None:  # catches the buffer up first (on_write)
                        self._db.keep_newest(keep)
                    deleted = live.buf.compact(keep)
                else:
                    # chosen on the view caught up now; rows another process commits before
                    # the delete's transaction are kept (they are not among these ids)
                    ids = live.buf.column("id")[newest_excess(live, tenant_id, keep)]
                    if self._db is not None:
                        self._db.delete_ids(ids)
                    deleted = live.buf.delete(np.flatnonzero(np.isin(
                        live.buf.column("id"), ids)))
                live.deleted(deleted)
            space = self._db.vacuum() if self._db is not None else \
                {"bytes_before": 0, "bytes_after": 0, "freelist_count": 0}
        return {"deleted": int(deleted), "bytes_before": space["bytes_before"],
                "bytes_after": space["bytes_after"], "freelist_count": space["freelist_count"]}

    def reset(self, tenant_id: str | None = None, all_tenants: bool = False) -> dict:
        """Delete every episode of ``tenant_id``, or of everyone with ``all_tenants=True``."""
        live = self._live
        live.refuse_if_read_only("reset")
        if tenant_id is None and not all_tenants:
            raise ConfigError("tenant_id", None, "give a tenant or all_tenants=True")
        if tenant_id is not None and all_tenants:
            raise ConfigError("all_tenants", True, "give a tenant or all_tenants=True, not both")
        if tenant_id is not None:
            return self.delete_data(tenant_id)
        with live.lock:
            if self._db is not None:
                self._db.reset()   # catches the buffer up first (on_write)
            n = len(live.buf)
            live.buf.clear()
            live.deleted(n)
        return {"deleted": n}

    def delete_data(self, tenant_id: str, task_type: str | None = None,
                    run_id: str | None = None, task_id: str | None = None,
                    request_id: str | None = None) -> dict:
        """Delete a tenant's episodes matching every given field exactly (no prefixes)."""
        live = self._live
        live.refuse_if_read_only("delete_data")
        tenant_id = check_tenant(tenant_id)
        sel = selection(task_type, run_id, task_id, request_id)
        with live.lock:
            if self._db is not None:  # catches the buffer up first (on_write)
                self._db.delete({"tenant_id": tenant_id, **sel})
            else:
                live.refresh()
            n = live.buf.delete(live.rows(tenant_id, **sel))
            live.deleted(n)
        return {"deleted": int(n)}

    def _export_columns(self, tenant_id: str, **sel) -> dict[str, Any]:
        """A tenant's selected episodes as persisted-style columns, redacted again."""
        with self._live.hold():
            rows = self._live.rows(tenant_id, **{k: v for k, v in sel.items() if v is not None})
            cols = self._live.persist_columns(rows)
        return redacted_for_export(cols, self.redact_keys, self._live.where())

    def export_data(self, tenant_id: str, path: str | None = None, format: str = "jsonl",
                    task_type: str | None = None, run_id: str | None = None,
                    task_id: str | None = None, request_id: str | None = None) -> dict:
        """Export a tenant's episodes (redacted) to JSONL or Parquet, or inline.

        Times in a file are a time type, in whole microseconds: ``timestamp`` is ISO 8601
        text in UTC in JSONL (``"2023-11-14T22:13:20.123457+00:00"``) and
        ``Datetime("us", "UTC")`` in Parquet (:mod:`dyna.store.columns`); inline records
        keep seconds since the epoch (float), as :meth:`record` takes them.

        Returns
        -------
        dict
            ``n`` and ``path``; without a path, ``records`` (list of dicts) inline.

        Raises
        ------
        MissingFileError
            The folder of ``path`` does not exist (it is not created).
        ConfigError
            ``path`` is a folder, an unknown ``format``, a time outside the years 1 to 9999
            in a file export; nothing is written.
        """
        tenant_id = check_tenant(tenant_id)
        if format not in ("jsonl", "parquet"):
            raise ConfigError("format", format, "must be jsonl or parquet")
        if path is not None:
            check_target(path)  # a missing folder or a folder: refused before work
        cols = self._export_columns(tenant_id, task_type=task_type, run_id=run_id,
                                    task_id=task_id, request_id=request_id)
        n = len(cols["id"])
        if path is None:
            return {"n": n, "records": records_from_columns(cols)}
        if format == "jsonl":
            records = records_from_columns(cols)
            for rec, when in zip(records, iso_times("timestamp", cols["timestamp"])):
                rec["timestamp"] = when
            store_jsonl.write_jsonl(path, records)
        else:
            store_parquet.write_parquet(path, cols, RECORD_SCHEMA, self.dim)
        return {"n": n, "path": str(path), "format": format}

    def import_data(self, path, format: str | None = None, tenant_id: str | None = None,
                    keep_ids: bool = False) -> dict:
        """Import episodes from a JSONL or Parquet file written by :meth:`export_data`.

        A ``timestamp`` may be ISO 8601 text with a timezone or seconds since the epoch
        (JSONL), a timezone-aware Datetime or seconds (Parquet); a time without a timezone
        is refused (ConfigError naming it), and so is a record's tenant that
        :func:`dyna.experience.episodes.check_tenant` refuses (``tenant_id[i]``).

        Torn or corrupt JSONL lines are skipped and reported; a batch an appending writer
        did not finish is dropped whole and reported (:func:`dyna.store.jsonl.read_jsonl`).
        Records are redacted and validated like recorded ones; the whole import is one
        transaction.

        Parameters
        ----------
        path : str
        format : {"jsonl", "parquet"}, optional
            Default from the file suffix.
        tenant_id : str, optional
            Import only this tenant's records.
        keep_ids : bool
            Keep the file's ids (they must be new to this store and increasing); default
            assigns new ids.

        Returns
        -------
        dict
            ``n`` imported; for JSONL also ``skipped`` lines with their line numbers
            (``skipped_lines``), ``dropped_batches`` and the ``dropped_records`` in them.
        """
        self._live.refuse_if_read_only("import_data")
        if tenant_id is not None:
            tenant_id = check_tenant(tenant_id)   # before the file is read
        p = Path(path)
        if format is None:
            format = "parquet" if p.suffix == ".parquet" else "jsonl"
        if format not in ("jsonl", "parquet"):
            raise ConfigError("format", format, "must be jsonl or parquet")
        report = None
        if format == "jsonl":
            recs, report = store_jsonl.read_jsonl(p)
            cols = columns_from_records(recs, self.dim)
        else:
            cols = store_parquet.read_parquet(p, RECORD_SCHEMA, self.dim)
        first: dict = {}
        for i, t in enumerate(cols["tenant_id"]):
            first.setdefault(t, i)
        for t, i in first.items():   # the file's tenants, each by the rule of a given one
            check_tenant(t, f"tenant_id[{i}]")
        if tenant_id is not None:
            keep = np.asarray(cols["tenant_id"] == tenant_id, dtype=bool)
            cols = {k: np.asarray(v)[keep] for k, v in cols.items()}
        n = len(cols["id"])
        if n:
            with self._live.lock:
                self._live.write_batch(batch_kwargs(cols), ids=np.asarray(
                    cols["id"], dtype=np.int64) if keep_ids else None)
        out = {"n": n, "path": str(p), "format": format}
        if report is not None:
            out.update(skipped=report.n_skipped,
                       skipped_lines=[ln for ln, _ in report.skipped],
                       dropped_batches=len(report.dropped_batches),
                       dropped_records=report.n_dropped_records)
        return out

    def to_dataset(self, tenant_id: str, task_type: str | None = None):
        """A tenant's episodes as a polars DataFrame with declared dtypes (a copy).

        Columns: ``id`` Int64, the categoricals String (null when missing), ``reward``
        Float64, ``timestamp`` Datetime("us", "UTC"), the dict fields as JSON String, ``features``
        Array(Float32, d).
        """
        tenant_id = check_tenant(tenant_id)
        cols = self._export_columns(tenant_id, task_type=task_type)
        return store_parquet.frame_from_columns(cols, RECORD_SCHEMA, self.dim)

    def write_feature_cache(self) -> dict:
        """Write the SQLite file's feature cache (:mod:`dyna.store.featcache`), so that a
        later open answers :meth:`query_similar` without loading every episode.

        Returns
        -------
        dict
            ``path`` of the cache's header, ``n_rows``, ``n_tenants``, ``generation``,
            ``max_id``.

        Raises
        ------
        StoreReadOnlyError
            The store was opened read-only.
        ConfigError
            An in-memory or PostgreSQL store (the cache is a file beside a SQLite file).
        """
        self._live.refuse_if_read_only("write_feature_cache")
        if not isinstance(self._db, SQLiteStore) or not self._db.persistent:
            raise ConfigError("db_path", "" if self._db is None else "postgresql",
                              "a feature cache is written beside a SQLite store file")
        with self._live.lock:
            out = featcache.write_cache(self._db)
            self._cached.forget()
        return out
