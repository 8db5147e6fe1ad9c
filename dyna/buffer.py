"""ExperienceBuffer: a columnar, vectorised store of episodes.

One row per episode, one numpy array per field (see :data:`FIELDS`):

============================  ===========================  =====================================
field                         storage                      meaning
============================  ===========================  =====================================
id                            int64                        monotonically increasing, never reused
tenant_id, task_type,         int32 codes + a per-column   categorical labels; code 0 is the empty
action_type, outcome,         string dictionary            string, which means "missing"
run_id, task_id, request_id,
outcome_source,
outcome_verified_by,
anti_gaming_policy
reward                        float64                      finite
timestamp                     float64                      seconds since the Unix epoch, UTC
state_before, action_taken,   object (JSON str or None)    free-form values, redacted, then JSON
state_after, metadata
features                      float32 ``(d,)``             numeric ``state_features`` or the
                                                           feature hash of the four dicts
inv_norm                      float32                      1 / ||features|| (0 for zero rows)
============================  ===========================  =====================================

Arrays grow by amortised doubling into fresh ``np.empty`` arrays (never ``np.resize``, which
repeats data, case BUF-03), so capacity beyond ``len`` is never resident and never visible:
every read API covers rows ``0 <= r < len`` only. In ring mode (``ring=True``) the capacity is
fixed and the oldest rows are overwritten (case BUF-02); row positions are then slots and
:meth:`ExperienceBuffer.order` gives the write order.

A batch (:meth:`ExperienceBuffer.record_batch`) is validated while it is staged: one
compiled call writes reward, timestamp, ids and features and remaps categorical codes into
the free rows after the live ones, checking as it goes; the rows become visible only once
everything is valid, so a bad batch changes nothing. The inverse feature norms the index
scores with are computed for the rows recorded since the last search when the next search
(or a read of ``inv_norm``) comes, in one compiled pass (a ring buffer computes them as it
records).

A search filtered to one label (:meth:`ExperienceBuffer.search` with one of tenant_id,
task_type, ...) reads only that label's rows: per-label row lists, and for a label whose
rows are interleaved with others', a contiguous copy of its features kept up to date as rows
arrive (its memory is counted by :meth:`ExperienceBuffer.nbytes`).

Input is checked before anything is stored (:func:`check_value`): dict fields nest at most
:data:`MAX_DEPTH` (64) containers deep, text (labels, dict keys and values) must be valid
Unicode (no lone surrogates), labels are str (never bytes), numbers fit float64; each
violation is a :class:`dyna.errors.ConfigError` naming the field (and row) and the value.
:meth:`ExperienceBuffer.savepoint` and :meth:`ExperienceBuffer.rollback` undo appends (how
an experience store keeps nothing in memory that a failed write did not store).

A buffer is not thread-safe; guard it with a lock if several threads record.
"""

from __future__ import annotations

import json
import math
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numba
import numpy as np

from dyna.errors import ConfigError, StoreDamagedError
from dyna.index import (ColumnStore, ExactIndex, copy_checked, copy_with_inverse_norms,
                        inverse_norms, inverse_norms_into)
from dyna.redact import DEFAULT_SENSITIVE_KEYS, check_label, hash_features, redact, redact_text

__all__ = [
    "CATEGORICAL_FIELDS",
    "Categorical",
    "JsonText",
    "DICT_FIELDS",
    "ExperienceBuffer",
    "FIELDS",
    "MAX_DEPTH",
    "REQUIRED_FIELDS",
    "check_value",
    "finite_float",
    "short_value",
]

CATEGORICAL_FIELDS: tuple[str, ...] = (
    "tenant_id", "task_type", "action_type", "outcome", "run_id", "task_id", "request_id",
    "outcome_source", "outcome_verified_by", "anti_gaming_policy",
)
"""Fields stored as int32 codes into a per-column dictionary of labels ("" = missing)."""

DICT_FIELDS: tuple[str, ...] = ("state_before", "action_taken", "state_after", "metadata")
"""Free-form JSON-like fields, stored redacted as JSON strings."""

REQUIRED_FIELDS: tuple[str, ...] = ("tenant_id", "task_type", "action_type", "outcome", "reward")
"""Fields every episode must give (categoricals non-empty, reward finite)."""

FIELDS: tuple[str, ...] = (("id",) + CATEGORICAL_FIELDS + ("reward", "timestamp")
                           + DICT_FIELDS + ("features",))
"""Every column of the buffer, in export order."""

_INPUT_FIELDS = frozenset(CATEGORICAL_FIELDS + DICT_FIELDS
                          + ("reward", "timestamp", "state_features"))


class Categorical(NamedTuple):
    """Dictionary-encoded input for a categorical column of :meth:`ExperienceBuffer.record_batch`.

    Attributes
    ----------
    codes : numpy.ndarray
        Integer codes, shape ``(n,)``, each in ``[0, len(labels))``.
    labels : sequence of str
        Label of each code ("" or None means missing).
    """

    codes: np.ndarray
    labels: Sequence[str | None]


class JsonText(NamedTuple):
    """Stored JSON text for a dict field of :meth:`ExperienceBuffer.record_batch`.

    For text this library wrote and redacted before (e.g. read back from an experience
    store): it is stored as it is, neither parsed, redacted again nor re-serialised. It is
    parsed only if the features have to be hashed from it (no ``state_features`` given);
    then text that is not JSON raises ConfigError naming the field and row.

    Attributes
    ----------
    texts : sequence of str or None
        One JSON text per row (None = absent), length n.
    """

    texts: Sequence[str | None]


def _label(value, field: str = "label") -> str:
    """The string label of a categorical value (None -> "" = missing).

    Raises
    ------
    ConfigError
        ``value`` is bytes (a label is text; decode it first), naming ``field``.
    """
    if value is None:
        return ""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)    # numpy.str_ and other subclasses: plain str
    if isinstance(value, (bytes, bytearray, np.bytes_)):
        raise ConfigError(field, bytes(value[:40]), "must be a str, not bytes (decode it "
                          "first)")
    if isinstance(value, np.generic):
        value = value.item()
    return str(value)


class _Dictionary:
    """Label <-> int32 code for one categorical column; code 0 is ""."""

    __slots__ = ("labels", "lookup", "mappings")

    def __init__(self):
        self.labels: list[str] = [""]
        self.lookup: dict[str, int] = {"": 0}
        # Categorical label tuples (plain str) whose labels are all known -> (their types,
        # their code table int32).
        self.mappings: dict[tuple, tuple[tuple, np.ndarray]] = {}


_MAX_CACHED_MAPPINGS = 256
_REQUIRED_SET = frozenset(REQUIRED_FIELDS)
_DICT_SET = frozenset(DICT_FIELDS)
_OPTIONAL_FIELDS = tuple(name for name in CATEGORICAL_FIELDS + DICT_FIELDS
                         if name not in _REQUIRED_SET)
_OPTIONAL_SET = frozenset(_OPTIONAL_FIELDS)
_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_FEATURES = np.zeros((0, 1), dtype=np.float32)
_NO_CODES = (np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int32),
             np.zeros(0, dtype=np.int32), False)   # an absent code column for _stage_batch
_NO_FILL = (np.zeros(0, dtype=np.int32), 0)         # an absent column to fill


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _stage_rows(reward, ts, ids, first_id, feats, id_dst, rew_dst, ts_dst, feat_dst, inv_dst,
                base, check_prev, norms):  # pragma: no cover - compiled
    """Write reward, timestamp, id and (unless ``feats`` has no rows) features for a batch to
    rows ``base..base+n`` of the destinations, validating them; with ``norms`` also the
    features' inverse norms (else they are left for the owner to compute later).

    ``ids`` empty means ``first_id, first_id + 1, ...``. Returns ``(column, row, sorted)``:
    column 0 (reward), 1 (timestamp) or 2 (features) and the first invalid row, or
    ``(-1, -1, s)`` when all are valid, with ``s`` whether the timestamps are non-decreasing
    (and with ``check_prev``, not below ``ts_dst[base - 1]``, the last live row's). Reward and timestamp are copied and validated in one vectorised pass
    (``x * 0`` is 0 exactly when x is finite; only ``reassoc`` is allowed, so NaN and inf
    propagate); the first bad row is searched for only when there is one.
    """
    n = reward.shape[0]
    if n == 0:
        return -1, -1, True
    out_r = rew_dst[base:base + n]
    out_t = ts_dst[base:base + n]
    out_id = id_dst[base:base + n]
    bad = 0.0
    for i in range(n):   # copy and validate in one vectorised pass
        r = reward[i]
        t = ts[i]
        out_r[i] = r
        out_t[i] = t
        bad += r * 0.0 + t * 0.0
    later = ts[1:]
    earlier = ts[:-1]
    descents = 0
    for i in range(n - 1):
        descents += later[i] < earlier[i]
    if bad != 0.0:   # NaN: some value is not finite
        for i in range(n):
            if not np.isfinite(reward[i]):
                return 0, i, False
            if not np.isfinite(ts[i]):
                return 1, i, False
    ts_sorted = descents == 0 and not (check_prev and ts[0] < ts_dst[base - 1])
    if ids.shape[0] == 0:
        for i in range(n):
            out_id[i] = first_id + i
    else:
        for i in range(n):
            out_id[i] = ids[i]
    if feats.shape[0]:
        if norms:
            bad_row = copy_with_inverse_norms(feats, feat_dst, base, inv_dst)
        else:
            bad_row = copy_checked(feats, feat_dst, base)
        if bad_row >= 0:
            return 2, bad_row, False
    return -1, -1, ts_sorted


@numba.njit(cache=True, nogil=True)
def _stage_codes(src, mapping, dst, base, required):  # pragma: no cover - compiled
    """``dst[base + i] = mapping[src[i]]``; returns ``(row, reason)`` of the first bad row.

    reason 0: ``src[i]`` outside ``[0, len(mapping))``; reason 1: a required column would get
    code 0 (missing). ``(-1, -1)`` when every row is valid. The range is checked by one
    min/max pass; a mapping that is a run of consecutive codes (labels registered in order,
    the common case) is applied as an offset, anything else as a table lookup.
    """
    n = src.shape[0]
    m = mapping.shape[0]
    if n == 0:
        return -1, -1
    out = dst[base:base + n]
    off = mapping[0] if m else 0   # no labels: every code is out of range (found below)
    run = True
    for j in range(m):
        if mapping[j] != off + j:
            run = False
            break
    lo = src[0]
    hi = src[0]
    if run and (off > 0 or not required):   # one pass: shift, and find the code range
        for i in range(n):
            c = src[i]
            out[i] = c + off
            lo = c if c < lo else lo
            hi = c if c > hi else hi
        if lo >= 0 and hi < m:
            return -1, -1
    else:
        for i in range(n):
            c = src[i]
            lo = c if c < lo else lo
            hi = c if c > hi else hi
    if lo < 0 or hi >= m:
        for i in range(n):
            if src[i] < 0 or src[i] >= m:
                return i, 0
    zeros = 0
    for i in range(n):
        v = mapping[src[i]]
        out[i] = v
        zeros += v == 0
    if required and zeros:
        for i in range(n):
            if out[i] == 0:
                return i, 1
    return -1, -1


@numba.njit(cache=True, nogil=True)
def _stage_batch(reward, ts, ids, first_id, feats, id_dst, rew_dst, ts_dst, feat_dst, inv_dst,
                 base, check_prev, norms, src1, map1, dst1, req1, src2, map2, dst2, req2,
                 fill1, code1, fill2, code2):  # pragma: no cover - compiled
    """:func:`_stage_rows`, then :func:`_stage_codes` for up to two per-row code columns
    (an empty ``src`` is no column), then, once all is valid, rows ``base..base+n`` of up
    to two code columns set to one code each (``fill1[...] = code1``; an empty ``fill`` is
    no column), in one call.

    Returns ``(what, row, sorted)``: ``what`` -1 (all valid), 0/1/2 (reward, timestamp or
    features invalid at ``row``), 3/4 (first code column: out of range / required but
    missing at ``row``) or 5/6 (the same for the second).
    """
    what, row, ts_sorted = _stage_rows(reward, ts, ids, first_id, feats, id_dst, rew_dst,
                                       ts_dst, feat_dst, inv_dst, base, check_prev, norms)
    if what >= 0:
        return what, row, False
    if src1.shape[0]:
        row, reason = _stage_codes(src1, map1, dst1, base, req1)
        if row >= 0:
            return 3 + reason, row, False
    if src2.shape[0]:
        row, reason = _stage_codes(src2, map2, dst2, base, req2)
        if row >= 0:
            return 5 + reason, row, False
    n = reward.shape[0]
    if fill1.shape[0]:
        fill1[base:base + n] = code1
    if fill2.shape[0]:
        fill2[base:base + n] = code2
    return -1, -1, ts_sorted


@numba.njit(cache=True, nogil=True)
def _keep_newest(group, keep, n_groups):  # pragma: no cover - compiled
    """Mask of the last ``keep`` rows of each group, scanning rows from the end."""
    seen = np.zeros(n_groups, np.int64)
    mask = np.zeros(group.shape[0], np.bool_)
    for i in range(group.shape[0] - 1, -1, -1):
        g = group[i]
        if seen[g] < keep:
            mask[i] = True
            seen[g] += 1
    return mask


@numba.njit(cache=True, nogil=True)
def _split_by_code(codes, first_row):  # pragma: no cover - compiled
    """Stable counting sort of rows by code.

    Returns ``(rows, present, bounds)``: ``rows`` (int64) are ``first_row + i`` grouped by
    code in ascending code order, each group ascending; ``present`` the codes that occur;
    group ``j`` is ``rows[bounds[j]:bounds[j + 1]]``.
    """
    n = codes.shape[0]
    hi = 0
    for i in range(n):
        hi = max(hi, codes[i])
    counts = np.zeros(hi + 2, np.int64)
    for i in range(n):
        counts[codes[i] + 1] += 1
    m = 0
    for c in range(hi + 1):
        m += counts[c + 1] > 0
    present = np.empty(m, np.int64)
    bounds = np.empty(m + 1, np.int64)
    j = 0
    for c in range(hi + 1):
        if counts[c + 1] > 0:
            present[j] = c
            bounds[j] = counts[c]
            j += 1
        counts[c + 1] += counts[c]
    bounds[m] = n
    rows = np.empty(n, np.int64)
    for i in range(n):
        c = codes[i]
        rows[counts[c]] = first_row + i
        counts[c] += 1
    return rows, present, bounds


@numba.njit(cache=True, nogil=True)
def _gather_rows(features, inv, ids, rows, f_dst, inv_dst, id_dst, base):  # pragma: no cover
    """Copy the given rows' features, inverse norms and ids to ``base, base + 1, ...``."""
    d = features.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(d):
            f_dst[base + i, j] = features[r, j]
        inv_dst[base + i] = inv[r]
        id_dst[base + i] = ids[r]


class _Group:
    """Row positions of one label (ascending), and once searched while scattered, a
    contiguous copy of those rows' features, inverse norms and ids with its own index."""

    __slots__ = ("rows", "copy", "index")

    def __init__(self, rows: np.ndarray):
        self.rows = ColumnStore({"row": (np.int64, ())}, max(rows.size, 16))
        self.copy: ColumnStore | None = None
        self.index: ExactIndex | None = None
        self.append(rows, None)

    def append(self, rows: np.ndarray, store: ColumnStore | None) -> None:
        if rows.size == 0:
            return
        for dst, _ in self.rows.claim(rows.size):
            self.rows.array("row")[dst] = rows
        if self.copy is not None:
            self._gather(store, rows)

    def _gather(self, store: ColumnStore, rows: np.ndarray) -> None:
        """Append these buffer rows' features, inverse norms and ids to the copy."""
        for dst, _ in self.copy.claim(rows.size):
            _gather_rows(store.view("features"), store.view("inv_norm"), store.view("id"),
                         rows, self.copy.array("features"), self.copy.array("inv_norm"),
                         self.copy.array("id"), dst.start)

    def contiguous(self) -> slice | None:
        rows = self.rows.view("row")
        if rows.size and int(rows[-1]) - int(rows[0]) + 1 == rows.size:
            return slice(int(rows[0]), int(rows[-1]) + 1)
        return None

    def searchable(self, store: ColumnStore, dim: int) -> ExactIndex:
        """The index over the group's own contiguous copy (built on first use)."""
        if self.index is None:
            rows = self.rows.view("row")
            self.copy = ColumnStore({"features": (np.float32, (dim,)),
                                     "inv_norm": (np.float32, ()), "id": (np.int64, ())},
                                    max(rows.size, 16))
            self._gather(store, rows)
            self.index = ExactIndex.over(self.copy, vectors="features", inv_norm="inv_norm",
                                         stamp="id")
        return self.index

    def nbytes(self) -> int:
        return self.rows.nbytes() + (self.copy.nbytes() if self.copy is not None else 0)


class _Groups:
    """Per-label row lists of one categorical column, kept up to date as rows are appended.

    Built on the first filtered search by that column (one counting sort of its codes);
    dropped whenever rows are deleted or moved (they are rebuilt on the next search).
    """

    def __init__(self, codes: np.ndarray):
        self.groups: dict[int, _Group] = {}
        self.append(codes, 0, None)

    def append(self, codes: np.ndarray, first_row: int, store: ColumnStore | None) -> None:
        """Add rows ``first_row .. first_row + len(codes) - 1`` with these codes."""
        if codes.size == 0:
            return
        rows, present, bounds = _split_by_code(codes, first_row)
        for j, code in enumerate(present.tolist()):
            rows_j = rows[bounds[j]:bounds[j + 1]]
            g = self.groups.get(code)
            if g is None:
                self.groups[code] = _Group(rows_j)
            else:
                g.append(rows_j, store)

    def nbytes(self) -> int:
        return sum(g.nbytes() for g in self.groups.values())


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
        The store the rows are read from (its path), named by
        :class:`dyna.errors.StoreDamagedError` when a stored dict field's text is not JSON;
        ``None`` (a buffer of its own): such a text came from the caller (a
        :class:`JsonText`), and reading it raises ConfigError naming the field and id.

    Attributes
    ----------
    index : ExactIndex
        Exact cosine index over ``features``, up to date at every search (the inverse norms
        of rows recorded since the last one are computed first); its row positions are this
        buffer's row positions and ties go to the larger episode id.

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
        self._dim = int(dim)
        specs: dict[str, tuple] = {"id": (np.int64, ()), "reward": (np.float64, ()),
                                   "timestamp": (np.float64, ())}
        specs.update({name: (np.int32, ()) for name in CATEGORICAL_FIELDS})
        specs.update({name: (object, ()) for name in DICT_FIELDS})
        specs["features"] = (np.float32, (self._dim,))
        specs["inv_norm"] = (np.float32, ())
        self._store = ColumnStore(specs, capacity, ring=ring)
        self._dicts = {name: _Dictionary() for name in CATEGORICAL_FIELDS}
        self._redact_keys = frozenset(redact_keys) if not isinstance(redact_keys, str) else redact_keys
        redact({}, self._redact_keys)  # validates the key collection
        self._clock = clock
        self._source = None if source is None else str(source)
        # New labels are refused when they hold a secret (dyna.redact.check_label); off only
        # while an experience store loads what an older version stored (see `dyna store scrub`).
        self._check_labels = True
        # Labels loaded as they were stored that hold a secret (field -> labels): kept for
        # the rows that have them, refused for every new row (see taint_loaded_labels).
        self._tainted: dict[str, set] = {}
        self._next_id = 0
        self._ts_sorted = True  # timestamps non-decreasing in row order (growable mode)
        # Optional columns that ever received a value; the others are still all zero/None.
        self._used: set[str] = set()
        # Per-label row lists (and scattered groups' feature copies) of the categorical
        # columns that filtered searches used; see _Groups.
        self._groups: dict[str, _Groups] = {}
        # Rows 0.._normed-1 have their inverse norm stored. Batches written in place (the
        # growable buffer) leave theirs to _sync_norms, run before anything reads them.
        self._normed = 0
        self.index = ExactIndex.over(self._store, vectors="features", inv_norm="inv_norm",
                                     stamp="id", prepare=_norms_hook(self))

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["index"]          # rebuilt on unpickling, bound to the new buffer
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("_check_labels", True)
        state.setdefault("_tainted", {})
        state.setdefault("_source", None)
        self.__dict__.update(state)
        self.index = ExactIndex.over(self._store, vectors="features", inv_norm="inv_norm",
                                     stamp="id", prepare=_norms_hook(self))

    def _blank_columns(self) -> list[str]:
        """Optional columns that never held a value: all 0 / None, nothing to move."""
        return [name for name in _OPTIONAL_FIELDS if name not in self._used]

    def _sync_norms(self) -> None:
        """Store the inverse norms of rows ``_normed..len-1`` (validated when recorded).

        A ring buffer stages every batch and stores its norms at once: nothing to do.
        """
        if self._store.ring:
            return
        n = len(self._store)
        if self._normed < n:
            lo = self._normed
            inverse_norms_into(self._store.view("features")[lo:],
                               self._store.view("inv_norm")[lo:])
        self._normed = n

    # ================================================================= properties
    def __len__(self) -> int:
        return len(self._store)

    @property
    def dim(self) -> int:
        """Feature dimension d."""
        return self._dim

    @property
    def capacity(self) -> int:
        """Rows the arrays can hold now (>= len; fixed in ring mode)."""
        return self._store.capacity

    @property
    def ring(self) -> bool:
        """True for a fixed-capacity ring buffer."""
        return self._store.ring

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
        total += sum(g.nbytes() for g in self._groups.values())
        return total

    # ================================================================= writing
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
        run_id, task_id, request_id, outcome_source, outcome_verified_by, anti_gaming_policy : str, optional
            "" or None means missing.
        state_before, action_taken, state_after, metadata : JSON-like, optional
            Redacted, then stored as JSON text.
        state_features : array_like of float, optional
            Shape ``(d,)``, finite. Default: :func:`dyna.redact.hash_features` of the
            redacted dicts.

        Returns
        -------
        int
            The episode id.

        Raises
        ------
        ConfigError
            Unknown or missing field, empty required label, NaN/inf reward or timestamp (or
            an integer beyond the float64 range, e.g. ``10**400``), features of the wrong
            dimension or not finite, a dict that is not JSON serialisable or nested deeper
            than :data:`MAX_DEPTH`, a bytes label, text with a lone surrogate (a label, a
            dict key or value), a new label in which a secret detector fires
            (:func:`dyna.redact.check_label`: the field is named, the secret never echoed;
            a redacted label would merge buckets). Nothing is written.
        """
        self._check_fields(episode)
        enc = {}
        for name in CATEGORICAL_FIELDS:
            label = _label(episode.get(name), name)
            if not label and name in REQUIRED_FIELDS:
                raise ConfigError(name, episode.get(name), "is required and must be non-empty")
            if label and (label not in self._dicts[name].lookup
                          or label in self._tainted.get(name, ())):
                _check_text(name, label)
                if self._check_labels:
                    check_label(name, label)
            enc[name] = label
        reward = _finite_scalar("reward", episode["reward"])
        ts = episode.get("timestamp")
        ts = float(self._clock()) if ts is None else _finite_scalar("timestamp", ts)
        dicts = {name: self._redacted(name, episode.get(name)) for name in DICT_FIELDS}
        json_text = {name: _to_json(name, value) for name, value in dicts.items()}
        if episode.get("state_features") is not None:
            feat = _float_array("state_features", episode["state_features"], np.float32)
            if feat.shape != (self._dim,):
                raise ConfigError("state_features", feat.shape, f"must have shape ({self._dim},)")
        else:
            feat = hash_features(dicts, self._dim)
        inv = inverse_norms(feat[None, :], "state_features")
        codes = {}
        for name, label in enc.items():
            d = self._dicts[name]
            code = d.lookup.get(label)
            if code is None:
                code = len(d.labels)
                d.labels.append(label)
                d.lookup[label] = code
            codes[name] = code
        # All validated: write.
        ident = self._next_id
        self._note_timestamps(np.array([ts]))
        if self._normed == len(self._store):
            self._normed += 1    # this row's norm is written below
        (dst, _), = self._store.claim(1)
        i = dst.start
        arr = self._store.array
        arr("id")[i] = ident
        arr("reward")[i] = reward
        arr("timestamp")[i] = ts
        for name, code in codes.items():
            arr(name)[i] = code
            if code:
                self._used.add(name)
        for name, text in json_text.items():
            arr(name)[i] = text
            if text is not None:
                self._used.add(name)
        arr("features")[i] = feat
        arr("inv_norm")[i] = inv[0]
        self._next_id = ident + 1
        self._grouped_append(1)
        return ident

    def taint_loaded_labels(self) -> dict[str, int]:
        """Find the labels already in the buffer that hold a secret (an older version
        stored them; :func:`dyna.redact.check_label`) and refuse them from now on for every
        new row, while the rows that have them stay (``dyna store scrub`` reports them).

        Returns
        -------
        dict of str to int
            Field -> how many of its labels hold a secret.
        """
        from dyna.errors import ConfigError as _ConfigError
        out = {}
        for name in CATEGORICAL_FIELDS:
            bad = set()
            for label in self._dicts[name].labels:
                if not label:
                    continue
                try:
                    check_label(name, label)
                except _ConfigError:
                    bad.add(label)
            if bad:
                self._tainted[name] = bad
                out[name] = len(bad)
        return out

    def _refuse_tainted(self, columns) -> None:
        """A batch that reuses a tainted label is refused (ConfigError naming the field,
        never the label)."""
        for name, bad in self._tainted.items():
            values = columns.get(name)
            if values is None:
                continue
            if isinstance(values, str):
                present = {values}
            elif isinstance(values, Categorical):
                labels = list(values.labels)
                present = {labels[int(c)] for c in np.unique(np.asarray(values.codes))}
            else:
                present = set(np.asarray(values, dtype=object).ravel().tolist())
            if not present.isdisjoint(bad):
                check_label(name, next(iter(present & bad)))

    def record_batch(self, *, ids=None, **columns) -> np.ndarray:
        """Record many episodes in one call; return their ids, int64 ``(n,)``.

        Parameters
        ----------
        reward : array_like of float
            Required, shape ``(n,)``, finite; its length sets n.
        tenant_id, task_type, action_type, outcome : str, sequence, array or Categorical
            Required. A single string applies to every row; a sequence or array has length
            n (non-string values become ``str(value)``); :class:`Categorical` passes
            dictionary-encoded codes without per-row strings.
        timestamp : float or array_like, optional
            Seconds (UTC epoch); default ``clock()`` for every row.
        run_id, task_id, request_id, outcome_source, outcome_verified_by, anti_gaming_policy : optional
            As the required categoricals; missing values are "" or None.
        state_before, action_taken, state_after, metadata : sequence of length n or JsonText, optional
            JSON-like values (None = absent), redacted and stored as JSON; or
            :class:`JsonText`, stored JSON text kept as it is.
        state_features : array_like, optional
            float, shape ``(n, d)``, finite. Default: the feature hash of each row's dicts.
        ids : array_like of int, optional
            Explicit ids (e.g. when loading a store): strictly increasing and >= ``next_id``.

        Returns
        -------
        numpy.ndarray
            int64 ids, shape ``(n,)``. In ring mode, rows of a batch longer than the capacity
            get ids too but only the last ``capacity`` rows are kept.

        Raises
        ------
        ConfigError
            As :meth:`record`, naming the field and the first offending row. The whole batch
            is validated before anything is written, so on error nothing changes.
        """
        get = columns.get
        if (not _INPUT_FIELDS.issuperset(columns) or get("reward") is None
                or get("tenant_id") is None or get("task_type") is None
                or get("action_type") is None or get("outcome") is None):
            self._check_fields(columns)   # raises, naming the field
        reward = _float_column("reward", columns["reward"], None)
        n = reward.shape[0]
        if self._tainted and self._check_labels:
            self._refuse_tainted(columns)
        ts = get("timestamp")
        ts = (np.full(n, float(self._clock())) if ts is None
              else _float_column("timestamp", ts, n))
        id_src = _NO_IDS if ids is None else self._check_ids(ids, n)

        # Categorical columns: a code for every row (scalar) or codes to remap per row. New
        # labels are committed only once the whole batch is valid.
        used = self._used
        dicts = self._dicts
        scalar_codes: list[tuple[str, Any]] = []   # (name, code): also the later writes
        per_row: list[tuple[str, np.ndarray, np.ndarray]] = []
        new_labels: list[tuple[str, list[str]]] = []
        if used:   # columns that hold values but get none now: code 0 ("missing")
            scalar_codes.extend((name, 0) for name in CATEGORICAL_FIELDS
                                if name in used and columns.get(name) is None)
        for name in [name for name in CATEGORICAL_FIELDS if name in columns]:
            values = columns[name]
            if values is None:
                continue
            kind = type(values)
            if kind is str:  # the common case of a known label, inline
                code = dicts[name].lookup.get(values)
                if code is not None and (code or name not in _REQUIRED_SET):
                    # A column that has only ever held code 0 is all zeros (arrays are
                    # allocated zeroed and failed batches are undone): no write needed.
                    if code or name in used:
                        scalar_codes.append((name, code))
                    continue
            elif kind is Categorical:  # known labels: the cached code table, inline
                raw = values.labels
                raw = raw if type(raw) is tuple else tuple(raw)
                cached = dicts[name].mappings.get(raw)
                codes = values.codes
                # Cached tables are for labels that are all plain str: a str subclass equals
                # its text but may have another label (a (str, Enum) member's is
                # "Cls.NAME"), so the types are compared too (~0.2 us for 8 labels).
                if (cached is not None and type(codes) is np.ndarray and codes.shape == (n,)
                        and codes.dtype.kind in "iu" and tuple(map(type, raw)) == cached[0]):
                    per_row.append((name, codes, cached[1]))
                    continue
            code, new = self._encode(name, values, n)
            if new:
                new_labels.append((name, new))
            if type(code) is int:
                if code or name in used:
                    scalar_codes.append((name, code))
            else:
                per_row.append((name, *code))

        if new_labels:   # a label UTF-8 cannot encode, or holding a secret, is refused
            for name, labels in new_labels:
                for label in labels:
                    _check_text(name, label)
                    if self._check_labels:
                        check_label(name, label)

        dict_json: list[tuple[str, np.ndarray]] = []
        redacted_rows: dict[str, list] = {}
        if not _DICT_SET.isdisjoint(columns):
            for name in DICT_FIELDS:
                vals = columns.get(name)
                if vals is None:
                    continue
                if type(vals) is JsonText:
                    texts = _json_texts(name, vals.texts, n)
                    dict_json.append((name, texts))
                    if get("state_features") is None:   # the features hash the dicts
                        redacted_rows[name] = _parse_json_texts(name, texts)
                    continue
                if isinstance(vals, (str, bytes, Mapping)) or len(vals) != n:
                    raise ConfigError(name, type(vals).__name__,
                                      f"must be a sequence of {n} values")
                red = [self._redacted(f"{name}[{i}]", v) for i, v in enumerate(vals)]
                texts = np.empty(n, dtype=object)
                for i, v in enumerate(red):
                    texts[i] = _to_json(f"{name}[{i}]", v)
                dict_json.append((name, texts))
                redacted_rows[name] = red

        # Numeric columns are validated while they are written to a staging area that is
        # not visible yet: the free slots after the live rows (growable buffer) or fresh
        # arrays copied in after validation (ring buffer, whose free slots are live rows).
        store = self._store
        direct = not store.ring and n > 0
        if direct:
            base = store.free_start(n)
            stage = store._arrays
            check_prev = store._len > 0
        else:
            base = 0
            stage = {name: np.empty((n,) + store._arrays[name].shape[1:],
                                    store._arrays[name].dtype)
                     for name in ("id", "reward", "timestamp", "features", "inv_norm")}
            check_prev = False
        sf = get("state_features")
        feats = _NO_FEATURES
        if sf is not None:
            if not (type(sf) is np.ndarray and sf.dtype == np.float32
                    and sf.flags.c_contiguous):
                sf = np.ascontiguousarray(_float_array("state_features", sf, np.float32))
            feats = sf
            if feats.shape != (n, self._dim):
                raise ConfigError("state_features", feats.shape,
                                  f"must have shape ({n}, {self._dim})")
        elif redacted_rows:
            feats = np.empty((n, self._dim), dtype=np.float32)
            for i in range(n):
                feats[i] = hash_features({name: rows[i] for name, rows in redacted_rows.items()},
                                         self._dim)
        else:
            stage["features"][base:base + n] = 0
            stage["inv_norm"][base:base + n] = 0
        # Codes given per row are remapped to dictionary codes, checking the range and that
        # required fields are never "missing": the first two in the same compiled call as
        # the numeric columns, any others one call each.
        slots = []
        for name, src, mapping in per_row:
            if not direct:
                stage[name] = np.empty(n, np.int32)
            if src.dtype != np.int32 and src.dtype != np.int64:
                src = src.astype(np.int64)
            slots.append((src, mapping, stage[name], name in _REQUIRED_SET))
        c1 = slots[0] if slots else _NO_CODES
        c2 = slots[1] if len(slots) > 1 else _NO_CODES
        # In place, the first two one-code columns are filled by the same call once valid
        # (when it validates everything: at most two per-row code columns).
        fills = scalar_codes[:2] if direct and len(slots) <= 2 else []
        f1 = (stage[fills[0][0]], fills[0][1]) if fills else _NO_FILL
        f2 = (stage[fills[1][0]], fills[1][1]) if len(fills) > 1 else _NO_FILL
        what, bad_row, ts_sorted = _stage_batch(
            reward, ts, id_src, self._next_id, feats, stage["id"], stage["reward"],
            stage["timestamp"], stage["features"], stage["inv_norm"], base, check_prev,
            not direct, *c1, *c2, *f1, *f2)
        bad_code = (what - 3) // 2 if what >= 3 else -1
        if len(slots) > 2:
            for j in range(2, len(slots)):
                if what >= 0:
                    break
                bad_row, reason = _stage_codes(*slots[j][:3], base, slots[j][3])
                if bad_row >= 0:
                    what, bad_code = 3 + reason, j
        if what >= 0:
            self._raise_staging_error(what, bad_row, bad_code, per_row, direct, stage, base,
                                      n, feats, reward, ts)

        # ---- all validated: commit dictionaries, then publish the rows.
        for name, labels in new_labels:
            d = dicts[name]
            for label in labels:
                d.lookup[label] = len(d.labels)
                d.labels.append(label)
        for name, _ in scalar_codes:
            used.add(name)
        writes = scalar_codes[len(fills):] if fills else scalar_codes
        for name, _, _ in per_row:
            used.add(name)
        if dict_json or not _DICT_SET.isdisjoint(used):
            given = {name for name, _ in dict_json}
            writes.extend(dict_json)
            writes.extend((name, None) for name in DICT_FIELDS
                          if name in used and name not in given)
            used.update(given)
        if n and (store.ring or not ts_sorted):
            self._ts_sorted = False
        if not direct:
            writes.extend((name, stage[name]) for name in
                          ["id", "reward", "timestamp", "features", "inv_norm",
                           *[name for name, _, _ in per_row]])
        arrays = store._arrays
        if direct:
            if writes:
                rows = slice(base, base + n)
                for name, values in writes:
                    arrays[name][rows] = values
            store.publish(n)
        else:
            for dst, src in store.claim(n):
                whole = src.start == 0 and src.stop == n
                for name, values in writes:
                    arrays[name][dst] = (values if whole or values is None
                                         or type(values) is int else values[src])
        if self._groups:
            self._grouped_append(n)
        if n:
            self._next_id = self._next_id + n if ids is None else int(id_src[-1]) + 1
        return (np.arange(self._next_id - n, self._next_id, dtype=np.int64) if ids is None
                else id_src)

    def _raise_staging_error(self, what, bad_row, bad_code, per_row, direct, stage, base, n,
                             feats, reward, ts) -> None:
        """Undo the staged codes of never-used columns, then raise the staging error
        ``what`` (see :func:`_stage_batch`) for ``bad_row``."""
        if what >= 3 and direct:  # columns never used must stay all zero
            for name, _, _ in per_row:
                if name not in self._used:
                    stage[name][base:base + n] = 0
        if what == 2:
            raise ConfigError(f"state_features[{bad_row}]", feats[bad_row][:4].tolist(),
                              "must be finite with a norm within the float32 range")
        if what < 2:
            field, values = ("reward", reward) if what == 0 else ("timestamp", ts)
            raise ConfigError(f"{field}[{bad_row}]", float(values[bad_row]), "must be finite")
        name, src, mapping = per_row[bad_code]
        if (what - 3) % 2 == 0:
            raise ConfigError(f"{name}[{bad_row}]", int(src[bad_row]),
                              f"Categorical code out of range [0, {mapping.size})")
        raise ConfigError(f"{name}[{bad_row}]", "", "is required and must be non-empty")

    def _check_ids(self, ids, n: int) -> np.ndarray:
        """Explicit ids as int64 ``(n,)``: integers, strictly increasing, >= ``next_id``."""
        id_src = np.asarray(ids)
        if id_src.shape != (n,) or (n and id_src.dtype.kind not in "iu"):
            raise ConfigError("ids", id_src.shape, f"must be {n} integers")
        id_src = id_src.astype(np.int64)
        if n and (id_src[0] < self._next_id or np.any(id_src[1:] <= id_src[:-1])):
            raise ConfigError("ids", int(id_src[0]),
                              f"must be strictly increasing and >= next_id={self._next_id}")
        return id_src

    def _grouped_append(self, n: int) -> None:
        """Extend the per-label row lists with the last ``n`` rows (a ring drops them)."""
        if not self._groups or n == 0:
            return
        if self.ring:
            self._groups.clear()
            return
        self._sync_norms()   # scattered groups copy the new rows' norms
        first = len(self._store) - n
        for name, groups in self._groups.items():
            groups.append(self._store.view(name)[first:], first, self._store)

    def _check_fields(self, given: Mapping[str, Any]) -> None:
        if not _INPUT_FIELDS.issuperset(given):
            name = next(name for name in given if name not in _INPUT_FIELDS)
            raise ConfigError(name, given[name], "unknown episode field")
        for name in REQUIRED_FIELDS:
            if given.get(name) is None:
                raise ConfigError(name, None, "is required")

    def _redacted(self, field: str, value):
        """``value`` checked (:func:`check_value`) and redacted; None stays None."""
        if value is None:
            return None
        check_value(field, value)
        return redact(value, self._redact_keys)

    def _note_timestamps(self, ts: np.ndarray) -> None:
        if not self._ts_sorted or ts.size == 0:
            return
        if self.ring:
            self._ts_sorted = False
        elif len(self) and ts[0] < self._store.view("timestamp")[-1]:
            self._ts_sorted = False
        elif ts.size > 1 and (ts[1:] < ts[:-1]).any():
            self._ts_sorted = False

    def _encode(self, name: str, values, n: int) -> tuple[Any, list[str]]:
        """Codes and the labels that would be new; nothing is committed.

        Returns ``(code, new)`` with an int code for every row, or ``((src, mapping), new)``
        where row ``i`` gets code ``mapping[src[i]]`` (applied and range-checked by
        :func:`_stage_codes`). The caller adds the new labels once the batch is valid.
        """
        if values is None:
            return 0, []
        d = self._dicts[name]
        if isinstance(values, str):
            label = _label(values, name)   # a str subclass (e.g. an Enum member): its str()
            if not label and name in REQUIRED_FIELDS:
                raise ConfigError(name, values, "is required and must be non-empty")
            code = d.lookup.get(label)
            return (code, []) if code is not None else (len(d.labels), [label])
        if isinstance(values, Categorical):
            codes = np.asarray(values.codes)
            if codes.shape != (n,) or (n and codes.dtype.kind not in "iu"):
                raise ConfigError(name, codes.shape, f"Categorical codes must be {n} integers")
            raw = tuple(values.labels)
            cached = d.mappings.get(raw)
            # Every label known and every label a plain str (so equal tuples are equal
            # labels): the remap table is cached.
            if cached is not None and tuple(map(type, raw)) == cached[0]:
                return (codes, cached[1]), []
            uniq_labels, inverse = tuple([_label(v, name) for v in raw]), codes
        else:
            if isinstance(values, (list, tuple)) and any(
                    not isinstance(v, (int, float)) and type(v) is not str for v in values):
                # numpy would size a str-subclass member by its value but fill in its str()
                values = [_label(v, name) for v in values]
            arr = np.asarray(values)
            if arr.ndim == 0:
                return self._encode(name, _label(arr.item(), name), n)
            if arr.shape != (n,):
                raise ConfigError(name, arr.shape, f"must be a scalar or have shape ({n},)")
            if arr.dtype == object:
                arr = np.array([_label(v, name) for v in arr], dtype=object) if n else arr
            if arr.dtype.kind in "iu" and n and int(arr.max()) - int(arr.min()) < 4 * n + 64:
                # Small integer range: O(n) table lookup instead of a sort.
                lo = int(arr.min())
                shifted = arr - lo
                present = np.zeros(int(arr.max()) - lo + 1, dtype=bool)
                present[shifted] = True
                uniq = np.flatnonzero(present)
                table = np.zeros(present.size, dtype=np.int64)
                table[uniq] = np.arange(uniq.size)
                inverse = table[shifted]
                uniq_labels = [str(v + lo) for v in uniq.tolist()]
            else:
                uniq, inverse = np.unique(arr, return_inverse=True)
                uniq_labels = [_label(v, name) for v in uniq]
        mapping = np.empty(len(uniq_labels), dtype=np.int32)
        new_codes: dict[str, int] = {}     # label -> code, in order of first appearance
        for j, label in enumerate(uniq_labels):
            code = d.lookup.get(label)
            if code is None:
                code = new_codes.get(label)
                if code is None:
                    code = new_codes[label] = len(d.labels) + len(new_codes)
            mapping[j] = code
        new = list(new_codes)
        if isinstance(values, Categorical) and not new:
            types = tuple(map(type, raw))
            if all(t is str for t in types):
                if len(d.mappings) >= _MAX_CACHED_MAPPINGS:
                    d.mappings.clear()
                d.mappings[raw] = (types, mapping)   # dictionaries only grow: stays valid
        return (inverse, mapping), new

    # ================================================================= reading
    def column(self, name: str) -> np.ndarray:
        """Zero-copy view of one column for rows ``0..len-1``.

        Parameters
        ----------
        name : str
            One of :data:`FIELDS` (categoricals give their int32 codes; see
            :meth:`categories` and :meth:`labels`; dict fields give JSON strings or None;
            ``features`` is float32 ``(len, d)``), or ``"inv_norm"``.

        Raises
        ------
        ConfigError
            Unknown column name.
        """
        if name not in self._store.names:
            raise ConfigError("column", name, f"unknown column; one of {', '.join(FIELDS)}")
        if name == "inv_norm":
            self._sync_norms()
        return self._store.view(name)

    def categories(self, name: str) -> tuple[str, ...]:
        """Labels of a categorical column indexed by code (code 0 is "" = missing)."""
        return tuple(self._dict(name).labels)

    def code(self, name: str, label: str) -> int:
        """Code of ``label`` in a categorical column, or -1 if the label was never recorded."""
        return self._dict(name).lookup.get(_label(label, name), -1)

    def labels(self, name: str, rows=None) -> np.ndarray:
        """Decoded labels of a categorical column (a copy), object ``(len,)`` or ``(len(rows),)``."""
        table = np.array(self._dict(name).labels, dtype=object)
        codes = self._store.view(name)
        return table[codes if rows is None else codes[self._rows(rows)]]

    def _dict(self, name: str) -> _Dictionary:
        try:
            return self._dicts[name]
        except KeyError:
            raise ConfigError("column", name, "not a categorical column") from None

    def _rows(self, sel) -> np.ndarray:
        n = len(self)
        if sel is None:
            return np.arange(n, dtype=np.int64)
        if isinstance(sel, slice):
            return np.arange(n, dtype=np.int64)[sel]
        a = np.asarray(sel)
        if a.dtype == bool:
            if a.shape != (n,):
                raise ConfigError("rows", a.shape, f"a mask must have shape ({n},)")
            return np.flatnonzero(a)
        a = a.reshape(-1)
        if a.size and a.dtype.kind not in "iu":
            raise ConfigError("rows", a.dtype, "must be int row positions or a bool mask")
        a = a.astype(np.int64, copy=False)
        if a.size and (a.min() < 0 or a.max() >= n):
            bad = a[(a < 0) | (a >= n)][0]
            raise ConfigError("rows", int(bad), f"row position out of range [0, {n})")
        return a

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
            Bad ``sel`` (a mask of the wrong shape, positions out of range); in a buffer of
            its own (no ``source``), a dict field's :class:`JsonText` that is not JSON
            (``field[id N]``).
        StoreDamagedError
            A stored dict field's text is not JSON (another program wrote it into the store
            the rows came from); names the store, the field and the episode id, never the
            text. Nothing is changed.
        """
        idx = self._rows(sel)
        out_cols: dict[str, list] = {"id": self._store.view("id")[idx].tolist()}
        for name in CATEGORICAL_FIELDS:
            table = [None] + self._dicts[name].labels[1:]
            out_cols[name] = [table[c] for c in self._store.view(name)[idx].tolist()]
        out_cols["reward"] = self._store.view("reward")[idx].tolist()
        out_cols["timestamp"] = self._store.view("timestamp")[idx].tolist()
        for name in DICT_FIELDS:
            texts = self._store.view(name)[idx]
            try:
                out_cols[name] = [None if s is None else json.loads(s) for s in texts]
            except (TypeError, ValueError, RecursionError):
                raise self._damaged(name, texts, out_cols["id"]) from None
        if features:
            out_cols["state_features"] = self._store.view("features")[idx].tolist()
        keys = list(out_cols)
        return [dict(zip(keys, vals)) for vals in zip(*out_cols.values())]

    def _damaged(self, name: str, texts, ids: list) -> StoreDamagedError | ConfigError:
        """The error for a stored ``name`` text among ``texts`` (ids ``ids``) that is not
        JSON: the first such row, by episode id and the decoder's complaint (a position or a
        type name), never the text itself (it may hold a secret). StoreDamagedError when
        the rows came from a store (``source``); else the caller gave the text (a
        :class:`JsonText`), and it is a ConfigError naming ``field[id]``."""
        for t, i in zip(texts, ids):
            if t is None:
                continue
            try:
                json.loads(t)
            except (TypeError, ValueError, RecursionError) as exc:
                why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
                if self._source is None:
                    return ConfigError(f"{name}[id {i}]", type(t).__name__,
                                       f"a JsonText that is not JSON ({why})")
                return StoreDamagedError(self._source, f"a stored {name} value (episode id "
                                         f"{i}) is not JSON ({why})")
        if self._source is None:
            return ConfigError(name, None, "a JsonText that is not JSON")
        return StoreDamagedError(self._source, f"a stored {name} value is not JSON")

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
        mask = self._mask(filters)
        if mask is None:
            return np.arange(len(self), dtype=np.int64)
        if mask is False:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(mask)

    def _mask(self, filters: Mapping[str, Any]):
        mask = None
        for name, label in filters.items():
            if name not in self._dicts:
                raise ConfigError(name, label, "not a categorical field to select on")
            if label is None:
                continue
            code = self._dicts[name].lookup.get(_label(label, name))
            if code is None:
                return False
            m = self._store.view(name) == code
            mask = m if mask is None else (mask & m)
        return mask

    def select_slice(self, **filters) -> slice | None:
        """The selected rows as one ``slice`` when they are contiguous, else None."""
        rows = self.select(**filters)
        if rows.size == 0:
            return slice(0, 0)
        if int(rows[-1]) - int(rows[0]) + 1 == rows.size:
            return slice(int(rows[0]), int(rows[-1]) + 1)
        return None

    def view(self, **filters) -> dict[str, np.ndarray]:
        """Every column restricted to the selected rows.

        Zero-copy views (``np.shares_memory`` with the buffer) when the selected rows are
        contiguous, e.g. one tenant's rows recorded in one run; otherwise gathered copies.
        """
        sl = self.select_slice(**filters)
        sel = sl if sl is not None else self.select(**filters)
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
            Non-negative, finite, positive sum; shape ``(len,)`` or, with ``candidates``,
            ``(len(candidates),)``.
        candidates : int array or bool mask, optional
            Sample only among these rows.

        Returns
        -------
        numpy.ndarray
            int64 ``(n,)``, every value in ``[0, len)`` (never an unwritten slot, case BUF-02).

        Raises
        ------
        ConfigError
            Negative n, bad weights, or n > 0 with nothing to sample from.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ConfigError("n", n, "must be a non-negative integer")
        pool = None if candidates is None else self._rows(candidates)
        m = len(self) if pool is None else pool.size
        if n and m == 0:
            raise ConfigError("n", n, "nothing to sample from (no rows)")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        if weights is None:
            pos = rng.integers(0, m, size=int(n), dtype=np.int64)
        else:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (m,):
                raise ConfigError("weights", w.shape, f"must have shape ({m},)")
            if not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ConfigError("weights", "negative or non-finite", "must be >= 0 and finite")
            cdf = np.cumsum(w)
            if not cdf[-1] > 0:
                raise ConfigError("weights", 0.0, "must have a positive sum")
            u = rng.random(int(n)) * cdf[-1]
            pos = np.minimum(np.searchsorted(cdf, u, side="right"), m - 1).astype(np.int64)
            # side="right" never picks a zero-weight row: cdf is flat across it.
        return pos if pool is None else pool[pos]

    def search(self, query, k: int, **filters):
        """Cosine top-k over the rows matching ``filters`` (see :meth:`select`).

        Returns ``(rows, scores)`` as :meth:`dyna.index.ExactIndex.search`. A filter on one
        categorical column pays only for the selected rows: the first such search builds
        per-label row lists for that column (one stable sort of its codes), kept up to
        date as rows are recorded and rebuilt after deletions. A label whose rows are
        contiguous is searched as a zero-copy slice; a label whose rows are scattered
        among others' gets a contiguous copy of its features (float32 ``(m, d)``, counted
        by :meth:`nbytes`), built on its first search and extended as rows arrive, so its
        search reads ``m`` rows in order rather than gathering them. Several filters at
        once (or a ring buffer) use one mask pass over the columns.
        """
        active = {name: label for name, label in filters.items() if label is not None}
        self._sync_norms()   # before a group copies any norms
        if not active:
            return self.index.search(query, k)
        if len(active) == 1 and not self.ring:
            (name, label), = active.items()
            if name not in self._dicts:
                raise ConfigError(name, label, "not a categorical field to select on")
            code = self._dicts[name].lookup.get(_label(label, name))
            group = None
            if code is not None:
                groups = self._groups.get(name)
                if groups is None:
                    groups = self._groups[name] = _Groups(self._store.view(name))
                group = groups.groups.get(code)
            if group is None:
                return self.index.search(query, k, candidates=slice(0, 0))
            sl = group.contiguous()
            if sl is not None:
                return self.index.search(query, k, candidates=sl)
            pos, scores = group.searchable(self._store, self._dim).search(query, k)
            return group.rows.view("row")[pos], scores
        sl = self.select_slice(**filters)
        cand = self.select(**filters) if sl is None else sl
        return self.index.search(query, k, candidates=cand)

    # ================================================================= undo
    def savepoint(self) -> tuple:
        """A mark of the buffer's state for :meth:`rollback` (growable buffers only).

        Records the row count, the next id, the size of every label dictionary and which
        optional columns hold values. Between the mark and :meth:`rollback` only appends
        (:meth:`record`, :meth:`record_batch`) may happen.

        Raises
        ------
        ConfigError
            A ring buffer (its appends overwrite old rows, which cannot be restored).
        """
        if self.ring:
            raise ConfigError("ring", True, "a ring buffer overwrites rows; it has no savepoint")
        return (len(self._store), self._next_id,
                {name: len(d.labels) for name, d in self._dicts.items()},
                frozenset(self._used), self._ts_sorted, self._normed)

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
        n0, next_id, n_labels, used, ts_sorted, normed = mark
        store = self._store
        n = len(store)
        if self.ring or n < n0 or next_id > self._next_id:
            raise ConfigError("mark", (n0, next_id), "not a savepoint of this buffer's rows "
                              "(rows were deleted or moved since)")
        lo, hi = store._start + n0, store._start + n
        for name, arr in store._arrays.items():
            if arr.dtype == object:
                arr[lo:hi] = None    # free the removed rows' JSON texts
            elif name in _OPTIONAL_SET and name not in used:
                arr[lo:hi] = 0       # a column that never held a value stays all zero
        store._len = n0
        for name, d in self._dicts.items():
            k = n_labels[name]
            if len(d.labels) > k:
                for label in d.labels[k:]:
                    del d.lookup[label]
                del d.labels[k:]
                d.mappings = {raw: m for raw, m in d.mappings.items()
                              if m[1].size == 0 or int(m[1].max()) < k}
        self._used = set(used)
        self._next_id = next_id
        self._ts_sorted = ts_sorted
        self._normed = min(normed, n0)
        if n > n0:
            self._groups.clear()
        return n - n0

    # ================================================================= deleting
    def delete(self, sel) -> int:
        """Delete rows (int positions or a bool mask ``(len,)``); survivors keep their order.

        Returns
        -------
        int
            Number of rows deleted.
        """
        idx = self._rows(sel)
        if idx.size == 0:
            return 0
        keep = np.ones(len(self), dtype=bool)
        keep[idx] = False
        return self._keep_mask(keep)

    def _keep_mask(self, keep: np.ndarray) -> int:
        n = len(self)
        if self._store.in_write_order:
            survivors = np.flatnonzero(keep)
        else:
            order = self._store.order()
            survivors = order[keep[order]]
        deleted = n - survivors.size
        if deleted:
            if not self.ring:
                # Survivors are in row order, so those whose norm is stored stay a prefix.
                self._normed = int(np.searchsorted(survivors, self._normed))
            self._store.keep(survivors, blank=self._blank_columns())
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
        t = _finite_scalar("t", t)
        ts = self._store.view("timestamp")
        if self._ts_sorted and not self.ring:
            n = int(np.searchsorted(ts, t, side="left"))
            self._store.drop_prefix(n, release=self._used)
            self._normed = max(self._normed - n, 0)
            if n:
                self._groups.clear()
            return n
        return self._keep_mask(ts >= t)

    def compact(self, keep: int) -> int:
        """Keep the newest ``keep`` rows of every (tenant_id, task_type); return rows deleted.

        "Newest" is by timestamp, ties by id (write order). One O(n) compiled pass from the
        newest row backwards counts rows per group; rows out of time order are first put in
        order with one stable argsort of the timestamps.

        Raises
        ------
        ConfigError
            ``keep`` not a non-negative integer.
        """
        if isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or keep < 0:
            raise ConfigError("keep", keep, "must be a non-negative integer")
        n = len(self)
        if n == 0:
            return 0
        n_task = len(self._dicts["task_type"].labels)
        n_groups = len(self._dicts["tenant_id"].labels) * n_task
        group = self._store.view("tenant_id").astype(np.int64) * n_task
        group += self._store.view("task_type")
        if n_groups > max(4 * n, 1 << 20):
            _, group = np.unique(group, return_inverse=True)
            n_groups = int(group.max()) + 1
        if self._ts_sorted and not self.ring:
            keep_mask = _keep_newest(group, int(keep), n_groups)
        else:
            order = self._store.order()
            order = order[np.argsort(self._store.view("timestamp")[order], kind="stable")]
            keep_mask = np.zeros(n, dtype=bool)
            keep_mask[order] = _keep_newest(group[order], int(keep), n_groups)
        return self._keep_mask(keep_mask)

    def copy(self) -> ExperienceBuffer:
        """An independent copy (columns, dictionaries, next id); capacity shrinks to ``len``."""
        new = ExperienceBuffer.__new__(ExperienceBuffer)
        new.__dict__.update(self.__dict__)
        new._store = self._store.copy()
        new._dicts = {}
        for name, d in self._dicts.items():
            nd = _Dictionary()
            nd.labels, nd.lookup = list(d.labels), dict(d.lookup)
            new._dicts[name] = nd
        new._used = set(self._used)
        new._groups = {}
        new.index = ExactIndex.over(new._store, vectors="features", inv_norm="inv_norm",
                                    stamp="id", prepare=_norms_hook(new))
        return new

    def clear(self) -> None:
        """Delete every row (ids keep increasing; dictionaries are kept)."""
        self._store.clear(blank=self._blank_columns())
        self._groups.clear()
        self._normed = 0
        self._ts_sorted = True

    # ================================================================= polars
    def to_polars(self):
        """All rows as a polars DataFrame (a copy), in row order.

        Columns: ``id`` Int64, the categoricals as String (null when missing), ``reward`` and
        ``timestamp`` Float64, the dict fields as JSON String (null when absent), and
        ``features`` as ``Array(Float32, d)``.
        """
        import polars as pl  # noqa: PLC0415 - keeps import of dyna.buffer light

        cols = {"id": pl.Series("id", self._store.view("id"), dtype=pl.Int64)}
        for name in CATEGORICAL_FIELDS:
            table = pl.Series(name, [None] + self._dicts[name].labels[1:], dtype=pl.String)
            cols[name] = table.gather(self._store.view(name))
        cols["reward"] = pl.Series("reward", self._store.view("reward"), dtype=pl.Float64)
        cols["timestamp"] = pl.Series("timestamp", self._store.view("timestamp"),
                                      dtype=pl.Float64)
        for name in DICT_FIELDS:
            cols[name] = pl.Series(name, self._store.view(name).tolist(), dtype=pl.String)
        cols["features"] = pl.Series("features", self._store.view("features"),
                                     dtype=pl.Array(pl.Float32, self._dim))
        return pl.DataFrame(cols)

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
        import polars as pl  # noqa: PLC0415

        n = df.height
        if dim is None:
            dim = df.schema["features"].size if "features" in df.columns else 64
        buf = cls(dim, capacity or max(n, 1), ring=ring, **kwargs)
        cols: dict[str, Any] = {}
        for name in CATEGORICAL_FIELDS:
            if name in df.columns:
                s = df.get_column(name).cast(pl.String)
                labels = s.unique(maintain_order=True)
                codes = s.cast(pl.Enum(labels.drop_nulls().to_list())).to_physical()
                codes = codes.fill_null(len(labels.drop_nulls())).to_numpy().astype(np.int64)
                cols[name] = Categorical(codes, labels.drop_nulls().to_list() + [""])
        for name in ("reward", "timestamp"):
            if name in df.columns:
                cols[name] = df.get_column(name).cast(pl.Float64).to_numpy()
        for name in DICT_FIELDS:
            if name in df.columns:
                cols[name] = _parse_json_texts(name, df.get_column(name).to_list(),
                                               "is not JSON")
        if "features" in df.columns:
            cols["state_features"] = df.get_column("features").to_numpy().astype(np.float32)
        ids = df.get_column("id").to_numpy() if "id" in df.columns else None
        if "reward" not in cols:
            raise ConfigError("reward", None, "is required")
        buf.record_batch(ids=ids, **cols)
        return buf


def _float_column(field: str, values, n: int | None) -> np.ndarray:
    """float64 (n,) column (finiteness is checked by the caller); a scalar is broadcast
    when n is given."""
    if type(values) is np.ndarray and values.dtype == np.float64 and values.ndim == 1 and (
            n is None or values.shape[0] == n):
        return values    # the common case, without conversion calls
    arr = _float_array(field, values, np.float64)
    if arr.ndim == 0 and n is not None:
        arr = np.full(n, float(arr))
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        raise ConfigError(field, arr.shape, "must be a 1-D array" + ("" if n is None else f" of length {n}"))
    return arr


def _json_texts(field: str, texts, n: int) -> np.ndarray:
    """JsonText contents as an object array ``(n,)`` of str or None (validated)."""
    if isinstance(texts, (str, bytes, Mapping)) or len(texts) != n:
        raise ConfigError(field, type(texts).__name__, f"JsonText must hold {n} texts")
    arr = np.empty(n, dtype=object)
    try:
        arr[:] = texts
    except ValueError:   # e.g. a 2-D array of texts
        raise ConfigError(field, np.shape(texts), f"JsonText must hold {n} texts") from None
    for i, t in enumerate(arr):
        if t is not None and type(t) is not str:
            raise ConfigError(f"{field}[{i}]", type(t).__name__, "JsonText holds str or None")
    return arr


def _parse_json_texts(field: str, texts, what: str = "JsonText is not JSON") -> list:
    """The values of JSON texts (None stays None); text that is not JSON (or not text)
    raises ConfigError naming ``field[row]``, with a short prefix of the text redacted
    (:func:`dyna.redact.redact_text`: never a secret in the message)."""
    out = []
    for i, t in enumerate(texts):
        try:
            out.append(None if t is None else json.loads(t))
        except (TypeError, ValueError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            shown = _short_redacted(t) if isinstance(t, str) else type(t).__name__
            raise ConfigError(f"{field}[{i}]", shown, f"{what} ({why})") from None
    return out


def _short_redacted(text: str, limit: int = 40) -> str:
    """At most ``limit`` characters of ``text`` after redaction (then ``...``)."""
    shown = redact_text(text[:4096])   # bounded work for a huge hostile text
    return shown if len(shown) <= limit else shown[:limit] + "..."


def _float_array(field: str, values, dtype) -> np.ndarray:
    """``np.asarray(values, dtype)``; anything that is not numbers, or an integer beyond the
    float range (``10**400``), raises ConfigError naming the field (and the row)."""
    try:
        return np.asarray(values, dtype=dtype)
    except OverflowError:
        raise _overflow(field, values) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(field, type(values).__name__, f"must be numbers ({exc})") from None


def _overflow(field: str, values) -> ConfigError:
    """ConfigError naming the first integer of ``values`` (nested up to 2 deep) that float
    cannot hold."""
    def bad(v):
        try:
            float(v)
        except OverflowError:
            return True
        except (TypeError, ValueError):
            return False
        return False

    if not isinstance(values, (str, bytes, Mapping)) and hasattr(values, "__iter__"):
        for i, v in enumerate(values):
            if bad(v):
                return ConfigError(f"{field}[{i}]", short_value(v), "must be finite: beyond "
                                   "the float64 range (|x| <= 1.8e308)")
            if isinstance(v, (list, tuple)):
                for j, w in enumerate(v):
                    if bad(w):
                        return ConfigError(f"{field}[{i}][{j}]", short_value(w), "must be "
                                           "finite: beyond the float64 range")
    return ConfigError(field, short_value(values), "must be finite: beyond the float64 range "
                       "(|x| <= 1.8e308)")


def _norms_hook(buf: ExperienceBuffer) -> Callable[[], None]:
    """``buf._sync_norms`` for its index, through a weak reference: a bound method would make
    a buffer -> index -> buffer cycle, kept alive (with its arrays) until a full collection."""
    ref = weakref.ref(buf)

    def sync() -> None:
        b = ref()
        if b is not None:
            b._sync_norms()

    return sync


def _finite_scalar(field: str, value) -> float:
    return finite_float(field, value)


def short_value(value):
    """``value`` fit for an error message: an integer too long to print in full (10**400)
    becomes a string such as ``"~1e400"``; anything else is returned as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 18:
        return f"{'-' if value < 0 else ''}~1e{int(math.log10(abs(value)))}"
    return value


def finite_float(field: str, value) -> float:
    """A finite number as float.

    Raises
    ------
    ConfigError
        Naming ``field``: not a number (bool included), NaN or infinite, or an integer
        beyond the float64 range (|x| > 1.8e308, e.g. ``10**400``; shown shortened).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(field, value, "must be a number")
    try:
        v = float(value)
    except OverflowError:
        raise ConfigError(field, short_value(value), "must be finite: beyond the float64 "
                          "range (|x| <= 1.8e308)") from None
    if not math.isfinite(v):
        raise ConfigError(field, value, "must be finite")
    return v


#: Deepest nesting of containers (dicts, lists, tuples) in a dict field's value (and in a
#: query's dicts): ``{"a": [1]}`` has depth 2. Deeper values are refused with ConfigError
#: before they are redacted or hashed (whose recursion would otherwise fail near depth
#: 1,000 with a RecursionError).
MAX_DEPTH = 64


def _check_text(field: str, text: str) -> None:
    """Refuse text UTF-8 cannot encode (a lone surrogate such as "\\ud800"), naming the
    field and the character, never the text (it may hold a secret)."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(field, text[exc.start], f"a lone surrogate at position {exc.start}; "
                          "text must be valid Unicode") from None


def check_value(field: str, value) -> None:
    """Check a JSON-like value before it is redacted and stored.

    Walks the value without recursion: containers (dict, list, tuple) nested at most
    :data:`MAX_DEPTH` deep, and every string (dict keys included) encodable as UTF-8.

    Raises
    ------
    ConfigError
        Naming ``field``: nesting deeper than :data:`MAX_DEPTH`, or a lone surrogate in a
        string (the character and its position are named, the string is not).
    """
    t = type(value)
    if t is str:
        _check_text(field, value)
        return
    if t not in _CONTAINERS and not isinstance(value, (Mapping, list, tuple)):
        return
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(field, f"depth > {MAX_DEPTH}", f"nesting deeper than "
                              f"MAX_DEPTH={MAX_DEPTH} containers is refused")
        if isinstance(v, Mapping):
            for k in v:
                if type(k) is str and not k.isascii():
                    _check_text(field, k)
            v = v.values()
        for x in v:
            tx = type(x)
            if tx is str:
                if not x.isascii():
                    _check_text(field, x)
            elif tx in _CONTAINERS or isinstance(x, (Mapping, list, tuple)):
                stack.append((x, depth + 1))

_CONTAINERS = frozenset((dict, list, tuple))


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(type(obj).__name__)


def _to_json(field: str, value) -> str | None:
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise ConfigError(field, type(value).__name__, f"must be JSON serialisable ({exc})") from None
