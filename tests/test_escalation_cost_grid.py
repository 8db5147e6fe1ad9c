"""The escalation kind's cost-setting grid (``costs.p_star``) and the type-oracle AURC:
settings, costs and thresholds per grid value, the per-setting report section,
and the plots."""

import json

import numpy as np
import polars as pl
import pytest

from dyna.errors import ConfigError
from dyna.escalation import MeanThreshold
from dyna.experiment.kinds.escalation.config import CostSetting, build_policy, class_costs
from dyna.experiment.kinds.escalation.metrics import optimal_aurc, risk_coverage
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import run_experiment


def raw(**changes):
    data = {
        "kind": "escalation", "name": "grid_esc", "seed": 3, "runs": 3,
        "risk_classes": ["low_stakes"], "feedback": ["censored", "full"],
        "costs": {"c_escalate": 1.0, "p_star": [0.5, 0.95]},
        "scenarios": [{"name": "flat", "rates": [0.3, 0.6], "steps": 200}],
        "variants": [{"name": "never", "rule": "never"},
                     {"name": "always", "rule": "always"},
                     {"name": "mean", "rule": "mean"},
                     {"name": "mean_fixed", "rule": "mean", "p_star": 0.7}],
        "analysis": {"checkpoints": 5, "n_resamples": 200, "svg": False},
    }
    data.update(changes)
    return data


def test_settings_costs_and_thresholds():
    cfg = parse_experiment(raw())
    assert cfg.settings() == [CostSetting("p*=0.5", "low_stakes", 0.5),
                              CostSetting("p*=0.95", "low_stakes", 0.95)]
    assert [(v.name, st.name) for v, st in cfg.groups()][:3] == [
        ("never", "p*=0.5"), ("never", "p*=0.95"), ("always", "p*=0.5")]
    # c_failure = c_escalate / (1 - p*): 2 at 0.5, 20 at 0.95
    assert class_costs(cfg.costs, cfg.settings()[0]) == (1.0, 2.0, 0.0)
    assert class_costs(cfg.costs, cfg.settings()[1])[1] == pytest.approx(20.0)
    mean, fixed = cfg.variants[2], cfg.variants[3]
    pol = build_policy(cfg, mean, cfg.settings()[1])
    assert isinstance(pol, MeanThreshold) and pol.p_star == 0.95
    assert build_policy(cfg, fixed, cfg.settings()[1]).p_star == 0.7  # the variant's own
    # a risk class name still means the class's preset setting
    assert build_policy(cfg, mean, "high_stakes").p_star == 0.95
    # two classes: names carry the class
    two = parse_experiment(raw(risk_classes=["low_stakes", "elevated"]))
    assert [s.name for s in two.settings()] == ["low_stakes p*=0.5", "low_stakes p*=0.95",
                                               "elevated p*=0.5", "elevated p*=0.95"]
    # without a grid: one setting per class at its preset, and the grid stays out of the hash
    plain = raw()
    plain["costs"] = {"c_escalate": 1.0}
    cfg0 = parse_experiment(plain)
    assert cfg0.settings() == [CostSetting("low_stakes", "low_stakes", 0.8)]
    assert "p_star" not in cfg0.to_dict()["costs"]
    assert cfg.to_dict()["costs"]["p_star"] == [0.5, 0.95]
    assert parse_experiment({"kind": "escalation", **cfg.to_dict()}).hash == cfg.hash


@pytest.mark.parametrize("grid, field, words", [
    ([0.5, 1.0], "costs.p_star[1]", "1.0"),
    ([0.0], "costs.p_star[0]", "0.0"),
    ([0.6, 0.5], "costs.p_star", "strictly increasing"),
    ([0.5, 0.5], "costs.p_star", "strictly increasing"),
    ([], "costs.p_star", "non-empty"),
    ("0.5", "costs.p_star", "non-empty"),
])
def test_bad_grids_named(grid, field, words):
    data = raw()
    data["costs"] = {"c_escalate": 1.0, "p_star": grid}
    with pytest.raises(ConfigError) as exc:
        parse_experiment(data)
    assert exc.value.field == field
    assert words in str(exc.value)


def test_grid_with_fixed_failure_cost_refused():
    data = raw()
    data["costs"] = {"c_escalate": 1.0, "c_failure": 5.0, "p_star": [0.5]}
    with pytest.raises(ConfigError) as exc:
        parse_experiment(data)
    assert exc.value.field == "costs.c_failure" and "costs.p_star" in str(exc.value)


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grid") / "out"
    run_experiment(parse_experiment(raw(analysis={"checkpoints": 5, "n_resamples": 200,
                                                  "svg": False})), folder, block_size=3)
    return folder


def test_tables_report_and_plot(output):
    runs = pl.read_parquet(output / "runs.parquet")
    assert runs.height == 4 * 2 * 2 * 3      # variants x settings x feedback x runs
    assert runs.filter(pl.col("cost_setting") == "p*=0.95")["p_star"].unique().to_list() \
        == [0.95]
    always = runs.filter(pl.col("variant") == "always")
    # at p* = 0.95 the type oracle escalates both types (0.3, 0.6 < 0.95): always-escalate
    # pays exactly what the oracle pays
    assert (always.filter(pl.col("p_star") == 0.95)["regret_type"] == 0.0).all()
    # at p* = 0.5 it gives away (1 - 2 * 0.4) = 0.2 per task of the 0.6 type in expectation
    assert (always.filter(pl.col("p_star") == 0.5)["regret_type"] > 0).all()
    # the type oracle's score is each task's true rate: with rates 0 and 1 it separates
    # successes from failures perfectly (below), and here it is never worse than random
    assert (runs["aurc_type_oracle"] <= runs["agent_failure_rate"] + 1e-12).all()
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["risk_class_costs"]["p*=0.95"]["c_failure"] == pytest.approx(20.0)
    text = (output / "report.md").read_text()
    assert "## Lowest regret per cost setting" in text
    assert "\"Always escalate\" wins (is tied) best at: p*=0.95." in text
    head = text.split("## Headline")[1].split("##")[0]
    assert "4 policies x 2 cost settings (p* 0.5 to 0.95) x 2 scenario/feedback settings x 3 " \
        "runs; cost against p*: `plots/cost_grid_flat.png`." in head
    assert "AURC of the type oracle" in text
    assert sorted(p.name for p in (output / "plots").glob("cost_grid_*")) == \
        ["cost_grid_flat.png"]


def test_type_oracle_aurc_is_optimal_when_types_separate(tmp_path):
    data = raw(scenarios=[{"name": "split", "rates": [0.0, 1.0], "steps": 60}],
               variants=[{"name": "mean", "rule": "mean"}], runs=2, feedback=["full"])
    run_experiment(parse_experiment(data), tmp_path / "o", block_size=2)
    runs = pl.read_parquet(tmp_path / "o" / "runs.parquet")
    np.testing.assert_allclose(runs["aurc_type_oracle"], runs["aurc_optimal"], atol=1e-12)
    assert (runs["aurc_optimal"] < runs["agent_failure_rate"]).all()


def test_risk_coverage_of_a_constant_score_is_the_failure_rate():
    # the random-score baseline the report prints beside the type oracle: 2 failures in 5
    losses = np.array([1.0, 0.0, 0.0, 1.0, 0.0])
    _, risk = risk_coverage(np.zeros(5), losses)
    assert risk.mean() == pytest.approx(0.4)
    # the perfect score: (1/5) * ((4-3)/4 + (5-3)/5) = 0.13
    assert optimal_aurc(losses) == pytest.approx((1 / 4 + 2 / 5) / 5)


def test_a_folder_from_before_cost_settings_still_plots_and_reports(output, tmp_path):
    import dataclasses

    from dyna.experiment.kinds.escalation.kind import KIND
    from dyna.experiment.runner import load_output

    out = load_output(output)
    new_cols = ("cost_setting", "p_star", "aurc_type_oracle")
    # the tables as an older version wrote them: one risk class, none of the new columns
    old = {k: t.filter(pl.col("cost_setting") == "p*=0.5")
           .drop([c for c in new_cols if c in t.columns]) for k, t in out.tables.items()
           if k != "switches"}
    plain = raw(analysis={"checkpoints": 5, "n_resamples": 200, "svg": False})
    plain["costs"] = {"c_escalate": 1.0}
    past = dataclasses.replace(out, config=parse_experiment(plain), tables=old)
    (tmp_path / "plots").mkdir()
    assert KIND.draw_plots(past, tmp_path)
    text = KIND.write_report(past, tmp_path).read_text()
    assert "| low_stakes | 0.8 |" in text          # the class's preset p*, filled in
    cost = text.split("## Cost per policy and cost setting")[1].split("\n## ")[0]
    know = cost.split("How well its competence estimates rank the tasks:")[1]
    row = next(line for line in know.splitlines() if line.startswith("| always | low_stakes"))
    assert row.split(" | ")[3] == "-"              # no type-oracle AURC was measured then


def _fake_output(regret):
    """An output of raw()'s config (one cost setting, censored feedback) whose runs table
    is hand-made: 2 systems x 4 runs of 100 tasks, ``regret[variant](system, run)`` the
    regret per task of each row."""
    from types import SimpleNamespace

    cfg = parse_experiment(raw(feedback=["censored"], costs={"c_escalate": 1.0,
                                                             "p_star": [0.5]}))
    rows = []
    for v in cfg.variants:
        for system in ("A", "B"):
            for run in range(4):
                r = regret[v.name](system, run)
                rows.append({"variant": v.name, "rule": v.rule, "risk_class": "low_stakes",
                             "cost_setting": "p*=0.5", "scenario": "flat", "system": system,
                             "feedback": "censored", "p_star": 0.5, "run": run, "steps": 100,
                             "total_cost": 100.0 * (1 + r), "regret_type": 100.0 * r,
                             "regret_task": 0.0, "escalation_rate": 0.5, "failure_rate": 0.1,
                             "aurc": 0.3, "aurc_type_oracle": 0.2, "final_abs_error": 0.1})
    return SimpleNamespace(config=cfg, tables={"runs": pl.DataFrame(rows)}, manifest={})


def test_pooled_intervals_are_over_runs_not_system_run_rows():
    from dyna.experiment.kinds.escalation import report

    # "always" pays 1.0 per task more than the oracle on system A and 3.0 on B in every run
    # (its cost does not depend on the task order); "mean" is 0.5 per task better in every
    # run; "never" and "mean_fixed" are worse by varying amounts
    out = _fake_output({"always": lambda s, r: 1.0 if s == "A" else 3.0,
                        "mean": lambda s, r: (0.5 if s == "A" else 2.5) + 0.01 * r,
                        "never": lambda s, r: 5.0 + r, "mean_fixed": lambda s, r: 4.0 + r})
    np.testing.assert_allclose(report._run_means(out.tables["runs"].filter(
        pl.col("variant") == "mean"), "regret_type"), [1.5, 1.51, 1.52, 1.53])
    text = "\n".join(report._cost_tables(out))
    # the 8 (system, run) rows of "always" are 2 values repeated: over runs, each run's
    # mean over systems is 2.0, so the interval has no width (it had [1.0, 3.0]-ish width
    # when the rows were resampled as independent runs)
    row = next(line for line in text.splitlines() if line.startswith("| always |"))
    assert row.split(" | ")[3] == "2 [2, 2]"
    section = "\n".join(report._per_setting(out))
    # lowest: mean (1.515); runner-up: always (2.0); the paired gap is 0.5 - 0.01 r per run
    row = next(line for line in section.splitlines() if line.startswith("| p*=0.5 |"))
    cells = row.split(" | ")
    assert cells[2] == "`mean`" and cells[4] == "`always` (2)"
    assert cells[5].startswith("0.485 [") and "min_episodes > 0" in section
    # every run's gap is positive
    assert report._winners_detail(out)[2].endswith("reaches 0) in: none.")


def test_headline_names_settings_whose_winner_is_not_separated():
    from dyna.experiment.kinds.escalation import report

    # "mean" beats "always" by +-0.2 per task, alternating over runs: a mean gap of 0
    out = _fake_output({"always": lambda s, r: 1.0,
                        "mean": lambda s, r: 1.0 + (0.2 if r % 2 else -0.2) - 1e-3,
                        "never": lambda s, r: 5.0, "mean_fixed": lambda s, r: 4.0})
    detail = report._winners_detail(out)
    assert detail[2] == ("- The lowest regret is not separated from the runner-up's (paired 95% "
                         "interval of the gap reaches 0) in: flat/censored/p*=0.5.")
    assert "not separated" not in "\n".join(report._headline(out))


def test_setup_says_the_type_oracle_sees_each_tasks_api_cost():
    from types import SimpleNamespace

    from dyna.experiment.kinds.escalation import report

    replay = parse_experiment(raw(
        scenarios=[{"name": "swe", "source": "replay",
                    "data": "data/swebench_verified_bash_only.csv"}],
        costs={"c_escalate": 10.0, "act_cost": "cost_usd", "p_star": [0.5]}))
    text = "\n".join(report._setup(SimpleNamespace(config=replay, manifest={}, tables={})))
    assert "with that task's own logged cost" in text and "only the level of the regret" in text
    # the logged USD cost is added unscaled, so every cost is in US dollars
    assert "Costs are in USD per task" in text
    plain = "\n".join(report._setup(SimpleNamespace(config=parse_experiment(raw()),
                                                    manifest={}, tables={})))
    assert "type-level oracle" not in plain and "Costs are in cost units per task" in plain
