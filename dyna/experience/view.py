"""The live view: a store's episodes in memory, kept equal to its backend's committed rows.

Several processes may share one store. Each keeps a :class:`LiveView`: an
:class:`~dyna.buffer.ExperienceBuffer` that every operation first brings up to date, so that
it sees every row committed before it started, by any process, and no row another process
deleted. Catching up costs one change token (:meth:`dyna.store.backend.StoreBackend.
data_version`) when nothing changed; if something did, in one read transaction, the
backend's ``generation`` (moved by every delete, prune, compaction, reset or scrub) is
compared with the one read: the same means only inserts happened and the rows with ids
above the highest held are read; another means rows held may be gone, and everything is
read again. A write does the same inside its own write transaction before it records or
deletes (the backend's ``on_write``), so memory and store stay row-for-row equal. The
result is the buffer a fresh open would read, so every answer is the one a fresh open would
give.

Writes: a batch is validated and recorded in the buffer inside the backend's write
transaction that assigns its ids (:meth:`LiveView.write_batch`), so memory and store hold
the same ids and bad input writes nothing anywhere; a write that fails is rolled back in
memory too (competence is updated only after the commit).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from dyna.buffer import (CATEGORICAL_FIELDS, DICT_FIELDS, REQUIRED_FIELDS, Categorical,
                         ExperienceBuffer, JsonText)
from dyna.competence import BetaCompetence
from dyna.errors import ConfigError, StoreReadOnlyError
from dyna.experience.episodes import SUCCESS
from dyna.experience.stored import check_json_texts, redact_texts
from dyna.store.backend import StoreBackend

__all__ = ["LiveView"]


class LiveView:
    """The in-memory episodes of a store and what of the backend they hold.

    Parameters
    ----------
    db : StoreBackend or None
        The backend (None: everything in memory).
    dim : int
    redact_keys : frozenset of str or str
        Sensitive key names (:func:`dyna.redact.redact`).
    clock : callable
        Current time in seconds.
    prior : (float, float)
        Beta prior of competence.
    discount : float
        Competence discount (see :mod:`dyna.competence`).

    Attributes
    ----------
    buf : ExperienceBuffer
        The episodes; replaced when the backend's rows were deleted elsewhere.
    lock : threading.RLock
        Held by every operation of the store.
    loaded : bool
        The backend's rows have been read (False until the first operation that needs them).
    tainted : set of str
        Categorical fields with a loaded label that holds a secret (refused for new rows).
    unflushed : int
        Episodes in memory that the backend lacks: only while a batch is between the buffer
        and its commit (0 otherwise).
    depth : int
        Operations running inside :meth:`hold` (> 0: one is; nested calls see its state).
    """

    def __init__(self, db: StoreBackend | None, *, dim: int, redact_keys, clock, prior,
                 discount: float):
        self.db = db
        self.dim, self.redact_keys, self.clock = dim, redact_keys, clock
        self.prior, self.discount = prior, discount
        self.lock = threading.RLock()
        self.unflushed = 0
        self.loaded = db is None
        self.tainted: set[str] = set()
        # ``_seen`` is the highest id read, ``_gen`` the backend's generation and ``_dv`` its
        # change token when it was read; ``_pending``: a single-row write of ours is in the
        # backend, not yet here
        self._seen, self._gen, self._dv, self.depth = -1, None, None, 0
        self._pending = False
        self._comp: BetaCompetence | None = None
        self.buf = self._new_buffer()

    def where(self) -> str:
        """The store as an error may name it (a file path, a DSN without its password)."""
        return getattr(self.db, "path", "") or "the in-memory store"

    def refuse_if_read_only(self, op: str) -> None:
        """Raise :class:`dyna.errors.StoreReadOnlyError` for an operation ``op`` that would
        change records of a store opened read-only."""
        if self.db is not None and self.db.read_only:
            raise StoreReadOnlyError(f"{op}: the store {self.db.path} was opened read-only; "
                                     "nothing was changed")

    def _new_buffer(self) -> ExperienceBuffer:
        return ExperienceBuffer(self.dim, redact_keys=self.redact_keys, clock=self.clock,
                                source=None if self.db is None else self.db.path)

    # ------------------------------------------------------------------ catching up
    @contextlib.contextmanager
    def hold(self):
        """Hold the lock; the outermost operation first catches up with the backend."""
        with self.lock:
            if self.depth == 0:
                self.refresh()
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1

    def refresh(self) -> None:
        """Catch up with rows other connections committed (cheap when none did)."""
        if self.db is None:
            return
        dv = self.db.data_version()   # read first: a commit after it is seen next time
        if self.loaded and dv == self._dv and not self._pending:
            return
        with self.db.snapshot():
            self._pull()
        self._dv = dv

    def on_write(self, db: StoreBackend) -> None:
        """The backend's ``on_write``: inside the write transaction, before the write."""
        with self.lock:
            dv = db.data_version()
            if not self.loaded or dv != self._dv or self._pending:
                self._pull()
                self._dv = dv

    def reload(self) -> None:
        """Read the whole backend again."""
        with self.lock:
            if self.db is not None:
                dv = self.db.data_version()
                with self.db.snapshot():
                    self.loaded = False
                    self._pull()
                self._dv = dv

    def _pull(self) -> None:
        """Bring the buffer up to the backend's committed state (inside one transaction)."""
        gen = self.db.generation()
        self._pending = False
        if not self.loaded or gen != self._gen:
            self._load()
        else:
            self._append_loaded(self.db.read(categories=CATEGORICAL_FIELDS,
                                             after_id=self._seen))
        self._gen = gen

    def _load(self) -> None:
        """Fill a new buffer from the backend (all rows, id order), in bulk.

        The backend returns whole columns (labels dictionary-encoded, features decoded from
        one joined buffer) and the buffer takes them in one
        :meth:`~dyna.buffer.ExperienceBuffer.record_batch` as
        :class:`~dyna.buffer.Categorical` codes, with the features given (never re-hashed).
        The stored dict texts are already redacted JSON; they go into the buffer as they
        are, except rows holding a key that this store's ``redact_keys`` treat as sensitive
        and whose value is not yet ``"[REDACTED]"``
        (:func:`dyna.experience.stored.rows_to_redact`): those are parsed, redacted and
        serialised again. Called inside one read (or write) transaction, with the
        generation read in it (see :meth:`_pull`).
        """
        self._comp = None
        self.buf = self._new_buffer()
        self.tainted = set()
        self._seen = -1
        self._append_loaded(self.db.read(categories=CATEGORICAL_FIELDS))
        self.loaded = True

    def _append_loaded(self, cols: Mapping[str, Any]) -> None:
        """Append rows read from the backend (ids above every id held) to the buffer."""
        if len(cols["id"]):
            n_before = len(self.buf)
            self._record_loaded(cols)
            self._seen = int(cols["id"][-1])
            self._update_competence(n_before)

    def _record_loaded(self, cols: Mapping[str, Any]) -> None:
        """Record columns read from the backend (labels as (codes, labels) pairs)."""
        where = self.where()
        check_json_texts(cols, where)
        kw: dict[str, Any] = {}
        for name in CATEGORICAL_FIELDS:
            codes, labels = cols[name]
            if name in REQUIRED_FIELDS or any(label for label in labels):
                kw[name] = Categorical(codes, ["" if v is None else v for v in labels])
        kw["reward"] = cols["reward"]
        kw["timestamp"] = cols["timestamp"]
        kw["state_features"] = cols["features"]
        for name in DICT_FIELDS:
            vals = cols[name]
            if np.not_equal(vals, None).any():   # stored redacted JSON: kept as it is
                kw[name] = JsonText(redact_texts(vals, self.redact_keys, where))
        # Labels already stored are loaded as they are (a store may hold one with a secret:
        # `dyna store scrub` reports those)
        buf = self.buf
        buf.record_batch(ids=cols["id"], loading=True, **kw)
        # ... but a loaded label that holds a secret is refused for every new row
        self.tainted = set(buf.taint_loaded_labels())

    # ------------------------------------------------------------------ writing
    def rows(self, tenant_id: str, **filters) -> np.ndarray:
        """Row positions of a tenant, filtered exactly by categorical fields."""
        return self.buf.select(tenant_id=tenant_id, **filters)

    def persist_columns(self, rows: np.ndarray) -> dict[str, Any]:
        """Persisted-style columns of buffer rows: labels (None = missing), JSON, features."""
        buf = self.buf
        out: dict[str, Any] = {"id": buf.column("id")[rows]}
        for name in CATEGORICAL_FIELDS:
            table = np.array([None] + list(buf.categories(name)[1:]), dtype=object)
            out[name] = table[buf.column(name)[rows]]
        out["reward"] = buf.column("reward")[rows]
        out["timestamp"] = buf.column("timestamp")[rows]
        for name in DICT_FIELDS:
            out[name] = buf.column(name)[rows]
        out["features"] = buf.column("features")[rows]
        return out

    def append_row(self, row: tuple) -> int:
        """Write one stored row with the backend's single-row insert; it joins the buffer on
        the next operation, read back like any other process's row. Returns its id."""
        ident = self.db.append_row(row)
        self._pending = True
        return ident

    def write_batch(self, cols: Mapping[str, Any], ids=None) -> np.ndarray:
        """Record validated columns in memory and in the backend with the same ids.

        The batch is recorded in the buffer inside the backend's write transaction; if the
        transaction fails (busy, full disk, read-only file, damage) or anything raises, the
        buffer is rolled back to its state before the batch
        (:meth:`~dyna.buffer.ExperienceBuffer.rollback`) and the error propagates.
        Competence is updated only after the commit.
        """
        given = None if ids is None else np.asarray(ids, dtype=np.int64)
        if self.db is None:
            n_before = len(self.buf)
            ids_out = self.buf.record_batch(ids=given, **cols)
            self._update_competence(n_before)
            return ids_out
        state: dict[str, Any] = {}

        def make(start: int):
            # the on_write hook has just caught the buffer up with the backend
            buf = self.buf
            state.update(buf=buf, n_before=len(buf), mark=buf.savepoint())
            first = max(start, buf.next_id)
            use = np.arange(first, first + len(cols["reward"]), dtype=np.int64) \
                if given is None else given
            if given is not None and given.size and int(given[0]) < first:
                raise ConfigError("ids", int(given[0]), f"must be >= next id {first}")
            new_ids = buf.record_batch(ids=use, **cols)
            self.unflushed = len(buf) - state["n_before"]
            return self.persist_columns(np.arange(state["n_before"], len(buf))), new_ids

        try:
            written = self.db.append_from(make)
        except BaseException:
            if "mark" in state:  # the backend has none of it, so memory keeps none of it
                state["buf"].rollback(state["mark"])
            self.unflushed = 0
            raise
        self.unflushed = 0
        if written.size:
            self._seen = max(self._seen, int(written.max()))
        self._update_competence(state["n_before"])
        return written

    def deleted(self, n: int) -> None:
        """After this process's destructive write of ``n`` rows: note the generation it left
        (its buffer made the same change) and drop the competence cache."""
        if n and self.db is not None and self.db.last_generation is not None:
            self._gen = self.db.last_generation
        self._comp = None

    # ------------------------------------------------------------------ competence
    def competence(self) -> BetaCompetence:
        """Competence per ``(tenant_id, task_type)`` over every recorded outcome, kept with
        the buffer and updated as rows arrive (built again after a deletion)."""
        if self._comp is None:
            comp = BetaCompetence(self.prior, self.discount)
            ts = self.buf.column("timestamp")
            rows = np.argsort(ts, kind="stable") if self.discount != 1.0 \
                else np.arange(len(self.buf))
            self._feed(comp, rows)
            self._comp = comp
        return self._comp

    def _update_competence(self, from_row: int) -> None:
        """Add rows ``from_row..`` to the kept competence (None = build it when asked)."""
        if self._comp is None:
            return
        buf = self.buf
        rows = np.arange(from_row, len(buf))
        if self.discount != 1.0 and rows.size:
            ts = buf.column("timestamp")
            if rows[0] > 0 and ts[rows].min() < ts[:rows[0]].max():
                self._comp = None  # out-of-order history: rebuild in time order
                return
            rows = rows[np.argsort(ts[rows], kind="stable")]
        self._feed(self._comp, rows)

    def _feed(self, comp: BetaCompetence, rows: np.ndarray) -> None:
        buf = self.buf
        if rows.size == 0:
            return
        tenants = np.array(buf.categories("tenant_id"), dtype=object)
        tasks = np.array(buf.categories("task_type"), dtype=object)
        tcode = buf.column("tenant_id")[rows].astype(np.int64)
        kcode = buf.column("task_type")[rows].astype(np.int64)
        g = tcode * len(tasks) + kcode
        uniq, inv = np.unique(g, return_inverse=True)
        keys = [(tenants[u // len(tasks)], tasks[u % len(tasks)]) for u in uniq.tolist()]
        success = buf.column("outcome")[rows] == buf.code("outcome", SUCCESS)
        comp.update_many([keys[i] for i in inv.tolist()], success)
