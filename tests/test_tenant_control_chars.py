"""A tenant id holding a control character is refused (:func:`dyna.store.columns.check_tenant`):
by the library with a ConfigError naming the field and showing the tenant escaped, and by the
CLI with one line on stderr and exit status 2, nothing written."""

import pytest

from dyna.cli import main
from dyna.errors import ConfigError
from dyna.experience import ExperienceStore
from dyna.store.columns import check_tenant


@pytest.mark.parametrize("tenant, message", [
    ("a\x1bb", r"tenant_id='a\x1bb': a tenant id must not contain a C0 control character "
               "(U+001B at position 1)"),
    ("acme\n", r"tenant_id='acme\n': a tenant id must not contain a C0 control character "
               "(U+000A at position 4)"),
    ("\tacme", r"tenant_id='\tacme': a tenant id must not contain a C0 control character "
               "(U+0009 at position 0)"),
    ("ac\x7fme", r"tenant_id='ac\x7fme': a tenant id must not contain DEL "
                 "(U+007F at position 2)"),
    ("ac\x85me", r"tenant_id='ac\x85me': a tenant id must not contain a C1 control character "
                 "(U+0085 at position 2)"),
    ("ac\x9bme", r"tenant_id='ac\x9bme': a tenant id must not contain a C1 control character "
                 "(U+009B at position 2)"),
    ("acme\u2028x", r"tenant_id='acme\u2028x': a tenant id must not contain a line or "
                    "paragraph separator (U+2028 at position 4)"),
    ("acme\u2029", r"tenant_id='acme\u2029': a tenant id must not contain a line or "
                   "paragraph separator (U+2029 at position 4)"),
    ("\u202eemca", r"tenant_id='\u202eemca': a tenant id must not contain a bidirectional "
                   "control character (U+202E at position 0)"),
    ("a\u202ab", r"tenant_id='a\u202ab': a tenant id must not contain a bidirectional "
                 "control character (U+202A at position 1)"),
    ("a\u2066b\u2069", r"tenant_id='a\u2066b\u2069': a tenant id must not contain a "
                       "bidirectional control character (U+2066 at position 1)"),
    ("a\u200fb", r"tenant_id='a\u200fb': a tenant id must not contain a bidirectional "
                 "control character (U+200F at position 1)"),
])
def test_each_class_of_control_character_is_refused_and_shown_escaped(tenant, message):
    with pytest.raises(ConfigError) as err:
        check_tenant(tenant)
    assert str(err.value) == message
    assert err.value.field == "tenant_id" and err.value.value == tenant
    assert tenant not in str(err.value)           # escaped, never the raw characters


@pytest.mark.parametrize("tenant", ["acme", "t-1_b.c", "café", "租户", "a b", "ü" * 40])
def test_printable_tenants_pass(tenant):
    assert check_tenant(tenant) == tenant


def test_a_secret_in_a_refused_tenant_is_not_echoed():
    token = "ghp_" + "a1B2" * 9
    with pytest.raises(ConfigError) as err:
        check_tenant(token + "\x1b")
    assert token not in str(err.value) and "U+001B at position 40" in str(err.value)


def test_the_store_refuses_before_writing(tmp_path):
    db = tmp_path / "s.db"
    store = ExperienceStore(db, dim=4)
    with pytest.raises(ConfigError, match=r"U\+202E at position 1"):
        store.record("a\u202eb", task_type="t", action_type="x", outcome="success",
                     reward=1.0, run_id="r1", timestamp=1.0)
    assert store.get_stats()["n_records"] == 0
    store.close()


def test_the_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    db = tmp_path / "s.db"
    store = ExperienceStore(db, dim=4)
    store.record("acme", task_type="t", action_type="x", outcome="success", reward=1.0,
                 run_id="r1", timestamp=1.0)
    store.close()
    before = db.read_bytes()
    out_file = tmp_path / "out.jsonl"
    cases = [(["stats", str(db), "--tenant", "ac\x85me"],
              "tenant_id='ac\\x85me': a tenant id must not contain a C1 control character "
              "(U+0085 at position 2)"),
             (["export", str(db), "--tenant", "acme\u2028", "--out", str(out_file)],
              "tenant_id='acme\\u2028': a tenant id must not contain a line or paragraph "
              "separator (U+2028 at position 4)")]
    for argv, line in cases:
        rc = main(["store", *argv])
        out, err = capsys.readouterr()
        assert (rc, out, err) == (2, "", f"dyna: error: {line}\n")
    assert not out_file.exists() and db.read_bytes() == before
