"""Speed of the escalation policies.

Run with ``pytest benchmarks/bench_escalation.py -s``. Each benchmark measures ours and a
peer in the same run on the same data, each contestant a test and a pytest-benchmark entry of
its own (:mod:`conftest`); the ratio of the medians is asserted in the test after them:

- one decision of a policy for 1,000 task types at once: the lower-bound rule as the
  regularised incomplete beta at p* (``I_p*(a, b) <= delta``), Thompson sampling as
  ``u >= I_p*(a, b)``; peers: a per-type Python loop of ``scipy.stats.beta.ppf`` (what a
  scalar implementation does), and the vectorised quantile ``beta.ppf(delta, a, b)``.
  Targets: under 0.02x the loop and under 1x the vectorised quantile.
- replaying all 12,000 real outcomes of ``data/swebench_verified_bash_only.csv`` (24
  systems x 500 tasks) through every policy of ``experiments/escalation_swebench.toml``
  under censored feedback, all lanes in lockstep (:func:`dyna.escalation.run_policies`);
  peer: the same replay as a per-task Python loop over a :class:`BetaCompetence` per lane
  with scalar decisions. Target: under 0.2x the loop (under 1x for the date-ordered
  stream: few lanes, many steps).
"""

from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

from dyna.competence import BetaCompetence
from dyna.escalation import (LowerBoundThreshold, MeanThreshold, ThompsonSampling,
                             run_policies)
from dyna.experiment.kinds.escalation.config import build_policy, class_costs
from dyna.experiment.registry import load_experiment
from envs.escalation import ReplayIndex, load_outcomes

REPO = Path(__file__).resolve().parents[1]
K = 1_000


def _posteriors(seed=0):
    rng = np.random.default_rng(seed)
    a = 1.0 + rng.integers(0, 300, K).astype(float)
    b = 1.0 + rng.integers(0, 60, K).astype(float)
    return a, b, (a + b - 2.0), rng.random((2, K))


@pytest.mark.benchmark(group="lower-bound decision, 1000 task types")
@pytest.mark.parametrize("contestant", ["dyna", "per-type beta.ppf loop",
                                        "vectorised beta.ppf"])
def test_decision_for_1000_task_types(benchmark, contestant):
    a, b, n, u = _posteriors()
    lower = LowerBoundThreshold(0.95, 0.05)

    def per_type_loop():
        return [stats.beta.ppf(0.05, a[i], b[i]) >= 0.95 for i in range(K)]

    def quantile_vectorised():
        return stats.beta.ppf(0.05, a, b) >= 0.95

    run = {"dyna": lambda: lower.act(a, b, n), "per-type beta.ppf loop": per_type_loop,
           "vectorised beta.ppf": quantile_vectorised}[contestant]
    got = benchmark.pedantic(run, rounds=15, warmup_rounds=1)
    if contestant == "dyna":
        np.testing.assert_array_equal(got, np.asarray(per_type_loop()))
        # Thompson sampling on the same posteriors: draws by inverse CDF, one betainc a type
        theta = special.betaincinv(a, b, u[0])
        near = np.abs(theta - 0.95) > 1e-9
        np.testing.assert_array_equal(ThompsonSampling(0.95).act(a, b, n, u)[near],
                                      (theta >= 0.95)[near])


@pytest.mark.ratio(of="test_decision_for_1000_task_types")
def test_decision_under_0_02x_the_loop_and_1x_the_vectorised_quantile(medians):
    print(f"    absolute: {medians['dyna'] * 1e3:.3f} ms per decision of 1000 types")
    assert medians.ratio("dyna", "per-type beta.ppf loop") < 0.02
    assert medians.ratio("dyna", "vectorised beta.ppf") < 1.0


@pytest.fixture(scope="module")
def replay_inputs():
    return _replay_inputs()


def _replay_inputs():
    cfg = load_experiment(REPO / "experiments" / "escalation_swebench.toml")
    frame = load_outcomes(REPO / "data" / "swebench_verified_bash_only.csv")
    index = ReplayIndex(frame)
    systems = index.systems
    streams = [index.stream(s, np.random.default_rng([0, i])) for i, s in enumerate(systems)]
    policies = [build_policy(cfg, v, "low_stakes") for v in cfg.variants]
    priors = [v.prior for v in cfg.variants]
    assert all(p == "uniform" for p in priors)
    discounts = [v.discount for v in cfg.variants]
    P, S = len(policies), len(systems)
    lane_policy = np.repeat(np.arange(P), S)
    types = np.tile(np.stack([s["types"] for s in streams]), (P, 1))
    outcomes = np.tile(np.stack([s["outcomes"] for s in streams]), (P, 1))
    c_act = np.tile(np.stack([s["cost_usd"] for s in streams]), (P, 1))
    u = np.random.default_rng(1).random((P * S, types.shape[1], 2))
    c_e, c_f, _ = class_costs(cfg.costs, "low_stakes")
    return dict(policies=policies, lane_policy=lane_policy, types=types, outcomes=outcomes,
                c_act=c_act, u=u, discount=np.repeat(discounts, S), c_e=c_e, c_f=c_f,
                n_types=len(index.type_names))


def _python_replay(x):
    """Peer: one BetaCompetence per lane, a scalar decision per task."""
    total = np.zeros(len(x["lane_policy"]))
    for lane, pi in enumerate(x["lane_policy"]):
        pol = x["policies"][pi]
        comp = BetaCompetence()
        d = x["discount"][lane]
        for t in range(x["types"].shape[1]):
            k = int(x["types"][lane, t])
            a, b = comp.posterior(k)
            n = (a - 1.0) + (b - 1.0)
            act = bool(pol.act(np.array([a]), np.array([b]), np.array([n]),
                               x["u"][lane, t][:, None])[0])
            if d != 1.0:  # step clock: every type decays at every task
                for key in comp.keys():
                    ka, kb = comp.posterior(key)
                    comp.set_posterior(key, 1.0 + d * (ka - 1.0), 1.0 + d * (kb - 1.0))
            win = bool(x["outcomes"][lane, t])
            if act:
                comp.update(k, win)
                total[lane] += x["c_act"][lane, t] + (0.0 if win else x["c_f"])
            else:
                total[lane] += x["c_e"]
    return total


def _run_all(x):
    """dyna: every lane of ``x`` in lockstep; the total cost of each lane."""
    return run_policies(x["policies"], x["lane_policy"], x["types"], x["outcomes"],
                        n_types=x["n_types"], c_escalate=x["c_e"], c_failure=x["c_f"],
                        c_act=x["c_act"], discount=x["discount"], u=x["u"],
                        feedback="censored")["cost"].sum(axis=1)


def _replay(benchmark, contestant, x):
    """Time one contestant's replay of ``x``; dyna's costs are checked against the loop's."""
    if contestant == "dyna":
        np.testing.assert_allclose(_run_all(x), _python_replay(x), rtol=1e-9)
        benchmark.pedantic(lambda: _run_all(x), rounds=3, warmup_rounds=1)
    else:
        benchmark.pedantic(lambda: _python_replay(x), rounds=3, warmup_rounds=1)


@pytest.mark.benchmark(group="replay of 12,000 outcomes through every policy")
@pytest.mark.parametrize("contestant", ["dyna", "per-task Python loop"])
def test_replay_12000_outcomes(benchmark, replay_inputs, contestant):
    x = replay_inputs
    P = len(x["policies"])
    # lanes are policy-major: the first 24 lanes are one policy on all 12,000 outcomes
    assert x["types"].shape == (P * 24, 500) and x["outcomes"][:24].size == 12_000
    _replay(benchmark, contestant, x)


@pytest.mark.ratio(of="test_replay_12000_outcomes")
def test_replay_12000_outcomes_under_0_2x_the_loop(medians):
    print(f"    absolute: {medians['dyna']:.3f} s for all policies")
    assert medians.ratio("dyna", "per-task Python loop") < 0.2


@pytest.mark.benchmark(group="mean-threshold decision, 1000 task types")
@pytest.mark.parametrize("contestant", ["dyna", "per-type loop"])
def test_mean_rule_for_1000_types(benchmark, contestant):
    a, b, n, _ = _posteriors(1)
    mean = MeanThreshold(0.8)
    run = {"dyna": lambda: mean.act(a, b, n),
           "per-type loop": lambda: [a[i] / (a[i] + b[i]) >= 0.8 for i in range(K)]}
    got = benchmark.pedantic(run[contestant], rounds=15, warmup_rounds=1)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(run["per-type loop"]()))


@pytest.mark.ratio(of="test_mean_rule_for_1000_types")
def test_mean_rule_for_1000_types_is_a_division(medians):
    assert medians.ratio("dyna", "per-type loop") < 0.2


@pytest.mark.benchmark(group="date-ordered stream of 12,000 outcomes through every policy")
@pytest.mark.parametrize("contestant", ["dyna", "per-task Python loop"])
def test_replay_date_ordered_stream(benchmark, replay_inputs, contestant):
    """The non-stationary stream: 12,000 steps in a row, one lane per policy."""
    x = replay_inputs
    frame = load_outcomes(REPO / "data" / "swebench_verified_bash_only.csv")
    s = ReplayIndex(frame).date_order(np.random.default_rng(0))
    P = len(x["policies"])
    T = len(s["types"])
    y = dict(x, lane_policy=np.arange(P), types=np.tile(s["types"], (P, 1)),
             outcomes=np.tile(s["outcomes"], (P, 1)), c_act=np.tile(s["cost_usd"], (P, 1)),
             u=np.random.default_rng(2).random((P, T, 2)),
             discount=np.asarray([x["discount"][i * 24] for i in range(P)]))
    assert T == 12_000
    _replay(benchmark, contestant, y)


@pytest.mark.ratio(of="test_replay_date_ordered_stream")
def test_replay_date_ordered_stream_under_1x_the_loop(medians):
    print(f"    absolute: {medians['dyna']:.3f} s for all policies")
    # few lanes and many steps: numpy per-call overhead dominates, the gain is small
    assert medians.ratio("dyna", "per-task Python loop") < 1.0
