"""The escalation report's headline on a seven-value cost grid: at most five lines of at
most 160 characters, the cheapest policy per cost setting and its cost (checked against the
runs table) beside always and never escalating, the cost-grid plot named; ties in the body."""

import re

import polars as pl
import pytest

from dyna.experiment.backends import InProcessBackend
from dyna.experiment.registry import parse_experiment
from dyna.experiment.reporting import ci, fmt
from dyna.experiment.runner import run_experiment
from dyna.experiment.stats import per_run_ci

GRID = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
DATA = {"kind": "escalation", "name": "hl_grid", "runs": 2, "seed": 5,
        "feedback": ["censored", "full"],
        "costs": {"c_escalate": 1.0, "p_star": GRID},
        "scenarios": [{"name": "flat", "rates": [0.35, 0.65, 0.9], "steps": 120}],
        "variants": [{"name": "never", "rule": "never"},
                     {"name": "always", "rule": "always"},
                     {"name": "mean", "rule": "mean"},
                     {"name": "lower_bound", "rule": "lower_bound"}],
        "analysis": {"n_resamples": 200, "svg": False, "checkpoints": 5}}


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    folder = run_experiment(parse_experiment(DATA), tmp_path_factory.mktemp("g") / "o",
                            backend=InProcessBackend(), progress=False)
    return folder, (folder / "report.md").read_text()


def _expected(runs: pl.DataFrame, setting: str) -> tuple[list[str], str]:
    """The policies tied cheapest at ``setting`` and the headline's words for it, from the
    runs table: per run the mean over the two feedback modes of the cost per task."""
    g = runs.filter(pl.col("cost_setting") == setting).with_columns(
        (pl.col("total_cost") / pl.col("steps")).alias("per_task"))
    per = {}
    for v in ("never", "always", "mean", "lower_bound"):
        by_fb = [g.filter((pl.col("variant") == v) & (pl.col("feedback") == fb))
                 .sort("run")["per_task"].to_numpy() for fb in ("censored", "full")]
        per[v] = (by_fb[0] + by_fb[1]) / 2
    low = min(x.mean() for x in per.values())
    tied = [v for v, x in per.items() if x.mean() <= low + 1e-12]
    opts = dict(statistic="mean", confidence=0.95, n_resamples=200, seed=5)
    words = f"`{tied[0]}`" + (f" (+{len(tied) - 1} tied)" if len(tied) > 1 else "")
    words += f" {ci(per_run_ci(per[tied[0]], **opts))}"
    refs = [f"{r} {fmt(per[r].mean())}" for r in ("always", "never") if r not in tied]
    return tied, f"{setting}: {words}" + (f" ({', '.join(refs)})" if refs else "")


def test_a_seven_setting_grid_fits_five_short_lines(grid_run):
    folder, report = grid_run
    lines = re.search(r"^## Headline\n\n(.*?)\n\n", report, re.S | re.M).group(1).splitlines()
    assert len(lines) == 5 and max(len(line) for line in lines) <= 160, lines
    assert lines[0] == ("- 4 policies x 7 cost settings (p* 0.4 to 0.95) x 2 scenario/feedback "
                        "settings x 2 runs; cost against p*: `plots/cost_grid_flat.png`.")
    assert (folder / "plots" / "cost_grid_flat.png").is_file()
    runs = pl.read_parquet(folder / "runs.parquet")
    parts, ties = [], []
    for p in GRID:
        tied, words = _expected(runs, f"p*={p:g}")
        parts.append(words)
        if len(tied) > 1:
            ties.append(f"p*={p:g}: " + ", ".join(f"`{v}`" for v in tied))
    # every setting once, in grid order, the first with what the numbers are
    body = " ".join(line[2:-1] for line in lines[1:]).replace("; ", " ")
    assert body == ("lowest cost per task (mean of 2 scenario/feedback settings, 95% CI over "
                    "runs) at " + " ".join(parts))
    # learning which type to escalate beats both fixed rules somewhere on the grid
    assert any(not w.split(": ")[1].startswith(("`always`", "`never`")) for w in parts)
    # ties are named in full in the body, not in the headline
    detail = report.split("## Lowest regret per cost setting")[1]
    assert ("- Tied for the headline's lowest cost per task: "
            + ("; ".join(ties) or "none") + ".") in detail
