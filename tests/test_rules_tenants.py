"""Tenants are refused unless already in Unicode NFKC form, never folded, at every public
entry point a tenant enters by: each :class:`ExperienceStore` method that takes a
``tenant_id`` (the list below is checked against the class, so a new one must be added),
the records of an imported file, the buffer's recording, the MCP server, PostgreSQL's
grants and every ``dyna`` command with ``--tenant``. A tenant already in NFKC form is
stored and matched as given, byte for byte."""

import inspect
import io
import json
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

from dyna.buffer import ExperienceBuffer
from dyna.cli import main
from dyna.errors import ConfigError
from dyna.experience import ExperienceStore

#: Spellings NFKC would change: fullwidth, decomposed, a compatibility numeral.
BAD = ("ｔ1", "e\u0301", "Ⅳ")
EPISODE = dict(task_type="k", action_type="a", outcome="success", reward=1.0, timestamp=1.0,
               state_features=[1, 0, 0, 0])

#: ExperienceStore method -> its call with tenant ``t`` (other arguments valid)
STORE_METHODS = {
    "compact": lambda s, t, d: s.compact(tenant_id=t),
    "count_matching": lambda s, t, d: s.count_matching(t),
    "delete_data": lambda s, t, d: s.delete_data(t),
    "export_data": lambda s, t, d: s.export_data(t),
    "get_competence": lambda s, t, d: s.get_competence(t),
    "get_data_consumption": lambda s, t, d: s.get_data_consumption(t),
    "get_recommendation": lambda s, t, d: s.get_recommendation(t, task_type="k"),
    "get_stats": lambda s, t, d: s.get_stats(t),
    "get_transition_table": lambda s, t, d: s.get_transition_table(t),
    "import_data": lambda s, t, d: s.import_data(str(d / "good.jsonl"), tenant_id=t),
    "list_task_types": lambda s, t, d: s.list_task_types(t),
    "prune_old": lambda s, t, d: s.prune_old(1.0, tenant_id=t),
    "query_similar": lambda s, t, d: s.query_similar(t, state_features=[1, 0, 0, 0]),
    "record": lambda s, t, d: s.record(t, **EPISODE),
    "replay_experience": lambda s, t, d: s.replay_experience(t),
    "reset": lambda s, t, d: s.reset(t),
    "should_escalate": lambda s, t, d: s.should_escalate(t, "k"),
    "to_dataset": lambda s, t, d: s.to_dataset(t),
}


def _store_calls(tmp_path):
    """(name, call(tenant)) for each ExperienceStore method, on a store of tenant "t"."""
    store = ExperienceStore("", dim=4)
    store.record("t", **EPISODE)
    store.export_data("t", path=str(tmp_path / "good.jsonl"))
    return store, [(f"ExperienceStore.{name}", lambda t, f=f: f(store, t, tmp_path))
                   for name, f in STORE_METHODS.items()]


def _imported_record(tmp_path, tenant):
    """import_data of a file whose one record carries ``tenant``."""
    rec = json.loads((tmp_path / "good.jsonl").read_text())
    rec["tenant_id"] = tenant
    (tmp_path / "bad.jsonl").write_text(json.dumps(rec) + "\n")
    with ExperienceStore("", dim=4) as other:
        other.import_data(str(tmp_path / "bad.jsonl"))


def _buffer_calls():
    buf = ExperienceBuffer(dim=4)
    feats = np.ones(4)
    return [
        ("ExperienceBuffer.record", lambda t: buf.record(
            tenant_id=t, task_type="k", action_type="a", outcome="success", reward=1.0,
            state_features=feats)),
        ("ExperienceBuffer.record_batch", lambda t: buf.record_batch(
            tenant_id=["ok", t], task_type="k", action_type="a", outcome="success",
            reward=[1.0, 1.0], state_features=np.ones((2, 4)))),
    ]


def _cli_calls(tmp_path):
    db = str(tmp_path / "s.db")
    with ExperienceStore(db, dim=4) as store:
        store.record("t", **EPISODE)
    out = str(tmp_path / "o.jsonl")
    commands = {
        "dyna store stats": ["store", "stats", db],
        "dyna store export": ["store", "export", db, "--out", out],
        "dyna store delete": ["store", "delete", db, "--yes"],
        "dyna store prune": ["store", "prune", db, "--max-age", "1", "--yes"],
        "dyna store compact": ["store", "compact", db],
        "dyna store competence": ["store", "competence", db, "--task-type", "k"],
    }
    if _has_mcp():
        commands["dyna mcp"] = ["mcp", "--db", db]
    return [(name, lambda t, argv=argv: _cli(argv + ["--tenant", t]))
            for name, argv in commands.items()]


def _has_mcp() -> bool:
    try:
        import mcp  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def _cli(argv):
    """Run ``dyna argv``, check it refused in one line on stderr (exit 2, nothing on stdout),
    and raise that line as the ConfigError it reports (``field=value: reason``)."""
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = main(argv)
    assert (code, out.getvalue()) == (2, ""), argv
    line = err.getvalue()
    assert line.count("\n") == 1 and line.startswith("dyna: error: "), line
    field, _, rest = line[len("dyna: error: "):].partition("=")
    raise ConfigError(field, rest.split(": ", 1)[0], rest.split(": ", 1)[1].strip())


def _other_calls(tmp_path):
    from dyna.mcp_server.tools import ExperienceTools  # noqa: PLC0415
    from dyna.store.postgres import grant_tenant  # noqa: PLC0415

    store = ExperienceStore("", dim=4)
    return [("import_data (a record's tenant)", lambda t: _imported_record(tmp_path, t)),
            ("ExperienceTools", lambda t: ExperienceTools(store, t)),
            ("grant_tenant", lambda t: grant_tenant(None, "role_a", t))]   # before connecting


def test_the_list_names_every_store_method_that_takes_a_tenant():
    takes = sorted(n for n, f in inspect.getmembers(ExperienceStore)
                   if not n.startswith("_") and callable(f)
                   and "tenant_id" in inspect.signature(f).parameters)
    assert takes == sorted(STORE_METHODS) and len(takes) == 18


@pytest.mark.parametrize("tenant", BAD)
def test_every_entry_point_refuses_a_tenant_nfkc_would_change(tmp_path, tenant):
    pytest.importorskip("jsonschema")
    store, calls = _store_calls(tmp_path)
    calls += _buffer_calls() + _other_calls(tmp_path) + _cli_calls(tmp_path)
    assert len(calls) == 18 + 2 + 3 + (7 if _has_mcp() else 6)
    refused = []
    for name, call in calls:
        with pytest.raises(ConfigError) as e:
            call(tenant)
        assert e.value.field in ("tenant_id", "tenant", "tenant_id[0]"), name
        assert "NFKC" in e.value.reason, (name, e.value.reason)
        refused.append(name)
    assert len(refused) == len(calls)
    # nothing was written under the refused spelling, nor under its folded form
    assert store.tenant_ids() == ["t"]
    store.close()


def test_a_tenant_in_nfkc_form_is_kept_as_given_and_matched_byte_for_byte(tmp_path):
    with ExperienceStore("", dim=4) as store:
        store.record("\u00e9", **EPISODE)
        assert store.tenant_ids() == ["\u00e9"]
        assert store.get_stats("\u00e9")["n_records"] == 1
        assert store.get_stats("e")["n_records"] == 0           # never folded
    buf = ExperienceBuffer(dim=4)
    buf.record(tenant_id="\u00e9", task_type="k", action_type="a", outcome="success",
               reward=1.0, state_features=np.ones(4))
    assert buf.labels("tenant_id").tolist() == ["\u00e9"]
