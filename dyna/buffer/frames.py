"""A buffer's rows as a polars DataFrame, and a DataFrame's columns as a batch to record.

polars is imported only when a frame is made or read, which keeps ``import dyna.buffer``
light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dyna.buffer.labels import LabelDictionary
from dyna.buffer.schema import CATEGORICAL_FIELDS, DICT_FIELDS, Categorical, parse_json_texts
from dyna.errors import ConfigError
from dyna.index import ColumnStore

__all__ = ["batch_from_frame", "frame_of"]


def frame_of(store: ColumnStore, dicts: Mapping[str, LabelDictionary]):
    """Every row of ``store`` as a polars DataFrame (a copy), in row order.

    Columns: ``id`` Int64, the categoricals as String (null when missing), ``reward`` and
    ``timestamp`` Float64, the dict fields as JSON String (null when absent), and
    ``features`` as ``Array(Float32, d)``.
    """
    import polars as pl  # noqa: PLC0415

    cols = {"id": pl.Series("id", store.view("id"), dtype=pl.Int64)}
    for name in CATEGORICAL_FIELDS:
        table = pl.Series(name, [None] + dicts[name].labels[1:], dtype=pl.String)
        cols[name] = table.gather(store.view(name))
    cols["reward"] = pl.Series("reward", store.view("reward"), dtype=pl.Float64)
    cols["timestamp"] = pl.Series("timestamp", store.view("timestamp"), dtype=pl.Float64)
    for name in DICT_FIELDS:
        cols[name] = pl.Series(name, store.view(name).tolist(), dtype=pl.String)
    features = store.view("features")
    cols["features"] = pl.Series("features", features,
                                 dtype=pl.Array(pl.Float32, features.shape[1]))
    return pl.DataFrame(cols)


def batch_from_frame(df) -> tuple[dict[str, Any], np.ndarray | None]:
    """The columns of a DataFrame shaped like :func:`frame_of` output as arguments of
    :meth:`~dyna.buffer.ExperienceBuffer.record_batch`: ``(columns, ids)``.

    Categoricals become :class:`~dyna.buffer.Categorical`, JSON dict columns are parsed,
    ``features`` become ``state_features``; ``ids`` is the ``id`` column (None without one).

    Raises
    ------
    ConfigError
        No ``reward`` column; a dict column's text that is not JSON, naming ``field[row]``
        and a short redacted prefix.
    """
    import polars as pl  # noqa: PLC0415

    cols: dict[str, Any] = {}
    for name in CATEGORICAL_FIELDS:
        if name in df.columns:
            s = df.get_column(name).cast(pl.String)
            labels = s.unique(maintain_order=True)
            codes = s.cast(pl.Enum(labels.drop_nulls().to_list())).to_physical()
            codes = codes.fill_null(len(labels.drop_nulls())).to_numpy().astype(np.int64)
            cols[name] = Categorical(codes, labels.drop_nulls().to_list() + [""])
    for name in ("reward", "timestamp"):
        if name in df.columns:
            cols[name] = df.get_column(name).cast(pl.Float64).to_numpy()
    for name in DICT_FIELDS:
        if name in df.columns:
            cols[name] = parse_json_texts(name, df.get_column(name).to_list(), "is not JSON")
    if "features" in df.columns:
        cols["state_features"] = df.get_column("features").to_numpy().astype(np.float32)
    ids = df.get_column("id").to_numpy() if "id" in df.columns else None
    if "reward" not in cols:
        raise ConfigError("reward", None, "is required")
    return cols, ids
