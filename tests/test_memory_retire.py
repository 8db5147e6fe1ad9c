"""Memory facts keep outcome counts and are retired on contradiction like skills.

Hand-built worlds and stores; every number below is computed by hand from the rule of
:func:`dyna.loops.retirement.retirement_reason` (uniform prior Beta(1, 1): after a failure,
retire when ``uses >= retire_min_uses`` and ``(1 + successes) / (2 + uses) < retire_below``).
"""

import datetime as dt

import pytest

from dyna.errors import ConfigError
from dyna.loops import Digest, LearningLoop, LoopConfig
from dyna.loops.memory import MemoryEntry, MemoryStore
from dyna.loops.retirement import retirement_reason
from dyna.loops.review import RuleBasedReviewer
from dyna.loops.skills import Skill, SkillLibrary

CLOCK = lambda: dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)  # noqa: E731
HEADER = "# Memory\n\n<!-- One fact per line: \"- [date | source | trust] fact\". -->\n\n"


def _store(tmp_path, backend, **kw):
    path = None if backend == "memory" else tmp_path / "MEMORY.md"
    return MemoryStore(path, clock=CLOCK, **kw)


# ---------------------------------------------------------------- the rule, store by store

# (successes before the failures, retire_min_uses, the failure that retires)
#  (0, 3): mean after f failures 1/(2+f): 1/3, 1/4 too few uses; 1/5 = 0.2 at f = 3
#  (2, 3): 3/(4+f): 3/5, 3/6, 3/7 = 0.4286 kept; 3/8 = 0.375 at f = 4
#  (4, 3): 5/(6+f): 5/12 = 0.4167 at f = 6 kept; 5/13 = 0.3846 at f = 7
#  (0, 0): 1/3 = 0.333 at the first failure
#  (0, 5): 1/7 at f = 5, the first failure with 5 uses
RULE_CASES = [(0, 3, 3), (2, 3, 4), (4, 3, 7), (0, 0, 1), (0, 5, 5)]


@pytest.mark.parametrize("backend", ["memory", "file"])
@pytest.mark.parametrize("successes,min_uses,retiring", RULE_CASES)
def test_a_fact_is_retired_at_exactly_the_failure_the_rule_gives(tmp_path, backend, successes,
                                                                 min_uses, retiring):
    store = _store(tmp_path, backend, retire_below=0.4, retire_min_uses=min_uses)
    store.add("API port: 8080", trust="trusted", run_id="r0")
    for i in range(successes):
        assert store.record_outcomes({"API port: 8080": True}, f"s{i}") == []
    for f in range(1, retiring):
        assert store.record_outcomes({"API port: 8080": False}, f"f{f}") == []
        (e,) = store.entries()
        assert (e.successes, e.failures) == (successes, f)
    assert store.record_outcomes({"API port: 8080": False}, "last") == ["API port: 8080"]
    assert store.entries() == ()
    (rec,) = store.retired()
    mean = (1 + successes) / (2 + successes + retiring)
    assert (rec["op"], rec["text"], rec["run_id"]) == ("retire", "API port: 8080", "last")
    assert rec["reason"] == (f"contradicted: competence mean {mean:.3f} < 0.4 after a failure "
                             f"(successes {successes}, failures {retiring})")


@pytest.mark.parametrize("successes,min_uses,retiring", RULE_CASES)
def test_skills_retire_at_the_same_failure(successes, min_uses, retiring):
    lib = SkillLibrary(None, retire_below=0.4, retire_min_uses=min_uses, log_outcomes=False)
    lib.add(Skill("port-fix", "Fix the API port.", "1. call `set_port` with `8080`",
                  triggers=("port",)))
    for _ in range(successes):
        lib.record_outcome(["port-fix"], True)
    got = [lib.record_outcome(["port-fix"], False) for _ in range(retiring)]
    assert got == [[]] * (retiring - 1) + [["port-fix"]]


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_with_the_switch_off_counts_are_kept_and_nothing_is_retired(tmp_path, backend):
    store = _store(tmp_path, backend)          # retire_below None: the switch off
    store.add("API port: 8080", trust="trusted")
    for _ in range(10):
        assert store.record_outcomes({"API port: 8080": False}) == []
    (e,) = store.entries()
    assert (e.successes, e.failures) == (0, 10)
    assert store.retired() == []


def test_the_rule_itself():
    assert retirement_reason(1.0, 4.0, 3, 0.4, 3) == \
        "contradicted: competence mean 0.200 < 0.4 after a failure"
    assert retirement_reason(1.0, 3.0, 2, 0.4, 3) is None        # too few uses
    assert retirement_reason(3.0, 5.0, 6, 0.4, 3) == \
        "contradicted: competence mean 0.375 < 0.4 after a failure"
    assert retirement_reason(3.0, 5.0, 6, 0.375, 3) is None      # not strictly below
    assert retirement_reason(1.0, 40.0, 39, None, 3) is None     # the switch off


# ---------------------------------------------------------------- the counts on disk

def test_counts_round_trip_through_memory_md_and_the_in_memory_store(tmp_path):
    stores = [_store(tmp_path, "file"), _store(tmp_path, "memory")]
    for store in stores:
        for text in ("API port: 8080", "The test command is `make test`.",
                     "Deploy host is web-2"):
            store.add(text, trust="trusted", run_id="run-1")
        store.record_outcomes({"API port: 8080": True})
        store.record_outcomes({"api port: 8080": True,     # the same fact (fact_key)
                               "The test command is `make test`.": False})
        store.record_outcomes({"API port: 8080": False})
    lines = ["- [2025-01-01 | run-1 | trusted | successes 2, failures 1] API port: 8080",
             "- [2025-01-01 | run-1 | trusted | successes 0, failures 1] The test command is "
             "`make test`.",
             "- [2025-01-01 | run-1 | trusted] Deploy host is web-2"]
    assert (tmp_path / "MEMORY.md").read_text() == HEADER + "\n".join(lines) + "\n"
    again = MemoryStore(tmp_path / "MEMORY.md")
    for store in (*stores, again):
        assert [e.to_line() for e in store.entries()] == lines
        assert [(e.successes, e.failures) for e in store.entries()] == [(2, 1), (0, 1), (0, 0)]
    assert list(again.entries()) == list(stores[1].entries())


def test_an_outcome_rewrites_only_its_facts_line_in_place(tmp_path):
    path = tmp_path / "MEMORY.md"
    path.write_text("# Notes\n- API port: 8080\nSome prose.\n- Deploy host is web-2\n")
    store = MemoryStore(path)
    store.record_outcomes({"API port: 8080": True})
    assert path.read_text() == ("# Notes\n- [ |  | user | successes 1, failures 0] API port: "
                                "8080\nSome prose.\n- Deploy host is web-2\n")
    (a, b) = MemoryStore(path).entries()
    assert (a.text, a.trust, a.date, a.source, a.successes, a.failures) == \
        ("API port: 8080", "user", "", "", 1, 0)
    assert b.to_line() == "- Deploy host is web-2"


def test_bad_counts_are_refused_naming_the_field(tmp_path):
    path = tmp_path / "MEMORY.md"
    path.write_text("- [2025-01-01 | r | trusted | 2 ok] API port: 8080\n")
    with pytest.raises(ConfigError) as exc:
        MemoryStore(path)
    assert exc.value.field == f"{path}:1" and "counts" in exc.value.reason
    with pytest.raises(ConfigError) as exc:
        MemoryEntry("API port: 8080", successes=-1)
    assert exc.value.field == "successes"
    store = MemoryStore(None)
    store.add("API port: 8080", trust="trusted")
    with pytest.raises(ConfigError) as exc:
        store.record_outcomes({"API port: 8080": "yes"})
    assert exc.value.field == "outcomes['API port: 8080']"
    with pytest.raises(ConfigError) as exc:
        MemoryStore(None, retire_below=1.5)
    assert exc.value.field == "retire_below"
    (e,) = store.entries()
    assert (e.successes, e.failures) == (0, 0)


# ---------------------------------------------------------------- the loop's attribution

def _digest(run_id, task, followed, error):
    return Digest.from_run(run_id, task, success=not error, verified=True, tool_calls=[
        {"name": "deploy", "args": {"value": "v"}, "error": error, "skills": followed,
         "trusted": True}])


def test_a_fact_not_retrieved_for_a_task_is_never_contradicted_by_its_errors():
    cfg = LoopConfig(memory_k=1, max_lessons=0)
    loop = LearningLoop(cfg.skill_library(), cfg.memory_store(clock=CLOCK),
                        RuleBasedReviewer(), cfg)
    web, db = "deploy web step 1 tool is tool_a", "backup db step 1 tool is tool_b"
    for text in (web, db):
        loop.memory.add(text, trust="trusted")
    for i in range(5):
        ctx = loop.begin(f"r{i}", "deploy web now")
        assert ctx.memory.texts() == [web]
        rec = loop.finish(ctx, _digest(f"r{i}", "deploy web now", (db,), error=True))
        assert rec.retired_facts == ()
    assert [(e.text, e.successes, e.failures) for e in loop.memory.entries()] == \
        [(web, 0, 0), (db, 0, 0)]
    assert loop.acted["retire_on_contradiction"] == 0


@pytest.mark.parametrize("switch", [True, False])
def test_the_loop_retires_a_contradicted_fact_and_counts_it(switch):
    cfg = LoopConfig(retire_on_contradiction=switch, max_lessons=0)
    loop = LearningLoop(cfg.skill_library(), cfg.memory_store(clock=CLOCK),
                        RuleBasedReviewer(), cfg)
    web, other = "deploy web step 1 tool is tool_a", "deploy web step 2 tool is tool_c"
    loop.memory.add(web, trust="trusted")
    loop.memory.add(other, trust="trusted")
    got = []
    for i in range(4):
        ctx = loop.begin(f"r{i}", "deploy web now")
        got.append(loop.finish(ctx, _digest(f"r{i}", "deploy web now", (web,),
                                            error=True)).retired_facts)
    if switch:   # failures 1, 2 kept (too few uses), 3: mean 1/5 < 0.4
        assert got == [(), (), (web,), ()]
        assert [e.text for e in loop.memory.entries()] == [other]
        assert loop.acted["retire_on_contradiction"] == 1
    else:
        assert got == [()] * 4
        assert [(e.failures, e.successes) for e in loop.memory.entries()] == [(4, 0), (0, 0)]
        assert loop.acted["retire_on_contradiction"] == 0


def test_a_run_with_an_error_and_an_ok_call_on_one_fact_is_one_failure():
    cfg = LoopConfig(max_lessons=0)
    loop = LearningLoop(cfg.skill_library(), cfg.memory_store(clock=CLOCK),
                        RuleBasedReviewer(), cfg)
    fact = "deploy web step 1 tool is tool_a"
    loop.memory.add(fact, trust="trusted")
    ctx = loop.begin("r0", "deploy web now")
    digest = Digest.from_run("r0", "deploy web now", success=True, verified=True, tool_calls=[
        {"name": "tool_a", "args": {}, "error": True, "skills": (fact,), "trusted": True},
        {"name": "tool_a", "args": {}, "error": False, "skills": (fact,), "trusted": True},
        {"name": "tool_b", "args": {}, "error": False, "trusted": True}])
    loop.finish(ctx, digest)
    (e,) = loop.memory.entries()
    assert (e.successes, e.failures) == (0, 1)


@pytest.mark.parametrize("success, verified, judged, want", [
    (False, True, None, (0, 1)),    # a verified failure: the silent fact is blamed
    (True, True, None, (1, 0)),     # a verified success
    (None, False, True, (1, 0)),    # unverified: the self-assessment
    (None, False, None, (0, 0)),    # nothing known: no outcome
])
def test_a_followed_fact_without_error_gets_the_runs_outcome(success, verified, judged,
                                                              want):
    cfg = LoopConfig(max_lessons=0)
    loop = LearningLoop(cfg.skill_library(), cfg.memory_store(clock=CLOCK),
                        RuleBasedReviewer(), cfg)
    web = "deploy web step 1 tool is tool_a"
    loop.memory.add(web, trust="trusted")
    ctx = loop.begin("r0", "deploy web now")
    digest = Digest.from_run("r0", "deploy web now", success=success, verified=verified,
                             self_assessment=judged, tool_calls=[
                                 {"name": "tool_a", "args": {}, "output": "ok",
                                  "error": False, "skills": (web,)}])
    loop.finish(ctx, digest)
    (entry,) = loop.memory.entries()
    assert (entry.successes, entry.failures) == want
