"""Recording episodes: one (:func:`encode_episode`), or a batch (encode, stage, publish).

Nothing is written until everything is valid: :meth:`dyna.buffer.ExperienceBuffer.record`
checks one episode whole (:func:`encode_episode`) before it writes its row, and
:meth:`dyna.buffer.ExperienceBuffer.record_batch` runs three steps, so a bad batch changes
nothing:

1. **encode** -- categorical values become codes (:func:`encode_categoricals`; new labels
   are only noted), dict fields become redacted JSON text (:func:`encode_dict_fields`),
   features are given or hashed from the dicts (:func:`batch_features`);
2. **stage** -- :func:`stage_batch` writes reward, timestamp, ids, features and per-row codes
   to a staging area that is not visible yet, validating them as it goes (one compiled pass
   for the numeric columns, :func:`stage_rows`, one per code column, :func:`stage_codes`):
   the free rows after the live ones of a growable buffer, or fresh arrays for a ring
   (whose free slots are live rows). The features' inverse norms, which the index scores
   with, are computed here too;
3. **publish** -- once everything is valid, the new labels are added to the dictionaries
   and :func:`publish_batch` makes the rows live.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numba
import numpy as np

from dyna.buffer.labels import LabelDictionary
from dyna.buffer.schema import (CATEGORICAL_FIELDS, DICT_FIELDS, REQUIRED_FIELDS, JsonText,
                                check_fields, check_nfkc, check_text, clock_seconds,
                                finite_float, float_array, json_texts, label_text,
                                parse_json_texts, redacted, to_json)
from dyna.errors import ConfigError
from dyna.index import ColumnStore, copy_with_inverse_norms, inverse_norms
from dyna.redact import check_label, hash_features

__all__ = ["NO_IDS", "Episode", "Staged", "batch_features", "check_ids", "encode_categoricals",
           "encode_dict_fields", "encode_episode", "publish_batch", "stage_batch",
           "stage_codes", "stage_rows"]

#: ``ids`` of :func:`stage_rows` when the batch gets the next ids in order.
NO_IDS = np.zeros(0, dtype=np.int64)
_NO_FEATURES = np.zeros((0, 1), dtype=np.float32)
_STAGED_COLUMNS = ("id", "reward", "timestamp", "features", "inv_norm")


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def stage_rows(reward, ts, ids, first_id, feats, id_dst, rew_dst, ts_dst, feat_dst, inv_dst,
               base, check_prev):  # pragma: no cover - compiled
    """Write reward, timestamp, id and (unless ``feats`` has no rows) features with their
    inverse norms for a batch to rows ``base..base+n`` of the destinations, validating them.

    ``ids`` empty means ``first_id, first_id + 1, ...``. Returns ``(column, row, sorted)``:
    column 0 (reward), 1 (timestamp) or 2 (features) and the first invalid row, or
    ``(-1, -1, s)`` when all are valid, with ``s`` whether the timestamps are non-decreasing
    (and with ``check_prev``, not below ``ts_dst[base - 1]``, the last live row's). Reward
    and timestamp are copied and validated in one vectorised pass (``x * 0`` is 0 exactly
    when x is finite; only ``reassoc`` is allowed, so NaN and inf propagate); the first bad
    row is searched for only when there is one.
    """
    n = reward.shape[0]
    if n == 0:
        return -1, -1, True
    out_r = rew_dst[base:base + n]
    out_t = ts_dst[base:base + n]
    out_id = id_dst[base:base + n]
    bad = 0.0
    for i in range(n):   # copy and validate in one vectorised pass
        r = reward[i]
        t = ts[i]
        out_r[i] = r
        out_t[i] = t
        bad += r * 0.0 + t * 0.0
    later = ts[1:]
    earlier = ts[:-1]
    descents = 0
    for i in range(n - 1):
        descents += later[i] < earlier[i]
    if bad != 0.0:   # NaN: some value is not finite
        for i in range(n):
            if not np.isfinite(reward[i]):
                return 0, i, False
            if not np.isfinite(ts[i]):
                return 1, i, False
    ts_sorted = descents == 0 and not (check_prev and ts[0] < ts_dst[base - 1])
    if ids.shape[0] == 0:
        for i in range(n):
            out_id[i] = first_id + i
    else:
        for i in range(n):
            out_id[i] = ids[i]
    if feats.shape[0]:
        bad_row = copy_with_inverse_norms(feats, feat_dst, base, inv_dst)
        if bad_row >= 0:
            return 2, bad_row, False
    return -1, -1, ts_sorted


@numba.njit(cache=True, nogil=True)
def stage_codes(src, mapping, dst, base, required):  # pragma: no cover - compiled
    """``dst[base + i] = mapping[src[i]]``; returns ``(row, reason)`` of the first bad row.

    reason 0: ``src[i]`` outside ``[0, len(mapping))``; reason 1: a required column would get
    code 0 (missing). ``(-1, -1)`` when every row is valid. The range is checked by one
    min/max pass; a mapping that is a run of consecutive codes (labels registered in order,
    the common case) is applied as an offset, anything else as a table lookup.
    """
    n = src.shape[0]
    m = mapping.shape[0]
    if n == 0:
        return -1, -1
    out = dst[base:base + n]
    off = mapping[0] if m else 0   # no labels: every code is out of range (found below)
    run = True
    for j in range(m):
        if mapping[j] != off + j:
            run = False
            break
    lo = src[0]
    hi = src[0]
    if run and (off > 0 or not required):   # one pass: shift, and find the code range
        for i in range(n):
            c = src[i]
            out[i] = c + off
            lo = c if c < lo else lo
            hi = c if c > hi else hi
        if lo >= 0 and hi < m:
            return -1, -1
    else:
        for i in range(n):
            c = src[i]
            lo = c if c < lo else lo
            hi = c if c > hi else hi
    if lo < 0 or hi >= m:
        for i in range(n):
            if src[i] < 0 or src[i] >= m:
                return i, 0
    zeros = 0
    for i in range(n):
        v = mapping[src[i]]
        out[i] = v
        zeros += v == 0
    if required and zeros:
        for i in range(n):
            if out[i] == 0:
                return i, 1
    return -1, -1


@dataclass(frozen=True)
class Episode:
    """One episode, checked whole and ready to be written (:func:`encode_episode`).

    Attributes
    ----------
    labels : dict of str to str
        Each categorical field's label ("" = missing).
    reward, timestamp : float
    json_text : dict of str to str or None
        Each dict field's redacted JSON text (None = absent).
    features : numpy.ndarray
        float32 ``(d,)``.
    inv_norm : numpy.float32
        1 / ||features|| (0 for a zero vector).
    """

    labels: dict
    reward: float
    timestamp: float
    json_text: dict
    features: np.ndarray
    inv_norm: np.float32


def encode_episode(episode: Mapping[str, Any], dicts: Mapping[str, LabelDictionary],
                   tainted: Mapping[str, set], secrets: bool, clock, keys,
                   dim: int) -> Episode:
    """Check one episode's fields (see :meth:`dyna.buffer.ExperienceBuffer.record`) and
    encode them; nothing is committed.

    Parameters
    ----------
    dicts, tainted
        The buffer's label dictionaries and its labels that hold a secret.
    secrets : bool
        Refuse a new (or tainted) label in which a secret detector fires.
    clock : callable
        The time when ``timestamp`` is omitted.
    keys
        Sensitive key names for :func:`dyna.redact.redact`.
    dim : int
        Feature dimension.

    Raises
    ------
    ConfigError
        As :meth:`dyna.buffer.ExperienceBuffer.record`.
    """
    check_fields(episode)
    labels = {}
    for name in CATEGORICAL_FIELDS:
        label = label_text(episode.get(name), name)
        if not label and name in REQUIRED_FIELDS:
            raise ConfigError(name, episode.get(name), "is required and must be non-empty")
        if label and (label not in dicts[name].lookup or label in tainted.get(name, ())):
            check_text(name, label)
            if name == "tenant_id":
                check_nfkc(name, label)   # matched byte for byte: refused, never folded
            if secrets:
                check_label(name, label)
        labels[name] = label
    reward = finite_float("reward", episode["reward"])
    ts = episode.get("timestamp")
    ts = clock_seconds(clock) if ts is None else finite_float("timestamp", ts)
    values = {name: redacted(name, episode.get(name), keys) for name in DICT_FIELDS}
    json_text = {name: to_json(name, value) for name, value in values.items()}
    if episode.get("state_features") is not None:
        feat = float_array("state_features", episode["state_features"], np.float32)
        if feat.shape != (dim,):
            raise ConfigError("state_features", feat.shape, f"must have shape ({dim},)")
    else:
        feat = hash_features(values, dim)
    inv = inverse_norms(feat[None, :], "state_features")
    return Episode(labels, reward, ts, json_text, feat, inv[0])


def check_ids(ids, n: int, next_id: int) -> np.ndarray:
    """Explicit ids as int64 ``(n,)``: integers, strictly increasing, >= ``next_id``.

    Raises
    ------
    ConfigError
        Naming ``ids``.
    """
    id_src = np.asarray(ids)
    if id_src.shape != (n,) or (n and id_src.dtype.kind not in "iu"):
        raise ConfigError("ids", id_src.shape, f"must be {n} integers")
    id_src = id_src.astype(np.int64)
    if n and (id_src[0] < next_id or np.any(id_src[1:] <= id_src[:-1])):
        raise ConfigError("ids", int(id_src[0]),
                          f"must be strictly increasing and >= next_id={next_id}")
    return id_src


def encode_categoricals(dicts: Mapping[str, LabelDictionary], used: set,
                        columns: Mapping[str, Any], n: int) -> tuple[list, list, list]:
    """Codes of a batch's categorical columns; nothing is committed.

    Returns
    -------
    scalar_codes : list of (name, int)
        Columns that get one code for every row. A column that already holds values but
        gets none now gets code 0 ("missing"); one that never held a value and gets code 0
        is left out (it is all zeros).
    per_row : list of (name, src, mapping)
        Columns whose row ``i`` gets code ``mapping[src[i]]``.
    new_labels : list of (name, list of str)
        The labels each column would add, in code order.

    Raises
    ------
    ConfigError
        As :meth:`LabelDictionary.encode`.
    """
    scalar_codes: list[tuple[str, Any]] = []
    per_row: list[tuple[str, np.ndarray, np.ndarray]] = []
    new_labels: list[tuple[str, list[str]]] = []
    for name in CATEGORICAL_FIELDS:
        values = columns.get(name)
        if values is None:
            if name in used:
                scalar_codes.append((name, 0))
            continue
        code, new = dicts[name].encode(name, values, n)
        if new:
            new_labels.append((name, new))
        if type(code) is int:
            if code or name in used:
                scalar_codes.append((name, code))
        else:
            per_row.append((name, *code))
    return scalar_codes, per_row, new_labels


def encode_dict_fields(columns: Mapping[str, Any], n: int, keys,
                       hashed: bool) -> tuple[list, dict]:
    """JSON text of a batch's dict fields, redacted with the sensitive key names ``keys``.

    Returns
    -------
    dict_json : list of (name, object array (n,))
        Each given dict field's JSON texts (None = absent).
    redacted_rows : dict of str to list
        With ``hashed`` (the features are hashed from the dicts): each field's redacted
        values, parsed back from :class:`JsonText`.

    Raises
    ------
    ConfigError
        A field that is not ``n`` values, a value nested too deeply or not JSON
        serialisable, a :class:`JsonText` that is not ``n`` texts (or, with ``hashed``, not
        JSON), naming the field and row.
    """
    dict_json: list[tuple[str, np.ndarray]] = []
    redacted_rows: dict[str, list] = {}
    for name in DICT_FIELDS:
        vals = columns.get(name)
        if vals is None:
            continue
        if type(vals) is JsonText:
            texts = json_texts(name, vals.texts, n)
            dict_json.append((name, texts))
            if hashed:
                redacted_rows[name] = parse_json_texts(name, texts)
            continue
        if isinstance(vals, (str, bytes, Mapping)) or len(vals) != n:
            raise ConfigError(name, type(vals).__name__, f"must be a sequence of {n} values")
        red = [redacted(f"{name}[{i}]", v, keys) for i, v in enumerate(vals)]
        texts = np.empty(n, dtype=object)
        for i, v in enumerate(red):
            texts[i] = to_json(f"{name}[{i}]", v)
        dict_json.append((name, texts))
        redacted_rows[name] = red
    return dict_json, redacted_rows


def batch_features(state_features, redacted_rows: dict, n: int, dim: int) -> np.ndarray | None:
    """A batch's features as C-contiguous float32 ``(n, dim)``: ``state_features`` when
    given, else the feature hash of each row's redacted dicts
    (:func:`dyna.redact.hash_features`), else None (zero features).

    Raises
    ------
    ConfigError
        ``state_features`` that are not numbers or not of shape ``(n, dim)``.
    """
    if state_features is not None:
        feats = state_features
        if not (type(feats) is np.ndarray and feats.dtype == np.float32
                and feats.flags.c_contiguous):
            feats = np.ascontiguousarray(float_array("state_features", feats, np.float32))
        if feats.shape != (n, dim):
            raise ConfigError("state_features", feats.shape, f"must have shape ({n}, {dim})")
        return feats
    if redacted_rows:
        feats = np.empty((n, dim), dtype=np.float32)
        for i in range(n):
            feats[i] = hash_features({name: rows[i] for name, rows in redacted_rows.items()},
                                     dim)
        return feats
    return None


class Staged(NamedTuple):
    """Where a validated batch waits to be published.

    Attributes
    ----------
    n : int
        Rows of the batch.
    direct : bool
        Staged in place, in the free rows after the live ones (a growable store); else in
        fresh arrays (a ring).
    base : int
        First row of the batch in ``arrays``.
    arrays : dict of str to numpy.ndarray
        The arrays the rows were staged in: the store's own (direct) or fresh ones holding
        the staged columns and per-row code columns.
    ts_sorted : bool
        The batch's timestamps are non-decreasing and not below the last live row's.
    """

    n: int
    direct: bool
    base: int
    arrays: dict
    ts_sorted: bool


def stage_batch(store: ColumnStore, reward: np.ndarray, ts: np.ndarray, id_src: np.ndarray,
                first_id: int, state_features, redacted_rows: dict, per_row: list,
                used: set) -> Staged:
    """Write a batch to a staging area of ``store`` that is not visible yet, validating it.

    Parameters
    ----------
    reward, ts : numpy.ndarray
        float64 ``(n,)``.
    id_src : numpy.ndarray
        Explicit int64 ids, or :data:`NO_IDS` for ``first_id, first_id + 1, ...``.
    state_features, redacted_rows
        As :func:`batch_features`.
    per_row : list of (name, src, mapping)
        The per-row code columns of :func:`encode_categoricals`.
    used : set of str
        Optional columns that ever held a value (the others must stay all zero).

    Raises
    ------
    ConfigError
        The first invalid value: reward or timestamp not finite, features not finite or
        beyond the float32 norm range, a code out of range or missing for a required
        field (naming the field and row).
    """
    n = reward.shape[0]
    direct = not store.ring and n > 0
    if direct:
        base = store.free_start(n)
        stage = {name: store.array(name) for name in _STAGED_COLUMNS}
        check_prev = len(store) > 0
    else:
        base = 0
        stage = {name: np.empty((n,) + store.array(name).shape[1:], store.array(name).dtype)
                 for name in _STAGED_COLUMNS}
        check_prev = False
    feats = batch_features(state_features, redacted_rows, n, store.array("features").shape[1])
    if feats is None:
        stage["features"][base:base + n] = 0
        stage["inv_norm"][base:base + n] = 0
    what, bad_row, ts_sorted = stage_rows(
        reward, ts, id_src, first_id, _NO_FEATURES if feats is None else feats, stage["id"],
        stage["reward"], stage["timestamp"], stage["features"], stage["inv_norm"], base,
        check_prev)
    bad_code = -1
    for j, (name, src, mapping) in enumerate(per_row if what < 0 else ()):
        dst = stage[name] = store.array(name) if direct else np.empty(n, np.int32)
        if src.dtype != np.int32 and src.dtype != np.int64:
            src = src.astype(np.int64)
        bad_row, reason = stage_codes(src, mapping, dst, base, name in REQUIRED_FIELDS)
        if bad_row >= 0:
            what, bad_code = 3 + reason, j
            break
    if what >= 0:
        if what >= 3 and direct:  # columns never used must stay all zero
            for name, _, _ in per_row:
                if name not in used:
                    store.array(name)[base:base + n] = 0
        raise _staging_error(what, bad_row, per_row[bad_code] if what >= 3 else None, feats,
                             reward, ts)
    return Staged(n, direct, base, stage, ts_sorted)


def _staging_error(what: int, bad_row: int, code_column, feats, reward, ts) -> ConfigError:
    """The error of :func:`stage_batch` for ``bad_row``: ``what`` 0, 1 or 2 (reward,
    timestamp or features invalid), 3 or 4 (the code column ``(name, src, mapping)`` out of
    range, or missing for a required field)."""
    if what == 2:
        return ConfigError(f"state_features[{bad_row}]", feats[bad_row][:4].tolist(),
                           "must be finite with a norm within the float32 range")
    if what < 2:
        field, values = ("reward", reward) if what == 0 else ("timestamp", ts)
        return ConfigError(f"{field}[{bad_row}]", float(values[bad_row]), "must be finite")
    name, src, mapping = code_column
    if what == 3:
        return ConfigError(f"{name}[{bad_row}]", int(src[bad_row]),
                           f"Categorical code out of range [0, {mapping.size})")
    return ConfigError(f"{name}[{bad_row}]", "", "is required and must be non-empty")


def publish_batch(store: ColumnStore, staged: Staged, scalar_codes: list, per_row: list,
                  dict_json: list, used: set) -> None:
    """Make a staged batch live in ``store``, writing the columns not staged yet.

    ``scalar_codes``, ``per_row`` and ``dict_json`` are those of
    :func:`encode_categoricals` and :func:`encode_dict_fields`. The optional columns the
    batch gives a value are added to ``used``; a dict column in ``used`` that the batch does
    not give gets None.
    """
    used.update(name for name, _ in scalar_codes)
    used.update(name for name, _, _ in per_row)
    writes = list(scalar_codes)
    if dict_json or not used.isdisjoint(DICT_FIELDS):
        given = {name for name, _ in dict_json}
        writes.extend(dict_json)
        writes.extend((name, None) for name in DICT_FIELDS if name in used and name not in given)
        used.update(given)
    n = staged.n
    if staged.direct:
        rows = slice(staged.base, staged.base + n)
        for name, values in writes:
            store.array(name)[rows] = values
        store.publish(n)
        return
    writes.extend(staged.arrays.items())   # fresh arrays: the staged columns too
    for dst, src in store.claim(n):
        whole = src.start == 0 and src.stop == n
        for name, values in writes:
            store.array(name)[dst] = (values if whole or values is None
                                      or type(values) is int else values[src])
