"""Redaction of secrets and personal data before anything is stored.

* :func:`redact` returns a redacted deep copy of a JSON-like object
  (:mod:`dyna.redact.objects`):

  - the value of every *sensitive key* becomes ``"[REDACTED]"``. Key names are compared after
    :func:`normalise_key` (Unicode NFKC, zero-width characters removed, camelCase split,
    ``-`` ``_`` ``.`` and spaces unified to ``_``, casefold), and beyond exact equality a
    key ending in a secret word (``DB_PASSWORD``, ``x-api-key``, ``django_secret_key``) and a
    key of a prefix family (``credit_card_4421486``) match as well; see
    :func:`is_sensitive_key` and the lists :data:`SECRET_KEY_NAMES`,
    :data:`PERSONAL_KEY_NAMES`, :data:`PREFIX_KEY_NAMES` (:mod:`dyna.redact.keys`);
  - a key holding a password word (``DB_PW``, ``dbPw``, ``redis_pass``, ``PASSWORD_PROD``)
    matches, and ``PWD`` holding an absolute path (the shell's working directory) is kept
    (:mod:`dyna.redact.passwords`);
  - every string value is searched with the named :data:`DETECTORS` (provider tokens,
    private key blocks, URLs with passwords, the credentials of an ``Authorization:`` header
    of any scheme of :data:`AUTH_SCHEMES`, cards, e-mail addresses, dates of birth after a
    cue such as ``DOB:``, ...; :mod:`dyna.redact.detectors`; one row per provider token format
    in :mod:`dyna.redact.providers`) and with the ``KEY=value`` /
    ``key: value`` assignment rule (:func:`redact_text`, :mod:`dyna.redact.text`); a
    one-word password in prose is found by the words around it ("my password is hunter",
    ``pw: hunter``; "the password is required" is prose: :mod:`dyna.redact.passwords`);
  - a string that parses as a JSON object or array is parsed, redacted like any dict and
    serialised again (it is returned unchanged, as the same string, when nothing in it was
    redacted);
  - bytes (as UTF-8 text), numpy arrays of strings, bytes or objects (element by element),
    and an int of a card number's shape (:func:`card_int`) are redacted too;
  - a dict *key* in which a detector fires (an e-mail address, a token, ...) is replaced by
    ``"[REDACTED:<hash>]"`` (:func:`keyed_hash`), so no two secret keys of one mapping collide
    and no value is lost.

* :func:`detect` names the detectors that fire in a text (to count catches per detector),
  :func:`has_secret` says whether any does, :func:`scan` counts them over a JSON-like object,
  and :func:`check_label` refuses a label field (run id, task type, ...) that holds one.
* The formats in use are a :class:`Formats` (:mod:`dyna.redact.formats`): by default
  :data:`GENERAL_FORMATS`. Code that reads a dataset with formats of its own extends them
  and redacts under :func:`redaction_formats` (the tau-bench importer's user and
  payment-method ids: :mod:`dyna.loops.trajectories.redaction`).
* :func:`hash_features` (:mod:`dyna.feature_hashing`) turns the free-form dicts of an
  episode into a fixed-length vector.

Detection is by format only: every detector is a fixed shape (a provider prefix, a length, a
character set, a checksum such as Luhn). Nothing is flagged for looking random in prose.
"""

from dyna import errors
from dyna.feature_hashing import hash_features
from dyna.fileio import unique_json
from dyna.redact.detectors import (AUTH_SCHEMES, DETECTORS, Detector, KeyedCue, Prefilter,
                                   is_placeholder)
from dyna.redact.formats import Formats, GENERAL_FORMATS, active_formats, redaction_formats
from dyna.redact.keys import (DEFAULT_SENSITIVE_KEYS, PERSONAL_KEY_NAMES, PREFIX_KEY_NAMES,
                              REDACTED, SECRET_KEY_NAMES, USER_ID_KEY_NAMES, is_sensitive_key,
                              normalise_key)
from dyna.redact.objects import (CLEAN_SHORT_MAX_CHARS, CLEAN_SHORT_SIZE, DEFAULT_HMAC_KEY,
                                 HMAC_KEY_ENV, card_int, keyed_hash, known_clean, redact, scan,
                                 scan_found)
from dyna.redact.text import (ASSIGNMENT_DETECTOR, DETECT_CACHE_MAX_CHARS, DETECT_CACHE_SIZE,
                              check_label, detect, has_secret, redact_text)

__all__ = [
    "ASSIGNMENT_DETECTOR",
    "AUTH_SCHEMES",
    "CLEAN_SHORT_MAX_CHARS",
    "CLEAN_SHORT_SIZE",
    "DEFAULT_HMAC_KEY",
    "DEFAULT_SENSITIVE_KEYS",
    "DETECTORS",
    "DETECT_CACHE_MAX_CHARS",
    "DETECT_CACHE_SIZE",
    "GENERAL_FORMATS",
    "HMAC_KEY_ENV",
    "PERSONAL_KEY_NAMES",
    "PREFIX_KEY_NAMES",
    "REDACTED",
    "SECRET_KEY_NAMES",
    "SECRET_PATTERNS",
    "USER_ID_KEY_NAMES",
    "Detector",
    "Formats",
    "KeyedCue",
    "Prefilter",
    "active_formats",
    "card_int",
    "check_label",
    "detect",
    "has_secret",
    "hash_features",
    "is_placeholder",
    "is_sensitive_key",
    "keyed_hash",
    "known_clean",
    "normalise_key",
    "redact",
    "redact_text",
    "redaction_formats",
    "scan",
    "scan_found",
]

SECRET_PATTERNS = tuple(d.pattern for d in DETECTORS)
"""The compiled patterns of :data:`DETECTORS`, in order."""

# a repeated JSON key is shown redacted in its error message (unique_json cannot import us)
unique_json.show_key = redact_text


def _show_value(value: object) -> str:
    """``repr(value)`` with every secret a detector or the assignment rule finds redacted."""
    return redact_text(repr(value))


# an error message shows the value it refuses redacted (dyna.errors cannot import us)
errors.show_value = _show_value
