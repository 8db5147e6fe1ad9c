"""redact()'s fast path for a flat mapping of strings equals its general path.

:func:`dyna.redact.redact` returns a copy of a ``dict`` of strings to strings at once when
no entry can change (``_plain_flat``); a ``dict`` subclass takes the general path
(``_redact``), so the two are compared on the same entries: every line of the secret and
benign corpora under plain, sensitive and cue keys (``user_id``, ``dob``), short values,
JSON values and hypothesis-drawn entries. Digest.from_run's tool-call arguments count the
same redactions either way.
"""

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dyna.loops.review import Digest
from dyna.redact import DEFAULT_SENSITIVE_KEYS, redact

DATA = Path(__file__).parent / "data"


class _Sub(dict):
    """Takes redact()'s general path (the fast path wants exactly a dict)."""


def _lines(name):
    return [line for line in (DATA / name).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


TEXTS = ([line.split("\t")[1].replace("\\n", "\n") for line in _lines("secret_corpus.txt")]
         + _lines("benign_corpus.txt")
         + ["val_1", "", "[1]", "{}", '{"a": "b"}', '{"password": "hunter22"}',
            "mia_li_3668", "1990-04-05", "[REDACTED]", "x" * 5000])
KEYS = ["value", "note", "password", "api_key", "user_id", "dob", "apiKey", "tokenizer",
        "sk_live_Xg4HEb9ohHDFpifIyd6nHCSC"]


def _both(d):
    fast, slow = redact(d), redact(_Sub(d))
    assert type(fast) is dict and type(slow) is dict
    return fast, slow


def test_fast_path_equals_general_path_on_the_corpora():
    fired = 0
    for key in KEYS:
        for text in TEXTS:
            fast, slow = _both({key: text})
            assert fast == slow, (key, text)
            fired += fast != {key: text}
        fast, slow = _both({k: t for k, t in zip(KEYS, TEXTS[:len(KEYS)])} | {key: "val_1"})
        assert fast == slow
    assert fired > len(TEXTS)   # redaction happened on many entries, both ways alike


def test_fast_path_returns_a_copy():
    d = {"value": "val_1"}
    out = redact(d)
    assert out == d and out is not d


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8),
                       st.sampled_from(TEXTS) | st.text(max_size=12), max_size=4))
def test_fast_path_equals_general_path_on_drawn_mappings(d):
    fast, slow = _both(d)
    assert fast == slow


def test_digest_counts_argument_redactions_as_before():
    calls = [{"name": "t", "args": {"value": "val_1"}, "output": "ok"},
             {"name": "t", "args": {"password": "hunter22x"}, "output": "ok"},
             {"name": "t", "args": {"note": "[REDACTED] here"}, "output": "done"},
             {"name": "t", "args": {"note": "card 4111 1111 1111 1111"}, "output": "ok"}]
    d = Digest.from_run("r1", "a task", tool_calls=calls)
    assert [tc.args for tc in d.tool_calls] == [
        {"value": "val_1"}, {"password": "[REDACTED]"}, {"note": "[REDACTED] here"},
        {"note": "card [REDACTED]"}]
    assert d.redactions == 3
    assert redact({"k": "v"}, DEFAULT_SENSITIVE_KEYS) == {"k": "v"}


def test_case_pers_04_top_level_entries_on_the_fast_path():
    # ../shared/cases PERS-04's flat entries: whole key names, case-insensitive, "-" as "_";
    # "tokenizer" is not "token". The flat parts of its input take the fast path.
    keys = {"password", "api_key", "token", "secret", "authorization"}
    plain = {"tenant": "t1", "tokenizer": "bpe", "name": "ok"}
    out = redact(plain, keys)
    assert out == plain and out is not plain
    flat = {"tenant": "t1", "token": "top", "Password": "p1", "API-KEY": "k1",
            "tokenizer": "bpe"}
    assert redact(flat, keys) == {"tenant": "t1", "token": "[REDACTED]",
                                  "Password": "[REDACTED]", "API-KEY": "[REDACTED]",
                                  "tokenizer": "bpe"}
    assert flat["token"] == "top"          # the input is not mutated
    assert redact(flat, keys) == redact(_Sub(flat), keys)
