"""The memory loop agent names the facts each call followed, so the loop retires a
contradicted fact; the naive memory loop retrieves ``memory_k`` facts like the full one.

Hand-built one- and two-family worlds with ``p_follow = 1`` and no learning
(``max_lessons = 0``): every count below follows from the facts put in the store by hand
and the rule of :func:`dyna.loops.retirement.retirement_reason` (uniform prior, retire
below 0.4 after at least 3 outcomes).
"""

import pytest

from dyna.agents.loop_agents import LoopAgent, PolicyParams, make_variant
from dyna.loops import LoopConfig
from dyna.loops._text import content_words
from envs.agent_tasks import AgentTaskEnv

W = dict(n_tools=4, n_values=3, length=2, max_steps=12, untrusted_tools=0)


def _agent(variant, cfg, n_families=1, seed=5):
    env = AgentTaskEnv(**W, n_families=n_families)
    agent = LoopAgent(make_variant(variant, "memory", cfg), env, (0, 0),
                      PolicyParams(p_follow=1.0, memory_facts="call"), env_seed=seed)
    env.reset(seed=seed)
    return agent, env


def _facts(env, family, step, call):
    head = " ".join(content_words(" ".join(env.trigger_words(family)))[:2])
    t, v = call
    return (f"{head} step {step} tool is {env.tool_names[t]}",
            f"{head} step {step} value is {env.value_names[v]}")


def _wrong(env, call):
    return ((call[0] + 1) % env.n_tools, (call[1] + 1) % env.n_values)


@pytest.mark.parametrize("switch", [True, False])
def test_the_agent_names_the_facts_it_followed_and_a_wrong_pair_is_retired(switch):
    """One family; step 1's facts give a wrong call, step 2's the right one; p_follow 1:
    every episode follows both pairs, so step 1's facts fail and step 2's succeed once per
    episode. Retired at the third failure (both facts of the pair: the call came from
    both), with the switch on; counted and kept with it off."""
    cfg = LoopConfig(retire_on_contradiction=switch, max_lessons=0)
    agent, env = _agent("memory_loop", cfg)
    proc = env.procedure(0)
    wrong = _facts(env, 0, 1, _wrong(env, proc[0]))
    right = _facts(env, 0, 2, proc[1])
    for text in wrong + right:
        agent.loop.memory.add(text, trust="trusted")
    rows = [agent.episode() for _ in range(5)]
    assert all(r["success"] for r in rows)
    facts = {e.text: (e.successes, e.failures) for e in agent.loop.memory.entries()}
    if switch:
        assert [r["acted_retire_on_contradiction"] for r in rows] == [0, 0, 2, 0, 0]
        assert [r["context_entries"] for r in rows] == [4, 4, 4, 2, 2]
        assert facts == {right[0]: (5, 0), right[1]: (5, 0)}
        assert [r["text"] for r in agent.loop.memory.retired()] == list(wrong)
    else:
        assert [r["acted_retire_on_contradiction"] for r in rows] == [0] * 5
        assert facts == {wrong[0]: (0, 5), wrong[1]: (0, 5), right[0]: (5, 0),
                         right[1]: (5, 0)}


def test_a_fact_is_contradicted_only_on_tasks_whose_words_hold_its_key():
    """Two families; family 1's step-1 facts are wrong and in context on every task (the
    whole memory), but followed only on family 1's tasks, so their failures are family 1's
    arrivals (switch off: nothing retired)."""
    cfg = LoopConfig(retire_on_contradiction=False, max_lessons=0)
    agent, env = _agent("memory_loop", cfg, n_families=2, seed=3)
    wrong = _facts(env, 1, 1, _wrong(env, env.procedure(1)[0]))
    for text in wrong:
        agent.loop.memory.add(text, trust="trusted")
    rows = [agent.episode() for _ in range(30)]
    ones = sum(r["family"] == 1 for r in rows)
    assert 0 < ones < 30
    assert {e.text: (e.successes, e.failures) for e in agent.loop.memory.entries()} == \
        {wrong[0]: (0, ones), wrong[1]: (0, ones)}


@pytest.mark.parametrize("variant", ["naive_loop", "naive_loop+retire_on_contradiction",
                                     "memory_loop"])
def test_the_naive_memory_loop_puts_exactly_memory_k_facts_in_context(variant):
    cfg = LoopConfig(memory_k=2)
    assert make_variant(variant, "memory", cfg).config.memory_k == 2
    agent, env = _agent(variant, cfg)
    whole, _ = _agent("memory_loop-whole_memory", cfg)
    for step, call in enumerate(env.procedure(0), 1):
        for text in _facts(env, 0, step, call):
            agent.loop.memory.add(text, trust="user")
            whole.loop.memory.add(text, trust="user")
    assert len(agent.loop.memory) == 4    # every fact shares the task's key words
    rows = [agent.episode() for _ in range(3)]
    assert [r["context_entries"] for r in rows] == [2, 2, 2]
    assert whole.episode()["context_entries"] == 4
