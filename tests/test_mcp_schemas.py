"""The MCP tool schemas as other clients read them.

MCP Inspector 0.15 reads a property's ``type`` and nothing else, so a nullable union
``["number", "null"]`` made it send ``reward`` as a string and ``record`` could not be
called; Inspector 2.x warned about every type array. Here: every input and output schema is
valid JSON Schema 2020-12 (``Draft202012Validator.check_schema``) with no type array
anywhere; each tool's input schema accepts a hand-written correct example and rejects a
wrong one; every structured result, and every error result, validates against the tool's
``outputSchema``; enums and ranges are the store's own checks; error messages are worded in
JSON terms and no answer names the server's directories. One test drives ``dyna mcp`` with
the MCP SDK's own stdio client (which validates each result against ``outputSchema`` too).
"""

from __future__ import annotations

import datetime
import json
import re
import time

import pytest

pytest.importorskip("mcp", reason="the MCP SDK (extra 'mcp', part of 'dev') is not installed")
from jsonschema import Draft202012Validator  # noqa: E402  (a dependency of mcp)

from dyna.errors import ConfigError, StoreBusyError  # noqa: E402
from dyna.escalation import RISK_CLASSES  # noqa: E402
from dyna.experience.times import utc_time  # noqa: E402
from dyna.experience import (MAX_BATCH_SIZE, MAX_BIN_COUNT, MAX_K, MAX_KEEP,  # noqa: E402
                             ExperienceStore)
from dyna.mcp_server import (ENUMS, EPISODE_REQUIRED, READ_TOOLS, WRITE_TOOLS,  # noqa: E402
                             ExperienceTools, output_schema)

DIM = 4
TENANT = "agent"
ALL_TOOLS = READ_TOOLS + WRITE_TOOLS
#: JSON terms only: no Python reprs of None/True/False, lists or quoted strings.
PYTHON_REPR = re.compile(r"\b(None|True|False)\b|\['|'\]|='|'[a-z_]+'")

#: tool -> (a correct example, a wrong one, the field the wrong one names)
EXAMPLES = {
    "capabilities": ({}, {"verbose": True}, "verbose"),
    "get_stats": ({}, {"tenant_id": "other"}, "tenant_id"),
    "get_competence": ({"task_type": "review", "level": 0.9}, {"level": 1.0}, "level"),
    "get_recommendation": ({"task_type": "review", "criterion": "mean_reward", "k": 10,
                            "min_episodes": 1}, {"criterion": "best"}, "criterion"),
    "query_similar": ({"state_features": [1.0, 0.0, 0.0, 0.0], "k": 2},
                      {"state_features": [1.0, 0.0, 0.0, 0.0], "k": 0}, "k"),
    "should_escalate": ({"task_type": "review", "threshold": 0.5, "min_episodes": 0,
                         "domain_risk_class": "elevated"},
                        {"task_type": "review", "domain_risk_class": "medium"},
                        "domain_risk_class"),
    "list_task_types": ({"level": 0.5}, {"level": 0}, "level"),
    "get_transition_table": ({"task_type": "nav", "bin_count": 2, "state_key": "x"},
                             {"bin_count": MAX_BIN_COUNT + 1}, "bin_count"),
    "get_data_consumption": ({}, {"all_tenants": True}, "all_tenants"),
    "record": ({"task_type": "review", "action_type": "lint", "outcome": "success",
                "reward": 1.0},
               {"task_type": "review", "action_type": "lint", "outcome": "success",
                "reward": "high"}, "reward"),
    "replay_experience": ({"batch_size": 3, "strategy": "recency", "seed": 1,
                           "half_life_seconds": 60.0},
                          {"batch_size": MAX_BATCH_SIZE + 1}, "batch_size"),
    "export_data": ({"path": "out.jsonl", "format": "jsonl", "task_type": "review"},
                    {"path": "../out.jsonl"}, "path"),
    "prune_old": ({"max_age_seconds": 1e12, "confirm": True},
                  {"max_age_seconds": -1, "confirm": True}, "max_age_seconds"),
    "compact": ({"compact_keep_records": 100, "confirm": True},
                {"compact_keep_records": MAX_KEEP + 1, "confirm": True}, "compact_keep_records"),
    "delete_data": ({"run_id": "r-none", "confirm": True}, {"run_id": "r", "confirm": False},
                    "confirm"),
    "reset": ({"confirm": True}, {}, "confirm"),
}


def type_arrays(node, where="$") -> list[str]:
    """JSON paths of every ``"type": [...]`` in ``node`` (a recursive walk)."""
    found = []
    if isinstance(node, dict):
        if isinstance(node.get("type"), list):
            found.append(where)
        for k, v in node.items():
            found += type_arrays(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += type_arrays(v, f"{where}[{i}]")
    return found


def keyword_paths(node, keyword, where="$") -> list[str]:
    """JSON paths of every object in ``node`` that has key ``keyword``."""
    found = []
    if isinstance(node, dict):
        if keyword in node:
            found.append(where)
        for k, v in node.items():
            found += keyword_paths(v, keyword, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += keyword_paths(v, keyword, f"{where}[{i}]")
    return found


@pytest.fixture
def served(tmp_path):
    """Tools over a store with 4 review episodes and 2 nav transitions of TENANT."""
    store = ExperienceStore(tmp_path / "store.db", dim=DIM)
    store.record(TENANT, episodes=[
        {"task_type": "review", "action_type": a, "outcome": o, "reward": r,
         "timestamp": 1000.0 + i, "state_features": f}
        for i, (a, o, r, f) in enumerate([("lint", "success", 1.0, [1, 0, 0, 0]),
                                          ("lint", "failure", 0.0, [0, 1, 0, 0]),
                                          ("rewrite", "success", 0.5, [0, 0, 1, 0]),
                                          ("lint", "success", 1.0, [1, 1, 0, 0])])]
        + [{"task_type": "nav", "action_type": "right", "outcome": "success", "reward": 1.0,
            "timestamp": 2000.0, "state_before": {"x": 0}, "state_after": {"x": 1},
            "state_features": [0, 0, 0, 1]}] * 2)
    (tmp_path / "exports").mkdir()
    tools = ExperienceTools(store, TENANT, export_dir=tmp_path / "exports")
    yield tools
    store.close()


# ============================================================================ the schemas
def test_every_schema_is_valid_2020_12_with_no_type_arrays(served):
    listed = served.list_tools()
    assert [t["name"] for t in listed] == list(ALL_TOOLS)
    for tool in listed:
        for kind in ("input_schema", "output_schema"):
            Draft202012Validator.check_schema(tool[kind])
            assert type_arrays(tool[kind]) == [], (tool["name"], kind)
        # inputs: one plain type per property (Inspector 0.15 reads nothing else), no anyOf
        assert keyword_paths(tool["input_schema"], "anyOf") == [], tool["name"]
        for prop, sub in tool["input_schema"]["properties"].items():
            assert isinstance(sub.get("type"), str), (tool["name"], prop)
    caps, is_error = served.call("capabilities", {})
    assert not is_error and type_arrays(caps) == []  # the schemas it lists (56 before)
    assert set(caps["operations"]) == set(ALL_TOOLS)


def test_record_lists_what_an_episode_needs(served):
    schema = served.schemas["record"]
    item = schema["properties"]["episodes"]["items"]
    assert item["required"] == list(EPISODE_REQUIRED) == ["task_type", "action_type",
                                                          "outcome", "reward"]
    assert item["properties"]["tenant_id"] == {"type": "string", "const": TENANT,
                                               "description": "optional; must be the "
                                               "server's tenant"}
    assert schema["required"] == []  # one episode as fields, or episodes=[...]
    assert not {"if", "then", "else"} & set(schema)  # the server checks the fields' rule
    v = Draft202012Validator(schema)
    one = dict(EXAMPLES["record"][0])
    assert v.is_valid(one) and v.is_valid({"episodes": [one, one]})
    assert not v.is_valid({"episodes": []})
    assert not v.is_valid({"episodes": [{k: one[k] for k in ("task_type", "reward")}]})
    assert not v.is_valid({**one, "outcome": ""})
    assert not v.is_valid({**one, "state_features": [1.0, 2.0]})  # dim is 4
    exported, _ = served.call("export_data", {})  # an exported record, its nulls omitted
    # exports give times as ISO 8601 text; record takes seconds since the epoch
    records = [{**r, "timestamp": datetime.datetime.fromisoformat(r["timestamp"]).timestamp()}
               for r in exported["records"]]
    assert [r["timestamp"] for r in records] == [1000.0, 1001.0, 1002.0, 1003.0, 2000.0,
                                                 2000.0]
    assert v.is_valid({"episodes": [{k: x for k, x in r.items() if x is not None}
                                    for r in records]})
    out, is_error = served.call("record", {"episodes": records})  # the server takes nulls
    assert not is_error and out["n"] == len(records) == 6


def test_enums_and_ranges_are_the_stores_own_checks(served):
    assert ENUMS["domain_risk_class"] == tuple(RISK_CLASSES)
    props = {n: s["properties"] for n, s in served.schemas.items()}
    assert props["get_recommendation"]["criterion"]["enum"] == ["success_rate", "mean_reward"]
    assert props["replay_experience"]["strategy"]["enum"] == ["uniform", "recency", "priority"]
    assert props["should_escalate"]["domain_risk_class"]["enum"] == list(RISK_CLASSES)
    assert props["export_data"]["format"]["enum"] == ["jsonl", "parquet"]
    for tool in ("query_similar", "get_recommendation"):
        assert (props[tool]["k"]["minimum"], props[tool]["k"]["maximum"]) == (1, MAX_K)
    assert props["replay_experience"]["batch_size"]["maximum"] == MAX_BATCH_SIZE
    assert props["compact"]["compact_keep_records"]["maximum"] == MAX_KEEP
    assert props["get_transition_table"]["bin_count"]["maximum"] == MAX_BIN_COUNT
    for tool in ("get_competence", "get_recommendation", "should_escalate", "list_task_types"):
        level = props[tool]["level"]
        assert (level["exclusiveMinimum"], level["exclusiveMaximum"]) == (0, 1)
        assert "minimum" not in level and "maximum" not in level
    store = served.store
    q = {"tenant_id": TENANT, "state_features": [1.0, 0.0, 0.0, 0.0]}
    cases = (  # (op, arguments the schema accepts at its edge, one step beyond)
        [("get_recommendation", {"criterion": c}, {"criterion": "best"})
         for c in ENUMS["criterion"]]
        + [("replay_experience", {"strategy": s, "ids": [0], "priorities": [1.0]},
            {"strategy": "greedy"}) for s in ENUMS["strategy"]]
        + [("should_escalate", {"task_type": "review", "domain_risk_class": r},
            {"task_type": "review", "domain_risk_class": "medium"}) for r in RISK_CLASSES]
        + [("query_similar", {**q, "k": MAX_K}, {**q, "k": MAX_K + 1}),
           ("query_similar", {**q, "k": 1}, {**q, "k": 0}),
           ("replay_experience", {"batch_size": MAX_BATCH_SIZE},
            {"batch_size": MAX_BATCH_SIZE + 1}),
           ("get_transition_table", {"bin_count": MAX_BIN_COUNT}, {"bin_count": MAX_BIN_COUNT + 1}),
           ("get_competence", {"level": 0.999}, {"level": 1.0}),
           ("get_competence", {"level": 0.001}, {"level": 0.0})])
    for op, edge, beyond in cases:
        tenant = {} if "tenant_id" in edge else {"tenant_id": TENANT}
        store.dispatch(op, **tenant, **edge)   # the store accepts what the schema allows
        with pytest.raises(ConfigError) as exc:
            store.dispatch(op, **tenant, **beyond)
        assert exc.value.field in beyond, (op, beyond)
        tool_args = {k: v for k, v in beyond.items() if k != "tenant_id"}
        assert not served._validators[op].is_valid(tool_args), (op, beyond)
        assert served._validators[op].is_valid({k: v for k, v in edge.items()
                                                if k != "tenant_id"}), (op, edge)
    # compaction's maximum is beyond any store: only the store's own check is run
    with pytest.raises(ConfigError):
        store.dispatch("compact", compact_keep_records=MAX_KEEP + 1)


# ============================================================================ examples
def test_every_tool_has_a_hand_written_example():
    assert set(EXAMPLES) == set(ALL_TOOLS)


@pytest.mark.parametrize("tool", ALL_TOOLS)
def test_input_schema_accepts_the_example_and_rejects_the_wrong_one(served, tool):
    good, bad, field = EXAMPLES[tool]
    schema = served.schemas[tool]
    out_v = Draft202012Validator(output_schema(tool))
    assert Draft202012Validator(schema).is_valid(good)
    assert not Draft202012Validator(schema).is_valid(bad)
    out, is_error = served.call(tool, good)
    assert not is_error, out
    assert list(out_v.iter_errors(out)) == []           # the structured result
    assert out["op"] == tool and out["persistence_status"] == "ok"
    err, is_error = served.call(tool, bad)
    assert is_error and err["error"]["field"] == field, err
    assert list(out_v.iter_errors(err)) == []           # an error result is allowed too
    assert not PYTHON_REPR.search(err["error"]["message"]), err["error"]["message"]


def test_structured_results_match_their_output_schema_in_every_shape(served):
    calls = [("get_recommendation", {"task_type": "none-such"}),   # nulls: no action type
             ("get_recommendation", {"state_features": [1, 0, 0, 0], "k": 2}),
             ("get_transition_table", {}),                          # hashed bins: edges null
             ("query_similar", {"state_before": {"x": 1}, "task_type": "nav"}),
             ("replay_experience", {"strategy": "priority", "ids": [0, 1],
                                    "priorities": [0.5, 2.0], "seed": 3}),
             ("export_data", {}),                                    # inline records
             ("export_data", {"path": "all.parquet", "format": "parquet"}),
             ("record", {"episodes": [dict(EXAMPLES["record"][0])] * 2}),
             ("prune_old", {"max_age_seconds": 1e12, "now": 0.0, "confirm": True}),  # null
             ("prune_old", {"max_age_seconds": 10.0, "now": 1005.0, "confirm": True}),
             ("compact", {"confirm": True}),
             ("reset", {"confirm": True}),
             ("get_stats", {})]                                      # an empty store: nulls
    for tool, args in calls:
        out, is_error = served.call(tool, args)
        assert not is_error, (tool, out)
        errors = [e.message for e in Draft202012Validator(output_schema(tool)).iter_errors(out)]
        assert errors == [], (tool, errors)
    assert (out["n_records"], out["oldest"], out["newest"]) == (0, None, None)


def test_episode_times_are_iso_8601_in_utc_in_every_answer_that_has_episodes(served):
    nav = "1970-01-01T00:33:20.000000+00:00"              # 2000.0 seconds
    answers = {
        "query_similar": [r["episode"]["timestamp"] for r in served.call(
            "query_similar", {"state_features": [0, 0, 0, 1], "task_type": "nav"})[0]
                                            ["results"]],
        "replay_experience": [e["timestamp"] for e in served.call(
            "replay_experience", {"strategy": "priority", "ids": [4, 5],
                                  "priorities": [1.0, 1.0], "batch_size": 3,
                                  "seed": 1})[0]["episodes"]],
        "export_data": [r["timestamp"] for r in served.call(
            "export_data", {"task_type": "review"})[0]["records"]]}
    assert answers == {
        "query_similar": [nav, nav], "replay_experience": [nav, nav, nav],
        "export_data": [f"1970-01-01T00:16:4{i}.000000+00:00" for i in range(4)]}
    # prune_old's cutoff (now - max_age_seconds) too; null where no ISO text can show it
    cutoffs = [served.call("prune_old", {"max_age_seconds": age, "now": now,
                                         "confirm": True})[0]["cutoff"]
               for age, now in ((500.0, 1500.5), (1e12, 0.0), (0.0, 3e11))]
    assert cutoffs == ["1970-01-01T00:16:40.500000+00:00", None, None]
    props = {tool: output_schema(tool)["properties"] for tool in answers}
    described = [props["query_similar"]["results"]["items"]["properties"]["episode"],
                 props["replay_experience"]["episodes"]["items"],
                 props["export_data"]["records"]["items"]]
    assert [episode["properties"]["timestamp"] for episode in described] == [
        {"type": "string", "format": "date-time", "description": "when the episode happened "
         "(ISO 8601 in UTC, e.g. 2026-01-01T12:00:00.000000+00:00)"}] * 3


# ============================================================================ wording, paths
@pytest.mark.parametrize(("tool", "args", "message"), [
    ("reset", {"confirm": False}, "confirm=false: must be true to run a destructive tool"),
    ("reset", {}, "confirm=null: is required by reset (destructive: pass confirm=true)"),
    ("record", {"task_type": "t", "action_type": "a", "outcome": "success"},
     "reward=null: is required by record (or give episodes=[...])"),
    ("record", {"episodes": [{"task_type": "t", "action_type": "a", "outcome": "success"}]},
     "episodes[0].reward=null: is required in every episode"),
    ("record", {"reward": True, "task_type": "t", "action_type": "a", "outcome": "s"},
     "reward=true: must be a number"),
    ("record", {"episodes": [{"tenant_id": "other", "task_type": "t", "action_type": "a",
                              "outcome": "s", "reward": 1}]},
     'episodes[0].tenant_id="other": must be "agent" (the server\'s tenant)'),
    ("record", {"episodes": [], "reward": 1.0},
     "reward=1.0: give episodes=[...] or one episode's fields, not both"),
    ("should_escalate", {"task_type": "t", "domain_risk_class": "x"},
     'domain_risk_class="x": must be one of "low_stakes", "elevated", "high_stakes"'),
    ("get_competence", {"level": 0}, "level=0: must be > 0"),
    ("get_competence", {"tenant_id": "other"},
     'tenant_id="other": not an input: this server serves tenant "agent" only'),
    ("get_competence", {"colour": None},
     'colour=null: unknown parameter of get_competence; one of "task_type", "level"'),
    ("query_similar", {}, ("state_features=null: give state_features or at least one of "
                           "state_before, action_taken, state_after, metadata")),
    ("query_similar", {"state_features": [1, 2]}, "state_features=[1, 2]: must have length dim=4"),
    ("replay_experience", {"strategy": "priority", "ids": [99], "priorities": [1.0]},
     "ids=99: not an episode of this tenant (and task type)"),
    ("export_data", {"path": ""}, ('path="": must be a plain file name (letters, digits, '
                                   '".", "_", "-"; no directories), written inside the '
                                   "server's export directory")),
])
def test_error_messages_are_in_json_terms(served, tool, args, message):
    out, is_error = served.call(tool, args)
    assert is_error and out["error"]["message"] == message
    assert not PYTHON_REPR.search(message.replace("server's", "server"))
    assert list(Draft202012Validator(output_schema(tool)).iter_errors(out)) == []


def test_null_is_read_as_omitted(served):
    out, is_error = served.call("query_similar", {"k": None, "task_type": None,
                                                  "state_features": [1, 0, 0, 0]})
    assert not is_error and len(out["results"]) == 5  # k defaults to 5
    rec, is_error = served.call("record", {"episodes": [{**EXAMPLES["record"][0],
                                                         "run_id": None, "metadata": None}]})
    assert not is_error and rec["n"] == 1


def test_no_answer_names_the_servers_directories(served, tmp_path):
    stats, _ = served.call("get_stats", {})
    assert stats["store"]["path"] == "store.db"            # a base name only
    caps, _ = served.call("capabilities", {})
    assert caps["persistence"]["path"] == "store.db"
    assert caps["server"]["export_dir"] == "exports"
    exported, _ = served.call("export_data", {"path": "x.jsonl"})
    assert exported["path"] == "x.jsonl" and (tmp_path / "exports" / "x.jsonl").is_file()
    for out in (stats, caps, exported):
        assert str(tmp_path) not in json.dumps(out)

    class Busy:  # a store whose file is locked: the error text names the file
        dim = DIM
        _db = served.store._db

        def dispatch(self, op, **kwargs):
            raise StoreBusyError(f"{self._db.path}: locked by another writer for more than "
                                 "10 s; nothing was written (retry)")

    err, is_error = ExperienceTools(Busy(), TENANT).call("record", EXAMPLES["record"][0])
    assert is_error and err["error"]["retryable"] is True
    assert err["error"]["message"].startswith("store.db: locked by another writer")
    assert str(tmp_path) not in json.dumps(err)


# ============================================================================ the SDK client
def test_the_sdk_client_lists_records_and_reads_stats(tmp_path):
    from test_mcp import _serve  # the stdio client of the server tests

    path = tmp_path / "store.db"
    with ExperienceStore(path, dim=DIM):
        pass                                                # an empty store of dim 4
    t0 = time.time()
    with _serve(["--db", str(path), "--tenant", TENANT], tmp_path / "server.log") as client:
        tools = client.tools()
        assert list(tools) == list(ALL_TOOLS)
        for name, tool in tools.items():
            assert tool.output_schema == output_schema(name)
            assert type_arrays(tool.input_schema) == []
        assert tools["record"].input_schema["properties"]["reward"]["type"] == "number"

        # optional fields omitted; the client checks each result against its outputSchema
        bare = client.ok("record", {"task_type": "review", "action_type": "lint",
                                    "outcome": "success", "reward": 1.0})
        assert bare == {"ids": [0], "n": 1, "op": "record", "persistence_status": "ok"}
        full = client.ok("record", {
            "task_type": "review", "action_type": "rewrite", "outcome": "failure",
            "reward": -0.5, "timestamp": 1000.0, "run_id": "r1", "task_id": "t1",
            "request_id": "q1", "outcome_source": "tests", "outcome_verified_by": "ci",
            "anti_gaming_policy": "frozen-tests", "state_before": {"x": 0},
            "action_taken": {"cmd": "edit"}, "state_after": {"x": 1},
            "metadata": {"note": "given"}, "state_features": [0.0, 1.0, 0.0, 0.0]})
        assert full == {"ids": [1], "n": 1, "op": "record", "persistence_status": "ok"}
        stats = client.ok("get_stats", {})
        records = client.ok("export_data", {})["records"]
    t1 = time.time()

    assert stats["store"]["path"] == "store.db"
    store = stats.pop("store")
    assert (store["status"], store["read_only"], store["persistent"]) == ("ok", False, True)
    assert "rows" not in store and str(tmp_path) not in json.dumps(store)
    assert {k: v for k, v in stats.items() if k != "newest"} == {
        "n_records": 2, "n_tenants": 1, "n_task_types": 1,
        "oldest": "1970-01-01T00:16:40.000000+00:00", "dim": DIM,
        "persistent": True, "n_unpersisted": 0, "op": "get_stats", "persistence_status": "ok"}
    # the bare episode's clock time, to the microsecond (rounding keeps the order)
    newest = datetime.datetime.fromisoformat(stats["newest"])
    assert newest.utcoffset() == datetime.timedelta(0)
    assert utc_time(t0) <= newest <= utc_time(t1)
    first, second = records
    assert first["timestamp"] == stats["newest"]     # the bare episode's clock time
    assert {k: first[k] for k in first if k not in ("timestamp", "state_features")} == {
        "id": 0, "tenant_id": TENANT, "task_type": "review", "action_type": "lint",
        "outcome": "success", "run_id": None, "task_id": None, "request_id": None,
        "outcome_source": None, "outcome_verified_by": None, "anti_gaming_policy": None,
        "reward": 1.0, "state_before": None, "action_taken": None, "state_after": None,
        "metadata": None}
    assert {k: second[k] for k in second} == {
        "id": 1, "tenant_id": TENANT, "task_type": "review", "action_type": "rewrite",
        "outcome": "failure", "run_id": "r1", "task_id": "t1", "request_id": "q1",
        "outcome_source": "tests", "outcome_verified_by": "ci",
        "anti_gaming_policy": "frozen-tests", "reward": -0.5,
        "timestamp": "1970-01-01T00:16:40.000000+00:00", "state_before": {"x": 0},
        "action_taken": {"cmd": "edit"}, "state_after": {"x": 1},
        "metadata": {"note": "given"}, "state_features": [0.0, 1.0, 0.0, 0.0]}
