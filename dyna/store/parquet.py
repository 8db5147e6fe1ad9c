"""Parquet export and import of experience records through polars, with explicit dtypes.

Every column has a declared polars dtype derived from the record schema (kinds as in
:mod:`dyna.store.sqlite`): ``int`` -> Int64, ``float`` -> Float64, ``str`` and ``json`` ->
String, ``vector`` -> Array(Float32, dim); ``id`` is Int64; the float column ``timestamp``
(seconds since the Unix epoch) -> ``Datetime("us", "UTC")``, a timezone-aware time that
pandas (through pyarrow) and other Parquet readers read as one
(:func:`dyna.store.columns.micros_from_seconds`). Frames are always built with these
dtypes, never inferred, so a column that is entirely null (say ``outcome_verified_by`` when no
outcome was verified) is written as a null String column and read back as String, not as
polars' ``Null`` type. On import a column stored as ``Null`` by another writer is cast to its
declared dtype, and a time column may be any timezone-aware Datetime or a number of seconds;
a missing column, one of an incompatible dtype or a Datetime without a timezone raises
:class:`dyna.errors.ConfigError`. Files are written zstd-compressed to a temporary file and
renamed into place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from dyna.errors import ConfigError, MissingFileError
from dyna.fileio.atomic import atomic_target
from dyna.store.columns import micros_from_seconds

__all__ = ["TIME_COLUMNS", "TIME_DTYPE", "frame_from_columns", "columns_from_frame",
           "polars_schema", "read_parquet", "write_parquet"]

_DTYPES = {"int": pl.Int64, "float": pl.Float64, "str": pl.String, "json": pl.String}
#: Float columns holding seconds since the Unix epoch, written as :data:`TIME_DTYPE`.
TIME_COLUMNS = frozenset({"timestamp"})
#: The Parquet type of a time column: microseconds since the epoch, timezone UTC.
TIME_DTYPE = pl.Datetime("us", "UTC")


def polars_schema(schema: Sequence[tuple[str, str]], dim: int) -> dict[str, pl.DataType]:
    """Declared polars dtypes: ``{"id": Int64, name: dtype, ...}`` in schema order."""
    out: dict[str, pl.DataType] = {"id": pl.Int64}
    for name, kind in schema:
        if kind == "vector":
            out[name] = pl.Array(pl.Float32, dim)
        elif kind == "float" and name in TIME_COLUMNS:
            out[name] = TIME_DTYPE
        else:
            out[name] = _DTYPES[kind]
    return out


def _time_series(name: str, seconds) -> pl.Series:
    """Seconds since the epoch as a :data:`TIME_DTYPE` series (ConfigError out of range)."""
    micros = pl.Series(name, micros_from_seconds(name, seconds), dtype=pl.Int64)
    return micros.cast(pl.Datetime("us")).dt.replace_time_zone("UTC")


def _seconds(s: pl.Series) -> np.ndarray:
    """A time column read back as float64 seconds (null -> NaN): a timezone-aware Datetime
    of any unit or zone, or a number of seconds.

    Raises
    ------
    ConfigError
        A Datetime without a timezone, or a column that is neither time nor number.
    """
    if isinstance(s.dtype, pl.Datetime):
        if s.dtype.time_zone is None:
            raise ConfigError(s.name, str(s.dtype), "a time must be timezone-aware "
                              "(Datetime with a time zone, such as UTC)")
        return s.dt.epoch("us").cast(pl.Float64).to_numpy() / 1e6
    try:
        return s.cast(pl.Float64, strict=True).to_numpy().astype(np.float64, copy=False)
    except Exception as exc:  # polars raises several error types here
        raise ConfigError(s.name, str(s.dtype), f"cannot be read as {TIME_DTYPE} or as "
                          "seconds") from exc


def frame_from_columns(columns: Mapping[str, object], schema: Sequence[tuple[str, str]],
                       dim: int) -> pl.DataFrame:
    """Build a DataFrame with the declared dtypes from numpy/list columns.

    Parameters
    ----------
    columns : mapping
        ``id`` and every schema column, each of length n; vectors float32 (n, dim).
    schema : sequence of (name, kind)
    dim : int

    Returns
    -------
    polars.DataFrame
        Columns ``id`` then the schema's, with :func:`polars_schema` dtypes.

    Raises
    ------
    ConfigError
        A time outside the years 1 to 9999 (field ``timestamp[i]``).
    """
    dtypes = polars_schema(schema, dim)
    series = []
    for name, dtype in dtypes.items():
        v = columns[name]
        if dtype == TIME_DTYPE:
            series.append(_time_series(name, v))
            continue
        if isinstance(dtype, pl.Array):
            v = np.ascontiguousarray(v, dtype=np.float32).reshape(-1, dim)
        elif isinstance(v, np.ndarray) and v.dtype == object:
            v = v.tolist()
        series.append(pl.Series(name, v, dtype=dtype))
    return pl.DataFrame(series)


def columns_from_frame(df: pl.DataFrame, schema: Sequence[tuple[str, str]],
                       dim: int) -> dict[str, np.ndarray]:
    """Numpy columns from a frame, cast to the declared dtypes.

    Returns
    -------
    dict
        ``id`` int64 (n,), float columns float64 (time columns as seconds since the
        epoch), int columns int64, str/json columns object
        arrays (None for null), vectors float32 (n, dim).

    Raises
    ------
    ConfigError
        A declared column is missing or cannot be cast, or a time column is a Datetime
        without a timezone (field: the column name).
    """
    dtypes = polars_schema(schema, dim)
    out: dict[str, np.ndarray] = {}
    n = df.height
    for name, dtype in dtypes.items():
        if name not in df.columns:
            raise ConfigError(name, None, "column missing from the Parquet file")
        s = df[name]
        if dtype == TIME_DTYPE:
            out[name] = np.ascontiguousarray(_seconds(s))
            continue
        if s.dtype != dtype:
            try:
                s = s.cast(dtype, strict=True)
            except Exception as exc:  # polars raises several error types here
                raise ConfigError(name, str(df[name].dtype), f"cannot be read as {dtype}") \
                    from exc
        if isinstance(dtype, pl.Array):
            if s.null_count():
                raise ConfigError(name, "null", "vectors must not be null")
            arr = s.to_numpy().astype(np.float32, copy=False).reshape(n, dim)
        elif dtype == pl.String:
            arr = np.empty(n, dtype=object)
            arr[:] = s.to_list()
        elif dtype == pl.Int64 and s.null_count():
            arr = np.empty(n, dtype=object)
            arr[:] = s.to_list()
        else:
            arr = s.to_numpy()
            if dtype == pl.Float64:
                arr = arr.astype(np.float64, copy=False)
        out[name] = np.ascontiguousarray(arr)
    return out


def write_parquet(path, columns: Mapping[str, object], schema: Sequence[tuple[str, str]],
                  dim: int) -> int:
    """Write records to a Parquet file atomically; returns the number of rows.

    Raises
    ------
    MissingFileError, ConfigError
        The folder of ``path`` does not exist, or ``path`` is a folder
        (:func:`dyna.fileio.atomic.atomic_target`), or a time is out of range
        (:func:`frame_from_columns`); nothing is written.
    """
    df = frame_from_columns(columns, schema, dim)
    with atomic_target(path) as tmp:
        df.write_parquet(tmp, compression="zstd")
    return df.height


def read_parquet(path, schema: Sequence[tuple[str, str]], dim: int) -> dict[str, np.ndarray]:
    """Read records written by :func:`write_parquet` (or any file with those columns).

    Raises
    ------
    MissingFileError
        No such file.
    ConfigError
        A folder, a missing column or an incompatible dtype.
    """
    path = Path(path)
    if not path.exists():
        raise MissingFileError("path", path)
    if not path.is_file():
        raise ConfigError("path", str(path), "is a folder, not a Parquet file")
    return columns_from_frame(pl.read_parquet(path), schema, dim)
