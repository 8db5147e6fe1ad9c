"""Size arguments are bounded by a documented maximum: a request cannot ask the store to
allocate without limit (replay_experience(batch_size=10**9) would be an OOM kill)."""

import pytest

from dyna.errors import ConfigError
from dyna.experience import MAX_BATCH_SIZE, MAX_K, MAX_KEEP, ExperienceStore


@pytest.fixture
def store():
    s = ExperienceStore("", dim=4)
    s.record("t", [{"task_type": "a", "action_type": "x", "outcome": "success",
                    "reward": 1.0, "timestamp": float(i)} for i in range(5)])
    return s


@pytest.mark.parametrize("op, args, field, limit", [
    ("replay_experience", {"tenant_id": "t", "batch_size": 10 ** 9}, "batch_size",
     MAX_BATCH_SIZE),
    ("get_recommendation", {"tenant_id": "t", "task_type": "a", "k": 10 ** 9}, "k", MAX_K),
    ("compact", {"compact_keep_records": 10 ** 400}, "compact_keep_records", MAX_KEEP),
])
def test_huge_sizes_are_refused_naming_the_field(store, op, args, field, limit):
    with pytest.raises(ConfigError) as err:
        getattr(store, op)(**args)
    assert err.value.field == field and f"<= {limit}" in str(err.value)
    assert store.get_stats("t")["n_records"] == 5          # nothing changed


def test_the_maximum_itself_is_accepted(store):
    out = store.replay_experience("t", batch_size=MAX_BATCH_SIZE, seed=0)
    assert len(out["ids"]) == MAX_BATCH_SIZE and len(set(out["ids"])) == 5


def test_dispatch_bounds_too(store):
    """The same bound holds through dispatch, the table the MCP server calls."""
    with pytest.raises(ConfigError) as err:
        store.dispatch("replay_experience", tenant_id="t", batch_size=10 ** 9)
    assert err.value.field == "batch_size"
