"""A stored dict field whose text is not JSON is store damage, named in one line.

Another process's database is hostile input: text written into ``state_before`` (or any
dict field) that is not JSON used to escape the buffer's read path as a bare
``JSONDecodeError`` (a generic "internal error" from the MCP server). It is now
:class:`dyna.errors.StoreDamagedError` naming the store, the field and the episode id, never
the text (it may hold a secret), and the read leaves the file's bytes as they were.
"""

import hashlib
import shutil
import sqlite3

import numpy as np
import polars as pl
import pytest

from dyna.buffer import ExperienceBuffer, JsonText
from dyna.errors import ConfigError, StoreDamagedError
from dyna.experience import ExperienceStore

DIM = 4
TENANT = "acme"
SECRET = "sk-live-0123456789abcdefghijklmnop"
NOT_JSON = "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    """A closed store of 4 episodes of one tenant (ids 0..3), written through the API."""
    path = tmp_path_factory.mktemp("healthy") / "x.db"
    with ExperienceStore(path, dim=DIM) as store:
        ids = store.record(TENANT, episodes=[
            {"task_type": "nav", "action_type": "go", "outcome": "success", "reward": 1.0,
             "timestamp": 1000.0 + i, "state_features": [1.0, 0.0, 0.0, float(i)],
             "state_before": {"cell": i}, "state_after": {"cell": i + 1}}
            for i in range(4)])["ids"]
    assert ids == [0, 1, 2, 3]
    return path


def _damaged(healthy, tmp_path, column, text, row_id=2):
    path = tmp_path / "d.db"
    shutil.copy(healthy, path)
    con = sqlite3.connect(path)
    con.execute(f"UPDATE episodes SET {column} = ? WHERE id = ?", (text, row_id))
    con.commit()
    con.close()
    return path


def _message(path, detail):
    return (f"DB={path}: damaged SQLite store: {detail}; recover the readable rows with: "
            f"dyna store recover {path} --out NEW")


QUERIES = {
    "query_similar": lambda s: s.query_similar(TENANT, k=4, state_features=[1.0, 0.0, 0.0, 1.0]),
    "replay_experience": lambda s: s.replay_experience(TENANT, batch_size=64, seed=0),
}


@pytest.mark.parametrize("read_only", [True, False])
@pytest.mark.parametrize("op", sorted(QUERIES))
def test_query_raises_store_damaged_naming_store_column_and_row(healthy, tmp_path, op,
                                                                read_only):
    path = _damaged(healthy, tmp_path, "state_before", "{not json")
    sha = _sha(path)
    with ExperienceStore(path, dim=DIM, read_only=read_only) as store:
        with pytest.raises(StoreDamagedError) as info:
            QUERIES[op](store)
        # the same again: the read changed nothing, in memory or on disk
        with pytest.raises(StoreDamagedError):
            QUERIES[op](store)
    err = info.value
    assert err.path == str(path)
    assert err.detail == f"a stored state_before value (episode id 2) is not JSON {NOT_JSON}"
    assert str(err) == _message(path, err.detail)
    assert "\n" not in str(err)
    assert _sha(path) == sha


def test_other_columns_and_ids_are_named(healthy, tmp_path):
    path = _damaged(healthy, tmp_path, "state_after", "[1, 2", row_id=0)
    with ExperienceStore(path, dim=DIM, read_only=True) as store:
        with pytest.raises(StoreDamagedError) as info:
            QUERIES["query_similar"](store)
    assert info.value.detail == ("a stored state_after value (episode id 0) is not JSON "
                                 "(Expecting ',' delimiter: line 1 column 6 (char 5))")


def test_the_stored_text_never_reaches_the_message(healthy, tmp_path):
    """A damaged text holding a secret: the message has the decoder's position, not it."""
    text = '{"note": "password=' + SECRET  # unterminated string; no sensitive key
    path = _damaged(healthy, tmp_path, "state_before", text)
    sha = _sha(path)
    with ExperienceStore(path, dim=DIM, read_only=True) as store:
        with pytest.raises(StoreDamagedError) as info:
            QUERIES["query_similar"](store)
    assert info.value.detail == ("a stored state_before value (episode id 2) is not JSON "
                                 "(Unterminated string starting at: line 1 column 10 (char 9))")
    assert SECRET not in str(info.value) and "password" not in str(info.value)
    assert _sha(path) == sha


def test_healthy_rows_of_the_same_store_still_read(healthy, tmp_path):
    """The damage is in row 2 only; a query whose answer lacks it is unaffected."""
    path = _damaged(healthy, tmp_path, "state_before", "{not json")
    with ExperienceStore(path, dim=DIM, read_only=True) as store:
        out = store.query_similar(TENANT, k=1, state_features=[1.0, 0.0, 0.0, 3.0])
    assert [r["episode"]["id"] for r in out["results"]] == [3]
    assert out["results"][0]["episode"]["state_before"] == {"cell": 3}


# ------------------------------------------------------------------ the buffer on its own
BASE = dict(tenant_id="t", task_type="nav", action_type="go", outcome="success")


def test_a_buffer_of_its_own_blames_the_caller_and_json_nested_too_deeply():
    """No store behind the buffer: the JsonText came from the caller, a ConfigError naming
    the field and the id (no advice to recover a store that does not exist)."""
    buf = ExperienceBuffer(dim=2)
    buf.record_batch(reward=np.zeros(3), state_features=np.ones((3, 2)),
                     metadata=JsonText(['{"a":1}', "[" * 100_000, None]), **BASE)
    with pytest.raises(ConfigError) as info:
        buf.rows()
    assert not isinstance(info.value, StoreDamagedError)
    assert str(info.value) == ("metadata[id 1]='str': a JsonText that is not JSON (nested "
                               "too deeply)")
    assert buf.rows([0, 2])[0]["metadata"] == {"a": 1}   # rows without it still read
    named = ExperienceBuffer(dim=2, source="elsewhere.db")
    named.record_batch(reward=[0.0], state_features=np.ones((1, 2)),
                       metadata=JsonText(["{not json"]), **BASE)
    with pytest.raises(StoreDamagedError) as info:
        named.copy().rows()
    assert str(info.value) == _message("elsewhere.db", "a stored metadata value (episode "
                                       f"id 0) is not JSON {NOT_JSON}")


def test_from_polars_names_the_field_and_row_with_a_redacted_prefix():
    """A DataFrame is the caller's input: ConfigError, as for other bad values."""
    good = ExperienceBuffer(dim=2)
    good.record_batch(reward=np.zeros(2), state_features=np.ones((2, 2)),
                      state_before=[{"a": 1}, {"b": 2}], **BASE)
    df = good.to_polars().with_columns(pl.Series(
        "state_before", ['{"a":1}', "token: " + SECRET + " {"], dtype=pl.String))
    with pytest.raises(ConfigError) as info:
        ExperienceBuffer.from_polars(df)
    err = info.value
    assert err.field == "state_before[1]"
    assert err.value == "token: [REDACTED] {"
    assert err.reason == "is not JSON (Expecting value: line 1 column 1 (char 0))"
    assert SECRET not in str(err)
    hashed = ExperienceBuffer(dim=2)   # JsonText parsed to hash the features: the same
    with pytest.raises(ConfigError) as info:
        hashed.record_batch(reward=[0.0], metadata=JsonText(["x" * 30 + SECRET]), **BASE)
    assert info.value.field == "metadata[0]" and SECRET not in str(info.value)
    assert len(hashed) == 0


# ------------------------------------------------------------------ the MCP server
def test_mcp_tool_error_is_one_line_naming_the_damage(healthy, tmp_path):
    pytest.importorskip("jsonschema")
    from dyna.mcp_server import ExperienceTools

    path = _damaged(healthy, tmp_path, "state_before", "{not json")
    sha = _sha(path)
    with ExperienceStore(path, dim=DIM, read_only=True) as store:
        tools = ExperienceTools(store, TENANT, read_only=True)
        out, is_error = tools.call("query_similar", {"k": 4,
                                                     "state_features": [1.0, 0.0, 0.0, 1.0]})
        assert is_error
        detail = f"a stored state_before value (episode id 2) is not JSON {NOT_JSON}"
        assert out == {"op": "query_similar", "error": {
            "type": "StoreDamagedError", "field": None, "value": "d.db",
            "reason": _message("d.db", detail), "message": _message("d.db", detail)}}
        out, is_error = tools.call("get_stats", {})   # the server keeps serving
        assert not is_error and out["n_records"] == 4
    assert _sha(path) == sha


@pytest.mark.parametrize("op, kwargs", [
    ("get_transition_table", {"state_key": "cell"}),
    ("export_data", {}),
    ("query_similar", {"k": 4, "state_features": [1.0, 0.0, 0.0, 1.0]}),
])
def test_a_blob_or_a_too_deep_text_in_a_json_column_is_named_damage(healthy, tmp_path, op,
                                                                     kwargs):
    """Not text at all (a BLOB, which SQLite's TEXT affinity keeps as bytes), or JSON nested
    deeper than the decoder goes: StoreDamagedError naming the column (and, for a BLOB, the
    episode id and type), for the transition table and export too; the file unchanged."""
    cases = [(b"\x00\xff", "a stored state_before value (episode id 2) is bytes, not JSON "
                           "text"),
             ("[" * 100_000 + "]" * 100_000, None)]
    for value, detail in cases:
        path = _damaged(healthy, tmp_path, "state_before", value)
        before = _sha(path)
        with ExperienceStore(path, dim=DIM, read_only=True) as store:
            with pytest.raises(StoreDamagedError) as err:
                store.dispatch(op, tenant_id=TENANT, **kwargs)
        if detail is not None:
            assert str(err.value) == _message(path, detail)
        else:
            assert "state_before value" in str(err.value) and "nested too deeply" in str(
                err.value) and "[[[" not in str(err.value)
        assert _sha(path) == before
        path.unlink()
