"""The fast single write of ExperienceStore.record.

One episode recorded with keyword fields goes straight to the file
(:meth:`dyna.store.sqlite.SQLiteStore.append_row`) when it is plain (labels known, finite
numbers); the stored row must be byte-for-byte the one the general batch path stores, the
same inputs must be refused with the same errors, and the buffer reads the row back on the
next operation.
"""

import numpy as np
import pytest

from conftest import stored_table
from dyna.errors import ConfigError
from dyna import experience
from dyna.experience import ExperienceStore

DIM = 4


def _plain(i):
    """Episodes of every shape the fast path takes (and a few it hands on)."""
    eps = [
        dict(task_type="k", action_type="a", outcome="success", reward=1.0, timestamp=10.0,
             state_features=[1.0, 2.0, 3.0, 4.0]),
        dict(task_type="k", action_type="a", outcome="failure", reward=0,   # int reward
             state_before={"x": i, "api_key": "sk-live-123", "deep": {"token": "t"}},
             metadata={"note": "ghp_" + "a" * 36}),                           # no features: hashed
        dict(task_type="k", action_type="a", outcome="success", reward=2.5, run_id="",
             task_id=None, state_after=None, state_features=np.arange(4, dtype=np.float64)),
        dict(task_type="k2", action_type="a", outcome="success", reward=1.0),  # new label
        dict(task_type="k2", action_type="b", outcome="success", reward=-3.0, timestamp=None,
             action_taken={"tool": "x", "args": [1, 2, {"password": "p"}]}),
        dict(task_type="k", action_type="a", outcome="success", reward=1.0,
             state_features=[1, 0, 0, 0]),                                      # ints
    ]
    return eps[i % len(eps)]


_rows = stored_table


def test_fast_single_write_stores_the_rows_of_the_batch_path(persistent_target, second_target,
                                                              monkeypatch):
    """On SQLite and on PostgreSQL (each backend has its own append_row)."""
    calls = []
    fast_target, slow_target = persistent_target, second_target
    fast = ExperienceStore(fast_target, dim=DIM, clock=lambda: 77.0)
    slow = ExperienceStore(slow_target, dim=DIM, clock=lambda: 77.0)
    backend = type(fast._db)
    real = backend.append_row
    monkeypatch.setattr(backend, "append_row",
                        lambda self, row: calls.append(1) or real(self, row))
    for i in range(18):
        a = fast.record("t1", **_plain(i))["ids"]
        b = slow.record("t1", episodes=[_plain(i)])["ids"]
        assert a == b == [i]
    assert _rows(fast_target) == _rows(slow_target)
    # the first episode and the first with each new label took the general path
    assert len(calls) == 18 - 4
    q = [1.0, 0.5, 0.0, 0.0]
    assert fast.query_similar("t1", k=18, state_features=q) == \
        slow.query_similar("t1", k=18, state_features=q)
    assert fast.get_competence("t1") == slow.get_competence("t1")
    fresh = ExperienceStore(fast_target, dim=DIM, read_only=True)
    assert fast.buffer.column("features").tobytes() == fresh.buffer.column("features").tobytes()
    assert fast.buffer.column("state_before").tolist() == \
        fresh.buffer.column("state_before").tolist()
    assert "sk-live-123" not in str(_rows(fast_target))
    fresh.close(), fast.close(), slow.close()


@pytest.mark.parametrize("bad", [
    {"reward": float("nan")}, {"reward": True}, {"reward": 10 ** 400}, {"reward": None},
    {"timestamp": float("inf")}, {"state_features": [1.0, 2.0]},
    {"state_features": [1.0, 2.0, float("nan"), 0.0]}, {"state_features": None},
    {"state_features": "abcd"}, {"run_id": b"bytes"}, {"task_type": ""},
    {"nonsense": 1}, {"state_before": {"x": "lone surrogate"}},
])
def test_refusals_are_the_general_paths(tmp_path, bad, monkeypatch):
    """An episode the fast path does not take is refused by the general path, with the
    error a single record raised before the fast path existed (fast path switched off)."""
    store = ExperienceStore(tmp_path / "s.db", dim=DIM)
    base = dict(task_type="k", action_type="a", outcome="success", reward=1.0,
                state_features=[1.0, 0.0, 0.0, 0.0])
    store.record("t1", **base)
    ep = {**base, **bad}
    if "state_before" in bad:
        ep["state_before"] = {"x": "\ud800"}
    errs = []
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(experience, "fast_row", lambda *a, **k: None)
        with pytest.raises(ConfigError) as e:
            store.record("t1", **ep)
        errs.append((e.value.field, str(e.value)))
    assert errs[0] == errs[1]
    assert store.get_stats()["n_records"] == 1 and len(store) == 1
    store.close()


def test_fast_write_is_seen_by_the_next_read_and_by_other_handles(persistent_target):
    a = ExperienceStore(persistent_target, dim=DIM)
    b = ExperienceStore(persistent_target, dim=DIM)
    ep = dict(task_type="k", action_type="a", outcome="success", reward=1.0,
              state_features=[0.0, 1.0, 0.0, 0.0])
    a.record("t1", **ep)
    for _ in range(3):
        a.record("t1", **ep)
        assert a.get_competence("t1", "k")["competence"][0]["n_success"] == len(a._live.buf)
    assert len(a) == len(b) == 4
    assert [r["episode"]["id"] for r in b.query_similar("t1", k=9, state_features=[0, 1, 0, 0])
            ["results"]] == [3, 2, 1, 0]            # ties by recency
    a.close(), b.close()


def test_ids_of_deleted_rows_are_never_given_again(persistent_target):
    """Single-row inserts leave the next_id counter alone; a delete moves it past every
    stored id first, so the id of a deleted newest row is not reused (by either path)."""
    s = ExperienceStore(persistent_target, dim=DIM)
    ep = dict(task_type="k", action_type="a", outcome="success", reward=1.0,
              state_features=[1.0, 0.0, 0.0, 0.0])
    assert [s.record("t1", **ep)["ids"][0] for _ in range(3)] == [0, 1, 2]
    assert s._db.next_id() == 3
    s.record("t1", **{**ep, "run_id": "gone"})        # new label: general path, id 3
    s.record("t1", **{**ep, "run_id": "gone"})        # fast path, id 4
    assert s.delete_data("t1", run_id="gone") == {"deleted": 2}
    assert s.record("t1", **ep)["ids"] == [5]                      # fast path
    assert s.record("t1", episodes=[ep])["ids"] == [6]             # general path
    assert s.buffer.column("id").tolist() == [0, 1, 2, 5, 6]
    s.close()


@pytest.mark.usefixtures("tau_bench_formats")
def test_secret_corpus_recorded_one_by_one_through_the_fast_write(tmp_path, monkeypatch):
    """Every format of tests/data/secret_corpus.txt planted in the four dict fields of
    episodes recorded one at a time with labels the store knows, so that each one takes
    the fast single write (counted), never reaches the file or its -wal in clear (review
    R19b: the one-by-one planting of test_store_secrets gives each episode new run and
    request ids, so it only ever took the general path)."""
    from dyna.store.sqlite import SQLiteStore
    from test_store_secrets import SECRETS, _free_text_episode, _leaked
    calls = []
    real = SQLiteStore.append_row
    monkeypatch.setattr(SQLiteStore, "append_row",
                        lambda self, row: calls.append(1) or real(self, row))
    db = tmp_path / "s.db"
    store = ExperienceStore(db, dim=8)
    store.record("acme", **_free_text_episode(0, "no secret"))     # labels now known
    assert calls == []
    for _, text, _ in SECRETS:
        store.record("acme", **_free_text_episode(0, text))
    assert len(calls) == len(SECRETS) >= 60
    assert _leaked(db) == []
    store.close()
    assert _leaked(db) == []
    with ExperienceStore(db, dim=8, read_only=True) as again:
        assert len(again) == len(SECRETS) + 1
        assert "[REDACTED]" in again.buffer.column("metadata")[1]
