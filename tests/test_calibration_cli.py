"""Calibration before confirmation through the command line: `dyna run FILE --pilot`,
`dyna freeze FILE`, `dyna run FILE` on a calibrated file (refusals and the confirmatory
report), and each bad input as one line with exit status 2."""

import hashlib
import json
import subprocess

import pytest

from dyna.cli import main
from dyna.experiment.calibration import (append_pilot_entry, checkout_state, file_digest,
                                         pilot_log_path)
from dyna.experiment.calibration_commands import PILOT_FILES

TOML = """kind = "agent_tasks"
name = "tiny_cal"
runs = 2
episodes = 30
store = "skill"
variants = ["no_learning", "skill_loop"]

[env]
n_families = 2
n_tools = 3
n_values = 2
length = 2
max_steps = 6
n_distractor_words = 4

[analysis]
late_from = 11
n_resamples = 200

[calibration]
pilot_seed = 1000
pilot_runs = 2
confirmatory_seed = 0
replication_seed = 2000
required = ["base rate"]

[[checks]]
name = "base rate"
scenario = "clean"
variant = "no_learning"
measure = "late_success"
min = 0.0
max = 1.0

[[checks]]
name = "loop acts"
scenario = "clean"
variant = "skill_loop"
measure = "differs"
versus = "no_learning"
min = 0.5

[[hypotheses]]
name = "the loop raises late success"
scenario = "clean"
metric = "late_success"
variant = "skill_loop"
versus = "no_learning"
direction = "greater"
smallest_effect = 0.05
checks = ["loop acts"]
"""


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                           "user.email=t@example.com", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git checkout holding the committed experiment file ``tiny.toml``."""
    monkeypatch.setenv("DYNA_RENDER", "serial")
    git(tmp_path, "init", "-q", ".")
    (tmp_path / "tiny.toml").write_text(TOML)
    git(tmp_path, "add", "tiny.toml")
    git(tmp_path, "commit", "-qm", "declare")
    return tmp_path


def run(capsys, *argv):
    """``dyna`` in this process: (status, stdout, stderr lines)."""
    status = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return status, cap.out, cap.err.splitlines()


def refused(capsys, *argv) -> str:
    status, out, err = run(capsys, *argv)
    assert status == 2 and len(err) == 1, (status, err)
    assert err[0].startswith("dyna: error: ")
    return err[0]


# ============================================================================ refusals

def test_run_refuses_the_confirmatory_seeds_of_an_unfrozen_file(repo, capsys):
    out = repo / "out"
    line = refused(capsys, "run", repo / "tiny.toml", "--out", out)
    assert "calibration.frozen" in line and "not frozen" in line
    line = refused(capsys, "run", repo / "tiny.toml", "--out", out, "--seed", 5)
    assert "--seed override" in line
    line = refused(capsys, "run", repo / "tiny.toml", "--out", out, "--seeds", "replication")
    assert "not frozen" in line
    assert not out.exists()


def test_run_refuses_a_frozen_file_edited_afterwards(repo, capsys):
    path = repo / "tiny.toml"
    digest = file_digest(path)
    text = TOML.replace("[calibration]\n", f'[calibration]\nfrozen = {{ commit = "{"c" * 40}"'
                        f', sha256 = "{digest}" }}\n')
    path.write_text(text.replace("min = 0.5", "min = 0.4"))
    out = repo / "out"
    line = refused(capsys, "run", path, "--out", out)
    assert "edited after freezing" in line and digest[:12] in line
    assert not out.exists()


@pytest.mark.parametrize("old, new, field", [
    ('variant = "no_learning"\nmeasure', 'variant = "no_learnin"\nmeasure',
     "checks[0].variant"),
    ('scenario = "clean"\nvariant = "no_learning"\nmeasure',
     'scenario = "dirty"\nvariant = "no_learning"\nmeasure', "checks[0].scenario"),
    ('measure = "late_success"', 'measure = "late_sucess"', "checks[0].measure"),
    ('measure = "differs"\nversus = "no_learning"\n', 'measure = "differs"\n',
     "checks[1].versus"),
    ('measure = "differs"\nversus = "no_learning"\n', 'measure = "library_exceeds"\n',
     "checks[1].cap"),
    ('measure = "differs"\nversus = "no_learning"\n', 'measure = "coverage_at"\n',
     "checks[1].episode"),
    ('measure = "late_success"', 'measure = "late_success"\ncap = 3', "checks[0].cap"),
    ("min = 0.0\nmax = 1.0\n", "", "checks[0].min"),
    ("smallest_effect = 0.05\n", "", "hypotheses[0].smallest_effect"),
    ("smallest_effect = 0.05", "smallest_effect = 0.0", "hypotheses[0].smallest_effect"),
    ('checks = ["loop acts"]', 'checks = ["loop act"]', "hypotheses[0].checks[0]"),
    ('required = ["base rate"]', 'required = ["base rat"]', "calibration.required[0]"),
    ("confirmatory_seed = 0", "confirmatory_seed = 1000", "calibration.confirmatory_seed"),
    ("replication_seed = 2000", "replication_seed = 0", "calibration.replication_seed"),
    ("pilot_runs = 2", "pilot_runs = 2\nbogus = 1", "calibration.bogus"),
    ("min = 0.5", "min = 0.5\nbogus = 1", "checks[1].bogus"),
    ('name = "tiny_cal"', 'name = "tiny_cal"\nseed = 3', "seed"),
])
def test_each_bad_input_is_one_line_and_exit_2(repo, capsys, old, new, field):
    path = repo / "tiny.toml"
    assert TOML.count(old) == 1
    path.write_text(TOML.replace(old, new))
    out = repo / "out"
    for extra in ((), ("--pilot",)):
        line = refused(capsys, "run", path, "--out", out, *extra)
        assert line.startswith(f"dyna: error: {field}="), line
    assert not out.exists() and not (repo / "results").exists()


def test_pilot_and_seed_sets_only_where_they_apply(repo, capsys, tmp_path):
    path = repo / "tiny.toml"
    refused(capsys, "run", path, "--pilot", "--seed", 3)
    refused(capsys, "run", path, "--pilot", "--seeds", "replication")
    plain = tmp_path / "plain.toml"
    cut = TOML.index("[calibration]")
    plain.write_text(TOML[:cut].replace('name = "tiny_cal"', 'name = "plain"\nseed = 1'))
    assert "--pilot" in refused(capsys, "run", plain, "--pilot")
    assert "--seeds" in refused(capsys, "run", plain, "--seeds", "replication")
    assert not (repo / "results").exists()


# ============================================================================ dyna freeze

def entry(path, **change):
    state = checkout_state(path)
    return {"time": "2026-01-01T00:00:00+00:00", "file": path.name,
            "sha256": file_digest(path), "commit": state["commit"], "dirty": state["dirty"],
            "seed": 1000, "runs": 2,
            "checks": [{"check": "base rate", "pass": True}], "all_pass": True, **change}


def test_freeze_refuses_a_missing_failing_stale_or_dirty_pilot(repo, capsys):
    path = repo / "tiny.toml"
    log = pilot_log_path(path, "tiny_cal")
    before = path.read_bytes()
    assert "holds no pilot" in refused(capsys, "freeze", path)
    append_pilot_entry(log, entry(path, all_pass=False,
                                  checks=[{"check": "loop acts", "pass": False}]))
    assert "failing: loop acts" in refused(capsys, "freeze", path)
    append_pilot_entry(log, entry(path, sha256="0" * 64))
    assert "another version of the file" in refused(capsys, "freeze", path)
    append_pilot_entry(log, entry(path, runs=1))   # a pilot cut short with --runs
    assert "not the declared pilot_runs = 2" in refused(capsys, "freeze", path)
    append_pilot_entry(log, entry(path, seed=7))
    assert "on pilot_seed = 1000" in refused(capsys, "freeze", path)
    append_pilot_entry(log, entry(path, dirty=True))
    assert "uncommitted changes" in refused(capsys, "freeze", path)
    append_pilot_entry(log, entry(path, file="other.toml"))   # another file's entry
    assert "uncommitted changes" in refused(capsys, "freeze", path)
    # a pilot at an older commit is stale once HEAD moves
    append_pilot_entry(log, entry(path))
    (repo / "code.py").write_text("x = 1\n")
    git(repo, "add", "code.py")
    git(repo, "commit", "-qm", "change the code")
    assert "stale: the last pilot ran at commit" in refused(capsys, "freeze", path)
    assert path.read_bytes() == before
    # a pilot of the file as it is, at HEAD, clean and passing: frozen
    append_pilot_entry(log, entry(path))
    status, out, err = run(capsys, "freeze", path)
    assert status == 0 and not err
    head = git(repo, "rev-parse", "HEAD")
    assert path.read_text() == TOML.replace(
        "[calibration]\n", f'[calibration]\nfrozen = {{ commit = "{head}", sha256 = '
        f'"{hashlib.sha256(before).hexdigest()}" }}\n')
    assert "frozen already" in refused(capsys, "freeze", path)


def test_a_changed_tracked_file_makes_the_checkout_dirty_but_results_do_not(repo):
    path = repo / "tiny.toml"
    assert checkout_state(path)["dirty"] is False
    (repo / "results" / "tiny_cal").mkdir(parents=True)
    (repo / "results" / "tiny_cal" / "README.md").write_text("a\n")
    git(repo, "add", "results")
    git(repo, "commit", "-qm", "results")
    (repo / "results" / "tiny_cal" / "README.md").write_text("b\n")
    assert checkout_state(path)["dirty"] is False
    path.write_text(TOML + "\n")
    assert checkout_state(path)["dirty"] is True


# ============================================================================ end to end

def test_pilot_freeze_and_confirm(repo, capsys):
    path = repo / "tiny.toml"
    pilot = repo / "pilot"
    status, out, err = run(capsys, "run", path, "--pilot", "--out", pilot)
    assert status == 0, err
    assert out == f"{pilot}\n"
    printed = "\n".join(err)
    assert "| base rate |" in printed and "checks 2 of 2 pass" in printed
    # only the check and SD files, and no hypothesis contrast in them
    assert sorted(p.name for p in pilot.iterdir()) == sorted(PILOT_FILES)
    text = "\n".join((pilot / n).read_text() for n in PILOT_FILES if n.endswith(".md"))
    for word in ("holds", "does not hold", "not testable", "verdict", "mean difference",
                 "p value", "p (", "effect as large"):
        assert word not in text.lower() and word not in printed.lower(), word
    import polars as pl
    sd = pl.read_parquet(pilot / "pilot_sd.parquet")
    assert sd.columns == ["hypothesis", "comparison", "pilot_pairs", "sd", "sd_upper80",
                          "smallest_effect", "runs_needed"]
    assert sd["pilot_pairs"].to_list() == [2]
    checks = pl.read_parquet(pilot / "checks.parquet")
    assert checks["check"].to_list() == ["base rate", "loop acts"]
    assert checks["pass"].to_list() == [True, True]
    # the log line
    log = [json.loads(x) for x in pilot_log_path(path, "tiny_cal").read_text().splitlines()]
    assert len(log) == 1
    assert {k: log[0][k] for k in ("file", "sha256", "commit", "dirty", "seed", "runs",
                                   "all_pass")} == {
        "file": "tiny.toml", "sha256": file_digest(path),
        "commit": git(repo, "rev-parse", "HEAD"), "dirty": False, "seed": 1000, "runs": 2,
        "all_pass": True}
    assert [c["check"] for c in log[0]["checks"]] == ["base rate", "loop acts"]
    # freeze, commit the record, run the confirmatory seeds
    assert run(capsys, "freeze", path)[0] == 0
    git(repo, "commit", "-qam", "freeze")
    conf = repo / "conf"
    status, out, err = run(capsys, "run", path, "--out", conf, "--no-progress")
    assert status == 0, err
    report = (conf / "report.md").read_text().splitlines()
    head = report.index("## Headline")
    assert report[head + 2] == "- checks 2 of 2 pass; hypotheses (1, Holm): 1 not tested."
    sections = [line for line in report if line.startswith("## ")]
    assert sections[:2] == ["## Headline", "## Manipulation checks"]
    table = report.index("| check | value [95% CI] | threshold | pass |")
    assert report[table + 2].startswith("| base rate | ")
    assert report[table + 2].endswith(" | 0 <= x <= 1 | pass |")
    manifest = json.loads((conf / "manifest.json").read_text())
    assert manifest["seed"] == 0
    assert manifest["config"]["calibration"]["frozen"]["sha256"] == file_digest(path)
