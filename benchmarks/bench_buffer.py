"""ExperienceBuffer at volume: batched record, compaction, pruning, resident memory.

Run with ``pytest benchmarks/bench_buffer.py -s`` (several minutes, ~8 GiB at peak). The
targets, each a ratio of medians to a peer timed in the same run (each contestant a test
and a pytest-benchmark entry of its own, :mod:`conftest`), asserted in the test after them:

- batched record of 1M episodes (d = 64): within 1.5x of writing the same arrays into
  preallocated numpy arrays. Both sides are preallocated and warm; dyna additionally
  validates (finite rewards, timestamps and features), encodes categoricals and computes the
  inverse feature norms for the index. Measured for batches of 1,000 and of 10,000 rows.
- keep the newest 100 episodes per (tenant, task type), 10M rows, 1,000 groups: within 1.5x
  of the same operation in polars (a window expression keeping row order). d = 16 here to keep
  the 10M-row copies within memory; the work is independent of d (100k survivors).
- prune everything older than T, 10M rows: within 1.5x of polars ``filter``, for rows in time
  order and in random time order.
- resident size of a 1M x 64 buffer: within 1.3x of its raw column bytes (fresh process;
  the process's time is its entry, the ratio is of bytes).
"""

import subprocess
import sys
import textwrap

import numpy as np
import polars as pl
import pytest

from dyna.buffer import Categorical, ExperienceBuffer

N, D = 1_000_000, 64
OUTCOMES = ["failure", "success"]


@pytest.fixture(scope="module")
def episodes():
    rng = np.random.default_rng(0)
    return {
        "features": rng.standard_normal((N, D), dtype=np.float32),
        "reward": rng.standard_normal(N),
        "timestamp": 1.7e9 + np.arange(N, dtype=np.float64),
        "action": rng.integers(0, 4, N).astype(np.int32),
        "outcome": rng.integers(0, 2, N).astype(np.int32),
    }


BATCHES = (1_000, 10_000)


def _record_dyna(e, batch):
    """dyna: ``record_batch`` of all N episodes in batches, into a buffer made once."""
    buf = ExperienceBuffer(D, capacity=N)
    actions = ["left", "right", "up", "down"]

    def run():
        buf.clear()
        for a in range(0, N, batch):
            s = slice(a, a + batch)
            buf.record_batch(reward=e["reward"][s], timestamp=e["timestamp"][s],
                             tenant_id="tenant-1", task_type="navigate",
                             action_type=Categorical(e["action"][s], actions),
                             outcome=Categorical(e["outcome"][s], OUTCOMES),
                             state_features=e["features"][s])
        return buf
    return run


def _record_numpy(e, batch):
    """The peer: the same columns written into preallocated numpy arrays."""
    p = {"id": np.empty(N, np.int64), "reward": np.empty(N), "timestamp": np.empty(N),
         "tenant": np.empty(N, np.int32), "task": np.empty(N, np.int32),
         "action": np.empty(N, np.int32), "outcome": np.empty(N, np.int32),
         "features": np.empty((N, D), np.float32)}

    def run():
        for a in range(0, N, batch):
            s = slice(a, a + batch)
            p["id"][s] = np.arange(a, a + batch)
            p["reward"][s] = e["reward"][s]
            p["timestamp"][s] = e["timestamp"][s]
            p["tenant"][s] = 1
            p["task"][s] = 1
            p["action"][s] = e["action"][s]
            p["outcome"][s] = e["outcome"][s]
            p["features"][s] = e["features"][s]
    return run


@pytest.mark.parametrize("contestant", ["dyna", "preallocated numpy"])
@pytest.mark.parametrize("batch", [pytest.param(b, id=str(b), marks=pytest.mark.benchmark(
    group=f"record 1M x {D} in batches of {b}")) for b in BATCHES])
def test_batched_record(episodes, benchmark, contestant, batch):
    e = episodes
    make = _record_dyna if contestant == "dyna" else _record_numpy
    buf = benchmark.pedantic(make(e, batch), rounds=9, warmup_rounds=1)
    if contestant == "dyna":
        assert len(buf) == N and buf.column("reward")[-1] == e["reward"][-1]
        np.testing.assert_array_equal(buf.column("features")[12345], e["features"][12345])


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.ratio(of="test_batched_record")
def test_batched_record_within_1_5x_of_preallocated_numpy(medians, batch):
    r = medians.ratio("dyna", "preallocated numpy")
    assert r <= 1.5, f"batched record is {r:.2f}x preallocated numpy (target 1.5x)"


M_ROWS, GROUPS, KEEP, D_SMALL = 10_000_000, 1_000, 100, 16


def _big_buffer(cols, ts):
    buf = ExperienceBuffer(D_SMALL, capacity=M_ROWS)
    tenants = [f"tenant-{i}" for i in range(10)]
    tasks = [f"task-{i}" for i in range(GROUPS // 10)]
    for a in range(0, M_ROWS, 1_000_000):
        s = slice(a, a + 1_000_000)
        buf.record_batch(reward=cols["reward"][s], timestamp=ts[s],
                         tenant_id=Categorical(cols["tenant"][s], tenants),
                         task_type=Categorical(cols["task"][s], tasks), action_type="a",
                         outcome="success", state_features=cols["features"][s])
    df = pl.DataFrame({"id": buf.column("id"), "tenant_id": buf.column("tenant_id"),
                       "task_type": buf.column("task_type"), "reward": cols["reward"],
                       "timestamp": ts,
                       "features": pl.Series(cols["features"],
                                             dtype=pl.Array(pl.Float32, D_SMALL))})
    return buf, df


@pytest.fixture(scope="module")
def big_columns():
    rng = np.random.default_rng(1)
    return {"tenant": rng.integers(0, 10, M_ROWS).astype(np.int32),
            "task": rng.integers(0, GROUPS // 10, M_ROWS).astype(np.int32),
            "reward": rng.standard_normal(M_ROWS),
            "features": rng.standard_normal((M_ROWS, D_SMALL), dtype=np.float32)}


@pytest.fixture(scope="module")
def big(big_columns):
    """10M rows in time order, as a buffer and as the polars peer's DataFrame."""
    return _big_buffer(big_columns, 1.7e9 + np.arange(M_ROWS, dtype=np.float64))


def _keep_newest(df):
    """The polars peer of ``compact(KEEP)``: the newest KEEP rows of each group, in order."""
    return df.filter(pl.int_range(pl.len()).reverse().over(["tenant_id", "task_type"]) < KEEP)


@pytest.mark.benchmark(group=f"keep newest {KEEP} per group, {M_ROWS} rows, {GROUPS} groups")
@pytest.mark.parametrize("contestant", ["dyna", "polars window filter"])
def test_compact_newest_100_per_group(big, benchmark, contestant):
    buf, df = big
    if contestant == "polars window filter":
        benchmark.pedantic(lambda: _keep_newest(df), rounds=3, warmup_rounds=1)
        return
    copies = []

    def setup():
        copies.append(buf.copy())
        return (copies[-1],), {}

    benchmark.pedantic(lambda b: b.compact(KEEP), setup=setup, rounds=3, warmup_rounds=1)
    kept = copies[-1]
    assert kept.column("id").tolist() == _keep_newest(df).get_column("id").to_list()
    assert len(kept) == GROUPS * KEEP


@pytest.mark.ratio(of="test_compact_newest_100_per_group")
def test_compact_within_1_5x_of_polars(medians):
    r = medians.ratio("dyna", "polars window filter")
    assert r <= 1.5, f"compaction is {r:.2f}x polars (target 1.5x)"


@pytest.fixture(scope="module")
def big_random(big_columns):
    """10M rows in random time order, as a buffer and as the polars peer's DataFrame."""
    ts = 1.7e9 + np.random.default_rng(2).permutation(M_ROWS).astype(np.float64)
    return _big_buffer(big_columns, ts)


ORDERS = {"time order": "big", "random order": "big_random"}


@pytest.mark.parametrize("contestant", ["dyna", "polars filter"])
@pytest.mark.parametrize("order", [pytest.param(o, marks=pytest.mark.benchmark(
    group=f"prune older than T, {M_ROWS} rows, {o}")) for o in ORDERS])
def test_prune(request, benchmark, contestant, order):
    base, frame = request.getfixturevalue(ORDERS[order])
    cutoff = 1.7e9 + 0.4 * M_ROWS

    def peer():
        return frame.filter(pl.col("timestamp") >= cutoff)

    if contestant == "polars filter":
        benchmark.pedantic(peer, rounds=3, warmup_rounds=1)
        return
    copies = []

    def setup():
        copies.append(base.copy())
        return (copies[-1],), {}

    n = benchmark.pedantic(lambda b: b.prune_older_than(cutoff), setup=setup, rounds=3,
                           warmup_rounds=1)
    kept, want = copies[-1], peer()
    assert len(kept) == want.height == M_ROWS - n
    assert kept.column("id").tolist() == want.get_column("id").to_list()


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.ratio(of="test_prune")
def test_prune_within_1_5x_of_polars(medians, order):
    r = medians.ratio("dyna", "polars filter")
    assert r <= 1.5, f"pruning ({order}) is {r:.2f}x polars (target 1.5x)"


@pytest.mark.benchmark(group=f"resident size of a 1M x {D} buffer, fresh process")
def test_resident_size_within_1_3x_of_raw_column_bytes(benchmark):
    script = textwrap.dedent(f"""
        import numpy as np
        from dyna.buffer import Categorical, ExperienceBuffer

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096

        rng = np.random.default_rng(0)
        feats = rng.standard_normal((10_000, {D}), dtype=np.float32)
        buf = ExperienceBuffer({D})          # default capacity 1024, grows by doubling
        buf.record_batch(reward=np.zeros(10), tenant_id="t", task_type="k", action_type="a",
                         outcome="s", state_features=feats[:10])
        buf.clear()
        before = rss()
        for a in range(0, {N}, 10_000):
            buf.record_batch(reward=rng.standard_normal(10_000), tenant_id="t",
                             task_type="k", action_type=Categorical(
                                 rng.integers(0, 4, 10_000), ["l", "r", "u", "d"]),
                             outcome="success", run_id="run-1", state_features=feats)
        print(rss() - before, buf.nbytes(), buf.capacity)
    """)
    out = benchmark.pedantic(lambda: subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    resident, raw, cap = (int(x) for x in out.split())
    ratio = resident / raw
    benchmark.extra_info.update(resident_bytes=resident, raw_bytes=raw, ratio_resident_raw=ratio)
    print(f"\nresident {resident / 2**20:.1f} MiB for raw columns {raw / 2**20:.1f} MiB "
          f"(capacity {cap}): ratio {ratio:.3f}")
    assert ratio <= 1.3
