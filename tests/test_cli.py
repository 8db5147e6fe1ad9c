"""`dyna run` / `dyna plot`: bad input is one line naming field and value, exit 2, and no
output folder; good input writes one folder."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dyna.cli import main

GOOD = """\
name = "cli"
seed = 0
runs = 3

[env]
id = "dyna/DynaMaze-v0"

[schedule]
episodes = 3

[defaults]
agent = "dyna_q"
alpha = 0.1
epsilon = 0.1

[[variants]]
name = "n=2"
n_planning = 2
"""


def _write(tmp_path, text, name="exp.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("edit, args, expected", [
    (('id = "dyna/DynaMaze-v0"', 'id = "dyna/NoSuchMaze-v0"'), [],
     "env.id='dyna/NoSuchMaze-v0'"),
    (('id = "dyna/DynaMaze-v0"', 'id = "FrozenPond"'), [], "env.id='FrozenPond'"),
    (("episodes = 3", "episods = 3"), [], "schedule.episods=3"),
    (("alpha = 0.1", "alpha = -0.1"), [], "defaults.alpha=-0.1"),
    (("n_planning = 2", "n_planning = 2\nepsilon = 1.5"), [], "variants.n=2.epsilon=1.5"),
    (("epsilon = 0.1", "epsilon = -0.2"), [], "defaults.epsilon=-0.2"),
    (None, ["--runs", "0"], "--runs=0"),
    (None, ["--seed", "-1"], "--seed=-1"),
    (None, ["--backend", "bogus"], "--backend='bogus'"),
    (None, ["--backend", "process", "--workers", "0"], "--workers=0"),
    (None, ["--block-size", "0"], "--block-size=0"),
])
def test_bad_input_is_one_line_exit_2_and_no_folder(tmp_path, capsys, edit, args, expected):
    text = GOOD if edit is None else GOOD.replace(*edit)
    toml = _write(tmp_path, text)
    out = tmp_path / "out"
    rc = main(["run", str(toml), "--out", str(out), "--no-progress", *args])
    captured = capsys.readouterr()
    assert rc == 2
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("dyna: error: ")
    assert expected in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.toml"]


def test_missing_file_is_one_line_exit_2(tmp_path, capsys):
    rc = main(["run", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"dyna: error: config={str(tmp_path / 'missing.toml')!r}: no such file\n"
    assert list(tmp_path.iterdir()) == []


def test_misspelt_key_suggests_the_right_one(tmp_path, capsys):
    toml = _write(tmp_path, GOOD.replace("episodes = 3", "episods = 3"))
    assert main(["run", str(toml), "--out", str(tmp_path / "o")]) == 2
    assert "did you mean 'episodes'?" in capsys.readouterr().err


def test_existing_out_folder_is_refused(tmp_path, capsys):
    toml = _write(tmp_path, GOOD)
    (tmp_path / "o").mkdir()
    assert main(["run", str(toml), "--out", str(tmp_path / "o")]) == 2
    assert "--out=" in capsys.readouterr().err


def test_non_integer_runs_is_an_argparse_error(tmp_path, capsys):
    toml = _write(tmp_path, GOOD)
    with pytest.raises(SystemExit) as exc:
        main(["run", str(toml), "--runs", "three"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--runs" in err and "three" in err


def test_run_with_overrides_on_the_process_backend(tmp_path, capsys):
    toml = _write(tmp_path, GOOD)
    out = tmp_path / "result"
    rc = main(["run", str(toml), "--out", str(out), "--runs", "2", "--seed", "4",
               "--backend", "process", "--workers", "2", "--block-size", "1", "--no-progress"])
    assert rc == 0
    assert capsys.readouterr().out == f"{out}\n"
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["runs"], manifest["seed"]) == (2, 4)
    assert manifest["config"]["runs"] == 2
    assert manifest["backend"] == {"name": "process", "workers": 2, "block_size": 1,
                                   "jobs": 2}
    assert manifest["source"] == str(toml)
    assert (out / "report.md").read_text().startswith("# cli\n")


def test_default_output_folder_under_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    toml = _write(tmp_path, GOOD)
    assert main(["run", str(toml), "--no-progress"]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed.parent == Path("runs")
    assert printed.name.startswith("cli-")
    assert (tmp_path / printed / "results.parquet").is_file()


def test_console_script_exit_status_and_single_line(tmp_path):
    toml = _write(tmp_path, GOOD.replace("alpha = 0.1", "alpha = -0.5"))
    dyna = Path(sys.executable).with_name("dyna")
    cmd = [str(dyna)] if dyna.exists() else [sys.executable, "-m", "dyna.cli"]
    proc = subprocess.run([*cmd, "run", str(toml), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == "dyna: error: defaults.alpha=-0.5: must be > 0.0\n"
    assert not (tmp_path / "o").exists()


def test_nested_sub_commands_open_their_help_with_a_summary(capsys):
    from dyna.cli import main

    for argv in (["store", "stats", "--help"], ["escalation", "replay", "--help"],
                 ["skills", "list", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
        lines = capsys.readouterr().out.splitlines()
        summary = lines[lines.index("") + 1]           # the first line after usage
        assert summary[:1].isupper() and summary.endswith("."), (argv, summary)


def test_a_boolean_where_an_integer_belongs_says_so():
    from dyna.errors import ConfigError, check_range

    with pytest.raises(ConfigError) as err:
        check_range("runs", True, 1, integer=True)
    assert err.value.field == "runs" and "must be an integer, not a boolean" in str(err.value)
