"""A memory fact's competence forgets old outcomes as a skill's does.

Every number below is computed by hand from the discounted update of
:mod:`dyna.competence`: before each outcome a fact's evidence decays,
``a <- a0 + d (a - a0)``, ``b <- b0 + d (b - b0)``, then 1 is added to ``a`` (success) or
``b`` (failure); after outcomes ``s_1..s_m`` from the prior

    a = a0 + sum_j d**(m - j) s_j,    b = b0 + sum_j d**(m - j) (1 - s_j).
"""

import datetime as dt
import math

import pytest

from dyna.competence import BetaCompetence
from dyna.errors import ConfigError
from dyna.loops import LoopConfig
from dyna.loops.memory import MemoryEntry, MemoryStore
from dyna.loops.memory_format import parse_memory, render_memory
from dyna.loops.skills import Skill, SkillLibrary

CLOCK = lambda: dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)  # noqa: E731
FACT = "API port: 8080"


def _store(tmp_path, backend, **kw):
    path = None if backend == "memory" else tmp_path / "MEMORY.md"
    store = MemoryStore(path, clock=CLOCK, **kw)
    store.add(FACT, trust="trusted", run_id="r0")
    return store


def _closed_form(outcomes, d, a0=1.0, b0=1.0):
    """The module docstring's formula of dyna.competence, summed directly."""
    m = len(outcomes)
    a = a0 + sum(d ** (m - j) * s for j, s in enumerate(outcomes, 1))
    b = b0 + sum(d ** (m - j) * (1 - s) for j, s in enumerate(outcomes, 1))
    return a, b


# ---------------------------------------------------------------- the update rule

@pytest.mark.parametrize("backend", ["memory", "file"])
def test_a_facts_posterior_is_the_discounted_formula(tmp_path, backend):
    store = _store(tmp_path, backend, discount=0.9)
    outcomes = [1, 1, 0, 1, 0]
    for i, s in enumerate(outcomes):
        store.record_outcomes({FACT: bool(s)}, f"r{i}")
    # a = 1 + 0.9**4 + 0.9**3 + 0.9 = 3.2851;  b = 1 + 0.9**2 + 1 = 2.81
    (e,) = store.entries()
    assert (e.successes, e.failures) == (3, 2)
    assert (e.a, e.b) == pytest.approx((3.2851, 2.81), rel=1e-12)
    assert (e.a, e.b) == pytest.approx(_closed_form(outcomes, 0.9), rel=1e-12)
    assert store.posterior(FACT) == (e.a, e.b)
    # the skills' estimator, fed the same outcomes, gives the very same floats
    comp = BetaCompetence("uniform", 0.9)
    for s in outcomes:
        want = comp.record("k", bool(s))
    assert (e.a, e.b) == want


def test_the_evidence_decays_toward_the_stores_prior():
    store = MemoryStore(None, prior="jeffreys", discount=0.9)
    store.add(FACT, trust="trusted")
    store.record_outcomes({FACT: True})    # a = 0.5 + 1 = 1.5, b = 0.5
    assert store.posterior(FACT) == (1.5, 0.5)
    store.record_outcomes({FACT: False})   # a = 0.5 + 0.9 * 1 = 1.4, b = 0.5 + 1 = 1.5
    assert store.posterior(FACT) == pytest.approx((1.4, 1.5), rel=1e-12)


# ---------------------------------------------------------------- retirement after drift

# 50 successes with d = 0.9: evidence E = (1 - 0.9**50) / 0.1 = 9.948462..., so
# a = 1 + E, b = 1. After f failures a = 1 + 0.9**f E, b = 1 + (1 - 0.9**f) / 0.1, and the
# mean (1 + xE) / (12 - x (10 - E)) with x = 0.9**f is below 0.4 exactly when
# x < 3.8 / (0.6 E + 4) = 0.38118: 0.9**9 = 0.38742 keeps it (mean 0.405),
# 0.9**10 = 0.34868 retires it (mean 0.373). With d = 1 the mean 51 / (52 + f) is below
# 0.4 only from f = 76 on.
RETIRING_FAILURE = 10


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_fifty_successes_are_forgotten_after_ten_contradictions(tmp_path, backend):
    store = _store(tmp_path, backend, retire_below=0.4, retire_min_uses=3, discount=0.9)
    for i in range(50):
        assert store.record_outcomes({FACT: True}, f"s{i}") == []
    assert store.posterior(FACT) == pytest.approx((1 + 9.948462247926798, 1.0), rel=1e-12)
    for f in range(1, RETIRING_FAILURE):
        assert store.record_outcomes({FACT: False}, f"f{f}") == []
    a, b = store.posterior(FACT)
    assert (a, b) == pytest.approx((4.85423810888984, 7.1257951099999985), rel=1e-12)
    assert a / (a + b) == pytest.approx(0.40519404, abs=1e-8)
    assert store.record_outcomes({FACT: False}, "last") == [FACT]
    assert store.entries() == ()
    (rec,) = store.retired()
    assert rec["reason"] == ("contradicted: competence mean 0.373 < 0.4 after a failure "
                             "(successes 50, failures 10)")


def test_without_a_discount_fifty_contradictions_do_not_retire_it(tmp_path):
    store = _store(tmp_path, "file", retire_below=0.4, retire_min_uses=3, discount=1.0)
    for i in range(50):
        store.record_outcomes({FACT: True}, f"s{i}")
    for f in range(50):
        assert store.record_outcomes({FACT: False}, f"f{f}") == []
    (e,) = store.entries()
    assert (e.successes, e.failures, e.a, e.b) == (50, 50, None, None)
    assert store.posterior(FACT) == (51.0, 51.0)
    assert e.to_line() == "- [2025-01-01 | r0 | trusted | successes 50, failures 50] " + FACT


def test_skills_with_the_same_discount_retire_at_the_same_failure():
    lib = SkillLibrary(None, retire_below=0.4, retire_min_uses=3, discount=0.9,
                       log_outcomes=False)
    lib.add(Skill("port-fix", "Fix the API port.", "1. call `set_port` with `8080`",
                  triggers=("port",)))
    for _ in range(50):
        lib.record_outcome(["port-fix"], True)
    got = [lib.record_outcome(["port-fix"], False) for _ in range(RETIRING_FAILURE)]
    assert got == [[]] * (RETIRING_FAILURE - 1) + [["port-fix"]]


def test_the_loop_config_gives_the_memory_store_its_discount():
    assert LoopConfig().memory_store().discount == 1.0
    store = LoopConfig(discount=0.9).memory_store(clock=CLOCK)
    assert store.discount == 0.9
    store.add(FACT, trust="trusted")
    store.record_outcomes({FACT: True})
    store.record_outcomes({FACT: True})      # a = 1 + 0.9 + 1 = 2.9
    assert store.posterior(FACT) == pytest.approx((2.9, 1.0), rel=1e-12)


# ---------------------------------------------------------------- MEMORY.md

def test_the_posterior_round_trips_through_memory_md_bit_for_bit(tmp_path):
    path = tmp_path / "MEMORY.md"
    file_store, mem_store = (_store(tmp_path, b, discount=0.9) for b in ("file", "memory"))
    for store in (file_store, mem_store):
        store.add("Deploy host is web-2", trust="trusted", run_id="r0")
        for s in (True, True, False):
            store.record_outcomes({FACT: s})
        for s in [True] * 7 + [False]:
            store.record_outcomes({"Deploy host is web-2": s})
    lines = path.read_text().splitlines()
    # S, S, F: a = 1 + 0.9 * 1.9 = 2.71, b = 1 + 1 = 2 (2.71 is the float's repr)
    assert lines[-2] == ("- [2025-01-01 | r0 | trusted | successes 2, failures 1, "
                         "a 2.71, b 2.0] API port: 8080")
    again = MemoryStore(path, discount=0.9)
    for store in (file_store, again):
        assert list(store.entries()) == list(mem_store.entries())
    for x, y in zip(again.entries(), mem_store.entries()):
        assert (x.a.hex(), x.b.hex()) == (y.a.hex(), y.b.hex())
    # floats whose shortest repr needs 17 digits, an exponent or a subnormal
    odd = [MemoryEntry(f"fact {i}", "2025-01-01", "r", "trusted", 1, 2, a, b)
           for i, (a, b) in enumerate([(0.1 + 0.2, 1 / 3), (1e-300, 5e-324),
                                       (1.7976931348623157e308, 123456789.12345679)])]
    back = parse_memory(render_memory(odd))
    assert [(e.a.hex(), e.b.hex()) for e in back] == [(e.a.hex(), e.b.hex()) for e in odd]
    assert back == odd


def test_a_file_written_without_a_posterior_reads_as_prior_plus_counts(tmp_path):
    path = tmp_path / "MEMORY.md"
    path.write_text("# Memory\n\n- [2025-01-01 | r | trusted | successes 3, failures 1] "
                    "API port: 8080\n")
    store = MemoryStore(path, discount=0.9)
    (e,) = store.entries()
    assert (e.a, e.b) == (None, None)
    assert store.posterior(FACT) == (4.0, 2.0)
    assert MemoryStore(path, prior="jeffreys").posterior(FACT) == (3.5, 1.5)
    # one success from (4, 2): a = 1 + 0.9 * 3 + 1 = 4.7, b = 1 + 0.9 * 1 = 1.9
    store.record_outcomes({FACT: True})
    assert store.posterior(FACT) == pytest.approx((4.7, 1.9), rel=1e-12)
    (e,) = MemoryStore(path).entries()
    assert (e.successes, e.failures, e.a, e.b) == (4, 1, *store.posterior(FACT))


def test_without_a_discount_an_old_line_keeps_its_form(tmp_path):
    path = tmp_path / "MEMORY.md"
    path.write_text("- [2025-01-01 | r | trusted | successes 3, failures 1] API port: 8080\n")
    store = MemoryStore(path)
    store.record_outcomes({FACT: False})
    assert path.read_text() == ("- [2025-01-01 | r | trusted | successes 3, failures 2] "
                                "API port: 8080\n")
    assert store.posterior(FACT) == (4.0, 3.0)


def test_a_posterior_on_the_line_is_updated_from_even_without_a_discount(tmp_path):
    path = tmp_path / "MEMORY.md"
    path.write_text("- [2025-01-01 | r | trusted | successes 2, failures 1, a 2.71, b 2.0] "
                    "API port: 8080\n")
    store = MemoryStore(path)
    assert store.posterior(FACT) == (2.71, 2.0)
    store.record_outcomes({FACT: False})
    assert store.posterior(FACT) == (2.71, 3.0)
    assert path.read_text() == ("- [2025-01-01 | r | trusted | successes 2, failures 2, "
                                "a 2.71, b 3.0] API port: 8080\n")


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.5, math.nan, "0.9", True])
def test_a_bad_discount_is_refused_naming_it(bad):
    with pytest.raises(ConfigError) as exc:
        MemoryStore(None, discount=bad)
    assert exc.value.field == "discount"


@pytest.mark.parametrize("bracket,field", [
    ("successes 1, failures 0, a -1.0, b 2.0", "a"),
    ("successes 1, failures 0, a 2.0, b 0.0", "b"),
    ("successes 1, failures 0, a 1e999, b 2.0", "a"),
    ("successes 1, failures 0, a 1.2.3, b 2.0", "counts"),
    ("successes 1, failures 0, a 2.0", "counts"),
])
def test_a_bad_posterior_on_a_line_is_refused_naming_the_line(tmp_path, bracket, field):
    path = tmp_path / "MEMORY.md"
    path.write_text(f"- [2025-01-01 | r | trusted | {bracket}] API port: 8080\n")
    with pytest.raises(ConfigError) as exc:
        MemoryStore(path)
    assert exc.value.field == f"{path}:1"
    assert exc.value.reason.startswith(f"{field}: ")


def test_a_and_b_are_given_together_finite_and_positive():
    with pytest.raises(ConfigError) as exc:
        MemoryEntry(FACT, a=2.0)
    assert exc.value.field == "a"
    with pytest.raises(ConfigError) as exc:
        MemoryEntry(FACT, a=2.0, b=math.inf)
    assert exc.value.field == "b"
    with pytest.raises(ConfigError) as exc:
        MemoryStore(None).posterior(FACT)
    assert exc.value.field == "text"
