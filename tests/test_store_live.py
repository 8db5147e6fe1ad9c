"""The live view of a store shared by connections and processes.

Store interface: change tokens (``data_version``, ``generation``), reads since an id, SQL
stats, the ``on_write`` hook, and migration of a version-1 file written by earlier code.
"""

import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import open_backend
from dyna.errors import StoreError
from dyna.store import sqlite as sq
from dyna.store.sqlite import SQLiteStore

SCHEMA = [("tenant_id", "str"), ("task_type", "str"), ("outcome", "str"), ("reward", "float"),
          ("timestamp", "float"), ("run_id", "str"), ("metadata", "json"),
          ("features", "vector")]
DIM = 4
DATA = Path(__file__).parent / "data"


def batch(n, start=0, tenant="t1"):
    i = np.arange(start, start + n)
    return {"tenant_id": [tenant] * n, "task_type": [f"task{j % 3}" for j in i],
            "outcome": ["success" if j % 2 else "failure" for j in i],
            "reward": i * 0.5, "timestamp": i.astype(float),
            "run_id": [f"r{j // 10}" for j in i],
            "metadata": [f'{{"i": {j}}}' for j in i],
            "features": np.tile(i[:, None].astype(np.float32), (1, DIM))}


def test_change_tokens_and_reads_since_an_id(tmp_path):
    path = tmp_path / "s.db"
    a = SQLiteStore(path, SCHEMA, DIM)
    b = SQLiteStore(path, SCHEMA, DIM)
    a.append(batch(3))
    v0 = b.data_version()
    own = a.data_version()
    a.append(batch(2, start=3))
    assert b.data_version() != v0          # another connection committed
    assert a.data_version() == own         # its own commits never change its token
    assert b.read(after_id=2, columns=["reward"])["id"].tolist() == [3, 4]
    assert b.read(after_id=4)["id"].tolist() == []
    assert b.max_id() == 4 and b.generation() == 0
    # inserts never bump the generation; a delete of 0 rows neither; one of 2 rows does
    assert a.delete({"run_id": "none"}) == 0 and b.generation() == 0
    assert a.delete({"task_type": "task0"}) == 2          # ids 0 and 3
    assert b.generation() == 1 == a.last_generation
    assert a.prune(2.0) == 1 and b.generation() == 2     # id 1 (timestamp 1.0)
    assert a.keep_newest(0) == 2 and b.generation() == 3
    a.append(batch(2, start=5))
    assert a.delete_ids([5]) == 1 and a.reset() == 1 and b.generation() == 5
    assert b.max_id() == -1 and b.next_id() == 7         # ids are never reused
    a.close(), b.close()


def open_store(target):
    """A store-level handle on a SQLite file or a PostgreSQL DSN (both backends)."""
    return open_backend(target, SCHEMA, DIM)


def in_transaction(st) -> bool:
    if isinstance(st, SQLiteStore):
        return st._conn.in_transaction
    from psycopg.pq import TransactionStatus
    return st._conn.info.transaction_status != TransactionStatus.IDLE


def test_snapshot_holds_one_state(persistent_target):
    a, b = open_store(persistent_target), open_store(persistent_target)
    a.append(batch(2))
    with b.snapshot():
        n1 = b.count()
        a.append(batch(3, start=2))      # the writer is not blocked by the reader
        assert b.count() == n1 == 2 and b.max_id() == 1
    assert b.count() == 5
    a.close(), b.close()


def test_on_write_runs_inside_the_write_transaction(persistent_target):
    a, b = open_store(persistent_target), open_store(persistent_target)
    seen = []
    a.on_write = lambda st: seen.append((in_transaction(st), st.max_id()))
    b.append(batch(2))
    a.append(batch(1, start=2))
    a.delete({"run_id": "r0"})
    assert seen == [(True, 1), (True, 2)]
    a.close(), b.close()


def test_sql_summary_and_consumption(persistent_target):
    st = open_store(persistent_target)
    st.append(batch(4))
    st.append(batch(1, start=4, tenant="t2"))
    assert st.summary() == {"n_records": 5, "n_tenants": 2, "n_task_types": 3,
                            "oldest": 0.0, "newest": 4.0}
    assert st.summary({"tenant_id": "t2"}) == {"n_records": 1, "n_tenants": 1,
                                               "n_task_types": 1, "oldest": 4.0,
                                               "newest": 4.0}
    assert st.summary({"tenant_id": "none"})["oldest"] is None
    # bytes of row 0: 8 id + 8 reward + 8 timestamp + 16 vector + "t1" 2 + "task0" 5
    # + "failure" 7 + "r0" 2 + '{"i": 0}' 8 = 64
    cons = st.consumption({"tenant_id": "t1"})
    assert [(c["task_type"], c["records"], c["bytes"]) for c in cons] == \
        [("task0", 2, 64 + 64), ("task1", 1, 64), ("task2", 1, 64)]
    st.close()


def test_version_1_file_of_earlier_code_is_migrated(tmp_path):
    """tests/data/store_v1.sqlite was written by dyna 96f1a68 (make_store_v1.py)."""
    path = tmp_path / "v1.sqlite"
    shutil.copy(DATA / "store_v1.sqlite", path)
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT MAX(version) FROM schema_version").fetchone() == (1,)
    assert raw.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone() is None
    raw.close()
    from dyna.experience import RECORD_SCHEMA
    ro = SQLiteStore(path, RECORD_SCHEMA, 4, read_only=True)   # read-only: not migrated
    assert ro.generation() == 0 and ro.schema_version() == 1 and ro.count() == 7
    ro.close()
    st = SQLiteStore(path, RECORD_SCHEMA, 4)
    assert st.schema_version() == sq.SCHEMA_VERSION == 2
    assert st.generation() == 0 and st.count() == 7 and st.next_id() == 8
    st.close()


# ============================================================================ ExperienceStore
def _episodes(n, start=0, tenant="t1"):
    rng = np.random.default_rng(start)
    return [{"task_type": f"k{(start + i) % 3}", "action_type": f"a{(start + i) % 2}",
             "outcome": "success" if rng.random() < 0.6 else "failure",
             "reward": float(rng.integers(0, 5)), "timestamp": 100.0 + ((start + i) * 7) % 13,
             "run_id": f"r{(start + i) % 4}", "state_before": {"x": int(start + i)},
             "state_features": rng.normal(size=4).round(3).tolist()} for i in range(n)]


def _answers(store, tenant="t1"):
    q = [0.5, -0.2, 0.1, 0.9]
    return {"similar": store.query_similar(tenant, k=7, state_features=q),
            "similar_k1": store.query_similar(tenant, k=5, task_type="k1", state_features=q),
            "competence": store.get_competence(tenant),
            "types": store.list_task_types(tenant),
            "recommend": store.get_recommendation(tenant, state_features=q, k=9),
            "table": store.get_transition_table(tenant, state_key="x", bin_count=3),
            "stats": {k: v for k, v in store.get_stats(tenant).items() if k != "store"},
            "consumption": store.get_data_consumption(),
            "ids": store.buffer.column("id").tolist()}


@pytest.mark.parametrize("discount", [1.0, 0.9])
def test_live_view_answers_equal_a_fresh_open(persistent_target, discount):
    """Another handle's inserts, deletes, prunes and compactions are seen at once, and every
    answer equals the one of a store opened after the change (bit-identical)."""
    from dyna.experience import ExperienceStore
    path = persistent_target
    writer = ExperienceStore(path, dim=4, discount=discount)
    reader = ExperienceStore(path, dim=4, discount=discount)
    assert reader.get_stats("t1")["n_records"] == 0
    reader.get_competence("t1")  # competence cached: must follow the changes too
    steps = [lambda: writer.record("t1", episodes=_episodes(20)),
             lambda: writer.record("t2", episodes=_episodes(5, 50, tenant="t2")),
             lambda: writer.record("t1", episodes=_episodes(1, 20)),
             lambda: writer.delete_data("t1", task_type="k2"),
             lambda: writer.record("t1", episodes=_episodes(6, 21)),
             lambda: writer.prune_old(0.0, now=105.0),
             lambda: writer.compact(3, tenant_id="t1"),
             lambda: writer.record("t1", episodes=_episodes(4, 27)),
             lambda: writer.compact(2),
             lambda: writer.reset(all_tenants=True),
             lambda: writer.record("t1", episodes=_episodes(3, 31))]
    for step in steps:
        step()
        fresh = ExperienceStore(path, dim=4, discount=discount, read_only=True)
        assert _answers(reader) == _answers(fresh)
        fresh.close()
    # the reader writes too: its write first catches up, ids stay unique and ordered
    assert reader.record("t1", **_episodes(1, 40)[0])["ids"] == [39]   # 20+5+1+6+4+3 before
    assert _answers(writer) == _answers(reader)
    assert len(reader) == len(writer) == 4
    writer.close(), reader.close()


def test_own_delete_after_another_process_insert(persistent_target):
    """A delete by this handle applies to rows another handle committed a moment before
    (the write transaction catches the buffer up first), in memory as in the file."""
    from dyna.experience import ExperienceStore
    path = persistent_target
    a, b = ExperienceStore(path, dim=4), ExperienceStore(path, dim=4)
    a.record("t1", episodes=_episodes(6))
    assert b.delete_data("t1", task_type="k0") == {"deleted": 2}   # rows 0 and 3
    assert b._live.buf.column("id").tolist() == [1, 2, 4, 5]            # no reload in between
    a.record("t1", episodes=_episodes(3, 6))
    # timestamps 100 + 7i mod 13: ids 2, 4, 6 (101, 102, 103) are older than 104; 6 is a's
    assert b.prune_old(0.0, now=104.0)["deleted"] == 3
    assert a.buffer.column("id").tolist() == b._live.buf.column("id").tolist() == [1, 5, 7, 8]
    a.close(), b.close()


_CHILD = r"""
import sys
from dyna.experience import ExperienceStore
sys.path.insert(0, sys.argv[2])
from test_store_live import _episodes
store = ExperienceStore(sys.argv[1], dim=4)
n = int(sys.argv[3])
for i in range(n):
    store.record("t1", **_episodes(1, i)[0])
    print(i + 1, flush=True)           # acknowledged, hence committed
print("done", flush=True)
sys.stdin.readline()                   # the reader has asked about every row
store.delete_data("t1", task_type="k0")
print("deleted", flush=True)
store.close()
"""


def test_two_processes_every_answer_counts_every_committed_row(persistent_target):
    """One process records one episode at a time while this one answers get_stats,
    query_similar and get_competence through the MCP server's tool dispatch: each answer
    counts at least every row whose record() had returned before the question."""
    import subprocess
    import sys

    from dyna.experience import MAX_K, ExperienceStore
    from dyna.mcp_server import ExperienceTools
    pytest.importorskip("jsonschema")
    path = persistent_target
    n = 150
    ExperienceStore(path, dim=4).close()
    server = ExperienceStore(path, dim=4)
    tools = ExperienceTools(server, "t1")
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path),
                              str(Path(__file__).parent), str(n)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    q = {"state_features": [1.0, 0.0, 0.0, 0.0], "k": MAX_K}

    def counts():
        stats, err1 = tools.call("get_stats", {})
        sim, err2 = tools.call("query_similar", q)
        comp, err3 = tools.call("get_competence", {})
        assert not (err1 or err2 or err3)
        n_comp = sum(c["n_success"] + c["n_failure"] for c in comp["competence"])
        return stats["n_records"], len(sim["results"]), int(n_comp)

    asked = 0
    try:
        for line in child.stdout:
            if line.strip() == "done":
                break
            committed = int(line)
            for got in counts():
                assert committed <= got <= n
            asked += 1
        assert counts() == (n, n, n)
        child.stdin.write("delete\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "deleted"
        assert child.wait(timeout=60) == 0
    finally:
        with child:  # closes its pipes and waits for it
            child.kill()
    assert asked == n
    left = n - sum(1 for i in range(n) if i % 3 == 0)        # k0 deleted by the child
    assert counts() == (left, left, left)
    fresh = ExperienceStore(path, dim=4, read_only=True)
    assert server.query_similar("t1", **q) == fresh.query_similar("t1", **q)
    assert server.get_competence("t1") == fresh.get_competence("t1")
    fresh.close(), server.close()


def test_read_only_handle_follows_a_writer(tmp_path):
    """A read-only open (dyna mcp --read-only, dyna store export) follows the live view too:
    inserts, fast single writes and deletes by a writer, without writing the file."""
    from dyna.experience import ExperienceStore
    path = tmp_path / "s.db"
    w = ExperienceStore(path, dim=4)
    w.record("t1", episodes=_episodes(4))
    ro = ExperienceStore(path, dim=4, read_only=True)
    assert len(ro) == 4
    w.record("t1", **_episodes(1, 4)[0])                   # labels known: fast single write
    w.record("t1", episodes=_episodes(2, 5))
    assert ro.get_stats("t1")["n_records"] == len(ro) == 7
    assert w.delete_data("t1", task_type="k1") == {"deleted": 2}     # ids 1 and 4
    assert ro.buffer.column("id").tolist() == [0, 2, 3, 5, 6]
    q = [1.0, 0.0, 0.0, 0.0]
    assert ro.query_similar("t1", k=9, state_features=q) == \
        w.query_similar("t1", k=9, state_features=q)
    ro.close(), w.close()


# ============================================================== damaged or future meta rows
@pytest.mark.parametrize("sql, found", [
    ("DELETE FROM meta WHERE key = 'next_id'", "no 'next_id' counter"),
    ("UPDATE meta SET value = 'zz' WHERE key = 'next_id'", "meta.next_id is 'zz'"),
    ("UPDATE meta SET value = '-3' WHERE key = 'next_id'", "meta.next_id is '-3'"),
    ("UPDATE meta SET value = 'abc' WHERE key = 'generation'", "meta.generation is 'abc'"),
    ("UPDATE meta SET value = '1.5' WHERE key = 'generation'", "meta.generation is '1.5'"),
    ("UPDATE meta SET value = 'four' WHERE key = 'dim'", "meta.dim is 'four'"),
    ("UPDATE meta SET value = '0' WHERE key = 'dim'", "meta.dim is '0'"),
    ("DELETE FROM schema_version", "holds no version"),
])
@pytest.mark.parametrize("read_only", [True, False])
def test_damaged_meta_row_is_refused_typed_and_left_alone(tmp_path, sql, found, read_only):
    """A meta counter that is missing or not an integer is damage (review R19b): it raised a
    bare ValueError, and without next_id a fast write after a delete reused the id of a
    deleted row (MAX with a NULL is NULL; SQLite then took the highest stored id + 1)."""
    from dyna.errors import StoreDamagedError
    path = tmp_path / "s.db"
    st = SQLiteStore(path, SCHEMA, DIM)
    st.append(batch(3))
    st.close()
    raw = sqlite3.connect(path)
    raw.execute(sql)
    raw.commit()
    raw.close()
    before = path.read_bytes()
    with pytest.raises(StoreDamagedError, match=re.escape(found)):
        SQLiteStore(path, SCHEMA, DIM, read_only=read_only)
    assert path.read_bytes() == before


@pytest.mark.parametrize("read_only", [True, False])
def test_store_of_a_future_schema_version_is_refused(tmp_path, read_only):
    path = tmp_path / "s.db"
    SQLiteStore(path, SCHEMA, DIM).close()
    raw = sqlite3.connect(path)
    raw.execute("INSERT INTO schema_version VALUES (99, 0)")
    raw.commit()
    raw.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="schema version 99 is newer than this dyna"):
        SQLiteStore(path, SCHEMA, DIM, read_only=read_only)
    assert path.read_bytes() == before


def test_scrub_of_a_version_1_file_is_seen_by_a_live_reader(tmp_path):
    """A version-1 file has no generation row until a writable open migrates it; scrub's
    rewrite of rows bumped the counter with an UPDATE that matched no row, so a read-only
    handle on it kept the rows in clear it had read before the scrub (review R19b)."""
    from dyna.experience import RECORD_SCHEMA, ExperienceStore
    from dyna.store.scrub import scrub
    path = tmp_path / "v1.sqlite"
    shutil.copy(DATA / "store_v1.sqlite", path)
    secret = "ghp_9sUtE9UzQn2JRXBjNO2Dz7sTKOaYVSb4azlJ"
    raw = sqlite3.connect(path)            # what an older dyna could have stored in clear
    raw.execute("UPDATE episodes SET metadata = ? WHERE id = 2", (f'{{"note": "{secret}"}}',))
    raw.commit()
    raw.close()
    reader = ExperienceStore(path, dim=4, read_only=True)
    assert secret in reader.buffer.column("metadata")[2]
    out = scrub(path, RECORD_SCHEMA)
    assert out["rows_changed"] == 1
    assert reader._db.schema_version() == 1 and reader._db.generation() == 1
    assert reader.buffer.column("metadata")[2] == '{"note":"[REDACTED]"}'
    assert all(secret not in str(v) for v in reader.buffer.column("metadata"))
    reader.close()


_OPEN_IN = r"""
import sys
from dyna.errors import StoreError
from dyna.experience import ExperienceStore
from test_store_live import _episodes
try:
    s = ExperienceStore(sys.argv[1], dim=4, read_only=sys.argv[2] == "ro")
    s.record("t1", **_episodes(1, 9)[0])
except StoreError as exc:
    print(type(exc).__name__, exc)
"""


def _open_in_read_only_folder(folder: Path, mode: str, unwritable=()):
    """Run an open (``mode`` "ro", or "rw" and one record) of ``folder``/s.db in a child
    whose view of ``folder`` is read-only: as root a read-only bind mount in a private
    mount namespace (unshare), otherwise the mode of ``folder`` and of ``unwritable``.
    Returns the child's output (skips when no read-only view can be made)."""
    import os
    import subprocess
    import sys
    run = [sys.executable, "-c", _OPEN_IN, str(folder / "s.db"), mode]
    if os.geteuid() == 0:
        script = ('mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && '
                  'exec "$@"')
        run = ["unshare", "-m", "sh", "-c", script, "sh", str(folder), *run]
    else:
        for p in unwritable:
            p.chmod(0o444)
        if not unwritable:
            folder.chmod(0o555)
    try:
        out = subprocess.run(run, capture_output=True, text=True, timeout=60,
                             cwd=Path(__file__).parent)
    except FileNotFoundError:
        pytest.skip("no unshare binary to make a read-only folder as root")
    finally:
        folder.chmod(0o755)
        for p in unwritable:
            p.chmod(0o644)
    if out.returncode != 0 and "mount" in out.stderr + out.stdout:
        pytest.skip(f"cannot make a read-only folder here: {out.stderr.strip()[:200]}")
    assert out.returncode == 0, out.stderr
    return out.stdout


def _store_in(folder: Path) -> Path:
    from dyna.experience import ExperienceStore
    folder.mkdir()
    w = ExperienceStore(folder / "s.db", dim=4)
    w.record("t1", episodes=_episodes(2))
    w.close()
    assert sorted(p.name for p in folder.iterdir()) == ["s.db"]
    return folder


def test_read_only_open_in_a_folder_it_cannot_write_names_the_wal_companions(tmp_path):
    """A WAL reader needs DB-wal and DB-shm: in a folder it cannot write, with no writer
    holding the store open (no companions), SQLite says only 'unable to open database
    file' (review R19b)."""
    folder = _store_in(tmp_path / "ro")
    out = _open_in_read_only_folder(folder, "ro")
    assert out.startswith("StoreError ")
    assert "s.db-wal and s.db-shm" in out and "is not writable" in out
    assert "only while a writer has the store open" in out
    assert sorted(p.name for p in folder.iterdir()) == ["s.db"]


def test_write_refused_by_unwritable_companions_names_them(tmp_path):
    """A read-only open with no writer attached creates DB-wal and DB-shm and leaves them;
    when another user did it, they are not writable by the store's owner and every write
    failed with only SQLite's 'attempt to write a readonly database' (review R19b)."""
    from dyna.experience import ExperienceStore
    folder = _store_in(tmp_path / "shared")
    ExperienceStore(folder / "s.db", dim=4, read_only=True).close()
    left = [folder / "s.db-wal", folder / "s.db-shm"]
    assert all(p.exists() for p in left)            # SQLite's, not removed by a reader
    out = _open_in_read_only_folder(folder, "rw", unwritable=left)
    assert out.startswith("StoreWriteError ")
    assert "s.db-wal (uid " in out and "s.db-shm (uid " in out
    assert "not writable by this process" in out
    with ExperienceStore(folder / "s.db", dim=4, read_only=True) as ro:
        assert ro.get_stats("t1")["n_records"] == 2      # nothing was written


_MIXED_WRITER = r"""
import random, sys, time
from dyna.experience import ExperienceStore
from test_store_live import _episodes
s = ExperienceStore(sys.argv[1], dim=4)
rng = random.Random(int(sys.argv[2]))
end, i = time.time() + float(sys.argv[3]), 0
while time.time() < end:
    op = rng.random()
    if op < 0.5:
        s.record("t1", **_episodes(1, i)[0])             # the fast single write
    elif op < 0.7:
        s.record("t1", episodes=_episodes(rng.randint(1, 20), i))
    elif op < 0.78:
        s.delete_data("t1", task_type=f"k{rng.randint(0, 2)}")
    elif op < 0.86:
        s.prune_old(0.0, now=100.0 + rng.randint(0, 13))
    elif op < 0.93:
        s.compact(rng.randint(1, 10))
    elif op < 0.96:
        s._db.vacuum()
    else:
        s.reset(all_tenants=True)
    i += 20
s.close()
"""


def test_two_mixed_writers_a_reader_equals_a_fresh_open_and_ids_only_grow(tmp_path):
    """Two processes insert (one by one and in batches), delete, prune, compact, VACUUM and
    reset at random while this one answers through a writable and a read-only handle. At
    each check a held write lock freezes the file: both handles' answers equal a fresh
    open's, and every id not seen before is above every id ever seen (no id reused after a
    delete, reset or VACUUM, none committed below one a reader already saw) (review R19b)."""
    import subprocess
    import sys
    import time

    from dyna.experience import ExperienceStore
    path = tmp_path / "s.db"
    ExperienceStore(path, dim=4).close()
    reader = ExperienceStore(path, dim=4)
    ro = ExperienceStore(path, dim=4, read_only=True)
    kids = [subprocess.Popen([sys.executable, "-c", _MIXED_WRITER, str(path), str(k), "2"],
                             cwd=Path(__file__).parent) for k in range(2)]
    lock = sqlite3.connect(path, isolation_level=None, timeout=30)
    seen: set[int] = set()
    checks = 0
    try:
        while any(k.poll() is None for k in kids):
            lock.execute("BEGIN IMMEDIATE")        # no writer commits during the check
            try:
                ids = [r[0] for r in lock.execute("SELECT id FROM episodes ORDER BY id")]
                with ExperienceStore(path, dim=4, read_only=True) as fresh:
                    want = _answers(fresh)
                assert _answers(reader) == want and _answers(ro) == want
                assert want["ids"] == ids
            finally:
                lock.execute("ROLLBACK")
            new = set(ids) - seen
            assert not seen or not new or min(new) > max(seen)
            seen |= new
            checks += 1
            time.sleep(0.02)
    finally:
        for k in kids:
            k.kill()
        lock.close()
    assert [k.wait() for k in kids] == [0, 0]
    assert checks >= 5 and len(seen) >= 20
    reader.close(), ro.close()


def test_explicit_id_below_the_next_id_moves_the_generation(tmp_path):
    """append(ids=) may give a deleted row's id again: a reader that has read past it and
    catches up with read(after_id=) would never see that row, so the generation moves, as
    on PostgreSQL (review R19b: SQLite's append left it alone)."""
    path = tmp_path / "s.db"
    a, b = SQLiteStore(path, SCHEMA, DIM), SQLiteStore(path, SCHEMA, DIM)
    a.append(batch(8))
    assert a.delete({"id": [5, 6]}) == 2 and b.generation() == 1
    assert a.append(batch(1), ids=[9]).tolist() == [9] and b.generation() == 1
    assert b.read(after_id=7)["id"].tolist() == [9]
    assert a.append(batch(1), ids=[6]).tolist() == [6] and b.generation() == 2
    assert b.read(after_id=9)["id"].tolist() == []       # what the generation is for
    assert b.next_id() == 10 and b.read(columns=["reward"])["id"].tolist() == \
        [0, 1, 2, 3, 4, 6, 7, 9]
    a.close(), b.close()
