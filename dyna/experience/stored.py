"""Rows read back from a store: stored JSON checked, decoded and redacted again.

A store holds the JSON texts its writer redacted. Reading them back, this module refuses a
value another program wrote that is not JSON text (:class:`dyna.errors.StoreDamagedError`
naming the store, the column and the episode id, never the text), and redacts again what
this store's sensitive keys name (a store opened with more keys than its writer had), so
an answer never shows what a fresh redaction would hide.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from dyna.buffer import CATEGORICAL_FIELDS, DICT_FIELDS
from dyna.errors import StoreDamagedError
from dyna.redact import REDACTED, is_sensitive_key, redact

__all__ = ["check_json_texts", "redact_texts", "redacted_for_export", "rows_to_redact",
           "stored_json"]

_REDACTED_JSON = json.dumps(REDACTED)
#: One JSON string token (never across a line end: rows are joined by newlines, so a broken
#: row cannot shift how the next row's quotes pair up), captured when it is an object key
#: (a ``:`` follows), else matched with an empty capture. The unrolled form
#: ``"[^"\\]*(?:\\.[^"\\]*)*"`` matches the same tokens as ``"(?:[^"\\]|\\.)*"``, about 1.7x
#: faster in CPython's ``re``.
_JSON_KEY = re.compile(r'("[^"\\\n]*(?:\\.[^"\\\n]*)*")(?=\s*:)|"[^"\\\n]*(?:\\.[^"\\\n]*)*"')


def rows_to_redact(texts: np.ndarray, keys) -> np.ndarray:
    """Rows of stored JSON texts that redaction with ``keys`` could still change.

    Stored texts were redacted by their writer (values by the secret detectors, keys by the
    writer's key names), so only an object key that ``keys`` name and whose value is not
    already ``"[REDACTED]"`` (nor a bool or null, which redaction keeps) needs work. Key
    names are decided by :func:`dyna.redact.is_sensitive_key` itself (normalised case,
    separators, camelCase, NFKC, zero-width characters, credential suffixes and prefix
    families), never by a matching rule
    of its own: all texts are joined into one string and tokenised into JSON strings in one
    regular-expression pass; each distinct object-key token (a string followed by ``:``) is
    decoded (``\\u`` escapes included) and asked once; the rows where a sensitive key is
    followed by a value other than ``"[REDACTED]"`` are picked. The test is conservative (it
    may pick a row that redaction leaves alone, never misses one).

    Parameters
    ----------
    texts : ndarray of object, shape (n,)
        JSON texts (str) or None.
    keys : iterable of str
        Sensitive key names (any spelling; compared by :func:`dyna.redact.is_sensitive_key`).

    Returns
    -------
    ndarray of int64
        Row positions into ``texts``, increasing.
    """
    key_set = frozenset(keys)
    present = np.flatnonzero(np.not_equal(texts, None))
    if not key_set or present.size == 0:
        return np.empty(0, dtype=np.int64)
    vals = texts[present].tolist()
    lens = np.fromiter(map(len, vals), dtype=np.int64, count=len(vals)) + 1
    starts = np.cumsum(lens) - lens
    joined = "\n".join(vals)
    # Outside strings JSON holds no '"', so matching every string token left to right keeps
    # the tokeniser aligned (rows are whole JSON texts).
    sensitive: list[str] = []
    for token in set(_JSON_KEY.findall(joined)) - {""}:
        try:
            key = json.loads(token)
        except ValueError:
            key = token[1:-1]
        if is_sensitive_key(key, key_set):
            sensitive.append(token)
    if not sensitive:
        return np.empty(0, dtype=np.int64)
    # a value already "[REDACTED]", or a bool or null (redaction keeps those), needs no work
    pat = re.compile("(?:" + "|".join(map(re.escape, sensitive)) + r")\s*:(?!\s*(?:"
                     + re.escape(_REDACTED_JSON) + r"|true\b|false\b|null\b))")
    offsets = np.fromiter((m.start() for m in pat.finditer(joined)), dtype=np.int64)
    if offsets.size == 0:
        return np.empty(0, dtype=np.int64)
    rows = np.searchsorted(starts, offsets, side="right") - 1
    return present[np.unique(rows)]


def stored_json(text: str, name: str, where: str):
    """A stored JSON column value, decoded; text another program wrote there that is not
    JSON (or nested deeper than the decoder goes) raises
    :class:`~dyna.errors.StoreDamagedError` naming the store and the column, never the
    text."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:   # (JSONDecodeError is a ValueError)
        raise StoreDamagedError(where, f"a stored {name} value is not JSON "
                                f"({exc})") from None
    except RecursionError:
        raise StoreDamagedError(where, f"a stored {name} value is not JSON (nested too "
                                "deeply)") from None


def check_json_texts(cols: Mapping[str, Any], where: str) -> None:
    """Raise :class:`~dyna.errors.StoreDamagedError` when a stored JSON column holds a value
    that is not text (a BLOB or a number another program wrote there), naming the column,
    the episode id and the value's type; stored texts are decoded where they are read."""
    for name in DICT_FIELDS:
        vals = cols[name]
        if set(map(type, vals)) <= {str, type(None)}:
            continue
        for i, v in zip(cols["id"], vals):
            if v is not None and type(v) is not str:
                raise StoreDamagedError(where, f"a stored {name} value (episode id {int(i)}) "
                                        f"is {type(v).__name__}, not JSON text")


def redact_texts(texts: np.ndarray, keys, where: str) -> np.ndarray:
    """Stored JSON texts (object ``(n,)``, None for NULL) with the rows
    :func:`rows_to_redact` finds parsed, redacted with ``keys`` and serialised again (a
    copy when any changed); ``where`` names the store in errors."""
    rows = rows_to_redact(texts, keys)
    if rows.size:
        texts = texts.copy()
        for i in rows.tolist():
            texts[i] = json.dumps(redact(stored_json(texts[i], "JSON", where), keys),
                                  separators=(",", ":"), allow_nan=False)
    return texts


def redacted_for_export(cols: dict[str, Any], keys, where: str) -> dict[str, Any]:
    """Persisted-style columns redacted again on the way out (keys may have changed since
    the rows were written): every stored JSON text parsed, redacted and serialised, every
    label redacted. Changes ``cols`` in place and returns it."""
    for name in DICT_FIELDS:
        cols[name] = np.array([None if t is None else json.dumps(
            redact(stored_json(t, name, where), keys), separators=(",", ":"))
            for t in cols[name]], dtype=object)
    for name in CATEGORICAL_FIELDS:
        cols[name] = np.array([None if v is None else redact(v, keys)
                               for v in cols[name]], dtype=object)
    return cols
