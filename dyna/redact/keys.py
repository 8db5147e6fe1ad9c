"""Key names whose values are secret or personal, and how a key name is compared.

A mapping entry is redacted by its key when the key, normalised (:func:`normalise_key`:
Unicode NFKC, zero-width characters removed, camelCase split, ``-`` ``_`` ``.`` and spaces
unified to ``_``, casefold), equals a sensitive name, ends in a secret word (``DB_PASSWORD``,
``x-api-key``, ``django_secret_key``) or belongs to a prefix family
(``credit_card_4421486``): :func:`is_sensitive_key`, with the lists
:data:`SECRET_KEY_NAMES`, :data:`PERSONAL_KEY_NAMES` and :data:`PREFIX_KEY_NAMES`. A key that
holds a password word followed by qualifiers only (``PASSWORD_PROD``, ``password2``) matches
too (:func:`dyna.redact.passwords.password_key`).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

from dyna.errors import ConfigError
from dyna.redact.passwords import password_key

__all__ = ["DEFAULT_SENSITIVE_KEYS", "PERSONAL_KEY_NAMES", "PREFIX_KEY_NAMES", "REDACTED",
           "SECRET_KEY_NAMES", "USER_ID_KEY_NAMES", "WHOLE_KEY_NAMES", "cached_key_set",
           "is_sensitive_key", "key_is_sensitive", "key_set", "normalise_key"]

REDACTED = "[REDACTED]"
"""The replacement written in place of every redacted value."""

SECRET_KEY_NAMES: frozenset[str] = frozenset({
    "password", "passwd", "pwd", "passphrase", "secret", "token", "api_key", "apikey",
    "secret_key", "access_key", "private_key", "client_secret", "access_token",
    "refresh_token", "id_token", "auth_token", "authorization", "credentials", "cookie",
    "set_cookie", "aws_secret_access_key", "session_token", "connection_string",
    "pgpassword", "db_pass", "mysql_pwd", "pass", "passcode", "credential", "iban",
    "app_key", "admin_key", "master_key", "signing_key", "encryption_key", "license_key",
    "auth", "key", "pw", "pin",
})
"""Key names of credentials (normalised form). A key matches one when it equals it or ends
with ``_`` + it after :func:`normalise_key`: ``DB_PASSWORD``, ``DJANGO_SECRET_KEY``,
``SLACK_TOKEN``, ``x-api-key``, ``apiKey``, ``ｐａｓｓｗｏｒｄ``, ``pass\\u200bword``, ``DB_PW``,
``dbPw``, ``redis_pass``, ``smtpPasswd`` all match; ``token_count``, ``tokenizer``,
``passwordless``, ``bypass``, ``compass``, ``passenger_count`` do not. Tokenizer vocabulary entries
(``eos_token``, ``pad_token``, ...) are excluded. These names also
drive the ``KEY=value`` assignment rule in texts. The short words of
:data:`WHOLE_KEY_NAMES` match only as the whole key."""

WHOLE_KEY_NAMES: frozenset[str] = frozenset({"auth", "key", "pin"})
"""Secret names that match only as the whole normalised key (``{"pin": 4821}``, ``"auth"``
of a Docker config.json): as the last word of a longer key they mostly name something else
(``sort_key``, ``primary_key``, ``use_auth``, ``map_pin``). A key holding one inside a word
(``monkey``, ``author``, ``pinned``) never matches. ``pw`` is not one of them: ``DB_PW``,
``db-pw``, ``dbPw`` name passwords (at the price of a ``tx_pw`` meaning a power)."""

USER_ID_KEY_NAMES: frozenset[str] = frozenset({
    "user_id", "userid", "username", "user_name", "customer_id", "member_id",
})
"""Key names of a person's account identifier (normalised form: ``userId``, ``User-ID`` and
``USER_ID`` give ``user_id``), personal data like a name: the value of ``{"user_id":
"mia_li_3668"}`` is redacted. Matched exactly (``user_count``, ``user_agent``, ``users``,
``get_user_details`` do not match). Part of :data:`PERSONAL_KEY_NAMES`."""

PERSONAL_KEY_NAMES: frozenset[str] = frozenset({
    "name", "first_name", "last_name", "full_name", "email", "email_address", "phone",
    "phone_number", "ssn", "dob", "date_of_birth", "birth_date", "birthdate", "birthday",
    "address", "credit_card", "card_number", "cvv", "cvc",
}) | USER_ID_KEY_NAMES
"""Key names of personal data (normalised form), matched exactly: ``name`` and
``username`` match but ``names``, ``task_name``, ``user_count`` do not. (``name`` is
redacted on purpose: in a free-form dict it is usually a person's name.) Includes
:data:`USER_ID_KEY_NAMES`."""

PREFIX_KEY_NAMES: frozenset[str] = frozenset({"credit_card"})
"""Key families: a key equal to one of these or starting with it plus ``_`` matches
(``credit_card_number``, ``credit_card_4421486``): its value is redacted. (Whether the key
itself is personal data is for the detectors to say: a key holding a secret is replaced by
a keyed hash, :func:`dyna.redact.redact`.)"""

DEFAULT_SENSITIVE_KEYS: frozenset[str] = SECRET_KEY_NAMES | PERSONAL_KEY_NAMES
"""Key names whose values are redacted by default (compared after :func:`normalise_key`; the
secret names also by suffix, the prefix families of :data:`PREFIX_KEY_NAMES` by prefix)."""

_NOT_SECRET_KEYS = frozenset(f"{w}_token" for w in (
    "eos", "bos", "pad", "unk", "sep", "cls", "mask", "start", "end", "special"))

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e"), None)
_CAMEL_ACRONYM = re.compile(r"([A-Z]+)([A-Z][a-z])")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[\s\-_.]+")


@functools.lru_cache(maxsize=1 << 14)
def normalise_key(key: object) -> str:
    """Return the comparison form of a key name.

    ``str(key)``, Unicode NFKC (fullwidth ``ｐａｓｓ`` -> ``pass``), zero-width characters
    (U+200B-U+200D, U+2060, U+FEFF, soft hyphen, U+180E) removed, camelCase boundaries split
    (``apiKey`` -> ``api_Key``, ``APIKey`` -> ``API_Key``), casefolded, runs of ``-``, ``_``,
    ``.`` and white space replaced by one ``_``, leading and trailing ``_`` dropped. So
    ``"X-API-Key"``, ``"x_api_key"`` and ``"xApiKey"`` all give ``"x_api_key"``; ``"e-mail"``
    gives ``"e_mail"`` (not ``"email"``).
    """
    s = unicodedata.normalize("NFKC", str(key)).translate(_ZERO_WIDTH)
    s = _CAMEL.sub(r"\1_\2", _CAMEL_ACRONYM.sub(r"\1_\2", s))
    return _SEPARATORS.sub("_", s.casefold()).strip("_")


def is_sensitive_key(key: object, keys: Iterable[str] = DEFAULT_SENSITIVE_KEYS) -> bool:
    """True when the mapping key ``key`` names a sensitive value under ``keys``.

    ``key`` matches when, after :func:`normalise_key`, it equals a name of ``keys``; or ends
    with ``_`` + a name that is also in :data:`SECRET_KEY_NAMES` (and is not a tokenizer entry
    such as ``eos_token``); or starts with a name of :data:`PREFIX_KEY_NAMES` in ``keys``
    followed by ``_``; or holds a password word of ``keys`` followed only by qualifiers or a
    number (:func:`dyna.redact.passwords.password_key`: ``PASSWORD_PROD``, ``pw_admin``,
    ``password2``).
    """
    names = keys if isinstance(keys, frozenset) else frozenset(keys)
    return key_is_sensitive(str(key), cached_key_set(names))


@functools.lru_cache(maxsize=1 << 14)
def key_is_sensitive(key: str, names: frozenset[str]) -> bool:
    """:func:`is_sensitive_key` of the string ``key`` under the set of normalised names
    ``names`` (:func:`key_set`), memoised: dict keys repeat on every record."""
    canon = normalise_key(key)
    if canon in names:
        return True
    if canon in _NOT_SECRET_KEYS:
        return False
    parts = canon.split("_")
    for i in range(1, len(parts)):
        tail = "_".join(parts[i:])
        if tail in names and tail in SECRET_KEY_NAMES and tail not in WHOLE_KEY_NAMES:
            return True
        head = "_".join(parts[:i])
        if head in names and head in PREFIX_KEY_NAMES:
            return True
    return password_key(canon) in names


def key_set(keys: Iterable[str]) -> frozenset[str]:
    """The normalised names (:func:`normalise_key`) of a collection of key names.

    Raises
    ------
    ConfigError
        ``keys`` is one string, not a collection of names (field ``keys``).
    """
    if isinstance(keys, str):
        raise ConfigError("keys", keys, "must be a collection of key names, not one string")
    return frozenset(normalise_key(k) for k in keys)


@functools.lru_cache(maxsize=64)
def cached_key_set(keys: frozenset[str]) -> frozenset[str]:
    """:func:`key_set` of a frozen set of names, memoised (callers pass the same sets)."""
    return key_set(keys)
