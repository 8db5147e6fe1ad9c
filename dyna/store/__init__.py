"""Persistence of experience records.

* :mod:`dyna.store.sqlite`: the embedded default, one SQLite file (WAL, busy timeout,
  versioned schema, prune and VACUUM, status reporting), or in memory.
* :mod:`dyna.store.postgres`: PostgreSQL for stores shared between machines (psycopg 3, the
  same interface and results, row-level security per tenant).
* :mod:`dyna.store.jsonl`: JSON Lines import/export tolerating torn and corrupt lines.
* :mod:`dyna.store.parquet`: Parquet through polars with declared dtypes.
* :mod:`dyna.store.recover`: copy the readable rows of a damaged store into a new one.
* :mod:`dyna.store.cli`: ``dyna store stats|export|delete|prune|compact|recover``.

:class:`dyna.experience.ExperienceStore` joins these with the in-memory buffer; use it unless
you need a backend on its own. Nothing here imports polars until :mod:`dyna.store.parquet`
is imported.
"""

from dyna._lazy import lazy_getattr

# Loaded on first use (`dyna --help` imports dyna.store.cli, which needs none of them).
_LAZY = {"JsonlReport": "jsonl", "append_jsonl": "jsonl", "read_jsonl": "jsonl",
         "write_jsonl": "jsonl", "SCHEMA_VERSION": "sqlite", "STATUSES": "sqlite",
         "SQLiteStore": "sqlite", "stored_dim": "sqlite", "PostgresStore": "postgres"}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
