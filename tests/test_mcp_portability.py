"""The MCP server as strict clients and schema translators read it.

Every tool's input and output schema has no conditional or combining keyword at its top
level and every property, at any depth, a ``type`` and a ``description`` (the MCP
Inspector's portability check warns on a schema-free property); ``record``'s
alternatives are a documented rule the server checks; a call without its parameters names
the missing ones; the HTTP server's 401 says a static bearer token is expected and no OAuth
document exists; SIGTERM stops ``dyna mcp --http`` with one line and exit status 143.
"""

from __future__ import annotations

import json
import signal

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK (extra 'mcp', part of 'dev') is not installed")

from test_mcp import TOKEN, _http_server, _read_url  # noqa: E402
from test_mcp_schemas import DIM, EXAMPLES, TENANT  # noqa: E402

from dyna.experience import ExperienceStore  # noqa: E402
from dyna.mcp_server import (EPISODE_REQUIRED, READ_TOOLS, RECORD_RULE,  # noqa: E402
                             STATIC_TOKEN_REASON, WRITE_TOOLS, ExperienceTools, output_schema,
                             result_fields)

ALL_TOOLS = READ_TOOLS + WRITE_TOOLS
#: Keywords a portable schema does not use at its top level.
TOP_LEVEL_BANNED = ("if", "then", "else", "allOf", "anyOf", "oneOf", "not")


@pytest.fixture
def tools(tmp_path):
    store = ExperienceStore(tmp_path / "store.db", dim=DIM)
    (tmp_path / "exports").mkdir()
    yield ExperienceTools(store, TENANT, export_dir=tmp_path / "exports")
    store.close()


def typed(schema: dict) -> bool:
    """One plain ``type``, or ``anyOf`` branches that each have one (a nullable value)."""
    if isinstance(schema.get("type"), str):
        return True
    branches = schema.get("anyOf")
    return bool(branches) and all(isinstance(b.get("type"), str) for b in branches)


def property_problems(schema: dict, where: str, plain_only: bool) -> tuple[list[str], int]:
    """Every property below ``schema`` (through properties, items, additionalProperties and
    anyOf branches) that lacks a description or a type: ``(problems, properties seen)``.
    ``plain_only``: only a plain ``type`` counts (input schemas have no ``anyOf``)."""
    problems, seen = [], 0
    subs = [(f"{where}.items", schema["items"])] if isinstance(schema.get("items"), dict) else []
    if isinstance(schema.get("additionalProperties"), dict):
        subs.append((f"{where}.additionalProperties", schema["additionalProperties"]))
    subs += [(f"{where}.anyOf[{i}]", b) for i, b in enumerate(schema.get("anyOf", []))]
    for name, prop in schema.get("properties", {}).items():
        seen += 1
        at = f"{where}.{name}"
        if not prop.get("description"):
            problems.append(f"{at}: no description")
        if not (isinstance(prop.get("type"), str) if plain_only else typed(prop)):
            problems.append(f"{at}: no type")
        subs.append((at, prop))
    for at, sub in subs:
        more, n = property_problems(sub, at, plain_only)
        problems += more
        seen += n
    return problems, seen


def test_the_walk_finds_what_it_looks_for():
    bad = {"type": "object", "anyOf": [{"required": ["a"]}],
           "properties": {"a": {"description": "any JSON value"},
                          "b": {"const": "x", "description": "a constant"},
                          "c": {"type": "array", "description": "list",
                                "items": {"type": "object",
                                          "properties": {"d": {"type": "string"}}}},
                          "e": {"type": ["string", "null"], "description": "type array"}}}
    problems, seen = property_problems(bad, "$", plain_only=False)
    assert problems == ["$.a: no type", "$.b: no type", "$.e: no type",
                        "$.c.items.d: no description"]
    assert seen == 5
    assert [k for k in TOP_LEVEL_BANNED if k in bad] == ["anyOf"]


def schema_counts(listed: list[dict]) -> dict[str, int]:
    """Assert the portability rules on every listed tool's input and output schema; return
    the number of properties walked in each (``"tool.input_schema"`` -> count)."""
    counts = {}
    for tool in listed:
        for kind in ("input_schema", "output_schema"):
            schema = tool[kind]
            where = f"{tool['name']}.{kind}"
            assert [k for k in TOP_LEVEL_BANNED if k in schema] == [], where
            problems, seen = property_problems(schema, where, kind == "input_schema")
            assert problems == []
            counts[where] = seen
        assert "anyOf" not in json.dumps(tool["input_schema"])  # inputs: plain types only
    return counts


def test_no_conditionals_and_every_field_typed_and_described(tools):
    listed = tools.list_tools()
    assert [t["name"] for t in listed] == list(ALL_TOOLS)
    counts = schema_counts(listed)
    assert counts["record.input_schema"] == 35            # 17 fields + episodes' 18
    # op, persistence_status, error and its 6; results, score, episode and its 17 fields
    assert counts["query_similar.output_schema"] == 29
    assert counts["get_stats.output_schema"] == 28        # 12, the error's 6, the store's 10
    assert counts["export_data.input_schema"] == 6
    assert sum(counts.values()) == 411


@pytest.mark.parametrize(("options", "n_tools", "n_properties"), [
    ({"read_only": True}, 9, 237), ({}, 16, 409)])
def test_read_only_and_inline_only_servers_keep_the_rules(tools, options, n_tools,
                                                          n_properties):
    other = ExperienceTools(tools.store, TENANT, **options)
    counts = schema_counts(other.list_tools())
    assert len(counts) == 2 * n_tools
    assert sum(counts.values()) == n_properties
    if not options:                                       # no export directory: no path, format
        assert counts["export_data.input_schema"] == 4


def test_results_have_the_fields_their_schema_names(tools):
    for tool in ALL_TOOLS:
        out, is_error = tools.call(tool, EXAMPLES[tool][0])
        assert not is_error, out
        assert [f for f in result_fields(tool) if f not in out] == [], tool
        assert ", ".join(result_fields(tool)) in output_schema(tool)["description"]
    assert result_fields("record") == ("ids", "n", "persistence_status", "op")


# ============================================================================ record's rule
def test_record_rule_is_documented_and_checked_by_the_server(tools):
    schema = tools.schemas["record"]
    assert schema["required"] == [] and not {"if", "else"} & set(schema)
    assert RECORD_RULE == ("Give either episodes (a batch) or one episode's fields, not both; "
                           "without episodes, task_type, action_type, outcome and reward are "
                           "required.")
    assert schema["properties"]["episodes"]["description"].endswith(RECORD_RULE)
    for name in EPISODE_REQUIRED:
        assert schema["properties"][name]["description"].endswith(
            "; required unless episodes is given")
    record = next(t for t in tools.list_tools() if t["name"] == "record")
    assert RECORD_RULE in record["description"]
    cases = [
        ({}, "task_type", ("task_type=null: is required by record; missing: task_type, "
                           "action_type, outcome, reward (or give episodes=[...])")),
        ({"task_type": "t", "outcome": "success"}, "action_type",
         ("action_type=null: is required by record; missing: action_type, reward (or give "
          "episodes=[...])")),
        ({"task_type": "t", "action_type": "a", "reward": 1.0}, "outcome",
         "outcome=null: is required by record (or give episodes=[...])"),
        ({"episodes": [EXAMPLES["record"][0]], "task_type": "t"}, "task_type",
         "task_type=\"t\": give episodes=[...] or one episode's fields, not both"),
        ({"episodes": [{"task_type": "t", "outcome": "s"}]}, "episodes[0].action_type",
         ("episodes[0].action_type=null: is required in every episode; missing: action_type, "
          "reward")),
    ]
    for args, field, message in cases:
        out, is_error = tools.call("record", args)
        assert is_error and (out["error"]["field"], out["error"]["message"]) == (field, message)
    assert tools.store.get_stats(TENANT)["n_records"] == 0          # nothing was recorded
    out, is_error = tools.call("record", EXAMPLES["record"][0])
    assert not is_error and out["n"] == 1


# ============================================================================ missing parameters
#: tool -> the error of a call without arguments (None: the call succeeds)
WITHOUT_ARGUMENTS = {
    "capabilities": None, "get_stats": None, "get_competence": None,
    "get_recommendation": None, "list_task_types": None, "get_transition_table": None,
    "get_data_consumption": None, "replay_experience": None, "export_data": None,
    "query_similar": ("state_features=null: give state_features or at least one of "
                      "state_before, action_taken, state_after, metadata"),
    "should_escalate": "task_type=null: is required by should_escalate",
    "record": ("task_type=null: is required by record; missing: task_type, action_type, "
               "outcome, reward (or give episodes=[...])"),
    "prune_old": ("max_age_seconds=null: is required by prune_old; missing: max_age_seconds, "
                  "confirm (destructive: pass confirm=true)"),
    "compact": "confirm=null: is required by compact (destructive: pass confirm=true)",
    "delete_data": "confirm=null: is required by delete_data (destructive: pass confirm=true)",
    "reset": "confirm=null: is required by reset (destructive: pass confirm=true)",
}


def test_every_tool_has_its_call_without_arguments():
    assert set(WITHOUT_ARGUMENTS) == set(ALL_TOOLS)


@pytest.mark.parametrize("tool", ALL_TOOLS)
def test_a_call_without_parameters_names_the_missing_ones(tools, tool):
    expected = WITHOUT_ARGUMENTS[tool]
    for arguments in ({}, None):
        out, is_error = tools.call(tool, arguments)
        if expected is None:
            assert not is_error, out
            continue
        assert is_error and out["error"]["message"] == expected
        assert not out["error"]["message"].rstrip().endswith("one of")
    out, is_error = tools.call(tool, {"colour": "red"})       # an unknown parameter
    message = out["error"]["message"]
    assert is_error and message.startswith(f'colour="red": unknown parameter of {tool}')
    assert not message.rstrip().endswith("one of")
    if not tools.schemas[tool]["properties"]:
        assert message == f'colour="red": unknown parameter of {tool}: it takes no parameters'


# ============================================================================ HTTP
def _get(url: str, headers=None):
    import httpx2

    return httpx2.get(url, headers=headers or {}, timeout=10)


async def _sigterm_while_connected(url: str, proc) -> tuple[int, int]:
    """Connect with the SDK's client, list the tools, SIGTERM the server while connected:
    ``(number of tools, the server's exit status)``."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with client, streamable_http_client(url, http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        n_tools = len((await session.list_tools()).tools)
        proc.send_signal(signal.SIGTERM)
        status = await anyio.to_thread.run_sync(proc.wait, 30)
    return n_tools, status


def test_http_401_asks_for_a_static_token_not_oauth_then_sigterm_is_clean(tmp_path):
    import httpx2

    path = tmp_path / "http.db"
    with ExperienceStore(path, dim=DIM):
        pass
    proc = _http_server(path)
    try:
        url = _read_url(proc)
        root = url.removesuffix("/mcp")
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}
        accept = {"Accept": "application/json, text/event-stream"}
        res = httpx2.post(url, json=init, headers=accept, timeout=10)
        assert res.status_code == 401
        assert res.headers["www-authenticate"] == (
            'Bearer realm="dyna", error="invalid_token", error_description="a static bearer '
            "token is expected: send Authorization: Bearer <token>, the token this server was "
            "started with (DYNA_MCP_TOKEN or --token-file); this server has no OAuth "
            'authorization server"')
        assert res.json() == {"error": "invalid_token", "error_description": STATIC_TOKEN_REASON}
        # the OAuth documents and endpoints a client would try next: 404 without a token
        for where in ("/.well-known/oauth-protected-resource/mcp",
                      "/.well-known/oauth-protected-resource",
                      "/.well-known/oauth-authorization-server", "/register"):
            res = _get(root + where)
            assert (res.status_code, "www-authenticate" in res.headers) == (404, False), where
            assert res.json()["error_description"].endswith(STATIC_TOKEN_REASON)
        # SIGTERM while a client is connected (its event stream open): a graceful stop
        assert anyio.run(_sigterm_while_connected, url, proc) == (16, 143)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stderr.close()
    assert err == "dyna: terminated (SIGTERM)\n"       # one line, no traceback
