"""Records as columns: the schema kinds and the conversions every backend shares.

A store's records are given and returned column by column (numpy arrays or lists, one entry
per record). What turns those columns into rows for SQL and SQL rows back into columns does
not depend on the database, so it lives here once and both backends
(:mod:`dyna.store.sqlite`, :mod:`dyna.store.postgres`) call it.

Kinds of a schema column (``(name, kind)`` pairs after ``id``): ``int``, ``float``, ``str``,
``json`` (text holding JSON), ``vector`` (``dim`` float32 values, stored as bytes in native
byte order).

Times: a store keeps ``timestamp`` as float seconds since the Unix epoch (UTC); its exports
write it as a time type, whole microseconds since the epoch in UTC: Parquet as
``Datetime("us", "UTC")`` (:mod:`dyna.store.parquet`), JSON Lines as ISO 8601 text
(``"2023-11-14T22:13:20.123457+00:00"``). Seconds become microseconds rounded half to even;
an import reads either form back (:func:`seconds_from_times`), so export, import and export
again give the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone

import numpy as np

from dyna.buffer.schema import check_label_text, check_nfkc
from dyna.errors import ConfigError, StoreDamagedError

__all__ = ["FILTER_COLUMNS", "KINDS", "MICROS_RANGE", "READ_CHUNK", "SECONDS_RANGE",
           "STORE_TABLES", "TABLE",
           "check_filter", "check_group_by", "check_nfkc", "check_row", "check_schema",
           "check_tenant",
           "check_time_range", "collect_chunks",
           "column_array", "consumption_rows", "encode_labels", "given_ids", "iso_times",
           "join_vectors", "made_ids", "micros_from_seconds", "prepare_columns", "read_names",
           "row_bytes_sql", "seconds_from_micros", "seconds_from_times", "summary_dict",
           "time_in_range", "to_columns", "unencodable"]

#: SQL type of each kind in SQLite (PostgreSQL has its own, :data:`dyna.store.postgres.PG_TYPES`).
KINDS = {"int": "INTEGER", "float": "REAL", "str": "TEXT", "json": "TEXT", "vector": "BLOB"}
#: The table of records, in every backend.
TABLE = "episodes"
#: Tables a dyna store holds, in every backend (besides the database's own).
STORE_TABLES = (TABLE, "meta", "schema_version")
#: Columns a filter may match exactly (``delete``, ``read``, ``count``).
FILTER_COLUMNS = ("id", "tenant_id", "task_type", "action_type", "outcome", "run_id",
                  "task_id", "request_id")
#: Rows fetched per step of a backend's ``read`` (small enough to stay in cache).
READ_CHUNK = 4096


def check_schema(schema: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """A store's columns after ``id`` as ``(name, kind)`` pairs, checked (every backend).

    Raises
    ------
    ConfigError
        A kind not in :data:`KINDS`, a name that is not an identifier or is ``id``, or no
        ``tenant_id``, ``task_type`` or ``timestamp`` column.
    """
    out = tuple((str(n), str(k)) for n, k in schema)
    names = [n for n, _ in out]
    for n, k in out:
        if k not in KINDS:
            raise ConfigError(f"schema.{n}", k, f"kind must be one of {sorted(KINDS)}")
        if not n.isidentifier() or n == "id":
            raise ConfigError("schema", n, "column names must be identifiers other than id")
    for need in ("tenant_id", "task_type", "timestamp"):
        if need not in names:
            raise ConfigError("schema", names, f"must contain {need!r}")
    return out


def encode_labels(vals: list) -> tuple[np.ndarray, list]:
    """Dictionary-encode a list of labels: int32 codes and distinct labels (first seen)."""
    if not vals or (vals[0] is None and vals.count(None) == len(vals)):  # all NULL
        return np.zeros(len(vals), dtype=np.int32), [None]
    lookup = dict.fromkeys(vals)
    for code, label in enumerate(lookup):
        lookup[label] = code
    codes = np.fromiter(map(lookup.__getitem__, vals), dtype=np.int32, count=len(vals))
    return codes, list(lookup)


def unencodable(schema: Sequence[tuple[str, str]], cols: list[list]) -> ConfigError:
    """ConfigError naming the first text value of ``cols`` that UTF-8 cannot encode."""
    for (name, _), vals in zip(schema, cols):
        for i, v in enumerate(vals):
            if isinstance(v, str) and not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as exc:
                    return ConfigError(f"{name}[{i}]", v[exc.start], "a lone surrogate "
                                       f"at position {exc.start}; text must be valid Unicode")
    return ConfigError("columns", "text", "holds text that UTF-8 cannot encode")


# ----------------------------------------------------------------------------- writing
def prepare_columns(schema: Sequence[tuple[str, str]], dim: int,
                    columns: Mapping[str, object], n: int) -> list[list]:
    """Validated per-column Python lists in schema order, ready for an insert.

    Parameters
    ----------
    schema : sequence of (str, str)
        The store's columns after ``id``.
    dim : int
        Length of every vector.
    columns : mapping of str to sequence
        Each of length ``n``; a vector column as float32 values of shape ``(n, dim)``. A
        column left out is stored as NULL.
    n : int
        Number of records.

    Returns
    -------
    list of list
        One list per schema column; vectors as ``bytes`` of ``dim`` float32 values each.

    Raises
    ------
    ConfigError
        A column of the wrong length or shape.
    """
    cols: list[list] = []
    for name, kind in schema:
        v = columns.get(name)
        if v is None:
            cols.append([None] * n)
        elif kind == "vector":
            arr = np.ascontiguousarray(v, dtype=np.float32)
            if arr.shape != (n, dim):
                raise ConfigError(name, arr.shape, f"must have shape ({n}, {dim})")
            raw = arr.tobytes()
            w = dim * 4
            cols.append([raw[i:i + w] for i in range(0, n * w, w)])
        else:
            vals = v.tolist() if isinstance(v, np.ndarray) else list(v)
            if len(vals) != n:
                raise ConfigError(name, len(vals), f"column length must be {n}")
            cols.append(vals)
    return cols


def given_ids(ids, n: int) -> np.ndarray | None:
    """Explicit ids of a batch of ``n`` records as int64 ``(n,)`` (None: none given).

    Raises
    ------
    ConfigError
        Not one id per record.
    """
    given = None if ids is None else np.asarray(ids, dtype=np.int64).reshape(-1)
    if given is not None and given.shape != (n,):
        raise ConfigError("ids", given.shape, f"must have shape ({n},)")
    return given


def made_ids(ids, start: int) -> np.ndarray:
    """The ids an ``append_from`` builder returned, as int64, checked to be >= ``start``.

    Raises
    ------
    ConfigError
        An id below the next id.
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size and int(ids.min()) < start:
        raise ConfigError("ids", int(ids.min()), f"must be >= next id {start}")
    return ids


def check_row(schema: Sequence[tuple[str, str]], dim: int, values: Sequence[object], *,
              refuse_nul: bool = False) -> tuple:
    """One record's values (schema order) checked for a single-row insert.

    ``refuse_nul``: text holding NUL is refused too (PostgreSQL text cannot store it).

    Raises
    ------
    ConfigError
        The wrong number of values, a vector that is not ``bytes`` of ``dim`` float32
        values, text with NUL when refused.
    """
    values = tuple(values)
    if len(values) != len(schema):
        raise ConfigError("values", len(values), f"must have {len(schema)} values")
    for (name, kind), v in zip(schema, values):
        if kind == "vector" and v is not None:
            if type(v) is not bytes or len(v) != 4 * dim:
                raise ConfigError(name, type(v).__name__, f"must be bytes of {dim} "
                                  "float32 values")
        elif refuse_nul and isinstance(v, str) and "\x00" in v:
            raise ConfigError(name, "\\x00", "PostgreSQL text cannot hold a NUL character")
    return values


# The characters a tenant must not hold, by class: what each is called in the message.
_TENANT_CONTROLS = re.compile(
    r"(?P<c0>[\x00-\x1f])|(?P<delete>\x7f)|(?P<c1>[\x80-\x9f])|(?P<separator>[\u2028\u2029])"
    r"|(?P<bidi>[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069])")
_CONTROL_CLASS = {"c0": "a C0 control character", "delete": "DEL",
                  "c1": "a C1 control character", "separator": "a line or paragraph separator",
                  "bidi": "a bidirectional control character"}


def check_tenant(tenant_id, field: str = "tenant_id") -> str:
    """A tenant id: a non-empty string of at most :data:`dyna.buffer.schema.MAX_LABEL_CHARS`
    characters without NUL or another control character, already in Unicode NFKC form, else
    ConfigError (naming ``field``).

    Tenants are matched exactly, byte for byte (as PostgreSQL's row-level security compares
    them), never folded: a tenant that NFKC would change (``"ｔ1"``, ``"e\u0301"``) is
    refused rather than stored under a second spelling of the same name. Control characters
    are refused because a tenant is named on command lines, in logs and in file names, where
    they are invisible or rewrite what is shown: C0 (U+0000-U+001F), DEL (U+007F), C1
    (U+0080-U+009F), the line and paragraph separators U+2028/U+2029 and the bidirectional
    controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069). The message shows the
    tenant escaped (``repr``: ``'a\\x1bb'``) with the character's code point and position.
    """
    if tenant_id is None or not isinstance(tenant_id, str) or not tenant_id:
        raise ConfigError(field, tenant_id, "a non-empty tenant id is required")
    check_label_text(field, tenant_id)
    bad = _TENANT_CONTROLS.search(tenant_id)
    if bad is not None:
        raise ConfigError(field, tenant_id, f"a tenant id must not contain "
                          f"{_CONTROL_CLASS[bad.lastgroup]} (U+{ord(bad.group()):04X} at "
                          f"position {bad.start()})")
    return check_nfkc(field, tenant_id)


def check_filter(column: str, value, kinds: Mapping[str, str]) -> None:
    """Refuse a filter on a column that is not in :data:`FILTER_COLUMNS` or not stored."""
    if column not in FILTER_COLUMNS or (column != "id" and column not in kinds):
        raise ConfigError(column, value, f"filter column must be one of {list(FILTER_COLUMNS)}")


def check_group_by(by: Sequence[str], kinds: Mapping[str, str]) -> None:
    """Refuse a ``keep_newest`` grouping column the store does not have."""
    for col in by:
        if col not in kinds:
            raise ConfigError("by", col, "unknown column")


# ----------------------------------------------------------------------------- reading
def read_names(schema: Sequence[tuple[str, str]], columns: Sequence[str] | None,
               categories: Sequence[str]) -> list[str]:
    """The columns a ``read`` returns (``id`` first), checked with ``categories``.

    Raises
    ------
    ConfigError
        An unknown column, or a ``categories`` entry that is not a ``str`` column.
    """
    kinds = dict(schema)
    names = ["id"] + [c for c, _ in schema] if columns is None else \
        ["id"] + [c for c in columns if c != "id"]
    for c in names[1:]:
        if c not in kinds:
            raise ConfigError("columns", c, "unknown column")
    for c in categories:
        if kinds.get(c) != "str":
            raise ConfigError("categories", c, "must name a str column")
    return names


def join_vectors(vals, dim: int) -> bytes:
    """One chunk of vector values as one bytes object; NULL or a wrong length -> zeros."""
    w = dim * 4
    if None not in vals:
        raw = b"".join(vals)
        if len(raw) == len(vals) * w and set(map(len, vals)) == {w}:
            return raw
    zero = bytes(w)
    return b"".join(v if isinstance(v, bytes) and len(v) == w else zero for v in vals)


def collect_chunks(chunks: Iterable[Sequence[tuple]], kinds: Sequence[str],
                   dim: int) -> list:
    """Fetched rows, chunk by chunk, transposed into one list per column.

    A vector column is one ``bytearray`` that each chunk's joined vectors
    (:func:`join_vectors`) are appended to, so no million small byte strings are alive at
    once and the column is never copied again to be joined.
    """
    acc: list = [bytearray() if kind == "vector" else [] for kind in kinds]
    vectors = [j for j, kind in enumerate(kinds) if kind == "vector"]
    for chunk in chunks:
        cols = list(zip(*chunk))
        for j in vectors:
            acc[j] += join_vectors(cols[j], dim)
            cols[j] = ()
        for col, vals in zip(acc, cols):
            col.extend(vals)
    return acc


def column_array(kind: str, vals, dim: int) -> np.ndarray:
    """One column of fetched values (a list) as a numpy array (see :func:`to_columns`).

    A vector column arrives as one ``bytearray`` of joined rows (:func:`collect_chunks`);
    the array is a view of it (writable, no copy).
    """
    n = len(vals)
    if kind == "vector":
        return np.frombuffer(vals, dtype=np.float32).reshape(-1, dim)
    if kind == "float":
        if None in vals:
            vals = [np.nan if v is None else v for v in vals]
        return np.array(vals, dtype=np.float64).reshape(n)
    if kind == "int":
        if None in vals:
            arr = np.empty(n, dtype=object)
            arr[:] = vals
            return arr
        return np.array(vals, dtype=np.int64).reshape(n)
    arr = np.empty(n, dtype=object)
    arr[:] = vals
    return arr


def to_columns(names: Sequence[str], kinds: Sequence[str], acc: list,
               categories: Sequence[str], dim: int, where: str) -> dict[str, object]:
    """The result of a backend's ``read``: collected values as numpy columns.

    Returns
    -------
    dict of str to ndarray or (ndarray, list)
        ``id`` int64 (n,); int columns int64 (NULL ints come back as an object array);
        float columns float64 (NULL -> NaN); str/json columns object arrays (None for NULL);
        vector columns float32 (n, dim), NULL or a value of the wrong length -> zeros. A
        column named in ``categories`` is a pair ``(codes, labels)`` (:func:`encode_labels`).

    Raises
    ------
    StoreDamagedError
        A number column holds text another program wrote there (``where`` names the store).
    """
    cats = set(categories)
    out: dict[str, object] = {}
    for name, kind, vals in zip(names, kinds, acc):
        if name in cats:
            out[name] = encode_labels(vals)
            continue
        try:
            out[name] = column_array(kind, vals, dim)
        except (TypeError, ValueError):
            bad = next((v for v in vals if v is not None
                        and not isinstance(v, (int, float))), None)
            raise StoreDamagedError(where, f"a stored {name} value is {bad!r:.40}, "
                                    "not a number") from None
    return out


# ----------------------------------------------------------------------------- statistics
def summary_dict(n, n_tenants, n_task_types, oldest, newest) -> dict:
    """A backend's ``summary``: counts as int, the time span as float (None without rows)."""
    return {"n_records": int(n), "n_tenants": int(n_tenants), "n_task_types": int(n_task_types),
            "oldest": None if oldest is None else float(oldest),
            "newest": None if newest is None else float(newest)}


def row_bytes_sql(schema: Sequence[tuple[str, str]], dim: int,
                  text_bytes: Callable[[str], str]) -> str:
    """SQL summing the bytes of one row: 8 per int or float column (``id`` included), 4 d
    per vector column and, for each text column, ``text_bytes(name)`` (the backend's
    expression for the UTF-8 length of a value, 0 for NULL)."""
    parts = ["8"]
    for name, kind in schema:
        if kind in ("int", "float"):
            parts.append("8")
        elif kind == "vector":
            parts.append(str(4 * dim))
        else:
            parts.append(text_bytes(name))
    return " + ".join(parts)


def consumption_rows(rows: Iterable[tuple]) -> list[dict]:
    """A backend's ``consumption``: ``(tenant, task type, records, bytes)`` rows as dicts
    sorted by tenant then task type."""
    out = [{"tenant_id": t, "task_type": k, "records": int(n), "bytes": int(b)}
           for t, k, n, b in rows]
    out.sort(key=lambda r: (r["tenant_id"], r["task_type"]))
    return out



# ----------------------------------------------------------------------------- times
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICRO = timedelta(microseconds=1)
#: Microseconds since the epoch of the first and last instant an export can write
#: (0001-01-01 and 9999-12-31T23:59:59.999999, UTC: the range of ISO 8601 years).
MICROS_RANGE = ((datetime.min.replace(tzinfo=timezone.utc) - _EPOCH) // _MICRO,
                (datetime.max.replace(tzinfo=timezone.utc) - _EPOCH) // _MICRO)
#: Seconds since the epoch an export can write: from the first instant of the year 1
#: (inclusive) to the first instant of the year 10000 (exclusive). Checked on the seconds
#: themselves: at these magnitudes a float64 microsecond count cannot tell the last
#: microsecond of 9999 from the first of 10000 (both round to 253402300800000000).
SECONDS_RANGE = (MICROS_RANGE[0] / 1e6, (MICROS_RANGE[1] + 1) / 1e6)


def micros_from_seconds(name: str, seconds) -> np.ndarray:
    """Seconds since the Unix epoch as whole microseconds, int64 ``(n,)``.

    Rounded half to even (``numpy.rint``); exact for whole microseconds up to the year 2255
    (2**53 microseconds), so :func:`seconds_from_micros` then this function is the identity.

    Raises
    ------
    ConfigError
        A value (field ``name[i]``) that is not finite or is outside :data:`SECONDS_RANGE`.
    """
    secs = np.asarray(seconds, dtype=np.float64).reshape(-1)
    micros = np.rint(secs * 1e6)
    with np.errstate(invalid="ignore"):
        bad = ~((secs >= SECONDS_RANGE[0]) & (secs < SECONDS_RANGE[1]))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError(f"{name}[{i}]", float(secs[i]), "must be a time in the years 1 to "
                          "9999 (seconds since the Unix epoch)")
    return micros.astype(np.int64)


def check_time_range(name: str, seconds) -> np.ndarray:
    """``seconds`` as float64 ``(n,)`` once every finite value is a time an export can write
    (:func:`micros_from_seconds`; NaN and inf are left to the buffer, which names the row).

    Raises
    ------
    ConfigError
        Field ``name[i]``: a finite time outside the years 1 to 9999.
    """
    secs = np.asarray(seconds, dtype=np.float64).reshape(-1)
    micros_from_seconds(name, np.where(np.isfinite(secs), secs, 0.0))
    return secs


def time_in_range(seconds: float) -> bool:
    """Whether one finite time is one an export can write (:data:`SECONDS_RANGE`: the
    year 10000 begins at 253402300800.0, which is refused)."""
    return bool(SECONDS_RANGE[0] <= seconds < SECONDS_RANGE[1])


def seconds_from_micros(micros) -> np.ndarray:
    """Whole microseconds since the epoch as float64 seconds ``(n,)``."""
    return np.asarray(micros, dtype=np.int64).reshape(-1) / 1e6


def iso_times(name: str, seconds) -> list[str]:
    """Seconds since the epoch as ISO 8601 text in UTC with microseconds,
    ``"2023-11-14T22:13:20.123457+00:00"`` (list of str; ConfigError as
    :func:`micros_from_seconds`)."""
    return [(_EPOCH + timedelta(microseconds=int(us))).isoformat(timespec="microseconds")
            for us in micros_from_seconds(name, seconds)]


def _micros_from_iso(name: str, text: str) -> int:
    """ISO 8601 text with a timezone as whole microseconds since the epoch."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(name, text, "must be an ISO 8601 time with a timezone or seconds "
                          "since the Unix epoch") from None
    if when.utcoffset() is None:
        raise ConfigError(name, text, "must carry a timezone (such as +00:00): a time "
                          "without one is ambiguous")
    return (when - _EPOCH) // _MICRO


def seconds_from_times(name: str, values) -> np.ndarray:
    """Imported times as float64 seconds since the epoch ``(n,)``.

    Each value is a number of seconds (int or float) or ISO 8601
    text with a timezone (as :func:`iso_times` writes; another offset is converted to UTC).

    Raises
    ------
    ConfigError
        Field ``name[i]``: a bool, text that is not an ISO 8601 time, a time without a
        timezone, or another type.
    """
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        if isinstance(v, str):
            out[i] = _micros_from_iso(f"{name}[{i}]", v) / 1e6
        elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            try:
                out[i] = v
            except OverflowError:
                raise ConfigError(f"{name}[{i}]", "out of range", "must be finite: beyond "
                                  "the float64 range") from None
        else:
            raise ConfigError(f"{name}[{i}]", v, "must be seconds since the Unix epoch or "
                              "an ISO 8601 time with a timezone")
    return out
