"""The live view of a store shared by connections and processes (issue 19).

Store interface: change tokens (``data_version``, ``generation``), reads since an id, SQL
stats, the ``on_write`` hook, and migration of a version-1 file written by earlier code.
"""

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

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


def test_snapshot_holds_one_state(tmp_path):
    path = tmp_path / "s.db"
    a, b = SQLiteStore(path, SCHEMA, DIM), SQLiteStore(path, SCHEMA, DIM)
    a.append(batch(2))
    with b.snapshot():
        n1 = b.count()
        a.append(batch(3, start=2))      # WAL: the writer is not blocked by the reader
        assert b.count() == n1 == 2 and b.max_id() == 1
    assert b.count() == 5
    a.close(), b.close()


def test_on_write_runs_inside_the_write_transaction(tmp_path):
    path = tmp_path / "s.db"
    a, b = SQLiteStore(path, SCHEMA, DIM), SQLiteStore(path, SCHEMA, DIM)
    seen = []
    a.on_write = lambda st: seen.append((st._conn.in_transaction, st.max_id()))
    b.append(batch(2))
    a.append(batch(1, start=2))
    a.delete({"run_id": "r0"})
    assert seen == [(True, 1), (True, 2)]
    a.close(), b.close()


def test_sql_summary_and_consumption(tmp_path):
    st = SQLiteStore(tmp_path / "s.db", SCHEMA, DIM)
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
