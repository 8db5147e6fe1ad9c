"""A decision at a threshold on a ratio of integer counts keeps its tie rule exactly.

Walks every such decision: novelty in :func:`validate` (a similarity equal to the threshold
is not novel) and in :func:`grade` (a score equal to the threshold passes),
:meth:`MemoryStore.similar` and :meth:`MemoryStore.consolidate` (a similarity equal to the
threshold is similar), the trajectories job's near-duplicate count, and the deletion rule of
the selective baseline (a failure rate equal to its limit is not above it).
"""

from fractions import Fraction

import pytest

from dyna.agents.baselines.common import RunRecord
from dyna.agents.baselines.selective import SelectiveAddDelete
from dyna.experiment.kinds.trajectories.job import _near_duplicates
from dyna.loops._text import jaccard, jaccard_ratio
from dyna.loops.memory import MemoryEntry, MemoryStore
from dyna.loops.review.config import LoopConfig
from dyna.loops.review.novelty import closest
from dyna.loops.review.proposal import Proposal
from dyna.loops.review.safeguards import grade, specificity, validate
from dyna.ties import above, at_least, weighted_sum_below

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango").split()


def _text(n: int, extra: str = "") -> str:
    """The first ``n`` words (n content words, no concrete part), then ``extra``."""
    return " ".join(WORDS[:n] + ([extra] if extra else []))


# thresholds whose float differs from a float ratio computed another way, and 0.5
TIES = [(0.1, 1, 10), (0.3, 3, 10), (0.5, 3, 6), (0.7, 7, 10), (0.6, 3, 5)]


def test_ratio_helpers_compare_exactly():
    a, b = frozenset(WORDS[:3]), frozenset(WORDS[:6])
    assert jaccard_ratio(a, b) == Fraction(1, 2) and jaccard(a, b) == 0.5
    assert jaccard_ratio(frozenset(), frozenset()) == 1
    assert float(jaccard_ratio(frozenset(WORDS[:1]), frozenset(WORDS[:3]))) == 1 / 3
    assert 1.0 - 0.8 < 0.2                                  # float rounding: below
    assert at_least(1 - Fraction(4, 5), 0.2) is True         # exactly: a tie
    assert at_least(Fraction(3, 10), 0.3) and not at_least(Fraction(29, 100), 0.3)
    assert not above(Fraction(1, 2), 0.5) and above(Fraction(51, 100), 0.5)


@pytest.mark.parametrize("threshold,p,q", TIES)
def test_validate_refuses_a_similarity_equal_to_the_novelty_threshold(threshold, p, q):
    cfg = LoopConfig(novelty_threshold=threshold)
    proposal = Proposal("memory", text=_text(q))
    at = validate(proposal, memory=[MemoryEntry(_text(p))], config=cfg)
    assert closest(proposal, {}, [MemoryEntry(_text(p))])[0] == \
        Fraction(p, q)
    assert at.ok is False
    assert at.reasons == (f"not novel: {threshold:.2f} similar to memory {_text(p)!r}",)
    under = validate(proposal, memory=[MemoryEntry(_text(p - 1, "zulu"))],
                     config=cfg)
    assert under.ok is True and under.reasons == ()
    over = validate(Proposal("memory", text=_text(q - 1)),
                    memory=[MemoryEntry(_text(p))], config=cfg)
    assert over.ok is False and over.reasons[0].startswith("not novel: ")


# (specificity, similarity p/q, threshold = the exact score): the float novelty
# 1.0 - float(p/q) puts each of these scores just below its threshold
GRADE_TIES = [("8080", 4, 5, 0.5), ("", 4, 5, 0.2), ("8080 9090", 9, 10, 0.775)]


@pytest.mark.parametrize("part,p,q,threshold", GRADE_TIES)
def test_grade_passes_a_score_equal_to_the_threshold(part, p, q, threshold):
    stored = [MemoryEntry(_text(p - len(part.split()), part))]
    proposal = Proposal("memory", text=_text(q - len(part.split()), part))
    spec = specificity(proposal.lesson_text())
    g = grade(proposal, memory=stored, config=LoopConfig(grade_threshold=threshold))
    assert (g.specificity, g.agreement, g.novelty) == (spec, 1.0, 1.0 - p / q)
    assert weighted_sum_below(((0.6, spec), (0.25, 1.0 - p / q), (0.15, 1.0)), threshold)
    assert g.accepted is True, g.reason
    up = grade(proposal, memory=stored, config=LoopConfig(grade_threshold=threshold + 0.001))
    assert up.accepted is False and up.reason.startswith("score ")


@pytest.mark.parametrize("threshold,p,q", TIES)
def test_memory_similar_and_consolidate_link_a_tie(threshold, p, q):
    # one concrete part (a port, counted as a word too) keeps the facts from being vague
    old, new = _text(p - 1, "8080"), _text(q - 1, "8080")
    mem = MemoryStore.in_memory(similarity=threshold)
    mem.add(old)
    assert [e.text for e in mem.similar(new)] == [old]
    assert mem.similar(new, threshold=threshold + 1e-9) == []
    mem.add(new)
    report = mem.consolidate("r1")
    assert [e.text for e in mem.entries()] == [new]
    assert report.merged == ((new, (old,)),)
    apart = MemoryStore.in_memory(similarity=threshold + 1e-9)
    apart.add(old)
    apart.add(new)
    apart.consolidate("r1")
    assert [e.text for e in apart.entries()] == [old, new]


@pytest.mark.parametrize("threshold,p,q", TIES)
def test_trajectory_near_duplicates_count_a_tie(threshold, p, q):
    assert _near_duplicates([_text(p), _text(q)], threshold) == 1
    assert _near_duplicates([_text(p - 1), _text(q)], threshold) == 0


def _selective(reuses: dict) -> SelectiveAddDelete:
    """A selective baseline holding records 1-3, reused as ``reuses`` says (True: failed)."""
    agent = SelectiveAddDelete.__new__(SelectiveAddDelete)
    agent.records = {1: "r1", 2: "r2", 3: "r3"}
    agent.reuses = {k: list(v) for k, v in reuses.items()}
    agent.deleted, agent._retrieved = 0, (None, [])
    return agent


def test_the_selective_baseline_keeps_a_record_failing_at_its_limit():
    failed = RunRecord("r9", 0, "t", (), False, False, 0, 0, 0)
    assert SelectiveAddDelete.MAX_FAILURE == 0.5 and SelectiveAddDelete.MIN_REUSES == 3
    at = _selective({1: [True, False, True, False], 2: [True, True, False, False, True, False]})
    at.learn(failed)
    assert (sorted(at.records), at.deleted) == ([1, 2, 3], 0)      # 2/4 and 3/6: not above
    over = _selective({1: [True, False, True, False], 2: [True, True, False]})
    over.learn(failed)
    assert (sorted(over.records), over.deleted) == ([1, 3], 1)     # 2/3 > 1/2
