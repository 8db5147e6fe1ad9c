"""Feature hashing of the free-form dicts of an episode into a fixed-length vector.

:func:`hash_features` turns the ``state_before`` / ``action_taken`` / ``state_after`` /
``metadata`` dicts of an episode into a float32 unit vector with the signed hashing trick
(Weinberger, Dasgupta, Langford, Smola & Attenberg, 2009, "Feature Hashing for Large Scale
Multitask Learning", ICML), so episodes without numeric ``state_features`` can still be
searched by cosine similarity.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping

import numpy as np

from dyna.errors import ConfigError

__all__ = ["hash_features"]


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
