"""Example 8.4's reference protocol: the k x k goal block, one greedy check, the
reference's step limit and its +1 update per real step for prioritized sweeping; the
default protocol and the shipped file's hash unchanged."""

import numpy as np
import polars as pl
import pytest

import envs
from dyna.agents import run_agent
from dyna.errors import ConfigError
from dyna.experiment import load_experiment
from dyna.experiment.kinds.tabular.job import count_real_steps, optimal_length
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import run_experiment
from envs.maze import AsciiMaze


def test_goal_block_maze():
    block = AsciiMaze(resolution=2, goal_block=True)
    assert sorted(block.goals) == [(0, 16), (0, 17), (1, 16), (1, 17)]
    assert block.start == (4, 0)
    meta = block.table.meta
    assert (meta["optimal_path_length"], meta["free_states"], meta["unscaled_optimal_path_length"]) \
        == (27, 188, 14)
    single = AsciiMaze(resolution=2)
    assert single.goals == [(0, 16)] and single.table.meta["optimal_path_length"] == 28
    # 13 k + 1 with the block, 14 k without; 47 k^2 free cells of 54 k^2
    for k in range(1, 6):
        _, m = envs.make_table("dyna/AsciiMaze-v0", resolution=k, goal_block=True)
        assert (m["optimal_path_length"], m["free_states"], m["n_states"]) == \
            (13 * k + 1, 47 * k * k, 54 * k * k)
    with pytest.raises(ConfigError) as exc:
        AsciiMaze(resolution=2, goal_block="yes")
    assert exc.value.field == "goal_block"


def test_reference_step_limit():
    # the reference's check_path accepts at most 14 * k * 1.2 steps: 16, 33, 50, 67, 84
    limits = []
    for k in range(1, 6):
        _, m = envs.make_table("dyna/AsciiMaze-v0", resolution=k, goal_block=True)
        limits.append(optimal_length(m, 1.2, "reference"))
        # the default protocol takes the env's own shortest path (13 k + 1 with the block)
        assert optimal_length(m, 1.2) == int((13 * k + 1) * 1.2 + 1e-9)
    assert limits == [16, 33, 50, 67, 84]
    _, taxi = envs.make_table("Taxi")
    with pytest.raises(ConfigError) as exc:
        optimal_length({**taxi, "optimal_path_length": 10}, 1.2, "reference")
    assert exc.value.field == "schedule.optimal_protocol"


def test_count_real_steps_by_hand():
    steps = np.array([[5, 3, -1], [2, 2, 2]])
    upd = np.array([[4, 10, 0], [1, 2, 3]])
    uto = np.array([10, -1])
    out = count_real_steps(steps, upd, uto)
    assert out["episode_updates"].tolist() == [[9, 18, 0], [3, 6, 9]]
    assert out["updates_to_optimal"].tolist() == [18, -1]


def _raw(**schedule):
    return {"name": "ps_ref", "seed": 1, "runs": 3, "env": {"id": "dyna/AsciiMaze-v0"},
            "sweep": {"resolution": [1, 2]},
            "schedule": {"episodes": 500, "stop_at_optimal": True, "optimal_tolerance": 1.2,
                         **schedule},
            "defaults": {"alpha": 0.5, "gamma": 0.95, "epsilon": 0.1, "n_planning": 5,
                         "theta": 1e-4},
            "variants": [{"name": "Dyna-Q", "agent": "dyna_q"},
                         {"name": "PS", "agent": "prioritized_sweeping"}],
            "analysis": {"metrics": ["updates_to_optimal"], "checks": ["prioritized_sweeping"],
                         "n_resamples": 200}}


@pytest.mark.parametrize("changes, field", [
    ({"optimal_protocol": "book"}, "schedule.optimal_protocol"),
    ({"optimal_protocol": "reference", "stop_at_optimal": False,
      "optimal_tolerance": 1.0}, "schedule.optimal_protocol"),
])
def test_bad_protocol_named(changes, field):
    with pytest.raises(ConfigError) as exc:
        parse_experiment(_raw(**changes))
    assert exc.value.field == field


def test_reference_refuses_a_single_goal_cell():
    data = _raw(optimal_protocol="reference")
    data["env"]["kwargs"] = {"goal_block": False}
    with pytest.raises(ConfigError) as exc:
        parse_experiment(data)
    assert exc.value.field == "env.kwargs.goal_block"


def test_default_protocol_keeps_the_shipped_hash():
    cfg = load_experiment("experiments/prioritized_sweeping.toml")
    assert cfg.schedule.optimal_protocol == "dyna"
    assert "optimal_protocol" not in cfg.to_dict()["schedule"]
    assert cfg.hash.startswith("f8bbc0dc3558ef77")
    ref = load_experiment("experiments/prioritized_sweeping_reference.toml")
    assert ref.schedule.optimal_protocol == "reference"
    assert ref.env_kwargs({"resolution": 3}) == {"resolution": 3, "goal_block": True}


def test_reference_run_matches_the_kernel_by_hand(tmp_path):
    cfg = parse_experiment(_raw(optimal_protocol="reference"))
    run_experiment(cfg, tmp_path / "o")
    runs = pl.read_parquet(tmp_path / "o" / "runs.parquet")
    for k, limit in ((1, 16), (2, 33)):
        table, _ = envs.make_table("dyna/AsciiMaze-v0", resolution=k, goal_block=True)
        for agent, name in (("dyna_q", "Dyna-Q"), ("prioritized_sweeping", "PS")):
            direct = run_agent(agent, cfg.variants[0 if agent == "dyna_q" else 1].hparams,
                               table, seed=1, run_indices=[0, 1, 2], episodes=500,
                               optimal_length=limit, optimal_checks=1)
            played = np.where(direct.episode_steps >= 0, direct.episode_steps, 0).sum(axis=1)
            expect = direct.updates_to_optimal + (played if agent != "dyna_q" else 0)
            got = runs.filter((pl.col("variant") == name) & (pl.col("resolution") == k)) \
                .sort("run")["updates_to_optimal"].to_list()
            assert got == expect.tolist()
            if agent == "dyna_q":  # 1 + n = 6 updates on every real step
                assert (direct.updates_to_optimal == 6 * played).all()
    text = (tmp_path / "o" / "report.md").read_text()
    assert "Protocol `reference`" in text and "| free states |" in text
    rows = [line for line in text.splitlines() if line.startswith("| 1 | 47 |")
            or line.startswith("| 2 | 188 |")]
    assert len(rows) == 2
    assert "updates until optimal (greedy path at most 1.2 x shortest)" in text
    # the headline's measure is updates until optimal, not steps of episodes never played
    from dyna.experiment.kinds.tabular.headline import ratio_ci
    from dyna.experiment.reporting import ci

    head = text.split("## Headline")[1].split("## Setup")[0]
    assert ("- updates until optimal (1 greedy rollout within 1.2 x k x the unrefined "
            "shortest path), Dyna-Q / prioritized sweeping per maze size (95% CI; book: 5 to "
            "10):\n") in head
    assert "steps per episode over the last" not in head
    found = {(v, k): runs.filter((pl.col("variant") == v) & (pl.col("resolution") == k))
             ["updates_to_optimal"].drop_nulls().to_numpy()
             for v in ("Dyna-Q", "PS") for k in (1, 2)}
    ratios = [f"{size}: {ci(ratio_ci(found[('Dyna-Q', k)], found[('PS', k)], n_resamples=200, seed=1))}"  # noqa: E501
              for size, k in (("47 free states", 1), ("188", 2))]
    assert f"- {'; '.join(ratios)}.\n" in head
    assert float(ratios[0].split(": ")[1].split(" ")[0]) == pytest.approx(
        found[("Dyna-Q", 1)].mean() / found[("PS", 1)].mean(), rel=5e-3)
    # the size axis counts free states; no steps-per-episode 'sensitivity' of stopped runs
    plots = sorted(p.name for p in (tmp_path / "o" / "plots").iterdir())
    assert plots == ["updates_to_optimal.png", "updates_to_optimal.svg"]
    assert "maze size (free states)" in (tmp_path / "o" / "plots" /
                                         "updates_to_optimal.svg").read_text()


def test_one_check_is_never_stricter_than_five():
    # the same training stream; the check only reads the evaluation stream, and in a
    # deterministic maze a greedy policy without ties passes every rollout or none
    table, _ = envs.make_table("dyna/AsciiMaze-v0", resolution=1)
    one = run_agent("dyna_q", {"alpha": 0.5, "n_planning": 5}, table, seed=4,
                    run_indices=list(range(6)), episodes=300, optimal_length=16,
                    optimal_checks=1)
    five = run_agent("dyna_q", {"alpha": 0.5, "n_planning": 5}, table, seed=4,
                     run_indices=list(range(6)), episodes=300, optimal_length=16)
    assert (one.updates_to_optimal > 0).all()
    assert (one.updates_to_optimal <= five.updates_to_optimal).all()
    with pytest.raises(ConfigError) as exc:
        run_agent("dyna_q", {}, table, seed=0, run_indices=[0], episodes=2,
                  optimal_length=16, optimal_checks=0)
    assert exc.value.field == "optimal_checks"
