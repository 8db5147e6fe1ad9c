"""Our tabular results against the reference implementation's per-run values:
the copied data reproduce the reference README's numbers, the Welch test by hand on a
small subset, Holm and TOST verdicts, and the report section."""

import math

import numpy as np
import polars as pl
import pytest

from dyna.errors import MissingFileError
from dyna.experiment.kinds.tabular import reference as ref
from dyna.experiment.kinds.tabular.reference import DECLARED, Summary, compare, tost, welch

EP2_N0 = Summary("figure_8_2", "episode", 0, 2)


def test_declared_summaries():
    assert len(DECLARED) == 6 + 8 + 10
    labels = [s.label for s in DECLARED if s.check == "figure_8_2"]
    assert labels[:2] == ["n = 0, steps in episode 2",
                          "n = 0, mean steps per episode, episodes 41-50"]
    assert {s.at for s in DECLARED if s.check == "blocking"} == {1000, 2900}
    assert {s.at for s in DECLARED if s.check == "shortcut"} == {3000, 5900}
    assert [s.margin for s in DECLARED if s.margin] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("summary, runs, mean, sem", [
    # the reference README's tables (50 runs of Fig 8.2, 40 of Fig 8.4, 16 of Ex 8.4)
    (Summary("figure_8_2", "episode", 5, 2), 50, 139.9, 8.7),
    (Summary("figure_8_2", "episode", 50, 2), 50, 42.3, 1.5),
    (Summary("figure_8_2", "window", 0, 41, 50), 50, 17.98, None),
    (Summary("blocking", "cumulative_reward", "dyna_q", 1000), 40, 47.6, 3.4),
    (Summary("blocking", "cumulative_reward", "dyna_q_plus", 1000), 40, 58.9, 1.9),
    (Summary("prioritized_sweeping", "updates_to_optimal", "prioritized_sweeping", 1), 16,
     1793.4, 214.8),
    (Summary("prioritized_sweeping", "updates_to_optimal", "dyna_q", 5), 16, 218642.2, None),
])
def test_reference_values_reproduce_the_readme(summary, runs, mean, sem):
    v = ref.reference_values(summary)
    assert v.size == runs
    assert v.mean() == pytest.approx(mean, abs=0.05)
    if sem is not None:
        assert v.std(ddof=1) / math.sqrt(v.size) == pytest.approx(sem, abs=0.05)


def test_welch_by_hand_on_a_subset():
    # the reference's episode-2 steps for n = 0 of runs 0-4 (batch seed 1)
    y = ref.reference_values(EP2_N0)[:5]
    assert y.tolist() == [230.0, 752.0, 141.0, 167.0, 260.0]
    x = np.array([100.0, 150.0, 200.0])
    # mean 150 vs 310; variances of the means 2500 / 3 and 63318.5 / 5 = 12663.7
    se2 = 2500 / 3 + 12663.7
    t = -160 / math.sqrt(se2)
    df = se2 ** 2 / ((2500 / 3) ** 2 / 2 + 12663.7 ** 2 / 4)
    w = welch(x, y)
    assert w["diff"] == -160.0
    assert w["t"] == pytest.approx(t) and t == pytest.approx(-1.37721, abs=1e-5)
    assert w["df"] == pytest.approx(df) and df == pytest.approx(4.50475, abs=1e-5)
    assert w["p"] == pytest.approx(0.232933, abs=1e-6)
    assert w["low"] < -160 < w["high"]


def test_compare_holm_and_verdicts():
    y = ref.reference_values(EP2_N0)
    plateau = Summary("figure_8_2", "window", 5, 41, 50, margin=1.0)
    z = ref.reference_values(plateau)
    ep2_n50 = Summary("figure_8_2", "episode", 50, 2)
    res = compare({EP2_N0: y, ep2_n50: ref.reference_values(ep2_n50) + 100, plateau: z})
    same, shifted, plat = res
    assert same.welch["p"] == pytest.approx(1.0) and same.differs is False
    assert shifted.differs is True and shifted.ours_mean == pytest.approx(142.32)
    # Holm over the three p-values by hand
    p = sorted(r.welch["p"] for r in res)
    adj = [min(1, 3 * p[0]), max(min(1, 3 * p[0]), min(1, 2 * p[1])), 1.0]
    assert sorted(r.p_holm for r in res) == pytest.approx(adj)
    # identical values are equivalent within 1 step (SEM 0.2); shifted by 2 steps they are not
    assert plat.equivalent is True and plat.tost_p_holm < 0.05
    assert tost(z + 2.0, z, 1.0) > 0.5
    assert same.tost_p != same.tost_p  # no margin declared: no TOST (NaN)


def test_missing_reference_folder(tmp_path):
    with pytest.raises(MissingFileError) as exc:
        ref.reference_values(EP2_N0, tmp_path)
    assert exc.value.field == "reference data"


def test_report_section(tmp_path):
    from dyna.experiment.registry import parse_experiment
    from dyna.experiment.reporting import fmt
    from dyna.experiment.runner import run_experiment

    data = {"name": "fig82_small", "seed": 0, "runs": 4, "env": {"id": "dyna/DynaMaze-v0"},
            "schedule": {"episodes": 50},
            "defaults": {"agent": "dyna_q", "alpha": 0.1, "gamma": 0.95, "epsilon": 0.1},
            "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=50", "n_planning": 50}],
            "analysis": {"metrics": ["steps_per_episode"], "checks": ["figure_8_2"],
                         "n_resamples": 200}}
    run_experiment(parse_experiment(data), tmp_path / "o")
    text = (tmp_path / "o" / "report.md").read_text()
    section = text.split("#### Against the reference implementation")[1]
    rows = [line for line in section.splitlines() if line.startswith("| n = ")]
    assert [r.split(" | ")[0] for r in rows] == [
        "| n = 0, steps in episode 2", "| n = 0, mean steps per episode, episodes 41-50",
        "| n = 50, steps in episode 2", "| n = 50, mean steps per episode, episodes 41-50"]
    # our episode-2 mean in the table is the one of the results table
    res = pl.read_parquet(tmp_path / "o" / "results.parquet")
    ep2 = res.filter((pl.col("variant") == "n=50") & (pl.col("episode") == 2))["steps"]
    assert rows[2].split(" | ")[1].startswith(f"{fmt(ep2.mean())} ± ")
    assert rows[2].split(" | ")[1].endswith("(4)")
    differ = sum("**differs**" in r for r in rows)
    head = text.split("## Headline")[1].split("\n## ")[0]
    assert f"\n- reference implementation: {differ} of 4 summaries differ (Welch" in head
