"""Redaction against the secret-format corpus tests/data/secrets/ (README there).

208 synthetic secret formats (one per provider shape, among them Slack xapp-, Stripe whsec_,
Shopify shpat_/shpss_, DigitalOcean dop_v1_, Databricks dapi, Atlassian ATATT, Groq gsk_,
age secret keys, the new Mailgun keys, IBANs, Docker config "auth", sshpass -p, pw:, prose
passwords without a digit, one-word passwords in prose, keys holding PW / PASS / PWD /
PASSWD) and 121 benign look-alikes (git SHAs, sha256, UUIDs, request ids, Luhn-valid order
numbers, sk-learn-compatible-wrapper2024, "The Cookie: header is set by the browser",
library names, values under keys that hold a secret word inside another word, prose about
passwords, bypass=true, PWD=/home/user).
Each secret is planted in every place a value can go; a leak is the planted secret found in
any string, key or bytes of the output (or of JSON inside it), never judged by the
redactor's own detectors. ``pytest -s`` prints the counts.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from test_redact_corpus import _strings

from dyna.errors import ConfigError
from dyna.redact import REDACTED, detect, is_sensitive_key, redact, scan

DATA = Path(__file__).parent / "data" / "secrets"
FORMATS = [json.loads(line) for line in (DATA / "formats.jsonl").read_text().splitlines()]
BENIGN = [json.loads(line) for line in (DATA / "benign.jsonl").read_text().splitlines()]

#: Formats kept in clear, and why: none.
KNOWN_MISSES: set[str] = set()

PLACES = {
    "value": lambda t: t,
    "dict_value": lambda t: {"note": t},
    "dict_key": lambda t: {t: "kept"},
    "nested": lambda t: {"a": [{"b": ({"c": t},)}]},
    "json_in_string": lambda t: json.dumps({"tool_output": t, "step": 3}),
    "json_key_in_string": lambda t: json.dumps({t: {"ok": True}}),
    "list": lambda t: ["first", t, 3],
    "numpy_str": lambda t: np.array([["x", t]]),
    "numpy_bytes": lambda t: np.array([b"x", t.encode()]),
    "numpy_object": lambda t: np.array(["x", {"v": t}], dtype=object),
    "bytes": lambda t: t.encode(),
    "real_newlines": lambda t: t.replace("\\n", "\n"),
}


def _plain(obj):
    """``obj`` with bytes decoded and numpy arrays made lists, for the corpus' leak search."""
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if isinstance(obj, np.ndarray):
        return [_plain(v) for v in obj.ravel().tolist()]
    if isinstance(obj, dict):
        return {_plain(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj if isinstance(obj, str) else repr(obj)


def _in_clear(out, secret) -> bool:
    variants = {secret, secret.replace("\\n", "\n")}
    return any(v in s for s in _strings(_plain(out)) for v in variants)


def test_corpus_sizes_and_the_formats_the_issue_names():
    assert len(FORMATS) == 208 and len(BENIGN) == 121
    assert len({f["id"] for f in FORMATS}) == 208 and len({b["id"] for b in BENIGN}) == 121
    ids = {f["id"] for f in FORMATS}
    assert {"slack_app", "stripe_webhook", "shopify_shpat", "shopify_shpss",
            "digitalocean_dop", "databricks", "atlassian", "groq", "age_secret_key",
            "mailgun_new", "iban_de", "docker_config_auth", "sshpass", "pw_colon",
            "prose_password_no_digit", "aws_access_key_id", "github_ghp", "gitlab_pat",
            "openai_project", "anthropic_api", "google_api_key", "slack_bot",
            "stripe_secret", "twilio_api_key", "sendgrid", "npm", "pypi", "jwt",
            "pem_rsa"} <= ids


def test_formats_in_clear_per_place():
    counts = {}
    for place, build in PLACES.items():
        missed = {f["id"] for f in FORMATS if _in_clear(redact(build(f["text"])), f["secret"])}
        counts[place] = len(missed)
        assert missed == KNOWN_MISSES, (place, sorted(missed ^ KNOWN_MISSES))
    print(f"\nformats in clear (of {len(FORMATS)}):", counts)


def test_every_format_is_found_by_a_named_detector():
    unnamed = {f["id"] for f in FORMATS if not detect(f["text"])}
    assert unnamed == KNOWN_MISSES == set()
    not_in_arrays = {f["id"] for f in FORMATS if not scan(np.array([["x", f["text"]]]))}
    # these are JSON: parsed, their entry is under a sensitive key ("auth", "pw", "dbPass"),
    # which scan (counting detector catches) does not count
    assert not_in_arrays == {"docker_config_auth", "key_pw_json", "key_pw_json_word",
                             "key_dbpass_json_camel"}


def test_benign_texts_unchanged_in_every_place():
    altered = []
    for b in BENIGN:
        t, key = b["text"], b.get("key", "note")
        for obj in (t, {key: t}, {t: 1}, json.dumps({key: t}), ["a", t], t.encode(),
                    np.array([t]), {"a": [{key: t}]}):
            out = redact(obj)
            same = (np.array_equal(out, obj) if isinstance(obj, np.ndarray) else out == obj)
            if not same:
                altered.append((b["id"], obj))
        if detect(t):
            altered.append((b["id"], detect(t)))
    print(f"\nbenign altered: {len(altered)} of {len(BENIGN)}")
    assert altered == []


@pytest.mark.parametrize("text, secret", [
    ("order #4111111111111111 shipped", False),      # an order number by the word before
    ("card 4111111111111111 on file", True),         # the same digits as a card
    ("X-Request-Id: 8fKq2LmN0pRs4TuVw6XyZa1Bc3De5Fg7Hi9Jk1Lm", False),
    ("aws_secret_access_key 8fKq2LmN0pRs4TuVw6XyZa1Bc3De5Fg7Hi9Jk1Lm", True),
    ("sk-learn-compatible-wrapper2024", False),      # hyphen-joined lower-case words
    ("sk-Xq3LmN0pRs4TuVw6XyZa1Bc3De5Fg7Hi9Jk1LmQp2r", True),
    ("The Cookie: header is set by the browser", False),  # prose, no name=value
    ("Cookie: session=Xq3LmN0pRs4TuVw6", True),
    ("the password is case-sensitive", False),       # a two-part word form
    ("the password is correct-horse-battery-staple", True),
    ("c0a8012e3f4b5a6978d1e2f3a4b5c6d7-1b2c3d4e-5f6a7b8c", True),   # Mailgun 32-8-8
    ("c0a8012e-3f4b-5a69-78d1-e2f3a4b5c6d7", False),  # a UUID is 8-4-4-4-12
    ("DE89370400440532013000", True),                 # the mod-97 check holds
    ("DE89370400440532013001", False),                # it fails
])
def test_shared_shapes_separated_by_their_rule(text, secret):
    assert bool(detect(text)) is secret, text


def test_values_that_are_not_strings():
    card = 4111111111111111
    assert redact({"note": card}) == {"note": REDACTED}
    assert redact([card, 2**40, 42]) == [REDACTED, 2**40, 42]   # not a card: kept
    assert redact({"ssn": 78051120, "phone": 12125550147}) == {"ssn": REDACTED,
                                                             "phone": REDACTED}
    assert scan({"note": card}) == {"credit_card": 1}
    arr = np.array([["ok", "ghp_" + "a1B2" * 9]])
    out = redact(arr)
    assert out.shape == arr.shape and out[0, 0] == "ok" and out[0, 1] == REDACTED
    assert redact(b"token ghp_" + b"a1B2" * 9) == b"token " + REDACTED.encode()
    assert redact(b"\xff plain") == b"\xff plain"


@pytest.mark.parametrize("key, sensitive", [
    ("auth", True), ("key", True), ("pass", True), ("pw", True), ("pin", True),
    ("credential", True), ("iban", True), ("db_credential", True), ("bank_iban", True),
    ("DD_APP_KEY", True), ("basic_pass", True),
    ("monkey", False), ("author", False), ("pinned", False), ("keyboard", False),
    ("sort_key", False), ("primary_key", False), ("map_pin", False), ("use_auth", False),
    ("passenger", False), ("spin", False), ("turnkey", False),
])
def test_wider_key_list_matches_whole_words_only(key, sensitive):
    assert is_sensitive_key(key) is sensitive


def test_error_messages_do_not_echo_a_flagged_value():
    token = "ghp_" + "a1B2" * 9
    message = str(ConfigError("api_token", token, "unknown parameter"))
    assert token not in message and "api_token" in message
    assert "12.5" in str(ConfigError("reward", 12.5, "must be at most 1"))


def test_error_message_redacted_once_a_store_module_is_loaded():
    """A message built by code that takes user text (here the experience store, which
    imports dyna.redact) shows a flagged value redacted; dyna.errors alone imports nothing
    of dyna and shows ``repr``."""
    import subprocess
    import sys
    code = ("import dyna.experience\n"
            "from dyna.errors import check_range\n"
            "try:\n    check_range('reward', 'sk_live_' + 'Ab1' * 8, 0, 1)\n"
            "except ValueError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "reward='[REDACTED]': must be a number"
