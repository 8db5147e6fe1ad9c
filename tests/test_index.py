"""Exact cosine top-k (dyna.index.ExactIndex), its ANN counterpart and the column store."""

import math
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dyna.index import search as index_search
from dyna.errors import ConfigError
from dyna.index import AnnIndex, ColumnStore, ExactIndex, inverse_norms, recall_at_k


def brute_force(X, stamps, q, k, candidates=None):
    """float64 reference: cosine (0 for zero rows), sorted by score desc then stamp desc."""
    X = np.asarray(X, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    rows = np.arange(X.shape[0]) if candidates is None else np.asarray(candidates)
    # Correctly rounded sums per row (math.fsum), so equal rows get bit-equal scores wherever
    # they stand (a BLAS matrix-vector product need not guarantee that).
    qn = math.sqrt(math.fsum(q * q))
    scores = np.zeros(rows.size)
    for i, r in enumerate(rows):
        norm = math.sqrt(math.fsum(X[r] * X[r]))
        scores[i] = math.fsum(X[r] * q) / (norm * qn) if norm > 0 else 0.0
    order = sorted(range(rows.size), key=lambda i: (-scores[i], -stamps[rows[i]]))[:k]
    return rows[order], scores[order]


# --------------------------------------------------------------------------- zero vectors

def test_zero_vectors_and_k_beyond_n():
    ix = ExactIndex(3)
    ix.add([[1, 0, 0], [0, 0, 0], [0.9, 0.1, 0]])
    rows, sims = ix.search([1, 0, 0], 2)
    assert rows.tolist() == [0, 2]
    np.testing.assert_allclose(sims, [1.0, 0.993884], atol=1e-6)
    for k in (3, 10):
        rows, sims = ix.search([1, 0, 0], k)
        assert rows.tolist() == [0, 2, 1]          # zero vector last, with similarity 0.0
        assert sims[2] == 0.0 and not np.isnan(sims).any()
        assert rows.dtype == np.int64 and sims.dtype == np.float32
    with pytest.raises(ValueError) as err:        # documented choice: a zero query raises
        ix.search([0, 0, 0], 2)
    assert isinstance(err.value, ConfigError) and err.value.field == "query"
    one = ExactIndex(3)
    one.add([[1, 0, 0]])
    rows, sims = one.search([1, 0, 0], 5)
    assert rows.tolist() == [0] and sims.tolist() == [1.0]
    rows, sims = ExactIndex(3).search([1, 0, 0], 3)
    assert rows.tolist() == [] and sims.tolist() == []


def test_bad_k_and_queries_raise_config_errors():
    ix = ExactIndex(3)
    ix.add(np.eye(3))
    for k in (0, -1, 2.0, True, "3"):
        with pytest.raises(ConfigError) as err:
            ix.search([1, 0, 0], k)
        assert err.value.field == "k"
    for q in ([1, 0], [[1, 0, 0, 0]], [np.nan, 0, 0], [np.inf, 1, 0], [[1, 0, 0], [0, 0, 0]]):
        with pytest.raises(ConfigError) as err:
            ix.search(q, 1)
        assert err.value.field == "query"
    for cand in ([3], [-1], np.array([True, False]), np.array([0.5, 1.0])):
        with pytest.raises(ConfigError) as err:
            ix.search([1, 0, 0], 1, candidates=cand)
        assert err.value.field == "candidates"
    with pytest.raises(ConfigError):
        ix.add(np.ones((2, 4)))
    with pytest.raises(ConfigError) as err:
        ix.add([[1, np.nan, 0]])
    assert err.value.field == "vectors[0]"
    assert len(ix) == 3


# --------------------------------------------------------------------------- reference

@st.composite
def tied_data(draw):
    """Rows drawn from a small pool of distinct directions plus zero rows (ties galore)."""
    seed = draw(st.integers(0, 2**32 - 1))
    d = draw(st.integers(2, 8))
    n = draw(st.integers(1, 60))
    pool_size = draw(st.integers(1, 6))
    rng = np.random.default_rng(seed)
    pool = rng.standard_normal((pool_size, d)).astype(np.float32)
    pool = np.vstack([pool, np.zeros((1, d), np.float32)])
    pick = rng.integers(0, pool.shape[0], n)
    X = pool[pick]
    q = rng.standard_normal(d)
    # Distinct directions must be distinguishable in float32 (|gap| > 1e-5) from each other
    # and from the zero rows; exact ties come from repeated pool rows.
    ref = np.array([brute_force(pool[i:i + 1], [0], q, 1)[1][0] for i in range(pool.shape[0])])
    gaps = np.abs(ref[:, None] - ref[None, :])[np.triu_indices(ref.size, 1)]
    assume(gaps.size == 0 or gaps.min() > 1e-5)
    k = draw(st.integers(1, n + 3))
    mask = rng.random(n) < 0.5
    return X, q, k, mask


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tied_data())
def test_matches_float64_brute_force_with_ties_and_zero_vectors(data):
    X, q, k, mask = data
    ix = ExactIndex(X.shape[1], capacity=1)
    ix.add(X)
    stamps = np.arange(X.shape[0])
    want_rows, want_scores = brute_force(X, stamps, q, k)
    rows, scores = ix.search(q, k)
    assert rows.tolist() == want_rows.tolist()
    np.testing.assert_allclose(scores, want_scores, atol=2e-6)
    # Batched path (blocked sgemm) gives exactly the single-query answer.
    brows, bscores = ix.search(np.vstack([q, q * 3.0]), k)
    assert brows[0].tolist() == want_rows.tolist() and brows[1].tolist() == want_rows.tolist()
    # Filtered search (mask, scattered rows) against the reference on the subset.
    cand = np.flatnonzero(mask)
    want_rows, want_scores = brute_force(X, stamps, q, k, cand)
    for c in (mask, cand, cand[::-1]):
        rows, scores = ix.search(q, k, candidates=c)
        assert rows.tolist() == want_rows.tolist()
        np.testing.assert_allclose(scores, want_scores, atol=2e-6)


def test_recency_breaks_ties_with_custom_stamps():
    ix = ExactIndex(2)
    ix.add([[1, 0], [2, 0], [1, 0], [0, 0], [0, 0]], stamps=[10, 30, 20, 5, 7])
    rows, scores = ix.search([1, 0], 5)
    assert rows.tolist() == [1, 2, 0, 4, 3]
    assert scores.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_threaded_and_blocked_paths_agree_with_reference(monkeypatch):
    # Enough rows that both the thread split and several sgemm blocks are exercised.
    monkeypatch.setattr(index_search, "_MIN_SHARE", 2048)
    monkeypatch.setattr(index_search, "BLOCK_ROWS", 1024)
    rng = np.random.default_rng(7)
    X = rng.standard_normal((9000, 6)).astype(np.float32)
    X[::7] = X[3]            # many exact ties
    X[::11] = 0.0            # zero rows
    ix = ExactIndex(6, capacity=16)
    for a in range(0, 9000, 2500):   # incremental adds, with growth
        ix.add(X[a:a + 2500])
    Q = rng.standard_normal((5, 6))
    Q[0] = X[3]
    stamps = np.arange(9000)
    cand = np.flatnonzero(rng.random(9000) < 0.6)
    brows, bscores = ix.search(Q, 12)
    crows, cscores = ix.search(Q, 12, candidates=cand)
    for i in range(5):
        want, want_s = brute_force(X, stamps, Q[i], 12)
        assert brows[i].tolist() == want.tolist()
        np.testing.assert_allclose(bscores[i], want_s, atol=2e-6)
        assert ix.search(Q[i], 12)[0].tolist() == want.tolist()
        want, want_s = brute_force(X, stamps, Q[i], 12, cand)
        assert crows[i].tolist() == want.tolist()
        assert ix.search(Q[i], 12, candidates=cand)[0].tolist() == want.tolist()
    # Query 0 equals row 3: its duplicates (score 1) come newest first.
    dup = np.flatnonzero((X == X[3]).all(axis=1))[::-1][:12]
    assert brows[0].tolist() == dup.tolist()


def test_contiguous_candidates_are_a_slice_and_results_are_global_rows():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 4)).astype(np.float32)
    ix = ExactIndex(4)
    ix.add(X)
    rows, _ = ix.search(X[30], 3, candidates=np.arange(20, 40))
    assert rows[0] == 30 and np.all((rows >= 20) & (rows < 40))
    assert index_search.candidate_rows(np.arange(20, 40), 50) == (20, 40, None)
    assert index_search.candidate_rows([5, 5, 3], 50)[2].tolist() == [3, 5]  # deduped, sorted
    rows, _ = ix.search(X[0], 5, candidates=[5, 5, 3])
    assert sorted(rows.tolist()) == [3, 5]


def test_inverse_norms_edges():
    X = np.array([[3, 4], [0, 0], [1e-35, 0], [1e30, 1e30]], dtype=np.float32)
    inv = inverse_norms(X)
    np.testing.assert_allclose(inv, [0.2, 0.0, 0.0, 1 / (1e30 * np.sqrt(2))], rtol=1e-6)
    with pytest.raises(ConfigError) as err:
        inverse_norms(np.array([[1, 1], [np.inf, 0]], dtype=np.float32), "f")
    assert err.value.field == "f[1]"


# --------------------------------------------------------------------------- column store

def test_column_store_growth_prefix_drop_and_keep():
    cs = ColumnStore({"a": (np.int64, ()), "v": (np.float32, (2,)), "o": (object, ())}, 2)
    for dst, src in cs.claim(3):
        cs.array("a")[dst] = np.arange(3)[src]
        cs.array("v")[dst] = np.arange(6, dtype=np.float32).reshape(3, 2)[src]
        cs.array("o")[dst] = np.array(["x", "y", "z"], dtype=object)[src]
    assert cs.capacity == 4 and cs.view("a").tolist() == [0, 1, 2]
    cs.drop_prefix(2)
    assert cs.view("a").tolist() == [2] and cs.view("o").tolist() == ["z"]
    assert cs.array("o")[:2].tolist() == [None, None]        # released
    (dst, _), = cs.claim(1)                                   # shifts to the front, no growth
    cs.array("a")[dst] = 3
    cs.array("v")[dst] = [7, 8]
    assert cs.capacity == 4 and cs.view("a").tolist() == [2, 3]
    cs.keep(np.array([1]))
    assert cs.view("a").tolist() == [3] and cs.view("v").tolist() == [[7.0, 8.0]]
    cs.keep(np.array([0]))
    assert cs.view("a").tolist() == [3] and cs.view("o").tolist() == [None]


def test_column_store_ring_pairs_cross_the_end():
    cs = ColumnStore({"a": (np.int64, ())}, 5, ring=True)
    assert cs.claim(3) == [(slice(0, 3), slice(0, 3))]
    assert cs.claim(7) == [(slice(0, 5), slice(2, 7))]  # only the last 5 of 7
    assert cs.is_full
    assert cs.claim(2) == [(slice(0, 2), slice(0, 2))]
    assert cs.order().tolist() == [2, 3, 4, 0, 1]
    assert cs.claim(4) == [(slice(2, 5), slice(0, 3)), (slice(0, 1), slice(3, 4))]


# --------------------------------------------------------------------------- ANN backend

def _clustered(n, d, rng):
    centres = rng.standard_normal((20, d))
    return (centres[rng.integers(0, 20, n)] + 0.3 * rng.standard_normal((n, d))).astype(np.float32)


def test_ann_index_recall_interface_and_filter():
    rng = np.random.default_rng(11)
    X = _clustered(3000, 16, rng)
    X[5] = 0.0
    exact = ExactIndex(16)
    exact.add(X)
    ann = AnnIndex.from_exact(exact, M=16, ef_search=64)
    Q = _clustered(40, 16, rng)
    assert recall_at_k(exact, exact, Q, 10) == 1.0
    assert recall_at_k(ann, exact, Q, 10) >= 0.95
    rows, scores = ann.search(Q[0], 5)
    assert rows.shape == (5,) and scores.dtype == np.float32
    assert np.all(np.diff(scores) <= 0) and not np.isnan(scores).any()
    cand = np.flatnonzero(rng.random(3000) < 0.3)
    rows, _ = ann.search(Q, 10, candidates=cand)
    assert np.isin(rows[rows >= 0], cand).all()
    assert recall_at_k(ann, exact, Q, 10, candidates=cand) >= 0.9
    rows, _ = ann.search(Q[0], 10, candidates=np.zeros(3000, bool))
    assert rows.size == 0
    with pytest.raises(ConfigError):
        ann.search(Q[0], 0)
    with pytest.raises(ConfigError):
        ann.search(np.zeros(16), 3)


def test_ann_index_without_faiss_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # makes `import faiss` fail
    with pytest.raises(ConfigError, match=r'pip install "dyna\[ann\]"'):
        AnnIndex(8)


def test_query_norm_neither_overflows_nor_underflows_in_float64():
    # |q|^2 of a 1e200 query overflows float64 (unscaled, it would become an all-zero query:
    # every score 0, rows in stamp order); of a 1e-200 query it underflows (it would look
    # like a zero query and be refused). Both are finite, nonzero directions.
    ix = ExactIndex(3)
    ix.add([[1, 0, 0], [0, 1, 0], [-1, 0, 0], [1, 1, 0]])
    for scale in (1e200, 1e-200, 1e-310):
        rows, scores = ix.search(np.array([scale, 0.0, 0.0]), 4)
        assert rows.tolist() == [0, 3, 1, 2]
        np.testing.assert_allclose(scores, [1.0, 1 / math.sqrt(2), 0.0, -1.0], atol=1e-7)
    rows, scores = ix.search(np.array([[1e160, 1e160, 0.0], [0.0, -1e-170, 0.0]]), 2)
    assert rows.tolist() == [[3, 1], [2, 0]]
    np.testing.assert_allclose(scores, [[1.0, 1 / math.sqrt(2)], [0.0, 0.0]], atol=1e-7)
    with pytest.raises(ConfigError):
        ix.search(np.zeros(3), 1)


# ------------------------------------------------- equal vectors tie wherever they stand

def test_equal_vectors_score_equal_and_come_newest_first_in_every_blas_path():
    # BLAS rounds the same dot product differently at different row positions; results are
    # rescored by one compiled dot product, so copies of a vector tie exactly.
    rng = np.random.default_rng(6)
    v = rng.normal(size=16).astype(np.float32)
    ix = ExactIndex(16)
    ix.add(np.tile(v, (3, 1)))
    rows, scores = ix.search(rng.normal(size=16), 3)
    assert rows.tolist() == [2, 1, 0] and len(set(scores.tolist())) == 1
    rng = np.random.default_rng(0)
    v = rng.normal(size=16).astype(np.float32)
    ix = ExactIndex(16)
    ix.add(np.tile(v, (9, 1)))
    rows, scores = ix.search(rng.normal(size=(4, 16)), 3)
    assert rows.tolist() == [[8, 7, 6]] * 4
    assert all(len(set(s)) == 1 for s in scores.tolist())


@pytest.mark.parametrize("copies", [5, 40])   # fewer, and more, than the heap's slack
def test_duplicates_of_the_best_row_beyond_the_heap_are_all_found(monkeypatch, copies):
    monkeypatch.setattr(index_search, "_MIN_SHARE", 1024)
    monkeypatch.setattr(index_search, "BLOCK_ROWS", 512)
    rng = np.random.default_rng(11)
    d, n, k = 24, 6000, 12
    X = rng.standard_normal((n, d)).astype(np.float32)
    Q = rng.standard_normal((3, d))
    best = (Q[0] / np.linalg.norm(Q[0]) + 0.05 * rng.standard_normal(d)).astype(np.float32)
    where = np.sort(rng.choice(n, copies, replace=False))
    X[where] = best
    ix = ExactIndex(d, capacity=16)
    for a in range(0, n, 1700):
        ix.add(X[a:a + 1700])
    want = where[::-1][:k]                          # the copies, newest first
    rows, scores = ix.search(Q, k)
    if copies >= k:
        assert rows[0].tolist() == want.tolist() and len(set(scores[0].tolist())) == 1
        assert ix.search(Q[0], k)[0].tolist() == want.tolist()
    else:
        assert rows[0, :copies].tolist() == want.tolist()
    stamps = np.arange(n)
    for i in range(3):
        ref, _ = brute_force(X, stamps, Q[i], k)
        assert rows[i].tolist() == ref.tolist()
        assert ix.search(Q[i], k)[0].tolist() == ref.tolist()
    cand = np.flatnonzero(rng.random(n) < 0.7)
    cand = np.union1d(cand, where)
    rows_c, _ = ix.search(Q, k, candidates=cand)
    for i in range(3):
        ref, _ = brute_force(X, stamps, Q[i], k, cand)
        assert rows_c[i].tolist() == ref.tolist()
        assert ix.search(Q[i], k, candidates=cand)[0].tolist() == ref.tolist()
