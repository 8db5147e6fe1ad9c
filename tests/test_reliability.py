"""Reliability of the experience store, counted.

* 8 processes (multiprocessing ``forkserver``) write to one SQLite experience store at once, with
  mixed batch sizes (1, 7, 50), one of them compacting (``ExperienceStore.compact``: VACUUM
  and WAL checkpoint, and a keep-newest pass that keeps everything) meanwhile. On reopen:
  exactly the records every writer was acknowledged (0 lost, 0 duplicated, none extra) and
  ``PRAGMA integrity_check`` ok.
* SIGKILL: a child records batches (1, 7, 50, 200 episodes) and reports each acknowledged
  batch over a pipe (sent after ``record`` returned, so in the kernel's pipe buffer before the
  next batch starts); it is killed a random delay after its first acknowledged batch, 10
  times on the same file. Then every acknowledged batch is present, whole, with its
  acknowledged ids; no batch is partly visible; at most the one batch in flight at each kill
  is there unacknowledged; integrity ok.
* The same SIGKILL check for JSON Lines batches (``dyna.store.jsonl.append_jsonl``), and one
  kill that deterministically lands inside a batch's write (the write is cut at a byte by
  ``RLIMIT_FSIZE``, then the writer SIGKILLs itself), which a random kill only rarely hits.

Sizes are small so the file stays well under a minute on a loaded 2-core machine; every wait
is bounded.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import resource
import signal
import sqlite3
import time
from collections import Counter, defaultdict

import pytest

from dyna.errors import StoreBusyError
from dyna.experience import ExperienceStore
from dyna.store.jsonl import append_jsonl, read_jsonl

DIM = 4
SIZES = (1, 7, 50)
N_WRITERS = 8
N_BATCHES = 18            # per writer: 6 x (1 + 7 + 50) = 348 records
COMPACT_AT = (3, 9, 15)
N_KILLS = 10
KILL_SIZES = (1, 7, 50, 200)
TIMEOUT = 120.0           # bound on any single wait (never reached when things work)


def _episodes(tag: dict, size: int) -> list[dict]:
    """``size`` episodes whose metadata names their batch (``tag``) and position ``j``."""
    return [{"task_type": "t", "action_type": "a",
             "outcome": "success" if j % 2 else "failure", "reward": float(j % 3),
             "state_features": [1.0, float(j), float(size), 0.5],
             "metadata": {**tag, "j": j, "n": size}} for j in range(size)]


def _stored(path) -> tuple[str, list[tuple[int, dict]]]:
    """``PRAGMA integrity_check`` and every stored (id, metadata) of a store file."""
    con = sqlite3.connect(path)
    try:
        check = "; ".join(r[0] for r in con.execute("PRAGMA integrity_check"))
        rows = [(int(i), json.loads(m)) for i, m in
                con.execute("SELECT id, metadata FROM episodes ORDER BY id")]
    finally:
        con.close()
    return check, rows


def _by_batch(rows, key) -> dict:
    """(batch key) -> list of (id, j, n) of the stored rows."""
    out = defaultdict(list)
    for i, meta in rows:
        out[key(meta)].append((i, meta["j"], meta["n"]))
    return out


def _whole(members) -> bool:
    """A batch's rows hold each position 0..n-1 exactly once."""
    n = members[0][2]
    return sorted(j for _, j, _ in members) == list(range(n)) and all(m[2] == n for m in members)


# ============================================================== 8 concurrent writers
def _writer(path, w, barrier, results):
    """Writer ``w``: N_BATCHES batches of mixed sizes; writer 0 also compacts meanwhile."""
    store = ExperienceStore(path, dim=DIM)
    acked, busy, compactions = [], 0, 0
    barrier.wait(TIMEOUT)
    for b in range(N_BATCHES):
        size = SIZES[(b + w) % len(SIZES)]
        for _ in range(20):  # StoreBusyError is retryable and writes nothing
            try:
                ids = store.record(f"w{w}", _episodes({"w": w, "b": b}, size))["ids"]
                break
            except StoreBusyError:
                busy += 1
        else:
            raise RuntimeError(f"writer {w}: batch {b} busy 20 times")
        acked.append((b, size, ids))
        if w == 0 and b in COMPACT_AT:
            for _ in range(20):
                try:  # VACUUM + checkpoint; or keep-newest that keeps everything, then VACUUM
                    store.compact() if compactions % 2 == 0 else \
                        store.compact(compact_keep_records=1_000_000)
                    compactions += 1
                    break
                except StoreBusyError:
                    busy += 1
    status = store.persistence_status
    store.close()
    results.put({"w": w, "acked": acked, "busy": busy, "compactions": compactions,
                 "status": status})


@pytest.mark.slow
def test_eight_spawned_writers_one_compacting_lose_and_duplicate_nothing(tmp_path):
    path = str(tmp_path / "exp.db")
    ExperienceStore(path, dim=DIM).close()
    ctx = _fork_ctx()
    barrier = ctx.Barrier(N_WRITERS)
    results = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, w, barrier, results))
             for w in range(N_WRITERS)]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=TIMEOUT) for _ in procs]
    finally:
        for p in procs:
            p.join(TIMEOUT)
            if p.is_alive():
                p.kill()
                p.join(5)
    assert [p.exitcode for p in procs] == [0] * N_WRITERS
    got.sort(key=lambda r: r["w"])
    assert [r["status"] for r in got] == ["ok"] * N_WRITERS
    assert got[0]["compactions"] == len(COMPACT_AT)

    per_writer = N_BATCHES // len(SIZES) * sum(SIZES)
    acked = {}  # id -> (w, b, size)
    for r in got:
        assert sum(size for _, size, _ in r["acked"]) == per_writer
        for b, size, ids in r["acked"]:
            assert len(ids) == size
            for i in ids:
                assert i not in acked, f"id {i} acknowledged twice"
                acked[i] = (r["w"], b, size)
    assert len(acked) == N_WRITERS * per_writer == 2784

    check, rows = _stored(path)
    assert check == "ok"
    ids = [i for i, _ in rows]
    assert len(ids) == len(set(ids)) == 2784                      # 0 duplicated
    assert set(ids) == set(acked)                                  # 0 lost, 0 extra
    assert all(acked[i][:2] == (m["w"], m["b"]) for i, m in rows)  # each where it was acked
    keys = Counter((m["w"], m["b"], m["j"]) for _, m in rows)
    assert max(keys.values()) == 1
    batches = _by_batch(rows, lambda m: (m["w"], m["b"]))
    assert len(batches) == N_WRITERS * N_BATCHES and all(map(_whole, batches.values()))
    with ExperienceStore(path, dim=DIM) as again:
        assert len(again) == 2784 and again.persistence_status == "ok"
        stats = again.get_stats()
        assert stats["n_records"] == 2784 and stats["n_tenants"] == N_WRITERS
        assert stats["n_unpersisted"] == 0


# ============================================================== SIGKILL, SQLite
def _fork_ctx():
    """A forkserver that has dyna imported, so each child (a fresh process forked from that
    server, not from this one) starts in milliseconds instead of importing it again."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["dyna.experience", "dyna.store.jsonl"])
    return ctx


def _sqlite_child(path, life, conn, deadline):
    """Record batches until killed (or ``deadline``), reporting each acknowledged batch."""
    store = ExperienceStore(path, dim=DIM)
    b = 0
    while time.time() < deadline:
        size = KILL_SIZES[b % len(KILL_SIZES)]
        conn.send(("begin", life, b, size))
        ids = store.record("k", _episodes({"life": life, "b": b}, size))["ids"]
        conn.send(("ack", life, b, ids))
        if b == 0:  # the first record loads the compiled kernels (~0.3 s): kill after it
            conn.send(("ready", life, b, None))
        b += 1
    store.close()


def _jsonl_child(path, life, conn, deadline):
    """Append JSONL batches until killed (or ``deadline``), reporting each acknowledged one."""
    b = 0
    while time.time() < deadline:
        size = KILL_SIZES[b % len(KILL_SIZES)]
        recs = [{"life": life, "b": b, "j": j, "n": size, "pad": "x" * 100}
                for j in range(size)]
        conn.send(("begin", life, b, size))
        append_jsonl(path, recs)
        conn.send(("ack", life, b, size))
        if b == 0:
            conn.send(("ready", life, b, None))
        b += 1


def _kill_lives(child, path, seed, max_delay):
    """Run N_KILLS lives of ``child`` on ``path``, each SIGKILLed a random delay (up to
    ``max_delay`` s) after its first batch was acknowledged.

    Returns (acked: {(life, b): payload}, in_flight: {(life, b)} begun but not acked,
    kill delays).
    """
    ctx = _fork_ctx()
    rng = random.Random(seed)
    acked, in_flight, delays = {}, set(), []
    for life in range(N_KILLS):
        r, w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=child, args=(path, life, w, time.time() + 60.0))
        p.start()
        w.close()  # the child holds the only write end: EOF once it is dead
        begun = {}

        def take(msg, begun=begun):
            kind, lf, b, payload = msg
            if kind == "begin":
                begun[(lf, b)] = payload
            elif kind == "ack":
                acked[(lf, b)] = payload
                begun.pop((lf, b), None)

        try:
            while True:
                assert r.poll(TIMEOUT), "child never became ready"
                msg = r.recv()
                if msg[0] == "ready":
                    break
                take(msg)
            delay = rng.uniform(0.0, max_delay)
            delays.append(delay)
            end = time.monotonic() + delay
            while (left := end - time.monotonic()) > 0:
                if r.poll(left):
                    take(r.recv())
            os.kill(p.pid, signal.SIGKILL)
            p.join(TIMEOUT)
            assert p.exitcode == -signal.SIGKILL
            while r.poll(5):  # what it sent before dying is still in the pipe
                try:
                    take(r.recv())
                except EOFError:
                    break
        finally:
            if p.is_alive():
                p.kill()
                p.join(5)
            r.close()
        in_flight.update(begun)
    return acked, in_flight, delays


@pytest.mark.slow
def test_sigkill_sqlite_keeps_every_acknowledged_batch_and_no_partial_one(tmp_path):
    path = str(tmp_path / "exp.db")
    ExperienceStore(path, dim=DIM).close()
    acked, in_flight, delays = _kill_lives(_sqlite_child, path, seed=14, max_delay=0.2)
    assert len(delays) == N_KILLS
    assert len(acked) >= N_KILLS  # each life got batches acknowledged before its kill
    check, rows = _stored(path)
    assert check == "ok"
    batches = _by_batch(rows, lambda m: (m["life"], m["b"]))
    assert all(map(_whole, batches.values()))                      # no partial batch
    for key, ids in acked.items():                                 # every acked batch, its ids
        assert key in batches, f"acknowledged batch {key} lost"
        assert sorted(i for i, _, _ in batches[key]) == sorted(ids)
    assert set(batches) - set(acked) <= in_flight                  # only the batch in flight
    ids = [i for i, _ in rows]
    assert len(ids) == len(set(ids))
    with ExperienceStore(path, dim=DIM) as again:                  # opens, and still writes
        assert len(again) == len(rows) and again.persistence_status == "ok"
        again.record("k", _episodes({"life": -1, "b": 0}, 7))
    assert len(_stored(path)[1]) == len(rows) + 7


def _single_child(path, life, conn, deadline):
    """Record one episode per call (the fast single write) until killed, reporting each."""
    store = ExperienceStore(path, dim=DIM)
    store.record("k", _episodes({"life": life, "b": -1}, 1))  # labels known: fast path next
    b = 0
    while time.time() < deadline:
        conn.send(("begin", life, b, 1))
        ids = store.record("k", **_episodes({"life": life, "b": b}, 1)[0])["ids"]
        conn.send(("ack", life, b, ids))
        if b == 0:
            conn.send(("ready", life, b, None))
        b += 1
    store.close()


@pytest.mark.slow
def test_sigkill_single_records_keep_every_acknowledged_episode(tmp_path):
    """record() of one episode returns after its own commit: after 10 SIGKILLs
    every acknowledged episode is stored with its id, at most the one in flight besides."""
    path = str(tmp_path / "one.db")
    ExperienceStore(path, dim=DIM).close()
    acked, in_flight, delays = _kill_lives(_single_child, path, seed=19, max_delay=0.2)
    assert len(delays) == N_KILLS and len(acked) >= N_KILLS
    check, rows = _stored(path)
    assert check == "ok"
    stored = {(m["life"], m["b"]): i for i, m in rows if m["b"] >= 0}
    for key, ids in acked.items():
        assert stored.get(key) == ids[0], f"acknowledged episode {key} lost"
    assert set(stored) - set(acked) <= in_flight
    assert len({i for i, _ in rows}) == len(rows)


# ============================================================== SIGKILL, JSON Lines
def _check_jsonl(path, acked, in_flight):
    recs, report = read_jsonl(path)
    assert report.n_skipped <= N_KILLS   # at most one torn line per kill, never a lost record
    batches = defaultdict(list)
    for rec in recs:
        batches[(rec["life"], rec["b"])].append((None, rec["j"], rec["n"]))
    partial = sorted(k for k, m in batches.items() if not _whole(m))
    assert partial == [], f"partly visible batches: {partial}"
    for key, size in acked.items():
        assert key in batches and len(batches[key]) == size, f"acknowledged {key} lost"
    assert set(batches) - set(acked) <= in_flight


@pytest.mark.slow
def test_sigkill_jsonl_keeps_every_acknowledged_batch(tmp_path):
    path = str(tmp_path / "exp.jsonl")
    acked, in_flight, delays = _kill_lives(_jsonl_child, path, seed=15, max_delay=0.05)
    assert len(delays) == N_KILLS and len(acked) >= N_KILLS
    _check_jsonl(path, acked, in_flight)


def _torn_jsonl_child(path, conn):
    """Two whole batches, then a 50-record batch whose write is cut after 5,000 bytes; then
    the writer SIGKILLs itself (a kill landing inside the batch's write, deterministically)."""
    for b in range(2):
        append_jsonl(path, [{"life": 0, "b": b, "j": j, "n": 7, "pad": "x" * 200}
                            for j in range(7)])
        conn.send(("ack", 0, b, 7))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # an over-limit write fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE,
                       (os.path.getsize(path) + 5000, resource.RLIM_INFINITY))
    conn.send(("begin", 0, 2, 50))
    try:
        append_jsonl(path, [{"life": 0, "b": 2, "j": j, "n": 50, "pad": "x" * 200}
                            for j in range(50)])
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def test_sigkill_inside_a_jsonl_batch_write_leaves_none_of_it(tmp_path):
    """No line of a batch cut by SIGKILL is read back as a valid record (the JSONL batch
    header counts its lines)."""
    path = str(tmp_path / "exp.jsonl")
    ctx = _fork_ctx()
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_torn_jsonl_child, args=(path, w))
    p.start()
    w.close()
    msgs = []
    try:
        while r.poll(TIMEOUT):
            try:
                msgs.append(r.recv())
            except EOFError:
                break
        p.join(TIMEOUT)
    finally:
        if p.is_alive():
            p.kill()
            p.join(5)
        r.close()
    assert p.exitcode == -signal.SIGKILL
    assert os.path.getsize(path) > 2 * 7 * 200  # the cut batch's first bytes reached the file
    acked = {(m[1], m[2]): m[3] for m in msgs if m[0] == "ack"}
    assert sorted(acked) == [(0, 0), (0, 1)]
    _check_jsonl(path, acked, {(0, 2)})
