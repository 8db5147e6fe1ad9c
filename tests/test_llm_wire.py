"""The chat-completions wire format as real servers speak it (dyna.loops.llm.wire), against
the loopback server of tests/_chat_server.py: ``finish_reason`` on every choice, the
request's ``tool_choice`` and token field, the body of an error answer in the failure's
reason, the legacy ``function_call`` field, the tools' schemas and the limits checked on
the reply instead."""

from __future__ import annotations

import json

import pytest
from _chat_server import ChatServer, completion, ok, tool_call

from dyna.errors import ConfigError
from dyna.loops import Digest, LearningLoop, LoopConfig
from dyna.loops.llm import (
    MEMORY_TOOL,
    SKILL_TOOL,
    ChatClient,
    Endpoint,
    LLMReviewer,
    Recording,
    wire,
)
from dyna.loops.llm.client import error_text

KEY_ENV = "DYNA_TEST_WIRE_API_KEY"
KEY = "copper-meadow-lantern-9"        # no detector knows this shape
FACT = {"action": "add", "text": "Staging deploys need the VPN: run vpn up staging first"}
CUT = {"action": "add", "text": "Staging deploys need the VPN: run vpn up sta"}
KNOWN = "stop, tool_calls, function_call, length, content_filter, eos_token, stop_sequence"


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def _digest() -> Digest:
    return Digest.from_run("run-1", "deploy the billing service", success=True,
                           verified=True, steps=1, tokens=500, task_source="operator",
                           tool_calls=[{"name": "deploy", "args": {"env": "staging"},
                                        "output": "ok", "trusted": True}])


def _review(srv, store="memory", recording=None, endpoint_kw=None, **reviewer_kw):
    """One inline review through a loop with every safeguard on; ``(record, loop)``."""
    ep = Endpoint(srv.base_url, "test-model", api_key_env=KEY_ENV, timeout=5.0, backoff=0.01,
                  **(endpoint_kw or {}))
    cfg = LoopConfig()
    loop = LearningLoop(cfg.skill_library(), cfg.memory_store(),
                        LLMReviewer(ChatClient(ep, recording=recording), store,
                                    **reviewer_kw), cfg)
    digest = _digest()
    rec = loop.finish(loop.begin(digest.run_id, digest.task), digest)
    loop.wait()
    assert (rec.success, rec.tokens, rec.steps) == (True, 500, 1)   # the run's own outcome
    return rec, loop


def _cut(body: dict, finish_reason, index: int = 0) -> dict:
    body["choices"][index]["finish_reason"] = finish_reason
    return body


# ---------------------------------------------------------------- finish_reason

def test_a_reply_cut_at_length_is_incomplete_and_its_parsing_call_no_proposal():
    script = [ok(_cut(completion(tool_calls=[tool_call("memory", CUT)], prompt_tokens=300,
                                 completion_tokens=64), "length"))]
    with ChatServer(script) as srv:
        rec, loop = _review(srv)
    assert (rec.review.status, rec.review.reason) == (
        "incomplete", "length: the reply was cut at the token limit (finish_reason 'length'); "
        "a tool call in it is a fragment and is not used")
    assert rec.review.decisions == () and len(loop.memory) == 0
    # the tokens were spent all the same
    assert (rec.review.cost.prompt_tokens, rec.review.cost.completion_tokens) == (300, 64)
    assert rec.learning_tokens == 364 and len(srv.requests) == 1


def test_a_cut_second_turn_keeps_the_whole_first_call_only():
    script = [ok(completion(tool_calls=[tool_call("memory", FACT, "c1")])),
              ok(_cut(completion(tool_calls=[tool_call("memory", CUT, "c2")]), "length"))]
    with ChatServer(script) as srv:
        rec, loop = _review(srv)
    assert rec.review.status == "incomplete" and rec.review.reason.startswith("length: ")
    assert [(d.action, d.proposal.text) for d in rec.review.decisions] == [
        ("committed", FACT["text"])]
    assert loop.memory.snapshot().texts() == [FACT["text"]]


def test_a_cut_reply_without_arguments_is_incomplete_not_a_review_of_nothing():
    with ChatServer([ok(_cut(completion("The deploy", completion_tokens=4), "length"))]) as srv:
        rec, _ = _review(srv, tool_choice="auto")
    assert rec.review.status == "incomplete" and rec.review.reason.startswith("length: ")


def test_a_reply_using_every_token_asked_is_cut_whatever_its_finish_reason():
    """llama-cpp-python's server ends a tool call it cut at max_tokens with "tool_calls"."""
    script = [ok(completion(tool_calls=[tool_call("memory", CUT)], prompt_tokens=120,
                            completion_tokens=64))]
    with ChatServer(script) as srv:
        rec, loop = _review(srv, max_tokens=64)
    assert (rec.review.status, rec.review.reason) == (
        "incomplete", "length: the reply used all 64 new tokens asked for (finish_reason "
        "'tool_calls'); a tool call in it is a fragment and is not used")
    assert rec.review.decisions == () and len(loop.memory) == 0
    assert srv.requests[0]["body"]["max_tokens"] == 64 and rec.learning_tokens == 184
    # one token fewer than asked: a whole reply
    script = [ok(completion(tool_calls=[tool_call("memory", FACT)], prompt_tokens=20,
                            completion_tokens=63))]
    with ChatServer(script) as srv:
        rec, loop = _review(srv, max_tokens=100, max_lessons=1)
    assert (rec.review.status, rec.review.reason) == ("reviewed", "1 proposals")
    assert loop.memory.snapshot().texts() == [FACT["text"]]


def test_content_filter_is_failed_and_named():
    with ChatServer([ok(_cut(completion(tool_calls=[tool_call("memory", FACT)]),
                             "content_filter"))]) as srv:
        rec, loop = _review(srv)
    assert (rec.review.status, rec.review.reason) == (
        "failed", "content_filter: the endpoint's content filter withheld or cut the reply "
        "(finish_reason 'content_filter')")
    assert rec.review.decisions == () and len(loop.memory) == 0


@pytest.mark.parametrize("finish, shown", [("end_turn", "'end_turn'"), (None, "None"),
                                           (7, "7")])
def test_an_unknown_finish_reason_is_a_typed_failure(finish, shown):
    with ChatServer([ok(_cut(completion(tool_calls=[tool_call("memory", FACT)]),
                             finish))]) as srv:
        rec, loop = _review(srv)
    assert (rec.review.status, rec.review.reason) == (
        "failed", f"unknown_finish_reason: {shown} (known: {KNOWN})")
    assert rec.review.decisions == () and len(loop.memory) == 0


@pytest.mark.parametrize("finish", ["eos_token", "stop_sequence"])
def test_text_generation_inference_endings_are_whole(finish):
    """text-generation-inference ends a whole reply with "eos_token" or "stop_sequence"."""
    with ChatServer([ok(_cut(completion(tool_calls=[tool_call("memory", FACT)]),
                             finish))]) as srv:
        rec, loop = _review(srv, max_lessons=1)
    assert (rec.review.status, rec.review.reason) == ("reviewed", "1 proposals")
    assert loop.memory.snapshot().texts() == [FACT["text"]]
    assert wire.finish_status({"choices": [{"finish_reason": finish}]}) == ("ok", "")


def test_every_choice_is_read():
    body = completion(tool_calls=[tool_call("memory", FACT)])
    body["choices"].append({"index": 1, "message": {"role": "assistant", "content": "x"},
                            "finish_reason": "length"})
    with ChatServer([ok(body)]) as srv:
        rec, _ = _review(srv)
    assert rec.review.status == "incomplete" and rec.review.reason.startswith("length: ")


def test_a_cut_reply_replays_as_recorded():
    from dyna.loops.llm import Replay
    rec_ = Recording()
    script = [ok(completion(tool_calls=[tool_call("memory", FACT, "c1")])),
              ok(_cut(completion(tool_calls=[tool_call("memory", CUT, "c2")],
                                 prompt_tokens=333, completion_tokens=64), "length"))]
    with ChatServer(script) as srv:
        live, _ = _review(srv, recording=rec_)
    assert [ex["status"] for ex in rec_.exchanges] == ["ok", "incomplete"]
    ep = Endpoint("http://127.0.0.1:9/v1", "test-model", api_key_env=KEY_ENV)
    cfg = LoopConfig()
    loop = LearningLoop(cfg.skill_library(), cfg.memory_store(),
                        LLMReviewer(ChatClient(ep, replay=Replay(rec_.exchanges)), "memory"),
                        cfg)
    digest = _digest()
    again = loop.finish(loop.begin(digest.run_id, digest.task), digest)
    assert (again.review.status, again.review.reason, again.learning_tokens) == \
        (live.review.status, live.review.reason, live.learning_tokens)
    assert live.learning_tokens == 150 + 333 + 64


# ---------------------------------------------------------------- tool_choice

@pytest.mark.parametrize("store, choice, sent", [
    ("memory", None, {"type": "function", "function": {"name": "memory"}}),
    ("skill", None, {"type": "function", "function": {"name": "skill_manage"}}),
    ("memory", "auto", "auto"),
    ("skill", "required", "required"),
])
def test_tool_choice_is_sent_as_configured(store, choice, sent):
    kw = {} if choice is None else {"tool_choice": choice}
    with ChatServer([ok(completion("NOTHING_LEARNED"))]) as srv:
        rec, _ = _review(srv, store, **kw)
    assert rec.review.status == "reviewed"
    assert srv.requests[0]["body"]["tool_choice"] == sent


@pytest.mark.parametrize("bad", ["none", "memory", "", None, ["auto"]])
def test_a_bad_tool_choice_is_refused_naming_the_field(bad):
    ep = Endpoint("http://127.0.0.1:9/v1", "m", api_key_env=KEY_ENV)
    with pytest.raises(ConfigError) as e:
        LLMReviewer(ChatClient(ep), "memory", tool_choice=bad)
    assert e.value.field == "tool_choice"
    assert e.value.reason == "must be one of ('named', 'auto', 'required')"


def test_no_tool_choice_without_tools():
    ep = Endpoint("http://127.0.0.1:9/v1", "m", api_key_env=KEY_ENV)
    body = ChatClient(ep).body([{"role": "user", "content": "hi"}], None, 16, "auto")
    assert "tool_choice" not in body and body["max_tokens"] == 16


# ---------------------------------------------------------------- the token field

def test_the_token_field_is_the_endpoints_setting():
    with ChatServer([ok(completion("NOTHING_LEARNED"))] * 2) as srv:
        _review(srv)
        _review(srv, endpoint_kw={"max_tokens_field": "max_completion_tokens"})
    first, second = (r["body"] for r in srv.requests)
    assert first["max_tokens"] == 4000 and "max_completion_tokens" not in first
    assert second["max_completion_tokens"] == 4000 and "max_tokens" not in second
    assert Endpoint(srv.base_url, "m").to_dict()["max_tokens_field"] == "max_tokens"


@pytest.mark.parametrize("bad", ["max_new_tokens", "", None])
def test_a_bad_token_field_is_refused_naming_the_field(bad):
    with pytest.raises(ConfigError) as e:
        Endpoint("http://127.0.0.1:9/v1", "m", max_tokens_field=bad)
    assert e.value.field == "max_tokens_field"
    assert e.value.reason == "must be one of ('max_tokens', 'max_completion_tokens')"


@pytest.mark.parametrize("key, value, field", [
    ("review_tool_choice", "none", "llm.review_tool_choice"),
    ("max_tokens_field", "max_new_tokens", "llm.max_tokens_field"),
])
def test_the_llm_table_checks_both_settings(key, value, field):
    from dyna.agents.llm import parse_llm_table
    table = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    assert parse_llm_table(table)["review_tool_choice"] == "named"
    assert parse_llm_table(table)["max_tokens_field"] == "max_tokens"
    with pytest.raises(ConfigError) as e:
        parse_llm_table({**table, key: value})
    assert (e.value.field, e.value.value) == (field, value)


# ---------------------------------------------------------------- the error body

@pytest.mark.parametrize("item, status, reason", [
    ({"status": 400, "body": {"error": {"message": "'tool_choice' is not supported with "
                                                   "this model", "type": "invalid_request"}}},
     "failed", "http_error: 400: 'tool_choice' is not supported with this model"),
    ({"status": 400, "body": {"object": "error", "message": "Unsupported parameter: "
                                                           "'max_tokens'", "code": 400}},
     "failed", "http_error: 400: Unsupported parameter: 'max_tokens'"),
    ({"status": 404, "raw": b"no such model\n\x1b[31m gemma"},
     "failed", "http_error: 404: no such model [31m gemma"),
    ({"status": 422, "body": {"detail": [{"loc": ["body", "messages", 1, "content"],
                                          "msg": "none is not an allowed value"}]}},
     "failed", 'http_error: 422: {"detail": [{"loc": ["body", "messages", 1, "content"], '
               '"msg": "none is not an allowed value"}]}'),
    ({"status": 401, "body": {"error": f"Incorrect API key provided: {KEY}"}},
     "failed", "http_error: 401: Incorrect API key provided: [REDACTED]"),
    ({"status": 400, "body": {"error": "bad request", "api_key": "abc"}},
     "failed", "http_error: 400: bad request"),
    ({"status": 400, "body": {}}, "failed", "http_error: 400"),
    ({"status": 403, "raw": b""}, "failed", "http_error: 403"),
])
def test_the_error_body_is_in_the_reason(item, status, reason):
    with ChatServer([item]) as srv:
        rec, _ = _review(srv)
    assert (rec.review.status, rec.review.reason) == (status, reason)


def test_a_secret_in_the_error_body_is_redacted():
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    with ChatServer([{"status": 400, "body": {"error": {"message": f"token {token} "
                                                                   "rejected"}}}]) as srv:
        rec, _ = _review(srv)
    assert rec.review.status == "failed" and token not in rec.review.reason
    assert rec.review.reason.startswith("http_error: 400: token [REDACTED")
    assert rec.review.reason.endswith("rejected")


def test_the_last_error_body_of_retried_answers_is_in_the_reason():
    script = [{"status": 503, "body": {"error": {"message": "Loading model"}}}] * 3
    with ChatServer(script) as srv:
        rec, _ = _review(srv)
    assert (rec.review.status, rec.review.reason) == (
        "failed", "server_error: 503 after 2 retries: Loading model")
    script = [{"status": 429, "headers": {"Retry-After": "0"},
               "body": {"error": {"message": "Rate limit reached for requests"}}}] * 4
    with ChatServer(script) as srv:
        rec, _ = _review(srv)
    assert (rec.review.status, rec.review.reason) == (
        "incomplete", "rate_limited: 429 after 3 retries: Rate limit reached for requests")


def test_a_long_error_body_is_read_in_part_and_cut(monkeypatch):
    import dyna.loops.llm.client as client
    seen = []
    error_text = client.error_text

    def spy(raw, api_key=""):
        seen.append(len(raw))
        return error_text(raw, api_key)

    monkeypatch.setattr(client, "error_text", spy)
    text = "x" * 200 + " y" * 500_000
    with ChatServer([{"status": 400, "body": {"error": {"message": text}}}]) as srv:
        rec, _ = _review(srv)
    assert seen == [wire.MAX_ERROR_BYTES]
    # 4 KiB of a cut JSON text: shown as text, cut to 300 characters
    reason = rec.review.reason
    assert reason.startswith('http_error: 400: {"error": {"message": "xxx') and \
        reason.endswith("...")
    assert len(reason) == len("http_error: 400: ") + wire.MAX_ERROR_CHARS


# ---------------------------------------------------------------- the legacy field

def test_function_call_beside_tool_calls_is_ignored():
    other = {"action": "add", "text": "Another fact from the legacy field"}
    body = completion(tool_calls=[tool_call("memory", FACT, "c1")])
    body["choices"][0]["message"]["function_call"] = {"name": "memory",
                                                      "arguments": json.dumps(other)}
    with ChatServer([ok(body), ok(completion("DONE"))]) as srv:
        rec, loop = _review(srv)
    assert (rec.review.status, rec.review.reason) == ("reviewed", "1 proposals")
    assert [d.proposal.text for d in rec.review.decisions] == [FACT["text"]]
    assert loop.memory.snapshot().texts() == [FACT["text"]]
    # the reply went back without the legacy field and with text content, never null
    assert srv.requests[1]["body"]["messages"][2] == {
        "role": "assistant", "content": "",
        "tool_calls": [tool_call("memory", FACT, "c1")]}


def test_function_call_alone_is_not_read():
    body = completion()
    body["choices"][0]["message"]["function_call"] = {"name": "memory",
                                                      "arguments": json.dumps(FACT)}
    body["choices"][0]["finish_reason"] = "function_call"
    with ChatServer([ok(body)]) as srv:
        rec, loop = _review(srv)
    assert (rec.review.status, rec.review.reason) == (
        "reviewed", "0 proposals (a legacy function_call without tool_calls is not read)")
    assert rec.review.decisions == () and len(loop.memory) == 0


# ---------------------------------------------------------------- schemas and limits

def _keywords(obj) -> set:
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(k)
            out |= _keywords(v)
    elif isinstance(obj, list):
        for v in obj:
            out |= _keywords(v)
    return out


def test_the_tool_schemas_hold_no_bounds():
    for tool in (MEMORY_TOOL, SKILL_TOOL):
        params = tool["function"]["parameters"]
        assert _keywords(params) & {"maxLength", "minLength", "pattern", "maxItems",
                                    "minItems", "format"} == set()
    assert "at most 1024 characters" in \
        SKILL_TOOL["function"]["parameters"]["properties"]["description"]["description"]


SKILL = {"action": "create", "name": "deploy-staging", "description": "Deploy to staging.",
         "body": "Run `deploy env=staging branch=release-2`."}


@pytest.mark.parametrize("store, args, why", [
    ("memory", {"action": "add", "text": "f" * 501},
     "bad_arguments: text has 501 characters, more than 500"),
    ("skill", {**SKILL, "description": "d" * 1025},
     "bad_arguments: description has 1025 characters, more than 1024"),
    ("skill", {**SKILL, "name": "n" * 65}, "bad_arguments: name has 65 characters, more than 64"),
    ("skill", {**SKILL, "triggers": [f"t{i}" for i in range(9)]},
     "bad_arguments: 9 triggers, more than 8"),
])
def test_lengths_are_checked_on_the_reply(store, args, why):
    tool = "memory" if store == "memory" else "skill_manage"
    with ChatServer([ok(completion(tool_calls=[tool_call(tool, args)])),
                     ok(completion("DONE"))]) as srv:
        rec, loop = _review(srv, store)
    assert [(d.action, d.detail) for d in rec.review.decisions] == [("refused", why)]
    assert len(loop.memory) == 0 and len(loop.skills) == 0


def test_lengths_at_the_limit_pass():
    args = {**SKILL, "description": "d" * 1024, "name": "n" * 64,
            "triggers": [f"t{i}" for i in range(8)]}
    with ChatServer([ok(completion(tool_calls=[tool_call("skill_manage", args)])),
                     ok(completion("DONE"))]) as srv:
        rec, loop = _review(srv, "skill")
    assert [(d.action, d.detail) for d in rec.review.decisions] == [("committed", "written")]
    assert [s.name for s in loop.skills.skills()] == ["n" * 64]


def test_the_agent_sends_its_reply_back_with_text_content():
    from dyna.agents.llm import parse_llm_table, run_llm_agent
    script = [ok(completion(tool_calls=[tool_call("tool_a", {"value": "val_0"}, "a0")])),
              ok(completion("I stop here."))]
    with ChatServer(script) as srv:
        llm = parse_llm_table({"base_url": srv.base_url, "model": "m",
                               "api_key_env": KEY_ENV, "max_tokens_field":
                               "max_completion_tokens"})
        run_llm_agent("no_learning", llm=llm, episodes=1,
                      env_kwargs={"n_families": 1, "n_tools": 2, "n_values": 2, "length": 2})
    assert len(srv.requests) == 2
    sent = srv.requests[1]["body"]["messages"][2]
    assert sent == {"role": "assistant", "content": "",
                    "tool_calls": [tool_call("tool_a", {"value": "val_0"}, "a0")]}
    assert "tool_choice" not in srv.requests[0]["body"]


@pytest.mark.parametrize("raw, shown", [
    (b"[" * 100 + b"]" * 100, "[" * 100 + "]" * 100),          # past the depth cap: text
    (b"[" * 100_000, None),                                    # cut at 4 KiB, as text
    (b'{"error": "a", "error": "b"}', '{"error": "a", "error": "b"}'),   # a key twice: text
    (b"\xff\xfe bad bytes", "\ufffd\ufffd bad bytes"),
    (b'"just a string"', "just a string"),
    (b"  \n\t ", ""),
])
def test_error_text_never_raises_for_a_hostile_body(raw, shown):
    text = error_text(raw, KEY)
    if shown is None:
        assert text == "[" * (wire.MAX_ERROR_CHARS - 3) + "..."
    else:
        assert text == shown


@pytest.mark.parametrize("body, key, shown", [
    # a key cut where the body is cut: its first 20 characters are all that is read
    (b" " * 4076 + b"Zq8xLm2Np4Rt6Vw9Yb1Cd3Fg5Hj7Kk0", "Zq8xLm2Np4Rt6Vw9Yb1Cd3Fg5Hj7Kk0",
     "[REDACTED]"),
    (b" " * 4086 + b"sk-or-v1-3abcdefghijklmnop", "sk-or-v1-3abcdefghijklmnop", "[REDACTED]"),
    # an echo of the key without its last character
    (b"bad key Zq8xLm2Np4Rt6Vw9Yb1Cd3Fg5Hj7Kk", "Zq8xLm2Np4Rt6Vw9Yb1Cd3Fg5Hj7Kk0",
     "bad key [REDACTED]"),
    (b'{"error": {"message": "no such key copper-meadow-lantern-9"}}', KEY,
     "no such key [REDACTED]"),
    # a run of 7 characters that the key shares is kept
    (b"copper-x is a colour", KEY, "copper-x is a colour"),
])
def test_no_fragment_of_the_key_reaches_the_reason(body, key, shown):
    assert error_text(body, key) == shown
