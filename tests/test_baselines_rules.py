"""The rules of ../shared/BASELINES.md for Reflexion, pinned with exact values on runs
built by hand in a world of three tools and three values."""

from types import SimpleNamespace

from dyna.agents.baselines import Knowledge, Reflexion, RunRecord

#: The names a baseline reads from its env (tool i and value j are indices i and j), and
#: the env's retrial budget: a failed task instance is presented again up to twice.
WORLD = SimpleNamespace(tool_names=("find", "book", "pay"), value_names=("v0", "v1", "v2"),
                        max_retrials=2)
#: The same names with no declared retrial budget.
NO_BUDGET = SimpleNamespace(tool_names=WORLD.tool_names, value_names=WORLD.value_names)

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
