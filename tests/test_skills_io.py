"""Helpers of the loop stores: JSON-lines logs that survive a torn append, reads that never
follow a link, typed errors for corrupt files, reversible text diffs."""

import os
import random

import pytest

from dyna.loops._io import (CorruptFileError, SymlinkError, append_jsonl, check_no_symlink,
                            read_json, read_jsonl, read_last_jsonl)
from dyna.loops._text import apply_diff, text_diff


def test_torn_tail_is_cut_before_the_next_append(tmp_path):
    h = tmp_path / "h.jsonl"
    append_jsonl(h, {"seq": 1})
    with open(h, "ab") as fh:
        fh.write(b'{"seq": 2, "op": "cr')         # a crash in the middle of an append
    assert read_jsonl(h) == [{"seq": 1}] and read_last_jsonl(h) == {"seq": 1}
    append_jsonl(h, {"seq": 2})                   # was glued to the fragment: corrupt
    assert h.read_bytes() == b'{"seq": 1}\n{"seq": 2}\n'
    assert read_last_jsonl(h) == {"seq": 2}


def test_case_pers02_torn_tail_of_the_loops_logs(tmp_path):
    """../shared/cases PERS-02, its input as given, on the loops' own JSON-lines logs
    (history, pending): the torn record is not read and the next append starts its own
    line; a blank line after it makes it a corrupt line in the middle, refused by name
    (these logs never drop a record silently)."""
    h = tmp_path / "h.jsonl"
    torn = b'{"episode": 1, "return": 3.0}\n{"episode": 2, "return": 5.0}\n{"episode": 3, "ret'
    h.write_bytes(torn)
    assert [r["episode"] for r in read_jsonl(h)] == [1, 2]
    append_jsonl(h, {"episode": 4, "return": 1.0})
    assert [r["episode"] for r in read_jsonl(h)] == [1, 2, 4]
    h.write_bytes(torn + b"\n\n")
    with pytest.raises(CorruptFileError) as exc:
        read_jsonl(h)
    assert exc.value.line == 3


def test_a_last_record_that_lost_only_its_newline_is_kept(tmp_path):
    h = tmp_path / "h.jsonl"
    append_jsonl(h, {"seq": 1})
    append_jsonl(h, {"seq": 2, "op": "retire"})
    h.write_bytes(h.read_bytes()[:-1])            # an edit dropped the final newline
    assert read_jsonl(h) == [{"seq": 1}, {"seq": 2, "op": "retire"}]
    assert read_last_jsonl(h) == {"seq": 2, "op": "retire"}
    append_jsonl(h, {"seq": 3})                   # (it was cut off, and seq 2 reused)
    assert h.read_bytes() == b'{"seq": 1}\n{"op": "retire", "seq": 2}\n{"seq": 3}\n'
    h.write_bytes(b'{"seq": 1}')                  # the only line, whole
    assert read_jsonl(h) == [{"seq": 1}] and read_last_jsonl(h) == {"seq": 1}
    for tail in (b'[1, 2]', b'"text"', b'{"seq": 2}}', b'\xff'):   # not an object: torn
        h.write_bytes(b'{"seq": 1}\n' + tail)
        assert read_jsonl(h) == [{"seq": 1}] and read_last_jsonl(h) == {"seq": 1}, tail
        append_jsonl(h, {"seq": 2})
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
        read_jsonl(h)
    assert (exc.value.path, exc.value.line) == (str(h), 2)
    assert str(exc.value) == f"{h}:2: corrupt log line (not a JSON object)"
    h.write_bytes(b'{"a": 1}\n{"a": "\xe9"}\n')
    with pytest.raises(CorruptFileError, match=":2: corrupt log line"):
        read_jsonl(h)
    j = tmp_path / "s.json"
    j.write_text('{\n "a": 1,\n}\n')
    with pytest.raises(CorruptFileError) as exc:
        read_json(j)
    assert exc.value.line == 3
    assert read_json(tmp_path / "missing.json") is None and read_jsonl(tmp_path / "no") == []


def test_links_are_never_followed(tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_bytes(b'{"a": 1}\n')
    (tmp_path / "lib" / "sub").mkdir(parents=True)
    os.symlink(target, tmp_path / "lib" / "log.jsonl")
    os.symlink(tmp_path, tmp_path / "lib" / "up")
    for f in (read_jsonl, read_last_jsonl, read_json):
        with pytest.raises(SymlinkError):
            f(tmp_path / "lib" / "log.jsonl")
    with pytest.raises(SymlinkError):
        append_jsonl(tmp_path / "lib" / "log.jsonl", {"b": 2})
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
