"""Severity sweeps of the agent-tasks kind: parsing, the slope test, the crossover map."""

import numpy as np
import polars as pl
import pytest

from dyna.errors import ConfigError
from dyna.experiment.kinds.agent_tasks.analysis import (compare_slope, crossover_map,
                                                       evaluate_hypotheses)
from dyna.experiment.kinds.agent_tasks.config import parse_agent_tasks
from dyna.experiment.kinds.agent_tasks.metrics import _drift_calls, run_summaries

BASE = {"name": "sw", "runs": 6, "episodes": 10, "store": "skill",
        "variants": ["no_learning", "naive_loop", "naive_loop+outcome_gate", "skill_loop",
                     "skill_loop-no_outcome_gate"],
        "env": {"n_families": 3}}
SWEEP = {"name": "lff", "knob": "false_success_rate", "values": [0.0, 0.1, 0.25, 0.5],
         "metric": "late_success", "better": "greater", "safeguards": ["outcome_gate"]}


def _cfg(**extra):
    return parse_agent_tasks({**BASE, "sweeps": [SWEEP], **extra})


def test_a_sweep_expands_into_one_scenario_per_grid_point():
    cfg = _cfg()
    assert [n for n, _ in cfg.scenarios] == ["lff-0.0", "lff-0.1", "lff-0.25", "lff-0.5"]
    assert cfg.env_kwargs(2) == {"n_families": 3, "false_success_rate": 0.25}
    assert cfg.sweeps[0].ordered and cfg.to_dict()["sweeps"][0]["values"] == SWEEP["values"]
    cat = parse_agent_tasks({**BASE, "sweeps": [{
        "name": "drift", "knob": "drift_kind", "values": ["value", "tool", "rename"],
        "env": {"drift_at": [5]}, "metric": "drift_calls_per_success", "better": "less"}]})
    assert not cat.sweeps[0].ordered
    assert cat.env_kwargs(2) == {"n_families": 3, "drift_at": [5], "drift_kind": "rename"}


@pytest.mark.parametrize("sweep,field", [
    ({**SWEEP, "values": [0.0]}, "sweeps[0].values"),
    ({**SWEEP, "knob": "nonsense"}, "sweeps[0].values[0]"),
    ({**SWEEP, "values": [0.0, 2.0]}, "sweeps[0].values[1].false_success_rate"),
    ({**SWEEP, "better": "up"}, "sweeps[0].better"),
    ({**SWEEP, "safeguards": ["moat"]}, "sweeps[0].safeguards[0]"),
    ({**SWEEP, "metric": "vibes"}, "sweeps[0].metric"),
    ({**SWEEP, "env": {"false_success_rate": 0.1}}, "sweeps[0].env.false_success_rate"),
])
def test_bad_sweeps_name_their_field(sweep, field):
    with pytest.raises(ConfigError) as e:
        parse_agent_tasks({**BASE, "sweeps": [sweep]})
    assert e.value.field == field


def test_slope_hypotheses_need_an_ordered_sweep():
    h = {"name": "gap grows", "test": "slope", "sweep": "lff", "metric": "late_success",
         "variant": "skill_loop", "versus": "skill_loop-no_outcome_gate",
         "direction": "greater"}
    cfg = _cfg(hypotheses=[h])
    assert (cfg.hypotheses[0].test, cfg.hypotheses[0].sweep) == ("slope", "lff")
    with pytest.raises(ConfigError) as e:
        _cfg(hypotheses=[{**h, "scenario": "lff-0.5"}])
    assert e.value.field == "hypotheses[0].scenario"
    with pytest.raises(ConfigError) as e:
        parse_agent_tasks({**BASE, "sweeps": [{**SWEEP, "values": [0.0, 0.5]}],
                           "hypotheses": [h]})
    assert e.value.field == "hypotheses[0].sweep"


def _runs(cfg, table):
    """A runs table from ``table[(scenario, variant)] = per-run values``."""
    rows = []
    for (sc, var), vals in table.items():
        for r, x in enumerate(vals):
            rows.append({"scenario": sc, "variant": var, "run": r, "late_success": float(x),
                         "acted_outcome_gate": 1})
    return pl.DataFrame(rows)


def test_the_slope_test_on_a_gap_that_grows_by_exactly_2_per_unit():
    cfg = _cfg()
    sweep = cfg.sweeps[0]
    rng = np.random.default_rng(0)
    table = {}
    noise = rng.normal(size=6)
    for sc, s in sweep.points():
        y = rng.uniform(size=6)
        table[(sc, "skill_loop-no_outcome_gate")] = y
        table[(sc, "skill_loop")] = y + noise + 2.0 * s      # gap = noise_r + 2 s
    runs = _runs(cfg, table)
    c = compare_slope(runs, sweep, "skill_loop", "skill_loop-no_outcome_gate",
                      "late_success", direction="greater", n_resamples=200)
    assert c.status == "tested" and c.n == 6
    assert float(c.interval.estimate) == pytest.approx(2.0, abs=1e-12)
    assert c.p == pytest.approx(2.0 ** -6)             # every run's slope is positive
    flat = compare_slope(runs, sweep, "skill_loop-no_outcome_gate",
                         "skill_loop-no_outcome_gate", "late_success", n_resamples=200)
    assert flat.status == "no difference"


def test_evaluate_hypotheses_runs_slope_and_sign_tests_under_holm():
    hs = [{"name": "gap grows", "test": "slope", "sweep": "lff", "metric": "late_success",
           "variant": "skill_loop", "versus": "skill_loop-no_outcome_gate",
           "direction": "greater"},
          {"name": "full beats ablated at 0.5", "scenario": "lff-0.5",
           "metric": "late_success", "variant": "skill_loop",
           "versus": "skill_loop-no_outcome_gate", "direction": "greater"}]
    cfg = _cfg(hypotheses=hs, analysis={"n_resamples": 200})
    table = {}
    for sc, s in cfg.sweeps[0].points():
        table[(sc, "skill_loop-no_outcome_gate")] = np.full(6, 0.5)
        table[(sc, "skill_loop")] = 0.5 + s * np.arange(1, 7)
    res = evaluate_hypotheses(cfg, _runs(cfg, table))
    assert [r.verdict for r in res] == ["holds", "holds"]
    assert [r.p for r in res] == [2.0 ** -6, 2.0 ** -6]
    assert [r.p_holm for r in res] == [2 * 2.0 ** -6, 2 * 2.0 ** -6]


def test_the_crossover_map_finds_the_first_worse_point_and_the_restoring_safeguard():
    cfg = _cfg(analysis={"n_resamples": 500}, variants=BASE["variants"] + ["oracle"])
    pts = cfg.sweeps[0].points()
    gaps = {0.0: 0.10, 0.1: -0.005, 0.25: -0.20, 0.5: -0.30}
    wobble = 0.03 * np.array([1, -1, 1, -1, 1, -1])   # mean 0: the gap is each mean
    rng = np.random.default_rng(1)
    table = {}
    for sc, s in pts:
        none = rng.uniform(0.3, 0.6, size=6)
        table[(sc, "no_learning")] = none
        table[(sc, "oracle")] = none + 0.08   # the gate's 0.05 is over half of it
        table[(sc, "naive_loop")] = none + gaps[s] + wobble
        table[(sc, "naive_loop+outcome_gate")] = none + 0.05 + rng.normal(0, 0.01, size=6)
        table[(sc, "skill_loop")] = none
        table[(sc, "skill_loop-no_outcome_gate")] = none
    (cx,) = crossover_map(cfg, _runs(cfg, table))
    assert (cx.sweep, cx.metric, cx.estimate_at, cx.at) == ("lff", "late_success", 0.1, 0.25)
    assert [g for g, _ in cx.restores] == ["outcome_gate"]
    assert float(cx.restores[0][1].estimate) == pytest.approx(0.05, abs=0.02)


def test_the_v2_metrics_by_hand():
    E = 10
    succ = np.array([[0, 1, 0, 1, 1, 1, 0, 1, 1, 1]], dtype=bool)
    arrays = {"success": succ, "tokens": np.full((1, E), 100),
              "learning_tokens": np.full((1, E), 10), "incident": np.zeros((1, E), bool),
              "escalated": np.zeros((1, E), bool), "poisoned": np.zeros((1, E), int),
              "stale": np.zeros((1, E), int), "library_size": np.zeros((1, E), int),
              "family": np.array([[0, 1, 0, 0, 1, 0, 0, 0, 1, 0]]),
              "drift_family": np.array([[-1, -1, 0, -1, -1, -1, -1, -1, -1, -1]]),
              "steps": np.array([[3, 3, 7, 5, 3, 4, 9, 3, 3, 3]])}
    arrays["incident"][0, [2, 5]] = True
    out = run_summaries(arrays, {"final_window": 5, "recovery_window": 2,
                                 "recovery_points": 0.05, "late_from": 6,
                                 "tokens_window": 4, "drift_episodes": 3})
    assert out["late_success"][0] == pytest.approx(4 / 5)       # episodes 6..10
    assert out["late_tokens_per_success"][0] == pytest.approx(4 * 110 / 3)
    assert out["incidents_per_1000"][0] == pytest.approx(200.0)
    # family 0 from episode index 2: indices 2, 3, 5 -> calls 7 + 5 + 4, successes 0 + 1 + 1
    assert out["drift_calls_per_success"][0] == pytest.approx(16 / 2)
    # censored: no success after the drift counts as one success
    assert _drift_calls(np.zeros(4, bool), np.array([2, 2, 2, 2]), np.zeros(4, int),
                        np.array([0, -1, -1, -1]), 3) == 6.0
    assert np.isnan(_drift_calls(np.zeros(4, bool), np.ones(4, int), np.zeros(4, int),
                                 np.full(4, -1), 3))


def test_a_sweep_experiment_end_to_end_has_its_crossover_map_and_figure(tmp_path):
    from dyna.experiment.backends import InProcessBackend
    from dyna.experiment.registry import parse_experiment
    from dyna.experiment.runner import load_output, run_experiment

    cfg = parse_experiment({
        "kind": "agent_tasks", "name": "sweep_e2e", "runs": 2, "episodes": 30,
        "store": "skill", "variants": ["no_learning", "naive_loop",
                                       "naive_loop+outcome_gate", "skill_loop"],
        "env": {"n_families": 3, "step_slack": 4},
        "sweeps": [{"name": "lff", "knob": "false_success_rate", "values": [0.0, 0.25, 0.5],
                    "metric": "late_success", "better": "greater",
                    "safeguards": ["outcome_gate"]}],
        "analysis": {"late_from": 16, "tokens_window": 10, "final_window": 10,
                     "n_resamples": 200},
        "hypotheses": [{"name": "gap grows", "test": "slope", "sweep": "lff",
                        "metric": "late_success", "variant": "skill_loop",
                        "versus": "naive_loop", "direction": "greater"}]})
    out = run_experiment(cfg, tmp_path / "a", backend=InProcessBackend(), progress=False)
    res = load_output(out)
    assert sorted(res.tables["runs"]["scenario"].unique()) == ["lff-0.0", "lff-0.25",
                                                               "lff-0.5"]
    report = (out / "report.md").read_text()
    assert report.index("## Crossover map") < report.index("## Primary hypotheses")
    assert "| `lff` | `false_success_rate` | late_success (greater is better) |" in report
    assert "(plots/crossover.png)" in report and (out / "plots" / "crossover.png").exists()
    assert "| gap grows | **not tested** |" in report        # 2 runs: no claims


@pytest.mark.parametrize("store", ["skill", "memory"])
def test_the_v2_sweeps_are_the_preregistered_ones(store):
    from dyna.experiment.registry import load_experiment
    from envs.agent_tasks import V1_BASE

    cfg = load_experiment(f"experiments/agent_tasks_v2_{store}.toml")
    assert (cfg.runs, cfg.episodes) == (20, 1000)
    assert {k: cfg.env[k] for k in V1_BASE} == V1_BASE
    grids = {sw.name: (sw.knob, sw.values, sw.metric) for sw in cfg.sweeps}
    assert grids == {
        "learning_from_failure": ("false_success_rate", (0.0, 0.1, 0.25, 0.5),
                                  "late_success"),
        "drift": ("drift_kind", ("value", "tool", "rename", "procedure"),
                  "drift_calls_per_success"),
        "drift_late": ("drift_kind", ("value", "tool", "rename", "procedure"),
                       "drift_calls_per_success"),
        "volume": ("shared_trigger_fraction", (0.0, 0.25, 0.5), "late_tokens_per_success"),
        "injection": ("planted_follow_rate", (0.0, 0.1, 0.5), "incidents_per_1000"),
        "wrong_guidance": ("step_slack", (13, 4, 2, 1), "late_success")}
    assert cfg.env_kwargs([n for n, _ in cfg.scenarios].index("injection-0.5"))[
        "injection_rate"] == 0.05
    assert (cfg.analysis["late_from"], cfg.analysis["tokens_window"],
            cfg.analysis["drift_episodes"]) == (501, 200, 50)
    assert (cfg.policy["misattribution"], cfg.policy["oracle_follows_always"]) == (0.5, False)
    assert len(cfg.hypotheses) == 20
    assert sum(h.test == "slope" for h in cfg.hypotheses) == 4
    # as pre-registered in e4a9ab4 (two later changes were put back)
    lff = [h for h in cfg.hypotheses if h.name.startswith("learning from failure: at 0.5 the o")
           or h.test == "slope" and h.sweep == "learning_from_failure"]
    assert len(lff) == 2 and all(h.versus == (f"{store}_loop-no_outcome_gate",) for h in lff)
    assert {k: cfg.env[k] for k in ("n_tools", "n_values", "length", "untrusted_tools")} == \
        {"n_tools": 8, "n_values": 4, "length": 3, "untrusted_tools": 2}


def test_a_slope_runs_with_severity_also_on_a_decreasing_grid():
    h = {"name": "g", "test": "slope", "sweep": "slack", "metric": "late_success",
         "variant": "skill_loop", "versus": "no_learning", "direction": "less"}
    sw = {"name": "slack", "knob": "step_slack", "values": [13, 4, 2, 1],
          "metric": "late_success", "better": "greater"}
    cfg = parse_agent_tasks({**BASE, "sweeps": [sw], "hypotheses": [h]})
    assert cfg.sweeps[0].direction == -1 and cfg.sweeps[0].severity() == [-13, -4, -2, -1]
    table = {}
    for sc, v in cfg.sweeps[0].points():
        table[(sc, "no_learning")] = np.full(6, 0.5)
        table[(sc, "skill_loop")] = 0.5 + 0.01 * v * np.arange(1, 7)  # gap shrinks as slack falls
    c = compare_slope(_runs(cfg, table), cfg.sweeps[0], "skill_loop", "no_learning",
                      "late_success", direction="less", n_resamples=200)
    assert float(c.interval.estimate) < 0 and c.p == pytest.approx(2.0 ** -6)
    with pytest.raises(ConfigError) as e:
        parse_agent_tasks({**BASE, "sweeps": [{**sw, "values": [1, 4, 2]}],
                           "hypotheses": [h]})
    assert e.value.field == "hypotheses[0].sweep"


def test_a_knob_that_changes_no_value_is_an_inert_knob_not_a_failed_hypothesis():
    # The v2 skill sweep's case: neither skill_loop nor skill_loop-no_outcome_gate reads the
    # self-assessment, so with common random numbers every run has the same value at every
    # false success rate; d @ xc then left a slope of ~1e-17 that was reported as
    # "does not hold". It is inert, and the verdict says so.
    h = {"name": "gap grows", "test": "slope", "sweep": "lff", "metric": "late_success",
         "variant": "skill_loop", "versus": "skill_loop-no_outcome_gate",
         "direction": "greater"}
    cfg = _cfg(hypotheses=[h], analysis={"n_resamples": 200})
    rng = np.random.default_rng(3)
    full, ablated = rng.uniform(size=6) / 3.0, rng.uniform(size=6) / 7.0  # not dyadic
    table = {}
    for sc, _ in cfg.sweeps[0].points():
        table[(sc, "skill_loop")] = full.copy()
        table[(sc, "skill_loop-no_outcome_gate")] = ablated.copy()
    runs = _runs(cfg, table)
    c = compare_slope(runs, cfg.sweeps[0], "skill_loop", "skill_loop-no_outcome_gate",
                      "late_success", direction="greater", n_resamples=200)
    assert (c.status, c.n, c.interval) == ("inert knob", 6, None)
    (r,) = evaluate_hypotheses(cfg, runs)
    assert r.verdict == "inert"
    # the knob moves both variants by the same amount in each run: it acted, but the gap
    # is the same at every point (exactly: dyadic values), so every slope is exactly 0
    a, b = np.arange(6) / 8.0, np.arange(6)[::-1] / 16.0
    for i, (sc, _) in enumerate(cfg.sweeps[0].points()):
        table[(sc, "skill_loop")] = a + i
        table[(sc, "skill_loop-no_outcome_gate")] = b + i
    c2 = compare_slope(_runs(cfg, table), cfg.sweeps[0], "skill_loop",
                       "skill_loop-no_outcome_gate", "late_success", direction="greater",
                       n_resamples=200)
    assert c2.status == "no difference" and float(c2.interval.estimate) == 0.0
