"""Approximate cosine top-k over faiss HNSW, and its recall against the exact index."""

from __future__ import annotations

import numpy as np

from dyna.errors import ConfigError
from dyna.index.columns import positive_int
from dyna.index.exact import ExactIndex, prepare_vectors
from dyna.index.search import candidate_rows, check_k, unit_queries

__all__ = ["AnnIndex", "recall_at_k"]


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
        self._dim = positive_int("dim", dim)
        self.M = positive_int("M", M)
        self.ef_search = positive_int("ef_search", ef_search)
        self._index = faiss.IndexHNSWFlat(self._dim, self.M, faiss.METRIC_INNER_PRODUCT)
        self._index.hnsw.efConstruction = positive_int("ef_construction", ef_construction)
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
        ann.add(exact.vectors, exact.stamps)
        return ann

    def add(self, vectors, stamps=None) -> np.ndarray:
        """Append vectors (normalised internally); return their row positions, int64 ``(n,)``."""
        X, inv, st = prepare_vectors(vectors, stamps, self._dim, self._next_stamp)
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
        k = check_k(k)
        Qn, single = unit_queries(query, self._dim)
        nq = Qn.shape[0]
        n = len(self)
        faiss = self._faiss
        params = faiss.SearchParametersHNSW()
        params.efSearch = max(self.ef_search, k)
        m = n
        if candidates is not None:
            lo, hi, rows = candidate_rows(candidates, n)
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
