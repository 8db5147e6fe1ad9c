"""The detectors' prefilters (dyna/redact) are necessary conditions of their patterns.

A prefilter lets :func:`dyna.redact.text.scan_text` skip a detector whose pattern cannot match
an ASCII text. Skipping is safe only if the prefilter is true wherever the pattern matches:
checked here for every detector on every text of both corpora (and the shapes the corpus
tests plant them in), on the texts the detectors would see after the ones before them
redacted, and on random texts built from the detectors' own alphabets and literals
(hypothesis); and end to end, the scan with prefilters gives the same text and the same
detector names as the scan that runs every detector. The detectors are those of the
tau-bench formats (:data:`dyna.loops.trajectories.TAU_BENCH_FORMATS`): the general ones and
the tau-bench ids.
"""

import collections
import json
import re
import string
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dyna import redact as R
from dyna.loops.trajectories import PAYMENT_METHOD_KINDS, TAU_BENCH_FORMATS as F
from dyna.redact import text as T

DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.usefixtures("tau_bench_formats")


def _lines(name):
    return [line.rstrip("\n") for line in (DATA / name).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


SECRET_TEXTS = [line.split("\t")[1] for line in _lines("secret_corpus.txt")]
BENIGN = _lines("benign_corpus.txt")


def _shapes(t):
    """The string shapes of tests/test_redact_corpus.py (the dict shapes scan these)."""
    return [t, t.replace("\\n", "\n"), f"step 3 started\nNOTE={t}\ndone in 2.1 s",
            json.dumps({"tool_output": t, "step": 3}), json.dumps({t: {"ok": True}})]


CORPUS = [s for t in SECRET_TEXTS + BENIGN for s in _shapes(t)]


def _reference(text):
    """``_scan_text(text)`` with every prefilter off: ``(text, names)``."""
    with mock.patch.object(F, "to_run", lambda t: F.all_run), \
            mock.patch.object(T, "_may_assign", lambda t: True):
        names = []
        return T.scan_text(text, names), names


def _matching(text):
    return [d.name for d in F.detectors if d.pattern.search(text) is not None]


def _assignment_fires(text):
    out = []
    T._assignments(text, out)
    return bool(out)


def _check(text):
    """Every prefilter is true where its pattern matches; the detectors chosen to run
    include every one whose pattern matches; the assignment rule's prefilter holds."""
    low, nd = text.lower(), sum(c in string.digits for c in text)
    chosen = {d.name for _, d in F.to_run(text)}
    for name in _matching(text):
        assert name in chosen, (name, text)
        if text.isascii():
            assert F.prefilters[name](text, low, nd), (name, text)
    if _assignment_fires(text):
        assert not text.isascii() or T._may_assign(text), text


def test_every_detector_has_a_prefilter_and_the_hand_computed_choices():
    assert set(F.prefilters) == {d.name for d in F.detectors} and len(F.prefilters) == 114
    run = lambda t: [d.name for _, d in F.to_run(t)]  # noqa: E731
    # the loops' history timestamp: 18 digits, '-' and '+'
    assert run("2026-04-25T00:00:00+00:00") == ["credit_card", "us_ssn", "phone_number"]
    assert run("nigo-tudu-59cd5293") == []                    # a run id: nothing to run
    assert run("Procedure for nigo nepi tasks: 1 tool calls.") == ["aws_secret_key"]
    assert run("Authorization: Bearer abc") == ["bearer_token", "authorization_header"]
    assert run("call me at +1 415 555 0100") == ["phone_number"]
    assert F.to_run("ein Text mit ü") is F.all_run          # not ASCII: every detector
    assert T._ASSIGNMENT_WORDS == ("auth", "cookie", "credential", "iban", "key", "pass",
                                   "pin", "pw", "secret", "string", "token")
    assert not T._may_assign("2026-04-25T00:00:00+00:00")    # ':' but no credential word
    assert T._may_assign("DB_PASSWORD=x") and not T._may_assign("DB_PASSWORD x")


def test_prefilters_hold_on_both_corpora():
    n_matches = 0
    for text in CORPUS:
        _check(text)
        n_matches += len(_matching(text))
    assert len(CORPUS) == 5 * (108 + 85)
    assert n_matches > 500   # the corpora exercise the prefilters


def test_prefilters_hold_on_the_texts_later_detectors_see():
    """Each detector runs on the text the ones before it left (a redaction can create a
    match): the prefilters hold on those intermediate texts too."""
    n_changed = 0
    for text in CORPUS:
        for det in F.detectors:
            new = det.pattern.sub(R.REDACTED, text)
            if new != text:
                _check(new)
                n_changed += 1
            text = new
    assert n_changed > 500


def test_the_scan_with_prefilters_equals_the_full_scan_on_the_corpora():
    for text in CORPUS:
        names = []
        assert (T.scan_text(text, names), names) == _reference(text), text


# ------------------------------------------------------------------ random texts
#
# Texts that match a detector's pattern, drawn from the pattern itself (hypothesis's
# from_regex: the match with random text around it, in ASCII or in all of Unicode), then
# cut, spliced and re-cased at random so that many land just outside the pattern (a literal
# broken, a digit short), and texts of the characters and literals of every pattern.

def _pattern_chars():
    chars = set()
    for d in F.detectors:
        chars |= set(re.sub(r"\\[dswbDSWBAZ]", "", d.pattern.pattern))
    return "".join(sorted(chars))


_ASCII = st.characters(codec="ascii")
_LITERALS = sorted({x for p in F.prefilters.values() for x in p.literals + p.folded}
                   | set(T._ASSIGNMENT_WORDS) | set(R.AUTH_SCHEMES) | set(PAYMENT_METHOD_KINDS))
_FRAGMENTS = (_LITERALS + [w.upper() for w in _LITERALS] + [w.title() for w in _LITERALS]
              + ["user id ", "(id: ", "DOB: ", "=", ": ", "\n", " ", "-", "_", ".", "+"]
              + [t[i:i + 12] for t in SECRET_TEXTS for i in range(0, len(t), 9)])
_PATTERNS = {d.name: d.pattern for d in F.detectors} | {"sensitive_assignment": T._ASSIGNMENT}
_pieces = st.one_of(st.sampled_from(_FRAGMENTS), st.text(_pattern_chars(), max_size=6))


@st.composite
def _near_matches(draw, base):
    """A match of some pattern, then up to 3 edits: a character dropped, a piece inserted,
    the case of a stretch swapped."""
    text = draw(base)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(("drop", "insert", "swapcase")))
        if op == "drop":
            text = text[:at] + text[at + 1:]
        elif op == "insert":
            text = text[:at] + draw(_pieces) + text[at:]
        else:
            end = draw(st.integers(at, len(text)))
            text = text[:at] + text[at:end].swapcase() + text[end:]
    return text


@pytest.mark.parametrize("name", sorted(_PATTERNS))
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_prefilters_hold_on_random_texts_of_the_detectors_alphabets(name, data):
    """For each pattern: a near-match of it in ASCII, one in all of Unicode, and a text of
    every pattern's characters and literals. The prefilters hold (:func:`_check`) and the
    scan equals the full scan."""
    pattern = _PATTERNS[name]
    for text in (data.draw(_near_matches(st.from_regex(pattern, alphabet=_ASCII))),
                 data.draw(_near_matches(st.from_regex(pattern))),
                 data.draw(st.lists(_pieces, max_size=12).map("".join))):
        _check(text)
        names = []
        assert (T.scan_text(text, names), names) == _reference(text)


@pytest.mark.parametrize("text, fired", [
    ("ba\u017fic dXNlcjpwYXNz", ["basic_auth"]),            # (?i) matches s to the long s
    ("API_TO\u212aEN=abcd1234efgh", ["sensitive_assignment"]),  # NFKC: Kelvin sign -> K
    ("card \uff14\uff11\uff11\uff11 1111 1111 1111", []),    # full-width digits: \d, no Luhn
    ("call \u0663\u0663\u0663-\u0663\u0663-\u0663\u0663\u0663\u0663 now", ["us_ssn"]),  # Arabic-Indic
])
def test_non_ascii_texts_run_every_detector(text, fired):
    """Not ASCII: no prefilter applies (their literals and digit counts are read on ASCII)
    and every detector runs, so what Unicode folding or Unicode digits let a pattern match
    is still caught."""
    assert F.to_run(text) is F.all_run
    names = []
    assert (T.scan_text(text, names), names) == _reference(text)
    assert names == fired


# ------------------------------------------------------------------ the clean-text memo

def test_scan_found_counts_what_scan_counts_and_the_memo_keeps_only_clean_short_texts():
    # every corpus text in its shapes, as a value, inside a dict beside a cue key and as
    # JSON; scanned twice (the second time through the memo of clean short texts)
    import collections
    F.clean_short.clear()
    n_caught = 0
    for text in SECRET_TEXTS + BENIGN:
        for shaped in _shapes(text):
            for obj in (shaped, {"note": shaped, "user_id": shaped}, [shaped, {"x": shaped}]):
                first = R.scan(obj)
                assert collections.Counter(R.scan_found(obj)) == first == R.scan(obj), obj
                n_caught += bool(first)
    assert n_caught > len(SECRET_TEXTS)
    held = list(F.clean_short)
    assert held and len(held) <= R.CLEAN_SHORT_SIZE
    assert all(len(t) <= R.CLEAN_SHORT_MAX_CHARS and not R.detect(t) for t in held)
    assert not any(s in t for t in held for s in SECRET_TEXTS if len(s) >= 6)
    # bounded: emptied when full
    for i in range(R.CLEAN_SHORT_SIZE + 5):
        R.scan(f"plain text {i:06d}")
    assert len(F.clean_short) <= R.CLEAN_SHORT_SIZE


@pytest.mark.parametrize("depth", [600, 990, 1500, 100_000])
def test_json_nested_deeper_than_the_walk_is_scanned_as_text(depth):
    """A text holding JSON nested ``depth`` deep: walked when the stack allows (a frame per
    level), else scanned and redacted as the text it is; the token is caught once and
    never written, whatever the depth (a skill body has no length cap)."""
    from dyna.loops.skills import Skill, SkillLibrary

    token = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
    body = "[" * depth + json.dumps(token) + "]" * depth
    assert R.scan(body) == collections.Counter({"github_token": 1})
    lib = SkillLibrary(None)
    skill = lib.add(Skill("a", "a json skill", body), "r1").skill
    assert token not in skill.body and lib.redactions == {"github_token": 1}
