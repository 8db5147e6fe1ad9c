"""SQLiteStore.summary answers from indexes (skip-scans) what one aggregate query answers
(issue 19: ``dyna store stats`` without loading episodes)."""

import numpy as np

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
