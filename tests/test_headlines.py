"""Each report's headline answers its experiment's question, tested by its content on small
runs: the tabular kind's steps in episode 2 and the episode at each variant's plateau, the
ablation's safeguard that matters most per scenario (success, then tokens per success, as
a share of the full loop), inert safeguards and identical scenarios, the escalation kind's
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
    assert len(lines) == 5 and max(map(len, lines)) <= 160, lines
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
    assert lines[3] == "- checks against the book: 2 of 2 consistent."
    assert lines[4] == ("- reference implementation: 0 of 2 summaries differ (Welch, Holm "
                        "0.05).")
    # the run's setup sits under its own heading, not among the headline's lines
    assert "\n\n## Setup\n\n- config sha256: `" in report
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
    from dyna.experiment.kinds.agent_tasks.ablation_report import LINE
    from dyna.loops import LoopConfig

    folder, report = skill_ablation
    lines = _headline(report)
    assert len(lines) == 5 and max(map(len, lines)) <= LINE == 160, lines
    assert lines[0] == ("- 18 variants x 2 scenarios x 2 runs x 40 episodes, skill store; no "
                        "primary hypotheses declared.")
    runs = pl.read_parquet(folder / "runs.parquet")
    loop = runs.filter(pl.col("variant") == "skill_loop")
    never = sorted(sw for sw in LoopConfig.SWITCHES if int(loop[f"acted_{sw}"].sum()) == 0)
    assert len(never) == 7, "the small run should leave 7 safeguards unused"
    assert lines[3] == (f"- never acted in any scenario ({len(never)} safeguards): "
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
    assert lines[4] == "- `noisy` is bit-identical to `clean` for 17 of 18 variants."
    assert ("\n`noisy` gives the same per-run results as `clean`, bit for bit, for 17 of 18 "
            "variants: its setting changed nothing for them.\n") in report


def _paired(runs, s, variant, metric):
    def one(v):
        return runs.filter((pl.col("scenario") == s) & (pl.col("variant") == v)).sort("run")
    return (one(variant)[metric].to_numpy() - one("skill_loop")[metric].to_numpy(),
            float(one("skill_loop")[metric].mean()))


def test_ablation_headline_ranks_success_then_tokens_by_their_share(skill_ablation):
    """No safeguard separates on success at 2 runs, so each scenario is ranked on tokens
    per success, by the mean paired difference as a share of the full loop's mean."""
    from dyna.experiment.kinds.agent_tasks.ablation_report import largest_effects
    from dyna.experiment.kinds.agent_tasks.analysis import exploratory_cells
    from dyna.experiment.runner import load_output

    folder, report = skill_ablation
    out = load_output(folder)
    runs = out.tables["runs"]
    cells = exploratory_cells(out.config, runs)
    lines = _headline(report)
    assert lines[1] == ("- matters most for final success: none separated from 0 at 2 runs "
                        "in any scenario.")
    assert lines[2] == ("- else, for tokens per success (off vs full loop, 95% CI): "
                        "`approval_for_untrusted` -30% [-34%, -26%] in every scenario.")
    assert not any(c.metric == "final_success" and c.tested
                   and (c.interval.low > 0 or c.interval.high < 0) for c in cells)
    effects = largest_effects(out.config, runs, cells)
    assert sorted(effects) == ["clean", "noisy"]
    for s, e in effects.items():
        d, base = _paired(runs, s, "skill_loop-no_approval_for_untrusted",
                          "tokens_per_success")
        assert (e.switch, e.metric) == ("approval_for_untrusted", "tokens_per_success")
        assert float(e.interval.estimate) == pytest.approx(float(np.mean(d))) \
            == pytest.approx(-817.7, abs=0.05)
        assert e.base == pytest.approx(base) == pytest.approx(2725.2, abs=0.05)
        assert e.share[0] == pytest.approx(np.mean(d) / base) == pytest.approx(-0.30, abs=0.005)
        # no other separated tokens cell of the scenario is larger as a share
        shares = [abs(float(c.interval.estimate)) / base for c in cells
                  if c.scenario == s and c.metric == "tokens_per_success" and c.tested
                  and (c.interval.low > 0 or c.interval.high < 0)]
        assert abs(e.share[0]) == pytest.approx(max(shares))
    # the body's table says it in the outcome's units
    assert ("| `clean` | tokens per success | `approval_for_untrusted` | -817.7 [-918.9, "
            "-716.4] | -30% [-34%, -26%] | 2725.2 |") in report
    assert ("| `clean` | final success rate, episodes 31-40 | none separated from 0 at 2 "
            "runs |  |  |  |") in report


def _synthetic(table: dict, runs_n: int = 5, scenarios: dict | None = None):
    """A runs table of the memory loop and two ablations, their comparisons and a config
    for them: ``table`` maps metric -> (loop, no_dating, no_grading) runs of the scenario
    `drift`, ``scenarios`` other scenarios' tables alike."""
    from types import SimpleNamespace

    from dyna.experiment.kinds.agent_tasks.analysis import compare

    variants = ("memory_loop", "memory_loop-no_dating", "memory_loop-no_grading")
    scenarios = {"drift": table, **(scenarios or {})}
    runs = pl.concat([pl.DataFrame({
        "scenario": [s] * 3 * runs_n, "variant": [v for v in variants for _ in range(runs_n)],
        "run": list(range(runs_n)) * 3,
        **{m: [x for col in cols for x in col] for m, cols in t.items()}})
        for s, t in scenarios.items()])
    cells = [compare(runs, s, v, "memory_loop", m, store="memory", inert={}, seed=0)
             for s in scenarios for v in variants[1:] for m in table]
    cfg = SimpleNamespace(store="memory", scenarios=[(s, {}) for s in scenarios], runs=runs_n,
                          variants=variants, analysis={"confidence": 0.95})
    return cfg, runs, cells


def test_the_largest_effect_is_its_share_of_the_full_loop_not_its_d_z():
    """28 tokens of 1,747 with almost no spread over runs (d_z about -79) ranks below 300
    tokens that vary (d_z about -3.8); a success drop separated from 0 is named before any
    cost, however small; a success drop whose interval holds 0 is not."""
    from dyna.experiment.kinds.agent_tasks.ablation_report import (ablation_lines,
                                                                   largest_effects,
                                                                   separated_effects)

    loop_tokens = [1747.0] * 5
    table = {"tokens_per_success": (loop_tokens,
                                    [1719.0, 1718.5, 1719.5, 1719.0, 1719.0],   # dating
                                    [1547.0, 1347.0, 1447.0, 1497.0, 1397.0]),  # grading
             "final_success": ([0.8] * 5, [0.80, 0.81, 0.79, 0.80, 0.80],
                               [0.7, 0.9, 0.75, 0.85, 0.8])}
    cfg, runs, cells = _synthetic(table)
    tiny, large = cells[0], cells[2]
    assert (tiny.variant, large.variant) == ("memory_loop-no_dating", "memory_loop-no_grading")
    assert abs(tiny.d_z) > 50 > 10 > abs(large.d_z) > 3
    assert tiny.interval.high < 0 and large.interval.high < 0
    got = largest_effects(cfg, runs, cells)["drift"]
    assert (got.switch, got.metric) == ("grading", "tokens_per_success")
    assert got.share[0] == pytest.approx(-300 / 1747)
    assert got.share[1:] == pytest.approx((float(large.interval.low) / 1747,
                                           float(large.interval.high) / 1747))
    assert separated_effects(cfg, runs, cells, "final_success") == {}
    assert ablation_lines(cfg, runs, cells) == [
        "- matters most for final success: none separated from 0 at 5 runs in any scenario.",
        "- else, for tokens per success (off vs full loop, 95% CI): `grading` "
        f"-17% [{got.share[1] * 100:.0f}%, {got.share[2] * 100:.0f}%] in `drift`."]

    # a 2-point success drop that every run shows is named first, over the 17% in tokens
    table["final_success"] = ([0.8] * 5, [0.78, 0.79, 0.78, 0.77, 0.78],
                              [0.7, 0.9, 0.75, 0.85, 0.8])
    cfg, runs, cells = _synthetic(table)
    got = largest_effects(cfg, runs, cells)["drift"]
    assert (got.switch, got.metric) == ("dating", "final_success")
    assert got.share[0] == pytest.approx(-0.02 / 0.8)
    lines = ablation_lines(cfg, runs, cells)
    assert len(lines) == 1 and lines[0].startswith(
        "- matters most for final success (off vs full loop, 95% CI): `dating` -2.5% [")

    # nothing separates: one line says so
    flat = {m: (a, a, a) for m, (a, _, _) in table.items()}
    cfg, runs, cells = _synthetic(flat)
    assert largest_effects(cfg, runs, cells) == {}
    assert ablation_lines(cfg, runs, cells) == [
        "- matters most for final success, then tokens per success: none separated from 0 "
        "at 5 runs in any scenario."]


def test_scenarios_that_share_the_answer_are_grouped():
    """One safeguard that matters in several scenarios is one clause: its range of effects
    and the span of their intervals, and "the other N scenarios" when it covers every
    scenario the success line left."""
    from dyna.experiment.kinds.agent_tasks.ablation_report import ablation_lines

    flat = [0.8] * 5
    loop = [1000.0] * 5
    success_drop = {"final_success": (flat, [0.7, 0.72, 0.7, 0.71, 0.7], flat),
                    "tokens_per_success": (loop, loop, loop)}

    def tokens_up(by):
        return {"final_success": (flat, flat, flat),
                "tokens_per_success": (loop, loop, [1000.0 + by + d for d in (-5, 5, 0, 0, 0)])}

    cfg, runs, cells = _synthetic(success_drop, scenarios={"clean": tokens_up(100),
                                                           "noisy": tokens_up(100),
                                                           "volume": tokens_up(200),
                                                           "quiet": tokens_up(0)})
    lines = ablation_lines(cfg, runs, cells)
    # 0.094 of 0.8 lower without dating
    assert lines[0] == ("- matters most for final success (off vs full loop, 95% CI): `dating` "
                        "-12% [-13%, -11%] in `drift`.")
    # grading adds 100 tokens of 1,000 in clean and noisy, 200 in volume; the intervals
    # run from 97 (clean) to 203 (volume)
    spans = [(float(c.interval.low), float(c.interval.high)) for c in cells
             if c.variant == "memory_loop-no_grading" and c.metric == "tokens_per_success"
             and c.scenario in ("clean", "noisy", "volume")]
    assert (min(lo for lo, _ in spans), max(hi for _, hi in spans)) == (97.0, 203.0)
    assert lines[1] == ("- else, for tokens per success: `grading` +10% to +20% (CIs in "
                        "[9.7%, 20%]) in `clean`, `noisy`, `volume`; none separated from 0 at "
                        "5 runs in `quiet`.")
    # `quiet` too repeats `clean` for the loop and no_dating: in the body
    assert lines[2] == ("- `noisy` is bit-identical to `clean` for 3 of 3 variants; `volume` "
                        "is bit-identical to `clean` for 2 of 3 variants; 1 more below.")
    assert len(lines) == 3 and max(map(len, lines)) <= 160
    # the same safeguard everywhere the success line left: said in a few words
    cfg, runs, cells = _synthetic(success_drop, scenarios={"clean": tokens_up(100),
                                                           "noisy": tokens_up(100)})
    assert ablation_lines(cfg, runs, cells)[1].startswith(
        "- else, for tokens per success: `grading` +10% [")
    assert ablation_lines(cfg, runs, cells)[1].endswith("] in the other 2 scenarios.")


def test_a_long_headline_line_keeps_within_160_characters():
    from dyna.experiment.kinds.agent_tasks.ablation_report import fit_line

    items = [f"`scenario_number_{i}`" for i in range(12)]
    line = fit_line("- never acted in any scenario (12 safeguards): ", items, sep=", ",
                    more="{} more (What each safeguard did)")
    # a fourth name would make it 164 characters
    assert line == ("- never acted in any scenario (12 safeguards): `scenario_number_0`, "
                    "`scenario_number_1`, `scenario_number_2`, 9 more (What each safeguard "
                    "did).")
    assert len(line) == 143
    assert fit_line("- a: ", ["x", "y"]) == "- a: x; y."
    # items left out are named in brief when that fits, else counted
    long = ["`retire_on_contradiction` -47% [-68%, -25%] in `injection`",
            "`outcome_gate` -5.4% to -4.6% (CIs in [-6.7%, -4.0%]) in `clean`, "
            "`noisy_self_assessment`, `volume`"]
    head = "- matters most for final success (off vs full loop, 95% CI): "
    assert fit_line(head, long, brief=["`retire_on_contradiction` (1 scenario)",
                                       "`outcome_gate` (3 scenarios)"]) == (
        head + long[0] + "; also `outcome_gate` (3 scenarios).")
    assert fit_line(head, long, brief=["", "`outcome_gate` in `clean`, "
                                           "`noisy_self_assessment`, `volume`"]) == (
        head + long[0] + "; 1 more in the table below.")


def _hypothesis(name: str, variant: str = "a", versus: str = "b", scenario: str = "base",
                metric: str = "late_success", direction: str = "greater"):
    """A one-comparison sign hypothesis as the headline reads it."""
    from types import SimpleNamespace

    return SimpleNamespace(name=name, test="sign", scenario=scenario,
                           components=lambda: [(variant, versus, metric, direction)])


def test_the_calibrated_headline_counts_verdicts_and_names_the_smaller_side():
    from types import SimpleNamespace

    from dyna.experiment.calibration_stats import NO_EFFECT, NOT_TESTABLE
    from dyna.experiment.kinds.agent_tasks.headline import headline as _headline

    cfg = SimpleNamespace(variants=["a"], scenarios=[("base", {})], runs=2, episodes=10,
                          store="skill", sweeps=(), analysis={"confidence": 0.95})
    runs = pl.DataFrame({"variant": ["a"], "scenario": ["base"]})
    checked = [SimpleNamespace(passed=True, name="c"), SimpleNamespace(passed=False, name="d")]

    def head(*verdicts):
        results = [SimpleNamespace(verdict=v, comparisons=(), hypothesis=_hypothesis(
            f"h{i}: " + "a long claim about a safeguard " * 4, f"v{i}")) for i, v in
            enumerate(verdicts)]
        lines = _headline(cfg, runs, results, checked)
        assert lines[:2] == ["## Headline", ""] and lines[-1] == ""
        assert len(lines) - 3 <= 5 and all(len(x) <= 160 for x in lines)
        return lines[2:-1]

    assert head("holds") == ["- checks 1 of 2 pass; hypotheses (1, Holm): 1 holds; failing: d.",
                             "- 1 variants x 1 scenarios x 2 runs x 10 episodes, skill store."]
    three = head("holds", "holds", NOT_TESTABLE, "does not hold")
    assert three[0] == ("- checks 1 of 2 pass; hypotheses (4, Holm): 2 hold, 1 does not hold, "
                        "1 not testable; failing: d.")
    # most hold: the others are named, cut to fit, in the order declared
    assert three[1] == ("- not testable: h2: a long claim about a safeguard a long claim about "
                        "a safeguard a long claim about a safeguard a [...]; also one does not "
                        "hold.")
    few = head("holds", "does not hold", "does not hold", NO_EFFECT)
    assert few[0].endswith("1 holds, 2 do not hold, 1 shows no effect as large as its smallest "
                           "effect of interest; failing: d.")
    assert few[1].startswith("- holds: h0: a long claim")   # the smaller side: what holds
    # a failing check is named on the checks line
    failing = [SimpleNamespace(passed=True, name="a"),
               SimpleNamespace(passed=False, name="retirement acts on a tool drift")]
    results = [SimpleNamespace(verdict="holds", comparisons=(), hypothesis=_hypothesis("h"))]
    assert _headline(cfg, runs, results, failing)[2] == (
        "- checks 1 of 2 pass; hypotheses (1, Holm): 1 holds; failing: retirement acts on a "
        "tool drift.")
    # one name alone may fill the line
    one = head("holds", "holds", NO_EFFECT)
    assert one[1] == ("- negligible (TOST): h2: " + "a long claim about a safeguard " * 4
                      ).rstrip() + "."


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
    # "at every sweep point" said once, before the variants it is true of
    assert _named(entries) == ["n=50 37.5 [29, 46] (alpha=0.5) to 41 [29, 53] (alpha=0.1)",
                               "the same at every sweep point: n=0 500 [400, 600]", "n=5 7"]
    assert _named([("a", {}, "1 [0, 2]", 1.0), ("b", {}, "3 [2, 4]", 3.0)]) == \
        ["a 1 [0, 2]", "b 3 [2, 4]"]


def test_a_headline_line_keeps_within_160_characters_and_counts_the_rest():
    from dyna.experiment.kinds.tabular.headline import fit

    items = [f"variant-{i} 123.4 [100.0, 150.0]" for i in range(8)]
    text = fit("- steps in episode 2 (mean [95% CI]): ", items)
    assert text == ("- steps in episode 2 (mean [95% CI]): " + "; ".join(items[:3])
                    + "; and 5 more.")
    assert len(text) == 145      # a fourth item would pass 160
    assert fit("- checks against the book: 2 of 2 consistent", []) == \
        "- checks against the book: 2 of 2 consistent."


def test_the_checks_lines_name_what_is_not_consistent_and_what_differs():
    from dyna.experiment.kinds.tabular.headline import _checks_lines

    checks = ["- n=0: episode 2 takes 521.5 steps (book: several hundred; consistent at 200 "
              "or more) -> consistent",
              "- n=0: episodes 41-50 average 20.1 steps (book: 14 optimal steps plus "
              "exploration, about 15-18; consistent within 14-20) -> NOT consistent",
              "- ratio Dyna-Q / prioritized sweeping per size: 7.46, 3.92 (book: 'often by a "
              "factor of 5 to 10') -> partly consistent with the book's range",
              "| summary | ours | reference | difference | Welch p | Holm p | verdict | "
              "TOST p (Holm) | equivalence |",
              "| n = 0, steps in episode 2 | 1 | 1 | 0 | 0.9 | 1 | no difference detected "
              "| - | - |",
              "| n = 0, mean steps per episode, episodes 41-50 | 1 | 1 | 0 | 0.001 | 0.003 | "
              "**differs** | 1 | equivalence not shown |",
              "| n = 5, mean steps per episode, episodes 41-50 | 1 | 1 | 0 | 0.5 | 1 | "
              "no difference detected | 0.01 | equivalent |"]
    assert _checks_lines(checks) == [
        # both named would pass 160 characters: the second is counted
        "- checks against the book: 1 of 3 consistent; not: n=0 episodes 41-50 average 20.1 "
        "steps (needs: within 14-20); and 1 more.",
        "- reference implementation: 1 of 3 summaries differ (Welch, Holm 0.05): n = 0, mean "
        "steps per episode, episodes 41-50; 1 of 2 shown equivalent (TOST)."]
    assert _checks_lines([]) == []


def test_a_sweep_headline_answers_final_steps_against_the_swept_value(tmp_path):
    data = {"name": "swp", "runs": 2, "seed": 0, "env": {"id": "dyna/DynaMaze-v0"},
            "schedule": {"episodes": 6}, "defaults": {"agent": "dyna_q"},
            "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=5", "n_planning": 5}],
            "sweep": {"alpha": [0.1, 0.5]},
            "analysis": {"final_episodes": 3, "n_resamples": 200}}
    folder, report = _run(tmp_path, data)
    lines = _headline(report)
    assert len(lines) == 4 and max(map(len, lines)) <= 160, lines
    assert lines[0] == ("- 2 variants x 2 sweep points x 2 runs on `dyna/DynaMaze-v0`, "
                        "6 episodes each.")
    assert lines[1] == ("- final steps per episode (episodes 4-6, mean [95% CI]) at alpha "
                        "= 0.1, 0.5:")
    res = pl.read_parquet(folder / "results.parquet").filter(pl.col("episode") >= 4)
    opts = dict(statistic="mean", confidence=0.95, n_resamples=200, seed=0)
    for line, v in zip(lines[2:], ("n=0", "n=5")):
        cells = []
        for a in (0.1, 0.5):
            per = (res.filter((pl.col("variant") == v) & (pl.col("alpha") == a))
                   .group_by("run").agg(pl.col("steps").cast(pl.Float64).mean())
                   .sort("run")["steps"].to_numpy())
            cells.append(ci(per_run_ci(per, **opts)))
        want = (f"{cells[0]} at every alpha." if cells[0] == cells[1]
                else "; ".join(cells) + ".")
        assert line == f"- {v}: {want}"


def test_a_greedy_evaluation_headline_leads_with_its_last_score(tmp_path):
    data = {"name": "fl", "runs": 2, "seed": 0,
            "env": {"id": "FrozenLake", "kwargs": {"map_name": "4x4", "is_slippery": True}},
            "schedule": {"episodes": 40, "eval_every": 20, "eval_episodes": 10},
            "defaults": {"alpha": 0.1, "q_init": 1.0},
            "variants": [{"name": "Q-learning", "agent": "q_learning"},
                         {"name": "Dyna-Q", "agent": "dyna_q", "n_planning": 5}],
            "analysis": {"metrics": ["eval_score"], "final_episodes": 10,
                         "n_resamples": 200}}
    folder, report = _run(tmp_path, data)
    lines = _headline(report)
    assert len(lines) == 3 and max(map(len, lines)) <= 160, lines
    opts = dict(statistic="mean", confidence=0.95, n_resamples=200, seed=0)
    ev = pl.read_parquet(folder / "evals.parquet").filter(pl.col("episode") == 40)
    res = pl.read_parquet(folder / "results.parquet").filter(pl.col("episode") >= 31)
    scores, returns = [], []
    for v in ("Q-learning", "Dyna-Q"):
        s = ev.filter(pl.col("variant") == v).sort("run")["score"].to_numpy()
        r = (res.filter(pl.col("variant") == v).group_by("run")
             .agg(pl.col("return").cast(pl.Float64).mean()).sort("run")["return"].to_numpy())
        scores.append(f"{v} {ci(per_run_ci(s, **opts))}")
        returns.append(f"{v} {ci(per_run_ci(r, **opts))}")
    assert lines[1] == f"- greedy evaluation at episode 40 (mean [95% CI]): {'; '.join(scores)}."
    assert lines[2] == ("- training return, episodes 31-40 (mean [95% CI]): "
                        f"{'; '.join(returns)}.")
    assert "steps in episode 2" not in report.split("## Setup")[0]


def test_the_ratio_of_means_has_a_bootstrap_interval():
    from dyna.experiment.kinds.tabular.headline import ratio_ci

    iv = ratio_ci([10.0, 30.0], [5.0, 5.0], n_resamples=400)
    # mean 20 / 5 = 4; the resampled means of a are 10, 20 or 30 (b is constant)
    assert float(iv.estimate) == 4.0 and iv.n == 2
    assert (float(iv.low), float(iv.high)) == (2.0, 6.0)
    one = ratio_ci([10.0], [5.0, 6.0])
    assert float(one.estimate) == 10 / 5.5       # one run of a: no interval
    assert np.isnan(float(one.low)) and np.isnan(float(one.high))


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


def _result(verdict: str, name: str, versus: str, interval=None, direction: str = "greater",
            variant: str = "skill_loop"):
    """A measured one-comparison hypothesis: ``variant - versus`` on late success in
    ``base``, with ``interval`` = (estimate, low, high) when it was tested."""
    from types import SimpleNamespace

    from dyna.experiment.kinds.agent_tasks.analysis import Comparison
    from dyna.experiment.stats import Interval

    iv = None if interval is None else Interval(*(np.array(x) for x in interval), n=10)
    c = Comparison("base", variant, versus, "late_success", direction,
                   "tested" if iv is not None else "too few pairs", 10, iv)
    return SimpleNamespace(verdict=verdict, comparisons=(c,), weakest=c,
                           hypothesis=_hypothesis(name, variant, versus,
                                                  direction=direction))


def test_a_method_against_several_others_gets_one_line_by_verdict():
    from types import SimpleNamespace

    from dyna.experiment.calibration_stats import NO_EFFECT
    from dyna.experiment.kinds.agent_tasks.headline import headline

    cfg = SimpleNamespace(variants=["a"], scenarios=[("base", {})], runs=20, episodes=10,
                          store="skill", sweeps=(), analysis={"confidence": 0.95})
    runs = pl.DataFrame({"variant": ["a"], "scenario": ["base"]})
    results = [_result("holds", f"beats {b}", b, (0.5, 0.4, 0.6))
               for b in ("reflexion", "voyager", "awm")]
    results += [_result("does not hold", "beats expel", "expel", (0.03, 0.001, 0.07)),
                _result(NO_EFFECT, "beats selective", "selective", (-0.005, -0.02, 0.005)),
                _result("does not hold", "other claim", "x", (0.1, -0.1, 0.3),
                        variant="naive_loop")]
    lines = headline(cfg, runs, results)[2:-1]
    assert lines[0] == ("- hypotheses (6, Holm): 3 hold, 2 do not hold, 1 shows no effect as "
                        "large as its smallest effect of interest.")
    assert lines[1] == ("- `base`: skill_loop's late success greater than each of 5 (Holm): "
                        "holds for reflexion, voyager, awm; does not hold for expel; "
                        "negligible (TOST) for selective.")
    # the family's members are not named again; the other hypothesis is (half hold)
    assert lines[2] == "- does not hold: other claim."
    # the 8 baselines' names do not fit: those it holds for are counted, the others named
    names = ["reflexion", "voyager", "expel", "awm", "mem0_v2", "mem0_v3", "naive_growth"]
    eight = [_result("holds", f"beats {b}", b, (0.5, 0.4, 0.6)) for b in names]
    eight.append(_result(NO_EFFECT, "beats it", "selective_add_delete", (0.0, -0.01, 0.01)))
    assert headline(cfg, runs, eight)[3] == (
        "- `base`: skill_loop's late success greater than each of 8 (Holm): holds for 7; "
        "negligible (TOST) for selective_add_delete.")
    # two comparisons of one variant are not a family: each is named
    two = headline(cfg, runs, [results[0], results[3]])[2:-1]
    assert two[1] == "- does not hold: beats expel."


def test_a_hypothesis_refuted_the_other_way_is_named_with_its_interval():
    from types import SimpleNamespace

    from dyna.experiment.kinds.agent_tasks.headline import headline

    cfg = SimpleNamespace(variants=["a"], scenarios=[("base", {})], runs=40, episodes=10,
                          store="memory", sweeps=(), analysis={"confidence": 0.95})
    runs = pl.DataFrame({"variant": ["a"], "scenario": ["base"]})
    results = [
        _result("does not hold", "the novelty check lowers tokens", "no_novelty",
                (766.9, 397.6, 1174.3), direction="less"),
        _result("does not hold", "its saving grows", "flat", (54.7, -1.64, 115.2),
                direction="less", variant="slope"),
        _result("holds", "the cap lowers tokens", "no_cap", (-1315.8, -1704.4, -897.5),
                direction="less", variant="memory_loop")]
    lines = headline(cfg, runs, results)[2:-1]
    assert lines == [
        "- hypotheses (3, Holm): 1 holds, 2 do not hold.",
        "- holds: the cap lowers tokens.",
        "- opposite of the prediction (95% CI, uncorrected): the novelty check lowers tokens "
        "(766.9 [397.6, 1174.3]).",
        "- 1 variants x 1 scenarios x 40 runs x 10 episodes, memory store."]
    # predicted greater, the whole interval below 0; and a hypothesis of two comparisons
    # names the one that went the other way
    from dyna.experiment.kinds.agent_tasks.headline import opposite_line

    down = _result("does not hold", "the gate raises success", "self_gate",
                   (-0.2, -0.3, -0.1))
    both = _result("does not hold", "the gate helps on both counts", "no_gate",
                   (0.1, 0.05, 0.15))
    cost = _result("does not hold", "", "no_gate", (500.0, 200.0, 800.0), direction="less")
    both.comparisons = both.comparisons + cost.comparisons
    line, named = opposite_line(cfg, [down, both, results[1]])
    assert named == {0, 1}
    assert line == ("- opposite of the prediction (95% CI, uncorrected): the gate raises "
                    "success (-0.2 [-0.3, -0.1]); 1 more below.")
    line, _ = opposite_line(cfg, [both])
    assert line == ("- opposite of the prediction (95% CI, uncorrected): the gate helps on both "
                    "counts (skill_loop - no_gate, late_success: 500.0 [200.0, 800.0]).")


def test_the_robustness_headline_counts_hypotheses_keeping_their_sign(tmp_path):
    data = {"kind": "agent_tasks", "name": "hl_rob", "runs": 5, "episodes": 60, "seed": 3,
            "store": "skill", "variants": ["no_learning", "skill_loop", "skill_loop-self_gate"],
            "env": {"n_families": 3, "n_tools": 6, "max_steps": 12},
            "scenarios": [{"name": "lff", "env": {"false_success_rate": 0.5}}],
            "robustness": {"factors": [0.5, 2.0], "params": ["p_follow"]},
            "analysis": {"final_window": 10, "n_resamples": 200, "late_from": 31,
                         "tokens_window": 10},
            "hypotheses": [{"name": "the verified gate raises late success", "scenario": "lff",
                            "metric": "late_success", "variant": "skill_loop",
                            "versus": "skill_loop-self_gate", "direction": "greater"},
                           {"name": "learning beats none", "scenario": "lff",
                            "metric": "late_success", "variant": "skill_loop",
                            "versus": "no_learning", "direction": "greater"}]}
    folder, report = _run(tmp_path, data)
    section = report.split("## Robustness to the policy")[1].split("\n## ")[0]
    kept = {"0.818": 0, "0.947": 0}
    for row in section.splitlines():
        if row.startswith("| ") and "odds x" in row:
            cells = [c.strip() for c in row.strip("|").split("|")]
            low = float(cells[4].split("[")[1].split(",")[0]) if "[" in cells[4] else -1
            kept[cells[2].rsplit("= ", 1)[1]] += low > 0
    line = next(x for x in _headline(report) if x.startswith("- policy scaled"))
    assert line.startswith("- policy scaled (exploratory): hypotheses of the predicted sign, "
                           "whole 95% CI: ")
    assert f"`p_follow` odds x0.5 = 0.818: {kept['0.818']} of 2" in line
    assert f"`p_follow` odds x2 = 0.947: {kept['0.947']} of 2" in line
    assert len(line) <= 160
    # below 5 runs intervals are descriptions only: no line
    import dataclasses

    from dyna.experiment.kinds.agent_tasks.headline import robustness_line
    from dyna.experiment.runner import load_output

    out = load_output(folder)
    assert robustness_line(out.config, out.tables["runs"]) == line
    assert robustness_line(dataclasses.replace(out.config, runs=4), out.tables["runs"]) is None


def test_an_exploratory_sweep_names_the_removal_that_changes_each_mode_most():
    """Per sweep, over its grid points, the `<loop>-no_X` whose paired difference from the
    full loop is largest as a share of the full loop's mean, among those separated from 0;
    a sweep where none separates says so."""
    from types import SimpleNamespace

    from dyna.experiment.kinds.agent_tasks.config import Sweep
    from dyna.experiment.kinds.agent_tasks.headline import sweep_safeguard_line

    sweeps = (Sweep("drift", "drift_kind", ("value", "tool"), {}, "drift_success_next100",
                    "greater"),
              Sweep("volume", "n_paraphrases", (1, 8), {}, "late_tokens_per_success", "less"))
    variants = ("memory_loop", "memory_loop-no_retire_on_contradiction",
                "memory_loop-no_cap_eviction")
    n = 6
    spread = np.array([-0.02, -0.01, 0.0, 0.0, 0.01, 0.02])
    table = {  # scenario -> variant -> (drift success, tokens) per run
        "drift-value": {variants[0]: (0.8 + spread, 1000 + 0 * spread),
                        variants[1]: (0.6 + spread[::-1], 1000 + 0 * spread),     # -25%
                        variants[2]: (0.8 + spread, 1000 + 0 * spread)},
        "drift-tool": {variants[0]: (0.5 + spread, 1000 + 0 * spread),
                       variants[1]: (0.2 + spread[::-1], 1000 + 0 * spread),      # -60%
                       variants[2]: (0.48 + spread[::-1], 1000 + 0 * spread)},    # -4%
        "volume-1": {v: (0.8 + spread, 1000 + 10 * spread) for v in variants},
        "volume-8": {v: (0.8 + spread, 1000 + 10 * spread) for v in variants}}
    runs = pl.DataFrame([
        {"scenario": s, "variant": v, "run": r, "drift_success_next100": float(x[0][r]),
         "late_tokens_per_success": float(x[1][r])}
        for s, per in table.items() for v, x in per.items() for r in range(n)])
    cfg = SimpleNamespace(store="memory", variants=variants, sweeps=sweeps, runs=n, seed=0,
                          analysis={"confidence": 0.95, "alpha": 0.05, "n_resamples": 500})
    [line] = sweep_safeguard_line(cfg, runs, [])
    head = "- one safeguard off (%, 95% CI): "
    assert line.startswith(head + "drift: retire_on_contradiction -60% [")
    assert line.endswith("] at tool; volume: none separated.")
    assert len(line) <= 160
    # ranked in the metric's units: a tiny change where the full loop is near 0 (-100% of
    # 0.004) does not beat a large one
    table["drift-value"][variants[2]] = (0.8 + spread, 1000 + 0 * spread)
    table["drift-tool"] = {variants[0]: (0.004 + spread / 10, 1000 + 0 * spread),
                           variants[1]: (0.004 + spread / 10, 1000 + 0 * spread),
                           variants[2]: (0.0 + spread[::-1] / 10, 1000 + 0 * spread)}
    runs = pl.DataFrame([
        {"scenario": s, "variant": v, "run": r, "drift_success_next100": float(x[0][r]),
         "late_tokens_per_success": float(x[1][r])}
        for s, per in table.items() for v, x in per.items() for r in range(n)])
    [line] = sweep_safeguard_line(cfg, runs, [])
    assert line.startswith(head + "drift: retire_on_contradiction -25% [")
    assert "] at value;" in line
    # fewer than 5 runs: intervals are descriptions only, no line
    few = runs.filter(pl.col("run") < 4)
    assert sweep_safeguard_line(SimpleNamespace(**{**vars(cfg), "runs": 4}), few, []) == []
    # more sweeps than fit on one line go on a second
    many = (sweeps[0],) + tuple(Sweep(f"drift_{i}_with_a_long_name", "drift_kind",
                                      ("value", "tool"), {}, "drift_success_next100",
                                      "greater") for i in range(3))
    more = pl.concat([runs] + [runs.filter(pl.col("scenario").str.starts_with("drift-"))
                               .with_columns(pl.col("scenario").str.replace(
                                   "drift-", f"drift_{i}_with_a_long_name-"))
                               for i in range(3)])
    lines = sweep_safeguard_line(SimpleNamespace(**{**vars(cfg), "sweeps": many}), more, [])
    assert len(lines) == 2 and all(len(x) <= 160 for x in lines)
    assert lines[0].startswith(head + "drift: retire_on_contradiction -25% [")
    assert lines[1].startswith("- also one safeguard off: drift_")
    # declared hypotheses carry the claims: no exploratory line then
    assert sweep_safeguard_line(cfg, runs, [object()]) == []


def test_an_item_too_long_for_the_line_is_cut_and_nothing_left_is_counted():
    from dyna.experiment.kinds.agent_tasks.ablation_report import LINE, fit_line

    head = "- baselines restoring the benefit (exploratory): "
    one = "volume: " + ", ".join(f"baseline_number_{i}" for i in range(10))
    line = fit_line(head, [one], more="{} more in the crossover map")
    assert len(line) <= LINE and "more" not in line
    assert line.startswith(head + "volume: baseline_number_0, ") and line.endswith(" [...].")
    # with others left out, they are counted, and the first is cut to leave room
    line = fit_line(head, [one, "drift: none"], more="{} more in the crossover map")
    assert len(line) <= LINE and line.endswith(" [...]; 1 more in the crossover map.")


def test_a_long_comparison_family_keeps_within_160_characters():
    from dyna.experiment.calibration_stats import NO_EFFECT, NOT_TESTABLE
    from dyna.experiment.kinds.agent_tasks.headline import comparison_family_lines

    verdicts = ["holds", "holds", "does not hold", NO_EFFECT, NOT_TESTABLE]
    results = []
    for i, v in enumerate(verdicts):
        r = _result(v, f"h{i}", f"memory_loop-no_retire_on_contradiction_{i}",
                    variant="memory_loop")
        r.hypothesis = _hypothesis(f"h{i}", "memory_loop", r.comparisons[0].versus,
                                   scenario="tool_drift_with_a_long_name",
                                   metric="late_tokens_per_success", direction="less")
        results.append(r)
    [line], covered = comparison_family_lines(results)
    assert covered == {0, 1, 2, 3, 4} and len(line) <= 160
    assert line.startswith("- `tool_drift_with_a_long_name`: memory_loop's late tokens per "
                           "success less than each of 5 (Holm): holds for 2")
