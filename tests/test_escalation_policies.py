"""Vectorised escalation policies and the lockstep replay (dyna.escalation)."""

import numpy as np
import pytest
from scipy import integrate, stats

from dyna.competence import BetaCompetence
from dyna.errors import ConfigError
from dyna.escalation import (RISK_CLASSES, AlwaysEscalate, CostSensitive, EpsilonExplore,
                             LowerBoundThreshold, MeanThreshold, MinEpisodes, NeverEscalate,
                             ThompsonSampling, chow_threshold, make_policy, run_policies)

RNG = np.random.default_rng(12345)
A = 0.5 + RNG.integers(0, 400, 1000).astype(float)
B = 0.5 + RNG.integers(0, 60, 1000).astype(float)


@pytest.mark.parametrize("p_star,a0,n_min", [(0.8, 1.0, 13), (0.95, 1.0, 58), (0.99, 1.0, 298),
                                             (0.8, 0.5, 9), (0.95, 0.5, 38), (0.99, 0.5, 191)])
def test_vectorised_lower_bound_rule_first_acts_after_the_closed_form_run(p_star, a0, n_min):
    # s successes in a row from Beta(a0, a0): act iff B^-1(0.05; a0 + s, a0) >= p*.
    pol = LowerBoundThreshold(p_star, 0.05)
    s = np.arange(0, 400, dtype=float)
    acts = pol.act(a0 + s, np.full_like(s, a0), s)
    assert int(np.argmax(acts)) == n_min and acts[n_min:].all() and not acts[:n_min].any()
    # the same boundary from scipy's quantile, and from the uniform-prior closed form
    lower = stats.beta.ppf(0.05, a0 + s, a0)
    np.testing.assert_array_equal(acts, lower >= p_star)
    if a0 == 1.0:
        np.testing.assert_allclose(pol.bound(1.0 + s, 1.0), 0.05 ** (1.0 / (s + 1.0)),
                                   rtol=1e-12)


def test_cdf_form_equals_quantile_form_on_random_posteriors():
    for p_star, delta in [(0.8, 0.05), (0.9, 0.1), (0.95, 0.025)]:
        pol = LowerBoundThreshold(p_star, delta)
        lo = stats.beta.ppf(delta, A, B)
        np.testing.assert_allclose(pol.bound(A, B), lo, rtol=0, atol=1e-9)
        far = np.abs(lo - p_star) > 1e-9  # away from the boundary, both forms agree exactly
        np.testing.assert_array_equal(pol.act(A, B, A + B)[far], (lo >= p_star)[far])


def test_mean_chow_never_always():
    mean = A / (A + B)
    np.testing.assert_array_equal(MeanThreshold(0.9).act(A, B, A), mean >= 0.9)
    assert NeverEscalate().act(A, B, A).all() and not AlwaysEscalate().act(A, B, A).any()
    # Chow: 1 - c_e / c_f; value-and-cost form 1 - (c_e - c_act) / (c_f + value)
    assert chow_threshold(1.0, 5.0) == pytest.approx(0.8)
    assert chow_threshold(10.0, 40.0, c_act=2.0, value=10.0) == pytest.approx(1 - 8 / 50)
    pol = CostSensitive(1.0, 20.0)
    assert pol.p_star == pytest.approx(0.95)
    np.testing.assert_array_equal(pol.act(A, B, A), mean >= 0.95)
    # escalation dearer than any failure: act always; attempt dearer than escalation: never
    assert chow_threshold(6.0, 5.0) < 0 and chow_threshold(1.0, 5.0, c_act=2.0) > 1


def test_thompson_is_inverse_cdf_sampling_and_acts_with_posterior_probability():
    pol = ThompsonSampling(0.8)
    u = RNG.random((2, A.size))
    theta = stats.beta.ppf(u[0], A, B)
    far = np.abs(theta - 0.8) > 1e-9
    np.testing.assert_array_equal(pol.act(A, B, A, u)[far], (theta >= 0.8)[far])
    # acting frequency of one type = P(theta >= p*) = 1 - I_0.8(a, b) (quadrature)
    a, b = 9.0, 3.0
    u = np.random.default_rng(7).random((2, 200_000))
    freq = pol.act(np.full(u.shape[1], a), np.full(u.shape[1], b), None, u).mean()
    p_act = integrate.quad(lambda x: stats.beta.pdf(x, a, b), 0.8, 1.0)[0]
    assert freq == pytest.approx(p_act, abs=4 * np.sqrt(p_act * (1 - p_act) / u.shape[1]))
    with pytest.raises(ConfigError) as err:
        pol.act(A, B, A)
    assert err.value.field == "u"


def test_gates_min_episodes_and_epsilon():
    n = np.array([0.0, 9.0, 10.0, 50.0])
    a, b = np.full(4, 30.0), np.full(4, 1.0)
    pol = MinEpisodes(MeanThreshold(0.8), 10)
    assert pol.act(a, b, n).tolist() == [False, False, True, True]
    assert pol.name == "mean+min10"
    u = np.array([[0.5] * 4, [0.01, 0.2, 0.04, 0.9]])
    eps = EpsilonExplore(AlwaysEscalate(), 0.05)
    assert eps.act(a, b, n, u).tolist() == [True, False, True, False]
    assert make_policy("mean", min_episodes=10, epsilon=0.05).name == "mean+min10+eps0.05"


def test_make_policy_errors_name_the_field():
    with pytest.raises(ConfigError) as err:
        make_policy("median")
    assert err.value.field == "rule"
    with pytest.raises(ConfigError) as err:
        make_policy("lower_bound", delta=1.5, field_prefix="variants.x.")
    assert err.value.field == "variants.x.delta"
    with pytest.raises(ConfigError) as err:
        make_policy("mean", p_star=-0.1)
    assert err.value.field == "p_star"
    with pytest.raises(ConfigError) as err:
        chow_threshold(1.0, 0.0)
    assert err.value.field == "c_failure"


def test_risk_class_presets():
    assert {k: (rc.p_star, rc.delta, rc.requires_provenance) for k, rc in RISK_CLASSES.items()} \
        == {"low_stakes": (0.8, None, False), "elevated": (0.9, None, True),
            "high_stakes": (0.95, 0.05, True)}
    assert RISK_CLASSES["low_stakes"].preset_policy() == MeanThreshold(0.8)
    assert RISK_CLASSES["high_stakes"].preset_policy() == LowerBoundThreshold(0.95, 0.05)



def test_mean_threshold_acts_at_an_exact_tie_like_threshold_policy():
    """0.3 / (0.3 + 0.1) is 0.75 exactly but 0.7499999999999999 in floats."""
    from dyna.ties import mean_below
    assert 0.3 / (0.3 + 0.1) < 0.75 and not mean_below(0.3, 0.1, 0.75)
    out = MeanThreshold(0.75).act(np.array([[0.3, 0.3], [3.0, 0.29]]), np.array([0.1, 0.1]),
                                  None)
    assert out.dtype == bool and out.tolist() == [[True, True], [True, False]]
    assert RISK_CLASSES["low_stakes"].preset_policy().act([8.0, 7.9], [2.0, 2.0], None).tolist() \
        == [True, False]


# ------------------------------------------------------------------------- run_policies

def _stream(T=300, K=3, seed=0):
    rng = np.random.default_rng(seed)
    types = rng.integers(0, K, (1, T))
    outcomes = rng.random((1, T)) < np.array([0.3, 0.8, 0.95])[types]
    return types, outcomes


def test_censored_trap_mean_rule_never_acts_never_learns():
    types, outcomes = _stream()
    out = run_policies([MeanThreshold(0.8)], [0], types, outcomes, n_types=3, c_escalate=1.0,
                       c_failure=5.0, feedback="censored", checkpoints=[300])
    assert not out["act"].any() and not out["observed"].any()
    assert (out["score"] == 0.5).all() and (out["n_counted"] == 0).all()
    np.testing.assert_array_equal(out["a_ck"][0], np.ones((1, 3)))
    assert out["cost"].sum() == 300.0
    full = run_policies([MeanThreshold(0.8)], [0], types, outcomes, n_types=3, c_escalate=1.0,
                        c_failure=5.0, feedback="full", checkpoints=[300])
    counts = [np.bincount(types[0][outcomes[0]], minlength=3),
              np.bincount(types[0][~outcomes[0]], minlength=3)]
    np.testing.assert_array_equal(full["a_ck"][0, 0], 1 + counts[0])
    np.testing.assert_array_equal(full["b_ck"][0, 0], 1 + counts[1])
    assert full["act"].any()


def test_costs_and_per_step_scores_match_a_sequential_loop():
    types, outcomes = _stream(200, seed=3)
    comp = BetaCompetence(discount=0.9)
    pol = ThompsonSampling(0.8)
    u = np.random.default_rng(5).random((1, 200, 2))
    out = run_policies([pol], [0], types, outcomes, n_types=3, c_escalate=1.0, c_failure=5.0,
                       c_act=0.25, discount=0.9, discount_clock="update", u=u)
    total = 0.0
    for t in range(200):
        k, win = int(types[0, t]), bool(outcomes[0, t])
        a, b = comp.posterior(k)
        assert out["score"][0, t] == pytest.approx(a / (a + b), rel=1e-12)
        act = bool(pol.act(np.array([a]), np.array([b]), None, u[0, t][:, None])[0])
        assert act == out["act"][0, t]
        if act:
            comp.update(k, win)
            total += 0.25 + (0.0 if win else 5.0)
        else:
            total += 1.0
    assert out["cost"].sum() == pytest.approx(total, rel=1e-12)


def test_step_clock_discounts_every_type_every_task():
    # two types, full feedback, d = 0.5: after tasks (0: success), (1: failure)
    # type 0: a = 1 + 0.5 * (1 + 1 - 1) ... decayed once more at step 2
    out = run_policies([NeverEscalate()], [0], np.array([[0, 1]]), np.array([[True, False]]),
                       n_types=2, c_escalate=1.0, c_failure=1.0, discount=0.5,
                       feedback="full", checkpoints=[1, 2])
    np.testing.assert_allclose(out["a_ck"][:, 0], [[2.0, 1.0], [1.5, 1.0]])
    np.testing.assert_allclose(out["b_ck"][:, 0], [[1.0, 1.0], [1.0, 2.0]])


def test_provenance_lanes_count_only_verified_outcomes():
    types = np.zeros((2, 4), dtype=int)
    outcomes = np.array([[True, True, False, True]] * 2)
    verified = np.array([[True, False, True, False]] * 2)
    out = run_policies([NeverEscalate()], [0, 0], types, outcomes, n_types=1, c_escalate=1.0,
                       c_failure=5.0, verified=verified, requires_provenance=[False, True],
                       checkpoints=[4])
    assert out["a_ck"][0, :, 0].tolist() == [4.0, 2.0]
    assert out["b_ck"][0, :, 0].tolist() == [2.0, 2.0]


def test_lanes_are_independent_of_batching():
    types, outcomes = _stream(150, seed=9)
    types = np.repeat(types, 4, axis=0)
    outcomes = np.repeat(outcomes, 4, axis=0)
    u = np.random.default_rng(2).random((4, 150, 2))
    pols = [ThompsonSampling(0.8), MeanThreshold(0.8)]
    lanes = [0, 1, 0, 1]
    both = run_policies(pols, lanes, types, outcomes, n_types=3, c_escalate=1.0, c_failure=5.0,
                        u=u, discount=[1.0, 1.0, 0.95, 0.95])
    for lane in range(4):
        one = run_policies([pols[lanes[lane]]], [0], types[lane:lane + 1],
                           outcomes[lane:lane + 1], n_types=3, c_escalate=1.0, c_failure=5.0,
                           u=u[lane:lane + 1], discount=[1.0, 1.0, 0.95, 0.95][lane])
        np.testing.assert_array_equal(one["act"][0], both["act"][lane])
        np.testing.assert_array_equal(one["cost"][0], both["cost"][lane])


def test_run_policies_bad_input():
    types, outcomes = _stream(10)
    with pytest.raises(ConfigError) as err:
        run_policies([MeanThreshold()], [0], types, outcomes[:, :5], n_types=3, c_escalate=1,
                     c_failure=5)
    assert err.value.field == "outcomes"
    with pytest.raises(ConfigError) as err:
        run_policies([MeanThreshold()], [0], types, outcomes, n_types=2, c_escalate=1,
                     c_failure=5)
    assert err.value.field == "types"
    with pytest.raises(ConfigError) as err:
        run_policies([ThompsonSampling()], [0], types, outcomes, n_types=3, c_escalate=1,
                     c_failure=5)
    assert err.value.field == "u"
    with pytest.raises(ConfigError) as err:
        run_policies([MeanThreshold()], [0], types, outcomes, n_types=3, c_escalate=1,
                     c_failure=5, feedback="shadow")
    assert err.value.field == "feedback"


def test_a_statistic_exactly_at_the_threshold_acts():
    # Beta(3, 1): mean 0.75 exactly; p* = 0.75 exactly (binary fractions)
    a, b, n = np.array([3.0, 3.0]), np.array([1.0, 1.00001]), np.array([10, 10])
    assert MeanThreshold(0.75).act(a, b, n).tolist() == [True, False]
    from dyna.competence import BetaCompetence
    from dyna.escalation import should_escalate
    comp = BetaCompetence()
    for ok in (True, True, False):      # Beta(1 + 2, 1 + 1): mean 0.6
        comp.update("t", ok)
    d = should_escalate(comp, "t", threshold=0.6, min_episodes=0,
                        domain_risk_class="low_stakes")
    assert not d.escalate
