"""The backend protocol: what a persistence backend of the experience store provides.

:class:`StoreBackend` is implemented by :class:`dyna.store.sqlite.SQLiteStore` (one file, or
memory) and :class:`dyna.store.postgres.PostgresStore` (a schema shared between machines),
which give the same results for the same calls. :class:`dyna.experience.ExperienceStore`
uses only these members, so either backend can sit under it.

Records are columns of a schema of ``(name, kind)`` pairs (:mod:`dyna.store.columns`);
every record has an int64 ``id`` assigned by the backend inside the write transaction, unique
across every process sharing the store and never given again.

Live view (change tokens)
    ``data_version()`` changes when another connection commits (cheap, no table read);
    ``generation()`` changes only with writes that delete or rewrite rows, so a reader that
    has seen every row up to id m at an unchanged generation catches up with
    ``read(after_id=m)``; ``snapshot()`` holds one read transaction; ``on_write`` (when
    set) runs inside every batch write transaction before the write, when no other writer
    can commit; ``last_generation`` is the generation this connection's last destructive
    write left.

Errors (typed, :mod:`dyna.errors`)
    :class:`~dyna.errors.ConfigError` for bad arguments (nothing written),
    :class:`~dyna.errors.StoreBusyError` for a lock held too long (retryable, nothing
    written), :class:`~dyna.errors.StoreWriteError` for a write the store could not take
    (rolled back; ``status`` becomes ``write_degraded``),
    :class:`~dyna.errors.StoreDamagedError` for damage the database reports,
    :class:`~dyna.errors.StoreReadOnlyError` for a write to a read-only open.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["StoreBackend"]


@runtime_checkable
class StoreBackend(Protocol):
    """A persistence backend of experience records (see the module notes).

    Attributes
    ----------
    backend : str
        ``"sqlite"`` or ``"postgresql"``.
    path : str
        What messages name the store by: a file path (``""`` in memory) or a DSN without
        its password.
    dim : int
        Length of every ``vector`` column.
    schema : tuple of (str, str)
        Columns after ``id``.
    timeout : float
        Seconds a write waits for another writer's lock.
    persistent, read_only : bool
    status : str
        ``ok``, ``missing`` (created by this open) or ``write_degraded`` (the last write
        failed).
    on_write : callable or None
        ``on_write(backend)``, run inside each batch write transaction before the write.
    last_generation : int or None
        The generation this connection's last destructive write committed.
    """

    backend: str
    path: str
    dim: int
    schema: tuple[tuple[str, str], ...]
    timeout: float
    persistent: bool
    read_only: bool
    status: str
    on_write: Callable[[StoreBackend], None] | None
    last_generation: int | None

    # ------------------------------------------------------------------ writing
    def append(self, columns: Mapping[str, object], n: int | None = None, *,
               ids=None) -> np.ndarray:
        """Insert a batch in one transaction; return its ids, int64 ``(n,)``."""
        ...

    def append_row(self, values: Sequence[object]) -> int:
        """Insert one record (values in schema order, vectors as bytes) in its own
        transaction, without running ``on_write``; return its id."""
        ...

    def append_from(self, make: Callable[[int], tuple[Mapping[str, object], np.ndarray]]
                    ) -> np.ndarray:
        """Insert the batch ``make(start)`` builds inside the write transaction (``start``:
        the next id); nothing is written when ``make`` raises."""
        ...

    def next_id(self) -> int:
        """The id the next :meth:`append` without explicit ids would start at."""
        ...

    def delete(self, where: Mapping[str, object]) -> int:
        """Delete the rows matching every ``column = value`` of ``where`` exactly."""
        ...

    def delete_ids(self, ids) -> int:
        """Delete rows by id (an id given twice is deleted once); returns rows deleted."""
        ...

    def prune(self, cutoff: float, where: Mapping[str, object] | None = None) -> int:
        """Delete rows with ``timestamp < cutoff`` (seconds, UTC); returns rows deleted."""
        ...

    def keep_newest(self, n: int, by: Sequence[str] = ("tenant_id", "task_type")) -> int:
        """Keep the newest ``n`` rows (by timestamp, then id) per group; returns rows
        deleted."""
        ...

    def reset(self) -> int:
        """Delete every row (the id counter keeps counting); returns rows deleted."""
        ...

    def vacuum(self) -> dict:
        """Give the space of deleted rows back; ``bytes_before``, ``bytes_after``,
        ``freelist_count``, ``checkpoint``."""
        ...

    def checkpoint(self) -> tuple[int, int, int]:
        """Move a write-ahead log into the store; ``(busy, frames, copied)``."""
        ...

    # ------------------------------------------------------------------ reading
    def read(self, where: Mapping[str, object] | None = None, *,
             columns: Sequence[str] | None = None,
             categories: Sequence[str] = (), after_id: int | None = None
             ) -> dict[str, object]:
        """Rows matching ``where`` (exact), in id order, as numpy columns
        (:func:`dyna.store.columns.to_columns`)."""
        ...

    def count(self, where: Mapping[str, object] | None = None) -> int:
        """Number of rows matching ``where`` exactly."""
        ...

    def summary(self, where: Mapping[str, object] | None = None) -> dict:
        """``n_records``, ``n_tenants``, ``n_task_types``, ``oldest``, ``newest`` from SQL."""
        ...

    def consumption(self, where: Mapping[str, object] | None = None) -> list[dict]:
        """Records and bytes per (tenant, task type), from SQL."""
        ...

    # ------------------------------------------------------------------ live view
    def data_version(self) -> int:
        """A change token that moves when another connection commits."""
        ...

    def generation(self) -> int:
        """The counter of destructive writes."""
        ...

    def max_id(self) -> int:
        """The highest stored id, -1 without rows."""
        ...

    def snapshot(self) -> contextlib.AbstractContextManager:
        """A context holding one read transaction (nothing more inside a write)."""
        ...

    # ------------------------------------------------------------------ the store
    def file_bytes(self) -> int:
        """Bytes the store takes on disk (0 in memory)."""
        ...

    def schema_version(self) -> int:
        """Highest applied schema version."""
        ...

    def stats(self) -> dict:
        """Rows, sizes and status (JSON-ready; never a password)."""
        ...

    def close(self) -> None:
        """Close the connection (idempotent)."""
        ...

    def __enter__(self) -> StoreBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
