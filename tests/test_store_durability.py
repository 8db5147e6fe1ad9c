"""An acknowledged write is durable, or the caller is told (issue 14, part 4).

A full disk is simulated with ``PRAGMA max_page_count`` on the store's own connection: a
write that does not fit fails inside SQLite exactly as it would with no space left.
"""

import numpy as np
import pytest

from dyna.buffer import ExperienceBuffer
from dyna.errors import ConfigError, StoreError, StoreWriteError
from dyna.experience import ExperienceStore
from dyna.store.sqlite import SQLiteStore

DIM = 4
PAD = "x" * 600  # about a sixth of a 4 KiB page per episode


def ep(i, task="triage", **kw):
    return dict(task_type=task, action_type="retry", outcome=("success", "failure")[i % 2],
                reward=float(i), timestamp=1_700_000_000.0 + i, metadata={"pad": PAD, "i": i},
                **kw)


def fill_disk(store, extra_pages):
    """Let the file grow by ``extra_pages`` pages at most (a nearly full disk)."""
    conn = store._db._conn
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + extra_pages}")


def test_disk_full_every_acknowledged_episode_is_on_disk_and_failures_raise(tmp_path):
    path = tmp_path / "x.db"
    s = ExperienceStore(path, dim=DIM)
    fill_disk(s, 3)
    acked, raised = [], []
    for i in range(61):
        try:
            acked.extend(s.record("t1", **ep(i))["ids"])
        except StoreWriteError as exc:
            raised.append(exc)
    # the file filled up part way: some writes were acknowledged, the rest raised
    assert 0 < len(acked) < 61 and len(acked) + len(raised) == 61
    assert acked == list(range(len(acked)))
    exc = raised[0]
    assert isinstance(exc, StoreError) and isinstance(exc, OSError)
    assert exc.path == str(path) and exc.detail == "database or disk is full"
    assert str(exc) == f"DB={path}: write failed (database or disk is full); nothing of it was stored"
    # memory holds exactly what the file holds: rows, competence, status
    assert len(s) == len(acked)
    comp = s.get_competence("t1")["competence"][0]
    assert comp["n_success"] + comp["n_failure"] == len(acked)
    assert s.persistence_status == "write_degraded"
    assert s.get_stats()["n_unpersisted"] == 0
    s.close()  # nothing unflushed: no error
    again = ExperienceStore(path, dim=DIM)
    assert len(again) == len(acked)
    assert again.buffer.column("id").tolist() == acked
    again.close()


def test_disk_full_batch_leaves_no_trace_in_memory_and_ids_are_given_again(tmp_path):
    path = tmp_path / "x.db"
    s = ExperienceStore(path, dim=DIM)
    assert s.record("t1", episodes=[ep(i) for i in range(3)])["ids"] == [0, 1, 2]
    s.query_similar("t1", k=2, task_type="triage", metadata={"i": 1})  # builds row lists
    fill_disk(s, 1)
    with pytest.raises(StoreWriteError, match="database or disk is full"):
        s.record("t1", episodes=[ep(i, task="brand-new", run_id=f"r{i}") for i in range(40)])
    buf = s.buffer
    assert len(buf) == 3 and buf.next_id == 3
    assert buf.code("task_type", "brand-new") == -1 and buf.code("run_id", "r0") == -1
    assert buf.column("run_id").tolist() == [0, 0, 0]
    assert s.list_task_types("t1")["task_types"][0]["n_episodes"] == 3
    res = s.query_similar("t1", k=10, metadata={"i": 1})["results"]
    assert sorted(r["episode"]["id"] for r in res) == [0, 1, 2]
    # space again: the next write gets the ids the failed one would have had
    s._db._conn.execute("PRAGMA max_page_count = 1073741823")
    out = s.record("t1", **ep(3, run_id="later"))
    assert out["ids"] == [3] and s.persistence_status == "ok"
    assert s.buffer.column("run_id").tolist() == [0, 0, 0, s.buffer.code("run_id", "later")]
    s.close()
    again = ExperienceStore(path, dim=DIM)
    assert again.buffer.column("id").tolist() == [0, 1, 2, 3]
    again.close()


def test_read_only_file_raises_and_keeps_nothing(tmp_path):
    s = ExperienceStore(tmp_path / "x.db", dim=DIM)
    s.record("t1", **ep(0))
    s._db._conn.execute("PRAGMA query_only = ON")
    with pytest.raises(StoreWriteError, match="readonly|read-only|query_only"):
        s.record("t1", **ep(1))
    assert len(s) == 1 and s.persistence_status == "write_degraded"
    s._db._conn.execute("PRAGMA query_only = OFF")
    assert s.record("t1", **ep(2))["ids"] == [1]
    assert s._db.read()["id"].tolist() == [0, 1] and s.persistence_status == "ok"
    s.close()


def test_close_raises_when_something_was_not_written(tmp_path, monkeypatch):
    path = tmp_path / "x.db"
    s = ExperienceStore(path, dim=DIM)
    s.record("t1", **ep(0))
    fill_disk(s, 0)

    def broken(self, mark):
        raise RuntimeError("rollback failed")

    monkeypatch.setattr(ExperienceBuffer, "rollback", broken)
    with pytest.raises(RuntimeError):
        s.record("t1", episodes=[ep(i) for i in range(1, 41)])
    assert s.get_stats()["n_unpersisted"] == 40
    with pytest.raises(StoreWriteError, match="40 episodes in memory were never written"):
        s.close()
    monkeypatch.undo()
    again = ExperienceStore(path, dim=DIM)
    assert len(again) == 1
    again.close()


def test_sqlite_close_rolls_back_and_raises_on_an_open_transaction(tmp_path):
    schema = [("tenant_id", "str"), ("task_type", "str"), ("timestamp", "float")]
    st = SQLiteStore(tmp_path / "s.db", schema, DIM)
    st.append({"tenant_id": ["a"], "task_type": ["k"], "timestamp": [1.0]})
    st._conn.execute("BEGIN")
    st._conn.execute("INSERT INTO episodes (id, tenant_id, task_type, timestamp) "
                     "VALUES (5, 'a', 'k', 2.0)")
    with pytest.raises(StoreWriteError, match="uncommitted transaction"):
        st.close()
    st.close()  # idempotent
    assert SQLiteStore(tmp_path / "s.db", schema, DIM).count() == 1


def test_sqlite_append_on_full_disk_raises_and_writes_nothing(tmp_path):
    schema = [("tenant_id", "str"), ("task_type", "str"), ("timestamp", "float"),
              ("metadata", "json")]
    st = SQLiteStore(tmp_path / "s.db", schema, DIM)
    st.append({"tenant_id": ["a"], "task_type": ["k"], "timestamp": [1.0],
               "metadata": ["{}"]})
    pages = st._conn.execute("PRAGMA page_count").fetchone()[0]
    st._conn.execute(f"PRAGMA max_page_count = {pages}")
    n = 200
    with pytest.raises(StoreWriteError) as e:
        st.append({"tenant_id": ["a"] * n, "task_type": ["k"] * n, "timestamp": [2.0] * n,
                   "metadata": [f'"{PAD}"'] * n})
    assert e.value.path == str(tmp_path / "s.db") and st.status == "write_degraded"
    assert st.count() == 1 and st.next_id() == 1


def test_buffer_rollback_restores_rows_ids_labels_and_blank_columns():
    buf = ExperienceBuffer(DIM, capacity=2)
    buf.record_batch(reward=[1.0, 2.0], tenant_id="a", task_type="x", action_type="u",
                     outcome="s")
    mark = buf.savepoint()
    # new labels, a first value in an optional column, growth past the capacity
    buf.record_batch(reward=[3.0, 4.0, 5.0], tenant_id="b", task_type=["y", "z", "y"],
                     action_type="u", outcome="s", run_id="r1",
                     metadata=[{"k": 1}, None, {"k": 3}])
    assert buf.rollback(mark) == 3
    assert len(buf) == 2 and buf.next_id == 2
    assert buf.categories("tenant_id") == ("", "a") and buf.categories("run_id") == ("",)
    assert buf.code("task_type", "y") == -1
    # a later batch without run_id must not show the removed rows' codes or texts
    ids = buf.record_batch(reward=[6.0, 7.0, 8.0], tenant_id="a", task_type="x",
                           action_type="u", outcome="s")
    assert ids.tolist() == [2, 3, 4]
    assert buf.column("run_id").tolist() == [0] * 5
    assert buf.column("metadata").tolist() == [None] * 5
    assert buf.column("reward").tolist() == [1.0, 2.0, 6.0, 7.0, 8.0]
    rows, _ = buf.search(np.ones(DIM), 10, tenant_id="a")
    assert sorted(rows.tolist()) == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match="ring"):
        ExperienceBuffer(DIM, capacity=4, ring=True).savepoint()
