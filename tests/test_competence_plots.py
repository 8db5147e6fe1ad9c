"""Competence over episodes, right and easy: the arrival-weighted and the chosen family's
competence the agents record, the competence rows of the agent-tasks figures, ``dyna plot
--only competence`` and ``dyna store competence``."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from dyna.cli import main
from dyna.competence import (BetaCompetence, empirical_bayes_prior, posterior_path,
                             weighted_beta_mean)
from dyna.errors import ConfigError

# ----------------------------------------------------------------- the numbers


def _matched_interval(mu: float, var: float, level: float = 0.95):
    """The equal-tailed interval of the Beta with mean ``mu`` and variance ``var``, by
    scipy.stats (the reference, not our code)."""
    nu = mu * (1 - mu) / var - 1
    return stats.beta.ppf([(1 - level) / 2, (1 + level) / 2], mu * nu, (1 - mu) * nu)


def test_the_weighted_mean_and_band_of_two_families_by_hand():
    # family 0: 3 successes, 1 failure; family 1: 0 successes, 4 failures; 4 arrivals each;
    # family 2 never arrived. Pooled: K = 3 of N = 8, m = 3.5 / 9, prior Beta(7/9, 11/9).
    from dyna.agents.loop_agents import competence_fields

    comp = BetaCompetence()
    for s in (True, True, True, False):
        comp.update(0, s)
    for _ in range(4):
        comp.update(1, False)
    a0, b0 = empirical_bayes_prior([3.0, 0.0, 0.0], [1.0, 4.0, 0.0])
    assert (a0, b0) == pytest.approx((7 / 9, 11 / 9), abs=1e-15)
    # posteriors Beta(34/9, 20/9) (mean 17/27) and Beta(7/9, 47/9) (mean 7/54), each a + b = 6
    mu = (17 / 27 + 7 / 54) / 2                                   # 41/108
    var = ((34 / 9) * (20 / 9) + (7 / 9) * (47 / 9)) / (36 * 7) / 4   # 1009/81648
    assert mu == pytest.approx(41 / 108) and var == pytest.approx(1009 / 81648)
    lo, hi = _matched_interval(mu, var)
    row = competence_fields(comp, np.array([4, 4, 0]), chosen_family=1)
    assert row["comp_weighted_mean"] == pytest.approx(41 / 108, abs=1e-12)
    assert row["comp_weighted_lower"] == pytest.approx(lo, abs=1e-9)
    assert row["comp_weighted_upper"] == pytest.approx(hi, abs=1e-9)
    assert (row["comp_chosen_a"], row["comp_chosen_b"]) == pytest.approx((7 / 9, 47 / 9))
    # the old reading, every family's posterior mean averaged with family 2 at its prior
    # mean 7/18, would say 0.3827; unequal arrivals weigh the families: 3 to 1
    assert (17 / 27 + 7 / 54 + 7 / 18) / 3 != pytest.approx(row["comp_weighted_mean"])
    row = competence_fields(comp, np.array([6, 2, 0]), chosen_family=0)
    assert row["comp_weighted_mean"] == pytest.approx(0.75 * 17 / 27 + 0.25 * 7 / 54)
    assert (row["comp_chosen_a"], row["comp_chosen_b"]) == pytest.approx((34 / 9, 20 / 9))


def test_a_family_that_never_arrived_does_not_enter_the_weighted_mean():
    a, b = np.array([4.0, 1.0, 50.0]), np.array([2.0, 5.0, 0.5])
    with_unseen = weighted_beta_mean(a, b, [1.0, 3.0, 0.0])
    without = weighted_beta_mean(a[:2], b[:2], [1.0, 3.0])
    assert with_unseen == without
    # Beta(4, 2) and Beta(1, 5) weighted 1 : 3: mean 7/24, variance 53/4032
    assert without[0] == pytest.approx(7 / 24, abs=1e-15)
    lo, hi = _matched_interval(7 / 24, 53 / 4032)
    assert without[1:] == pytest.approx((lo, hi), abs=1e-9)
    # one family alone: its own Beta
    m, lo, hi = weighted_beta_mean([4.0], [2.0], [5.0])
    assert m == pytest.approx(2 / 3) and (lo, hi) == pytest.approx(
        tuple(stats.beta.ppf([0.025, 0.975], 4, 2)), abs=1e-12)
    # many rows at once: each row as alone
    rows = weighted_beta_mean(np.stack([a, a]), np.stack([b, b]),
                              [[1.0, 3.0, 0.0], [1.0, 0.0, 0.0]])
    assert rows[0].tolist() == pytest.approx([7 / 24, 2 / 3])


def test_bad_weights_and_counts_are_refused_naming_the_field():
    for weights in ([0.0, 0.0], [1.0, -1.0], [1.0, np.nan]):
        with pytest.raises(ConfigError) as err:
            weighted_beta_mean([1.0, 1.0], [1.0, 1.0], weights)
        assert err.value.field == "weights"
    with pytest.raises(ConfigError) as err:
        weighted_beta_mean([0.0, 1.0], [1.0, 1.0], [1.0, 1.0])
    assert err.value.field == "a"
    with pytest.raises(ConfigError) as err:
        empirical_bayes_prior([-1.0], [0.0])
    assert err.value.field == "successes"
    with pytest.raises(ConfigError) as err:
        empirical_bayes_prior([1.0], [0.0], strength=0.0)
    assert err.value.field == "strength"


def test_the_prior_with_no_data_is_centred_on_one_half_and_evidence_reads_counts():
    assert empirical_bayes_prior([0.0, 0.0], [0.0, 0.0]) == (1.0, 1.0)
    comp = BetaCompetence(prior="jeffreys")
    comp.update("x", True)
    comp.update("x", True)
    comp.update("y", False)
    s, f = comp.evidence(["x", "y", "unseen", ("x", "y")])
    assert s.tolist() == [2.0, 0.0, 0.0, 0.0] and f.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_the_posterior_path_is_the_sequence_of_updates():
    outcomes = [True, False, True, True, False, False, True]
    for prior, discount in (("uniform", 1.0), ("jeffreys", 0.8), ((2.0, 3.0), 0.5)):
        comp = BetaCompetence(prior, discount)
        want = []
        for s in outcomes:
            comp.update("k", s)
            want.append(comp.posterior("k"))
        a, b = posterior_path(outcomes, prior, discount)
        assert np.allclose(np.column_stack([a, b]), want, rtol=0, atol=1e-12)
    a, b = posterior_path([True, True, False])
    assert a.tolist() == [2.0, 3.0, 3.0] and b.tolist() == [1.0, 1.0, 2.0]


# ----------------------------------------------------------------- the agents' fields


def test_comp_chosen_follows_the_configured_family():
    from dyna.agents.loop_agents import run_loop_agent

    out = run_loop_agent("naive_loop", env_kwargs={"n_families": 4, "max_steps": 12},
                         episodes=80, seed=5, chosen_family=2)
    fam, ok = out["family"], out["success"]
    assert not out["escalated"].any()
    assert (fam == 2).sum() >= 5 and ok[fam == 2].any() and not ok[fam == 2].all()
    # counted from the family and success columns
    k2 = np.cumsum(ok & (fam == 2))
    n2 = np.cumsum(fam == 2)
    k, n = np.cumsum(ok), np.arange(1, fam.size + 1)
    m = (k + 0.5) / (n + 1)                       # the pooled rate: prior Beta(2m, 2(1-m))
    assert np.allclose(out["comp_chosen_a"], 2 * m + k2, rtol=0, atol=1e-12)
    assert np.allclose(out["comp_chosen_b"], 2 * (1 - m) + (n2 - k2), rtol=0, atol=1e-12)
    # the last row's weighted mean, from the counts
    arrivals = np.bincount(fam, minlength=4)
    wins = np.bincount(fam, weights=ok, minlength=4)
    a = 2 * m[-1] + wins
    b = 2 * (1 - m[-1]) + arrivals - wins
    seen = arrivals > 0
    v = arrivals[seen] / arrivals.sum()
    mu = float(np.sum(v * a[seen] / (a[seen] + b[seen])))
    assert out["comp_weighted_mean"][-1] == pytest.approx(mu, abs=1e-12)
    assert out["comp_weighted_lower"][-1] < mu < out["comp_weighted_upper"][-1]
    # family 0's posterior is another one: the columns are not family 0's
    k0 = np.cumsum(ok & (fam == 0))
    assert not np.allclose(out["comp_chosen_a"], 2 * m + k0)
    with pytest.raises(ConfigError) as err:
        run_loop_agent("no_learning", env_kwargs={"n_families": 4}, episodes=2,
                       chosen_family=4)
    assert err.value.field == "chosen_family"


# ----------------------------------------------------------------- the figures' series


def _episodes() -> pl.DataFrame:
    """One run of one variant, 6 episodes, by hand: families 1 0 1 1 0 1, the third
    escalated, a drift at episode 4."""
    n = 6
    return pl.DataFrame({
        "scenario": ["s"] * n, "variant": ["v"] * n, "run": [0] * n,
        "episode": list(range(1, n + 1)), "family": [1, 0, 1, 1, 0, 1],
        "success": [True, False, True, False, True, True],
        "escalated": [False, False, True, False, False, False],
        "drift": [False, False, False, True, False, False],
        "tokens": [10] * n, "learning_tokens": [0] * n, "poisoned": [0] * n,
        "comp_weighted_mean": [0.5] * n, "comp_weighted_lower": [0.1] * n,
        "comp_weighted_upper": [0.9] * n,
        "comp_chosen_a": [2.0, 2.0, 2.0, 2.0, 3.0, 3.0], "comp_chosen_b": [1.0] * n})


def test_the_true_success_beside_each_competence_is_rolling_over_the_own_runs():
    from dyna.experiment.kinds.agent_tasks import plots as P

    series = P._series(_episodes(), window=2, stride=1, chosen_family=0)
    w = series["competence"]
    # successes of the agent's own runs over the last 2 episodes (episode 3 escalated)
    assert w["truth"].to_list() == [1.0, 0.5, 0.0, 0.0, 0.5, 1.0]
    assert w["drift"].to_list() == [False, False, False, True, False, False]
    c = series["competence_chosen"]
    # family 0 arrived at episodes 2 (failure) and 5 (success): null before, carried after
    assert c["truth"].to_list() == [None, 0.0, 0.0, 0.0, 0.5, 0.5]
    assert c["y"].to_list() == pytest.approx([2 / 3] * 4 + [3 / 4] * 2)
    lo, hi = stats.beta.ppf([0.025, 0.975], 3.0, 1.0)
    assert (c["lo"][5], c["hi"][5]) == pytest.approx((lo, hi), abs=1e-12)
    # an episodes table from before the competence fields: one clear error
    with pytest.raises(ConfigError) as err:
        P._series(_episodes().drop("comp_chosen_a"), window=2, stride=1, chosen_family=0)
    assert err.value.field == "episodes" and "comp_chosen_a" in str(err.value)


def test_every_variant_keeps_one_colour_and_a_panel_never_repeats_one():
    from dyna.agents.loop_agents import variant_names
    from dyna.experiment.kinds.agent_tasks.figure_style import variant_color
    from dyna.experiment.kinds.agent_tasks.plots import variant_panels
    from dyna.loops import LoopConfig

    for store in ("skill", "memory"):
        names = variant_names(store) + [f"naive_loop+{s}" for s in LoopConfig.SWITCHES]
        for _, group in variant_panels(names, store):
            colours = [variant_color(v, store) for v in group]
            assert len(set(colours)) == len(colours), group
        assert variant_color(f"{store}_loop", store) == "#000000"
        assert variant_color(f"{store}_loop-no_dating", store) != \
            variant_color("naive_loop+dating", store)
    assert variant_color("some_new_variant", "skill") == variant_color("some_new_variant",
                                                                       "memory")


def test_the_safeguards_of_one_ablation_panel_differ_in_hue_not_only_in_shade():
    import colorsys
    import itertools

    from matplotlib.colors import to_rgb

    from dyna.experiment.kinds.agent_tasks.figure_style import variant_color
    from dyna.experiment.kinds.agent_tasks.plots import variant_panels
    from dyna.loops import LoopConfig

    def hue(v):
        return 360 * colorsys.rgb_to_hsv(*to_rgb(variant_color(v, "skill")))[0]

    names = ["skill_loop"] + [f"skill_loop-no_{s}" for s in LoopConfig.SWITCHES]
    panels = variant_panels(names, "skill")
    assert [len(g) for _, g in panels] == [6, 6]
    gaps = [min(min(abs(hue(a) - hue(b)), 360 - abs(hue(a) - hue(b)))
                for a, b in itertools.combinations(g[1:], 2)) for _, g in panels]
    assert [round(x) for x in gaps] == [41, 59]


def test_a_row_of_zeros_stays_off_the_axis_and_the_loop_is_drawn_on_top():
    from dyna.experiment.kinds.agent_tasks import plots as P

    lo, hi = P._limits([np.zeros(5)], "linear")
    assert (lo, hi) == pytest.approx((-0.04, 1.05))
    same = {"skill_loop-no_dating"}
    assert [P._zorder(v, "skill", same) for v in
            ("skill_loop", "skill_loop-no_dating", "skill_loop-no_grading")] == [3.0, 1.5, 2.0]
    assert P._label("skill_loop-no_dating", "skill", same) == "no_dating (= loop)"


# ----------------------------------------------------------------- dyna plot --only


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    from dyna.experiment.backends import InProcessBackend
    from dyna.experiment.registry import parse_experiment
    from dyna.experiment.runner import run_experiment

    folder = tmp_path_factory.mktemp("comp") / "o"
    cfg = {"kind": "agent_tasks", "name": "comp", "seed": 1, "runs": 1, "episodes": 40,
           "store": "skill", "variants": ["no_learning", "skill_loop"],
           "env": {"n_families": 3, "max_steps": 12}, "analysis": {"chosen_family": 1},
           "scenarios": [{"name": "drifty", "env": {"drift_at": [20]}}]}
    run_experiment(parse_experiment(cfg), folder, backend=InProcessBackend(), progress=False)
    return folder


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_plot_only_competence_writes_exactly_the_competence_png(output, capsys):
    before = _files(output)
    assert "plots/scenario_drifty.png" in before
    assert main(["plot", str(output), "--only", "competence"]) == 0
    after = _files(output)
    assert set(after) - set(before) == {"plots/competence_drifty.png"}
    assert {k: v for k, v in after.items() if k in before} == before
    assert after["plots/competence_drifty.png"][:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr()
    assert (printed.out, printed.err) == (f"{output / 'plots'}\n",
                                          f"1 plot files written to {output / 'plots'}\n")


def test_plot_only_refuses_a_name_or_a_folder_it_has_no_such_figure_for(output, tmp_path,
                                                                        capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plot", str(output), "--only", "profiles"])
    assert exit_.value.code == 2
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "nope"), "--only", "competence"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "nope").exists()


# ----------------------------------------------------------------- dyna store competence


@pytest.fixture
def db(tmp_path):
    from dyna.experience import ExperienceStore

    path = tmp_path / "s.db"
    s = ExperienceStore(path, dim=4)
    outcomes = ["success", "failure", "success", "success", "failure", "success"]
    # recorded out of time order: the path follows the timestamps
    s.record("t1", episodes=[dict(task_type="triage", action_type="x", outcome=o,
                                  reward=1.0, timestamp=1.7e9 + 3600.0 * i)
                             for i, o in reversed(list(enumerate(outcomes)))])
    s.record("t1", episodes=[dict(task_type="other", action_type="x", outcome="failure",
                                  reward=0.0, timestamp=1.7e9)])
    s.close()
    return path


def _listing(folder):
    return sorted(p.name for p in folder.iterdir()
                  if not p.name.endswith(("-wal", "-shm")))


def test_store_competence_writes_a_png_and_reports_the_final_posterior(db, tmp_path,
                                                                       capsys):
    png = tmp_path / "c.png"
    assert main(["store", "competence", str(db), "--tenant", "t1", "--task-type",
                 "triage", "--out", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # 4 successes and 2 failures under the store's uniform prior: Beta(5, 3)
    assert (out["a"], out["b"], out["n_episodes"]) == (5.0, 3.0, 6)
    lo, hi = stats.beta.ppf([0.025, 0.975], 5, 3)
    assert (out["lower"], out["upper"]) == pytest.approx((lo, hi), abs=1e-12)
    assert main(["store", "competence", str(db), "--tenant", "t1", "--task-type",
                 "triage", "--by", "time", "--out", str(tmp_path / "t.png")]) == 0
    capsys.readouterr()
    assert (tmp_path / "t.png").is_file()
    # without --out: the path after each episode, oldest first, and nothing written
    listing = _listing(tmp_path)
    assert main(["store", "competence", str(db), "--tenant", "t1", "--task-type",
                 "triage"]) == 0
    path = json.loads(capsys.readouterr().out)["path"]
    assert path["a"] == [2.0, 2.0, 3.0, 4.0, 4.0, 5.0]
    assert path["b"] == [1.0, 2.0, 2.0, 2.0, 3.0, 3.0]
    assert path["episode"] == [1, 2, 3, 4, 5, 6]
    assert _listing(tmp_path) == listing


def test_store_competence_refuses_in_one_line_and_creates_nothing(db, tmp_path, capsys):
    listing = _listing(tmp_path)
    stored = db.read_bytes()
    cases = [(["--tenant", "t9", "--task-type", "triage"], "--tenant"),
             (["--tenant", "t1", "--task-type", "nope"], "--task-type")]
    for argv, field in cases:
        rc = main(["store", "competence", str(db), *argv, "--out", str(tmp_path / "x.png")])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and field in err, argv
    for argv in ([str(tmp_path / "missing.db"), "--out", str(tmp_path / "x.png")],
                 [str(db), "--out", str(tmp_path / "no_folder" / "x.png")],
                 [str(db), "--out", str(tmp_path / "x.svg")]):
        rc = main(["store", "competence", *argv[:1], "--tenant", "t1", "--task-type",
                   "triage", *argv[1:]])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1, argv
    assert _listing(tmp_path) == listing          # no PNG, no store, no folder
    assert db.read_bytes() == stored


def test_the_weighted_band_is_a_credible_interval_by_simulation():
    """The moment-matched band against 200,000 draws of the weighted mean (a fixed seed):
    the Beta approximation's ends are within 0.01 of the simulated quantiles here."""
    a, b, w = np.array([8.0, 2.0, 30.0]), np.array([3.0, 9.0, 12.0]), np.array([5, 2, 9])
    mean, lo, hi = weighted_beta_mean(a, b, w)
    rng = np.random.default_rng(12345)
    draws = rng.beta(a, b, size=(200_000, 3)) @ (w / w.sum())
    q = np.quantile(draws, [0.025, 0.975])
    assert abs(lo - q[0]) < 0.01 and abs(hi - q[1]) < 0.01
    assert mean == pytest.approx(float(np.sum(w / w.sum() * a / (a + b))))
    assert math.isclose(float(draws.mean()), mean, abs_tol=2e-3)
