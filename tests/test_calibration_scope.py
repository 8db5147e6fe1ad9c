"""``[calibration] scope``: a confirmatory run of the hypotheses' pairs only."""

import pytest

from dyna.errors import ConfigError
from dyna.experiment.kinds.agent_tasks.config import parse_agent_tasks
from dyna.experiment.kinds.agent_tasks.kind import KIND
from dyna.experiment.registry import read_toml

TOML = """kind = "agent_tasks"
name = "scoped"
runs = 2
episodes = 30
store = "skill"
variants = ["no_learning", "oracle", "naive_loop", "skill_loop", "skill_loop-no_novelty_check"]
scenarios = [{ name = "a" }, { name = "b" }, { name = "c" }]

[env]
n_families = 2
n_tools = 3
n_values = 2
length = 2
max_steps = 5

[calibration]
pilot_seed = 1000
pilot_runs = 2
confirmatory_seed = 0
required = ["base rate"]
scope = "hypotheses"

[[checks]]
name = "base rate"
scenario = "a"
variant = "no_learning"
measure = "late_success"
min = 0.0

[[checks]]
name = "novelty acts"
scenario = "c"
variant = "skill_loop"
measure = "differs"
versus = "skill_loop-no_novelty_check"
min = 0.5

[[hypotheses]]
name = "the loop beats the naive loop in b"
scenario = "b"
metric = "late_success"
variant = "skill_loop"
versus = "naive_loop"
direction = "greater"
smallest_effect = 0.05
"""


def _config(tmp_path, text=TOML):
    path = tmp_path / "scoped.toml"
    path.write_text(text)
    data = read_toml(path)
    data.pop("kind")
    return parse_agent_tasks(data)


def test_a_scoped_run_covers_the_compared_pairs_and_the_references(tmp_path):
    cfg = _config(tmp_path)
    jobs = KIND.plan_jobs(cfg, KIND.prepare(cfg), block_size=2)
    got = {(cfg.variants[j.variant], cfg.scenarios[j.point][0]) for j in jobs}
    refs = {(v, s) for v in ("no_learning", "oracle") for s in "abc"}
    compared = {("skill_loop", "b"), ("naive_loop", "b"), ("skill_loop", "c"),
                ("skill_loop-no_novelty_check", "c")}
    assert got == refs | compared


def test_the_default_scope_is_the_whole_grid(tmp_path):
    cfg = _config(tmp_path, TOML.replace('scope = "hypotheses"\n', ""))
    jobs = KIND.plan_jobs(cfg, KIND.prepare(cfg), block_size=2)
    assert len(jobs) == 5 * 3


def test_an_unknown_scope_names_the_field(tmp_path):
    with pytest.raises(ConfigError) as e:
        _config(tmp_path, TOML.replace('scope = "hypotheses"', 'scope = "some"'))
    assert e.value.field == "calibration.scope"


@pytest.fixture(scope="module")
def scoped_report(tmp_path_factory):
    """The report of one run of the scoped experiment, read by several tests."""
    from dyna.experiment.runner import run_experiment

    tmp = tmp_path_factory.mktemp("scoped")
    cfg = _config(tmp)
    return (run_experiment(cfg, tmp / "out", progress=False) / "report.md").read_text()


def test_a_scoped_run_writes_its_report(scoped_report):
    report = scoped_report
    assert "## Manipulation checks" in report
    assert "the loop beats the naive loop in b" in report


def test_a_scoped_report_says_which_pairs_ran(scoped_report):
    report = scoped_report
    # 3 scenarios x 2 references + 4 compared pairs
    assert "10 of the 15 variant x scenario pairs run" in report


def test_the_report_says_an_unfrozen_run_is_not_confirmatory(scoped_report):
    report = scoped_report
    assert "**Not a confirmatory run: the file is not frozen** (seed 0, the confirmatory " \
        "seed)" in report


def test_checks_may_not_read_both_arms_of_a_hypothesis(tmp_path):
    def check(name, variant, scenario="b"):
        return (f'[[checks]]\nname = "{name}"\nscenario = "{scenario}"\nvariant = '
                f'"{variant}"\nmeasure = "late_success"\nmin = 0.0\n\n')
    one = TOML.replace("[[hypotheses]]", check("one arm", "naive_loop") + "[[hypotheses]]")
    _config(tmp_path, one)          # one arm alone: a base rate
    both = TOML.replace("[[hypotheses]]", check("one arm", "naive_loop")
                        + check("other arm", "skill_loop") + "[[hypotheses]]")
    with pytest.raises(ConfigError) as e:
        _config(tmp_path, both)
    assert e.value.field == "checks[3].measure"
    assert "both arms of hypothesis 'the loop beats the naive loop in b'" in e.value.reason
    # both variants read in a scenario no hypothesis compares them in: checks
    _config(tmp_path, TOML.replace("[[hypotheses]]", check("one arm", "naive_loop", "a")
                                   + check("other arm", "skill_loop", "a") + "[[hypotheses]]"))
