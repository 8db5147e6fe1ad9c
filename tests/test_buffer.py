"""ExperienceBuffer: growth, ring mode, validation, selection, sampling, pruning, compaction."""

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyna.buffer import FIELDS, Categorical, ExperienceBuffer
from dyna.errors import ConfigError
from dyna.redact import REDACTED, hash_features

BASE = dict(tenant_id="t1", task_type="nav", action_type="up", outcome="success")


def rewards(buf):
    return buf.column("reward").tolist()


# --------------------------------------------------------------------------- growth

def test_growth_from_capacity_two_keeps_order_and_dtype():
    buf = ExperienceBuffer(dim=4, capacity=2)
    for r in (1.0, 2.0, 3.0):
        buf.record(reward=r, **BASE)
    assert len(buf) == 3 and rewards(buf) == [1.0, 2.0, 3.0]
    ids = buf.record_batch(reward=np.arange(4.0, 9.0), **BASE)
    assert ids.tolist() == [3, 4, 5, 6, 7] and ids.dtype == np.int64
    assert len(buf) == 8 and rewards(buf) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert buf.capacity >= len(buf)
    assert buf.column("reward").dtype == np.float64
    assert buf.column("id").tolist() == list(range(8))
    assert buf.column("features").dtype == np.float32 and buf.column("features").shape == (8, 4)
    # No API exposes rows >= len: sampling, export, kNN, row dicts.
    assert buf.sample(10_000, seed=1).max() < 8
    assert buf.to_polars().height == 8 and len(buf.rows()) == 8
    rows, _ = buf.index.search(np.ones(4), 100)
    assert rows.size == 8 and rows.max() < 8
    assert all(buf.column(name).shape[0] == 8 for name in FIELDS)


def test_growth_never_repeats_data_in_hidden_capacity():
    buf = ExperienceBuffer(dim=2, capacity=3)
    buf.record_batch(reward=[1.0, 2.0, 3.0], state_features=np.ones((3, 2)), **BASE)
    buf.record(reward=4.0, state_features=[1.0, 0.0], **BASE)
    hidden = buf._store.array("reward")[len(buf):]
    assert buf.capacity == 6 and hidden.tolist() == [0.0, 0.0]  # zeros, not [1, 2] again


# --------------------------------------------------------------------------- ring

def test_ring_full_flag_eviction_and_sampling():
    buf = ExperienceBuffer(dim=2, capacity=5, ring=True)
    for r in (1.0, 2.0, 3.0):
        buf.record(reward=r, **BASE)
    assert len(buf) == 3 and buf.is_full is False
    sampled = buf.column("reward")[buf.sample(1000, seed=0)]
    assert set(sampled.tolist()) <= {1.0, 2.0, 3.0} and 0.0 not in sampled
    buf.record(reward=4.0, **BASE)
    assert buf.is_full is False
    buf.record(reward=5.0, **BASE)
    assert buf.is_full is True and len(buf) == 5
    buf.record(reward=6.0, **BASE)
    assert len(buf) == 5 and sorted(rewards(buf)) == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert buf.column("reward")[buf.order()].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]


def test_ring_batch_crossing_the_end_keeps_the_last_rows_in_order():
    buf = ExperienceBuffer(dim=2, capacity=5, ring=True)
    buf.record_batch(reward=[1.0, 2.0, 3.0], **BASE)
    ids = buf.record_batch(reward=np.arange(10.0, 17.0), **BASE)  # 7 rows into capacity 5
    assert ids.tolist() == list(range(3, 10))
    assert buf.is_full and len(buf) == 5
    assert buf.column("reward")[buf.order()].tolist() == [12.0, 13.0, 14.0, 15.0, 16.0]
    assert buf.column("id")[buf.order()].tolist() == [5, 6, 7, 8, 9]
    buf.record_batch(reward=[20.0, 21.0], **BASE)                # wraps again
    assert buf.column("reward")[buf.order()].tolist() == [14.0, 15.0, 16.0, 20.0, 21.0]
    assert [r["reward"] for r in buf.rows(buf.order())] == [14.0, 15.0, 16.0, 20.0, 21.0]


def test_ring_index_follows_overwrites_and_delete_linearises():
    buf = ExperienceBuffer(dim=2, capacity=3, ring=True)
    buf.record_batch(reward=[1.0, 2.0, 3.0, 4.0], state_features=[[1, 0], [0, 1], [1, 1], [1, 0]],
                     **BASE)
    rows, scores = buf.index.search([1, 0], 3)
    # Slot 0 now holds id 3 (reward 4); the evicted id 0 can never come back.
    assert buf.column("id")[rows].tolist() == [3, 2, 1]
    np.testing.assert_allclose(scores, [1.0, np.sqrt(0.5), 0.0], atol=1e-6)
    assert buf.delete(buf.column("reward") == 3.0) == 1
    assert buf.column("reward").tolist() == [2.0, 4.0] and not buf.is_full
    buf.record(reward=5.0, **BASE)
    assert buf.column("reward")[buf.order()].tolist() == [2.0, 4.0, 5.0] and buf.is_full


# --------------------------------------------------------------------------- validation

def _snapshot(buf):
    return (len(buf), buf.next_id, {n: buf.categories(n) for n in ("task_type", "outcome")},
            buf.to_polars())


@pytest.mark.parametrize("bad, field", [
    (dict(reward=[1.0, np.nan, 2.0]), "reward[1]"),
    (dict(reward=[1.0, 2.0, np.inf]), "reward[2]"),
    (dict(timestamp=[0.0, np.nan, 1.0]), "timestamp[1]"),
    (dict(state_features=np.ones((3, 5))), "state_features"),
    (dict(state_features=[[1, 0, 0, 0], [np.nan, 0, 0, 0], [1, 1, 1, 1]]), "state_features[1]"),
    (dict(task_type=["new-task", "", "x"]), "task_type[1]"),
    (dict(outcome=None), "outcome"),
    (dict(action_type=["a", "b"]), "action_type"),
    (dict(ids=[5, 4, 6]), "ids"),
    (dict(metadata=[{"a": 1}, {"b": {1, 2}}, None]), "metadata[1]"),
    (dict(colour=["red"] * 3), "colour"),
])
def test_bad_batches_raise_naming_the_field_and_write_nothing(bad, field):
    buf = ExperienceBuffer(dim=4, capacity=2)
    buf.record(reward=0.5, **BASE)
    before = _snapshot(buf)
    cols = dict(BASE, reward=[1.0, 2.0, 3.0], outcome=["success", "brand-new-label", "failure"])
    cols.update(bad)
    with pytest.raises(ConfigError) as err:
        buf.record_batch(**cols)
    assert err.value.field == field
    after = _snapshot(buf)
    assert after[:3] == before[:3] and after[3].equals(before[3])
    assert buf.code("outcome", "brand-new-label") == -1


@pytest.mark.parametrize("bad, field", [
    (dict(reward=float("nan")), "reward"), (dict(reward="1"), "reward"),
    (dict(reward=None), "reward"), (dict(tenant_id=""), "tenant_id"),
    (dict(state_features=[1.0, 2.0]), "state_features"),
    (dict(timestamp=float("inf")), "timestamp"), (dict(size=3), "size"),
])
def test_bad_single_records_raise(bad, field):
    buf = ExperienceBuffer(dim=4)
    with pytest.raises(ConfigError) as err:
        buf.record(**{**BASE, "reward": 1.0, **bad})
    assert err.value.field == field
    assert len(buf) == 0 and buf.next_id == 0


def test_constructor_validation():
    for kwargs in (dict(dim=0), dict(capacity=0), dict(dim=2.5), dict(redact_keys="token")):
        with pytest.raises(ConfigError):
            ExperienceBuffer(**kwargs)


# --------------------------------------------------------------------------- content

def test_dicts_are_redacted_stored_as_json_and_hashed_into_features():
    buf = ExperienceBuffer(dim=32, clock=lambda: 1234.5)
    state = {"pos": [1, 2], "auth": {"Token": "abc"}, "note": "key sk-ABCDEFGHIJKLMNOPQRSTUV"}
    ident = buf.record(reward=1.0, state_before=state, metadata={"password": "x", "n": 3},
                       run_id="run-7", **BASE)
    assert ident == 0 and state["auth"]["Token"] == "abc"  # caller's dict untouched
    stored = json.loads(buf.column("state_before")[0])
    # ``auth`` is a sensitive key name: its whole value goes, whatever it holds
    assert stored == {"pos": [1, 2], "auth": REDACTED, "note": f"key {REDACTED}"}
    row = buf.rows([0], features=True)[0]
    assert row["metadata"] == {"password": REDACTED, "n": 3}
    assert row["timestamp"] == 1234.5 and row["run_id"] == "run-7" and row["task_id"] is None
    assert row["action_taken"] is None
    want = hash_features({"state_before": stored, "action_taken": None, "state_after": None,
                          "metadata": {"password": REDACTED, "n": 3}}, 32)
    np.testing.assert_array_equal(buf.column("features")[0], want)
    assert row["state_features"] == want.tolist()
    # Batches hash the same way.
    buf.record_batch(reward=[2.0], state_before=[state], metadata=[{"password": "y", "n": 3}],
                     **BASE)
    np.testing.assert_array_equal(buf.column("features")[1], want)


def test_categorical_inputs_codes_and_labels():
    buf = ExperienceBuffer(dim=2)
    buf.record_batch(reward=[1.0, 2.0, 3.0, 4.0], tenant_id="t1", task_type="nav",
                     action_type=np.array([3, 0, 3, 1]),
                     outcome=Categorical(np.array([1, 0, 1, 0]), ["failure", "success", None]),
                     run_id=["r1", None, "r1", "r2"])
    assert buf.labels("action_type").tolist() == ["3", "0", "3", "1"]
    assert buf.labels("outcome").tolist() == ["success", "failure", "success", "failure"]
    assert buf.labels("outcome", [0, 1]).tolist() == ["success", "failure"]
    assert buf.categories("run_id") == ("", "r1", "r2")
    assert [r["run_id"] for r in buf.rows()] == ["r1", None, "r1", "r2"]
    with pytest.raises(ConfigError):  # code 2 is None: a missing required outcome
        buf.record_batch(reward=[1.0], tenant_id="t", task_type="x", action_type="a",
                         outcome=Categorical(np.array([2]), ["a", "b", None]))
    assert buf.code("outcome", "success") == buf.column("outcome")[0]
    with pytest.raises(ConfigError):
        buf.column("nope")
    with pytest.raises(ConfigError):
        buf.categories("reward")


def test_categorical_labels_known_new_missing_and_str_subclass_get_the_same_codes():
    buf = ExperienceBuffer(dim=2)
    base = {"tenant_id": "t1", "task_type": "nav", "outcome": "success"}
    buf.record_batch(reward=[1.0, 2.0], action_type=Categorical(np.array([0, 1]), ["a", "b"]),
                     **base)
    assert buf.categories("action_type") == ("", "a", "b")
    # every label known: codes straight from the dictionary, nothing new
    buf.record_batch(reward=[1.0, 2.0, 3.0],
                     action_type=Categorical(np.array([1, 0, 1], dtype=np.int16), ["b", "a"]),
                     **base)
    # a new label, a numpy str and a number among known ones
    buf.record_batch(reward=[1.0, 2.0, 3.0, 4.0], action_type=Categorical(
        np.array([0, 1, 2, 3]), ["a", "c", np.str_("b"), 7]), **base)
    assert buf.categories("action_type") == ("", "a", "b", "c", "7")
    assert buf.column("action_type").tolist() == [1, 2, 1, 2, 1, 1, 3, 2, 4]
    with pytest.raises(ConfigError) as err:   # a bytes label is refused, nothing recorded
        buf.record_batch(reward=[1.0], action_type=Categorical(np.array([0]), [b"a"]),
                         **base)
    assert err.value.field == "action_type" and len(buf) == 9


def test_optional_columns_stay_correct_after_deletes():
    # Unused optional columns are skipped on write; stale values must never resurface.
    buf = ExperienceBuffer(dim=2, capacity=4)
    buf.record(reward=1.0, run_id="r1", metadata={"a": 1}, **BASE)
    buf.delete([0])
    buf.record_batch(reward=[2.0, 3.0], **BASE)
    assert [r["run_id"] for r in buf.rows()] == [None, None]
    assert [r["metadata"] for r in buf.rows()] == [None, None]


# --------------------------------------------------------------------------- selection

def _mixed_buffer():
    buf = ExperienceBuffer(dim=3, capacity=4)
    buf.record_batch(reward=[1.0, 2.0, 3.0], tenant_id="a", task_type="x", action_type="u",
                     outcome="success", state_features=np.eye(3))
    buf.record_batch(reward=[4.0, 5.0], tenant_id="b", task_type=["x", "y"], action_type="u",
                     outcome="failure", state_features=[[1, 0, 0], [1, 1, 0]])
    buf.record_batch(reward=[6.0], tenant_id="a", task_type="y", action_type="u",
                     outcome="success", state_features=[[1, 0, 0]])
    return buf


def test_select_views_and_filtered_search():
    buf = _mixed_buffer()
    assert buf.select(tenant_id="a").tolist() == [0, 1, 2, 5]
    assert buf.select(tenant_id="a", task_type="y").tolist() == [5]
    assert buf.select(tenant_id="a ").tolist() == [] and buf.select(tenant_id="").tolist() == []
    assert buf.select(task_type=None).tolist() == list(range(6))
    assert buf.select_slice(tenant_id="b") == slice(3, 5)
    assert buf.select_slice(tenant_id="a") is None
    view = buf.view(tenant_id="b")
    assert np.shares_memory(view["reward"], buf.column("reward"))
    assert np.shares_memory(view["features"], buf.column("features"))
    assert view["reward"].tolist() == [4.0, 5.0]
    gathered = buf.view(tenant_id="a")
    assert not np.shares_memory(gathered["reward"], buf.column("reward"))
    assert gathered["reward"].tolist() == [1.0, 2.0, 3.0, 6.0]
    rows, scores = buf.search([1, 0, 0], 10, tenant_id="a")
    assert rows.tolist() == [5, 0, 2, 1]   # ties at 1.0 and at 0.0: newer first
    np.testing.assert_allclose(scores, [1, 1, 0, 0], atol=1e-7)
    rows, _ = buf.search([1, 0, 0], 10, tenant_id="b")
    assert rows.tolist() == [3, 4]
    assert buf.search([1, 0, 0], 3, tenant_id="zzz")[0].tolist() == []
    with pytest.raises(ConfigError):
        buf.select(reward=1.0)


def test_sample_is_seeded_respects_weights_and_candidates():
    buf = _mixed_buffer()
    a = buf.sample(50, seed=3)
    assert np.array_equal(a, buf.sample(50, seed=3)) and a.dtype == np.int64
    assert a.min() >= 0 and a.max() < 6
    w = np.array([0, 1, 0, 0, 3, 0], dtype=float)
    s = buf.sample(4000, seed=0, weights=w)
    assert set(s.tolist()) == {1, 4}
    assert abs(np.mean(s == 4) - 0.75) < 0.03
    c = buf.sample(100, seed=1, candidates=buf.select(tenant_id="b"))
    assert set(c.tolist()) <= {3, 4}
    assert buf.sample(0, seed=1).tolist() == []
    for kwargs in (dict(n=-1), dict(n=2, weights=np.zeros(6)), dict(n=2, weights=-w),
                   dict(n=2, weights=np.ones(5))):
        with pytest.raises(ConfigError):
            buf.sample(**kwargs)
    with pytest.raises(ConfigError):
        ExperienceBuffer(dim=2).sample(1)


# --------------------------------------------------------------------------- deletion

def test_prune_sorted_fast_path_and_unsorted_path():
    buf = ExperienceBuffer(dim=2, capacity=4)
    buf.record_batch(reward=np.arange(6.0), timestamp=np.arange(6.0) * 10, **BASE)
    assert buf.prune_older_than(25.0) == 3
    assert rewards(buf) == [3.0, 4.0, 5.0] and buf.column("id").tolist() == [3, 4, 5]
    assert buf.index.search([1, 1], 10)[0].tolist() == [2, 1, 0]   # zero rows, newest first
    buf.record_batch(reward=[6.0, 7.0], timestamp=[5.0, 70.0], **BASE)   # out of order
    assert buf.prune_older_than(31.0) == 1 + 1   # rows with t=30 and t=5
    assert rewards(buf) == [4.0, 5.0, 7.0]
    assert buf.prune_older_than(-1e9) == 0
    for bad in (float("nan"), "yesterday"):
        with pytest.raises(ConfigError):
            buf.prune_older_than(bad)


def test_prefix_drop_then_growth_reuses_space():
    buf = ExperienceBuffer(dim=2, capacity=8)
    buf.record_batch(reward=np.arange(8.0), timestamp=np.arange(8.0), **BASE)
    buf.prune_older_than(6.0)
    buf.record_batch(reward=[8.0, 9.0, 10.0], timestamp=[8.0, 9.0, 10.0], **BASE)
    assert buf.capacity == 8 and rewards(buf) == [6.0, 7.0, 8.0, 9.0, 10.0]
    assert buf.column("id").tolist() == [6, 7, 8, 9, 10]


def _reference_compact(tenants, tasks, ts, keep):
    survivors = []
    for g in set(zip(tenants, tasks)):
        members = [i for i in range(len(ts)) if (tenants[i], tasks[i]) == g]
        members.sort(key=lambda i: (ts[i], i))
        survivors.extend(members[max(0, len(members) - keep):])
    return sorted(survivors)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 5)),
                min_size=0, max_size=40),
       st.integers(0, 4), st.booleans())
def test_compact_keeps_newest_per_group_like_reference(rows, keep, sort_time):
    if sort_time:
        rows = sorted(rows, key=lambda r: r[2])
    tenants = [f"t{r[0]}" for r in rows]
    tasks = [f"k{r[1]}" for r in rows]
    ts = [float(r[2]) for r in rows]
    buf = ExperienceBuffer(dim=3, capacity=1)
    n = len(rows)
    feats = np.random.default_rng(n).standard_normal((n, 3))
    if n:
        buf.record_batch(reward=np.arange(float(n)), tenant_id=tenants, task_type=tasks,
                         action_type="a", outcome="success", timestamp=ts, state_features=feats)
    want = _reference_compact(tenants, tasks, ts, keep)
    assert buf.compact(keep) == n - len(want)
    assert buf.column("id").tolist() == want
    assert rewards(buf) == [float(i) for i in want]
    np.testing.assert_array_equal(buf.column("features"), feats[want].astype(np.float32))
    if want:   # the index follows the compaction
        rows_, _ = buf.index.search(feats[want[0]], 1)
        assert buf.column("id")[rows_[0]] == want[0]


def test_compact_ring_and_bad_keep():
    buf = ExperienceBuffer(dim=2, capacity=4, ring=True)
    buf.record_batch(reward=np.arange(6.0), timestamp=np.arange(6.0),
                     tenant_id=["a", "b"] * 3, task_type="x", action_type="u", outcome="s")
    assert buf.compact(1) == 2
    assert buf.column("reward")[buf.order()].tolist() == [4.0, 5.0]
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError):
            buf.compact(bad)


def test_delete_keeps_survivor_order_and_clear():
    buf = _mixed_buffer()
    assert buf.delete(np.array([True, False, True, False, False, False])) == 2
    assert rewards(buf) == [2.0, 4.0, 5.0, 6.0]
    assert buf.delete([0, 3]) == 2 and rewards(buf) == [4.0, 5.0]
    assert buf.delete([]) == 0
    with pytest.raises(ConfigError):
        buf.delete([7])
    buf.clear()
    assert len(buf) == 0 and buf.record(reward=1.0, **BASE) == 6


# --------------------------------------------------------------------------- polars

def test_polars_round_trip_is_identical():
    buf = _mixed_buffer()
    buf.record(reward=-1.5, state_after={"k": [1, "x"]}, outcome_verified_by="grader",
               anti_gaming_policy="p1", request_id="req", **BASE)
    df = buf.to_polars()
    assert df.schema["features"] == pl.Array(pl.Float32, 3)
    assert df.schema["tenant_id"] == pl.String and df.schema["id"] == pl.Int64
    assert df.get_column("outcome_source").null_count() == 7
    back = ExperienceBuffer.from_polars(df)
    assert back.rows(features=True) == buf.rows(features=True)
    assert back.next_id == buf.next_id and back.dim == 3
    np.testing.assert_array_equal(back.column("inv_norm"), buf.column("inv_norm"))
    empty = ExperienceBuffer.from_polars(ExperienceBuffer(dim=3).to_polars())
    assert len(empty) == 0 and empty.dim == 3


def test_nbytes_counts_live_rows():
    buf = ExperienceBuffer(dim=4, capacity=1000)
    buf.record_batch(reward=np.zeros(10), metadata=[{"a": 1}] * 10, **BASE)
    per_row = 8 + 8 + 8 + 10 * 4 + 4 * 8 + 4 * 4 + 4
    assert buf.nbytes() == 10 * per_row + 10 * len('{"a":1}')


def test_copy_is_independent():
    buf = _mixed_buffer()
    buf.prune_older_than(-1.0)
    dup = buf.copy()
    assert dup.rows(features=True) == buf.rows(features=True)
    dup.delete([0])
    dup.record(reward=9.0, tenant_id="c", task_type="z", action_type="u", outcome="s")
    assert len(buf) == 6 and buf.code("tenant_id", "c") == -1
    assert dup.search([1, 0, 0], 1, tenant_id="c")[0].tolist() == [5]
    ring = ExperienceBuffer(dim=2, capacity=3, ring=True)
    ring.record_batch(reward=[1.0, 2.0, 3.0, 4.0], **BASE)
    rc = ring.copy()
    assert rc.column("reward")[rc.order()].tolist() == [2.0, 3.0, 4.0] and rc.is_full


def _reference_search(buf, q, k, **filters):
    """Brute force: cosine of every selected row, sorted by (score desc, id desc)."""
    rows = buf.select(**filters)
    X = buf.column("features")[rows].astype(np.float64)
    norms = np.linalg.norm(X, axis=1)
    s = np.where(norms > 0, X @ q / np.where(norms > 0, norms, 1) / np.linalg.norm(q), 0.0)
    order = np.lexsort((-buf.column("id")[rows], -s))[:k]
    return rows[order], s[order]


def test_filtered_search_by_one_label_follows_appends_and_deletes():
    rng = np.random.default_rng(7)
    buf = ExperienceBuffer(dim=8, capacity=4)
    tenants, tasks = ["t0", "t1", "t2"], ["nav", "pick"]

    def add(n):
        feats = rng.standard_normal((n, 8)).astype(np.float32)
        feats[rng.random(n) < 0.1] = 0.0                       # zero rows score 0
        feats[1::5] = feats[0]                                  # exact ties
        buf.record_batch(reward=np.zeros(n), tenant_id=Categorical(
            rng.integers(0, 3, n), tenants), task_type=Categorical(rng.integers(0, 2, n), tasks),
            action_type="a", outcome="success", state_features=feats)

    def check():
        q = rng.standard_normal(8)
        for name, label in [("tenant_id", "t0"), ("tenant_id", "t2"), ("task_type", "pick")]:
            _, want_s = _reference_search(buf, q, 7, **{name: label})
            rows, scores = buf.search(q, 7, **{name: label})
            assert set(buf.column(name)[rows].tolist()) == {buf.code(name, label)}
            np.testing.assert_allclose(scores, want_s, atol=2e-6)
            # Same neighbours as the index over the same candidates (scores to float32
            # rounding: BLAS and the gather kernel sum in different orders).
            ref_rows, ref_s = buf.index.search(q, 7, candidates=buf.select(**{name: label}))
            assert rows.tolist() == ref_rows.tolist()
            np.testing.assert_allclose(scores, ref_s, rtol=0, atol=1e-6)

    add(50)
    check()                        # builds the row lists and the scattered groups' copies
    add(1)
    add(37)                        # appended to the lists and the copies
    check()
    group = buf._groups.columns["tenant_id"].groups[buf.code("tenant_id", "t0")]
    assert group.copy is not None and len(group.copy) == buf.select(tenant_id="t0").size
    buf.record(reward=1.0, tenant_id="t2", task_type="nav", action_type="a", outcome="s",
               state_features=np.ones(8))
    check()
    buf.delete(buf.select(tenant_id="t1")[::2])   # rows move: lists are rebuilt
    check()
    buf.prune_older_than(float(buf.column("timestamp")[10]))
    check()
    assert buf.search(np.ones(8), 3, tenant_id="nobody")[0].tolist() == []


def test_filtered_search_on_contiguous_label_reads_a_slice_and_copies_nothing():
    buf = ExperienceBuffer(dim=4, capacity=8)
    for tenant in ("a", "b"):
        buf.record_batch(reward=np.zeros(100), tenant_id=tenant, task_type="x", action_type="u",
                         outcome="s", state_features=np.random.default_rng(0).random((100, 4)))
    raw = buf.nbytes()
    rows, _ = buf.search(np.ones(4), 5, tenant_id="b")
    assert rows.min() >= 100
    group = buf._groups.columns["tenant_id"].groups[buf.code("tenant_id", "b")]
    assert group.copy is None and group.contiguous() == slice(100, 200)
    assert buf.nbytes() == raw + 2 * 100 * 8     # only the two row lists (int64)


def test_failed_batch_leaves_never_used_columns_missing():
    # run_id is staged (valid codes) before outcome_source fails: the staged codes of a
    # column that never held a value must be undone, or the next batch would expose them.
    buf = ExperienceBuffer(dim=2, capacity=16)
    buf.record_batch(reward=[0.0], **BASE)
    with pytest.raises(ConfigError) as err:
        buf.record_batch(reward=[1.0, 2.0], run_id=Categorical(np.array([0, 1]), ["r1", "r2"]),
                         outcome_source=Categorical(np.array([0, 5]), ["judge"]), **BASE)
    assert err.value.field == "outcome_source[1]" and err.value.value == 5
    assert len(buf) == 1 and buf.code("run_id", "r1") == -1
    buf.record_batch(reward=[3.0, 4.0], **BASE)
    assert [r["run_id"] for r in buf.rows()] == [None, None, None]
    assert buf.column("reward").tolist() == [0.0, 3.0, 4.0]
    assert buf.column("id").tolist() == [0, 1, 2]


def _brute_cosine_topk(F, ids, q, k):
    """Reference: float64 cosine, zero rows score 0, ties newest (largest id) first."""
    F = F.astype(np.float64)
    norms = np.linalg.norm(F, axis=1)
    s = np.where(norms > 0, F @ q / np.where(norms > 0, norms, 1) / np.linalg.norm(q), 0.0)
    order = np.lexsort((-ids, -np.round(s, 5)))
    return order[:k]


def test_batched_rows_get_their_norms_before_any_read_whatever_happens_in_between():
    # Batches written in place leave their inverse norms to the next read; rows deleted,
    # compacted, pruned or copied in between must still carry the right norms.
    rng = np.random.default_rng(3)
    buf = ExperienceBuffer(dim=5, capacity=4)
    feats = rng.standard_normal((60, 5)).astype(np.float32)
    feats[7] = 0.0                     # a zero row: inverse norm 0
    feats[8] = feats[9] * 3.0          # a tie in cosine with row 9
    tasks = np.array(["a", "b", "c"])[rng.integers(0, 3, 60)]
    buf.record_batch(reward=np.zeros(20), timestamp=np.arange(20.0), state_features=feats[:20],
                     **dict(BASE, task_type=tasks[:20]))
    buf.record(reward=0.0, timestamp=20.0, state_features=feats[20], **dict(BASE, task_type="a"))
    buf.record_batch(reward=np.zeros(39), timestamp=np.arange(21.0, 60.0),
                     state_features=feats[21:], **dict(BASE, task_type=tasks[21:]))

    def inv(F):
        n = np.linalg.norm(F.astype(np.float64), axis=1)
        return np.where(n > 0, 1 / np.where(n > 0, n, 1), 0.0)

    np.testing.assert_allclose(buf.column("inv_norm"), inv(feats), rtol=1e-6)
    assert buf.column("inv_norm")[7] == 0.0
    # Rows move with norms pending: delete 10 rows, record 6, prune the 3 oldest, compact.
    buf2 = buf.copy()
    buf.delete(np.arange(0, 20, 2))
    buf.record_batch(reward=np.zeros(6), timestamp=np.arange(60.0, 66.0),
                     state_features=feats[:6] * 2, **BASE)
    assert buf.prune_older_than(6.0) == 3          # ids 1, 3, 5 remain before t = 6
    buf.compact(12)
    kept_ids = buf.column("id")
    all_feats = np.concatenate([feats, feats[:6] * 2])
    np.testing.assert_allclose(buf.column("inv_norm"), inv(all_feats[kept_ids]), rtol=1e-6)
    q = rng.standard_normal(5)
    rows, scores = buf.search(q, 8)
    want = _brute_cosine_topk(all_feats[kept_ids], kept_ids, q, 8)
    assert rows.tolist() == want.tolist()
    # The copy made while norms were pending searches with its own (correct) norms.
    rows2, _ = buf2.index.search(q, 5)
    assert rows2.tolist() == _brute_cosine_topk(feats, np.arange(60), q, 5).tolist()
    # A filtered search over a scattered label copies norms into its group: right values.
    rows3, _ = buf2.search(q, 4, task_type="b")
    b_rows = np.flatnonzero(buf2.labels("task_type") == "b")
    assert rows3.tolist() == b_rows[_brute_cosine_topk(feats[b_rows], b_rows, q, 4)].tolist()
    buf2.record_batch(reward=np.zeros(3), state_features=-feats[:3], **dict(BASE, task_type="b"))
    rows4, s4 = buf2.search(-feats[0].astype(np.float64), 1, task_type="b")
    assert rows4.tolist() == [60] and s4[0] == pytest.approx(1.0, abs=1e-6)


def test_batch_feature_validation_names_the_row_and_accepts_large_valid_norms():
    buf = ExperienceBuffer(dim=2, capacity=8)
    big = np.full((5, 2), 1e19, np.float32)   # each row's norm ~1.4e19: valid; batch sum of
    buf.record_batch(reward=np.zeros(5), state_features=big, **BASE)   # squares overflows
    np.testing.assert_allclose(buf.column("inv_norm"), 1 / (1e19 * np.sqrt(2)), rtol=1e-6)
    huge = np.zeros((4, 2), np.float32)
    huge[2] = 3e38                              # norm 4.2e38 > float32 max
    with pytest.raises(ConfigError) as err:
        buf.record_batch(reward=np.zeros(4), state_features=huge, **BASE)
    assert err.value.field == "state_features[2]"
    inf_row = np.zeros((4, 2), np.float32)
    inf_row[3, 1] = np.inf
    with pytest.raises(ConfigError) as err:
        buf.record_batch(reward=np.zeros(4), state_features=inf_row, **BASE)
    assert err.value.field == "state_features[3]" and len(buf) == 5


@pytest.mark.parametrize("labels, codes, want", [
    (["x", "y", "z"], [2, 0, 1, 2], ["z", "x", "y", "z"]),       # a run: offset path
    (["z", "x"], [0, 1, 1], ["z", "x", "x"]),                     # not a run: table path
    (["w", None], [0, 0, 0], ["w", "w", "w"]),                    # "" label unused: fine
])
def test_categorical_codes_map_to_labels_by_offset_or_table(labels, codes, want):
    buf = ExperienceBuffer(dim=2, capacity=4)
    buf.record_batch(reward=[0.0, 0.0, 0.0], **dict(BASE, task_type=["x", "y", "z"]))
    buf.record_batch(reward=np.zeros(len(codes)),
                     **dict(BASE, task_type=Categorical(np.array(codes), labels)))
    assert buf.labels("task_type")[3:].tolist() == want


def test_required_categorical_code_for_missing_label_is_refused_on_both_paths():
    buf = ExperienceBuffer(dim=2)
    buf.record(reward=0.0, **BASE)
    for labels in (["", "t1"], [None, "t1", "t2"], ["t1", None]):
        codes = np.array([1, 0, 1]) if labels[0] in ("", None) else np.array([0, 1, 0])
        with pytest.raises(ConfigError) as err:
            buf.record_batch(reward=np.zeros(3),
                             **dict(BASE, tenant_id=Categorical(codes, labels)))
        assert err.value.field == "tenant_id[1]"
    assert len(buf) == 1


def test_a_dropped_buffer_is_freed_without_waiting_for_the_cycle_collector():
    import gc
    import weakref

    buf = ExperienceBuffer(dim=4)
    buf.record_batch(reward=np.zeros(3), state_features=np.ones((3, 4)), **BASE)
    assert buf.search(np.ones(4), 1)[0].tolist() == [2]
    ref = weakref.ref(buf)
    gc.disable()
    try:
        del buf
        assert ref() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("call, field", [
    (lambda b: b.record_batch(reward=["a", "b"], **BASE), "reward"),
    (lambda b: b.record_batch(reward=[0.0], timestamp=["x"], **BASE), "timestamp"),
    (lambda b: b.record_batch(reward=[0.0], state_features=[["a", 0, 0, 0]], **BASE),
     "state_features"),
    (lambda b: b.record(reward=0.0, state_features=["a", 0, 0, 0], **BASE), "state_features"),
    (lambda b: b.record(reward=0.0, state_features={"a": 1}, **BASE), "state_features"),
])
def test_non_numeric_numbers_raise_config_error_naming_the_field(call, field):
    buf = ExperienceBuffer(dim=4)
    with pytest.raises(ConfigError) as err:
        call(buf)
    assert err.value.field == field and len(buf) == 0


def test_pickle_and_deepcopy_give_an_independent_buffer_whose_index_is_its_own():
    import copy
    import pickle

    buf = ExperienceBuffer(dim=3)
    buf.record_batch(reward=np.zeros(2), state_features=[[1, 0, 0], [0, 1, 0]], **BASE)
    for clone in (pickle.loads(pickle.dumps(buf)), copy.deepcopy(buf)):
        clone.record_batch(reward=[1.0], state_features=[[0, 0, 1]], **BASE)
        rows, scores = clone.search([0, 0, 1], 1)
        assert rows.tolist() == [2] and scores[0] == pytest.approx(1.0)
        assert clone.column("inv_norm").tolist() == [1.0, 1.0, 1.0]
    assert len(buf) == 2 and buf.search([0, 0, 1], 1)[0].tolist() == [1]   # a tie: newest


def test_many_new_labels_in_one_batch_are_coded_once_each_as_plain_str():
    buf = ExperienceBuffer(dim=2)
    ids = [f"req-{i}" for i in range(5000)][::-1]
    buf.record_batch(reward=np.zeros(5001), request_id=ids + ["req-7"], **BASE)
    cats = buf.categories("request_id")
    assert len(cats) == 5001 and all(type(c) is str for c in cats)
    assert buf.labels("request_id").tolist() == ids + ["req-7"]
    assert buf.code("request_id", "req-7") == cats.index("req-7")


def test_deletes_leave_never_used_columns_alone_and_they_fill_correctly_later():
    buf = ExperienceBuffer(dim=2, capacity=4)
    buf.record_batch(reward=np.arange(6.0), timestamp=np.arange(6.0), **BASE)
    buf.delete([1, 3])
    buf.compact(3)
    assert buf.prune_older_than(3.0) == 1
    buf.record_batch(reward=[9.0], timestamp=[9.0], run_id=["r9"], metadata=[{"m": 1}], **BASE)
    rows = buf.rows()
    assert [r["reward"] for r in rows] == [4.0, 5.0, 9.0]
    assert [r["run_id"] for r in rows] == [None, None, "r9"]
    assert [r["metadata"] for r in rows] == [None, None, {"m": 1}]
    buf.clear()
    buf.record_batch(reward=[1.0], **BASE)
    assert buf.rows()[0]["run_id"] is None and buf.rows()[0]["metadata"] is None


def test_three_per_row_code_columns_with_a_bad_third_write_nothing_anywhere():
    # The third per-row column (in field order) is checked after the compiled call: the
    # one-code columns it would fill, here the never-used run_id, must not be written first.
    buf = ExperienceBuffer(dim=2, capacity=8)
    buf.record_batch(reward=[0.0], **BASE)
    cols = dict(BASE, tenant_id=Categorical(np.array([0, 0]), ["t1"]),
                task_type=Categorical(np.array([0, 1]), ["nav", "fetch"]),
                action_type=Categorical(np.array([0, 7]), ["up"]),
                run_id="brand-new-run")
    with pytest.raises(ConfigError) as err:
        buf.record_batch(reward=[1.0, 2.0], **cols)
    assert err.value.field == "action_type[1]"
    buf.record_batch(reward=[3.0, 4.0], **BASE)
    assert [r["run_id"] for r in buf.rows()] == [None, None, None]
    cols["action_type"] = Categorical(np.array([0, 0]), ["up"])
    buf.record_batch(reward=[5.0, 6.0], **cols)
    assert [r["run_id"] for r in buf.rows()][-2:] == ["brand-new-run"] * 2
    assert [r["task_type"] for r in buf.rows()][-2:] == ["nav", "fetch"]


def test_json_text_is_stored_as_given_and_hashed_only_without_features():
    from dyna.buffer import JsonText

    texts = ['{"a":1,"token":"[REDACTED]"}', None, '{"b":[1,2]}']
    buf = ExperienceBuffer(dim=8)
    buf.record_batch(reward=np.zeros(3), metadata=JsonText(texts),
                     state_features=np.ones((3, 8)), **BASE)
    assert buf.column("metadata").tolist() == texts          # not re-serialised
    assert [r["metadata"] for r in buf.rows()] == [{"a": 1, "token": "[REDACTED]"}, None,
                                                   {"b": [1, 2]}]
    hashed = ExperienceBuffer(dim=8)
    hashed.record_batch(reward=np.zeros(3), metadata=JsonText(texts), **BASE)
    plain = ExperienceBuffer(dim=8)
    plain.record_batch(reward=np.zeros(3), metadata=[json.loads(t) if t else None
                                                     for t in texts], **BASE)
    np.testing.assert_array_equal(hashed.column("features"), plain.column("features"))
    buf.record_batch(reward=[1.0], **BASE)                    # later rows: metadata absent
    assert buf.rows()[-1]["metadata"] is None
    for bad, field in ((JsonText(texts[:2]), "metadata"), (JsonText([1, None, None]),
                                                            "metadata[0]"),
                       (JsonText(['{"a":1}', None, b"{}"]), "metadata[2]")):
        with pytest.raises(ConfigError) as err:
            buf.record_batch(reward=np.zeros(3), metadata=bad, **BASE)
        assert err.value.field == field
    assert len(buf) == 4


def test_json_text_that_is_not_json_raises_config_error_when_hashed():
    from dyna.buffer import JsonText

    buf = ExperienceBuffer(dim=8)
    buf.record_batch(reward=[1.0], **BASE)
    with pytest.raises(ConfigError) as err:     # parsed to hash the features: checked
        buf.record_batch(reward=np.zeros(3), metadata=JsonText(['{"a":1}', '{bad', None]),
                         **BASE)
    assert err.value.field == "metadata[1]"
    with pytest.raises(ConfigError) as err:     # a 2-D array of texts is not n texts
        buf.record_batch(reward=np.zeros(2), metadata=JsonText(np.array([["1"], ["2"]])),
                         **BASE)
    assert err.value.field == "metadata"
    assert len(buf) == 1 and buf.next_id == 1 and buf.column("metadata").tolist() == [None]
    buf.record_batch(reward=[2.0], **BASE)
    assert buf.rows()[-1]["metadata"] is None and buf.rows()[-1]["id"] == 1


def test_categorical_without_labels_is_out_of_range_without_reading_the_empty_table():
    from dyna.buffer.recording import stage_codes

    # The pure-Python kernel indexes like numpy: reading mapping[0] of no labels raises.
    dst = np.full(4, 7, dtype=np.int32)
    assert stage_codes.py_func(np.array([0, 0]), np.zeros(0, np.int32), dst, 1,
                                False) == (0, 0)
    assert stage_codes.py_func(np.array([3]), np.zeros(0, np.int32), dst, 0, True) == (0, 0)
    buf = ExperienceBuffer(dim=4, capacity=1)
    with pytest.raises(ConfigError) as err:
        buf.record_batch(reward=[1.0, 2.0], run_id=Categorical(np.array([0, 0]), []), **BASE)
    assert err.value.field == "run_id[0]"
    assert len(buf) == 0 and buf.categories("run_id") == ("",)
    assert not buf._store.array("run_id").any()


def test_cached_code_table_is_not_used_for_equal_str_subclass_labels():
    import enum

    class Outcome(str, enum.Enum):
        OK = "ok"
        BAD = "bad"

    def labels_after(warm):
        buf = ExperienceBuffer(dim=4)
        for _ in range(warm):   # the second batch of known labels caches their code table
            buf.record_batch(reward=[0.0], **dict(BASE, outcome=Categorical(
                np.array([0]), ("ok", "bad"))))
        buf.record_batch(reward=[1.0, 2.0], **dict(BASE, outcome=Categorical(
            np.array([1, 0]), (Outcome.OK, Outcome.BAD))))
        return buf.labels("outcome")[-2:].tolist()

    # Outcome.OK == "ok", but its label is str(Outcome.OK), whether or not "ok" is cached.
    assert labels_after(0) == labels_after(2) == ["Outcome.BAD", "Outcome.OK"]


def test_str_enum_labels_are_their_str_whichever_way_they_come():
    import enum

    class Outcome(str, enum.Enum):
        OK = "ok"
        BAD = "bad"

    buf = ExperienceBuffer(dim=2)
    buf.record_batch(reward=[0.0], **dict(BASE, outcome=Outcome.OK))
    buf.record_batch(reward=[0.0, 0.0], **dict(BASE, outcome=[Outcome.BAD, Outcome.OK]))
    buf.record_batch(reward=[0.0], **dict(BASE, outcome=Categorical(np.array([0]),
                                                                    [Outcome.OK])))
    assert buf.labels("outcome").tolist() == [str(Outcome.OK), str(Outcome.BAD),
                                              str(Outcome.OK), str(Outcome.OK)]
    assert all(type(c) is str for c in buf.categories("outcome"))
