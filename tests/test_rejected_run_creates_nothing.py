"""A rejected ``dyna run`` creates nothing anywhere: no output folder, nothing under HOME
(matplotlib's ``~/.config/matplotlib`` and ``~/.cache/matplotlib``, numba's
``~/.cache/dyna/numba``), nothing in the working directory. matplotlib (which creates its
folders when imported) is imported only to draw, after the runs; validating a config defines
no numba kernel (numba creates its cache folder when one is defined). A valid run still
renders, and only then do matplotlib's folders appear."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Runs of each rejected command.
REPEAT = 2

from test_cli import GOOD  # noqa: E402 - a valid config (DynaMaze, 3 episodes)

#: Where each rejection happens: the file's top level (before dyna.agents is asked), an
#: agent's hyper-parameters (dyna.agents' names and checks), the kind's ``prepare`` and the
#: output folder (the last check before the runs).
CASES = {
    "unknown key": (GOOD.replace("seed = 0", "seed = 0\nbogus_key = 1"), [], "bogus_key"),
    "bad value": (GOOD.replace("alpha = 0.1", "alpha = -3"), [], "defaults.alpha=-3"),
    "unknown env": (GOOD.replace("dyna/DynaMaze-v0", "dyna/NoSuchMaze-v0"), [],
                    "env.id='dyna/NoSuchMaze-v0'"),
    "--out exists": (GOOD, ["--out", "taken"], "--out"),
}


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _env(home: Path, **extra: str) -> dict[str, str]:
    """The test's environment with HOME at ``home`` and nothing that would send a config
    or cache folder elsewhere (so whatever is made lands under ``home``)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "MPLCONFIGDIR",
                        "NUMBA_CACHE_DIR", "DYNA_RENDER", "DYNA_RENDER_TIMEOUT")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT), **extra)
    return env


@pytest.mark.parametrize("case", list(CASES))
def test_a_rejected_run_creates_nothing_anywhere(tmp_path, case):
    text, args, field = CASES[case]
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / ".profile").write_text("# a HOME that holds something already\n")
    (work / "exp.toml").write_text(text)
    (work / "taken").mkdir()
    before_home, before_work = _listing(home), _listing(work)
    for attempt in range(REPEAT):
        done = subprocess.run([sys.executable, "-m", "dyna.cli", "run", "exp.toml",
                               "--no-progress", *args], cwd=work, env=_env(home),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (attempt, done.stderr)
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("dyna: error: "), done.stderr
        assert field in lines[0]
        assert done.stdout == ""
        assert _listing(home) == before_home, (attempt, case)
        assert _listing(work) == before_work, (attempt, case)


def test_a_valid_run_still_renders(tmp_path):
    """The same command with a valid config renders its plots and report; matplotlib's
    folders appear under HOME only now. The compiled kernels come from the test's own
    numba cache (a fresh one would compile for a minute)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "exp.toml").write_text(GOOD)
    import dyna  # noqa: F401 -- points NUMBA_CACHE_DIR at this checkout's cache (dyna.kernel_cache)

    extra = {}
    if os.environ.get("NUMBA_CACHE_DIR"):
        extra["NUMBA_CACHE_DIR"] = os.environ["NUMBA_CACHE_DIR"]
    done = subprocess.run([sys.executable, "-m", "dyna.cli", "run", "exp.toml", "--out",
                           "out", "--no-progress"], cwd=work, env=_env(home, **extra),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "out"
    out = work / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json", "plots", "report.md", "results.parquet", "runs.parquet"]
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "steps_per_episode.png", "steps_per_episode.svg"]
    assert sorted(p.name for p in work.iterdir()) == ["exp.toml", "out"]
    assert ".config/matplotlib" in _listing(home)
