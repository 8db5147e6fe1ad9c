"""The loops' fast paths give what the plain code gives (session 15's speed work).

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
from dyna.loops.skills import Match, Skill, _checked_name, _match

ALPHABET = "abcXYZ_09-/. ,:;`'\"\tßéİ٣²½ǅ\u0301\u200b日本ـ" + "aaee tt  "
CODE_POINTS = [chr(c) for c in range(0x3000) if not 0xD800 <= c < 0xE000]


def _texts(n, longest, seed=0):
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, longest)))
            for _ in range(n)]


def _content_words(text):
    seen = {}
    for w in re.findall(r"\w+", text.casefold()):
        if len(w) > 1 and w not in T.STOPWORDS:
            seen.setdefault(w, None)
    return tuple(seen)


def _concrete_parts(text):
    parts = set()
    for rx in (T._NUMBER_RE, T._PATH_RE, T._FLAG_RE, T._NAME_RE):
        parts.update(m.strip().casefold() for m in rx.findall(text))
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
            return _checked_name.__wrapped__(name, "name")
        except ConfigError:
            return None

    names = _texts(20_000, 12, seed=2) + [f"{a}{c}{b}" for c in CODE_POINTS
                                          for a, b in (("a", "b"), ("", ""), ("", "-x"))]
    assert sum(checked(n) != _name(n) for n in names) == 0
    assert checked("café-notes") == "café-notes" and checked("a--b") is None


def test_a_match_built_without_init_is_the_dataclass_match():
    s = Skill("deploy-web", "Deploy the web app", triggers=("deploy",))
    a = Match("deploy-web", 1.0, ("deploy",), False, s, True)
    b = _match("deploy-web", 1.0, ("deploy",), False, s, True)
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    assert list(vars(a)) == list(vars(b))


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
    assert later.backend._history and any(type(r) is S._Later for r in later.backend._history)
    # the safety net's counts include the records still to make
    assert later.redactions == eager.redactions and sum(eager.redactions.values()) == 3
    assert later.history() == eager.history()
    ops = [h.op for h in later.history()]
    assert ops == ["create", "patch", "outcome", "outcome", "stage", "reject", "retire",
                   "restore", "undo"]
    assert [h.time for h in later.history()][:2] == ["2025-01-01T00:00:00+00:00",
                                                    "2025-01-02T00:00:07+00:00"]
    assert "sk-proj-" not in repr(later.backend.history())
    assert not any(type(r) is S._Later for r in later.backend._history)
