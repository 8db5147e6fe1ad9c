"""Review pipeline: digest redaction, policy, reviewer, validate, grade, switches, the loop,
learning cost and the impact report."""

import datetime as dt
import logging
import threading

import numpy as np
import pytest

from dyna.errors import ConfigError
from dyna.loops.memory import MemoryStore
from dyna.loops.review import (Digest, EpisodeRecord, LearningLoop, LoopConfig, Proposal,
                               ReviewPolicy, ReviewerOutput, RuleBasedReviewer, grade,
                               impact_report, validate)
from dyna.loops.skills import Skill, SkillLibrary

SECRET = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234"


def clock():
    return dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)


def digest(run_id="r1", success=True, verified=True, **kw):
    calls = kw.pop("tool_calls", [
        {"name": "deploy", "args": {"env": "prod"}, "error": True, "output": "denied",
         "trusted": True},
        {"name": "deploy", "args": {"env": "staging"}, "output": "ok", "trusted": True}])
    kw.setdefault("task_source", "operator")
    return Digest.from_run(run_id, "deploy the web service", success=success,
                           verified=verified, steps=7, tokens={"input": 900, "output": 100},
                           tool_calls=calls, **kw)


def all_bytes(root):
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


# ------------------------------------------------------------------ digest
def test_digest_redacts_keys_and_secret_values_and_cuts_outputs():
    out = "x" * 180 + f" api_key={SECRET} " + "y" * 100  # the secret straddles char 200
    d = Digest.from_run("r1", f"use token {SECRET}", tokens=5, tool_calls=[
        {"name": "login", "args": {"password": "hunter2", "user": "ann", "nested": {
            "API-KEY": "k"}}, "output": out, "is_error": True}])
    tc = d.tool_calls[0]
    assert tc.args == {"password": "[REDACTED]", "user": "ann",
                       "nested": {"API-KEY": "[REDACTED]"}}
    assert tc.output == ("x" * 180 + " api_key=[REDACTED] " + "y" * 100)[:200]
    assert len(tc.output) == 200 and tc.error is True
    assert SECRET not in d.task and "[REDACTED]" in d.task
    assert SECRET[:10] not in repr(d)


def test_digest_counts_tokens_and_checks_input():
    assert digest().tokens == 1000 and digest().steps == 7
    with pytest.raises(ConfigError):
        Digest.from_run("", "t")
    with pytest.raises(ConfigError) as ei:
        Digest.from_run("r", "t", steps=-1)
    assert ei.value.field == "steps"


# ------------------------------------------------------------------ policy
@pytest.mark.parametrize("gate, success, verified, self_a, expected", [
    ("verified", True, True, None, True),
    ("verified", True, False, True, False),
    ("verified", False, True, True, False),
    ("self", None, False, True, True),
    ("self", None, False, False, False),
    ("self", True, True, None, True),
    ("none", False, True, False, True),
])
def test_outcome_gate(gate, success, verified, self_a, expected):
    d = Digest.from_run("r", "t", success=success, verified=verified, self_assessment=self_a)
    assert ReviewPolicy(gate).should_review(d)[0] is expected


def test_min_tool_calls_and_review_depth():
    p = ReviewPolicy("none", min_tool_calls=3)
    assert p.should_review(digest()) == (False, "2 tool calls < 3")
    d = Digest("r", "t", review_depth=1)
    assert ReviewPolicy("none").should_review(d)[0] is False
    with pytest.raises(ConfigError):
        ReviewPolicy("sometimes")


# ------------------------------------------------------------------ reviewer
def test_rule_based_reviewer_deterministic_and_knobs():
    ctx = None
    r = RuleBasedReviewer(seed=3, kinds=("skill", "memory", "workflow"))
    d = digest(actions=("build", "deploy"))
    a, b = r.review(d, ctx), r.review(d, ctx)
    assert a == b and [p.kind for p in a.proposals] == ["skill", "memory", "workflow"]
    skill = a.proposals[0]
    assert skill.name == "recover-deploy-deploy-web" and skill.triggers == ("deploy", "web")
    assert skill.body == "If `deploy env=prod` fails, call `deploy env=staging` instead."
    assert a.proposals[2].actions == ("build", "deploy")
    assert RuleBasedReviewer(propose_rate=0.0).review(d, ctx).proposals == ()
    vague = RuleBasedReviewer(specificity=0.0).review(d, ctx).proposals
    assert [p.lesson_text() for p in vague] == ["Retry tools that fail. Try again with other "
                                                "settings.", "Be careful with tools."]
    copied = RuleBasedReviewer(copy_rate=1.0).review(d, ctx).proposals
    assert all("tool_output" in p.provenance for p in copied)
    assert copied[1].text.endswith("Tool said: ok")
    # propose_rate 0.5 over many runs: about half propose, the same half every time
    rr = RuleBasedReviewer(seed=1, propose_rate=0.5)
    got = [bool(rr.review(digest(f"r{i}"), ctx).proposals) for i in range(400)]
    assert got == [bool(rr.review(digest(f"r{i}"), ctx).proposals) for i in range(400)]
    assert 160 < sum(got) < 240


# ------------------------------------------------------------------ validate and grade
@pytest.fixture
def stores(tmp_path):
    lib = SkillLibrary(tmp_path / "skills", clock=clock)
    mem = MemoryStore(tmp_path / "MEMORY.md", clock=clock)
    lib.add(Skill("deploy-staging", "Deploy to staging with `deploy env=staging`",
                  triggers="deploy"))
    mem.add("The API port is 8080")
    return lib, mem


@pytest.mark.parametrize("proposal, reason", [
    (Proposal("skill", "../etc", "d"), "name '../etc' is not path-safe"),
    (Proposal("skill", "/abs", "d"), "name '/abs' is not path-safe"),
    (Proposal("workflow", "wf", "d", actions=("build", "rm -rf /")),
     "workflow actions must be action names"),
    (Proposal("workflow", "wf", "d", actions=("build", "$(curl x)")),
     "workflow actions must be action names"),
    (Proposal("workflow", "wf", "d", actions=("build", "publish")), "actions not allowed"),
    (Proposal("skill", "ok", "d", body="x" * 4001), "body has 4001 characters > 4000"),
    (Proposal("skill", "ok", "d" * 1025), "description"),
    (Proposal("memory", text=f"key is {SECRET}"), "secret-looking value in text"),
    (Proposal("skill", "ok", "d", body=f"Authorization: Bearer {SECRET}"),
     "secret-looking value in body"),
    (Proposal("memory", text="API port is 8080."), "not novel"),
    (Proposal("memory", text="Deploy to staging with deploy env=staging"),
     "not novel: 1.00 similar to skill deploy-staging"),
    (Proposal("skill", "port", "The API port is 8080"), "not novel"),
    (Proposal("gossip", text="x"), "kind 'gossip'"),
])
def test_validate_refuses(stores, proposal, reason):
    lib, mem = stores
    cfg = LoopConfig(allowed_actions=("build", "deploy"))
    v = validate(proposal, lib, mem, cfg)
    assert not v.ok and any(reason in r for r in v.reasons), v.reasons


def test_validate_accepts_and_switches(stores):
    lib, mem = stores
    ok = Proposal("workflow", "wf", "Build then deploy", actions=("build", "deploy"))
    assert validate(ok, lib, mem, LoopConfig(allowed_actions=("build", "deploy"))).ok
    dup = Proposal("memory", text="API port is 8080.")
    assert validate(dup, lib, mem, LoopConfig(novelty_check=False)).ok
    secret = Proposal("memory", text=f"key is {SECRET}")
    assert validate(secret, lib, mem, LoopConfig(secret_scan=False)).ok
    redacted = Proposal("memory", text="Login with `login token=[REDACTED]`")
    assert validate(redacted, lib, mem).ok


def test_grade_scores(stores):
    lib, mem = stores
    g = grade(Proposal("memory", text="Be careful with tools."), lib, mem)
    assert (g.specificity, g.novelty, g.agreement) == (0.0, 1.0, 1.0)
    assert g.score == pytest.approx(0.4) and not g.accepted
    assert g.reason == "score 0.40 < 0.5 (specificity 0.00, novelty 1.00, agreement 1.00)"
    g = grade(Proposal("memory", text="Use `make lint` in src/app before commits"), lib, mem)
    assert g.specificity == 1.0 and g.accepted
    g = grade(Proposal("memory", text="The API port is 9090"), lib, mem)
    assert g.agreement == 0.5  # contradicts a stored fact
    assert (g.specificity, g.novelty) == (1.0, 0.5)  # {api, port, 9090} vs {api, port, 8080}
    assert g.score == pytest.approx(0.6 * 1.0 + 0.25 * 0.5 + 0.15 * 0.5)
    g = grade(Proposal("memory", text="Be careful with tools."), lib, mem,
              LoopConfig(grading=False))
    assert g.accepted


# ------------------------------------------------------------------ config
def test_loop_config_switches():
    cfg = LoopConfig()
    assert cfg.ablate("novelty_check").novelty_check is False
    assert cfg.ablate("outcome_gate").outcome_gate == "none"
    assert cfg.ablate("consolidation_every").consolidation_every == 0
    naive = LoopConfig.naive()
    assert all(getattr(naive, s) in (False, "none", 0) for s in LoopConfig.SWITCHES)
    lib = naive.skill_library()
    assert (lib.cap, lib.max_age_days, lib.retire_below) == (None, None, None)
    lib = cfg.skill_library()
    assert (lib.cap, lib.max_age_days, lib.retire_below) == (50, 90.0, 0.4)
    assert cfg.memory_store().cap == 30 and naive.memory_store().cap is None
    with pytest.raises(ConfigError):
        cfg.ablate("seatbelt")
    with pytest.raises(ConfigError) as ei:
        LoopConfig(max_lessons=-1)
    assert ei.value.field == "max_lessons"
    with pytest.raises(ConfigError):
        LoopConfig(dating="yes")


# ------------------------------------------------------------------ the loop
class ListReviewer:
    def __init__(self, proposals, tokens=0):
        self.proposals, self.tokens = tuple(proposals), tokens

    def review(self, digest, context):
        return ReviewerOutput(self.proposals, self.tokens)


def make_loop(tmp_path, reviewer, cfg=None):
    cfg = cfg or LoopConfig()
    lib = cfg.skill_library(tmp_path / "skills", clock=clock, create=True)
    mem = cfg.memory_store(tmp_path / "MEMORY.md", clock=clock, create=True)
    return LearningLoop(lib, mem, reviewer, cfg)


def test_max_lessons_and_learning_cost(tmp_path):
    props = [Proposal("memory", text=f"Service {i} listens on port {8000 + i}")
             for i in range(3)]
    loop = make_loop(tmp_path, ListReviewer(props, tokens=250))
    ctx = loop.begin("r1", "deploy the web service")
    rec = loop.finish(ctx, digest("r1"))
    assert [d.action for d in rec.review.decisions] == ["committed", "committed", "dropped"]
    assert (rec.tokens, rec.steps, rec.learning_tokens) == (1000, 7, 250)
    assert rec.review.cost.grading_calls == 2
    assert [e.text for e in loop.memory] == [p.text for p in props[:2]]
    rec2 = loop.finish(loop.begin("r2", "x"), digest("r2", success=False))
    assert rec2.review.status == "skipped" and rec2.learning_tokens == 0


def test_untrusted_proposals_staged_until_approved(tmp_path):
    loop = make_loop(tmp_path, RuleBasedReviewer(copy_rate=1.0))
    rec = loop.finish(loop.begin("r1", "deploy the web service"), digest("r1"))
    assert [(d.action, d.detail) for d in rec.review.decisions] == [("staged", "p0001"),
                                                                   ("staged", "m0001")]
    assert len(loop.skills) == 0 and len(loop.memory) == 0
    assert not (tmp_path / "skills" / "recover-deploy-deploy-web").exists()
    loop.skills.approve("p0001")
    loop.memory.approve("m0001")
    assert list(loop.skills) == ["recover-deploy-deploy-web"] and len(loop.memory) == 1
    assert loop.skills["recover-deploy-deploy-web"].trust == "approved"
    # Web input taints every lesson of the run, even one not copied from tool output.
    loop2 = make_loop(tmp_path / "b", RuleBasedReviewer(copy_rate=0.0))
    rec = loop2.finish(loop2.begin("r1", "t"), digest("r1", sources=("web",)))
    assert [d.action for d in rec.review.decisions] == ["staged", "staged"]
    # Switch off: written directly, marked untrusted.
    loop3 = make_loop(tmp_path / "c", RuleBasedReviewer(copy_rate=1.0),
                      LoopConfig(approval_for_untrusted=False))
    loop3.finish(loop3.begin("r1", "t"), digest("r1"))
    assert loop3.skills["recover-deploy-deploy-web"].trust == "untrusted"


@pytest.mark.parametrize("cfg", [LoopConfig(approval_for_untrusted=False),
                                 LoopConfig(approval_for_untrusted=False, redaction=False)])
def test_secret_in_tool_output_never_reaches_disk(tmp_path, cfg):
    calls = [{"name": "fetch", "args": {"url": "a"}, "error": True, "output": "timeout"},
             {"name": "fetch", "args": {"url": "b", "api_key": SECRET},
              "output": f"ok, use Authorization: Bearer {SECRET}"}]
    loop = make_loop(tmp_path, RuleBasedReviewer(copy_rate=1.0), cfg)
    for i in range(3):
        d = digest(f"r{i}", tool_calls=calls, redaction=cfg.redaction)
        loop.finish(loop.begin(f"r{i}", "fetch the report"), d)
    data = all_bytes(tmp_path)
    assert SECRET.encode() not in data and SECRET[8:20].encode() not in data
    if cfg.redaction:  # lessons were written, with the secret redacted
        written = (tmp_path / "skills" / "recover-fetch-deploy-web" / "SKILL.md").read_text()
        assert "call `fetch api_key=[REDACTED] url=b`" in written
        assert "Tool said: ok, use Authorization: Bearer [REDACTED]" in written
    else:  # the secret scan refused them
        assert all(d.action == "invalid" and "secret-looking" in d.detail
                   for r in loop.records for d in r.review.decisions)
        assert len(loop.skills) == 0 and len(loop.memory) == 0


def test_failing_background_reviewer_leaves_run_untouched(tmp_path, caplog):
    gate = threading.Event()

    class Boom:
        def review(self, digest, context):
            gate.wait(10)
            raise RuntimeError("reviewer crashed")

    loop = make_loop(tmp_path, Boom(), LoopConfig(review_mode="background"))
    ctx = loop.begin("r1", "deploy")
    with caplog.at_level(logging.ERROR, logger="dyna.loops"):
        rec = loop.finish(ctx, digest("r1"))
        assert rec.review is None  # returned while the review is still blocked
        gate.set()
        loop.close()
    assert (rec.success, rec.tokens, rec.steps, rec.active_lessons) == (True, 1000, 7, 0)
    assert rec.review.status == "failed" and rec.review.reason == "RuntimeError: reviewer crashed"
    assert "review of run r1 failed" in caplog.text
    assert len(loop.skills) == 0 and len(loop.records) == 1


def test_inline_failure_also_contained(tmp_path):
    class Boom:
        def review(self, digest, context):
            raise ValueError("bad")

    loop = make_loop(tmp_path, Boom())
    rec = loop.finish(loop.begin("r1", "t"), digest("r1"))
    assert rec.review.status == "failed" and rec.tokens == 1000


def test_review_cannot_trigger_review(tmp_path):
    inner = []

    class Recursive:
        def review(self, d, context):
            inner.append(loop.finish(loop.begin("inner", "t"), digest("inner")))
            return ()

    loop = make_loop(tmp_path, Recursive())
    rec = loop.finish(loop.begin("r1", "t"), digest("r1"))
    assert rec.review.status == "reviewed"
    assert inner[0].review.status == "skipped"
    assert inner[0].review.reason == "a review cannot trigger another review"


def test_loop_injects_matches_and_reports_outcomes(tmp_path):
    loop = make_loop(tmp_path, ListReviewer([]))
    loop.skills.add(Skill("deploy-fix", "Fix deploys", triggers="deploy"), "r0")
    ctx = loop.begin("r1", "deploy the web service")
    assert [m.name for m in ctx.skills] == ["deploy-fix"] and ctx.active_lessons == 1
    loop.finish(ctx, digest("r1", success=False))
    assert loop.skills.posterior("deploy-fix") == (1.0, 2.0)


def test_consolidation_cadence(tmp_path):
    loop = make_loop(tmp_path, ListReviewer([]), LoopConfig(consolidation_every=2))
    loop.memory.add("Be careful with tools.")
    loop.finish(loop.begin("r1", "t"), digest("r1"))
    assert len(loop.memory) == 1
    loop.finish(loop.begin("r2", "t"), digest("r2"))
    assert len(loop.memory) == 0


def test_in_memory_loop_matches_file_loop(tmp_path):
    def run(skills_dir, mem_path):
        cfg = LoopConfig(outcome_gate="none")
        lib = cfg.skill_library(skills_dir, clock=clock)
        mem = cfg.memory_store(mem_path, clock=clock)
        loop = LearningLoop(lib, mem, RuleBasedReviewer(seed=2, specificity=0.7,
                                                        propose_rate=0.8), cfg)
        rng = np.random.default_rng(0)
        for i in range(30):
            task = ["deploy the web service", "fetch the nightly report"][i % 2]
            ctx = loop.begin(f"r{i}", task)
            loop.finish(ctx, digest(f"r{i}", success=bool(rng.random() < 0.7)))
        return ([s for s in lib.skills(True)], [e.text for e in mem],
                [(r.success, r.active_lessons) for r in loop.records])

    assert run(None, None) == run(tmp_path / "s", tmp_path / "M.md")


# ------------------------------------------------------------------ impact report
def rec(success, tokens, steps, lessons, learning=0):
    return EpisodeRecord("r", success, tokens, steps, lessons, learning)


def test_impact_report_values_and_intervals():
    records = [rec(False, 100, 10, 0), rec(False, 120, 12, 0),
               rec(True, 80, 6, 1, 50), rec(True, 90, 8, 2, 70), rec(True, 70, 7, 1, 60)]
    r = impact_report(records, n_resamples=999, seed=1)
    assert (r.n_before, r.n_after, r.first_active) == (2, 3, 2)
    m = r.metrics
    assert (m["success_rate"]["before"], m["success_rate"]["after"]) == (0.0, 1.0)
    # constant cohorts keep a width (Wilson, Newcombe): 0/2 before, 3/3 after
    z2 = 1.959963984540054 ** 2
    assert m["success_rate"]["before_ci"] == pytest.approx((0.0, z2 / (2 + z2)), abs=1e-12)
    assert m["success_rate"]["after_ci"] == pytest.approx((3 / (3 + z2), 1.0), abs=1e-12)
    low = 1 - ((1 - 3 / (3 + z2)) ** 2 + (z2 / (2 + z2)) ** 2) ** 0.5
    assert m["success_rate"]["diff_ci"] == pytest.approx((low, 1.0), abs=1e-12)
    assert (m["median_tokens"]["before"], m["median_tokens"]["after"]) == (110.0, 80.0)
    assert m["median_tokens"]["diff"] == -30.0
    lo, hi = m["median_tokens"]["diff_ci"]
    assert -50.0 <= lo <= -30.0 <= hi <= -10.0  # medians of resamples lie in these ranges
    assert m["median_learning_tokens"]["after"] == 60.0
    assert m["median_steps"]["before_ci"][0] >= 10.0 and m["median_steps"]["before_ci"][1] <= 12.0
    assert impact_report(records, n_resamples=999, seed=1).metrics == m
    assert "median_tokens" in str(r)


def test_impact_report_needs_two_per_cohort():
    r = impact_report([rec(False, 100, 10, 0), rec(True, 80, 6, 1), rec(True, 70, 5, 1)])
    assert r.metrics["success_rate"]["diff"] == 1.0
    assert all(v["diff_ci"] is None for v in r.metrics.values())
    r = impact_report([rec(True, 1, 1, 0)] * 3)
    assert (r.n_before, r.n_after, r.first_active) == (3, 0, None)
    assert r.metrics["median_tokens"]["after"] is None


def followed_calls(fix_error=True):
    return [{"name": "deploy", "args": {"env": "prod"}, "error": fix_error,
             "output": "denied" if fix_error else "ok", "skills": "deploy-fix"},
            {"name": "deploy", "args": {"env": "staging"}, "output": "ok",
             "skills": ["deploy-check"]}]


def test_contradicted_skill_fails_in_a_successful_run_and_is_retired(tmp_path):
    loop = make_loop(tmp_path, ListReviewer([]))
    loop.skills.add(Skill("deploy-fix", "Fix deploys", triggers="deploy"), "r0")
    loop.skills.add(Skill("deploy-check", "Check deploys", triggers="deploy"), "r0")
    d = digest("r", tool_calls=followed_calls())
    assert d.tool_calls[0].skills == ("deploy-fix",) and d.contradicted() == {"deploy-fix"}
    assert d.skill_outcomes(["deploy-fix", "deploy-check"]) == {"deploy-fix": False,
                                                                "deploy-check": True}
    # two runs in which deploy-fix's step worked: Beta(1,1) -> Beta(3,1)
    for i in range(2):
        loop.finish(loop.begin(f"ok{i}", "deploy the web service"),
                    digest(f"ok{i}", tool_calls=followed_calls(fix_error=False)))
    # successful runs in which deploy-fix's step failed: Beta(3,2) 0.6, Beta(3,3) 0.5,
    # Beta(3,4) 0.43, Beta(3,5) 0.375 < 0.4 -> retired at the fourth
    for i in range(4):
        ctx = loop.begin(f"c{i}", "deploy the web service")
        assert {m.name for m in ctx.skills} == {"deploy-fix", "deploy-check"}
        rec = loop.finish(ctx, digest(f"c{i}", tool_calls=followed_calls()))
        assert rec.success is True
        assert rec.retired == (("deploy-fix",) if i == 3 else ())
        if i < 3:
            assert loop.skills.posterior("deploy-fix") == (3.0, 2.0 + i)
    fix = loop.skills.get("deploy-fix")
    assert (fix.status, fix.successes, fix.failures) == ("retired", 2, 4)
    assert fix.retired_reason == "contradicted: competence mean 0.375 < 0.4 after a failure"
    # the uncontradicted skill got the run's outcome every time
    check = loop.skills.get("deploy-check")
    assert (check.active, check.successes, check.failures) == (True, 6, 0)
    assert loop.skills.posterior("deploy-check") == (7.0, 1.0)
    assert [m.name for m in loop.begin("n", "deploy the web service").skills] == \
        ["deploy-check"]


def test_contradiction_without_retire_switch_and_overrides(tmp_path):
    loop = make_loop(tmp_path, ListReviewer([]),
                     LoopConfig().ablate("retire_on_contradiction"))
    loop.skills.add(Skill("deploy-fix", "Fix deploys", triggers="deploy"), "r0")
    loop.skills.add(Skill("deploy-check", "Check deploys", triggers="deploy"), "r0")
    for i in range(6):
        rec = loop.finish(loop.begin(f"c{i}", "deploy the web service"),
                          digest(f"c{i}", tool_calls=followed_calls()))
        assert rec.retired == ()
    fix = loop.skills.get("deploy-fix")
    assert (fix.status, fix.successes, fix.failures) == ("active", 0, 6)
    # no attribution: every injected skill gets the run's outcome (the old behaviour)
    loop.finish(loop.begin("plain", "deploy the web service"), digest("plain"))
    assert loop.skills.posterior("deploy-fix") == (2.0, 7.0)
    # explicit outcomes override the derived ones; failed run, no self-assessment
    loop.finish(loop.begin("o", "deploy the web service"),
                digest("o", success=False, tool_calls=followed_calls()),
                skill_outcomes={"deploy-fix": True})
    assert loop.skills.posterior("deploy-fix") == (3.0, 7.0)
    assert loop.skills.posterior("deploy-check") == (8.0, 2.0)
    with pytest.raises(ConfigError, match="skill_outcomes"):
        loop.finish(loop.begin("x", "deploy the web service"), digest("x"),
                    skill_outcomes={"other": False})
    with pytest.raises(ConfigError, match="skill_outcomes.deploy-fix"):
        loop.finish(loop.begin("y", "deploy the web service"), digest("y"),
                    skill_outcomes={"deploy-fix": "no"})
    with pytest.raises(ConfigError, match=r"tool_calls\[0\].skills"):
        digest("z", tool_calls=[{"name": "deploy", "skills": 3}])
    # unknown outcome (neither verified nor self-assessed): only contradictions count
    d = digest("u", success=None, verified=False, tool_calls=followed_calls())
    assert d.skill_outcomes(["deploy-fix", "deploy-check"]) == {"deploy-fix": False,
                                                                "deploy-check": None}


def test_impact_report_proportions_never_collapse_at_0_of_n_and_n_of_n():
    """0 of 10 before, 3 of 3 after (the issue's inputs): Wilson intervals (0, 0.2775)
    and (0.4385, 1), as scipy's binomtest computes them, not (0, 0) and (1, 1)."""
    from scipy.stats import binomtest

    records = [rec(False, 10, 2, 0) for _ in range(10)] + [rec(True, 10, 2, 1) for _ in range(3)]
    m = impact_report(records).metrics["success_rate"]
    for got, (k, n) in ((m["before_ci"], (0, 10)), (m["after_ci"], (3, 3))):
        ref = binomtest(k, n).proportion_ci(method="wilson")
        assert got == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert m["before_ci"] == pytest.approx((0.0, 0.27753279986288926), abs=1e-12)
    assert m["after_ci"][1] - m["after_ci"][0] > 0.5
    assert 0.0 < m["diff_ci"][0] < 1.0 == m["diff_ci"][1]
