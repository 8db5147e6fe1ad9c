"""The loops' fast paths give what the plain code gives.

Each fast path is compared with the plain code it replaces, written out here: on random
texts over an alphabet of the cases that matter (word characters of several scripts,
combining marks, digits of other scripts, punctuation that a pattern needs or stops at),
and, where a rule is per character, on every code point below U+3000.
"""

import datetime as _dt
import random
import re
import unicodedata

import numpy as np
import pytest

from dyna.competence import BetaCompetence
from dyna.errors import ConfigError
from dyna.loops import _text as T
from dyna.loops import skills as S
from dyna.loops.skills import Skill
from dyna.loops.skills.fields import check_skill_name
from dyna.loops.skills.in_memory import _Later

ALPHABET = "abcXYZ_09-/. ,:;`'\"\tßéİ٣²½ǅ\u0301\u200b日本ـ" + "aaee tt  "
CODE_POINTS = [chr(c) for c in range(0x3000) if not 0xD800 <= c < 0xE000]


def _texts(n, longest, seed=0):
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, longest)))
            for _ in range(n)]


def _content_words(text):
    seen = {}
    for w in re.findall(r"\w+", T.identity_text(text)):
        if len(w) > 1 and w not in T.STOPWORDS:
            seen.setdefault(w, None)
    return tuple(seen)


def _concrete_parts(text):
    text = unicodedata.normalize("NFKC", text)
    parts = set()
    for rx in (T._NUMBER_RE, T._PATH_RE, T._FLAG_RE, T._NAME_RE):
        parts.update(T.identity_text(m.strip()) for m in rx.findall(text))
    return tuple(sorted(p for p in parts if p))


def _name(name):
    norm = unicodedata.normalize("NFKC", name)
    if not 1 <= len(norm) <= 64 or (
            norm != norm.lower() or norm.startswith("-") or norm.endswith("-")
            or "--" in norm or not all(c.isalnum() or c == "-" for c in norm)):
        return None
    return norm


def test_content_words_from_tokenize_equal_the_word_pattern():
    texts = _texts(20_000, 300) + [f"ab{c}cd x{c}" for c in CODE_POINTS]
    texts.append("Deploy the web service " * 20)          # longer than a task: own path
    assert sum(T.content_words(t) != _content_words(t) for t in texts) == 0
    assert T.content_words("Deploy the web-app, then test.") == ("deploy", "web", "app",
                                                                  "test")


def test_concrete_parts_equal_every_pattern_run():
    texts = _texts(20_000, 60, seed=1) + [
        "Use `make test-fast` in ./src/app.py --verbose", "val_3 file.txt v1.2.3 HTTPServer",
        "a.b/c d-e --x -y", "no path here.", "a/b", "--flag only"]
    assert sum(T.concrete_parts.__wrapped__(t) != _concrete_parts(t) for t in texts) == 0
    assert T.concrete_parts("see ./src/app.py and cfg.toml --dry-run") == (
        "--dry-run", "./src/app.py", "cfg.toml")


def test_a_names_characters_checked_at_once_as_one_by_one():
    def checked(name):
        try:
            return check_skill_name(name)
        except ConfigError:
            return None

    names = _texts(20_000, 12, seed=2) + [f"{a}{c}{b}" for c in CODE_POINTS
                                          for a, b in (("a", "b"), ("", ""), ("", "-x"))]
    assert sum(checked(n) != _name(n) for n in names) == 0
    assert checked("café-notes") == "café-notes" and checked("a--b") is None


@pytest.mark.parametrize("prior, discount", [("uniform", 1.0), ("jeffreys", 0.9),
                                             ((0.3, 7.1), 0.37)])
def test_record_in_python_floats_is_update_then_posterior(prior, discount):
    rng = np.random.default_rng(0)
    a, b = BetaCompetence(prior, discount), BetaCompetence(prior, discount)
    for key, ok in zip(rng.integers(0, 5, 3000).tolist(), (rng.random(3000) < 0.6).tolist()):
        got = a.record(key, ok)
        b.update(key, ok)
        want = b.posterior(key)
        assert got == want and type(got[0]) is float and type(got[1]) is float


class _EagerBackend(S.MemorySkillBackend):
    """The in-memory backend with each history record made when it is written."""

    append_history_later = None


def _library_ops(lib):
    t = [_dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)]
    lib._clock = lambda: t[0]
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0L1m2N3p4"
    lib.add(Skill("deploy-app", "Deploy the app.", "1. call `make deploy`", ("deploy",)),
            run_id="e1", reason="first")
    t[0] += _dt.timedelta(days=1, seconds=7)
    lib.patch("deploy-app", run_id="e2", reason=f"key {key} seen", body="1. call `make up`")
    lib.record_outcome(["deploy-app"], True, "e3")
    lib.record_outcome(["deploy-app"], False, "e4")
    item = lib.stage(Skill("fix-ci", "Fix CI.", "1. rerun"), "e5", ("tool_output",),
                     reason=f"from a tool that printed {key}")
    lib.reject(item.id)
    lib.retire("deploy-app", run_id="e6")
    t[0] += _dt.timedelta(hours=3)
    lib.restore("deploy-app", run_id="e7")
    lib.undo_run("e7")
    return lib


def test_an_in_memory_history_made_later_is_the_history_made_at_once():
    later = _library_ops(S.SkillLibrary.in_memory(log_outcomes=True))
    eager = S.SkillLibrary.in_memory(log_outcomes=True)
    eager.backend = _EagerBackend()
    eager = _library_ops(eager)
    assert later.backend._history and any(type(r) is _Later for r in later.backend._history)
    # the safety net's counts include the records still to make
    assert later.redactions == eager.redactions and sum(eager.redactions.values()) == 3
    assert later.history() == eager.history()
    ops = [h.op for h in later.history()]
    assert ops == ["create", "patch", "outcome", "outcome", "stage", "reject", "retire",
                   "restore", "undo"]
    assert [h.time for h in later.history()][:2] == ["2025-01-01T00:00:00+00:00",
                                                    "2025-01-02T00:00:07+00:00"]
    assert "sk-proj-" not in repr(later.backend.history())
    assert not any(type(r) is _Later for r in later.backend._history)


def test_known_clean_texts_are_those_the_record_scan_skips_and_a_seen_text_is_rescanned():
    from dyna.redact import known_clean, scan_found

    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    for t in _texts(3000, 12, seed=5) + ["e1", "e12345", "tool_output", secret, "x" * 70]:
        if known_clean(t):   # never says so of a text the record scan would catch
            assert scan_found({"v": t}) == [] and scan_found([t]) == []
    assert known_clean("e1") and not known_clean(secret) and not known_clean(12345)
    # a skill whose texts went through the net before, with a secret in its provenance:
    # the provenance is still scanned and written redacted
    lib = S.SkillLibrary.in_memory()
    body = "1. call `make deploy`"
    lib.add(Skill("deploy-app", "Deploy the app.", body, ("deploy",)), run_id="e1")
    lib.add(Skill("deploy-app-2", "Deploy the app.", body, ("deploy",),
                  provenance=("tool_output", f"page {secret}")), run_id="e2")
    assert lib.get("deploy-app-2").provenance[0] == "tool_output"
    assert secret not in repr(lib.get("deploy-app-2")) and lib.redactions


def test_json_text_naming_a_key_twice_is_scanned_as_text_and_its_secret_redacted():
    """A parsed copy keeps the last of two values: the first, a secret, was never seen
    by the safety net, the digest or the reviewer's redaction."""
    from dyna.loops import Digest
    from dyna.redact import redact, redact_text, scan_found

    gh = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    text = '{"note": "%s", "note": "fine"}' % gh
    assert scan_found({"o": text}) == ["github_token"] and gh not in redact_text(text)
    assert gh not in repr(redact({"o": text})) and gh not in repr(redact([text]))
    d = Digest.from_run("e1", "read the page", success=True, verified=True,
                        tool_calls=[{"name": "read", "args": {}, "output": text}])
    assert gh not in d.tool_calls[0].output and d.redactions == 1
    lib = S.SkillLibrary.in_memory()
    lib.add(Skill("read-page", "Read the page.", "1. read\n" + text, ("page",)),
            run_id="e1", reason=text)
    assert gh not in lib.get("read-page").body and lib.redactions == {"github_token": 2}
    assert gh not in repr(lib.history())
    # without the repeated key the parsed text is redacted in place, as before
    once = '{"note": "%s"}' % gh
    assert redact({"o": once}) == {"o": '{"note": "[REDACTED]"}'}


class _TickingTime(_dt.datetime):
    """A datetime subclass (as freezegun's): the clock below advances one second a read."""


def test_a_subclass_clock_is_read_once_per_change_and_both_backends_agree(tmp_path):
    def ops(lib):
        t = [_TickingTime(2025, 1, 1, tzinfo=_dt.timezone.utc)]
        reads = []

        def clock():
            t[0] = t[0] + _dt.timedelta(seconds=1)
            reads.append(1)
            return t[0]

        lib._clock = clock
        counts = []
        for op in (lambda: lib.add(Skill("b-skill", "Build it.", "1. call `make`"),
                                   run_id="e1"),
                   lambda: lib.retire("b-skill", run_id="e2"),
                   lambda: lib.stage(Skill("c-skill", "C.", "1. c"), "e3")):
            reads.clear()
            op()
            counts.append(len(reads))
        return counts, [(h.op, h.time) for h in lib.history()]

    mem, folder = ops(S.SkillLibrary.in_memory()), ops(S.SkillLibrary(tmp_path / "lib"))
    assert mem == folder
    # add: its date, then the change; retire: the change; stage: the item and its record
    assert mem[0] == [2, 1, 1]
    assert mem[1] == [("create", "2025-01-01T00:00:02+00:00"),
                      ("retire", "2025-01-01T00:00:03+00:00"),
                      ("stage", "2025-01-01T00:00:04+00:00")]


@pytest.mark.parametrize("bad", ["2025-01-01", 1735689600.0, None])
def test_a_clock_that_returns_no_datetime_is_a_typed_error_before_any_change(tmp_path, bad):
    lib = S.SkillLibrary(tmp_path / "lib")
    lib.add(Skill("b-skill", "Build it.", "1. call `make`"), run_id="e1")
    files = {p: p.read_bytes() for p in (tmp_path / "lib").rglob("*") if p.is_file()}
    lib._clock = lambda: bad
    for op in (lambda: lib.retire("b-skill", run_id="e2"),
               lambda: lib.add(Skill("c-skill", "C.", "1. c"), run_id="e3"),
               lambda: lib.today()):
        with pytest.raises(ConfigError, match="clock") as exc:
            op()
        assert exc.value.field == "clock"
    assert {p: p.read_bytes() for p in files} == files and "b-skill" in lib
