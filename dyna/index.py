"""Similarity index over experience features: exact cosine top-k, and an optional ANN backend.

:class:`ExactIndex` answers cosine top-k queries exactly. It keeps, for every row, the raw
float32 vector, its inverse L2 norm (0 for a zero vector) and a recency stamp, and scores a
query ``q`` as ``(x . q_hat) * inv_norm(x)``:

* one query is one BLAS ``sgemv`` over the stored matrix (into one float32 score per row)
  followed by a single compiled pass that scales by the inverse norms and keeps a size-k
  heap, testing chunks of scores against the heap's threshold vectorised (no sort);
* a batch of queries is a loop over blocks of rows, each one ``sgemm`` of the block against
  all queries and a compiled per-query heap update run in parallel, so the memory used is one
  block of scores, never the full ``q x N`` matrix;
* a filtered search (``candidates``) touches only the candidate rows: a contiguous range is a
  zero-copy slice, anything else is gathered row by row inside the compiled kernel.

Ordering is total and deterministic: score descending, ties broken by recency (larger stamp
first). Zero vectors score exactly 0 (never NaN); a zero query raises :class:`ConfigError`
(a ``ValueError``) because it has no direction, which is our documented choice for case
BUF-04. Asking for more neighbours than there are candidates returns all of them.

:class:`AnnIndex` offers the same ``search`` signature over faiss HNSW (``pip install
"dyna[ann]"``), and :func:`recall_at_k` measures it against :class:`ExactIndex`.

:class:`ColumnStore` is the storage primitive both this index and
:class:`dyna.buffer.ExperienceBuffer` use: equal-length numpy columns that grow by amortised
doubling (never ``np.resize``), drop a prefix in O(1), compact in place, or act as a ring.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic

from dyna.errors import ConfigError

__all__ = ["AnnIndex", "ColumnStore", "ExactIndex", "copy_checked", "copy_with_inverse_norms",
           "inverse_norms", "recall_at_k", "search_arrays"]

# Rows per block in batched search: a block of scores is (n_queries, _BLOCK_ROWS) float32.
_BLOCK_ROWS = 2048


# =============================================================================== storage

@numba.njit(cache=True, nogil=True)
def _compact_1d(arr, base, idx):  # pragma: no cover - compiled
    for i in range(idx.shape[0]):
        arr[base + i] = arr[base + idx[i]]


@numba.njit(cache=True, nogil=True)
def _compact_2d(arr, base, idx):  # pragma: no cover - compiled
    d = arr.shape[1]
    for i in range(idx.shape[0]):
        src = base + idx[i]
        dst = base + i
        if src != dst:
            for j in range(d):
                arr[dst, j] = arr[src, j]


class ColumnStore:
    """Equal-length numpy columns sharing one row layout (growable or ring).

    Logical row ``r`` (``0 <= r < len``) of a growable store lives at physical position
    ``start + r``; :meth:`view` is the zero-copy slice ``array[start:start + len]``. Growth
    allocates a new array of twice the capacity with ``np.empty`` and copies the live rows
    (amortised O(1) per row; untouched capacity is never resident). :meth:`drop_prefix` is
    O(1). In ring mode the capacity is fixed, row ``r`` is slot ``r`` and writes past the end
    overwrite the oldest slots.

    Parameters
    ----------
    specs : mapping of str to (dtype, tuple)
        Column name to dtype and the per-row shape (``()`` for scalars, ``(d,)`` for vectors).
    capacity : int
        Initial (growable) or fixed (ring) number of rows, >= 1.
    ring : bool
        Fixed-capacity ring buffer instead of a growable one.
    """

    def __init__(self, specs: Mapping[str, tuple], capacity: int, *, ring: bool = False):
        capacity = _positive_int("capacity", capacity)
        self._specs = {name: (np.dtype(dt), tuple(tail)) for name, (dt, tail) in specs.items()}
        self._cap = capacity
        self._start = 0
        self._len = 0
        self._head = 0  # ring only: the slot the next row is written to
        self.ring = bool(ring)
        self._arrays = {name: self._alloc(name, capacity) for name in self._specs}

    def _alloc(self, name: str, cap: int) -> np.ndarray:
        dtype, tail = self._specs[name]
        # Zeroed (calloc: pages are only resident once written); object arrays hold None.
        return np.zeros((cap,) + tail, dtype=dtype) if dtype != object else \
            np.full((cap,) + tail, None, dtype=object)

    # ------------------------------------------------------------------ shape
    def __len__(self) -> int:
        return self._len

    @property
    def capacity(self) -> int:
        """Number of rows the current arrays can hold."""
        return self._cap

    @property
    def names(self) -> tuple[str, ...]:
        """Column names."""
        return tuple(self._specs)

    @property
    def is_full(self) -> bool:
        """True for a ring store holding ``capacity`` rows; growable stores are never full."""
        return self.ring and self._len == self._cap

    def view(self, name: str) -> np.ndarray:
        """Zero-copy view of the ``len`` live rows of column ``name`` (row order as stored)."""
        return self._arrays[name][self._start:self._start + self._len]

    def order(self) -> np.ndarray:
        """Logical row indices in write order (oldest first), int64 ``(len,)``."""
        if self.ring and self._len == self._cap and self._head:
            return np.roll(np.arange(self._len, dtype=np.int64), -self._head)
        return np.arange(self._len, dtype=np.int64)

    @property
    def in_write_order(self) -> bool:
        """True when logical row order equals write order (always, unless a wrapped ring)."""
        return not (self.ring and self._len == self._cap and self._head)

    # ------------------------------------------------------------------ writing
    def claim(self, n: int) -> list[tuple[slice, slice]]:
        """Reserve room for ``n`` new rows; return ``(destination, source)`` slice pairs.

        The destination slices index the physical arrays (see :meth:`array`), the source
        slices index the batch of ``n`` rows. A ring keeps only the last ``capacity`` rows
        of the batch and may return two pairs when the write crosses the end. The caller
        must write every column for every pair; ``len`` is already updated.
        """
        if n <= 0:
            return []
        if not self.ring:
            self._reserve(n)
            lo = self._start + self._len
            self._len += n
            return [(slice(lo, lo + n), slice(0, n))]
        cap = self._cap
        n_eff = min(n, cap)
        skip = n - n_eff
        first = (self._head + skip) % cap
        pairs = []
        take = min(n_eff, cap - first)
        pairs.append((slice(first, first + take), slice(skip, skip + take)))
        if take < n_eff:
            pairs.append((slice(0, n_eff - take), slice(skip + take, n)))
        self._head = (self._head + n) % cap
        self._len = min(self._len + n, cap)
        return pairs

    def array(self, name: str) -> np.ndarray:
        """The whole physical array of column ``name`` (capacity rows; only for writers)."""
        return self._arrays[name]

    def free_start(self, n: int) -> int:
        """Reserve room for ``n`` rows after the live ones (growable stores only) and return
        the physical position of the first; write them through :meth:`array`, then make
        them live with :meth:`publish`. Until then they are invisible."""
        if self.ring:
            raise ConfigError("ring", True, "free rows of a ring are live rows; use claim()")
        self._reserve(n)
        return self._start + self._len

    def publish(self, n: int) -> None:
        """Make the ``n`` rows written after the live ones (see :meth:`free_start`) live."""
        self._len += n

    def _reserve(self, n: int) -> None:
        need = self._len + n
        if self._start + need <= self._cap:
            return
        if need <= self._cap // 2:
            # Plenty of room once the dropped prefix is reclaimed: shift the live rows to
            # the front (the next shift is at least cap/2 appends away, so amortised O(1)).
            s, m = self._start, self._len
            for arr in self._arrays.values():
                arr[:m] = arr[s:s + m]
                if arr.dtype == object:
                    arr[m:s + m] = None
            self._start = 0
            return
        cap = self._cap
        while cap < need:
            cap *= 2
        s, m = self._start, self._len
        for name, arr in self._arrays.items():
            new = self._alloc(name, cap)
            new[:m] = arr[s:s + m]
            self._arrays[name] = new
        self._cap = cap
        self._start = 0

    # ------------------------------------------------------------------ deleting
    def drop_prefix(self, n: int, release=None) -> None:
        """Forget the first ``n`` rows in O(1) (growable stores only).

        ``release`` names the object columns whose dropped entries are reset to None so the
        Python objects are freed (default: every object column; pass only the columns that
        can hold objects to keep this O(1)).
        """
        if self.ring:
            raise ConfigError("ring", True, "drop_prefix needs a growable store; use keep()")
        n = min(max(int(n), 0), self._len)
        for name, arr in self._arrays.items():
            if arr.dtype == object and (release is None or name in release):
                arr[self._start:self._start + n] = None  # release the Python objects
        self._start += n
        self._len -= n
        if self._len == 0:
            self._start = 0

    def keep(self, idx: np.ndarray, *, blank: Iterable[str] = ()) -> None:
        """Keep only logical rows ``idx`` (int64, distinct), in that order, compacting in place.

        Strictly increasing ``idx`` is compacted in place by a compiled forward copy (no
        temporary); any other order goes through one temporary gather. A ring store is
        linearised: afterwards its rows are slots ``0..m-1`` and the next write goes to ``m``.
        Columns named in ``blank`` hold only their initial value (0, or None) in every live
        row, as the caller vouches: they are left as they are, which keeps that true.
        """
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        m = idx.shape[0]
        increasing = m < 2 or bool(np.all(idx[1:] > idx[:-1]))
        base = self._start
        blank = frozenset(blank)
        for name, arr in self._arrays.items():
            if name in blank:
                continue
            live = arr[base:base + self._len]
            if arr.dtype == object or not increasing:
                live[:m] = live[idx]
                if arr.dtype == object:
                    live[m:] = None
            elif arr.ndim == 1:
                _compact_1d(arr, base, idx)
            else:
                _compact_2d(arr.reshape(arr.shape[0], -1), base, idx)
        self._len = m
        if self.ring:
            self._head = m % self._cap
        if m == 0:
            self._start = 0

    def copy(self) -> ColumnStore:
        """An independent copy of the live rows (a ring keeps its capacity and slots)."""
        new = ColumnStore.__new__(ColumnStore)
        new.__dict__.update(self.__dict__)
        if self.ring:
            new._arrays = {name: arr.copy() for name, arr in self._arrays.items()}
        else:
            new._cap = max(self._len, 1)
            new._start = 0
            new._arrays = {}
            for name in self._specs:
                arr = self._alloc(name, new._cap)
                arr[:self._len] = self.view(name)
                new._arrays[name] = arr
        return new

    def clear(self, *, blank: Iterable[str] = ()) -> None:
        """Remove every row (capacity is kept); ``blank`` as in :meth:`keep`."""
        self.keep(np.zeros(0, dtype=np.int64), blank=blank)
        self._head = 0

    def nbytes(self) -> int:
        """Bytes of the live rows of every column (object columns count their pointers)."""
        return sum(self.view(name).nbytes for name in self._specs)


def _positive_int(field: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(field, value, "must be a positive integer")
    return int(value)


# Norms below this are treated as zero vectors (their inverse would overflow float32).
_TINY_NORM = 1e-30
_HUGE_SQ = float(np.finfo(np.float32).max) ** 2


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")
def _inv_from_sq(X, i, acc):  # pragma: no cover - compiled
    """1 / ||X[i]|| from the float32 sum of squares ``acc``; NaN if the row is invalid.

    Redoes the row in float64 only when float32 over- or underflowed; (near-)zero rows give 0.
    """
    if acc > np.float32(1e-30) and acc < np.float32(1e37):
        return np.float32(1.0) / np.sqrt(acc)
    acc64 = 0.0
    for j in range(X.shape[1]):
        w = np.float64(X[i, j])
        acc64 += w * w
    if not acc64 < _HUGE_SQ:
        return np.float32(np.nan)
    return np.float32(1.0 / np.sqrt(acc64)) if acc64 > _TINY_NORM * _TINY_NORM else np.float32(0.0)


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _inv_norms(X, out):  # pragma: no cover - compiled
    """out[i] = 1 / ||X[i]||; returns the first invalid row or -1."""
    for i in range(X.shape[0]):
        acc = np.float32(0.0)
        for j in range(X.shape[1]):
            v = X[i, j]
            acc += v * v
        inv = _inv_from_sq(X, i, acc)
        if inv != inv:
            return i
        out[i] = inv
    return -1


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def copy_with_inverse_norms(X, dst, base, inv_dst):  # pragma: no cover - compiled
    """``dst[base + i] = X[i]`` and ``inv_dst[base + i] = 1 / ||X[i]||`` in one pass over X.

    The same arithmetic as :func:`inverse_norms`. Returns the first invalid row (NaN, inf,
    norm beyond float32) or -1; rows up to it have been written.
    """
    for i in range(X.shape[0]):
        acc = np.float32(0.0)
        for j in range(X.shape[1]):
            v = X[i, j]
            dst[base + i, j] = v
            acc += v * v
        inv = _inv_from_sq(X, i, acc)
        if inv != inv:
            return i
        inv_dst[base + i] = inv
    return -1


# copy_checked copies and checks this many bytes at a time (they stay in the L2 cache).
_CHECK_BYTES = 65536


@intrinsic
def _memcpy_rows(typingctx, dst, src):  # pragma: no cover - compiled
    """Copy ``src`` (C-contiguous) onto the first ``len(src)`` rows of ``dst`` (C-contiguous,
    same dtype and row shape) with the C library's ``memcpy``, which moves large blocks
    faster than an element loop."""
    if dst.layout != "C" or src.layout != "C" or dst.dtype != src.dtype:
        raise numba.core.errors.TypingError("_memcpy_rows needs C-contiguous arrays of one dtype")
    sig = types.void(dst, src)

    def codegen(context, builder, signature, args):
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[1])(context, builder, args[1])
        nbytes = builder.mul(s.nitems, context.get_constant(types.intp, src.dtype.bitwidth // 8))
        cgutils.raw_memcpy(builder, d.data, s.data, nbytes, 1)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def copy_checked(X, dst, base):  # pragma: no cover - compiled
    """``dst[base + i] = X[i]``, checking that every row would get a valid inverse norm.

    X and dst are C-contiguous float32 with the same row length. The rows are copied with
    ``memcpy`` in chunks of ``_CHECK_BYTES``, each checked while it is in the L2 cache: one
    running float32 sum of squares over the batch, vectorised (NaN and inf propagate:
    ``reassoc`` and ``contract`` are the only fast-math flags). If it is finite and below
    1e37, every element is finite and every row's norm is far inside the float32 range.
    Otherwise the rows are checked one by one by :func:`_inv_norms`, so a large but valid
    batch is accepted. Returns the first invalid row or -1; the rows are copied either way
    (the caller discards them on error). No norm is stored: the owner computes them later
    (see :meth:`dyna.buffer.ExperienceBuffer.search`).
    """
    n = X.shape[0]
    out = dst[base:base + n]
    acc = np.float32(0.0)
    step = max(1, _CHECK_BYTES // max(1, X.shape[1] * 4))
    for a in range(0, n, step):   # chunks stay in cache between the copy and the check
        chunk = out[a:a + step]
        _memcpy_rows(chunk, X[a:a + step])
        flat = chunk.reshape(chunk.size)
        for j in range(flat.shape[0]):
            acc += flat[j] * flat[j]
    if acc < np.float32(1e37):   # False for NaN and inf
        return -1
    return _inv_norms(X, np.empty(n, np.float32))


def inverse_norms(vectors: np.ndarray, field: str = "vectors") -> np.ndarray:
    """Inverse L2 norms of the rows of a float32 matrix; 0 for zero rows.

    Squares are summed in float32, and again in float64 for a row where float32 over- or
    underflowed. Rows whose norm is below 1e-30 count as zero vectors (inverse 0, so they
    score exactly 0).

    Parameters
    ----------
    vectors : numpy.ndarray
        float32, shape ``(n, d)``.
    field : str
        Name used in errors.

    Returns
    -------
    numpy.ndarray
        float32, shape ``(n,)``.

    Raises
    ------
    ConfigError
        If a row holds NaN or inf, or its norm exceeds the float32 range (the row is named).
    """
    out = np.empty(vectors.shape[0], dtype=np.float32)
    bad = _inv_norms(vectors, out)
    if bad >= 0:
        raise ConfigError(f"{field}[{bad}]", vectors[bad][:4].tolist(),
                          "must be finite with a norm within the float32 range")
    return out


# =============================================================================== kernels

@numba.njit(cache=True, nogil=True, inline="always")
def _less(s1, t1, s2, t2):  # pragma: no cover - compiled
    """Heap order: (score, stamp) lexicographic; the root is the worst kept entry."""
    return s1 < s2 or (s1 == s2 and t1 < t2)


@numba.njit(cache=True, nogil=True)
def _heap_add(hs, ht, hi, size, k, s, t, i):  # pragma: no cover - compiled
    """Offer (score s, stamp t, row i) to a min-heap of capacity k; return the new size."""
    if size < k:
        j = size
        while j > 0:
            p = (j - 1) >> 1
            if _less(s, t, hs[p], ht[p]):
                hs[j] = hs[p]
                ht[j] = ht[p]
                hi[j] = hi[p]
                j = p
            else:
                break
        hs[j] = s
        ht[j] = t
        hi[j] = i
        return size + 1
    if not _less(hs[0], ht[0], s, t):
        return size
    j = 0
    while True:
        c = 2 * j + 1
        if c >= k:
            break
        if c + 1 < k and _less(hs[c + 1], ht[c + 1], hs[c], ht[c]):
            c += 1
        if _less(hs[c], ht[c], s, t):
            hs[j] = hs[c]
            ht[j] = ht[c]
            hi[j] = hi[c]
            j = c
        else:
            break
    hs[j] = s
    ht[j] = t
    hi[j] = i
    return size


# Scores are tested against the heap's threshold in chunks of this many: one vectorised
# pass per chunk, and the scalar heap update only for a chunk holding a candidate.
_SCAN_CHUNK = 256


@numba.njit(cache=True, nogil=True, fastmath=True, inline="always")
def _scan_scaled(raw, inv, stamp, base, k, hs, ht, hi, size):  # pragma: no cover - compiled
    """Offer ``raw[j] * inv[j]`` (stamp ``stamp[j]``, row ``base + j``) to a size-k heap.

    Until the heap is full every score goes in; then each chunk of ``_SCAN_CHUNK`` scores is
    first counted against the heap's worst score (vectorised), and only a chunk with a score
    at least that good is offered entry by entry. Scores are finite (inputs are validated), so
    ``fastmath`` changes no result. Returns the new heap size.
    """
    n = raw.shape[0]
    j = 0
    while size < k and j < n:
        size = _heap_add(hs, ht, hi, size, k, raw[j] * inv[j], stamp[j], base + j)
        j += 1
    while j < n:
        r = raw[j:j + _SCAN_CHUNK]   # slices keep the index provably in range: vectorised
        iv = inv[j:j + _SCAN_CHUNK]
        thr = hs[0]
        hits = 0
        for t in range(r.shape[0]):
            hits += r[t] * iv[t] >= thr
        if hits:
            for t in range(r.shape[0]):
                s = r[t] * iv[t]
                st = stamp[j + t]
                if s > hs[0] or (s == hs[0] and st > ht[0]):
                    size = _heap_add(hs, ht, hi, size, k, s, st, base + j + t)
        j += r.shape[0]
    return size


@numba.njit(cache=True, nogil=True, fastmath=True)
def _topk_scaled(raw, inv, stamp, k):  # pragma: no cover - compiled
    """Top-k of raw[i] * inv[i] over one score vector; returns heap arrays and size."""
    hs = np.empty(k, np.float32)
    ht = np.empty(k, np.int64)
    hi = np.empty(k, np.int64)
    size = _scan_scaled(raw, inv, stamp, 0, k, hs, ht, hi, 0)
    return hs[:size], ht[:size], hi[:size]


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _topk_gather(X, inv, stamp, rows, q, k):  # pragma: no cover - compiled
    """Top-k over the rows ``rows`` of X, computing each dot here (no gathered copy).

    Heap entries hold positions into ``rows``. Releases the GIL, so several threads can
    each take a share of the rows.
    """
    d = X.shape[1]
    hs = np.empty(k, np.float32)
    ht = np.empty(k, np.int64)
    hi = np.empty(k, np.int64)
    size = 0
    for j in range(rows.shape[0]):
        r = rows[j]
        acc = np.float32(0.0)
        for t in range(d):
            acc += X[r, t] * q[t]
        s = acc * inv[r]
        st = stamp[r]
        if size < k or s > hs[0] or (s == hs[0] and st > ht[0]):
            size = _heap_add(hs, ht, hi, size, k, s, st, j)
    return hs[:size], ht[:size], hi[:size]


@numba.njit(cache=True, nogil=True, fastmath=True)
def _topk_block(S, inv, stamp, base, k, HS, HT, HI, sizes):  # pragma: no cover - compiled
    """Update per-query heaps with one block of raw scores S (q, nb) for rows base..base+nb."""
    for qi in range(S.shape[0]):
        sizes[qi] = _scan_scaled(S[qi], inv, stamp, base, k, HS[qi], HT[qi], HI[qi],
                                 sizes[qi])


@numba.njit(cache=True, nogil=True)
def _rescore_many(X, inv, stamp, cand, Q, k, out_r, out_s):  # pragma: no cover - compiled
    """For each query i: the top-k of the rows ``cand[i]`` (entries < 0 skipped; at least k
    others) by the compiled dot product of :func:`_topk_gather`, sorted (score desc, stamp
    desc) into ``out_r[i]`` and ``out_s[i]`` (rows, float32 scores)."""
    for i in range(Q.shape[0]):
        sel = cand[i][cand[i] >= 0]
        hs, ht, hi = _topk_gather(X, inv, stamp, sel, Q[i], k)
        n = hs.shape[0]
        # insertion sort of at most k entries: best first
        for a in range(1, n):
            s, t, p = hs[a], ht[a], hi[a]
            b = a - 1
            while b >= 0 and _less(hs[b], ht[b], s, t):
                hs[b + 1] = hs[b]
                ht[b + 1] = ht[b]
                hi[b + 1] = hi[b]
                b -= 1
            hs[b + 1] = s
            ht[b + 1] = t
            hi[b + 1] = p
        for a in range(n):
            out_r[i, a] = sel[hi[a]]
            out_s[i, a] = hs[a]


def _sorted_result(hs, ht, hi, k):
    """Sort heap entries by score desc, stamp desc; keep k. Returns (positions, scores)."""
    order = np.lexsort((-ht, -hs.astype(np.float64)))[:k]
    return hi[order].astype(np.int64), hs[order].astype(np.float32)


# =============================================================================== exact index

class ExactIndex:
    """Exact cosine top-k over float32 vectors, incremental, filterable.

    Parameters
    ----------
    dim : int
        Vector dimension d.
    capacity : int
        Initial number of rows allocated (grows by doubling).

    Notes
    -----
    Scores are cosine similarities in [-1, 1] as float32, computed as
    ``(x . q / |q|) * (1 / |x|)``. A stored zero vector scores exactly 0.0, so it ranks
    above negatively correlated rows and below positively correlated ones; it is never left
    out and never NaN. A zero query raises :class:`ConfigError` (a ``ValueError``).

    Ties (equal float32 scores) are broken by recency: the row with the larger stamp (by
    default the insertion counter; in a buffer, the episode id) comes first.

    Attributes of a result are row positions ``0 <= row < len(index)``, the same positions
    ``candidates`` uses; an :class:`~dyna.buffer.ExperienceBuffer` row position maps to its
    episode id through ``buffer.column("id")[rows]``.
    """

    def __init__(self, dim: int, capacity: int = 1024):
        dim = _positive_int("dim", dim)
        self._store = ColumnStore({"vectors": (np.float32, (dim,)),
                                   "inv_norm": (np.float32, ()),
                                   "stamp": (np.int64, ())}, capacity)
        self._vec, self._inv, self._stamp = "vectors", "inv_norm", "stamp"
        self._dim = dim
        self._next_stamp = 0
        self._prepare = None

    @classmethod
    def over(cls, store: ColumnStore, *, vectors: str, inv_norm: str, stamp: str,
             prepare: Callable[[], None] | None = None) -> ExactIndex:
        """An index reading columns of an existing :class:`ColumnStore` (no copy).

        The owner of ``store`` writes the vectors and keeps ``inv_norm`` equal to
        :func:`inverse_norms` of them, at the latest when ``prepare`` (called with no
        arguments at the start of every search) returns; ``stamp`` (int64) orders ties
        (larger = newer).
        """
        self = cls.__new__(cls)
        self._store = store
        self._vec, self._inv, self._stamp = vectors, inv_norm, stamp
        self._dim = store.view(vectors).shape[1]
        self._next_stamp = None
        self._prepare = prepare
        return self

    # ------------------------------------------------------------------ properties
    def __len__(self) -> int:
        return len(self._store)

    @property
    def dim(self) -> int:
        """Vector dimension d."""
        return self._dim

    @property
    def vectors(self) -> np.ndarray:
        """Zero-copy view of the stored vectors, float32 ``(len, d)``."""
        return self._store.view(self._vec)

    # ------------------------------------------------------------------ writing
    def add(self, vectors, stamps=None) -> np.ndarray:
        """Append vectors; return their row positions, int64 ``(n,)``.

        Parameters
        ----------
        vectors : array_like
            Shape ``(n, d)`` or ``(d,)``; converted to float32.
        stamps : array_like of int, optional
            Recency stamps (larger = newer) for tie-breaking; default the insertion counter.

        Raises
        ------
        ConfigError
            Wrong shape, NaN/inf values, or ``add`` on an index that reads a buffer's columns.
        """
        if self._next_stamp is None:
            raise ConfigError("index", "buffer-backed", "record episodes through the buffer")
        X, inv, st = _prepare_vectors(vectors, stamps, self._dim, self._next_stamp)
        n = X.shape[0]
        self._next_stamp = max(self._next_stamp + n, int(st.max(initial=-1)) + 1)
        first = len(self._store)
        for dst, src in self._store.claim(n):
            self._store.array(self._vec)[dst] = X[src]
            self._store.array(self._inv)[dst] = inv[src]
            self._store.array(self._stamp)[dst] = st[src]
        return np.arange(first, first + n, dtype=np.int64)

    # ------------------------------------------------------------------ search
    def search(self, query, k: int, candidates=None):
        """Cosine top-k: the k rows most similar to each query, best first.

        Parameters
        ----------
        query : array_like
            float, shape ``(d,)`` for one query or ``(q, d)`` for a batch.
        k : int
            Number of neighbours, >= 1. More than the number of candidates returns them all.
        candidates : array_like or slice, optional
            Restrict the search to these rows: an int array of row positions (a contiguous
            ascending range is searched as a zero-copy slice; duplicates are dropped), a
            ``slice`` of row positions, or a boolean mask of shape ``(len,)``. Only the
            candidate rows are read.

        Returns
        -------
        rows : numpy.ndarray
            int64 row positions, shape ``(k',)`` or ``(q, k')`` with ``k' = min(k, #candidates)``.
        scores : numpy.ndarray
            float32 cosine similarities, same shape, descending along the last axis; ties
            ordered newest first. Never NaN.

        Raises
        ------
        ConfigError
            ``k`` not a positive integer; query of the wrong dimension, non-finite, or zero
            (a zero query has no direction); candidates out of range.
        """
        k = _check_k(k)
        Qn, single = _unit_queries(query, self._dim)
        if self._prepare is not None:
            self._prepare()
        return _search_prepared(self._store.view(self._vec), self._store.view(self._inv),
                                self._store.view(self._stamp), Qn, single, k, candidates)


def search_arrays(vectors: np.ndarray, inv_norm: np.ndarray, stamps: np.ndarray, query,
                  k: int, candidates=None):
    """:meth:`ExactIndex.search` over arrays the caller holds (e.g. a memory map).

    Scores, order and ties are those an :class:`ExactIndex` holding the same rows gives:
    every result is rescored by a dot product whose rounding depends on the row alone, so
    a row scores the same whichever other rows are searched with it.

    Parameters
    ----------
    vectors : numpy.ndarray
        float32 ``(n, d)``, C-contiguous rows (a read-only memory map is fine).
    inv_norm : numpy.ndarray
        float32 ``(n,)``, :func:`inverse_norms` of ``vectors``.
    stamps : numpy.ndarray
        int64 ``(n,)``, the tie order (larger = newer; an experience store's episode ids).
    query, k, candidates
        As :meth:`ExactIndex.search`.

    Returns
    -------
    rows, scores
        As :meth:`ExactIndex.search` (row positions into ``vectors``).

    Raises
    ------
    ConfigError
        As :meth:`ExactIndex.search`, or arrays of mismatched shapes or dtypes.
    """
    k = _check_k(k)
    if (vectors.dtype != np.float32 or vectors.ndim != 2 or inv_norm.dtype != np.float32
            or stamps.dtype != np.int64 or inv_norm.shape != (vectors.shape[0],)
            or stamps.shape != inv_norm.shape):
        raise ConfigError("vectors", (vectors.shape, inv_norm.shape, stamps.shape),
                          "need float32 (n, d), float32 (n,) and int64 (n,)")
    Qn, single = _unit_queries(query, vectors.shape[1])
    return _search_prepared(vectors, inv_norm, stamps, Qn, single, k, candidates)


def _search_prepared(X, inv, stamp, Qn, single, k, candidates):
    """The search of :meth:`ExactIndex.search` after its checks (unit queries ``Qn``)."""
    n = X.shape[0]
    lo, hi, rows = 0, n, None
    if candidates is not None:
        lo, hi, rows = _candidate_rows(candidates, n)
    m = (hi - lo) if rows is None else rows.shape[0]
    kk = min(k, m)
    nq = Qn.shape[0]
    if kk == 0:
        out_r = np.zeros((nq, 0), np.int64)
        out_s = np.zeros((nq, 0), np.float32)
    elif nq == 1 and rows is None:
        out_r, out_s = _search_one(X, inv, stamp, lo, hi, Qn[0], kk)
    elif nq == 1 and rows is not None:
        out_r, out_s = _gather_one(X, inv, stamp, rows, Qn[0], kk)
    else:
        out_r, out_s = _search_blocks(X, inv, stamp, lo, hi, rows, Qn, kk)
    if single:
        return out_r[0], out_s[0]
    return out_r, out_s


def _prepare_vectors(vectors, stamps, dim: int, next_stamp: int):
    """Validate vectors to add: float32 (n, d), their inverse norms and int64 stamps."""
    X = np.asarray(vectors, dtype=np.float32)
    if X.ndim == 1:
        X = X[None, :]
    if X.ndim != 2 or X.shape[1] != dim:
        raise ConfigError("vectors", X.shape, f"must have shape (n, {dim})")
    inv = inverse_norms(X)
    n = X.shape[0]
    if stamps is None:
        st = np.arange(next_stamp, next_stamp + n, dtype=np.int64)
    else:
        st = np.asarray(stamps, dtype=np.int64).reshape(-1)
        if st.shape[0] != n:
            raise ConfigError("stamps", st.shape, f"must have length {n}")
    return X, inv, st


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise ConfigError("k", k, "must be a positive integer")
    return int(k)


def _unit_queries(query, dim: int) -> tuple[np.ndarray, bool]:
    """Validate queries; return them L2-normalised as float32 (q, d) and whether one was given."""
    Q = np.asarray(query, dtype=np.float64)
    single = Q.ndim == 1
    if single:
        Q = Q[None, :]
    if Q.ndim != 2 or Q.shape[1] != dim:
        raise ConfigError("query", Q.shape, f"must have shape ({dim},) or (q, {dim})")
    if not np.all(np.isfinite(Q)):
        raise ConfigError("query", "non-finite", "must not contain NaN or inf")
    # Scale each row by its largest |value| first, so the sum of squares neither overflows
    # (a 1e200 query would become all zeros) nor underflows (1e-200 would look like zero).
    top = np.abs(Q).max(axis=1)
    Q = Q / np.where(top > 0, top, 1.0)[:, None]
    qn = np.sqrt(np.einsum("ij,ij->i", Q, Q))
    if np.any(qn == 0):
        raise ConfigError("query", f"zero vector at {int(np.flatnonzero(qn == 0)[0])}",
                          "a zero query has no direction (cosine undefined)")
    return np.ascontiguousarray(Q / qn[:, None], dtype=np.float32), single


def _candidate_rows(candidates, n: int):
    """Normalise candidates to ``(lo, hi, None)`` for a contiguous range or ``(0, 0, rows)``."""
    if isinstance(candidates, slice):
        lo, hi, step = candidates.indices(n)
        if step == 1:
            return (lo, hi, None) if hi > lo else (0, 0, None)
        candidates = np.arange(lo, hi, step, dtype=np.int64)
    c = np.asarray(candidates)
    if c.dtype == bool:
        if c.shape != (n,):
            raise ConfigError("candidates", c.shape, f"a mask must have shape ({n},)")
        c = np.flatnonzero(c)
    else:
        if c.ndim != 1 or (c.size and c.dtype.kind not in "iu"):
            raise ConfigError("candidates", c.dtype, "must be int row positions or a bool mask")
        c = c.astype(np.int64, copy=False)
        if c.size and (c.min() < 0 or c.max() >= n):
            bad = c[(c < 0) | (c >= n)][0]
            raise ConfigError("candidates", int(bad), f"row position out of range [0, {n})")
        if c.size > 1 and not np.all(c[1:] > c[:-1]):
            c = np.unique(c)
    if c.size == 0:
        return 0, 0, None
    if int(c[-1]) - int(c[0]) + 1 == c.size:
        return int(c[0]), int(c[-1]) + 1, None
    return 0, 0, c


# Work is split across this many threads (each runs single-threaded BLAS and a GIL-free
# compiled kernel). Below _MIN_SHARE rows per thread one thread does it all.
_THREADS = max(1, min(os.cpu_count() or 1, 8))
_MIN_SHARE = 32768
_POOL: ThreadPoolExecutor | None = None


def _map_threads(fn, parts):
    global _POOL
    if len(parts) == 1:
        return [fn(*parts[0])]
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="dyna-index")
    return list(_POOL.map(lambda p: fn(*p), parts))


def _shares(m: int, align: int = 1) -> list[tuple[int, int]]:
    t = max(1, min(_THREADS, m // _MIN_SHARE))
    cuts = [(m * i // t) // align * align for i in range(t)] + [m]
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


# BLAS may round the same dot product differently at different row positions (its tail
# kernels sum in another order), so equal vectors need not get equal BLAS scores. The BLAS
# scores only pick candidates; every result is rescored by the compiled dot product of
# _topk_gather, whose rounding depends on the vector alone. For unit vectors each score is
# within (d + 2) u of the exact cosine (u = 2^-24), so the two differ by at most 2 (d + 2) u
# and every row of the rescored top-k has a BLAS score within 4 (d + 2) u of the k-th best
# BLAS score: those rows are the candidates.
_SLACK = 8   # heap entries kept beyond k, so that the candidates are usually all at hand


def _tie_margin(d: int) -> float:
    return 4.0 * (d + 2) * 2.0 ** -24


def _near_candidates(hs: np.ndarray, pos: np.ndarray, k: int, margin: float,
                     complete: bool) -> tuple[np.ndarray | None, float]:
    """Positions whose BLAS score is within ``margin`` of the k-th best, and that score.

    ``complete``: the heap saw every row or had room to spare. Otherwise, when even its worst
    entry is within the margin, rows outside it may be too: returns ``(None, kth)``.
    """
    kth = float(np.partition(hs, hs.size - k)[hs.size - k]) if hs.size >= k else -np.inf
    if not complete and hs.size and float(hs.min()) >= kth - margin:
        return None, kth
    return pos[hs >= kth - margin], kth


def _search_one(X, inv, stamp, lo, hi, q, k):
    """One query over rows ``lo..hi-1``: one sgemv, then the exact rescoring of candidates.

    The sgemv uses BLAS's own threads (ours would fight its spin-waiting workers for the
    cores) and writes one float32 score per row; one compiled pass keeps the best
    ``k + _SLACK`` BLAS scores.
    """
    m = hi - lo
    raw = X[lo:hi] @ q
    cap = min(k + _SLACK, m)
    hs, _, hi_ = _topk_scaled(raw, inv[lo:hi], stamp[lo:hi], cap)
    margin = _tie_margin(X.shape[1])
    cand, kth = _near_candidates(hs, hi_, k, margin, complete=cap == m)
    if cand is None:   # more near-ties than the heap holds: take them from all the scores
        cand = np.flatnonzero(raw * inv[lo:hi] >= np.float32(kth - margin))
    rows = np.sort(cand) + lo
    hs, ht, pos = _topk_gather(X, inv, stamp, rows, q, k)
    p, s = _sorted_result(hs, ht, pos, k)
    return rows[p][None, :], s[None, :]


def _gather_one(X, inv, stamp, rows, q, k):
    """One query over scattered candidate rows, split across threads."""
    parts = _shares(rows.shape[0])
    res = _map_threads(lambda a, b: _topk_gather(X, inv, stamp, rows[a:b], q, k), parts)
    hs = np.concatenate([r[0] for r in res])
    ht = np.concatenate([r[1] for r in res])
    hi = np.concatenate([r[2] + a for r, (a, _) in zip(res, parts)])
    pos, s = _sorted_result(hs, ht, hi, k)
    return rows[pos][None, :], s[None, :]


_CONTROLLER = None


@contextlib.contextmanager
def _blas_single_thread():
    """Hold BLAS to one thread (process-wide, for the duration) while our threads run."""
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController  # noqa: PLC0415

        _CONTROLLER = ThreadpoolController()
    with _CONTROLLER.limit(limits=1, user_api="blas"):
        yield


def _search_blocks(X, inv, stamp, lo, hi, rows, Qn, k):
    """Per thread: blocks of rows -> one ``sgemm`` -> compiled heap update; then merge.

    A batch of queries uses ``sgemm`` over blocks of ``_BLOCK_ROWS`` rows, so memory is
    ``q x _BLOCK_ROWS`` scores per thread, never ``q x N``. With more than one thread BLAS is
    held to one thread meanwhile so the threads do not fight over the cores. Candidate rows
    (``rows`` not None) are gathered one block at a time.
    """
    nq = Qn.shape[0]
    m = (hi - lo) if rows is None else rows.shape[0]
    block = _BLOCK_ROWS
    cap = k + _SLACK

    def run(a, b):
        HS = np.empty((nq, cap), np.float32)
        HT = np.empty((nq, cap), np.int64)
        HI = np.empty((nq, cap), np.int64)
        sizes = np.zeros(nq, np.int64)
        S = np.empty((nq, min(block, b - a)), np.float32)
        for b0 in range(a, b, block):
            b1 = min(b0 + block, b)
            blk = S[:, :b1 - b0]
            sel = slice(lo + b0, lo + b1) if rows is None else rows[b0:b1]
            np.matmul(Qn, X[sel].T, out=blk)
            _topk_block(blk, inv[sel], stamp[sel], b0, cap, HS, HT, HI, sizes)
        size = int(sizes[0])  # every query has seen the same rows
        return HS[:, :size], HT[:, :size], HI[:, :size]

    parts = _shares(m, block)
    if len(parts) > 1:
        with _blas_single_thread():
            res = _map_threads(run, parts)
    else:
        res = [run(*parts[0])]
    # Candidates per query: the entries of every thread's heap within the tie margin of
    # the k-th best BLAS score; a thread whose full heap lies entirely within the margin may
    # have dropped some, and that query is searched on its own.
    margin = _tie_margin(X.shape[1])
    HS = np.concatenate([r[0] for r in res], axis=1)
    HI = np.concatenate([r[2] for r in res], axis=1)
    kth = -np.partition(-HS, k - 1, axis=1)[:, k - 1]
    low = kth - np.float32(margin)
    redo = np.zeros(nq, bool)
    for r, (a, b) in zip(res, parts):
        if b - a > cap:      # this thread's heap had to drop rows
            redo |= r[0].min(axis=1) >= low
    keep = HS >= low[:, None]
    cand = np.where(keep, HI + lo if rows is None else rows[HI], -1)   # -1: not a candidate
    out_r = np.empty((nq, k), np.int64)
    out_s = np.empty((nq, k), np.float32)
    _rescore_many(X, inv, stamp, cand, Qn, k, out_r, out_s)
    for qi in np.flatnonzero(redo).tolist():
        if rows is None:
            r_, s_ = _search_one(X, inv, stamp, lo, hi, Qn[qi], k)
        else:
            r_, s_ = _gather_one(X, inv, stamp, rows, Qn[qi], k)
        out_r[qi], out_s[qi] = r_[0], s_[0]
    return out_r, out_s


# =============================================================================== ANN backend

def _import_faiss():
    try:
        import faiss  # noqa: PLC0415 - optional dependency
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError("backend", "faiss",
                          'the ANN backend needs faiss: pip install "dyna[ann]"') from exc
    return faiss


class AnnIndex:
    """Approximate cosine top-k over faiss HNSW, with the :class:`ExactIndex` interface.

    Vectors are L2-normalised (zero vectors stay zero) and stored in a
    ``faiss.IndexHNSWFlat`` with the inner-product metric (Malkov & Yashunin 2018, "Efficient
    and robust approximate nearest neighbor search using Hierarchical Navigable Small World
    graphs"). Results are re-sorted by (score desc, stamp desc) like the exact index.
    Deletion is not supported by HNSW: rebuild from the surviving vectors.

    Parameters
    ----------
    dim : int
        Vector dimension d.
    M : int
        HNSW graph degree (faiss default 32).
    ef_construction : int
        Beam width while building.
    ef_search : int
        Beam width while searching (raised to at least k); trades speed for recall.

    Raises
    ------
    ConfigError
        If faiss is not installed (names the ``dyna[ann]`` extra).
    """

    def __init__(self, dim: int, *, M: int = 32, ef_construction: int = 128, ef_search: int = 64):
        faiss = _import_faiss()
        self._faiss = faiss
        self._dim = _positive_int("dim", dim)
        self.M = _positive_int("M", M)
        self.ef_search = _positive_int("ef_search", ef_search)
        self._index = faiss.IndexHNSWFlat(self._dim, self.M, faiss.METRIC_INNER_PRODUCT)
        self._index.hnsw.efConstruction = _positive_int("ef_construction", ef_construction)
        self._stamps = np.zeros(0, np.int64)
        self._next_stamp = 0

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def dim(self) -> int:
        """Vector dimension d."""
        return self._dim

    @classmethod
    def from_exact(cls, exact: ExactIndex, **kwargs) -> AnnIndex:
        """Build an ANN index holding the same rows (same positions and stamps) as ``exact``."""
        ann = cls(exact.dim, **kwargs)
        ann.add(exact.vectors, exact._store.view(exact._stamp))
        return ann

    def add(self, vectors, stamps=None) -> np.ndarray:
        """Append vectors (normalised internally); return their row positions, int64 ``(n,)``."""
        X, inv, st = _prepare_vectors(vectors, stamps, self._dim, self._next_stamp)
        n = X.shape[0]
        self._next_stamp = max(self._next_stamp + n, int(st.max(initial=-1)) + 1)
        first = len(self)
        self._index.add(np.ascontiguousarray(X * inv[:, None]))
        self._stamps = np.concatenate([self._stamps, st])
        return np.arange(first, first + n, dtype=np.int64)

    def search(self, query, k: int, candidates=None):
        """Approximate cosine top-k; same arguments, shapes and errors as :meth:`ExactIndex.search`.

        Rows HNSW fails to reach are missing (that is the recall loss); fewer than
        ``min(k, #candidates)`` results can come back, in which case the batch output is
        padded with row -1 and score -inf.
        """
        k = _check_k(k)
        Qn, single = _unit_queries(query, self._dim)
        nq = Qn.shape[0]
        n = len(self)
        faiss = self._faiss
        params = faiss.SearchParametersHNSW()
        params.efSearch = max(self.ef_search, k)
        m = n
        if candidates is not None:
            lo, hi, rows = _candidate_rows(candidates, n)
            if rows is None:
                rows = np.arange(lo, hi, dtype=np.int64)
            m = rows.size
            if m == 0:
                return self._empty(nq, single)
            params.sel = faiss.IDSelectorBatch(rows)
            self._selector_rows = rows  # keep alive while searching
        kk = min(k, m)
        if kk == 0:
            return self._empty(nq, single)
        D, I = self._index.search(Qn, kk, params=params)
        out_r = np.full((nq, kk), -1, np.int64)
        out_s = np.full((nq, kk), -np.inf, np.float32)
        for qi in range(nq):
            ok = I[qi] >= 0
            r, s = I[qi][ok], D[qi][ok].astype(np.float32)
            order = np.lexsort((-self._stamps[r], -s.astype(np.float64)))
            out_r[qi, :order.size] = r[order]
            out_s[qi, :order.size] = s[order]
        if single:
            ok = out_r[0] >= 0
            return out_r[0][ok], out_s[0][ok]
        return out_r, out_s

    @staticmethod
    def _empty(nq, single):
        if single:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        return np.zeros((nq, 0), np.int64), np.zeros((nq, 0), np.float32)


def recall_at_k(approx, exact: ExactIndex, queries, k: int = 10, candidates=None) -> float:
    """Mean recall@k of an approximate index against the exact one.

    recall@k = |approx top-k  intersect  exact top-k| / |exact top-k|, averaged over queries
    (the usual ANN-benchmarks definition, Aumüller, Bernhardsson & Faithfull 2020).

    Parameters
    ----------
    approx : AnnIndex or ExactIndex
        Index under test, holding the same rows as ``exact``.
    exact : ExactIndex
        Ground truth.
    queries : array_like
        float, shape ``(q, d)``.
    k : int
        Neighbours per query.

    Returns
    -------
    float
        In [0, 1].
    """
    Q = np.asarray(queries, dtype=np.float32)
    if Q.ndim == 1:
        Q = Q[None, :]
    truth, _ = exact.search(Q, k, candidates)
    got, _ = approx.search(Q, k, candidates)
    if truth.shape[1] == 0:
        return 1.0
    hits = 0
    for qi in range(Q.shape[0]):
        hits += np.intersect1d(truth[qi], got[qi][got[qi] >= 0]).size
    return hits / (truth.shape[0] * truth.shape[1])
