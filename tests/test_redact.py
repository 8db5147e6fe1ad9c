"""Redaction of sensitive keys/values and the signed feature hasher (dyna.redact)."""

import copy
import hashlib
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from dyna.errors import ConfigError
from dyna.redact import DEFAULT_SENSITIVE_KEYS, REDACTED, hash_features, redact, redact_text

PERS04_KEYS = {"password", "api_key", "token", "secret", "authorization"}


def test_pers04_nested_keys_whole_names_case_insensitive():
    """Case PERS-04: nested dicts/lists, whole-name matching, '-' read as '_'."""
    given = {"tenant": "t1", "token": "top",
             "config": {"Password": "p1", "nested": {"API-KEY": "k1"}},
             "items": [{"token": "x"}, {"name": "ok"}], "tokenizer": "bpe"}
    before = copy.deepcopy(given)
    out = redact(given, PERS04_KEYS)
    assert out == {"tenant": "t1", "token": "[REDACTED]",
                   "config": {"Password": "[REDACTED]", "nested": {"API-KEY": "[REDACTED]"}},
                   "items": [{"token": "[REDACTED]"}, {"name": "ok"}], "tokenizer": "bpe"}
    assert given == before  # input not mutated
    assert out["config"] is not given["config"]


def test_default_keys_cover_personal_data_and_leave_look_alikes():
    given = {"Name": "Ada", "e-mail": "x", "EMAIL": "a@b.c", "phone": 123, "SSN": "1-2-3",
             "nested": ({"Authorization": {"deep": 1}}, ["Secret", {"secret": [1, 2]}]),
             "username": "ada", "token_count": 17, "tokenizer": "bpe", "names": ["a"]}
    out = redact(given)
    assert DEFAULT_SENSITIVE_KEYS == {"api_key", "authorization", "email", "name", "password",
                                      "phone", "secret", "ssn", "token"}
    assert out["Name"] == REDACTED and out["EMAIL"] == REDACTED and out["phone"] == REDACTED
    assert out["SSN"] == REDACTED
    assert out["e-mail"] == "x"  # "e_mail" is not "email": whole names only
    assert isinstance(out["nested"], tuple)
    assert out["nested"][0] == {"Authorization": REDACTED}  # a whole sub-tree is replaced
    assert out["nested"][1] == ["Secret", {"secret": REDACTED}]  # a value "Secret" is kept
    assert out["username"] == "ada" and out["token_count"] == 17 and out["tokenizer"] == "bpe"
    assert out["names"] == ["a"]


@pytest.mark.parametrize("text, expected", [
    ("Authorization failed: Bearer abcDEF123456.xyz", "Authorization failed: Bearer [REDACTED]"),
    ("use sk-proj-ABCDEFGHIJKLMNOPQRST1234 now", "use [REDACTED] now"),
    ("aws AKIAIOSFODNN7EXAMPLE key", "aws [REDACTED] key"),
    ("gh token ghp_" + "a1B2" * 9, "gh token [REDACTED]"),
    ("url?api_key=abc12345&x=1", "url?api_key=[REDACTED]&x=1"),
    ('{"password": "hunter22"}', '{"password": "[REDACTED]"}'),
    ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "jwt [REDACTED]"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "[REDACTED]"),
])
def test_secret_looking_values_are_replaced(text, expected):
    assert redact_text(text) == expected
    assert redact({"note": [text]}) == {"note": [expected]}


@pytest.mark.parametrize("text", [
    "tokenizer=bpe", "commit 3f2a9c1d0e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f", "the token budget is 512",
    "skip-connection", "password", "Basic arithmetic",
])
def test_harmless_values_are_kept(text):
    assert redact_text(text) == text


def test_values_flag_and_bad_keys():
    assert redact({"a": "Bearer abcdefghij"}, values=False) == {"a": "Bearer abcdefghij"}
    with pytest.raises(ConfigError) as err:
        redact({"a": 1}, "password")
    assert err.value.field == "keys"
    assert redact({"X-Custom": 1}, ["x_custom"]) == {"X-Custom": REDACTED}


def _blake(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")


def test_hash_features_hand_computed():
    dim = 1024
    out = hash_features({"state_before": {"x": 2.0, "mode": "fast"}, "metadata": None}, dim)
    assert out.dtype == np.float32 and out.shape == (dim,)
    h1, h2 = _blake("state_before.x"), _blake("state_before.mode=fast")
    assert h1 % dim != h2 % dim
    v1 = (-1 if h1 >> 63 else 1) * math.log1p(2.0)
    v2 = (-1 if h2 >> 63 else 1) * 1.0
    norm = math.hypot(v1, v2)
    expected = np.zeros(dim)
    expected[h1 % dim], expected[h2 % dim] = v1 / norm, v2 / norm
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    assert np.count_nonzero(out) == 2


def test_hash_features_structure_and_edges():
    dim = 64
    assert not hash_features({}, dim).any()
    assert not hash_features({"state_before": {}, "metadata": None}, dim).any()
    a = hash_features({"state_before": {"pos": [1, 2]}}, dim)
    assert abs(float(np.linalg.norm(a)) - 1.0) < 1e-6
    # List positions matter, field names namespace the paths, key order does not.
    assert not np.array_equal(a, hash_features({"state_before": {"pos": [2, 1]}}, dim))
    assert not np.array_equal(a, hash_features({"state_after": {"pos": [1, 2]}}, dim))
    b1 = hash_features({"metadata": {"a": 1, "b": "x"}}, dim)
    b2 = hash_features({"metadata": {"b": "x", "a": 1}}, dim)
    assert np.array_equal(b1, b2)
    # NaN / inf / bool / None are tokens, never NaN features.
    c = hash_features({"metadata": {"v": float("nan"), "w": float("inf"), "f": True, "n": None}},
                      dim)
    assert np.all(np.isfinite(c)) and abs(float(np.linalg.norm(c)) - 1.0) < 1e-6
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ConfigError):
            hash_features({}, bad)
    with pytest.raises(ConfigError):
        hash_features([{"a": 1}], dim)


def test_hash_features_identical_across_processes():
    code = ("import numpy as np; from dyna.redact import hash_features; "
            "print(hash_features({'state_before': {'s': 'abc', 'x': 3.5}, "
            "'action_taken': {'a': [1, 'up']}}, 16).tobytes().hex())")
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                   capture_output=True, text=True).stdout.strip())
    here = hash_features({"state_before": {"s": "abc", "x": 3.5},
                          "action_taken": {"a": [1, "up"]}}, 16).tobytes().hex()
    assert outs[0] == outs[1] == here
