"""The exact cosine index: rows of its own, or columns of a buffer's column store."""

from __future__ import annotations

import numpy as np

from dyna.errors import ConfigError
from dyna.index.columns import ColumnStore, positive_int
from dyna.index.norms import inverse_norms
from dyna.index.search import check_k, search_prepared, unit_queries

__all__ = ["ExactIndex", "prepare_vectors"]


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
        dim = positive_int("dim", dim)
        self._store = ColumnStore({"vectors": (np.float32, (dim,)),
                                   "inv_norm": (np.float32, ()),
                                   "stamp": (np.int64, ())}, capacity)
        self._vec, self._inv, self._stamp = "vectors", "inv_norm", "stamp"
        self._dim = dim
        self._next_stamp = 0

    @classmethod
    def over(cls, store: ColumnStore, *, vectors: str, inv_norm: str,
             stamp: str) -> ExactIndex:
        """An index reading columns of an existing :class:`ColumnStore` (no copy).

        The owner of ``store`` writes the vectors and keeps ``inv_norm`` equal to
        :func:`~dyna.index.inverse_norms` of them; ``stamp`` (int64) orders ties (larger =
        newer). Such an index is read-only: rows are added through the owner.
        """
        self = cls.__new__(cls)
        self._store = store
        self._vec, self._inv, self._stamp = vectors, inv_norm, stamp
        self._dim = store.view(vectors).shape[1]
        self._next_stamp = None
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

    @property
    def stamps(self) -> np.ndarray:
        """Zero-copy view of the recency stamps, int64 ``(len,)`` (larger = newer)."""
        return self._store.view(self._stamp)

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
        X, inv, st = prepare_vectors(vectors, stamps, self._dim, self._next_stamp)
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
        k = check_k(k)
        Qn, single = unit_queries(query, self._dim)
        return search_prepared(self._store.view(self._vec), self._store.view(self._inv),
                                self._store.view(self._stamp), Qn, single, k, candidates)


def prepare_vectors(vectors, stamps, dim: int, next_stamp: int):
    """Validate vectors to add: float32 (n, d), their inverse norms and int64 stamps
    (``stamps``, or ``next_stamp, next_stamp + 1, ...``); ConfigError for a wrong shape or
    an invalid row."""
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
