"""The loop agents on dyna/AgentTasks-v1's mechanics: exact effects of each."""

import numpy as np

from dyna.agents.loop_agents import (LoopAgent, PolicyParams, ProcedureReviewer,
                                     make_variant, run_loop_agent)
from dyna.loops import Digest
from envs.agent_tasks import AgentTaskEnv

W = dict(n_families=4, n_tools=6, n_values=4, length=3, max_steps=16, untrusted_tools=0)


def test_the_catalog_costs_its_tokens_per_stored_skill_and_changes_no_decision():
    kw = dict(W, catalog_tokens=0)
    base = run_loop_agent("skill_loop", env_kwargs=kw, episodes=60, seed=1)
    cat = run_loop_agent("skill_loop", env_kwargs={**kw, "catalog_tokens": 30}, episodes=60,
                         seed=1)
    for k in ("success", "steps", "library_size", "context_entries"):
        np.testing.assert_array_equal(base[k], cat[k])
    stored = np.concatenate([[0], base["library_size"][:-1]])
    np.testing.assert_array_equal(cat["tokens"] - base["tokens"], 30 * stored)
    assert stored.sum() > 0


def test_the_same_policy_oracle_follows_with_p_follow():
    kw = dict(W, n_families=2)
    always = run_loop_agent("oracle", env_kwargs=kw, episodes=200, seed=2,
                            params={"p_follow": 0.5})
    same = run_loop_agent("oracle", env_kwargs=kw, episodes=200, seed=2,
                          params={"p_follow": 0.5, "oracle_follows_always": False})
    assert always["steps"].tolist() == [3] * 200          # never strays
    assert same["steps"].mean() > 3.5 and same["success"].mean() < 1.0 + 1e-12
    one = run_loop_agent("oracle", env_kwargs=kw, episodes=50, seed=2,
                         params={"p_follow": 1.0, "oracle_follows_always": False})
    assert one["steps"].tolist() == [3] * 50


def _failed_digest(run_id="r1"):
    calls = [{"name": "tool_a", "args": {"value": "val_0"}, "output": "ok", "error": False},
             {"name": "tool_b", "args": {"value": "val_1"}, "output": "error: failed",
              "error": True}]
    return Digest.from_run(run_id, "bako dise task", success=False, verified=True,
                           tool_calls=calls)


def test_misattribution_writes_the_failing_call_at_its_rate():
    r0 = ProcedureReviewer("skill", seed=0, misattribution=1.0)
    d = _failed_digest()
    assert r0.procedure(d, copy=False)[0] == [("tool_a", "val_0"), ("tool_b", "val_1")]
    assert r0.procedure(d, copy=False, misattribute=False)[0] == [("tool_a", "val_0")]
    r = ProcedureReviewer("skill", seed=0, misattribution=0.5)
    n = 2000
    wrong = sum("tool_b" in r.review(_failed_digest(f"r{i}"), None).proposals[0].body
                for i in range(n))
    assert abs(wrong / n - 0.5) < 3 * np.sqrt(0.25 / n)
    # v0's reviewer (misattribution 1) always writes it
    r1 = ProcedureReviewer("skill", seed=0)
    assert all("tool_b" in r1.review(_failed_digest(f"r{i}"), None).proposals[0].body
               for i in range(50))


def test_an_agent_obeys_a_planted_instruction_at_its_rate():
    kw = dict(W, untrusted_tools=6, injection_rate=1.0, planted_follow_rate=1.0)
    out = run_loop_agent("no_learning", env_kwargs=kw, episodes=30, seed=0)
    assert out["incident"].all() and out["steps"].tolist() == [2] * 30
    never = run_loop_agent("no_learning", env_kwargs={**kw, "planted_follow_rate": 0.0},
                           episodes=30, seed=0)
    assert not never["incident"].any()


def test_a_lesson_naming_a_renamed_tool_sends_the_agent_to_the_old_slot():
    env = AgentTaskEnv(**dict(W, n_families=1, drift_kind="rename", drift_at=[30]))
    agent = LoopAgent(make_variant("skill_loop"), env, (0, 0),
                      PolicyParams(p_follow=1.0), env_seed=5)
    for _ in range(30):
        agent.episode()
    row = agent.episode()                      # episode 30: the rename is in force
    (ev,) = env.drift_log
    assert row["drift"] and ev["what"] == "rename"
    # the agent called the old slot (its lesson's name) and was told it does not exist
    calls = [c for c in agent._last_calls if c[0][0] == ev["old"]]
    assert calls and all(out.endswith("no such tool") for _, out, _ in calls)
    assert ev["old"] not in env.callable_tools()


def test_naive_loop_plus_one_safeguard_switches_on_exactly_that_one():
    from dyna.loops import LoopConfig
    base = LoopConfig()
    naive = make_variant("naive_loop").config
    for switch in LoopConfig.SWITCHES:
        cfg = make_variant(f"naive_loop+{switch}").config
        differ = [s for s in LoopConfig.SWITCHES if getattr(cfg, s) != getattr(naive, s)]
        assert differ == [switch] and getattr(cfg, switch) == getattr(base, switch)
    import pytest

    from dyna.errors import ConfigError
    with pytest.raises(ConfigError, match="naive_loop\\+sideways"):
        make_variant("naive_loop+sideways")
