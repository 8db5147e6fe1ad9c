"""Helpers of the loop stores: JSON-lines logs that survive a torn append, reads that never
follow a link, typed errors for corrupt files, reversible text diffs."""

import os
import random

import pytest

from dyna.fileio import (CorruptFileError, SymlinkError, append_record, check_no_symlink,
                         read_json, read_last_record, read_records)
from dyna.loops._text import apply_diff, text_diff


def test_torn_tail_is_cut_before_the_next_append(tmp_path):
    h = tmp_path / "h.jsonl"
    append_record(h, {"seq": 1})
    with open(h, "ab") as fh:
        fh.write(b'{"seq": 2, "op": "cr')         # a crash in the middle of an append
    assert read_records(h) == [{"seq": 1}] and read_last_record(h) == {"seq": 1}
    append_record(h, {"seq": 2})                  # not glued to the fragment
    assert h.read_bytes() == b'{"seq": 1}\n{"seq": 2}\n'
    assert read_last_record(h) == {"seq": 2}


def test_case_pers02_torn_tail_of_the_loops_logs(tmp_path):
    """../shared/cases PERS-02, its input as given, on the loops' own JSON-lines logs
    (history, pending): the torn record is not read and the next append starts its own
    line; a blank line after it makes it a corrupt line in the middle, refused by name
    (these logs never drop a record silently)."""
    h = tmp_path / "h.jsonl"
    torn = b'{"episode": 1, "return": 3.0}\n{"episode": 2, "return": 5.0}\n{"episode": 3, "ret'
    h.write_bytes(torn)
    assert [r["episode"] for r in read_records(h)] == [1, 2]
    append_record(h, {"episode": 4, "return": 1.0})
    assert [r["episode"] for r in read_records(h)] == [1, 2, 4]
    h.write_bytes(torn + b"\n\n")
    with pytest.raises(CorruptFileError) as exc:
        read_records(h)
    assert exc.value.line == 3


def test_a_last_record_that_lost_only_its_newline_is_kept(tmp_path):
    h = tmp_path / "h.jsonl"
    append_record(h, {"seq": 1})
    append_record(h, {"seq": 2, "op": "retire"})
    h.write_bytes(h.read_bytes()[:-1])            # an edit dropped the final newline
    assert read_records(h) == [{"seq": 1}, {"seq": 2, "op": "retire"}]
    assert read_last_record(h) == {"seq": 2, "op": "retire"}
    append_record(h, {"seq": 3})                  # (not cut off, seq 2 not reused)
    assert h.read_bytes() == b'{"seq": 1}\n{"op": "retire", "seq": 2}\n{"seq": 3}\n'
    h.write_bytes(b'{"seq": 1}')                  # the only line, whole
    assert read_records(h) == [{"seq": 1}] and read_last_record(h) == {"seq": 1}
    for tail in (b'[1, 2]', b'"text"', b'{"seq": 2}}', b'\xff'):   # not an object: torn
        h.write_bytes(b'{"seq": 1}\n' + tail)
        assert read_records(h) == [{"seq": 1}] and read_last_record(h) == {"seq": 1}, tail
        append_record(h, {"seq": 2})
        assert h.read_bytes() == b'{"seq": 1}\n{"seq": 2}\n', tail
    assert oct(h.stat().st_mode & 0o777) == oct(0o600 & ~_umask())


def _umask() -> int:
    import os

    old = os.umask(0)
    os.umask(old)
    return old


def test_corrupt_lines_and_files_are_typed_errors(tmp_path):
    h = tmp_path / "h.jsonl"
    h.write_bytes(b'{"a": 1}\n[1]\n{"a": 2}\n')
    with pytest.raises(CorruptFileError) as exc:
        read_records(h)
    assert (exc.value.path, exc.value.line) == (str(h), 2)
    assert str(exc.value) == f"{h}:2: corrupt log line (not a JSON object)"
    h.write_bytes(b'{"a": 1}\n{"a": "\xe9"}\n')
    with pytest.raises(CorruptFileError, match=":2: corrupt log line"):
        read_records(h)
    j = tmp_path / "s.json"
    j.write_text('{\n "a": 1,\n}\n')
    with pytest.raises(CorruptFileError) as exc:
        read_json(j)
    assert exc.value.line == 3
    assert read_json(tmp_path / "missing.json") is None and read_records(tmp_path / "no") == []


def test_links_are_never_followed(tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_bytes(b'{"a": 1}\n')
    (tmp_path / "lib" / "sub").mkdir(parents=True)
    os.symlink(target, tmp_path / "lib" / "log.jsonl")
    os.symlink(tmp_path, tmp_path / "lib" / "up")
    for f in (read_records, read_last_record, read_json):
        with pytest.raises(SymlinkError):
            f(tmp_path / "lib" / "log.jsonl")
    with pytest.raises(SymlinkError):
        append_record(tmp_path / "lib" / "log.jsonl", {"b": 2})
    assert target.read_bytes() == b'{"a": 1}\n'
    with pytest.raises(SymlinkError) as exc:
        check_no_symlink(tmp_path / "lib", tmp_path / "lib" / "up" / "x" / "y")
    assert exc.value.value == str(tmp_path / "lib" / "up")
    p = tmp_path / "lib" / "sub" / "f"
    assert check_no_symlink(tmp_path / "lib", p) == p


def test_diffs_rebuild_both_texts_byte_for_byte():
    rng = random.Random(7)
    parts = ["a", "b\n", "c\r\n", "\n", "--- x\n", "+++ y\n", "@@ -1 +1 @@\n", "d", "\u00e9\r"]
    for _ in range(2000):
        a = "".join(rng.choice(parts) for _ in range(rng.randint(0, 9)))
        b = "".join(rng.choice(parts) for _ in range(rng.randint(0, 9)))
        d = text_diff(a, b, context=rng.randint(0, 3))
        assert apply_diff(a, d) == b and apply_diff(b, d, reverse=True) == a
    assert text_diff("same\n", "same\n") == []
    d = text_diff("one\ntwo\n", "one\n2\n")
    assert d == ["--- before", "+++ after", "@@ -1,2 +1,2 @@", " one\n", "-two\n", "+2\n"]
    with pytest.raises(ValueError, match="does not apply at line 2"):
        apply_diff("one\nthree\n", d)


def test_a_key_named_twice_is_damage_in_every_file_and_shown_redacted(tmp_path):
    """JSON readers differ on which of two values of one key counts (this one keeps the
    last; a person reading the file sees the first): such a file is refused, never read
    one way (the state file's trust, a pending proposal's destination)."""
    from dyna.loops.skills import SkillLibrary

    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    h = tmp_path / "h.jsonl"
    h.write_bytes(b'{"seq": 1}\n{"seq": 2, "op": "create", "op": "retire"}\n{"seq": 3}\n')
    with pytest.raises(CorruptFileError) as exc:
        read_records(h)
    assert (exc.value.line, str(exc.value)) == (
        2, f"{h}:2: corrupt log line (duplicate key 'op')")
    h.write_bytes(b'{"seq": 1}\n{"seq": 2, "%s": 1, "%s": 2}' % ((secret.encode(),) * 2))
    for read in (read_records, read_last_record):  # the last line, without its newline
        with pytest.raises(CorruptFileError, match="duplicate key") as exc:
            read(h)
        assert secret not in str(exc.value) and "ghp_" not in str(exc.value)
    before = h.read_bytes()
    with pytest.raises(CorruptFileError, match="duplicate key"):
        append_record(h, {"seq": 3})               # not cut as a torn tail, not appended to
    assert h.read_bytes() == before
    j = tmp_path / "s.json"
    j.write_text('{"skills": {"x": {"trust": "untrusted", "trust": "approved"}}}')
    with pytest.raises(CorruptFileError, match="duplicate key 'trust'"):
        read_json(j)
    long_key = "k" * 5000
    j.write_text('{"%s": 1, "%s": 2}' % (long_key, long_key))
    with pytest.raises(CorruptFileError) as exc:
        read_json(j)
    assert len(str(exc.value)) < len(str(j)) + 120
    # a library whose state file names a key twice does not open
    lib = SkillLibrary(tmp_path / "lib")
    from dyna.loops.skills import Skill
    lib.add(Skill("deploy-app", "Deploy the app.", "1. call `make deploy`"), run_id="e1")
    lib.record_outcome(["deploy-app"], True, "e2")
    st = tmp_path / "lib" / ".dyna" / "state.json"
    text = st.read_text()
    assert text.count('"successes": 1') == 1
    st.write_text(text.replace('"successes": 1', '"successes": 0, "successes": 1'))
    with pytest.raises(CorruptFileError, match="duplicate key 'successes'"):
        SkillLibrary(tmp_path / "lib")
    # none of these reads wrote anything
    assert st.read_text().count('"successes"') == 2


def test_a_memory_file_naming_a_key_twice_is_refused(tmp_path):
    from dyna.loops.memory import MemoryFileError, MemoryStore

    store = MemoryStore(tmp_path / "MEMORY.md")
    store.add("the staging port is 8080", run_id="e1")
    store.stage("the prod port is 9090", run_id="e2", provenance=("tool_output",))
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in
                   (".json", ".jsonl"))
    assert len(files) == 2, files                  # the pending file and the history
    for f in files:
        raw = f.read_bytes()
        assert raw.count(b'"run_id": ') >= 1
        f.write_bytes(raw.replace(b'"run_id": ', b'"run_id": "x", "run_id": ', 1))
        with pytest.raises(MemoryFileError, match="duplicate key 'run_id'"):
            MemoryStore(tmp_path / "MEMORY.md").pending()
            MemoryStore(tmp_path / "MEMORY.md").history()
        f.write_bytes(raw)


@pytest.mark.parametrize("bad", [None, 5, 1.5, ["e9"], ("e9",), {"a": 1}, b"e9"])
def test_a_run_id_that_is_not_text_is_refused_before_anything_is_written(tmp_path, bad):
    """Refused before the history, whose reader would then refuse the whole library (every
    command would fail on it), and before state.json changes (bytes included)."""
    from dyna.errors import ConfigError
    from dyna.loops.skills import Skill, SkillLibrary

    lib = SkillLibrary(tmp_path / "lib")
    lib.add(Skill("b-skill", "Build it.", "1. call `make build`"), run_id="e1")
    files = {p: p.read_bytes() for p in (tmp_path / "lib").rglob("*") if p.is_file()}
    mem = SkillLibrary.in_memory()
    mem.add(Skill("b-skill", "Build it.", "1. call `make build`"), run_id="e1")
    calls = [lambda x: x.record_outcome(["b-skill"], True, bad),
             lambda x: x.retire("b-skill", run_id=bad),
             lambda x: x.patch("b-skill", run_id=bad, body="1. call `make b`"),
             lambda x: x.add(Skill("c-skill", "C.", "1. c"), run_id=bad),
             lambda x: x.stage(Skill("d-skill", "D.", "1. d"), bad),
             lambda x: x.propose(Skill("e-skill", "E.", "1. e"), bad),
             lambda x: x.retire("b-skill", run_id="e2", reason=bad)]
    for call in calls:
        for x in (lib, mem):
            with pytest.raises(ConfigError) as exc:
                call(x)
            assert exc.value.field in ("run_id", "reason")
            assert "e9" not in str(exc.value)   # the type is shown, not the value
    assert {p: p.read_bytes() for p in files} == files
    assert [h.op for h in SkillLibrary(tmp_path / "lib").history()] == ["create"]
    assert [h.op for h in mem.history()] == ["create"]
    assert mem.get("b-skill").successes == 0 and lib.competence.posterior("b-skill") \
        == mem.competence.posterior("b-skill")


def test_memory_file_errors_show_no_secret_of_the_line(tmp_path):
    """A history line is redacted before it is cut to 60 bytes (a token cut short of its
    detector's length would show 29 of its 36 characters), and an unknown key of a pending
    fact is not quoted whole by the TypeError."""
    from dyna.loops.memory import MemoryFileError, MemoryStore

    gh = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    store = MemoryStore(tmp_path / "MEMORY.md")
    store.add("the staging port is 8080", run_id="e1")
    store.stage("the prod port is 9090", run_id="e2", provenance=("tool_output",))
    hist, pend = sorted((p for p in tmp_path.rglob("*.json*") if p.is_file()),
                        key=lambda p: p.suffix != ".jsonl")
    raw = hist.read_bytes()
    hist.write_bytes(b'{"op": "add", "n": "see    %s", "seq": "x"}\n' % gh.encode() + raw)
    with pytest.raises(MemoryFileError) as exc:
        MemoryStore(tmp_path / "MEMORY.md").history()
    assert "ghp_A1b2" not in str(exc.value) and "[REDACTED]" in str(exc.value)
    hist.write_bytes(raw)
    text = pend.read_text()
    pend.write_text(text.replace('"text": ', f'"{gh}": 1, "text": ', 1))
    with pytest.raises(MemoryFileError) as exc:
        MemoryStore(tmp_path / "MEMORY.md").pending()
    assert "ghp_A1b2" not in str(exc.value) and "unexpected keyword" in str(exc.value)


def test_a_damaged_pending_file_fails_list_and_show_before_any_output(tmp_path, capsys):
    from dyna.cli import main
    from dyna.loops.memory import MemoryStore
    from dyna.loops.skills import Skill, SkillLibrary

    lib = SkillLibrary(tmp_path / "lib")
    lib.add(Skill("deploy-app", "Deploy the app.", "1. call `make deploy`"), run_id="e1")
    item = lib.stage(Skill("fix-ci", "Fix CI.", "1. rerun"), "e2", ("tool_output",))
    p = next((tmp_path / "lib" / ".dyna").rglob(f"{item.id}*.json"))
    p.write_text(p.read_text().replace('"dest": ', '"dest": "x", "dest": ', 1))
    store = MemoryStore(tmp_path / "MEMORY.md")
    store.add("the staging port is 8080", run_id="e1")
    store.stage("the prod port is 9090", run_id="e2", provenance=("tool_output",))
    q = next(x for x in tmp_path.rglob("*.json")
             if x.relative_to(tmp_path).parts[0] != "lib")   # the memory's pending file
    q.write_text(q.read_text().replace('"run_id": ', '"run_id": "x", "run_id": ', 1))
    capsys.readouterr()
    for argv in (["skills", "list", str(tmp_path / "lib")],
                 ["memory", "show", str(tmp_path / "MEMORY.md")]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "duplicate key" in err, (argv, out, err)


def test_a_memory_history_whose_last_record_lost_its_newline_keeps_it(tmp_path):
    """A whole last record is not a torn write: it stays visible, the next write ends its
    line and takes the next seq, as the skills' log does."""
    from dyna.loops.memory import MemoryFileError, MemoryStore

    store = MemoryStore(tmp_path / "MEMORY.md")
    store.add("the staging port is 8080", run_id="e1")
    item = store.stage("the prod port is 9090", run_id="e2", provenance=("tool_output",))
    hist = next(tmp_path.rglob("*.history.jsonl"))
    raw = hist.read_bytes()
    hist.write_bytes(raw[:-1])                     # an edit dropped the final newline
    again = MemoryStore(tmp_path / "MEMORY.md")
    assert [h["op"] for h in again.history()] == ["add", "stage"]
    again.approve(item.id)
    recs = MemoryStore(tmp_path / "MEMORY.md").history()
    assert [h["op"] for h in recs][:2] == ["add", "stage"] and len(recs) >= 3
    assert len({h["seq"] for h in recs}) == len(recs)           # no seq taken twice
    assert hist.read_bytes().startswith(raw) and hist.read_bytes().endswith(b"\n")
    # a torn write (a cut-off record) is still cut, and a last record naming a key twice
    # is refused, not cut
    hist.write_bytes(raw + b'{"seq": 9, "op": "ad')
    assert [h["op"] for h in MemoryStore(tmp_path / "MEMORY.md").history()] == ["add", "stage"]
    hist.write_bytes(raw + b'{"seq": 9, "op": "add", "op": "stage"}')
    with pytest.raises(MemoryFileError, match="duplicate key 'op'"):
        MemoryStore(tmp_path / "MEMORY.md").history()


def test_a_repeated_key_is_shown_only_through_the_redactor(monkeypatch):
    from dyna.fileio import unique_json
    from dyna.fileio.unique_json import DuplicateKeyError, loads_unique

    gh = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    with pytest.raises(DuplicateKeyError) as exc:
        loads_unique('{"x": {"%s": 1, "\\u0067hp_%s": 2}}' % (gh, gh[4:]))   # one key
    assert exc.value.key == gh and str(exc.value) == "duplicate key '[REDACTED]'"
    monkeypatch.setattr(unique_json, "show_key", None)  # before dyna.redact set its redaction
    assert str(exc.value) == "duplicate key (not shown)"
