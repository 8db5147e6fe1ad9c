"""Calibration of agent-tasks experiments: each check measure on hand-built tables, the
groups a pilot runs, the hypotheses' per-run differences and the calibrated verdicts
(dyna.experiment.kinds.agent_tasks.checks)."""

import numpy as np
import polars as pl
import pytest

from dyna.experiment.calibration_stats import NO_EFFECT, NOT_TESTABLE
from dyna.experiment.kinds.agent_tasks.analysis import evaluate_hypotheses
from dyna.experiment.kinds.agent_tasks.checks import (Check, calibrated_hypotheses,
                                                     check_results, hypothesis_differences,
                                                     per_run_values, pilot_pairs,
                                                     sizing_contrasts)
from dyna.experiment.kinds.agent_tasks.config import parse_agent_tasks

ENV = {"n_families": 2, "n_tools": 3, "n_values": 2, "length": 2, "max_steps": 6,
       "n_distractor_words": 4}


def episodes(groups: dict) -> pl.DataFrame:
    """An episodes table from ``{(variant, scenario): {column: array (runs, episodes)}}``."""
    frames = []
    for (variant, scenario), cols in groups.items():
        R, E = next(iter(cols.values())).shape
        frames.append(pl.DataFrame({
            "variant": [variant] * (R * E), "scenario": [scenario] * (R * E),
            "run": np.repeat(np.arange(R), E), "episode": np.tile(np.arange(1, E + 1), R),
            **{k: np.asarray(v).ravel() for k, v in cols.items()}}))
    return pl.concat(frames, how="diagonal")


def outcomes(R=2, E=3, **change) -> dict:
    base = {"success": np.zeros((R, E), bool), "steps": np.full((R, E), 4),
            "tokens": np.full((R, E), 100), "incident": np.zeros((R, E), bool),
            "library_size": np.zeros((R, E), np.int64),
            "context_entries": np.zeros((R, E), np.int64)}
    return {**base, **change}


# ============================================================================ measures

def test_a_runs_table_column():
    runs = pl.DataFrame({"variant": ["a", "a", "a", "b"], "scenario": ["s"] * 4,
                         "run": [1, 0, 2, 0], "late_success": [0.2, 0.1, 0.3, 0.9]})
    c = Check("c", "s", "a", "late_success", minimum=0.15, maximum=0.35)
    assert per_run_values(c, {"runs": runs, "episodes": None}).tolist() == [0.1, 0.2, 0.3]


def test_differs_compares_every_outcome_column_per_run():
    tokens = np.array([[100, 100, 100], [100, 100, 101]])     # run 1 differs at episode 3
    ep = episodes({("a", "s"): outcomes(), ("b", "s"): outcomes(tokens=tokens),
                   ("a", "t"): outcomes(steps=np.array([[4, 5, 4], [4, 4, 4]])),
                   ("b", "t"): outcomes()})
    tables = {"episodes": ep, "runs": None}
    assert per_run_values(Check("c", "s", "a", "differs", 0.8, versus="b"),
                          tables).tolist() == [0.0, 1.0]
    # versus_scenario alone: the same variant in another scenario
    assert per_run_values(Check("c", "s", "a", "differs", 0.8, versus_scenario="t"),
                          tables).tolist() == [1.0, 0.0]
    # both: b in t is equal to a in s in every run
    assert per_run_values(Check("c", "s", "a", "differs", 0.8, versus="b",
                                versus_scenario="t"), tables).tolist() == [0.0, 0.0]
    # a column outside the outcomes (self_assessed) changes nothing
    ep2 = episodes({("a", "s"): {**outcomes(), "self_assessed": np.ones((2, 3), bool)},
                    ("b", "s"): {**outcomes(), "self_assessed": np.zeros((2, 3), bool)}})
    assert per_run_values(Check("c", "s", "a", "differs", 0.8, versus="b"),
                          {"episodes": ep2}).tolist() == [0.0, 0.0]


def test_coverage_at_reads_the_episode():
    cov = np.array([[0.0, 0.5, 1.0], [0.25, 0.75, 0.75]])
    ep = episodes({("a", "s"): {"head_coverage": cov}})
    c = Check("c", "s", "a", "coverage_at", minimum=0.8, episode=2)
    assert per_run_values(c, {"episodes": ep}).tolist() == [0.5, 0.75]


def test_drift_met_needs_cover_and_arrivals():
    # 4 runs x 5 episodes; drift on family 1 at episode index 1 unless said otherwise
    family = np.array([[0, 1, 0, 1, 1],      # covered, 3 arrivals of family 1 from the drift
                       [0, 1, 1, 1, 0],      # 3 arrivals but not covered
                       [0, 1, 0, 0, 0],      # covered, only 1 arrival
                       [0, 0, 1, 1, 1]])     # no drift
    drift = np.full((4, 5), -1)
    drift[:3, 1] = 1
    covered = np.zeros((4, 5), bool)
    covered[[0, 2], 1] = True
    ep = episodes({("a", "s"): {"family": family, "drift_family": drift,
                                "drift_covered": covered}})
    c = Check("c", "s", "a", "drift_met", minimum=0.8, min_arrivals=3)
    assert per_run_values(c, {"episodes": ep}).tolist() == [1.0, 0.0, 0.0, 0.0]
    c1 = Check("c", "s", "a", "drift_met", minimum=0.8, min_arrivals=1)
    assert per_run_values(c1, {"episodes": ep}).tolist() == [1.0, 0.0, 1.0, 0.0]


def test_sums_and_the_library_cap():
    ep = episodes({("a", "s"): {
        "poisoned_follows": np.array([[0, 0, 2], [0, 0, 0], [1, 0, 0]]),
        "harmful_proposed": np.array([[0, 0, 0], [0, 3, 0], [0, 0, 0]]),
        "library_size": np.array([[1, 2, 4], [3, 3, 3], [0, 1, 0]])}})
    t = {"episodes": ep}
    assert per_run_values(Check("c", "s", "a", "poisoned_followed", 0.8),
                          t).tolist() == [1.0, 0.0, 1.0]
    assert per_run_values(Check("c", "s", "a", "harmful_proposed", 0.8),
                          t).tolist() == [0.0, 1.0, 0.0]
    assert per_run_values(Check("c", "s", "a", "library_exceeds", 0.8, cap=3),
                          t).tolist() == [1.0, 0.0, 0.0]


def test_a_measure_whose_column_is_not_recorded_has_no_value_and_fails():
    ep = episodes({("a", "s"): outcomes(R=3)})          # no head_coverage column
    c = Check("c", "s", "a", "coverage_at", minimum=0.0, episode=1)
    v = per_run_values(c, {"episodes": ep})
    assert v.shape == (3,) and np.isnan(v).all()


# ============================================================================ a config

def config(**change):
    data = {"name": "cal", "runs": 8, "episodes": 30, "store": "skill",
            "variants": ["no_learning", "skill_loop", "naive_loop", "oracle"],
            "env": ENV, "analysis": {"n_resamples": 200},
            "calibration": {"pilot_seed": 1000, "pilot_runs": 4, "confirmatory_seed": 0,
                            "required": ["base rate"]},
            "checks": [
                {"name": "base rate", "scenario": "clean", "variant": "no_learning",
                 "measure": "late_success", "min": 0.15, "max": 0.35},
                {"name": "too low", "scenario": "clean", "variant": "no_learning",
                 "measure": "late_success", "max": 0.1},
                {"name": "loop acts", "scenario": "clean", "variant": "skill_loop",
                 "measure": "differs", "versus": "no_learning", "min": 0.8}],
            "hypotheses": [
                {"name": "holds", "scenario": "clean", "metric": "late_success",
                 "variant": "skill_loop", "versus": "no_learning", "direction": "greater",
                 "smallest_effect": 0.05},
                {"name": "equivalent", "scenario": "clean", "metric": "final_success",
                 "variant": "naive_loop", "versus": "no_learning", "direction": "greater",
                 "smallest_effect": 0.1},
                {"name": "fails", "scenario": "clean", "metric": "success_rate",
                 "variant": "oracle", "versus": "no_learning", "direction": "greater",
                 "smallest_effect": 0.01},
                {"name": "untestable", "scenario": "clean", "metric": "incidents",
                 "variant": "skill_loop", "versus": "no_learning", "direction": "less",
                 "smallest_effect": 1.0, "checks": ["too low"]}]}
    data.update(change)
    return parse_agent_tasks(data)


def runs_table() -> pl.DataFrame:
    """8 runs of 4 variants in `clean`, built so that each hypothesis of :func:`config`
    meets one verdict."""
    R = 8
    r = np.arange(R)
    alt = np.where(r % 2 == 0, 1.0, -1.0)
    cols = {
        "no_learning": {"late_success": 0.2 + 0.001 * r, "final_success": np.full(R, 0.3),
                        "success_rate": np.full(R, 0.25), "incidents": np.full(R, 10.0)},
        # every run 0.3 above: the sign-flip p is 2^-8, 4 x 2^-8 = 0.0156 after Holm
        "skill_loop": {"late_success": 0.5 + 0.002 * r, "final_success": np.full(R, 0.3),
                       "success_rate": np.full(R, 0.25), "incidents": 5.0 - 0.1 * r},
        # +-0.01 around no learning: mean 0, TOST interval within (-0.1, 0.1)
        "naive_loop": {"late_success": np.full(R, 0.2), "final_success": 0.3 + 0.01 * alt,
                       "success_rate": np.full(R, 0.25), "incidents": np.full(R, 10.0)},
        # -0.3 / +0.2 around no learning: mean -0.05, far too wide to be equivalent
        "oracle": {"late_success": np.full(R, 0.9), "final_success": np.full(R, 0.9),
                   "success_rate": 0.25 + np.where(alt > 0, -0.3, 0.2),
                   "incidents": np.full(R, 10.0)},
    }
    return pl.concat([pl.DataFrame({"variant": [v] * R, "scenario": ["clean"] * R,
                                    "run": r, **c}) for v, c in cols.items()])


def test_the_verdicts_of_a_calibrated_family():
    cfg = config()
    tables = {"runs": runs_table(),
              "episodes": episodes({("skill_loop", "clean"): outcomes(R=8, E=2),
                                    ("no_learning", "clean"): outcomes(
                                        R=8, E=2, steps=np.full((8, 2), 3))})}
    checked = check_results(cfg, tables)
    # base rate: mean of 0.200 .. 0.207 = 0.2035, within [0.15, 0.35]; too low: not <= 0.1;
    # loop acts: every run's steps differ
    assert [(c.name, round(c.value, 6), c.passed) for c in checked] == [
        ("base rate", 0.2035, True), ("too low", 0.2035, False), ("loop acts", 1.0, True)]
    results = evaluate_hypotheses(cfg, tables["runs"])
    assert [r.verdict for r in results] == ["holds", "does not hold", "does not hold",
                                            "holds"]
    assert results[0].p == pytest.approx(2.0 ** -8)
    calibrated = calibrated_hypotheses(cfg, tables, results, checked)
    assert [r.verdict for r in calibrated] == ["holds", NO_EFFECT, "does not hold",
                                               NOT_TESTABLE]
    # the p values stay as tested; the failing check is named
    assert [r.p_holm for r in calibrated] == [r.p_holm for r in results]
    assert calibrated[3].notes[-1] == "checks failing: too low"
    # a required check that fails makes every hypothesis not testable
    low = runs_table().with_columns(
        pl.when(pl.col("variant") == "no_learning").then(0.05).otherwise(
            pl.col("late_success")).alias("late_success"))
    tables["runs"] = low
    again = calibrated_hypotheses(cfg, tables, evaluate_hypotheses(cfg, low),
                                  check_results(cfg, tables))
    assert {r.verdict for r in again} == {NOT_TESTABLE}


def test_differences_and_the_pairs_a_pilot_runs():
    cfg = config()
    runs = runs_table()
    label, d = hypothesis_differences(cfg, runs, cfg.hypotheses[1])[0]
    assert label == "naive_loop - no_learning, final_success in clean"
    np.testing.assert_allclose(d, 0.01 * np.array([1, -1] * 4))
    contrasts, alpha = sizing_contrasts(cfg, {"runs": runs})
    assert [c.hypothesis for c in contrasts] == ["holds", "equivalent", "fails",
                                                 "untestable"]
    assert alpha == 0.05 and contrasts[3].smallest_effect == 1.0
    # variants 0 no_learning, 1 skill_loop, 2 naive_loop, 3 oracle; one scenario
    assert pilot_pairs(cfg) == {(0, 0), (1, 0), (2, 0), (3, 0)}
    small = config(hypotheses=[], variants=["no_learning", "skill_loop", "naive_loop"])
    assert pilot_pairs(small) == {(0, 0), (1, 0)}


def test_a_slope_hypothesis_differences_are_per_run_slopes():
    cfg = config(
        variants=["no_learning", "skill_loop"],
        sweeps=[{"name": "ff", "knob": "false_success_rate", "values": [0.0, 0.25, 0.5],
                 "metric": "late_success", "better": "greater"}],
        checks=[{"name": "base rate", "scenario": "ff-0.0", "variant": "no_learning",
                 "measure": "late_success", "min": 0.0}],
        hypotheses=[{"name": "grows", "test": "slope", "sweep": "ff",
                     "metric": "late_success", "variant": "skill_loop",
                     "versus": "no_learning", "direction": "greater",
                     "smallest_effect": 0.1}])
    # gap per point: run 0: 0, 0.1, 0.2 (slope 0.4 per unit of the knob); run 1: 0.3 at
    # every point (slope exactly 0)
    rows = []
    for i, sc in enumerate(("ff-0.0", "ff-0.25", "ff-0.5")):
        rows += [("no_learning", sc, 0, 0.2), ("no_learning", sc, 1, 0.2),
                 ("skill_loop", sc, 0, 0.2 + 0.1 * i), ("skill_loop", sc, 1, 0.5)]
    runs = pl.DataFrame(rows, schema=["variant", "scenario", "run", "late_success"],
                        orient="row")
    label, d = hypothesis_differences(cfg, runs, cfg.hypotheses[0])[0]
    assert label == "skill_loop - no_learning, late_success, slope over ff"
    assert d[0] == pytest.approx(0.4) and d[1] == 0.0
    assert pilot_pairs(cfg) == {(v, p) for v in (0, 1) for p in (0, 1, 2)}
