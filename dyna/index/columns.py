"""Equal-length numpy columns sharing one row layout: the storage of indexes and buffers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numba
import numpy as np

from dyna.errors import ConfigError

__all__ = ["ColumnStore", "positive_int"]


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
    allocates a new zeroed array of twice the capacity and copies the live rows
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
        capacity = positive_int("capacity", capacity)
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

    def truncate(self, n: int, *, zero: Iterable[str] = ()) -> None:
        """Forget every row after the first ``n`` (growable stores only), as if never written:
        object columns release their Python objects (None) and the columns named in
        ``zero`` are reset to 0 (the others keep values no read ever sees).
        """
        if self.ring:
            raise ConfigError("ring", True, "truncate needs a growable store")
        lo, hi = self._start + n, self._start + self._len
        zero = frozenset(zero)
        for name, arr in self._arrays.items():
            if arr.dtype == object:
                arr[lo:hi] = None
            elif name in zero:
                arr[lo:hi] = 0
        self._len = n

    def copy(self) -> ColumnStore:
        """An independent copy of the live rows (a ring keeps its capacity and slots)."""
        specs = {name: (dtype, tail) for name, (dtype, tail) in self._specs.items()}
        if self.ring:
            new = ColumnStore(specs, self._cap, ring=True)
            for name, arr in self._arrays.items():
                new._arrays[name][...] = arr
            new._head = self._head
        else:
            new = ColumnStore(specs, max(self._len, 1))
            for name in self._specs:
                new._arrays[name][:self._len] = self.view(name)
        new._len = self._len
        return new

    def clear(self, *, blank: Iterable[str] = ()) -> None:
        """Remove every row (capacity is kept); ``blank`` as in :meth:`keep`."""
        self.keep(np.zeros(0, dtype=np.int64), blank=blank)
        self._head = 0

    def nbytes(self) -> int:
        """Bytes of the live rows of every column (object columns count their pointers)."""
        return sum(self.view(name).nbytes for name in self._specs)


def positive_int(field: str, value) -> int:
    """``value`` as an int; ConfigError naming ``field`` unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(field, value, "must be a positive integer")
    return int(value)
