"""Tests of dyna.store.jsonl: torn and corrupt lines."""

import json

import pytest

from dyna.errors import MissingFileError
from dyna.store.jsonl import append_jsonl, read_jsonl, write_jsonl

TORN = '{"episode": 1, "return": 3.0}\n{"episode": 2, "return": 5.0}\n{"episode": 3, "ret'


@pytest.mark.parametrize("tail", ["", "\n"])
def test_pers02_torn_last_line(tmp_path, tail):
    path = tmp_path / "log.jsonl"
    path.write_text(TORN + tail)
    recs, rep = read_jsonl(path)
    assert [r["episode"] for r in recs] == [1, 2]
    assert rep.n_skipped == 1 and rep.skipped[0][0] == 3
    append_jsonl(path, [{"episode": 4, "return": 1.0}])
    recs, rep = read_jsonl(path)
    assert [r["episode"] for r in recs] == [1, 2, 4]
    assert recs[-1] == {"episode": 4, "return": 1.0}
    assert rep.n_skipped == 1 and rep.n_records == 3


def test_pers02_corrupt_middle_line_counted(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2,,}\n[1, 2]\n\xff\xfe\n\n{"a": 3}\n')
    recs, rep = read_jsonl(path)
    assert [r["a"] for r in recs] == [1, 3]
    assert [n for n, _ in rep.skipped] == [2, 3, 4]
    assert rep.n_lines == 5
    d = rep.to_dict()
    assert d["n_skipped"] == 3 and d["skipped"][1]["line"] == 3


def test_write_is_atomic_and_round_trips(tmp_path):
    path = tmp_path / "out.jsonl"
    recs = [{"x": 0.1 + 0.2, "s": "é\n", "nested": {"l": [1, None, True]}},
            {"x": 1e-300, "s": "", "nested": {}}]
    assert write_jsonl(path, recs) == 2
    back, rep = read_jsonl(path)
    assert back == recs and rep.n_skipped == 0
    with pytest.raises(ValueError):
        write_jsonl(path, [{"x": float("nan")}])
    assert read_jsonl(path)[0] == recs  # failed write left the old file
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_append_refuses_unencodable_batch_whole(tmp_path):
    path = tmp_path / "a.jsonl"
    append_jsonl(path, [{"a": 1}])
    with pytest.raises(ValueError):
        append_jsonl(path, [{"a": 2}, {"a": float("inf")}])
    assert read_jsonl(path)[0] == [{"a": 1}]
    lines = path.read_text().splitlines()  # one batch: its header, then its one record
    assert len(lines) == 2 and json.loads(lines[1]) == {"a": 1}


def test_missing_file(tmp_path):
    with pytest.raises(MissingFileError):
        read_jsonl(tmp_path / "nope.jsonl")
