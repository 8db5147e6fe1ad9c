"""ExperienceStore: the experience loop's operation surface over buffer, index and persistence.

An :class:`ExperienceStore` joins

* an in-memory :class:`dyna.buffer.ExperienceBuffer` (columnar episodes, redacted dicts, the
  exact cosine index over their features), kept equal to the backend's rows by the live
  view (:mod:`dyna.experience.view`),
* Beta competence per (tenant, task type) (:class:`dyna.competence.BetaCompetence`),
  kept up to date as episodes arrive,
* the escalation rules of :mod:`dyna.escalation`,
* persistence through one backend (:class:`dyna.store.backend.StoreBackend`): SQLite
  (:mod:`dyna.store.sqlite`; ``db_path=""`` keeps everything in memory) or PostgreSQL
  (:mod:`dyna.store.postgres`), with JSONL and Parquet import and export.

The package, one concept per module:

* :mod:`dyna.experience.operations`: the operations as data (:data:`OPERATIONS`) and limits;
* :mod:`dyna.experience.episodes`: checks of given episodes and the columns they become;
* :mod:`dyna.experience.stored`: rows read back (stored JSON checked and redacted again);
* :mod:`dyna.experience.view`: the live view (buffer, catching up, writes, competence);
* :mod:`dyna.experience.queries`: the read operations (:class:`StoreQueries`);
* :mod:`dyna.experience.maintenance`: deletion, compaction, import and export
  (:class:`StoreMaintenance`);
* :mod:`dyna.experience.cached_search`: search from the feature cache without loading;
* this module: :class:`ExperienceStore`, the facade that opens the backend and records.

Every operation is a plain method and also reachable through :meth:`ExperienceStore.dispatch`
``(op, **kwargs) -> dict``, which checks the arguments against :data:`OPERATIONS` (the same
declarations give :meth:`~ExperienceStore.capabilities` and JSON schemas for tool servers) and
returns JSON-ready dicts. Every answer carries ``persistence_status``: ``ok``, ``missing``
or ``write_degraded`` (see :mod:`dyna.store.sqlite`). A damaged file raises
:class:`dyna.errors.StoreDamagedError` and is never replaced (recover its readable rows with
``dyna store recover``); a SQLite file that is not a dyna store raises
:class:`dyna.errors.NotAStoreError` and is not written. ``read_only=True`` opens the file
without creating, migrating or writing it; operations that change records then raise
:class:`dyna.errors.StoreReadOnlyError`.

Tenancy: every operation that reads or changes records is scoped to one ``tenant_id``
(matched exactly, never as a prefix or pattern); only the maintenance operations
(``prune_old``, ``compact``, ``get_stats``, ``get_data_consumption``, ``reset`` with
``all_tenants=True``) may span tenants, and only when no tenant is given.

Writes: a batch of episodes is validated and recorded in memory inside the backend's write
transaction that assigns its ids, so memory and disk hold the same ids (unique across
processes sharing a file) and bad input writes nothing anywhere. An acknowledged write (a
``record`` or ``import_data`` that returned) is committed to the file. A write that fails is
rolled back in the file and in memory (rows, ids, labels, the index's row lists; competence
counts are only updated after the commit) and the caller is told:
:class:`dyna.errors.StoreBusyError` when another writer held the lock too long (retryable),
:class:`dyna.errors.StoreWriteError` naming the file and SQLite's message when the file
could not take it (a full disk, a read-only file; the status is then ``write_degraded``
until a write succeeds). The buffer never holds an episode the file lacks, so there is
nothing to flush; :meth:`ExperienceStore.close` raises if there ever were.

Several processes may share one file. Each keeps an in-memory view that every operation first
brings up to date (:mod:`dyna.experience.view`): an operation sees every row committed
before it started, by any process, and rows other processes deleted are gone from it; it
costs one change token (SQLite's ``PRAGMA data_version``) when nothing changed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from dyna import __version__
from dyna.competence import prior_shapes
from dyna.errors import ConfigError, StoreWriteError
from dyna.escalation import RISK_CLASSES
from dyna.experience.cached_search import CachedSearch
from dyna.experience.episodes import (RECORD_SCHEMA, SUCCESS, check_tenant, checked,
                                      episode_columns, fast_row)
from dyna.experience.maintenance import StoreMaintenance
from dyna.experience.operations import (MAX_BATCH_SIZE, MAX_BIN_COUNT, MAX_K, MAX_KEEP,
                                        OPERATIONS, Operation, Param, json_ready)
from dyna.experience.queries import StoreQueries
from dyna.experience.view import LiveView
from dyna.fileio.atomic import atomic_target
from dyna.redact import DEFAULT_SENSITIVE_KEYS, redact
from dyna.store import postgres as store_postgres
from dyna.store.sqlite import MAX_DIM, SQLiteStore

__all__ = ["ExperienceStore", "MAX_BATCH_SIZE", "MAX_BIN_COUNT", "MAX_K", "MAX_KEEP",
           "OPERATIONS", "Operation", "Param", "RECORD_SCHEMA", "SUCCESS"]


class ExperienceStore(StoreQueries, StoreMaintenance):
    """Episodes of many tenants with similarity search, competence, escalation and persistence.

    Its read operations come from :class:`~dyna.experience.queries.StoreQueries`, those
    that delete, compact or move records from
    :class:`~dyna.experience.maintenance.StoreMaintenance`; this class opens the backend and
    records.

    Parameters
    ----------
    db_path : str or Path
        SQLite file (created if missing); ``""`` keeps everything in memory; a
        ``postgresql://`` DSN selects :class:`dyna.store.postgres.PostgresStore` (tables
        created if missing; the password never appears in messages or stats).
    dim : int
        Feature dimension d of every episode (1 to ``dyna.store.sqlite.MAX_DIM``, 65,536).
    prior : {"uniform", "jeffreys"} or (a0, b0)
        Beta prior of competence.
    discount : float
        Competence discount in (0, 1] (see :mod:`dyna.competence`).
    redact_keys : iterable of str
        Sensitive key names (whole names, case-insensitive; :func:`dyna.redact.redact`).
    busy_timeout : float
        SQLite busy timeout in seconds.
    verify : bool
        Run SQLite's quick_check when opening an existing file.
    read_only : bool
        Open an existing file read-only (``mode=ro``): it is never created, migrated or
        written; ``record``, ``import_data``, ``prune_old``, ``compact``, ``reset`` and
        ``delete_data`` raise :class:`dyna.errors.StoreReadOnlyError`.
    create : bool
        Make a new SQLite store in an existing empty file (0 bytes); without it such a file
        is refused ("empty file, not a store"), so a file emptied by accident is never
        taken for a new store. A missing file is created either way (its folder never is).
    clock : callable
        Current time in seconds (UTC epoch); default :func:`time.time`.
    eager : bool
        Read the file's episodes at open (default False: an open reads no episode). With
        False they are read by the first operation that needs them; ``get_stats`` and
        ``get_data_consumption`` never need them (they answer from SQL), so
        ``dyna store stats`` loads no episode, and ``query_similar`` does not while the
        SQLite file has a valid feature cache (:meth:`write_feature_cache`,
        :mod:`dyna.store.featcache`): it memory-maps the tenant's vectors and reads the k
        episodes by id, with the answer a loaded store gives.

    Live view
        Every operation sees every row committed to the file before it started, by this or
        any other process or connection, without :meth:`reload`
        (:class:`dyna.experience.view.LiveView`).

    Raises
    ------
    ConfigError
        Bad dim, prior, discount or keys; a file of another dim.
    StoreDamagedError
        SQLite reports the file as corrupt (it is left exactly as it was).
    NotAStoreError
        A SQLite database that is not a dyna store (nothing is written to it).
    StoreError
        A file written by a newer schema, or one that cannot be created.
    """

    def __init__(self, db_path="", dim: int = 64, *, prior="uniform", discount: float = 1.0,
                 redact_keys=DEFAULT_SENSITIVE_KEYS, busy_timeout: float = 10.0,
                 verify: bool = True, read_only: bool = False, clock=time.time,
                 eager: bool = False, create: bool = False):
        self.dim = checked("dim", dim, 1, MAX_DIM, integer=True)
        self.prior = prior_shapes(prior)
        self.discount = float(checked("discount", discount, 0.0, 1.0, lo_open=True))
        self.redact_keys = frozenset(redact_keys) if not isinstance(redact_keys, str) \
            else redact_keys
        redact({}, self.redact_keys)  # validates
        self.clock = clock
        self.read_only = bool(read_only)
        if self.read_only and not str(db_path):
            raise ConfigError("read_only", True, "needs a db_path (an in-memory store is "
                              "always writable)")
        backend, extra = SQLiteStore, {"create": bool(create)}
        if store_postgres.is_dsn(db_path):  # a PostgreSQL database shared between machines
            backend, extra = store_postgres.PostgresStore, {}
        self._db = backend(db_path, RECORD_SCHEMA, self.dim, timeout=busy_timeout,
                           verify=verify, read_only=self.read_only, **extra) \
            if str(db_path) else None
        self._live: LiveView | None = None
        self._cached = CachedSearch(self._db)
        try:
            self._live = LiveView(self._db, dim=self.dim, redact_keys=self.redact_keys,
                                  clock=clock, prior=self.prior, discount=self.discount)
            if self._db is not None:
                self._db.on_write = self._live.on_write
                if eager:
                    with self._live.hold():
                        pass
        except BaseException:
            self.close()
            raise

    @property
    def persistence_status(self) -> str:
        """``ok``, ``missing`` or ``write_degraded`` (the last write failed and raised)."""
        return "ok" if self._db is None else self._db.status

    @property
    def buffer(self):
        """The in-memory episodes (:class:`~dyna.buffer.ExperienceBuffer`), caught up with
        the file (a live object: use it under no assumption that it stays the same object; a
        deletion by another process replaces it)."""
        with self._live.hold():
            return self._live.buf

    def reload(self) -> dict:
        """Re-read the whole file. Not needed to see other processes' writes (every
        operation does, see the live view). Returns ``{"n_records": n}``."""
        with self._live.lock:
            self._live.reload()
            return {"n_records": len(self._live.buf)}

    def flush(self) -> dict:
        """Nothing to write: every write reaches the file or raises. Returns
        ``{"written": 0}``.

        Raises
        ------
        StoreWriteError
            The buffer holds episodes the file lacks (cannot happen through this class's
            methods; see :meth:`close`).
        """
        with self._live.lock:
            if self._live.unflushed:
                raise StoreWriteError(self._db.path if self._db is not None else ":memory:",
                                      f"{self._live.unflushed} episodes in memory were never "
                                      "written")
            return {"written": 0}

    def record(self, tenant_id: str, episodes: Sequence[Mapping] | None = None,
               **episode) -> dict:
        """Record one episode (fields as keywords) or many (``episodes``), atomically.

        Every call returns after its own commit (no group commit). One plain episode given
        as keywords (labels this store already knows) takes the single-row write
        (:func:`dyna.experience.episodes.fast_row`, one ``INSERT`` statement); it stores the
        row the general path stores and joins the in-memory view on the next operation.

        Parameters
        ----------
        tenant_id : str
        episodes : list of dict, optional
            Each with the fields of :meth:`dyna.buffer.ExperienceBuffer.record`. A record
            exported by :meth:`export_data` is accepted as is: its ``tenant_id`` must equal
            ``tenant_id`` and its ``id`` is ignored (the store assigns ids; use
            :meth:`import_data` with ``keep_ids=True`` to keep them).
        **episode
            One episode's fields when ``episodes`` is not given.

        Returns
        -------
        dict
            ``ids`` (list of int) and ``n``.

        Raises
        ------
        ConfigError
            Unknown field, NaN reward, a number beyond the float64 range (``10**400``),
            features of the wrong dimension, a bytes label, a lone surrogate in any text, a
            dict nested deeper than :data:`dyna.buffer.MAX_DEPTH`, ...: the field and value
            are named, nothing is written.
        StoreBusyError
            The file stayed locked; nothing written (retry).
        StoreWriteError
            The file could not take the write (full disk, read-only file): nothing of the
            batch is in the file or in memory; episodes acknowledged by earlier calls stay stored.
        """
        live = self._live
        live.refuse_if_read_only("record")
        tenant_id = check_tenant(tenant_id)
        single = episodes is None
        if single:
            episodes = [episode]
        elif episode:
            raise ConfigError(next(iter(episode)), "...", "give episodes=[...] or one "
                              "episode's fields, not both")
        if isinstance(episodes, (str, bytes, Mapping)):
            raise ConfigError("episodes", type(episodes).__name__, "must be a list of objects")
        with live.lock:
            if single and self._db is not None and live.loaded:
                row = fast_row(live.buf, live.tainted, tenant_id, episode, dim=self.dim,
                               clock=self.clock, redact_keys=self.redact_keys)
                if row is not None:
                    return {"ids": [live.append_row(row)], "n": 1}
            cols = episode_columns(tenant_id, list(episodes), single, dim=self.dim,
                                   clock=self.clock)
            ids = live.write_batch(cols)
        return {"ids": ids.tolist(), "n": int(ids.size)}

    def capabilities(self) -> dict:
        """Operations with their parameters (JSON schemas), risk classes and backends."""
        try:
            import faiss  # noqa: F401, PLC0415
            ann = True
        except ImportError:
            ann = False
        return {"version": __version__, "dim": self.dim,
                "operations": {name: {"description": op.description,
                                      "input_schema": op.json_schema(),
                                      "mutates": op.mutates, "destructive": op.destructive}
                               for name, op in OPERATIONS.items()},
                "risk_classes": list(RISK_CLASSES),
                "persistence": {"backend": self._db.backend if self._db is not None
                                else "memory",
                                "path": self._db.path if self._db is not None else None,
                                "export_formats": ["jsonl", "parquet"]},
                "index": {"exact": "cosine", "ann": "faiss-hnsw" if ann else None},
                "competence": {"prior": list(self.prior), "discount": self.discount},
                "redact_keys": sorted(self.redact_keys)}

    def dispatch(self, op: str, **kwargs) -> dict:
        """Run operation ``op`` with JSON-like arguments; return a JSON-ready dict.

        Arguments are checked against :data:`OPERATIONS` first (unknown operation, unknown
        or missing parameter -> :class:`ConfigError` naming it; nothing runs). ``to_dataset``
        writes Parquet when given ``path`` and answers with the schema and row count.
        Every answer has ``op`` and ``persistence_status``.
        """
        spec = OPERATIONS.get(op) if isinstance(op, str) else None
        if spec is None:
            raise ConfigError("op", op, f"unknown operation; one of {sorted(OPERATIONS)}")
        names = {p.name for p in spec.params}
        for key in kwargs:
            if key not in names:
                raise ConfigError(key, kwargs[key], f"unknown parameter of {op}")
        for p in spec.params:
            if p.required and kwargs.get(p.name) is None:
                raise ConfigError(p.name, None, f"is required by {op}")
        args = {k: v for k, v in kwargs.items() if v is not None}
        if op == "to_dataset":
            path = args.pop("path", None)
            df = self.to_dataset(**args)
            if path is not None:
                with atomic_target(path) as tmp:
                    df.write_parquet(tmp, compression="zstd")
            out = {"n_rows": df.height, "schema": {k: str(v) for k, v in df.schema.items()},
                   "path": path}
        else:
            out = getattr(self, op)(**args)
        out = json_ready(out)
        out["op"] = op
        out["persistence_status"] = self.persistence_status
        return out

    def close(self) -> None:
        """Close the backend's connection (idempotent).

        Raises
        ------
        StoreWriteError
            (after closing) Something was not written: the buffer held episodes the file
            lacks, or a transaction was left open on the connection (rolled back). Neither
            happens through this class's methods, whose writes commit or raise.
        """
        unflushed = 0
        if self._live is not None:
            unflushed, self._live.unflushed = self._live.unflushed, 0
        self._cached.forget()
        if self._db is not None:
            self._db.close()
        if unflushed:
            raise StoreWriteError(self._db.path if self._db is not None else ":memory:",
                                  f"{unflushed} episodes in memory were never written")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self) -> int:
        with self._live.hold():
            return len(self._live.buf)
