"""Passwords named by the words around them (dyna/redact/passwords.py), both sides of each rule.

A one-word password in prose is kept only by the words around it: a password word, then
is / was, ':' or '=', then one word that ends the clause and does not describe a password.
A key names a password when a password word ends it, or is followed only by qualifiers or a
number. ``PWD`` holding an absolute path is the shell's working directory.
"""

import pytest

from dyna.redact import REDACTED, detect, is_sensitive_key, redact, redact_text
from dyna.redact.passwords import one_word_password, password_key, working_directory


@pytest.mark.parametrize("text, redacted", [
    # a password word, is / was, one word that ends the clause
    ("my password is hunter", "my password is [REDACTED]"),
    ("the password for the db is swordfish", "the password for the db is [REDACTED]"),
    ("use passphrase: correcthorse", "use passphrase: [REDACTED]"),
    ("the wifi pwd was lemonade.", "the wifi pwd was [REDACTED]."),
    ("The password is Wombat, keep it", "The password is [REDACTED], keep it"),
    ("the password is 'wombat' for now", "the password is '[REDACTED]' for now"),
    ("the root password is marmalade\nthen log in", "the root password is [REDACTED]\nthen log in"),
    ("DB password: quokka", "DB password: [REDACTED]"),
    ("pw: hunter", "pw: [REDACTED]"),
    ("MYSQL_PW=bluebird ./deploy.sh", "MYSQL_PW=[REDACTED] ./deploy.sh"),
    ('{"pw": "hedgehog"}', '{"pw": "[REDACTED]"}'),
])
def test_a_one_word_password_in_prose_is_redacted(text, redacted):
    assert redact_text(text) == redacted


@pytest.mark.parametrize("text", [
    "the password is required",          # a word that describes a password
    "the password field is empty",       # no is / : / = right after the password word
    "password is incorrect",
    "passwords are hashed",              # the plural is not a password word
    "the password reset link",
    "the password is stored in the vault",   # a participle (-ed)
    "the password is usually rotated",   # an adverb (-ly)
    "the password is something you choose",  # the word does not end the clause
    "Password: required",
    "password: must be 12 characters",   # ':' then a word that does not end the clause
    "the password is case-sensitive",    # not one word of letters
    "the password is too short",         # shorter than 4 letters
    "the password is valid until Friday",
    "the password is your name",         # a placeholder word
    "he made a pass is fine",            # 'pass' is no password word in prose
])
def test_prose_about_a_password_is_kept(text):
    assert redact_text(text) == text and detect(text) == []


@pytest.mark.parametrize("word, password", [
    ("hunter", True), ("Swordfish", True), ("gingerbread", True), ("seed", True),
    ("required", False), ("INCORRECT", False), ("stored", False), ("usually", False),
    ("abc", False), ("hunter2", False), ("case-sensitive", False), ("below", False),
])
def test_one_word_password(word, password):
    assert one_word_password(word) is password


@pytest.mark.parametrize("key, word", [
    ("db_pw", "pw"), ("mysql_pw", "pw"), ("pw", "pw"), ("redis_pass", "pass"),
    ("smtp_passwd", "passwd"), ("password_prod", "password"), ("pw_admin", "pw"),
    ("password2", "password"), ("pw_1", "pw"), ("db_pass_old", "pass"),
    ("password_hash", "password"), ("ftp_pwd", "pwd"),
    ("password_length", None), ("password_reset_link", None), ("pass_rate", None),
    ("pass_1", None), ("pass2", None), ("bypass", None), ("compass", None),
    ("passenger_count", None), ("passwordless", None), ("password_policy", None),
])
def test_password_key(key, word):
    assert password_key(key) == word


@pytest.mark.parametrize("key, sensitive", [
    ("DB_PW", True), ("MYSQL_PW", True), ("db-pw", True), ("dbPw", True), ("pw", True),
    ("REDIS_PASS", True), ("smtpPasswd", True), ("ftp-pwd", True), ("PASSWORD_PROD", True),
    ("pwAdmin", True), ("password2", True), ("db-pass-old", True), ("dbPass", True),
    ("bypass", False), ("compass", False), ("passenger_count", False),
    ("password_length", False), ("passRate", False), ("pass_1", False),
])
def test_keys_holding_a_password_word(key, sensitive):
    assert is_sensitive_key(key) is sensitive
    value = "Qz7-Lp3-Wm8"
    assert redact({key: value}) == {key: REDACTED if sensitive else value}
    assert (redact_text(f"{key}={value}") == f"{key}={REDACTED}") is sensitive


@pytest.mark.parametrize("text, kept", [
    ("bypass=true", True), ("compass: north", True), ("passenger_count=3", True),
    ("password_length=16", True), ("pass_rate=0.93", True),
    ("DB_PW=s3cr3tvalue", False), ("db-pw: Xk9#mQ2$vLr", False), ("dbPw=Qz7-Lp3-Wm8", False),
    ("redis_pass=Rd!s-8842-kq", False), ("smtpPasswd: 'mailroom'", False),
    ("DB_PWD=marigold", False), ("pw_admin: turquoise", False),
])
def test_key_value_texts(text, kept):
    assert (redact_text(text) == text) is kept


def test_pwd_holding_a_path_is_the_working_directory():
    # the rule: a key that is exactly pwd (PWD, as env prints it) and an absolute path
    # without white space is a folder; any other value, or a longer key, is a password
    assert working_directory("pwd", "/home/user") and working_directory("pwd", "~/runs")
    assert not working_directory("pwd", "hunter") and not working_directory("db_pwd", "/x")
    assert not working_directory("pwd", "/home/my user")
    env = "HOME=/home/user\nPWD=/home/user/runs\nOLDPWD=/home/user\nDB_PWD=marigold\n"
    assert redact_text(env) == env.replace("marigold", REDACTED)
    assert redact_text("pwd: /home/dyna/runs") == "pwd: /home/dyna/runs"
    assert redact_text("the deploy uses PWD=/home/user") == "the deploy uses PWD=/home/user"
    assert redact_text("PWD=hunter") == f"PWD={REDACTED}"
    assert redact({"PWD": "/home/user", "pwd": "hunter", "DB_PWD": "/run/x"}) == {
        "PWD": "/home/user", "pwd": REDACTED, "DB_PWD": REDACTED}
