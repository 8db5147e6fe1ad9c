"""The loops' safety net skips work it has already done, with the same results.

- :func:`dyna.redact.scan` counts nothing in a text shorter than 6 characters (its fast
  path), as the detectors and embedded JSON would; and it leaves no reference cycle behind.
"""

import datetime as dt
import gc
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dyna.loops.memory import MemoryStore
from dyna.loops.trajectories import TAU_BENCH_FORMATS
from dyna.redact import detect, redaction_formats, scan
from dyna.redact.objects import _embedded_json

DATA = Path(__file__).parent / "data"


def _lines(name):
    return [line for line in (DATA / name).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


SECRETS = [line.split("\t")[1].replace("\\n", " ") for line in _lines("secret_corpus.txt")]
BENIGN = [" ".join(t.split()) for t in _lines("benign_corpus.txt")]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=5))
def test_scan_of_a_short_text_counts_nothing(text):
    assert scan(text) == {} and scan({"k": text}) == {} and scan([text]) == {}
    # as the slow path would find: no detector looks at it, and its JSON holds nothing
    assert detect(text) == []
    parsed = _embedded_json(text)
    assert parsed is None or not isinstance(parsed, dict) and all(
        not isinstance(v, (dict, list)) or not v for v in parsed)


def test_scan_counts_json_and_keys_as_before():
    card = "4111 1111 1111 1111"
    assert scan({"note": json.dumps({"card": card})}) == scan({"note": card})
    assert scan(["x", {"dob": "1990-04-05"}]) == {"date_of_birth": 1}
    with redaction_formats(TAU_BENCH_FORMATS):
        assert scan(["x", {"user_id": "mia_li_3668"}]) == {"user_id": 1}
    assert scan(("abc", 5, None, 1.5)) == {}


def test_scan_leaves_no_reference_cycle():
    # Only garbage made by dyna.redact counts: in the whole suite other threads (servers,
    # Ray, PostgreSQL clients) allocate while this runs, so a bare gc.collect() count is
    # not this module's (thousands of unrelated objects in a full run). DEBUG_SAVEALL keeps what the
    # collector finds, and the scan's closures would be functions of dyna.redact there.
    def from_redact(obj) -> bool:
        module = getattr(obj, "__module__", None) or ""
        return module.split(".")[:2] == ["dyna", "redact"] and callable(obj)

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(200):
            scan({"a": ["some longer text here", {"b": "more text to scan"}]})
        gc.collect()
        ours = [o for o in gc.garbage if from_redact(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert ours == []


def _slow_embedded_json(text):
    s = text.strip()
    if s[:1] in "{[" and s[-1:] in "}]" and len(s) >= 2:
        try:
            parsed = json.loads(s)
        except ValueError:
            return None
        if isinstance(parsed, (dict, list)):
            return parsed
    return None


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(' \t\n\u00a0\u2003{}[]":,ax1')), max_size=12))
def test_embedded_json_fast_reject_is_exact(text):
    assert _embedded_json(text) == _slow_embedded_json(text)


def _skill_play(lib, times=3):
    from dyna.loops.skills import Skill

    bodies = [f"1. run `make deploy` with {t}" for t in (SECRETS[:25] + BENIGN[:25])]
    for i, body in enumerate(bodies):
        name = f"deploy-{i % 12}"
        base = Skill(name, f"Deploy procedure {i % 12}", body, ("deploy", "release"))
        prov = ("tool_output", SECRETS[i % len(SECRETS)]) if i % 3 == 0 else ("tool_output",)
        for k in range(times):   # the same text objects again, with other provenance
            lib.propose(base.evolve(source_run=f"r{i}-{k}"), f"r{i}-{k}", prov,
                        require_approval=False)
            lib.record_outcome([name], k != 1, run_id=f"r{i}-{k}")
    return ([(s.name, s.description, s.body, s.triggers, s.provenance, s.source_run)
             for s in sorted(lib._skills.values(), key=lambda s: s.name)],
            [(h.op, h.name, h.run_id, h.reason) for h in lib.history()], lib.redactions)


def test_a_skill_written_again_is_scanned_again_and_its_outcomes_never():
    # each proposal carries its text (scanned and counted each time); an outcome carries
    # numbers only: three writes of every skill catch three times what one write catches
    from dyna.loops.skills import SkillLibrary

    once = _skill_play(SkillLibrary(None, cap=None, log_outcomes=False), times=1)[2]
    thrice = _skill_play(SkillLibrary(None, cap=None, log_outcomes=False), times=3)[2]
    assert sum(once.values()) >= 25
    assert thrice == {k: 3 * n for k, n in once.items()}


def test_active_by_name_follows_every_change():
    from dyna.loops.skills import Skill, SkillLibrary

    lib = SkillLibrary(None, cap=3, log_outcomes=False)

    def check():
        got = lib._active_by_name()
        assert list(got) == lib.skills()
        assert lib._active_by_name() is got   # unchanged library: the same tuple
    for i, name in enumerate(["delta", "alpha", "charlie", "bravo"]):   # the 4th evicts
        lib.add(Skill(name, f"Skill {name}", f"1. run `make {name}`", (name,)), run_id=f"r{i}")
        check()
    assert len(lib) == 3
    first = lib.skills()[0].name
    lib.record_outcome([first], False, run_id="r9")
    check()
    lib.patch(first, run_id="r10", body="1. run `make other`")
    check()
    assert lib._active_by_name()[0].body == "1. run `make other`"
    lib.retire(first, run_id="r11")
    check()
    lib.restore(first, run_id="r12")
    check()
    lib.undo_run("r12")
    check()
    assert [s.name for s in lib._active_by_name()] == sorted(
        s.name for s in lib.skills())


class _LyingClock(dt.datetime):
    """A datetime whose isoformat says something else (a clock is caller code)."""

    def isoformat(self, *args, **kwargs):
        return "password=hunter2-secret"


def _lying_now():
    return _LyingClock(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def test_history_time_is_datetimes_own_text_and_keeps_its_place(tmp_path):
    """The history's "time" is not scanned (no detector catches datetime's ISO text:
    checked over random times and offsets here): it is written by datetime's own
    isoformat whatever a subclass overrides, and the record keeps its key order."""
    import random

    from dyna.loops.skills import Skill, SkillLibrary

    lib = SkillLibrary(tmp_path / "lib", clock=_lying_now)
    lib.add(Skill("a", "d"), "r1", "why")
    mem = MemoryStore(tmp_path / "MEMORY.md", clock=_lying_now)
    mem.add("the build uses make", run_id="r1")
    in_memory = SkillLibrary(None, clock=_lying_now)
    in_memory.add(Skill("a", "d"), "r1", "why")
    file_rec = json.loads((tmp_path / "lib" / ".dyna" / "history.jsonl")
                          .read_text().splitlines()[0])
    assert file_rec["time"] == "2024-05-01T12:00:00+00:00"
    mem_in_memory = MemoryStore(None, clock=_lying_now)
    mem_in_memory.add("the build uses make", run_id="r1")
    assert mem.backend.history()[-1]["time"] == "2024-05-01T12:00:00+00:00"
    for rec in (in_memory.backend.history()[0], mem_in_memory.backend.history()[-1]):
        assert rec["time"] == "2024-05-01T12:00:00+00:00"
        assert list(rec)[:3] == ["seq", "time", "op"]   # the order the records had
    assert lib.redactions == {} and mem.redactions == {}
    rng = random.Random(7)
    base = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    texts = {(base + dt.timedelta(seconds=rng.randrange(100 * 365 * 86400))).astimezone(
        dt.timezone(dt.timedelta(minutes=rng.randrange(-14 * 60, 14 * 60 + 1)))
    ).isoformat(timespec="seconds") for _ in range(3000)}
    assert len(texts) == 3000 and not any(detect(t) for t in texts)


def test_equal_texts_in_new_objects_give_the_same_library():
    # a reviewer writes its lessons anew each run: new string objects with the text of a
    # skill the net passed give the library, history and catch counts of the same objects
    from dyna.loops.skills import Skill, SkillLibrary

    def play(lib, copies):
        bodies = [f"1. run `make deploy` with {t}" for t in (SECRETS[:25] + BENIGN[:25])]
        for i, body in enumerate(bodies * 2):
            name = f"deploy-{i % 12}"
            for k in range(2):
                copy = "".join(list(body)) if copies else body   # equal text, another object
                assert (copy is not body or len(body) < 2) == copies
                s = Skill(name, f"Deploy procedure {i % 12}", copy, ("deploy", "release"))
                prov = ("tool_output", SECRETS[i % len(SECRETS)]) if k else ("tool_output",)
                lib.propose(s.evolve(source_run=f"r{i}-{k}"), f"r{i}-{k}", prov,
                            require_approval=False)
        return ([(s.name, s.description, s.body, s.triggers, s.provenance, s.source_run)
                 for s in sorted(lib._skills.values(), key=lambda s: s.name)],
                [(h.op, h.name, h.run_id, h.reason) for h in lib.history()], lib.redactions)

    a = SkillLibrary(None, cap=None, log_outcomes=False)
    b = SkillLibrary(None, cap=None, log_outcomes=False)
    got_a, got_b = play(a, copies=True), play(b, copies=False)
    assert got_a == got_b
    assert sum(got_a[2].values()) >= 50
    # no stored text holds a corpus secret
    assert not any(sec in " ".join(map(str, row)) for row in got_a[0] for sec in SECRETS[:25])
