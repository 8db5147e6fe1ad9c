"""LearningLoop.submit (a lesson from outside a review, e.g. a person's) and
LearningLoop.learning_cost (the reviews' cost summed, apart from the runs' own)."""

import pytest

from dyna.errors import ConfigError
from dyna.loops import (Digest, LearningCost, LearningLoop, LoopConfig, MemoryStore, Proposal,
                        ReviewerOutput, SkillLibrary)


class ListReviewer:
    def __init__(self, proposals, out_kw=None):
        self.proposals, self.out_kw = tuple(proposals), out_kw or {}

    def review(self, digest, context):
        return ReviewerOutput(self.proposals, **self.out_kw)


def loop_with(reviewer=None, cfg=None):
    cfg = cfg or LoopConfig()
    return LearningLoop(SkillLibrary(None), MemoryStore(None), reviewer or ListReviewer(()),
                        cfg)


FACT = "The API port is 8080"


def test_submit_by_a_person_writes_trust_user_and_approved():
    loop = loop_with()
    d = loop.submit(Proposal("memory", text=FACT), "alice", provenance=("person",),
                    by_person=True)
    assert (d.action, d.detail) == ("committed", "added")
    assert [(e.text, e.trust, e.source) for e in loop.memory] == [(FACT, "user", "alice")]
    d = loop.submit(Proposal("skill", "rollback-staging", "Roll back staging",
                             "Run `make rollback-staging`.", ("rollback",)), "alice",
                    by_person=True)
    assert d.action == "committed"
    s = loop.skills["rollback-staging"]
    assert (s.trust, s.source_run) == ("approved", "alice")


def test_submit_without_by_person_is_a_loop_lesson_and_a_persons_fact_is_protected():
    loop = loop_with()
    loop.submit(Proposal("memory", text=FACT), "alice", by_person=True)
    d = loop.submit(Proposal("memory", text="The API port is 9090"), "bot")
    assert d.action == "staged"
    assert d.detail == f"m0001: would replace a fact a person wrote or approved: {FACT!r}"
    assert [e.text for e in loop.memory] == [FACT]
    # a person may replace a person's fact
    d = loop.submit(Proposal("memory", text="The API port is 9090"), "alice", by_person=True)
    assert (d.action, d.detail) == ("committed", "superseded")
    assert [(e.text, e.trust) for e in loop.memory] == [("The API port is 9090", "user")]


def test_submit_untrusted_provenance_is_staged_even_by_a_person():
    loop = loop_with()
    d = loop.submit(Proposal("memory", text=FACT), "alice", provenance=("web",),
                    by_person=True)
    assert (d.action, d.detail) == ("staged", "m0001")
    assert len(loop.memory) == 0 and loop.pending()[0].provenance == ("web",)
    assert loop.safeguard_counts()["approval_for_untrusted"] == 1
    assert loop.pending()[0].summary == f"fact: {FACT}"


def test_submit_refusals_count_like_a_reviews():
    loop = loop_with()
    d = loop.submit(Proposal("memory", text="Be careful with tools."))
    assert d.action == "rejected" and d.grade.score == pytest.approx(0.4)
    d = loop.submit(Proposal("memory", text="token ghp_abcdefghijklmnopqrstuvwxyz0123456789"))
    assert (d.action, d.detail, d.grade) == ("invalid", "secret-looking value in text", None)
    counts = loop.safeguard_counts()
    assert (counts["grading"], counts["secret_scan"]) == (1, 1)
    with pytest.raises(ConfigError) as ei:
        loop.submit("a fact")
    assert ei.value.field == "proposal"


def test_a_reviewers_person_provenance_does_not_make_its_lesson_a_persons():
    """finish() never passes by_person: a reviewer that claims 'person' writes a loop fact."""
    loop = loop_with(ListReviewer([Proposal("memory", text=FACT, provenance=("person",))]))
    ctx = loop.begin("r1", "deploy")
    loop.finish(ctx, Digest.from_run("r1", "deploy", success=True, verified=True,
                                     task_source="operator"))
    assert [e.trust for e in loop.memory] == ["trusted"]


def test_learning_cost_sums_the_reviews_apart_from_the_runs_tokens():
    kw = dict(tokens=300, prompt_tokens=250, completion_tokens=50, turns=2, seconds=0.25)
    loop = loop_with(ListReviewer([Proposal("memory", text=FACT)], kw))
    assert loop.learning_cost() == LearningCost()
    for i, ok in enumerate([True, False, True]):       # the failed run is not reviewed
        ctx = loop.begin(f"r{i}", "deploy")
        loop.finish(ctx, Digest.from_run(f"r{i}", "deploy", success=ok, verified=True,
                                         tokens=1000, task_source="operator"))
    # r0 grades and commits the fact; r2 proposes it again: refused as not novel (no grade)
    assert loop.learning_cost() == LearningCost(600, 1, 500, 100, 4, 0.5)
    assert sum(r.tokens for r in loop.records) == 3000
