"""Tests of dyna.competence: Beta posteriors, intervals, discounting."""

import math

import numpy as np
import pytest
from scipy import stats

from dyna.competence import BetaCompetence, beta_interval, clopper_pearson, prior_shapes
from dyna.errors import ConfigError


# ------------------------------------------------------------------ COMP-01
def test_comp01_zero_of_eighteen():
    c = BetaCompetence()
    c.update_many(["t"] * 18, [False] * 18)
    assert c.posterior("t") == (1.0, 19.0)
    assert c.mean("t") == pytest.approx(0.05, abs=1e-15)
    lo, hi = c.interval("t", 0.95)
    assert lo == pytest.approx(0.0013316, abs=5e-8)
    assert hi == pytest.approx(0.1764669, abs=5e-8)


def test_comp01_eighteen_of_eighteen():
    c = BetaCompetence()
    for _ in range(18):
        c.update("t", True)
    assert c.posterior("t") == (19.0, 1.0)
    lo, hi = c.interval("t", 0.95)
    assert lo == pytest.approx(0.8235331, abs=5e-8)
    assert hi == pytest.approx(0.9986684, abs=5e-8)


def test_comp01_no_data():
    c = BetaCompetence()
    assert c.mean("never") == 0.5
    lo, hi = c.interval("never")
    assert lo == pytest.approx(0.025, abs=1e-12)
    assert hi == pytest.approx(0.975, abs=1e-12)
    assert "never" not in c  # reading does not create a row


def test_comp01_clopper_pearson_99():
    lo, hi = clopper_pearson(0, 18, 0.99)
    assert lo == 0.0 and hi == pytest.approx(0.2549850, abs=5e-8)
    lo, hi = clopper_pearson(18, 18, 0.99)
    assert lo == pytest.approx(0.7450150, abs=5e-8) and hi == 1.0


@pytest.mark.parametrize("prior", [(0, 0), (0.0, 1.0), (1.0, -1.0), (math.nan, 1.0),
                                   (math.inf, 1.0), "flat", 3])
def test_comp01_improper_prior_rejected_at_construction(prior):
    with pytest.raises(ConfigError) as e:
        BetaCompetence(prior=prior)
    assert e.value.field.startswith("prior")
    assert isinstance(e.value, ValueError)


def test_clopper_pearson_vectorised_matches_textbook_formula_and_edges():
    n = np.arange(0, 31)
    k = np.concatenate([np.zeros(31, int), n, n // 2])
    nn = np.concatenate([n, n, n])
    lo, hi = clopper_pearson(k, nn, 0.9)
    assert np.isfinite(lo).all() and np.isfinite(hi).all()
    assert ((lo >= 0) & (hi <= 1) & (lo <= hi)).all()
    inner = (k > 0) & (k < nn)
    np.testing.assert_allclose(lo[inner], stats.beta.ppf(0.05, k[inner], nn[inner] - k[inner] + 1))
    np.testing.assert_allclose(hi[inner], stats.beta.ppf(0.95, k[inner] + 1, nn[inner] - k[inner]))
    assert clopper_pearson(0, 0, 0.95) == (0.0, 1.0)
    with pytest.raises(ConfigError):
        clopper_pearson(5, 4)
    with pytest.raises(ConfigError):
        clopper_pearson(1.5, 4)


def test_beta_interval_matches_scipy_at_edges_for_many_counts():
    # 0 of n, n of n and 0 of 0, for the uniform and the Jeffreys prior.
    for a0, b0 in [(1.0, 1.0), (0.5, 0.5)]:
        n = np.arange(0, 201, dtype=float)
        for a, b in [(a0 + 0 * n, b0 + n), (a0 + n, b0 + 0 * n)]:
            lo, hi = beta_interval(a, b, 0.95)
            np.testing.assert_allclose(lo, stats.beta.ppf(0.025, a, b), rtol=1e-12)
            np.testing.assert_allclose(hi, stats.beta.ppf(0.975, a, b), rtol=1e-12)
            assert np.isfinite(lo).all() and np.isfinite(hi).all()
            assert ((0 <= lo) & (lo <= hi) & (hi <= 1)).all()


def test_beta_interval_broadcasts_and_rejects_bad_shapes():
    lo, hi = beta_interval(np.ones((2, 1)), np.array([1.0, 19.0]), 0.95)
    assert lo.shape == (2, 2)
    assert isinstance(beta_interval(1, 1)[0], float)
    with pytest.raises(ConfigError) as e:
        beta_interval([1.0, 0.0], 1.0)
    assert e.value.field == "a"
    with pytest.raises(ConfigError) as e:
        beta_interval(1.0, 1.0, level=1.0)
    assert e.value.field == "level"


# ------------------------------------------------------------------ estimator
def test_priors():
    assert prior_shapes("uniform") == (1.0, 1.0)
    assert prior_shapes("jeffreys") == (0.5, 0.5)
    c = BetaCompetence(prior="jeffreys")
    c.update("k", True)
    assert c.posterior("k") == (1.5, 0.5)
    assert c.counts("k") == (1.0, 0.0)
    assert c.mean("k") == 0.75


def test_many_keys_vectorised_and_tuple_is_one_key():
    c = BetaCompetence()
    keys = [("t1", "a"), ("t1", "b"), ("t2", "a")]
    c.update_many([keys[0], keys[0], keys[1], keys[0]], [True, False, True, True])
    means = c.mean(keys)
    assert isinstance(means, np.ndarray) and means.shape == (3,)
    np.testing.assert_array_equal(means, [3 / 5, 2 / 3, 1 / 2])
    assert c.mean(("t1", "a")) == 3 / 5  # a tuple is a single key
    lo, hi = c.interval(keys)
    assert lo.shape == (3,)
    assert lo[2] == pytest.approx(0.025) and hi[2] == pytest.approx(0.975)
    assert c.keys() == [("t1", "a"), ("t1", "b")]
    np.testing.assert_array_equal(c.lower_bound(keys, 0.9), c.interval(keys, 0.9)[0])


def test_weights_and_bad_weight():
    c = BetaCompetence()
    c.update("k", True, weight=2.5)
    c.update_many(["k", "k"], [False, True], weights=[0.5, 0.25])
    assert c.posterior("k") == (1 + 2.5 + 0.25, 1 + 0.5)
    for w in (-1.0, math.nan, math.inf):
        with pytest.raises(ConfigError):
            c.update("k", True, weight=w)
    with pytest.raises(ConfigError) as e:
        c.update_many(["k", "j"], [True, False], weights=[1.0, -2.0])
    assert e.value.field == "weights"
    assert "j" not in c and c.posterior("k") == (3.75, 1.5)  # nothing written
    with pytest.raises(ConfigError):
        c.update_many(["k"], [True, False])


def test_discount_rule_by_hand():
    # a <- a0 + d (a - a0) before each update, then add the outcome.
    c = BetaCompetence(discount=0.5)
    c.update("k", True)       # a = 1 + 0 + 1 = 2, b = 1
    c.update("k", True)       # a = 1 + 0.5 * 1 + 1 = 2.5
    c.update("k", False)      # a = 1 + 0.5 * 1.5 = 1.75, b = 1 + 0 + 1 = 2
    assert c.posterior("k") == (1.75, 2.0)
    assert c.counts("k") == (0.75, 1.0)
    # long run: effective evidence bounded by 1 / (1 - d) = 2
    for _ in range(100):
        c.update("k", True)
    a, b = c.posterior("k")
    assert a - 1 == pytest.approx(2.0) and b - 1 == pytest.approx(0.0, abs=1e-20)


def test_update_many_equals_sequential_updates_with_discount():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 7, size=500).tolist()
    succ = rng.random(500) < 0.6
    w = rng.random(500)
    seq = BetaCompetence(prior="jeffreys", discount=0.9)
    bat = BetaCompetence(prior="jeffreys", discount=0.9)
    for k in range(7):  # some prior evidence before the batch
        seq.update(k, True)
        bat.update(k, True)
    for k, s, wi in zip(keys, succ, w):
        seq.update(k, bool(s), float(wi))
    bat.update_many(keys[:200], succ[:200], w[:200])
    bat.update_many(keys[200:], succ[200:], w[200:])
    ks = list(range(7))
    np.testing.assert_allclose(bat._shapes(ks)[0], seq._shapes(ks)[0], rtol=1e-12)
    np.testing.assert_allclose(bat._shapes(ks)[1], seq._shapes(ks)[1], rtol=1e-12)


def test_discount_validation():
    for d in (0.0, -0.1, 1.5, math.nan):
        with pytest.raises(ConfigError) as e:
            BetaCompetence(discount=d)
        assert e.value.field == "discount"


def test_thompson_sample_reproducible_and_distributed():
    c = BetaCompetence()
    c.update_many(["x"] * 30, [True] * 20 + [False] * 10)
    d1 = c.sample(["x"] * 20000, np.random.default_rng(7))
    d2 = c.sample(["x"] * 20000, 7)
    np.testing.assert_array_equal(d1, d2)
    assert d1.mean() == pytest.approx(21 / 32, abs=0.005)
    assert isinstance(c.sample("x", 1), float)
    # Kolmogorov-Smirnov against the exact posterior Beta(21, 11)
    assert stats.kstest(d1, stats.beta(21, 11).cdf).pvalue > 1e-3


def test_summary_reset_and_set_posterior():
    c = BetaCompetence()
    c.update_many(["a", "a", "b"], [True, False, False])
    s = c.summary(["a", "b"])
    assert s["n_success"] == [1.0, 0.0] and s["n_failure"] == [1.0, 1.0]
    assert s["mean"] == [0.5, 1 / 3]
    c.reset("a")
    assert c.posterior("a") == (1.0, 1.0)
    c.set_posterior("z", 3.0, 4.0)
    assert c.posterior("z") == (3.0, 4.0)
    with pytest.raises(ConfigError):
        c.set_posterior("z", 0.0, 4.0)
    c.reset()
    assert len(c) == 0 and c.posterior("b") == (1.0, 1.0)


def test_growth_keeps_values():
    c = BetaCompetence()
    c.update_many(list(range(1000)), np.arange(1000) % 3 == 0)
    a, b = c._shapes(list(range(1000)))
    np.testing.assert_array_equal(a, 1 + (np.arange(1000) % 3 == 0))
    np.testing.assert_array_equal(b, 1 + (np.arange(1000) % 3 != 0))


def test_quantiles_are_the_bits_scipy_stats_gives():
    """The Beta and normal quantiles come from scipy.special (betaincinv, ndtri), the
    routines scipy.stats.beta.ppf and norm.ppf call, without their ~45 us of argument
    handling: the same bits on 60,000 shape pairs (small, integral and large), both tails, at
    six levels."""
    from dyna.competence import wilson_interval

    rng = np.random.default_rng(17)
    n = 20_000
    a = np.concatenate([rng.uniform(0.01, 5, n), rng.integers(1, 2000, n).astype(float),
                        rng.uniform(1, 1e4, n)])
    b = np.concatenate([rng.uniform(0.01, 5, n), rng.integers(1, 2000, n).astype(float),
                        rng.uniform(1, 1e4, n)])
    for level in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
        lo, hi = beta_interval(a, b, level)
        tail = (1 - level) / 2
        assert np.array_equal(lo, np.clip(stats.beta.ppf(tail, a, b), 0, 1))
        assert np.array_equal(hi, np.clip(stats.beta.ppf(1 - tail, a, b), 0, 1))
    k = rng.integers(0, 50, 5000)
    m = k + rng.integers(0, 50, 5000)
    lo, hi = clopper_pearson(k, m, 0.95)
    inner = (k > 0) & (k < m)
    t = (1 - 0.95) / 2
    assert np.array_equal(lo[inner], stats.beta.ppf(t, k[inner], m[inner] - k[inner] + 1))
    assert np.array_equal(hi[inner], stats.beta.ppf(1 - t, k[inner] + 1, m[inner] - k[inner]))
    # Wilson's z is norm.ppf's: 1.959963984540054 at 95%
    z = stats.norm.ppf(0.975)
    lo, _ = wilson_interval(7, 20, 0.95)
    p = 7 / 20
    want = (p + z * z / 40 - z * math.sqrt(p * (1 - p) / 20 + z * z / 1600)) / (1 + z * z / 20)
    assert lo == pytest.approx(want, rel=0, abs=1e-15)
