"""The loop agents' fast paths give the numbers of the slow ones (issue 16's speed work).

- ``_review_uniforms(a, b)``, the reviewer's two draws in integer arithmetic, equals
  ``numpy.random.Generator(PCG64(SeedSequence([a, b]))).random(2)`` bit for bit on
  20,000 random 32-bit pairs and on the edge words (0, 1, 2**31, 2**32 - 1).
- A :class:`ProcedureReviewer` with a seed wider than 32 bits falls back to numpy and
  draws what numpy draws.
"""

import random
import zlib

import numpy as np
import pytest

from dyna.agents.loop_agents import ProcedureReviewer, _review_uniforms
from dyna.loops import Digest

EDGES = (0, 1, 2, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1)


def _numpy(a, b):
    return tuple(np.random.Generator(np.random.PCG64(np.random.SeedSequence([a, b])))
                 .random(2).tolist())


def test_review_uniforms_equal_numpy_on_edges():
    for a in EDGES:
        for b in EDGES:
            assert _review_uniforms(a, b) == _numpy(a, b), (a, b)


def test_review_uniforms_equal_numpy_on_random_pairs():
    rng = random.Random(20261201)
    for _ in range(20_000):
        a, b = rng.getrandbits(32), rng.getrandbits(32)
        assert _review_uniforms(a, b) == _numpy(a, b), (a, b)


def test_review_uniforms_known_values():
    # default_rng([0, crc32(b"e0")]).random(2) as numpy 2.4.6 drew it (the stream is
    # part of numpy's compatibility promise for SeedSequence and PCG64)
    assert _review_uniforms(0, zlib.crc32(b"e0")) == (0.7452464505098649, 0.8372127028878678)


@pytest.mark.parametrize("seed", [0, 2**32 - 1, 2**32, 2**40 + 7])
def test_reviewer_draws_what_numpy_draws(seed, monkeypatch):
    seen = []
    calls = ({"name": "tool_a", "args": {"value": "val_1"}, "output": "ok"},)
    d = Digest.from_run("e17", "alpha beta task", success=True, verified=True,
                        tool_calls=calls)
    rev = ProcedureReviewer("skill", seed=seed, copy_rate=0.5, misattribution=0.5)
    real = ProcedureReviewer.procedure

    def spy(self, digest, copy, misattribute=True):
        seen.append((copy, misattribute))
        return real(self, digest, copy, misattribute)
    monkeypatch.setattr(ProcedureReviewer, "procedure", spy)
    rev.review(d, None)
    u = np.random.default_rng([seed, zlib.crc32(b"e17")]).random(2)
    assert seen == [(bool(u[0] < 0.5), bool(u[1] < 0.5))]


# ------------------------------------------------------------------ session 13 fast paths

def test_review_uniforms_many_equal_the_scalar_draws():
    from dyna.agents.loop_agents import review_uniforms_many
    rng = random.Random(13)
    for a in EDGES + (rng.getrandbits(32),):
        bs = list(EDGES) + [rng.getrandbits(32) for _ in range(300)]
        got = review_uniforms_many(a, np.array(bs, dtype=np.uint64))
        assert got.shape == (len(bs), 2) and got.dtype == np.float64
        assert [tuple(r) for r in got.tolist()] == [_review_uniforms(a, b) for b in bs], a
    assert review_uniforms_many(0, np.array([], dtype=np.uint32)).shape == (0, 2)


@pytest.mark.parametrize("a, bs, field", [(-1, [0], "a"), (2**32, [0], "a"), (True, [0], "a"),
                                          (0, [2**32], "bs"), (0, [-1], "bs"),
                                          (0, [0.5], "bs"), (0, [[1]], "bs")])
def test_review_uniforms_many_refuses_words_out_of_range(a, bs, field):
    from dyna.agents.loop_agents import review_uniforms_many
    from dyna.errors import ConfigError
    with pytest.raises(ConfigError) as err:
        review_uniforms_many(a, np.array(bs))
    assert err.value.field == field


@pytest.mark.parametrize("run_id", ["e0", "e255", "e256", "e7", "e007", "e00", "x1",
                                    "e12345678901", "run-9"])
def test_reviewer_block_of_draws_gives_numpy_draws_for_any_run_id(run_id, monkeypatch):
    # ids e<t> are drawn a block at a time; others (and e007, not e<t>'s own text) alone
    seen = []
    rev = ProcedureReviewer("skill", seed=99, copy_rate=0.5, misattribution=0.5)
    real = ProcedureReviewer.procedure

    def spy(self, digest, copy, misattribute=True):
        seen.append((copy, misattribute))
        return real(self, digest, copy, misattribute)
    monkeypatch.setattr(ProcedureReviewer, "procedure", spy)
    calls = ({"name": "tool_a", "args": {"value": "val_1"}, "output": "ok"},)
    for rid in ("e3", run_id, "e3"):   # a block drawn before, then this id, then again
        rev.review(Digest.from_run(rid, "alpha beta task", success=True, verified=True,
                                   tool_calls=calls), None)
    want = []
    for rid in ("e3", run_id, "e3"):
        u = np.random.default_rng([99, zlib.crc32(rid.encode())]).random(2)
        want.append((bool(u[0] < 0.5), bool(u[1] < 0.5)))
    assert seen == want


@pytest.mark.parametrize("store", ["skill", "memory"])
def test_plain_digest_is_from_run_without_redaction(store, monkeypatch):
    # the loop agent's digest of every episode of a naive run (redaction off) equals the
    # one Digest.from_run builds from the same episode
    import dyna.agents.loop_agents as la
    real = la._plain_digest
    checked = []

    def both(run_id, task, success, verified, judged, tokens, calls, followed, names,
             vals, trusted, actions):
        fast = real(run_id, task, success, verified, judged, tokens, calls, followed,
                    names, vals, trusted, actions)
        tool_calls = [{"name": names[c[0]], "args": {"value": vals[c[1]]}, "output": out,
                       "error": err, "skills": f, "trusted": trusted[c[0]]}
                      for (c, out, err), f in zip(calls, followed)]
        slow = Digest.from_run(run_id, task, success=success, verified=verified,
                               self_assessment=judged, steps=len(calls), tokens=tokens,
                               tool_calls=tool_calls, actions=actions, redaction=False)
        assert fast == slow
        assert [type(getattr(fast, f)) for f in ("success", "verified", "steps", "tokens")] \
            == [type(getattr(slow, f)) for f in ("success", "verified", "steps", "tokens")]
        checked.append(any(tc.skills for tc in fast.tool_calls))
        return fast
    monkeypatch.setattr(la, "_plain_digest", both)
    env = {"n_families": 4, "n_tools": 6, "n_values": 3, "length": 3, "untrusted_tools": 2,
           "silent_wrong_rate": 0.3, "planted_follow_rate": 0.1}
    la.run_loop_agent("naive_loop", store=store, env_kwargs=env, episodes=150, seed=3,
                      params={"misattribution": 0.5})
    assert len(checked) == 150
    if store == "skill":
        assert sum(checked) > 20   # calls that followed a skill were compared too


def test_competence_record_is_update_then_posterior():
    from dyna.competence import BetaCompetence
    for discount in (1.0, 0.9):
        fast, slow = BetaCompetence(discount=discount), BetaCompetence(discount=discount)
        rng = random.Random(5)
        for _ in range(500):
            key, ok = rng.choice("abc"), rng.random() < 0.6
            slow.update(key, ok)
            assert fast.record(key, ok) == slow.posterior(key)
    # hand-computed: prior (1, 1), discount 0.5, outcomes +, +, -
    c = BetaCompetence(discount=0.5)
    assert c.record("k", True) == (2.0, 1.0)
    assert c.record("k", True) == (2.5, 1.0)      # 1 + 0.5 * (2 - 1) + 1
    assert c.record("k", False) == (1.75, 2.0)    # 1 + 0.5 * 1.5, 1 + 0.5 * 0 + 1


def test_library_dates_follow_the_clock_object_by_object():
    # the clock's datetime is remembered by identity: a clock returning the same object
    # gives its date; one returning a new object each call gives each one's date
    import datetime as dt

    from dyna.loops.skills import Skill, SkillLibrary
    days = [dt.datetime(2026, 1, 1, 23, 59, 59, tzinfo=dt.timezone.utc)]
    lib = SkillLibrary(clock=lambda: days[-1])
    lib.add(Skill("deploy-app", "Deploy the app.", "1. run `make deploy`", ("deploy",)),
            "r1")
    days.append(days[-1] + dt.timedelta(seconds=1))     # a new object: the next day
    lib.record_outcome(["deploy-app"], True, "r2")
    days.append(dt.datetime(2026, 1, 2, 0, 0, 1, tzinfo=dt.timezone.utc))
    lib.propose(Skill("deploy-app", "Deploy the app.", "1. run `make deploy`", ("deploy",)),
                "r3", require_approval=False)
    s = lib.get("deploy-app")
    assert (s.created, s.last_verified) == ("2026-01-01", "2026-01-02")
    assert [(h.op, h.time) for h in lib.history()] == [
        ("create", "2026-01-01T23:59:59+00:00"), ("outcome", "2026-01-02T00:00:00+00:00"),
        ("patch", "2026-01-02T00:00:01+00:00")]


@pytest.mark.parametrize("store", ["skill", "memory"])
def test_a_finished_loop_run_leaves_no_reference_cycle(store):
    # the stores' clock and the audit hold the agent weakly: a run's objects are freed
    # when it returns (a naive skill run used to leave ~16,000 for the cyclic collector)
    import gc

    from dyna.agents.loop_agents import run_loop_agent
    env = {"n_families": 4, "n_tools": 6, "n_values": 3, "length": 3}
    variants = ("no_learning", "naive_loop", f"{store}_loop", "oracle",
                f"{store}_loop-no_outcome_gate")
    for v in variants:   # first uses of a library may leave one-time garbage of their own
        run_loop_agent(v, store=store, env_kwargs=env, episodes=20, seed=1)
    ours = {"LoopAgent", "LearningLoop", "SkillLibrary", "MemoryStore", "Skill",
            "MemoryEntry", "EpisodeRecord", "ReviewResult", "AgentTaskEnv",
            "ProcedureReviewer", "_StoreAudit"}
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)   # what the collector finds is kept in gc.garbage
    try:
        for v in variants:
            gc.collect()
            gc.garbage.clear()
            out = run_loop_agent(v, store=store, env_kwargs=env, episodes=60, seed=1)
            assert len(out["success"]) == 60
            gc.collect()
            # (other threads of the test session may leave garbage of their own)
            left = sorted({type(o).__name__ for o in gc.garbage} & ours)
            assert left == [], (v, left)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()


def test_agent_clock_follows_the_agent_and_outlives_it():
    import datetime as dt

    from dyna.agents.loop_agents import EPOCH, LoopAgent, make_variant
    from envs.agent_tasks import AgentTaskEnv
    agent = LoopAgent(make_variant("naive_loop", "skill"), AgentTaskEnv(n_families=3),
                      (0, 0), env_seed=1)
    clock = agent.loop.skills._clock
    agent.t = 5
    assert clock() == EPOCH + dt.timedelta(days=5) == agent._clock()
    agent.t = 6
    assert clock() == EPOCH + dt.timedelta(days=6)
    del agent
    assert clock() == EPOCH + dt.timedelta(days=6)   # the last time it gave


def test_a_run_pauses_the_cyclic_collector_and_restores_it_even_when_it_fails(monkeypatch):
    import gc

    from dyna.agents import loop_agents as L

    seen = []
    real = L.LoopAgent.episode

    def episode(self):
        seen.append(gc.isenabled())
        if len(seen) == 3:
            raise RuntimeError("boom")
        return real(self)

    env = {"n_families": 2, "n_tools": 3, "n_values": 2, "length": 2}
    assert gc.isenabled()
    out = L.run_loop_agent("naive_loop", env_kwargs=env, episodes=2, seed=1)
    assert len(out["success"]) == 2 and gc.isenabled()
    monkeypatch.setattr(L.LoopAgent, "episode", episode)
    with pytest.raises(RuntimeError, match="boom"):
        L.run_loop_agent("naive_loop", env_kwargs=env, episodes=5, seed=1)
    assert seen == [False, False, False] and gc.isenabled()
    gc.disable()   # off before the run: still off after it
    try:
        seen.clear()
        monkeypatch.setattr(L.LoopAgent, "episode", real)
        L.run_loop_agent("naive_loop", env_kwargs=env, episodes=2, seed=1)
        assert not gc.isenabled()
    finally:
        gc.enable()
