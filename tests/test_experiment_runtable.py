"""The optional [run] table: where to run, overridden by the command line, outside the hash."""

import json

import pytest

from conftest import tables_only
from dyna.cli import main
from dyna.experiment.config import load_run_options
from dyna.experiment.registry import load_experiment

BASE = """
name = "rt"
seed = 0
runs = 2
[env]
id = "dyna/DynaMaze-v0"
[schedule]
episodes = 3
[defaults]
agent = "dyna_q"
[[variants]]
name = "a"
"""


def _write(tmp_path, text, name="x.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_run_table_picks_the_backend_and_stays_out_of_the_hash(tmp_path):
    plain = _write(tmp_path, BASE, "plain.toml")
    with_run = _write(tmp_path, BASE + '[run]\nbackend = "process"\nworkers = 2\nblock_size = 1\n')
    assert load_run_options(with_run) == {"backend": "process", "workers": 2, "block_size": 1}
    assert load_run_options(plain) == {}
    assert load_experiment(with_run).hash == load_experiment(plain).hash
    out, out2 = tmp_path / "out", tmp_path / "out2"
    with tables_only():
        assert main(["run", str(with_run), "--out", str(out), "--no-progress"]) == 0
        # the command line wins
        assert main(["run", str(with_run), "--out", str(out2), "--backend", "inprocess",
                     "--no-progress"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"]["name"] == "process" and manifest["backend"]["workers"] == 2
    assert json.loads((out2 / "manifest.json").read_text())["backend"]["name"] == "inprocess"
    assert (out / "results.parquet").read_bytes() == (out2 / "results.parquet").read_bytes()


@pytest.mark.parametrize("table, field", [('workrs = 2', "run.workrs"),
                                          ("workers = 0", "run.workers"),
                                          ("backend = 3", "run.backend")])
def test_run_table_errors_name_the_field(tmp_path, capsys, table, field):
    path = _write(tmp_path, BASE + "[run]\n" + table + "\n")
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]
    assert not (tmp_path / "o").exists()
