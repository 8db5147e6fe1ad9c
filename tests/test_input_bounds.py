"""Sizes and types past the documented limits: a typed error naming the field and value.

Every input here is refused with :class:`dyna.errors.ConfigError` (the CLI: one line, exit
2; MCP: a tool error or a JSON-RPC error), never an OverflowError, RecursionError,
MemoryError or silence. The limits live in :mod:`dyna.buffer.schema` (episodes) and
:mod:`dyna.experiment.config` (experiment files); docs/experience-store.md lists them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dyna.buffer.schema import (
    MAX_DEPTH,
    MAX_LABEL_CHARS,
    MAX_VALUE_CHARS,
    MAX_VALUE_ENTRIES,
)
from dyna.errors import ConfigError, DynaError
from dyna.experience import ExperienceStore
from dyna.experiment.config import MAX_EPISODES, MAX_RUNS, MAX_TOML_DEPTH

ROOT = Path(__file__).resolve().parents[1]
BASE = {"task_type": "t", "action_type": "a", "outcome": "success", "reward": 1.0}
HUGE = 10 ** 400


def _nested(n: int, leaf=1):
    value = leaf
    for _ in range(n):
        value = [value]
    return value


def _library_inputs():
    """(name, call on a store, text the error message must hold)."""
    def rec(**fields):
        return lambda s: s.record("acme", **{**BASE, **fields})

    return [
        ("reward 10**400", rec(reward=HUGE), "reward[0]='~1e400'"),
        ("timestamp 10**400", rec(timestamp=HUGE), "timestamp[0]='~1e400'"),
        ("state value 10**400", rec(state_before={"x": HUGE}), "'~1e400'"),
        ("nested value -10**400", rec(metadata={"x": [1, {"y": -HUGE}]}), "'-~1e400'"),
        ("dict key 10**400", rec(state_after={HUGE: 1}), "'~1e400'"),
        ("label 10**400", rec(task_type=HUGE), "task_type='~1e400'"),
        ("features 10**400", lambda s: s.record("acme", **BASE,
                                                 state_features=[HUGE] * s.dim), "~1e400"),
        ("query 10**400", lambda s: s.query_similar("acme", state_before={"x": HUGE}),
         "state_before='~1e400'"),
        ("10 MB label", rec(run_id="r" * 10_000_000),
         f"run_id='10000000 characters': a label has at most MAX_LABEL_CHARS={MAX_LABEL_CHARS}"),
        ("100 MB state", rec(state_before={"x": "s" * 100_000_000}),
         f"'> {MAX_VALUE_CHARS} characters'"),
        ("1M-key dict", rec(metadata={str(i): i for i in range(1_000_000)}),
         f"'> {MAX_VALUE_ENTRIES} entries'"),
        ("3,000 levels", rec(action_taken=_nested(3000)), f"'depth > {MAX_DEPTH}'"),
        ("NUL in tenant", lambda s: s.record("ac\x00me", **BASE),
         "tenant_id='NUL at position 2'"),
        ("NUL in label", rec(task_id="a\x00b"), "task_id='NUL at position 1'"),
        ("empty episode list", lambda s: s.record("acme", episodes=[]),
         "episodes=[]: empty list"),
        ("batch label too long", lambda s: s.record(
            "acme", episodes=[BASE, {**BASE, "outcome": "o" * (MAX_LABEL_CHARS + 1)}]),
         "episodes[1].outcome='4097 characters'"),
        ("MCP-style dispatch 10**400", lambda s: s.dispatch(
            "record", tenant_id="acme", **BASE, state_before={"x": HUGE}), "'~1e400'"),
    ]


@pytest.fixture(scope="module")
def store():
    return ExperienceStore(dim=8)


@pytest.mark.parametrize("name,call,shown", _library_inputs(),
                         ids=[case[0] for case in _library_inputs()])
def test_each_input_is_refused_with_the_value_named(store, name, call, shown):
    with pytest.raises(ConfigError) as info:
        call(store)
    assert shown in str(info.value)


def test_untyped_errors_on_the_library_count_zero(store):
    untyped, refused = [], 0
    for name, call, _ in _library_inputs():
        try:
            call(store)
        except DynaError:
            refused += 1
        except BaseException as exc:  # noqa: BLE001 - counted
            untyped.append((name, type(exc).__name__))
    assert (len(untyped), refused) == (0, len(_library_inputs())), untyped
    assert store.count_matching("acme") == 0


def test_values_at_the_limits_are_stored():
    s = ExperienceStore(dim=8)
    s.record("t" * MAX_LABEL_CHARS, **BASE, state_before=_nested(MAX_DEPTH - 1),
             metadata={"big": 2 ** 1000, "n": list(range(MAX_VALUE_ENTRIES - 3))})
    assert s.query_similar("t" * MAX_LABEL_CHARS, state_before=_nested(MAX_DEPTH - 1))


# ----------------------------------------------------------------------------- CLI
def _toml_cases(tmp: Path):
    taxi = (ROOT / "experiments" / "taxi.toml").read_text()
    skill = (ROOT / "experiments" / "skill_loop_ablation.toml").read_text()

    def with_line(text, key, value):
        lines = [f"{key} = {value}" if ln.startswith(f"{key} = ") else ln
                 for ln in text.splitlines()]
        return "\n".join(lines) + "\n"

    deep = "[" * 3000 + "1" + "]" * 3000
    cases = {
        "deep.toml": ('kind = "tabular"\nx = ' + deep + "\n", [],
                      f"nested too deeply (more than MAX_TOML_DEPTH={MAX_TOML_DEPTH}"),
        "deep40.toml": ('kind = "tabular"\nx = ' + "[" * 40 + "1" + "]" * 40 + "\n", [],
                        "nested too deeply"),
        "runs.toml": (with_line(taxi, "runs", 10 ** 12), [],
                      f"runs=1000000000000: must be <= MAX_RUNS={MAX_RUNS}"),
        "episodes.toml": (with_line(taxi, "episodes", 10 ** 12), [],
                          f"schedule.episodes=1000000000000: must be <= "
                          f"MAX_EPISODES={MAX_EPISODES}"),
        "agent_episodes.toml": (with_line(skill, "episodes", 10 ** 12), [],
                                "episodes=1000000000000: must be <= MAX_EPISODES"),
        "product.toml": (with_line(with_line(skill, "episodes", 1_000_000), "runs", 1000), [],
                         "MAX_RUN_EPISODES=100000000"),
        "episodes_float.toml": (with_line(taxi, "episodes", "1e300"), [],
                                "schedule.episodes='~1e300': must be <= MAX_EPISODES"),
        "final_window.toml": (with_line(skill, "final_window", 10 ** 40), [],
                              f"analysis.final_window='~1e40': must be <= {MAX_EPISODES}"),
        "cli_runs.toml": (taxi, ["--runs", str(10 ** 12)], "--runs=1000000000000"),
        "bigint.toml": ('kind = "tabular"\nx = ' + str(HUGE) + "\n", [], "x='~1e400'"),
        "bigint5000.toml": ('kind = "tabular"\nx = 1' + "0" * 5000 + "\n", [],
                            "not valid TOML"),
    }
    out = []
    for fname, (text, extra, shown) in cases.items():
        path = tmp / fname
        path.write_text(text)
        out.append((fname, [str(path), *extra], shown))
    return out


def test_cli_refuses_each_experiment_file_in_one_line(tmp_path):
    untyped = []
    cases = _toml_cases(tmp_path)
    for fname, args, shown in cases:
        proc = subprocess.run([sys.executable, "-m", "dyna.cli", "run", *args,
                               "--out", str(tmp_path / "out")],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              check=False)
        lines = proc.stderr.strip().splitlines()
        if proc.returncode != 2 or len(lines) != 1 or "Traceback" in proc.stderr:
            untyped.append((fname, proc.returncode, proc.stderr[-300:]))
            continue
        assert shown in lines[0], (fname, lines[0])
        if "~1e" in shown:   # a size, not its digits
            assert len(lines[0]) <= 120, (fname, lines[0])
    assert len(untyped) == 0, untyped
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- MCP
def test_request_id_is_found_without_parsing_the_whole_line():
    from dyna.mcp_server.transport import request_id

    deep = "[" * 5000 + "]" * 5000
    assert request_id('{"jsonrpc":"2.0","id":7,"params":{"id":3,"x":' + deep + "}}") == 7
    assert request_id('{"params":{"id":3,"x":' + deep + '},"id":"abc"}') == "abc"
    assert request_id('{"params":{"id":3}}') is None
    assert request_id("not json") is None
    assert request_id('{"id":{"a":1}}') is None


def test_mcp_stdio_answers_deep_and_huge_requests(tmp_path):
    pytest.importorskip("mcp", reason="the MCP SDK (extra 'mcp') is not installed")
    proc = subprocess.Popen([sys.executable, "-m", "dyna.cli", "mcp", "--db",
                             str(tmp_path / "s.db")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ask(line: str) -> dict:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "test", "version": "1"}}}
        assert ask(json.dumps(init))["id"] == 1
        proc.stdin.write(json.dumps({"jsonrpc": "2.0",
                                     "method": "notifications/initialized"}) + "\n")
        huge = ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"record",'
                '"arguments":{"task_type":"t","action_type":"a","outcome":"success",'
                '"reward":1,"state_before":{"x":' + str(HUGE) + "}}}}")
        answer = ask(huge)
        error = answer["result"]["structuredContent"]["error"]
        assert (answer["id"], error["type"], error["value"]) == (2, "ConfigError", "~1e400")
        deep = ('{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"record",'
                '"arguments":{"x":' + "[" * 3000 + "1" + "]" * 3000 + "}}}")
        answer = ask(deep)
        assert (answer["id"], answer["error"]["code"]) == (3, -32700)
        assert "nested too deeply" in answer["error"]["message"]
        answer = ask("not json")
        assert (answer["id"], answer["error"]["code"]) == (None, -32700)
        answer = ask('{"jsonrpc":"2.0","id":4,"method":"tools/list"}')
        assert answer["id"] == 4 and answer["result"]["tools"]
    finally:
        proc.communicate(timeout=30)  # closes stdin, reads both pipes to the end, waits
