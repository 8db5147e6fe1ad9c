"""The environment of a kind's helper processes (dyna.experiment.helper_process):
``DYNA_RENDER`` (auto or serial) and ``DYNA_RENDER_TIMEOUT`` are checked before a run
starts, and a helper runs the parent's copy of dyna."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dyna.errors import ConfigError
from dyna.experiment import runner
from dyna.experiment.helper_process import child_environment, helpers_allowed
from dyna.experiment.registry import load_experiment

ROOT = Path(__file__).resolve().parents[1]
MAZE = ROOT / "experiments" / "dyna_maze.toml"


@pytest.mark.parametrize("value, allowed", [("", True), ("auto", True), (" serial ", False),
                                            ("serial", False)])
def test_dyna_render_serial_keeps_every_figure_in_this_process(monkeypatch, value, allowed):
    monkeypatch.setenv("DYNA_RENDER", value)
    assert helpers_allowed() is allowed


def test_a_bad_dyna_render_is_refused_before_the_runs(tmp_path, monkeypatch, capsys):
    from dyna.cli import main

    monkeypatch.setenv("DYNA_RENDER", "sideways")
    assert main(["run", str(MAZE), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dyna: error: DYNA_RENDER")
    assert "'sideways'" in err[0] and "'serial'" in err[0]
    assert not (tmp_path / "x").exists()


def test_a_bad_timeout_is_refused_before_the_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("DYNA_RENDER", raising=False)
    monkeypatch.setenv("DYNA_RENDER_TIMEOUT", "-1")
    with pytest.raises(ConfigError) as err:
        runner.run_experiment(load_experiment(MAZE, runs=2), tmp_path / "d", progress=False)
    assert err.value.field == "DYNA_RENDER_TIMEOUT" and not (tmp_path / "d").exists()


def test_a_helper_imports_the_parents_dyna_and_no_site_folder_goes_first(monkeypatch):
    import site

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = child_environment()
    assert env["PYTHONPATH"] == f"{ROOT}{os.pathsep}/elsewhere"   # a checkout: first
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(ROOT)])
    assert child_environment()["PYTHONPATH"] == "/elsewhere"   # installed
