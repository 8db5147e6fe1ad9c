"""``dyna mcp``: the MCP server over the experience store, driven by the SDK's own client.

Each server is a subprocess (``python -m dyna.cli mcp ...``) reached over stdio (or over
streamable HTTP on 127.0.0.1 in one test) with :class:`mcp.ClientSession`. The servers of
this module serve tenant ``agent`` of one SQLite file into which tenant ``other``'s records
(and two of ``agent``'s) were written directly before any server started, so a server that
leaked across tenants would see them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scipy import stats

pytest.importorskip("mcp", reason="the MCP SDK (extra 'mcp', part of 'dev') is not installed")

from anyio.from_thread import start_blocking_portal  # noqa: E402  (after the SDK check)
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from dyna.cli import main  # noqa: E402
from dyna.experience import MAX_K, OPERATIONS, ExperienceStore  # noqa: E402
from dyna.mcp_server import READ_TOOLS, WRITE_TOOLS  # noqa: E402
from dyna.store.jsonl import read_jsonl  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DIM = 4
TENANT, OTHER = "agent", "other"
DESTRUCTIVE = {"reset", "delete_data", "prune_old", "compact"}
OTHER_FEATURES = [0.0, 0.0, 1.0, 0.0]


def _seed_store(path: Path) -> list[int]:
    """Write tenant OTHER's 3 old records and 2 of TENANT's; return OTHER's ids."""
    with ExperienceStore(path, dim=DIM) as store:
        ids = store.record(OTHER, episodes=[
            {"task_type": "deploy", "action_type": "ship", "outcome": "success", "reward": 1.0,
             "timestamp": 500.0 + i, "state_features": OTHER_FEATURES, "run_id": "r1"}
            for i in range(3)])["ids"]
        store.record(TENANT, episodes=[
            {"task_type": "preloaded", "action_type": "a", "outcome": o, "reward": r,
             "state_features": [0.0, 0.0, 0.0, 1.0]}
            for o, r in (("success", 1.0), ("failure", 0.0))])
    return ids


def _other_records(path: Path) -> list[dict]:
    with ExperienceStore(path, dim=DIM) as store:
        return store.export_data(OTHER)["records"]


class Client:
    """Synchronous view of one MCP client session (calls run on a blocking portal)."""

    def __init__(self, portal, session, errlog):
        self.portal, self.session, self.errlog = portal, session, errlog

    def tools(self) -> dict:
        return {t.name: t for t in self.portal.call(self.session.list_tools).tools}

    def call(self, name, args=None):
        return self.portal.call(self.session.call_tool, name, args)

    def ok(self, name, args=None) -> dict:
        res = self.call(name, args)
        assert not res.is_error, res.content[0].text
        assert json.loads(res.content[0].text) == res.structured_content
        assert res.structured_content["op"] == name
        return res.structured_content

    def err(self, name, args=None) -> dict:
        res = self.call(name, args)
        assert res.is_error, res.structured_content
        err = res.structured_content["error"]
        assert res.content[0].text == err["message"]
        return err


@contextlib.asynccontextmanager
async def _stdio_session(args, errlog):
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "dyna.cli", "mcp", *args], cwd=str(REPO))
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


@contextlib.contextmanager
def _serve(args, log_path: Path):
    with open(log_path, "w") as errlog, start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(_stdio_session(args, errlog)) as session:
        yield Client(portal, session, log_path)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp")
    path = root / "store.db"
    other_ids = _seed_store(path)
    return {"path": path, "root": root, "other_ids": other_ids}


@pytest.fixture(scope="module")
def server(db):
    exports = db["root"] / "exports"
    exports.mkdir()
    with _serve(["--db", str(db["path"]), "--tenant", TENANT, "--export-dir", str(exports)],
                db["root"] / "server.log") as client:
        client.exports = exports
        yield client


@pytest.fixture(scope="module")
def ro_server(db):
    with _serve(["--db", str(db["path"]), "--tenant", TENANT, "--read-only"],
                db["root"] / "ro.log") as client:
        yield client


# ============================================================================ tools and schemas
def test_tool_list_and_schemas_come_from_the_operation_table(server):
    tools = server.tools()
    assert set(tools) == set(READ_TOOLS) | set(WRITE_TOOLS)
    assert len(tools) == 16
    for name, tool in tools.items():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert "tenant_id" not in schema["properties"] and "all_tenants" not in schema["properties"]
        lib = {p.name: p for p in OPERATIONS[name].params}
        for prop, sub in schema["properties"].items():
            if prop == "confirm":
                continue
            assert sub["type"] == lib[prop].type, (name, prop)  # one plain type, as declared
            assert sub.get("default") == lib[prop].default, (name, prop)
        assert set(schema["required"]) == {p for p in schema["properties"]
                                           if p == "confirm" or lib[p].required}
        assert tool.output_schema["properties"]["op"] == {"type": "string", "const": name,
                                                          "description": "the tool called"}
        assert tool.annotations.destructive_hint is (name in DESTRUCTIVE)
        assert tool.annotations.read_only_hint is (name in READ_TOOLS
                                                   or name == "replay_experience")
        if name in DESTRUCTIVE:
            assert "confirm" in schema["required"]
            assert schema["properties"]["confirm"]["type"] == "boolean"
            assert schema["properties"]["confirm"]["const"] is True
            assert "confirm=true" in tool.description
        assert f'tenant "{TENANT}"' in tool.description
    qs = tools["query_similar"].input_schema
    assert set(qs["properties"]) == {"k", "task_type", "state_features", "state_before",
                                     "action_taken", "state_after", "metadata"}
    assert qs["properties"]["k"] == {"type": "integer", "description": "number of neighbours",
                                     "minimum": 1, "maximum": MAX_K, "default": 5}
    assert qs["properties"]["state_features"]["items"] == {"type": "number"}
    assert qs["properties"]["state_features"]["minItems"] == DIM
    assert qs["required"] == []
    assert tools["should_escalate"].input_schema["required"] == ["task_type"]
    assert set(tools["prune_old"].input_schema["required"]) == {"max_age_seconds", "confirm"}
    assert set(tools["reset"].input_schema["properties"]) == {"confirm"}
    assert set(tools["export_data"].input_schema["properties"]) == {
        "path", "format", "task_type", "run_id", "task_id", "request_id"}
    assert {"episodes", "reward", "state_features", "outcome"} <= set(
        tools["record"].input_schema["properties"])
    caps = server.ok("capabilities")
    assert caps["server"] == {"tenant_id": TENANT, "read_only": False, "tools": list(tools),
                              "export_dir": server.exports.name}  # a base name, no directory
    assert set(caps["operations"]) == set(tools)
    assert caps["operations"]["record"]["input_schema"] == tools["record"].input_schema
    assert caps["persistence"]["path"] == "store.db"
    assert caps["dim"] == DIM


# ============================================================================ the experience loop
def test_record_then_competence_similar_recommendation_escalation(server):
    first = server.ok("record", {"task_type": "review", "action_type": "lint",
                                 "outcome": "success", "reward": 1.0,
                                 "state_features": [1.0, 0.0, 0.0, 0.0]})
    assert first["n"] == 1 and first["persistence_status"] == "ok"
    rest = server.ok("record", {"episodes": [
        {"task_type": "review", "action_type": "lint", "outcome": "success", "reward": 1.0,
         "state_features": [0.9, 0.1, 0.0, 0.0]},
        {"task_type": "review", "action_type": "lint", "outcome": "failure", "reward": 0.0,
         "state_features": [0.0, 1.0, 0.0, 0.0]},
        {"task_type": "review", "action_type": "rewrite", "outcome": "success", "reward": 0.5,
         "state_features": [0.0, 0.0, 0.0, 1.0]}]})
    assert rest["n"] == 3
    ids = first["ids"] + rest["ids"]

    (comp,) = server.ok("get_competence", {"task_type": "review"})["competence"]
    assert (comp["a"], comp["b"], comp["n_success"], comp["n_failure"]) == (4.0, 2.0, 3.0, 1.0)
    assert comp["mean"] == pytest.approx(4 / 6, abs=1e-12)
    lo, hi = stats.beta.ppf([0.025, 0.975], 4.0, 2.0)
    assert (comp["lower"], comp["upper"]) == (pytest.approx(lo, abs=1e-9),
                                              pytest.approx(hi, abs=1e-9))

    sim = server.ok("query_similar", {"state_features": [1.0, 0.0, 0.0, 0.0], "k": 2,
                                      "task_type": "review"})["results"]
    assert [r["episode"]["id"] for r in sim] == ids[:2]
    assert sim[0]["score"] == pytest.approx(1.0, abs=1e-6)
    assert sim[1]["score"] == pytest.approx(0.9 / math.sqrt(0.82), abs=1e-6)
    assert all(r["episode"]["tenant_id"] == TENANT for r in sim)

    rec = server.ok("get_recommendation", {"task_type": "review"})
    assert rec["action_type"] == "rewrite"  # Beta mean (1+1)/(2+1) = 0.667 > (1+2)/(2+3) = 0.6
    by_action = {c["action_type"]: c for c in rec["candidates"]}
    assert (by_action["lint"]["n"], by_action["lint"]["n_success"]) == (3, 2)
    assert by_action["lint"]["success_rate"] == pytest.approx(0.6, abs=1e-12)
    assert server.ok("get_recommendation", {"task_type": "review",
                                            "min_episodes": 2})["action_type"] == "lint"

    few = server.ok("should_escalate", {"task_type": "review", "threshold": 0.6})
    assert few["escalate"] is True  # 4 episodes < min_episodes 10
    low = server.ok("should_escalate", {"task_type": "review", "threshold": 0.6,
                                        "min_episodes": 3})
    assert low["escalate"] is False  # posterior mean 0.667 >= 0.6
    high = server.ok("should_escalate", {"task_type": "review", "threshold": 0.6,
                                         "min_episodes": 3, "domain_risk_class": "high_stakes"})
    assert high["escalate"] is True  # no outcome has provenance: no evidence counts

    types = {t["task_type"]: t for t in server.ok("list_task_types")["task_types"]}
    assert types["review"]["n_episodes"] == 4 and types["preloaded"]["n_episodes"] == 2


def test_transition_table(server):
    server.ok("record", {"episodes": [
        {"task_type": "nav", "action_type": "right", "outcome": "success", "reward": r,
         "state_before": {"x": 0}, "state_after": {"x": 1}} for r in (1.0, 0.0)]})
    table = server.ok("get_transition_table", {"task_type": "nav", "bin_count": 2,
                                               "state_key": "x"})
    assert table["edges"] == [0.0, 0.5, 1.0]
    assert table["transitions"] == [{"action_type": "right", "from_bin": 0, "to_bin": 1,
                                     "count": 2, "mean_reward": 0.5}]


# ============================================================================ tenancy
def test_second_tenants_records_stay_invisible_and_untouched(server, db):
    stats_ = server.ok("get_stats")
    n_own = stats_["n_records"]
    assert stats_["n_tenants"] == 1 and "rows" not in stats_["store"]
    assert "deploy" not in {t["task_type"] for t in server.ok("list_task_types")["task_types"]}
    sim = server.ok("query_similar", {"state_features": OTHER_FEATURES, "k": 50})["results"]
    assert len(sim) == n_own and all(r["episode"]["tenant_id"] == TENANT for r in sim)
    assert all(r["score"] < 0.5 for r in sim)  # OTHER's identical vectors would score 1
    assert server.ok("query_similar", {"state_features": OTHER_FEATURES,
                                       "task_type": "deploy"})["results"] == []
    (prior,) = server.ok("get_competence", {"task_type": "deploy"})["competence"]
    assert (prior["a"], prior["b"]) == (1.0, 1.0)  # unseen here: the prior
    cons = server.ok("get_data_consumption")
    assert {c["tenant_id"] for c in cons["consumption"]} == {TENANT}
    assert cons["total_records"] == n_own
    exported = server.ok("export_data")
    assert exported["n"] == n_own and {r["tenant_id"] for r in exported["records"]} == {TENANT}
    replay = server.ok("replay_experience", {"batch_size": 20, "seed": 3})
    assert {e["tenant_id"] for e in replay["episodes"]} == {TENANT}
    assert server.ok("get_transition_table", {"task_type": "deploy"})["n_episodes"] == 0

    err = server.err("replay_experience", {"strategy": "priority", "ids": db["other_ids"],
                                           "priorities": [1.0, 1.0, 1.0]})
    assert (err["field"], err["value"]) == ("ids", db["other_ids"][0])
    err = server.err("get_stats", {"tenant_id": OTHER})
    assert (err["field"], err["value"]) == ("tenant_id", OTHER)
    err = server.err("reset", {"all_tenants": True, "confirm": True})
    assert err["field"] == "all_tenants"
    err = server.err("record", {"episodes": [{"tenant_id": OTHER, "reward": 1.0,
                                              "task_type": "deploy"}]})
    assert (err["field"], err["value"]) == ("episodes[0].tenant_id", OTHER)
    assert server.ok("delete_data", {"task_type": "deploy", "confirm": True})["deleted"] == 0
    assert server.ok("delete_data", {"run_id": "r1", "confirm": True})["deleted"] == 0
    assert server.ok("get_stats")["n_records"] == n_own
    others = _other_records(db["path"])  # read straight from the file
    assert [r["id"] for r in others] == db["other_ids"]
    assert {r["task_type"] for r in others} == {"deploy"}


# ============================================================================ errors
@pytest.mark.parametrize(("tool", "args", "field", "value"), [
    ("query_similar", {"k": 0, "state_features": [1, 0, 0, 0]}, "k", 0),
    ("query_similar", {"k": "five", "state_features": [1, 0, 0, 0]}, "k", "five"),
    ("query_similar", {"state_features": [1, 0, 0]}, "state_features", [1, 0, 0]),
    ("query_similar", {}, "state_features", None),
    ("query_similar", {"state_features": ["a", 0, 0, 0]}, "state_features[0]", "a"),
    ("replay_experience", {"strategy": "priority", "ids": ["x"], "priorities": [1.0]},
     "ids[0]", "x"),
    ("record", {"episodes": [{"reward": 1.0}, "x"]}, "episodes[1]", "x"),
    ("get_competence", {"level": 1.5}, "level", 1.5),
    ("should_escalate", {}, "task_type", None),
    ("should_escalate", {"task_type": "review", "domain_risk_class": "extreme"},
     "domain_risk_class", "extreme"),
    ("record", {"reward": "high", "task_type": "t"}, "reward", "high"),
    ("record", {"task_type": "t"}, "action_type", None),
    ("record", {"task_type": "t", "action_type": "a", "outcome": "success"}, "reward", None),
    ("record", {"reward": 1.0, "state_features": [1, 2, 3]}, "state_features", [1, 2, 3]),
    ("record", {"episodes": [{"reward": 1.0, "colour": "red"}]}, "episodes[0].colour", "red"),
    ("record", {"reward": 1.0, "colour": "red"}, "colour", "red"),
    ("replay_experience", {"strategy": "greedy"}, "strategy", "greedy"),
    ("replay_experience", {"batch_size": -1}, "batch_size", -1),
    ("get_transition_table", {"bin_count": 2.5}, "bin_count", 2.5),
    ("prune_old", {"max_age_seconds": -1, "confirm": True}, "max_age_seconds", -1),
    ("no_such_tool", {}, "name", "no_such_tool"),
])
def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(server, tool, args,
                                                                     field, value):
    before = server.ok("get_stats")["n_records"]
    err = server.err(tool, args)
    assert (err["field"], err["value"]) == (field, value)
    assert err["message"].startswith(f"{field}={json.dumps(value)}: ")  # the value as JSON
    assert not re.search(r"\b(None|True|False)\b|\['|'\]", err["message"]), err["message"]
    assert server.ok("get_stats")["n_records"] == before  # nothing written, still serving


@pytest.mark.parametrize(("tool", "args"), [
    ("reset", {}), ("delete_data", {"task_type": "review"}),
    ("prune_old", {"max_age_seconds": 0}), ("compact", {"compact_keep_records": 0})])
def test_destructive_tools_need_confirm(server, tool, args):
    before = server.ok("get_stats")["n_records"]
    err = server.err(tool, args)
    assert (err["field"], err["value"]) == ("confirm", None)
    assert err["message"] == f"confirm=null: is required by {tool} (destructive: pass confirm=true)"
    err = server.err(tool, {**args, "confirm": False})
    assert (err["field"], err["value"]) == ("confirm", False)
    assert err["message"] == "confirm=false: must be true to run a destructive tool"
    err = server.err(tool, {**args, "confirm": "yes"})
    assert (err["field"], err["value"]) == ("confirm", "yes")
    assert err["message"] == 'confirm="yes": must be a boolean (true or false)'
    assert server.ok("get_stats")["n_records"] == before


def test_prune_old_with_confirm_deletes_only_this_tenants_old_records(server, db):
    before = server.ok("get_stats")["n_records"]
    server.ok("record", {"episodes": [{"task_type": "old", "action_type": "a", "outcome": "failure",
                                       "reward": 0.0, "timestamp": t}
                                      for t in (1000.0, 2000.0)]})
    out = server.ok("prune_old", {"max_age_seconds": 3600.0, "now": 10000.0, "confirm": True})
    assert out == {"deleted": 2, "cutoff": "1970-01-01T01:46:40.000000+00:00",
                   "op": "prune_old", "persistence_status": "ok"}       # 6400 seconds
    assert server.ok("get_stats")["n_records"] == before
    # OTHER's records (timestamps 500..502, older than the cutoff) are still in the file
    assert [r["id"] for r in _other_records(db["path"])] == db["other_ids"]
    space = server.ok("compact", {"confirm": True})  # VACUUM only: nothing deleted
    assert space["deleted"] == 0 and server.ok("get_stats")["n_records"] == before


# ============================================================================ files
def test_export_writes_only_inside_the_export_directory(server, tmp_path):
    n_own = server.ok("get_stats")["n_records"]
    out = server.ok("export_data", {"path": "agent.jsonl"})
    target = server.exports.resolve() / "agent.jsonl"
    assert out["n"] == n_own and out["path"] == "agent.jsonl"  # no server directory
    recs, report = read_jsonl(target)
    assert len(recs) == n_own and report.n_skipped == 0
    assert {r["tenant_id"] for r in recs} == {TENANT}
    pq = server.ok("export_data", {"path": "agent.parquet", "format": "parquet",
                                   "task_type": "review"})
    assert pq["n"] == 4 and (server.exports / "agent.parquet").is_file()

    outside = tmp_path / "outside.jsonl"
    (server.exports / "link.jsonl").symlink_to(outside)
    for bad in ("../escape.jsonl", str(tmp_path / "abs.jsonl"), "sub/x.jsonl", ".hidden",
                "", "link.jsonl"):
        err = server.err("export_data", {"path": bad})
        assert (err["field"], err["value"]) == ("path", bad)
    assert not outside.exists() and not (tmp_path / "abs.jsonl").exists()
    assert not (server.exports.parent / "escape.jsonl").exists()
    assert sorted(p.name for p in server.exports.iterdir()) == ["agent.jsonl", "agent.parquet",
                                                                 "link.jsonl"]


# ============================================================================ read-only
def test_read_only_server_offers_no_writes(ro_server, db):
    tools = ro_server.tools()
    assert set(tools) == set(READ_TOOLS) and len(tools) == 9
    assert all(t.annotations.read_only_hint for t in tools.values())
    (comp,) = ro_server.ok("get_competence", {"task_type": "preloaded"})["competence"]
    assert (comp["a"], comp["b"]) == (2.0, 2.0)  # 1 success, 1 failure, uniform prior
    n = ro_server.ok("get_stats")["n_records"]
    for tool, args in [("record", {"reward": 1.0, "task_type": "preloaded"}),
                       ("reset", {"confirm": True}), ("export_data", {}),
                       ("delete_data", {"task_type": "preloaded", "confirm": True}),
                       ("replay_experience", {})]:
        err = ro_server.err(tool, args)
        assert (err["field"], err["value"]) == ("name", tool) and "read-only" in err["reason"]
    assert ro_server.ok("get_stats")["n_records"] == n
    assert ro_server.ok("capabilities")["server"]["read_only"] is True
    with ExperienceStore(db["path"], dim=DIM) as store:
        (c,) = store.get_competence(TENANT, "preloaded")["competence"]
    assert (c["a"], c["b"]) == (2.0, 2.0)


# ============================================================================ HTTP transport
def _read_url(proc, timeout=30.0) -> str:
    end, seen = time.monotonic() + timeout, ""
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if ready:
            line = proc.stderr.readline()
            seen += line
            m = re.search(r"(http://\S+/mcp)", line)
            if m:
                return m.group(1)
        if proc.poll() is not None:
            break
    raise AssertionError(f"no URL from the server; stderr: {seen!r}")


TOKEN = "t0k3n-for-the-loopback-test-only"


def _http_server(path, *extra, env_token=TOKEN):
    env = {k: v for k, v in os.environ.items() if k != "DYNA_MCP_TOKEN"}
    if env_token is not None:
        env["DYNA_MCP_TOKEN"] = env_token
    return subprocess.Popen([sys.executable, "-m", "dyna.cli", "mcp", "--db", str(path),
                             "--tenant", TENANT, "--http", "0", *extra], cwd=str(REPO),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_streamable_http_on_loopback_scoped_to_one_tenant(tmp_path):
    from mcp.shared._httpx_utils import create_mcp_http_client

    path = tmp_path / "http.db"
    other_ids = _seed_store(path)
    proc = _http_server(path)
    try:
        url = _read_url(proc)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", url)

        async def session():
            client = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
            async with client, streamable_http_client(url, http_client=client) as (read, write), \
                    ClientSession(read, write) as s:
                await s.initialize()
                names = {t.name for t in (await s.list_tools()).tools}
                rec = await s.call_tool("record", {"episodes": [
                    {"task_type": "deploy", "action_type": "ship", "outcome": "success",
                     "reward": 1.0, "timestamp": 100.0 + i}
                    for i in range(3)]})
                compact = await s.call_tool("compact", {"compact_keep_records": 1,
                                                        "confirm": True})
                no_path = await s.call_tool("export_data", {"path": "x.jsonl"})
                reset = await s.call_tool("reset", {"confirm": True})
                after = await s.call_tool("get_stats", {})
                return names, rec, compact, no_path, reset, after

        with start_blocking_portal() as portal:
            names, rec, compact, no_path, reset, after = portal.call(session)
        assert names == set(READ_TOOLS) | set(WRITE_TOOLS)
        assert rec.structured_content["n"] == 3
        # keep the newest 1 of TENANT's "deploy" (3) and "preloaded" (2): 3 deleted, not OTHER's
        assert compact.structured_content["deleted"] == 3
        assert no_path.is_error and no_path.structured_content["error"]["field"] == "path"
        assert reset.structured_content["deleted"] == 2
        assert after.structured_content["n_records"] == 0
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        err = proc.stderr.read()
        proc.stderr.close()
    assert TOKEN not in err                       # never printed or logged
    others = _other_records(path)
    assert [r["id"] for r in others] == other_ids
    assert {r["tenant_id"] for r in others} == {OTHER}


# ============================================================================ CLI errors
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    missing = tmp_path / "missing.db"
    assert main(["mcp", "--db", str(missing), "--read-only"]) == 2
    assert not missing.exists()  # a read-only server never creates a store
    assert main(["mcp", "--db", str(tmp_path / "x.db"), "--http", "70000"]) == 2
    not_store = tmp_path / "notes.txt"
    not_store.write_text("hello")
    assert main(["mcp", "--db", str(not_store)]) == 2
    with ExperienceStore(tmp_path / "d4.db", dim=4) as store:
        store.record(TENANT, task_type="t", action_type="a", outcome="success", reward=1.0)
    assert main(["mcp", "--db", str(tmp_path / "d4.db"), "--dim", "8"]) == 2
    assert main(["mcp", "--db", str(tmp_path / "d4.db"), "--tenant", ""]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 5 and all(ln.startswith("dyna: error: ") for ln in lines)
    assert "db=" in lines[0] and "http=70000" in lines[1] and "db=" in lines[2]
    assert "dim=8" in lines[3] and "tenant=''" in lines[4]
    assert not (tmp_path / "x.db").exists()


def test_unexpected_exception_is_an_internal_tool_error_not_a_crash(caplog):
    from dyna.mcp_server import ExperienceTools

    class Broken:
        def __init__(self):
            self.calls = 0

        def dispatch(self, op, **kwargs):
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("disk on fire")
            return {"op": op, "persistence_status": "ok", "tenant": kwargs.get("tenant_id")}

    tools = ExperienceTools(Broken(), TENANT)
    out, is_error = tools.call("get_competence", {})
    assert is_error and out["error"]["type"] == "internal"
    assert out["error"]["message"] == "internal error: RuntimeError: disk on fire"
    assert "get_competence" in caplog.text  # logged with its traceback on stderr
    out, is_error = tools.call("get_competence", {})
    assert not is_error and out["tenant"] == TENANT  # forced to the server's tenant
    out, is_error = tools.call("get_competence", None)
    assert not is_error
    out, is_error = tools.call("get_competence", ["level"])
    assert is_error and out["error"]["field"] == "arguments"


def test_http_refuses_requests_without_the_token_or_from_a_foreign_origin(tmp_path):
    import httpx2

    path = tmp_path / "auth.db"
    _seed_store(path)
    proc = _http_server(path)
    try:
        url = _read_url(proc)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "reset", "arguments": {"confirm": True}}}
        hdr = {"Accept": "application/json, text/event-stream"}
        codes = [httpx2.post(url, json=body, headers=h, timeout=10).status_code for h in (
            hdr, {**hdr, "Authorization": "Bearer wrong-token-of-some-length"},
            {**hdr, "Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"})]
        assert codes == [401, 401, 403]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        proc.stderr.close()
    assert len(_other_records(path)) > 0          # nothing was reset


def test_http_needs_a_token_and_an_owner_only_token_file(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DYNA_MCP_TOKEN", raising=False)
    db = str(tmp_path / "t.db")
    assert main(["mcp", "--db", db, "--http", "0"]) == 2
    assert "DYNA_MCP_TOKEN" in capsys.readouterr().err
    f = tmp_path / "token"
    f.write_text("x" * 32 + "\n")
    f.chmod(0o644)
    assert main(["mcp", "--db", db, "--http", "0", "--token-file", str(f)]) == 2
    err = capsys.readouterr().err
    assert "chmod 600" in err and "x" * 32 not in err and err.count("\n") == 1
    monkeypatch.setenv("DYNA_MCP_TOKEN", "short")
    assert main(["mcp", "--db", db, "--http", "0"]) == 2
    assert "at least 16 characters" in capsys.readouterr().err
    assert not (tmp_path / "t.db").exists()        # refused before the store was opened
