"""World model (WM-01), hand-computed updates, the priority queues (AGT-03)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dyna.agents import DynaAgent
from dyna.errors import ConfigError
from dyna.model import TabularModel
from dyna.planning import PriorityQueue, dyna_planning, new_queue, q_update, queue_pop, queue_push
from dyna.rng import draw_uniform, run_states


# --------------------------------------------------------------------------- WM-01
def test_wm01_model_keeps_counts():
    m = TabularModel(16, 4)
    for s2 in (1, 1, 4):
        m.update(0, 2, s2, 0.0, False)
    m.update(14, 2, 15, 1.0, True)
    assert m.distribution(0, 2) == pytest.approx({(1, 0.0): 2 / 3, (4, 0.0): 1 / 3})
    assert m.count(0, 2) == 3
    assert m.expected_reward(14, 2) == 1.0
    assert m.outcomes(14, 2) == [(15, 1.0, True, 1)]
    st_ = run_states(0, [0])[0]
    draws = [m.sample(0, 2, st_)[0] for _ in range(30000)]
    assert np.mean(np.array(draws) == 1) == pytest.approx(2 / 3, abs=0.01)
    assert set(draws) == {1, 4}


def test_wm01_unseen_pairs_are_unknown():
    m = TabularModel(16, 4)
    m.update(0, 2, 1, 0.0, False)
    assert m.distribution(5, 1) is None and m.expected_reward(5, 1) is None
    with pytest.raises(KeyError):
        m.sample(5, 1, run_states(0, [0])[0])
    assert m.observed().sum() == 1 and m.observed()[0, 2]
    with pytest.raises(ConfigError):
        m.update(16, 0, 0, 0.0, False)


def test_model_keep_last_follows_a_changed_world():
    m = TabularModel(4, 1)
    m.update(0, 0, 1, 0.0, False, keep_last=True)
    m.update(0, 0, 1, 0.0, False, keep_last=True)
    m.update(0, 0, 2, 0.0, False, keep_last=True)
    assert m.distribution(0, 0) == {(2, 0.0): 1.0}
    assert m.count(0, 0) == 3
    # the forgotten outcome's predecessor link goes with it
    assert m.predecessors(1) == [] and m.predecessors(2) == [(0, 0)]


def test_keep_last_links_are_reused_not_leaked():
    m = TabularModel(3, 1, max_outcomes=1)
    for s2 in [0, 1, 2, 0, 1] * 20:
        m.update(0, 0, s2, 0.0, False, keep_last=True)
    m.update(1, 0, 2, 0.0, False, keep_last=True)
    m.update(2, 0, 0, 0.0, False, keep_last=True)
    assert (m.predecessors(0), m.predecessors(1), m.predecessors(2)) == ([(2, 0)], [(0, 0)], [(1, 0)])


def test_kernel_queue_interleaved_pushes_and_pops_match_reference():
    rng = np.random.default_rng(0)
    for _ in range(200):
        kq = new_queue(6)
        pq = PriorityQueue()
        for _ in range(30):
            if rng.random() < 0.6 or len(pq) == 0:
                sa, p = int(rng.integers(6)), float(rng.choice([0.1, 0.2, 0.5]))
                queue_push(*kq, sa, p)
                pq.push(sa, 0, p)
            else:
                (ref, _), pref = pq.pop()
                assert tuple(queue_pop(*kq)) == (ref, pref)
            assert kq[3][0] == len(pq)


def test_model_overflow_is_an_error():
    m = TabularModel(4, 1, max_outcomes=2)
    m.update(0, 0, 1, 0.0, False)
    m.update(0, 0, 2, 0.0, False)
    with pytest.raises(ConfigError, match="max_outcomes"):
        m.update(0, 0, 3, 0.0, False)


def test_planning_samples_only_seen_pairs():
    agent = DynaAgent("dyna_q", 10, 3, n_planning=200, alpha=0.5, gamma=0.9, seed=3)
    agent.learn(4, 1, 1.0, 5, True)
    touched = np.argwhere(agent.Q != 0).tolist()
    assert touched == [[4, 1]]


# --------------------------------------------------------------------------- hand-computed updates
def test_q_learning_update_by_hand_env01_a_b():
    # ENV-01 (a): truncated -> bootstrap; (b): terminated -> no bootstrap
    Q = np.zeros((4, 2))
    Q[3] = [0.5, 2.0]
    q_update(Q, 2, 0, 1.0, 3, False, 1.0, 0.9)
    assert Q[2, 0] == pytest.approx(2.8)
    Q[2, 0] = 0.0
    q_update(Q, 2, 0, 1.0, 3, True, 1.0, 0.9)
    assert Q[2, 0] == 1.0
    # a partial step: 0.1 * (1 + 0.9*2 - 0) = 0.28
    Q[2, 0] = 0.0
    assert q_update(Q, 2, 0, 1.0, 3, False, 0.1, 0.9) == pytest.approx(2.8)
    assert Q[2, 0] == pytest.approx(0.28)


def test_dyna_agent_truncation_bootstraps_termination_does_not():
    a = DynaAgent("q_learning", 4, 2, alpha=1.0, gamma=0.9)
    a.Q[3] = [0.5, 2.0]
    a.learn(2, 0, 1.0, 3, terminated=False, truncated=True)
    assert a.Q[2, 0] == pytest.approx(2.8)
    a.learn(2, 1, 1.0, 3, terminated=True, truncated=True)  # both: terminated wins
    assert a.Q[2, 1] == 1.0


def test_dyna_q_two_state_updates_by_hand():
    # One observed pair only, so every planning step replays it: Q <- Q + 0.5 (1 - Q)
    a = DynaAgent("dyna_q", 2, 1, alpha=0.5, gamma=0.9, n_planning=2)
    assert a.learn(0, 0, 1.0, 1, terminated=True) == 3
    assert a.Q[0, 0] == pytest.approx(0.875)  # 0.5, 0.75, 0.875
    # now (1,0) -> 0 with r=0: real 0.5*(0 + 0.9*0.875) then planning mixes both pairs
    b = DynaAgent("dyna_q", 2, 1, alpha=0.5, gamma=0.9, n_planning=0)
    b.learn(0, 0, 1.0, 1, terminated=True)
    b.learn(1, 0, 0.0, 0, terminated=False)
    assert b.Q[:, 0] == pytest.approx([0.5, 0.225])


def test_dyna_q_plus_bonus_by_hand():
    # single state, single action, tried at t=1: at t=1 tau = 0, no bonus
    a = DynaAgent("dyna_q_plus", 1, 1, alpha=1.0, gamma=0.0, n_planning=1, kappa=0.5)
    a.learn(0, 0, 0.0, 0, terminated=False)
    assert a.Q[0, 0] == 0.0
    # two pairs, last tried at t=1 and t=10; planning at t=11 with gamma 0 and alpha 1
    # sets each to r + kappa * sqrt(tau): 0.5 * sqrt(10) and 0.5 * sqrt(1)
    m = TabularModel(2, 1)
    m.update(0, 0, 1, 0.0, False, t=1)
    m.update(1, 0, 1, 0.0, False, t=10)
    Q = np.zeros((2, 1))
    out, rew, pair, seen_s, seen_a, _, _, info = (x[0] for x in m.arrays)
    n = dyna_planning(Q, out, rew, pair, seen_s, seen_a, info, 200, 1.0, 0.0, 0.5, True, 11,
                      run_states(0, [0])[0])
    assert n == 200
    assert Q[:, 0] == pytest.approx([0.5 * np.sqrt(10), 0.5])


def test_dyna_q_plus_considers_untried_actions():
    plus = DynaAgent("dyna_q_plus", 3, 2, alpha=0.5, gamma=0.9, n_planning=50, kappa=0.1, seed=1)
    plain = DynaAgent("dyna_q", 3, 2, alpha=0.5, gamma=0.9, n_planning=50, seed=1)
    for ag in (plus, plain):
        for _ in range(5):
            ag.learn(0, 0, 0.0, 1, terminated=False)
    assert plus.Q[0, 1] > 0.0 and plain.Q[0, 1] == 0.0


def test_prioritized_sweeping_backups_by_hand():
    ps = DynaAgent("prioritized_sweeping", 3, 1, alpha=0.5, gamma=0.9, n_planning=5, theta=1e-4)
    assert ps.learn(0, 0, 0.0, 1, terminated=False) == 0   # priority 0: nothing queued
    assert ps.learn(1, 0, 1.0, 2, terminated=True) == 2    # (1,0) then its predecessor (0,0)
    assert ps.Q[:, 0] == pytest.approx([0.5 * 0.9 * 0.5, 0.5, 0.0])


# --------------------------------------------------------------------------- AGT-03
@pytest.mark.parametrize("kind", ["tuple", "dict", "array"])
def test_agt03_priority_queue_ties_and_duplicates(kind):
    make = {"tuple": lambda a, b: (a, b), "dict": lambda a, b: {"x": a, "y": b},
            "array": lambda a, b: np.array([a, b])}[kind]
    q = PriorityQueue()
    q.push(make(1, 2), 0, 0.5)
    q.push(make(3, 4), 1, 0.5)
    q.push(make(1, 2), 0, 0.8)
    assert len(q) == 2
    (s, a), p = q.pop()
    assert p == 0.8 and a == 0 and np.array_equal(np.asarray(list(s.values()) if kind == "dict" else s), [1, 2])
    (s, a), p = q.pop()
    assert p == 0.5 and a == 1
    assert len(q) == 0
    with pytest.raises(IndexError):
        q.pop()


def test_priority_queue_keeps_max_and_insertion_order_on_ties():
    q = PriorityQueue()
    for i, p in enumerate([0.3, 0.3, 0.3]):
        q.push(i, 0, p)
    q.push(0, 0, 0.1)                     # lower priority: ignored
    assert [q.pop()[0][0] for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError):
        q.push(0, 0, float("nan"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from([0.1, 0.2, 0.5, 0.9])), max_size=40))
def test_kernel_queue_agrees_with_python_queue(pushes):
    kq = new_queue(8)
    pq = PriorityQueue()
    for sa, p in pushes:
        queue_push(*kq, sa, p)
        pq.push(sa, 0, p)
    assert kq[3][0] == len(pq)
    while len(pq):
        (sa_ref, _), p_ref = pq.pop()
        sa, p = queue_pop(*kq)
        assert (sa, p) == (sa_ref, p_ref)
    assert kq[3][0] == 0


def test_rng_streams_depend_only_on_seed_and_run_index():
    a = run_states(7, [0, 1, 2, 3])
    b = run_states(7, [2, 3])
    assert np.array_equal(a[2:], b)
    assert not np.array_equal(run_states(8, [0]), a[:1])
    u = draw_uniform(a[0].copy(), 50000)
    assert 0.0 <= u.min() and u.max() < 1.0 and u.mean() == pytest.approx(0.5, abs=0.01)
    assert np.array_equal(draw_uniform(run_states(7, [0])[0], 5), u[:5])


def test_errors_survive_pickling():
    import pickle

    from dyna.errors import MissingFileError, UnknownEnvError

    for err in (ConfigError("variants.a.alpha", -0.1, "must be > 0"),
                UnknownEnvError("env.id", "Pong", "unknown"), MissingFileError("file", "/nope.toml")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and back.field == err.field


@pytest.mark.parametrize("alpha, theta, backups", [(0.5, 1e-4, 13), (0.5, 1e-12, 30), (1.0, 1e-4, 30)])
def test_prioritized_sweeping_sweep_depth_by_hand(alpha, theta, backups):
    """Example 8.4's mechanism on a 30-pair chain: the reward backup gives Q = alpha, and the
    d-th predecessor is queued with priority (gamma * alpha)^d, so one sweep reaches
    d <= ln(theta) / ln(gamma * alpha) predecessors: 12 for alpha 0.5, gamma 0.95, theta 1e-4
    (0.475^12 = 1.3e-4 > theta > 0.475^13 = 6.3e-5), the whole chain for alpha = 1."""
    n = 30
    ps = DynaAgent("prioritized_sweeping", n + 1, 1, alpha=alpha, gamma=0.95, n_planning=1000,
                   theta=theta)
    for s in range(n - 1):
        assert ps.learn(s, 0, 0.0, s + 1, terminated=False) == 0   # zeros: nothing queued
    assert ps.learn(n - 1, 0, 1.0, n, terminated=True) == backups
    d = np.arange(n)[::-1]                                         # predecessors before the goal pair
    expected = np.where(d < backups, alpha * (0.95 * alpha) ** d, 0.0)
    assert ps.Q[:n, 0] == pytest.approx(expected, rel=1e-12, abs=0)
