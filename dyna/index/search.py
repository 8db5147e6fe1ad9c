"""Exact cosine top-k search over float32 rows: queries, candidates, threads.

One query is one BLAS ``sgemv`` over the rows and one compiled heap pass; a batch is a loop
over blocks of rows, one ``sgemm`` each, spread over threads; scattered candidate rows are
gathered inside the compiled kernel. BLAS scores only pick candidates: every result is
rescored by the compiled dot product, whose rounding depends on the row alone, so a row
scores the same whichever rows are searched with it (see :mod:`dyna.index`).
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from dyna.errors import ConfigError
from dyna.index.kernels import rescore_many, sorted_result, topk_block, topk_gather, topk_scaled

__all__ = ["BLOCK_ROWS", "candidate_rows", "check_k", "search_arrays", "search_prepared",
           "unit_queries"]

#: Rows per block in batched search: a block of scores is (n_queries, BLOCK_ROWS) float32.
BLOCK_ROWS = 2048


def search_arrays(vectors: np.ndarray, inv_norm: np.ndarray, stamps: np.ndarray, query,
                  k: int, candidates=None):
    """:meth:`~dyna.index.ExactIndex.search` over arrays the caller holds (e.g. a memory map).

    Scores, order and ties are those an :class:`~dyna.index.ExactIndex` holding the same
    rows gives: every result is rescored by a dot product whose rounding depends on the row
    alone, so a row scores the same whichever other rows are searched with it.

    Parameters
    ----------
    vectors : numpy.ndarray
        float32 ``(n, d)``, C-contiguous rows (a read-only memory map is fine).
    inv_norm : numpy.ndarray
        float32 ``(n,)``, :func:`~dyna.index.inverse_norms` of ``vectors``.
    stamps : numpy.ndarray
        int64 ``(n,)``, the tie order (larger = newer; an experience store's episode ids).
    query, k, candidates
        As :meth:`~dyna.index.ExactIndex.search`.

    Returns
    -------
    rows, scores
        As :meth:`~dyna.index.ExactIndex.search` (row positions into ``vectors``).

    Raises
    ------
    ConfigError
        As :meth:`~dyna.index.ExactIndex.search`, or arrays of mismatched shapes or dtypes.
    """
    k = check_k(k)
    if (vectors.dtype != np.float32 or vectors.ndim != 2 or inv_norm.dtype != np.float32
            or stamps.dtype != np.int64 or inv_norm.shape != (vectors.shape[0],)
            or stamps.shape != inv_norm.shape):
        raise ConfigError("vectors", (vectors.shape, inv_norm.shape, stamps.shape),
                          "need float32 (n, d), float32 (n,) and int64 (n,)")
    Qn, single = unit_queries(query, vectors.shape[1])
    return search_prepared(vectors, inv_norm, stamps, Qn, single, k, candidates)


def search_prepared(X, inv, stamp, Qn, single, k, candidates):
    """The search of :meth:`~dyna.index.ExactIndex.search` after its checks: rows ``X``
    float32 (n, d), their inverse norms ``inv`` and stamps ``stamp``, unit queries ``Qn``
    (q, d) (``single``: one query was given), a checked ``k``."""
    n = X.shape[0]
    lo, hi, rows = 0, n, None
    if candidates is not None:
        lo, hi, rows = candidate_rows(candidates, n)
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


def check_k(k) -> int:
    """``k`` as an int; ConfigError unless it is an integer >= 1."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise ConfigError("k", k, "must be a positive integer")
    return int(k)


def unit_queries(query, dim: int) -> tuple[np.ndarray, bool]:
    """Validate queries; return them L2-normalised as float32 (q, d) and whether one was given.

    Raises
    ------
    ConfigError
        Wrong dimension, NaN or inf, or a zero query (it has no direction).
    """
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


def candidate_rows(candidates, n: int):
    """Normalise candidates (int positions, a bool mask ``(n,)`` or a slice) to
    ``(lo, hi, None)`` for a contiguous range or ``(0, 0, rows)``; ConfigError for
    positions out of range or a mask of the wrong shape."""
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
# topk_gather, whose rounding depends on the vector alone. For unit vectors each score is
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
    hs, _, hi_ = topk_scaled(raw, inv[lo:hi], stamp[lo:hi], cap)
    margin = _tie_margin(X.shape[1])
    cand, kth = _near_candidates(hs, hi_, k, margin, complete=cap == m)
    if cand is None:   # more near-ties than the heap holds: take them from all the scores
        cand = np.flatnonzero(raw * inv[lo:hi] >= np.float32(kth - margin))
    rows = np.sort(cand) + lo
    hs, ht, pos = topk_gather(X, inv, stamp, rows, q, k)
    p, s = sorted_result(hs, ht, pos, k)
    return rows[p][None, :], s[None, :]


def _gather_one(X, inv, stamp, rows, q, k):
    """One query over scattered candidate rows, split across threads."""
    parts = _shares(rows.shape[0])
    res = _map_threads(lambda a, b: topk_gather(X, inv, stamp, rows[a:b], q, k), parts)
    hs = np.concatenate([r[0] for r in res])
    ht = np.concatenate([r[1] for r in res])
    hi = np.concatenate([r[2] + a for r, (a, _) in zip(res, parts)])
    pos, s = sorted_result(hs, ht, hi, k)
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

    A batch of queries uses ``sgemm`` over blocks of ``BLOCK_ROWS`` rows, so memory is
    ``q x BLOCK_ROWS`` scores per thread, never ``q x N``. With more than one thread BLAS is
    held to one thread meanwhile so the threads do not fight over the cores. Candidate rows
    (``rows`` not None) are gathered one block at a time.
    """
    nq = Qn.shape[0]
    m = (hi - lo) if rows is None else rows.shape[0]
    block = BLOCK_ROWS
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
            topk_block(blk, inv[sel], stamp[sel], b0, cap, HS, HT, HI, sizes)
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
    rescore_many(X, inv, stamp, cand, Qn, k, out_r, out_s)
    for qi in np.flatnonzero(redo).tolist():
        if rows is None:
            r_, s_ = _search_one(X, inv, stamp, lo, hi, Qn[qi], k)
        else:
            r_, s_ = _gather_one(X, inv, stamp, rows, Qn[qi], k)
        out_r[qi], out_s[qi] = r_[0], s_[0]
    return out_r, out_s
