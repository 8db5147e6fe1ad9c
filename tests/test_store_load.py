"""Tests of the bulk load path: SQLiteStore.read in chunks and ExperienceStore opening a file.

The load must give back exactly what was written (labels, missing values, unicode, zero
vectors, JSON texts byte for byte) and keep the redaction semantics of the per-row path it
replaced: a stored text is redacted again with the opener's keys when that could change it.
"""

import json
import random

import numpy as np
import pytest

import dyna.store.columns as store_columns
from dyna.buffer import CATEGORICAL_FIELDS, DICT_FIELDS
from dyna.errors import ConfigError
from dyna.experience import RECORD_SCHEMA, ExperienceStore, stored
from dyna.experience.stored import object_key_tokens, rows_to_redact
from dyna.redact import DEFAULT_SENSITIVE_KEYS, redact
from dyna.store.sqlite import SQLiteStore

DIM = 4
T0 = 1_700_000_000.0


def episodes():
    """Episodes with dict fields, missing values, unicode labels and zero vectors."""
    out = []
    for i in range(11):
        e = dict(task_type=("triage", "タスク", "задача")[i % 3], action_type=f"a{i % 2}",
                 outcome=("success", "failure", "部分")[i % 3], reward=float(i) - 3.5,
                 timestamp=T0 + i, state_features=[0.0] * DIM if i % 4 == 0 else
                 [float(i), -1.0, 0.5, 1e-3])
        if i % 2:
            e["state_before"] = {"pos": i, "名前": "値", "nested": {"k": [1, None, True]}}
            e["metadata"] = {"api_key": "secret-value", "note": f"ключ {i}",
                             "tokenizer": "bpe"}
        if i % 3 == 0:
            e["run_id"] = f"r{i // 3}"
            e["action_taken"] = [i, "x\n\"quoted\"", {"Password": "p"}]
        if i == 5:
            e["state_after"] = "plain string"
            e["request_id"] = "req-ü"
        out.append(e)
    return out


def columns(buf):
    """Every buffer column as labels / JSON texts / exact arrays, for equality checks."""
    out = {"id": buf.column("id").tolist()}
    for name in CATEGORICAL_FIELDS:
        out[name] = buf.labels(name).tolist()
    for name in ("reward", "timestamp"):
        out[name] = buf.column(name).tobytes()
    for name in DICT_FIELDS:
        out[name] = buf.column(name).tolist()
    out["features"] = buf.column("features").tobytes()
    out["inv_norm"] = buf.column("inv_norm").tobytes()
    return out


def test_reopen_gives_identical_buffer_and_records(tmp_path):
    s = ExperienceStore(tmp_path / "x.db", dim=DIM)
    s.record("t1", episodes=episodes())
    s.record("t2", **episodes()[1])
    before, records = columns(s.buffer), s.export_data("t1")["records"]
    s.close()
    again = ExperienceStore(tmp_path / "x.db", dim=DIM)
    assert columns(again.buffer) == before
    assert again.export_data("t1")["records"] == records
    assert records[0]["state_features"] == [0.0] * DIM and records[1]["state_after"] is None
    assert records[1]["metadata"] == {"api_key": "[REDACTED]", "note": "ключ 1",
                                      "tokenizer": "bpe"}
    assert records[5]["request_id"] == "req-ü" and records[1]["request_id"] is None
    # zero vectors score 0 (never NaN) after the reload, as before it
    res = again.query_similar("t1", k=11, state_features=[1.0, 0, 0, 0])["results"]
    assert len(res) == 11 and all(np.isfinite(r["score"]) for r in res)
    # the buffer goes on as usual: new ids, pruned rows' texts never reappear
    assert again.record("t1", **episodes()[1])["ids"] == [12]
    again.prune_old(max_age_seconds=1.0)  # clock is now: everything is old
    assert len(again) == 0
    again.record("t1", **episodes()[2])  # no dicts
    assert again.buffer.column("metadata").tolist() == [None]
    assert again.buffer.column("state_before").tolist() == [None]
    again.close()


def test_load_matches_old_per_row_path(tmp_path):
    """Loaded texts equal json.dumps(redact(json.loads(text))) for every row, as before."""
    s = ExperienceStore(tmp_path / "x.db", dim=DIM)
    s.record("t1", episodes=episodes())
    s.close()
    keys = {"tokenizer", "NOTE", "pos"}
    raw = SQLiteStore(tmp_path / "x.db", RECORD_SCHEMA, DIM).read()
    again = ExperienceStore(tmp_path / "x.db", dim=DIM, redact_keys=keys)
    for name in DICT_FIELDS:
        expected = [None if t is None else json.dumps(redact(json.loads(t), frozenset(keys)),
                                                      separators=(",", ":"))
                    for t in raw[name]]
        assert again.buffer.column(name).tolist() == expected, name
    meta = json.loads(again.buffer.column("metadata")[1])
    assert meta == {"api_key": "[REDACTED]", "note": "[REDACTED]", "tokenizer": "[REDACTED]"}
    ep = again.query_similar("t1", k=1, state_features=[1.0, -1.0, 0.5, 1e-3])["results"][0]
    assert ep["episode"]["metadata"]["tokenizer"] == "[REDACTED]"
    again.close()


def _brute(texts, keys):
    return [i for i, t in enumerate(texts) if t is not None and
            json.dumps(redact(json.loads(t), frozenset(keys)), separators=(",", ":")) != t]


def test_rows_to_redact_never_misses_a_row():
    rng = random.Random(3)
    pieces = ["token", "Token", "TO-KEN", "to_ken", "api-key", "API_KEY", "\u212aey", "key",
              "tokenizer", "name", "Name", "x", "名前", "[REDACTED]", "a\"b", "-", "s-k"]

    def value(depth):
        r = rng.random()
        if depth > 2 or r < 0.4:
            return rng.choice(pieces + [1, 2.5, None, True])
        if r < 0.7:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(pieces): value(depth + 1) for _ in range(rng.randint(0, 3))}

    texts = np.array([None if rng.random() < 0.1 else
                      json.dumps(redact(value(0), frozenset({"name"})), separators=(",", ":"))
                      for _ in range(2000)], dtype=object)
    for keys in (DEFAULT_SENSITIVE_KEYS, {"key", "to-ken"}, {"名前"}, {"name"}, {"a\"b"},
                 set()):
        picked = set(rows_to_redact(texts, keys).tolist())
        need = set(_brute(texts, keys))
        assert need <= picked, (keys, sorted(need - picked)[:5])
    # already redacted under the same keys: nothing to redo (the Kelvin sign, which
    # lower-cases to ASCII "k", makes its rows suspect whatever the keys)
    plain = np.array([t for t in texts if t is None or "\\u212a" not in t], dtype=object)
    assert 1500 < plain.size < texts.size
    assert rows_to_redact(plain, {"name"}).size == 0
    assert rows_to_redact(plain, {"token"}).size > 0
    # a Kelvin-sign key lower-cases to "key"
    kelvin = np.array([json.dumps({"\u212aEY": "v"})], dtype=object)
    assert rows_to_redact(kelvin, {"key"}).tolist() == [0]


def test_a_broken_stored_text_cannot_hide_the_next_rows_keys():
    # An unterminated string (a damaged or crafted row) must not swallow the newline joining
    # it to the next row: the next row's quotes would pair up the other way round and its
    # "password" key would never be looked at.
    texts = np.array(['{"a":"unterminated', '{"password":"hunter2"}', '{"x\\":1',
                      '{"token":"t"}'], dtype=object)
    assert rows_to_redact(texts, DEFAULT_SENSITIVE_KEYS).tolist() == [1, 3]


def _starts(vals):
    lens = np.array([len(v) + 1 for v in vals], dtype=np.int64)
    return np.cumsum(lens) - lens


def _regex_keys(joined):
    return set(stored._JSON_KEY.findall(joined)) - {""}


@pytest.mark.parametrize("block_rows", [3, 1 << 16])
def test_object_key_tokens_are_what_the_json_string_pattern_captures(monkeypatch, block_rows):
    monkeypatch.setattr(stored, "_BLOCK_ROWS", block_rows)
    rng = random.Random(5)
    # rows of any text: unpaired and escaped quotes, backslashes outside strings, line ends
    # inside rows, whitespace that only a str pattern's \s matches, lone surrogates
    alphabet = ['"', '"', '"', "\\", "\\", "\n", ":", ":", " ", "a", "é", "\x1c", "\xa0",
                "\u2003", "{", "}", ",", "\ud800", "\x85", '"k"', '"k":']
    pieces = ["k", "K", 'a"b', "x\\y", "\n", "é", '\\"', ":", " : ", "[REDACTED]", "\u2003"]

    def value(depth):
        r = rng.random()
        if depth > 2 or r < 0.4:
            return rng.choice(pieces + [1, None, True])
        if r < 0.7:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(pieces): value(depth + 1) for _ in range(rng.randint(0, 3))}

    n_keys = 0
    for trial in range(600):
        if trial % 2:
            vals = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
                    for _ in range(rng.randint(1, 20))]
        else:
            vals = [json.dumps(value(0), ensure_ascii=rng.random() < 0.5,
                               indent=rng.choice([None, 1]),
                               separators=rng.choice([None, (",", ":"), (", ", " : ")]))
                    for _ in range(rng.randint(1, 20))]
        joined = "\n".join(vals)
        want = _regex_keys(joined)
        assert object_key_tokens(joined, _starts(vals)) == want, vals
        n_keys += len(want)
    assert n_keys > 1000


def test_object_key_tokens_of_many_distinct_keys():
    vals = [json.dumps({f"k{i % 40}": i, "api_key": "[REDACTED]", "v": "\"k\": 1"})
            for i in range(300)]
    joined = "\n".join(vals)
    got = object_key_tokens(joined, _starts(vals))
    assert got == _regex_keys(joined)
    assert len(got) == 42 and '"api_key"' in got and '"k39"' in got and '"k"' not in got


def test_read_in_chunks_with_categories_nulls_and_bad_blobs(tmp_path, monkeypatch):
    monkeypatch.setattr(store_columns, "READ_CHUNK", 3)
    schema = [("tenant_id", "str"), ("task_type", "str"), ("timestamp", "float"),
              ("n", "int"), ("meta", "json"), ("v", "vector")]
    st = SQLiteStore(tmp_path / "c.db", schema, 2)
    v = np.arange(14, dtype=np.float32).reshape(7, 2)
    st.append({"tenant_id": ["a", "b", "a", None, "é", "b", "a"],
               "task_type": [None] * 7, "timestamp": [0.5, None, 2, 3, 4, 5, 6],
               "n": list(range(7)), "meta": ['{"a":1}', None, "[]", None, None, None, "1"],
               "v": v})
    st._conn.execute("UPDATE episodes SET v = NULL WHERE id = 1")
    st._conn.execute("UPDATE episodes SET v = x'0000' WHERE id = 4")
    cols = st.read(categories=["tenant_id", "task_type"])
    codes, labels = cols["tenant_id"]
    assert labels == ["a", "b", None, "é"] and codes.tolist() == [0, 1, 0, 2, 3, 1, 0]
    assert codes.dtype == np.int32
    codes, labels = cols["task_type"]
    assert labels == [None] and codes.tolist() == [0] * 7
    assert cols["timestamp"][1] != cols["timestamp"][1] and cols["timestamp"][2] == 2.0
    assert cols["n"].dtype == np.int64 and cols["n"].tolist() == list(range(7))
    assert cols["meta"].tolist() == ['{"a":1}', None, "[]", None, None, None, "1"]
    expect = v.copy()
    expect[[1, 4]] = 0
    assert cols["v"].dtype == np.float32 and np.array_equal(cols["v"], expect)
    cols["v"][0, 0] = 9.0  # writable
    assert st.read(where={"tenant_id": "zz"})["v"].shape == (0, 2)
    with pytest.raises(ConfigError):
        st.read(categories=["timestamp"])
    st.close()
