"""A damaged store is reported, never silently replaced; its readable rows are recoverable.

A 5,000-row store is built through the public API, closed, and 4 KB in its middle are
overwritten with seeded random bytes. Every command that opens it must fail with one line
naming the file and leave the folder and the file's bytes as they were (SQLite's own -wal
and -shm companions excepted); ``dyna store recover`` copies the readable rows into a new
store, at least as many as the sqlite3 shell's ``.recover`` finds.
"""

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess

import numpy as np
import pytest

from dyna.cli import main
from dyna.errors import ConfigError, NotAStoreError, StoreDamagedError
from dyna.experience import ExperienceStore

N = 5000
DIM = 16
T0 = 1_700_000_000.0
COMPANIONS = ("-wal", "-shm")


def _episodes(lo, hi):
    return [dict(task_type=f"task{i % 5}", action_type=("lookup", "ask")[i % 3 == 0],
                 outcome=("success", "failure")[i % 4 == 0], reward=float(i % 4 > 0),
                 timestamp=T0 + i, run_id=f"r{i // 100}",
                 state_before={"ticket": f"#{i}", "api_key": f"secret-{i}"},
                 metadata={"note": "n" * 80}) for i in range(lo, hi)]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    """A closed 5,000-row store of two tenants, built through ExperienceStore."""
    path = tmp_path_factory.mktemp("healthy") / "x.db"
    with ExperienceStore(path, dim=DIM) as store:
        store.record("acme", episodes=_episodes(0, N // 2))
        store.record("beta", episodes=_episodes(N // 2, N))
    assert not any(os.path.exists(f"{path}{s}") for s in COMPANIONS)  # fully checkpointed
    return path


@pytest.fixture
def damaged(healthy, tmp_path):
    """A copy of the healthy store with 4 KB of seeded random bytes written into its middle."""
    path = tmp_path / "db" / "x.db"
    path.parent.mkdir()
    shutil.copy(healthy, path)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(np.random.default_rng(20240501).bytes(4096))
    return path


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _listing(folder):
    """Names in ``folder`` without SQLite's -wal/-shm companions."""
    return sorted(n for n in os.listdir(folder) if not n.endswith(COMPANIONS))


def _one_line_naming(capsys, path):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dyna: error: ") and str(path) in lines[0]
    return lines[0]


# ------------------------------------------------------------------ reported, never moved
@pytest.mark.parametrize("argv", [
    ["store", "stats", "{db}"],
    ["store", "stats", "{db}", "--tenant", "acme"],
    ["store", "export", "{db}", "--tenant", "acme", "--out", "{out}"],
    ["mcp", "--db", "{db}", "--read-only"],
    ["mcp", "--db", "{db}"],
])
def test_commands_exit_2_with_one_line_and_change_nothing(damaged, tmp_path, capsys, argv):
    before, sha = _listing(damaged.parent), _sha(damaged)
    out = tmp_path / "export.jsonl"
    rc = main([a.format(db=damaged, out=out) for a in argv])
    assert rc == 2
    line = _one_line_naming(capsys, damaged)
    assert "damaged SQLite store" in line and f"dyna store recover {damaged}" in line
    assert _listing(damaged.parent) == before == ["x.db"]
    assert _sha(damaged) == sha
    assert not out.exists()


def test_library_opens_raise_typed_error_and_do_not_rename(damaged):
    before, sha = _listing(damaged.parent), _sha(damaged)
    for read_only in (True, False):
        with pytest.raises(StoreDamagedError) as info:
            ExperienceStore(damaged, dim=DIM, read_only=read_only)
        assert info.value.path == str(damaged) and "quick_check" in info.value.detail
    with pytest.raises(StoreDamagedError):  # without quick_check, the full load hits it
        ExperienceStore(damaged, dim=DIM, verify=False, eager=True)
    lazy = ExperienceStore(damaged, dim=DIM, verify=False)   # the default reads no episode
    with pytest.raises(StoreDamagedError):  # ... until the first operation that needs them
        lazy.query_similar("t", k=1, state_features=[0.0] * DIM)
    lazy.close()
    assert _listing(damaged.parent) == before
    assert _sha(damaged) == sha


def test_a_large_file_is_verified_in_the_background_and_its_damage_then_refuses_all(
        damaged, healthy, tmp_path, monkeypatch):
    """Open in a second: a file above VERIFY_IN_BACKGROUND_BYTES is checked by
    quick_check on its own connection while the open returns; once the check has found
    damage, every read and write raises StoreDamagedError (never an empty store), and
    the file is left as it was."""
    from dyna.experience import RECORD_SCHEMA
    from dyna.store import sqlite as S
    from dyna.store import sqlite_conn

    monkeypatch.setattr(sqlite_conn, "VERIFY_IN_BACKGROUND_BYTES", 0)  # every file is large
    sha = _sha(damaged)
    for read_only in (True, False):
        store = S.SQLiteStore(damaged, RECORD_SCHEMA, DIM, read_only=read_only)
        with pytest.raises(StoreDamagedError) as info:
            store.wait_verified(60)
        assert info.value.path == str(damaged) and "quick_check" in info.value.detail
        with pytest.raises(StoreDamagedError):
            store.count()
        if not read_only:
            with pytest.raises(StoreDamagedError):
                store.reset()
        store.close()
    assert _sha(damaged) == sha
    sound = tmp_path / "sound.db"
    shutil.copy(healthy, sound)
    with S.SQLiteStore(sound, RECORD_SCHEMA, DIM, read_only=True) as store:
        assert store.wait_verified(60) is True and store.count() == N
    # close() leaves no check running (it interrupts one still going)
    store = S.SQLiteStore(sound, RECORD_SCHEMA, DIM, read_only=True)
    store.close()
    check = store.connection.verifier
    assert check is not None and not check.is_alive()


# ------------------------------------------------------------------ recovery
def test_recover_re_derives_a_damaged_counter_dim_and_generation(healthy, tmp_path, capsys):
    """Review R19b: with meta next_id = 'zz' `dyna store recover` died with a ValueError
    traceback, and a bad dim or generation was copied, so the new file was refused again."""
    import sqlite3

    src = tmp_path / "bad_meta.db"
    shutil.copy(healthy, src)
    con = sqlite3.connect(src)
    con.executescript("UPDATE meta SET value = 'zz' WHERE key = 'next_id';"
                      "UPDATE meta SET value = 'four' WHERE key = 'dim';"
                      "UPDATE meta SET value = '-x' WHERE key = 'generation';")
    con.close()
    out = tmp_path / "new.db"
    assert main(["store", "recover", str(src), "--out", str(out)]) == 0
    capsys.readouterr()
    with ExperienceStore(out, dim=DIM, read_only=True) as store:
        assert store.get_stats()["n_records"] == N
    con = sqlite3.connect(out)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    assert (meta["dim"], meta["next_id"], meta["generation"]) == (str(DIM), str(N), "0")


@pytest.mark.parametrize("dim,says", [
    ("1000000000", "meta.dim is 1000000000, more than 65536"),   # (a 3.7 TiB allocation)
    (str(2 * DIM), f"meta.dim is {2 * DIM}, but the stored features vectors hold {4 * DIM} "
                   f"bytes, not {8 * DIM}"),                     # (every vector read as 0)
])
def test_a_tampered_dim_is_damage_named_in_one_line(healthy, tmp_path, capsys, dim, says):
    src = tmp_path / "dim.db"
    shutil.copy(healthy, src)
    con = sqlite3.connect(src)
    con.execute("UPDATE meta SET value = ? WHERE key = 'dim'", (dim,))
    con.commit()
    con.close()
    sha = _sha(src)
    for argv in (["stats", str(src)], ["export", str(src), "--tenant", "acme", "--out",
                                       str(tmp_path / "e.jsonl")], ["compact", str(src)]):
        assert main(["store", *argv]) == 2, argv
        assert says in _one_line_naming(capsys, src)
    assert _sha(src) == sha and not (tmp_path / "e.jsonl").exists()
    out = tmp_path / "new.db"
    assert main(["store", "recover", str(src), "--out", str(out)]) == 0   # re-derives it
    capsys.readouterr()
    with ExperienceStore(out, dim=DIM, read_only=True) as store:
        assert store.get_stats()["n_records"] == N
    with pytest.raises(ConfigError, match="dim"):
        ExperienceStore(tmp_path / "big.db", dim=2 ** 16 + 1)
    assert not (tmp_path / "big.db").exists()
    if dim == str(2 * DIM):   # the library's own open, given the tampered dim, refuses too
        with pytest.raises(StoreDamagedError, match="but the stored features vectors"):
            ExperienceStore(src, dim=2 * DIM, read_only=True)


def test_one_short_vector_is_not_a_damaged_store_and_recover_leaves_it_out(healthy,
                                                                           tmp_path, capsys):
    """A review: one short vector in the first row made the whole store "damaged", and the
    recovered copy was refused the same way."""
    src = tmp_path / "short.db"
    shutil.copy(healthy, src)
    con = sqlite3.connect(src)
    con.execute("UPDATE episodes SET features = zeroblob(8) WHERE id = "
                "(SELECT MIN(id) FROM episodes)")
    con.commit()
    con.close()
    assert main(["store", "stats", str(src)]) == 0
    assert json.loads(capsys.readouterr().out)["n_records"] == N
    out = _recover_with_dyna(capsys, src, tmp_path / "new.db")
    assert (out["rows_recovered"], out["rows_unreadable"]) == (N - 1, 1)
    assert main(["store", "stats", str(tmp_path / "new.db")]) == 0
    assert json.loads(capsys.readouterr().out)["n_records"] == N - 1


@pytest.mark.parametrize("sql,says", [
    ("INSERT INTO schema_version VALUES (99, 0)", "schema version 99 is newer than this dyna"),
    ("UPDATE meta SET value = '-1' WHERE key = 'dim'", "meta.dim is '-1', not an integer"),
    ("UPDATE meta SET value = '-5' WHERE key = 'generation'", "generation"),
    (f"UPDATE meta SET value = '{2 * DIM}' WHERE key = 'dim'", "but the stored features"),
])
def test_scrub_refuses_what_every_other_command_refuses(healthy, tmp_path, capsys, sql, says):
    """A security review found scrub rewrote and VACUUMed such files (the md5 changed)."""
    src = tmp_path / "s.db"
    shutil.copy(healthy, src)
    con = sqlite3.connect(src)
    con.execute(sql)
    con.commit()
    con.close()
    sha = _sha(src)
    assert main(["store", "stats", str(src)]) == 2   # (refused by the other commands)
    capsys.readouterr()
    for argv in (["scrub", str(src)], ["scrub", str(src), "--dry-run"]):
        assert main(["store", *argv]) == 2, argv
        assert says in _one_line_naming(capsys, src)
        assert _sha(src) == sha


def test_values_another_program_wrote_are_damage_and_recover_leaves_their_rows(
        healthy, tmp_path, capsys):
    """A security review: text in the reward column or non-JSON in state_before gave
    ValueError / JSONDecodeError tracebacks (exit 1) from export and compact."""
    src = tmp_path / "v.db"
    shutil.copy(healthy, src)
    con = sqlite3.connect(src)
    con.execute("UPDATE episodes SET state_before = '{not json' WHERE id = 39")
    con.execute("UPDATE episodes SET reward = 'lots' WHERE id IN (7, 8)")
    con.commit()
    con.close()
    for argv, says in (
            (["export", str(src), "--tenant", "acme", "--out", str(tmp_path / "e.jsonl")],
             "a stored reward value is 'lots', not a number"),
            (["compact", str(src), "--keep", "1"], "a stored reward value is 'lots'")):
        assert main(["store", *argv]) == 2, argv
        assert says in _one_line_naming(capsys, src)
    out = _recover_with_dyna(capsys, src, tmp_path / "new.db")
    assert (out["rows_recovered"], out["rows_unreadable"]) == (N - 3, 3)
    assert main(["store", "export", str(tmp_path / "new.db"), "--tenant", "acme", "--out",
                 str(tmp_path / "e.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == N // 2 - 3
    con = sqlite3.connect(src)   # the JSON damage alone, named by its column
    con.execute("UPDATE episodes SET reward = 1.0 WHERE id IN (7, 8)")
    con.commit()
    con.close()
    assert main(["store", "export", str(src), "--tenant", "acme", "--out",
                 str(tmp_path / "f.jsonl")]) == 2
    assert "a stored state_before value is not JSON" in _one_line_naming(capsys, src)


def _recover_with_dyna(capsys, src, out):
    assert main(["store", "recover", str(src), "--out", str(out)]) == 0
    return json.loads(capsys.readouterr().out)


def _sqlite3_recover_count(src, work):
    """Episode rows the sqlite3 shell's .recover gets back from a copy of ``src``."""
    exe = shutil.which("sqlite3")
    if exe is None:
        pytest.skip("the sqlite3 command-line shell is not installed (apt-get install sqlite3)")
    work.mkdir()
    probe = work / "probe.db"
    sqlite3.connect(probe).executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
    run = subprocess.run([exe, str(probe), ".recover"], capture_output=True, text=True)
    if run.returncode != 0 or "INSERT INTO" not in run.stdout:
        pytest.skip("this sqlite3 shell's .recover does not work even on a healthy file "
                    f"({run.stderr.strip() or run.returncode}); Debian's sqlite3 3.40 is "
                    "built without SQLITE_ENABLE_DBPAGE_VTAB, which .recover needs")
    copy = work / "copy.db"
    shutil.copy(src, copy)  # the shell may write -wal/-shm next to what it opens
    sql = subprocess.run([exe, str(copy), ".recover"], capture_output=True, text=True).stdout
    rebuilt = work / "rebuilt.db"
    subprocess.run([exe, str(rebuilt)], input=sql, capture_output=True, text=True)
    conn = sqlite3.connect(rebuilt)
    try:
        return conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


def test_recover_copies_every_readable_row(damaged, tmp_path, capsys):
    sha = _sha(damaged)
    out = tmp_path / "new" / "r.db"
    out.parent.mkdir()
    res = _recover_with_dyna(capsys, damaged, out)
    with capsys.disabled():
        print(f"\ndyna store recover: {res['rows_recovered']} rows recovered, "
              f"{res['rows_unreadable']} unreadable")
    assert res["rows_recovered"] + res["rows_unreadable"] == N  # ids 0..4999, dense
    assert N - 100 <= res["rows_recovered"] < N
    assert res["integrity_check"] == "ok"
    assert _sha(damaged) == sha and _listing(damaged.parent) == ["x.db"]
    assert _listing(out.parent) == ["r.db"]  # the temporary file is gone

    conn = sqlite3.connect(out)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert main(["store", "stats", str(out)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["n_records"] == res["rows_recovered"]
    assert stats["persistence_status"] == "ok"

    # rows are copied as stored: tenants kept apart, secrets still redacted, ids kept
    with ExperienceStore(out, dim=DIM) as store:
        recs = store.export_data("acme")["records"] + store.export_data("beta")["records"]
        assert len(recs) == res["rows_recovered"]
        assert all(r["state_before"]["api_key"] == "[REDACTED]" for r in recs)
        assert all((r["tenant_id"] == "acme") == (r["id"] < N // 2) for r in recs)
        assert all(r["state_before"]["ticket"] == f"#{r['id']}" for r in recs)
        # the id counter continues past every id the damaged store handed out
        assert store.record("acme", **_episodes(0, 1)[0])["ids"] == [N]

    sqlite_n = _sqlite3_recover_count(damaged, tmp_path / "shell")
    with capsys.disabled():
        print(f"sqlite3 .recover: {sqlite_n} episode rows")
    assert res["rows_recovered"] >= sqlite_n


def test_recover_refuses_an_existing_out_and_a_missing_source(damaged, tmp_path, capsys):
    out = tmp_path / "taken.db"
    out.write_bytes(b"keep me")
    assert main(["store", "recover", str(damaged), "--out", str(out)]) == 2
    assert "exists already" in _one_line_naming(capsys, out)
    assert out.read_bytes() == b"keep me"
    assert sorted(os.listdir(tmp_path)) == ["db", "taken.db"]
    missing = tmp_path / "missing.db"
    assert main(["store", "recover", str(missing), "--out", str(tmp_path / "n.db")]) == 2
    _one_line_naming(capsys, missing)
    assert not (tmp_path / "n.db").exists()
    from dyna.store.recover import recover
    with pytest.raises(ConfigError):
        recover(damaged, out)


def test_recover_of_a_healthy_store_copies_everything(healthy, tmp_path, capsys):
    res = _recover_with_dyna(capsys, healthy, tmp_path / "copy.db")
    assert res["rows_recovered"] == N and res["rows_unreadable"] == 0
    with ExperienceStore(healthy, dim=DIM, read_only=True) as a, \
            ExperienceStore(tmp_path / "copy.db", dim=DIM, read_only=True) as b:
        assert a.export_data("beta")["records"] == b.export_data("beta")["records"]


# ------------------------------------------------------------------ other programs' files
def test_foreign_sqlite_file_with_a_meta_table_is_refused_and_untouched(tmp_path, capsys):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                       "INSERT INTO meta VALUES ('dim', '16'), ('owner', 'another app');"
                       "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);"
                       "INSERT INTO notes (body) VALUES ('hello');")
    conn.close()
    sha = _sha(path)
    for read_only in (False, True):
        with pytest.raises(NotAStoreError, match="app.db"):
            ExperienceStore(path, dim=DIM, read_only=read_only)
    for argv in (["store", "stats", str(path)], ["store", "compact", str(path)],
                 ["mcp", "--db", str(path)], ["mcp", "--db", str(path), "--read-only"]):
        assert main(argv) == 2
        assert "not a dyna experience store" in _one_line_naming(capsys, path)
    assert _sha(path) == sha and _listing(tmp_path) == ["app.db"]
    conn = sqlite3.connect(path)
    assert sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master")) == [
        "meta", "notes", "sqlite_autoindex_meta_1"]
    conn.close()
