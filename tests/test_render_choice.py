"""Where ``dyna run`` draws (issue 17): the render worker only when a core is free for it
(DYNA_RENDER=auto, the default), and the dyna command's quick exit after a successful run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dyna.errors import ConfigError
from dyna.experiment import render_worker, runner
from dyna.experiment.registry import load_experiment
from dyna.experiment.render_worker import RenderWorker, free_cores, render_mode

ROOT = Path(__file__).resolve().parents[1]
MAZE = ROOT / "experiments" / "dyna_maze.toml"


@pytest.fixture
def loadavg(tmp_path, monkeypatch):
    """Write a /proc/loadavg line and a CPU affinity of ``cores`` cores."""
    def make(line: str | None, cores: int):
        path = tmp_path / "loadavg"
        if line is None:
            path = tmp_path / "missing"
        else:
            path.write_text(line)
        monkeypatch.setattr(render_worker, "LOADAVG", str(path))
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    return make


@pytest.mark.parametrize("line, cores, free", [
    ("0.50 0.40 0.30 1/120 999\n", 2, 1.0),    # only this process runs: one core free
    ("0.50 0.40 0.30 2/120 999\n", 2, 0.0),    # one other task runs: none free
    ("1.90 2.10 2.00 3/120 999\n", 2, -1.0),   # two others
    ("0.50 0.40 0.30 3/120 999\n", 4, 1.0),    # 4 - 1 - 2
    ("0.50 0.40 0.30 1/120 999\n", 1, 0.0),    # a single core is this process's own
])
def test_free_cores_counts_the_other_running_tasks(loadavg, line, cores, free):
    loadavg(line, cores)
    assert free_cores() == free


def test_free_cores_falls_back_to_the_load_average(loadavg, monkeypatch):
    loadavg(None, 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.25, 1.0, 1.0))
    assert free_cores() == pytest.approx(0.75)
    loadavg("garbage\n", 2)
    assert free_cores() == pytest.approx(0.75)


@pytest.mark.parametrize("env, free, mode", [
    ("", 1.0, "worker"), ("auto", 1.0, "worker"), ("", 0.5, "serial"),
    ("auto", -2.0, "serial"), ("worker", -2.0, "worker"), ("serial", 1.0, "serial"),
])
def test_auto_is_the_worker_only_with_a_free_core(monkeypatch, env, free, mode):
    monkeypatch.setenv("DYNA_RENDER", env)
    monkeypatch.setattr(render_worker, "free_cores", lambda: free)
    assert render_mode("auto") == mode
    # a library call's default stays serial whatever the load
    assert render_mode("serial") == (mode if env else "serial")


def test_a_bad_dyna_render_names_the_three_values(monkeypatch):
    monkeypatch.setenv("DYNA_RENDER", "both")
    with pytest.raises(ConfigError) as err:
        render_mode("auto")
    assert err.value.field == "DYNA_RENDER" and err.value.value == "both"
    assert "'auto'" in str(err.value)


def test_dyna_run_on_a_busy_machine_starts_no_worker(tmp_path, monkeypatch):
    from dyna.cli import main

    monkeypatch.delenv("DYNA_RENDER", raising=False)
    monkeypatch.setattr(runner, "project_revision", lambda: {"commit": "0" * 40,
                                                             "dirty": False})
    made = []
    monkeypatch.setattr(RenderWorker, "start",
                        classmethod(lambda cls, kind: made.append(kind)))
    monkeypatch.setattr(render_worker, "free_cores", lambda: 0.0)
    monkeypatch.setattr(runner, "free_cores", lambda: 0.0)
    assert main(["run", str(MAZE), "--runs", "2", "--out", str(tmp_path / "busy"),
                 "--no-progress"]) == 0
    assert made == []
    assert (tmp_path / "busy" / "plots" / "steps_per_episode.svg").is_file()
    # a library call asked for auto decides the same way
    runner.run_experiment(load_experiment(MAZE, runs=2), tmp_path / "lib",
                          progress=False, render="auto")
    assert made == [] and (tmp_path / "lib" / "report.md").is_file()
    # with a free core the same call asks for a worker (this fake cannot start one)
    monkeypatch.setattr(runner, "free_cores", lambda: 1.0)
    monkeypatch.setattr(RenderWorker, "start",
                        classmethod(lambda cls, kind: made.append(kind)))
    runner.run_experiment(load_experiment(MAZE, runs=2), tmp_path / "free",
                          progress=False, render="auto")
    assert made == ["tabular"] and (tmp_path / "free" / "report.md").is_file()


def test_the_dyna_command_exits_with_the_folder_in_place(tmp_path):
    """``python -m dyna.cli run`` ends by os._exit after success: the whole folder is
    there, the path printed, status 0; a failing run still exits 2 with one line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DYNA_RENDER": "serial"}
    out = tmp_path / "o"
    done = subprocess.run([sys.executable, "-m", "dyna.cli", "run", str(MAZE), "--runs",
                           "2", "--out", str(out), "--no-progress"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runs"] == 2 and manifest["config"]["runs"] == 2
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "steps_per_episode.png", "steps_per_episode.svg"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["manifest.json", "plots", "report.md", "results.parquet", "runs.parquet"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    done = subprocess.run([sys.executable, "-m", "dyna.cli", "run", str(MAZE), "--out",
                           str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("dyna: error: --out")


def test_the_worker_side_of_a_report_imports_no_numba():
    """The worker's report reads the config hash from the manifest and a config without a
    sweep never asks dyna.agents for its hyper-parameter names: neither imports numba
    (0.25 s of the worker's critical path before)."""
    import base64
    import pickle

    config = load_experiment(MAZE, runs=2)
    blob = base64.b64encode(pickle.dumps(config)).decode()
    script = f"""
import base64, pickle, sys
from dyna.experiment.kinds.tabular import config as tabular_config, report
from dyna.experiment.protocol import ExperimentOutput
c = pickle.loads(base64.b64decode({blob!r}))
out = ExperimentOutput(config=c, manifest={{"config_hash": "ab" * 32, "timing": {{}}}},
                       tables={{}})
lines = report._setup_section(out)
print(c.swept_hparams, "numba" in sys.modules, "dyna.agents" in sys.modules)
print([ln for ln in lines if ln.startswith("- config sha256")][0])
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()[:2]
    assert first == "() False False"
    assert second.startswith("- config sha256: `abababab")
    # the parent computes the same hash the manifest records
    assert len(config.hash) == 64 and config.swept_hparams == ()


def test_dyna_run_starts_the_early_worker_only_for_the_kinds_that_render_in_one(
        tmp_path, monkeypatch):
    from dyna.experiment import cli as experiment_cli
    from dyna.experiment.registry import KINDS, get_kind

    # the static list is the built-in kinds that offer preload_render
    assert render_worker.WORKER_KINDS == {
        name for name in KINDS if callable(getattr(get_kind(name), "preload_render", None))}
    made = []
    monkeypatch.setattr(RenderWorker, "start",
                        classmethod(lambda cls, kind: made.append(kind) or "started"))
    for kind, expected in [("tabular", "started"), ("escalation", None),
                           ("agent_tasks", None), ("no_such_kind", None)]:
        path = tmp_path / f"{kind}.toml"
        path.write_text(f'kind = "{kind}"\nname = "x"\n')
        assert experiment_cli._start_worker(str(path), "worker") == expected
        assert experiment_cli._start_worker(str(path), "serial") is None
    assert made == ["tabular"]
    (tmp_path / "bad.toml").write_text("kind = [")
    assert experiment_cli._start_worker(str(tmp_path / "bad.toml"), "worker") is None
    assert experiment_cli._start_worker(str(tmp_path / "missing.toml"), "worker") is None
    assert made == ["tabular"]


def test_the_quick_exit_is_only_for_the_dyna_command_after_a_plain_tabular_run(monkeypatch):
    from dyna.experiment import cli as experiment_cli

    exits = []
    monkeypatch.setattr(os, "_exit", lambda status: exits.append(status))
    experiment_cli._exit_if_command(0)           # __main__ is pytest here: no exit
    assert exits == []
    import dyna.cli

    fake_main = type(sys)("__main__")
    fake_main.main = dyna.cli.main               # as the console script's __main__
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    monkeypatch.setattr(sys, "argv", ["-c", "run", "x.toml"])
    experiment_cli._exit_if_command(0)           # python -c "from dyna.cli import main..."
    assert exits == []                           # has more to do after main(): no exit
    monkeypatch.setattr(sys, "argv", ["/venv/bin/dyna", "run", "x.toml"])
    experiment_cli._exit_if_command(2)           # a failure returns normally
    assert exits == []
    experiment_cli._exit_if_command(0)
    assert exits == [0]
    calls = []
    monkeypatch.setattr(experiment_cli, "_exit_if_command", lambda s: calls.append(s))
    monkeypatch.setattr(experiment_cli, "_start_worker", lambda file, mode: None)
    for plain in (True, False):
        monkeypatch.setattr(experiment_cli, "_run", lambda a, w, m, p=plain: (0, p))
        assert experiment_cli._cmd_run(argparse.Namespace(file=str(MAZE))) == 0
    assert calls == [0]                          # not after a pool, Ray or another kind
