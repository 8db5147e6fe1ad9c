"""Persistence of experience records.

* :mod:`dyna.store.backend`: the backend protocol (:class:`~dyna.store.backend.StoreBackend`)
  both backends implement.
* :mod:`dyna.store.columns`: records as columns, the conversions both backends share.
* :mod:`dyna.store.sqlite`: the embedded default, one SQLite file (WAL, busy timeout,
  versioned schema, prune and VACUUM, status reporting), or in memory; opening and checking
  its file in :mod:`dyna.store.sqlite_file` and :mod:`dyna.store.sqlite_conn`.
* :mod:`dyna.store.postgres`: PostgreSQL for stores shared between machines (psycopg 3, the
  same interface and results, row-level security per tenant); its session and tables in
  :mod:`dyna.store.postgres_schema`, its DSN kept secret by :mod:`dyna.store.postgres_dsn`.
* :mod:`dyna.store.featcache`: a SQLite store's feature vectors beside it, for queries that
  load no episode.
* :mod:`dyna.store.jsonl`: JSON Lines import/export tolerating torn and corrupt lines.
* :mod:`dyna.store.parquet`: Parquet through polars with declared dtypes.
* :mod:`dyna.store.recover`: copy the readable rows of a damaged store into a new one.
* :mod:`dyna.store.scrub`: redact again what an older version stored.
* :mod:`dyna.store.cli`: ``dyna store stats|export|delete|prune|compact|recover``.

:class:`dyna.experience.ExperienceStore` joins these with the in-memory buffer; use it unless
you need a backend on its own. Nothing here imports polars until :mod:`dyna.store.parquet`
is imported.
"""

from dyna._lazy import lazy_getattr

# Loaded on first use (`dyna --help` imports dyna.store.cli, which needs none of them).
_LAZY = {"JsonlReport": "jsonl", "append_jsonl": "jsonl", "read_jsonl": "jsonl",
         "write_jsonl": "jsonl", "SCHEMA_VERSION": "sqlite", "STATUSES": "sqlite",
         "SQLiteStore": "sqlite", "stored_dim": "sqlite", "PostgresStore": "postgres",
         "StoreBackend": "backend"}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
