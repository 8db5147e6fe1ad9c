"""Exact dynamics of the mazes and of the toy-text wrappers (cases ENV-01, ENV-02, ENV-04)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from dyna.errors import ConfigError, UnknownEnvError
from envs.maze import AsciiMaze, BlockingMaze, DynaMaze, ShortcutMaze, parse_layout
from envs.tabular import BatchedStepper, table_from_P

UP, DOWN, RIGHT, LEFT = 0, 1, 2, 3


def cell(env, i, j):
    return i * env.cols + j


def walk(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a))
    return out


@pytest.mark.parametrize("env_id", sorted(envs.MAZES))
@pytest.mark.parametrize("mode", ["ansi", "rgb_array"])
def test_check_env_passes(env_id, mode):
    env = gym.make(env_id, render_mode=mode)
    check_env(env.unwrapped)
    env.reset(seed=0)
    frame = env.render()
    if mode == "ansi":
        assert isinstance(frame, str) and "A" in frame and "G" in frame
    else:
        u = env.unwrapped
        assert frame.shape == (u.rows * 16, u.cols * 16, 3) and frame.dtype == np.uint8


def test_dyna_maze_layout_matches_figure_8_2():
    env = DynaMaze()
    walls = {tuple(x) for x in np.argwhere(env.walls)}
    assert walls == {(1, 2), (2, 2), (3, 2), (4, 5), (0, 7), (1, 7), (2, 7)}
    assert (env.rows, env.cols) == (6, 9)
    assert env.start == (2, 0) and env.goals == [(0, 8)]
    assert env.optimal_path_lengths == [14]
    obs, info = env.reset(seed=0)
    assert obs == cell(env, 2, 0) and type(obs) is int and info == {"prob": 1.0}


def test_dyna_maze_moves_walls_borders_and_goal():
    env = DynaMaze()
    env.reset(seed=0)
    # left from the start is the border: stay
    assert env.step(LEFT)[:4] == (cell(env, 2, 0), 0.0, False, False)
    # right to (2,1), right again bumps into the wall at (2,2): stay
    assert env.step(RIGHT)[0] == cell(env, 2, 1)
    assert env.step(RIGHT)[:4] == (cell(env, 2, 1), 0.0, False, False)
    # with the first move right: down x2, right x2, up, right x5, up x3 -> 14 steps in all
    path = [DOWN, DOWN, RIGHT, RIGHT, UP, RIGHT, RIGHT, RIGHT, RIGHT, RIGHT, UP, UP, UP]
    out = walk(env, path)
    assert all(o[1] == 0.0 and not o[2] for o in out[:-1])
    assert out[-2][0] == cell(env, 1, 8)
    assert out[-1][:4] == (cell(env, 0, 8), 1.0, True, False)
    # the goal is absorbing in the table form
    assert env.P[cell(env, 0, 8)][UP] == [(1.0, cell(env, 0, 8), 0.0, True)]


def test_blocking_maze_changes_at_total_step_across_resets():
    env = BlockingMaze(change_at=1000)
    assert env.optimal_path_lengths == [10, 16]
    env.reset(seed=0)
    # from the start (5,3): go to (4,8), just below the right-hand gap at (3,8)
    to_gap = [UP, RIGHT, RIGHT, RIGHT, RIGHT, RIGHT]
    steps = 0
    walk(env, to_gap)
    steps += len(to_gap)
    assert env.step(UP)[0] == cell(env, 3, 8)  # gap open in the first layout
    steps += 1
    # burn steps across several resets until exactly 1000 total steps have been taken
    while steps < 1000 - len(to_gap):
        env.reset()
        n = min(50, 1000 - len(to_gap) - steps)
        walk(env, [LEFT] * n)
        steps += n
    env.reset()
    walk(env, to_gap)
    assert env.total_steps == 1000 and env.phase == 1
    assert env.step(UP)[0] == cell(env, 4, 8)  # step 1001: the gap has closed
    # ...and the left end is open now
    assert env.walls[3, 0] == False and env.walls[3, 8] == True  # noqa: E712


def test_maze_change_step_is_exact_for_small_change_at():
    env = ShortcutMaze(change_at=3)
    env.reset(seed=0)
    assert env.walls[3, 8]
    env.step(LEFT)
    env.step(LEFT)
    env.reset()  # the clock survives resets
    assert env.phase == 0 and env.total_steps == 2
    env.step(LEFT)
    assert env.phase == 1 and not env.walls[3, 8]
    env.reset(options={"restart_clock": True})
    assert env.phase == 0


def test_table_phases_follow_total_steps():
    table, meta = envs.make_table("dyna/BlockingMaze-v0")
    assert table.phase_start.tolist() == [0, 1000]
    assert table.phase_at(np.array([0, 999, 1000, 5000])).tolist() == [0, 0, 1, 1]
    assert meta["optimal_path_lengths"] == [10, 16]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_ascii_maze_resolution_scales_states_and_path(k):
    env = AsciiMaze(resolution=k)
    assert env.observation_space.n == 54 * k * k
    assert env.optimal_path_lengths == [14 * k]
    assert env.start == (2 * k, 0) and env.goals == [(0, 8 * k)]
    assert int(env.walls.sum()) == 7 * k * k


def test_ascii_layout_errors_are_typed():
    with pytest.raises(ConfigError, match="start"):
        parse_layout("..G\n...\n")
    with pytest.raises(ConfigError, match="same length"):
        parse_layout("S.G\n..\n")
    with pytest.raises(ConfigError, match="unknown characters"):
        parse_layout("S.X.G\n")
    with pytest.raises(ConfigError, match="resolution"):
        AsciiMaze(resolution=0)


def test_batched_stepper_matches_env_step():
    env = DynaMaze()
    table = env.table
    R = 64
    stepper = BatchedStepper(table, R)
    rng = np.random.default_rng(0)
    s = stepper.reset(rng).copy()
    assert (s == cell(env, 2, 0)).all()
    for _ in range(40):
        a = rng.integers(0, 4, R)
        s2, r, term, trunc = stepper.step(a, rng)
        for i in range(R):
            assert env.P[int(s[i])][int(a[i])] == [(1.0, int(s2[i]), float(r[i]), bool(term[i]))]
        assert not trunc.any()
        s = s2.copy()


def test_batched_stepper_slippery_frequencies_and_truncation():
    table, meta = envs.make_table("FrozenLake", map_name="4x4", is_slippery=True)
    assert meta["max_episode_steps"] == 100
    R = 30000
    stepper = BatchedStepper(table, R)
    rng = np.random.default_rng(1)
    stepper.reset(rng)
    s2, r, term, trunc = stepper.step(np.full(R, 2), rng)
    freq = np.bincount(s2, minlength=16) / R
    assert freq[[0, 1, 4]] == pytest.approx([1 / 3] * 3, abs=0.01)
    assert freq.sum() == pytest.approx(freq[[0, 1, 4]].sum())


def test_table_from_P_rejects_bad_probabilities():
    P = {0: {0: [(0.5, 0, 0.0, False)]}}
    with pytest.raises(ConfigError, match="sum to"):
        table_from_P(P, [1.0])


# --------------------------------------------------------------------------- ENV-02
def test_env02_frozenlake_contract():
    env, meta = envs.make_env("FrozenLake", is_slippery=True)
    assert meta["is_slippery"] is True and meta["resolved_id"] == "FrozenLake-v1"
    obs, info = env.reset(seed=0)
    assert obs == 0 and info == {"prob": 1}
    assert isinstance(obs, (int, np.integer))
    table, _ = envs.make_table("FrozenLake", is_slippery=True)
    dist = {}
    for prob, s2, _r, _t in table.to_P()[0][2]:
        dist[s2] = dist.get(s2, 0.0) + prob
    assert dist == pytest.approx({4: 1 / 3, 1: 1 / 3, 0: 1 / 3})

    env, _ = envs.make_env("FrozenLake", is_slippery=False)
    env.reset(seed=0)
    s2, r, term, trunc, _ = env.step(2)
    assert (s2, r, term, trunc) == (1, 0.0, False, False)
    env.reset(seed=0)
    for i in range(100):
        s2, r, term, trunc, _ = env.step(0)
        if i < 99:
            assert not trunc
    assert (s2, term, trunc) == (0, False, True)

    _, meta8 = envs.make_env("FrozenLake", map_name="8x8", is_slippery=True)
    assert meta8["max_episode_steps"] == 200 and meta8["resolved_id"].startswith("FrozenLake8x8")


def test_env02_table_matches_gymnasium_P():
    env, _ = envs.make_env("FrozenLake", map_name="8x8", is_slippery=True)
    table, _ = envs.make_table("FrozenLake", map_name="8x8", is_slippery=True)
    P = table.to_P()
    for s in range(64):
        for a in range(4):
            ref = [(p, int(s2), float(r), bool(t)) for p, s2, r, t in env.unwrapped.P[s][a]]
            got = P[s][a]
            assert [x[1:] for x in got] == [x[1:] for x in ref]
            assert [x[0] for x in got] == pytest.approx([x[0] for x in ref], abs=1e-12)


# --------------------------------------------------------------------------- ENV-04
@pytest.mark.filterwarnings("ignore:.*out of date:DeprecationWarning")
def test_env04_deprecated_ids_resolve_to_registered_versions():
    with pytest.raises(gym.error.DeprecatedEnv):
        gym.make("Taxi-v3")
    env, meta = envs.make_env("taxi")
    assert meta["resolved_id"] == "Taxi-v4" and meta["requested_id"] == "taxi"
    assert env.spec.max_episode_steps == 200
    obs, info = env.reset(seed=0)
    assert 0 <= obs < 500 and "prob" in info
    assert info["action_mask"].dtype == np.int8 and info["action_mask"].shape == (6,)

    _, meta = envs.make_env("cliffwalking")
    assert meta["resolved_id"] == "CliffWalking-v1"
    assert meta["max_episode_steps"] == 500 and meta["max_episode_steps_imposed_by_dyna"] is True
    table, tmeta = envs.make_table("CliffWalking", max_episode_steps=80)
    assert table.max_episode_steps == 80 and tmeta["max_episode_steps_imposed_by_dyna"] is False


def test_env04_no_silent_version_swap():
    with pytest.raises(UnknownEnvError, match="Taxi-v4"):
        envs.make_table("Taxi-v3")
    with pytest.raises(UnknownEnvError):
        envs.make_table("dyna/NoSuchMaze-v0")
    with pytest.raises(UnknownEnvError):
        envs.make_table("Pong")
    with pytest.raises(ConfigError, match="env.kwargs.colour"):
        envs.make_table("dyna/AsciiMaze-v0", colour=3)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("P, isd, match", [
    ({0: {0: [(float("nan"), 0, 0.0, False)]}}, [1.0], "probability"),
    ({0: {0: [(1.5, 0, 0.0, False), (-0.5, 0, 0.0, False)]}}, [1.0], "probability"),
    ({0: {0: [(1.0, 1, 0.0, False)]}}, [1.0], "next state"),
    ({0: {0: [(1.0, -1, 0.0, False)]}}, [1.0], "next state"),
    ({0: {0: [(1.0, 0, float("nan"), False)]}}, [1.0], "reward"),
    ({0: {0: [(1.0, 0, 0.0)]}}, [1.0], "prob, next_state"),
    ({0: {0: [(1.0, 0, 0.0, False)]}}, [float("nan")], "distribution"),
    ({}, [1.0], "states"),
    ({0: {0: [(1.0, 1, 0.0, False)]}, 1: {1: [(1.0, 0, 0.0, False)]}}, [1.0, 0.0], "actions"),
])
def test_table_from_P_refuses_malformed_tables(P, isd, match):
    with pytest.raises(ConfigError, match=match):
        table_from_P(P, isd)


def test_unreachable_goal_and_bad_maze_arguments():
    with pytest.raises(ConfigError, match="no goal can be reached"):
        envs.make_table("dyna/AsciiMaze-v0", layout="S#G")
    with pytest.raises(ConfigError, match="change_at"):
        envs.make_table("dyna/BlockingMaze-v0", change_at="x")
    with pytest.raises(ConfigError, match="change_at"):
        envs.make_table("dyna/BlockingMaze-v0", change_at=float("nan"))
    with pytest.raises(ConfigError, match="layout"):
        envs.make_table("dyna/AsciiMaze-v0", layout=None)
    with pytest.raises(UnknownEnvError):
        envs.make_table(None)
    assert envs.make_table("dyna/DynaMaze-v0", max_episode_steps=np.int64(5))[0].max_episode_steps == 5
    with pytest.raises(ConfigError, match="map_name"):
        envs.make_table("FrozenLake", map_name="5x5")
    with pytest.raises(ConfigError, match="is_slippery"):
        envs.make_table("FrozenLake", is_slippery="no")
    with pytest.raises(ConfigError, match="max_episode_steps"):
        envs.make_table("Taxi", max_episode_steps=0)


def test_make_env_serves_dyna_ids_too():
    env, meta = envs.make_env("dyna/DynaMaze-v0", max_episode_steps=7)
    assert meta["optimal_path_length"] == 14 and env.spec.max_episode_steps == 7


def test_batched_stepper_returns_fresh_arrays_and_checks_masks():
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    stepper = BatchedStepper(table, 2)
    rng = np.random.default_rng(0)
    stepper.reset(rng)
    s2, *_ = stepper.step(np.array([0, 2]), rng)
    before = s2.copy()
    stepper.reset(rng, mask=np.array([True, False]))
    assert np.array_equal(s2, before)
    with pytest.raises(ConfigError, match="mask"):
        stepper.reset(rng, mask=np.array([True]))
    with pytest.raises(ConfigError, match="n_copies"):
        BatchedStepper(table, 2.7)


def test_unknown_env_keyword_lists_the_allowed_ones_or_says_there_are_none():
    from dyna.errors import ConfigError

    with pytest.raises(ConfigError, match="DynaMaze takes no keywords"):
        envs.make_env("dyna/DynaMaze-v0", change_at=5)
    with pytest.raises(ConfigError, match=r"unknown keyword \(allowed: change_at"):
        envs.make_env("dyna/BlockingMaze-v0", chang_at=5)


@pytest.mark.parametrize("env_id,space", [("CartPole-v1", "Box observation"),
                                          ("Blackjack-v1", "Tuple observation")])
def test_a_non_discrete_env_is_refused_naming_env_id(env_id, space, tmp_path, capsys):
    from dyna.cli import main

    with pytest.raises(ConfigError) as e:
        envs.make_table(env_id)
    assert e.value.field == "env.id" and space in str(e.value)
    cfg = tmp_path / "cp.toml"
    cfg.write_text(f'name = "cp"\n[env]\nid = "{env_id}"\n[schedule]\nepisodes = 5\n'
                   '[[variants]]\nname = "q"\nagent = "dyna_q"\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"env.id='{env_id}'" in err
    assert not (tmp_path / "out").exists()
