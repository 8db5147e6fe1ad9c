"""Tests of dyna.escalation on hand-made histories, one per risk class."""

import math

import polars as pl
import pytest

from dyna.competence import BetaCompetence
from dyna.errors import ConfigError
from dyna.escalation import (RISK_CLASSES, EscalationPolicy, ThresholdPolicy,
                             evidence_from_history, has_provenance, should_escalate)

VER = {"outcome_verified_by": "ci-tests", "anti_gaming_policy": "hidden-tests-v1"}


def hist(n_success, n_failure, verified=0, task_type="deploy", verified_failures=0):
    """n_success successes (the first `verified` with provenance), then failures."""
    rows = []
    for i in range(n_success):
        rows.append({"task_type": task_type, "outcome": "success", **(VER if i < verified else {})})
    for i in range(n_failure):
        rows.append({"task_type": task_type, "outcome": "failure",
                     **(VER if i < verified_failures else {})})
    return rows


def test_min_episodes_gate_escalates_every_class():
    h = hist(9, 0, verified=9)
    for rc in RISK_CLASSES:
        d = should_escalate(h, "deploy", threshold=0.5, min_episodes=10, domain_risk_class=rc)
        assert d.escalate and d.reason == "insufficient_episodes"
        assert d.n_episodes == 9 and d.n_evidence == 9
        assert "min_episodes=10" in d.escalation_block_reason


def test_low_stakes_uses_mean_of_all_outcomes():
    h = hist(12, 0)  # no provenance at all
    d = should_escalate(h, "deploy", threshold=0.8, min_episodes=10)
    assert not d.escalate and d.reason == "competent"
    assert d.mean == pytest.approx(13 / 14) and d.statistic == "mean"
    # 8 successes, 4 failures: mean Beta(9, 5) = 9/14 = 0.643 < 0.8
    d = should_escalate(hist(8, 4), "deploy", threshold=0.8, min_episodes=10)
    assert d.escalate and d.reason == "below_threshold"
    assert d.mean == pytest.approx(9 / 14)


def test_elevated_counts_only_outcomes_with_provenance():
    h = hist(12, 0, verified=5)
    d = should_escalate(h, "deploy", threshold=0.8, min_episodes=10, domain_risk_class="elevated")
    assert d.escalate and d.reason == "unverified_evidence"
    assert d.n_episodes == 12 and d.n_evidence == 5
    assert "only 5 of 12" in d.escalation_block_reason
    # unverified failures do not drag the mean down either
    h = hist(12, 6, verified=12)
    d = should_escalate(h, "deploy", threshold=0.8, min_episodes=10, domain_risk_class="elevated")
    assert not d.escalate and d.n_evidence == 12 and d.mean == pytest.approx(13 / 14)
    # only one provenance field set is not provenance
    h = [{"task_type": "deploy", "outcome": "success", "outcome_verified_by": "ci"}] * 20
    d = should_escalate(h, "deploy", threshold=0.5, min_episodes=1, domain_risk_class="elevated")
    assert d.escalate and d.n_evidence == 0


def test_high_stakes_uses_lower_bound_not_mean():
    # 12/12 verified: mean 13/14 = 0.93 passes 0.8, lower 2.5% bound of Beta(13, 1) is
    # 0.025 ** (1 / 13) = 0.7528 and does not.
    h = hist(12, 0, verified=12)
    low = should_escalate(h, "deploy", 0.8, 10, "elevated")
    high = should_escalate(h, "deploy", 0.8, 10, "high_stakes")
    assert not low.escalate
    assert high.escalate and high.reason == "below_threshold" and high.statistic == "lower"
    assert high.lower == pytest.approx(0.025 ** (1 / 13), rel=1e-12)
    # 20/20: 0.025 ** (1 / 21) = 0.8389 >= 0.8
    high = should_escalate(hist(20, 0, verified=20), "deploy", 0.8, 10, "high_stakes")
    assert not high.escalate and high.lower == pytest.approx(0.025 ** (1 / 21), rel=1e-12)


@pytest.mark.parametrize("p_star,prior,n_min", [(0.8, "uniform", 13), (0.95, "uniform", 58),
                                                (0.99, "uniform", 298), (0.8, "jeffreys", 9),
                                                (0.95, "jeffreys", 38), (0.99, "jeffreys", 191)])
def test_consecutive_successes_before_lower_bound_rule_acts(p_star, prior, n_min):
    # delta = 0.05 one-sided is the lower end of the 90% equal-tailed interval.
    def decide(n):
        return should_escalate(hist(n, 0, verified=n), "deploy", p_star, 0, "high_stakes",
                               level=0.9, prior=prior)
    assert decide(n_min - 1).escalate
    assert not decide(n_min).escalate


def test_other_task_types_and_other_labels():
    h = hist(20, 0, task_type="other") + hist(3, 0)
    d = should_escalate(h, "deploy", 0.5, 5)
    assert d.n_episodes == 3 and d.escalate
    # labels other than success count as failures; True counts as success
    h = [{"outcome": o} for o in ["success", True, "timeout", "failure", "partial"]]
    ev = evidence_from_history(h, "x")
    assert (ev.n_evidence, ev.n_success, ev.a, ev.b) == (5, 2, 3.0, 4.0)


def test_history_as_columns_and_polars():
    cols = {"task_type": ["a", "a", "b"], "outcome": ["success", "failure", "success"],
            "outcome_verified_by": ["x", None, "x"], "anti_gaming_policy": ["p", "p", ""]}
    for h in (cols, pl.DataFrame(cols)):
        ev = evidence_from_history(h, "a", risk_class="elevated")
        assert (ev.n_episodes, ev.n_evidence, ev.n_success) == (2, 1, 1)
        ev = evidence_from_history(h, "b", risk_class="high_stakes")
        assert (ev.n_episodes, ev.n_evidence) == (1, 0)  # blank policy is not provenance
    assert has_provenance(["x", " ", None, math.nan], ["p", "p", "p", "p"]).tolist() == \
        [True, False, False, False]


def test_beta_competence_source():
    c = BetaCompetence()
    c.update_many(["deploy"] * 30, [True] * 30)
    d = should_escalate(c, "deploy", 0.8, 10, "low_stakes")
    assert not d.escalate and d.n_episodes == 30 and d.mean == pytest.approx(31 / 32)
    d = should_escalate(c, "deploy", 0.8, 10, "high_stakes")
    assert d.escalate and d.reason == "unverified_evidence" and d.n_evidence == 0
    d = should_escalate(c, "deploy", 0.8, 10, "high_stakes", evidence_verified=True)
    assert not d.escalate and d.lower == pytest.approx(0.025 ** (1 / 31))
    d = should_escalate(c, "other", 0.8, 0, "low_stakes")  # unseen key: prior mean 0.5
    assert d.escalate and d.mean == 0.5 and d.lower == pytest.approx(0.025)


def test_bad_input_names_the_field():
    for kwargs, field in [({"domain_risk_class": "critical"}, "domain_risk_class"),
                          ({"threshold": 1.5}, "threshold"), ({"threshold": math.nan}, "threshold"),
                          ({"min_episodes": -1}, "min_episodes"),
                          ({"min_episodes": 2.5}, "min_episodes"), ({"level": 1.0}, "level")]:
        with pytest.raises(ConfigError) as e:
            should_escalate([], "x", **kwargs)
        assert e.value.field == field
    with pytest.raises(ConfigError) as e:
        should_escalate({"task_type": ["x"]}, "x")
    assert e.value.field == "history"
    with pytest.raises(ConfigError):
        ThresholdPolicy("median")


def test_policy_protocol_and_override():
    assert isinstance(ThresholdPolicy(), EscalationPolicy)

    class Never:
        name = "never"

        def decide(self, evidence, *, threshold, min_episodes, level, risk_class):
            d = ThresholdPolicy().decide(evidence, threshold=threshold, min_episodes=0,
                                         level=level, risk_class=risk_class)
            return type(d)(**{**d.to_dict(), "escalate": False, "policy": "never"})

    d = should_escalate(hist(0, 5), "deploy", 0.8, 10, policy=Never())
    assert not d.escalate and d.policy == "never"
    out = d.to_dict()
    assert set(out) >= {"escalate", "reason", "escalation_block_reason", "n_episodes",
                        "n_evidence", "mean", "lower", "upper"}
