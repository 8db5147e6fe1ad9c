"""The ``escalation`` experiment kind end to end: config, runner, tables, report."""

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dyna.competence import prior_shapes
from dyna.errors import ConfigError
from dyna.escalation import MeanThreshold, run_policies
from dyna.experiment.backends import ProcessPoolBackend
from dyna.experiment.kinds.escalation.config import EscalationConfig, build_policy, class_costs
from dyna.experiment.kinds.escalation.job import _stream
from dyna.experiment.registry import load_experiment, parse_experiment
from dyna.experiment.runner import load_output, run_experiment
from conftest import tables_only

REPO = Path(__file__).resolve().parents[1]
SYSTEM = "20250807_mini-v1.7.0_gpt-5-mini"


def raw(**changes):
    data = {
        "kind": "escalation", "name": "tiny_esc", "seed": 7, "runs": 3,
        "risk_classes": ["low_stakes", "high_stakes"], "feedback": ["censored", "full"],
        "costs": {"c_escalate": 1.0},
        "scenarios": [
            {"name": "flat", "rates": [0.3, 0.9, 0.99], "steps": 150, "verified_prob": 0.5},
            {"name": "jump", "rates": [0.3, 0.99], "steps": 150, "change_at": [75],
             "rates_after": [[0.99, 0.3]]},
            {"name": "swe", "source": "replay", "data": "data/swebench_verified_bash_only.csv",
             "systems": [SYSTEM]},
        ],
        "variants": [{"name": "mean", "rule": "mean"},
                     {"name": "ts", "rule": "thompson"},
                     {"name": "ts_d", "rule": "thompson", "discount": 0.9}],
        "analysis": {"checkpoints": 10, "recovery_window": 20, "n_resamples": 200,
                     "svg": False},
    }
    data.update(changes)
    return data


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    folder = tmp_path_factory.mktemp("esc") / "out"
    run_experiment(parse_experiment(raw()), folder, block_size=2)
    return folder


def test_output_folder_and_tables(output):
    names = sorted(p.name for p in output.iterdir())
    assert names == ["agreement.parquet", "competence.parquet", "curves.parquet",
                     "manifest.json", "plots", "report.md", "risk_coverage.parquet",
                     "runs.parquet", "switches.parquet"]
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["kind"] == "escalation" and manifest["config"]["kind"] == "escalation"
    assert manifest["data"]["swe"]["sha256"].startswith("cc248b2374")
    assert manifest["risk_class_costs"]["high_stakes"]["c_failure"] == pytest.approx(20.0)
    runs = pl.read_parquet(output / "runs.parquet")
    # 3 variants x 2 classes x (flat, jump, swe) x 2 feedback x 3 runs
    assert runs.height == 3 * 2 * 3 * 2 * 3
    assert runs.select("variant", "risk_class", "scenario", "feedback", "run").rows()[:4] == [
        ("mean", "low_stakes", "flat", "censored", 0),
        ("mean", "low_stakes", "flat", "censored", 1),
        ("mean", "low_stakes", "flat", "censored", 2), ("mean", "low_stakes", "flat", "full", 0)]
    assert (runs["steps"].to_numpy() == np.where(runs["scenario"] == "swe", 500, 150)).all()
    np.testing.assert_allclose(runs["regret_type"], runs["total_cost"] - runs["oracle_type_cost"])
    assert (runs["oracle_task_cost"] <= runs["oracle_type_cost"] + 1e-9).all()
    # the censoring trap, in numbers
    trap = runs.filter((pl.col("variant") == "mean") & (pl.col("scenario") == "flat"))
    assert (trap.filter(pl.col("feedback") == "censored")["escalation_rate"] == 1.0).all()
    assert (trap.filter(pl.col("feedback") == "censored")["evidence"] == 0.0).all()
    assert (trap.filter(pl.col("feedback") == "full")["escalation_rate"] < 1.0).all()
    comp = pl.read_parquet(output / "competence.parquet")
    assert set(comp["variant"].unique()) == {"ts"}  # the competence variant: first Thompson
    assert ((comp["lower"] <= comp["mean"]) & (comp["mean"] <= comp["upper"])).all()


def test_runs_row_equals_a_direct_replay(output):
    cfg = parse_experiment(raw())
    runs = pl.read_parquet(output / "runs.parquet")
    variant = cfg.variants[0]
    c_e, c_f, c_a = class_costs(cfg.costs, "high_stakes")
    assert (c_e, c_f, c_a) == (1.0, pytest.approx(20.0), 0.0)
    from dyna.experiment.kinds.escalation.job import crc_key

    payload = {"seed": 7, "stream_key": crc_key("flat", ""), "source": "synthetic",
               "params": cfg.scenarios[0].params}
    s = _stream(payload, 2)
    out = run_policies([build_policy(cfg, variant, "high_stakes")], [0], s["types"][None],
                       s["outcomes"][None], n_types=3, c_escalate=c_e, c_failure=c_f,
                       verified=s["verified"][None], requires_provenance=True,
                       prior=prior_shapes("uniform"), feedback="full")
    row = runs.filter((pl.col("variant") == "mean") & (pl.col("risk_class") == "high_stakes")
                      & (pl.col("scenario") == "flat") & (pl.col("feedback") == "full")
                      & (pl.col("run") == 2))
    assert row["total_cost"][0] == pytest.approx(out["cost"].sum(), rel=1e-12)
    assert row["escalation_rate"][0] == pytest.approx(1 - out["act"].mean())
    assert isinstance(build_policy(cfg, variant, "high_stakes"), MeanThreshold)


def test_same_results_whatever_the_blocks_and_backend(output, tmp_path, capsys):
    cfg = parse_experiment(raw(scenarios=raw()["scenarios"][1:2]))
    a = run_experiment(cfg, tmp_path / "a", block_size=3)
    with tables_only():   # b is compared by its tables alone
        b = run_experiment(cfg, tmp_path / "b", block_size=1, backend=ProcessPoolBackend(2))
    for name in ("runs", "curves", "risk_coverage", "agreement", "competence"):
        assert pl.read_parquet(a / f"{name}.parquet").equals(pl.read_parquet(b / f"{name}.parquet"))
    first = pl.read_parquet(output / "runs.parquet").filter(pl.col("scenario") == "jump")
    assert pl.read_parquet(a / "runs.parquet").equals(first)
    # `dyna plot DIR` redraws the same files from the tables
    from dyna.cli import main

    before = sorted(p.name for p in (a / "plots").iterdir())
    assert main(["plot", str(a)]) == 0 and capsys.readouterr().out == f"{a / 'plots'}\n"
    assert sorted(p.name for p in (a / "plots").iterdir()) == before


def test_report_and_load_output(output):
    text = (output / "report.md").read_text()
    for heading in ("## Cost per policy and cost setting", "## The censoring trap",
                    "## Thompson sampling: regret against log T",
                    "## Recovery after change points", "## Replayed outcome logs"):
        assert heading in text
    assert "Trapped (never act and count no evidence under censoring, yet act under full " \
           "feedback): mean." in text
    assert "AURC of per-type competence next to a random score" in text
    manifest = json.loads((output / "manifest.json").read_text())
    # the same short config hash as the other kinds' reports, the full one in manifest.json
    assert f"config sha256 `{manifest['config_hash'][:12]}` (in full in manifest.json)" in text
    assert manifest["config_hash"][:13] not in text
    assert "runs per policy, cost setting, scenario and feedback mode" in text
    # a policy's rule is named once: alone when the name is the rule, else in parentheses
    assert ("| policy (rule) | escalation rate (censored) | escalation rate (full) | outcomes "
            "counted (censored) | outcomes counted (full) |") in text
    assert "\n| mean | " in text and "\n| ts (thompson) | " in text
    assert "| mean | mean |" not in text
    assert "| R(T), cost units |" in text
    assert "after task 75 the rates become [0.99, 0.3]" in text
    assert f"(sha256 `{manifest['data']['swe']['sha256'][:12]}`, " in text
    loaded = load_output(output)
    assert isinstance(loaded.config, EscalationConfig)
    assert loaded.config == parse_experiment(raw())
    assert loaded.tables["runs"].equals(pl.read_parquet(output / "runs.parquet"))
    plots = sorted(p.name for p in (output / "plots").iterdir())
    assert any(n.startswith("competence_swe_20250807_mini-v1-7-0_gpt-5-mini") for n in plots)
    assert "regret_jump_censored.png" in plots and "risk_coverage_swe.png" in plots


@pytest.mark.parametrize("change,fieldname", [
    ({"risk_classes": ["medium"]}, "risk_classes[0]"),
    ({"feedback": ["shadow"]}, "feedback[0]"),
    ({"variants": [{"name": "x", "rule": "median"}]}, "variants.x.rule"),
    ({"variants": [{"name": "x", "rule": "mean", "p_star": 1.5}]}, "variants.x.p_star"),
    ({"variants": [{"name": "x", "rule": "mean", "discount": 0}]}, "variants.x.discount"),
    ({"variants": [{"name": "x", "rule": "mean", "epsilon": 2}]}, "variants.x.epsilon"),
    ({"variants": [{"name": "x", "rule": "mean", "prior": [0, 1]}]}, "variants.x.prior"),
    ({"variants": [{"name": "x", "rule": "mean", "treshold": 0.5}]}, "variants.x.treshold"),
    ({"scenarios": [{"name": "s", "rates": [0.5, 1.5]}]}, "scenarios.s.rates"),
    ({"scenarios": [{"name": "s", "rates": [0.5], "change_at": [10], "steps": 5,
                     "rates_after": [[0.1]]}]}, "scenarios.s.change_at[0]"),
    ({"scenarios": [{"name": "s", "source": "csv"}]}, "scenarios.s.source"),
    ({"costs": {"c_escalate": -1}}, "costs.c_escalate"),
    ({"costs": {"act_cost": "cost_usd"}}, "costs.act_cost"),
    ({"analysis": {"competence_variant": "nope"}}, "analysis.competence_variant"),
    ({"runs": 0}, "runs"),
])
def test_bad_config_names_the_field(change, fieldname):
    with pytest.raises(ConfigError) as err:
        parse_experiment(raw(**change))
    assert err.value.field == fieldname


def test_shipped_experiment_files_parse():
    pol = load_experiment(REPO / "experiments" / "escalation_policies.toml")
    assert pol.runs >= 20 and len(pol.risk_classes) == 3 and pol.feedback == ("censored", "full")
    assert {s.name for s in pol.scenarios} == {"stationary", "change_point", "slow_drift"}
    rules = {v.rule for v in pol.variants}
    assert rules >= {"never", "always", "mean", "lower_bound", "thompson", "chow", "preset"}
    assert any(v.min_episodes for v in pol.variants) and any(v.epsilon for v in pol.variants)
    assert any(v.discount < 1 for v in pol.variants)
    swe = load_experiment(REPO / "experiments" / "escalation_swebench.toml")
    assert {v.name for v in swe.variants} <= {v.name for v in pol.variants}
    assert {s.params["systems"] for s in swe.scenarios} == {"all", "all_by_date"}


def test_competence_table_is_the_exact_posterior_of_run_0(output):
    from scipy import stats

    from dyna.experiment.kinds.escalation.job import crc_key

    cfg = parse_experiment(raw())
    comp = pl.read_parquet(output / "competence.parquet").filter(
        (pl.col("scenario") == "flat") & (pl.col("feedback") == "full")
        & (pl.col("risk_class") == "low_stakes") & (pl.col("step") == 150)).sort("task_type")
    s = _stream({"seed": 7, "stream_key": crc_key("flat", ""), "source": "synthetic",
                 "params": cfg.scenarios[0].params}, 0)
    # full feedback, low stakes (every outcome counts), no discount: Beta(1 + s_k, 1 + f_k)
    wins = np.bincount(s["types"][s["outcomes"]], minlength=3)
    losses = np.bincount(s["types"][~s["outcomes"]], minlength=3)
    np.testing.assert_array_equal(comp["a"].to_numpy(), 1 + wins)
    np.testing.assert_array_equal(comp["b"].to_numpy(), 1 + losses)
    np.testing.assert_allclose(comp["lower"].to_numpy(),
                               stats.beta.ppf(0.025, 1 + wins, 1 + losses), atol=1e-9)
    np.testing.assert_allclose(comp["upper"].to_numpy(),
                               stats.beta.ppf(0.975, 1 + wins, 1 + losses), atol=1e-9)
    np.testing.assert_array_equal(comp["rate"].to_numpy(), [0.3, 0.9, 0.99])


def _replay_toml(data_path: str) -> str:
    return (f'kind = "escalation"\nname = "mine"\nruns = 2\n'
            f'[[scenarios]]\nname = "swe"\nsource = "replay"\ndata = "{data_path}"\n'
            f'systems = ["{SYSTEM}"]\n'
            '[[variants]]\nname = "mean"\nrule = "mean"\n')


def test_data_paths_are_relative_to_the_experiment_file(tmp_path, monkeypatch):
    from dyna.errors import MissingFileError
    from dyna.experiment.registry import get_kind

    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "outcomes.csv").write_bytes((REPO / "data" / "swebench_verified_bash_only.csv")
                                        .read_bytes())
    (mine / "exp.toml").write_text(_replay_toml("outcomes.csv"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_experiment(mine / "exp.toml")
    prepared = get_kind("escalation").prepare(cfg)
    assert prepared.manifest["data"]["swe"]["path"] == str(mine / "outcomes.csv")
    assert "base_dir" not in cfg.to_dict()          # not part of the config's identity
    # found only from the working directory: refused, naming both places
    (mine / "exp2.toml").write_text(_replay_toml("here.csv"))
    (elsewhere / "here.csv").write_bytes(b"x")
    with pytest.raises(MissingFileError) as e:
        get_kind("escalation").prepare(load_experiment(mine / "exp2.toml"))
    msg = str(e.value)
    assert e.value.field == "scenarios.swe.data"
    assert str(mine / "here.csv") in msg and str(elsewhere / "here.csv") in msg
    # the shipped file works from anywhere (no repository-root fallback needed)
    swe = load_experiment(REPO / "experiments" / "escalation_swebench.toml")
    assert len(get_kind("escalation").prepare(swe).manifest["data"]) == 2
