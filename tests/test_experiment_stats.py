"""Bootstrap statistics: hand-computed means, agreement with scipy, determinism, edge cases."""

import warnings

import numpy as np
import polars as pl
import pytest
from scipy import stats

from dyna.experiment.stats import bootstrap_ci, curve_ci, diff_ci, iqm, per_run_ci


def test_mean_matches_hand_computation():
    x = np.array([[1.0, 10.0], [2.0, 20.0], [6.0, 60.0]])
    ci = bootstrap_ci(x)
    np.testing.assert_array_equal(ci.estimate, [3.0, 30.0])   # (1+2+6)/3, (10+20+60)/3
    assert ci.n == 3
    assert np.all(ci.low <= ci.estimate) and np.all(ci.estimate <= ci.high)
    # the interval lies within the sample range
    assert ci.low[0] >= 1.0 and ci.high[0] <= 6.0


def test_iqm_hand_computation():
    # 8 values: trim 2 from each end, mean of the middle four: (3 + 4 + 5 + 6) / 4 = 4.5
    assert iqm(np.array([1.0, 2, 3, 4, 5, 6, 7, 100])) == 4.5
    ci = bootstrap_ci(np.array([1.0, 2, 3, 4, 5, 6, 7, 100]), statistic="iqm")
    assert float(ci.estimate) == 4.5


@pytest.mark.parametrize("method", ["BCa", "percentile"])
def test_interval_equals_scipy_bootstrap_called_directly(method):
    rng = np.random.default_rng(1)
    x = rng.exponential(50.0, size=(20, 6))
    ours = bootstrap_ci(x, n_resamples=999, seed=7, method=method, confidence=0.9)
    ref = stats.bootstrap((x,), lambda a, axis: np.mean(a, axis=axis), n_resamples=999,
                          batch=250, vectorized=True, axis=0, confidence_level=0.9,
                          method=method, rng=np.random.default_rng(7))
    np.testing.assert_allclose(ours.low, ref.confidence_interval.low, rtol=1e-12)
    np.testing.assert_allclose(ours.high, ref.confidence_interval.high, rtol=1e-12)


def test_columns_are_independent_of_each_other_and_deterministic():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(15, 40))
    full = bootstrap_ci(x, seed=5)
    part = bootstrap_ci(x[:, 10:13], seed=5)
    np.testing.assert_array_equal(full.low[10:13], part.low)
    np.testing.assert_array_equal(full.high[10:13], part.high)
    again = bootstrap_ci(x, seed=5)
    np.testing.assert_array_equal(full.low, again.low)
    other = bootstrap_ci(x, seed=6)
    assert not np.array_equal(full.low, other.low)


def test_one_run_has_no_interval_and_constant_runs_have_zero_width():
    one = bootstrap_ci(np.array([[3.0, 4.0]]))
    np.testing.assert_array_equal(one.estimate, [3.0, 4.0])
    assert np.isnan(one.low).all() and np.isnan(one.high).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flat = bootstrap_ci(np.array([[14.0, 1.0], [14.0, 2.0], [14.0, 3.0]]))
    assert flat.low[0] == flat.high[0] == 14.0
    assert flat.low[1] < 2.0 < flat.high[1]


def test_rejects_non_finite_and_empty():
    with pytest.raises(ValueError):
        bootstrap_ci(np.array([1.0, np.nan]))
    with pytest.raises(ValueError):
        bootstrap_ci(np.zeros((0, 3)))
    empty = per_run_ci(np.array([]))
    assert np.isnan(empty.estimate) and empty.n == 0


def test_interval_covers_true_mean_at_about_the_nominal_rate():
    # 200 experiments of 30 normal runs: a 95% interval should miss the true mean ~5% of
    # the time; allow 1%..12%.
    rng = np.random.default_rng(3)
    x = rng.normal(loc=2.0, size=(30, 200))
    ci = bootstrap_ci(x, n_resamples=1000, seed=0, method="percentile")
    miss = np.mean((ci.low > 2.0) | (ci.high < 2.0))
    assert 0.01 <= miss <= 0.12


def test_curve_ci_groups_and_orders():
    frame = pl.DataFrame({
        "variant": ["b"] * 6 + ["a"] * 6,
        "run": [0, 0, 0, 1, 1, 1] * 2,
        "episode": [1, 2, 3] * 4,
        "steps": [10, 20, 30, 12, 22, 32, 1, 2, 3, 3, 4, 5],
    })
    out = curve_ci(frame, by=["variant"], x="episode", y="steps", n_resamples=200)
    assert out.get_column("variant").to_list() == ["b"] * 3 + ["a"] * 3
    assert out.get_column("episode").to_list() == [1, 2, 3, 1, 2, 3]
    assert out.get_column("estimate").to_list() == [11, 21, 31, 2, 3, 4]
    assert out.get_column("n").to_list() == [2] * 6


def test_curve_ci_ragged_runs_use_available_values():
    frame = pl.DataFrame({"variant": ["v"] * 5, "run": [0, 0, 0, 1, 1],
                          "episode": [1, 2, 3, 1, 2], "steps": [4.0, 6.0, 8.0, 2.0, 2.0]})
    out = curve_ci(frame, by=["variant"], x="episode", y="steps", n_resamples=200)
    assert out.get_column("estimate").to_list() == [3.0, 4.0, 8.0]
    assert out.get_column("n").to_list() == [2, 2, 1]
    assert np.isnan(out.get_column("low").to_list()[2])


def test_diff_ci_hand_computed_estimate_and_sign():
    a = np.array([10.0, 12.0, 14.0, 16.0])
    b = np.array([1.0, 2.0, 3.0, 2.0])
    d = diff_ci(a, b, n_resamples=500)
    assert float(d.estimate) == 13.0 - 2.0
    assert d.low > 0 and d.high < 16.0 - 1.0
