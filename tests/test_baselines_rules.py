"""The rules of ../shared/BASELINES.md for Reflexion, ExpeL, naive growth (and the
selective regime that shares its retrieval) and AWM, each pinned with exact values on
runs built by hand in a world of three tools and three values."""

from types import SimpleNamespace

import pytest

from dyna.agents.baselines import (AWM, ExpeL, Knowledge, NaiveGrowth, Reflexion, RunRecord,
                                   SelectiveAddDelete, agrees)
from dyna.errors import ConfigError

#: What a baseline reads from its env: the names (tool i and value j are indices i and
#: j), the procedure length, and the retrial budget (a failed task instance is presented
#: again up to twice).
WORLD = SimpleNamespace(tool_names=("find", "book", "pay"), value_names=("v0", "v1", "v2"),
                        length=3, max_retrials=2)
#: The same with no declared retrial budget.
NO_BUDGET = SimpleNamespace(tool_names=WORLD.tool_names, value_names=WORLD.value_names,
                            length=3)

TASK = "bako dire lumo pesa"          # key ("bako", "dire")
KEY = ("bako", "dire")
F0, F1, F2 = ("find", "v0"), ("find", "v1"), ("find", "v2")
B0, B1, B2 = ("book", "v0"), ("book", "v1"), ("book", "v2")
P0, P2 = ("pay", "v0"), ("pay", "v2")


def ix(call):
    """The ``(tool, value)`` indices of a named call in :data:`WORLD`."""
    return WORLD.tool_names.index(call[0]), WORLD.value_names.index(call[1])


def rec(*steps, task=TASK, verified=False, judged=None, inst=0, retrial=0, rid="r"):
    """A run from ``(named call, errored)`` pairs; ``judged`` defaults to ``verified``."""
    calls = tuple((ix(c), "error: no" if err else "ok", err) for c, err in steps)
    return RunRecord(rid, 0, task, calls, verified, verified if judged is None else judged,
                     500, task_instance=inst, retrial=retrial)


def ok(*calls):
    return [(c, False) for c in calls]


def err(call):
    return (call, True)


# ============================================================================ Reflexion

def test_reflexion_writes_only_after_a_verified_failure():
    b = Reflexion(WORLD, 0)
    # the agent judged the run failed, the ground truth says success: nothing written
    assert b.learn(rec(*ok(F0), err(B1), verified=True, judged=False)) == 0
    assert b.reflections == {} and b.size() == 0
    # the agent judged the run a success, the ground truth says failure: one reflection
    assert b.learn(rec(*ok(F0), err(B1), verified=False, judged=True)) == 300
    assert b.reflections == {0: (KEY, [((1, B1), (F0,))])}
    assert b.size() == 1


def test_reflexion_keeps_reflections_per_task_instance():
    b = Reflexion(WORLD, 0)
    b.learn(rec(*ok(F0), err(B1), inst=0))
    b.learn(rec(err(F2), inst=1))              # the same task text, another instance
    assert b.knowledge(TASK, task_instance=0) == Knowledge(
        calls=[[(0, 0)]], entries=1, avoid={(1, 1, 1)})
    assert b.knowledge(TASK, task_instance=1) == Knowledge(entries=1, avoid={(0, 0, 2)})
    assert b.knowledge(TASK, task_instance=2) == Knowledge()
    # instance 0 is solved on its first retrial: its reflections can reach no prompt
    assert b.learn(rec(*ok(F0, B0, P0), verified=True, inst=0, retrial=1)) == 0
    assert list(b.reflections) == [1] and b.size() == 1
    # instance 1 fails its last retrial (max_retrials = 2): reflected on, then closed
    assert b.learn(rec(err(F1), inst=1, retrial=1)) == 300
    assert b.reflections[1][1] == [((0, F2), ()), ((0, F1), ())]
    assert b.learn(rec(err(B2), inst=1, retrial=2)) == 300
    assert b.reflections == {} and b.size() == 0
    # with no declared budget an instance is never taken to have run out
    open_ended = Reflexion(NO_BUDGET, 0)
    open_ended.learn(rec(err(F1), inst=4, retrial=9))
    assert open_ended.reflections == {4: (KEY, [((0, F1), ())])}


def test_reflexion_prepends_the_last_three_reflections_of_the_instance():
    b = Reflexion(NO_BUDGET, 0)
    b.learn(rec(*ok(F0), err(B0), retrial=0))           # avoid (1, B0), plan (F0,)
    b.learn(rec(err(F1), retrial=1))                    # avoid (0, F1), no plan
    b.learn(rec(*ok(F0, B1), err(P0), retrial=2))       # avoid (2, P0), plan (F0, B1)
    b.learn(rec(*ok(F0), err(B2), err(B0), retrial=3))  # the last error: (1, B0)
    assert b.reflections[0][1] == [((0, F1), ()), ((2, P0), (F0, B1)), ((1, B0), (F0,))]
    k = b.knowledge(TASK, task_instance=0)
    assert k.entries == 3
    assert k.calls == [[(0, 0)], [(0, 0), (1, 1)]]      # the most recent plan first
    assert k.avoid == {(0, 0, 1), (2, 2, 0), (1, 1, 0)}
    assert b.audit_entries() == [("bako dire", ()), ("bako dire", ((0, 0), (1, 1))),
                                 ("bako dire", ((0, 0),))]


# ============================================================================ ExpeL

def test_expel_counts_add_two_agree_edit_one_remove_one():
    b = ExpeL(WORLD, 0)
    b.apply([("ADD", (KEY, 0, *F0))])
    assert b.rules == [[(KEY, 0, *F0), 2]]
    b.apply([("AGREE", 0)])
    assert b.rules == [[(KEY, 0, *F0), 3]]
    b.apply([("EDIT", 0, (KEY, 0, *F1))])                  # the text replaced, +1
    assert b.rules == [[(KEY, 0, *F1), 4]]
    b.apply([("REMOVE", 0)])
    assert b.rules == [[(KEY, 0, *F1), 3]]
    # the same moves from runs: a success ADDs its steps, a second AGREEs, a third
    # with another call at step 2 EDITs it, a failure on that call REMOVEs it
    r = ExpeL(WORLD, 0)
    assert r.learn(rec(*ok(F0, B0), verified=True)) == 300
    assert r.rules == [[(KEY, 0, *F0), 2], [(KEY, 1, *B0), 2]]
    r.learn(rec(*ok(F0, B0), verified=True))
    assert r.rules == [[(KEY, 0, *F0), 3], [(KEY, 1, *B0), 3]]
    r.learn(rec(*ok(F0, B1), verified=True))
    assert r.rules == [[(KEY, 0, *F0), 4], [(KEY, 1, *B1), 4]]
    assert r.learn(rec(*ok(F0), err(B1), inst=1)) == 600    # a reflection, an extraction
    assert r.rules == [[(KEY, 0, *F0), 4], [(KEY, 1, *B1), 3]]


def test_expel_removes_three_when_full_and_drops_a_rule_at_zero():
    b = ExpeL(WORLD, 0)
    b.apply([("ADD", ((f"w{i:02d}",), 0, *F0)) for i in range(25)])   # "full" at 25
    b.apply([("AGREE", 1), ("REMOVE", 0)])
    assert len(b.rules) == 24                                # w00: 2 - 3 <= 0, dropped
    assert b.rules[0] == [(("w01",), 0, *F0), 3]
    assert [c for _, c in b.rules[1:]] == [2] * 23
    small = ExpeL(WORLD, 0)
    small.apply([("ADD", (KEY, 0, *F0)), ("ADD", (KEY, 1, *B0))])
    small.apply([("REMOVE", 1)])
    assert small.rules == [[(KEY, 0, *F0), 2], [(KEY, 1, *B0), 1]]
    small.apply([("REMOVE", 1)])                             # 24 or fewer rules: -1
    assert small.rules == [[(KEY, 0, *F0), 2]]               # at 0: dropped


def test_expel_drops_a_contained_add_and_adds_nothing_at_twenty_rules():
    b = ExpeL(WORLD, 0)
    b.apply([("ADD", (KEY, 0, *F0))])
    b.apply([("ADD", (KEY, 0, *F0))])                        # contained in a rule: dropped
    assert b.rules == [[(KEY, 0, *F0), 2]]
    b.apply([("ADD", ((f"w{i:02d}",), 0, *F2)) for i in range(19)])
    assert len(b.rules) == 20
    assert b.learn(rec(*ok(F1, B1), verified=True, task="kivo nura lumo")) == 300
    assert len(b.rules) == 20                                # the call, and no ADD


def test_expel_extracts_nothing_after_its_training_episodes():
    b = ExpeL(WORLD, 0, train_episodes=2)
    assert b.learn(rec(*ok(F0, B1), verified=True, inst=0)) == 300
    assert b.rules == [[(KEY, 0, *F0), 2], [(KEY, 1, *B1), 2]]
    assert not b.frozen
    # in training the agent brings the gathering agent's reflections: none for instance 1
    assert b.knowledge(TASK, task_instance=1) == Knowledge()
    # a failure compared with the pool's success: AGREE the success's step 2 (+1)
    assert b.learn(rec(*ok(F0), err(B2), inst=1)) == 600
    assert b.rules == [[(KEY, 1, *B1), 3], [(KEY, 0, *F0), 2]]
    assert b.frozen and b.episodes == 2 and b.gathering.reflections == {}
    # frozen: no extraction, no pool, no reflection, no tokens
    assert b.learn(rec(*ok(F1, B2), verified=True, inst=2)) == 0
    assert b.learn(rec(err(F2), inst=3)) == 0
    assert b.rules == [[(KEY, 1, *B1), 3], [(KEY, 0, *F0), 2]]
    assert [calls for _, _, calls in b.pool] == [(F0, B1)] and b.episodes == 2
    k = b.knowledge(TASK, task_instance=3)
    assert k.entries == 3 and k.irrelevant == 0                  # 2 rules, 1 few-shot
    assert k.calls == [[(0, 0), (1, 1)], [(0, 0), (1, 1)]]
    assert k.avoid == set()
    with pytest.raises(ConfigError, match="train_episodes"):
        ExpeL(WORLD, 0, train_episodes=-1)
    with pytest.raises(ConfigError, match="train_episodes"):
        ExpeL(WORLD, 0, train_episodes=1.5)


def test_expel_replays_the_most_similar_successes_as_fewshots():
    b = ExpeL(WORLD, 0, train_episodes=4)
    b.learn(rec(*ok(F0, B0), verified=True, task="bako dire lumo pesa"))
    b.learn(rec(*ok(F1, B1), verified=True, task="bako dire lumo kivo"))
    b.learn(rec(*ok(F2, B2), verified=True, task="fiku gamo zuto pesa"))
    b.learn(rec(*ok(F0, B2), verified=True, task="bako nura lumo pesa"))
    assert b.frozen and len(b.pool) == 4
    # cosines with the task's words: 4/4, 3/4, 1/4, 3/4; the tie goes to the newer
    shots = b.fewshots(TASK)
    assert [calls for _, _, calls in shots] == [(F0, B0), (F0, B2)]
    k = b.knowledge(TASK, task_instance=9)
    # 6 rules (the second bako-dire success EDITed both of the first's), 2 few-shots;
    # irrelevant: the fiku-gamo and bako-nura rules and the bako-nura few-shot
    assert k.entries == 8 and k.irrelevant == 5
    assert k.calls == [[(0, 1), (1, 1)], [(0, 0), (1, 0)], [(0, 0), (1, 2)]]


# ============================================================================ naive growth

def test_naive_growth_writes_every_episode_and_retrieves_exactly_one_record():
    b = NaiveGrowth(WORLD, 0)
    assert b.knowledge(TASK, task_instance=0) == Knowledge()
    assert b.learn(rec(*ok(F1), task="fiku gamo zuto")) == 0
    # only an unrelated record: it is still the one retrieved (score 0), irrelevant
    assert b.knowledge(TASK, task_instance=0) == Knowledge(calls=[[(0, 1)]], entries=1,
                                                           irrelevant=1)
    assert b.learn(rec(*ok(F0, B0), verified=True)) == 0
    assert b.learn(rec(*ok(F0), err(B2))) == 0                 # a failure is kept too
    assert b.size() == 3 and [r.calls for r in b.records.values()] == [
        (F1,), (F0, B0), (F0, B2)]
    k = b.knowledge(TASK, task_instance=0)
    assert k.entries == 1 and k.irrelevant == 0
    assert k.calls == [[(0, 0), (1, 2)]]                       # of the two equal, newer
    for i in range(40):                                        # no cap
        b.learn(rec(*ok(P0), task=f"kivo w{i}ka"))
    assert b.size() == 43 and b.knowledge(TASK, task_instance=0).entries == 1


def test_selective_add_delete_retrieves_exactly_one_record():
    b = SelectiveAddDelete(WORLD, 0)
    b.learn(rec(*ok(F0, B0), verified=True))
    b.learn(rec(*ok(F1, B1), verified=True, task="bako dire lumo kivo"))
    b.learn(rec(*ok(F2), verified=True, task="fiku gamo zuto"))
    k = b.knowledge(TASK, task_instance=0)
    assert k == Knowledge(calls=[[(0, 0), (1, 0)]], entries=1)


# ============================================================================ AWM

def test_awm_knowledge_carries_no_concrete_value():
    b = AWM(WORLD, 0)
    assert b.learn(rec(*ok(F0), err(B2), *ok(B1, P2), judged=True, rid="e0")) == 300
    assert b.workflows == [(KEY, ("find", "book", "pay"))]
    assert not any(v in repr(b.workflows) for v in WORLD.value_names)
    k = b.knowledge(TASK, task_instance=0)
    assert k == Knowledge(tools={0: 0, 1: 1, 2: 2}, entries=1)   # no values, no calls
    assert b.audit_entries() == [("bako dire", ((0, -1), (1, -1), (2, -1)))]


def test_awm_writes_after_judged_successes_and_reinduces_after_every_task():
    b = AWM(WORLD, 0)
    # judged by the LLM judge (the self-assessment), not the ground truth
    assert b.learn(rec(*ok(F0, B0), verified=True, judged=False, rid="e0")) == 0
    assert b.workflows == [] and b.trajectories == {}
    assert b.learn(rec(*ok(F0, B0), judged=True, rid="e1")) == 300
    # every task re-induces the whole file, a judged failure too
    assert b.learn(rec(err(F2), task="fiku gamo zuto", rid="e2")) == 300
    assert b.workflows == [(KEY, ("find", "book"))]
    # another key with the same tools and other values: the same abstract sequence
    b.learn(rec(*ok(F2, B2), judged=True, task="fiku gamo zuto", rid="e3"))
    assert len(b.workflows) == 1 and b.size() == 1
    b.learn(rec(*ok(P0), judged=True, task="kivo nura", rid="e4"))
    assert sorted(t for _, t in b.workflows) == [("find", "book"), ("pay",)]
    # the whole file is in context: the workflow not about the task is irrelevant
    k = b.knowledge("kivo nura soma", task_instance=0)
    assert k == Knowledge(tools={0: 2}, entries=2, irrelevant=1)


# ============================================================================ the audit

def test_an_entry_agrees_with_a_procedure_on_every_tool_and_value_it_states():
    truth = ((0, 2), (1, 1))
    assert agrees(((0, 2), (1, 1)), truth)
    assert agrees(((0, -1), (1, -1)), truth)                  # tools only
    assert agrees(((-1, -1), (1, 1)), truth)                  # nothing about step 1
    assert not agrees(((0, -1), (2, -1)), truth)              # a wrong tool
    assert not agrees(((0, 2), (1, 0)), truth)                # a wrong value
    assert not agrees(((0, 2),), truth)                       # too short


def test_a_rule_about_one_step_is_audited_over_the_whole_procedure():
    b = ExpeL(WORLD, 0)
    b.apply([("ADD", (KEY, 0, *F0)), ("ADD", (KEY, 2, *P2))])
    truth = (ix(F0), ix(B1), ix(P2))
    assert [calls for _, calls in b.audit_entries()] == [
        ((0, 0), (-1, -1), (-1, -1)), ((-1, -1), (-1, -1), (2, 2))]
    assert all(agrees(calls, truth) for _, calls in b.audit_entries())
    b.apply([("EDIT", 0, (KEY, 0, *F1))])
    assert not agrees(b.audit_entries()[0][1], truth)          # a wrong value at step 1
