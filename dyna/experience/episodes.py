"""Episodes given to the experience store: their checks and the columns they become.

An episode arrives as keyword fields (:meth:`dyna.experience.ExperienceStore.record`), as a
record exported to JSONL or Parquet (:meth:`~dyna.experience.ExperienceStore.import_data`),
or as a query's dicts. The functions here check them (a :class:`dyna.errors.ConfigError`
names the field and value; nothing is written) and turn them into the columns
:meth:`dyna.buffer.ExperienceBuffer.record_batch` takes and a backend stores
(:data:`RECORD_SCHEMA`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dyna.buffer import (CATEGORICAL_FIELDS, DICT_FIELDS, REQUIRED_FIELDS, ExperienceBuffer,
                         check_value, short_value, to_json)
from dyna.buffer.schema import FLOAT_MAX, check_label_text, clock_seconds, label_text
from dyna.errors import ConfigError, check_range
from dyna.redact import check_label, hash_features, redact
from dyna.store.columns import (check_tenant, check_time_range, seconds_from_times,
                                time_in_range)

__all__ = ["EPISODE_FIELDS", "FLOAT_MAX", "RECORD_SCHEMA", "SELECTORS", "SUCCESS",
           "batch_kwargs", "check_tenant", "checked", "columns_from_records", "episode_columns",
           "fast_row", "float64s", "overflow_error", "positive_int", "query_vector",
           "records_from_columns", "selection"]

#: Persisted columns after ``id``: (name, kind) as :mod:`dyna.store.columns` declares kinds.
RECORD_SCHEMA: tuple[tuple[str, str], ...] = (
    tuple((name, "str") for name in CATEGORICAL_FIELDS)
    + (("reward", "float"), ("timestamp", "float"))
    + tuple((name, "json") for name in DICT_FIELDS)
    + (("features", "vector"),)
)
#: The outcome label that counts as a success for competence and recommendations.
SUCCESS = "success"
#: Fields an episode may give (besides ``tenant_id`` and an exported ``id``).
EPISODE_FIELDS = CATEGORICAL_FIELDS + ("reward", "timestamp") + DICT_FIELDS + ("state_features",)
#: Fields selecting episodes exactly (``delete_data``, ``count_matching``, exports).
SELECTORS = ("task_type", "run_id", "task_id", "request_id")
_FAST_KEYS = frozenset(EPISODE_FIELDS)


def checked(name: str, value, lo=None, hi=None, **kw):
    """:func:`dyna.errors.check_range`, with integers too long to print or to convert to
    float (``10**400``) refused by the same rules and shown shortened (``"~1e400"``)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 18:
        if not kw.get("integer") and abs(value) > FLOAT_MAX:
            raise ConfigError(name, short_value(value), "must be finite: beyond the float64 "
                              "range (|x| <= 1.8e308)")
        if hi is not None and value > hi:
            raise ConfigError(name, short_value(value), f"must be <= {hi}")
        if lo is not None and value < lo:
            raise ConfigError(name, short_value(value), f"must be >= {lo}")
    return check_range(name, value, lo, hi, **kw)


def positive_int(name: str, value, hi: int | None = None) -> int:
    """An integer in [1, ``hi``] (:func:`checked`)."""
    return checked(name, value, 1, hi, integer=True)


def float64s(name: str, vals) -> np.ndarray:
    """Numbers as float64 ``(n,)``; ConfigError naming ``name[i]`` for the first that is not
    a number (bool included) or that float cannot hold (``10**400``). NaN and inf pass (the
    buffer refuses them, naming the row)."""
    if isinstance(vals, np.ndarray) and vals.dtype.kind == "f":
        return vals.astype(np.float64, copy=False).reshape(-1)
    if isinstance(vals, (str, bytes, Mapping)) or not hasattr(vals, "__iter__"):
        raise ConfigError(name, type(vals).__name__, "must be a list of numbers")
    vals = list(vals)
    for i, v in enumerate(vals):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{name}[{i}]", v, "must be a number")
    try:
        return np.asarray(vals, dtype=np.float64)
    except OverflowError:
        raise overflow_error(name, vals) from None


def overflow_error(name: str, vals) -> ConfigError:
    """ConfigError naming the first integer in ``vals`` (a list, or a list of lists) that
    float cannot hold."""
    for i, v in enumerate(vals):
        for j, w in enumerate(v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(w, int) and not isinstance(w, bool) and abs(w) > FLOAT_MAX:
                field = f"{name}[{i}][{j}]" if isinstance(v, (list, tuple)) else f"{name}[{i}]"
                return ConfigError(field, short_value(w), "must be finite: beyond the float64 "
                                   "range (|x| <= 1.8e308)")
    return ConfigError(name, "out of range", "must be finite: beyond the float64 range")


def selection(task_type, run_id, task_id, request_id) -> dict:
    """The given exact-match selectors of :meth:`ExperienceStore.delete_data` and
    :meth:`ExperienceStore.count_matching` (None: not selected on).

    Raises
    ------
    ConfigError
        A selector that is not a string.
    """
    sel = {k: v for k, v in zip(SELECTORS, (task_type, run_id, task_id, request_id))
           if v is not None}
    for k, v in sel.items():
        if not isinstance(v, str):
            raise ConfigError(k, v, "must be a string (matched exactly)")
    return sel


# ----------------------------------------------------------------------------- recorded
def _checked_episodes(tenant_id: str, episodes: Sequence[Mapping], single: bool) -> None:
    """Each episode an object of known fields whose ``tenant_id``, if given, is
    ``tenant_id``."""
    for i, ep in enumerate(episodes):
        if not isinstance(ep, Mapping):
            raise ConfigError(f"episodes[{i}]", type(ep).__name__, "must be an object")
        for key in ep:
            if key not in EPISODE_FIELDS and key not in ("tenant_id", "id"):
                raise ConfigError(key if single else f"episodes[{i}].{key}", ep[key],
                                  "unknown episode field")
        if ep.get("tenant_id") not in (None, tenant_id):
            raise ConfigError(f"episodes[{i}].tenant_id", ep.get("tenant_id"),
                              f"differs from tenant_id={tenant_id!r}")


def _feature_column(vals: list, n: int, dim: int) -> np.ndarray:
    """Given feature vectors as float32 ``(n, dim)``, checked finite."""
    if any(v is None for v in vals):
        raise ConfigError("state_features", None, "give features for every "
                          "episode of a batch or for none")
    try:
        arr = np.asarray(vals, dtype=np.float32)
    except OverflowError:
        raise overflow_error("state_features", vals) from None
    except (TypeError, ValueError):
        raise ConfigError("state_features", "ragged", f"each must have length {dim}") from None
    if arr.shape != (n, dim):
        raise ConfigError("state_features", list(arr.shape[1:]),
                          f"each must have length dim={dim}")
    if not np.isfinite(arr).all():
        raise ConfigError("state_features", "non-finite", "must be finite")
    return arr


def episode_columns(tenant_id: str, episodes: Sequence[Mapping], single: bool = False, *,
                    dim: int, clock) -> dict[str, Any]:
    """Per-field columns of a list of episode dicts for
    :meth:`dyna.buffer.ExperienceBuffer.record_batch` (a missing ``timestamp`` is
    ``clock()``; ``single``: errors name the field alone, not ``episodes[i].field``).

    Raises
    ------
    ConfigError
        No episode at all, an episode that is not an object, an unknown field, another
        tenant, a missing reward, a timestamp that is neither seconds nor ISO 8601 text
        with a timezone (:func:`dyna.store.columns.seconds_from_times`), features of the
        wrong length or not finite, a number float cannot hold, a label too long or
        holding a NUL (:func:`dyna.buffer.schema.check_label_text`).
    """
    if not episodes:
        raise ConfigError("episodes", [], "empty list: give at least one episode")
    _checked_episodes(tenant_id, episodes, single)
    n = len(episodes)
    cols: dict[str, Any] = {}
    present = {k for ep in episodes for k in ep if k in EPISODE_FIELDS}
    for name in present:
        vals = [ep.get(name) for ep in episodes]
        if name in CATEGORICAL_FIELDS:
            for i, v in enumerate(vals):
                if v is not None:
                    # one episode needs no index; in a batch, say which
                    where = name if single or n == 1 else f"episodes[{i}].{name}"
                    check_label_text(where, label_text(v, where))
            cols[name] = np.array(["" if v is None else v for v in vals], dtype=object)
        elif name in ("reward", "timestamp"):
            if name == "timestamp" and any(v is None for v in vals):
                now = clock_seconds(clock)
                vals = [now if v is None else v for v in vals]
            if name == "timestamp" and any(isinstance(v, str) for v in vals):
                cols[name] = seconds_from_times(name, vals)   # ISO 8601, as a file export
            else:
                cols[name] = float64s(name, vals)
            if name == "timestamp":
                check_time_range(name, cols[name])   # a time every export can write
        elif name == "state_features":
            cols[name] = _feature_column(vals, n, dim)
        else:
            cols[name] = vals
    cols["tenant_id"] = tenant_id
    if "reward" not in cols:
        raise ConfigError("reward", None, "is required")
    return cols


def fast_row(buf: ExperienceBuffer, tainted: set[str], tenant_id: str, ep: Mapping, *,
             dim: int, clock, redact_keys) -> tuple | None:
    """The stored row of one plain episode for a single-row insert, or None to take the
    general path.

    An episode whose labels ``buf`` already knows (``tainted`` names the fields whose
    loaded labels include one holding a secret: those labels are checked again), whose
    reward and timestamp are plain finite numbers and whose features, if given, are
    ``dim`` finite numbers, is checked, redacted and serialised here exactly as the batch
    path would store it (the dicts redacted and serialised as the buffer does, the feature
    hash over the dicts given). Anything else (a new label, a value to convert, an input
    to refuse) returns None, so the general path records it or raises its usual error;
    this function never refuses anything itself.

    Returns
    -------
    tuple or None
        One value per :data:`RECORD_SCHEMA` column (None for NULL), features as float32
        bytes.
    """
    if not _FAST_KEYS.issuperset(ep):
        return None
    row: list[Any] = []
    for name in CATEGORICAL_FIELDS:
        v = tenant_id if name == "tenant_id" else ep.get(name)
        if v is None or v == "":
            if name in REQUIRED_FIELDS:
                return None
            row.append(None)
            continue
        if type(v) is not str or buf.code(name, v) < 1 or not _clean_label(tainted, name, v):
            return None
        row.append(v)
    reward, ts = ep.get("reward"), ep.get("timestamp")
    if ts is None:
        ts = clock_seconds(clock)
    for v in (reward, ts):
        if type(v) not in (float, int) or abs(v) > FLOAT_MAX or not math.isfinite(v):
            return None
    if not time_in_range(ts):
        return None
    row += [float(reward), float(ts)]
    redacted = {}
    try:
        for name in DICT_FIELDS:
            if name in ep:
                redacted[name] = _redacted(name, ep[name], redact_keys)
            row.append(to_json(name, redacted[name]) if name in redacted else None)
    except ConfigError:
        return None
    feat = _row_features(ep, redacted, dim)
    if feat is None:
        return None
    row.append(np.ascontiguousarray(feat, dtype=np.float32).tobytes())
    return tuple(row)


def _clean_label(tainted: set[str], name: str, label: str) -> bool:
    """Whether a known label may be stored again: not one of the loaded labels holding a
    secret (only fields in ``tainted`` have any)."""
    if name not in tainted:
        return True
    try:
        check_label(name, label)
    except ConfigError:
        return False
    return True


def _redacted(name: str, value, keys):
    """A dict field checked (:func:`dyna.buffer.check_value`) and redacted as the buffer
    stores it; None stays None."""
    if value is None:
        return None
    check_value(name, value)
    return redact(value, keys)


def _row_features(ep: Mapping, redacted: dict, dim: int) -> np.ndarray | None:
    """The features of a fast row: the given ``dim`` finite numbers, else the feature hash
    of the dicts given, else zeros; None when the given ones need the general path."""
    sf = ep.get("state_features")
    if sf is not None:
        if not isinstance(sf, (list, tuple, np.ndarray)):
            return None
        try:
            feat = np.asarray(sf, dtype=np.float32)
        except (TypeError, ValueError, OverflowError):
            return None
        if feat.shape != (dim,) or not np.isfinite(feat).all():
            return None
        return feat
    if "state_features" in ep:
        return None
    if redacted:
        return hash_features(redacted, dim)
    return np.zeros(dim, dtype=np.float32)


# ----------------------------------------------------------------------------- queries
def query_vector(state_features=None, *, dim: int, redact_keys, **dicts) -> np.ndarray:
    """A query vector: ``state_features`` (length ``dim``, finite) or the feature hash of
    the given dicts, redacted as episodes are (float32 ``(dim,)``).

    Raises
    ------
    ConfigError
        Features of the wrong length, not numbers or not finite; no query at all.
    """
    if state_features is not None:
        try:
            q = np.asarray(state_features, dtype=np.float32)
        except OverflowError:
            raise overflow_error("state_features", [state_features]) from None
        except (TypeError, ValueError):
            raise ConfigError("state_features", type(state_features).__name__,
                              "must be numbers") from None
        if q.shape != (dim,):
            raise ConfigError("state_features", list(q.shape), f"must have length dim={dim}")
        if not np.isfinite(q).all():
            raise ConfigError("state_features", "non-finite", "must be finite")
        return q
    for k, v in dicts.items():
        check_value(k, v)  # depth and text checked before redaction
    given = {k: redact(v, redact_keys) for k, v in dicts.items() if v is not None}
    if not given:
        raise ConfigError("state_features", None, "give state_features or at least one "
                          "of state_before, action_taken, state_after, metadata")
    return hash_features(given, dim)


# ----------------------------------------------------------------------------- import, export
def batch_kwargs(cols: Mapping[str, Any]) -> dict[str, Any]:
    """record_batch keywords from persisted-style columns (labels, JSON text, features)."""
    kw: dict[str, Any] = {}
    for name in CATEGORICAL_FIELDS:
        kw[name] = np.array(["" if v is None else v for v in cols[name]], dtype=object)
    kw["reward"] = np.asarray(cols["reward"], dtype=np.float64)
    kw["timestamp"] = np.asarray(cols["timestamp"], dtype=np.float64)
    for name in DICT_FIELDS:
        vals = cols[name]
        if any(v is not None for v in vals):
            kw[name] = [None if v is None else json.loads(v) for v in vals]
    kw["state_features"] = np.asarray(cols["features"], dtype=np.float32)
    return kw


def records_from_columns(cols: Mapping[str, Any]) -> list[dict]:
    """Exported records (one dict per row, JSON texts decoded) from persisted-style
    columns."""
    n = len(cols["id"])
    out = []
    feats = np.asarray(cols["features"]).tolist()
    for i in range(n):
        rec = {"id": int(cols["id"][i])}
        for name in CATEGORICAL_FIELDS:
            rec[name] = cols[name][i]
        rec["reward"] = float(cols["reward"][i])
        rec["timestamp"] = float(cols["timestamp"][i])
        for name in DICT_FIELDS:
            t = cols[name][i]
            rec[name] = None if t is None else json.loads(t)
        rec["state_features"] = feats[i]
        out.append(rec)
    return out


def columns_from_records(recs: list[dict], dim: int) -> dict[str, Any]:
    """Persisted-style columns of imported records (JSONL), dict fields as compact JSON.

    Raises
    ------
    ConfigError
        A reward that is not a number, a timestamp that is neither seconds nor ISO 8601
        text with a timezone (:func:`dyna.store.columns.seconds_from_times`), features
        missing, ragged or not of length ``dim``.
    """
    n = len(recs)
    cols: dict[str, Any] = {"id": np.array([r.get("id", -1) for r in recs], dtype=np.int64)}
    for name in CATEGORICAL_FIELDS:
        cols[name] = np.array([r.get(name) for r in recs], dtype=object)
    cols["reward"] = float64s("reward", [r.get("reward") for r in recs])
    cols["timestamp"] = seconds_from_times("timestamp", [r.get("timestamp") for r in recs])
    for name in DICT_FIELDS:
        cols[name] = np.array([None if r.get(name) is None else
                               json.dumps(r[name], separators=(",", ":"))
                               for r in recs], dtype=object)
    try:
        feats = np.array([r.get("state_features") for r in recs], dtype=np.float32)
    except OverflowError:
        raise overflow_error("state_features", [r.get("state_features") for r in recs]
                             ) from None
    except (TypeError, ValueError):
        raise ConfigError("state_features", "ragged", "every record needs state_features "
                          f"of length {dim}") from None
    if feats.shape != (n, dim):
        raise ConfigError("state_features", list(feats.shape),
                          f"every record needs state_features of length {dim}")
    cols["features"] = feats
    return cols
