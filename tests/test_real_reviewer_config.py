"""The trajectories kind's ``[llm]`` reviewer: its table, its client, typed errors."""

import pytest

from dyna.errors import ConfigError
from dyna.experiment.kinds.trajectories.config import parse_trajectories
from dyna.experiment.kinds.trajectories.llm import TimedClient, endpoint_of, parse_llm_table
from dyna.loops.llm import ReplayError, request_key

BASE = {"name": "t", "data": "x.json", "variants": ["memory_loop", "naive_loop"],
        "store": "memory"}


def test_defaults_and_hash():
    t = parse_llm_table({})
    assert (t["base_url"], t["model"], t["max_new_tokens"], t["review_max_turns"],
            t["max_lessons"], t["threads"], t["n_ctx"]) == \
        ("local", "gemma-3-270m-q4_k_m", 64, 2, 1, 2, 4096)
    plain = parse_trajectories(dict(BASE))
    withllm = parse_trajectories({**BASE, "llm": {}, "first_runs": 3})
    assert "llm" not in plain.to_dict() and "first_runs" not in plain.to_dict()
    assert withllm.to_dict()["first_runs"] == 3
    assert withllm.to_dict()["llm"]["max_new_tokens"] == 64
    assert plain.hash != withllm.hash
    assert withllm.with_replay("/r").replay == "/r"
    assert withllm.with_replay("/r").hash == withllm.hash


@pytest.mark.parametrize("raw, field, value", [
    ({"llm": {"api_key": "sk-x"}}, "llm.api_key", "(not shown)"),
    ({"llm": {"max_lesson": 3}}, "llm.max_lesson", 3),
    ({"llm": {"max_new_tokens": 0}}, "llm.max_new_tokens", 0),
    ({"llm": {"review_max_turns": 1.5}}, "llm.review_max_turns", 1.5),
    ({"llm": {"base_url": "ftp://h/v1", "model": "m"}}, "llm.base_url", "ftp://h/v1"),
    ({"llm": {"base_url": "http://127.0.0.1:8/v1"}}, "llm.model", None),
    ({"llm": {"base_url": "http://127.0.0.1:8/v1", "model": "m", "threads": 4}},
     "llm.threads", 4),
    ({"llm": {"api_key_env": "HOME"}}, "llm.api_key_env", "HOME"),
    ({"llm": "local"}, "llm", "local"),
    ({"first_runs": 0}, "first_runs", 0),
])
def test_typed_errors(raw, field, value):
    with pytest.raises(ConfigError) as e:
        parse_trajectories({**BASE, **raw})
    assert (e.value.field, e.value.value) == (field, value)


def test_replay_needs_a_model():
    with pytest.raises(ConfigError) as e:
        parse_trajectories(dict(BASE)).with_replay("/r")
    assert e.value.field == "--replay"


def test_timed_client_caps_new_tokens_and_replays_seconds():
    llm = parse_llm_table({"max_new_tokens": 16})
    probe = TimedClient(endpoint_of(llm), 16)
    messages = [{"role": "user", "content": "hi"}]
    key = request_key(probe.body(messages, None, 16))
    answer = ('{"choices": [{"finish_reason": "stop", '
              '"message": {"role": "assistant", "content": "ok"}}]}')
    rows = [{"seq": 0, "key": key, "request": "{}", "response": answer, "status": "ok",
             "reason": "", "attempts": "200", "seconds": 4.25}]
    client = TimedClient(endpoint_of(llm), 16, rows)
    res = client.chat(messages, None, max_tokens=4000)    # asked 4000, sent 16
    assert (res.status, res.response["choices"][0]["message"]["content"]) == ("ok", "ok")
    assert client.seconds == [4.25]
    assert [(e["seq"], e["seconds"]) for e in client.exchanges()] == [(0, 4.25)]
    with pytest.raises(ReplayError):
        client.chat(messages, None, max_tokens=4000)      # asked more often than recorded


def test_a_replay_that_diverges_is_an_error(tmp_path):
    import polars as pl

    from dyna.experiment.backends import Job
    from dyna.experiment.kinds.trajectories.llm_session import run_llm_job
    pl.DataFrame({"variant": ["naive_loop"], "run": [0], "seq": [0], "key": ["a" * 64],
                  "request": ["{}"], "response": [""], "status": ["failed"],
                  "reason": ["x"], "attempts": [""], "seconds": [1.0]}).write_parquet(
        tmp_path / "llm_exchanges.parquet")
    payload = {"variant_name": "naive_loop", "llm": parse_llm_table({}),
               "replay": str(tmp_path)}
    job = Job(variant=0, point=0, run_indices=(0,), payload=payload)
    with pytest.raises(ReplayError) as e:     # the replay asked none of the 1 recorded
        run_llm_job(job, lambda r, session: ({}, {}))
    assert e.value.field == "--replay"
    assert "run 0: 0 of 1 recorded requests" in e.value.reason
