"""SQLiteStore.summary answers from indexes (skip-scans) what one aggregate query answers
(``dyna store stats`` without loading episodes)."""

import datetime
import sqlite3

import numpy as np
import pytest

from dyna.store.sqlite import SQLiteStore

SCHEMA = [("tenant_id", "str"), ("task_type", "str"), ("reward", "float"),
          ("timestamp", "float"), ("features", "vector")]


def _aggregate(st, tenant=None):
    clause, args = ("", []) if tenant is None else (" WHERE tenant_id = ?", [tenant])
    n, nt, nk, lo, hi = st._conn.execute(
        "SELECT COUNT(*), COUNT(DISTINCT COALESCE(tenant_id, '')), COUNT(DISTINCT "
        f"COALESCE(task_type, '')), MIN(timestamp), MAX(timestamp) FROM episodes{clause}",
        args).fetchone()
    return {"n_records": n, "n_tenants": nt, "n_task_types": nk, "oldest": lo, "newest": hi}


def test_summary_by_index_equals_the_aggregate(tmp_path):
    st = SQLiteStore(tmp_path / "s.db", SCHEMA, 2)
    assert st.summary() == _aggregate(st) == {"n_records": 0, "n_tenants": 0,
                                              "n_task_types": 0, "oldest": None,
                                              "newest": None}
    rng = np.random.default_rng(3)
    n = 300
    tasks = np.array(["a", "b", "", None, "c"], dtype=object)
    st.append({"tenant_id": np.array([f"t{i}" for i in rng.integers(0, 4, n)], dtype=object),
               "task_type": tasks[rng.integers(0, 5, n)],
               "reward": rng.random(n), "timestamp": rng.permutation(n) * 1.5,
               "features": np.zeros((n, 2), np.float32)})
    st.append({"tenant_id": ["only_null"], "task_type": [None], "reward": [0.0],
               "timestamp": [-4.0], "features": np.zeros((1, 2), np.float32)})
    for tenant in (None, "t0", "t1", "t3", "only_null", "absent"):
        assert st.summary(None if tenant is None else {"tenant_id": tenant}) == \
            _aggregate(st, tenant), tenant
    assert st.summary()["n_tenants"] == 5 and st.summary()["oldest"] == -4.0
    assert st.summary({"tenant_id": "only_null"})["n_task_types"] == 1
    st.close()


def test_stats_and_consumption_load_no_episode(tmp_path):
    """``dyna store stats`` opens with eager=False: get_stats and get_data_consumption answer
    from SQL and leave the buffer unread, with the numbers of the loaded store."""
    from dyna.experience import ExperienceStore
    path = tmp_path / "s.db"
    memory = ExperienceStore("", dim=2)            # answers from the buffer
    for s in (ExperienceStore(path, dim=2), memory):
        s.record("t1", episodes=[{"task_type": k, "action_type": "a", "outcome": "success",
                                  "reward": 1.0, "timestamp": 10.0 + i, "run_id": "ré",
                                  "metadata": {"n": i}, "state_features": [1.0, 0.0]}
                                 for i, k in enumerate("aab")])
        s.record("t2", task_type="a", action_type="a", outcome="failure", reward=0.0,
                 timestamp=3.0, state_features=[0.0, 1.0])
    loaded = (memory.get_stats("t1"), memory.get_data_consumption())
    loaded[0]["persistent"] = True
    lazy = ExperienceStore(path, dim=2, read_only=True, eager=False)
    stats, cons = lazy.get_stats("t1"), lazy.get_data_consumption()
    assert not lazy._live.loaded and len(lazy._live.buf) == 0
    assert {k: v for k, v in stats.items() if k != "store"} == \
        {k: v for k, v in loaded[0].items() if k != "store"} == \
        {"n_records": 3, "n_tenants": 1, "n_task_types": 2,
         "oldest": datetime.datetime(1970, 1, 1, 0, 0, 10, tzinfo=datetime.timezone.utc),
         "newest": datetime.datetime(1970, 1, 1, 0, 0, 12, tzinfo=datetime.timezone.utc),
         "dim": 2, "persistent": True, "n_unpersisted": 0}
    # row bytes: 8 id + 16 numbers + 8 vector + "t1" 2 + "a" 1 + "a" 1 + "success" 7
    # + "ré" 3 (UTF-8) + '{"n":0}' 7 = 53
    assert cons == loaded[1] and cons["consumption"][0] == \
        {"tenant_id": "t1", "task_type": "a", "records": 2, "bytes": 106}
    assert cons["total_records"] == 4
    assert len(lazy) == 4 and lazy._live.loaded        # the first operation that needs rows
    lazy.close()


@pytest.mark.parametrize("dim", ["four", "-4", "0"])
def test_store_stats_of_a_damaged_dim_says_damaged_in_one_line(tmp_path, capsys, dim):
    """``dyna store stats`` reads the dim first (stored_dim): 'four' is reported damaged,
    not as "not a dyna experience store", and '-4' never reaches ExperienceStore as dim -4."""
    from dyna.cli import main
    path = tmp_path / "s.db"
    SQLiteStore(path, SCHEMA, 2).close()
    raw = sqlite3.connect(path)
    raw.execute("UPDATE meta SET value = ? WHERE key = 'dim'", (dim,))
    raw.commit()
    raw.close()
    before = path.read_bytes()
    assert main(["store", "stats", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dyna: error: DB=")
    assert f"damaged SQLite store: meta.dim is '{dim}', not an integer >= 1" in err[0]
    assert path.read_bytes() == before
