"""MemoryStore on a real MEMORY.md: dedupe, supersede, cap, consolidation, snapshots."""

import datetime as dt
import stat

import pytest

from dyna.errors import ConfigError
from dyna.loops.memory import MemoryEntry, MemoryStore, subject_of


def clock():
    return dt.datetime(2024, 5, 1, 9, tzinfo=dt.timezone.utc)


@pytest.fixture
def store(tmp_path):
    return MemoryStore(tmp_path / "MEMORY.md", clock=clock)


@pytest.mark.parametrize("first, second", [
    ("Use `make test-fast` for unit tests.", "use make  TEST-FAST for unit tests"),
    ("The config is in src/app.toml", "the config is in SRC/APP.TOML!"),
])
def test_same_fact_modulo_case_space_punctuation(store, first, second):
    assert store.add(first, run_id="r1").status == "added"
    r = store.add(second, run_id="r2")
    assert r.status == "duplicate" and r.entry.text == first.strip()
    assert len(store) == 1


@pytest.mark.parametrize("first, second", [
    ("Server A listens on 8080", "Server A listens on 8081"),
    ("Ask Alice for deploy access", "Ask Bob for deploy access"),
    ("Timeout of 1.5 s works", "Timeout of 15 s works"),
])
def test_different_number_or_name_are_different_facts(store, first, second):
    store.add(first)
    assert store.add(second).status == "added"
    assert [e.text for e in store] == [first, second]


def test_supersede_same_subject_new_value(store, tmp_path):
    store.add("The API port is 8080", run_id="r1", trust="trusted")
    r = store.add("API port: 9090", run_id="r2", trust="trusted")
    assert r.status == "superseded" and [e.text for e in r.superseded] == ["The API port is 8080"]
    assert [e.text for e in store] == ["API port: 9090"]
    sup = [h for h in store.history() if h["op"] == "supersede"]
    assert [(h["text"], h["run_id"], h["reason"]) for h in sup] == [
        ("The API port is 8080", "r2", "by: API port: 9090")]
    assert subject_of("The test command is `make test`.") == ("test command", "make test")


def test_file_format_and_reload(store, tmp_path):
    store.add("The API port is 8080", source="run-12", trust="trusted")
    path = tmp_path / "MEMORY.md"
    text = path.read_text()
    assert text.endswith("\n- [2024-05-01 | run-12 | trusted] The API port is 8080\n")
    path.write_text(text + "- Ask Alice about `deploy.sh`\n")
    again = MemoryStore(path)
    assert again.entries() == (MemoryEntry("The API port is 8080", "2024-05-01", "run-12"),
                               MemoryEntry("Ask Alice about `deploy.sh`", trust="user"))


def test_bad_line_names_file_and_line(tmp_path):
    p = tmp_path / "MEMORY.md"
    p.write_text("# Memory\n\n- [2024-13-01 | r | trusted] x\n")
    with pytest.raises(ConfigError) as ei:
        MemoryStore(p)
    assert ei.value.field == f"{p}:3"


def test_cap_evicts_oldest_never_newest(tmp_path):
    store = MemoryStore(tmp_path / "MEMORY.md", cap=3, clock=clock)
    for i, d in enumerate(["2024-01-04", "2024-01-02", "2024-01-03"]):
        store.add(f"Fact number {i}", date=d)
    r = store.add("Fact number 3", date="2024-01-01")  # newest write, oldest date
    assert [e.text for e in r.evicted] == ["Fact number 1"]
    assert [e.text for e in store] == ["Fact number 0", "Fact number 2", "Fact number 3"]
    r = store.add("Fact number 4", date="2024-01-05")
    assert [e.text for e in r.evicted] == ["Fact number 3"]
    ev = [(h["op"], h["text"]) for h in store.history() if h["op"] == "evict"]
    assert ev == [("evict", "Fact number 1"), ("evict", "Fact number 3")]
    assert len(MemoryStore(tmp_path / "MEMORY.md")) == 3


def test_default_cap_is_30(store):
    for i in range(32):
        store.add(f"Fact number {i}")
    assert len(store) == 30 and store.entries()[-1].text == "Fact number 31"
    assert store.entries()[0].text == "Fact number 2"


def test_consolidate_report_and_idempotent(tmp_path):
    p = tmp_path / "MEMORY.md"
    p.write_text(
        "# Memory\n\n"
        "- [2024-01-01 | r1 | trusted] Run `pytest -x` before pushing to main\n"
        "- [2024-01-02 | r2 | trusted] Be careful with tools.\n"
        "- [2024-01-03 | r3 | trusted] The API port is 8080\n"
        "- [2024-01-04 | r4 | trusted] run pytest -x before pushing to main branch\n"
        "- [2024-01-05 | r5 | trusted] API port: 9090\n"
        "- [2024-01-06 | r6 | trusted] Server Alpha listens on 7000\n"
        "- [2024-01-07 | r7 | trusted] Server Beta listens on 7000\n"
        "- [2024-01-08 | r8 | trusted] Always double-check your work\n")
    store = MemoryStore(p, clock=clock)
    report = store.consolidate(run_id="c1")
    assert report.merged == (("run pytest -x before pushing to main branch",
                              ("Run `pytest -x` before pushing to main",)),)
    assert report.superseded == (("The API port is 8080", "API port: 9090"),)
    assert report.vague == ("Be careful with tools.", "Always double-check your work")
    assert report.evicted == () and report.changed and report.n_removed == 4
    assert [e.text for e in store] == ["run pytest -x before pushing to main branch",
                                       "API port: 9090", "Server Alpha listens on 7000",
                                       "Server Beta listens on 7000"]
    written = p.read_bytes()
    second = store.consolidate(run_id="c2")
    assert not second.changed and str(second) == "nothing to consolidate"
    assert p.read_bytes() == written
    assert [e.text for e in MemoryStore(p)] == [e.text for e in store]


def test_consolidate_respects_cap(tmp_path):
    store = MemoryStore(tmp_path / "m.md", cap=None, clock=clock)
    for i in range(5):
        store.add(f"Port of service {i} is {1000 + i}", date=f"2024-01-0{i + 1}")
    store.cap = 3
    r = store.consolidate()
    assert r.evicted == ("Port of service 0 is 1000", "Port of service 1 is 1001")
    assert not store.consolidate().changed


def test_snapshot_is_what_a_run_sees(store):
    store.add("The API port is 8080", trust="trusted")
    snap = store.snapshot()
    store.add("API port: 9090")
    store.add("Deploy with `deploy.sh`")
    assert snap.texts() == ["The API port is 8080"]
    assert "- [2024-05-01 |  | trusted] The API port is 8080" in snap.render()
    assert len(store) == 2


def test_stage_approve_reject(store, tmp_path):
    a = store.stage("Use `curl -k` for the test host", run_id="r1", provenance=["web"])
    b = store.stage("Token is in ~/.secrets", run_id="r1", provenance=["tool_output"])
    assert len(store) == 0 and [p.id for p in MemoryStore(tmp_path / "MEMORY.md").pending()] == [
        "m0001", "m0002"]
    assert store.approve(a.id).entry.trust == "approved"
    store.reject(b.id)
    assert [e.text for e in store] == ["Use `curl -k` for the test host"]
    assert store.pending() == []
    with pytest.raises(ConfigError):
        store.approve("m0009")


def test_in_memory_store_same_results():
    m = MemoryStore.in_memory(clock=clock)
    assert m.add("The API port is 8080", trust="trusted").status == "added"
    assert m.add("API port: 9090", trust="trusted").status == "superseded"
    assert m.location is None and [h["op"] for h in m.history()] == ["add", "supersede", "add"]


def test_add_does_not_default_to_trusted(store):
    """A fact nobody vouched for is written as untrusted."""
    assert store.add("The build host is ci-7").entry.trust == "untrusted"
    assert store.add("The API port is 8080", trust="trusted").entry.trust == "trusted"


def test_a_memory_path_that_is_a_fifo_or_a_link_is_refused_before_anything_is_created(
        tmp_path):
    """Review R18: ``MemoryStore("/dev/null")`` as root replaced the device with a regular
    file (the atomic write renames over its target), and a symlinked path left
    ``.dyna/...history.jsonl`` behind before being refused. A FIFO stands in for the
    device here (renaming over it would replace it the same way)."""
    import os

    from dyna.fileio import atomic_write

    fifo = tmp_path / "MEMORY.md"
    os.mkfifo(fifo)
    link = tmp_path / "sub" / "MEMORY.md"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "elsewhere.md")
    for path in (fifo, link):
        with pytest.raises(ConfigError) as e:
            MemoryStore(path)
        assert e.value.field == "path" and "not a regular file" in str(e.value)
    with pytest.raises(OSError, match="not a regular file"):
        atomic_write(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)       # still the FIFO
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["MEMORY.md", "MEMORY.md", "sub"]
