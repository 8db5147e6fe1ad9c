"""Passwords named by the words around them: password keys, and a one-word password in prose.

A password has no format a detector could match: ``swordfish`` is a password in "the
password for the db is swordfish" and a plain word anywhere else. What separates the two is
the words around it:

* the *key*: a key whose normalised form (:func:`dyna.redact.normalise_key`) ends with a
  password word (:data:`PASSWORD_KEY_WORDS`: ``DB_PW``, ``db-pw``, ``dbPw``, ``redis_pass``,
  ``smtpPasswd``), or holds one followed only by qualifiers (:data:`KEY_QUALIFIERS`:
  ``PASSWORD_PROD``, ``pw_admin``, ``db_pass_old``) or a number (``password2``, ``pw_1``),
  names a password (:func:`password_key`); ``bypass``, ``compass``, ``passenger_count``,
  ``password_length``, ``password_reset_link`` do not;
* in prose, a password word, then ``is``/``was``, ``:`` or ``=``, then *one word* that
  ends the clause (:data:`CLAUSE_END`: the end of the text or line, punctuation, or a word
  that starts a new phrase such as ``for``, ``and``, ``so``) and is not a word that
  describes a password (:func:`one_word_password`: ``required``, ``incorrect``, ``empty``,
  ``stored``, a participle ``-ed``, an adverb ``-ly``, ...).

So "my password is hunter", "the password for the db is swordfish" and "use passphrase:
correcthorse" hold a password; "the password is required", "password is incorrect", "the
password field is empty", "passwords are hashed" and "the password reset link" do not.

``pwd`` is also the shell's working directory: ``PWD=/home/user`` (``env`` output) and
``{"PWD": "/home/user"}`` are a folder, not a password (:func:`working_directory`).
"""

from __future__ import annotations

import re

__all__ = ["CLAUSE_END", "KEY_QUALIFIERS", "PASSWORD_KEY_WORDS", "PROSE_PASSWORD_WORDS",
           "STATE_WORDS", "one_word_password", "password_key", "working_directory"]

PASSWORD_KEY_WORDS: frozenset[str] = frozenset({
    "password", "passwd", "pwd", "pw", "pass", "passphrase", "passcode"})
"""Words that name a password as a part of a key (normalised form)."""

PROSE_PASSWORD_WORDS: tuple[str, ...] = (
    "password", "passphrase", "passwd", "passcode", "pwd", "pw")
"""Words that name a password in prose (``pass`` is a noun and a verb there: not one)."""

KEY_QUALIFIERS: frozenset[str] = frozenset({
    "old", "new", "current", "previous", "confirm", "confirmation", "again", "repeat",
    "retype", "prod", "production", "staging", "stage", "dev", "local", "admin", "root",
    "master", "primary", "replica", "enc", "encrypted", "b64", "base64", "hash", "hashed",
    "plain", "plaintext", "raw", "value"})
"""Words that may follow a password word in a key and leave it a password (``PASSWORD_PROD``,
``pw_admin``, ``password_hash``). Any other word makes it a name of something else
(``password_length``, ``password_policy``, ``pass_rate``)."""

STATE_WORDS: frozenset[str] = frozenset("""
    required needed necessary mandatory optional incorrect correct wrong right invalid valid
    empty blank missing unset unknown known same different identical similar unique weak strong
    short long longer shorter stronger weaker simple complex easy hard obvious trivial secure
    insecure safe unsafe random fine good okay great enough visible invisible sensitive
    confidential private public temporary permanent default generic mine yours ours theirs this
    that these those here there below above following attached something nothing anything
    everything whatever what which case also still never always often only just then even very
    quite rather really being been sent reset shown written given taken broken chosen stolen
    forgotten hidden kept lost gone read expiring pending matching working failing changing
    loading available unavailable active inactive ready stale current previous from with
    without into within their your none null true false sufficient insufficient guessable
    unguessable reusable strict free open plain plaintext
""".split())
"""Words that describe a password or stand for it rather than being it, compared case-
insensitively: after "the password is" they say what it is like (``required``, ``wrong``,
``empty``, ``weak``, ``below``), never what it is."""

_LETTERS = re.compile(r"[^\W\d_]{4,}")
CLAUSE_END = (r"[\"'`]?(?=[ \t]*(?:$|[\r\n.,;:!?)\]}])|[ \t]+(?i:so|and|but|or|then|for|to|in"
              r"|on|at|with|of|from|until|when|if|unless|because|since)\b)")
"""What follows a one-word password in prose (a regular expression): an optional closing
quote, then the end of the text or line, sentence punctuation, a closing bracket, or a word
that starts a new phrase ("the password is swordfish for the staging db")."""


def one_word_password(word: str) -> bool:
    """True when ``word``, stated as a password in prose, is one: four or more letters (no
    digit, no punctuation: a value with one is found by the format rules), not a word of
    :data:`STATE_WORDS`, not a past participle of six or more letters (``stored``,
    ``hashed``, ``required``) and not an adverb of six or more letters ending in ``ly``
    (``usually``). The price: a password that is such a word (``sacred``, ``butterfly``,
    ``secure``) is kept when written this way."""
    w = word.strip().casefold()
    if _LETTERS.fullmatch(w) is None or w in STATE_WORDS:
        return False
    return not (len(w) >= 6 and (w.endswith("ed") or w.endswith("ly")))


def password_key(canon: str) -> str | None:
    """The password word that makes the normalised key ``canon`` name a password, else None.

    ``canon`` names a password when one of its ``_``-separated parts is a word of
    :data:`PASSWORD_KEY_WORDS` (or one with a number written against it: ``password2``,
    ``pw1``) and every part after it is a qualifier of :data:`KEY_QUALIFIERS` or a number;
    any parts may come before it. ``pass`` takes no number (``pass_1`` and ``pass2`` are
    passes of an algorithm)."""
    parts = canon.split("_")
    for i, part in enumerate(parts):
        word = part.rstrip("0123456789")
        if word not in PASSWORD_KEY_WORDS:
            continue
        numbered = word != part or any(p.isdigit() for p in parts[i + 1:])
        if numbered and word == "pass":
            continue
        if all(p in KEY_QUALIFIERS or p.isdigit() for p in parts[i + 1:]):
            return word
    return None


_PATH = re.compile(r"[/~][^\s\x00]*")


def working_directory(canon: str, value: object) -> bool:
    """True when ``value`` under the normalised key ``canon`` is the shell's working
    directory, not a password: the key is exactly ``pwd`` (``PWD``, as ``env`` prints it)
    and the value an absolute path without white space (``/home/user``, ``~/runs``).
    ``DB_PWD=/x`` and ``pwd=hunter`` stay passwords."""
    return canon == "pwd" and isinstance(value, str) and _PATH.fullmatch(value) is not None
