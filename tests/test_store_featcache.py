"""The feature cache beside a SQLite store (dyna.store.featcache; open in a second).

A store opened with ``eager=False`` answers ``query_similar`` from the cache without loading
the buffer; every answer (ids, scores, order, ties, episodes) equals the one of a store that
loaded every row. A stale, damaged, foreign or missing cache falls back to the buffer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dyna.errors import ConfigError, StoreReadOnlyError
from dyna.experience import ExperienceStore
from dyna.store import featcache

DIM = 6


def _eps(rng, n, *, task_types=("t0", "t1", "t2")):
    """Episodes with small integer features: many exact ties and duplicate vectors."""
    out = []
    for i in range(n):
        out.append({"task_type": task_types[i % len(task_types)], "action_type": f"a{i % 2}",
                    "outcome": "success" if i % 3 else "failure", "reward": float(i % 5),
                    "timestamp": 1.7e9 + i, "state_before": {"i": i, "password": "hunter2"},
                    "state_features": rng.integers(-1, 2, DIM).astype(float).tolist()})
    return out


def _build(path, n_per=(60, 40, 25)):
    rng = np.random.default_rng(7)
    s = ExperienceStore(path, dim=DIM)
    for rnd in range(2):       # tenants interleaved in id order
        for t, n in zip(("alpha", "beta", "gamma"), n_per):
            s.record(t, _eps(rng, n // 2 + rnd))
    return s


QUERIES = [[1, 0, 1, 0, 1, 0], [0, 0, 0, 0, 0, 1], [-1, 1, -1, 1, 0, 0]]


def _all_answers(store, tenants=("alpha", "beta", "gamma", "nobody"), ks=(1, 7, 500)):
    out = []
    for t in tenants:
        for tt in (None, "t1", "missing"):
            for k in ks:
                for q in QUERIES:
                    out.append(store.query_similar(t, k=k, task_type=tt, state_features=q))
    return out


def test_hand_computed_scores_and_ties(tmp_path):
    path = tmp_path / "s.db"
    s = ExperienceStore(path, dim=2)
    base = {"action_type": "a", "outcome": "success", "reward": 1.0, "task_type": "t"}
    s.record("t1", [dict(base, state_features=v) for v in
                    ([3.0, 4.0], [1.0, 0.0], [3.0, 4.0], [0.0, -2.0])])      # ids 0..3
    s.record("t2", [dict(base, state_features=[1.0, 0.0])])                  # id 4
    s.write_feature_cache()
    s.close()
    r = ExperienceStore(path, dim=2, eager=False)
    res = r.query_similar("t1", k=3, state_features=[1.0, 0.0])["results"]
    # cos = 1 for id 1; 3/5 = 0.6 for ids 0 and 2 (a tie: the newer id 2 first)
    assert [x["episode"]["id"] for x in res] == [1, 2, 0]
    assert [x["score"] for x in res] == [1.0, float(np.float32(0.6)), float(np.float32(0.6))]
    assert res[0]["episode"]["tenant_id"] == "t1" and res[0]["episode"]["run_id"] is None
    assert r._live.loaded is False          # answered from the cache, no episode loaded
    r.close()


def test_equal_to_the_loaded_store_with_ties_tenants_and_task_types(tmp_path):
    path = tmp_path / "s.db"
    s = _build(path)
    info = s.write_feature_cache()
    assert info["n_rows"] == 127 and info["n_tenants"] == 3 and info["generation"] == 0
    assert info["max_id"] == 126
    lazy = ExperienceStore(path, dim=DIM, eager=False)
    got = _all_answers(lazy)
    assert lazy._live.loaded is False and lazy._cached.cache is not None
    assert got == _all_answers(s)
    top = got[0]["results"][0]["episode"]
    assert top["state_before"]["password"] == "[REDACTED]" and top["tenant_id"] == "alpha"
    # ties are real: some answer holds two equal scores
    assert any(len({r["score"] for r in a["results"]}) < len(a["results"]) for a in got)
    lazy.close()
    s.close()


def test_new_rows_of_another_process_are_seen_and_deletes_fall_back(tmp_path):
    path = tmp_path / "s.db"
    s = _build(path)
    s.write_feature_cache()
    s.close()
    lazy = ExperienceStore(path, dim=DIM, eager=False)
    assert _all_answers(lazy, ks=(5,))       # cache opened before the writes
    code = ("import sys; from dyna.experience import ExperienceStore\n"
            "s = ExperienceStore(sys.argv[1], dim=6)\n"
            "b = {'action_type': 'a', 'outcome': 'success', 'reward': 2.0, 'task_type': 't1'}\n"
            "s.record('alpha', [dict(b, state_features=[1, 0, 1, 0, 1, 0])] * 3)\n"
            "s.record('alpha', **dict(b, state_features=[0, 0, 0, 0, 0, 1]))\n"
            "s.record('beta', **dict(b, state_features=[-1, 1, -1, 1, 0, 0]))\n")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=120)
    res = lazy.query_similar("alpha", k=4, state_features=QUERIES[0])["results"]
    assert [r["episode"]["id"] for r in res][:3] == [129, 128, 127]   # the new rows, newest first
    assert res[0]["score"] == pytest.approx(1.0, abs=1e-6) and res[0]["episode"]["reward"] == 2.0
    fresh = ExperienceStore(path, dim=DIM)
    assert _all_answers(lazy) == _all_answers(fresh)
    assert lazy._live.loaded is False
    # a second round on another connection: the kept tail is extended, not re-read
    fresh.record("gamma", _eps(np.random.default_rng(3), 4, task_types=("t1", "t9")))
    assert lazy._cached.cache._tails["gamma"][1].tolist() == []
    assert _all_answers(lazy) == _all_answers(fresh)
    assert lazy._cached.cache._tails["gamma"][1].tolist() == [132, 133, 134, 135]
    assert lazy._cached.cache._tails["alpha"][1].tolist() == [127, 128, 129, 130]
    assert lazy._live.loaded is False
    fresh.delete_data("alpha", task_type="t1")   # bumps the generation: the cache is stale
    after = _all_answers(lazy, ks=(7,))
    assert lazy._live.loaded is True                  # answered from the buffer
    assert after == _all_answers(fresh, ks=(7,))
    assert all(r["episode"]["task_type"] != "t1" for a in after[:9] for r in a["results"])
    fresh.write_feature_cache()                  # a write command renews it
    again = ExperienceStore(path, dim=DIM, eager=False)
    assert _all_answers(again) == _all_answers(fresh) and again._live.loaded is False
    for h in (lazy, fresh, again):
        h.close()


def test_read_only_open_never_writes_a_cache(tmp_path):
    path = tmp_path / "s.db"
    _build(path).close()
    def listing():     # SQLite's own -wal / -shm companions aside
        return sorted(n for n in os.listdir(tmp_path) if not n.endswith(("-wal", "-shm")))

    before = listing()
    assert before == ["s.db"]
    ro = ExperienceStore(path, dim=DIM, read_only=True, eager=False)
    assert ro.query_similar("alpha", k=3, state_features=QUERIES[0])["results"]
    with pytest.raises(StoreReadOnlyError):
        ro.write_feature_cache()
    ro.close()
    assert listing() == before
    with pytest.raises(ConfigError, match="db_path"):
        ExperienceStore("", dim=DIM).write_feature_cache()


def _cache_files(tmp_path):
    head = json.loads((tmp_path / "s.db.features.json").read_text())
    return head, tmp_path / f"s.db.features-{head['token']}.npy"


@pytest.mark.parametrize("damage", ["vector_byte", "header_token", "header_json", "ids_file",
                                    "header_count", "foreign_db", "db_row_rewritten"])
def test_a_damaged_stale_or_foreign_cache_falls_back(tmp_path, damage):
    path = tmp_path / "s.db"
    s = _build(path)
    s.write_feature_cache()
    head, feats = _cache_files(tmp_path)
    if damage == "vector_byte":            # one float of alpha's section changed
        m = np.load(feats, mmap_mode="r+")
        m[3, 0] += 1.0
        m.flush()
        del m
    elif damage == "header_token":
        head["token"] = "0" * 32
        (tmp_path / "s.db.features.json").write_text(json.dumps(head))
    elif damage == "header_json":
        (tmp_path / "s.db.features.json").write_text("{not json")
    elif damage == "ids_file":
        (tmp_path / f"s.db.features-{head['token']}.ids.npy").unlink()
    elif damage == "header_count":         # sections that do not add up
        head["tenants"]["alpha"][1] -= 1
        (tmp_path / "s.db.features.json").write_text(json.dumps(head))
    elif damage == "foreign_db":           # another store's cache put beside this one
        other = tmp_path / "o" / "s.db"
        other.parent.mkdir()
        o = _build(other)
        o.write_feature_cache()
        o.close()
        for name in os.listdir(other.parent):
            if name.startswith("s.db.features"):
                os.replace(other.parent / name, tmp_path / name)
    elif damage == "db_row_rewritten":     # a vector changed in place by another program
        import sqlite3
        conn = sqlite3.connect(path)
        first = head["tenants"]["alpha"]
        row = np.load(tmp_path / f"s.db.features-{head['token']}.ids.npy")[first[0]]
        conn.execute("UPDATE episodes SET features = ? WHERE id = ?",
                     (np.full(DIM, 0.5, np.float32).tobytes(), int(row)))
        conn.commit()
        conn.close()
    s.close()
    lazy = ExperienceStore(path, dim=DIM, eager=False)
    fresh = ExperienceStore(path, dim=DIM)
    assert _all_answers(lazy, ks=(7,)) == _all_answers(fresh, ks=(7,))
    assert lazy._live.loaded is True            # the buffer answered
    lazy.close()
    fresh.close()


def test_rewriting_the_cache_removes_the_old_data_files(tmp_path):
    path = tmp_path / "s.db"
    s = _build(path)
    first = s.write_feature_cache()
    s.record("alpha", _eps(np.random.default_rng(1), 3))
    second = s.write_feature_cache()
    assert (first["n_rows"], second["n_rows"]) == (127, 130)
    names = sorted(n for n in os.listdir(tmp_path) if n.startswith("s.db.features"))
    token = json.loads((tmp_path / "s.db.features.json").read_text())["token"]
    assert names == ["s.db.features-" + token + ".ids.npy", "s.db.features-" + token + ".npy",
                     "s.db.features.json"]
    lazy = ExperienceStore(path, dim=DIM, eager=False)
    assert _all_answers(lazy, ks=(9,)) == _all_answers(s, ks=(9,)) and not lazy._live.loaded
    lazy.close()
    s.close()


def test_header_check_refuses_malformed_fields():
    good = {"format": featcache.FORMAT, "dim": 4, "generation": 0, "max_id": 9, "n_rows": 10,
            "token": "a" * 32, "block_rows": featcache._block_rows(4),
            "tenants": {"a": [0, 4, 8, 1, [2]], "b": [4, 6, 9, 3, [4]]}}
    assert featcache._check_header(good, 4) is good
    assert featcache._check_header(good, 5) is None
    for field, bad in [("generation", -1), ("max_id", 1.5), ("token", "../etc"),
                       ("tenants", {"a": [0, 4, 8, 1, [2]]}), ("n_rows", True),
                       ("tenants", {"a": [1, 4, 8, 1, [2]], "b": [4, 6, 9, 3, [4]]}),
                       ("tenants", {"a": [0, 4, 10, 1, [2]], "b": [4, 6, 9, 3, [4]]}),
                       ("tenants", {"a": [0, 4, 8, 1, [2, 3]], "b": [4, 6, 9, 3, [4]]}),
                       ("tenants", {"a": [0, 4, 8, 1, 2], "b": [4, 6, 9, 3, [4]]}),
                       ("block_rows", 7)]:
        assert featcache._check_header(dict(good, **{field: bad}), 4) is None, field


def test_cli_store_cache(tmp_path, capsys):
    from dyna.cli import main

    path = tmp_path / "s.db"
    _build(path).close()
    assert main(["store", "cache", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_rows"], out["n_tenants"], out["max_id"]) == (127, 3, 126)
    lazy = ExperienceStore(path, dim=DIM, eager=False)
    full = ExperienceStore(path, dim=DIM)
    assert _all_answers(lazy, ks=(3,)) == _all_answers(full, ks=(3,)) and not lazy._live.loaded
    lazy.close()
    full.close()
    for argv in (["store", "cache", str(tmp_path / "missing.db")],
                 ["store", "cache", "postgresql://u:secretpw@localhost/x"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "secretpw" not in err
    assert not (tmp_path / "missing.db").exists()


def test_cache_files_take_the_store_mode_and_a_fifo_header_is_no_cache(tmp_path):
    path = tmp_path / "s.db"
    _build(path).close()
    os.chmod(path, 0o640)
    s = ExperienceStore(path, dim=DIM)
    s.write_feature_cache()
    s.close()
    names = [n for n in os.listdir(tmp_path) if n.startswith("s.db.features")]
    assert len(names) == 3
    assert {oct(os.stat(tmp_path / n).st_mode & 0o777) for n in names} == {"0o640"}
    head = tmp_path / "s.db.features.json"
    head.unlink()
    os.mkfifo(head)            # would block a plain open() for reading
    lazy = ExperienceStore(path, dim=DIM, eager=False)
    fresh = ExperienceStore(path, dim=DIM)
    assert _all_answers(lazy, ks=(3,)) == _all_answers(fresh, ks=(3,))
    assert lazy._live.loaded is True
    lazy.close()
    fresh.close()


def _one_by_one_writer(path: str, n: int, conn) -> None:
    store = ExperienceStore(path, dim=DIM)
    for i in range(n):
        f = np.zeros(DIM)
        f[i % DIM] = 1.0
        f[(i + 1) % DIM] = 0.01 * (i + 1)      # a direction of its own
        ident = store.record("alpha", task_type="live", action_type="a", outcome="success",
                             reward=float(i), state_features=f.tolist())
        conn.send((i, ident["ids"][0], f.tolist()))
        conn.recv()                               # the reader has asked
    store.close()


def test_a_reader_on_the_cache_sees_each_row_a_writer_acknowledged(tmp_path):
    """Two processes: the writer records one episode at a time; after each acknowledgement
    the reader (on the feature cache, never loading) is asked for it, and it is returned."""
    import multiprocessing as mp

    path = tmp_path / "s.db"
    s = _build(path)
    s.write_feature_cache()
    s.close()
    lazy = ExperienceStore(path, dim=DIM, eager=False)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_one_by_one_writer, args=(str(path), 8, child))
    p.start()
    try:
        for _ in range(8):
            assert parent.poll(120)
            i, ident, f = parent.recv()
            res = lazy.query_similar("alpha", k=1, task_type="live", state_features=f)
            top = res["results"][0]
            assert top["episode"]["id"] == ident and top["episode"]["reward"] == float(i)
            assert len(lazy.query_similar("alpha", k=50, task_type="live",
                                          state_features=f)["results"]) == i + 1
            parent.send("asked")
    finally:
        p.join(60)
    assert p.exitcode == 0 and lazy._live.loaded is False
    lazy.close()


def test_buf04_zero_vectors_and_k_past_n_from_the_cache(tmp_path):
    """On the feature-cache path: a stored zero vector scores
    0.0 (never NaN), k >= N returns at most N, a zero query gives no NaN, a one-vector tenant
    with k = 5 gives 1 result and an empty tenant []; equal to a loaded store's answers."""
    import math

    path = tmp_path / "s.db"
    s = ExperienceStore(path, dim=3)
    base = {"action_type": "a", "outcome": "success", "reward": 1.0, "task_type": "t"}
    s.record("t", [dict(base, state_features=v) for v in
                   ([1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.9, 0.1, 0.0])])       # ids 0, 1, 2
    s.record("one", [dict(base, state_features=[1.0, 0.0, 0.0])])
    s.write_feature_cache()
    s.close()
    lazy = ExperienceStore(path, dim=3, eager=False)
    fresh = ExperienceStore(path, dim=3, eager=True)

    def ask(store, tenant, k, q):
        try:
            res = store.query_similar(tenant, k=k, state_features=q)["results"]
        except ValueError as exc:          # a zero query may be refused (ConfigError is one)
            return f"refused: {exc.field}" if isinstance(exc, ConfigError) else "ValueError"
        return [(r["episode"]["id"], r["score"]) for r in res]

    answers = {}
    for tenant, k, q in [("t", 2, [1, 0, 0]), ("t", 3, [1, 0, 0]), ("t", 10, [1, 0, 0]),
                         ("t", 3, [0, 0, 0]), ("one", 5, [1, 0, 0]), ("nobody", 3, [1, 0, 0])]:
        got = ask(lazy, tenant, k, q)
        assert got == ask(fresh, tenant, k, q)
        answers[(tenant, k, tuple(q))] = got
    two = answers[("t", 2, (1, 0, 0))]
    assert [i for i, _ in two] == [0, 2]
    assert two[0][1] == pytest.approx(1.0, abs=1e-6)
    assert two[1][1] == pytest.approx(0.993884, abs=1e-6)
    for k in (3, 10):
        got = answers[("t", k, (1, 0, 0))]
        assert len(got) <= 3 and not any(math.isnan(x) for _, x in got)
        assert got[-1] == (1, 0.0) or 1 not in [i for i, _ in got]
    zero = answers[("t", 3, (0, 0, 0))]
    assert zero == "refused: query"          # a zero query is refused, naming it
    assert len(answers[("one", 5, (1, 0, 0))]) == 1
    assert answers[("nobody", 3, (1, 0, 0))] == []
    assert lazy._live.loaded is False
    lazy.close()
    fresh.close()
