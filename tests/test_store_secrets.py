"""The experience store's safety net: no planted secret reaches the SQLite file in clear.

Every format of tests/data/secret_corpus.txt is planted in every free-form field ``record``
accepts (the four dicts, as a value, a dict key, JSON inside a string and a list item); the
main SQLite file and its ``-wal`` are then searched byte for byte for the planted values
themselves (raw and JSON-escaped), never with the redactor: 0 found. A label field holding a
secret is refused with ConfigError naming the field, never echoing the secret, and nothing is
written. ``dyna store scrub`` removes what an older version stored in clear.
"""

import hashlib
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import stored_table
from dyna.buffer import CATEGORICAL_FIELDS, ExperienceBuffer
from dyna.cli import main
from dyna.errors import ConfigError
from dyna.experience import ExperienceStore
from dyna.experience.stored import rows_to_redact
from dyna.redact import DEFAULT_SENSITIVE_KEYS

DATA = Path(__file__).parent / "data"


def _secrets():
    out = []
    for line in (DATA / "secret_corpus.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        text = parts[1].replace("\\n", "\n")
        secret = (parts[2] if len(parts) == 3 else parts[1]).replace("\\n", "\n")
        out.append((parts[0], text, secret))
    return out


SECRETS = _secrets()


def _needles(secret: str) -> list[bytes]:
    """The byte strings a planted secret would show in a file: raw, and JSON-escaped."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    # a multi-line block is searched line by line too (each line of a PEM body is secret)
    forms.update(line for line in secret.split("\n") if len(line) >= 16)
    return [f.encode("utf-8") for f in forms if f]


def _file_bytes(path) -> bytes:
    """A SQLite file's bytes with its -wal; for a PostgreSQL DSN, every stored value (all
    tenants' rows, as the server returns them)."""
    if isinstance(path, str):
        return b"\x00".join(v if isinstance(v, bytes) else str(v).encode("utf-8")
                             for row in stored_table(path) for v in row if v is not None)
    out = b""
    for p in (path, Path(str(path) + "-wal")):
        if p.exists():
            out += p.read_bytes()
    return out


def _leaked(path: Path) -> list[str]:
    blob = _file_bytes(path)
    return [name for name, _, secret in SECRETS if any(n in blob for n in _needles(secret))]


def _free_text_episode(i: int, text: str) -> dict:
    return dict(task_type="deploy", action_type="shell", outcome="success", reward=1.0,
                run_id=f"run-{i}", request_id=f"req-{i}", outcome_source="tests",
                state_before={"note": text, "items": ["a", text]},
                action_taken={text: {"ok": True}},
                state_after={"tool_output": json.dumps({"out": text, "step": 3})},
                metadata={"log": f"step 3\nNOTE={text}\ndone", "k": text})


@pytest.mark.usefixtures("tau_bench_formats")
def test_corpus_planted_in_every_free_text_field_never_stored_in_clear(tmp_path,
                                                                       persistent_target):
    assert len(SECRETS) >= 60
    control = tmp_path / "control.db"            # the search itself finds every planted value
    control.write_text(json.dumps([t for _, t, _ in SECRETS]), encoding="utf-8")
    assert len(_leaked(control)) == len(SECRETS)
    db = persistent_target                       # a SQLite file, or a PostgreSQL DSN
    store = ExperienceStore(db, dim=8)
    store.record("acme", episodes=[_free_text_episode(i, text)
                                   for i, (_, text, _) in enumerate(SECRETS)])
    for i, (_, text, _) in enumerate(SECRETS):   # one by one too (the single-episode path)
        store.record("acme", **_free_text_episode(1000 + i, text))
    buf = ExperienceBuffer(dim=8)                 # and the bare buffer's two record paths
    buf.record(tenant_id="acme", **_free_text_episode(0, SECRETS[0][1]))
    assert len(store) == 2 * len(SECRETS)
    plantings = 2 * len(SECRETS) * 4 * 2         # episodes x dict fields x shapes (at least)
    assert plantings >= 600
    assert _leaked(db) == []                     # open: main file and -wal
    store.close()
    assert _leaked(db) == []                     # closed
    # the planted texts really went in: the stored rows are many and redacted
    again = ExperienceStore(db, dim=8)
    assert len(again) == 2 * len(SECRETS)
    again.close()
    if isinstance(db, str):  # the server's dump finds a value stored in clear
        import psycopg
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("INSERT INTO episodes (id, tenant_id, task_type, \"timestamp\", "
                         "metadata) VALUES (-1, 'x', 'x', 0, %s)", (SECRETS[0][1],))
        assert SECRETS[0][0] in _leaked(db)


@pytest.mark.parametrize("field", [f for f in CATEGORICAL_FIELDS])
def test_label_holding_a_secret_is_refused_naming_the_field(persistent_target, field):
    db = persistent_target
    store = ExperienceStore(db, dim=4)
    secret = "ghp_9sUtE9UzQn2JRXBjNO2Dz7sTKOaYVSb4azlJ"
    ep = dict(task_type="t", action_type="a", outcome="success", reward=1.0)
    ep[field] = f"x-{secret}"
    with pytest.raises(ConfigError) as err:
        if field == "tenant_id":
            store.record(ep.pop("tenant_id"), **ep)
        else:
            store.record("acme", **ep)
    assert field in str(err.value) and secret not in str(err.value)
    if field != "tenant_id":
        with pytest.raises(ConfigError, match=field):
            store.record("acme", episodes=[dict(ep), dict(ep, **{field: "ok"})])
    assert len(store) == 0
    store.close()
    assert secret.encode() not in _file_bytes(db)


def test_buffer_refuses_secret_labels_in_both_record_paths():
    buf = ExperienceBuffer(dim=4)
    secret = "AKIAYTZW7H07NU9O4OXQ"
    with pytest.raises(ConfigError) as err:
        buf.record(tenant_id="t", task_type=secret, action_type="a", outcome="ok", reward=1.0)
    assert "task_type" in str(err.value) and secret not in str(err.value)
    with pytest.raises(ConfigError, match="run_id"):
        buf.record_batch(tenant_id="t", task_type="k", action_type="a", outcome="ok",
                         reward=np.ones(3), run_id=["r1", "mail mia.li@example.com", "r3"])
    assert len(buf) == 0
    # benign labels, and known labels on the fast paths, still work
    buf.record_batch(tenant_id="t", task_type="k", action_type="a", outcome="ok",
                     reward=np.ones(3), run_id=["r1", "r2", "r-2024-05-01T10:00:00"])
    assert len(buf) == 3


def test_rows_to_redact_uses_normalised_key_names():
    # texts as an older version stored them: keys its exact lower-case matching missed
    texts = np.array([json.dumps(d, separators=(",", ":")) for d in [
        {"DB_PASSWORD": "hunter2hunter2"}, {"apiKey": "k1"}, {"x-api-key": "k2"},
        {"pass\u200bword": "p"}, {"ｐａｓｓｗｏｒｄ": "p"}, {"credit_card_4421486": {"n": 1}},
        {"djangoSecretKey": "s"}, {"tokenizer": "bpe", "passwordless": True},
        {"password": "[REDACTED]"}, {"note": "a \"password\": b"}]], dtype=object)
    picked = rows_to_redact(texts, DEFAULT_SENSITIVE_KEYS).tolist()
    assert picked == [0, 1, 2, 3, 4, 5, 6]


def _older_store(db: Path) -> dict:
    """A store with secrets in clear, written the way an older version could have."""
    store = ExperienceStore(db, dim=4)
    store.record("acme", episodes=[dict(task_type="deploy", action_type="shell",
                                        outcome="success", reward=float(i), timestamp=float(i),
                                        run_id=f"r{i}", metadata={"i": i})
                                   for i in range(20)])
    store.close()
    planted = {
        "meta": "sk_live_Xg4HEb9ohHDFpifIyd6nHCSC",
        "before": "glpat-9rw0sES2RBc9jpkVTlqV",
        "pwd": "JRA4ppwzQNLW0R",
        "label": "AKIAYTZW7H07NU9O4OXQ",
    }
    conn = sqlite3.connect(db)
    conn.execute("UPDATE episodes SET metadata = ? WHERE id = 3",
                 (json.dumps({"i": 3, "DB_PASSWORD": planted["pwd"],
                              "note": f"key {planted['meta']}"}),))
    conn.execute("UPDATE episodes SET state_before = ? WHERE id = 7",
                 (json.dumps({"tool_output": json.dumps({"token": planted["before"]})}),))
    conn.execute("UPDATE episodes SET request_id = ? WHERE id = 11", (planted["label"],))
    conn.commit()
    conn.close()
    return planted


def _rows(db: Path) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT * FROM episodes ORDER BY id").fetchall()
    finally:
        conn.close()


def test_scrub_removes_what_an_older_version_stored(tmp_path, capsys):
    db = tmp_path / "old.db"
    planted = _older_store(db)
    before = _rows(db)
    blob = _file_bytes(db)
    assert all(v.encode() in blob for v in planted.values())
    digest = hashlib.sha256(db.read_bytes()).hexdigest()

    assert main(["store", "scrub", str(db), "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["dry_run"] is True and dry["values_changed"] == 2 and dry["rows_changed"] == 2
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    assert _rows(db) == before

    assert main(["store", "scrub", str(db)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["values_changed"] == 2 and out["rows"] == 20 and out["vacuumed"] is True
    assert out["labels_with_secrets"] == [{"id": 11, "field": "request_id",
                                           "detectors": ["aws_access_key_id"]}]
    assert planted["label"] not in json.dumps(out)       # reported by row, never echoed
    blob = _file_bytes(db)
    for key in ("meta", "before", "pwd"):
        assert planted[key].encode() not in blob, key
    assert planted["label"].encode() in blob              # labels are reported, not changed
    after = _rows(db)
    cols = [r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info(episodes)")]
    changed = {(3, "metadata"), (7, "state_before")}
    assert [r[0] for r in after] == [r[0] for r in before]
    for old, new in zip(before, after):
        for name, a, b in zip(cols, old, new):
            assert (a == b) != ((old[0], name) in changed), (old[0], name)
    meta = json.loads(after[3][cols.index("metadata")])
    assert meta == {"i": 3, "DB_PASSWORD": "[REDACTED]", "note": "key [REDACTED]"}
    # the store still opens, and a second scrub finds nothing left
    store = ExperienceStore(db, dim=4)
    assert len(store) == 20
    store.close()
    assert main(["store", "scrub", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["values_changed"] == 0


def test_scrub_refuses_a_missing_file(tmp_path, capsys):
    assert main(["store", "scrub", str(tmp_path / "none.db")]) == 2
    assert "none.db" in capsys.readouterr().err


def test_a_secret_label_an_older_version_stored_is_refused_for_new_rows(tmp_path):
    from dyna.errors import ConfigError
    from dyna.experience import ExperienceStore
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    db = tmp_path / "old.db"
    s = ExperienceStore(db, dim=4)
    s.record("t1", task_type="placeholder", action_type="a", outcome="success", reward=1.0)
    s.close()
    # what an older version, or another writer, could leave: a label stored as given
    with sqlite3.connect(db) as con:
        con.execute("UPDATE episodes SET task_type = ?", (secret,))
    con.close()
    s = ExperienceStore(db, dim=4)
    assert s.get_stats()["n_records"] == 1          # the old row stays (scrub reports it)
    with pytest.raises(ConfigError) as e:
        s.record("t1", task_type=secret, action_type="b", outcome="success", reward=1.0)
    assert e.value.field == "task_type" and secret not in str(e.value)
    with pytest.raises(ConfigError):
        s.record("t1", episodes=[{"task_type": secret, "action_type": "c",
                                  "outcome": "success", "reward": 1.0}] * 2)
    s.record("t1", task_type="fine", action_type="a", outcome="success", reward=1.0)
    assert s.get_stats()["n_records"] == 2
    s.close()
