"""An API that takes a list of ids (episode ids, skill names, facts) refuses a repeated id
or deduplicates it by its documented rule.

Walks every public entry point that takes such a list (the list below): the ones that give
each id a value of its own (a priority, a stored row, an outcome per fact) refuse a repeat,
naming it; the ones that only act on the set of ids (delete, count an outcome per skill)
act on each id once. :meth:`dyna.competence.BetaCompetence.update_many` takes task types,
not ids: a repeated key is one more outcome of it (its documented rule).
"""

import json

import numpy as np
import pytest

from dyna.buffer import ExperienceBuffer
from dyna.errors import ConfigError
from dyna.experience import ExperienceStore
from dyna.loops import Digest
from dyna.loops.memory import MemoryStore
from dyna.loops.review.loop import _fact_outcomes
from dyna.loops.skills import Skill, SkillLibrary

EPISODES = [dict(task_type="k", action_type="a", outcome="success", reward=1.0,
                 timestamp=float(i), state_features=[1, 0, 0, i]) for i in range(3)]
REPLAY = dict(strategy="priority", ids=[0, 2, 0], priorities=[1.0, 1.0, 5.0], seed=1)


@pytest.fixture
def store(tmp_path):
    with ExperienceStore(tmp_path / "s.db", dim=4) as store:
        store.record("t1", episodes=EPISODES)
        yield store


def _mcp_replay(store):
    from dyna.mcp_server.tools import ExperienceTools  # noqa: PLC0415

    out, is_error = ExperienceTools(store, "t1").call("replay_experience", REPLAY)
    assert is_error
    raise ConfigError(out["error"]["field"], out["error"]["value"], out["error"]["reason"])


def _import_repeated(store, tmp_path):
    store.export_data("t1", path=str(tmp_path / "e.jsonl"))
    recs = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    recs[1]["id"] = recs[0]["id"]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    with ExperienceStore("", dim=4) as other:
        try:
            other.import_data(str(tmp_path / "r.jsonl"), keep_ids=True)
        finally:
            assert other.get_stats()["n_records"] == 0      # nothing imported


def _append_repeated(store):
    n = 2
    cols = {"tenant_id": ["t1"] * n, "task_type": ["k"] * n, "action_type": ["a"] * n,
            "outcome": ["success"] * n, "reward": [1.0] * n, "timestamp": [9.0] * n,
            "state_features": np.ones((n, 4), dtype=np.float32)}
    store._db.append(cols, ids=[10, 10])


def _refusals(store, tmp_path):
    """(name, call, field named) of the entry points that refuse a repeated id."""
    buf = ExperienceBuffer(dim=4)
    mem = MemoryStore.in_memory()
    mem.add("Use `make web` to deploy")
    return [
        ("ExperienceStore.replay_experience",
         lambda: store.replay_experience("t1", **REPLAY), "ids[2]"),
        ("ExperienceStore.dispatch replay_experience",
         lambda: store.dispatch("replay_experience", tenant_id="t1", **REPLAY), "ids[2]"),
        ("MCP replay_experience", lambda: _mcp_replay(store), "ids[2]"),
        ("ExperienceStore.import_data keep_ids", lambda: _import_repeated(store, tmp_path),
         "ids"),
        ("SQLiteStore.append ids", lambda: _append_repeated(store), "ids"),
        ("ExperienceBuffer.record_batch ids", lambda: buf.record_batch(
            ids=[5, 5], tenant_id="t1", task_type="k", action_type="a", outcome="success",
            reward=[1.0, 1.0], state_features=np.ones((2, 4))), "ids"),
        ("MemoryStore.record_outcomes", lambda: mem.record_outcomes(
            {"Use `make web` to deploy": True, "USE `MAKE WEB` TO DEPLOY": False}),
         "outcomes['USE `MAKE WEB` TO DEPLOY']"),
    ]


def test_every_entry_point_that_gives_each_id_a_value_refuses_a_repeat(store, tmp_path):
    pytest.importorskip("jsonschema")
    calls = _refusals(store, tmp_path)
    assert len(calls) == 7
    fields = []
    for name, call, field in calls:
        with pytest.raises(ConfigError) as e:
            call()
        assert e.value.field == field, (name, e.value)
        fields.append(e.value.field)
    assert len(fields) == 7
    # nothing was written: the store holds its 3 episodes, under their ids
    assert store.export_data("t1")["n"] == 3
    assert [r["id"] for r in store.export_data("t1")["records"]] == [0, 1, 2]


def test_every_entry_point_that_acts_on_a_set_of_ids_acts_on_each_once(store):
    lib = SkillLibrary.in_memory()
    lib.add(Skill("deploy", "Deploy the web app."), "r1")
    mem = MemoryStore.in_memory()
    mem.add("Use `make web` to deploy")
    digest = Digest.from_run("r1", "t", success=True)
    counted = {
        "SQLiteStore.delete_ids": store._db.delete_ids([0, 0, 1]),
        "SkillLibrary.record_outcome":
            (lib.record_outcome(["deploy", "DEPLOY", "deploy"], True, "r2"),
             lib.get("deploy").successes)[1],
        "Digest.skill_outcomes": len(digest.skill_outcomes(["a", "b", "a"])),
        "review: outcomes of facts named twice": len(_fact_outcomes(
            Digest.from_run("r1", "t", success=True, tool_calls=[
                {"name": "make", "args": {}, "output": "ok",
                 "skills": ["Use `make web` to deploy", "use `make web` to deploy"]}]),
            mem.snapshot())),
    }
    assert counted == {"SQLiteStore.delete_ids": 2, "SkillLibrary.record_outcome": 1,
                       "Digest.skill_outcomes": 2, "review: outcomes of facts named twice": 1}
    assert store.get_stats("t1")["n_records"] == 1
    assert list(digest.skill_outcomes(["b", "a", "b"])) == ["b", "a"]   # first place kept
