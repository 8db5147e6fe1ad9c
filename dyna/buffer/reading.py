"""Reading a buffer's rows: selecting them, decoding them, sampling them.

Row positions are ``0 <= r < len``; a selection is an int array of positions, a bool mask of
shape ``(len,)``, a slice or None (every row). Decoded rows are JSON-ready dicts; a stored
dict field's text that is not JSON is reported by episode id, never by its text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from dyna.buffer.labels import LabelDictionary
from dyna.buffer.schema import CATEGORICAL_FIELDS, DICT_FIELDS, label_text
from dyna.errors import ConfigError, StoreDamagedError
from dyna.index import ColumnStore

__all__ = ["as_slice", "damaged_error", "decode_rows", "draw_positions", "label_mask",
           "row_positions", "select_positions", "selection"]


def row_positions(sel, n: int) -> np.ndarray:
    """A selection of ``n`` rows as int64 positions (None: all, in order).

    Raises
    ------
    ConfigError
        A mask of the wrong shape, positions that are not integers or out of ``[0, n)``.
    """
    if sel is None:
        return np.arange(n, dtype=np.int64)
    if isinstance(sel, slice):
        return np.arange(n, dtype=np.int64)[sel]
    a = np.asarray(sel)
    if a.dtype == bool:
        if a.shape != (n,):
            raise ConfigError("rows", a.shape, f"a mask must have shape ({n},)")
        return np.flatnonzero(a)
    a = a.reshape(-1)
    if a.size and a.dtype.kind not in "iu":
        raise ConfigError("rows", a.dtype, "must be int row positions or a bool mask")
    a = a.astype(np.int64, copy=False)
    if a.size and (a.min() < 0 or a.max() >= n):
        bad = a[(a < 0) | (a >= n)][0]
        raise ConfigError("rows", int(bad), f"row position out of range [0, {n})")
    return a


def label_mask(store: ColumnStore, dicts: Mapping[str, LabelDictionary],
               filters: Mapping[str, Any]):
    """Mask of the rows whose categorical fields equal the given labels: a bool array
    ``(len,)``, None when no filter applies, False when a label was never recorded.

    Raises
    ------
    ConfigError
        A field that is not categorical.
    """
    mask = None
    for name, label in filters.items():
        if name not in dicts:
            raise ConfigError(name, label, "not a categorical field to select on")
        if label is None:
            continue
        code = dicts[name].lookup.get(label_text(label, name))
        if code is None:
            return False
        m = store.view(name) == code
        mask = m if mask is None else (mask & m)
    return mask


def select_positions(store: ColumnStore, dicts: Mapping[str, LabelDictionary],
                     filters: Mapping[str, Any]) -> np.ndarray:
    """Ascending int64 positions of the rows whose categorical fields equal the given labels
    (:func:`label_mask`; a label never recorded matches nothing)."""
    mask = label_mask(store, dicts, filters)
    if mask is None:
        return np.arange(len(store), dtype=np.int64)
    if mask is False:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(mask)


def as_slice(rows: np.ndarray) -> slice | None:
    """Ascending positions ``rows`` as one slice when they are contiguous (``slice(0, 0)``
    when there are none), else None."""
    if rows.size == 0:
        return slice(0, 0)
    if int(rows[-1]) - int(rows[0]) + 1 == rows.size:
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return None


def selection(store: ColumnStore, dicts: Mapping[str, LabelDictionary],
              filters: Mapping[str, Any]) -> slice | np.ndarray:
    """The rows :func:`select_positions` selects, as a slice when they are contiguous (a
    zero-copy view when used as an index), else as positions."""
    rows = select_positions(store, dicts, filters)
    sl = as_slice(rows)
    return rows if sl is None else sl


def decode_rows(store: ColumnStore, dicts: Mapping[str, LabelDictionary], idx: np.ndarray,
                features: bool, source: str | None) -> list[dict]:
    """Rows ``idx`` as JSON-ready dicts (see :meth:`dyna.buffer.ExperienceBuffer.rows`).

    Raises
    ------
    StoreDamagedError, ConfigError
        A stored dict field's text is not JSON (:func:`damaged_error`).
    """
    out_cols: dict[str, list] = {"id": store.view("id")[idx].tolist()}
    for name in CATEGORICAL_FIELDS:
        table = [None] + dicts[name].labels[1:]
        out_cols[name] = [table[c] for c in store.view(name)[idx].tolist()]
    out_cols["reward"] = store.view("reward")[idx].tolist()
    out_cols["timestamp"] = store.view("timestamp")[idx].tolist()
    for name in DICT_FIELDS:
        texts = store.view(name)[idx]
        try:
            out_cols[name] = [None if s is None else json.loads(s) for s in texts]
        except (TypeError, ValueError, RecursionError):
            raise damaged_error(name, texts, out_cols["id"], source) from None
    if features:
        out_cols["state_features"] = store.view("features")[idx].tolist()
    keys = list(out_cols)
    return [dict(zip(keys, vals)) for vals in zip(*out_cols.values())]


def damaged_error(name: str, texts, ids: list,
                  source: str | None) -> StoreDamagedError | ConfigError:
    """The error for a stored ``name`` text among ``texts`` (ids ``ids``) that is not JSON.

    Names the first such row by episode id and the decoder's complaint (a position or a type
    name), never the text itself (it may hold a secret). StoreDamagedError when the rows came
    from a store (``source``, its path); else the caller gave the text (a
    :class:`~dyna.buffer.JsonText`), and it is a ConfigError naming ``field[id]``.
    """
    for t, i in zip(texts, ids):
        if t is None:
            continue
        try:
            json.loads(t)
        except (TypeError, ValueError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            if source is None:
                return ConfigError(f"{name}[id {i}]", type(t).__name__,
                                   f"a JsonText that is not JSON ({why})")
            return StoreDamagedError(source, f"a stored {name} value (episode id "
                                     f"{i}) is not JSON ({why})")
    if source is None:
        return ConfigError(name, None, "a JsonText that is not JSON")
    return StoreDamagedError(source, f"a stored {name} value is not JSON")


def draw_positions(n: int, m: int, seed, weights) -> np.ndarray:
    """``n`` positions in ``[0, m)`` drawn with replacement, uniformly or proportionally to
    ``weights`` (see :meth:`dyna.buffer.ExperienceBuffer.sample`); int64 ``(n,)``.

    Raises
    ------
    ConfigError
        Bad weights, or n > 0 with nothing to draw from.
    """
    if n and m == 0:
        raise ConfigError("n", n, "nothing to sample from (no rows)")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if weights is None:
        return rng.integers(0, m, size=int(n), dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (m,):
        raise ConfigError("weights", w.shape, f"must have shape ({m},)")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ConfigError("weights", "negative or non-finite", "must be >= 0 and finite")
    cdf = np.cumsum(w)
    if not cdf[-1] > 0:
        raise ConfigError("weights", 0.0, "must have a positive sum")
    u = rng.random(int(n)) * cdf[-1]
    # side="right" never picks a zero-weight row: cdf is flat across it.
    return np.minimum(np.searchsorted(cdf, u, side="right"), m - 1).astype(np.int64)
