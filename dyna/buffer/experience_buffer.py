"""The experience buffer: a columnar, vectorised store of episodes (see :mod:`dyna.buffer`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

from dyna.buffer.frames import batch_from_frame, frame_of
from dyna.buffer.groups import GroupIndex
from dyna.buffer.labels import (LabelDictionary, check_new_labels, column_dictionary,
                                find_tainted, refuse_tainted)
from dyna.buffer.reading import (as_slice, decode_rows, draw_positions, row_positions,
                                 select_positions, selection)
from dyna.buffer.recording import (NO_IDS, check_ids, encode_categoricals, encode_dict_fields,
                                   encode_episode, publish_batch, stage_batch)
from dyna.buffer.retention import keep_rows, newest_per_group
from dyna.buffer.schema import (CATEGORICAL_FIELDS, DICT_FIELDS, FIELDS, check_fields,
                                clock_seconds, column_specs, finite_float, float_column,
                                label_text, unused_columns)
from dyna.errors import ConfigError
from dyna.index import ColumnStore, ExactIndex
from dyna.redact import DEFAULT_SENSITIVE_KEYS, redact

__all__ = ["ExperienceBuffer"]


class ExperienceBuffer:
    """Columnar store of episodes with batched writes, zero-copy reads and an exact index.

    Parameters
    ----------
    dim : int
        Feature dimension d (default 64).
    capacity : int
        Initial capacity (growable) or the fixed capacity (ring), in rows.
    ring : bool
        Fixed-capacity ring buffer: once full, each new row evicts the oldest.
    redact_keys : iterable of str
        Sensitive key names for :func:`dyna.redact.redact`, applied to the four dict fields
        before they are hashed or stored.
    clock : callable
        Returns the current time in seconds (UTC epoch); used when ``timestamp`` is omitted.
    source : str, optional
        The store the rows are read from (its path), named by a StoreDamagedError when a
        stored dict field's text is not JSON; ``None`` (a buffer of its own): such a text
        came from the caller (a :class:`JsonText`), and reading it raises ConfigError.

    Attributes
    ----------
    dim : int
        Feature dimension d.
    ring : bool
        True for a fixed-capacity ring buffer.
    index : ExactIndex
        Exact cosine index over ``features`` (every row's inverse norm is stored as it is
        recorded); its row positions are this buffer's row positions and ties go to the
        larger episode id.

    Raises
    ------
    ConfigError
        Non-positive ``dim`` or ``capacity``.
    """

    def __init__(self, dim: int = 64, capacity: int = 1024, *, ring: bool = False,
                 redact_keys: Iterable[str] = DEFAULT_SENSITIVE_KEYS,
                 clock: Callable[[], float] = time.time, source: str | None = None):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ConfigError("dim", dim, "must be a positive integer")
        self.dim = int(dim)
        self._store = ColumnStore(column_specs(self.dim), capacity, ring=ring)
        self.ring = self._store.ring
        self._dicts = {name: LabelDictionary() for name in CATEGORICAL_FIELDS}
        self._redact_keys = (frozenset(redact_keys) if not isinstance(redact_keys, str)
                             else redact_keys)
        redact({}, self._redact_keys)  # validates the key collection
        self._clock = clock
        self._source = None if source is None else str(source)
        # Loaded labels that hold a secret, refused for new rows (see taint_loaded_labels).
        self._tainted: dict[str, set] = {}
        self._next_id = 0
        self._ts_sorted = True  # timestamps non-decreasing in row order (growable mode)
        self._used: set[str] = set()   # optional columns that ever received a value
        self._groups = GroupIndex()    # per-label row lists for filtered search
        self.index = ExactIndex.over(self._store, vectors="features", inv_norm="inv_norm",
                                     stamp="id")

    def __len__(self) -> int:
        return len(self._store)

    @property
    def capacity(self) -> int:
        """Rows the arrays can hold now (>= len; fixed in ring mode)."""
        return self._store.capacity

    @property
    def is_full(self) -> bool:
        """True once a ring buffer holds ``capacity`` rows (exactly then); growable: False."""
        return self._store.is_full

    @property
    def next_id(self) -> int:
        """The id the next recorded episode will get."""
        return self._next_id

    def nbytes(self) -> int:
        """Raw bytes of the live rows of every column (object columns count 8-byte pointers
        plus the length of their JSON strings), plus the row lists and feature copies kept
        for filtered search (see :meth:`search`)."""
        total = self._store.nbytes()
        for name in DICT_FIELDS:
            total += sum(len(s) for s in self._store.view(name) if s is not None)
        return total + self._groups.nbytes()

    def record(self, **episode) -> int:
        """Record one episode; return its id.

        Parameters
        ----------
        tenant_id, task_type, action_type, outcome : str
            Required, non-empty. ``outcome`` is a label such as "success" or "failure".
        reward : float
            Required, finite.
        timestamp : float, optional
            Seconds since the Unix epoch (UTC), finite; default ``clock()``.
        run_id, task_id, request_id, outcome_source, outcome_verified_by, anti_gaming_policy
            Optional str; "" or None means missing.
        state_before, action_taken, state_after, metadata : JSON-like, optional
            Redacted, then stored as JSON text.
        state_features : array_like of float, optional
            Shape ``(d,)``, finite. Default: :func:`dyna.redact.hash_features` of the
            redacted dicts.

        Raises
        ------
        ConfigError
            Nothing is written when a field is unknown or missing, a required label empty,
            reward or timestamp not finite (or beyond the float64 range, ``10**400``),
            features of the wrong dimension or not finite, a dict not JSON serialisable or
            nested deeper than :data:`MAX_DEPTH`, a label bytes, text with a lone surrogate,
            or a new label holding a secret (:func:`dyna.redact.check_label`: the field is
            named, the secret never echoed; a redacted label would merge buckets).
        """
        ep = encode_episode(episode, self._dicts, self._tainted, True,
                            self._clock, self._redact_keys, self.dim)
        # All validated: write.
        codes = {name: self._dicts[name].intern(label) for name, label in ep.labels.items()}
        if self.ring or (len(self) and ep.timestamp < self._store.view("timestamp")[-1]):
            self._ts_sorted = False
        ident = self._next_id
        row = {"id": ident, "reward": ep.reward, "timestamp": ep.timestamp, **codes,
               **ep.json_text, "features": ep.features, "inv_norm": ep.inv_norm}
        (dst, _), = self._store.claim(1)
        for name, value in row.items():
            self._store.array(name)[dst.start] = value
        self._used.update(name for name, code in codes.items() if code)
        self._used.update(name for name, text in ep.json_text.items() if text is not None)
        self._next_id = ident + 1
        self._groups.append(self._store, 1)
        return ident

    def taint_loaded_labels(self) -> dict[str, int]:
        """Find the labels already in the buffer that hold a secret (loaded as they were
        stored; :func:`dyna.redact.check_label`) and refuse them from now on for every new
        row, while the rows that have them stay (``dyna store scrub`` reports them).

        Returns
        -------
        dict of str to int
            Field -> how many of its labels hold a secret.
        """
        found = find_tainted(self._dicts)
        self._tainted.update(found)
        return {name: len(bad) for name, bad in found.items()}

    def record_batch(self, *, ids=None, loading: bool = False, **columns) -> np.ndarray:
        """Record many episodes in one call; return their ids, int64 ``(n,)``.

        Parameters
        ----------
        reward : array_like of float
            Required, shape ``(n,)``, finite; its length sets n.
        tenant_id, task_type, action_type, outcome : str, sequence, array or Categorical
            Required: one string for every row, n values (non-strings become
            ``str(value)``), or dictionary-encoded codes (:class:`Categorical`).
        timestamp : float or array_like, optional
            Seconds (UTC epoch); default ``clock()`` for every row.
        run_id, task_id, request_id, outcome_source, outcome_verified_by, anti_gaming_policy
            Optional, as the required categoricals; missing values are "" or None.
        state_before, action_taken, state_after, metadata
            Optional: a sequence of length n of JSON-like values (None = absent), redacted
            and stored as JSON; or :class:`JsonText`, stored JSON text kept as it is.
        state_features : array_like, optional
            float, shape ``(n, d)``, finite. Default: the feature hash of each row's dicts.
        ids : array_like of int, optional
            Explicit ids (e.g. when loading a store): strictly increasing and >= ``next_id``.
        loading : bool
            Rows a store already holds: labels taken as stored, not checked for secrets nor
            refused as tainted (:meth:`taint_loaded_labels` then refuses those for new rows).

        Returns
        -------
        numpy.ndarray
            int64 ids, shape ``(n,)``. In ring mode, rows of a batch longer than the capacity
            get ids too but only the last ``capacity`` rows are kept.

        Raises
        ------
        ConfigError
            As :meth:`record`, naming the field and the first offending row; nothing changes.
        """
        check_fields(columns)
        get = columns.get
        reward = float_column("reward", columns["reward"], None)
        n = reward.shape[0]
        if self._tainted and not loading:
            refuse_tainted(self._tainted, columns)
        ts = get("timestamp")
        ts = (np.full(n, clock_seconds(self._clock)) if ts is None
              else float_column("timestamp", ts, n))
        id_src = NO_IDS if ids is None else check_ids(ids, n, self._next_id)
        scalar_codes, per_row, new_labels = encode_categoricals(self._dicts, self._used,
                                                                columns, n)
        check_new_labels(new_labels, not loading)
        dict_json, redacted_rows = encode_dict_fields(columns, n, self._redact_keys,
                                                      hashed=get("state_features") is None)
        staged = stage_batch(self._store, reward, ts, id_src, self._next_id,
                             get("state_features"), redacted_rows, per_row, self._used)
        # ---- all validated: commit the new labels, then publish the rows.
        for name, labels in new_labels:
            self._dicts[name].add(labels)
        if n and (self.ring or not staged.ts_sorted):
            self._ts_sorted = False
        publish_batch(self._store, staged, scalar_codes, per_row, dict_json, self._used)
        self._groups.append(self._store, n)
        if n:
            self._next_id = self._next_id + n if ids is None else int(id_src[-1]) + 1
        return (np.arange(self._next_id - n, self._next_id, dtype=np.int64) if ids is None
                else id_src)

    def column(self, name: str) -> np.ndarray:
        """Zero-copy view of one column for rows ``0..len-1``.

        ``name`` is one of :data:`FIELDS` (categoricals give their int32 codes, see
        :meth:`categories` and :meth:`labels`; dict fields give JSON strings or None;
        ``features`` is float32 ``(len, d)``) or ``"inv_norm"``; any other name raises
        ConfigError.
        """
        if name not in self._store.names:
            raise ConfigError("column", name, f"unknown column; one of {', '.join(FIELDS)}")
        return self._store.view(name)

    def categories(self, name: str) -> tuple[str, ...]:
        """Labels of a categorical column indexed by code (code 0 is "" = missing)."""
        return tuple(column_dictionary(self._dicts, name).labels)

    def code(self, name: str, label: str) -> int:
        """Code of ``label`` in a categorical column, or -1 if the label was never recorded."""
        return column_dictionary(self._dicts, name).lookup.get(label_text(label, name), -1)

    def labels(self, name: str, rows=None) -> np.ndarray:
        """Decoded labels of a categorical column (a copy), object ``(len,)`` or
        ``(len(rows),)``."""
        table = np.array(column_dictionary(self._dicts, name).labels, dtype=object)
        codes = self._store.view(name)
        return table[codes if rows is None else codes[row_positions(rows, len(self))]]

    def rows(self, sel=None, *, features: bool = False) -> list[dict]:
        """Rows as JSON-ready dicts.

        Parameters
        ----------
        sel : int array, bool mask ``(len,)``, slice or None
            Row positions (None = all rows, in row order).
        features : bool
            Include ``"state_features"`` (list of d floats).

        Returns
        -------
        list of dict
            Keys: ``id``, the categoricals (None when missing), ``reward``, ``timestamp``,
            the four dict fields (decoded JSON or None) and optionally ``state_features``.

        Raises
        ------
        ConfigError
            Bad ``sel``; in a buffer of its own (no ``source``), a dict field's
            :class:`JsonText` that is not JSON (``field[id N]``).
        StoreDamagedError
            A stored dict field's text is not JSON (another program wrote it into the store
            the rows came from); names the store, the field and the episode id, never the
            text.
        """
        idx = row_positions(sel, len(self))
        return decode_rows(self._store, self._dicts, idx, features, self._source)

    def order(self) -> np.ndarray:
        """Row positions in write order, oldest first (``arange(len)`` unless a wrapped ring)."""
        return self._store.order()

    def select(self, **filters) -> np.ndarray:
        """Row positions whose categorical fields equal the given labels exactly.

        Parameters
        ----------
        **filters : str or None
            Field name (any of :data:`CATEGORICAL_FIELDS`) to label; None means no filter.
            Matching is exact (no prefix, no wildcard). An unknown label matches nothing.

        Returns
        -------
        numpy.ndarray
            int64 ascending row positions.
        """
        return select_positions(self._store, self._dicts, filters)

    def select_slice(self, **filters) -> slice | None:
        """The selected rows as one ``slice`` when they are contiguous, else None."""
        return as_slice(self.select(**filters))

    def view(self, **filters) -> dict[str, np.ndarray]:
        """Every column restricted to the selected rows.

        Zero-copy views (``np.shares_memory`` with the buffer) when the selected rows are
        contiguous, e.g. one tenant's rows recorded in one run; otherwise gathered copies.
        """
        sel = selection(self._store, self._dicts, filters)
        return {name: self._store.view(name)[sel] for name in FIELDS}

    def sample(self, n: int, seed=None, *, weights=None, candidates=None) -> np.ndarray:
        """Sample row positions with replacement, uniformly or proportionally to weights.

        Parameters
        ----------
        n : int
            Sample size, >= 0.
        seed : int, numpy.random.Generator or None
            Random source; the same int seed gives the same sample.
        weights : array_like of float, optional
            Non-negative, finite, positive sum; one per row or per candidate.
        candidates : int array or bool mask, optional
            Sample only among these rows.

        Returns
        -------
        numpy.ndarray
            int64 ``(n,)``, every value in ``[0, len)`` (never an unwritten slot).

        Raises
        ------
        ConfigError
            Negative n, bad weights, or n > 0 with nothing to sample from.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ConfigError("n", n, "must be a non-negative integer")
        pool = None if candidates is None else row_positions(candidates, len(self))
        pos = draw_positions(n, len(self) if pool is None else pool.size, seed, weights)
        return pos if pool is None else pool[pos]

    def search(self, query, k: int, **filters):
        """Cosine top-k over the rows matching ``filters`` (see :meth:`select`).

        Returns ``(rows, scores)`` as :meth:`dyna.index.ExactIndex.search`. A filter on one
        categorical column reads only the selected rows (:mod:`dyna.buffer.groups`: a
        scattered label keeps a contiguous copy of its features, float32 ``(m, d)``,
        counted by :meth:`nbytes`); several filters at once, or a ring buffer, use one mask
        pass over the columns.
        """
        active = {name: label for name, label in filters.items() if label is not None}
        if not active:
            return self.index.search(query, k)
        if len(active) == 1 and not self.ring:
            (name, label), = active.items()
            return self._groups.search(self.index, self._store, self._dicts, name, label,
                                       query, k)
        cand = selection(self._store, self._dicts, filters)
        return self.index.search(query, k, candidates=cand)

    def savepoint(self) -> tuple:
        """A mark of the buffer's state for :meth:`rollback` (growable buffers only).

        Records the row count, the next id, the size of every label dictionary and which
        optional columns hold values. Between the mark and :meth:`rollback` only appends
        (:meth:`record`, :meth:`record_batch`) may happen. A ring buffer (whose appends
        overwrite old rows) has none: ConfigError.
        """
        if self.ring:
            raise ConfigError("ring", True, "a ring buffer overwrites rows; it has no savepoint")
        return (len(self._store), self._next_id,
                {name: len(d.labels) for name, d in self._dicts.items()},
                frozenset(self._used), self._ts_sorted)

    def rollback(self, mark: tuple) -> int:
        """Undo every append since :meth:`savepoint` returned ``mark``; return rows removed.

        Afterwards the buffer is as it was at the mark: its rows, next id (the ids of the
        removed rows will be given again), label dictionaries (labels first seen since are
        forgotten), and the search structures (per-label row lists are rebuilt on the next
        filtered search). This is how an experience store keeps nothing in memory that its
        file lacks when a write fails.

        Raises
        ------
        ConfigError
            ``mark`` is not a savepoint of this buffer's current rows (rows were deleted or
            moved since, or the buffer is a ring).
        """
        n0, next_id, n_labels, used, ts_sorted = mark
        n = len(self._store)
        if self.ring or n < n0 or next_id > self._next_id:
            raise ConfigError("mark", (n0, next_id), "not a savepoint of this buffer's rows "
                              "(rows were deleted or moved since)")
        # a column that never held a value stays all zero
        self._store.truncate(n0, zero=unused_columns(used))
        for name, d in self._dicts.items():
            d.truncate(n_labels[name])
        self._used = set(used)
        self._next_id = next_id
        self._ts_sorted = ts_sorted
        if n > n0:
            self._groups.clear()
        return n - n0

    def delete(self, sel) -> int:
        """Delete rows (int positions or a bool mask ``(len,)``); survivors keep their order.

        Returns
        -------
        int
            Number of rows deleted.
        """
        keep = np.ones(len(self), dtype=bool)
        keep[row_positions(sel, len(self))] = False
        deleted = keep_rows(self._store, keep, self._used)
        if deleted:
            self._groups.clear()
        return deleted

    def prune_older_than(self, t: float) -> int:
        """Delete every row with ``timestamp < t`` (seconds, UTC); return the number deleted.

        When timestamps are non-decreasing in row order (the usual case), this is a binary
        search and an O(1) drop of the prefix; otherwise one vectorised mask pass.

        Raises
        ------
        ConfigError
            ``t`` not a finite number.
        """
        t = finite_float("t", t)
        ts = self._store.view("timestamp")
        if self._ts_sorted and not self.ring:
            n = int(np.searchsorted(ts, t, side="left"))
            self._store.drop_prefix(n, release=self._used)
            if n:
                self._groups.clear()
            return n
        return self.delete(ts < t)

    def compact(self, keep: int) -> int:
        """Keep the newest ``keep`` rows of every (tenant_id, task_type); return rows deleted.

        "Newest" is by timestamp, ties by id (write order); see
        :func:`dyna.buffer.retention.newest_per_group`.

        Raises
        ------
        ConfigError
            ``keep`` not a non-negative integer.
        """
        if isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or keep < 0:
            raise ConfigError("keep", keep, "must be a non-negative integer")
        if len(self) == 0:
            return 0
        in_order = self._ts_sorted and not self.ring
        return self.delete(~newest_per_group(self._store, self._dicts, keep, in_order))

    def copy(self) -> ExperienceBuffer:
        """An independent copy (columns, dictionaries, next id); capacity shrinks to ``len``."""
        new = ExperienceBuffer(self.dim, 1, ring=self.ring, redact_keys=self._redact_keys,
                               clock=self._clock, source=self._source)
        new._store = self._store.copy()
        new.index = ExactIndex.over(new._store, vectors="features", inv_norm="inv_norm",
                                    stamp="id")
        new._dicts = {name: d.copy() for name, d in self._dicts.items()}
        new._tainted = {name: set(bad) for name, bad in self._tainted.items()}
        new._used = set(self._used)
        new._next_id = self._next_id
        new._ts_sorted = self._ts_sorted
        return new

    def clear(self) -> None:
        """Delete every row (ids keep increasing; dictionaries are kept)."""
        self._store.clear(blank=unused_columns(self._used))
        self._groups.clear()
        self._ts_sorted = True

    def to_polars(self):
        """All rows as a polars DataFrame (a copy), in row order.

        Columns: ``id`` Int64, the categoricals as String (null when missing), ``reward`` and
        ``timestamp`` Float64, the dict fields as JSON String (null when absent), and
        ``features`` as ``Array(Float32, d)``.
        """
        return frame_of(self._store, self._dicts)

    @classmethod
    def from_polars(cls, df, *, dim: int | None = None, capacity: int | None = None,
                    ring: bool = False, **kwargs) -> ExperienceBuffer:
        """Build a buffer from a DataFrame shaped like :meth:`to_polars` output.

        ``id`` (if present) is kept; ``features`` (if present) become the features, else they
        are hashed from the dict columns. JSON dict columns are parsed, then redacted again.

        Raises
        ------
        ConfigError
            Missing required columns or invalid values (as :meth:`record_batch`); a dict
            column's text that is not JSON names ``field[row]`` and a short redacted prefix.
        """
        if dim is None:
            dim = df.schema["features"].size if "features" in df.columns else 64
        buf = cls(dim, capacity or max(df.height, 1), ring=ring, **kwargs)
        cols, ids = batch_from_frame(df)
        buf.record_batch(ids=ids, **cols)
        return buf
