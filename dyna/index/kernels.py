"""Compiled top-k kernels of the exact index: size-k heaps ordered by (score, stamp).

A heap keeps the k best (score, stamp, row) entries with the worst at its root, so a new
score is compared with one value; ties in score go to the larger stamp (the newer row).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["rescore_many", "sorted_result", "topk_block", "topk_gather", "topk_scaled"]


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
def topk_scaled(raw, inv, stamp, k):  # pragma: no cover - compiled
    """Top-k of raw[i] * inv[i] over one score vector; returns heap arrays and size."""
    hs = np.empty(k, np.float32)
    ht = np.empty(k, np.int64)
    hi = np.empty(k, np.int64)
    size = _scan_scaled(raw, inv, stamp, 0, k, hs, ht, hi, 0)
    return hs[:size], ht[:size], hi[:size]


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def topk_gather(X, inv, stamp, rows, q, k):  # pragma: no cover - compiled
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
def topk_block(S, inv, stamp, base, k, HS, HT, HI, sizes):  # pragma: no cover - compiled
    """Update per-query heaps with one block of raw scores S (q, nb) for rows base..base+nb."""
    for qi in range(S.shape[0]):
        sizes[qi] = _scan_scaled(S[qi], inv, stamp, base, k, HS[qi], HT[qi], HI[qi],
                                 sizes[qi])


@numba.njit(cache=True, nogil=True)
def rescore_many(X, inv, stamp, cand, Q, k, out_r, out_s):  # pragma: no cover - compiled
    """For each query i: the top-k of the rows ``cand[i]`` (entries < 0 skipped; at least k
    others) by the compiled dot product of :func:`topk_gather`, sorted (score desc, stamp
    desc) into ``out_r[i]`` and ``out_s[i]`` (rows, float32 scores)."""
    for i in range(Q.shape[0]):
        sel = cand[i][cand[i] >= 0]
        hs, ht, hi = topk_gather(X, inv, stamp, sel, Q[i], k)
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


def sorted_result(hs, ht, hi, k):
    """Sort heap entries (scores ``hs``, stamps ``ht``, positions ``hi``) by score desc,
    stamp desc; keep k. Returns (positions int64, scores float32)."""
    order = np.lexsort((-ht, -hs.astype(np.float64)))[:k]
    return hi[order].astype(np.int64), hs[order].astype(np.float32)
