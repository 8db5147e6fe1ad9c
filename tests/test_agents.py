"""Vectorised agents: tie-breaking (AGT-01), bootstrapping (ENV-01), the book's figures."""

import math

import numpy as np
import pytest

import envs
from dyna.agents import AGENTS, DynaAgent, run_agent, validate_hparams
from dyna.agents.tabular import greedy_action
from dyna.errors import ConfigError
from dyna.rng import run_states
from envs.tabular import table_from_P


# --------------------------------------------------------------------------- AGT-01
def test_agt01_greedy_ties_are_uniform():
    st = run_states(0, [0])[0]
    Q = np.zeros((1, 4))
    picks = np.array([greedy_action(Q, 0, st) for _ in range(10000)])
    assert np.bincount(picks, minlength=4) / 10000 == pytest.approx([0.25] * 4, abs=0.02)
    Q[0] = [1.0, 0.0, 1.0, 0.5]
    picks = np.array([greedy_action(Q, 0, st) for _ in range(10000)])
    assert set(picks.tolist()) == {0, 2}
    assert np.mean(picks == 0) == pytest.approx(0.5, abs=0.02)
    st1, st2 = run_states(5, [0])[0], run_states(5, [0])[0]
    Q[0] = 0.0
    assert [greedy_action(Q, 0, st1) for _ in range(50)] == [greedy_action(Q, 0, st2) for _ in range(50)]


def test_agt01_greedy_agent_leaves_a_wall_cell():
    # (0, 0): action 0 (up) bumps into the border. First-index argmax on an all-zero Q
    # would pick it for ever (and Q-learning would never change the tie); random ties leave.
    env = envs.maze.DynaMaze()
    env.reset(seed=0)
    first_index = np.zeros((54, 4)).argmax(axis=1)[0]
    assert first_index == 0 and env.P[0][0] == [(1.0, 0, 0.0, False)]
    left_after = []
    for seed in range(20):
        agent = DynaAgent("q_learning", 54, 4, epsilon=0.0, seed=seed)
        env.reset(seed=0)
        env.unwrapped.s = s = 0
        for step in range(1, 200):
            a = agent.act(s)
            s2, r, term, trunc, _ = env.step(a)
            agent.learn(s, a, r, s2, term, trunc)
            s = s2
            if s != 0:
                left_after.append(step)
                break
    assert len(left_after) == 20
    # two of the four actions leave (down, right): each try leaves with probability 1/2
    assert np.mean(left_after) < 4


# --------------------------------------------------------------------------- ENV-01
def _chain_table(max_steps):
    # 0 -> 1 (r=0) -> 2 (r=1, terminal); one action
    P = {0: {0: [(1.0, 1, 0.0, False)]}, 1: {0: [(1.0, 2, 1.0, True)]}, 2: {0: [(1.0, 2, 0.0, True)]}}
    return table_from_P(P, [1.0, 0.0, 0.0], max_episode_steps=max_steps)


def test_env01_kernel_bootstraps_on_truncation_only():
    # one-step episodes: truncated after 0 -> 1; with q_init 1 the target is 0 + 0.9 * 1
    r = run_agent("q_learning", {"alpha": 1.0, "gamma": 0.9, "epsilon": 0.0, "q_init": 1.0},
                  _chain_table(1), seed=0, run_indices=[0], episodes=1)
    assert r.Q[0, 0, 0] == pytest.approx(0.9)
    assert r.episode_steps[0].tolist() == [1] and not r.episode_terminated[0, 0]
    # the goal is reached on the very step the cap is hit: terminated wins, no bootstrap
    r = run_agent("q_learning", {"alpha": 1.0, "gamma": 0.9, "epsilon": 0.0, "q_init": 1.0},
                  _chain_table(2), seed=0, run_indices=[0], episodes=1)
    assert r.episode_terminated[0, 0] and r.episode_return[0, 0] == 1.0
    assert r.Q[0, 1, 0] == 1.0 and r.Q[0, 0, 0] == pytest.approx(0.9)


def test_env01_real_frozenlake_goal_at_the_cap():
    env, _ = envs.make_env("FrozenLake", is_slippery=False, max_episode_steps=6)
    agent = DynaAgent("q_learning", 16, 4, alpha=1.0, gamma=0.9)
    agent.Q[15] = [0.5, 2.0, 0.0, 0.0]   # a terminal state must never be bootstrapped from
    s, _ = env.reset(seed=0)
    assert isinstance(s, int)
    for a in [1, 1, 2, 1, 2, 2]:        # DOWN, DOWN, RIGHT, DOWN, RIGHT, RIGHT
        s2, r, term, trunc, _ = env.step(a)
        agent.learn(s, a, r, s2, term, trunc)
        s = s2
    assert (s2, r, term, trunc) == (15, 1.0, True, True)
    assert agent.Q[14, 2] == 1.0
    with pytest.raises(ConfigError, match="tuple"):
        agent.learn(env.reset(seed=0), 0, 0.0, 1, False)


# --------------------------------------------------------------------------- the book
def _fig82(runs=10):
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    out = {}
    for n in (0, 5, 50):
        r = run_agent("dyna_q", {"alpha": 0.1, "epsilon": 0.1, "gamma": 0.95, "n_planning": n},
                      table, seed=0, run_indices=range(runs), episodes=50)
        out[n] = r.episode_steps.mean(axis=0)
    return out


def test_figure_8_2_matches_the_book():
    steps = _fig82()
    assert steps[0][1] > 300            # several hundred steps in episode 2 without planning
    assert steps[50][1] < 60            # n = 50: a short path by episode 2
    assert steps[0][1] > steps[5][1] > steps[50][1]
    for n in (0, 5, 50):
        assert 14 <= steps[n][39:].mean() <= 19, n   # optimal 14 + ε-exploration


def test_blocking_and_shortcut_mazes_favour_dyna_q_plus():
    hp = {"alpha": 1.0, "epsilon": 0.1, "gamma": 0.95, "n_planning": 10, "model": "last"}
    table, _ = envs.make_table("dyna/BlockingMaze-v0")
    q = run_agent("dyna_q", hp, table, seed=0, run_indices=range(10), total_steps=3000)
    qp = run_agent("dyna_q_plus", {**hp, "kappa": 1e-4}, table, seed=0, run_indices=range(10), total_steps=3000)
    assert qp.step_reward.sum(1).mean() > q.step_reward.sum(1).mean()
    # after the wall moves, Dyna-Q+ explores its way round in most runs; Dyna-Q's stale,
    # still-positive values keep it circling the old gap far more often
    late_q, late_qp = q.step_reward[:, -1000:].sum(1), qp.step_reward[:, -1000:].sum(1)
    assert np.mean(late_qp > 0) >= 0.7 and late_qp.mean() > late_q.mean()

    hp["n_planning"] = 50
    table, meta = envs.make_table("dyna/ShortcutMaze-v0")
    q = run_agent("dyna_q", hp, table, seed=0, run_indices=range(10), total_steps=6000)
    qp = run_agent("dyna_q_plus", {**hp, "kappa": 1e-3}, table, seed=0, run_indices=range(10), total_steps=6000)
    assert qp.step_reward.sum(1).mean() > q.step_reward.sum(1).mean()
    shortcut = meta["optimal_path_lengths"][1]
    assert shortcut == 10
    assert np.all(q.final_greedy_steps == 16)                    # Dyna-Q keeps the long way
    assert np.mean(qp.final_greedy_steps == shortcut) >= 0.7     # Dyna-Q+ takes the shortcut


def test_prioritized_sweeping_needs_fewer_updates():
    for k in (1, 2, 3):
        table, meta = envs.make_table("dyna/AsciiMaze-v0", resolution=k)
        limit = math.floor(1.2 * meta["optimal_path_length"])
        hp = {"alpha": 0.5, "epsilon": 0.1, "gamma": 0.95, "n_planning": 5, "theta": 1e-4}
        dq = run_agent("dyna_q", hp, table, seed=1, run_indices=range(5), episodes=3000, optimal_length=limit)
        ps = run_agent("prioritized_sweeping", hp, table, seed=1, run_indices=range(5), episodes=3000,
                       optimal_length=limit)
        assert (dq.updates_to_optimal > 0).all() and (ps.updates_to_optimal > 0).all()
        assert ps.updates_to_optimal.mean() < dq.updates_to_optimal.mean(), k
        # a run stops once it has found the path: later episodes are marked -1
        stopped = ps.episode_steps[0] == -1
        assert stopped.any() and not stopped[0]


def test_stochastic_env_learning_and_evaluation():
    table, _ = envs.make_table("FrozenLake", is_slippery=True)
    r = run_agent("dyna_q", {"alpha": 0.1, "gamma": 0.99, "epsilon": 0.1, "n_planning": 10}, table,
                  seed=0, run_indices=range(4), episodes=400, eval_every=100, eval_episodes=200)
    assert r.eval_score.shape == (4, 4) and r.eval_episode.tolist() == [100, 200, 300, 400]
    # the optimal policy on 4x4 slippery succeeds ~74% of the time; a trained agent is far above 0
    assert r.eval_score[:, -1].mean() > 0.4
    assert np.all((r.episode_steps >= 1) & (r.episode_steps <= 100))


# --------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_same_seed_bit_identical_and_independent_of_batching(agent):
    table, _ = envs.make_table("FrozenLake", is_slippery=True)
    hp = {"n_planning": 3} if agent != "q_learning" else {}
    kw = dict(seed=11, episodes=30, eval_every=10, eval_episodes=5)
    whole = run_agent(agent, hp, table, run_indices=range(6), **kw)
    again = run_agent(agent, hp, table, run_indices=range(6), **kw)
    parts = [run_agent(agent, hp, table, run_indices=idx, **kw) for idx in ([0, 1, 2], [3], [4, 5])]
    for field in ("episode_steps", "episode_return", "episode_updates", "eval_score", "Q"):
        a = getattr(whole, field)
        assert np.array_equal(a, getattr(again, field), equal_nan=True)
        assert np.array_equal(a, np.concatenate([getattr(p, field) for p in parts]), equal_nan=True)
    other = run_agent(agent, hp, table, run_indices=range(6), **{**kw, "seed": 12})
    assert not np.array_equal(other.episode_steps, whole.episode_steps)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("hp, field", [
    ({"alpha": -0.1}, "hp.alpha"), ({"alpha": 0}, "hp.alpha"), ({"epsilon": 1.5}, "hp.epsilon"),
    ({"gamma": float("nan")}, "hp.gamma"), ({"n_planning": 2.5}, "hp.n_planning"),
    ({"n_planning": -1}, "hp.n_planning"), ({"model": "graph"}, "hp.model"),
])
def test_bad_hparams_name_the_field(hp, field):
    with pytest.raises(ConfigError) as err:
        validate_hparams("dyna_q", hp, "hp")
    assert err.value.field == field


def test_misspelt_and_unknown_names():
    with pytest.raises(ConfigError, match="did you mean 'alpha'") as err:
        validate_hparams("dyna_q", {"alpah": 0.1}, "variants.a")
    assert err.value.field == "variants.a.alpah"
    with pytest.raises(ConfigError, match="unknown agent"):
        validate_hparams("sarsa", {}, "v")
    with pytest.raises(ConfigError, match="n_planning"):
        validate_hparams("prioritized_sweeping", {"n_planning": 0}, "v")
    with pytest.raises(ConfigError, match="q_learning does no planning"):
        validate_hparams("q_learning", {"n_planning": 5}, "v")
    assert validate_hparams("q_learning", {"kappa": 1.0}, "v") == {
        "alpha": 0.1, "gamma": 0.95, "epsilon": 0.1, "q_init": 0.0, "n_planning": 0}


def test_run_agent_schedule_errors():
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    with pytest.raises(ConfigError, match="exactly one"):
        run_agent("dyna_q", {}, table, seed=0, run_indices=[0])
    with pytest.raises(ConfigError, match="episodes"):
        run_agent("dyna_q", {}, table, seed=0, run_indices=[0], episodes=0)
    with pytest.raises(ConfigError, match="run_indices"):
        run_agent("dyna_q", {}, table, seed=0, run_indices=[], episodes=1)


def test_episodes_that_never_end_stop_with_an_error():
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    # q_init -1 and epsilon 0: the agent bumps into the wall at the start for ever
    with pytest.raises(ConfigError, match="max_total_steps"):
        run_agent("q_learning", {"epsilon": 0.0, "q_init": -1.0}, table, seed=0, run_indices=[0],
                  episodes=1, max_total_steps=100_000)


def test_dyna_agent_refuses_out_of_range_and_malformed_input():
    agent = DynaAgent("dyna_q", 4, 2)
    for kwargs, field in [({"a": 5}, "a"), ({"a": -1}, "a"), ({"a": 10**8}, "a"), ({"s": True}, "s"),
                          ({"s": 1.7}, "s"), ({"r": float("nan")}, "r"), ({"r": "1"}, "r"),
                          ({"terminated": "False"}, "terminated")]:
        args = {"s": 0, "a": 1, "r": 1.0, "s2": 1, "terminated": False, **kwargs}
        with pytest.raises(ConfigError) as err:
            agent.learn(**args)
        assert err.value.field == field
    assert np.all(agent.Q == 0.0)
    for kwargs, field in [({"n_states": -3}, "n_states"), ({"seed": -1}, "seed"), ({"n_states": 2.7}, "n_states")]:
        with pytest.raises(ConfigError) as err:
            DynaAgent("dyna_q", **{"n_states": 4, "n_actions": 2, **kwargs})
        assert err.value.field == field


@pytest.mark.parametrize("kwargs, field", [
    ({"run_indices": [0.7, 1.2]}, "run_indices"), ({"run_indices": [True]}, "run_indices"),
    ({"eval_max_steps": 0, "eval_every": 1, "eval_episodes": 1}, "eval_max_steps"),
    ({"optimal_length": 2**70}, "optimal_length"), ({"episodes": 10**12}, "episodes"),
])
def test_run_agent_bad_arguments_name_the_field(kwargs, field):
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    args = {"seed": 0, "run_indices": [0], "episodes": 1, **kwargs}
    with pytest.raises(ConfigError) as err:
        run_agent("dyna_q", {}, table, **args)
    assert err.value.field == field
    with pytest.raises(ConfigError, match="TabularTable"):
        run_agent("dyna_q", {}, None, seed=0, run_indices=[0], episodes=1)


def test_unused_hyper_parameters_are_still_checked():
    with pytest.raises(ConfigError) as err:
        validate_hparams("dyna_q", {"kappa": -5}, "v")
    assert err.value.field == "v.kappa"
    with pytest.raises(ConfigError):
        validate_hparams("q_learning", {"model": "graph"}, "v")
    with pytest.raises(ConfigError):
        validate_hparams("dyna_q_plus", {"kappa": float("inf")}, "v")
    with pytest.raises(ConfigError):
        validate_hparams("dyna_q", {"n_planning": 2**63}, "v")


def test_steps_mode_results_line_up_across_batches_and_phase_boundary():
    table, _ = envs.make_table("dyna/BlockingMaze-v0", change_at=1000)
    hp = {"alpha": 1.0, "n_planning": 5, "model": "last"}
    kw = dict(seed=2, total_steps=1000, eval_every=1, eval_episodes=1)
    whole = run_agent("dyna_q", hp, table, run_indices=range(4), **kw)
    parts = [run_agent("dyna_q", hp, table, run_indices=idx, **kw) for idx in ([0], [1, 2, 3])]
    assert whole.eval_score.shape == (4, 1000)
    assert np.array_equal(whole.eval_score, np.concatenate([p.eval_score for p in parts]), equal_nan=True)
    # after exactly 1000 steps the new layout is in force: the old 10-step path is blocked,
    # so the final greedy episode cannot reach the goal in 10 steps
    assert not np.any(whole.final_greedy_steps == 10)
