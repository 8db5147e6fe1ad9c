"""A decision at a threshold follows its documented tie rule exactly when the inputs tie.

Walks every public entry point that compares a rational quantity with a threshold (the list
below), each called with inputs that tie exactly, where they exist inputs whose float
computation falls on the wrong side: a Beta posterior mean (prior (0.2, 0.8), one success,
one failure: a = 1.2, b = 1.8, mean 2/5, which ``1.2 / 3.0`` puts just below 0.4), a
weighted grade, a ratio of word counts, a failure rate, a count or an age at its limit.
Each decision is checked against its rule; ``tests/test_rules_exact_ratios.py`` checks the
ratio rules on more thresholds. A quantity that is irrational in general (a Beta quantile:
``statistic="lower"``, :class:`~dyna.escalation.policies.LowerBoundThreshold`) is compared
as a float, as documented.
"""

import datetime as dt
from fractions import Fraction

import pytest

from dyna.agents.baselines.common import RunRecord
from dyna.agents.baselines.selective import SelectiveAddDelete
from dyna.competence import BetaCompetence
from dyna.errors import ConfigError
from dyna.escalation.policies import CostSensitive, MeanThreshold, MinEpisodes
from dyna.escalation.rules import Evidence, ThresholdPolicy, should_escalate
from dyna.experience import ExperienceStore
from dyna.experiment.kinds.trajectories.job import _near_duplicates
from dyna.loops.memory import MemoryEntry, MemoryStore
from dyna.loops.retirement import retirement_reason
from dyna.loops.review.config import LoopConfig
from dyna.loops.review.proposal import Proposal
from dyna.loops.review.safeguards import (
    Grade,
    accepted_without_novelty,
    grade,
    validate,
)
from dyna.loops.skills import Skill, SkillLibrary

NOON = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)
PRIOR = (0.2, 0.8)
A, B, AT = 1.2, 1.8, 0.4          # the posterior after a success and a failure; its mean
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


def _text(n: int, extra: str = "") -> str:
    """The first ``n`` words, then ``extra``."""
    return " ".join(WORDS[:n] + ([extra] if extra else []))


def _store_tie():
    store = ExperienceStore("", dim=4, prior=PRIOR)
    for i, outcome in enumerate(("success", "failure")):
        store.record("t", task_type="k", action_type="a", outcome=outcome, reward=1.0,
                     timestamp=float(i), state_features=[1, 0, 0, 0])
    return store


def _mcp_escalates() -> bool:
    from dyna.mcp_server.tools import ExperienceTools  # noqa: PLC0415

    with _store_tie() as store:
        out, is_error = ExperienceTools(store, "t").call("should_escalate", {
            "task_type": "k", "threshold": AT, "min_episodes": 2})
    assert not is_error, out
    return out["escalate"]


def _store_escalates(how: str) -> bool:
    with _store_tie() as store:
        args = dict(task_type="k", threshold=AT, min_episodes=2)
        if how == "dispatch":
            return store.dispatch("should_escalate", tenant_id="t", **args)["escalate"]
        return store.should_escalate("t", **args)["escalate"]


def _competence():
    c = BetaCompetence(prior=PRIOR)
    c.update("k", True)
    c.update("k", False)
    return c


def _skill_kept() -> str:
    lib = SkillLibrary.in_memory(clock=lambda: NOON, prior=PRIOR, retire_below=AT,
                                 retire_min_uses=2)
    lib.add(Skill("a", "Deploy the app."), "r1")
    lib.record_outcome(["a"], True, "r2")
    lib.record_outcome(["a"], False, "r3")
    assert lib.posterior("a") == (A, B)
    return lib.get("a").status


def _fact_kept() -> list:
    mem = MemoryStore.in_memory(clock=lambda: NOON, prior=PRIOR, retire_below=AT,
                                retire_min_uses=2)
    mem.add("port is 80")
    mem.record_outcomes({"port is 80": True})
    return mem.record_outcomes({"port is 80": False})


def _age_at_limit() -> bool:
    now = [NOON]
    lib = SkillLibrary.in_memory(clock=lambda: now[0], max_age_days=90)
    lib.add(Skill("a", "d"), "r1")
    now[0] = NOON + dt.timedelta(days=90, hours=11)   # the 90th UTC day after: at the limit
    return lib.is_suspect(lib.get("a"))


def _selective_deleted() -> int:
    agent = SelectiveAddDelete.__new__(SelectiveAddDelete)
    agent.records = {1: "r1", 2: "r2"}
    agent.reuses = {1: [True, False, True, False], 2: [True, True, False, False, True, False]}
    agent.deleted, agent._retrieved = 0, (None, [])
    agent.learn(RunRecord("r9", 0, "t", (), False, False, 0, 0, 0))
    return agent.deleted                               # rates 2/4 and 3/6: at 1/2, kept


def _similar_and_merged():
    # 7 of 10 words shared (and one port): a Jaccard similarity of 7/10 at a threshold 0.7
    old, new = _text(6, "8080"), _text(9, "8080")
    mem = MemoryStore.in_memory(clock=lambda: NOON, similarity=0.7)
    mem.add(old)
    similar = [e.text for e in mem.similar(new)]
    mem.add(new)
    return similar == [old], mem.consolidate("r1").merged == ((new, (old,)),)


def _graded():
    # specificity 0 (no concrete part), novelty 1 - 4/5, agreement 1: a score of 0.2
    stored = [MemoryEntry(_text(4))]
    return grade(Proposal("memory", text=_text(5)), memory=stored,
                 config=LoopConfig(grade_threshold=0.2)).accepted


def _escalation_decision(n_evidence: float) -> str:
    """ThresholdPolicy's reason for the tied posterior with ``n_evidence`` of 5 outcomes
    counted, at ``min_episodes=2``."""
    return ThresholdPolicy("mean").decide(
        Evidence("k", 5, n_evidence, 1.0, A, B), threshold=AT, min_episodes=2, level=0.95,
        risk_class="low_stakes").reason


#: (entry point, its decision at the tie, the decision its tie rule gives)
def _decisions():
    return [
        ("ThresholdPolicy.decide (mean)", _escalation_decision(5.0), "competent"),
        ("ThresholdPolicy.decide (min_episodes)", _escalation_decision(2.0), "competent"),
        ("should_escalate (history)", should_escalate(
            [{"task_type": "k", "outcome": o} for o in ("success", "failure")], "k",
            threshold=AT, min_episodes=2, prior=PRIOR).escalate, False),
        ("should_escalate (BetaCompetence)", should_escalate(
            _competence(), "k", threshold=AT, min_episodes=2).escalate, False),
        ("ExperienceStore.should_escalate", _store_escalates("python"), False),
        ("ExperienceStore.dispatch should_escalate", _store_escalates("dispatch"), False),
        ("MCP should_escalate", _mcp_escalates(), False),
        ("MeanThreshold.act", bool(MeanThreshold(AT).act(A, B, 2)), True),
        ("MinEpisodes.act", bool(MinEpisodes(MeanThreshold(AT), 2).act(A, B, 2)), True),
        ("retirement_reason", retirement_reason(A, B, 2, AT, 2), None),
        ("SkillLibrary.record_outcome (retirement)", _skill_kept(), "active"),
        ("MemoryStore.record_outcomes (retirement)", _fact_kept(), []),
        ("SkillLibrary.is_suspect (age)", _age_at_limit(), False),
        ("grade", _graded(), True),
        ("accepted_without_novelty", accepted_without_novelty(
            Grade(0.6 * 0.0 + 0.25 * 0.3 + 0.15 * 1.0, 0.0, 0.3, 1.0, False, ""), 0.4), True),
        ("validate (novelty)", validate(
            Proposal("memory", text=_text(10)), memory=[MemoryEntry(_text(7))],
            config=LoopConfig(novelty_threshold=0.7)).ok, False),
        ("MemoryStore.similar, consolidate", _similar_and_merged(), (True, True)),
        ("trajectories: near-duplicate runs", _near_duplicates([_text(7), _text(10)], 0.7), 1),
        ("SelectiveAddDelete.learn (failure rate)", _selective_deleted(), 0),
    ]


def test_every_threshold_decision_keeps_its_tie_rule_exactly():
    pytest.importorskip("jsonschema")
    assert A / (A + B) < AT                      # the float mean falls below: not a tie
    decisions = _decisions()
    assert len(decisions) == 19
    wrong = [(name, got, rule) for name, got, rule in decisions if got != rule]
    assert wrong == []
    # one step off the tie each decision turns
    assert _escalation_decision(1.9) == "insufficient_episodes"
    assert retirement_reason(A, B + 0.001, 2, AT, 2) is not None
    assert not MeanThreshold(AT).act(A, B + 0.001, 2)


def test_the_chow_rule_acts_at_its_threshold():
    # p* = 1 - (0.3 - 0.2) / (0.2 + 0) = 1/2; a mean of 1/2 acts, one just below does not
    # (in floats p* is 0.5000000000000001 and the tie escalated)
    rule = CostSensitive(c_escalate=0.3, c_failure=0.2, c_act=0.2)
    assert rule.exact_p_star == Fraction(1, 2)
    assert rule.act([2.0, 1.0, 0.5], [2.0, 1.0 + 1e-12, 0.5], 4).tolist() == [True, False, True]


def test_the_experiments_chow_rule_acts_at_the_declared_p_star():
    """The failure cost derived from a declared p* (c_escalate / (1 - p*)) keeps p* exact
    in the rule: at p* = 0.8 a posterior (1.2, 0.3), mean 4/5, acts, though ``1.2 / 1.5``
    is 0.7999999999999999 in floats; taken from the float cost 5.000000000000001, the
    threshold would lie above 4/5 and escalate it."""
    from dyna.experiment.kinds.escalation.config import build_policy, class_costs
    from dyna.experiment.registry import parse_experiment

    cfg = parse_experiment({
        "kind": "escalation", "name": "t", "seed": 1, "runs": 2,
        "risk_classes": ["elevated"], "costs": {"c_escalate": 1.0, "p_star": [0.7, 0.8]},
        "scenarios": [{"name": "flat", "rates": [0.3, 0.6], "steps": 20}],
        "variants": [{"name": "chow", "rule": "chow"}]})
    assert 1.2 / 1.5 < 0.8
    for setting, (a, b) in zip(cfg.settings(), ((7.0, 3.0), (1.2, 0.3))):
        rule = build_policy(cfg, cfg.variants[0], setting)
        assert rule.exact_p_star == Fraction(str(setting.p_star))
        assert rule.act([a, a], [b, b + 1e-9], 5).tolist() == [True, False]
    c_e, c_f, _ = class_costs(cfg.costs, cfg.settings()[1])
    assert c_f == 5.000000000000001
    assert not CostSensitive(c_e, c_f).act(1.2, 0.3, 5)


def test_array_means_are_decided_exactly_at_ties_and_as_floats_elsewhere():
    """means_below over arrays equals mean_below element by element on a grid of Beta
    shapes (priors 0.1-1.0 plus 0-29 counts) at seven thresholds; at 0.75 the float
    comparison alone is wrong for 7 of the 50,000 pairs (ties such as 0.3 / 0.4)."""
    import numpy as np

    from dyna.ties import mean_below, means_below

    rng = np.random.default_rng(0)
    a = rng.integers(0, 30, 50_000) + rng.choice([0.5, 1.0, 0.3, 0.1], 50_000)
    b = rng.integers(0, 30, 50_000) + rng.choice([0.5, 1.0, 0.1], 50_000)
    pairs = list(zip(a.tolist(), b.tolist()))
    for t in (0.8, 0.75, 0.5, 0.3, 0.9, 2 / 3, 0.4):
        # mean_below once per distinct pair (10,696 of them), then read for every pair
        decided = {p: mean_below(*p, t) for p in set(pairs)}
        exact = np.array([decided[p] for p in pairs])
        assert (means_below(a, b, t) == exact).all(), t
    assert int((((a / (a + b)) < 0.75) != means_below(a, b, 0.75)).sum()) == 7
    assert MeanThreshold(0.75).act(a, b, 5).tolist() == (~means_below(a, b, 0.75)).tolist()
    with pytest.raises(ConfigError):
        means_below([1.0, float("nan")], [1.0, 1.0], 0.5)


def test_a_float_is_the_number_written_on_each_side_of_the_integer_range():
    """Integers up to 2**53 are exact floats whose text is the integer; above, a float's
    text is its shortest decimal: 1e23 is 10**23, not the double 99999999999999991611392."""
    from dyna.ties import as_fraction

    assert as_fraction(2.0 ** 53) == 2 ** 53 and as_fraction(-7.0) == -7
    assert as_fraction(1e23) == 10 ** 23 != int(1e23)
    assert as_fraction(0.8) == Fraction(4, 5) and as_fraction(-2.5) == Fraction(-5, 2)


def test_array_means_overflowing_in_floats_are_decided_exactly():
    """A sum that overflows (1e308 + 1e308) is decided exactly, a NaN or infinite shape
    is refused by name, and neither warns."""
    import warnings

    import numpy as np

    from dyna.ties import means_below

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # means 1/2, 1/3 and 4/5 against 1/2: equal is not below
        assert means_below([1e308, 1.0, 4.0], [1e308, 2.0, 1.0], 0.5).tolist() == [
            False, True, False]
        for bad in (np.nan, np.inf):
            with pytest.raises(ConfigError, match="value="):
                means_below([1.0, 2.0], [1.0, bad], 0.5)
