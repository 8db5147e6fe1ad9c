"""MemoryStore.find and .relations read an index of the stored facts (by key, by attribute
subject), rebuilt when the facts change: they give what the linear definitions give, the
very objects stored now, after every kind of write and after another writer's change."""

import random

import pytest

from dyna.loops.memory import MemoryStore, relation
from dyna.loops._text import fact_key

SUBJECTS = ["The API port", "API port", "The deploy queue", "The cache", "The db host",
            "nigo nepi step 1 value", "nigo nepi step 2 tool"]
VALUES = ["8080", "9090", "FIFO", "paused on Fridays", "redis", "memcached",
          "db-1.internal", "val_1", "val_2", "tool_a"]


def _facts(rng, n):
    out = []
    for _ in range(n):
        s, v = rng.choice(SUBJECTS), rng.choice(VALUES)
        out.append(rng.choice([f"{s} is {v}", f"{s}: {v}", f"{s.lower()} is {v}.",
                               f"no subject form here {v}"]))
    return out


def _check(store, texts):
    entries = store.entries()
    for t in texts:
        want = next((e for e in entries if e.key == fact_key(t)), None)
        got = store.find(t)
        assert got is want, t
        rels = [(e, r) for e in entries
                for r in (relation(t, e.text),) if r in ("conflict", "restated", "unsure")]
        got_rels = store.relations(t)
        assert len(got_rels) == len(rels), t
        assert all(a is e and b == r for (a, b), (e, r) in zip(got_rels, rels)), t


@pytest.mark.parametrize("where", ["memory", "file"])
def test_find_and_relations_equal_the_linear_scan(where, tmp_path):
    rng = random.Random(16)
    store = (MemoryStore.in_memory() if where == "memory"
             else MemoryStore(tmp_path / "MEMORY.md"))
    probes = _facts(rng, 40)
    n_rel = 0
    for i, text in enumerate(_facts(rng, 120)):
        op = rng.random()
        if op < 0.75:
            store.add(text, trust="trusted", run_id=f"r{i}", approval=False)
        elif store.entries() and op < 0.9:
            store.remove(rng.choice(store.entries()).text, run_id=f"r{i}")
        else:
            store.consolidate(run_id=f"r{i}")
        _check(store, probes[:10] + [text])
        n_rel += len(store.relations(text))
    assert n_rel > 50 and len(store) > 5   # the comparisons met related facts


def test_index_follows_another_writer(tmp_path):
    path = tmp_path / "MEMORY.md"
    a, b = MemoryStore(path), MemoryStore(path)
    a.add("The API port is 8080", trust="trusted", run_id="r1")
    assert a.find("the API port is 8080.") is a.entries()[0]
    b.add("The API port is 9090", trust="trusted", run_id="r2", approval=False)  # supersedes
    a.reload()
    assert [e.text for e in a.entries()] == ["The API port is 9090"]
    assert a.find("The API port is 8080") is None
    rel = a.relations("The API port is 7070")
    assert [(e.text, r) for e, r in rel] == [("The API port is 9090", "conflict")]
    assert rel[0][0] is a.entries()[0]   # the fact read again, not the one indexed before


def test_rereading_unchanged_facts_keeps_the_tuple():
    store = MemoryStore.in_memory()
    store.add("The cache is redis", trust="trusted", run_id="r1")
    before = store.entries()
    assert store.add("the cache is redis.", trust="trusted", run_id="r2").status == "duplicate"
    assert store.entries() is before          # nothing changed: the same tuple
    store.add("The db host is db-1.internal", trust="trusted", run_id="r3")
    assert store.entries() is not before and len(store.entries()) == 2


def test_index_rebuilt_for_facts_read_again_with_the_same_text(tmp_path):
    # the same text read again from the file is another object: find and relations give
    # the objects stored now (a write removes facts by identity)
    import os
    path = tmp_path / "MEMORY.md"
    a = MemoryStore(path)
    a.add("The API port is 8080", trust="trusted", run_id="r1")
    old = a.find("The API port is 8080")
    data = path.read_bytes()
    path.write_bytes(data)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    a.reload()
    now = a.entries()[0]
    assert now == old and now is not old
    assert a.find("The API port is 8080") is now
    assert a.relations("API port: 9090")[0][0] is now
    res = a.add("The API port is 9090", trust="trusted", run_id="r2", approval=False)
    assert res.status == "superseded"
    assert [e.text for e in a.entries()] == ["The API port is 9090"]
