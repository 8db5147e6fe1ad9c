"""Redaction of secrets and personal data, and feature hashing of free-form episode dicts.

Helpers used before anything about an episode is stored:

* :func:`redact` returns a redacted deep copy of a JSON-like object:

  - the value of every *sensitive key* becomes ``"[REDACTED]"``. Key names are compared after
    :func:`normalise_key` (Unicode NFKC, zero-width characters removed, camelCase split,
    ``-`` ``_`` ``.`` and spaces unified to ``_``, casefold), and beyond exact equality a
    key ending in a secret word (``DB_PASSWORD``, ``x-api-key``, ``django_secret_key``) and a
    key of a prefix family (``credit_card_4421486``) match as well; see
    :func:`is_sensitive_key` and the lists :data:`SECRET_KEY_NAMES`,
    :data:`PERSONAL_KEY_NAMES`, :data:`PREFIX_KEY_NAMES`;
  - every string value is searched with the named :data:`DETECTORS` (provider tokens,
    private key blocks, URLs with passwords, the credentials of an ``Authorization:`` header
    of any scheme of :data:`AUTH_SCHEMES`, cards, e-mail addresses, dates of birth after a
    cue such as ``DOB:``, ...) and with the
    ``KEY=value`` / ``key: value`` assignment rule (:func:`redact_text`);
  - a string that parses as a JSON object or array is parsed, redacted like any dict and
    serialised again (it is returned unchanged, as the same string, when nothing in it was
    redacted);
  - a dict *key* in which a detector fires (an e-mail address, a token, ...) is replaced by
    ``"[REDACTED:<hash>]"`` (:func:`keyed_hash`), so no two secret keys of one mapping collide
    and no value is lost;
  - a payment-method id of the tau-bench shape (``credit_card_4421486``,
    ``gift_card_5094406``, ``certificate_4856383``, ``paypal_3024827``; the
    ``payment_method_id`` detector) is personal data wherever it stands, as a whole token:
    in a value, a dict key or prose;
  - a user id (the tau-bench shape ``mia_li_3668``) is personal data only where something
    says it is one: the value of a user-id key (:data:`USER_ID_CUE_KEYS`) or text after a
    cue (``user id``, ``user_id:``, ``(id: ...)``, ``You are ...``, ``The user, ...``; the
    ``user_id`` detector).
    An id found so is then redacted wherever else it occurs in the same object (``"Sure,
    it's mia_li_3668."`` in a run whose tool call said ``{"user_id": "mia_li_3668"}``), and
    nowhere else: ordinary snake_case names (``get_user_details``, ``max_tokens_2048``) are
    never taken for one.

* :func:`detect` names the detectors that fire in a text (to count catches per detector),
  :func:`has_secret` says whether any does, :func:`scan` counts them over a JSON-like object,
  and :func:`check_label` refuses a label field (run id, task type, ...) that holds one.
* :func:`hash_features` turns the free-form ``state_before`` / ``action_taken`` /
  ``state_after`` / ``metadata`` dicts of an episode into a fixed-length float32 vector with the
  signed hashing trick (Weinberger, Dasgupta, Langford, Smola & Attenberg, 2009, "Feature
  Hashing for Large Scale Multitask Learning", ICML), so episodes without numeric
  ``state_features`` can still be searched by cosine similarity.

Detection is by format only: every detector is a fixed shape (a provider prefix, a length, a
character set, a checksum such as Luhn). Nothing is flagged for looking random in prose. The
patterns follow the named plugins of Yelp's ``detect-secrets`` and the providers' documented
token formats, written here as one compact table.
"""

from __future__ import annotations

import base64
import binascii
import collections
import functools
import hashlib
import hmac
import json
import math
import re
import os
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dyna import _json
from dyna._json import loads_unique
from dyna.errors import ConfigError

__all__ = [
    "AUTH_SCHEMES",
    "DEFAULT_SENSITIVE_KEYS",
    "DETECTORS",
    "PAYMENT_METHOD_KINDS",
    "PERSONAL_KEY_NAMES",
    "PREFIX_KEY_NAMES",
    "REDACTED",
    "SECRET_KEY_NAMES",
    "SECRET_PATTERNS",
    "USER_ID_CUE_KEYS",
    "USER_ID_KEY_NAMES",
    "USER_ID_SHAPE",
    "Detector",
    "check_label",
    "detect",
    "has_secret",
    "hash_features",
    "is_placeholder",
    "is_sensitive_key",
    "keyed_hash",
    "normalise_key",
    "redact",
    "redact_text",
    "scan",
]

REDACTED = "[REDACTED]"
"""The replacement written in place of every redacted value."""

# ============================================================================ key names

SECRET_KEY_NAMES: frozenset[str] = frozenset({
    "password", "passwd", "pwd", "passphrase", "secret", "token", "api_key", "apikey",
    "secret_key", "access_key", "private_key", "client_secret", "access_token",
    "refresh_token", "id_token", "auth_token", "authorization", "credentials", "cookie",
    "set_cookie", "aws_secret_access_key", "session_token", "connection_string",
    "pgpassword", "db_pass", "mysql_pwd",
})
"""Key names of credentials (normalised form). A key matches one when it equals it or ends
with ``_`` + it after :func:`normalise_key`: ``DB_PASSWORD``, ``DJANGO_SECRET_KEY``,
``SLACK_TOKEN``, ``x-api-key``, ``apiKey``, ``ｐａｓｓｗｏｒｄ``, ``pass\\u200bword`` all match;
``token_count``, ``tokenizer``, ``passwordless`` do not. Tokenizer vocabulary entries
(``eos_token``, ``pad_token``, ... :data:`_NOT_SECRET_KEYS`) are excluded. These names also
drive the ``KEY=value`` assignment rule in texts."""

USER_ID_KEY_NAMES: frozenset[str] = frozenset({
    "user_id", "userid", "username", "user_name", "customer_id", "member_id",
})
"""Key names of a person's account identifier (normalised form: ``userId``, ``User-ID`` and
``USER_ID`` give ``user_id``), personal data like a name: ``{"user_id": "mia_li_3668"}`` and
the ``user_id`` argument of a tau-bench tool call are redacted. Matched exactly
(``user_count``, ``user_agent``, ``users``, ``get_user_details`` do not match). Part of
:data:`PERSONAL_KEY_NAMES`."""

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
(``credit_card_number``, ``credit_card_4421486``): its value is redacted. A key that is a
tau-bench payment-method id (``credit_card_4421486``, ``gift_card_5094406``) is itself
personal data since issue 18 (it links to one person's card; it used to be kept as an opaque
id): the ``payment_method_id`` detector replaces it by a keyed hash like any key holding a
secret."""

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
    followed by ``_``.
    """
    key_set = keys if isinstance(keys, frozenset) else frozenset(keys)
    return _key_is_sensitive(str(key), _cached_key_set(key_set))


@functools.lru_cache(maxsize=1 << 14)
def _key_is_sensitive(key: str, key_set: frozenset[str]) -> bool:
    canon = normalise_key(key)
    if canon in key_set:
        return True
    if canon in _NOT_SECRET_KEYS:
        return False
    parts = canon.split("_")
    for i in range(1, len(parts)):
        tail = "_".join(parts[i:])
        if tail in key_set and tail in SECRET_KEY_NAMES:
            return True
        head = "_".join(parts[:i])
        if head in key_set and head in PREFIX_KEY_NAMES:
            return True
    return False


# ============================================================================ placeholders

_PLACEHOLDER = re.compile(r"""(?ix)
    <[^<>]*> | \$\{[^}]*\} | \$\(?[A-Za-z_]\w*\)? | \{\{[^}]*\}\} | \{[A-Za-z_][\w.]*\}
  | %\(\w+\)s | %[A-Z_]+%
  | [x*#.•…-]{3,} | …
  | your[\w\-]* | (?:insert|enter|put)[_\-][\w\-]* | [\w\-]*[_\-]here
  | change[_\-]?me | placeholder | example | sample | dummy | redacted | todo | tbd | none
  | null | nil | true | false | undefined | empty | hidden | masked | secret | password | token
  | \[REDACTED[^\]]*\] | \(redacted\)
""")
_PLAIN_WORD = re.compile(r"[A-Za-z][a-z]*")


def is_placeholder(value: str) -> bool:
    """True for a value that stands in for a secret rather than being one.

    Placeholders: ``<token>``, ``${VAR}``, ``$VAR``, ``{{ var }}``, ``{var}`` (a format
    field), ``%(var)s``, ``%VAR%``,
    runs of ``x``/``*``/``#``/``.``/``-`` (``xxx``, ``****``, ``...``), words starting with
    ``your`` or ``insert_``/``enter_``/``put_`` or ending in ``_here`` (``YOUR_KEY_HERE``),
    ``changeme``, ``example``, ``dummy``, ``null``, ``true``, ``[REDACTED...]`` and the like
    (case-insensitive, whole value). Also a *plain word*: letters only, lower case but for
    the first letter, fewer than 12 characters (``forgotten``, ``patience``, ``identifier``,
    ``Bearer``) — not a secret by this rule, at the price that a weak one-word password such
    as ``letmein`` written as ``password: letmein`` in prose is kept. The rule applies only to
    ``KEY=value`` assignments in text and to URL passwords that are placeholders; a value
    under a sensitive dict key is always redacted.
    """
    v = value.strip()
    if _PLACEHOLDER.fullmatch(v) is not None:
        return True
    return len(v) < 12 and _PLAIN_WORD.fullmatch(v) is not None


# ============================================================================ detectors

@dataclass(frozen=True)
class Detector:
    """One named secret format.

    Attributes
    ----------
    name : str
        Short name reported by :func:`detect`.
    pattern : re.Pattern
        The format. When it has a group named ``secret`` only that group is replaced
        (``sig=[REDACTED]``); else the whole match is.
    description : str
        The format matched, in words.
    validator : callable, optional
        ``validator(secret) -> bool`` run on the matched secret; a match it refuses is kept
        (Luhn for card numbers, base64 ``user:pass`` for Basic credentials, ...).
    """

    name: str
    pattern: re.Pattern[str]
    description: str
    validator: Callable[[str], bool] | None = None


def _luhn_card(text: str) -> bool:
    """13-19 digits (spaces/dashes allowed), a known issuer prefix, and the Luhn checksum."""
    digits = re.sub(r"[ -]", "", text)
    if not 13 <= len(digits) <= 19 or not re.match(
            r"4|5[1-5]|2[2-7]|3[47]|3(?:0[0-5]|[689])|6(?:011|5|4[4-9]|2)|35", digits):
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _b64_decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def _printable_text(raw: bytes | None) -> bool:
    if raw is None:
        return False
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\t\r\n" for c in s)


def _basic_credentials(text: str) -> bool:
    """A digit (the former rule), or base64 of printable ``user:password``."""
    if any(c.isdigit() for c in text):
        return True
    raw = _b64_decode(text.rstrip("="))
    return _printable_text(raw) and b":" in raw


def _has_digit(text: str) -> bool:
    return any(c.isdigit() for c in text)


def _aws_secret(text: str) -> bool:
    """Upper, lower case and a digit, and not base64 of readable text."""
    return (any(c.isupper() for c in text) and any(c.islower() for c in text)
            and _has_digit(text) and not _printable_text(_b64_decode(text)))


def _not_placeholder(text: str) -> bool:
    return not is_placeholder(text)


def _url_password(text: str) -> bool:
    """Any URL password but a placeholder (``${DB_PASS}``, ``<password>``, ``xxx``)."""
    return _PLACEHOLDER.fullmatch(text) is None or text.lower() in {"password", "secret", "token"}


_IMAGE_TLDS = frozenset({"png", "jpg", "jpeg", "gif", "svg", "webp", "ico"})


def _email(text: str) -> bool:
    local, _, domain = text.rpartition("@")
    return local.lower() != "git" and domain.rsplit(".", 1)[-1].lower() not in _IMAGE_TLDS


def _phone_digits(text: str) -> bool:
    return 8 <= sum(c.isdigit() for c in text) <= 15


def _credential_like(text: str) -> bool:
    """A value stated as a credential in prose looks like one: not a placeholder, not a
    path, and not a word form joined by hyphens, dots or underscores with a lower-case word
    of 4+ letters in it (``base64-encoded``, ``sha256-hashed``, ``v2-format``)."""
    if not _not_placeholder(text) or "/" in text or "~" in text or text.startswith("."):
        return False
    parts = re.split(r"[-_.]", text)
    return len(parts) == 1 or not any(len(w) >= 4 and w.isalpha() and w.islower()
                                      for w in parts)


def _d(name: str, pattern: str, description: str, validator=None, flags: int = 0) -> Detector:
    return Detector(name, re.compile(pattern, flags), description, validator)


AUTH_SCHEMES: tuple[str, ...] = (
    "Basic", "Bearer", "Digest", "HOBA", "Mutual", "Negotiate", "NTLM", "OAuth",
    "SCRAM-SHA-1", "SCRAM-SHA-256", "vapid", "AWS4-HMAC-SHA256", "Token", "ApiKey", "Api-Key",
    "Key", "JWT", "SSWS", "Splunk", "GenieKey",
)
"""HTTP authentication schemes whose credentials follow an ``Authorization:`` header (the
IANA registry's, and vendors' ``Token`` (Django REST framework, GitHub), ``ApiKey``
(Elasticsearch), ``SSWS`` (Okta), ``Splunk``, ``GenieKey`` (Opsgenie), ``AWS4-HMAC-SHA256``).
Matched case-insensitively; the scheme word is kept, its credentials are redacted."""

_SCHEME_WORDS = frozenset(w.casefold() for w in AUTH_SCHEMES)
_SCHEME_ALT = "|".join(sorted((re.escape(w) for w in AUTH_SCHEMES), key=len, reverse=True))
_Q = r"(?:\\?[\"'])?"          # an optional quote, maybe escaped (JSON inside a string)


def _header_credentials(text: str) -> bool:
    """Credentials of an ``Authorization:`` header: ``name=value`` parameters (Digest,
    AWS4, OAuth 1.0) or a token of 8+ characters that is neither a placeholder
    (``<token>``, ``YOUR_TOKEN_HERE``, ``{token}``), an already redacted value, nor one
    lower-case word (``Authorization: Bearer authentication``)."""
    if text.startswith(REDACTED[:-1]):
        return False
    if "=" in text.rstrip("="):
        values = re.findall(r"=[ \t]*\\?[\"']?([^\s\"',\\]*)", text)
        return any(v and not is_placeholder(v) and not v.startswith(REDACTED[:-1])
                   for v in values)
    return not is_placeholder(text) and re.fullmatch(r"[a-z]+", text) is None


#: A tau-bench user id: first name, last name (or two), 3-6 digits: mia_li_3668.
USER_ID_SHAPE = r"[a-z]{2,}(?:_[a-z]{2,}){1,2}_\d{3,6}"
_USER_ID_SHAPE = re.compile(USER_ID_SHAPE)
_USER_ID_END = r"(?![\w\-@])"
# The words and characters allowed between a cue and the id: "my user ID is `x`",
# "- **User ID:** x", "(user_id: x)", "with my user id? it's x", "user id, which is 'x'".
_CUE_GAP = (r"(?:[ \t:=,;.?!()*`'\"\u2019\-]|\b(?i:is|was|it's|it\u2019s|its|which|as)\b)"
            r"{0,12}")
# After a strong cue (one naming an id), up to 4 other words may come first: "My user ID
# is already provided, x", "Your user ID (which I already have as x)". A word is letters
# only, so no snake_case name is skipped over as one.
_NEAR_GAP = _CUE_GAP + r"(?:\b[A-Za-z]{1,12}\b" + _CUE_GAP + r"){0,4}"
_USER_ID_CUE = (r"(?i:\b(?:user[ _\-]?id|userid|user[ _\-]?name|customer[ _\-]?id"
                r"|member[ _\-]?id|account[ _\-]?id|passenger[ _\-]?id|(?:my|your)[ \t]+id)\b"
                r"|\((?:with[ \t]+)?id\b)")
# A weak cue (a word for a person or an account, not for an id) only directly before the
# id, separated by white space or one of , : ( = and maybe a quote: "The user, x, is ...",
# "customer x", "passenger: x", "You are 'x'", '{"user": "x"}'.
_USER_ID_WEAK_CUE = (r"(?i:\b(?:user|customer|account|passenger|you[ \t]+are|i[ \t]+am|i'm"
                     r"|i\u2019m)\b)[\"']?(?:[ \t]*[,:(=][ \t]*|[ \t]+)[\"'`]?")
#: Key names whose value, when it has :data:`USER_ID_SHAPE`, is a user id (a cue, as the
#: words of the ``user_id`` detector are in text): :data:`USER_ID_KEY_NAMES` and the words
#: of the weak cues. Only the shape is redacted under these (``{"account": "main"}`` stays).
USER_ID_CUE_KEYS: frozenset[str] = USER_ID_KEY_NAMES | frozenset({
    "account_id", "passenger_id", "user", "customer", "account", "passenger"})

#: The payment-method kinds of the tau-bench airline and retail tools (``source`` of a
#: user's ``payment_methods``); a method's id is the kind, ``_`` and its number.
PAYMENT_METHOD_KINDS: tuple[str, ...] = (
    "credit_card", "gift_card", "certificate", "paypal", "debit_card", "bank_account")
_DOB_CUE = (r"(?i:\b(?:d\.?o\.?b\.?|date[ _\-]of[ _\-]birth|birth[ _\-]?date|birthday"
            r"|born(?:[ \t]+on)?)(?![\w\-]))")
_MONTH = r"(?i:jan|feb|mar|apr|may|jun|jul|aug|sept?|oct|nov|dec)[a-z]*\.?"
_DATE = (r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.]\d{1,2}[/.]\d{2,4}"
         r"|" + _MONTH + r"[ \t]+\d{1,2}(?:st|nd|rd|th)?,?[ \t]+\d{4}"
         r"|\d{1,2}(?:st|nd|rd|th)?[ \t]+" + _MONTH + r",?[ \t]+\d{4}")


_B = r"(?<![A-Za-z0-9])"         # no letter or digit before
_E = r"(?![A-Za-z0-9_\-])"       # no token character after

DETECTORS: tuple[Detector, ...] = (
    _d("pem_private_key",
       r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
       "PEM private key block (RSA, EC, DSA, OPENSSH, ENCRYPTED, PKCS#8), to its END line "
       "or the end of the text", flags=re.DOTALL),
    _d("pgp_private_key",
       r"-----BEGIN PGP PRIVATE KEY BLOCK-----.*?(?:-----END PGP PRIVATE KEY BLOCK-----|\Z)",
       "OpenPGP armored private key block", flags=re.DOTALL),
    _d("url_credentials",
       r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@\"']+:(?P<secret>[^\s/?#@\"']+)@",
       "password of a URL with user info: postgres://user:PASS@host, https://u:PASS@h",
       _url_password),
    _d("slack_webhook",
       r"https?://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
       "Slack incoming webhook URL"),
    _d("discord_webhook",
       r"https?://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_\-]+",
       "Discord webhook URL"),
    _d("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
       "JSON Web Token: three base64url parts, the header starting with '{\"'"),
    _d("bearer_token", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)",
       "HTTP Bearer credentials (RFC 6750 b64token) holding a digit", _has_digit),
    _d("basic_auth", r"(?i)\bbasic\s+(?P<secret>[A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])",
       "HTTP Basic credentials: base64 of user:password (or any b64 token with a digit)",
       _basic_credentials),
    _d("authorization_header",
       r"(?i)\b(?:proxy-)?authorization" + _Q + r"[ \t]*[:=][ \t]*" + _Q
       + r"(?:" + _SCHEME_ALT + r")[ \t]+(?P<secret>(?=[\w\-]+=[^=])[^\r\n]+"
       r"|[A-Za-z0-9\-._~+/]{8,}=*)",
       "credentials of an Authorization / Proxy-Authorization header after any scheme of "
       "AUTH_SCHEMES (Token <hex>, Bearer without a digit, ApiKey, Digest and AWS4 "
       "parameters to the end of the line); placeholders and one lower-case word are kept",
       _header_credentials),
    _d("anthropic_key", _B + r"sk-ant-(?:api|admin)\d\d-[A-Za-z0-9_\-]{20,}",
       "Anthropic API key sk-ant-api03-..."),
    _d("openai_key",
       _B + r"sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z0-9_\-]*[0-9A-Z])[A-Za-z0-9_\-]{16,}",
       "OpenAI-style key sk-..., sk-proj-...: 16+ characters holding a digit or an upper-case "
       "letter (so the all-lower-case sk-learn-compatible-wrapper is not one)"),
    _d("aws_access_key_id", _B + r"(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}" + _E,
       "AWS access key id AKIA/ASIA + 16 upper-case letters or digits"),
    _d("aws_secret_key", r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
       "AWS secret access key: exactly 40 base64 characters with upper, lower case and a "
       "digit that do not decode to readable text (a git SHA is lower-case hex)", _aws_secret),
    _d("github_token", _B + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
       "GitHub token ghp_/gho_/ghu_/ghs_/ghr_ and fine-grained github_pat_"),
    _d("gitlab_token", _B + r"gl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_\-]{20,}",
       "GitLab personal/deploy/runner token glpat-..."),
    _d("slack_token", _B + r"xox[abposre]-[A-Za-z0-9\-]{10,}", "Slack token xoxb-/xoxp-/..."),
    _d("stripe_key", _B + r"(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}",
       "Stripe secret or restricted key sk_live_/rk_live_ (and _test_)"),
    _d("google_api_key", _B + r"AIza[0-9A-Za-z_\-]{35}", "Google API key AIza + 35"),
    _d("google_oauth_secret", _B + r"GOCSPX-[A-Za-z0-9_\-]{20,}",
       "Google OAuth client secret GOCSPX-..."),
    _d("google_oauth_token", _B + r"ya29\.[A-Za-z0-9_\-]{20,}", "Google OAuth access token"),
    _d("azure_connection_string",
       r"(?i)\b(?:AccountKey|SharedAccessKey)\s*=\s*(?P<secret>[A-Za-z0-9+/]{20,}={0,2})",
       "key of an Azure Storage / Service Bus connection string (AccountKey=, SharedAccessKey=)"),
    _d("azure_sas_token", r"(?i)(?:^|[?&;\s\"'])sig=(?P<secret>[A-Za-z0-9%+/_\-]{16,}(?:=|%3D){0,2})",
       "signature of an Azure shared access signature: ...&sig=..."),
    _d("npm_token", _B + r"npm_[A-Za-z0-9]{36}" + _E, "npm access token npm_ + 36"),
    _d("pypi_token", _B + r"pypi-AgE[A-Za-z0-9_\-]{50,}", "PyPI API token pypi-AgE..."),
    _d("huggingface_token", _B + r"hf_[A-Za-z0-9]{30,}" + _E, "Hugging Face token hf_..."),
    _d("twilio_key", _B + r"(?:AC|SK)[0-9a-f]{32}" + _E,
       "Twilio account SID AC + 32 hex / API key SK + 32 hex"),
    _d("sendgrid_key", _B + r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}" + _E,
       "SendGrid API key SG.<22>.<43>"),
    _d("mailgun_key", _B + r"key-[0-9a-zA-Z]{32}" + _E, "Mailgun API key key- + 32"),
    _d("discord_bot_token",
       _B + r"[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}" + _E,
       "Discord bot token <id b64>.<6>.<27+>"),
    _d("telegram_bot_token", r"(?<![\d])\d{8,10}:AA[A-Za-z0-9_\-]{33}" + _E,
       "Telegram bot token <bot id>:AA + 33"),
    _d("http_cookie", r"(?i)\b(?:set-)?cookie[ \t]*:[ \t]*(?P<secret>[^\s\"'][^\r\n\"']*)",
       "value of a Cookie: / Set-Cookie: header, to the end of the line", _not_placeholder),
    _d("credit_card", r"(?<![\d\-])(?:\d[ -]?){12,18}\d(?![\d\-])",
       "payment card number: 13-19 digits, issuer prefix, Luhn checksum", _luhn_card),
    _d("us_ssn", r"(?<![\d\-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d\-])",
       "US social security number AAA-GG-SSSS"),
    _d("email_address",
       r"(?<![\w.%+\-])[A-Za-z0-9][A-Za-z0-9._%+\-]*@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![\w\-])",
       "e-mail address (not git@host, not name@2x.png)", _email),
    _d("phone_number",
       r"(?<![\w+])\+\d{1,3}(?:[ .\-]?\(?\d{1,4}\)?){2,5}(?![\w\-])"
       r"|(?<![\w\-.])(?:\(\d{3}\)\s?|\d{3}[ .\-])\d{3}[ .\-]\d{4}(?![\w\-])",
       "phone number: +<country code> and 8-15 digits, or North American (555) 123-4567 / "
       "555-123-4567", _phone_digits),
    _d("payment_method_id",
       r"(?<![\w\-])(?i:" + "|".join(PAYMENT_METHOD_KINDS) + r")_\d{4,}(?![\w\-])",
       "a payment-method id of the tau-bench shape (credit_card_4421486, gift_card_5094406, "
       "certificate_4856383, paypal_3024827, debit_card_..., bank_account_...: a kind of "
       "PAYMENT_METHOD_KINDS, '_', 4 or more digits; one recorded agent wrote "
       "credit_card_7334) as a whole token, in values, keys and prose: it links to one "
       "person's card, gift card, certificate or account (the number is an id, not a card "
       "number, so the credit_card detector does not see it)"),
    _d("user_id",
       r"(?:" + _USER_ID_CUE + _NEAR_GAP + r"|" + _USER_ID_WEAK_CUE + r")(?P<secret>"
       + USER_ID_SHAPE + r")" + _USER_ID_END,
       "a user id of the tau-bench shape (mia_li_3668) where a cue says it is one: after "
       "user id / user_id / username / customer id / member id / account id / passenger id "
       "/ my id / your id (with punctuation, the words is, was, it's, which, as and up to 4 "
       "other words between: 'My user ID is already provided, x'), '(id: ...)'; or directly "
       "after 'user', 'customer', 'account', 'passenger', 'You are', 'I am', \"I'm\" (white "
       "space or one of , : ( = and a quote between: 'The user, x, is ...'). A snake_case "
       "name with digits and no cue (skill_loop_2024) is not one"),
    _d("date_of_birth",
       _DOB_CUE + r"(?:[ \t:=,;()*`'\"\-]|\b(?i:is|was|remains|of)\b){0,8}(?P<secret>"
       + _DATE + r")(?![\w\-])",
       "a date after DOB / date of birth / birthday / born (on): 1990-04-05, 04/05/1990, "
       "April 5, 1990, 5 April 1990"),
    _d("prose_credential",
       r"(?i)\b(?:password|passphrase|passwd|pwd|secret|api[ _\-]?key|access[ _\-]?key"
       r"|private[ _\-]key|token|credentials?)(?:[ \t]+(?:for|of|to|on)[ \t]+[\w.\-@/]{1,40})?"
       r"(?:[ \t]+(?:is|was|are|reads))?[ \t]+[\"'`]?"
       r"(?P<secret>(?=[^\s\"'`,;)]*\d)(?=[^\s\"'`,;)]*[A-Za-z])"
       r"[^\s\"'`,;)]{7,}[^\s\"'`,;).!?:])",
       "a credential stated in prose: password / passphrase / secret / API key / access key "
       "/ private key / token / credentials (maybe 'for <name>'), then is / was / are or "
       "only white space, then a value of 8+ characters holding a letter and a digit ('the "
       "staging db password is Hunter2Secret', 'api_key a1B2c3d4e5'); 'the password is "
       "stored in the vault' is kept; KEY: value and KEY=value are the assignment rule's; "
       "a path (~/.ssh/id_ed25519) or a hyphenated word form (base64-encoded, v2-format) is "
       "not a credential", _credential_like),
    _d("curl_user_password",
       r"(?i)\bcurl\b[^\r\n|;&]{0,200}?[ \t](?:-u|--user)(?:[ \t]+|=)[\"']?[^\s:\"']+:"
       r"(?P<secret>[^\s\"']{3,})",
       "the password of curl -u / --user USER:PASSWORD (within 200 characters of curl, in the "
       "same command: no | ; & between)", _not_placeholder),
    _d("mysql_password",
       r"\bmysql(?:dump|admin|import|sh)?\b[^\r\n|;&]{0,200}?[ \t]-p"
       r"(?P<secret>[^\s\"'\-][^\s\"']{2,})",
       "the password of mysql / mysqldump / mysqladmin -pPASSWORD (written against the -p; "
       "within 200 characters, in the same command)",
       _not_placeholder),
)
"""The named secret formats, applied in this order by :func:`redact_text`."""

# ============================================================================ prefilters
#
# Running the patterns costs ~30 us on a 30-character text even when none can match (a
# timestamp, a run id: most of what the loops' safety net sees for the first time). Each
# detector has a prefilter (:data:`_PREFILTERS`): a cheap test that is a *necessary
# condition* of its pattern matching somewhere in an ASCII text, so a detector whose
# prefilter is false cannot fire and is not run. Each condition is read off the pattern: a
# literal the pattern cannot match without (for a case-insensitive part, the literal in
# ``text.lower()``: on ASCII text ``(?i)`` folds ASCII letters only), a number of digits
# 0-9 it needs (on ASCII text ``\d`` is [0-9]), a minimum length. A text that is not ASCII
# is scanned by every detector (Unicode case folding and Unicode digits are not reasoned
# about). tests/test_redact_prefilter.py checks, on both corpora and on random texts drawn
# from the detectors' own alphabets, that a prefilter is true wherever its pattern matches.


@dataclass(frozen=True)
class _Prefilter:
    """A necessary condition of one detector's pattern matching an ASCII text ``t``.

    True when ``t`` holds one of ``literals`` (as written) or ``lower`` holds one of
    ``folded`` (``lower`` is ``t.lower()``; with neither given this part holds), and ``t``
    has at least ``digits`` characters 0-9 (``nd``) and ``length`` characters, and ``also``
    (a further necessary condition ``also(t, lower, nd)``) holds.
    """

    literals: tuple[str, ...] = ()
    folded: tuple[str, ...] = ()
    digits: int = 0
    length: int = 0
    also: Callable[[str, str, int], bool] | None = None

    def __call__(self, t: str, low: str, nd: int) -> bool:
        if (self.literals or self.folded) and not (any(map(t.__contains__, self.literals))
                                                   or any(map(low.__contains__, self.folded))):
            return False
        return (nd >= self.digits and len(t) >= self.length
                and (self.also is None or self.also(t, low, nd)))

    def counts_only(self) -> Callable[[str, str, int], bool]:
        """This test for a prefilter without literals, as one quick function."""
        d, n, also = self.digits, self.length, self.also
        if also is None:
            return lambda t, low, nd: nd >= d and len(t) >= n
        return lambda t, low, nd: nd >= d and len(t) >= n and also(t, low, nd)


_P = _Prefilter
_ID_TAIL = re.compile(r"_\d{3}")    # USER_ID_SHAPE ends with _ and 3-6 digits

#: Detector name -> its prefilter: False only where the detector's pattern cannot match the
#: ASCII text. A detector without one is always run.
_PREFILTERS: dict[str, _Prefilter] = {
    "pem_private_key": _P(("-----BEGIN ",), also=lambda t, low, nd: "PRIVATE KEY-----" in t),
    "pgp_private_key": _P(("-----BEGIN PGP PRIVATE KEY BLOCK-----",)),
    "url_credentials": _P(("://",), also=lambda t, low, nd: "@" in t),
    "slack_webhook": _P(("://hooks.slack.com/",)),
    "discord_webhook": _P((".com/api/webhooks/",)),
    "jwt": _P(("eyJ",)),
    "bearer_token": _P(folded=("bearer",)),
    "basic_auth": _P(folded=("basic",)),
    "authorization_header": _P(folded=("authorization",)),
    "anthropic_key": _P(("sk-ant-",)),
    "openai_key": _P(("sk-",)),
    "aws_access_key_id": _P(("AKIA", "ASIA", "ABIA", "ACCA")),
    "aws_secret_key": _P(length=40),
    "github_token": _P(("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    "gitlab_token": _P(("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-")),
    "slack_token": _P(("xox",)),
    "stripe_key": _P(("_live_", "_test_")),
    "google_api_key": _P(("AIza",)),
    "google_oauth_secret": _P(("GOCSPX-",)),
    "google_oauth_token": _P(("ya29.",)),
    "azure_connection_string": _P(folded=("accountkey", "sharedaccesskey")),
    "azure_sas_token": _P(folded=("sig=",)),
    "npm_token": _P(("npm_",)),
    "pypi_token": _P(("pypi-AgE",)),
    "huggingface_token": _P(("hf_",)),
    "twilio_key": _P(("AC", "SK")),
    "sendgrid_key": _P(("SG.",)),
    "mailgun_key": _P(("key-",)),
    # [MNO] + 23..27, '.', 6, '.', 27..40: 59 characters at least
    "discord_bot_token": _P(length=59, also=lambda t, low, nd: "." in t),
    "telegram_bot_token": _P((":AA",)),
    "http_cookie": _P(folded=("cookie",)),
    "credit_card": _P(digits=13),                                      # (\d[ -]?){12,18}\d
    "us_ssn": _P(digits=9, also=lambda t, low, nd: "-" in t),          # \d{3}-\d{2}-\d{4}
    "email_address": _P(("@",), also=lambda t, low, nd: "." in t),     # ...@....[A-Za-z]{2,}
    # +<country code> and digit groups; or (\d{3}) or \d{3}-, \d{3}-, \d{4}: 10 digits
    "phone_number": _P(also=lambda t, low, nd: "+" in t or nd >= 10),
    "payment_method_id": _P(folded=tuple(k.lower() for k in PAYMENT_METHOD_KINDS), digits=4),
    "user_id": _P(also=lambda t, low, nd: "_" in t and _ID_TAIL.search(t) is not None),
    # a cue (d.o.b, dob: "ob" or "o.b"; date of birth, birth date, birthday; born) and a
    # date of 4 digits at least (1/2/90)
    "date_of_birth": _P(folded=("ob", "o.b", "birth", "born"), digits=4),
    # a cue word (password, passphrase and passwd hold "pass"; api key, access key and
    # private key "key"; credentials "credential") and a value holding a digit
    "prose_credential": _P(folded=("pass", "pwd", "secret", "key", "token", "credential"),
                           digits=1, length=12),
    "curl_user_password": _P(folded=("curl",), also=lambda t, low, nd: ":" in t),
    "mysql_password": _P(("mysql",), also=lambda t, low, nd: "-p" in t),
}
del _P


def _hint_pattern(words: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(sorted(map(re.escape, set(words)), key=len, reverse=True)))


#: Every detector as ``(index in DETECTORS, detector)``.
_ALL_RUN = tuple(enumerate(DETECTORS))
# A prefilter with literals is false unless one of them is in the text: one search for all
# of them (case as written, then in the lower-case text) rules those detectors out at once;
# then only the detectors without literals are looked at.
_HINTS = _hint_pattern(x for p in _PREFILTERS.values() for x in p.literals)
_FOLDED_HINTS = _hint_pattern(x for p in _PREFILTERS.values() for x in p.folded)
_GATED = tuple((i, d, _PREFILTERS.get(d.name)) for i, d in _ALL_RUN)
_UNHINTED = tuple((i, d, p if p is None else p.counts_only()) for i, d, p in _GATED
                  if p is None or not (p.literals or p.folded))
_DIGITS = b"0123456789"


def _to_run(text: str) -> Sequence[tuple[int, Detector]]:
    """The detectors to run on ``text``, in order, as ``(index, detector)``: on an ASCII
    text those whose prefilter passes, on any other text all."""
    if not text.isascii():
        return _ALL_RUN
    low = text.lower()
    nd = len(text) - len(text.encode("ascii").translate(None, _DIGITS))
    pool = (_GATED if _HINTS.search(text) is not None
            or _FOLDED_HINTS.search(low) is not None else _UNHINTED)
    return [(i, d) for i, d, p in pool if p is None or p(text, low, nd)]


# The assignment rule fires only on a key that is sensitive by the SECRET_KEY_NAMES rule:
# its normal form (:func:`normalise_key`; on ASCII: camelCase split, lower case, separators
# made '_') equals or ends with one of those names, so it ends with the name's last word,
# which the key (a part of the text) holds as written, in some case. Words holding another
# of these words are implied by it ("password" by "pass").
_LAST_WORDS = {n.rsplit("_", 1)[-1] for n in SECRET_KEY_NAMES}
_ASSIGNMENT_WORDS = tuple(sorted(w for w in _LAST_WORDS
                                 if not any(o != w and o in w for o in _LAST_WORDS)))


def _may_assign(text: str) -> bool:
    """False only where the ``KEY=value`` rule cannot fire in the ASCII ``text``: no ``:``
    or ``=``, or no last word of a credential key name in any case."""
    if ":" not in text and "=" not in text:
        return False
    low = text.lower()
    return any(w in low for w in _ASSIGNMENT_WORDS)

# ``KEY=value`` / ``key: value`` in text. Only key and operator are consumed, so the value of
# one assignment can itself hold the next ("NOTE=DB_PASSWORD=x"). Up to three words form the
# key ("my new password: ..."); it is sensitive by the SECRET_KEY_NAMES rule.
_KEY_CHARS = r"[\w.\-\u200b-\u200d\u2060\ufeff]"
_ASSIGNMENT = re.compile(
    r"(?<![\w.\-\u200b-\u200d\u2060\ufeff])(?P<key>" + _KEY_CHARS + r"+(?: " + _KEY_CHARS
    + r"+){0,2})[\"']?[ \t]*(?::|=|：|＝)[ \t]*")
# An unquoted value runs to white space or a quote; a ",", ";" or "&" ends it only where
# another ``key=`` follows (a query string, a list of assignments), and trailing sentence
# punctuation is dropped: "Password: Tr0ub4dor&3" is one value, "a=1&token=x&b=2" three.
_UNQUOTED_VALUE = re.compile(r"[^\s\"']+")
_NEXT_ASSIGNMENT = re.compile(r"[,;&](?=[\w.\-]+=)")
# After a scheme word (AUTH_SCHEMES) as the value, the credential is the next run.
_SCHEME_CREDENTIAL = re.compile(r"[ \t]+([^\s\"']+)")
_SCHEMED_VALUE = re.compile(r"([\w\-]+)[ \t]+(\S.*)")
ASSIGNMENT_DETECTOR = "sensitive_assignment"
"""Name :func:`detect` reports for a ``KEY=value`` assignment with a sensitive key."""

USER_ID_DETECTOR = "user_id"
"""Name of the detector whose catches :func:`redact` also redacts elsewhere in the object."""

_DOB_KEY_NAMES = frozenset({"dob", "date_of_birth", "birth_date", "birthdate", "birthday"})
_DATE_VALUE = re.compile(r"(?:" + _DATE + r")")


def _keyed_catch(key: object, value: object) -> str | None:
    """The cue detector a mapping entry fires as JSON text would (``"user_id": "mia_li_3668"``,
    ``"dob": "1990-04-05"``): its name when the key is such a cue and the value has the
    detector's shape, else None. So parsed JSON, and redaction with no key names, catch what
    the detectors catch in the same text unparsed."""
    if not isinstance(value, str) or not isinstance(key, str) or len(value) < 6:
        return None
    canon = normalise_key(key)
    if canon in USER_ID_CUE_KEYS and _USER_ID_SHAPE.fullmatch(value):
        return USER_ID_DETECTOR
    if canon in _DOB_KEY_NAMES and _DATE_VALUE.fullmatch(value.strip()):
        return "date_of_birth"
    return None


SECRET_PATTERNS: tuple[re.Pattern[str], ...] = tuple(d.pattern for d in DETECTORS)
"""The compiled patterns of :data:`DETECTORS` (kept for callers of the former API)."""

_SECRET_KEY_SET = SECRET_KEY_NAMES


def _assignments(text: str, out: list[str] | None) -> str:
    pieces: list[str] = []
    pos = 0
    found = False
    for m in _ASSIGNMENT.finditer(text):
        start = m.end()
        if start < pos:
            continue
        if not _key_is_sensitive(m.group("key"), _SECRET_KEY_SET):
            continue
        if start < len(text) and text[start] in "\"'":
            q = text[start]
            end = text.find(q, start + 1)
            nl = text.find("\n", start + 1)
            if end < 0 or (0 <= nl < end):
                continue
            v0, v1 = start + 1, end
            sm = _SCHEMED_VALUE.fullmatch(text, v0, v1)
            if sm is not None and sm.group(1).casefold() in _SCHEME_WORDS:
                if not _header_credentials(sm.group(2)):  # "Token {token}", "Bearer <t>"
                    continue
                v0 = sm.start(2)
        else:
            vm = _UNQUOTED_VALUE.match(text, start)
            if vm is None:
                continue
            v0, v1 = vm.span()
            if text[v0:v1].casefold() in _SCHEME_WORDS:  # "auth_token: Token 9944b0..."
                vm = _SCHEME_CREDENTIAL.match(text, v1)
                if vm is None or not _header_credentials(vm.group(1)):
                    continue
                v0, v1 = vm.span(1)
            cut = _NEXT_ASSIGNMENT.search(text, v0, v1)
            if cut is not None:
                v1 = cut.start()
            while v1 > v0 and text[v1 - 1] in ",;.":
                v1 -= 1
        value = text[v0:v1]
        if len(value) < 4 or is_placeholder(value) or value.startswith(REDACTED[:-1]):
            continue
        pieces.append(text[pos:v0])
        pieces.append(REDACTED)
        pos = v1
        found = True
    if not found:
        return text
    if out is not None:
        out.append(ASSIGNMENT_DETECTOR)
    pieces.append(text[pos:])
    return "".join(pieces)


def _scan_text(text: str, out: list[str] | None, learned: set[str] | None = None) -> str:
    """Redact ``text`` with every detector and the assignment rule; append names fired; add
    the user ids the ``user_id`` detector caught to ``learned``."""
    if len(text) < 6:
        return text
    todo = _to_run(text)
    j = 0
    while j < len(todo):
        ix, det = todo[j]
        j += 1
        pattern = det.pattern
        if pattern.search(text) is None:
            continue
        grouped = "secret" in pattern.groupindex
        fired = False

        def repl(m: re.Match[str], det: Detector = det, grouped: bool = grouped) -> str:
            nonlocal fired
            secret = m.group("secret") if grouped else m.group(0)
            if det.validator is not None and not det.validator(secret):
                return m.group(0)
            fired = True
            if learned is not None and det.name == USER_ID_DETECTOR:
                learned.add(secret)
            if not grouped:
                return REDACTED
            s, e = m.span("secret")
            whole = m.group(0)
            return whole[: s - m.start()] + REDACTED + whole[e - m.start():]

        new = pattern.sub(repl, text)
        if fired:
            text = new
            if out is not None:
                out.append(det.name)
            # the next detectors see the redacted text: their prefilters too
            todo, j = [e for e in _to_run(text) if e[0] > ix], 0
    if text.isascii() and not _may_assign(text):
        return text
    return _assignments(text, out)


def redact_text(text: str) -> str:
    """Replace every secret-looking substring of ``text`` with ``"[REDACTED]"``.

    Applies the named :data:`DETECTORS` in order (a detector with a ``secret`` group replaces
    only that group: ``postgres://u:[REDACTED]@host``), then the assignment rule: in
    ``KEY=value``, ``key: value``, ``"key": "value"`` (also ``：``/``＝``), where the key
    normalised by :func:`normalise_key` is a credential name (:data:`SECRET_KEY_NAMES`, by
    suffix: ``DB_PASSWORD``, ``DJANGO_SECRET_KEY``, ``SLACK_TOKEN``, ``x-api-key``), the value
    (quoted: to the closing quote; unquoted: to white space or one of ``"',;&``) is replaced
    unless it is shorter than 4 characters or :func:`is_placeholder` (``YOUR_KEY_HERE``,
    ``<token>``, ``${VAR}``, a plain word such as ``forgotten``). Personal key names (``name:``)
    are not used on prose; embedded JSON is handled by :func:`redact`.

    Parameters
    ----------
    text : str
        Any string value.

    Returns
    -------
    str
        ``text`` itself when nothing matched, else a new string with each match replaced.
    """
    return _scan_text(text, None)


def detect(text: str) -> list[str]:
    """Names of the detectors that fire in ``text``, in :data:`DETECTORS` order, each once.

    ``"sensitive_assignment"`` (:data:`ASSIGNMENT_DETECTOR`) names the ``KEY=value`` rule.
    Detectors run as :func:`redact_text` runs them, each on the text the previous ones left,
    so one secret is normally counted once. ``"[REDACTED]"`` markers never fire.
    """
    if len(text) < 6:   # _scan_text looks at nothing shorter
        return []
    if len(text) > DETECT_CACHE_MAX_CHARS:
        return list(_detect_uncached(text))
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    got = _DETECT_CACHE.get(digest)
    if got is None:
        got = _detect_uncached(text)
        if len(_DETECT_CACHE) >= DETECT_CACHE_SIZE:
            try:
                _DETECT_CACHE.pop(next(iter(_DETECT_CACHE)))   # oldest first
            except (KeyError, StopIteration, RuntimeError):    # another thread got there
                pass
        _DETECT_CACHE[digest] = got
    return list(got)


#: :func:`detect` remembers the detector names of this many texts (the loops' safety net
#: scans the same skill bodies and facts on every write) ...
DETECT_CACHE_SIZE = 16384
#: ... of at most this many characters each; keyed by a 16-byte BLAKE2b digest, so the
#: cache holds no text (no secret stays referenced by it) and at most ~1 MB.
DETECT_CACHE_MAX_CHARS = 4096
_DETECT_CACHE: dict[bytes, tuple[str, ...]] = {}


def _detect_uncached(text: str) -> tuple[str, ...]:
    names: list[str] = []
    _scan_text(text, names)
    return tuple(dict.fromkeys(names))


def has_secret(text: str) -> bool:
    """True when some detector or the assignment rule fires in ``text`` (:func:`detect`)."""
    return bool(detect(text))


# ============================================================================ keyed hashes

#: Environment variable holding the HMAC key of :func:`keyed_hash` (any string).
HMAC_KEY_ENV = "DYNA_REDACT_KEY"
#: The key used when that variable is unset: public, so results are the same in every
#: process, on every backend (same seed, same result).
DEFAULT_HMAC_KEY = b"dyna-redact-v1"


def _default_hmac_key() -> bytes:
    value = os.environ.get(HMAC_KEY_ENV)
    return value.encode("utf-8") if value else DEFAULT_HMAC_KEY


def keyed_hash(text: str, hmac_key: bytes | None = None, digits: int = 12) -> str:
    """First ``digits`` hex digits of HMAC-SHA256(``hmac_key``, UTF-8 of ``text``).

    Used in ``"[REDACTED:<hash>]"`` for dict keys that hold a secret: two different keys
    never collide (the name widens on a collision) and no value is lost. The hash is not
    reversible, and it is deterministic, so the same input gives the same stored text in
    every process and on every backend. The default HMAC key comes from the environment
    variable ``DYNA_REDACT_KEY``, else the public :data:`DEFAULT_HMAC_KEY`: with the public
    key someone who can guess a low-entropy secret could confirm the guess, so set
    ``DYNA_REDACT_KEY`` (kept out of files) where that matters; a high-entropy secret (an
    API key) cannot be guessed either way.
    """
    key = _default_hmac_key() if hmac_key is None else hmac_key
    if isinstance(key, str):
        key = key.encode("utf-8")
    raw = text.encode("utf-8", "surrogatepass")
    return hmac.new(key, raw, hashlib.sha256).hexdigest()[:digits]


def _secret_key_name(key: str, hmac_key, taken: dict[str, str]) -> str:
    for digits in range(12, 65, 4):
        name = f"[REDACTED:{keyed_hash(key, hmac_key, digits)}]"
        if taken.setdefault(name, key) == key:
            return name
    raise AssertionError("HMAC-SHA256 collision over 256 bits")  # pragma: no cover


# ============================================================================ redact

def _key_set(keys: Iterable[str]) -> frozenset[str]:
    if isinstance(keys, str):
        raise ConfigError("keys", keys, "must be a collection of key names, not one string")
    return frozenset(normalise_key(k) for k in keys)


@functools.lru_cache(maxsize=64)
def _cached_key_set(keys: frozenset[str]) -> frozenset[str]:
    return _key_set(keys)


def redact(obj, keys: Iterable[str] = DEFAULT_SENSITIVE_KEYS, *, values: bool = True,
           hmac_key: bytes | None = None):
    """Return a redacted deep copy of a JSON-like object; the input is never mutated.

    Parameters
    ----------
    obj : object
        A JSON-like value: dicts (any mapping), lists, tuples, strings, numbers, None. Other
        objects are returned unchanged (not copied).
    keys : iterable of str
        Sensitive key names. A mapping entry is redacted when :func:`is_sensitive_key` says
        so: its key, normalised (:func:`normalise_key`), equals one of these names, or ends
        with ``_`` + one that is a credential name (``DB_PASSWORD`` under ``password``), or
        starts with a prefix family (``credit_card_4421486`` under ``credit_card``). So
        ``"API-KEY"`` and ``"apiKey"`` match ``api_key`` but ``"tokenizer"`` does not match
        ``token``. Default :data:`DEFAULT_SENSITIVE_KEYS`.
    values : bool
        Also (default True): redact secret-looking substrings of string values
        (:func:`redact_text`); parse a string holding a JSON object or array, redact it with
        ``keys`` and serialise it again (``json.dumps``, non-ASCII kept; the same string when
        nothing changed); replace a string dict key in which a detector fires by
        ``"[REDACTED:<hash>]"`` (:func:`keyed_hash`; distinct keys of one mapping get
        distinct names, its value is kept and redacted like any other); redact an entry
        whose key is a cue for its value's shape (a user-id key of :data:`USER_ID_CUE_KEYS`
        holding an id of :data:`USER_ID_SHAPE`, a date-of-birth key holding a date), as the
        detectors do in the same JSON text, whatever ``keys`` say; and redact every user id
        so found in ``obj`` (by such a key or by the ``user_id`` cue detector) wherever else
        it occurs in ``obj``: in every string, dict key and embedded JSON, as a whole word.
        With False only sensitive keys are redacted.
    hmac_key : bytes, optional
        Key of the keyed hash of secret dict keys; default :func:`keyed_hash`'s
        (``DYNA_REDACT_KEY``, else :data:`DEFAULT_HMAC_KEY`).

    Returns
    -------
    object
        New containers (dicts become ``dict``, lists stay lists, tuples stay tuples) in which
        the value of every sensitive key, whatever its type, is ``"[REDACTED]"``.

    Raises
    ------
    ConfigError
        If ``keys`` is a single string.
    """
    key_set = (_cached_key_set(keys) if isinstance(keys, frozenset) else _key_set(keys))
    if (values and type(obj) is str and len(obj) <= DETECT_CACHE_MAX_CHARS
            and _embedded_json(obj) is None and not detect(obj)):
        return obj   # a plain text no detector fires in: nothing to redact or learn
    if values and type(obj) is dict and _plain_flat(obj, key_set):
        return dict(obj)   # what _redact builds for it: the same entries, nothing learned
    learned: set[str] | None = set() if values else None
    out = _redact(obj, key_set, values, hmac_key, learned)
    if learned:
        ids = "|".join(sorted(map(re.escape, learned), key=len, reverse=True))
        out = _forget(out, re.compile(r"(?<![\w\-])(?:" + ids + r")" + _USER_ID_END), hmac_key)
    return out


def _plain_flat(obj: dict, key_set: frozenset[str]) -> bool:
    """True when ``obj`` maps strings to strings and :func:`_redact` (``values`` on) would
    change no entry and learn no user id: no key is sensitive (``key_set``) or holds a
    secret, no entry is a cue catch (:func:`_keyed_catch`), and no value holds JSON or
    fires a detector (a value under 6 characters fires none, and its JSON, if any, comes
    back unchanged: ``_redact_string`` returns the text when nothing in it changed). A
    tool call's arguments (``{"value": "val_1"}``) are such a mapping."""
    for k, v in obj.items():
        if type(k) is not str or type(v) is not str:
            return False
        if _key_is_sensitive(k, key_set) or (len(k) >= 6 and _key_has_secret(k)):
            return False
        if len(v) >= 6 and (_keyed_catch(k, v) is not None or _embedded_json(v) is not None
                            or detect(v)):
            return False
    return True


def _forget(obj, pattern: re.Pattern[str], hmac_key):
    """``obj`` with every match of ``pattern`` (user ids learned by :func:`redact`) redacted:
    in strings and dict keys (keyed hashes, so two keys never merge), JSON embedded in a
    string parsed and treated the same way."""
    if isinstance(obj, str):
        if pattern.search(obj) is None:
            return obj
        parsed = _embedded_json(obj)
        if parsed is not None:
            return json.dumps(_forget(parsed, pattern, hmac_key), ensure_ascii=False)
        return pattern.sub(REDACTED, obj)
    if isinstance(obj, Mapping):
        out = {}
        taken = {k: k for k in obj if isinstance(k, str)}
        for k, v in obj.items():
            if isinstance(k, str) and pattern.search(k):
                del taken[k]
                k = _secret_key_name(k, hmac_key, taken)
            out[k] = _forget(v, pattern, hmac_key)
        return out
    if isinstance(obj, list):
        return [_forget(v, pattern, hmac_key) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_forget(v, pattern, hmac_key) for v in obj)
    return obj


def _embedded_json(text: str):
    """The dict or list a string holds as JSON text, else None."""
    c = text[:1]
    if c and c not in "{[" and not c.isspace():
        return None   # as below: strip() keeps this first character, which opens no JSON
    s = text.strip()
    if s[:1] in "{[" and s[-1:] in "}]" and len(s) >= 2:
        try:
            parsed = loads_unique(s)
        except (ValueError, RecursionError):
            # too deep for the decoder, or an object naming a key twice (whose parsed copy
            # would drop a value): read as the text it is, every value scanned
            return None
        if isinstance(parsed, (dict, list)):
            return parsed
    return None


def _redact_string(text: str, key_set: frozenset[str], hmac_key,
                   learned: set[str] | None = None) -> str:
    parsed = _embedded_json(text)
    if parsed is not None:
        try:
            out = _redact(parsed, key_set, True, hmac_key, learned)
            return text if out == parsed else json.dumps(out, ensure_ascii=False)
        except RecursionError:
            pass   # nested deeper than the walk goes: redacted below as the text it is
    if len(text) <= DETECT_CACHE_MAX_CHARS and not detect(text):
        # no detector fires (remembered by digest): _scan_text would return ``text``
        # unchanged and learn no user id; the loops redact the same tool outputs and
        # task texts on every episode
        return text
    return _scan_text(text, None, learned)


@functools.lru_cache(maxsize=1 << 12)
def _key_has_secret(key: str) -> bool:
    # dict keys repeat across episodes: cached (the cache holds key names, as
    # _key_is_sensitive's does)
    return bool(detect(key))


@functools.lru_cache(maxsize=1 << 12)
def _key_detect(key: str) -> tuple[str, ...]:
    # :func:`detect` of a dict key: keys are schema names that repeat on every record
    # (cached by name, as _key_has_secret is)
    return tuple(detect(key))


@functools.lru_cache(maxsize=1 << 12)
def _key_scan(key: str) -> tuple[tuple[str, ...], bool]:
    # what :func:`scan` needs of a dict key, cached by name: its detect() names, and
    # whether it is a cue key at all (else _keyed_catch is None for every value)
    canon = normalise_key(key)
    return _key_detect(key), canon in USER_ID_CUE_KEYS or canon in _DOB_KEY_NAMES


def _redact(obj, key_set: frozenset[str], values: bool, hmac_key=None,
            learned: set[str] | None = None):
    if isinstance(obj, str):
        return _redact_string(obj, key_set, hmac_key, learned) if values else obj
    if isinstance(obj, Mapping):
        out = {}
        taken: dict[str, str] = {}
        for k, v in obj.items():
            sensitive = _key_is_sensitive(str(k), key_set)
            catch = _keyed_catch(k, v) if values else None
            if catch is not None:  # as the detectors would catch it in the JSON text
                sensitive = True
                if catch == USER_ID_DETECTOR and learned is not None:
                    learned.add(v)
            if values and isinstance(k, str) and len(k) >= 6 and _key_has_secret(k):
                k = _secret_key_name(k, hmac_key, taken)
            out[k] = REDACTED if sensitive else _redact(v, key_set, values, hmac_key, learned)
        return out
    if isinstance(obj, list):
        return [_redact(v, key_set, values, hmac_key, learned) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_redact(v, key_set, values, hmac_key, learned) for v in obj)
    return obj


#: Exact types that hold no text (:func:`scan` passes over them without the checks).
_SCALAR_TYPES = frozenset({int, float, bool, type(None)})


def scan(obj) -> collections.Counter:
    """Count detector catches over a JSON-like object: string values, string dict keys and
    JSON embedded in strings, per detector name (:func:`detect`); an entry whose key is a cue
    (``"user_id": "mia_li_3668"``, ``"dob": "1990-04-05"``) counts as its detector's catch."""
    counts: collections.Counter = collections.Counter()
    _scan_walk(obj, counts)
    return counts


# module-level, not closures inside scan(): a closure that calls itself is a reference
# cycle, left for the cyclic garbage collector after every scan (the loops scan on every
# write)
def _scan_text_of(o: str, counts) -> None:
    if len(o) < 6:
        # nothing to count: detect() looks at no text this short, and JSON this short
        # holds no mapping (``{"":0}`` is 6 characters) and only strings detect() skips
        return
    if o in _CLEAN_SHORT:
        return
    parsed = _embedded_json(o)
    if parsed is not None:
        sub = _Found()
        try:
            _scan_walk(parsed, sub)
        except RecursionError:
            pass   # nested deeper than the walk goes: scanned below as the text it is
        else:
            counts.update(sub)
            return
    found = detect(o)
    if found:
        counts.update(found)
    elif len(o) <= CLEAN_SHORT_MAX_CHARS and type(o) is str:
        if len(_CLEAN_SHORT) >= CLEAN_SHORT_SIZE:
            _CLEAN_SHORT.clear()
        _CLEAN_SHORT[o] = None


#: :func:`scan` remembers short texts in which nothing was found (labels, names, run ids,
#: provenance tags and record fields repeat on every write of the loops): at most this
#: many ...
CLEAN_SHORT_SIZE = 4096
#: ... of at most this many characters. Only texts no detector catches are held (what the
#: stores write out as they are); a text with a catch is never kept (:func:`detect`'s
#: cache holds digests, not texts).
CLEAN_SHORT_MAX_CHARS = 64
_CLEAN_SHORT: dict[str, None] = {}


def known_clean(text) -> bool:
    """True when :func:`scan_found` of a record (a dict or list) holding the string
    ``text`` as a value would not run a detector on it: a text under 6 characters (the
    walk skips those), or a short one it found nothing in before (its memo). False says
    only "not known", never "holds a secret"."""
    return type(text) is str and (len(text) < 6 or text in _CLEAN_SHORT)


class _Found(list):
    """The detector names :func:`_scan_walk` finds, as a list (``update`` extends it):
    what :func:`scan_found` collects without building a Counter."""

    __slots__ = ()
    update = list.extend


def scan_found(obj) -> list[str]:
    """The catches :func:`scan` counts, as a list of detector names (one per catch, in
    the order found): ``collections.Counter(scan_found(obj)) == scan(obj)``; empty when
    nothing is found."""
    found = _Found()
    _scan_walk(obj, found)
    return found


def _scan_walk(o, counts) -> None:
    t = type(o)
    if t in _SCALAR_TYPES:   # nothing to scan (the checks below, made quick)
        return
    if t is str or (t is not dict and t is not list and t is not tuple
                    and isinstance(o, str)):
        _scan_text_of(o, counts)
    elif t is dict or (t is not list and t is not tuple and isinstance(o, Mapping)):
        for k, v in o.items():
            if isinstance(k, str):   # (_keyed_catch is None for any other key)
                found, cue = _key_scan(k)
                if found:
                    counts.update(found)
                if cue:
                    catch = _keyed_catch(k, v)
                    if catch is not None:
                        counts.update((catch,))
                        continue
            # (_scan_text_of's first checks without the call: most values of a record are
            # short or seen before; one frame per level, as deep as before)
            if type(v) is str:
                if len(v) >= 6 and v not in _CLEAN_SHORT:
                    _scan_text_of(v, counts)
            elif type(v) not in _SCALAR_TYPES:
                _scan_walk(v, counts)
    elif t is list or t is tuple or isinstance(o, (list, tuple)):
        for v in o:
            if type(v) is str:
                if len(v) >= 6 and v not in _CLEAN_SHORT:
                    _scan_text_of(v, counts)
            elif type(v) not in _SCALAR_TYPES:
                _scan_walk(v, counts)


def check_label(field: str, value):
    """Return ``value`` if the label field holds no secret, else raise :class:`ConfigError`.

    Labels (``run_id``, ``task_type``, ``variant``, ``tenant``, ...) group results; redacting
    one would merge every label holding a secret into one ``"[REDACTED]"`` bucket, so a label
    with a secret or personal datum (any :func:`detect` name) is refused. The error names the
    field and carries the redacted value, never the secret itself. None passes.

    Raises
    ------
    ConfigError
        ``field`` named, value redacted, reason listing the detectors that fired.
    """
    if value is None:
        return value
    text = value if isinstance(value, str) else str(value)
    names = detect(text)
    if names:
        raise ConfigError(field, redact_text(text),
                          "a label must not hold a secret or personal data (detected: "
                          + ", ".join(names) + "); a redacted label would merge buckets")
    return value


# --------------------------------------------------------------------------- feature hashing

@functools.lru_cache(maxsize=1 << 16)
def _token_hash(token: str) -> int:
    """Stable 64-bit hash of a token (BLAKE2b, 8-byte digest, little endian)."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(),
                          "little")


def _leaves(value, path: str, out: list):
    """Append ``(path, value)`` for every leaf of a JSON-like value, depth first."""
    if isinstance(value, Mapping):
        for k in sorted(value, key=str):
            _leaves(value[k], f"{path}.{k}", out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _leaves(v, f"{path}[{i}]", out)
    elif isinstance(value, np.ndarray):
        _leaves(value.tolist(), path, out)
    else:
        out.append((path, value))


def hash_features(dicts: Mapping[str, object], dim: int) -> np.ndarray:
    """Signed feature hashing of free-form episode dicts into a unit vector.

    Every leaf of every dict contributes to one of ``dim`` buckets chosen by a stable 64-bit
    hash, with a sign from an independent bit of the same hash (the signed hashing trick of
    Weinberger et al. 2009, which keeps inner products unbiased in expectation):

    * a numeric leaf (int or float, not bool, finite) at path ``p`` (e.g.
      ``"state_before.pos[0]"``) adds ``sign(h(p)) * sign(v) * log1p(|v|)`` to bucket
      ``h(p) mod dim``. The ``log1p`` squashing (our choice, not in the paper) keeps one large
      number such as a timestamp from drowning every other feature;
    * any other leaf (string, bool, None, NaN or inf) is a token ``"p=value"`` adding
      ``sign(h(token))`` to bucket ``h(token) mod dim``.

    ``h`` is BLAKE2b with an 8-byte digest of the UTF-8 path or token, so features are the same
    in every process and on every machine (Python's ``hash()`` is salted per process and never
    used). Dict keys are visited in sorted order and list items by position. The result is L2
    normalised; with no leaves, or if everything cancels, it is the zero vector.

    Parameters
    ----------
    dicts : mapping of str to object
        Field name to value, normally ``{"state_before": ..., "action_taken": ...,
        "state_after": ..., "metadata": ...}``; None values are skipped. The field name
        prefixes every path, so the same key in different fields hashes differently.
    dim : int
        Number of buckets d (>= 1).

    Returns
    -------
    numpy.ndarray
        float32, shape ``(dim,)``, unit L2 norm or all zeros.

    Raises
    ------
    ConfigError
        If ``dim`` is not a positive integer or ``dicts`` is not a mapping.
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ConfigError("dim", dim, "must be a positive integer")
    if not isinstance(dicts, Mapping):
        raise ConfigError("dicts", type(dicts).__name__, "must be a mapping of field name to dict")
    leaves: list = []
    for field in sorted(dicts, key=str):
        value = dicts[field]
        if value is not None:
            _leaves(value, str(field), leaves)
    acc = np.zeros(int(dim), dtype=np.float64)
    sign_bit = 1 << 63
    for path, value in leaves:
        if (isinstance(value, (int, float, np.integer, np.floating))
                and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)):
            h = _token_hash(path)
            v = math.copysign(math.log1p(abs(float(value))), float(value))
        else:
            h = _token_hash(f"{path}={value}")
            v = 1.0
        acc[h % dim] += -v if h & sign_bit else v
    norm = math.sqrt(float(acc @ acc))
    if norm > 0.0:
        acc /= norm
    return acc.astype(np.float32)


# a repeated JSON key is shown redacted in its error message (dyna._json cannot import us)
_json.show_key = redact_text
