"""Each report's headline answers its experiment's question, tested by its content on small
runs: the tabular kind's steps in episode 2 and the episode at each variant's plateau, the
ablation's largest effects, inert safeguards and identical scenarios, the escalation kind's
best policy per cost setting and its cost beside always and never escalating."""

import re

import numpy as np
import polars as pl
import pytest

from dyna.experiment.backends import InProcessBackend
from dyna.experiment.registry import parse_experiment
from dyna.experiment.reporting import ci, fmt
from dyna.experiment.runner import run_experiment
from dyna.experiment.stats import per_run_ci


def _headline(report: str) -> list[str]:
    m = re.search(r"^## Headline\n\n(.*?)\n\n", report, re.S | re.M)
    assert m, report[:400]
    return m.group(1).splitlines()


def _run(tmp_path, data):
    folder = run_experiment(parse_experiment(data), tmp_path / data["name"],
                            backend=InProcessBackend(), progress=False)
    return folder, (folder / "report.md").read_text()


# ------------------------------------------------------------------------------ tabular

def test_plateau_episode_on_known_curves():
    from dyna.experiment.kinds.tabular.headline import plateau_episode

    # two identical runs: 100, 50, 20, 11, then 10 for good; plateau (last 3) = 10,
    # within 10% (<= 11) from episode 4, every resample agrees
    curve = [100, 50, 20, 11] + [10] * 6
    iv = plateau_episode(np.array([curve, curve]), 3)
    assert (float(iv.estimate), float(iv.low), float(iv.high)) == (4.0, 4.0, 4.0)
    # one run: the episode, no interval
    one = plateau_episode(np.array([curve]), 3)
    assert float(one.estimate) == 4.0 and np.isnan(float(one.low))
    # runs that differ: the mean curve 60, 35, 15.5, 10.5, 10 ... is within 10% from
    # episode 4, and the resamples choose episode 3 (the second run alone) to 5 (the first)
    a = [100, 50, 20, 20, 10, 10, 10, 10]
    b = [20, 20, 11, 1, 10, 10, 10, 10]
    iv = plateau_episode(np.array([a, b]), 4, n_resamples=400)
    assert float(iv.estimate) == 4.0
    assert (float(iv.low), float(iv.high)) == (3.0, 5.0)


FIG_8_2 = {"name": "fig82", "runs": 3, "seed": 1, "env": {"id": "dyna/DynaMaze-v0"},
           "schedule": {"episodes": 12}, "defaults": {"agent": "dyna_q"},
           "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=50", "n_planning": 50}],
           "analysis": {"final_episodes": 4, "first_episode": 2, "checks": ["figure_8_2"],
                        "n_resamples": 300}}


def test_tabular_headline_gives_episode_2_and_the_plateau(tmp_path):
    from dyna.experiment.kinds.tabular.headline import plateau_episode

    folder, report = _run(tmp_path, FIG_8_2)
    lines = _headline(report)
    assert len(lines) == 4, lines
    assert lines[0] == "- 2 variants x 3 runs on `dyna/DynaMaze-v0`, 12 episodes each."
    res = pl.read_parquet(folder / "results.parquet")
    opts = dict(statistic="mean", confidence=0.95, n_resamples=300, seed=1)
    ep2, plateau = [], []
    for v in ("n=0", "n=50"):
        g = res.filter(pl.col("variant") == v).sort("run", "episode")
        steps = g["steps"].to_numpy().reshape(3, 12).astype(float)
        ep2.append(f"{v} {ci(per_run_ci(steps[:, 1], **opts))}")
        iv = plateau_episode(steps, 4, n_resamples=300, seed=1)
        plateau.append(f"{v} {float(iv.estimate):.0f} [{float(iv.low):.0f}, "
                       f"{float(iv.high):.0f}]")
    assert lines[1] == f"- steps in episode 2 (mean [95% CI]): {'; '.join(ep2)}."
    assert lines[2] == ("- at its plateau (within 10% of its mean over episodes 9-12) from "
                        f"episode: {'; '.join(plateau)}.")
    # planning learns the maze from one episode: n = 50 needs far fewer steps in episode 2
    n0, n50 = (float(x.split(" ")[1]) for x in ep2)
    assert n50 < n0
    # 12 episodes: the book's episode-2 checks only (the plateau checks need 40)
    assert lines[3].startswith("- checks against the book: 2 consistent, 0 not; against "
                               "the reference implementation ")
    # the final-performance table names its window
    assert "| variant | steps/episode, episodes 9-12 |" in report


def test_tabular_headline_of_a_changing_maze_gives_the_reward_gap(tmp_path):
    data = {"name": "block", "runs": 2, "seed": 0,
            "env": {"id": "dyna/BlockingMaze-v0", "kwargs": {"change_at": 200}},
            "schedule": {"total_steps": 400}, "defaults": {"n_planning": 5},
            "variants": [{"name": "Dyna-Q", "agent": "dyna_q"},
                         {"name": "Dyna-Q+", "agent": "dyna_q_plus"}],
            "analysis": {"metrics": ["cumulative_reward"], "n_resamples": 200}}
    folder, report = _run(tmp_path, data)
    lines = _headline(report)
    res = pl.read_parquet(folder / "results.parquet").filter(pl.col("step") == 400)
    opts = dict(statistic="mean", confidence=0.95, n_resamples=200, seed=0)
    finals = [f"{v} {ci(per_run_ci(res.filter(pl.col('variant') == v).sort('run')['cumulative_reward'].to_numpy().astype(float), **opts))}"  # noqa: E501
              for v in ("Dyna-Q", "Dyna-Q+")]
    assert lines[1] == f"- cumulative reward at step 400: {'; '.join(finals)}."
    assert lines[2].startswith("- Dyna-Q+ minus Dyna-Q: ")
    assert lines[2].endswith("book: Dyna-Q+ ahead).")


# ---------------------------------------------------------------------------- escalation

ESCALATION = {"kind": "escalation", "name": "hl_cost", "runs": 3, "seed": 2,
              "risk_classes": ["low_stakes", "high_stakes"], "feedback": ["full"],
              "scenarios": [{"name": "flat", "rates": [0.3, 0.95], "steps": 300}],
              "variants": [{"name": "never", "rule": "never"},
                           {"name": "always", "rule": "always"},
                           {"name": "mean", "rule": "mean"}],
              "analysis": {"n_resamples": 200, "svg": False, "checkpoints": 5}}


def test_escalation_headline_names_the_best_policy_and_its_cost(tmp_path):
    folder, report = _run(tmp_path, ESCALATION)
    lines = _headline(report)
    assert len(lines) == 3 and max(len(line) for line in lines) <= 160, lines
    assert lines[0] == ("- 3 policies x 2 risk classes x 1 scenario/feedback setting x 3 runs; "
                        "regret over tasks: `plots/regret_flat_full.png`.")
    runs = pl.read_parquet(folder / "runs.parquet").with_columns(
        (pl.col("total_cost") / pl.col("steps")).alias("per_task"))
    opts = dict(statistic="mean", confidence=0.95, n_resamples=200, seed=2)
    expected = []
    for st in ("low_stakes", "high_stakes"):
        g = runs.filter(pl.col("cost_setting") == st)
        per = {v: g.filter(pl.col("variant") == v).sort("run")["per_task"].to_numpy()
               for v in ("never", "always", "mean")}
        best = min(per, key=lambda v: per[v].mean())
        # two types at 0.3 and 0.95: learning which to escalate beats both fixed rules
        assert best == "mean"
        others = ", ".join(f"{r} {fmt(per[r].mean())}" for r in ("always", "never"))
        expected.append(f"{st}: `mean` {ci(per_run_ci(per['mean'], **opts))} ({others})")
    assert lines[1] == f"- lowest cost per task (95% CI over runs) at {expected[0]}."
    assert lines[2] == f"- {expected[1]}."
    # the detail (wins of always escalating, unseparated winners) opens the per-setting part
    body = report.split("## Lowest regret per cost setting")[1]
    assert ("- Always escalating is (tied) best in 0 of 2 scenario/feedback/cost settings."
            in body)
    # at high stakes the runner-up's paired gap interval reaches 0 (3 runs)
    assert ("- The lowest regret is not separated from the runner-up's (paired 95% interval "
            "of the gap reaches 0) in: flat/full/high_stakes.") in body


# ----------------------------------------------------------------------------- ablation

def _ablation(store: str) -> dict:
    return {"kind": "agent_tasks", "name": f"hl_abl_{store}", "runs": 2, "episodes": 40,
            "seed": 0, "store": store, "variants": "all",
            "env": {"n_families": 3, "n_tools": 6, "max_steps": 12},
            "scenarios": [{"name": "clean"},
                          {"name": "noisy", "env": {"false_success_rate": 0.3}}],
            "analysis": {"final_window": 10, "n_resamples": 200, "late_from": 21,
                         "tokens_window": 10}}


@pytest.fixture(scope="module")
def skill_ablation(tmp_path_factory):
    """A small full ablation's folder and report (the report alone: its plots are
    tests/test_plots_show.py's)."""
    from dyna.experiment.kinds.agent_tasks.kind import AgentTasksKind

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AgentTasksKind, "render",
                   lambda self, out, folder: [self.write_report(out, folder)])
        return _run(tmp_path_factory.mktemp("abl"), _ablation("skill"))


def test_ablation_headline_names_inert_safeguards_and_identical_scenarios(skill_ablation):
    from dyna.loops import LoopConfig

    folder, report = skill_ablation
    lines = _headline(report)
    assert 4 <= len(lines) <= 5, lines
    assert lines[0] == "- 18 variants x 2 scenarios x 2 runs x 40 episodes, skill store."
    runs = pl.read_parquet(folder / "runs.parquet")
    loop = runs.filter(pl.col("variant") == "skill_loop")
    never = sorted(sw for sw in LoopConfig.SWITCHES if int(loop[f"acted_{sw}"].sum()) == 0)
    assert never, "the small run should leave some safeguard unused"
    inert = next(x for x in lines if x.startswith("- never acted"))
    assert inert == (f"- never acted in any scenario ({len(never)} safeguards, their "
                     "ablations repeat the full loop's runs): "
                     + ", ".join(f"`{sw}`" for sw in never) + ".")
    # which variants give the same runs in `noisy` as in `clean`, counted independently
    cols = [c for c in runs.columns if c != "scenario"]
    same = sum(runs.filter((pl.col("scenario") == "noisy") & (pl.col("variant") == v))
               .sort("run").select(cols).equals(
                   runs.filter((pl.col("scenario") == "clean") & (pl.col("variant") == v))
                   .sort("run").select(cols))
               for v in runs["variant"].unique())
    # as in the shipped ablation (17 of 18 variants there too)
    assert same == 17
    assert lines[-1] == ("- `noisy` is bit-identical to `clean` for 17 of 18 variants "
                         "(every per-run result: the scenario's setting changed nothing for "
                         "them).")


def test_ablation_headline_gives_the_largest_effect_per_scenario(skill_ablation):
    from dyna.experiment.kinds.agent_tasks.ablation_report import largest_effects
    from dyna.experiment.kinds.agent_tasks.analysis import exploratory_cells
    from dyna.experiment.runner import load_output

    folder, report = skill_ablation
    out = load_output(folder)
    runs = out.tables["runs"]
    cells = exploratory_cells(out.config, runs)
    effects = largest_effects(out.config, runs, cells)
    line = next(x for x in _headline(report) if x.startswith("- safeguard that matters"))
    assert line == (
        "- safeguard that matters most, per scenario: `clean`, `noisy`: "
        "approval_for_untrusted (off: tokens per success -817.7 "
        "[-918.9, -716.4] from the loop's 2725.2, d_z -5.71). Ranked by d_z (the mean paired "
        "difference, no_X minus the full loop, over its standard deviation) among effects "
        "whose 95% CI excludes 0.")
    for s, (switch, metric, iv, d_z, base) in effects.items():
        loop = runs.filter((pl.col("scenario") == s) & (pl.col("variant") == "skill_loop"))
        off = runs.filter((pl.col("scenario") == s)
                          & (pl.col("variant") == f"skill_loop-no_{switch}"))
        d = off.sort("run")[metric].to_numpy() - loop.sort("run")[metric].to_numpy()
        assert float(iv.estimate) == pytest.approx(float(np.mean(d)))
        assert d_z == pytest.approx(float(np.mean(d) / np.std(d, ddof=1)))
        assert base == pytest.approx(float(loop[metric].mean()))
        assert f"{switch} (off: " in line and f"d_z {fmt(d_z)})" in line
        # no other ranked cell of the scenario has a larger |d_z|
        ranked = [abs(c.d_z) for c in cells if c.scenario == s and c.tested
                  and np.isfinite(c.d_z) and (c.interval.low > 0 or c.interval.high < 0)]
        assert abs(d_z) == max(ranked)
    assert len(effects) >= 1


def test_the_largest_effect_is_standardised_not_relative_to_a_zero_mean():
    """A rare metric going from 0 to 0.8 incidents is infinitely large relative to the
    loop's mean of 0 (the rule the headline must not use); ranked by d_z, the steady drop
    in success wins, and a difference with no spread (d_z undefined) is not ranked."""
    from types import SimpleNamespace

    from dyna.experiment.kinds.agent_tasks.ablation_report import largest_effects
    from dyna.experiment.kinds.agent_tasks.analysis import compare

    loop, off = "memory_loop", "memory_loop-no_dating"
    table = {
        "incidents": ([0.0] * 5, [1.0, 0.0, 1.0, 1.0, 1.0]),
        "final_success": ([0.80, 0.82, 0.79, 0.81, 0.80], [0.60, 0.61, 0.58, 0.62, 0.60]),
        "tokens_per_success": ([100.0, 110.0, 120.0, 130.0, 140.0],
                               [150.0, 160.0, 170.0, 180.0, 190.0]),
    }
    runs = pl.DataFrame({"scenario": ["drift"] * 10, "variant": [loop] * 5 + [off] * 5,
                         "run": list(range(5)) * 2,
                         **{m: a + b for m, (a, b) in table.items()}})
    cells = [compare(runs, "drift", off, loop, m, store="memory", inert={}, seed=0)
             for m in table]
    assert [c.status for c in cells] == ["tested"] * 3
    assert cells[0].interval.low > 0 and cells[0].d_z == pytest.approx(0.8 / np.sqrt(0.2))
    assert cells[2].interval.low == 50 and np.isnan(cells[2].d_z)
    effects = largest_effects(SimpleNamespace(store="memory"), runs, cells)
    assert list(effects) == ["drift"]
    got = effects["drift"]
    assert (got.switch, got.metric) == ("dating", "final_success")
    assert float(got.interval.estimate) == pytest.approx(-0.202)
    assert got.d_z == pytest.approx(-0.202 / np.std([-0.2, -0.21, -0.21, -0.19, -0.2], ddof=1))
    assert got.base == pytest.approx(0.804)
    # without the success cell, the incidents are ranked by their d_z, never dropped
    assert largest_effects(SimpleNamespace(store="memory"), runs, cells[::2])["drift"] \
        .metric == "incidents"


def test_ablation_tables_name_windows_and_split_by_question(skill_ablation):
    _, report = skill_ablation
    clean = report[report.index("## Scenario `clean`"):report.index("## Scenario `noisy`")]
    assert re.findall(r"^### (.+)$", clean, re.M) == ["Does it learn?", "At what cost?",
                                                      "Is it safe?"]
    assert ("| variant | final success rate, episodes 31-40 | success rate, episodes 21-40 "
            "| recovery (episodes) |") in clean
    assert "| tokens per success, episodes 31-40 |" in clean
    assert "## Agent tasks v3 metrics" in report
    assert "late_from" not in report and "tokens_window" not in report
    assert "| catalog tokens per episode, episodes 31-40 |" in report
    # the oracle succeeds in every run alike: one number per cell, no IQM
    row = next(x for x in clean.splitlines() if x.startswith("| `oracle` |"))
    assert "IQM" not in row.split(" | ")[1]


def test_a_partial_ablation_keeps_the_agent_tasks_headline(tmp_path):
    from dyna.experiment.kinds.agent_tasks.ablation_report import is_full_ablation

    data = {**_ablation("skill"), "variants": ["no_learning", "skill_loop",
                                               "skill_loop-no_dating"]}
    assert not is_full_ablation(parse_experiment(data))
    assert is_full_ablation(parse_experiment(_ablation("memory")))


def test_a_sweep_headline_gives_each_variant_its_range_over_the_points():
    from dyna.experiment.kinds.tabular.headline import _named

    entries = [("n=0", {"alpha": 0.1}, "500 [400, 600]", 500.0),
               ("n=0", {"alpha": 0.5}, "500 [400, 600]", 500.0),
               ("n=5", {"alpha": 0.1}, "7 [3, 7]", 7.0),
               ("n=5", {"alpha": 0.5}, "7 [5, 9]", 7.0),
               ("n=50", {"alpha": 0.1}, "41 [29, 53]", 41.0),
               ("n=50", {"alpha": 0.5}, "37.5 [29, 46]", 37.5)]
    assert _named(entries) == ("n=0 500 [400, 600] at every sweep point; n=5 7 at every "
                               "sweep point; n=50 37.5 [29, 46] (alpha=0.5) to 41 [29, 53] "
                               "(alpha=0.1)")
    assert _named([("a", {}, "1 [0, 2]", 1.0), ("b", {}, "3 [2, 4]", 3.0)]) == \
        "a 1 [0, 2]; b 3 [2, 4]"


def test_plateau_of_a_variant_with_no_finished_run_is_nan_without_a_warning():
    """Every run of a variant failed (a backend gave up on its jobs): no curve, so no
    plateau episode and no interval; numpy is never asked for the mean of nothing."""
    import warnings

    import numpy as np

    from dyna.experiment.kinds.tabular.headline import plateau_episode

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        iv = plateau_episode(np.zeros((0, 50)), 10)
    assert iv.n == 0 and all(np.isnan(float(v)) for v in (iv.estimate, iv.low, iv.high))
