"""Redaction of sensitive data and feature hashing of free-form episode dicts.

Two helpers used before anything about an episode is stored:

* :func:`redact` returns a redacted deep copy of a JSON-like object: values under sensitive
  key names (matched as whole names, case-insensitively, ``-`` read as ``_``) become
  ``"[REDACTED]"``, and secret-looking substrings of any string value (bearer tokens, provider
  API keys, JWTs, ``api_key=...`` assignments, private key blocks) are replaced as well.
* :func:`hash_features` turns the free-form ``state_before`` / ``action_taken`` /
  ``state_after`` / ``metadata`` dicts of an episode into a fixed-length float32 vector with the
  signed hashing trick (Weinberger, Dasgupta, Langford, Smola & Attenberg, 2009, "Feature
  Hashing for Large Scale Multitask Learning", ICML), so episodes without numeric
  ``state_features`` can still be searched by cosine similarity.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Iterable, Mapping

import numpy as np

from dyna.errors import ConfigError

__all__ = [
    "DEFAULT_SENSITIVE_KEYS",
    "REDACTED",
    "SECRET_PATTERNS",
    "hash_features",
    "normalise_key",
    "redact",
    "redact_text",
]

REDACTED = "[REDACTED]"
"""The replacement written in place of every redacted value."""

DEFAULT_SENSITIVE_KEYS: frozenset[str] = frozenset({
    "api_key", "authorization", "email", "name", "password", "phone", "secret", "ssn", "token",
})
"""Key names whose values are always redacted (compared after :func:`normalise_key`)."""

# Secret-looking substrings, redacted wherever they stand. Each pattern either matches the
# secret as a whole, or (for ``key = value`` assignments) carries a group named ``secret``
# that is the only part replaced, so "api_key=abc123" becomes "api_key=[REDACTED]".
SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    # HTTP bearer / basic credentials (RFC 6750 b64token syntax), with at least one digit so
    # that prose such as "basic arithmetic" is left alone.
    re.compile(r"(?i)\b(?:bearer|basic)\s+"
               r"(?P<secret>(?=[A-Za-z0-9\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{8,}=*)"),
    # OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-...
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    # AWS access key ids.
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    # GitHub tokens (classic and fine-grained).
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    # Slack tokens.
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    # Google API keys.
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    # JSON Web Tokens (three base64url parts, header starting with '{"').
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    # PEM private key blocks.
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
               re.DOTALL),
    # Generic assignments: api_key=..., "secret": "...", token: ..., password=...
    re.compile(r"(?i)\b(?:api[_\-]?key|access[_\-]?key|secret(?:[_\-]?key)?|token|password|passwd"
               r"|client[_\-]?secret)\b[\"']?\s*[:=]\s*[\"']?(?P<secret>[^\s\"',;&]{6,})"),
)


def normalise_key(key: object) -> str:
    """Return the comparison form of a key: ``str(key)``, lower case, ``-`` replaced by ``_``."""
    return str(key).lower().replace("-", "_")


def redact_text(text: str) -> str:
    """Replace every secret-looking substring of ``text`` with ``"[REDACTED]"``.

    Parameters
    ----------
    text : str
        Any string value.

    Returns
    -------
    str
        ``text`` itself when nothing matched, else a new string in which each match of
        :data:`SECRET_PATTERNS` (or its ``secret`` group) is replaced.
    """
    for pattern in SECRET_PATTERNS:
        if pattern.search(text) is None:
            continue
        if "secret" in pattern.groupindex:
            def repl(m: re.Match[str]) -> str:
                s, e = m.span("secret")
                whole = m.group(0)
                return whole[: s - m.start()] + REDACTED + whole[e - m.start():]
            text = pattern.sub(repl, text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


def _key_set(keys: Iterable[str]) -> frozenset[str]:
    if isinstance(keys, str):
        raise ConfigError("keys", keys, "must be a collection of key names, not one string")
    return frozenset(normalise_key(k) for k in keys)


@functools.lru_cache(maxsize=64)
def _cached_key_set(keys: frozenset[str]) -> frozenset[str]:
    return _key_set(keys)


def redact(obj, keys: Iterable[str] = DEFAULT_SENSITIVE_KEYS, *, values: bool = True):
    """Return a redacted deep copy of a JSON-like object; the input is never mutated.

    Parameters
    ----------
    obj : object
        A JSON-like value: dicts (any mapping), lists, tuples, strings, numbers, None. Other
        objects are returned unchanged (not copied).
    keys : iterable of str
        Sensitive key names. A mapping entry is redacted when its key, lower-cased with ``-``
        read as ``_``, equals one of these names exactly (so ``"API-KEY"`` matches
        ``api_key`` but ``"tokenizer"`` does not match ``token``). Default
        :data:`DEFAULT_SENSITIVE_KEYS`.
    values : bool
        Also replace secret-looking substrings of string values anywhere (see
        :func:`redact_text`). Default True.

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
    return _redact(obj, key_set, values)


def _redact(obj, key_set: frozenset[str], values: bool):
    if isinstance(obj, str):
        return redact_text(obj) if values else obj
    if isinstance(obj, Mapping):
        return {k: (REDACTED if normalise_key(k) in key_set else _redact(v, key_set, values))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact(v, key_set, values) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_redact(v, key_set, values) for v in obj)
    return obj


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
