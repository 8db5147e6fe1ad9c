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

__all__ = ["check_json_texts", "object_key_tokens", "redact_texts", "redacted_for_export",
           "rows_to_redact", "stored_json"]

_REDACTED_JSON = json.dumps(REDACTED)
#: One JSON string token (never across a line end: rows are joined by newlines, so a broken
#: row cannot shift how the next row's quotes pair up), captured when it is an object key
#: (a ``:`` follows), else matched with an empty capture. The unrolled form
#: ``"[^"\\]*(?:\\.[^"\\]*)*"`` matches the same tokens as ``"(?:[^"\\]|\\.)*"``, about 1.7x
#: faster in CPython's ``re``. :func:`object_key_tokens` finds what it captures, array-wise.
_JSON_KEY = re.compile(r'("[^"\\\n]*(?:\\.[^"\\\n]*)*")(?=\s*:)|"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_SPACE_COLON = re.compile(r"\s*:")
_SPACES = re.compile(r"\s*")
_QUOTE, _BACKSLASH, _NEWLINE, _COLON = b'"\\\n:'
#: Bytes after a closing quote that may begin the whitespace ``\s`` matches before a ``:``
#: (in a str pattern ``\s`` also matches \x1c-\x1f and non-ASCII spaces such as U+00A0);
#: a token followed by one is checked with the pattern itself.
_MAYBE_SPACE = np.zeros(256, dtype=bool)
_MAYBE_SPACE[list(b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f")] = True
_MAYBE_SPACE[0x80:] = True
#: Rows tokenised together: bounds the index arrays (a few MB of text per block).
_BLOCK_ROWS = 1 << 16
#: Distinct tokens of one length told apart array-wise before the rest go through a set.
_FEW_TOKENS = 8


def rows_to_redact(texts: np.ndarray, keys) -> np.ndarray:
    """Rows of stored JSON texts that redaction with ``keys`` could still change.

    Stored texts were redacted by their writer (values by the secret detectors, keys by the
    writer's key names), so only an object key that ``keys`` name and whose value is not
    already ``"[REDACTED]"`` (nor a bool or null, which redaction keeps) needs work. Key
    names are decided by :func:`dyna.redact.is_sensitive_key` itself (normalised case,
    separators, camelCase, NFKC, zero-width characters, credential suffixes and prefix
    families), never by a matching rule
    of its own: all texts are joined into one string and tokenised into JSON strings
    (:func:`object_key_tokens`); each distinct object-key token (a string followed by ``:``)
    is decoded (``\\u`` escapes included) and asked once; the rows where a sensitive key is
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
    sensitive: list[str] = []
    for token in object_key_tokens(joined, starts):
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


def object_key_tokens(joined: str, starts: np.ndarray) -> set[str]:
    """The distinct object-key tokens of JSON texts joined by newlines: what ``_JSON_KEY``
    captures in ``joined``, found with array operations on its UTF-8 bytes.

    Outside strings JSON holds no ``"``, so pairing the quotes left to right keeps a
    tokeniser aligned. The pairing is done for a block of rows at a time: a quote that a
    backslash escapes (one after an odd run of backslashes) is dropped, the others pair up
    within each line (an odd one out at a line's end starts no token), and a token is a key
    when ``\\s*:`` follows its closing quote in ``joined``. A block where a backslash lies
    outside every token (text that is not JSON) is tokenised with ``_JSON_KEY`` instead.

    Parameters
    ----------
    joined : str
        The texts, joined by ``"\\n"``.
    starts : ndarray of int64, shape (n_texts,)
        Offset of each text in ``joined`` (increasing).

    Returns
    -------
    set of str
        Each key token with its quotes and escapes as written (``'"api_key"'``).
    """
    keys: set[str] = set()
    for lo in range(0, len(starts), _BLOCK_ROWS):
        a = int(starts[lo])
        hi = lo + _BLOCK_ROWS
        z = int(starts[hi]) - 1 if hi < len(starts) else len(joined)
        found = _block_key_tokens(joined, a, z)
        if found is None:
            # the lookahead after a block's last token may reach past its end
            end = _SPACES.match(joined, z).end() + 1
            found = set(_JSON_KEY.findall(joined, a, end)) - {""}
        keys |= found
    return keys


def _block_key_tokens(joined: str, a: int, z: int) -> set[str] | None:
    """:func:`object_key_tokens` of the rows in ``joined[a:z]`` (whole rows), or None when a
    backslash lies outside every string token."""
    text = joined[a:z]
    data = text.encode("utf-8", "surrogatepass")
    b = np.frombuffer(data, dtype=np.uint8)
    is_quote = b == _QUOTE
    slashes = np.flatnonzero(b == _BACKSLASH)
    if slashes.size:
        is_quote[_escaped_quotes(b, np.flatnonzero(is_quote), slashes)] = False
    # quotes and line ends in order; a quote's rank counts the quotes of its line up to it
    events = np.flatnonzero(is_quote | (b == _NEWLINE))
    quote_event = is_quote[events]
    seen = np.cumsum(quote_event)
    rank = seen - np.maximum.accumulate(np.where(quote_event, 0, seen))
    first = np.flatnonzero(quote_event[:-1] & (rank[:-1] % 2 == 1) & quote_event[1:])
    opens, closes = events[first], events[first + 1]
    if slashes.size:
        token = np.searchsorted(opens, slashes) - 1
        if (token < 0).any() or (slashes >= closes[token]).any():
            return None
    at_end = closes + 1 == b.size
    after = b[np.minimum(closes + 1, b.size - 1)]
    is_key = (after == _COLON) & ~at_end
    maybe = np.flatnonzero(~is_key & (_MAYBE_SPACE[after] | at_end))
    if maybe.size:
        pos = closes[maybe] + 1
        if not text.isascii():   # byte offsets to character offsets
            pos = pos - np.searchsorted(np.flatnonzero((b & 0xC0) == 0x80), pos)
        is_key[maybe] = [_SPACE_COLON.match(joined, a + p) is not None for p in pos.tolist()]
    return {t.decode("utf-8", "surrogatepass")
            for t in _distinct_slices(data, b, opens[is_key], closes[is_key] + 1)}


def _escaped_quotes(b: np.ndarray, quotes: np.ndarray, slashes: np.ndarray) -> np.ndarray:
    """The positions among ``quotes`` that follow an odd run of backslashes (``slashes``:
    every backslash position in ``b``)."""
    after_slash = quotes[(quotes > 0) & (b[quotes - 1] == _BACKSLASH)]
    new_run = np.ones(slashes.size, dtype=bool)
    new_run[1:] = np.diff(slashes) != 1
    run_start = slashes[np.maximum.accumulate(np.where(new_run, np.arange(slashes.size), 0))]
    run = after_slash - run_start[np.searchsorted(slashes, after_slash - 1)]
    return after_slash[run % 2 == 1]


def _distinct_slices(data: bytes, b: np.ndarray, starts: np.ndarray,
                     ends: np.ndarray) -> set[bytes]:
    """The distinct ``data[s:e]`` over the pairs of ``starts`` and ``ends`` (``b``: ``data``
    as uint8). Slices of one length are compared byte by byte with one distinct value at a
    time (keys repeat on every record), the rest of a length with many through a set."""
    out: set[bytes] = set()
    lengths = ends - starts
    for length in np.flatnonzero(np.bincount(lengths)):
        at = starts[lengths == length]
        for _ in range(_FEW_TOKENS):
            if not at.size:
                break
            first = int(at[0])
            out.add(data[first:first + length])
            same = b[at] == b[first]
            for j in range(1, length):
                same &= b[at + j] == b[first + j]
            at = at[~same]
        out.update(data[s:s + length] for s in at.tolist())
    return out


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
