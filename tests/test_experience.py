"""Tests of dyna.experience.ExperienceStore: operations, dispatch, round trips, isolation."""

import json
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import block_writes, stored_rows
from dyna.errors import (ConfigError, NotAStoreError, StoreBusyError, StoreReadOnlyError,
                         StoreWriteError)
from dyna.experience import OPERATIONS, ExperienceStore

DIM = 8
T0 = 1_700_000_000.0


def ep(task="triage", action="retry", outcome="success", reward=1.0, t=0.0, **kw):
    return dict(task_type=task, action_type=action, outcome=outcome, reward=reward,
                timestamp=T0 + t, **kw)


def feats(i, dim=DIM):
    v = np.zeros(dim, np.float32)
    v[i % dim] = 1.0
    v[(i + 1) % dim] = 0.5
    return v.tolist()


@pytest.fixture
def store(store_target):
    """A store on each backend: in memory, SQLite, PostgreSQL."""
    s = ExperienceStore(store_target, dim=DIM, clock=lambda: T0 + 1000.0)
    yield s
    s.close()


def fill(s, tenant="t1", n=10):
    eps = [ep(task=f"task{i % 2}", action=("a", "b")[i % 3 == 0],
              outcome=("success", "failure")[i % 4 == 0], reward=float(i), t=float(i),
              run_id=f"r{i // 5}", task_id=f"k{i}", state_features=feats(i),
              state_before={"pos": i}, state_after={"pos": i + 1},
              metadata={"note": f"n{i}", "api_key": "hunter2"}) for i in range(n)]
    return s.record(tenant, episodes=eps)["ids"]


# ------------------------------------------------------------------ record and read back
def test_record_persists_and_reloads_identically(persistent_target):
    store = ExperienceStore(persistent_target, dim=DIM, clock=lambda: T0 + 1000.0)
    ids = fill(store)
    assert ids == list(range(10))
    before = store.export_data("t1")["records"]
    assert before[0]["metadata"] == {"note": "n0", "api_key": "[REDACTED]"}
    store.close()
    with ExperienceStore(persistent_target, dim=DIM) as again:
        assert again.persistence_status == "ok"
        assert again.export_data("t1")["records"] == before
        # the id counter continues after a reload
        assert again.record("t1", **ep())["ids"] == [10]


def test_status_missing_then_ok(tmp_path):
    s = ExperienceStore(tmp_path / "new.db", dim=DIM)
    assert s.dispatch("get_stats")["persistence_status"] == "missing"
    s.record("t1", **ep())
    assert s.dispatch("get_stats")["persistence_status"] == "ok"


def test_not_a_database_is_refused_never_replaced(tmp_path):
    path = tmp_path / "c.db"
    path.write_bytes(b"\x00garbage" * 500)
    with pytest.raises(NotAStoreError, match="c.db: not a dyna experience store"):
        ExperienceStore(path, dim=DIM)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db"]
    assert path.read_bytes() == b"\x00garbage" * 500


def _contents(target):
    """The bytes of a SQLite file; for PostgreSQL, every stored value and counter."""
    if not isinstance(target, str):
        return target.read_bytes()
    from dyna.experience import RECORD_SCHEMA
    from dyna.store.postgres import PostgresStore
    with PostgresStore(target, RECORD_SCHEMA, DIM, read_only=True) as st:
        cols = st.read()
        return (repr({k: v.tolist() for k, v in cols.items()}), st.next_id(),
                st.generation(), st.file_bytes())


def test_read_only_store_refuses_changes(persistent_target):
    store = ExperienceStore(persistent_target, dim=DIM)
    fill(store, n=3)
    store.close()
    data = _contents(persistent_target)
    ro = ExperienceStore(persistent_target, dim=DIM, read_only=True)
    assert len(ro) == 3 and ro.dispatch("get_stats")["n_records"] == 3
    for op, kw in [("record", ep()), ("prune_old", {"max_age_seconds": 0.0}),
                   ("compact", {}), ("reset", {"all_tenants": True}),
                   ("delete_data", {"tenant_id": "t1"})]:
        with pytest.raises(StoreReadOnlyError):
            ro.dispatch(op, **({"tenant_id": "t1"} | kw if op == "record" else kw))
    assert len(ro) == 3
    ro.close()
    assert _contents(persistent_target) == data


def test_failed_write_raises_and_keeps_nothing_in_memory(persistent_target):
    store = ExperienceStore(persistent_target, dim=DIM)
    fill(store, n=2)
    block_writes(store, True)
    with pytest.raises(StoreWriteError, match=f"{re.escape(store._db.path)}: write failed"):
        store.dispatch("record", tenant_id="t1", **ep(t=5.0))
    assert store.persistence_status == "write_degraded"
    assert len(store) == 2 and store._db.count() == 2
    block_writes(store, False)
    out = store.dispatch("record", tenant_id="t1", **ep(t=6.0))
    assert out["persistence_status"] == "ok" and out["ids"] == [2]
    assert store._db.read()["id"].tolist() == [0, 1, 2]
    assert store.flush() == {"written": 0}
    store.close()


def test_in_memory_competence_follows_new_episodes():
    s = ExperienceStore("", dim=DIM)
    s.record("t1", **ep())
    assert s.get_competence("t1")["competence"][0]["n_success"] == 1
    s.record("t1", **ep())  # the cached competence must follow a write in memory-only stores
    assert s.get_competence("t1")["competence"][0]["n_success"] == 2


# ------------------------------------------------------------------ bad input writes nothing
@pytest.mark.parametrize("call,field", [
    (lambda s: s.record("t1", **ep(reward=float("nan"))), "reward[0]"),
    (lambda s: s.record("t1", **ep(state_features=[1.0] * (DIM + 1))), "state_features"),
    (lambda s: s.record("t1", episodes=[ep(), ep(reward=float("inf"))]), "reward[1]"),
    (lambda s: s.record("t1", **ep(colour="red")), "colour"),
    (lambda s: s.dispatch("record", tenant_id="t1", colour="red"), "colour"),
    (lambda s: s.dispatch("explode", tenant_id="t1"), "op"),
    (lambda s: s.query_similar("t1", k=0, state_features=feats(0)), "k"),
    (lambda s: s.query_similar("t1", k=-3, state_features=feats(0)), "k"),
    (lambda s: s.query_similar("t1", k=2, state_features=[1.0] * 3), "state_features"),
    (lambda s: s.prune_old(-1.0), "max_age_seconds"),
    (lambda s: s.should_escalate("t1", "triage", domain_risk_class="extreme"),
     "domain_risk_class"),
    (lambda s: s.dispatch("export_data"), "tenant_id"),
    (lambda s: s.reset(), "tenant_id"),
])
def test_bad_input_raises_config_error_naming_field_and_writes_nothing(store, call, field):
    fill(store, n=4)
    before = store.export_data("t1")["records"]
    rows = stored_rows(store)
    with pytest.raises(ConfigError) as e:
        call(store)
    assert e.value.field == field
    assert store.export_data("t1")["records"] == before and stored_rows(store) == rows
    assert store.record("t1", **ep())["ids"] == [4]  # no id was consumed either


# ------------------------------------------------------------------ operations
def test_query_similar_is_exact_and_tenant_scoped(store):
    fill(store, "t1")
    fill(store, "t2")
    out = store.dispatch("query_similar", tenant_id="t1", k=3, state_features=feats(3))
    res = out["results"]
    assert res[0]["episode"]["task_id"] == "k3" and res[0]["score"] == pytest.approx(1.0)
    assert all(r["episode"]["tenant_id"] == "t1" for r in res)
    # k larger than the candidates returns what there is
    out = store.query_similar("t1", k=100, task_type="task0", state_features=feats(0))
    assert len(out["results"]) == 5


def test_competence_list_and_escalation(store):
    store.record("t1", episodes=[ep(outcome="success", t=i) for i in range(18)])
    store.record("t1", episodes=[ep(task="deploy", outcome="failure", t=i) for i in range(18)])
    c = {x["task_type"]: x for x in store.get_competence("t1")["competence"]}
    # COMP-01 through the store: Beta(1, 19) and Beta(19, 1)
    assert c["deploy"]["mean"] == pytest.approx(0.05)
    assert c["deploy"]["lower"] == pytest.approx(0.0013316, abs=5e-8)
    assert c["triage"]["upper"] == pytest.approx(0.9986684, abs=5e-8)
    unseen = store.get_competence("t1", task_type="nothing")["competence"][0]
    assert unseen["mean"] == 0.5 and unseen["lower"] == pytest.approx(0.025)
    lt = store.list_task_types("t1")["task_types"]
    assert [(x["task_type"], x["n_episodes"]) for x in lt] == [("deploy", 18), ("triage", 18)]
    d = store.dispatch("should_escalate", tenant_id="t1", task_type="triage", threshold=0.8,
                       min_episodes=10)
    assert d["escalate"] is False and d["n_episodes"] == 18
    d = store.should_escalate("t1", "triage", 0.8, 10, "elevated")
    assert d["escalate"] and d["reason"] == "unverified_evidence" and d["n_evidence"] == 0
    d = store.should_escalate("t1", "deploy", 0.8, 10)
    assert d["escalate"] and d["reason"] == "below_threshold"


def test_competence_cache_follows_deletes(store):
    store.record("t1", episodes=[ep(outcome="success", t=i, run_id=f"r{i % 2}")
                                 for i in range(6)])
    assert store.get_competence("t1", "triage")["competence"][0]["n_success"] == 6
    store.delete_data("t1", run_id="r0")
    assert store.get_competence("t1", "triage")["competence"][0]["n_success"] == 3
    store.record("t1", **ep(outcome="failure", t=10))
    c = store.get_competence("t1", "triage")["competence"][0]
    assert (c["n_success"], c["n_failure"]) == (3, 1)


def test_discounted_competence_matches_estimator(tmp_path):
    s = ExperienceStore("", dim=DIM, discount=0.5)
    s.record("t1", episodes=[ep(outcome=o, t=t) for o, t in
                             [("success", 2), ("failure", 1), ("success", 3)]])
    c = s.get_competence("t1", "triage")["competence"][0]
    # time order: failure(1), success(2), success(3): b = 1 + 0.25, a = 1 + 0.5 + 1
    assert (c["a"], c["b"]) == (2.5, 1.25)


def test_recommendation_by_success_rate_and_reward(store):
    eps = ([ep(action="a", outcome="success", reward=1.0, t=i) for i in range(8)]
           + [ep(action="a", outcome="failure", reward=0.0, t=8 + i) for i in range(2)]
           + [ep(action="b", outcome="success", reward=5.0, t=20 + i) for i in range(2)]
           + [ep(action="b", outcome="failure", reward=5.0, t=30 + i) for i in range(2)])
    store.record("t1", episodes=eps)
    r = store.get_recommendation("t1", task_type="triage")
    assert r["action_type"] == "a"
    assert r["best"]["n"] == 10 and r["best"]["success_rate"] == pytest.approx(9 / 12)
    r = store.get_recommendation("t1", task_type="triage", criterion="mean_reward")
    assert r["action_type"] == "b" and r["best"]["mean_reward"] == 5.0
    assert store.get_recommendation("t1", min_episodes=11)["action_type"] is None


def test_transition_table_counts_by_hand(store):
    eps = [ep(action="right", reward=1.0, state_before={"x": 0.0}, state_after={"x": 1.0}, t=0),
           ep(action="right", reward=3.0, state_before={"x": 0.1}, state_after={"x": 1.0}, t=1),
           ep(action="left", reward=-1.0, state_before={"x": 1.0}, state_after={"x": 0.0}, t=2),
           ep(action="left", reward=0.0, state_before={"y": 1.0}, state_after={"x": 0.0}, t=3)]
    store.record("t1", episodes=eps)
    out = store.get_transition_table("t1", bin_count=2, state_key="x")
    assert out["edges"] == [0.0, 0.5, 1.0] and out["n_episodes"] == 3
    assert out["transitions"] == [
        {"action_type": "left", "from_bin": 1, "to_bin": 0, "count": 1, "mean_reward": -1.0},
        {"action_type": "right", "from_bin": 0, "to_bin": 1, "count": 2, "mean_reward": 2.0}]
    hashed = store.get_transition_table("t1", bin_count=1000)
    assert sum(t["count"] for t in hashed["transitions"]) == 4
    assert hashed["edges"] is None


def test_replay_uniform_recency_priority(store):
    ids = fill(store, n=10)
    a = store.replay_experience("t1", batch_size=200, seed=3)["ids"]
    assert a == store.replay_experience("t1", batch_size=200, seed=3)["ids"]
    assert set(a) <= set(ids)
    rec = store.replay_experience("t1", batch_size=4000, strategy="recency",
                                  half_life_seconds=1.0, seed=0)["ids"]
    counts = np.bincount(rec, minlength=10)
    assert counts[9] / counts[8] == pytest.approx(2.0, rel=0.15)  # halves per second
    pri = store.replay_experience("t1", batch_size=3000, strategy="priority", ids=[2, 5],
                                  priorities=[-1.0, 3.0], seed=0)["ids"]
    assert set(pri) == {2, 5} and pri.count(5) / len(pri) == pytest.approx(0.75, abs=0.03)
    with pytest.raises(ConfigError) as e:
        store.replay_experience("t1", strategy="priority", ids=[2], priorities=[1.0, 2.0])
    assert e.value.field == "priorities"
    fill(store, "t2", n=3)
    with pytest.raises(ConfigError) as e:  # another tenant's id
        store.replay_experience("t1", strategy="priority", ids=[11], priorities=[1.0])
    assert e.value.field == "ids"


def test_prune_compact_reclaim(store):
    store.record("t1", episodes=[ep(t=float(i), metadata={"blob": "x" * 2000})
                                 for i in range(1000)])
    backend = store.capabilities()["persistence"]["backend"]
    if store._db is not None:
        store._db.checkpoint()
    size0 = store._db.file_bytes() if store._db is not None else 0
    out = store.dispatch("prune_old", max_age_seconds=100.0, now=T0 + 999.0)
    assert out["deleted"] == 899 and len(store) == 101 and stored_rows(store) == 101
    out = store.dispatch("compact")
    assert out["freelist_count"] == 0
    if backend == "sqlite":
        assert out["bytes_after"] < 0.15 * size0
    elif backend == "postgresql":  # VACUUM FULL; each table and index keeps a page or two
        assert out["bytes_after"] < size0
    else:
        assert out["bytes_after"] == 0
    out = store.dispatch("compact", compact_keep_records=10)
    assert out["deleted"] == 91 and stored_rows(store) == 10
    assert [r["timestamp"] - T0 for r in store.export_data("t1")["records"]] == \
        list(map(float, range(990, 1000)))


def test_compact_one_tenant_only(store):
    fill(store, "t1", n=10)
    fill(store, "t2", n=10)
    out = store.compact(compact_keep_records=2, tenant_id="t1")
    assert out["deleted"] == 6
    assert store.get_stats("t1")["n_records"] == 4 and store.get_stats("t2")["n_records"] == 10
    assert stored_rows(store, "t1") == 4
    kept = sorted(r["task_id"] for r in store.export_data("t1")["records"])
    assert kept == ["k6", "k7", "k8", "k9"]


def test_delete_is_exact_and_reset(store):
    fill(store, "t1")
    fill(store, "t10")
    assert store.delete_data("t1", task_id="k1")["deleted"] == 1
    assert store.delete_data("t1", task_id="k")["deleted"] == 0
    assert store.delete_data("t1", run_id="r")["deleted"] == 0
    assert store.get_stats("t10")["n_records"] == 10
    assert store.reset("t1")["deleted"] == 9
    assert store.get_stats("t10")["n_records"] == 10
    assert store.reset(all_tenants=True)["deleted"] == 10 and stored_rows(store) == 0


def test_data_consumption_bytes_by_hand():
    s = ExperienceStore("", dim=2)
    s.record("tt", **ep(task="k", action="a", outcome="ok", state_features=[1.0, 0.0],
                        metadata={"a": 1}))
    out = s.get_data_consumption()
    # 24 + 4*2 + len("tt") + len("k") + len("a") + len("ok") + len('{"a":1}')
    assert out["consumption"] == [{"tenant_id": "tt", "task_type": "k", "records": 1,
                                   "bytes": 24 + 8 + 2 + 1 + 1 + 2 + 7}]


# ------------------------------------------------------------------ round trips
def test_round_trips_sqlite_jsonl_parquet_identical(tmp_path, store):
    fill(store, "t1", n=12)
    store.record("t1", **ep(outcome_verified_by="ci", anti_gaming_policy="hidden",
                            action_taken={"cmd": ["a", 1, None, True]}, t=50.0))
    original = store.export_data("t1")["records"]
    for fmt, name in (("jsonl", "e.jsonl"), ("parquet", "e.parquet")):
        path = tmp_path / name
        assert store.dispatch("export_data", tenant_id="t1", path=str(path),
                              format=fmt)["n"] == 13
        other = ExperienceStore(tmp_path / f"{fmt}.db", dim=DIM)
        assert other.import_data(path, keep_ids=True)["n"] == 13
        assert other.export_data("t1")["records"] == original, fmt
        other.close()
        reopened = ExperienceStore(tmp_path / f"{fmt}.db", dim=DIM)  # through SQLite
        assert reopened.export_data("t1")["records"] == original, fmt
    df = store.to_dataset("t1")
    assert df.schema["outcome_verified_by"] == pl.String and df.height == 13
    pq = pl.read_parquet(tmp_path / "e.parquet")
    assert pq.schema["request_id"] == pl.String  # all-null column keeps its dtype


def test_jsonl_import_skips_torn_line(tmp_path, store):
    fill(store, n=3)
    path = tmp_path / "e.jsonl"
    store.export_data("t1", path=str(path))
    with open(path, "a") as fh:
        fh.write('{"id": 99, "tenant_id": "t1", "task_ty')
    other = ExperienceStore("", dim=DIM)
    out = other.dispatch("import_data", path=str(path))
    assert out["n"] == 3 and out["skipped"] == 1 and out["skipped_lines"] == [4]


def test_redaction_before_persist_and_on_export(persistent_target):
    s = ExperienceStore(persistent_target, dim=DIM)
    s.record("t1", **ep(state_before={"config": {"Password": "p1", "nested": {"API-KEY": "k"}},
                                      "items": [{"token": "x"}, {"name": "ok"}],
                                      "tokenizer": "bpe"},
                        metadata={"auth": "Bearer abc123def456ghi789"}))
    raw = s._db.read()
    text = raw["state_before"][0] + raw["metadata"][0]
    for secret in ("p1", '"k"', '"x"', "abc123def456ghi789"):
        assert secret not in text
    assert json.loads(raw["state_before"][0]) == {
        "config": {"Password": "[REDACTED]", "nested": {"API-KEY": "[REDACTED]"}},
        "items": [{"token": "[REDACTED]"}, {"name": "[REDACTED]"}], "tokenizer": "bpe"}
    s.close()
    # a store opened with more keys redacts them on export as well
    with ExperienceStore(persistent_target, dim=DIM,
                         redact_keys={"tokenizer", "password", "token", "api_key", "name"}) as s2:
        rec = s2.export_data("t1")["records"][0]
    assert rec["state_before"]["tokenizer"] == "[REDACTED]"


# ------------------------------------------------------------------ dispatch surface
def test_dispatch_answers_every_operation_with_status(tmp_path, store):
    fill(store)
    calls = {
        "record": dict(tenant_id="t1", **ep(t=99.0)),
        "query_similar": dict(tenant_id="t1", state_features=feats(1)),
        "get_recommendation": dict(tenant_id="t1"),
        "get_competence": dict(tenant_id="t1"),
        "list_task_types": dict(tenant_id="t1"),
        "get_transition_table": dict(tenant_id="t1", state_key="pos", bin_count=3),
        "should_escalate": dict(tenant_id="t1", task_type="task0"),
        "replay_experience": dict(tenant_id="t1", batch_size=2, seed=0),
        "get_stats": {}, "get_data_consumption": {},
        "export_data": dict(tenant_id="t1", path=str(tmp_path / "d.jsonl")),
        "import_data": dict(path=str(tmp_path / "d.jsonl")),
        "to_dataset": dict(tenant_id="t1", path=str(tmp_path / "d.parquet")),
        "delete_data": dict(tenant_id="t1", task_id="k3"),
        "prune_old": dict(max_age_seconds=1e9),
        "compact": dict(compact_keep_records=100),
        "reset": dict(tenant_id="t9"),
        "capabilities": {},
    }
    assert set(calls) == set(OPERATIONS)
    for op, kw in calls.items():
        out = store.dispatch(op, **kw)
        json.dumps(out, allow_nan=False)  # JSON-ready
        assert out["persistence_status"] == "ok" and out["op"] == op
    caps = store.dispatch("capabilities")
    schema = caps["operations"]["should_escalate"]["input_schema"]
    assert schema["required"] == ["tenant_id", "task_type"]
    assert caps["operations"]["delete_data"]["destructive"] is True


# ------------------------------------------------------------------ concurrency through the store
WRITER = textwrap.dedent("""
    import sys, time
    from dyna.experience import ExperienceStore
    path, tag, go = sys.argv[1], sys.argv[2], float(sys.argv[3])
    s = ExperienceStore(path, dim=8)
    while time.time() < go:
        time.sleep(0.001)
    for i in range(50):
        s.record(tag, task_type="t", action_type="a", outcome="success", reward=float(i),
                 timestamp=1.0 + i, state_features=[1.0] * 8)
""")


def test_pers01_two_processes_append_50_each(tmp_path):
    path = tmp_path / "two.db"
    ExperienceStore(path, dim=8).close()
    go = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"p{i}", str(go)],
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0 and "locked" not in err, err
    s = ExperienceStore(path, dim=8)
    assert len(s) == 100
    assert s.get_stats("p0")["n_records"] == 50 and s.get_stats("p1")["n_records"] == 50
    assert sorted(r["id"] for r in s.export_data("p0")["records"] +
                  s.export_data("p1")["records"]) == list(range(100))


def test_busy_store_raises_retryable_and_leaves_no_trace(tmp_path):
    import sqlite3
    path = tmp_path / "b.db"
    s = ExperienceStore(path, dim=DIM, busy_timeout=0.1)
    fill(s, n=2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreBusyError):
        s.record("t1", **ep(t=7.0))
    holder.execute("ROLLBACK")
    c = s.get_competence("t1", "task0")["competence"][0]
    assert len(s) == 2 and (c["n_success"], c["n_failure"]) == (0, 1)
    assert s.record("t1", **ep(t=7.0))["ids"] == [2]


def test_other_writers_seen_without_reload(persistent_target):
    a = ExperienceStore(persistent_target, dim=DIM)
    b = ExperienceStore(persistent_target, dim=DIM)
    a.record("t1", **ep())
    assert b.record("t1", **ep())["ids"] == [1]  # ids unique across handles
    assert len(b) == 2 and len(a) == 2           # the live view
    assert b.buffer.column("id").tolist() == [0, 1] == a.buffer.column("id").tolist()
    assert b.reload() == {"n_records": 2}
    a.close()
    b.close()


# ------------------------------------------------------------------ tenant isolation (property)
_tenants = st.sampled_from(["t1", "t2", "t10", "T1"])
_tasks = st.sampled_from(["a", "b", "a%"])
_episode = st.tuples(_tenants, _tasks, st.sampled_from(["r1", "r2"]),
                     st.sampled_from(["success", "failure"]), st.integers(0, 7))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(episodes=st.lists(_episode, min_size=1, max_size=30), me=_tenants,
       op=st.sampled_from(["delete_task", "delete_run", "reset", "prune", "compact",
                           "query", "export", "replay", "recommend"]))
def test_tenant_isolation_property(episodes, me, op):
    s = ExperienceStore("", dim=DIM)
    for i, (tenant, task, run, outcome, f) in enumerate(episodes):
        s.record(tenant, **ep(task=task, outcome=outcome, t=float(i), run_id=run,
                              state_features=feats(f)))
    others_before = {t: s.export_data(t)["records"] for t in {"t1", "t2", "t10", "T1"} - {me}}
    if op == "delete_task":
        s.delete_data(me, task_type="a")
    elif op == "delete_run":
        s.delete_data(me, run_id="r1")
    elif op == "reset":
        s.reset(me)
    elif op == "prune":
        s.prune_old(0.0, tenant_id=me, now=T0 + 15)
    elif op == "compact":
        s.compact(compact_keep_records=1, tenant_id=me)
    elif op == "query":
        res = s.query_similar(me, k=50, state_features=feats(1))["results"]
        assert all(r["episode"]["tenant_id"] == me for r in res)
    elif op == "export":
        assert all(r["tenant_id"] == me for r in s.export_data(me)["records"])
    elif op == "replay":
        assert all(e["tenant_id"] == me for e in s.replay_experience(me, seed=0)["episodes"])
    elif op == "recommend":
        n_mine = sum(1 for e in episodes if e[0] == me)
        assert s.get_recommendation(me)["n_episodes"] == n_mine
    for t, recs in others_before.items():
        assert s.export_data(t)["records"] == recs


def test_pers04_case_through_store_and_export(tmp_path, persistent_target):
    keys = {"password", "api_key", "token", "secret", "authorization"}
    payload = {"tenant": "t1", "token": "top",
               "config": {"Password": "p1", "nested": {"API-KEY": "k1"}},
               "items": [{"token": "x"}, {"name": "ok"}], "tokenizer": "bpe"}
    expected = {"tenant": "t1", "token": "[REDACTED]",
                "config": {"Password": "[REDACTED]", "nested": {"API-KEY": "[REDACTED]"}},
                "items": [{"token": "[REDACTED]"}, {"name": "ok"}], "tokenizer": "bpe"}
    snapshot = json.dumps(payload)
    s = ExperienceStore(persistent_target, dim=DIM, redact_keys=keys)
    s.record("t1", **ep(metadata=payload))
    assert json.dumps(payload) == snapshot  # input not mutated
    assert json.loads(s._db.read()["metadata"][0]) == expected  # persisted
    assert s.export_data("t1")["records"][0]["metadata"] == expected  # inline export
    s.export_data("t1", path=str(tmp_path / "p.parquet"), format="parquet")
    s.close()
    pq = pl.read_parquet(tmp_path / "p.parquet")
    assert json.loads(pq["metadata"][0]) == expected  # file export


def test_replay_seed_and_bin_count_are_checked():
    from dyna.errors import ConfigError
    from dyna.experience import MAX_BIN_COUNT, ExperienceStore

    store = ExperienceStore(db_path="", dim=8)
    store.record(tenant_id="t", task_type="x", action_type="a", outcome="success", reward=1.0)
    with pytest.raises(ConfigError) as err:
        store.replay_experience("t", seed=-1)
    assert err.value.field == "seed"
    with pytest.raises(ConfigError) as err:
        store.get_transition_table("t", bin_count=MAX_BIN_COUNT + 1)
    assert err.value.field == "bin_count"
    first = store.replay_experience("t", seed=3, batch_size=4)["ids"]
    assert store.replay_experience("t", seed=3, batch_size=4)["ids"] == first
