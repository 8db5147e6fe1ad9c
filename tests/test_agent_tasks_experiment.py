"""Experiment kind agent_tasks: config validation, per-run summaries by hand, and a small
end-to-end run through the generic runner."""

import json
import math

import numpy as np
import polars as pl
import pytest

from conftest import tables_only
from dyna.errors import ConfigError
from dyna.experiment.kinds.agent_tasks.config import parse_agent_tasks
from dyna.experiment.kinds.agent_tasks.metrics import _recovery, run_summaries
from dyna.experiment.registry import parse_experiment

SMALL = {
    "kind": "agent_tasks", "name": "tiny", "seed": 1, "runs": 2, "episodes": 30,
    "store": "skill",
    "variants": ["no_learning", "skill_loop", "skill_loop-no_approval_for_untrusted"],
    "env": {"n_families": 2, "n_tools": 3, "n_values": 2, "length": 2, "max_steps": 6,
            "n_distractor_words": 4},
    "scenarios": [{"name": "clean"}, {"name": "drift", "env": {"drift_at": [10]}}],
    "analysis": {"final_window": 10, "window": 5, "recovery_window": 2,
                 "n_resamples": 200},
}


def test_recovery_by_hand():
    # family 0 episodes at 0, 2, 4, 6, 8, 10, 12; drift on family 0 before episode 5
    fam = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0])
    succ = np.array([1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1], dtype=bool)
    drift = np.full(13, -1)
    drift[5] = 0
    # pre = f0 episodes 2, 4 -> 1.0; after: 6, 8, 10, 12 -> 0, 0, 1, 1; windows of 2:
    # (0,0)=0, (0,1)=.5, (1,1)=1 -> first recovered window starts at episode 10: 10 - 5 = 5
    assert _recovery(succ, fam, drift, 2, 0.05) == (5.0, 1, 1)
    # never back: episodes 10 and 12 fail too -> censored at the end: 13 - 5 = 8 episodes
    succ2 = succ.copy()
    succ2[[10, 12]] = False
    rec, measured, recovered = _recovery(succ2, fam, drift, 2, 0.05)
    assert rec == 8.0 and (measured, recovered) == (1, 0)
    # within 50 points counts at once
    assert _recovery(succ, fam, drift, 2, 0.5)[0] == 3.0
    # no drift: nothing measured
    r = _recovery(succ, fam, np.full(13, -1), 2, 0.05)
    assert math.isnan(r[0]) and r[1:] == (0, 0)
    # nothing to recover from: family 0 failed both episodes before the drift (pre = 0),
    # so "back within 5 points of 0" holds at its first arrival (episode 6, 1 after the
    # drift); that wait is not a recovery, and the drift is not measured
    succ3 = succ.copy()
    succ3[[2, 4]] = False
    r = _recovery(succ3, fam, drift, 2, 0.05)
    assert math.isnan(r[0]) and r[1:] == (0, 0)
    # pre = 0.5 with 50 points is nothing to recover from either; with 40 points it is
    succ4 = succ.copy()
    succ4[2] = False
    assert _recovery(succ4, fam, drift, 2, 0.5)[1] == 0
    # pre 0.5 - 0.4 = 0.1: the window of episodes 6, 8 (0 of 2) is below, that of 8, 10
    # (1 of 2) reaches it: 8 - 5 = 3 episodes
    assert _recovery(succ4, fam, drift, 2, 0.4) == (3.0, 1, 1)


def test_run_summaries_by_hand():
    arrays = {
        "success": np.array([[1, 0, 1, 1], [0, 0, 0, 0]], dtype=bool),
        "tokens": np.array([[100, 300, 100, 100], [10, 20, 30, 40]]),
        "learning_tokens": np.array([[50, 0, 50, 0], [0, 0, 0, 0]]),
        "incident": np.array([[0, 1, 0, 0], [0, 0, 0, 0]], dtype=bool),
        "escalated": np.zeros((2, 4), dtype=bool),
        "poisoned": np.array([[0, 2, 1, 1], [0, 0, 0, 0]]),
        "stale": np.array([[0, 0, 0, 3], [0, 0, 0, 0]]),
        "library_size": np.array([[1, 2, 3, 4], [0, 0, 0, 0]]),
        "family": np.zeros((2, 4), dtype=np.int64),
        "drift_family": np.full((2, 4), -1),
    }
    s = run_summaries(arrays, {"final_window": 2, "recovery_window": 2,
                               "recovery_points": 0.05})
    np.testing.assert_allclose(s["final_success"], [1.0, 0.0])
    np.testing.assert_allclose(s["success_rate"], [0.75, 0.0])
    assert s["tokens_per_success"][0] == pytest.approx(700 / 3)
    assert math.isnan(s["tokens_per_success"][1])
    np.testing.assert_allclose(s["learning_share"], [100 / 700, 0.0])
    np.testing.assert_allclose(s["final_tokens_per_run"], [100.0, 35.0])
    np.testing.assert_allclose(s["tokens_growth"], [100 - 300, 40 - 20])  # quarter = 1
    assert s["incidents"].tolist() == [1, 0]
    assert s["poisoned_final"].tolist() == [1, 0] and s["poisoned_max"].tolist() == [2, 0]
    assert s["stale_final"].tolist() == [3, 0] and s["library_final"].tolist() == [4, 0]


@pytest.mark.parametrize("change, field", [
    ({"bogus": 1}, "bogus"),
    ({"variants": ["skill_loop-no_nothing"]}, "variants[0]"),
    ({"variants": []}, "variants"),
    ({"store": "disk"}, "store"),
    ({"scenarios": [{"name": "x", "env": {"drift_att": [1]}}]}, "scenarios[0].env"),
    ({"scenarios": [{"name": "x", "env": {"injection_rate": 2}}]},
     "scenarios[0].env.injection_rate"),
    ({"policy": {"p_follow": 1.5}}, "policy.p_follow"),
    ({"loop": {"skill_cap": 0}}, "loop.skill_cap"),
    ({"analysis": {"chosen_family": 5}}, "analysis.chosen_family"),
    ({"analysis": {"windows": 5}}, "analysis.windows"),
    ({"episodes": 0}, "episodes"),
])
def test_bad_config_names_the_field(change, field):
    data = {**SMALL, **change}
    with pytest.raises(ConfigError) as err:
        parse_experiment(data)
    assert err.value.field == field


def test_config_round_trip_and_overrides():
    cfg = parse_experiment(dict(SMALL))
    assert parse_experiment(cfg.to_dict()) == cfg
    assert cfg.to_dict()["kind"] == "agent_tasks"
    assert cfg.with_overrides(runs=3).runs == 3 and cfg.with_overrides(runs=3).hash != cfg.hash
    with pytest.raises(ConfigError):
        cfg.with_overrides(runs=0)
    full = parse_agent_tasks({k: v for k, v in SMALL.items() if k not in ("kind",
                                                                          "variants")})
    assert len(full.variants) == 18
    assert cfg.env_kwargs(1) == {**SMALL["env"], "drift_at": [10]}


def test_shipped_experiments_parse():
    from dyna.experiment.registry import load_experiment
    for store in ("skill", "memory"):
        cfg = load_experiment(f"experiments/{store}_loop_ablation.toml")
        assert cfg.runs >= 10 and cfg.store == store and len(cfg.variants) == 18
        assert [n for n, _ in cfg.scenarios] == ["clean", "noisy_self_assessment", "drift",
                                                 "volume", "injection"]


def test_end_to_end_run(tmp_path):
    from dyna.experiment.backends import InProcessBackend, ProcessPoolBackend
    from dyna.experiment.runner import load_output, run_experiment

    cfg = parse_experiment(dict(SMALL))
    out = run_experiment(cfg, tmp_path / "a", backend=InProcessBackend(), progress=False)
    with tables_only():
        again = run_experiment(cfg, tmp_path / "b", backend=InProcessBackend(), block_size=1,
                               progress=False)
        pooled = run_experiment(cfg, tmp_path / "c", backend=ProcessPoolBackend(2),
                                block_size=1, progress=False)
    m1 = json.loads((out / "manifest.json").read_text())
    m2 = json.loads((again / "manifest.json").read_text())
    m3 = json.loads((pooled / "manifest.json").read_text())
    assert m1["kind"] == "agent_tasks"
    # same rows, same sha256: block size and backend are irrelevant
    assert m1["tables"] == m2["tables"] == m3["tables"]
    res = load_output(out)
    ep, runs = res.tables["episodes"], res.tables["runs"]
    assert ep.height == 3 * 2 * 2 * 30 and runs.height == 3 * 2 * 2
    assert ep.columns[:4] == ["variant", "scenario", "run", "episode"]
    # the runs table is the summary of the episodes table
    g = ep.filter((pl.col("variant") == "skill_loop") & (pl.col("scenario") == "clean")
                  & (pl.col("run") == 1)).sort("episode")
    r = runs.filter((pl.col("variant") == "skill_loop") & (pl.col("scenario") == "clean")
                    & (pl.col("run") == 1))
    assert r["final_success"][0] == pytest.approx(g["success"].tail(10).mean())
    tot = (g["tokens"] + g["learning_tokens"]).sum()
    assert r["tokens_per_success"][0] == pytest.approx(tot / g["success"].sum())
    # the same task stream for every variant of a run
    fam = ep.filter(pl.col("scenario") == "drift").group_by("variant").agg(
        pl.col("family").sort_by(["run", "episode"]))
    assert fam["family"][0].to_list() == fam["family"][1].to_list() == fam["family"][2].to_list()
    assert ep.filter(pl.col("drift"))["episode"].unique().to_list() == [11]
    report = (out / "report.md").read_text()
    for text in ("## Scenario `clean`", "## Scenario `drift`", "## Primary hypotheses",
                 "IQM", "Effect of removing each safeguard", "## What each safeguard did",
                 "## Across scenarios (rliable)"):
        assert text in report
    assert "- `approval_for_untrusted` |" not in report  # rows are tables, not bullets
    config_hash = json.loads((out / "manifest.json").read_text())["config_hash"]
    assert f"config sha256 `{config_hash[:12]}` (in full in manifest.json)" in report
    assert "| `approval_for_untrusted` |" in report
    plots = sorted(p.name for p in (out / "plots").iterdir())
    for name in ("scenario_clean.png", "scenario_drift.png", "performance_profiles.png",
                 "recovery.png"):
        assert name in plots
        assert f"(plots/{name})" in report
