"""EscalationEnv, stream builders and outcome-log validation (envs.escalation)."""

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import polars as pl
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers dyna/Escalation-v0)
from dyna.errors import ConfigError, MissingFileError
from dyna.escalation import ThompsonSampling, run_policies
from envs.escalation import (EscalationEnv, date_order_stream, load_outcomes, replay_stream,
                             synthetic_stream)

REPO = Path(__file__).resolve().parents[1]
SWE = REPO / "data" / "swebench_verified_bash_only.csv"
TAU = REPO / "data" / "taubench_airline_gpt4o.csv"


@pytest.fixture(scope="module")
def swe():
    return load_outcomes(SWE)


def test_shipped_logs_load_with_documented_shapes(swe):
    assert swe.shape == (12000, 5)
    assert swe["system"].n_unique() == 24 and swe["task_type"].n_unique() == 12
    assert swe["success"].sum() == 6481  # pooled 54.0%
    per_type = swe.filter(pl.col("system") == swe["system"][0]).group_by("task_type").len()
    assert dict(per_type.iter_rows())["django/django"] == 231
    tau = load_outcomes(TAU)
    assert tau.height == 200 and tau["success"].mean() == pytest.approx(0.42)
    assert (tau["cost_usd"] == 0).all()


def test_check_env_synthetic_and_replay(swe):
    check_env(EscalationEnv(), skip_render_check=True)
    check_env(EscalationEnv("replay", data=swe, system="20250807_mini-v1.7.0_gpt-5-mini"),
              skip_render_check=True)
    env = gym.make("dyna/Escalation-v0", rates=(0.5, 0.9), steps=5)
    obs, info = env.reset(seed=0)
    assert info["n_steps"] == 5 and env.observation_space.n == 2


def test_censored_and_full_feedback_and_costs():
    for feedback, hidden in (("censored", -1), ("full", None)):
        env = EscalationEnv(rates=(0.0, 1.0), steps=50, feedback=feedback, c_escalate=1.0,
                            c_failure=5.0, c_act=0.5)
        obs, _ = env.reset(seed=3)
        s = env.stream()
        for t in range(50):
            action = t % 2
            obs2, reward, term, trunc, info = env.step(action)
            win = bool(s["outcomes"][t])
            assert win == (s["types"][t] == 1)  # rates 0 and 1: outcome fixed by type
            if action == 0:
                assert reward == -(0.5 + (0.0 if win else 5.0)) and info["outcome"] == int(win)
            else:
                assert reward == -1.0
                assert info["outcome"] == (hidden if hidden is not None else int(win))
            assert term == (t == 49) and not trunc
    with pytest.raises(ConfigError):
        EscalationEnv(feedback="shadow")


def test_env_agrees_with_run_policies_step_for_step(swe):
    system = "20250726_mini-v1.0.0_o3-2025-04-16"
    env = EscalationEnv("replay", data=swe, system=system, feedback="censored",
                        c_escalate=10.0, c_failure=50.0, act_cost="cost_usd")
    obs, _ = env.reset(seed=11)
    s = env.stream()
    T = len(s["types"])
    u = np.random.default_rng(1).random((1, T, 2))
    out = run_policies([ThompsonSampling(0.8)], [0], s["types"][None], s["outcomes"][None],
                       n_types=12, c_escalate=10.0, c_failure=50.0, c_act=s["cost_usd"][None],
                       u=u)
    a, b = np.ones(12), np.ones(12)
    total = 0.0
    for t in range(T):
        assert obs == s["types"][t]
        act = ThompsonSampling(0.8).act(a[[obs]], b[[obs]], None, u[0, t][:, None])[0]
        assert act == out["act"][0, t]
        k = obs
        obs, reward, term, _, info = env.step(0 if act else 1)
        total -= reward
        if info["outcome"] >= 0:
            a[k] += info["outcome"]
            b[k] += 1 - info["outcome"]
    assert term and total == pytest.approx(out["cost"].sum(), rel=1e-12)


def test_synthetic_stream_change_points_and_drift():
    s = synthetic_stream([0.1, 0.9], 100, np.random.default_rng(0), change_at=[40, 70],
                         rates_after=[[0.9, 0.1], [0.5, 0.5]])
    assert (s["rates"][:40] == [0.1, 0.9]).all() and (s["rates"][40:70] == [0.9, 0.1]).all()
    assert (s["rates"][70:] == 0.5).all()
    np.testing.assert_array_equal(s["p"], s["rates"][np.arange(100), s["types"]])
    d = synthetic_stream([0.0, 1.0], 5, np.random.default_rng(0), drift_to=[1.0, 0.0])
    np.testing.assert_allclose(d["rates"][:, 0], [0, 0.25, 0.5, 0.75, 1.0])
    # the same seed gives the same stream; outcomes follow the rates
    again = synthetic_stream([0.1, 0.9], 100, np.random.default_rng(0), change_at=[40, 70],
                             rates_after=[[0.9, 0.1], [0.5, 0.5]])
    for key in ("types", "outcomes", "verified"):
        np.testing.assert_array_equal(s[key], again[key])
    big = synthetic_stream([0.3], 20000, np.random.default_rng(1), verified_prob=0.25)
    assert big["outcomes"].mean() == pytest.approx(0.3, abs=0.015)
    assert big["verified"].mean() == pytest.approx(0.25, abs=0.015)
    for kwargs, fieldname in [({"change_at": [0], "rates_after": [[0.5]]}, "change_at[0]"),
                              ({"change_at": [5], "rates_after": []}, "rates_after"),
                              ({"rates_after": [], "drift_to": [0.5, 0.1]}, "drift_to")]:
        with pytest.raises(ConfigError) as err:
            synthetic_stream([0.3], 10, np.random.default_rng(0), **kwargs)
        assert err.value.field == fieldname
    with pytest.raises(ConfigError) as err:
        synthetic_stream([0.3, 1.2], 10, np.random.default_rng(0))
    assert err.value.field == "rates"


def test_replay_and_date_order_streams(swe):
    system = "20250807_mini-v1.7.0_gpt-5-mini"
    s = replay_stream(swe, system, np.random.default_rng(4))
    rows = swe.filter(pl.col("system") == system).sort("task_id")
    perm = np.random.default_rng(4).permutation(500)
    assert s["task_id"] == [rows["task_id"][int(i)] for i in perm]
    assert s["outcomes"].sum() == 299  # 59.8% of 500
    assert sorted(s["task_id"]) == rows["task_id"].to_list()
    d = date_order_stream(swe, np.random.default_rng(4))
    assert len(d["types"]) == 12000 and d["change_at"] == list(range(500, 12000, 500))
    assert d["systems"][0].startswith("20250720") and d["systems"][-1].startswith("20251209")
    assert d["system"][:500] == [d["systems"][0]] * 500
    with pytest.raises(ConfigError) as err:
        replay_stream(swe, "gpt-7", np.random.default_rng(0))
    assert err.value.field == "system" and "unknown system" in str(err.value)


BAD_CSVS = {
    "missing": ("system,task_id,success\na,t1,1\n", "missing column(s) task_type"),
    "nonbinary": ("system,task_id,task_type,success\na,t1,x,1\na,t2,x,0.5\n",
                  "must be 0 or 1; row 2 has '0.5'"),
    "empty": ("system,task_id,task_type,success\n", "no data rows (empty stream)"),
    "blank_type": ("system,task_id,task_type,success\na,t1,,1\n", "'task_type' is empty in row 1"),
    "bad_cost": ("system,task_id,task_type,success,cost_usd\na,t1,x,1,-3\n",
                 "'cost_usd' must be a number >= 0"),
}


@pytest.mark.parametrize("case", sorted(BAD_CSVS))
def test_bad_outcome_logs_name_the_problem(tmp_path, case):
    text, message = BAD_CSVS[case]
    path = tmp_path / f"{case}.csv"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_outcomes(path)
    assert err.value.field == "data" and message in str(err.value)
    with pytest.raises(MissingFileError):
        load_outcomes(tmp_path / "none.csv")


def test_unknown_system_fails_at_construction(swe):
    with pytest.raises(ConfigError) as err:
        EscalationEnv("replay", data=swe, system="nope")
    assert err.value.field == "system"


def _toml(tmp_path, name, data, systems=None):
    toml = tmp_path / f"{name}.toml"
    extra = f"systems = {systems!r}\n".replace("'", '"') if systems else ""
    toml.write_text(f'kind = "escalation"\nname = "x"\n[[scenarios]]\nname = "s"\n'
                    f'source = "replay"\ndata = "{data}"\n{extra}[[variants]]\nname = "m"\n'
                    f'rule = "mean"\n')
    return toml


def test_cli_bad_csv_one_line_exit_2(tmp_path, capsys):
    from dyna.cli import main

    cases = {
        "missing": ("system,task_id,success\na,t1,1\n", "missing column(s) task_type"),
        "nonbinary": ("system,task_id,task_type,success\na,t1,x,2\n", "must be 0 or 1"),
        "empty": ("system,task_id,task_type,success\n", "empty stream"),
    }
    for name, (text, message) in cases.items():
        csv = tmp_path / f"{name}.csv"
        csv.write_text(text)
        out = tmp_path / f"out_{name}"
        assert main(["run", str(_toml(tmp_path, name, csv)), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "scenarios.s.data" in err[0] and message in err[0], err
        assert not out.exists()
    toml = _toml(tmp_path, "unknown", SWE, systems=["gpt-7"])
    assert main(["run", str(toml), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scenarios.s.systems[0]='gpt-7'" in err[0]
    assert "unknown system" in err[0]


def test_cli_bad_csv_in_a_fresh_process(tmp_path):
    csv = tmp_path / "bad.csv"
    csv.write_text("system,task_id,task_type,success\na,t1,x,yes\n")
    r = subprocess.run([sys.executable, "-m", "dyna.cli", "run",
                        str(_toml(tmp_path, "bad", csv)), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "row 1 has 'yes'" in r.stderr


def test_a_render_mode_is_refused_as_the_mazes_do():
    for mode in ("human", "ansi", "rgb_array"):
        with pytest.raises(ConfigError) as e:
            EscalationEnv(render_mode=mode)
        assert (e.value.field, e.value.value) == ("render_mode", mode)
        # gymnasium warns of a mode the env does not declare; the env then refuses it
        with pytest.raises(ConfigError), pytest.warns(UserWarning, match=f"render_mode='{mode}' "
                                                      "that is not in the possible render_modes"):
            gym.make("dyna/Escalation-v0", render_mode=mode)
    assert EscalationEnv().render_mode is None
