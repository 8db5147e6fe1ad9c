"""Plots: figures closed and headless, plot contents, `dyna plot` redraws."""

import os
import subprocess
import sys
import warnings
from pathlib import Path


import pytest

from dyna.cli import main
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import run_experiment

REPO = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

RUN01_TOML = """\
name = "run01"
seed = 1
runs = 25

[env]
id = "dyna/DynaMaze-v0"

[schedule]
episodes = 3

[defaults]
agent = "dyna_q"
n_planning = 2

[[variants]]
name = "dyna_q"

[analysis]
metrics = ["steps_per_episode"]
per_run_plots = true
"""


def _pngs(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.png"))


def test_run01_25_seeds_give_26_pngs_and_no_open_figures(tmp_path):
    """RUN-01: 25 seeds x 1 curve + a summary plot -> 26 PNGs, no open-figure warning
    (warnings are errors), no pyplot figure left open."""
    import tomllib

    cfg = parse_experiment(tomllib.loads(RUN01_TOML))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = run_experiment(cfg, tmp_path / "out")
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []
    pngs = _pngs(out / "plots")
    assert len(pngs) == 26
    assert len(list((out / "plots" / "runs").glob("*.png"))) == 25
    assert (out / "plots" / "runs" / "dyna_q-run24.png").is_file()
    for p in pngs:
        assert p.read_bytes()[:8] == PNG_MAGIC


def test_run01_headless_subprocess_without_mplbackend(tmp_path):
    """RUN-01 through the CLI in a fresh interpreter: no MPLBACKEND, no display, every
    warning an error; the process itself checks that pyplot has no figures."""
    toml = tmp_path / "run01.toml"
    toml.write_text(RUN01_TOML)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MPLBACKEND", "DISPLAY", "WAYLAND_DISPLAY")}
    code = ("import sys; from dyna.cli import main; rc = main(sys.argv[1:]); "
            "import matplotlib, matplotlib.pyplot as plt; "
            "assert plt.get_fignums() == [], plt.get_fignums(); "
            "print(matplotlib.get_backend()); sys.exit(rc)")
    proc = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-W", "error::UserWarning", "-c", code,
         "run", str(toml), "--out", str(tmp_path / "out"), "--no-progress"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines()[0] == str(tmp_path / "out")
    assert proc.stdout.splitlines()[1].lower() == "agg"
    assert len(_pngs(tmp_path / "out" / "plots")) == 26


def _tiny(tmp_path, **changes):
    data = {
        "name": "plots",
        "seed": 0,
        "runs": 4,
        "env": {"id": "dyna/DynaMaze-v0"},
        "schedule": {"episodes": 6, "eval_every": 3, "eval_episodes": 1},
        "defaults": {"agent": "dyna_q"},
        "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=5", "n_planning": 5}],
        "analysis": {"metrics": ["steps_per_episode", "eval_score"], "first_episode": 2},
    }
    data.update(changes)
    return run_experiment(parse_experiment(data), tmp_path / "out")


def test_plot_labels_titles_and_legends(tmp_path):
    out = _tiny(tmp_path)
    svg = (out / "plots" / "steps_per_episode.svg").read_text()
    for text in ("steps per episode", "episode", "0 planning steps (direct RL only)",
                 "5 planning steps", "episodes 2+",
                 "mean of 4 runs, 95% bootstrap CI", "shortest path (14 steps)"):
        assert text in svg, text
    ev = (out / "plots" / "eval_score.svg").read_text()
    for text in ("training episodes", "greedy policy: mean return over 1 episodes",
                 "5 planning steps"):
        assert text in ev, text


def test_cumulative_reward_plot_marks_the_change(tmp_path):
    out = _tiny(tmp_path, env={"id": "dyna/ShortcutMaze-v0", "kwargs": {"change_at": 150}},
                schedule={"total_steps": 300},
                analysis={"metrics": ["cumulative_reward"]})
    svg = (out / "plots" / "cumulative_reward.svg").read_text()
    for text in ("cumulative reward", "time steps", "environment changes",
                 "5 planning steps"):
        assert text in svg, text


def test_dyna_plot_redraws_identical_files(tmp_path, capsys):
    out = _tiny(tmp_path)
    before = {p.name: p.read_bytes() for p in (out / "plots").iterdir()}
    for p in (out / "plots").iterdir():
        p.unlink()
    assert main(["plot", str(out)]) == 0
    after = {p.name: p.read_bytes() for p in (out / "plots").iterdir()}
    assert sorted(after) == sorted(before)
    assert after["steps_per_episode.png"] == before["steps_per_episode.png"]
    assert after["eval_score.svg"] == before["eval_score.svg"]
    printed = capsys.readouterr()
    assert printed.out == f"{out / 'plots'}\n"
    assert printed.err == f"4 plot files written to {out / 'plots'}\n"


def test_dyna_plot_on_missing_folder_is_one_line_exit_2(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DIR=" in err
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty")]) == 2
    assert "manifest.json" in capsys.readouterr().err


def test_dyna_plot_names_what_is_wrong_with_the_folder(tmp_path, capsys):
    from dyna.cli import main

    assert main(["plot", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"dyna: error: DIR={str(tmp_path)!r}: not a dyna output "
                                       "folder (no manifest.json)\n")
    assert main(["plot", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.endswith(": no such folder\n")


def test_one_run_plots_claim_no_mean_and_no_interval(tmp_path):
    from dyna.experiment.backends import InProcessBackend
    from dyna.experiment.plotting import over_runs

    assert over_runs("mean", 1) == "1 run (no interval)"
    assert over_runs("IQM", 10, 0.9) == "IQM of 10 runs, 90% bootstrap CI"
    import tomllib
    cfg = parse_experiment(tomllib.loads(RUN01_TOML.replace("runs = 25", "runs = 1")
                                     .replace("per_run_plots = true", "per_run_plots = false")))
    out = run_experiment(cfg, tmp_path / "one", backend=InProcessBackend(), progress=False)
    svgs = [p.read_text() for p in (out / "plots").glob("*.svg")]
    assert svgs
    text = "".join(svgs)
    assert "of 1 runs" not in text and "1 run (no interval)" in text


def test_steps_per_episode_can_be_smoothed_and_log_scaled(tmp_path):
    import tomllib

    from dyna.errors import ConfigError
    from dyna.experiment.backends import InProcessBackend

    base = tomllib.loads(RUN01_TOML.replace("runs = 25", "runs = 3")
                         .replace("per_run_plots = true", "per_run_plots = false")
                         .replace("episodes = 3", "episodes = 8"))
    plain = parse_experiment(base)
    assert "log_y" not in plain.to_dict()["analysis"]          # older configs keep their hash
    data = {**base, "analysis": {**base["analysis"], "smooth": 4, "log_y": True}}
    cfg = parse_experiment(data)
    assert (cfg.analysis.smooth, cfg.analysis.log_y) == (4, True)
    assert parse_experiment(cfg.to_dict()).hash == cfg.hash
    out = run_experiment(cfg, tmp_path / "s", backend=InProcessBackend(), progress=False)
    svg = (out / "plots" / "steps_per_episode.svg").read_text()
    assert "moving average over 4 episodes" in svg and "(log scale)" in svg
    import polars as pl

    from dyna.experiment.kinds.tabular.plots import smoothed
    f = pl.DataFrame({"variant": ["a"] * 4 + ["b"] * 2, "run": [0] * 6,
                      "episode": [1, 2, 3, 4, 1, 2], "steps": [10, 20, 30, 40, 5, 7]})
    got = smoothed(f, ["variant", "run"], 2)["steps"].to_list()
    assert got == [10.0, 15.0, 25.0, 35.0, 5.0, 6.0]
    for bad, field in (({"smooth": 0}, "analysis.smooth"), ({"log_y": "yes"}, "analysis.log_y")):
        with pytest.raises(ConfigError) as e:
            parse_experiment({**base, "analysis": {**base["analysis"], **bad}})
        assert e.value.field == field


def test_a_stem_with_dots_keeps_them(tmp_path):
    """The v2 skill sweep's report linked plots/scenario_volume-0.25.png, but save() put
    the suffix in place of '.25': volume-0.0, -0.25 and -0.5 all became
    scenario_volume-0.png, each overwriting the last."""
    from dyna.experiment.plotting import figure, save

    for name in ("scenario_volume-0.25", "scenario_volume-0.5"):
        with figure() as fig:
            fig.add_subplot().plot([0, 1], [1, 0])
            assert save(fig, tmp_path / name) == [tmp_path / f"{name}.png",
                                                  tmp_path / f"{name}.svg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "scenario_volume-0.25.png", "scenario_volume-0.25.svg",
        "scenario_volume-0.5.png", "scenario_volume-0.5.svg"]
