"""Benchmarks of the shared experience store, each against a peer in the same run, each
contestant a test and a pytest-benchmark entry of its own (:mod:`conftest`); the ratio of two
entries' medians is asserted in the test after them.

Single writes. ``ExperienceStore.record`` of one episode at a time (labels already known, a
dict with a sensitive key to redact, d = 64 features), each call returning after its own
commit, against the bare peer: one ``INSERT`` of the already-built row (JSON text and feature
bytes ready) plus ``COMMIT`` per row on a sqlite3 connection with the same durability (WAL,
``synchronous=NORMAL``), into the same table. Each round writes ``DYNA_BENCH_WRITES_N``
(default 2,000) rows into a fresh file; target: ratio of the medians <= 2.

Live view. A child process records ``DYNA_BENCH_LIVE_N`` (default 1,000) episodes one at a
time, a few milliseconds apart, each with its own feature vector, and notes the
``time.monotonic()`` (one clock for every process on Linux) at which each ``record`` returned.
This process polls ``query_similar(k=1)`` for the next row's vector and notes when the row is
returned; the reader has answered one query (on a store of its own) before the writer starts,
so the one-time start of dyna's compiled kernels is not counted as latency. Latency =
returned - acknowledged (slightly negative when the writer is descheduled between its
commit and its clock reading), one round of the entry per row, entered through the
benchmark's timer (:class:`replay.ReplayTimer`); p50 and p99 printed. Peer in the same
run: a bare sqlite3 poller of ``SELECT MAX(id)`` on the same file during a second child's
run, i.e. the floor any reader of the file pays; target: median latency at most
:data:`LIVE_TARGET` times the bare poller's.

Open. A store of ``DYNA_BENCH_OPEN_N`` (default 10,000,000) episodes of d = 64 is built once
into ``DYNA_BENCH_DIR`` (default ``/tmp/dyna_bench_store``, never the repository) together
with the same feature matrix as ``features.npy``; it is reused by later runs. The build
checks free disk first and skips with the reason when there is too little. Timed in a fresh
child process each (so resident memory is its own): ``ExperienceStore(path)`` with its
defaults (no episode read at open; the quick_check of a file this large runs in the
background, on its own connection) plus ``get_stats(tenant)`` (answered from SQL) against
``np.load("features.npy", mmap_mode="r")`` plus a bare ``SELECT count(*)``; the rise of
resident memory (VmRSS) of each is printed. Then the store's feature cache is written once
(:mod:`dyna.store.featcache`, beside the store) and open plus one tenant-filtered top-10
``query_similar`` is timed in fresh processes against the same peer, checked against a brute
force. The times are measured inside the child processes (their start-up left out) and
entered as the contestants' rounds through the benchmark's timer. Targets: open plus tenant
count at most :data:`OPEN_TARGET` times the peer's time; open plus first query (with dyna's
compiled kernels started; a cold process's figure is printed too) at most
:data:`QUERY_TARGET` times the peer's; a resident-memory rise < 0.5 GB.

Run: ``pytest benchmarks/bench_store_live.py -s``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from dyna.experience import RECORD_SCHEMA, ExperienceStore
from replay import ReplayTimer

DIM = 64
N_WRITES = int(os.environ.get("DYNA_BENCH_WRITES_N", 2000))
N_LIVE = int(os.environ.get("DYNA_BENCH_LIVE_N", 1000))
N_OPEN = int(os.environ.get("DYNA_BENCH_OPEN_N", 10_000_000))
BENCH_DIR = Path(os.environ.get("DYNA_BENCH_DIR", "/tmp/dyna_bench_store"))
#: Median latency of the live view over the bare poller's, at most: a poll of
#: ``query_similar`` (a top-1 search over the store) costs more than ``SELECT MAX(id)``.
LIVE_TARGET = 50.0
#: Open plus tenant count over np.load(mmap) plus SELECT count(*), at most: the earlier
#: target of 1 s over the peer's 0.08-0.09 s on a quiet 2-core machine, rounded down.
OPEN_TARGET = 10.0
#: Open plus first tenant top-10 query (kernels started) over the same peer, at most (as
#: :data:`OPEN_TARGET`).
QUERY_TARGET = 10.0
#: The timer of the entries whose durations are measured elsewhere.
REPLAY = ReplayTimer()


def _episode(i: int, feats: np.ndarray) -> dict:
    return {"task_type": f"task{i % 5}", "action_type": f"a{i % 3}",
            "outcome": "success" if i % 4 else "failure", "reward": float(i % 7),
            "timestamp": 1.7e9 + i, "run_id": "r1",
            "state_before": {"step": i, "api_key": "sk-not-a-real-key", "note": "hello"},
            "state_features": feats[i].tolist()}


def _fresh_db(path: Path) -> None:
    for s in ("", "-wal", "-shm"):
        if os.path.exists(f"{path}{s}"):
            os.unlink(f"{path}{s}")


# ============================================================================ single writes
@pytest.fixture(scope="module")
def writes():
    """The episodes to record, as keyword arguments and as the bare peer's rows."""
    feats = np.random.default_rng(0).standard_normal((N_WRITES + 16, DIM)).astype(np.float32)
    eps = [_episode(i, feats) for i in range(N_WRITES + 16)]

    def bare_row(i: int, ep: dict) -> tuple:
        vals = {"tenant_id": "t1", **{k: v for k, v in ep.items() if k != "state_features"}}
        out = [i]
        for name, kind in RECORD_SCHEMA:
            if kind == "json":
                v = vals.get(name)
                out.append(None if v is None else json.dumps(v, separators=(",", ":")))
            elif kind == "vector":
                out.append(feats[i].tobytes())
            else:
                out.append(vals.get(name))
        return tuple(out)

    return eps, [bare_row(i, ep) for i, ep in enumerate(eps)]


@pytest.mark.benchmark(group=f"single writes, {N_WRITES} a round (d={DIM})")
@pytest.mark.parametrize("contestant", ["dyna", "bare insert commit"])
def test_single_record(benchmark, writes, tmp_path, contestant):
    eps, rows = writes
    names = ["id"] + [n for n, _ in RECORD_SCHEMA]
    sql = f"INSERT INTO episodes ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    files = iter(range(1_000_000))

    def fresh_store():
        path = tmp_path / f"ours{next(files)}.db"
        _fresh_db(path)
        store = ExperienceStore(path, dim=DIM)
        for ep in eps[:16]:                     # the labels become known (general path)
            store.record("t1", **ep)
        return (store,), {}

    def ours(store):
        for ep in eps[16:]:
            store.record("t1", **ep)

    def closed(store):
        assert len(store) == N_WRITES + 16
        store.close()

    def fresh_connection():
        path = tmp_path / f"peer{next(files)}.db"
        _fresh_db(path)
        ExperienceStore(path, dim=DIM).close()          # the same table and indexes
        conn = sqlite3.connect(path)                     # implicit BEGIN, then COMMIT
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return (conn,), {}

    def peer(conn):
        for row in rows[16:]:
            conn.execute(sql, row)
            conn.commit()

    if contestant == "dyna":
        benchmark.pedantic(ours, setup=fresh_store, teardown=closed, rounds=5)
    else:
        benchmark.pedantic(peer, setup=fresh_connection, teardown=lambda conn: conn.close(),
                           rounds=5)


@pytest.mark.ratio(of="test_single_record")
def test_single_record_within_2x_of_bare_insert_commit(medians):
    per = {n: medians[n] / N_WRITES for n in ("dyna", "bare insert commit")}
    print(f"    record {1 / per['dyna']:,.0f}/s, bare INSERT+COMMIT "
          f"{1 / per['bare insert commit']:,.0f}/s")
    assert medians.ratio("dyna", "bare insert commit") <= 2.0


# ============================================================================ live view
def _live_writer(path: str, n: int, feats: np.ndarray, pace: float, conn) -> None:
    store = ExperienceStore(path, dim=DIM)
    acks = []
    conn.send("ready")
    conn.recv()
    for i in range(n):
        store.record("t1", **_episode(i, feats))
        acks.append(time.monotonic())
        time.sleep(pace)
    store.close()
    conn.send(acks)


def _run_writer(path, n, feats, pace, poll):
    """Start a writer child, run ``poll(i) -> bool`` (row i visible?) until all n are seen;
    return (acks, seen) monotonic times."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_live_writer, args=(path, n, feats, pace, child))
    p.start()
    assert parent.poll(120) and parent.recv() == "ready"
    seen = []
    parent.send("go")
    deadline = time.monotonic() + 300
    i = 0
    while i < n and time.monotonic() < deadline:
        if poll(i):
            seen.append(time.monotonic())
            i += 1
    assert parent.poll(120)
    acks = parent.recv()
    p.join(60)
    assert len(seen) == n, "the reader did not see every row"
    return np.array(acks), np.array(seen)


def _start_kernels(folder: Path, feats: np.ndarray) -> None:
    """Answer one ``query_similar`` on a store of its own: the one-time start of dyna's
    compiled kernels (about 0.5-1.5 s) is then paid before the writer starts."""
    store = ExperienceStore(folder / "warm.db", dim=DIM)
    store.record("t1", **_episode(0, feats))
    assert store.query_similar("t1", k=1, state_features=feats[0].tolist())["results"]
    store.close()


@pytest.mark.benchmark(group=f"live view: {N_LIVE} rows written by another process",
                       timer=REPLAY)
@pytest.mark.parametrize("contestant", ["dyna", "bare poller"])
def test_live_view_latency(benchmark, tmp_path, contestant):
    feats = np.random.default_rng(1).standard_normal((N_LIVE, DIM)).astype(np.float32)
    path = str(tmp_path / "live.db")
    ExperienceStore(path, dim=DIM).close()
    if contestant == "dyna":
        reader = ExperienceStore(path, dim=DIM)
        _start_kernels(tmp_path, feats)

        def visible(i):
            res = reader.query_similar("t1", k=1, state_features=feats[i].tolist())["results"]
            return bool(res) and res[0]["episode"]["id"] >= i
    else:
        reader = sqlite3.connect(path, isolation_level=None)

        def visible(i):
            top = reader.execute("SELECT MAX(id) FROM episodes").fetchone()[0]
            return top is not None and top >= i
    try:
        acks, seen = _run_writer(path, N_LIVE, feats, 0.003, visible)
    finally:
        reader.close()
    lat = seen - acks
    REPLAY.replay(benchmark, lat)
    p = {q: float(np.percentile(lat, q)) * 1e3 for q in (50, 99)}
    benchmark.extra_info.update(p50_ms=p[50], p99_ms=p[99], max_ms=float(lat.max()) * 1e3)
    print(f"\nlive view over {N_LIVE} writes from another process, {contestant}: the row "
          f"is seen p50 {p[50]:.2f} ms, p99 {p[99]:.2f} ms, max {lat.max() * 1e3:.2f} ms "
          "after the writer's acknowledgement")


@pytest.mark.ratio(of="test_live_view_latency")
def test_live_view_latency_within_50x_of_a_bare_poller(medians):
    assert medians.ratio("dyna", "bare poller") <= LIVE_TARGET


# ============================================================================ open
_MEASURE = textwrap.dedent("""
    import json, sys, time
    def rss():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    which, db, npy = sys.argv[1:4]
    import numpy as np, sqlite3
    from dyna.experience import ExperienceStore
    from dyna.index import inverse_norms, search_arrays
    out = {}
    if which in ("warm", "query_warm"):    # dyna's compiled kernels' one-time start
        t0 = time.perf_counter()
        x = np.ones((2, 64), np.float32)
        search_arrays(x, inverse_norms(x), np.arange(2), x[0], 1, candidates=[0, 1])
        out["kernels_start"] = time.perf_counter() - t0
    before = rss()
    t0 = time.perf_counter()
    if which == "dyna":
        s = ExperienceStore(db, dim=64, read_only=True)   # defaults: lazy, quick_check
        n = s.get_stats("tenant3")["n_records"]            # in the background (> 256 MiB)
    elif which in ("query", "query_warm"):
        s = ExperienceStore(db, dim=64, read_only=True)   # the defaults, as above
        out["open"] = time.perf_counter() - t0
        q = np.random.default_rng(5).standard_normal(64).astype(np.float32)
        res = s.query_similar("tenant3", k=10, state_features=q.tolist())["results"]
        out["first_query"] = time.perf_counter() - t0 - out["open"]
        out["ids"] = [r["episode"]["id"] for r in res]
        out["scores"] = [r["score"] for r in res]
        out["loaded"] = s._live.loaded
        n = len(res)
    elif which == "peer":
        m = np.load(npy, mmap_mode="r")
        c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        n = c.execute("SELECT count(*) FROM episodes WHERE tenant_id = ?",
                      ("tenant3",)).fetchone()[0]
    else:
        n = 0
    dt = time.perf_counter() - t0
    out.update({"seconds": dt, "rss_rise": rss() - before, "n": n})
    if which in ("dyna", "query", "query_warm"):
        s.close()                           # stops the background quick_check
    print(json.dumps(out))
""")


def _build_open_store(n: int) -> tuple[Path, Path]:
    db, npy = BENCH_DIR / "store.db", BENCH_DIR / "features.npy"
    done = BENCH_DIR / f"built-{n}"
    if done.exists():
        return db, npy
    need = n * (DIM * 4 * 2 + 200)           # features twice (file and .npy) + the rest
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(BENCH_DIR).free
    if free < need * 1.2:
        pytest.skip(f"needs about {need * 1.2 / 1e9:.1f} GB free in {BENCH_DIR}, "
                    f"{free / 1e9:.1f} GB there")
    from dyna.store.sqlite import SQLiteStore
    _fresh_db(db)
    st = SQLiteStore(db, RECORD_SCHEMA, DIM)
    mm = np.lib.format.open_memmap(npy, mode="w+", dtype=np.float32, shape=(n, DIM))
    rng = np.random.default_rng(0)
    step = 200_000
    tenants = np.array([f"tenant{i}" for i in range(10)], dtype=object)
    tasks = np.array([f"task{i}" for i in range(100)], dtype=object)
    for start in range(0, n, step):
        m = min(step, n - start)
        f = rng.standard_normal((m, DIM)).astype(np.float32)
        mm[start:start + m] = f
        st.append({"tenant_id": tenants[rng.integers(0, 10, m)],
                   "task_type": tasks[rng.integers(0, 100, m)],
                   "action_type": tasks[rng.integers(0, 5, m)],
                   "outcome": np.where(rng.random(m) < 0.7, "success", "failure").astype(object),
                   "reward": rng.standard_normal(m),
                   "timestamp": 1.7e9 + np.arange(start, start + m, dtype=float),
                   "features": f})
    mm.flush()
    del mm
    st.checkpoint()
    st.close()
    done.write_text(str(n))
    return db, npy


def _ensure_feature_cache(db: Path) -> None:
    """Write the store's feature cache once (a write command), unless a valid one is there."""
    from dyna.store import featcache
    from dyna.store.sqlite import SQLiteStore
    st = SQLiteStore(db, RECORD_SCHEMA, DIM, verify=False)
    try:
        if featcache.open_cache(st) is None:
            free = shutil.disk_usage(BENCH_DIR).free
            need = N_OPEN * (DIM * 4 + 8) * 1.2
            if free < need:
                pytest.skip(f"the feature cache needs about {need / 1e9:.1f} GB free in "
                            f"{BENCH_DIR}, {free / 1e9:.1f} GB there")
            featcache.write_cache(st)
    finally:
        st.close()


def _measure(which: str, db: Path, npy: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEASURE, which, str(db), str(npy)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _check_rise(benchmark, runs: list[dict], line: str) -> None:
    """Print ``line`` with the largest resident-memory rise of ``runs`` (saved with the
    entry), which must stay under 0.5 GB."""
    rise = max(r["rss_rise"] for r in runs)
    benchmark.extra_info["rss_rise_bytes"] = rise
    print(f"\n{line}; RSS +{rise / 1e6:.0f} MB")
    assert rise < 0.5e9


@pytest.fixture(scope="module")
def big_store() -> tuple[Path, Path]:
    """The store of N_OPEN episodes and its features.npy, built once into BENCH_DIR."""
    return _build_open_store(N_OPEN)


OPEN_RUNS = {"dyna": "dyna", "mmap and count": "peer"}


@pytest.mark.benchmark(group=f"open of {N_OPEN:,} episodes + tenant count", timer=REPLAY)
@pytest.mark.parametrize("contestant", list(OPEN_RUNS))
def test_open_large_store(benchmark, big_store, contestant):
    """dyna: ``ExperienceStore`` with its defaults + ``get_stats``; the peer:
    ``np.load(mmap)`` + ``SELECT count(*)``; three fresh processes each."""
    db, npy = big_store
    runs = [_measure(OPEN_RUNS[contestant], db, npy) for _ in range(3)]
    assert len({r["n"] for r in runs}) == 1 and runs[0]["n"] > 0
    REPLAY.replay(benchmark, [r["seconds"] for r in runs])
    benchmark.extra_info["n"] = runs[0]["n"]
    _check_rise(benchmark, runs, f"open of {N_OPEN:,} episodes (d={DIM}) + tenant count, "
                f"{contestant}: median {statistics.median(r['seconds'] for r in runs):.3f} s")


@pytest.mark.ratio(of="test_open_large_store")
def test_open_large_store_within_10x_of_mmap_and_count(medians):
    assert medians.extra_info("dyna")["n"] == medians.extra_info("mmap and count")["n"]
    assert medians.ratio("dyna", "mmap and count") <= OPEN_TARGET


@pytest.fixture(scope="module")
def cached_store(big_store) -> tuple[Path, Path]:
    """The big store with its feature cache written."""
    _ensure_feature_cache(big_store[0])
    return big_store


@pytest.fixture(scope="module")
def tenant_top10(cached_store) -> tuple[list[int], np.ndarray]:
    """tenant3's top-10 ids and cosines for the query, by a float64 brute force over its
    rows of features.npy."""
    db, npy = cached_store
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    ids = np.array([i for (i,) in conn.execute(
        "SELECT id FROM episodes WHERE tenant_id = 'tenant3'")], np.int64)
    conn.close()
    ids.sort()
    X = np.load(npy, mmap_mode="r")[ids].astype(np.float64)
    q = np.random.default_rng(5).standard_normal(DIM).astype(np.float32).astype(np.float64)
    cos = (X @ q) / np.linalg.norm(X, axis=1) / np.linalg.norm(q)
    best = np.argsort(-cos, kind="stable")[:10]
    return ids[best].tolist(), cos[best]


QUERY_RUNS = {"dyna": "query_warm", "dyna cold": "query", "mmap and count": "peer"}


@pytest.mark.benchmark(group=f"open of {N_OPEN:,} episodes + tenant top-10 query",
                       timer=REPLAY)
@pytest.mark.parametrize("contestant", list(QUERY_RUNS))
def test_open_plus_tenant_top10_query(benchmark, cached_store, tenant_top10, contestant):
    """Open of the 10M store plus one tenant-filtered top-10 ``query_similar`` (tenant3,
    about 1M rows), each in a fresh process: from the feature cache, no episode loaded.

    ``dyna cold`` is a cold process: its first query includes the one-time start of dyna's
    compiled (numba) kernels, which any first search or load pays; ``dyna`` started them
    before the clock (their start is printed on its own). Peer in the same run:
    ``np.load(features.npy, mmap_mode="r")`` plus ``SELECT count(*)`` of the tenant. The
    answer is checked against a float64 brute force over the tenant's rows of features.npy.
    Resident-memory rise < 0.5 GB.
    """
    db, npy = cached_store
    runs = [_measure(QUERY_RUNS[contestant], db, npy) for _ in range(3)]
    if contestant == "mmap and count":
        REPLAY.replay(benchmark, [r["seconds"] for r in runs])
        _check_rise(benchmark, runs, f"np.load(mmap) + SELECT count(*), median "
                    f"{statistics.median(r['seconds'] for r in runs):.3f} s")
        return
    ids, cos = tenant_top10
    for r in runs:
        assert r["loaded"] is False and r["n"] == 10 and r["ids"] == ids
        assert np.allclose(cos, r["scores"], atol=1e-5)
    REPLAY.replay(benchmark, [r["open"] + r["first_query"] for r in runs])

    def med(key):
        return statistics.median(r[key] for r in runs)

    benchmark.extra_info.update(open_s=med("open"), first_query_s=med("first_query"))
    started = (f" (kernels started first, in {med('kernels_start'):.3f} s)"
               if contestant == "dyna" else " (cold process)")
    _check_rise(benchmark, runs, f"open + tenant top-10 of {N_OPEN:,} episodes (d={DIM}), "
                f"{contestant}: open {med('open') * 1e3:.1f} ms, first query "
                f"{med('first_query'):.3f} s{started}")


@pytest.mark.ratio(of="test_open_plus_tenant_top10_query")
def test_open_plus_tenant_top10_query_within_10x_of_mmap_and_count(medians):
    print(f"    cold process: ratio {medians.ratio('dyna cold', 'mmap and count'):.2f} "
          "(reported, not asserted)")
    assert medians.ratio("dyna", "mmap and count") <= QUERY_TARGET
