"""Risk-coverage, AURC / E-AURC, oracles, recovery and log-growth fits."""

import itertools
import math

import numpy as np
import pytest

from dyna.errors import ConfigError
from dyna.experiment.kinds.escalation.job import checkpoints_for
from dyna.experiment.kinds.escalation.metrics import (aurc, e_aurc, fit_log_growth, optimal_aurc,
                                                      oracle_actions, recovery_steps,
                                                      risk_coverage)

# hand-made table: 5 tasks, agent fails tasks 2 and 4 (loss 1)
LOSS = np.array([0, 1, 0, 1, 0], dtype=float)


def test_aurc_of_perfect_and_constant_scores_by_hand():
    # perfect score: successes first. risks at k = 1..5: 0, 0, 0, 1/4, 2/5
    perfect = 1.0 - LOSS
    cov, risk = risk_coverage(perfect, LOSS)
    np.testing.assert_allclose(cov, [0.2, 0.4, 0.6, 0.8, 1.0])
    np.testing.assert_allclose(risk, [0, 0, 0, 0.25, 0.4])
    assert aurc(perfect, LOSS) == pytest.approx((0.25 + 0.4) / 5)  # 0.13
    assert optimal_aurc(LOSS) == pytest.approx(0.13)
    assert e_aurc(perfect, LOSS) == pytest.approx(0.0)
    # constant score: one tie block, expected risk 2/5 at every coverage
    const = np.full(5, 0.7)
    np.testing.assert_allclose(risk_coverage(const, LOSS)[1], [0.4] * 5)
    assert aurc(const, LOSS) == pytest.approx(0.4)
    assert e_aurc(const, LOSS) == pytest.approx(0.4 - 0.13)
    # worst score: failures first. risks 1, 1, 2/3, 2/4, 2/5
    assert aurc(LOSS, LOSS) == pytest.approx((1 + 1 + 2 / 3 + 0.5 + 0.4) / 5)


def test_ties_equal_the_average_over_all_orders_within_ties():
    scores = np.array([0.9, 0.5, 0.5, 0.5, 0.2, 0.2])
    loss = np.array([0, 1, 0, 1, 1, 0], dtype=float)
    # brute force: every permutation of the tied blocks, plain risk curve, averaged
    curves = []
    for b1 in itertools.permutations([1, 2, 3]):
        for b2 in itertools.permutations([4, 5]):
            order = [0, *b1, *b2]
            curves.append(np.cumsum(loss[order]) / np.arange(1, 7))
    np.testing.assert_allclose(risk_coverage(scores, loss)[1], np.mean(curves, axis=0),
                               rtol=1e-12)
    # invariant to the input order of tied items
    perm = np.array([3, 0, 5, 1, 4, 2])
    assert aurc(scores[perm], loss[perm]) == pytest.approx(aurc(scores, loss), rel=1e-12)


def test_random_score_has_expected_aurc_equal_to_failure_rate():
    rng = np.random.default_rng(0)
    loss = (rng.random(400) < 0.3).astype(float)
    draws = [aurc(rng.random(400), loss) for _ in range(300)]
    assert np.mean(draws) == pytest.approx(loss.mean(), abs=0.01)
    # the closed form of the optimum: (1/n) sum_{k>s} (k - s) / k
    n, s = loss.size, int((1 - loss).sum())
    assert optimal_aurc(loss) == pytest.approx(sum((k - s) / k for k in range(s + 1, n + 1)) / n)


def test_bad_metric_input():
    with pytest.raises(ConfigError):
        aurc([0.1, 0.2], [1.0])
    with pytest.raises(ConfigError):
        aurc([], [])
    with pytest.raises(ConfigError):
        aurc([math.nan], [1.0])


def test_oracle_actions_follow_chow():
    p = np.array([0.5, 0.79, 0.8, 0.95])
    assert oracle_actions(p, 1.0, 5.0).tolist() == [False, False, True, True]
    # an attempt cost moves the threshold to 1 - (1 - 0.5) / 5 = 0.9
    assert oracle_actions(p, 1.0, 5.0, 0.5).tolist() == [False, False, False, True]


def test_recovery_steps_on_a_hand_made_curve():
    g = np.r_[np.ones(100), np.zeros(30), np.linspace(0, 1, 41)[1:], np.ones(100)]
    # level before = 1; windows of 10 must average >= 0.95
    j = recovery_steps(g, 100, window=10, tolerance=0.05)
    window_means = [g[100 + i:110 + i].mean() for i in range(len(g) - 110)]
    assert j == next(i for i, m in enumerate(window_means) if m >= 0.95)
    assert recovery_steps(np.r_[np.ones(50), np.zeros(50)], 50, window=10) is None
    assert recovery_steps(np.ones(100), 50, window=10) == 0
    assert recovery_steps(np.ones(100), 5, window=10) is None  # not enough history


def test_fit_log_growth_separates_log_from_linear():
    t = np.geomspace(10, 10_000, 30)
    f = fit_log_growth(t, 3.0 + 7.0 * np.log(t))
    assert f["slope_log"] == pytest.approx(7.0) and f["r2_log"] == pytest.approx(1.0)
    assert f["r2_linear"] < 0.9 and f["exponent"] < 0.5
    g = fit_log_growth(t, 0.2 * t)
    assert g["exponent"] == pytest.approx(1.0) and g["r2_linear"] == pytest.approx(1.0)


def test_checkpoints_cover_log_and_linear_scales():
    ck = checkpoints_for(4000, 40)
    assert ck[0] == 1 and ck[-1] == 4000 and (np.diff(ck) > 0).all()
    assert 40 <= ck.size <= 80 and {1, 2, 3}.issubset(set(ck.tolist()))
    assert np.max(np.diff(ck)) <= 4000 / 39 + 1


def test_regret_growth_is_told_apart_by_aic():
    import numpy as np

    from dyna.experiment.kinds.escalation.metrics import growth_aic
    t = np.arange(10, 2001, 10, dtype=float)
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.05, t.size)
    assert growth_aic(t, 3.0 + 2.0 * np.log(t) + noise)["growth"] == "log"
    assert growth_aic(t, 1.0 + 0.5 * np.sqrt(t) + noise)["growth"] == "sqrt"
    lin = growth_aic(t, 0.02 * t + noise)
    assert (lin["growth"], lin["linear_growth"]) == ("linear", True)
    flat = growth_aic(t, 5.0 - 0.001 * t + noise)
    assert flat["linear_growth"] is False          # decreasing: not flagged
    # AIC by hand for the log model on an exact fit with one bad point
    y = 1.0 + np.log(t)
    y[0] += 1.0
    A = np.c_[np.ones(t.size), np.log(t)]
    coef = np.linalg.lstsq(A, y, rcond=None)[0]
    rss = float(((y - A @ coef) ** 2).sum())
    assert growth_aic(t, y)["aic_log"] == pytest.approx(t.size * np.log(rss / t.size) + 6)
    assert np.isnan(growth_aic(t[:2], y[:2])["aic_sqrt"])
