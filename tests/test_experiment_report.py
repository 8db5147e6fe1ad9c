"""report.md: hand-computed tables on synthetic results, and the chapter 8 checks on real
(reduced) runs of the shipped experiment files."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dyna.experiment.kinds.tabular.report import build_report, shortcut_bound
from dyna.experiment.registry import load_experiment, parse_experiment
from dyna.experiment.runner import ExperimentOutput, run_experiment

REPO = Path(__file__).resolve().parents[1]


def _output(config_changes, results, runs, metas):
    data = {
        "name": "synthetic", "seed": 0, "runs": 2, "env": {"id": "dyna/DynaMaze-v0"},
        "schedule": {"episodes": 50}, "defaults": {"agent": "dyna_q"},
        "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=50", "n_planning": 50}],
    }
    data.update(config_changes)
    cfg = parse_experiment(data)
    manifest = {"config_hash": cfg.hash,
                "envs": [{"point": p, "meta": m} for p, m in zip(cfg.sweep_points(), metas)]}
    return ExperimentOutput(config=cfg, manifest=manifest, results=results, runs=runs)


def _episodes_frame(steps_by_variant):
    rows = []
    for variant, per_run in steps_by_variant.items():
        for run, steps in enumerate(per_run):
            for ep, s in enumerate(steps, start=1):
                rows.append({"variant": variant, "agent": "dyna_q", "run": run, "episode": ep,
                             "steps": s, "return": 1.0, "terminated": True, "updates": 0})
    return pl.DataFrame(rows)


def test_figure_8_2_section_hand_computed():
    # n=0: episode 2 takes 300 and 500 steps (mean 400); n=50: 30 and 50 (mean 40);
    # episodes 40..50 take 16 steps in every run.
    steps = {"n=0": [[1000, 300] + [16] * 48, [900, 500] + [16] * 48],
             "n=50": [[1000, 30] + [16] * 48, [900, 50] + [16] * 48]}
    meta = {"requested_id": "dyna/DynaMaze-v0", "resolved_id": "dyna/DynaMaze-v0",
            "n_states": 54, "n_actions": 4, "max_episode_steps": 0, "optimal_path_length": 14}
    out = _output({"analysis": {"metrics": ["steps_per_episode"], "checks": ["figure_8_2"],
                                "first_episode": 2}},
                  _episodes_frame(steps), pl.DataFrame(), [meta])
    text = build_report(out)
    # the variant names state n already: no "n" column, no "n = 0 (n=0)"
    assert "| variant | mean steps in episode 2 | mean steps per episode, episodes 41-50 |" \
        in text
    assert "| n=0 | 400.0 [300.0, 500.0] | 16 [16, 16] |" in text
    assert "| n=50 | 40 [30, 50] | 16 [16, 16] |" in text
    assert "Cells: mean over runs [95% bootstrap confidence interval]." in text
    assert "- n=0: episode 2 takes 400.0 steps (book: several hundred; consistent at 200 or more) " \
           "-> consistent" in text
    assert "- n=50: episode 2 takes 40 steps (book: under ~60; consistent below 60) -> " \
           "consistent" in text
    assert "- n=0: episodes 41-50 average 16 steps (book: 14 optimal steps plus exploration, " \
           "about 15-18; consistent within 14-20) -> consistent" in text
    assert "(n=" not in text and "n = 0 (" not in text
    # final performance: last 10 episodes per run average 16 steps; the return, 1 in every
    # episode, is said once
    assert "Mean over runs with its 95% bootstrap confidence interval" in text
    assert "| n=0 | 16 [16, 16] |\n" in text
    assert "The return was 1 in every episode of every run (no column)." in text
    assert f"- config sha256: `{out.config.hash[:12]}` (in full in manifest.json)" in text
    assert out.config.hash not in text
    assert "| states | actions | max episode steps | optimal path (steps) |" in text
    assert "| - | dyna/DynaMaze-v0 | dyna/DynaMaze-v0 | 54 | 4 | none | 14 |" in text


def test_figure_8_2_names_n_when_the_variant_name_does_not():
    steps = {"direct": [[1000, 300] + [16] * 48], "planner": [[1000, 30] + [16] * 48]}
    out = _output({"runs": 1, "variants": [{"name": "direct", "n_planning": 0},
                                           {"name": "planner", "n_planning": 50}],
                   "analysis": {"metrics": ["steps_per_episode"], "checks": ["figure_8_2"]}},
                  _episodes_frame(steps), pl.DataFrame(), [{}])
    out.manifest.update(backend={"name": "process", "workers": 2, "jobs": 2, "block_size": 1},
                        timing={"compile_time_s": 0.5, "run_time_s": 1.25,
                                "output_time_s": 0.25, "wall_time_s": 2.0})
    text = build_report(out)
    assert "| variant | planning steps n | mean steps in episode 2 |" in text
    assert "| direct | 0 | 300.0 (one run: no interval) |" in text
    assert "- direct (n = 0): episode 2 takes 300.0 steps" in text
    assert "- planner (n = 50): episode 2 takes 30 steps" in text
    assert "- backend: process (2 workers, 2 jobs of at most 1 run)" in text
    assert "- time: compile 0.50 s, run 1.25 s, output 0.25 s, total 2.00 s" in text


def test_label_and_short_hash():
    from dyna.experiment.reporting import label, short_hash

    assert label("n=0", "n = 0") == "n=0"
    assert label("n = 5", "n = 5") == "n = 5"
    assert label("mean_min10", "mean") == "mean_min10 (mean)"
    assert label("thompson", "thompson") == "thompson"
    assert short_hash("0123456789abcdef" * 4) == "0123456789ab"
    assert short_hash(None) == "?"


def test_figure_8_2_flags_an_inconsistent_curve():
    steps = {"n=0": [[1000, 50] + [40] * 48, [900, 70] + [40] * 48],
             "n=50": [[1000, 300] + [16] * 48, [900, 300] + [16] * 48]}
    out = _output({"analysis": {"metrics": ["steps_per_episode"], "checks": ["figure_8_2"]}},
                  _episodes_frame(steps), pl.DataFrame(), [{}])
    text = build_report(out)
    assert "episode 2 takes 60 steps (book: several hundred; consistent at 200 or more) -> NOT " \
           "consistent" in text
    assert "episode 2 takes 300.0 steps (book: under ~60; consistent below 60) -> NOT " \
           "consistent" in text
    assert "episodes 41-50 average 40 steps (book: 14 optimal steps plus exploration, about " \
           "15-18; consistent within 14-20) -> NOT consistent" in text


@pytest.mark.parametrize("window, length, expected", [(1000, 16, 63), (16, 16, 1),
                                                      (17, 16, 2), (32, 16, 2), (0, 16, 0)])
def test_shortcut_bound(window, length, expected):
    assert shortcut_bound(window, length) == expected


def test_prioritized_sweeping_ratio_hand_computed():
    runs = pl.DataFrame({
        "variant": ["dq"] * 4 + ["ps"] * 4,
        "agent": ["dyna_q"] * 4 + ["prioritized_sweeping"] * 4,
        "resolution": [1, 1, 2, 2] * 2,
        "run": [0, 1] * 4,
        "updates_to_optimal": [1000, 3000, 8000, None, 200, 200, 1000, 3000],
        "total_steps": [100, 300, 800, 5000, 400, 200, 1000, 2000],
    }, schema_overrides={"updates_to_optimal": pl.Int64})
    results = pl.DataFrame({"variant": ["dq"], "agent": ["dyna_q"], "resolution": [1],
                            "run": [0], "episode": [1], "steps": [5], "return": [1.0],
                            "terminated": [True], "updates": [5]})
    out = _output({"env": {"id": "dyna/AsciiMaze-v0"}, "sweep": {"resolution": [1, 2]},
                   "schedule": {"episodes": 5, "stop_at_optimal": True},
                   "variants": [{"name": "dq", "agent": "dyna_q"},
                                {"name": "ps", "agent": "prioritized_sweeping"}],
                   "analysis": {"metrics": ["updates_to_optimal"],
                                "checks": ["prioritized_sweeping"]}},
                  results, runs, [{"n_states": 54}, {"n_states": 216}])
    text = build_report(out)
    # size 1: (1000+3000)/2 = 2000 vs 200 -> ratio 10; size 2: 8000 (one run) vs 2000 -> 4
    assert "| 1 | 54 | 2000.0 [1000.0, 3000.0] | 2/2 | 200.0 [200.0, 200.0] | 2/2 | 10 |" in text
    assert "| 2 | 216 | 8000.0 (one run: no interval) | 1/2 | 2000.0 [1000.0, 3000.0] | 2/2 " \
           "| 4 |" in text
    assert "needs fewer updates at every size: yes" in text
    assert ("per size: 10, 4 (book: 'often by a factor of 5 to 10', with a 'decisive "
            "advantage' kept as the maze grows) -> partly consistent with the book's range; the "
            "ratio does not grow with size here.") in text
    # real steps of the runs that found the path: size 1: dq (100+300)/2 = 200, ps 300;
    # updates/step 2000/200 = 10 and 200/300 = 0.667; real-step ratio 200/300 = 0.667.
    # size 2: dq 800 (the run at 5000 never found it), ps 1500; 10 and 1.33; 0.533.
    # the update ratio is the product: 0.667 * (10 / 0.667) = 10, 0.533 * (10 / 1.333) = 4
    assert "| 1 | 200 | 300 | 10 | 0.667 | 0.667 |" in text
    assert "| 2 | 800 | 1500 | 10 | 1.33 | 0.533 |" in text
    assert "1 + n = 6 updates on every real step" in text


def _runs_frame(folder):
    return pl.read_parquet(folder / "runs.parquet")


def test_blocking_maze_dyna_q_plus_ends_ahead(tmp_path):
    """Figure 8.4 (reduced to 6 runs): Dyna-Q+ ends with more cumulative reward."""
    cfg = load_experiment(REPO / "experiments" / "blocking_maze.toml", runs=6)
    out = run_experiment(cfg, tmp_path / "b")
    final = dict(_runs_frame(out).group_by("variant").agg(pl.col("total_return").mean())
                 .iter_rows())
    assert final["Dyna-Q+"] > final["Dyna-Q"]
    text = (out / "report.md").read_text()
    assert "### Blocking maze (Figure 8.4)" in text
    assert "The maze changes after 1000 time steps; optimal path 10 -> 16 steps." in text
    assert "-> Dyna-Q+ ends with more" in text
    # the variants are named Dyna-Q and Dyna-Q+: not "Dyna-Q+ (Dyna-Q+) minus Dyna-Q (Dyna-Q)"
    assert "\nDyna-Q+ minus Dyna-Q, final cumulative reward: " in text
    # a step-budget schedule: the final column names its step, no per-episode averaging
    assert "| variant | cumulative reward at step 3000 |" in text
    assert "Mean over runs with its 95% bootstrap confidence interval [low, high].\n" in text
    assert "episodes are averaged first" not in text


def test_shortcut_maze_only_dyna_q_plus_finds_the_shortcut(tmp_path):
    """Figure 8.5 (reduced to 4 runs): Dyna-Q+ ends ahead and finds the shortcut; Dyna-Q
    does not (judged by goal visits in the last 1000 steps beyond the old-path bound)."""
    cfg = load_experiment(REPO / "experiments" / "shortcut_maze.toml", runs=4)
    out = run_experiment(cfg, tmp_path / "s")
    res = pl.read_parquet(out / "results.parquet")
    visits = {}
    for name in ("Dyna-Q", "Dyna-Q+"):
        v = res.filter(pl.col("variant") == name)
        end = v.filter(pl.col("step") == 6000).sort("run").get_column("cumulative_reward")
        start = v.filter(pl.col("step") == 5000).sort("run").get_column("cumulative_reward")
        visits[name] = (end - start).to_numpy()
    bound = shortcut_bound(1000, 16)
    assert np.all(visits["Dyna-Q+"] > bound)
    assert np.all(visits["Dyna-Q"] <= bound)
    text = (out / "report.md").read_text()
    assert "| 0/4 (0%) |" in text and "| 4/4 (100%) |" in text
    assert "-> Dyna-Q+ ends with more" in text


def test_prioritized_sweeping_fewer_updates_at_every_size(tmp_path):
    """Example 8.4 (reduced to 4 runs, sizes 54..1350 states): prioritized sweeping needs
    fewer updates than Dyna-Q at every size; the report gives the ratio per size."""
    cfg = load_experiment(REPO / "experiments" / "prioritized_sweeping.toml", runs=4)
    out = run_experiment(cfg, tmp_path / "p")
    runs = _runs_frame(out)
    means = (runs.group_by("variant", "resolution").agg(pl.col("updates_to_optimal").mean())
             .sort("resolution"))
    for res in cfg.sweep["resolution"]:
        row = dict(means.filter(pl.col("resolution") == res)
                   .select("variant", "updates_to_optimal").iter_rows())
        assert row["prioritized sweeping"] < row["Dyna-Q"], res
    text = (out / "report.md").read_text()
    assert "needs fewer updates at every size: yes" in text
    assert text.count("| 4/4 |") >= 1


def test_a_return_the_same_in_every_episode_is_said_once_not_a_column():
    steps = {"n=0": [[40, 30] + [16] * 48, [50, 20] + [16] * 48],
             "n=50": [[40, 18] + [14] * 48, [50, 22] + [14] * 48]}
    meta = {"requested_id": "dyna/DynaMaze-v0", "resolved_id": "dyna/DynaMaze-v0",
            "n_states": 54, "n_actions": 4, "max_episode_steps": 0, "optimal_path_length": 14}
    frame = _episodes_frame(steps)
    text = build_report(_output({}, frame, pl.DataFrame(), [meta]))
    assert "| variant | steps/episode, episodes 41-50 |" in text
    assert "return/episode" not in text
    assert "The return was 1 in every episode of every run (no column)." in text
    assert "| n=0 | 16 [16, 16] |" in text and "| n=50 | 14 [14, 14] |" in text
    # returns that differ: the column is there, and the sentence is not
    varied = frame.with_columns(pl.when(pl.col("run") == 1).then(0.5).otherwise(1.0)
                                .alias("return"))
    text = build_report(_output({}, varied, pl.DataFrame(), [meta]))
    assert ("| variant | steps/episode, episodes 41-50 | return/episode, episodes 41-50 |"
            in text)
    assert "| n=0 | 16 [16, 16] | 0.75 [0.5, 1] |" in text
    assert "in every episode of every run" not in text
