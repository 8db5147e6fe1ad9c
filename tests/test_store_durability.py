"""An acknowledged write is durable, or the caller is told.

A full disk is simulated with ``PRAGMA max_page_count`` on the store's own connection: a
write that does not fit fails inside SQLite exactly as it would with no space left.
"""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dyna.buffer import ExperienceBuffer
from dyna.cli import main
from dyna.errors import ConfigError, StoreError, StoreWriteError
from dyna.experience import ExperienceStore
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import run_experiment
from dyna.fileio.tempfiles import (clean_orphans, host_tag, is_live, owner,
                                  process_start_time)
from dyna.store.jsonl import BATCH_KEY, append_jsonl, read_jsonl, write_jsonl
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
    assert str(exc) == (f"DB={path}: write failed (database or disk is full); nothing of it "
                        "was stored")
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


# ============================================================== JSON Lines batches
def _batches(n_batches, size):
    return [[{"b": b, "j": j, "n": size, "text": "é" * (j % 3)} for j in range(size)]
            for b in range(n_batches)]


def test_jsonl_batch_cut_at_every_byte_reads_all_or_nothing(tmp_path):
    path = tmp_path / "log.jsonl"
    first, last = _batches(2, 4)
    append_jsonl(path, first)
    start = path.stat().st_size
    append_jsonl(path, last)
    data = path.read_bytes()
    cut = tmp_path / "cut.jsonl"
    partial, dropped, whole = 0, 0, 0
    for end in range(start, len(data) + 1):
        cut.write_bytes(data[:end])
        recs, rep = read_jsonl(cut)
        seen = [r for r in recs if r["b"] == 1]
        if recs[:4] != first or seen not in ([], last):
            partial += 1
        whole += seen == last
        dropped += len(rep.dropped_batches) == 1
        # the next append after the kill starts a fresh batch that reads back whole
        append_jsonl(cut, [{"b": 2, "j": 0, "n": 1}])
        again, _ = read_jsonl(cut)
        assert again[-1] == {"b": 2, "j": 0, "n": 1}
        assert [r for r in again if r["b"] == 1] in ([], last)
    assert partial == 0
    assert whole == 1  # only the uncut file holds the last batch
    n_cuts = len(data) - start + 1
    header_len = data.index(b"\n", start) + 1 - start
    # cuts after the header line and before the end drop the batch and say so; cuts
    # inside the header leave a torn line, skipped
    assert dropped == n_cuts - 1 - header_len


def test_jsonl_report_names_dropped_batches(tmp_path):
    path = tmp_path / "log.jsonl"
    append_jsonl(path, [{"a": 1}])
    append_jsonl(path, [{"a": 2}, {"a": 3}, {"a": 4}])
    lines = path.read_bytes().splitlines(keepends=True)
    # batch 2 lost its last line (killed writer), then a later batch was appended
    path.write_bytes(b"".join(lines[:-1]))
    append_jsonl(path, [{"a": 5}])
    # a record line changed later: the checksum tells
    append_jsonl(path, [{"a": 6}, {"a": 7}])
    data = path.read_bytes().replace(b'{"a":7}', b'{"a":8}')
    path.write_bytes(data)
    recs, rep = read_jsonl(path)
    assert recs == [{"a": 1}, {"a": 5}]
    assert [(line, k) for line, k, _ in rep.dropped_batches] == [(3, 2), (8, 2)]
    assert rep.dropped_batches[0][2].startswith("incomplete batch: 2 of 3 lines")
    assert rep.dropped_batches[1][2].startswith("checksum mismatch")
    d = rep.to_dict()
    assert d["n_dropped_batches"] == 2 and d["n_dropped_records"] == 4
    assert rep.n_skipped == 0 and rep.n_records == 2


def test_jsonl_plain_lines_still_read_and_header_lookalike_refused(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n')
    assert read_jsonl(path)[0] == [{"a": 1}, {"a": 2}]
    with pytest.raises(ConfigError, match=r"records\[1\]"):
        append_jsonl(path, [{"a": 3}, {BATCH_KEY: {"n": 1, "sha256": "0" * 64}}])
    assert read_jsonl(path)[0] == [{"a": 1}, {"a": 2}]


CHILD_APPENDS = """
import sys
from dyna.store.jsonl import append_jsonl
path, size, life = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for b in range(1000):
    print(b, flush=True)
    append_jsonl(path, [{"life": life, "b": b, "j": j, "pad": "x" * 200} for j in range(size)],
                 fsync=False)
"""


def test_jsonl_child_killed_mid_write_leaves_no_partial_batch(tmp_path):
    path = tmp_path / "kill.jsonl"
    size = 5000  # ~1.2 MB a batch, so the kill lands inside a write
    for life in range(3):
        p = subprocess.Popen([sys.executable, "-c", CHILD_APPENDS, str(path), str(size),
                              str(life)],
                             stdout=subprocess.PIPE, text=True)
        for line in p.stdout:
            if int(line) == 2 + life:  # batches 0.. are written; this one is under way
                break
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=30)  # reads to the end and closes the pipe
        assert p.returncode == -signal.SIGKILL
    recs, rep = read_jsonl(path)
    counts = {}
    for r in recs:
        counts[r["life"], r["b"]] = counts.get((r["life"], r["b"]), 0) + 1
    assert set(counts.values()) == {size}  # every batch read is whole
    for life in range(3):  # the batches each life finished are all there
        assert {b for lf, b in counts if lf == life} >= set(range(2 + life))
    assert rep.n_records == len(recs) == size * len(counts)


# ============================================================== orphaned temporaries
def _dead_owner():
    """(pid, start time) of a process that has ended."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                         stdin=subprocess.PIPE)
    start = process_start_time(p.pid)
    p.communicate(b"")
    assert process_start_time(p.pid) is None
    return p.pid, start


def _plant(folder, name, *, as_dir):
    """Temporaries of target ``name``: a dead owner's, a live one's (this process, true
    start time), a reused pid's (this pid, another start time), an ownerless one (older
    versions), another target's."""
    dead_pid, dead_start = _dead_owner()
    pid, start = owner()
    here = host_tag()
    elsewhere = "0123abcd" if here != "0123abcd" else "fedc9876"
    names = {}
    for key, (p, s, h) in {"dead": (dead_pid, dead_start, here),
                           "live": (pid, start, here),
                           "reused": (pid, start + 1, here),
                           # a dead pid here, but written on another host or in another
                           # container: its pid says nothing here, so it is kept
                           "foreign": (dead_pid, dead_start, elsewhere)}.items():
        names[key] = (f".{name}.tmp-{p}-{s}-{h}-{key}1" if as_dir
                      else f".{name}.{p}-{s}-{h}.{key}1.tmp")
    names["ownerless"] = f".{name}.tmp-ab12cd34" if as_dir else f".{name}.ab12cd34.tmp"
    names["other"] = (f".other.tmp-{dead_pid}-{dead_start}-{here}-x" if as_dir
                      else f".other.{dead_pid}-{dead_start}-{here}.x.tmp")
    for n in names.values():
        if as_dir:
            (folder / n).mkdir()
            (folder / n / "results.parquet").write_bytes(b"partial")
        else:
            (folder / n).write_bytes(b"partial")
    return names


def test_export_removes_only_temporaries_of_writers_that_are_gone(tmp_path):
    db = tmp_path / "x.db"
    with ExperienceStore(db, dim=DIM) as s:
        s.record("t1", episodes=[ep(i) for i in range(3)])
    out = tmp_path / "out"
    out.mkdir()
    names = _plant(out, "e.jsonl", as_dir=False)
    assert main(["store", "export", str(db), "--tenant", "t1", "--out",
                 str(out / "e.jsonl")]) == 0
    left = sorted(p.name for p in out.iterdir())
    assert left == sorted(["e.jsonl", names["live"], names["foreign"], names["ownerless"],
                           names["other"]])


def test_killed_export_leaves_a_temporary_the_next_export_removes(tmp_path):
    target = tmp_path / "e.jsonl"
    child = textwrap.dedent(f"""
        import time
        from dyna.fileio import atomic_target
        with atomic_target({str(target)!r}) as tmp:
            open(tmp, "w").write("partial")
            print(tmp, flush=True)
            time.sleep(120)
    """)
    p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    tmp = p.stdout.readline().strip()
    # while it runs, another export of the same file leaves its temporary alone
    write_jsonl(target, [{"a": 1}])
    assert os.path.exists(tmp)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)  # reads to the end and closes the pipe
    write_jsonl(target, [{"a": 2}])
    assert not os.path.exists(tmp)
    assert sorted(q.name for q in tmp_path.iterdir()) == ["e.jsonl"]


def test_dyna_run_removes_only_temporary_folders_of_runs_that_are_gone(tmp_path):
    cfg = parse_experiment({
        "name": "tiny", "seed": 5, "runs": 1, "env": {"id": "dyna/DynaMaze-v0"},
        "schedule": {"episodes": 2, "eval_every": 2, "eval_episodes": 1},
        "defaults": {"agent": "dyna_q", "alpha": 0.1, "gamma": 0.95, "epsilon": 0.1},
        "variants": [{"name": "n=0", "n_planning": 0}]})
    names = _plant(tmp_path, "out", as_dir=True)
    run_experiment(cfg, tmp_path / "out", progress=False)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["out", names["live"], names["foreign"], names["ownerless"],
                           names["other"]])


def test_owner_is_read_from_proc_stat_field_22():
    pid, start = owner()
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    assert pid == os.getpid() and start == int(fields[19]) and start > 0
    assert is_live(pid, start) and not is_live(pid, start + 1)
    assert clean_orphans("/nonexistent/folder/x") == []
