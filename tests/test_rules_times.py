"""Every time is timezone-aware and every date derived from it a UTC date; a clock that
returns a naive time is refused.

Walks every public entry point that reads a library's or a memory store's clock (the
list below; each is called with a naive clock and must refuse it, naming ``clock``), every
one that writes a date or a time from it (with a clock at +05:00, just after midnight, each
writes the UTC date, the day before), and every entry point that takes a time as text or as
a Parquet column (a time without a timezone is refused, naming the field). The experience
store's and the buffer's clock gives seconds since the Unix epoch, which are UTC by
definition: a clock of theirs that returns a datetime is refused, naming ``clock``.
"""

import datetime as dt
import functools
import json

import numpy as np
import polars as pl
import pytest

from dyna.buffer import ExperienceBuffer
from dyna.errors import ConfigError
from dyna.experience import ExperienceStore
from dyna.loops import memory as memory_module
from dyna.loops.memory import MemoryStore
from dyna.loops.skills import Skill, SkillLibrary

NOON = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)
NAIVE = dt.datetime(2026, 1, 1, 12)
# 02:00 on January 1st at +05:00 is 21:00 UTC on December 31st
PLUS5 = dt.datetime(2026, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=5)))


def _stores():
    """A library and a memory store whose clock reads ``now[0]`` (aware noon while they
    are filled), with something to act on for every entry point."""
    now = [NOON]
    lib = SkillLibrary.in_memory(clock=lambda: now[0], max_age_days=30)
    lib.add(Skill("a", "Deploy the app.", "1. run `make web`", ("deploy",)), "r1")
    lib.add(Skill("b", "Build things.", "1. run `make`"), "r1")
    lib.retire("b", "r1")
    staged = [lib.stage(Skill(n, f"Skill {n}.", "1. look"), "r2", ("web",)).id
              for n in ("c", "d")]
    mem = MemoryStore.in_memory(clock=lambda: now[0], retire_below=0.5, retire_min_uses=1)
    for text in ("port is 80", "host is web1", "user is bob"):
        mem.add(text)
    facts = [mem.stage(text).id for text in ("colour is blue", "size is 3")]
    return now, lib, staged, mem, facts


def _clock_readers(lib, staged, mem, facts):
    """(name, call) of every public entry point that reads the clock."""
    snap = lib.snapshot()
    return [
        ("SkillLibrary.add", lambda: lib.add(Skill("e", "Eee."), "r3")),
        ("SkillLibrary.patch", lambda: lib.patch("a", "r3", body="1. run `make web2`")),
        ("SkillLibrary.retire", lambda: lib.retire("a", "r3")),
        ("SkillLibrary.restore", lambda: lib.restore("b", "r3")),
        ("SkillLibrary.record_outcome", lambda: lib.record_outcome(["a"], True, "r3")),
        ("SkillLibrary.stage", lambda: lib.stage(Skill("f", "Fff."), "r3")),
        ("SkillLibrary.propose", lambda: lib.propose(Skill("g", "Ggg."), "r3")),
        ("SkillLibrary.approve", lambda: lib.approve(staged[0])),
        ("SkillLibrary.reject", lambda: lib.reject(staged[1])),
        ("SkillLibrary.undo_run", lambda: lib.undo_run("r1", force=True)),
        ("SkillLibrary.today", lib.today),
        ("SkillLibrary.is_suspect", lambda: lib.is_suspect(lib.get("a"))),
        ("SkillLibrary.match", lambda: lib.match("deploy now")),
        ("SkillSnapshot.today", snap.today),
        ("SkillSnapshot.is_suspect", lambda: snap.is_suspect(snap.get("a"))),
        ("SkillSnapshot.match", lambda: snap.match("deploy now")),
        ("MemoryStore.add", lambda: mem.add("fruit is apple")),
        ("MemoryStore.remove", lambda: mem.remove("port is 80")),
        # a failure that retires the fact is logged with its time
        ("MemoryStore.record_outcomes", lambda: mem.record_outcomes({"host is web1": False})),
        ("MemoryStore.stage", lambda: mem.stage("fruit is pear")),
        ("MemoryStore.approve", lambda: mem.approve(facts[0])),
        ("MemoryStore.reject", lambda: mem.reject(facts[1])),
        ("MemoryStore.consolidate", lambda: mem.consolidate()),
    ]


def test_every_entry_point_that_reads_a_clock_refuses_a_naive_time():
    now, lib, staged, mem, facts = _stores()
    calls = _clock_readers(lib, staged, mem, facts)
    assert len(calls) == 23
    logged = (len(lib.history()), len(mem.history()))
    now[0] = NAIVE
    refused = []
    for name, call in calls:
        with pytest.raises(ConfigError) as e:
            call()
        assert e.value.field == "clock", name
        assert e.value.reason.startswith("must be timezone-aware"), (name, e.value.reason)
        refused.append(name)
    assert len(refused) == 23
    # nothing was written: the library and the store are as they were filled
    assert [(s.name, s.status) for s in lib.skills(include_retired=True)] == \
        [("a", "active"), ("b", "retired")]
    assert [e.text for e in mem.entries()] == ["port is 80", "host is web1", "user is bob"]
    assert len(lib.pending()) == 2 and len(mem.pending()) == 2
    assert (len(lib.history()), len(mem.history())) == logged == (5, 5)
    assert lib.posterior("a") == mem.posterior("host is web1") == (1.0, 1.0)   # no outcome


def test_each_memory_write_reads_the_clock_once_and_logs_that_time():
    """A write's date, its staged time and every history record it makes come from one
    reading, so they agree even when the clock moves during the write (here: one second
    per reading)."""
    now, lib, staged, mem, facts = _stores()
    readings = []

    def ticking():
        readings.append(NOON + dt.timedelta(seconds=len(readings)))
        return readings[-1]

    mem._clock = functools.partial(memory_module._utc_now, ticking)
    calls = [(name, call) for name, call in _clock_readers(lib, staged, mem, facts)
             if name.startswith("MemoryStore.")]
    assert len(calls) == 7
    for name, call in calls:
        first, n_hist = len(readings), len(mem.history())
        call()
        assert len(readings) == first + 1, name
        times = {h["time"] for h in mem.history()[n_hist:]}
        assert times == {readings[-1].isoformat(timespec="seconds")}, name
    # (approve logs "approve" and "add", consolidate three "drop-vague": one time each)


def test_every_date_a_clock_gives_is_the_utc_date():
    now, lib, staged, mem, facts = _stores()
    now[0] = PLUS5
    utc_day = "2025-12-31"
    dates = {
        "SkillLibrary.today": lib.today().isoformat(),
        "SkillLibrary.add (created)": lib.add(Skill("e", "Eee."), "r3").skill.created,
        "SkillLibrary.record_outcome (last_verified)":
            (lib.record_outcome(["a"], True, "r3"), lib.get("a").last_verified)[1],
        "SkillLibrary.approve (last_verified)": lib.approve(staged[0]).skill.last_verified,
        "SkillSnapshot.today": lib.snapshot().today().isoformat(),
        "MemoryStore.add (date)": mem.add("fruit is apple").entry.date,
        "MemoryStore.stage, approve (date)":
            mem.approve(mem.stage("fruit is pear").id).entry.date,
    }
    assert dates == dict.fromkeys(dates, utc_day) and len(dates) == 7
    # times in the histories are in UTC too, with their offset
    skill_times = {h.time for h in lib.history(name="e")}
    fact_times = {h["time"] for h in mem.history() if h["text"] == "fruit is apple"}
    assert skill_times == fact_times == {"2025-12-31T21:00:00+00:00"}


def test_every_time_given_as_text_or_parquet_must_carry_a_timezone(tmp_path):
    ep = dict(task_type="k", action_type="a", outcome="success", reward=1.0,
              state_features=[1, 0, 0, 0])
    with ExperienceStore("", dim=4) as store:
        store.record("t", timestamp="2026-01-01T12:00:00+00:00", **ep)
        store.export_data("t", path=str(tmp_path / "e.jsonl"))
        store.export_data("t", path=str(tmp_path / "e.parquet"), format="parquet")
    rec = json.loads((tmp_path / "e.jsonl").read_text())
    (tmp_path / "naive.jsonl").write_text(json.dumps({**rec, "timestamp": "2026-01-01T12:00"})
                                          + "\n")
    pl.read_parquet(tmp_path / "e.parquet").with_columns(
        pl.col("timestamp").dt.replace_time_zone(None)).write_parquet(tmp_path / "n.parquet")
    naive = "2026-01-01T12:00:00"
    calls = [
        ("ExperienceStore.record", lambda s: s.record("t", timestamp=naive, **ep)),
        ("ExperienceStore.record (episodes)",
         lambda s: s.record("t", episodes=[{**ep, "timestamp": naive}])),
        ("ExperienceStore.dispatch record",
         lambda s: s.dispatch("record", tenant_id="t", timestamp=naive, **ep)),
        ("ExperienceStore.import_data (JSONL)",
         lambda s: s.import_data(str(tmp_path / "naive.jsonl"))),
        ("ExperienceStore.import_data (Parquet)",
         lambda s: s.import_data(str(tmp_path / "n.parquet"))),
    ]
    fields = []
    with ExperienceStore("", dim=4) as store:
        for name, call in calls:
            with pytest.raises(ConfigError) as e:
                call(store)
            assert "timezone" in e.value.reason, (name, e.value.reason)
            fields.append(e.value.field)
        assert store.get_stats()["n_records"] == 0
    assert fields == ["timestamp[0]"] * 4 + ["timestamp"]
    # an aware time at another offset is the same instant in UTC
    with ExperienceStore("", dim=4) as store:
        store.record("t", timestamp="2026-01-01T02:00:00+05:00", **ep)
        assert store.get_stats("t")["oldest"] == dt.datetime(2025, 12, 31, 21,
                                                             tzinfo=dt.timezone.utc)


def test_every_seconds_clock_refuses_a_datetime():
    ep = dict(task_type="k", action_type="a", outcome="success", reward=1.0,
              state_features=[1, 0, 0, 0])
    for clock in (lambda: NAIVE, lambda: NOON):   # a seconds clock: no datetime, aware or not
        store = ExperienceStore("", dim=4, clock=clock)
        buf = ExperienceBuffer(dim=4, clock=clock)
        calls = [
            ("ExperienceStore.record", lambda: store.record("t", **ep)),
            ("ExperienceStore.record (episodes)", lambda: store.record("t", episodes=[ep] * 2)),
            ("ExperienceStore.prune_old", lambda: store.prune_old(1.0)),
            ("ExperienceBuffer.record", lambda: buf.record(tenant_id="t", **ep)),
            ("ExperienceBuffer.record_batch", lambda: buf.record_batch(
                tenant_id="t", task_type="k", action_type="a", outcome="success",
                reward=[1.0], state_features=np.ones((1, 4)))),
        ]
        refused = []
        for name, call in calls:
            with pytest.raises(ConfigError) as e:
                call()
            assert (e.value.field, e.value.value) == ("clock", str(clock())), name
            assert e.value.reason.startswith("must return seconds since the Unix epoch")
            refused.append(name)
        assert len(refused) == 5 and len(buf) == 0 and store.get_stats()["n_records"] == 0
        store.close()
    with ExperienceStore("", dim=4, clock=lambda: 86400.5) as store:   # seconds are UTC
        store.record("t", **ep)
        assert store.get_stats()["oldest"] == dt.datetime(1970, 1, 2, 0, 0, 0, 500000,
                                                          tzinfo=dt.timezone.utc)
