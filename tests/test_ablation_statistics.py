"""Paired tests, multiple-testing corrections and rliable-style aggregates, checked by hand
and against peers (scipy, rliable), and the agent-task report that uses them."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from dyna.errors import ConfigError
from dyna.experiment import stats as S
from dyna.experiment.backends import InProcessBackend
from dyna.experiment.kinds.agent_tasks import analysis as A
from dyna.experiment.registry import load_experiment, parse_experiment
from dyna.experiment.runner import load_output, run_experiment

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- paired tests

def test_sign_flip_exact_by_hand():
    # d = (1, -1, 2): of the 8 sign patterns, sums >= 2 (the observed) are (+1 -1 +2),
    # (+1 +1 +2), (-1 +1 +2): p = 3/8 one-sided; two-sided counts |sum| >= 2: 6/8
    assert S.sign_flip_test([1, -1, 2], alternative="greater") == pytest.approx(3 / 8)
    assert S.sign_flip_test([1, -1, 2], alternative="less") == pytest.approx(7 / 8)
    assert S.sign_flip_test([1, -1, 2]) == pytest.approx(6 / 8)
    # all positive: only the identity reaches the observed mean, p = 2^-n
    assert S.sign_flip_test(np.arange(1, 11), alternative="greater") == pytest.approx(2 ** -10)
    assert S.sign_flip_test([0, 0, 0]) == 1.0


def test_sign_flip_matches_a_full_enumeration():
    rng = np.random.default_rng(3)
    d = rng.normal(0.3, 1.0, 9)
    obs = d.mean()
    means = np.array([(d * s).mean() for s in itertools.product([1, -1], repeat=9)])
    p = np.mean(means >= obs - 1e-12)
    assert S.sign_flip_test(d, alternative="greater") == pytest.approx(p, abs=1e-12)


def test_paired_bootstrap_small_example():
    a, b = [3.0, 5.0, 4.0, 6.0], [1.0, 2.0, 2.0, 3.0]
    iv = S.paired_diff_ci(a, b, n_resamples=4000, seed=0)
    assert float(iv.estimate) == pytest.approx(2.5)   # differences 2, 3, 2, 3
    # resampled means of {2, 3, 2, 3} lie in [2, 3]; the 95% interval is inside it
    assert 2.0 <= float(iv.low) < 2.5 < float(iv.high) <= 3.0
    ref = sps.bootstrap((np.array([2.0, 3, 2, 3]),), np.mean, n_resamples=4000,
                        rng=np.random.default_rng(0))
    assert (float(iv.low), float(iv.high)) == pytest.approx(
        (ref.confidence_interval.low, ref.confidence_interval.high), abs=1e-12)
    with pytest.raises(ValueError, match="equal lengths"):
        S.paired_diff_ci([1, 2], [1])


def test_holm_by_hand_and_bh_against_scipy():
    p = [0.01, 0.04, 0.03, 0.2, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04, 0.2 times 5, 4, 3, 2, 1 -> 0.025, 0.04, 0.09, 0.08,
    # 0.2; running maximum -> 0.025, 0.04, 0.09, 0.09, 0.2
    assert S.holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.2, 0.025])
    # BH by hand: p_(i) m / i = 0.025, 0.025, 0.05, 0.05, 0.2; running minimum from the top
    assert S.benjamini_hochberg(p) == pytest.approx([0.025, 0.05, 0.05, 0.2, 0.025])
    assert S.benjamini_hochberg(p) == pytest.approx(sps.false_discovery_control(p))
    assert S.holm([0.3]) == pytest.approx([0.3])
    with pytest.raises(ValueError):
        S.holm([0.1, 1.5])


def test_min_detectable_difference_by_hand():
    d = np.array([1.0, 2.0, 3.0, 4.0])
    expect = (sps.t.ppf(0.95, 3) + sps.t.ppf(0.8, 3)) * np.std(d, ddof=1) / 2
    assert S.min_detectable_difference(d) == pytest.approx(expect)
    assert np.isnan(S.min_detectable_difference([1.0]))


def test_proportion_intervals_keep_their_width_at_the_edges():
    z2 = sps.norm.ppf(0.975) ** 2
    assert S.proportion_ci(0, 10) == pytest.approx((0.0, z2 / (10 + z2)), abs=1e-12)
    assert S.proportion_ci(3, 3) == pytest.approx((3 / (3 + z2), 1.0), abs=1e-12)
    ref = sps.binomtest(7, 20).proportion_ci(method="wilson")
    assert S.proportion_ci(7, 20) == pytest.approx((ref.low, ref.high), abs=1e-12)


# --------------------------------------------------------------------------- rliable peer

def _rliable():
    from rliable import library as rly
    from rliable import metrics
    return rly, metrics


def test_iqm_and_probability_of_improvement_match_rliable():
    """Point estimates equal to 1e-12; stratified bootstrap interval ends within 0.02 of
    rliable's at 2000 resamples for the IQM and within 0.04 at 500 for P(X > Y) (rliable
    draws from its own generator)."""
    rly, metrics = _rliable()
    rng = np.random.default_rng(0)
    x = rng.beta(5, 2, (10, 5))
    y = rng.beta(4, 3, (10, 5))
    iv = S.stratified_iqm(x, n_resamples=2000, seed=1)
    assert float(iv.estimate) == pytest.approx(metrics.aggregate_iqm(x), abs=1e-12)
    np.random.seed(1)
    _, ref = rly.get_interval_estimates({"x": x}, lambda s: np.array([metrics.aggregate_iqm(s)]),
                                        reps=2000)
    assert float(iv.low) == pytest.approx(ref["x"][0, 0], abs=0.02)
    assert float(iv.high) == pytest.approx(ref["x"][1, 0], abs=0.02)
    # P(X > Y) at 500 resamples (rliable's runs a Mann-Whitney test per resample)
    poi = S.probability_of_improvement(x, y, n_resamples=500, seed=1)
    assert float(poi.estimate) == pytest.approx(metrics.probability_of_improvement(x, y),
                                                abs=1e-12)
    np.random.seed(1)
    _, ref = rly.get_interval_estimates(
        {"xy": (x, y)}, lambda a, b: np.array([metrics.probability_of_improvement(a, b)]),
        reps=500)
    assert float(poi.low) == pytest.approx(ref["xy"][0, 0], abs=0.04)
    assert float(poi.high) == pytest.approx(ref["xy"][1, 0], abs=0.04)
    assert float(S.probability_of_improvement(x, x).estimate) == pytest.approx(0.5)


def test_performance_profile_matches_rliable():
    rly, _ = _rliable()
    rng = np.random.default_rng(2)
    x = rng.random((8, 4))
    taus = np.linspace(0, 1, 11)
    iv = S.performance_profile(x, taus, n_resamples=2000, seed=0)
    np.random.seed(0)
    ref, ref_ci = rly.create_performance_profile({"x": x}, taus, reps=2000)
    assert iv.estimate == pytest.approx(ref["x"], abs=1e-12)
    assert iv.low == pytest.approx(ref_ci["x"][0], abs=0.06)
    assert iv.high == pytest.approx(ref_ci["x"][1], abs=0.06)


# --------------------------------------------------------------------------- hypotheses

BASE = {"kind": "agent_tasks", "name": "h", "seed": 1, "runs": 6, "episodes": 120,
        "store": "skill",
        "variants": ["no_learning", "skill_loop", "skill_loop-no_dating",
                     "skill_loop-no_outcome_gate"],
        "env": {"n_families": 3, "max_steps": 16}, "scenarios": [{"name": "clean"}],
        "analysis": {"n_resamples": 300}}


@pytest.mark.parametrize("bad, field, value", [
    ({"variant": "skill_lop"}, "hypotheses[0].variant", "skill_lop"),
    ({"scenario": "drift"}, "hypotheses[0].scenario", "drift"),
    ({"metric": ["final_success", "speed"]}, "hypotheses[0].metric[1]", "speed"),
    ({"direction": "bigger"}, "hypotheses[0].direction", "bigger"),
    ({"versus": ["no_learning", "nope"]}, "hypotheses[0].versus[1]", "nope"),
    ({"colour": "red"}, "hypotheses[0].colour", "red"),
])
def test_bad_hypothesis_names_field_and_value(bad, field, value):
    h = {"scenario": "clean", "metric": "final_success", "variant": "skill_loop",
         "versus": "no_learning", "direction": "greater", **bad}
    with pytest.raises(ConfigError) as err:
        parse_experiment({**BASE, "hypotheses": [h]})
    assert err.value.field == field and err.value.value == value


def test_bad_hypothesis_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    toml = tmp_path / "x.toml"
    toml.write_text('kind = "agent_tasks"\nname = "x"\nvariants = ["no_learning", "skill_loop"]\n'
                    '[[hypotheses]]\nscenario = "clean"\nmetric = "final_success"\n'
                    'variant = "skill_loop"\nversus = "no_learning"\ndirection = "up"\n')
    res = subprocess.run([sys.executable, "-m", "dyna.cli", "run", str(toml), "--out",
                          str(tmp_path / "o")], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "hypotheses[0].direction" in res.stderr
    assert "'up'" in res.stderr
    assert not (tmp_path / "o").exists()


def test_shipped_ablations_declare_the_six_hypotheses():
    for name in ("skill_loop_ablation", "memory_loop_ablation"):
        cfg = load_experiment(REPO / "experiments" / f"{name}.toml")
        assert [h.scenario for h in cfg.hypotheses] == [
            "clean", "clean", "noisy_self_assessment", "drift", "volume", "injection"]
        assert cfg.runs == 10


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    hyps = [{"name": "gate off costs tokens", "scenario": "clean",
             "metric": "tokens_per_success", "variant": "skill_loop-no_outcome_gate",
             "versus": "skill_loop", "direction": "greater"},
            {"name": "dating off changes success", "scenario": "clean",
             "metric": "final_success", "variant": "skill_loop-no_dating",
             "versus": "skill_loop", "direction": "less"}]
    out = tmp_path_factory.mktemp("h") / "o"
    run_experiment(parse_experiment({**BASE, "hypotheses": hyps}), out,
                   backend=InProcessBackend(), progress=False)
    return out


def test_report_inert_rows_say_inert_and_carry_no_star(small_run):
    out = load_output(small_run)
    runs = out.tables["runs"]
    assert runs.filter(pl.col("variant") == "skill_loop")["acted_dating"].sum() == 0
    results = A.evaluate_hypotheses(out.config, runs)
    assert [r.verdict for r in results][1] == "inert"
    cells = A.exploratory_cells(out.config, runs)
    dating = [c for c in cells if c.variant == "skill_loop-no_dating"]
    assert dating and all(c.status == "inert" and not c.tested for c in dating)
    text = (small_run / "report.md").read_text()
    assert "| dating off changes success | **inert** |" in text
    line = next(x for x in text.splitlines() if x.startswith("Inert in this scenario"))
    assert "`dating`" in line and "*" not in line.replace("`", "")
    assert "| `dating` | matches changed by dating | inert in this scenario |" in text
    assert "Nothing in the environment was tuned" not in text
    assert "**Warning: 6 runs per variant**" in text


def test_manifest_records_commit_and_methods(small_run):
    m = json.loads((small_run / "manifest.json").read_text())
    git = m["git"]
    assert (len(git["commit"]) == 40) if git["commit"] else git["reason"].startswith("not a git")
    st = m["statistics"]
    assert st["intervals"] == S.INTERVAL_METHOD and st["n_resamples"] == 300
    assert "Holm" in st["primary"] and "Benjamini-Hochberg" in st["exploratory"]


def test_fewer_than_five_runs_make_no_claims(small_run, tmp_path):
    cfg = parse_experiment({**BASE, "runs": 4, "hypotheses": [
        {"scenario": "clean", "metric": "tokens_per_success",
         "variant": "skill_loop-no_outcome_gate", "versus": "skill_loop",
         "direction": "greater"}]})
    runs = load_output(small_run).tables["runs"].filter(pl.col("run") < 4)
    assert [r.verdict for r in A.evaluate_hypotheses(cfg, runs)] == ["not tested"]
    assert A.bh_marks(A.exploratory_cells(cfg, runs), 0.05, cfg.runs) == {}


def test_plots_have_at_most_six_lines_a_panel_and_legends_outside(small_run, monkeypatch):
    from dyna.experiment.kinds.agent_tasks import plots as P

    seen = []
    real = P.save

    def check(fig, stem, svg=True):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
            seen.append((stem.name, len(lines)))
            leg = ax.get_legend()
            if leg is not None:
                lb = leg.get_window_extent(renderer)
                for other in fig.axes:
                    assert not lb.overlaps(other.get_window_extent(renderer)), stem.name
        return real(fig, stem, svg)

    monkeypatch.setattr(P, "save", check)
    P.draw_plots(load_output(small_run), small_run)
    assert seen and max(n for _, n in seen) <= P.MAX_LINES
    assert {name for name, _ in seen} >= {"scenario_clean", "performance_profiles"}


def test_variant_panels_split_at_six():
    from dyna.agents.loop_agents import variant_names
    from dyna.experiment.kinds.agent_tasks.plots import variant_panels

    panels = variant_panels(variant_names("skill"), "skill")
    assert all(len(g) <= 6 and g[0] == "skill_loop" for _, g in panels)
    drawn = {v for _, g in panels for v in g}
    assert drawn == set(variant_names("skill"))
