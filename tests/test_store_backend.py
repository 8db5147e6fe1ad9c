"""Both persistence backends implement the backend protocol, member for member.

:class:`dyna.store.backend.StoreBackend` declares what :class:`dyna.experience.ExperienceStore`
may call. :class:`dyna.store.sqlite.SQLiteStore` and :class:`dyna.store.postgres.PostgresStore`
must each define every one of its methods with the protocol's signature (parameter names,
kinds and defaults); an open store of each (a SQLite file, a fresh PostgreSQL schema) is an
instance of the protocol, and the same calls through the protocol give the same answers.
"""

import inspect

import numpy as np
import pytest

from conftest import open_backend
from dyna.errors import ConfigError
from dyna.experience import RECORD_SCHEMA
from dyna.store.backend import StoreBackend
from dyna.store.postgres import PostgresStore
from dyna.store.sqlite import SQLiteStore

BACKENDS = (SQLiteStore, PostgresStore)
#: Methods the protocol gives both backends (they inherit these).
INHERITED = ("__enter__", "__exit__")
METHODS = sorted(name for name, value in vars(StoreBackend).items()
                 if callable(value) and (not name.startswith("_") or name in INHERITED))
ATTRIBUTES = sorted(StoreBackend.__annotations__)
DIM = 4


def _shape(fn) -> list[tuple]:
    """Parameter names, kinds and defaults of a function (annotations left out)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_the_protocol_names_the_methods_the_experience_store_uses():
    assert {"append", "append_row", "append_from", "read", "delete", "delete_ids", "prune",
            "keep_newest", "reset", "vacuum", "summary", "consumption", "data_version",
            "generation", "snapshot", "stats", "close"} <= set(METHODS)
    assert {"backend", "path", "status", "on_write", "last_generation"} <= set(ATTRIBUTES)


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", METHODS)
def test_each_backend_defines_each_method_with_the_protocols_signature(cls, name):
    if name not in INHERITED:
        assert name in vars(cls), f"{cls.__name__} does not define {name}"
    assert _shape(getattr(cls, name)) == _shape(getattr(StoreBackend, name))


def test_the_methods_both_backends_share_are_all_in_the_protocol():
    def public(cls):
        return {n for n, v in inspect.getmembers(cls) if not n.startswith("_") and callable(v)}

    assert public(SQLiteStore) & public(PostgresStore) <= set(METHODS)


def _batch(n, tenant="t1", start=0):
    i = np.arange(start, start + n)
    return {"tenant_id": [tenant] * n, "task_type": [f"k{j % 2}" for j in i],
            "action_type": ["a"] * n, "outcome": ["success" if j % 3 else "failure" for j in i],
            "reward": i * 0.25, "timestamp": i.astype(float), "run_id": [f"r{j % 3}" for j in i],
            "metadata": [f'{{"i":{j}}}' for j in i],
            "features": np.tile(i[:, None].astype(np.float32) / 7, (1, DIM))}


def _answers(db: StoreBackend) -> list:
    """The same calls through the protocol; what every backend must answer alike."""
    out = [db.append(_batch(6)).tolist(), db.append(_batch(3, "t2", 6), ids=[10, 11, 12])
           .tolist(), db.next_id()]
    row = ["t1", "k1", "a", "success", None, None, None, None, None, None, 2.5, 99.0,
           None, None, None, '{"x":1}', np.ones(DIM, np.float32).tobytes()]
    out.append(db.append_row(row))
    out.append(db.append_from(lambda start: (_batch(2, "t2", start), [start, start + 1]))
               .tolist())
    cols = db.read(categories=["task_type"])
    out += [cols["id"].tolist(), cols["task_type"][1], cols["reward"].tobytes(),
            cols["features"].tobytes(), cols["metadata"].tolist()]
    out += [db.count({"tenant_id": "t2"}), db.summary(), db.summary({"tenant_id": "t1"}),
            db.consumption(), db.max_id(), db.read(after_id=11)["id"].tolist()]
    gen = db.generation()
    out += [db.delete({"run_id": ["r0"], "tenant_id": "t1"}), db.generation() - gen,
            db.last_generation == db.generation()]
    out += [db.prune(3.0), db.keep_newest(1), db.delete_ids([11, 12, 999])]
    with db.snapshot() as same:
        out += [same is db, db.read(columns=["tenant_id"])["tenant_id"].tolist()]
    with pytest.raises(ConfigError) as e:
        db.delete({})
    out += [e.value.field, db.reset(), db.count(), db.next_id() > 13, db.status]
    return out


def test_an_open_store_of_each_backend_is_one_and_answers_alike(persistent_target, tmp_path):
    db = open_backend(persistent_target, RECORD_SCHEMA, DIM)
    try:
        assert isinstance(db, StoreBackend)
        assert db.backend == ("sqlite" if isinstance(db, SQLiteStore) else "postgresql")
        assert (db.dim, db.schema, db.persistent, db.read_only) == (DIM, RECORD_SCHEMA, True,
                                                                    False)
        assert db.status == "missing" and db.on_write is None and db.last_generation is None
        seen = []
        db.on_write = seen.append
        answers = _answers(db)
        assert seen and all(s is db for s in seen)
    finally:
        db.close()
    with SQLiteStore(tmp_path / "reference.db", RECORD_SCHEMA, DIM) as ref:
        assert answers == _answers(ref)
