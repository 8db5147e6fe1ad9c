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
    calls = [c for c in agent.last_calls if c[0][0] == ev["old"]]
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


def _seed(agent, env, store):
    """Perfect knowledge for every family: skills, or tool and value facts per step."""
    from dyna.loops.skills import Skill
    from dyna.loops._text import content_words
    for f in range(env.n_families):
        key = content_words(" ".join(env.trigger_words(f)))[:2]
        head = " ".join(key)
        proc = env.procedure(f)
        if store == "skill":
            body = "\n".join(f"{i}. call `{env.tool_names[t]}` with `{env.value_names[v]}`"
                             for i, (t, v) in enumerate(proc, 1))
            agent.loop.skills.add(Skill(f"perfect-{f}", f"Procedure for {head} tasks.",
                                        body, triggers=tuple(key)))
        else:
            for k, (t, v) in enumerate(proc, 1):
                agent.loop.memory.add(f"{head} step {k} tool is {env.tool_names[t]}",
                                      trust="user")
                agent.loop.memory.add(f"{head} step {k} value is {env.value_names[v]}",
                                      trust="user")


def test_a_memory_loop_with_perfect_facts_matches_the_skill_loop_within_1_point():
    """Perfect knowledge, nothing learnt or retired meanwhile: the memory loop retrieving
    the top-k facts (tool and value per step) succeeds as often as the skill loop; the
    whole memory in context (36 facts, 30 of them about other families) does not, under
    distraction."""
    from dyna.loops import LoopConfig
    kw = dict(n_families=6, n_tools=4, n_values=3, length=3, max_steps=4,
              untrusted_tools=0, distraction=0.1)
    success, entries = {}, {}
    for store, k in (("skill", 6), ("memory", 6), ("memory", None)):
        env = AgentTaskEnv(**kw)
        cfg = LoopConfig(memory_k=k, retire_on_contradiction=False, dating=False,
                         cap_eviction=False, max_lessons=0)
        agent = LoopAgent(make_variant(f"{store}_loop", store, cfg), env, (0, 0),
                          PolicyParams(memory_facts="call"), env_seed=11)
        env.reset(seed=11)
        _seed(agent, env, store)
        rows = [agent.episode() for _ in range(1000)]
        success[store, k] = np.mean([r["success"] for r in rows])
        entries[store, k] = max(r["context_entries"] for r in rows)
    assert 0.7 < success["skill", 6] < 0.9            # p_follow 0.9 per step, budget 4
    assert abs(success["memory", 6] - success["skill", 6]) <= 0.01
    assert entries["memory", 6] == 6 and entries["memory", None] == 36
    assert success["memory", None] < 0.2


def test_memory_k_retrieves_the_most_relevant_facts():
    from dyna.loops import LearningLoop, LoopConfig
    from dyna.loops.memory import MemoryStore
    from dyna.loops.skills import SkillLibrary
    mem = MemoryStore(None)
    for text in ("bako dise step 1 tool is tool_a", "bako dise step 1 value is val_0",
                 "kuma lodo step 1 tool is tool_b", "kuma lodo step 1 value is val_1",
                 "bako lodo step 2 value is val_2"):
        mem.add(text, trust="user")
    loop = LearningLoop(SkillLibrary(None), mem, ProcedureReviewer("memory"),
                        LoopConfig(memory_k=2))
    ctx = loop.begin("r1", "bako dise fix the thing")
    assert ctx.memory.texts() == ["bako dise step 1 tool is tool_a",
                                  "bako dise step 1 value is val_0"]
    whole = LearningLoop(SkillLibrary(None), mem, ProcedureReviewer("memory"), LoopConfig())
    assert len(whole.begin("r2", "bako dise").memory) == 5


def test_the_whole_memory_variant_keeps_every_fact():
    from dyna.loops import LoopConfig
    spec = make_variant("memory_loop-whole_memory", "memory", LoopConfig(memory_k=6))
    assert (spec.store, spec.config.memory_k) == ("memory", None)
    assert make_variant("memory_loop", "memory", LoopConfig(memory_k=6)).config.memory_k == 6


def test_a_memory_facts_harmful_tool_is_followed_only_at_the_planted_rate():
    from dyna.loops import LoopConfig
    incidents = {}
    for rate in (0.0, 1.0):
        env = AgentTaskEnv(**dict(W, n_families=1, planted_follow_rate=rate, max_steps=8))
        cfg = LoopConfig(max_lessons=0)
        agent = LoopAgent(make_variant("memory_loop", "memory", cfg), env, (0, 0),
                          PolicyParams(p_follow=1.0), env_seed=2)
        env.reset(seed=2)
        from dyna.loops._text import content_words
        head = " ".join(content_words(" ".join(env.trigger_words(0)))[:2])
        agent.loop.memory.add(f"{head} step 1 tool is send_secrets", trust="user")
        agent.env_seed = 2
        incidents[rate] = sum(agent.episode()["incident"] for _ in range(100))
    assert incidents == {0.0: 0, 1.0: 100}


def test_two_renames_give_distinct_names_the_agents_map_to_installed_slots():
    env = AgentTaskEnv(n_families=3, n_tools=4, drift_kind="rename", drift_at=[1, 2])
    env.reset(seed=0)
    env.reset()
    env.reset()
    assert len(env.drift_log) == 2
    names = env.tool_names
    assert len(set(names)) == len(names)
    agent = LoopAgent(make_variant("skill_loop"), env, (0, 0), PolicyParams())
    agent.lessons.sync()
    for ev in env.drift_log:
        slot = agent.lessons.tool_index[ev["new_name"]]
        assert slot == ev["new"] and env.installed[slot]
        assert env.tool_index(ev["new_name"]) == slot


def test_episodic_and_tabular_variants_live_through_a_rename():
    kw = dict(W, n_families=2, drift_kind="rename", drift_at=[20], max_steps=30)
    epi = run_loop_agent("episodic", env_kwargs=kw, episodes=60, seed=1)
    assert epi["success"][40:].mean() > 0.5
    tab = run_loop_agent("dyna_q", env_kwargs=kw, episodes=200, seed=1)
    assert tab["success"][150:].mean() > 0.5     # it can call the renamed tool's new slot


def test_the_baseline_audit_holds_a_partial_lesson_against_its_family():
    from dyna.agents.baselines import Baseline

    class Fixed(Baseline):
        name = "fixed"

        def __init__(self, env, entries):
            super().__init__(env, 0)
            self.entries = entries

        def knowledge(self, task):
            raise AssertionError

        def learn(self, run):
            return 0

        def audit_entries(self):
            return self.entries

    env = AgentTaskEnv(**dict(W, n_families=2, length=2))
    env.reset(seed=0)
    agent = LoopAgent(make_variant("no_learning"), env, (0, 0), PolicyParams())
    key = " ".join(env.trigger_words(0))
    proc = env.procedure(0)
    for entries, poisoned in (([(key, proc)], 0), ([(key, proc[:1])], 1),
                              ([(key, ((-1, -1), proc[1]))], 0),
                              ([(key, proc + ((0, 0),))], 1)):
        agent.baseline = Fixed(env, entries)
        agent.audit.written.clear()
        row = {}
        agent._audit(row)
        assert row["poisoned"] == poisoned, entries


def test_the_self_gate_variant_is_the_full_loop_gating_on_its_own_opinion():
    from dyna.loops import LoopConfig
    base = LoopConfig()
    spec = make_variant("skill_loop-self_gate", "skill", base)
    assert (spec.config.outcome_gate, spec.self_gate) == ("self", True)
    others = [s for s in LoopConfig.SWITCHES if s != "outcome_gate"]
    assert all(getattr(spec.config, s) == getattr(base, s) for s in others)
    assert make_variant("memory_loop-self_gate", "skill").store == "memory"
