"""Every report opens with a Headline of at most five lines."""

import re

import pytest

from dyna.experiment.backends import InProcessBackend
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import run_experiment

CONFIGS = {
    "tabular": {"name": "hl_tab", "runs": 2, "env": {"id": "dyna/DynaMaze-v0"},
                "schedule": {"episodes": 5}, "defaults": {"agent": "dyna_q"},
                "variants": [{"name": "n=0", "n_planning": 0},
                             {"name": "n=5", "n_planning": 5}],
                "analysis": {"final_episodes": 2}},
    "escalation": {"kind": "escalation", "name": "hl_esc", "runs": 2,
                   "scenarios": [{"name": "flat", "rates": [0.3, 0.9], "steps": 100}],
                   "variants": [{"name": "mean", "rule": "mean"},
                                {"name": "always", "rule": "always"}],
                   "analysis": {"n_resamples": 200, "svg": False}},
    "agent_tasks": {"kind": "agent_tasks", "name": "hl_at", "runs": 2, "episodes": 20,
                    "variants": ["no_learning", "skill_loop"], "env": {"n_families": 2},
                    "analysis": {"final_window": 5, "n_resamples": 200}},
}


def _headline(report: str) -> list[str]:
    m = re.search(r"^## Headline\n\n(.*?)\n\n", report, re.S | re.M)
    assert m, report[:400]
    return m.group(1).splitlines()


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_every_report_opens_with_a_short_headline(kind, tmp_path):
    out = run_experiment(parse_experiment(CONFIGS[kind]), tmp_path / kind,
                         backend=InProcessBackend(), progress=False)
    report = (out / "report.md").read_text()
    lines = _headline(report)
    assert 2 <= len(lines) <= 5 and all(line.startswith("- ") for line in lines)
    first_section = re.findall(r"^## (.+)$", report, re.M)[0]
    assert first_section == "Headline"
    assert "x 2 runs" in lines[0]
    if kind == "escalation":
        # mean never acts here (p* = 0.8 above its 0.5 prior, censored): it ties always
        assert lines[-1] == ("- lowest cost per task (95% CI over runs) at low_stakes: "
                             "`mean` (+1 tied) 1 [1, 1].")
    if kind == "tabular":   # the learning speed: episode 2 and the plateau
        assert lines[1].startswith("- steps in episode 2 (mean [95% CI]): n=0 ")
        assert lines[2].startswith("- at its plateau (within 10% of its mean over "
                                   "episodes 4-5) from episode: n=0 ")
        # the maze's 9 x 6 cells, walls included, and its 47 free ones (a newcomer read
        # "54" against the README's "free cells")
        assert "| dyna/DynaMaze-v0 | dyna/DynaMaze-v0 | 54 (47 free) | 4 |" in report
    if kind == "agent_tasks":
        assert "final success in `clean`: skill_loop" in lines[-1]


def test_a_best_whose_interval_overlaps_another_is_not_called_best():
    """A newcomer: the Figure 8.2 report called n=5 the "best final performance" at 16.8
    [16.4, 17.2] steps while every variant's interval overlapped it."""
    from dyna.experiment.kinds.tabular.headline import overlaps as _overlaps
    from dyna.experiment.stats import Interval

    nan = float("nan")
    a, b, c = Interval(16.8, 16.4, 17.2, 30), Interval(17.1, 16.9, 17.4, 30), \
        Interval(18.0, 17.5, 18.6, 30)
    assert _overlaps(a, b) and _overlaps(b, a) and not _overlaps(a, c)
    assert _overlaps(a, Interval(17.2, 17.2, 17.9, 30))          # a shared end point
    assert _overlaps(a, Interval(20.0, nan, nan, 1))             # one run: no interval
