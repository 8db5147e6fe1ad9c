"""The agent-tasks v3 analysis that identifies safeguard effects, on hand-built tables:
the per-run metrics, survival (Kaplan-Meier, log-rank stratified by run), the GEE odds
ratio, the normalised aggregates (against rliable), interactions, the crossover map's
"restores" rule and the robustness copies."""

import math

import numpy as np
import polars as pl
import pytest

from dyna.errors import ConfigError
from dyna.experiment.kinds.agent_tasks.aggregate import (normalised_aggregates,
                                                        normalised_scores)
from dyna.experiment.kinds.agent_tasks.analysis import (base_scenarios, baseline_crossovers,
                                                       crossover_map, restores_benefit,
                                                       scenario_metrics)
from dyna.experiment.kinds.agent_tasks.config import parse_agent_tasks
from dyna.experiment.kinds.agent_tasks.interactions import interactions
from dyna.experiment.kinds.agent_tasks.metrics import run_summaries
from dyna.experiment.kinds.agent_tasks.rare_events import gee_odds_ratio, rare_event_pairs
from dyna.experiment.kinds.agent_tasks.robustness import robustness_rows, scaled
from dyna.experiment.kinds.agent_tasks.survival import (kaplan_meier, logrank_by_run,
                                                       survival_at)
from dyna.experiment.kinds.agent_tasks.volume import ratio_of_sums_ci
from dyna.experiment.stats import Interval

ANALYSIS = {"final_window": 4, "recovery_window": 2, "recovery_points": 0.05,
            "late_from": 9, "tokens_window": 4, "drift_episodes": 3}


# --------------------------------------------------------------------------- metrics

def _episode_arrays():
    """Three runs of 12 episodes. Run 0: a drift at index 3 on family 0, whose arrivals
    from there (indices 3, 5, 6, 8, 9, 11) succeed 0 1 1 0 1 1; run 1: the same drift,
    never two successes of family 0 in a row; run 2: no drift."""
    E = 12
    fam = np.array([0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0])
    succ = np.zeros((3, E), dtype=bool)
    succ[0, [5, 6, 9, 11, 1, 4]] = True
    succ[1, [5, 9, 1, 10]] = True
    succ[2, [0, 11]] = True
    drift = np.full((3, E), -1)
    drift[0, 3] = drift[1, 3] = 0
    z = np.zeros((3, E), dtype=np.int64)
    a = {"success": succ, "family": np.tile(fam, (3, 1)), "drift_family": drift,
         "tokens": np.full((3, E), 100), "learning_tokens": np.full((3, E), 10),
         "incident": z.astype(bool), "escalated": z.astype(bool), "poisoned": z,
         "stale": z, "library_size": z, "steps": np.full((3, E), 3),
         "poisoned_follows": z.copy(), "incident_lesson": z.astype(bool).copy(),
         "incident_direct": z.astype(bool).copy(), "harmful_proposed": z.copy(),
         "catalog_tokens": np.tile(np.arange(E) * 10, (3, 1)),
         "context_tokens": np.tile(np.arange(E), (3, 1)),
         "context_entries": np.tile([0, 2, 3, 0, 1, 2, 0, 3, 2, 0, 4, 1], (3, 1)),
         "injected_relevant": np.tile([0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 2, 1], (3, 1))}
    a["poisoned_follows"][0, [2, 7]] = [1, 2]
    a["incident_lesson"][0, [4, 10]] = True
    a["incident_direct"][0, 6] = True
    a["harmful_proposed"][0, [1, 8]] = [1, 2]
    return a


def test_the_v3_metrics_by_hand():
    out = run_summaries(_episode_arrays(), ANALYSIS)
    # run 0: family 0 from index 3 succeeds at 5, 6, 9, 11 of 3, 5, 6, 8, 9, 11
    assert out["drift_success_next100"][0] == pytest.approx(4 / 6)
    assert out["drift_arrivals"].tolist() == [6, 6, 0]
    assert out["drift_success_next100"][1] == pytest.approx(2 / 6)      # 5 and 9
    assert math.isnan(out["drift_success_next100"][2])
    # recovery: the streak 5, 6 ends at index 6 -> 6 - 3 + 1 = 4 episodes, an event;
    # run 1 never has two in a row: censored at the end, 12 - 3 = 9 episodes
    assert out["recovery_time"][:2].tolist() == [4.0, 9.0]
    assert out["recovery_event"].tolist() == [1, 0, 0]
    assert math.isnan(out["recovery_time"][2])
    assert out["poisoned_follows_per_1000"].tolist() == pytest.approx([250.0, 0, 0])
    assert out["lesson_incidents_per_1000"][0] == pytest.approx(2000 / 12)
    assert out["direct_incidents_per_1000"][0] == pytest.approx(1000 / 12)
    assert out["harmful_stored"].tolist() == [3.0, 0.0, 0.0]     # 1 + 2 proposed
    # last 4 episodes (indices 8..11): catalog 80 90 100 110, context 8 9 10 11
    assert out["catalog_tokens_per_episode"][0] == pytest.approx(95.0)
    assert out["context_tokens_per_episode"][0] == pytest.approx(9.5)
    # injected 2 + 0 + 4 + 1 = 7 entries, 1 + 0 + 2 + 1 = 4 about the task's family
    assert out["precision_at_k"][0] == pytest.approx(4 / 7)
    assert out["late_tokens"][0] == 4 * 110 and out["late_successes"].tolist() == [2, 2, 1]


def test_harmful_stored_prefers_the_stores_count_and_missing_fields_give_nan():
    a = _episode_arrays()
    a["harmful_entries"] = np.zeros((3, 12), dtype=np.int64)
    a["harmful_entries"][0] = [0, 1, 1, 2, 2, 1, 1, 1, 0, 0, 0, 0]
    assert run_summaries(a, ANALYSIS)["harmful_stored"].tolist() == [2.0, 0.0, 0.0]
    for k in ("harmful_entries", "harmful_proposed", "poisoned_follows", "catalog_tokens",
              "injected_relevant"):
        del a[k]
    out = run_summaries(a, ANALYSIS)
    for k in ("harmful_stored", "poisoned_follows_per_1000", "catalog_tokens_per_episode",
              "precision_at_k"):
        assert np.isnan(out[k]).all()
    assert out["context_tokens_per_episode"][0] == pytest.approx(9.5)


def test_tokens_per_success_is_a_ratio_of_sums_with_a_run_bootstrap():
    tokens, wins = np.array([1000.0, 300.0, 200.0]), np.array([10.0, 1.0, 1.0])
    iv = ratio_of_sums_ci(tokens, wins, n_resamples=500)
    assert float(iv.estimate) == pytest.approx(1500 / 12)      # not mean(100, 300, 200)
    assert float(iv.low) <= 1500 / 12 <= float(iv.high)
    # every run at 100 tokens per success: every resample's ratio is 100
    same = ratio_of_sums_ci(np.array([100.0, 500.0, 300.0]), np.array([1.0, 5.0, 3.0]),
                            n_resamples=500)
    assert (float(same.low), float(same.high)) == pytest.approx((100.0, 100.0))
    # a run without a success: a quarter of the resamples of 2 runs have none at all
    open_end = ratio_of_sums_ci(np.array([400.0, 300.0]), np.array([4.0, 0.0]),
                                n_resamples=2000)
    assert float(open_end.estimate) == pytest.approx(175.0)
    assert math.isinf(float(open_end.high))
    assert math.isnan(float(ratio_of_sums_ci(np.ones(3), np.zeros(3)).estimate))


# --------------------------------------------------------------------------- survival

def _survival_runs():
    """Variant A: 2 (event), 4 (event), 6 (censored); B: 3 (event), 5 (censored), 7
    (event); run r of A paired with run r of B."""
    rows = []
    for v, times, events in (("a", [2, 4, 6], [1, 1, 0]), ("b", [3, 5, 7], [1, 0, 1])):
        for r, (t, e) in enumerate(zip(times, events)):
            rows.append({"scenario": "drift", "variant": v, "run": r,
                         "recovery_time": float(t), "recovery_event": e})
    rows.append({"scenario": "drift", "variant": "a", "run": 3,
                 "recovery_time": math.nan, "recovery_event": 0})      # no drift
    return pl.DataFrame(rows)


def test_kaplan_meier_by_hand():
    km = kaplan_meier(_survival_runs(), "drift", "a")
    assert (km.n, km.events) == (3, 2)
    # at 2: 3 at risk, 1 recovers -> 2/3; at 4: 2 at risk, 1 recovers -> 1/3
    assert km.times.tolist() == [2.0, 4.0]
    assert km.survival.tolist() == pytest.approx([2 / 3, 1 / 3])
    assert km.median == 4.0
    assert [survival_at(km, t) for t in (1, 2, 3, 5)] == pytest.approx([1, 2 / 3, 2 / 3,
                                                                        1 / 3])
    assert kaplan_meier(_survival_runs(), "drift", "c") is None


def test_the_logrank_test_is_stratified_by_run():
    lr = logrank_by_run(_survival_runs(), "drift", "a", "b")
    # run 0: at t=2 both at risk, A recovers: O - E = 1 - 1/2, variance 1/4; run 1: the
    # same at t=4; run 2: A censored at 6, B alone at risk at 7 (no information).
    # chi2 = (1/2 + 1/2)^2 / (1/4 + 1/4) = 2, p = P(chi2_1 > 2)
    assert lr.chisq == pytest.approx(2.0)
    assert lr.p == pytest.approx(0.1572992070502851)
    assert (lr.strata, lr.events) == (3, (2, 2))
    # pooled over runs instead, the same data give chi2 = 0.6^2 / 0.74 = 0.486
    from statsmodels.duration.survfunc import survdiff
    pooled, _ = survdiff(np.array([2., 4, 6, 3, 5, 7]), np.array([1, 1, 0, 1, 0, 1]),
                         np.array([1, 1, 1, 0, 0, 0]))
    assert pooled == pytest.approx(0.36 / 0.74) and lr.chisq != pytest.approx(pooled)


# --------------------------------------------------------------------------- GEE

def _episodes(events_a, events_b, E=40):
    """Episodes of variants a and b in scenario s: ``events_x[r]`` incidents in run r,
    on the first episodes of the run."""
    rows = []
    for v, per_run in (("a", events_a), ("b", events_b)):
        for r, k in enumerate(per_run):
            for e in range(E):
                rows.append({"scenario": "s", "variant": v, "run": r, "episode": e + 1,
                             "incident_lesson": e < k})
    return pl.DataFrame(rows)


def test_the_gee_odds_ratio_is_statsmodels_fit_and_points_the_right_way():
    import statsmodels.api as sm
    from statsmodels.genmod.cov_struct import Independence
    from statsmodels.genmod.generalized_estimating_equations import GEE

    ev_a, ev_b, E = [6, 2, 4, 8], [1, 2, 0, 3], 40
    r = gee_odds_ratio(_episodes(ev_a, ev_b, E), "s", "a", "b", "incident_lesson")
    assert r.status == "fitted" and r.events == (20, 6) and r.clusters == 4
    # independence working correlation: the pooled 2 x 2 table's odds ratio
    assert r.odds_ratio == pytest.approx((20 / 140) / (6 / 154), rel=1e-6)
    assert r.odds_ratio > 1                                  # more incidents under a
    assert r.per_1000 == pytest.approx((1000 * 20 / 160, 1000 * 6 / 160))
    # the same data arranged by hand, fitted by statsmodels directly
    y, x, g = [], [], []
    for is_a, per_run in ((1.0, ev_a), (0.0, ev_b)):
        for run, k in enumerate(per_run):
            y += [1.0] * k + [0.0] * (E - k)
            x += [is_a] * E
            g += [run] * E
    res = GEE(np.array(y), sm.add_constant(np.array(x)), groups=np.array(g),
              family=sm.families.Binomial(), cov_struct=Independence()).fit()
    lo, hi = np.exp(res.conf_int()[1])
    assert (r.odds_ratio, r.low, r.high, r.p) == pytest.approx(
        (math.exp(res.params[1]), lo, hi, res.pvalues[1]), rel=1e-6)
    back = gee_odds_ratio(_episodes(ev_a, ev_b, E), "s", "b", "a", "incident_lesson")
    assert back.odds_ratio == pytest.approx(1 / r.odds_ratio, rel=1e-6)
    assert back.p == pytest.approx(r.p, rel=1e-6)


def test_the_gee_says_when_it_cannot_estimate():
    assert gee_odds_ratio(_episodes([0, 0], [0, 0]), "s", "a", "b",
                          "incident_lesson").status == "no events"
    one = gee_odds_ratio(_episodes([3, 1], [0, 0]), "s", "a", "b", "incident_lesson")
    assert (one.status, one.events) == ("one variant only", (4, 0))
    assert math.isnan(one.odds_ratio)
    assert gee_odds_ratio(_episodes([1], [1]), "s", "a", "b",
                          "poisoned_follows").status == "missing"


# --------------------------------------------------------------------------- config

BASE = {"name": "v3", "runs": 5, "episodes": 10, "store": "skill",
        "variants": ["no_learning", "oracle", "naive_loop", "naive_loop+outcome_gate",
                     "naive_loop+retire_on_contradiction", "skill_loop",
                     "skill_loop-no_outcome_gate"],
        "env": {"n_families": 3},
        "scenarios": [{"name": "clean"}, {"name": "inj", "env": {"injection_rate": 0.1}},
                      {"name": "vol"}],
        "analysis": {"n_resamples": 400}}
H_INJ = {"name": "gate cuts lesson incidents", "scenario": "inj",
         "metric": "lesson_incidents_per_1000", "variant": "skill_loop",
         "versus": "skill_loop-no_outcome_gate", "direction": "less"}
H_VOL = {"name": "gate saves tokens", "scenario": "vol", "metric": "late_tokens_per_success",
         "variant": "skill_loop", "versus": "skill_loop-no_outcome_gate",
         "direction": "less"}


def _cfg(**extra):
    return parse_agent_tasks({**BASE, **extra})


def _table(cfg, cells, metric="late_success"):
    """A runs table from ``cells[(scenario, variant)] = per-run values`` of ``metric``."""
    rows = []
    for (sc, v), vals in cells.items():
        for r, x in enumerate(vals):
            rows.append({"scenario": sc, "variant": v, "run": r, metric: float(x),
                         "acted_outcome_gate": 1})
    return pl.DataFrame(rows)


def test_robustness_adds_scenario_copies_with_the_policy_scaled_on_the_odds():
    cfg = _cfg(hypotheses=[H_INJ], policy={"p_follow": 0.9, "tokens_per_review": 300},
               robustness={"factors": [0.5, 2.0], "params": ["p_follow", "tokens_per_review"]})
    names = [n for n, _ in cfg.scenarios]
    assert names == ["clean", "inj", "vol", "inj-p_follow-x0.5", "inj-p_follow-x2",
                     "inj-tokens_per_review-x0.5", "inj-tokens_per_review-x2"]
    # odds 9 -> 4.5 and 18: p = 4.5 / 5.5 and 18 / 19; an integer is multiplied
    assert [cfg.policy_kwargs(i)["p_follow"] for i in (1, 3, 4)] == pytest.approx(
        [0.9, 4.5 / 5.5, 18 / 19])
    assert [cfg.policy_kwargs(i)["tokens_per_review"] for i in (5, 6)] == [150, 600]
    assert cfg.env_kwargs(3) == cfg.env_kwargs(1) == {"n_families": 3,
                                                      "injection_rate": 0.1}
    assert [n for n, _ in cfg.declared_scenarios] == ["clean", "inj", "vol"]
    assert base_scenarios(cfg) == ["clean", "inj", "vol"]
    assert scenario_metrics(cfg, "inj-p_follow-x2") == ("lesson_incidents_per_1000",)
    assert scenario_metrics(cfg, "clean") == ("late_success",)
    again = parse_agent_tasks({k: v for k, v in cfg.to_dict().items() if k != "kind"})
    assert again.hash == cfg.hash and again.scenarios == cfg.scenarios
    from dyna.experiment.kinds.agent_tasks.kind import KIND
    jobs = KIND.plan_jobs(cfg, None, block_size=5)
    by_scenario = {j.payload["point_kwargs"]["scenario"]: j.payload["policy"] for j in jobs}
    assert by_scenario["inj-p_follow-x2"]["p_follow"] == pytest.approx(18 / 19)
    assert by_scenario["inj"]["p_follow"] == 0.9
    assert scaled("p_follow", 1.0, 0.5) == 1.0 and scaled("days_per_episode", 1.0, 2) == 2


@pytest.mark.parametrize("table,field", [
    ({"factors": [1.0]}, "robustness.factors[0]"),
    ({"factors": [0.5, 0.5]}, "robustness.factors"),
    ({"factors": [-2]}, "robustness.factors[0]"),
    ({"params": ["memory_facts"]}, "robustness.params[0]"),
    ({"params": ["p_follw"]}, "robustness.params[0]"),
    ({"params": ["title_words"], "factors": [0.1]}, "robustness.params[0]"),
    ({"seeds": [1]}, "robustness.seeds"),
])
def test_bad_robustness_tables_name_their_field(table, field):
    with pytest.raises(ConfigError) as e:
        _cfg(hypotheses=[H_INJ], robustness=table)
    assert e.value.field == field


def test_robustness_needs_a_sign_hypothesis_to_re_run():
    with pytest.raises(ConfigError) as e:
        _cfg(robustness={})
    assert e.value.field == "robustness"


def test_the_robustness_rows_re_run_each_comparison_in_each_copy():
    cfg = _cfg(hypotheses=[H_INJ], robustness={"factors": [2.0]})
    cells = {}
    for sc, gap in (("inj", -30.0), ("inj-p_follow-x2", -10.0)):
        cells[(sc, "skill_loop-no_outcome_gate")] = [50, 60, 70, 80, 90]
        cells[(sc, "skill_loop")] = [b + gap + w for b, w in zip([50, 60, 70, 80, 90],
                                                                 (1, -1, 2, -2, 0))]
    ((h, copy, c, base),) = robustness_rows(cfg, _table(cfg, cells,
                                                        "lesson_incidents_per_1000"))
    assert (h.name, copy.scenario, copy.factor) == (H_INJ["name"], "inj-p_follow-x2", 2.0)
    assert float(base.interval.estimate) == pytest.approx(-30.0)
    assert float(c.interval.estimate) == pytest.approx(-10.0)
    assert c.p == pytest.approx(2.0 ** -5)                  # every run lower: one-sided


# --------------------------------------------------------------------------- crossover

SWEEP = {"name": "lff", "knob": "false_success_rate", "values": [0.0, 0.5],
         "metric": "late_success", "better": "greater", "safeguards": ["outcome_gate"]}


def _lff_cells(cfg, gains: dict) -> dict:
    """Per-run late success at every point of the config's one sweep: no learning, the
    oracle 0.40 above it (half of it: 0.20), the naive loop 0.1 above at 0.0 and 0.2 below
    at 0.5, and each variant of ``gains`` ``gains[v](point)`` above, with a small wobble."""
    wobble = np.array([0.02, -0.02, 0.01, -0.01, 0.0])
    none = np.array([0.30, 0.40, 0.35, 0.45, 0.50])
    cells = {}
    for sc, s in cfg.sweeps[0].points():
        cells[(sc, "no_learning")] = none
        cells[(sc, "oracle")] = none + 0.40
        cells[(sc, "naive_loop")] = none + (0.1 if s == 0.0 else -0.2) + wobble
        for v, gain in gains.items():
            cells[(sc, v)] = none + gain(s) + wobble
    return cells


def test_restores_needs_not_worse_and_half_the_oracle_gain():
    cfg = parse_agent_tasks({**{k: v for k, v in BASE.items() if k != "scenarios"},
                             "sweeps": [SWEEP]})
    cells = _lff_cells(cfg, {
        "naive_loop+outcome_gate": lambda s: 0.30,                         # restores
        "naive_loop+retire_on_contradiction": lambda s: 0.05})             # stops
    (cx,) = crossover_map(cfg, _table(cfg, cells))
    assert cx.at == 0.5 and float(cx.oracle_gap.estimate) == pytest.approx(0.40)
    assert [g for g, _ in cx.restores] == ["outcome_gate"]
    # the rule alone, for a metric where less is better (oracle gap -100: half is -50)
    gap = Interval(np.float64(-100.0), np.float64(-120.0), np.float64(-80.0), 5)
    iv = lambda est, lo, hi: Interval(np.float64(est), np.float64(lo), np.float64(hi), 5)
    assert restores_benefit(iv(-60.0, -70.0, -50.0), gap, "less")
    assert not restores_benefit(iv(-40.0, -60.0, -20.0), gap, "less")   # under half
    assert not restores_benefit(iv(-60.0, 5.0, 10.0), gap, "less")      # wholly worse
    # without an oracle nothing can be said to restore
    no_oracle = parse_agent_tasks({**{k: v for k, v in BASE.items() if k != "scenarios"},
                                   "variants": [v for v in BASE["variants"] if v != "oracle"],
                                   "sweeps": [SWEEP]})
    (cx,) = crossover_map(no_oracle, _table(no_oracle, cells))
    assert cx.at == 0.5 and cx.restores == () and cx.oracle_gap is None


def test_each_baseline_sits_on_the_map_with_its_own_crossover_and_the_restore_rule():
    cfg = parse_agent_tasks({**{k: v for k, v in BASE.items() if k != "scenarios"},
                             "variants": ["no_learning", "oracle", "naive_loop", "reflexion",
                                          "voyager", "awm"],
                             "sweeps": [SWEEP]})
    cells = _lff_cells(cfg, {
        "reflexion": lambda s: 0.30,                                       # restores
        "voyager": lambda s: 0.05,                                         # under half
        "awm": lambda s: 0.1 if s == 0.0 else -0.3})                      # worse at 0.5
    cmap = crossover_map(cfg, _table(cfg, cells))
    rows = {lc.variant: lc for lc in baseline_crossovers(cfg, _table(cfg, cells), cmap)}
    assert list(rows) == ["reflexion", "voyager", "awm"]
    assert [(r.at, r.estimate_at, r.restores) for r in rows.values()] == [
        (None, None, True), (None, None, False), (0.5, 0.5, False)]
    assert float(rows["reflexion"].gain.estimate) == pytest.approx(0.30)
    assert float(rows["awm"].gain.estimate) == pytest.approx(-0.30)
    assert len(rows["awm"].points) == 2
    # no naive loop: no map, so no baseline rows
    plain = parse_agent_tasks({**{k: v for k, v in BASE.items() if k != "scenarios"},
                               "variants": ["no_learning", "oracle", "reflexion"],
                               "sweeps": [SWEEP]})
    assert baseline_crossovers(plain, _table(plain, cells), crossover_map(
        plain, _table(plain, cells))) == []
    # the headline names the one that restores the benefit where the naive loop is worse
    from dyna.experiment.kinds.agent_tasks.headline import baselines_line

    assert baselines_line(cfg, _table(cfg, cells)) == (
        "- baselines restoring the benefit (exploratory): lff: reflexion.")
    none = _lff_cells(cfg, {"reflexion": lambda s: 0.05, "voyager": lambda s: 0.05,
                            "awm": lambda s: 0.05})
    assert baselines_line(cfg, _table(cfg, none)).endswith("(exploratory): lff: none.")
    assert baselines_line(plain, _table(plain, cells)) is None


# --------------------------------------------------------------------------- interactions

def test_the_interaction_is_the_difference_of_the_two_contrasts_per_run():
    cfg = _cfg()
    cells = {}
    naive = np.array([0.1, 0.2, 0.3, 0.2, 0.1])
    full = np.array([0.5, 0.6, 0.4, 0.5, 0.7])
    for sc in ("clean", "inj", "vol"):
        cells[(sc, "naive_loop")] = naive
        cells[(sc, "naive_loop+outcome_gate")] = naive + [0.1, 0.1, 0.2, 0.0, 0.1]
        cells[(sc, "skill_loop")] = full
        cells[(sc, "skill_loop-no_outcome_gate")] = full - [0.3, 0.4, 0.3, 0.2, 0.3]
    res = interactions(cfg, _table(cfg, cells))
    assert [(r.switch, r.scenario, r.metric) for r in res] == [
        ("outcome_gate", s, "late_success") for s in ("clean", "inj", "vol")]
    r = res[0]
    assert float(r.added.interval.estimate) == pytest.approx(0.1)
    assert float(r.removed.interval.estimate) == pytest.approx(0.3)
    # per run: 0.3 - 0.1, 0.4 - 0.1, 0.3 - 0.2, 0.2 - 0.0, 0.3 - 0.1
    assert float(r.interaction.interval.estimate) == pytest.approx(0.2)
    assert r.interaction.p == pytest.approx(2.0 ** -4)      # 5 positive: two-sided 2/32


# --------------------------------------------------------------------------- aggregates

def _scores(cfg, rng):
    """Runs table of late_success (clean, inj) and late_tokens_per_success (vol, where
    less is better), 5 runs x 7 variants."""
    rows = []
    for v in cfg.variants:
        for sc, lo, hi in (("clean", 0.1, 0.9), ("inj", 0.2, 0.6), ("vol", 900, 300)):
            for r in range(cfg.runs):
                x = {"no_learning": lo, "oracle": hi}.get(v, lo + (hi - lo) * rng.uniform(
                    -0.2, 1.1))
                x += (hi - lo) * 0.05 * (r - 2)
                rows.append({"scenario": sc, "variant": v, "run": r,
                             "late_success": float(x), "late_tokens_per_success": float(x)})
    return pl.DataFrame(rows)


def test_scores_are_normalised_between_no_learning_and_the_oracle():
    cfg = _cfg(hypotheses=[H_VOL])
    runs = _scores(cfg, np.random.default_rng(3))
    ref = normalised_scores(cfg, runs, "no_learning")
    assert sorted(ref) == ["clean", "inj", "vol"]
    for sc in ref:      # no learning at 0 and the oracle at 1 on average, both ways round
        assert float(np.mean(ref[sc])) == pytest.approx(0.0, abs=1e-12)
        assert float(np.mean(normalised_scores(cfg, runs, "oracle")[sc])) == pytest.approx(1)
    x = runs.filter((pl.col("scenario") == "vol") & (pl.col("variant") == "naive_loop")
                    ).sort("run")["late_tokens_per_success"].to_numpy()
    zero = np.mean([900 - 600 * 0.05 * (r - 2) for r in range(5)])
    one = np.mean([300 - 600 * 0.05 * (r - 2) for r in range(5)])
    assert normalised_scores(cfg, runs, "naive_loop")["vol"] == pytest.approx(
        (x - zero) / (one - zero))
    no_oracle = _cfg(variants=[v for v in BASE["variants"] if v != "oracle"])
    with pytest.raises(ConfigError) as e:
        normalised_scores(no_oracle, runs, "naive_loop")
    assert e.value.field == "variants"
    assert normalised_aggregates(no_oracle, runs) == []


@pytest.mark.filterwarnings("ignore:random_state is deprecated:FutureWarning")  # arch's
def test_the_normalised_iqm_and_probability_of_improvement_match_rliable():
    from rliable import library as rly
    from rliable import metrics

    cfg = _cfg(hypotheses=[H_VOL], analysis={"n_resamples": 4000})
    runs = _scores(cfg, np.random.default_rng(4))
    agg = {g.variant: g for g in normalised_aggregates(cfg, runs)}
    assert list(agg) == list(cfg.variants) and agg["naive_loop"].scenarios == 3
    base = normalised_scores(cfg, runs, "no_learning")
    for v in ("naive_loop", "skill_loop", "oracle"):
        mine = normalised_scores(cfg, runs, v)
        x = np.stack([mine[s] for s in ("clean", "inj", "vol")], axis=1)
        y = np.stack([base[s] for s in ("clean", "inj", "vol")], axis=1)
        assert float(agg[v].iqm.estimate) == pytest.approx(metrics.aggregate_iqm(x))
        assert float(agg[v].poi.estimate) == pytest.approx(
            metrics.probability_of_improvement(x, y))
        est, cis = rly.get_interval_estimates({v: x}, lambda s: np.array(
            [metrics.aggregate_iqm(s)]), reps=4000,
            random_state=np.random.RandomState(0))
        width = float(cis[v][1, 0] - cis[v][0, 0])
        assert float(agg[v].iqm.low) == pytest.approx(cis[v][0, 0], abs=0.1 * width + 1e-9)
        assert float(agg[v].iqm.high) == pytest.approx(cis[v][1, 0], abs=0.1 * width + 1e-9)
    assert float(agg["oracle"].poi.estimate) == 1.0
    assert float(agg["no_learning"].poi.estimate) == 0.5


def test_rare_event_pairs_come_from_the_hypotheses_on_rare_event_metrics():
    cfg = _cfg(hypotheses=[H_INJ, H_VOL])
    assert rare_event_pairs(cfg) == [("inj", "skill_loop", "skill_loop-no_outcome_gate",
                                      "incident_lesson")]


def test_a_gee_fit_without_a_positive_robust_variance_says_so_without_a_warning():
    import warnings

    import polars as pl

    from dyna.experiment.kinds.agent_tasks.rare_events import gee_odds_ratio

    # 2 runs x 6 episodes per variant: run 0 of `b` has 1 event, run 1 has 2; `a` has 1
    # and 2: the sandwich variance of b1 comes out negative (sqrt of it: NaN)
    events = [0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1]
    frame = pl.DataFrame({"scenario": ["s"] * 24, "variant": ["a"] * 12 + ["b"] * 12,
                          "run": ([0] * 6 + [1] * 6) * 2, "episode": list(range(6)) * 4,
                          "incident": events})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = gee_odds_ratio(frame, "s", "a", "b", "incident")
    assert r.status == "no interval" and r.events == (3, 3)
    assert math.isnan(r.low) and math.isnan(r.high) and math.isnan(r.p)
    assert r.odds_ratio == pytest.approx(1.0)
