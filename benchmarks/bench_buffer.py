"""ExperienceBuffer at volume: batched record, compaction, pruning, resident memory.

Run with ``pytest benchmarks/bench_buffer.py -s`` (several minutes, ~8 GiB at peak). The
targets, each a ratio of medians to a peer timed in the same run (each contestant a
pytest-benchmark entry of its own, :mod:`conftest`):

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


@pytest.mark.parametrize("batch", [1_000, 10_000])
def test_batched_record_vs_preallocated_numpy(episodes, compare, batch):
    e = episodes
    buf = ExperienceBuffer(D, capacity=N)
    actions = ["left", "right", "up", "down"]
    peer_cols = {"id": np.empty(N, np.int64), "reward": np.empty(N), "timestamp": np.empty(N),
                 "tenant": np.empty(N, np.int32), "task": np.empty(N, np.int32),
                 "action": np.empty(N, np.int32), "outcome": np.empty(N, np.int32),
                 "features": np.empty((N, D), np.float32)}

    def ours():
        buf.clear()
        for a in range(0, N, batch):
            s = slice(a, a + batch)
            buf.record_batch(reward=e["reward"][s], timestamp=e["timestamp"][s],
                             tenant_id="tenant-1", task_type="navigate",
                             action_type=Categorical(e["action"][s], actions),
                             outcome=Categorical(e["outcome"][s], OUTCOMES),
                             state_features=e["features"][s])

    def peer():
        p = peer_cols
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

    ratio = compare(f"record 1M x {D} in batches of {batch}", ours,
                    {"preallocated numpy": peer}, rounds=9)
    assert len(buf) == N and buf.column("reward")[-1] == e["reward"][-1]
    np.testing.assert_array_equal(buf.column("features")[12345], e["features"][12345])
    r = ratio["preallocated numpy"]
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


def test_compact_newest_100_per_group_vs_polars(big, compare):
    buf, df = big
    state = {}

    def setup():
        state["buf"] = buf.copy()

    def ours():
        state["buf"].compact(KEEP)

    def peer():
        state["df"] = df.filter(
            pl.int_range(pl.len()).reverse().over(["tenant_id", "task_type"]) < KEEP)

    ratio = compare(f"keep newest {KEEP} per group, {M_ROWS} rows, {GROUPS} groups", ours,
                    {"polars window filter": peer}, rounds=3, setup_ours=setup)
    assert state["buf"].column("id").tolist() == state["df"].get_column("id").to_list()
    assert len(state["buf"]) == GROUPS * KEEP
    r = ratio["polars window filter"]
    assert r <= 1.5, f"compaction is {r:.2f}x polars (target 1.5x)"


@pytest.mark.parametrize("order", ["time order", "random order"])
def test_prune_vs_polars(big, big_columns, compare, order):
    if order == "random order":
        ts = 1.7e9 + np.random.default_rng(2).permutation(M_ROWS).astype(np.float64)
        base, frame = _big_buffer(big_columns, ts)
    else:
        base, frame = big
    cutoff = 1.7e9 + 0.4 * M_ROWS
    state = {}

    def setup():
        state["buf"] = base.copy()

    def ours():
        state["n"] = state["buf"].prune_older_than(cutoff)

    def peer():
        state["df"] = frame.filter(pl.col("timestamp") >= cutoff)

    ratio = compare(f"prune older than T, {M_ROWS} rows, {order}", ours,
                    {"polars filter": peer}, rounds=3, setup_ours=setup)
    assert len(state["buf"]) == state["df"].height == M_ROWS - state["n"]
    assert state["buf"].column("id").tolist() == state["df"].get_column("id").to_list()
    r = ratio["polars filter"]
    assert r <= 1.5, f"pruning ({order}) is {r:.2f}x polars (target 1.5x)"


def test_resident_size_within_1_3x_of_raw_column_bytes(compare):
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
    out = compare.time("dyna", lambda: subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout,
        rounds=1, warmup=0)
    resident, raw, cap = (int(x) for x in out.split())
    ratio = resident / raw
    compare.extra_info.update(resident_bytes=resident, raw_bytes=raw, ratio_resident_raw=ratio)
    print(f"\nresident {resident / 2**20:.1f} MiB for raw columns {raw / 2**20:.1f} MiB "
          f"(capacity {cap}): ratio {ratio:.3f}")
    assert ratio <= 1.3
