"""Persistence of experience records.

* :mod:`dyna.store.sqlite`: the embedded default, one SQLite file (WAL, busy timeout,
  versioned schema, prune and VACUUM, status reporting), or in memory.
* :mod:`dyna.store.jsonl`: JSON Lines import/export tolerating torn and corrupt lines.
* :mod:`dyna.store.parquet`: Parquet through polars with declared dtypes.
* :mod:`dyna.store.recover`: copy the readable rows of a damaged store into a new one.
* :mod:`dyna.store.cli`: ``dyna store stats|export|delete|prune|compact|recover``.

:class:`dyna.experience.ExperienceStore` joins these with the in-memory buffer; use it unless
you need a backend on its own. Nothing here imports polars until :mod:`dyna.store.parquet`
is imported.
"""

from dyna.store.jsonl import JsonlReport, append_jsonl, read_jsonl, write_jsonl
from dyna.store.sqlite import SCHEMA_VERSION, STATUSES, SQLiteStore, stored_dim

__all__ = ["JsonlReport", "SCHEMA_VERSION", "STATUSES", "SQLiteStore", "append_jsonl",
           "read_jsonl", "stored_dim", "write_jsonl"]
