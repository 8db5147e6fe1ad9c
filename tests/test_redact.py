"""Redaction of sensitive keys/values and the signed feature hasher (dyna.redact)."""

import copy
import hashlib
import hmac
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from dyna.errors import ConfigError
from dyna.loops.trajectories import TAU_BENCH_FORMATS
from dyna.redact import (
    DEFAULT_SENSITIVE_KEYS,
    DETECTORS,
    REDACTED,
    check_label,
    detect,
    has_secret,
    hash_features,
    is_sensitive_key,
    keyed_hash,
    normalise_key,
    redact,
    redact_text,
    redaction_formats,
)

PERS04_KEYS = {"password", "api_key", "token", "secret", "authorization"}


def test_pers04_nested_keys_whole_names_case_insensitive():
    """Nested dicts/lists, whole-name matching, '-' read as '_'."""
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
             "username": "ada", "user_count": 2, "token_count": 17, "tokenizer": "bpe",
             "names": ["a"]}
    out = redact(given)
    # the former nine names are still there; the list grew (dyna.redact.SECRET_KEY_NAMES and
    # PERSONAL_KEY_NAMES: passwd, pwd, client_secret, access_token, cookie, dob, address, ...)
    assert DEFAULT_SENSITIVE_KEYS >= {"api_key", "authorization", "email", "name", "password",
                                      "phone", "secret", "ssn", "token"}
    assert out["Name"] == REDACTED and out["EMAIL"] == REDACTED and out["phone"] == REDACTED
    assert out["SSN"] == REDACTED
    assert out["e-mail"] == "x"  # "e_mail" is not "email": whole names only
    assert isinstance(out["nested"], tuple)
    assert out["nested"][0] == {"Authorization": REDACTED}  # a whole sub-tree is replaced
    assert out["nested"][1] == ["Secret", {"secret": REDACTED}]  # a value "Secret" is kept
    assert out["username"] == REDACTED  # a user id / user name is personal data
    assert out["user_count"] == 2 and out["token_count"] == 17 and out["tokenizer"] == "bpe"
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


# ------------------------------------------------------------------ secrets and personal data


BRIEF_KEYS = ["passwd", "pwd", "client_secret", "secret_key", "access_token", "refresh_token",
              "id_token", "auth_token", "apiKey", "x-api-key", "private_key",
              "aws_secret_access_key", "cookie", "set-cookie", "credentials", "credit_card",
              "card_number", "cvv", "dob", "address", "ｐａｓｓｗｏｒｄ", "pass\u200bword",
              "DB_PASSWORD", "DJANGO_SECRET_KEY", "SLACK_TOKEN", "AWS_SECRET_ACCESS_KEY",
              "X-Api-Key", "APIKey", "Set-Cookie", "credit_card_number", "first_name"]


@pytest.mark.parametrize("key", BRIEF_KEYS)
def test_normalised_key_names_are_sensitive(key):
    assert is_sensitive_key(key)
    assert redact({key: "v4lue"}) == {key: REDACTED}


@pytest.mark.parametrize("key", ["tokenizer", "token_count", "names", "task_name", "user_count",
                                 "user_agent", "users", "get_user_details", "passwordless",
                                 "eos_token", "e-mail", "public_key", "max_tokens"])
def test_look_alike_keys_are_kept(key):
    assert not is_sensitive_key(key)
    assert redact({key: "v"}) == {key: "v"}


def test_normalise_key():
    assert normalise_key("X-API-Key") == normalise_key("xApiKey") == "x_api_key"
    assert normalise_key("APIKey") == "api_key" and normalise_key("ｐａｓｓ\u200bword") == "password"
    assert normalise_key(" DB..PASSWORD_ ") == "db_password" and normalise_key("e-mail") == "e_mail"


@pytest.mark.parametrize("text", ["password: forgotten", "the secret: patience",
                                  "api_key=YOUR_KEY_HERE", "sk-learn-compatible-wrapper",
                                  "token: identifier", "API_TOKEN=<token>", "pwd=${PWD}",
                                  "secret=changeme", "token=xxx", "password: ..."])
def test_former_false_positives_are_kept(text):
    assert redact_text(text) == text and detect(text) == [] and not has_secret(text)


@pytest.mark.parametrize("text, secret", [
    ("DB_PASSWORD=hunter22", "hunter22"), ("SLACK_TOKEN: 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
    ("note: password=Tr0ub4dor3 end", "Tr0ub4dor3"), ('"apiKey": "a1b2c3d4e5"', "a1b2c3d4e5"),
    ("pass\u200bword=S3cretValue", "S3cretValue"), ("password: letmein123", "letmein123"),
])
def test_assignments_in_text(text, secret):
    out = redact_text(text)
    assert secret not in out and REDACTED in out
    assert detect(text) == ["sensitive_assignment"]


def test_detector_table_and_names():
    names = [d.name for d in DETECTORS]
    assert len(names) == len(set(names)) and all(d.description for d in DETECTORS)
    assert detect("key AKIAIOSFODNN7EXAMPLE and mail ada@example.org") == [
        "aws_access_key_id", "email_address"]
    assert detect("4111 1111 1111 1112") == []  # Luhn fails
    assert detect("4111 1111 1111 1111") == ["credit_card"]
    assert detect("Basic dXNlcjpwYXNz") == ["basic_auth"] and detect("Basic arithmetic") == []
    assert redact_text("postgres://user:pass@host/db") == "postgres://user:[REDACTED]@host/db"
    assert redact_text("postgres://user:${DB_PASS}@host/db") == "postgres://user:${DB_PASS}@host/db"


def test_redaction_is_idempotent():
    given = {"a": "DB_PASSWORD=hunter22 and Bearer abc123defg", "mia@example.com": 1,
             "j": json.dumps({"dob": "1990-04-05", "x": "postgres://u:p4ss@h"})}
    once = redact(given, hmac_key=b"k")
    assert redact(once, hmac_key=b"k") == once


def test_secret_dict_keys_get_keyed_hashes():
    given = {"ada@example.org": 1, "mia@example.org": 2, "plain": 3}
    a = redact(given, hmac_key=b"one")
    assert list(a.values()) == [1, 2, 3] and "plain" in a
    k1, k2 = [k for k in a if k != "plain"]
    assert k1 != k2 and k1 == f"[REDACTED:{keyed_hash('ada@example.org', b'one')}]"
    assert len(k1) == len("[REDACTED:]") + 12
    assert hmac.new(b"one", b"ada@example.org", hashlib.sha256).hexdigest()[:12] in k1
    assert redact(given, hmac_key=b"one") == a               # stable for the same key
    assert list(redact(given, hmac_key=b"two")) != list(a)   # not across keys
    assert redact(given, values=False) == given


def test_embedded_json_is_redacted_and_untouched_json_kept():
    text = json.dumps({"dob": "1990-04-05", "city": "Austin", "n": [1, 2]})
    assert json.loads(redact(text)) == {"dob": REDACTED, "city": "Austin", "n": [1, 2]}
    same = '{"city":  "Austin"}'
    assert redact(same) is same or redact(same) == same


def test_check_label():
    assert check_label("run_id", "run-0003") == "run-0003" and check_label("seed", None) is None
    assert check_label("task_type", "book_flight") == "book_flight"
    with pytest.raises(ConfigError) as err:
        check_label("run_id", "run-ghp_" + "a1B2" * 9)
    assert err.value.field == "run_id" and "github_token" in err.value.reason
    assert "a1B2a1B2" not in str(err.value)  # the error never carries the secret
    with pytest.raises(ConfigError) as err:
        check_label("tenant", "mia.li3818@example.com")
    assert err.value.field == "tenant" and "email_address" in err.value.reason


TOKEN_HEX = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"


@pytest.mark.parametrize("text, expected", [
    (f"Authorization: Token {TOKEN_HEX}", "Authorization: Token [REDACTED]"),
    (f"authorization: token {TOKEN_HEX}", "authorization: token [REDACTED]"),
    (f'curl -H "Authorization: Token {TOKEN_HEX}" https://x',
     'curl -H "Authorization: Token [REDACTED]" https://x'),
    ("Authorization: Bearer kQzTrWmXvYpLsNbHcJdFgVtR", "Authorization: Bearer [REDACTED]"),
    (f"Authorization=Token {TOKEN_HEX}", "Authorization=Token [REDACTED]"),
    (f"Authorization: ApiKey {TOKEN_HEX}", "Authorization: ApiKey [REDACTED]"),  # not the
    ('Authorization: Digest username="ops", response="6629fae49393a05397450978507c4ef1"',
     "Authorization: Digest [REDACTED]"),                       # scheme word, key in clear
    ("Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830, Signature=5d672d79c1",
     "Authorization: AWS4-HMAC-SHA256 [REDACTED]"),
    (f"auth_token: Token {TOKEN_HEX}", "auth_token: Token [REDACTED]"),
    (f'"token": "Bearer {TOKEN_HEX}"', '"token": "Bearer [REDACTED]"'),
    (f"token={TOKEN_HEX}", "token=[REDACTED]"),
])
def test_authorization_headers_of_every_scheme(text, expected):
    assert redact_text(text) == expected
    assert TOKEN_HEX not in str(redact({"log": [text]}))


@pytest.mark.parametrize("text", [
    "Authorization: Token <token>", "Authorization: Bearer YOUR_TOKEN_HERE",
    "Authorization: Token ${API_TOKEN}", 'headers = {"Authorization": "Token {token}"}',
    "Authorization: Token token=<token>", "Authorization: Bearer authentication is required",
    "the Authorization: Bearer header carries the token", "'token': 'Bearer <token>'",
])
def test_authorization_placeholders_and_prose_are_kept(text):
    assert redact_text(text) == text and detect(text) == []


@pytest.mark.parametrize("text, uid", [
    ("Sure, my user ID is mia_li_3668.", "mia_li_3668"),
    ("My user ID is `noah_muller_9847`", "noah_muller_9847"),
    ("- **User ID:** noah_muller_9847", "noah_muller_9847"),
    ("with my user id? it's omar_rossi_1241", "omar_rossi_1241"),
    ("your user id, which is 'omar_rossi_1241'", "omar_rossi_1241"),
    ("Anya Garcia (with ID: anya_garcia_5901)", "anya_garcia_5901"),
    ("Sophia Taylor (id: sophia_taylor_9065)", "sophia_taylor_9065"),
    ("Yara (user_id: yara_garcia_1905)", "yara_garcia_1905"),
    ("my username is ivan_muller_7015", "ivan_muller_7015"),
    ("You are mia_li_3668. You want to fly", "mia_li_3668"),
    ("I'm lucas_brown_4047", "lucas_brown_4047"),
    ("Certificate added to user noah_muller_9847 with amount 150.", "noah_muller_9847"),
    ('{"user_id":"mia_li_3668","reservation_id":"HATHAT"}', "mia_li_3668"),
    # cues near the id, as the recorded runs and the reviewer's lessons word them
    ("transfer_to_human_agents summary=The user, amelia_rossi_1297, is requesting to cancel",
     "amelia_rossi_1297"),
    ("Sure, my ID is mia_li_3668.", "mia_li_3668"),
    ("You are 'omar_rossi_1241'. You want to cancel", "omar_rossi_1241"),
    ("My user ID is already provided, sofia_kim_7287. The reservation", "sofia_kim_7287"),
    ("Your user ID (which I already have as emma_kim_9957).", "emma_kim_9957"),
    ("the customer: raj_brown_5782 asked", "raj_brown_5782"),
    ("linked to account liam_khan_2521", "liam_khan_2521"),
    ("passenger (chen_lee_6825) rebooked", "chen_lee_6825"),
    ("account id = james_lee_6136", "james_lee_6136"),
    ('{"user": "mia_kim_4397", "seat": "12A"}', "mia_kim_4397"),
])
@pytest.mark.usefixtures("tau_bench_formats")
def test_user_ids_after_a_cue(text, uid):
    assert detect(text) == ["user_id"]
    out = redact(text)
    assert uid not in out and REDACTED in out
    assert redact({"note": text}) == {"note": out}


@pytest.mark.parametrize("text", [
    "get_user_details", "max_tokens_2048", "lr_schedule_cosine_1000",
    "user ids look like first_last_1234", "the user id is required", "run id: exp_ablation_0042",
    "call get_user_details for max_tokens_2048", "user_count: 3", "users mia_li_3668",
    # snake_case names with digits near the cue words stay
    "the user ran skill_loop_2024 on agent_tasks_v2", "customer support: skill_loop_2024",
    "account settings lr_schedule_cosine_1000", "passenger count 2 for book_reservation",
    "user story: update_reservation_flights then book_reservation", "my id card",
])
@pytest.mark.usefixtures("tau_bench_formats")
def test_snake_case_names_are_not_user_ids(text):
    assert detect(text) == [] and redact(text) == text
    assert redact({"note": text, "step": 2}) == {"note": text, "step": 2}


@pytest.mark.usefixtures("tau_bench_formats")
def test_a_cue_key_names_a_user_id_only_of_its_shape():
    assert redact({"account": "mia_li_3668", "user": "ada"}, ()) == {"account": REDACTED,
                                                                    "user": "ada"}
    assert redact({"passenger": {"name": "x"}, "account": "main"}, ()) == {
        "passenger": {"name": "x"}, "account": "main"}
    from dyna.redact import scan
    assert scan({"customer": "raj_brown_5782"}) == {"user_id": 1}


# Payment-method ids are personal data, since one links to a person's card: they are
# redacted as keys, values and in prose.
@pytest.mark.parametrize("text, pid", [
    ("payment_id: credit_card_4421486", "credit_card_4421486"),
    ("Error: not enough balance in payment method gift_card_5094406", "gift_card_5094406"),
    ("Certificate certificate_3221322 added with amount 150.", "certificate_3221322"),
    ("pay with paypal_3024827.", "paypal_3024827"),
    ("refund to debit_card_1234567 and bank_account_99887766", "debit_card_1234567"),
    ('{"payment_id":"credit_card_7334"}', "credit_card_7334"),
    ("call `update_reservation_flights payment_id=gift_card_5634230 reservation_id=1N99U6`",
     "gift_card_5634230"),
    ("Credit_Card_4421486", "Credit_Card_4421486"),
])
@pytest.mark.usefixtures("tau_bench_formats")
def test_payment_method_ids_are_redacted_wherever_they_stand(text, pid):
    assert detect(text) == ["payment_method_id"]
    out = redact(text)
    assert pid not in out and REDACTED in out and "bank_account_99887766" not in out
    assert pid not in str(redact({"note": text})) and pid not in str(redact([text]))
    ((key, value),) = redact({pid: {"source": "credit_card", "id": pid}}, ()).items()
    assert key.startswith("[REDACTED:") and value == {"source": "credit_card", "id": REDACTED}


@pytest.mark.parametrize("text", [
    "credit_card", "source: gift_card", "certificate_4856383x", "ssl_certificate_20240101",
    "credit_card_123", "gift_card_balance_2024", "paypal-3024827", "my_paypal_3024827",
    "update_reservation_flights", "book_reservation",
])
@pytest.mark.usefixtures("tau_bench_formats")
def test_payment_method_look_alikes_are_kept(text):
    assert detect(text) == [] and redact(text) == text


@pytest.mark.usefixtures("tau_bench_formats")
def test_a_tau_bench_payment_methods_map_keeps_no_id():
    methods = {"credit_card_4421486": {"source": "credit_card", "brand": "visa",
                                       "last_four": "7447", "id": "credit_card_4421486"},
               "gift_card_5094406": {"source": "gift_card", "amount": 40,
                                     "id": "gift_card_5094406"}}
    out = redact({"payment_methods": methods}, ())["payment_methods"]
    assert "credit_card_4421486" not in json.dumps(out) and len(out) == 2
    gift = out[f"[REDACTED:{keyed_hash('gift_card_5094406')}]"]
    assert gift == {"source": "gift_card", "amount": 40, "id": REDACTED}
    from dyna.redact import scan
    # the 2 keys and the 2 "id" values
    assert scan({"payment_methods": methods}) == {"payment_method_id": 4}


@pytest.mark.usefixtures("tau_bench_formats")
def test_a_user_id_found_by_key_or_cue_is_redacted_everywhere_in_the_object():
    run = {"user_id": "mia_li_3668",
           "traj": [{"role": "user", "content": "Sure, it's mia_li_3668."},
                    {"role": "assistant", "content": "Thanks! Looking up mia_li_3668 now."},
                    {"role": "tool", "content": json.dumps({"mia_li_3668": {"tier": "gold"},
                                                            "note": "owner mia_li_3668x"})}],
           "other": "mia_li_3668_backup and max_tokens_2048"}
    out = redact(run, hmac_key=b"k")
    assert out["user_id"] == REDACTED
    assert out["traj"][0]["content"] == f"Sure, it's {REDACTED}."
    assert out["traj"][1]["content"] == f"Thanks! Looking up {REDACTED} now."
    tool = json.loads(out["traj"][2]["content"])
    assert list(tool) == [f"[REDACTED:{keyed_hash('mia_li_3668', b'k')}]", "note"]
    assert tool["note"] == "owner mia_li_3668x"  # whole words only
    assert out["other"] == "mia_li_3668_backup and max_tokens_2048"
    # learned from a cue as well; and only ids of the shape are carried over
    said = redact(["my user id is omar_rossi_1241", "omar_rossi_1241 again"])
    assert said == [f"my user id is {REDACTED}", f"{REDACTED} again"]
    assert redact({"user_id": "ada", "msg": "ada was here"}) == {"user_id": REDACTED,
                                                                 "msg": "ada was here"}
    # a cue in another object teaches nothing here; keys only mode learns nothing
    assert redact({"msg": "Sure, it's mia_li_3668."}) == {"msg": "Sure, it's mia_li_3668."}
    assert redact(run, values=False)["traj"][0]["content"] == "Sure, it's mia_li_3668."
    assert redact(out, hmac_key=b"k") == out  # idempotent


@pytest.mark.parametrize("key", ["user_id", "userId", "User-ID", "USER_ID", "userid", "username",
                                 "UserName", "customer_id", "member_id"])
def test_user_id_keys_are_personal_data(key):
    assert is_sensitive_key(key)
    assert redact({key: "mia_li_3668"}) == {key: REDACTED}


@pytest.mark.parametrize("text, secret", [
    ("- Chen Lee, DOB: 1967-12-12", "1967-12-12"),
    ("Omar Rossi (DOB: 1970-06-06)", "1970-06-06"),
    ("Noah Muller (Date of Birth: 1963-01-22)", "1963-01-22"),
    ("Date of Birth remains: 1989-12-13.", "1989-12-13"),
    ("my birthday is April 5, 1990", "April 5, 1990"),
    ("born on 5 April 1990", "5 April 1990"),
    ("d.o.b. 04/05/1990", "04/05/1990"),
])
def test_dates_of_birth_after_a_cue(text, secret):
    assert detect(text) == ["date_of_birth"] and secret not in redact_text(text)


@pytest.mark.parametrize("text", ["born in a small town in 1990", "flight on 2024-05-20",
                                  "created_at: 2024-05-15T15:00:00", "newborn 2024-01-01",
                                  "dob is required"])
def test_other_dates_are_kept(text):
    assert detect(text) == [] and redact_text(text) == text


@pytest.mark.usefixtures("tau_bench_formats")
def test_check_label_refuses_a_user_id_after_a_cue():
    assert check_label("run_id", "mia_li_3668") == "mia_li_3668"  # no cue: an ordinary label
    with pytest.raises(ConfigError) as err:
        check_label("task_type", "user mia_li_3668")
    assert "user_id" in err.value.reason and "mia_li_3668" not in str(err.value)


@pytest.mark.usefixtures("tau_bench_formats")
def test_a_cue_key_catches_in_parsed_json_as_in_its_text():
    """``{"user_id": "x"}`` as JSON text fires the user_id detector; parsed (embedded JSON,
    or redaction with no key names, as the loop libraries' safety net does) it must too."""
    text = '{"user_id":"mei_tanaka_6021","dob":"1990-04-05","seat":"12A"}'
    assert detect(text) == ["user_id", "date_of_birth"]
    for keys in ((), DEFAULT_SENSITIVE_KEYS):
        out = redact({"reason": text, "n": {"userId": "mei_tanaka_6021"}}, keys)
        assert json.loads(out["reason"]) == {"user_id": REDACTED, "dob": REDACTED, "seat": "12A"}
        assert out["n"] == {"userId": REDACTED}
    from dyna.redact import scan
    assert scan({"reason": text}) == {"user_id": 1, "date_of_birth": 1}
    # not the shape: no catch without the key name; the key name alone still redacts
    assert redact({"user_id": "42", "dob": "unknown"}, ()) == {"user_id": "42", "dob": "unknown"}
    assert redact({"user_id": "42"}) == {"user_id": REDACTED}
    assert redact({"user_id": "mei_tanaka_6021"}, values=False, keys=()) == {
        "user_id": "mei_tanaka_6021"}


def test_the_detect_cache_holds_no_text_and_is_bounded():
    import gc

    from dyna import redact as R
    cache = R.active_formats().detect_cache
    secret = "AKIA" + "Q7XK2M9PLR4T8WZB"
    text = f"aws key {secret} here"
    assert R.detect(text) == R.detect(text) and R.detect(text)
    assert all(not isinstance(k, str) for k in cache)
    assert not any(secret in repr(k) for k in cache)
    gc.collect()
    big = "x" * (R.DETECT_CACHE_MAX_CHARS + 1)
    n = len(cache)
    R.detect(big)
    assert len(cache) == n          # long texts are not cached
    for i in range(R.DETECT_CACHE_SIZE + 10):
        R.detect(f"plain text number {i}")
    assert len(cache) <= R.DETECT_CACHE_SIZE


def test_the_plain_text_fast_path_follows_the_detectors():
    """redact() returns a text at once when :func:`detect` (cached by the text's digest, per
    set of formats and process, never on disk) names no detector; each set of formats has
    its own cache, so a text seen under the general formats is scanned again under the
    tau-bench ones: a payment-method id seen before is redacted there, and its cached entry
    names the detector."""
    import hashlib as _h

    from dyna import redact as R
    text = "refund went to gift_card_7480005 yesterday"
    assert R.detect(text) == [] and redact(text) is text      # not a general format
    with redaction_formats(TAU_BENCH_FORMATS):
        assert R.detect(text) == ["payment_method_id"]
        digest = _h.blake2b(text.encode("utf-8"), digest_size=16).digest()
        assert TAU_BENCH_FORMATS.detect_cache[digest] == ("payment_method_id",)
        assert redact(text) == f"refund went to {REDACTED} yesterday"
        plain = "refund went to the gift card yesterday"
        assert R.detect(plain) == [] and redact(plain) is plain


def test_tau_bench_ids_are_the_importers_formats_not_general_ones():
    """The general formats leave tau-bench's ids alone; the importer's formats add them."""
    for text in ("Sure, my user ID is mia_li_3668.", "pay with paypal_3024827."):
        assert detect(text) == [] and redact(text) == text
    assert redact({"user": "mia_li_3668"}, ()) == {"user": "mia_li_3668"}
    with redaction_formats(TAU_BENCH_FORMATS):
        assert detect("Sure, my user ID is mia_li_3668.") == ["user_id"]
        assert detect("pay with paypal_3024827.") == ["payment_method_id"]
        assert redact({"user": "mia_li_3668"}, ()) == {"user": REDACTED}
    assert detect("Sure, my user ID is mia_li_3668.") == []      # only inside the block


PROSE_SECRETS = [   # each must reach MEMORY.md / SKILL.md redacted
    ("The staging db password is Hunter2Secret", "Hunter2Secret", "prose_credential"),
    ("The staging API key is a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6",
     "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6", "prose_credential"),
    ("api_key a1B2c3D4e5F6g7H8i9J0", "a1B2c3D4e5F6g7H8i9J0", "prose_credential"),
    ("the root password is Hunter2Secret.", "Hunter2Secret", "prose_credential"),
    ("password for admin was 'Hunter2Secret'", "Hunter2Secret", "prose_credential"),
    ("curl -u admin:Hunter2Secret https://x.example.com", "Hunter2Secret",
     "curl_user_password"),
    ("curl --user=admin:s3cr3tpass https://x.example.com", "s3cr3tpass", "curl_user_password"),
    ("mysql -uroot -pHunter2Secret shop", "Hunter2Secret", "mysql_password"),
]
PROSE_KEPT = ["the password is stored in the vault", "token budget is 1200",
              "api key rotation happens every 90 days", "the secret sauce is love",
              "token limit 4096 tokens", "mysql -P 3306 -u root -p shop",
              "use the key k8s-prod-cluster for deploys", "send_secrets:v2",
              "the password is YOUR_PASSWORD_HERE", "curl -u $USER:$TOKEN https://x.example.com",
              # a review of the detectors: word forms and paths, another command's -p
              "Add the private key ~/.ssh/id_ed25519 to ssh-agent",
              "The secret is base64-encoded in the manifest",
              "the token is sha256-hashed before storage", "The API key is v2-format since March",
              "mysqldump shop | ssh -p2222 backup@host"]


def test_credentials_in_prose_and_on_command_lines_are_redacted():
    for text, secret, name in PROSE_SECRETS:
        out = redact_text(text)
        assert secret not in out and "[REDACTED]" in out, text
        assert detect(text) == [name], text
    assert [redact_text(t) for t in PROSE_KEPT] == PROSE_KEPT
    assert redact_text("password: letmein123") == "password: [REDACTED]"   # the KEY: rule
    assert detect("password: letmein123") == ["sensitive_assignment"]
