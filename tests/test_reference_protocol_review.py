"""Example 8.4's reference protocol and its comparison: a
protocol-added env keyword is blamed on schedule.optimal_protocol, and runs that never
passed the optimality check are counted in the reference-implementation table."""

import polars as pl
import pytest

from dyna.errors import ConfigError
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import run_experiment
from test_example_8_4_protocol import _raw as example_raw


def _raw(env="dyna/AsciiMaze-v0", episodes=500, sweep=True):
    """test_example_8_4_protocol's experiment (Dyna-Q and PS, n = 5, alpha 0.5, 3 runs,
    seed 1) under the reference protocol, on ``env`` at k = 1 (no sweep: the env's own)."""
    data = example_raw(optimal_protocol="reference")
    data["env"]["id"] = env
    data["schedule"]["episodes"] = episodes
    if sweep:
        data["sweep"] = {"resolution": [1]}
    else:
        del data["sweep"]
    return data


@pytest.mark.parametrize("env", ["dyna/DynaMaze-v0", "FrozenLake-v1"])
def test_reference_protocol_on_an_env_without_goal_block(tmp_path, env):
    # goal_block is added by the protocol: the error names the key the user wrote
    with pytest.raises(ConfigError) as exc:
        run_experiment(parse_experiment(_raw(env, sweep=False)), tmp_path / "o")
    assert exc.value.field == "schedule.optimal_protocol"
    assert exc.value.value == "reference" and "dyna/AsciiMaze-v0" in str(exc.value)
    assert not (tmp_path / "o").exists()


def test_runs_left_out_of_the_comparison_are_counted(tmp_path):
    # 5 episodes in the Dyna maze with the goal block: with seed 1, 1 of 3 Dyna-Q runs and 2
    # of 3 prioritized-sweeping runs pass the one greedy check; the table says "n of 3" and
    # how many runs were left out
    run_experiment(parse_experiment(_raw(episodes=5)), tmp_path / "o")
    runs = pl.read_parquet(tmp_path / "o" / "runs.parquet")
    found = {name: int(runs.filter(pl.col("variant") == name)["found"].sum())
             for name in ("Dyna-Q", "PS")}
    assert found == {"Dyna-Q": 1, "PS": 2}
    text = (tmp_path / "o" / "report.md").read_text()
    section = text.split("#### Against the reference implementation")[1]
    rows = {line.split(" | ")[0]: line for line in section.splitlines()
            if line.startswith("| Dyna-Q, ") or line.startswith("| Prioritized")}
    for label, name in (("| Dyna-Q, updates until optimal, k = 1", "Dyna-Q"),
                        ("| Prioritized Sweeping, updates until optimal, k = 1", "PS")):
        cell = rows[label].split(" | ")[1]
        assert cell.endswith(f"({found[name]} of 3)"), cell
    # one Dyna-Q value: no Welch test ("-", not "nan"); two PS values: a test
    assert rows["| Dyna-Q, updates until optimal, k = 1"].split(" | ")[4:6] == ["-", "-"]
    assert rows["| Prioritized Sweeping, updates until optimal, k = 1"].split(" | ")[4] != "-"
    assert "nan" not in section
    assert "3 of our runs never passed the optimality check" in section


def test_updates_plot_names_the_tolerance_and_protocol(tmp_path):
    data = _raw(episodes=50)
    data["sweep"] = {"resolution": [1, 2]}
    run_experiment(parse_experiment(data), tmp_path / "o")
    svg = (tmp_path / "o" / "plots" / "updates_to_optimal.svg").read_text()
    assert "updates until an optimal path" in svg and "optimal_tolerance" not in svg
    assert ("optimal: 1 greedy rollout within 1.2 x k x the unrefined shortest path"
            in svg)


def test_final_table_of_stopped_runs_has_no_steps_of_their_last_episodes(tmp_path):
    run_experiment(parse_experiment(_raw(episodes=50)), tmp_path / "o")
    text = (tmp_path / "o" / "report.md").read_text()
    final = text.split("## Final performance")[1].split("\n## ")[0]
    header = next(line for line in final.splitlines() if line.startswith("| variant |"))
    assert header == ("| variant | resolution | runs that found an optimal path "
                      "(greedy path at most 1.2 x shortest) | updates until optimal "
                      "(greedy path at most 1.2 x shortest) |")
    assert "last 10 episodes" not in final
