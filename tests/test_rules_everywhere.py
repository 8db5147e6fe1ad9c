"""Rules every component keeps, each walked over the public entry points it applies to.

- text compared for identity is compared after one normalisation (NFKC, case-folded);
- tenants are refused unless already NFKC, never folded;
- every time is timezone-aware and every date derived from it a UTC date;
- a decision at a threshold meets its tie rule exactly on rational inputs;
- a list of ids with a repeat is refused or deduplicated by a documented rule.
"""

import datetime as dt
import json
from fractions import Fraction

import pytest

from dyna.errors import ConfigError, check_time
from dyna.escalation.rules import Evidence, ThresholdPolicy
from dyna.experience import OPERATIONS, ExperienceStore
from dyna.loops import Digest
from dyna.loops._text import concrete_parts, content_words, fact_key, identity_text, tokenize
from dyna.loops.bm25 import query_terms
from dyna.loops.memory import MemoryStore
from dyna.loops.retirement import retirement_reason
from dyna.loops.review.safeguards import Grade, accepted_without_novelty, score_without_novelty
from dyna.loops.review.loop import _fact_outcomes
from dyna.loops.skills import Skill, SkillLibrary, check_skill_name
from dyna.loops.skills.fields import split_list
from dyna.ties import as_fraction, mean_below, weighted_sum_below

PLAIN = ("Ｄeploy", "deploy", "DEPLOY")             # one word: "deploy"
ACCENTED = ("de\u0301ploy", "d\u00e9ploy")          # one word: "déploy", not "deploy"
UTC_NOON = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)


# ----------------------------------------------------------------- one normalisation
def test_identity_text_is_nfkc_casefold():
    assert {identity_text(w) for w in PLAIN} == {"deploy"}
    assert {identity_text(w) for w in ACCENTED} == {"d\u00e9ploy"}


def test_tokens_words_fact_keys_and_parts_compare_after_normalisation():
    for fn in (lambda w: tokenize(w + " the app")[0], lambda w: content_words(w + " app"),
               lambda w: fact_key(f"{w} with `make web`"),
               lambda w: tuple(query_terms(w + " app"))):
        assert len({fn(w) for w in PLAIN}) == 1
        assert len({fn(w) for w in ACCENTED}) == 1
        assert fn(PLAIN[1]) != fn(ACCENTED[1])
    assert tokenize("Ｄeploy the app")[0] == ("deploy", "the", "app")
    # a part is found by its shape in the text as written (ALLCAPS is a name), then
    # compared normalised
    parts = {w: concrete_parts(f"see /srv/{w}/app.py --dry-run") for w in PLAIN + ACCENTED}
    assert parts["Ｄeploy"] == parts["deploy"] == ("--dry-run", "/srv/deploy/app.py")
    assert parts["DEPLOY"] == ("--dry-run", "/srv/deploy/app.py", "deploy")
    assert parts[ACCENTED[0]] == parts[ACCENTED[1]] == ("--dry-run", "/srv/d\u00e9ploy/app.py")


def test_triggers_match_and_deduplicate_after_normalisation():
    assert split_list(list(PLAIN) + list(ACCENTED), "triggers", ",") == ("Ｄeploy", ACCENTED[0])
    lib = SkillLibrary.in_memory(clock=lambda: UTC_NOON)
    lib.add(Skill("ship-web", "Ship the web app.", "1. run `make ship`", ("Ｄeploy web",)),
            "r1")
    lib.add(Skill("ship-fr", "Ship the French site.", "1. run `make fr`", (ACCENTED[0],)),
            "r1")
    for w in PLAIN:
        assert [m.name for m in lib.match(f"please {w} web now")] == ["ship-web"], w
    for w in ACCENTED:
        assert [m.name for m in lib.match(f"{w} le site")] == ["ship-fr"], w


def test_facts_are_one_fact_in_every_spelling():
    mem = MemoryStore.in_memory(clock=lambda: UTC_NOON)
    assert [mem.add(f"{w} with `make web`").status for w in PLAIN] == \
        ["added", "duplicate", "duplicate"]
    assert [mem.add(f"{w} the site").status for w in ACCENTED] == ["added", "duplicate"]
    assert len(mem.entries()) == 2
    digest = Digest.from_run("r1", "t", success=True, tool_calls=[
        {"name": "make", "args": {}, "output": "ok", "skills": ["DEPLOY with `make web`"]}])
    assert _fact_outcomes(digest, mem.snapshot()) == {"Ｄeploy with `make web`": True}


def test_skill_names_keep_their_own_rule_nfkc_and_lowercase():
    assert {check_skill_name(w) for w in ACCENTED} == {"d\u00e9ploy"}
    assert check_skill_name("deploy") == "deploy"
    for w in ("Ｄeploy", "DEPLOY"):
        with pytest.raises(ConfigError) as e:
            check_skill_name(w)
        assert e.value.field == "name"


# ----------------------------------------------------------------- tenants, never folded
def _args(op):
    kinds = {"string": "k", "number": 1.0, "integer": 1, "boolean": False, "array": [],
             "object": {}}
    return {p.name: kinds[p.type] for p in op.params if p.required and p.name != "tenant_id"}


@pytest.mark.parametrize("tenant", ["ｔ1", "e\u0301", "Ⅳ"])
def test_every_operation_refuses_a_tenant_nfkc_would_change(tmp_path, tenant):
    ops = [op for op in OPERATIONS.values() if any(p.name == "tenant_id" for p in op.params)]
    assert len(ops) >= 15
    with ExperienceStore("", dim=4) as store:
        for op in ops:
            with pytest.raises(ConfigError) as e:
                store.dispatch(op.name, tenant_id=tenant, **_args(op))
            assert e.value.field == "tenant_id", op.name
        store.record("\u00e9", task_type="k", action_type="a", outcome="success",
                     reward=1.0, timestamp=1.0, state_features=[1, 0, 0, 0])
        assert store.tenant_ids() == ["\u00e9"]   # an NFKC tenant is stored as given
        store.export_data("\u00e9", path=str(tmp_path / "e.jsonl"))
    rec = json.loads((tmp_path / "e.jsonl").read_text())
    rec["tenant_id"] = tenant
    (tmp_path / "f.jsonl").write_text(json.dumps(rec) + "\n")
    with ExperienceStore("", dim=4) as other, pytest.raises(ConfigError) as e:
        other.import_data(str(tmp_path / "f.jsonl"))
    assert e.value.field == "tenant_id[0]"


def test_postgres_grants_refuse_a_tenant_nfkc_would_change():
    from dyna.store.postgres import grant_tenant

    for tenant in ("ｔ1", "e\u0301"):
        with pytest.raises(ConfigError) as e:
            grant_tenant(None, "role_a", tenant)   # refused before any session is used
        assert e.value.field == "tenant" and "NFKC" in e.value.reason


def test_the_mcp_server_refuses_a_tenant_nfkc_would_change():
    from dyna.mcp_server.tools import ExperienceTools

    with ExperienceStore("", dim=4) as store:
        for tenant in ("ｔ1", "e\u0301"):
            with pytest.raises(ConfigError) as e:
                ExperienceTools(store, tenant)
            assert e.value.field == "tenant"
        assert ExperienceTools(store, "\u00e9").tenant_id == "\u00e9"


# ----------------------------------------------------------------- aware times, UTC dates
def _naive():
    return dt.datetime(2026, 1, 1, 12)


def _plus5():   # 02:00 on Jan 1st at +05:00 is 21:00 UTC on Dec 31st
    return dt.datetime(2026, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=5)))


def test_a_naive_clock_is_refused_by_every_store():
    lib = SkillLibrary.in_memory(clock=_naive)
    mem = MemoryStore.in_memory(clock=_naive)
    for call in (lambda: lib.add(Skill("a", "d"), "r1"), lib.today,
                 lambda: mem.add("port is 80")):
        with pytest.raises(ConfigError) as e:
            call()
        assert e.value.field == "clock" and "timezone-aware" in e.value.reason
    with pytest.raises(ConfigError):
        check_time("now", "2026-01-01")


def test_dates_are_utc_dates():
    lib = SkillLibrary.in_memory(clock=_plus5)
    lib.add(Skill("a", "d"), "r1")
    assert lib.today() == dt.date(2025, 12, 31)
    assert lib.get("a").created == "2025-12-31"
    mem = MemoryStore.in_memory(clock=_plus5)
    assert mem.add("port is 80").entry.date == "2025-12-31"
    assert check_time("t", _plus5()) == dt.datetime(2025, 12, 31, 21, tzinfo=dt.timezone.utc)
    assert check_time("t", UTC_NOON) is UTC_NOON


# ----------------------------------------------------------------- exact ties
def test_a_mean_at_its_threshold_is_not_below_it():
    assert as_fraction(0.8) == Fraction(4, 5) and as_fraction(3) == 3
    assert 0.3 / (0.3 + 0.1) < 0.75                 # float rounding: below
    assert mean_below(0.3, 0.1, 0.75) is False      # exactly: a tie
    assert mean_below(0.3, 0.1001, 0.75) is True
    assert mean_below(8.0, 2.0, 0.8) is False and mean_below(7, 3, 0.8) is True


def test_retirement_and_escalation_keep_the_tie_rule():
    assert retirement_reason(0.3, 0.1, 5, 0.75, 3) is None
    assert retirement_reason(0.3, 0.1001, 5, 0.75, 3).startswith("contradicted: competence")
    policy = ThresholdPolicy("mean")
    for a, b, t, esc in ((0.3, 0.1, 0.75, False), (8.0, 2.0, 0.8, False),
                         (0.3, 0.1001, 0.75, True)):
        d = policy.decide(Evidence("k", 12, 12.0, 10.0, a, b), threshold=t, min_episodes=10,
                          level=0.95, risk_class="low_stakes")
        assert (d.escalate, d.reason) == (esc, "below_threshold" if esc else "competent")


def test_counts_and_ages_at_their_limits_keep_the_tie_rule():
    policy = ThresholdPolicy("mean")
    at = policy.decide(Evidence("k", 10, 10.0, 9.0, 10.0, 2.0), threshold=0.8,
                       min_episodes=10, level=0.95, risk_class="low_stakes")
    under = policy.decide(Evidence("k", 10, 9.5, 9.0, 10.0, 1.5), threshold=0.8,
                          min_episodes=10, level=0.95, risk_class="low_stakes")
    assert (at.reason, under.reason) == ("competent", "insufficient_episodes")
    days = [UTC_NOON]
    lib = SkillLibrary.in_memory(clock=lambda: days[-1], max_age_days=90)
    lib.add(Skill("a", "d"), "r1")
    days.append(UTC_NOON + dt.timedelta(days=90, hours=11))    # 90 days: not past the limit
    assert lib.is_suspect(lib.get("a")) is False
    days.append(UTC_NOON + dt.timedelta(days=90, hours=12))    # the 91st UTC day
    assert lib.is_suspect(lib.get("a")) is True


def test_a_grade_at_its_threshold_passes():
    terms = ((0.6, 0.0), (0.25, 0.3), (0.15, 1.0))   # 0 + 0.075 + 0.15 = 0.225
    assert sum(w * x for w, x in terms) < 0.225      # float rounding: below
    assert weighted_sum_below(terms, 0.225) is False
    assert weighted_sum_below(terms, 0.2251) is True
    # the novelty counter asks the same question with novelty 1: 0 + 0.25 + 0.15 = 0.4
    g = Grade(0.6 * 0.0 + 0.25 * 0.3 + 0.15 * 1.0, 0.0, 0.3, 1.0, False, "")
    assert score_without_novelty(g) < 0.4            # float rounding: below
    assert accepted_without_novelty(g, 0.4) is True and accepted_without_novelty(g, 0.41) is False


# ----------------------------------------------------------------- repeated ids
def test_replay_refuses_a_repeated_id_in_python_and_dispatch():
    with ExperienceStore("", dim=4) as store:
        store.record("t1", episodes=[dict(task_type="k", action_type="a", outcome="success",
                                          reward=1.0, timestamp=float(i),
                                          state_features=[1, 0, 0, i]) for i in range(3)])
        args = dict(strategy="priority", ids=[0, 2, 0], priorities=[1.0, 1.0, 5.0], seed=1)
        for call in (lambda: store.replay_experience("t1", **args),
                     lambda: store.dispatch("replay_experience", tenant_id="t1", **args)):
            with pytest.raises(ConfigError) as e:
                call()
            assert (e.value.field, e.value.value) == ("ids[2]", 0)
        out = store.replay_experience("t1", batch_size=4, **{**args, "ids": [0, 2, 1]})
        assert len(out["ids"]) == 4 and set(out["ids"]) <= {0, 1, 2}


def test_outcomes_naming_one_fact_twice_are_refused():
    mem = MemoryStore.in_memory(clock=lambda: UTC_NOON)
    mem.add("Use `make web` to deploy")
    with pytest.raises(ConfigError) as e:
        mem.record_outcomes({"Use `make web` to deploy": True, "USE `MAKE WEB` TO DEPLOY": False})
    assert e.value.field == "outcomes['USE `MAKE WEB` TO DEPLOY']"
    assert mem.entries()[0].successes == 0
    mem.record_outcomes({"use make web to deploy": True})
    assert mem.entries()[0].successes == 1


def test_outcomes_of_a_repeated_skill_name_count_once():
    lib = SkillLibrary.in_memory(clock=lambda: UTC_NOON)
    lib.add(Skill("a", "d"), "r1")
    lib.record_outcome(["a", "a", "a"], True, "r2")
    assert lib.get("a").successes == 1
    d = Digest.from_run("r1", "t", success=True)
    assert d.skill_outcomes(["a", "b", "a"]) == {"a": True, "b": True}
