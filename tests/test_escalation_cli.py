"""``dyna escalation check|replay``."""

from pathlib import Path

import pytest

from dyna.cli import main

SWE = str(Path(__file__).resolve().parents[1] / "data" / "swebench_verified_bash_only.csv")
TAU = str(Path(__file__).resolve().parents[1] / "data" / "taubench_airline_gpt4o.csv")
SYSTEM = "20250807_mini-v1.7.0_gpt-5-mini"


def test_check_summarises_a_log(capsys):
    assert main(["escalation", "check", TAU]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("200 rows, 1 systems, 1 task types, success rate 0.420")
    assert main(["escalation", "check", SWE]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 + 24 and f"  {SYSTEM}: 0.598" in out


def test_replay_prints_one_row_per_rule_with_exact_costs(capsys):
    assert main(["escalation", "replay", SWE, "--system", SYSTEM, "--rules", "never,always",
                 "--runs", "2", "--c-escalate", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(SYSTEM) and lines[1].split()[0] == "policy"
    never, always = (line.split() for line in lines[2:4])
    # never: every failure costs 10 / (1 - 0.8) = 50; 201 of 500 tasks fail
    assert float(never[1]) == pytest.approx(50 * 201 / 500)
    assert float(never[4]) == pytest.approx(201 / 500, abs=5e-4)
    assert float(always[1]) == 10.0 and float(always[3]) == 1.0
    # the units: the failure cost the rows were computed with, stated under them
    assert lines[4].startswith("cost/task and regret/task (against the task-type oracle) in "
                               "units of the log's costs: an escalation costs 10, a failure "
                               "50 (c_escalate / (1 - p*), p* = 0.8);")
    assert len(lines) == 5


@pytest.mark.parametrize("argv,message", [
    (["--system", "gpt-7"], "--system='gpt-7': unknown system"),
    (["--system", SYSTEM, "--rules", "mean,median"], "--rules='median'"),
    (["--system", SYSTEM, "--risk-class", "medium"], "--risk-class='medium'"),
    (["--system", SYSTEM, "--feedback", "shadow"], "--feedback='shadow'"),
])
def test_replay_bad_options_one_line_exit_2(capsys, argv, message):
    assert main(["escalation", "replay", SWE, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_check_bad_csv_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("system,task_id,task_type,success\na,t,x,1\na,u,x,maybe\n")
    assert main(["escalation", "check", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "CSV=" in err[0] and "row 2 has 'maybe'" in err[0]
