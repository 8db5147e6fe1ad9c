"""The named formats of secrets and personal data that the redactor finds in text.

Detection is by format only: every detector is a fixed shape (a provider prefix, a length, a
character set, a checksum such as Luhn). Nothing is flagged for looking random in prose. The
patterns follow the named plugins of Yelp's ``detect-secrets`` and the providers' documented
token formats, written here as one compact table (:data:`DETECTORS`), with a *prefilter* per
detector (:data:`PREFILTERS`): a cheap necessary condition of its pattern matching, so that a
detector that cannot fire is not run. A :class:`KeyedCue` catches in a parsed mapping what a
detector catches in the same JSON text (``"dob": "1990-04-05"``).

These are general formats. A dataset's own formats (ids of a benchmark's users, say) are
added by the code that reads that dataset (:meth:`dyna.redact.Formats.extended`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass

from dyna.redact.keys import REDACTED
from dyna.redact.passwords import CLAUSE_END, PROSE_PASSWORD_WORDS, one_word_password

__all__ = ["AUTH_SCHEMES", "DETECTORS", "DOB_CUE", "DOB_KEY_NAMES", "Detector", "KeyedCue",
           "PREFILTERS", "Prefilter", "SCHEME_WORDS", "header_credentials", "iban_valid",
           "is_placeholder", "plain_password"]

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
    ``Bearer``) — not a secret by this rule, except under a password key where the words
    around it make it one (:func:`plain_password`, :mod:`dyna.redact.passwords`:
    ``password: letmein``). The rule applies only to ``KEY=value`` assignments in text and
    to URL passwords that are placeholders; a value under a sensitive dict key is always
    redacted.
    """
    v = value.strip()
    if _PLACEHOLDER.fullmatch(v) is not None:
        return True
    return len(v) < 12 and _PLAIN_WORD.fullmatch(v) is not None


def plain_password(word: str) -> bool:
    """True when ``word``, stated as a password (after ``password is``, ``pw:``, ``DB_PW=``),
    is one: not a placeholder word (``example``, ``none``, ``changeme``, ``<pw>``), and a
    one-word password by :func:`dyna.redact.passwords.one_word_password` (letters only, not
    a word that describes a password such as ``required`` or ``stored``)."""
    return _PLACEHOLDER.fullmatch(word.strip()) is None and one_word_password(word)


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
    """A digit, or base64 of printable ``user:password``."""
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


# IBAN lengths by country (ISO 13616 registry, the countries most often met).
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AT": 20, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29, "CH": 21,
    "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "EE": 20, "ES": 24, "FI": 18, "FO": 18, "FR": 27,
    "GB": 22, "GI": 23, "GL": 18, "GR": 27, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LI": 21, "LT": 20, "LU": 20, "LV": 21,
    "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SE": 24, "SI": 19,
    "SK": 24, "SM": 27, "TN": 24, "TR": 26, "UA": 29, "VG": 24, "XK": 20,
}


def iban_valid(text: str) -> bool:
    """An IBAN: a country of the registry, that country's length and the ISO 7064 mod-97
    check (a random ``AB12...`` id passes the length and the check 1 time in 97 at most, and
    only for the countries listed)."""
    s = re.sub(r"[ \-]", "", text).upper()
    if _IBAN_LENGTHS.get(s[:2]) != len(s):
        return False
    return int("".join(str(int(c, 36)) for c in s[4:] + s[:4])) % 97 == 1


def _password_words(text: str) -> bool:
    """Mixed case inside the value (a capital after a lower-case letter) or three or more
    hyphen-joined parts, and not a placeholder."""
    if not _not_placeholder(text):
        return False
    return re.search(r"[a-z][A-Z]", text) is not None or len(text.split("-")) >= 3


def _not_word_name(text: str) -> bool:
    """Not a name of two or more hyphen-joined lower-case words of 4+ letters."""
    return sum(len(p) >= 4 and p.isalpha() and p.islower() for p in text.split("-")) < 2


def _cookie_value(text: str) -> bool:
    """``name=value`` pairs, or one token without white space; not a placeholder."""
    return _not_placeholder(text) and ("=" in text or not any(c.isspace() for c in text.strip()))


# Fixed-width look-behinds: an order, invoice, tracking or reference number right before.
_NOT_AFTER_ID_WORD = "".join(
    f"(?<!(?i:{w}){sep})" for w in ("order", "invoice", "tracking", "ref")
    for sep in (" #", "#", " ", ": ", " no. ", " no "))


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

SCHEME_WORDS = frozenset(w.casefold() for w in AUTH_SCHEMES)
_SCHEME_ALT = "|".join(sorted((re.escape(w) for w in AUTH_SCHEMES), key=len, reverse=True))
_Q = r"(?:\\?[\"'])?"          # an optional quote, maybe escaped (JSON inside a string)


def header_credentials(text: str) -> bool:
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
       r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?"
       r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
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
       header_credentials),
    _d("anthropic_key", _B + r"sk-ant-(?:api|admin)\d\d-[A-Za-z0-9_\-]{20,}",
       "Anthropic API key sk-ant-api03-..."),
    _d("openai_key",
       _B + r"sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z0-9_\-]*[0-9A-Z])[A-Za-z0-9_\-]{16,}",
       "OpenAI-style key sk-..., sk-proj-...: 16+ characters holding a digit or an upper-case "
       "letter, and not a name of hyphen-joined lower-case words (sk-learn-compatible-wrapper, "
       "sk-learn-compatible-wrapper2024 are names)", _not_word_name),
    _d("aws_access_key_id", _B + r"(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}" + _E,
       "AWS access key id AKIA/ASIA + 16 upper-case letters or digits"),
    _d("aws_secret_key",
       r"(?<![A-Za-z0-9/+])(?<!(?i:id): )(?<!(?i:id)=)(?<!(?i:id) )"
       r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
       "AWS secret access key: exactly 40 base64 characters with upper, lower case and a "
       "digit that do not decode to readable text (a git SHA is lower-case hex); right after "
       "an 'id' word ('X-Request-Id: ...', 'request id ...') the same shape is an identifier",
       _aws_secret),
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
    _d("azure_sas_token",
       r"(?i)(?:^|[?&;\s\"'])sig=(?P<secret>[A-Za-z0-9%+/_\-]{16,}(?:=|%3D){0,2})",
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
       "value of a Cookie: / Set-Cookie: header, to the end of the line: name=value pairs, or "
       "one token without white space ('The Cookie: header is set by the browser' is prose)",
       _cookie_value),
    _d("credit_card", r"(?<![\d\-])" + _NOT_AFTER_ID_WORD + r"(?:\d[ -]?){12,18}\d(?![\d\-])",
       "payment card number: 13-19 digits, an issuer prefix (IIN ranges of Visa, Mastercard, "
       "Amex, Diners, Discover, JCB, UnionPay) and the Luhn checksum; right after 'order', "
       "'invoice', 'tracking' or 'ref' (with '#', 'no.' or ':') the same shape is a number "
       "of that kind (order #4111111111111111)", _luhn_card),
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
    _d("iban", r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ \-]?[A-Z0-9]{4}){2,7}(?:[ \-]?[A-Z0-9]{1,3})?"
       r"(?![A-Za-z0-9])",
       "IBAN (ISO 13616): a registry country, its length and the mod-97 check; an order id "
       "of the same shape fails the check 96 times in 97", iban_valid),
    _d("docker_config_auth",
       r"\\?\"auth\\?\"[ \t]*:[ \t]*\\?\"(?P<secret>[A-Za-z0-9+/]{8,}={0,2})\\?\"",
       "base64 user:password under \"auth\" in a Docker config.json", _basic_credentials),
    _d("sshpass_password",
       r"\bsshpass\b[^\r\n|;&]{0,200}?[ \t]-p[ \t]*[\"']?(?P<secret>[^\s\"']+)",
       "the password of sshpass -p PASSWORD (in the same command)", _not_placeholder),
    _d("sql_password",
       r"(?i)\bidentified[ \t]+by[ \t]+(?:password[ \t]+)?'(?P<secret>[^'\r\n]+)'",
       "the password of SQL IDENTIFIED BY '...'", _not_placeholder),
    _d("password_hash", r"\$(?:apr1|2[aby]|1|5|6)\$[^\s:$]{1,22}\$[A-Za-z0-9./]{22,}",
       "a crypt(3) password hash ($apr1$, $2b$, $6$, ...), as in an htpasswd line"),
    _d("prose_password_words",
       r"(?i)\b(?:password|passphrase|passwd)(?:[ \t]+(?:for|of|to|on)[ \t]+[\w.\-@/]{1,40})?"
       r"(?:[ \t]+(?:is|was))?[ \t]+[\"'`]?(?P<secret>[^\s\"'`,;)]{8,}[^\s\"'`,;).!?:])",
       "a password stated in prose without a digit: after password / passphrase is / was, a "
       "value with an upper-case letter after a lower-case one (TangerineFalconOrbit) or of "
       "three or more words joined by hyphens (correct-horse-battery-staple); a plain "
       "word or a two-part word form (case-sensitive, base64-encoded) is prose",
       _password_words),
    _d("prose_password_word",
       r"(?i)\b(?:" + "|".join(PROSE_PASSWORD_WORDS) + r")(?:[ \t]+(?:for|of|to|on)"
       r"(?:[ \t]+[\w.\-@/]{1,40}){1,3}?)?[ \t]+(?:is|was)[ \t]+[\"'`]?"
       r"(?P<secret>[^\W\d_]{4,})" + CLAUSE_END,
       "a one-word password in prose: a password / passphrase / passwd / passcode / pwd / pw "
       "word (maybe 'for <up to 3 words>'), is / was, then one word of 4+ letters that ends "
       "the clause (end of text or line, punctuation, or for / and / so / ... next) and does "
       "not describe a password ('my password is hunter', 'the password for the db is "
       "swordfish'; 'the password is required', 'password is incorrect', 'the password is "
       "stored in the vault' are prose: dyna.redact.passwords). 'pw: hunter' and "
       "'DB_PW=hunter' are the assignment rule's, which applies the same test",
       plain_password),
    _d("mysql_password",
       r"\bmysql(?:dump|admin|import|sh)?\b[^\r\n|;&]{0,200}?[ \t]-p"
       r"(?P<secret>[^\s\"'\-][^\s\"']{2,})",
       "the password of mysql / mysqldump / mysqladmin -pPASSWORD (written against the -p; "
       "within 200 characters, in the same command)",
       _not_placeholder),
)
"""The named secret formats, applied in this order by :func:`redact_text`."""


@dataclass(frozen=True)
class KeyedCue:
    """A mapping entry that counts as a detector's catch: its key names what the value is.

    Parsed JSON loses the text a cue detector reads (``"dob": "1990-04-05"`` fires the
    ``date_of_birth`` detector as text); an entry whose normalised key
    (:func:`dyna.redact.normalise_key`) is in ``keys`` and whose string value of 6 or more
    characters has the ``shape`` (in full; with ``strip``, once stripped of white space)
    counts as a catch of ``detector`` and is redacted, whatever the sensitive key names.

    Attributes
    ----------
    keys : frozenset of str
        Normalised key names.
    shape : re.Pattern
    detector : str
        The detector name reported.
    strip : bool
    """

    keys: frozenset[str]
    shape: re.Pattern[str]
    detector: str
    strip: bool = False

    def catches(self, canon: str, value: str) -> bool:
        """Whether the entry of normalised key ``canon`` and string ``value`` is a catch."""
        return canon in self.keys and self.shape.fullmatch(
            value.strip() if self.strip else value) is not None


#: Key names of a date of birth (normalised form).
DOB_KEY_NAMES = frozenset({"dob", "date_of_birth", "birth_date", "birthdate", "birthday"})
#: A date under a date-of-birth key: the ``date_of_birth`` detector's catch.
DOB_CUE = KeyedCue(DOB_KEY_NAMES, re.compile(r"(?:" + _DATE + r")"), "date_of_birth", strip=True)


# A prefilter is read off its pattern: a literal the pattern cannot match without (for a
# case-insensitive part, the literal in ``text.lower()``: on ASCII text ``(?i)`` folds ASCII
# letters only), a number of digits 0-9 it needs (on ASCII text ``\d`` is [0-9]), a minimum
# length. A text that is not ASCII is scanned by every detector (Unicode case folding and
# Unicode digits are not reasoned about). tests/test_redact_prefilter.py checks, on both
# corpora and on random texts drawn from the detectors' own alphabets, that a prefilter is
# true wherever its pattern matches.

@dataclass(frozen=True)
class Prefilter:
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


_P = Prefilter
_IBAN_START = re.compile(r"[A-Z]{2}\d\d")


#: Detector name -> its prefilter: False only where the detector's pattern cannot match the
#: ASCII text. A detector without one is always run.
PREFILTERS: dict[str, Prefilter] = {
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
    # a cue (d.o.b, dob: "ob" or "o.b"; date of birth, birth date, birthday; born) and a
    # date of 4 digits at least (1/2/90)
    "date_of_birth": _P(folded=("ob", "o.b", "birth", "born"), digits=4),
    # a cue word (password, passphrase and passwd hold "pass"; api key, access key and
    # private key "key"; credentials "credential") and a value holding a digit
    "prose_credential": _P(folded=("pass", "pwd", "secret", "key", "token", "credential"),
                           digits=1, length=12),
    "curl_user_password": _P(folded=("curl",), also=lambda t, low, nd: ":" in t),
    "iban": _P(digits=2, length=12, also=lambda t, low, nd: _IBAN_START.search(t) is not None),
    "docker_config_auth": _P(('"auth',)),
    "sshpass_password": _P(("sshpass",)),
    "sql_password": _P(folded=("identified",)),
    "password_hash": _P(("$",)),
    "prose_password_words": _P(folded=("pass",), length=16),
    # a cue word (password, passphrase, passwd and passcode hold "pass"; pwd and pw "pw"),
    # " is " or " was " (both hold "s"), and a word of 4+ letters: "pw is abcd"
    "prose_password_word": _P(folded=("pass", "pw"), length=10),
    "mysql_password": _P(("mysql",), also=lambda t, low, nd: "-p" in t),
}
del _P
