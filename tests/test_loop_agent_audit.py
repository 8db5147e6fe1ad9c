"""The store audit of the loop agents: poisoned, stale and covered entries on a hand-built
world (dyna.agents.loop_agents.audit)."""

from types import SimpleNamespace

from dyna.agents.loop_agents.audit import StoreAudit, head_families
from dyna.agents.loop_agents.knowledge import LessonReader
from envs.agent_tasks import AgentTaskEnv


def _world():
    env = AgentTaskEnv(n_families=2, n_tools=3, n_values=3, length=2)
    env.reset(seed=0)
    return env, StoreAudit(env, LessonReader(env))


def _skill(env, name, family, procedure):
    body = "\n".join(f"{i}. call `{env.tool_names[t]}` with `{env.value_names[v]}`"
                     for i, (t, v) in enumerate(procedure, 1))
    return SimpleNamespace(name=name, body=body, triggers=env.trigger_words(family))


def test_a_drift_makes_a_right_skill_stale():
    env, audit = _world()
    right = _skill(env, "a", 0, env.procedure(0))
    wrong = _skill(env, "b", 1, [(t, (v + 1) % 3) for t, v in env.procedure(1)])
    entries = audit.skill_entries([right, wrong])
    assert [(v.family, v.right_now) for v in entries] == [(0, True), (1, False)]
    assert audit.counts(entries) == (1, 0)
    assert StoreAudit.covered(entries) == {0}
    env.values[0, 0] = (env.values[0, 0] + 1) % 3        # family 0 drifts
    entries = audit.skill_entries([right, wrong])
    assert audit.counts(entries) == (1, 1)               # a stale, b poisoned
    assert StoreAudit.covered(entries) == frozenset()


def test_a_skill_first_seen_after_a_drift_is_right_for_either_procedure():
    env, audit = _world()
    before = env.procedure(0)
    audit.counts(audit.skill_entries([_skill(env, "a", 0, before)]))
    env.values[0, 0] = (env.values[0, 0] + 1) % 3        # family 0 drifts
    env.values[1, 0] = (env.values[1, 0] + 1) % 3        # family 1 drifts, no entry yet
    fresh = [_skill(env, "c", 0, env.procedure(0)), _skill(env, "d", 1, env.procedure(1)),
             _skill(env, "late", 0, before)]
    (t0, v0), (t1, v1) = env.procedure(0)
    fresh.append(_skill(env, "w", 0, [(t0, v0), (t1, (v1 + 1) % 3)]))  # step 2 never drifted
    entries = audit.skill_entries(fresh)
    assert [(v.right_now, v.right_before) for v in entries] == [
        (True, False), (True, True), (False, True), (False, False)]
    # c is a lesson of the drift episode, late a review of an earlier run (stale at once),
    # w is right for neither procedure: the one poisoned entry
    assert audit.counts(entries) == (1, 1)
    assert audit.counts(audit.skill_entries(fresh)) == (1, 1)   # the verdicts are kept
    later = _skill(env, "e", 0, before)                  # first seen one audit later
    assert audit.counts(audit.skill_entries(fresh + [later])) == (2, 1)


def test_facts_cover_a_family_when_every_step_is_right():
    env, audit = _world()
    key = " ".join(env.trigger_words(0))
    facts = [SimpleNamespace(text=f"{key} step {k} value is {env.value_names[v]}")
             for k, (_, v) in enumerate(env.procedure(0), 1)]
    claims = audit.fact_claims(facts + [SimpleNamespace(text=f"{key} step 9 value is val_0"),
                                        SimpleNamespace(text="not a fact")])
    assert [c[1] for c in claims] == [0, 0, None, None]   # step 9 is no step of it
    assert audit.covered_by_facts(claims, ("value",)) == {0}
    assert audit.covered_by_facts(claims, ("value", "tool")) == frozenset()
    assert audit.counts(audit.fact_entries(claims)) == (2, 0)


def test_head_families_are_the_fewest_covering_80_percent():
    assert head_families([0.5, 0.3, 0.2]) == {0, 1}
    assert head_families([0.1, 0.8, 0.1]) == {1}
    assert head_families([0.25, 0.25, 0.25, 0.25]) == {0, 1, 2, 3}
