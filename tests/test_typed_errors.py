"""Bad input raises a typed error naming the field and the value, the same
through the Python API, dispatch (what the MCP server calls) and the buffer; the CLI prints
one line and exits 2."""

import json
import math

import numpy as np
import pytest

from dyna.buffer import MAX_DEPTH, ExperienceBuffer, check_value, short_value
from dyna.cli import main
from dyna.errors import ConfigError, DynaError, MissingFileError
from dyna.experience import MAX_KEEP, ExperienceStore
from dyna.store.jsonl import read_jsonl, write_jsonl

DIM = 4
BASE = dict(task_type="triage", action_type="retry", outcome="success", reward=1.0,
            timestamp=1_700_000_000.0)


def nested(depth):
    """A value of ``depth`` nested lists around 1."""
    v = 1
    for _ in range(depth):
        v = [v]
    return v


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    s = ExperienceStore("" if request.param == "memory" else tmp_path / "x.db", dim=DIM)
    yield s
    s.close()


BAD_EPISODES = [
    # (changes to a good episode, field named, value shown, reason)
    (dict(reward=10 ** 400), "reward[0]", "~1e400", "beyond the float64 range"),
    (dict(reward=-(10 ** 5000)), "reward[0]", "-~1e5000", "beyond the float64 range"),
    (dict(timestamp=10 ** 400), "timestamp[0]", "~1e400", "beyond the float64 range"),
    (dict(state_features=[1, 2, 10 ** 400, 4]), "state_features[0][2]", "~1e400",
     "beyond the float64 range"),
    (dict(task_type=b"triage"), "task_type", b"triage", "must be a str, not bytes"),
    (dict(task_type=b"\xff"), "task_type", b"\xff", "must be a str, not bytes"),
    (dict(run_id="r\ud800"), "run_id", "\ud800", "lone surrogate at position 1"),
    (dict(metadata={"note": "a\udfffb"}), "metadata[0]", "\udfff", "lone surrogate"),
    (dict(metadata={"k\ud83d": 1}), "metadata[0]", "\ud83d", "lone surrogate"),
    (dict(state_before={"x": nested(MAX_DEPTH)}), "state_before[0]", "depth > 64",
     "MAX_DEPTH=64"),
    (dict(action_taken=nested(900)), "action_taken[0]", "depth > 64", "MAX_DEPTH=64"),
    (dict(metadata=nested(100_000)), "metadata[0]", "depth > 64", "MAX_DEPTH=64"),
]


@pytest.mark.parametrize("change,field,value,reason", BAD_EPISODES)
@pytest.mark.parametrize("via", ["record", "dispatch", "episodes"])
def test_bad_episode_is_a_config_error_naming_field_and_value(store, via, change, field,
                                                              value, reason):
    store.record("t1", **BASE)
    episode = {**BASE, **change}
    with pytest.raises(ConfigError) as e:
        if via == "record":
            store.record("t1", **episode)
        elif via == "dispatch":
            store.dispatch("record", tenant_id="t1", **episode)
        else:
            store.record("t1", episodes=[episode])
    assert type(e.value) is ConfigError
    assert e.value.field == field and e.value.value == value
    assert reason in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(f"{field}={value!r}: ")
    assert len(store) == 1  # nothing of it was kept
    if store._db is not None:
        assert store._db.count() == 1


@pytest.mark.parametrize("change,field,value,reason", BAD_EPISODES)
def test_bad_episode_in_the_buffer_names_the_same_field(change, field, value, reason):
    buf = ExperienceBuffer(DIM)
    episode = {**BASE, **change}
    for call in (lambda: buf.record(tenant_id="t1", **episode),
                 lambda: buf.record_batch(tenant_id="t1", **{
                     k: (np.asarray([v], dtype=np.float32) if k == "state_features" and
                         not isinstance(v[2], int) else [v]) if k not in ("task_type", "run_id")
                     else v for k, v in episode.items()})):
        with pytest.raises(ConfigError) as e:
            call()
        assert e.value.field.split("[")[0] == field.split("[")[0]
        assert e.value.value == value and reason in str(e.value)
    assert len(buf) == 0


def test_nesting_up_to_max_depth_is_kept(store):
    ok = nested(MAX_DEPTH)
    store.record("t1", **BASE, metadata=ok)
    assert store.export_data("t1")["records"][0]["metadata"] == ok
    check_value("metadata", {"a": nested(MAX_DEPTH - 1)})
    with pytest.raises(ConfigError, match="MAX_DEPTH=64"):
        check_value("metadata", {"a": nested(MAX_DEPTH)})
    assert MAX_DEPTH == 64


def test_valid_unicode_and_surrogate_pairs_are_kept(store):
    text = "caf\u00e9 \U0001F600 \u4e2d"
    store.record("t1", **{**BASE, "run_id": text}, metadata={text: text})
    rec = store.export_data("t1")["records"][0]
    assert rec["run_id"] == text and rec["metadata"] == {text: text}


def test_query_dicts_are_checked_like_episodes(store):
    store.record("t1", **BASE, metadata={"a": 1})
    with pytest.raises(ConfigError) as e:
        store.dispatch("query_similar", tenant_id="t1", metadata=nested(1000))
    assert e.value.field == "metadata" and e.value.value == "depth > 64"
    with pytest.raises(ConfigError) as e:
        store.query_similar("t1", state_before={"x": "\ud800"})
    assert e.value.field == "state_before" and e.value.value == "\ud800"
    with pytest.raises(ConfigError) as e:
        store.query_similar("t1", state_features=[10 ** 400, 0, 0, 0])
    assert e.value.field == "state_features[0][0]" and e.value.value == "~1e400"


@pytest.mark.parametrize("op,kwargs,field,value", [
    ("compact", {"compact_keep_records": 10 ** 400}, "compact_keep_records", "~1e400"),
    ("compact", {"compact_keep_records": 10 ** 5000}, "compact_keep_records", "~1e5000"),
    ("replay_experience", {"tenant_id": "t1", "batch_size": 10 ** 5000}, "batch_size",
     "~1e5000"),
    ("prune_old", {"max_age_seconds": 10 ** 400}, "max_age_seconds", "~1e400"),
    ("replay_experience", {"tenant_id": "t1", "strategy": "priority", "ids": [0],
                           "priorities": [10 ** 400]}, "priorities[0]", "~1e400"),
    ("get_transition_table", {"tenant_id": "t1", "bin_count": -(10 ** 30)}, "bin_count",
     "-~1e30"),
])
def test_huge_integers_are_config_errors(store, op, kwargs, field, value):
    store.record("t1", **BASE)
    with pytest.raises(ConfigError) as e:
        store.dispatch(op, **kwargs)
    assert e.value.field == field and e.value.value == value
    assert len(str(e.value)) < 200
    assert MAX_KEEP == 2 ** 62


def test_a_message_shows_a_size_not_every_digit():
    from dyna.errors import SHOWN_CHARS

    assert str(ConfigError("x", 10 ** 40, "too big")) == "x='~1e40': too big"
    assert str(ConfigError("x", -10 ** 400, "too small")) == "x='-~1e400': too small"
    assert str(ConfigError("x", 10 ** 29, "ok")) == f"x={10 ** 29}: ok"   # 30 digits: shown
    # a list of huge numbers (repr 606 characters) is cut, its length said
    e = str(ConfigError("robustness.factors", [10 ** 300] * 2, "must be distinct"))
    assert e == ("robustness.factors=[" + "1" + "0" * (SHOWN_CHARS - 42) + "... (606 "
                 "characters): must be distinct")


def test_short_value():
    assert short_value(10 ** 400) == "~1e400" and short_value(-(10 ** 19)) == "-~1e19"
    assert short_value(10 ** 18) == 10 ** 18 and short_value(1.5) == 1.5
    assert math.isclose(float(short_value(10 ** 18)), 1e18)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_into_a_missing_folder_or_onto_a_folder(store, tmp_path, fmt):
    store.record("t1", **BASE)
    missing = tmp_path / "no" / "such" / f"e.{fmt}"
    with pytest.raises(MissingFileError) as e:
        store.dispatch("export_data", tenant_id="t1", path=str(missing), format=fmt)
    assert e.value.field == "path" and e.value.value == missing
    assert str(e.value) == (f"path={str(missing)!r}: its folder "
                            f"{str(missing.parent)!r} does not exist")
    folder = tmp_path / "taken"
    folder.mkdir()
    with pytest.raises(ConfigError) as e:
        store.dispatch("export_data", tenant_id="t1", path=str(folder), format=fmt)
    assert e.value.field == "path" and e.value.value == str(folder)
    assert "is a folder" in str(e.value)
    with pytest.raises(ConfigError, match="is a folder"):
        store.dispatch("to_dataset", tenant_id="t1", path=str(folder))
    assert not (tmp_path / "no").exists() and list(folder.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("x.db")) == \
        ["taken"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_import_from_a_folder_is_a_config_error(store, tmp_path, fmt):
    folder = tmp_path / "in"
    folder.mkdir()
    with pytest.raises(ConfigError) as e:
        store.dispatch("import_data", path=str(folder), format=fmt)
    assert e.value.field == "path" and e.value.value == str(folder)
    assert str(e.value).endswith("is a folder, not a " + ("JSON Lines" if fmt == "jsonl"
                                                          else "Parquet") + " file")


def test_jsonl_writer_and_reader_refuse_a_folder_and_deep_lines(tmp_path):
    with pytest.raises(ConfigError, match="is a folder"):
        write_jsonl(tmp_path, [{"a": 1}])
    with pytest.raises(ConfigError, match="is a folder"):
        read_jsonl(tmp_path)
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\n" + "[" * 200_000 + "]" * 200_000 + "\n")
    recs, rep = read_jsonl(path)  # a line too deep to parse is skipped, not a crash
    assert recs == [{"a": 1}] and [n for n, _ in rep.skipped] == [2]
    assert rep.skipped[0][1].startswith("RecursionError")


# ------------------------------------------------------------------ the CLI: one line, exit 2
@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.db"
    with ExperienceStore(path, dim=DIM) as s:
        s.record("t1", **BASE)
    return path


@pytest.mark.parametrize("argv,start", [
    (["compact", "{db}", "--keep", str(10 ** 400)],
     "dyna: error: argument --keep: must be an integer <= 2**62, got one of 401 digits"),
    (["compact", "{db}", "--keep", "9" * 20],
     f"dyna: error: --keep={'9' * 20}: must be an integer >= 0 and <= 2**62\n"),
    (["compact", "{db}", "--keep", "1" + "0" * 5000],
     "dyna: error: argument --keep: must be an integer <= 2**62, got one of 5001 digits"),
    (["compact", "{db}", "--keep", "-1"], "dyna: error: --keep=-1: must be an integer >= 0"),
    (["export", "{db}", "--tenant", "t1", "--out", "{tmp}/no/e.jsonl"],
     "dyna: error: --out='{tmp}/no/e.jsonl': its folder '{tmp}/no' does not exist"),
    (["export", "{db}", "--tenant", "t1", "--out", "{tmp}"],
     "dyna: error: --out='{tmp}': is a folder"),
    (["export", "{db}", "--tenant", "t1", "--out", "{tmp}/e.parquet", "--format", "parquet",
      "--task-type", "x"], None),
])
def test_cli_prints_one_line_and_exits_2(db, tmp_path, capsys, argv, start):
    argv = [a.format(db=db, tmp=tmp_path) for a in argv]
    try:
        rc = main(["store", *argv])
    except SystemExit as exc:  # argparse's own errors (the parser prints one line)
        rc = exc.code
    out, err = capsys.readouterr()
    if start is None:  # the good command still works
        assert rc == 0 and json.loads(out)["n"] == 0
        return
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(start.format(tmp=tmp_path)), err
    assert len(err) < 300
    with ExperienceStore(db, dim=DIM) as s:  # nothing changed
        assert len(s) == 1


def test_every_typed_error_here_is_a_dyna_error():
    for exc in (ConfigError("f", 1, "r"), MissingFileError("path", "x")):
        assert isinstance(exc, DynaError)
