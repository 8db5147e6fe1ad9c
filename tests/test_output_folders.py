"""Output folders: unwritable --out, same-second runs, a taken name, damaged folders."""

import json
import os

import pytest

from dyna.cli import main
from dyna.errors import ConfigError, MissingFileError
from dyna.experiment import output_folder, runner
from dyna.experiment.backends import InProcessBackend
from dyna.experiment.output_folder import rename_into_place
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import load_output, run_experiment


def _cfg():
    return parse_experiment({"name": "tiny", "seed": 5, "runs": 1,
                         "env": {"id": "dyna/DynaMaze-v0"}, "schedule": {"episodes": 2},
                         "defaults": {"agent": "dyna_q"}, "variants": [{"name": "q"}]})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return run_experiment(_cfg(), tmp_path_factory.mktemp("ok") / "run",
                          backend=InProcessBackend(), progress=False)


@pytest.mark.parametrize("where", ["/proc/dyna-out", "afile/sub"])
def test_an_unwritable_out_is_one_line_before_any_job(where, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    toml = tmp_path / "t.toml"
    toml.write_text('name = "tiny"\nruns = 1\n[env]\nid = "dyna/DynaMaze-v0"\n'
                    '[schedule]\nepisodes = 2\n[[variants]]\nname = "q"\nagent = "dyna_q"\n')
    assert main(["run", str(toml), "--out", where]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dyna: error: --out='{where}'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "t.toml"]


def test_default_folders_of_runs_in_the_same_second_differ(tmp_path):
    # 32 random bits: 50 names collide with probability < 3e-7
    cfg = _cfg()
    names = {runner.default_out_dir(cfg, tmp_path).name for _ in range(50)}
    assert len(names) == 50
    assert all(n.startswith("tiny-") and len(n.split("-")[-1]) == 8 for n in names)


def test_a_default_folder_whose_random_name_is_taken_gets_a_number(tmp_path, monkeypatch):
    class Frozen(output_folder._dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 12, 6, 17, 0, 0, tzinfo=tz)

    monkeypatch.setattr(output_folder._dt, "datetime", Frozen)
    monkeypatch.setattr(output_folder.os, "urandom", lambda n: bytes(range(n)))
    first = runner.default_out_dir(_cfg(), tmp_path)
    assert first.name == "tiny-20261206-170000-00010203"
    first.mkdir()
    assert runner.default_out_dir(_cfg(), tmp_path).name == "tiny-20261206-170000-00010203-2"


def test_a_finished_run_is_never_lost_to_a_taken_name(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "theirs.txt").write_text("another run's file")
    tmp = tmp_path / ".run.tmp"
    tmp.mkdir()
    (tmp / "manifest.json").write_text("{}")
    got = rename_into_place(tmp, out)
    assert got == tmp_path / "run-2" and (got / "manifest.json").read_text() == "{}"
    assert (out / "theirs.txt").read_text() == "another run's file"
    assert "run-2" in capsys.readouterr().err


def _copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


def test_damaged_output_folders_are_one_typed_error(finished, tmp_path, capsys):
    assert load_output(finished).config.name == "tiny"
    bad_json = _copy(finished, tmp_path / "j")
    (bad_json / "manifest.json").write_text("{not json")
    bad_table = _copy(finished, tmp_path / "t")
    (bad_table / "results.parquet").write_bytes(b"PAR1 garbage")
    edited = _copy(finished, tmp_path / "e")
    m = json.loads((edited / "manifest.json").read_text())
    m["tables"]["results.parquet"]["sha256"] = "0" * 64
    (edited / "manifest.json").write_text(json.dumps(m))
    not_manifest = _copy(finished, tmp_path / "n")
    (not_manifest / "manifest.json").write_text("[1, 2]")
    cases = {bad_json: "not valid JSON", bad_table: "sha256", edited: "sha256",
             not_manifest: "not a dyna manifest"}
    for folder, words in cases.items():
        with pytest.raises(ConfigError) as e:
            load_output(folder)
        assert e.value.field == "DIR" and words in str(e.value)
        assert main(["plot", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err
    # a table whose manifest entry has no sha256, or a manifest without its tables, cannot
    # be checked: refused, the table named
    nosha = _copy(finished, tmp_path / "s")
    m = json.loads((nosha / "manifest.json").read_text())
    m["tables"]["results.parquet"].pop("sha256")
    (nosha / "manifest.json").write_text(json.dumps(m))
    notables = _copy(finished, tmp_path / "u")
    m = json.loads((notables / "manifest.json").read_text())
    del m["tables"]
    (notables / "manifest.json").write_text(json.dumps(m))
    for folder in (nosha, notables):
        with pytest.raises(ConfigError, match="results.parquet': unverifiable: manifest.json "
                                              "records no sha256 for it"):
            load_output(folder)
    # a file given as DIR is said to be a file, not "no such folder"
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        load_output(f)
    with pytest.raises(MissingFileError, match="no such folder"):
        load_output(tmp_path / "missing")
    assert not os.path.exists(tmp_path / "missing")
