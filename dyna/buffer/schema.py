"""What an episode is made of: the buffer's fields, its input types and the checks of values.

Every value is checked here before anything is stored: dict fields nest at most
:data:`MAX_DEPTH` containers deep and hold at most :data:`MAX_VALUE_ENTRIES` entries and
:data:`MAX_VALUE_CHARS` characters of text, labels have at most :data:`MAX_LABEL_CHARS`
characters and no NUL, text (labels, dict keys and values) must be valid Unicode (no lone
surrogates), labels are str (never bytes), numbers fit float64 (:data:`FLOAT_MAX`); each
violation is a :class:`dyna.errors.ConfigError` naming the field (and row) and the value
(its size, never a secret), raised before the value is copied, redacted or hashed.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from dyna.errors import ConfigError
from dyna.redact import redact, redact_text

__all__ = [
    "CATEGORICAL_FIELDS", "DICT_FIELDS", "FIELDS", "FLOAT_MAX", "INPUT_FIELDS",
    "MAX_DEPTH", "MAX_LABEL_CHARS", "MAX_VALUE_CHARS", "MAX_VALUE_ENTRIES", "OPTIONAL_FIELDS",
    "REQUIRED_FIELDS", "Categorical", "JsonText", "check_fields",
    "check_label_text", "check_nfkc", "clock_seconds", "column_specs", "unused_columns",
    "check_text", "check_value", "finite_float", "float_array", "float_column", "json_texts",
    "label_text", "parse_json_texts", "redacted", "short_redacted", "short_value", "to_json",
]


CATEGORICAL_FIELDS: tuple[str, ...] = (
    "tenant_id", "task_type", "action_type", "outcome", "run_id", "task_id", "request_id",
    "outcome_source", "outcome_verified_by", "anti_gaming_policy",
)
"""Fields stored as int32 codes into a per-column dictionary of labels ("" = missing)."""

DICT_FIELDS: tuple[str, ...] = ("state_before", "action_taken", "state_after", "metadata")
"""Free-form JSON-like fields, stored redacted as JSON strings."""

REQUIRED_FIELDS: tuple[str, ...] = ("tenant_id", "task_type", "action_type", "outcome", "reward")
"""Fields every episode must give (categoricals non-empty, reward finite)."""

FIELDS: tuple[str, ...] = (("id",) + CATEGORICAL_FIELDS + ("reward", "timestamp")
                           + DICT_FIELDS + ("features",))
"""Every column of the buffer, in export order."""

INPUT_FIELDS = frozenset(CATEGORICAL_FIELDS + DICT_FIELDS
                         + ("reward", "timestamp", "state_features"))
"""Every field :meth:`~dyna.buffer.ExperienceBuffer.record` accepts."""

OPTIONAL_FIELDS: tuple[str, ...] = tuple(name for name in CATEGORICAL_FIELDS + DICT_FIELDS
                                         if name not in REQUIRED_FIELDS)
"""Label and dict fields an episode may leave out (all 0 / None until one is given)."""


class Categorical(NamedTuple):
    """Dictionary-encoded input for a categorical column of
    :meth:`~dyna.buffer.ExperienceBuffer.record_batch`.

    Attributes
    ----------
    codes : numpy.ndarray
        Integer codes, shape ``(n,)``, each in ``[0, len(labels))``.
    labels : sequence of str
        Label of each code ("" or None means missing).
    """

    codes: np.ndarray
    labels: Sequence[str | None]


class JsonText(NamedTuple):
    """Stored JSON text for a dict field of :meth:`~dyna.buffer.ExperienceBuffer.record_batch`.

    For text this library wrote and redacted before (e.g. read back from an experience
    store): it is stored as it is, neither parsed, redacted again nor re-serialised. It is
    parsed only if the features have to be hashed from it (no ``state_features`` given);
    then text that is not JSON raises ConfigError naming the field and row.

    Attributes
    ----------
    texts : sequence of str or None
        One JSON text per row (None = absent), length n.
    """

    texts: Sequence[str | None]


def label_text(value, field: str = "label") -> str:
    """The string label of a categorical value (None -> "" = missing).

    Raises
    ------
    ConfigError
        ``value`` is bytes (a label is text; decode it first), naming ``field``.
    """
    if value is None:
        return ""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)    # numpy.str_ and other subclasses: plain str
    if isinstance(value, (bytes, bytearray, np.bytes_)):
        raise ConfigError(field, bytes(value[:40]), "must be a str, not bytes (decode it "
                          "first)")
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int) and abs(value) > FLOAT_MAX:
        raise _beyond_float(field, value)
    return str(value)


#: Deepest nesting of containers (dicts, lists, tuples) in a dict field's value (and in a
#: query's dicts): ``{"a": [1]}`` has depth 2. Deeper values are refused with ConfigError
#: before they are redacted or hashed (whose recursion would otherwise fail near depth
#: 1,000 with a RecursionError).
MAX_DEPTH = 64
#: Longest label (tenant, task type, action type, outcome, ids, ...), in characters. Labels
#: are names matched exactly and kept in memory once per distinct value; a longer text
#: belongs in a dict field.
MAX_LABEL_CHARS = 4_096
#: Most entries (dict keys plus list and tuple elements, counted at every depth) in one dict
#: field's value (one ``state_before``, ``metadata``, ...).
MAX_VALUE_ENTRIES = 100_000
#: Most characters of text (dict keys and string values together) in one dict field's value.
MAX_VALUE_CHARS = 10_000_000
#: The largest float64, as an int: a larger integer cannot be stored as a number (reward,
#: features) nor hashed into features, so it is refused everywhere in an episode.
FLOAT_MAX = int(np.finfo(np.float64).max)


def _beyond_float(field: str, value: int) -> ConfigError:
    return ConfigError(field, short_value(value), "must be finite: beyond the float64 range "
                       "(|x| <= 1.8e308)")


def check_label_text(field: str, label: str) -> None:
    """Refuse a label longer than :data:`MAX_LABEL_CHARS` characters, holding a NUL
    character (it could not be named on a command line) or text UTF-8 cannot encode
    (:func:`check_text`); the message gives the size or position, never the label."""
    if len(label) > MAX_LABEL_CHARS:
        raise ConfigError(field, f"{len(label)} characters", f"a label has at most "
                          f"MAX_LABEL_CHARS={MAX_LABEL_CHARS} characters")
    if "\x00" in label:
        raise ConfigError(field, f"NUL at position {label.index(chr(0))}",
                          "a label must not contain a NUL character")
    check_text(field, label)


def check_nfkc(field: str, value: str) -> str:
    """``value`` if it is already in Unicode NFKC form, else ConfigError naming ``field``.

    For identifiers matched byte for byte elsewhere (a tenant, which PostgreSQL's
    row-level security compares exactly): a second spelling of the same name (``"ｔ1"``
    for ``"t1"``, a decomposed ``"e\u0301"`` for ``"\u00e9"``) is refused, never folded.
    """
    if not value.isascii() and not unicodedata.is_normalized("NFKC", value):
        raise ConfigError(field, value, "must be in Unicode NFKC form (compared byte for "
                          f"byte); its NFKC form is {unicodedata.normalize('NFKC', value)!r}")
    return value


def check_text(field: str, text: str) -> None:
    """Refuse text UTF-8 cannot encode (a lone surrogate such as "\\ud800"), naming the
    field and the character, never the text (it may hold a secret)."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(field, text[exc.start], f"a lone surrogate at position {exc.start}; "
                          "text must be valid Unicode") from None


def check_value(field: str, value) -> None:
    """Check a JSON-like value before it is redacted and stored.

    Walks the value without recursion: containers (dict, list, tuple) nested at most
    :data:`MAX_DEPTH` deep holding at most :data:`MAX_VALUE_ENTRIES` entries and
    :data:`MAX_VALUE_CHARS` characters of text in all, every integer within the float64
    range, and every string (dict keys included) encodable as UTF-8. A container's size is
    read before its entries are visited, so an oversized value is refused without walking it.

    Raises
    ------
    ConfigError
        Naming ``field``: nesting deeper than :data:`MAX_DEPTH`, too many entries or
        characters (the count is named), an integer beyond the float64 range (shown
        shortened, ``"~1e400"``), or a lone surrogate in a string (the character and its
        position are named, the string is not).
    """
    if type(value) is str:
        _count_chars(field, len(value))
        check_text(field, value)
        return
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > FLOAT_MAX:
        raise _beyond_float(field, value)
    if not isinstance(value, (Mapping, list, tuple)):
        return
    stack = [(value, 1)]
    entries = chars = 0
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(field, f"depth > {MAX_DEPTH}", f"nesting deeper than "
                              f"MAX_DEPTH={MAX_DEPTH} containers is refused")
        entries += len(v)
        if entries > MAX_VALUE_ENTRIES:
            raise ConfigError(field, f"> {MAX_VALUE_ENTRIES} entries", "at most "
                              f"MAX_VALUE_ENTRIES={MAX_VALUE_ENTRIES} keys and elements")
        if isinstance(v, Mapping):
            v = list(v.keys()) + list(v.values())
        for x in v:
            t = type(x)
            if t is str:
                chars = _count_chars(field, chars + len(x))
                check_text(field, x)
            elif t is int:
                if x > FLOAT_MAX or x < -FLOAT_MAX:
                    raise _beyond_float(field, x)
            elif isinstance(x, (Mapping, list, tuple)):
                stack.append((x, depth + 1))


def _count_chars(field: str, chars: int) -> int:
    """``chars``, or ConfigError when it is more than :data:`MAX_VALUE_CHARS`."""
    if chars > MAX_VALUE_CHARS:
        raise ConfigError(field, f"> {MAX_VALUE_CHARS} characters", "at most "
                          f"MAX_VALUE_CHARS={MAX_VALUE_CHARS} characters of text")
    return chars


def short_value(value):
    """``value`` fit for an error message: an integer too long to print in full (10**400)
    becomes a string such as ``"~1e400"``; anything else is returned as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 18:
        return f"{'-' if value < 0 else ''}~1e{int(math.log10(abs(value)))}"
    return value


def clock_seconds(clock) -> float:
    """The time ``clock()`` gives, in seconds since the Unix epoch (UTC), checked to be a
    finite number: a clock of the experience store or buffer is a seconds clock such as
    :func:`time.time`, so a :class:`datetime.datetime` (naive or aware) is refused.

    Raises
    ------
    ConfigError
        Field ``clock``: the clock returned something other than a finite number.
    """
    now = clock()
    if isinstance(now, (_dt.date, _dt.time)):
        raise ConfigError("clock", str(now), "must return seconds since the Unix epoch "
                          "(UTC), as time.time() does, not a date or time")
    return finite_float("clock", now)


def finite_float(field: str, value) -> float:
    """A finite number as float.

    Raises
    ------
    ConfigError
        Naming ``field``: not a number (bool included), NaN or infinite, or an integer
        beyond the float64 range (|x| > 1.8e308, e.g. ``10**400``; shown shortened).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(field, value, "must be a number")
    try:
        v = float(value)
    except OverflowError:
        raise ConfigError(field, short_value(value), "must be finite: beyond the float64 "
                          "range (|x| <= 1.8e308)") from None
    if not math.isfinite(v):
        raise ConfigError(field, value, "must be finite")
    return v


def float_array(field: str, values, dtype) -> np.ndarray:
    """``np.asarray(values, dtype)``; anything that is not numbers, or an integer beyond the
    float range (``10**400``), raises ConfigError naming the field (and the row)."""
    try:
        return np.asarray(values, dtype=dtype)
    except OverflowError:
        raise _overflow(field, values) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(field, type(values).__name__, f"must be numbers ({exc})") from None


def _overflow(field: str, values) -> ConfigError:
    """ConfigError naming the first integer of ``values`` (nested up to 2 deep) that float
    cannot hold."""
    def bad(v):
        try:
            float(v)
        except OverflowError:
            return True
        except (TypeError, ValueError):
            return False
        return False

    if not isinstance(values, (str, bytes, Mapping)) and hasattr(values, "__iter__"):
        for i, v in enumerate(values):
            if bad(v):
                return ConfigError(f"{field}[{i}]", short_value(v), "must be finite: beyond "
                                   "the float64 range (|x| <= 1.8e308)")
            if isinstance(v, (list, tuple)):
                for j, w in enumerate(v):
                    if bad(w):
                        return ConfigError(f"{field}[{i}][{j}]", short_value(w), "must be "
                                           "finite: beyond the float64 range")
    return ConfigError(field, short_value(values), "must be finite: beyond the float64 range "
                       "(|x| <= 1.8e308)")


def float_column(field: str, values, n: int | None) -> np.ndarray:
    """float64 (n,) column (finiteness is checked by the caller); a scalar is broadcast
    when n is given.

    Raises
    ------
    ConfigError
        Not numbers, or not 1-D of length ``n``.
    """
    arr = float_array(field, values, np.float64)
    if arr.ndim == 0 and n is not None:
        arr = np.full(n, float(arr))
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        length = "" if n is None else f" of length {n}"
        raise ConfigError(field, arr.shape, "must be a 1-D array" + length)
    return arr


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(type(obj).__name__)


def to_json(field: str, value) -> str | None:
    """``value`` as compact JSON text (None stays None); numpy scalars and arrays become
    numbers and lists.

    Raises
    ------
    ConfigError
        Naming ``field``: the value is not JSON serialisable (NaN and inf included).
    """
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise ConfigError(field, type(value).__name__,
                          f"must be JSON serialisable ({exc})") from None


#: The types a :class:`JsonText` value may have: text, or None for an absent value.
_TEXT_TYPES = {str, type(None)}


def json_texts(field: str, texts, n: int) -> np.ndarray:
    """JsonText contents as an object array ``(n,)`` of str or None (validated)."""
    if isinstance(texts, (str, bytes, Mapping)) or len(texts) != n:
        raise ConfigError(field, type(texts).__name__, f"JsonText must hold {n} texts")
    arr = np.empty(n, dtype=object)
    try:
        arr[:] = texts
    except ValueError:   # e.g. a 2-D array of texts
        raise ConfigError(field, np.shape(texts), f"JsonText must hold {n} texts") from None
    if not set(map(type, arr)) <= _TEXT_TYPES:   # name the first row that is not
        for i, t in enumerate(arr):
            if t is not None and type(t) is not str:
                raise ConfigError(f"{field}[{i}]", type(t).__name__,
                                  "JsonText holds str or None")
    return arr


def parse_json_texts(field: str, texts, what: str = "JsonText is not JSON") -> list:
    """The values of JSON texts (None stays None); text that is not JSON (or not text)
    raises ConfigError naming ``field[row]``, with a short prefix of the text redacted
    (:func:`dyna.redact.redact_text`: never a secret in the message)."""
    out = []
    for i, t in enumerate(texts):
        try:
            out.append(None if t is None else json.loads(t))
        except (TypeError, ValueError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            shown = short_redacted(t) if isinstance(t, str) else type(t).__name__
            raise ConfigError(f"{field}[{i}]", shown, f"{what} ({why})") from None
    return out


def short_redacted(text: str, limit: int = 40) -> str:
    """At most ``limit`` characters of ``text`` after redaction (then ``...``)."""
    shown = redact_text(text[:4096])   # bounded work for a huge hostile text
    return shown if len(shown) <= limit else shown[:limit] + "..."


def column_specs(dim: int) -> dict[str, tuple]:
    """The columns of a buffer with features of dimension ``dim``: name -> (numpy dtype, row
    shape), as :class:`dyna.index.ColumnStore` takes them (:data:`FIELDS` and ``inv_norm``)."""
    specs: dict[str, tuple] = {"id": (np.int64, ()), "reward": (np.float64, ()),
                               "timestamp": (np.float64, ())}
    specs.update({name: (np.int32, ()) for name in CATEGORICAL_FIELDS})
    specs.update({name: (object, ()) for name in DICT_FIELDS})
    specs["features"] = (np.float32, (dim,))
    specs["inv_norm"] = (np.float32, ())
    return specs


def unused_columns(used) -> list[str]:
    """The :data:`OPTIONAL_FIELDS` not in ``used``: columns that never held a value, so all
    0 or None in every row."""
    return [name for name in OPTIONAL_FIELDS if name not in used]


def check_fields(given: Mapping[str, Any]) -> None:
    """Refuse an episode with a field that is not in :data:`INPUT_FIELDS` or without one of
    :data:`REQUIRED_FIELDS` (ConfigError naming the first such field)."""
    if not INPUT_FIELDS.issuperset(given):
        name = next(name for name in given if name not in INPUT_FIELDS)
        raise ConfigError(name, given[name], "unknown episode field")
    for name in REQUIRED_FIELDS:
        if given.get(name) is None:
            raise ConfigError(name, None, "is required")


def redacted(field: str, value, keys):
    """``value`` checked (:func:`check_value`) and redacted with the sensitive key names
    ``keys`` (:func:`dyna.redact.redact`); None stays None."""
    if value is None:
        return None
    check_value(field, value)
    return redact(value, keys)
