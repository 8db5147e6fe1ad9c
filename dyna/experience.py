"""ExperienceStore: the experience loop's operation surface over buffer, index and persistence.

An :class:`ExperienceStore` joins

* an in-memory :class:`dyna.buffer.ExperienceBuffer` (columnar episodes, redacted dicts, the
  exact cosine index over their features),
* Beta competence per (tenant, task type) (:class:`dyna.competence.BetaCompetence`),
  kept up to date as episodes arrive,
* the escalation rules of :mod:`dyna.escalation`,
* persistence in SQLite (:mod:`dyna.store.sqlite`; ``db_path=""`` keeps everything in
  memory), with JSONL and Parquet import and export.

Every operation is a plain method and also reachable through :meth:`ExperienceStore.dispatch`
``(op, **kwargs) -> dict``, which checks the arguments against :data:`OPERATIONS` (the same
declarations give :meth:`~ExperienceStore.capabilities` and JSON schemas for tool servers) and
returns JSON-ready dicts. Every answer carries ``persistence_status``: ``ok``, ``missing``
or ``write_degraded`` (see :mod:`dyna.store.sqlite`). A damaged file raises
:class:`dyna.errors.StoreDamagedError` and is never replaced (recover its readable rows with
``dyna store recover``); a SQLite file that is not a dyna store raises
:class:`dyna.errors.NotAStoreError` and is not written. ``read_only=True`` opens the file
without creating, migrating or writing it; operations that change records then raise
:class:`dyna.errors.StoreReadOnlyError`.

Tenancy: every operation that reads or changes records is scoped to one ``tenant_id``
(matched exactly, never as a prefix or pattern); only the maintenance operations
(``prune_old``, ``compact``, ``get_stats``, ``get_data_consumption``, ``reset`` with
``all_tenants=True``) may span tenants, and only when no tenant is given.

Writes: a batch of episodes is validated and recorded in memory inside the SQLite write
transaction that assigns its ids, so memory and disk hold the same ids (unique across
processes sharing a file) and bad input writes nothing anywhere. An acknowledged write (a
``record`` or ``import_data`` that returned) is committed to the file. A write that fails is
rolled back in the file and in memory (rows, ids, labels, the index's row lists; competence
counts are only updated after the commit) and the caller is told:
:class:`dyna.errors.StoreBusyError` when another writer held the lock too long (retryable),
:class:`dyna.errors.StoreWriteError` naming the file and SQLite's message when the file
could not take it (a full disk, a read-only file; the status is then ``write_degraded``
until a write succeeds). The buffer never holds an episode the file lacks, so there is
nothing to flush; :meth:`ExperienceStore.close` raises if there ever were.

Several processes may share one file. Each keeps an in-memory view that every operation first
brings up to date (the live view, issue 19): an operation sees every row committed before it
started, by any process, and rows other processes deleted are gone from it; it costs one
``PRAGMA data_version`` when nothing changed (see :class:`ExperienceStore`).
:meth:`ExperienceStore.reload` is no longer needed for this.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dyna import __version__
from dyna.buffer import (CATEGORICAL_FIELDS, DICT_FIELDS, REQUIRED_FIELDS, Categorical,
                         ExperienceBuffer, JsonText, _to_json, check_value, short_value)
from dyna.competence import BetaCompetence, beta_interval, prior_shapes
from dyna.errors import (ConfigError, StoreDamagedError, StoreReadOnlyError, StoreWriteError,
                         check_range)
from dyna.escalation import RISK_CLASSES, should_escalate
from dyna.redact import (DEFAULT_SENSITIVE_KEYS, REDACTED, hash_features, is_sensitive_key,
                         redact)
from dyna.store import featcache as _featcache
from dyna.store import jsonl as _jsonl
from dyna.store import parquet as _parquet
from dyna.store import postgres as _postgres
from dyna.store.sqlite import SQLiteStore

__all__ = ["ExperienceStore", "OPERATIONS", "Operation", "Param", "RECORD_SCHEMA"]

#: Persisted columns after ``id``: (name, kind) as :mod:`dyna.store.sqlite` declares kinds.
RECORD_SCHEMA: tuple[tuple[str, str], ...] = (
    tuple((name, "str") for name in CATEGORICAL_FIELDS)
    + (("reward", "float"), ("timestamp", "float"))
    + tuple((name, "json") for name in DICT_FIELDS)
    + (("features", "vector"),)
)
SUCCESS = "success"
_EPISODE_FIELDS = CATEGORICAL_FIELDS + ("reward", "timestamp") + DICT_FIELDS + ("state_features",)
_SELECTORS = ("task_type", "run_id", "task_id", "request_id")
#: Keys an episode may have to take the fast single write (see ExperienceStore._fast_row).
_FAST_KEYS = frozenset(_EPISODE_FIELDS)


# ============================================================================ loading
_REDACTED_JSON = json.dumps(REDACTED)
#: One JSON string token (never across a line end: rows are joined by newlines, so a broken
#: row cannot shift how the next row's quotes pair up), captured when it is an object key
#: (a ``:`` follows), else matched with an empty capture. The unrolled form
#: ``"[^"\\]*(?:\\.[^"\\]*)*"`` matches the same tokens as ``"(?:[^"\\]|\\.)*"``, about 1.7x
#: faster in CPython's ``re``.
_JSON_KEY = re.compile(r'("[^"\\\n]*(?:\\.[^"\\\n]*)*")(?=\s*:)|"[^"\\\n]*(?:\\.[^"\\\n]*)*"')


def _rows_to_redact(texts: np.ndarray, keys) -> np.ndarray:
    """Rows of stored JSON texts that redaction with ``keys`` could still change.

    Stored texts were redacted by their writer (values by the secret detectors, keys by the
    writer's key names), so only an object key that ``keys`` name and whose value is not
    already ``"[REDACTED]"`` needs work. Key names are decided by
    :func:`dyna.redact.is_sensitive_key` itself (normalised case, separators, camelCase, NFKC,
    zero-width characters, credential suffixes and prefix families), never by a matching rule
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
    pat = re.compile("(?:" + "|".join(map(re.escape, sensitive)) + r")\s*:(?!\s*"
                     + re.escape(_REDACTED_JSON) + ")")
    offsets = np.fromiter((m.start() for m in pat.finditer(joined)), dtype=np.int64)
    if offsets.size == 0:
        return np.empty(0, dtype=np.int64)
    rows = np.searchsorted(starts, offsets, side="right") - 1
    return present[np.unique(rows)]


# ============================================================================ operation specs
@dataclass(frozen=True)
class Param:
    """One parameter of an operation.

    Attributes
    ----------
    name : str
    type : str
        JSON type: ``string``, ``integer``, ``number``, ``boolean``, ``array``, ``object``.
    required : bool
    default : object
    description : str
    items : str, optional
        JSON type of the elements of an ``array`` parameter.
    """

    name: str
    type: str
    required: bool = False
    default: Any = None
    description: str = ""
    items: str | None = None

    def json_schema(self) -> dict:
        out: dict[str, Any] = {"type": self.type if self.required or self.default is not None
                               else [self.type, "null"], "description": self.description}
        if self.items is not None:
            out["items"] = {"type": self.items}
        if self.default is not None:
            out["default"] = self.default
        return out


@dataclass(frozen=True)
class Operation:
    """Declaration of one experience-loop operation (name, parameters, effects)."""

    name: str
    description: str
    params: tuple[Param, ...] = ()
    mutates: bool = False
    destructive: bool = False

    def json_schema(self) -> dict:
        """JSON Schema of the operation's arguments."""
        props = {p.name: p.json_schema() for p in self.params}
        return {"type": "object", "properties": props,
                "required": [p.name for p in self.params if p.required],
                "additionalProperties": False}


_T = Param("tenant_id", "string", True, description="tenant whose records are used (exact)")
_T_OPT = Param("tenant_id", "string", description="restrict to this tenant (exact); "
               "omitted: every tenant")
_TASK = Param("task_type", "string", description="restrict to this task type (exact)")
_LEVEL = Param("level", "number", default=0.95, description="credible level in (0, 1)")
_QUERY = (Param("state_features", "array", description="query vector of length dim",
                 items="number"),
          Param("state_before", "object", description="hashed into a query when no "
                "state_features are given"),
          Param("action_taken", "object"), Param("state_after", "object"),
          Param("metadata", "object"))
_EPISODE_PARAMS = (
    Param("task_type", "string"), Param("action_type", "string"), Param("outcome", "string",
          description="success, failure or another label"),
    Param("reward", "number"), Param("timestamp", "number", description="seconds, UTC"),
    Param("run_id", "string"), Param("task_id", "string"), Param("request_id", "string"),
    Param("outcome_source", "string"), Param("outcome_verified_by", "string"),
    Param("anti_gaming_policy", "string"), Param("state_before", "object"),
    Param("action_taken", "object"), Param("state_after", "object"), Param("metadata", "object"),
    Param("state_features", "array", description="numeric features of length dim",
          items="number"))

OPERATIONS: dict[str, Operation] = {op.name: op for op in [
    Operation("record", "Record one episode (fields as keywords) or many (episodes=[...]); "
              "each episode needs " + ", ".join(f for f in REQUIRED_FIELDS if f != "tenant_id")
              + ".",
              (_T, Param("episodes", "array", description="list of episode objects",
                          items="object"))
              + _EPISODE_PARAMS, mutates=True),
    Operation("query_similar", "Cosine top-k episodes most similar to a query state.",
              (_T, Param("k", "integer", default=5), _TASK) + _QUERY),
    Operation("get_recommendation", "Best action type among similar or task-scoped episodes.",
              (_T, _TASK, Param("k", "integer", default=50, description="neighbours used when "
                                "a query is given"),
               Param("criterion", "string", default="success_rate",
                     description="success_rate or mean_reward"),
               Param("min_episodes", "integer", default=1), _LEVEL) + _QUERY),
    Operation("get_competence", "Beta posterior of success per task type.", (_T, _TASK, _LEVEL)),
    Operation("list_task_types", "Task types of a tenant with counts and competence.",
              (_T, _LEVEL)),
    Operation("get_transition_table", "World-model view: state bins, action -> next-bin counts "
              "and mean reward.",
              (_T, _TASK, Param("bin_count", "integer", default=10),
               Param("state_key", "string", description="numeric state field to bin by value; "
                     "omitted: states are hashed into bins"))),
    Operation("should_escalate", "Escalation decision for a task type.",
              (_T, Param("task_type", "string", True), Param("threshold", "number", default=0.8),
               Param("min_episodes", "integer", default=10),
               Param("domain_risk_class", "string", default="low_stakes"), _LEVEL)),
    Operation("replay_experience", "Sample a batch of episodes for simulated replay.",
              (_T, _TASK, Param("batch_size", "integer", default=32),
               Param("strategy", "string", default="uniform",
                     description="uniform, recency or priority"),
               Param("half_life_seconds", "number", default=86400.0),
               Param("ids", "array", description="episode ids the priorities refer to",
                     items="integer"),
               Param("priorities", "array", description="TD-error priorities, one per id",
                     items="number"),
               Param("priority_exponent", "number", default=1.0),
               Param("seed", "integer"))),
    Operation("prune_old", "Delete episodes older than max_age_seconds.",
              (Param("max_age_seconds", "number", True), _T_OPT,
               Param("now", "number", description="reference time (default: clock)")),
              mutates=True, destructive=True),
    Operation("compact", "Keep the newest compact_keep_records per tenant and task type, "
              "then reclaim disk space.",
              (Param("compact_keep_records", "integer"), _T_OPT), mutates=True,
              destructive=True),
    Operation("get_stats", "Counts, sizes and store state.", (_T_OPT,)),
    Operation("get_data_consumption", "Records and bytes per tenant and task type.", (_T_OPT,)),
    Operation("reset", "Delete every episode of a tenant (or of all tenants).",
              (_T_OPT, Param("all_tenants", "boolean", default=False)), mutates=True,
              destructive=True),
    Operation("export_data", "Export a tenant's episodes to JSONL or Parquet (or inline).",
              (_T, Param("path", "string"), Param("format", "string", default="jsonl"),
               _TASK, Param("run_id", "string"), Param("task_id", "string"),
               Param("request_id", "string"))),
    Operation("import_data", "Import episodes from a JSONL or Parquet file.",
              (Param("path", "string", True), Param("format", "string"),
               Param("tenant_id", "string", description="only this tenant's records"),
               Param("keep_ids", "boolean", default=False)), mutates=True),
    Operation("delete_data", "Delete a tenant's episodes matching every given field exactly.",
              (_T, _TASK, Param("run_id", "string"), Param("task_id", "string"),
               Param("request_id", "string")), mutates=True, destructive=True),
    Operation("to_dataset", "A tenant's episodes as a table (Parquet file through dispatch).",
              (_T, _TASK, Param("path", "string"))),
    Operation("capabilities", "Operations, parameters and backends of this store."),
]}


def _json_ready(obj):
    """Numpy scalars/arrays and tuples to plain JSON types; NaN/inf to None."""
    if isinstance(obj, Mapping):
        return {str(k): _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_ready(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _json_ready(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


#: Largest ``bin_count`` of :meth:`ExperienceStore.get_transition_table`.
MAX_BIN_COUNT = 10_000


#: Most episodes one replay_experience call returns (it samples with replacement, so the
#: data cannot bound it: without a maximum a caller could ask for 10**9).
MAX_BATCH_SIZE = 10_000
#: Most neighbours a query (query_similar, get_recommendation) may ask for.
MAX_K = 10_000
#: Largest keep count of compact (beyond any store; keeps integer arithmetic in int64).
MAX_KEEP = 2 ** 62


def _positive_int(name: str, value, hi: int | None = None) -> int:
    return _checked(name, value, 1, hi, integer=True)


def _checked(name: str, value, lo=None, hi=None, **kw):
    """:func:`dyna.errors.check_range`, with integers too long to print or to convert to
    float (``10**400``) refused by the same rules and shown shortened (``"~1e400"``)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 18:
        if not kw.get("integer") and abs(value) > _FLOAT_MAX:
            raise ConfigError(name, short_value(value), "must be finite: beyond the float64 "
                              "range (|x| <= 1.8e308)")
        if hi is not None and value > hi:
            raise ConfigError(name, short_value(value), f"must be <= {hi}")
        if lo is not None and value < lo:
            raise ConfigError(name, short_value(value), f"must be >= {lo}")
    return check_range(name, value, lo, hi, **kw)


_FLOAT_MAX = int(np.finfo(np.float64).max)


def _float64s(name: str, vals) -> np.ndarray:
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
        raise _overflow_error(name, vals) from None


def _overflow_error(name: str, vals) -> ConfigError:
    """ConfigError naming the first integer in ``vals`` (a list, or a list of lists) that
    float cannot hold."""
    for i, v in enumerate(vals):
        for j, w in enumerate(v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(w, int) and not isinstance(w, bool) and abs(w) > _FLOAT_MAX:
                field = f"{name}[{i}][{j}]" if isinstance(v, (list, tuple)) else f"{name}[{i}]"
                return ConfigError(field, short_value(w), "must be finite: beyond the float64 "
                                   "range (|x| <= 1.8e308)")
    return ConfigError(name, "out of range", "must be finite: beyond the float64 range")


# ============================================================================ the store
def _selection(task_type, run_id, task_id, request_id) -> dict:
    """The given exact-match selectors of :meth:`ExperienceStore.delete_data` and
    :meth:`ExperienceStore.count_matching` (None: not selected on).

    Raises
    ------
    ConfigError
        A selector that is not a string.
    """
    sel = {k: v for k, v in zip(_SELECTORS, (task_type, run_id, task_id, request_id))
           if v is not None}
    for k, v in sel.items():
        if not isinstance(v, str):
            raise ConfigError(k, v, "must be a string (matched exactly)")
    return sel


def _stored_json(text: str, name: str, where: str):
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


def _check_json_texts(cols: Mapping[str, Any], where: str) -> None:
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


class ExperienceStore:
    """Episodes of many tenants with similarity search, competence, escalation and persistence.

    Parameters
    ----------
    db_path : str or Path
        SQLite file (created if missing); ``""`` keeps everything in memory; a
        ``postgresql://`` DSN selects :class:`dyna.store.postgres.PostgresStore` (tables
        created if missing; the password never appears in messages or stats).
    dim : int
        Feature dimension d of every episode (1 to ``dyna.store.sqlite.MAX_DIM``, 65,536).
    prior : {"uniform", "jeffreys"} or (a0, b0)
        Beta prior of competence.
    discount : float
        Competence discount in (0, 1] (see :mod:`dyna.competence`).
    redact_keys : iterable of str
        Sensitive key names (whole names, case-insensitive; :func:`dyna.redact.redact`).
    busy_timeout : float
        SQLite busy timeout in seconds.
    verify : bool
        Run SQLite's quick_check when opening an existing file.
    read_only : bool
        Open an existing file read-only (``mode=ro``): it is never created, migrated or
        written; ``record``, ``import_data``, ``prune_old``, ``compact``, ``reset`` and
        ``delete_data`` raise :class:`dyna.errors.StoreReadOnlyError`.
    clock : callable
        Current time in seconds (UTC epoch); default :func:`time.time`.
    eager : bool
        Read the file's episodes at open (default False: an open reads no episode, as issue
        "The experience store shared by live processes and machines" asks). With False they
        are read by the first operation that needs them; ``get_stats`` and ``get_data_consumption`` never need
        them (they answer from SQL), so ``dyna store stats`` loads no episode, and
        ``query_similar`` does not while the SQLite file has a valid feature cache
        (:meth:`write_feature_cache`, :mod:`dyna.store.featcache`): it memory-maps the
        tenant's vectors and reads the k episodes by id, with the answer a loaded store
        gives.

    Live view
        Every operation sees every row committed to the file before it started, by this or
        any other process or connection, without :meth:`reload`. It first asks SQLite's
        ``PRAGMA data_version`` whether another connection committed since it last looked
        (one PRAGMA); if so, in one read transaction, it compares the file's
        ``generation`` (bumped by every delete, prune, compaction, reset or scrub) with the
        one it read: the same means only inserts happened and it reads the rows with ids
        above the highest it holds; another means rows it holds may be gone, and it reads
        the file again. A write does the same inside its own write transaction before it
        records or deletes (:attr:`dyna.store.sqlite.SQLiteStore.on_write`), so memory and
        file stay row-for-row equal. The result is the buffer a fresh open would read, so
        every answer is the one a fresh open would give.

    Raises
    ------
    ConfigError
        Bad dim, prior, discount or keys; a file of another dim.
    StoreDamagedError
        SQLite reports the file as corrupt (it is left exactly as it was).
    NotAStoreError
        A SQLite database that is not a dyna store (nothing is written to it).
    StoreError
        A file written by a newer schema, or one that cannot be created.
    """

    def __init__(self, db_path="", dim: int = 64, *, prior="uniform", discount: float = 1.0,
                 redact_keys=DEFAULT_SENSITIVE_KEYS, busy_timeout: float = 10.0,
                 verify: bool = True, read_only: bool = False, clock=time.time,
                 eager: bool = False):
        from dyna.store.sqlite import MAX_DIM

        self.dim = _checked("dim", dim, 1, MAX_DIM, integer=True)
        self.prior = prior_shapes(prior)
        self.discount = float(_checked("discount", discount, 0.0, 1.0, lo_open=True))
        self.redact_keys = frozenset(redact_keys) if not isinstance(redact_keys, str) \
            else redact_keys
        redact({}, self.redact_keys)  # validates
        self.clock = clock
        self._lock = threading.RLock()
        # Episodes in memory that the file lacks: only while a batch is between the buffer
        # and its commit (0 otherwise; close() raises if it is not).
        self._unflushed = 0
        self.read_only = bool(read_only)
        if self.read_only and not str(db_path):
            raise ConfigError("read_only", True, "needs a db_path (an in-memory store is "
                              "always writable)")
        backend = SQLiteStore
        if _postgres.is_dsn(db_path):  # a PostgreSQL database shared between machines
            backend = _postgres.PostgresStore
        self._db = backend(db_path, RECORD_SCHEMA, self.dim, timeout=busy_timeout,
                           verify=verify, read_only=self.read_only) \
            if str(db_path) else None
        # The live view (issue 19): what of the file the buffer holds. ``_seen`` is the
        # highest id read, ``_gen`` the file's generation and ``_dv`` the connection's
        # data_version when it was read; ``_depth`` > 0 while an operation runs (it sees one
        # state: nested calls do not refresh).
        self._loaded = self._db is None
        self._seen, self._gen, self._dv, self._depth = -1, None, None, 0
        self._pending = False  # a fast single write of ours is in the file, not yet here
        self._comp = None
        # The feature cache beside a SQLite file (dyna.store.featcache): the cache opened
        # and the header file's (inode, mtime, size) it was opened at (None: not looked).
        self._fcache, self._fcache_key = None, None
        try:
            self._buf = self._new_buffer()
            if self._db is not None:
                self._db.on_write = self._on_write
                if eager:
                    with self._view():
                        pass
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ internals
    def _refuse_if_read_only(self, op: str) -> None:
        if self.read_only:
            raise StoreReadOnlyError(f"{op}: the store {self._db.path} was opened read-only; "
                                     "nothing was changed")

    def _new_buffer(self) -> ExperienceBuffer:
        return ExperienceBuffer(self.dim, redact_keys=self.redact_keys, clock=self.clock,
                                source=None if self._db is None else self._db.path)

    @property
    def persistence_status(self) -> str:
        """``ok``, ``missing`` or ``write_degraded`` (the last write failed and raised)."""
        return "ok" if self._db is None else self._db.status

    def _load(self) -> None:
        """Fill a new buffer from the SQLite file (all rows, id order), in bulk.

        The store returns whole columns (labels dictionary-encoded, features decoded from one
        joined buffer) and the buffer takes them in one :meth:`ExperienceBuffer.record_batch`
        as :class:`~dyna.buffer.Categorical` codes, with the features given (never re-hashed).
        The stored dict texts are already redacted JSON; they go into the buffer as they are,
        except rows holding a key that this store's ``redact_keys`` treat as sensitive and
        whose value is not yet ``"[REDACTED]"`` (see :func:`_rows_to_redact`): those are
        parsed, redacted and serialised again, as every row used to be. Called inside one
        read (or write) transaction, with the generation read in it (see :meth:`_pull`).
        """
        self._comp = None
        self._buf = self._new_buffer()
        self._seen = -1
        if self._db is None:
            return
        self._append_loaded(self._db.read(categories=CATEGORICAL_FIELDS))
        self._loaded = True

    def _append_loaded(self, cols: Mapping[str, Any]) -> None:
        """Append rows read from the file (ids above every id held) to the buffer."""
        if len(cols["id"]):
            n_before = len(self._buf)
            self._record_loaded(self._buf, cols)
            self._seen = int(cols["id"][-1])
            self._update_competence(n_before)

    def _pull(self) -> None:
        """Bring the buffer up to the file's committed state (inside one transaction)."""
        gen = self._db.generation()
        self._pending = False
        if not self._loaded or gen != self._gen:
            self._load()
        else:
            self._append_loaded(self._db.read(categories=CATEGORICAL_FIELDS,
                                              after_id=self._seen))
        self._gen = gen

    def _refresh(self) -> None:
        """Catch up with rows other connections committed (cheap when none did)."""
        if self._db is None:
            return
        dv = self._db.data_version()   # read first: a commit after it is seen next time
        if self._loaded and dv == self._dv and not self._pending:
            return
        with self._db.snapshot():
            self._pull()
        self._dv = dv

    def _on_write(self, db) -> None:
        """:attr:`SQLiteStore.on_write`: inside the write transaction, before the write."""
        with self._lock:
            dv = db.data_version()
            if not self._loaded or dv != self._dv or self._pending:
                self._pull()
                self._dv = dv

    def _deleted(self, n: int) -> None:
        """After this process's destructive write of ``n`` rows: note the generation it left
        (its buffer made the same change) and drop the competence cache."""
        if n and self._db is not None and self._db.last_generation is not None:
            self._gen = self._db.last_generation
        self._changed()

    @contextlib.contextmanager
    def _view(self):
        """Hold the lock; the outermost operation first catches up with the file."""
        with self._lock:
            if self._depth == 0:
                self._refresh()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1

    @property
    def buffer(self) -> ExperienceBuffer:
        """The in-memory episodes, caught up with the file (a live object: use it under no
        assumption that it stays the same object; a deletion by another process replaces
        it)."""
        with self._view():
            return self._buf

    def _record_loaded(self, buf: ExperienceBuffer, cols: Mapping[str, Any]) -> None:
        """Record columns read from the store (labels as (codes, labels) pairs) into ``buf``."""
        _check_json_texts(cols, self._where())
        kw: dict[str, Any] = {}
        for name in CATEGORICAL_FIELDS:
            codes, labels = cols[name]
            if name in REQUIRED_FIELDS or any(label for label in labels):
                kw[name] = Categorical(codes, ["" if v is None else v for v in labels])
        kw["reward"] = cols["reward"]
        kw["timestamp"] = cols["timestamp"]
        kw["state_features"] = cols["features"]
        for name in DICT_FIELDS:
            vals = cols[name]
            if np.not_equal(vals, None).any():   # stored redacted JSON: kept as it is
                kw[name] = JsonText(self._redact_texts(vals))
        # Labels already in the file are loaded as they are (an older version may have stored
        # one holding a secret: `dyna store scrub` reports those); new ones are checked.
        buf._check_labels = False
        try:
            buf.record_batch(ids=cols["id"], **kw)
        finally:
            buf._check_labels = True
        # ... but a loaded label that holds a secret is refused for every new row
        buf.taint_loaded_labels()

    def _redact_texts(self, texts: np.ndarray) -> np.ndarray:
        """Stored JSON texts with the rows :func:`_rows_to_redact` finds redacted again."""
        rows = _rows_to_redact(texts, self.redact_keys)
        if rows.size:
            texts = texts.copy()
            for i in rows.tolist():
                texts[i] = json.dumps(redact(_stored_json(texts[i], "JSON", self._where()),
                                             self.redact_keys),
                                      separators=(",", ":"), allow_nan=False)
        return texts

    @staticmethod
    def _batch_kwargs(cols: Mapping[str, Any]) -> dict[str, Any]:
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

    @classmethod
    def _record_columns(cls, buf: ExperienceBuffer, cols: Mapping[str, Any], ids=None):
        """Record persisted-style columns into ``buf`` with the given ids."""
        return buf.record_batch(ids=ids, **cls._batch_kwargs(cols))

    def reload(self) -> dict:
        """Re-read the whole SQLite file. Not needed to see other processes' writes (every
        operation does, see the live view); kept for callers of earlier versions."""
        with self._lock:
            if self._db is not None:
                dv = self._db.data_version()
                with self._db.snapshot():
                    self._loaded = False
                    self._pull()
                self._dv = dv
            return {"n_records": len(self._buf)}

    def _tenant(self, tenant_id) -> str:
        if tenant_id is None or not isinstance(tenant_id, str) or not tenant_id:
            raise ConfigError("tenant_id", tenant_id, "a non-empty tenant id is required")
        return tenant_id

    def _rows(self, tenant_id: str, **filters) -> np.ndarray:
        """Row positions of a tenant, filtered exactly by categorical fields."""
        return self._buf.select(tenant_id=tenant_id, **filters)

    def _where(self) -> str:
        """The store as an error may name it (a file path, a DSN without its password)."""
        return getattr(self._db, "path", "") or "the in-memory store"

    def _persist_columns(self, rows: np.ndarray) -> dict[str, Any]:
        """Persisted-style columns of buffer rows: labels (None = missing), JSON, features."""
        buf = self._buf
        out: dict[str, Any] = {"id": buf.column("id")[rows]}
        for name in CATEGORICAL_FIELDS:
            table = np.array([None] + list(buf.categories(name)[1:]), dtype=object)
            out[name] = table[buf.column(name)[rows]]
        out["reward"] = buf.column("reward")[rows]
        out["timestamp"] = buf.column("timestamp")[rows]
        for name in DICT_FIELDS:
            out[name] = buf.column(name)[rows]
        out["features"] = buf.column("features")[rows]
        return out

    def _episode_columns(self, tenant_id: str, episodes: Sequence[Mapping],
                         single: bool = False) -> dict[str, Any]:
        """Per-field columns of a list of episode dicts for record_batch."""
        n = len(episodes)
        cols: dict[str, Any] = {}
        for i, ep in enumerate(episodes):
            if not isinstance(ep, Mapping):
                raise ConfigError(f"episodes[{i}]", type(ep).__name__, "must be an object")
            for key in ep:
                if key not in _EPISODE_FIELDS and key not in ("tenant_id", "id"):
                    raise ConfigError(key if single else f"episodes[{i}].{key}", ep[key],
                                      "unknown episode field")
            if ep.get("tenant_id") not in (None, tenant_id):
                raise ConfigError(f"episodes[{i}].tenant_id", ep.get("tenant_id"),
                                  f"differs from tenant_id={tenant_id!r}")
        present = {k for ep in episodes for k in ep if k in _EPISODE_FIELDS}
        for name in present:
            vals = [ep.get(name) for ep in episodes]
            if name in CATEGORICAL_FIELDS:
                cols[name] = np.array(["" if v is None else v for v in vals], dtype=object)
            elif name in ("reward", "timestamp"):
                if name == "timestamp" and any(v is None for v in vals):
                    now = float(self.clock())
                    vals = [now if v is None else v for v in vals]
                cols[name] = _float64s(name, vals)
            elif name == "state_features":
                if any(v is None for v in vals):
                    raise ConfigError("state_features", None, "give features for every "
                                      "episode of a batch or for none")
                try:
                    arr = np.asarray(vals, dtype=np.float32)
                except OverflowError:
                    raise _overflow_error("state_features", vals) from None
                except (TypeError, ValueError):
                    raise ConfigError("state_features", "ragged", f"each must have length "
                                      f"{self.dim}") from None
                if arr.shape != (n, self.dim):
                    raise ConfigError("state_features", list(arr.shape[1:]),
                                      f"each must have length dim={self.dim}")
                if not np.isfinite(arr).all():
                    raise ConfigError("state_features", "non-finite", "must be finite")
                cols[name] = arr
            else:
                cols[name] = vals
        cols["tenant_id"] = tenant_id
        if "reward" not in cols:
            raise ConfigError("reward", None, "is required")
        return cols

    def _write_batch(self, cols: Mapping[str, Any], ids=None) -> np.ndarray:
        """Record validated columns in memory and on disk with the same ids.

        The batch is recorded in the buffer inside the SQLite write transaction; if the
        transaction fails (busy, full disk, read-only file, damage) or anything raises, the
        buffer is rolled back to its state before the batch (:meth:`ExperienceBuffer.rollback`)
        and the error propagates. Competence is updated only after the commit.
        """
        given = None if ids is None else np.asarray(ids, dtype=np.int64)
        if self._db is None:
            n_before = len(self._buf)
            ids_out = self._buf.record_batch(ids=given, **cols)
            self._update_competence(n_before)
            return ids_out
        state: dict[str, Any] = {}

        def make(start: int):
            # the on_write hook has just caught the buffer up with the file
            buf = self._buf
            state.update(buf=buf, n_before=len(buf), mark=buf.savepoint())
            first = max(start, buf.next_id)
            use = np.arange(first, first + len(cols["reward"]), dtype=np.int64) \
                if given is None else given
            if given is not None and given.size and int(given[0]) < first:
                raise ConfigError("ids", int(given[0]), f"must be >= next id {first}")
            new_ids = buf.record_batch(ids=use, **cols)
            self._unflushed = len(buf) - state["n_before"]
            return self._persist_columns(np.arange(state["n_before"], len(buf))), new_ids

        try:
            written = self._db.append_from(make)
        except BaseException:
            if "mark" in state:  # the file has none of it, so memory keeps none of it
                state["buf"].rollback(state["mark"])
            self._unflushed = 0
            raise
        self._unflushed = 0
        if written.size:
            self._seen = max(self._seen, int(written.max()))
        self._update_competence(state["n_before"])
        return written

    def flush(self) -> dict:
        """Nothing to write: every write reaches the file or raises (kept for callers of
        older versions, which kept failed writes in memory). Returns ``{"written": 0}``.

        Raises
        ------
        StoreWriteError
            The buffer holds episodes the file lacks (cannot happen through this class's
            methods; see :meth:`close`).
        """
        with self._lock:
            if self._unflushed:
                raise StoreWriteError(self._db.path if self._db is not None else ":memory:",
                                      f"{self._unflushed} episodes in memory were never "
                                      "written")
            return {"written": 0}

    # ------------------------------------------------------------------ competence
    def _update_competence(self, from_row: int) -> None:
        """Add rows ``from_row..`` to the cached competence (None = rebuild lazily)."""
        if self._comp is None:
            return
        buf = self._buf
        rows = np.arange(from_row, len(buf))
        if self.discount != 1.0 and rows.size:
            ts = buf.column("timestamp")
            if rows[0] > 0 and ts[rows].min() < ts[:rows[0]].max():
                self._comp = None  # out-of-order history: rebuild in time order
                return
            rows = rows[np.argsort(ts[rows], kind="stable")]
        self._feed(self._comp, rows)

    def _feed(self, comp: BetaCompetence, rows: np.ndarray) -> None:
        buf = self._buf
        if rows.size == 0:
            return
        tenants = np.array(buf.categories("tenant_id"), dtype=object)
        tasks = np.array(buf.categories("task_type"), dtype=object)
        tcode = buf.column("tenant_id")[rows].astype(np.int64)
        kcode = buf.column("task_type")[rows].astype(np.int64)
        g = tcode * len(tasks) + kcode
        uniq, inv = np.unique(g, return_inverse=True)
        keys = [(tenants[u // len(tasks)], tasks[u % len(tasks)]) for u in uniq.tolist()]
        success = buf.column("outcome")[rows] == buf.code("outcome", SUCCESS)
        comp.update_many([keys[i] for i in inv.tolist()], success)

    def competence(self) -> BetaCompetence:
        """Competence per ``(tenant_id, task_type)`` over every recorded outcome (cached)."""
        with self._view():
            if self._comp is None:
                comp = BetaCompetence(self.prior, self.discount)
                ts = self._buf.column("timestamp")
                rows = np.argsort(ts, kind="stable") if self.discount != 1.0 \
                    else np.arange(len(self._buf))
                self._feed(comp, rows)
                self._comp = comp
            return self._comp

    def _changed(self) -> None:
        """Rows were deleted: drop the competence cache."""
        self._comp = None

    # ------------------------------------------------------------------ operations
    def record(self, tenant_id: str, episodes: Sequence[Mapping] | None = None,
               **episode) -> dict:
        """Record one episode (fields as keywords) or many (``episodes``), atomically.

        Every call returns after its own commit (no group commit). One plain episode given
        as keywords (labels this store already knows) takes the fast single write
        (:meth:`_fast_row`, one ``INSERT`` statement); it stores the row the general path
        stores and joins the in-memory view on the next operation.

        Parameters
        ----------
        tenant_id : str
        episodes : list of dict, optional
            Each with the fields of :meth:`dyna.buffer.ExperienceBuffer.record`. A record
            exported by :meth:`export_data` is accepted as is: its ``tenant_id`` must equal
            ``tenant_id`` and its ``id`` is ignored (the store assigns ids; use
            :meth:`import_data` with ``keep_ids=True`` to keep them).
        **episode
            One episode's fields when ``episodes`` is not given.

        Returns
        -------
        dict
            ``ids`` (list of int) and ``n``.

        Raises
        ------
        ConfigError
            Unknown field, NaN reward, a number beyond the float64 range (``10**400``),
            features of the wrong dimension, a bytes label, a lone surrogate in any text, a
            dict nested deeper than :data:`dyna.buffer.MAX_DEPTH`, ...: the field and value
            are named, nothing is written.
        StoreBusyError
            The file stayed locked; nothing written (retry).
        StoreWriteError
            The file could not take the write (full disk, read-only file): nothing of the
            batch is in the file or in memory; episodes acknowledged by earlier calls stay stored.
        """
        self._refuse_if_read_only("record")
        tenant_id = self._tenant(tenant_id)
        single = episodes is None
        if single:
            episodes = [episode]
        elif episode:
            raise ConfigError(next(iter(episode)), "...", "give episodes=[...] or one "
                              "episode's fields, not both")
        if isinstance(episodes, (str, bytes, Mapping)):
            raise ConfigError("episodes", type(episodes).__name__, "must be a list of objects")
        with self._lock:
            append_row = getattr(self._db, "append_row", None)  # backends that have it
            if single and append_row is not None:
                row = self._fast_row(tenant_id, episode)
                if row is not None:
                    ident = append_row(row)
                    self._pending = True   # the next operation reads it back (live view)
                    return {"ids": [ident], "n": 1}
            cols = self._episode_columns(tenant_id, list(episodes), single)
            ids = self._write_batch(cols)
        return {"ids": ids.tolist(), "n": int(ids.size)}

    def _fast_row(self, tenant_id: str, ep: Mapping) -> tuple | None:
        """The file row of one plain episode, or None to take the general path.

        The fast single write (issue 19): an episode whose labels the buffer already knows
        (and has not found tainted), whose reward and timestamp are plain finite numbers and
        whose features, if given, are d finite numbers, is checked, redacted and serialised
        here exactly as :meth:`_write_batch` would store it (the dicts through the buffer's
        own redaction and JSON, the feature hash over the dicts given) and written by
        :meth:`SQLiteStore.append_row`; it reaches the buffer on the next operation, read
        back from the file like any other process's row. Anything else (a new label, a
        value to convert, an input to refuse) returns None, so the general path records it
        or raises its usual error; this path never refuses anything itself.
        """
        buf = self._buf
        if not self._loaded or not _FAST_KEYS.issuperset(ep):
            return None
        row: list[Any] = []
        tainted = buf._tainted
        for name in CATEGORICAL_FIELDS:
            v = tenant_id if name == "tenant_id" else ep.get(name)
            if v is None or v == "":
                if name in REQUIRED_FIELDS:
                    return None
                row.append(None)
                continue
            if type(v) is not str or v not in buf._dicts[name].lookup or \
                    (tainted and v in tainted.get(name, ())):
                return None
            row.append(v)
        reward, ts = ep.get("reward"), ep.get("timestamp")
        if ts is None:
            ts = float(self.clock())
        for v in (reward, ts):
            if type(v) not in (float, int) or abs(v) > _FLOAT_MAX or not math.isfinite(v):
                return None
        row += [float(reward), float(ts)]
        redacted = {}
        try:
            for name in DICT_FIELDS:
                if name in ep:
                    redacted[name] = buf._redacted(name, ep[name])
                row.append(_to_json(name, redacted[name]) if name in redacted else None)
        except ConfigError:
            return None
        sf = ep.get("state_features")
        if sf is not None:
            if not isinstance(sf, (list, tuple, np.ndarray)):
                return None
            try:
                feat = np.asarray(sf, dtype=np.float32)
            except (TypeError, ValueError, OverflowError):
                return None
            if feat.shape != (self.dim,) or not np.isfinite(feat).all():
                return None
        elif "state_features" in ep:
            return None
        elif redacted:
            feat = hash_features(redacted, self.dim)
        else:
            feat = np.zeros(self.dim, dtype=np.float32)
        row.append(np.ascontiguousarray(feat, dtype=np.float32).tobytes())
        return tuple(row)

    def _query_vector(self, state_features=None, **dicts) -> np.ndarray:
        if state_features is not None:
            try:
                q = np.asarray(state_features, dtype=np.float32)
            except OverflowError:
                raise _overflow_error("state_features", [state_features]) from None
            except (TypeError, ValueError):
                raise ConfigError("state_features", type(state_features).__name__,
                                  "must be numbers") from None
            if q.shape != (self.dim,):
                raise ConfigError("state_features", list(q.shape), f"must have length "
                                  f"dim={self.dim}")
            if not np.isfinite(q).all():
                raise ConfigError("state_features", "non-finite", "must be finite")
            return q
        for k, v in dicts.items():
            check_value(k, v)  # depth and text checked before redaction
        given = {k: redact(v, self.redact_keys) for k, v in dicts.items() if v is not None}
        if not given:
            raise ConfigError("state_features", None, "give state_features or at least one "
                              "of state_before, action_taken, state_after, metadata")
        return hash_features(given, self.dim)

    def query_similar(self, tenant_id: str, k: int = 5, task_type: str | None = None,
                      state_features=None, state_before=None, action_taken=None,
                      state_after=None, metadata=None) -> dict:
        """Cosine top-k episodes of a tenant most similar to a query.

        The query is ``state_features`` (length d) or the feature hash of the given dicts
        (as episodes are hashed). Results are sorted by score, ties by recency; fewer than k
        when there are fewer candidates.

        Returns
        -------
        dict
            ``results``: list of ``{"score", "episode"}``.

        Raises
        ------
        ConfigError
            ``k <= 0``, a query of the wrong dimension, no query, a zero query vector.
        StoreDamagedError
            A found episode's stored dict field is not JSON (named with the store and the
            episode id, never the text); the file is left as it was.
        """
        tenant_id = self._tenant(tenant_id)
        k = _positive_int("k", k, MAX_K)
        q = self._query_vector(state_features, state_before=state_before,
                               action_taken=action_taken, state_after=state_after,
                               metadata=metadata)
        with self._lock:
            hits = self._search_cached(tenant_id, task_type, q, k)
            if hits is not None:
                scores, eps = hits
            else:
                with self._view():
                    rows, scores = self._buf.search(q, k, tenant_id=tenant_id,
                                                    task_type=task_type)
                    eps = self._buf.rows(rows) if len(rows) else []
        return {"results": [{"score": float(s), "episode": e} for s, e in zip(scores, eps)]}

    def _feature_cache(self):
        """The SQLite file's feature cache, (re)opened when its header file changed; None
        when there is none or it does not match the file."""
        head, _ = _featcache.cache_paths(self._db.path)
        try:
            st = head.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key != self._fcache_key:
            self._fcache = None if key is None else _featcache.open_cache(self._db)
            self._fcache_key = key
        return self._fcache

    def _search_cached(self, tenant_id: str, task_type, q: np.ndarray, k: int):
        """``(scores, episodes)`` of a top-k search from the feature cache without loading
        the buffer (issue 19, open in a second), or None: the buffer is loaded (it is up to
        date and faster), the store is not a SQLite file, there is no valid cache, or the
        cache no longer describes the file. Same results as the buffer's search; the search
        and the read of the k episodes see one committed state (one read transaction)."""
        if (self._loaded or self._depth or self._unflushed or not isinstance(self._db, SQLiteStore)
                or not self._db.persistent or task_type == ""):
            return None
        if task_type is not None and not isinstance(task_type, str):
            return None   # the buffer's search reports it
        cache = self._feature_cache()
        if cache is None:
            return None
        with self._db.snapshot():
            hits = cache.search(self._db, tenant_id, task_type, q, k)
            if hits is None:
                self._fcache, self._fcache_key = None, None   # stale: look again next time
                return None
            return hits[1], self._episodes_by_id(hits[0])

    def _episodes_by_id(self, ids: np.ndarray) -> list[dict]:
        """The episodes with these ids read from the file, as :meth:`ExperienceBuffer.rows`
        gives them after a load (labels "" -> None, stored JSON redacted again by this
        store's keys as :meth:`_load` does)."""
        if not len(ids):
            return []
        names = [n for n, kind in RECORD_SCHEMA if kind != "vector"]
        cols = self._db.read({"id": [int(i) for i in ids]}, columns=names)
        at = {int(i): j for j, i in enumerate(cols["id"].tolist())}
        pick = np.array([at[int(i)] for i in ids], dtype=np.int64)
        out: dict[str, list] = {"id": cols["id"][pick].tolist()}
        for name in CATEGORICAL_FIELDS:
            out[name] = [v if v else None for v in cols[name][pick].tolist()]
        out["reward"] = cols["reward"][pick].tolist()
        out["timestamp"] = cols["timestamp"][pick].tolist()
        where = self._where()
        for name in DICT_FIELDS:
            texts = self._redact_texts(cols[name][pick])
            out[name] = [None if t is None else _stored_json(t, name, where) for t in texts]
        keys = list(out)
        return [dict(zip(keys, vals)) for vals in zip(*out.values())]

    def write_feature_cache(self) -> dict:
        """Write the SQLite file's feature cache (:mod:`dyna.store.featcache`), so that a
        later open answers :meth:`query_similar` without loading every episode.

        Returns
        -------
        dict
            ``path`` of the cache's header, ``n_rows``, ``n_tenants``, ``generation``,
            ``max_id``.

        Raises
        ------
        StoreReadOnlyError
            The store was opened read-only.
        ConfigError
            An in-memory or PostgreSQL store (the cache is a file beside a SQLite file).
        """
        self._refuse_if_read_only("write_feature_cache")
        if not isinstance(self._db, SQLiteStore) or not self._db.persistent:
            raise ConfigError("db_path", "" if self._db is None else "postgresql",
                              "a feature cache is written beside a SQLite store file")
        with self._lock:
            out = _featcache.write_cache(self._db)
            self._fcache, self._fcache_key = None, None
        return out

    def get_recommendation(self, tenant_id: str, task_type: str | None = None, k: int = 50,
                           criterion: str = "success_rate", min_episodes: int = 1,
                           level: float = 0.95, state_features=None, state_before=None,
                           action_taken=None, state_after=None, metadata=None) -> dict:
        """The action type with the best success rate or mean reward.

        Candidates are the k episodes most similar to the query when one is given, else
        every episode of the tenant (and task type). Per action type: ``n``, ``n_success``,
        the Beta posterior mean of success (``success_rate``) with its equal-tailed
        interval, and ``mean_reward``. The best is the highest ``success_rate`` (or
        ``mean_reward``) among action types with at least ``min_episodes`` episodes, ties to
        the larger ``n``, then the name.

        Returns
        -------
        dict
            ``action_type`` (None when no action type qualifies), ``criterion``, ``best``
            (its statistics) and ``candidates`` (every action type's, best first).
        """
        tenant_id = self._tenant(tenant_id)
        if criterion not in ("success_rate", "mean_reward"):
            raise ConfigError("criterion", criterion, "must be success_rate or mean_reward")
        min_episodes = _checked("min_episodes", min_episodes, 1, None, integer=True)
        k = _positive_int("k", k, MAX_K)
        has_query = state_features is not None or any(
            v is not None for v in (state_before, action_taken, state_after, metadata))
        with self._view():
            buf = self._buf
            if has_query:
                q = self._query_vector(state_features, state_before=state_before,
                                       action_taken=action_taken, state_after=state_after,
                                       metadata=metadata)
                rows, _ = buf.search(q, k, tenant_id=tenant_id, task_type=task_type)
            else:
                rows = self._rows(tenant_id, task_type=task_type)
            acts = buf.column("action_type")[rows].astype(np.int64)
            success = (buf.column("outcome")[rows] == buf.code("outcome", SUCCESS))
            reward = buf.column("reward")[rows]
            names = buf.categories("action_type")
        uniq, inv = np.unique(acts, return_inverse=True)
        n = np.bincount(inv, minlength=uniq.size)
        n_s = np.bincount(inv, weights=success, minlength=uniq.size)
        r_sum = np.bincount(inv, weights=reward, minlength=uniq.size)
        a0, b0 = self.prior
        a, b = a0 + n_s, b0 + (n - n_s)
        lo, hi = beta_interval(a, b, level) if uniq.size else (np.zeros(0), np.zeros(0))
        cands = [{"action_type": names[u], "n": int(n[j]), "n_success": int(n_s[j]),
                  "success_rate": float(a[j] / (a[j] + b[j])), "lower": float(lo[j]),
                  "upper": float(hi[j]), "mean_reward": float(r_sum[j] / n[j])}
                 for j, u in enumerate(uniq.tolist())]
        cands.sort(key=lambda c: (-c[criterion], -c["n"], c["action_type"]))
        ok = [c for c in cands if c["n"] >= min_episodes]
        return {"action_type": ok[0]["action_type"] if ok else None, "criterion": criterion,
                "best": ok[0] if ok else None, "candidates": cands, "n_episodes": int(rows.size),
                "scope": "similar" if has_query else "task"}

    def get_competence(self, tenant_id: str, task_type: str | None = None,
                       level: float = 0.95) -> dict:
        """Beta posterior of success of one task type, or of each of the tenant's.

        Returns
        -------
        dict
            ``competence``: list of ``{"task_type", "a", "b", "n_success", "n_failure",
            "mean", "lower", "upper", "level"}``. An unseen task type reads as the prior.
        """
        tenant_id = self._tenant(tenant_id)
        _checked("level", level, 0.0, 1.0, lo_open=True, hi_open=True)
        with self._view():
            comp = self.competence()
            types = [task_type] if task_type is not None else self._task_types(tenant_id)
            s = comp.summary([(tenant_id, t) for t in types], level)
        out = [{"task_type": t, **{k: (v[i] if isinstance(v, list) else v)
                                   for k, v in s.items()}} for i, t in enumerate(types)]
        return {"competence": out}

    def _task_types(self, tenant_id: str) -> list[str]:
        rows = self._rows(tenant_id)
        codes = np.unique(self._buf.column("task_type")[rows])
        names = self._buf.categories("task_type")
        return sorted(names[c] for c in codes.tolist())

    def list_task_types(self, tenant_id: str, level: float = 0.95) -> dict:
        """Task types of a tenant with episode counts and competence."""
        with self._view():  # one state for both halves
            comp = self.get_competence(tenant_id, level=level)["competence"]
            rows = self._rows(tenant_id)
            codes = self._buf.column("task_type")[rows]
            names = self._buf.categories("task_type")
            counts = {names[c]: int(m) for c, m in
                      zip(*np.unique(codes, return_counts=True))}
        return {"task_types": [{"task_type": c["task_type"], "n_episodes": counts[c["task_type"]],
                                "mean": c["mean"], "lower": c["lower"], "upper": c["upper"]}
                               for c in comp]}

    def get_transition_table(self, tenant_id: str, task_type: str | None = None,
                             bin_count: int = 10, state_key: str | None = None) -> dict:
        """Transition counts between state bins per action (the world-model view).

        States are ``state_before`` and ``state_after``. With ``state_key`` the numeric value
        ``state[state_key]`` is binned into ``bin_count`` equal-width bins over the range of
        all values seen (both ends included; states without a finite value are left out).
        Without it, a state's canonical JSON text is hashed (BLAKE2b) into one of
        ``bin_count`` bins, so equal states share a bin.

        Returns
        -------
        dict
            ``bin_count``, ``edges`` (list of bin_count + 1 floats, or None when hashing),
            ``transitions``: list of ``{"action_type", "from_bin", "to_bin", "count",
            "mean_reward"}`` sorted by action, from, to; ``n_episodes`` used.
        """
        tenant_id = self._tenant(tenant_id)
        # (A * bins^2 keys must fit int64, and the table is built in memory)
        bin_count = _checked("bin_count", bin_count, 1, MAX_BIN_COUNT, integer=True)
        with self._view():
            rows = self._rows(tenant_id, task_type=task_type)
            before = self._buf.column("state_before")[rows]
            after = self._buf.column("state_after")[rows]
            acts = self._buf.column("action_type")[rows]
            reward = self._buf.column("reward")[rows]
            names = self._buf.categories("action_type")
        edges = None
        if state_key is None:
            def bins(texts):
                out = np.empty(len(texts), dtype=np.int64)
                for i, t in enumerate(texts):
                    h = hashlib.blake2b(("null" if t is None else t).encode(), digest_size=8)
                    out[i] = int.from_bytes(h.digest(), "little") % bin_count
                return out
            b0, b1 = bins(before), bins(after)
            keep = np.ones(rows.size, dtype=bool)
        else:
            where = self._where()

            def values(texts, name):
                out = np.full(len(texts), np.nan)
                for i, t in enumerate(texts):
                    if t is None:
                        continue
                    v = _stored_json(t, name, where)
                    v = v.get(state_key) if isinstance(v, dict) else None
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        out[i] = float(v)
                return out
            v0, v1 = values(before, "state_before"), values(after, "state_after")
            keep = np.isfinite(v0) & np.isfinite(v1)
            both = np.concatenate([v0[keep], v1[keep]])
            lo, hi = (float(both.min()), float(both.max())) if both.size else (0.0, 1.0)
            if hi == lo:
                hi = lo + 1.0
            edges = np.linspace(lo, hi, bin_count + 1)
            b0 = np.clip(np.searchsorted(edges, v0, side="right") - 1, 0, bin_count - 1)
            b1 = np.clip(np.searchsorted(edges, v1, side="right") - 1, 0, bin_count - 1)
        a = acts[keep].astype(np.int64)
        key = (a * bin_count + b0[keep]) * bin_count + b1[keep]
        uniq, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
        rsum = np.bincount(inv, weights=reward[keep], minlength=uniq.size)
        trans = []
        for j, kv in enumerate(uniq.tolist()):
            act, rest = divmod(kv, bin_count * bin_count)
            fb, tb = divmod(rest, bin_count)
            trans.append({"action_type": names[act], "from_bin": fb, "to_bin": tb,
                          "count": int(cnt[j]), "mean_reward": float(rsum[j] / cnt[j])})
        trans.sort(key=lambda t: (t["action_type"], t["from_bin"], t["to_bin"]))
        return {"bin_count": bin_count, "edges": None if edges is None else edges.tolist(),
                "state_key": state_key, "transitions": trans, "n_episodes": int(keep.sum())}

    def should_escalate(self, tenant_id: str, task_type: str, threshold: float = 0.8,
                        min_episodes: int = 10, domain_risk_class: str = "low_stakes",
                        level: float = 0.95) -> dict:
        """Escalation decision for a tenant's task type (see :mod:`dyna.escalation`)."""
        tenant_id = self._tenant(tenant_id)
        if domain_risk_class not in RISK_CLASSES:
            raise ConfigError("domain_risk_class", domain_risk_class,
                              f"must be one of {list(RISK_CLASSES)}")
        with self._view():
            rows = self._rows(tenant_id, task_type=task_type)
            hist = {"outcome": self._buf.labels("outcome", rows),
                    "outcome_verified_by": self._buf.labels("outcome_verified_by", rows),
                    "anti_gaming_policy": self._buf.labels("anti_gaming_policy", rows)}
        d = should_escalate(hist, task_type, threshold, min_episodes, domain_risk_class,
                            level=level, prior=self.prior)
        return d.to_dict()

    def replay_experience(self, tenant_id: str, task_type: str | None = None,
                          batch_size: int = 32, strategy: str = "uniform",
                          half_life_seconds: float = 86400.0, ids=None, priorities=None,
                          priority_exponent: float = 1.0, seed=None) -> dict:
        """Sample episodes (with replacement) for simulated replay.

        Strategies: ``uniform``; ``recency``, weight ``2 ** (-(t_max - t) / half_life_seconds)``
        (t_max the newest candidate); ``priority``, weight ``|p| ** priority_exponent`` over
        the caller's ``ids`` with their TD-error ``priorities`` (prioritized experience
        replay, Schaul et al. 2016, eq. 1; Sutton & Barto section 8.4).

        Returns
        -------
        dict
            ``episodes`` (list of dicts) and ``ids``.

        Raises
        ------
        ConfigError
            A bad ``batch_size``, ``strategy``, ``seed``, ``half_life_seconds``, or
            ``ids`` / ``priorities`` that do not match.
        StoreDamagedError
            A sampled episode's stored dict field is not JSON (named with the store and the
            episode id, never the text); the file is left as it was.
        """
        tenant_id = self._tenant(tenant_id)
        batch_size = _positive_int("batch_size", batch_size, MAX_BATCH_SIZE)
        if strategy not in ("uniform", "recency", "priority"):
            raise ConfigError("strategy", strategy, "must be uniform, recency or priority")
        if seed is not None:
            seed = _checked("seed", seed, 0, None, integer=True)
        rng = np.random.default_rng(seed)
        with self._view():
            buf = self._buf
            cand = self._rows(tenant_id, task_type=task_type)
            weights = None
            if strategy == "recency":
                hl = _checked("half_life_seconds", half_life_seconds, 0.0, None, lo_open=True)
                ts = buf.column("timestamp")[cand]
                weights = np.exp2(-(ts.max() - ts) / hl) if cand.size else None
            elif strategy == "priority":
                if ids is None or priorities is None:
                    raise ConfigError("priorities", priorities, "strategy 'priority' needs ids "
                                      "and priorities")
                ids_a = np.asarray(ids, dtype=np.int64).reshape(-1)
                p = _float64s("priorities", priorities)
                if p.shape != ids_a.shape:
                    raise ConfigError("priorities", p.size, f"must have one per id "
                                      f"({ids_a.size})")
                if not np.isfinite(p).all():
                    raise ConfigError("priorities", "non-finite", "must be finite")
                e = _checked("priority_exponent", priority_exponent, 0.0, None)
                all_ids = buf.column("id")
                pos = {int(i): r for r, i in zip(cand.tolist(), all_ids[cand].tolist())}
                missing = [int(i) for i in ids_a if int(i) not in pos]
                if missing:
                    raise ConfigError("ids", missing[0], "not an episode of this tenant "
                                      "(and task type)")
                cand = np.array([pos[int(i)] for i in ids_a], dtype=np.int64)
                weights = np.abs(p) ** e
            if cand.size == 0:
                return {"episodes": [], "ids": []}
            rows = buf.sample(batch_size, rng, weights=weights, candidates=cand)
            eps = buf.rows(rows)
        return {"episodes": eps, "ids": [e["id"] for e in eps]}

    def prune_old(self, max_age_seconds: float, tenant_id: str | None = None,
                  now: float | None = None) -> dict:
        """Delete episodes with ``timestamp < now - max_age_seconds``.

        Returns
        -------
        dict
            ``deleted`` (rows), ``cutoff`` (seconds). The file shrinks only at
            :meth:`compact`.
        """
        self._refuse_if_read_only("prune_old")
        age = _checked("max_age_seconds", max_age_seconds, 0.0, None)
        if not math.isfinite(age):
            raise ConfigError("max_age_seconds", age, "must be finite")
        if tenant_id is not None:
            tenant_id = self._tenant(tenant_id)
        now = float(self.clock()) if now is None else float(_checked("now", now))
        cutoff = now - age
        with self._lock:
            # the file first: its write transaction catches the buffer up (on_write) before
            # deleting, so both then drop the same rows
            if self._db is not None:
                self._db.prune(cutoff, where=None if tenant_id is None
                               else {"tenant_id": tenant_id})
            if tenant_id is None:
                n = self._buf.prune_older_than(cutoff)
            else:
                rows = self._rows(tenant_id)
                n = self._buf.delete(rows[self._buf.column("timestamp")[rows] < cutoff])
            self._deleted(n)
        return {"deleted": int(n), "cutoff": cutoff}

    def compact(self, compact_keep_records: int | None = None,
                tenant_id: str | None = None) -> dict:
        """Keep the newest ``compact_keep_records`` per (tenant, task type); reclaim space.

        Without ``compact_keep_records`` nothing is deleted and only the file is compacted
        (``VACUUM`` and a WAL checkpoint; case PERS-05).

        Returns
        -------
        dict
            ``deleted``, ``bytes_before``, ``bytes_after``, ``freelist_count``.
        """
        self._refuse_if_read_only("compact")
        if compact_keep_records is not None:
            keep = _checked("compact_keep_records", compact_keep_records, 0, MAX_KEEP,
                               integer=True)
        if tenant_id is not None:
            tenant_id = self._tenant(tenant_id)
        deleted = 0
        with self._view():
            if compact_keep_records is not None:
                if tenant_id is None:
                    if self._db is not None:  # catches the buffer up first (on_write)
                        self._db.keep_newest(keep)
                    deleted = self._buf.compact(keep)
                else:
                    # chosen on the view caught up now; rows another process commits before
                    # the delete's transaction are kept (they are not among these ids)
                    ids = self._buf.column("id")[self._newest_excess(tenant_id, keep)]
                    if self._db is not None:
                        self._db.delete_ids(ids)
                    deleted = self._buf.delete(np.flatnonzero(np.isin(
                        self._buf.column("id"), ids)))
                self._deleted(deleted)
            space = self._db.vacuum() if self._db is not None else \
                {"bytes_before": 0, "bytes_after": 0, "freelist_count": 0}
        return {"deleted": int(deleted), "bytes_before": space["bytes_before"],
                "bytes_after": space["bytes_after"], "freelist_count": space["freelist_count"]}

    def _newest_excess(self, tenant_id: str, keep: int) -> np.ndarray:
        """Rows of a tenant beyond the newest ``keep`` of each task type."""
        buf = self._buf
        rows = self._rows(tenant_id)
        ts = buf.column("timestamp")[rows]
        ident = buf.column("id")[rows]
        task = buf.column("task_type")[rows]
        order = np.lexsort((-ident, -ts, task))  # by task, newest first
        t_sorted = task[order]
        start = np.flatnonzero(np.r_[True, t_sorted[1:] != t_sorted[:-1]])
        rank = np.arange(order.size) - np.repeat(start, np.diff(np.r_[start, order.size]))
        return np.sort(rows[order[rank >= keep]])

    def count_matching(self, tenant_id: str, task_type: str | None = None,
                       run_id: str | None = None, task_id: str | None = None,
                       request_id: str | None = None) -> int:
        """How many of a tenant's episodes match every given field exactly: what
        :meth:`delete_data` with the same arguments would delete.

        Raises
        ------
        ConfigError
            An empty tenant id, or a selector that is not a string.
        """
        tenant_id = self._tenant(tenant_id)
        sel = _selection(task_type, run_id, task_id, request_id)
        with self._view():
            return int(len(self._rows(tenant_id, **sel)))

    def tenant_ids(self) -> list[str]:
        """The tenants that have episodes, sorted."""
        with self._view():
            buf = self._buf
            names = buf.categories("tenant_id")
            return sorted(names[c] for c in np.unique(buf.column("tenant_id")) if names[c])

    def get_stats(self, tenant_id: str | None = None) -> dict:
        """Counts (records, tenants, task types), time span, dim and store state.

        With a file, answered from SQL (:meth:`dyna.store.sqlite.SQLiteStore.summary`: counts
        and min / max only, no episode loaded), so it is always live; in memory, from the
        buffer. Both give the same numbers for the same rows.
        """
        if self._db is not None:
            where = None if tenant_id is None else {"tenant_id": self._tenant(tenant_id)}
            with self._lock:
                out = self._db.summary(where)
                out.update(dim=self.dim, persistent=True, n_unpersisted=self._unflushed,
                           store=self._db.stats())
            return out
        with self._lock:
            buf = self._buf
            rows = np.arange(len(buf)) if tenant_id is None else \
                self._rows(self._tenant(tenant_id))
            ts = buf.column("timestamp")[rows]
            out = {"n_records": int(rows.size),
                   "n_tenants": int(np.unique(buf.column("tenant_id")[rows]).size),
                   "n_task_types": int(np.unique(buf.column("task_type")[rows]).size),
                   "oldest": float(ts.min()) if rows.size else None,
                   "newest": float(ts.max()) if rows.size else None,
                   "dim": self.dim, "persistent": self._db is not None,
                   "n_unpersisted": self._unflushed}
            if self._db is not None:
                out["store"] = self._db.stats()
        return out

    def get_data_consumption(self, tenant_id: str | None = None) -> dict:
        """Records and bytes per tenant and task type.

        Bytes of a record: 8 (id) + 8 (reward) + 8 (timestamp) + 4 d (features) + the UTF-8
        length of each label and of each stored JSON text.

        Returns
        -------
        dict
            ``consumption``: list of ``{"tenant_id", "task_type", "records", "bytes"}``;
            ``total_records``, ``total_bytes``.

        With a file, summed in SQL over the texts as stored (integer sums, no episode
        loaded); in memory, over the buffer.
        """
        if self._db is not None:
            where = None if tenant_id is None else {"tenant_id": self._tenant(tenant_id)}
            items = self._db.consumption(where)
            return {"consumption": items, "total_records": sum(r["records"] for r in items),
                    "total_bytes": sum(r["bytes"] for r in items)}
        with self._lock:
            buf = self._buf
            rows = np.arange(len(buf)) if tenant_id is None else \
                self._rows(self._tenant(tenant_id))
            size = np.full(rows.size, 24 + 4 * self.dim, dtype=np.int64)
            for name in CATEGORICAL_FIELDS:
                lens = np.array([len(s.encode()) for s in buf.categories(name)], dtype=np.int64)
                size += lens[buf.column(name)[rows]]
            for name in DICT_FIELDS:
                col = buf.column(name)[rows]
                size += np.fromiter((0 if s is None else len(s.encode()) for s in col),
                                    dtype=np.int64, count=rows.size)
            tcode = buf.column("tenant_id")[rows].astype(np.int64)
            kcode = buf.column("task_type")[rows].astype(np.int64)
            n_task = len(buf.categories("task_type"))
            uniq, inv = np.unique(tcode * n_task + kcode, return_inverse=True)
            recs = np.bincount(inv, minlength=uniq.size)
            byts = np.bincount(inv, weights=size, minlength=uniq.size)
            tnames, knames = buf.categories("tenant_id"), buf.categories("task_type")
        items = [{"tenant_id": tnames[u // n_task], "task_type": knames[u % n_task],
                  "records": int(recs[j]), "bytes": int(byts[j])}
                 for j, u in enumerate(uniq.tolist())]
        items.sort(key=lambda r: (r["tenant_id"], r["task_type"]))
        return {"consumption": items, "total_records": int(rows.size),
                "total_bytes": int(size.sum())}

    def reset(self, tenant_id: str | None = None, all_tenants: bool = False) -> dict:
        """Delete every episode of ``tenant_id``, or of everyone with ``all_tenants=True``."""
        self._refuse_if_read_only("reset")
        if tenant_id is None and not all_tenants:
            raise ConfigError("tenant_id", None, "give a tenant or all_tenants=True")
        if tenant_id is not None and all_tenants:
            raise ConfigError("all_tenants", True, "give a tenant or all_tenants=True, not both")
        if tenant_id is not None:
            return self.delete_data(tenant_id)
        with self._lock:
            if self._db is not None:
                self._db.reset()   # catches the buffer up first (on_write)
            n = len(self._buf)
            self._buf.clear()
            self._deleted(n)
        return {"deleted": n}

    def delete_data(self, tenant_id: str, task_type: str | None = None,
                    run_id: str | None = None, task_id: str | None = None,
                    request_id: str | None = None) -> dict:
        """Delete a tenant's episodes matching every given field exactly (no prefixes)."""
        self._refuse_if_read_only("delete_data")
        tenant_id = self._tenant(tenant_id)
        sel = _selection(task_type, run_id, task_id, request_id)
        with self._lock:
            if self._db is not None:  # catches the buffer up first (on_write)
                self._db.delete({"tenant_id": tenant_id, **sel})
            else:
                self._refresh()
            n = self._buf.delete(self._rows(tenant_id, **sel))
            self._deleted(n)
        return {"deleted": int(n)}

    def _export_columns(self, tenant_id: str, **sel) -> dict[str, Any]:
        with self._view():
            rows = self._rows(tenant_id, **{k: v for k, v in sel.items() if v is not None})
            cols = self._persist_columns(rows)
        where = self._where()
        for name in DICT_FIELDS:  # redact again on the way out (keys may have changed)
            cols[name] = np.array([None if t is None else json.dumps(
                redact(_stored_json(t, name, where), self.redact_keys), separators=(",", ":"))
                for t in cols[name]], dtype=object)
        for name in CATEGORICAL_FIELDS:
            cols[name] = np.array([None if v is None else redact(v, self.redact_keys)
                                   for v in cols[name]], dtype=object)
        return cols

    @staticmethod
    def _records_from_columns(cols: Mapping[str, Any]) -> list[dict]:
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

    def export_data(self, tenant_id: str, path: str | None = None, format: str = "jsonl",
                    task_type: str | None = None, run_id: str | None = None,
                    task_id: str | None = None, request_id: str | None = None) -> dict:
        """Export a tenant's episodes (redacted) to JSONL or Parquet, or inline.

        Returns
        -------
        dict
            ``n`` and ``path``; without a path, ``records`` (list of dicts) inline.

        Raises
        ------
        MissingFileError
            The folder of ``path`` does not exist (it is not created).
        ConfigError
            ``path`` is a folder, an unknown ``format``; nothing is written.
        """
        tenant_id = self._tenant(tenant_id)
        if format not in ("jsonl", "parquet"):
            raise ConfigError("format", format, "must be jsonl or parquet")
        if path is not None:
            _jsonl.check_target(path)  # a missing folder or a folder: refused before work
        cols = self._export_columns(tenant_id, task_type=task_type, run_id=run_id,
                                    task_id=task_id, request_id=request_id)
        n = len(cols["id"])
        if path is None:
            return {"n": n, "records": self._records_from_columns(cols)}
        if format == "jsonl":
            _jsonl.write_jsonl(path, self._records_from_columns(cols))
        else:
            _parquet.write_parquet(path, cols, RECORD_SCHEMA, self.dim)
        return {"n": n, "path": str(path), "format": format}

    def import_data(self, path, format: str | None = None, tenant_id: str | None = None,
                    keep_ids: bool = False) -> dict:
        """Import episodes from a JSONL or Parquet file written by :meth:`export_data`.

        Torn or corrupt JSONL lines are skipped and reported; a batch an appending writer
        did not finish is dropped whole and reported (:func:`dyna.store.jsonl.read_jsonl`).
        Records are redacted and validated like recorded ones; the whole import is one
        transaction.

        Parameters
        ----------
        path : str
        format : {"jsonl", "parquet"}, optional
            Default from the file suffix.
        tenant_id : str, optional
            Import only this tenant's records.
        keep_ids : bool
            Keep the file's ids (they must be new to this store and increasing); default
            assigns new ids.

        Returns
        -------
        dict
            ``n`` imported; for JSONL also ``skipped`` lines with their line numbers
            (``skipped_lines``), ``dropped_batches`` and the ``dropped_records`` in them.
        """
        self._refuse_if_read_only("import_data")
        p = Path(path)
        if format is None:
            format = "parquet" if p.suffix == ".parquet" else "jsonl"
        if format not in ("jsonl", "parquet"):
            raise ConfigError("format", format, "must be jsonl or parquet")
        report = None
        if format == "jsonl":
            recs, report = _jsonl.read_jsonl(p)
            cols = self._columns_from_records(recs)
        else:
            cols = _parquet.read_parquet(p, RECORD_SCHEMA, self.dim)
        if tenant_id is not None:
            keep = np.asarray(cols["tenant_id"] == self._tenant(tenant_id), dtype=bool)
            cols = {k: np.asarray(v)[keep] for k, v in cols.items()}
        n = len(cols["id"])
        if n:
            with self._lock:
                self._write_batch(self._batch_kwargs(cols),
                                  ids=np.asarray(cols["id"], dtype=np.int64) if keep_ids else None)
        out = {"n": n, "path": str(p), "format": format}
        if report is not None:
            out.update(skipped=report.n_skipped,
                       skipped_lines=[ln for ln, _ in report.skipped],
                       dropped_batches=len(report.dropped_batches),
                       dropped_records=report.n_dropped_records)
        return out

    def _columns_from_records(self, recs: list[dict]) -> dict[str, Any]:
        n = len(recs)
        cols: dict[str, Any] = {"id": np.array([r.get("id", -1) for r in recs], dtype=np.int64)}
        for name in CATEGORICAL_FIELDS:
            cols[name] = np.array([r.get(name) for r in recs], dtype=object)
        for name in ("reward", "timestamp"):
            cols[name] = _float64s(name, [r.get(name) for r in recs])
        for name in DICT_FIELDS:
            cols[name] = np.array([None if r.get(name) is None else
                                   json.dumps(r[name], separators=(",", ":"))
                                   for r in recs], dtype=object)
        try:
            feats = np.array([r.get("state_features") for r in recs], dtype=np.float32)
        except OverflowError:
            raise _overflow_error("state_features", [r.get("state_features") for r in recs]
                                  ) from None
        except (TypeError, ValueError):
            raise ConfigError("state_features", "ragged", "every record needs state_features "
                              f"of length {self.dim}") from None
        if feats.shape != (n, self.dim):
            raise ConfigError("state_features", list(feats.shape),
                              f"every record needs state_features of length {self.dim}")
        cols["features"] = feats
        return cols

    def to_dataset(self, tenant_id: str, task_type: str | None = None):
        """A tenant's episodes as a polars DataFrame with declared dtypes (a copy).

        Columns: ``id`` Int64, the categoricals String (null when missing), ``reward`` and
        ``timestamp`` Float64, the dict fields as JSON String, ``features``
        Array(Float32, d).
        """
        tenant_id = self._tenant(tenant_id)
        cols = self._export_columns(tenant_id, task_type=task_type)
        return _parquet.frame_from_columns(cols, RECORD_SCHEMA, self.dim)

    def capabilities(self) -> dict:
        """Operations with their parameters (JSON schemas), risk classes and backends."""
        try:
            import faiss  # noqa: F401, PLC0415
            ann = True
        except ImportError:
            ann = False
        return {"version": __version__, "dim": self.dim,
                "operations": {name: {"description": op.description,
                                      "input_schema": op.json_schema(),
                                      "mutates": op.mutates, "destructive": op.destructive}
                               for name, op in OPERATIONS.items()},
                "risk_classes": list(RISK_CLASSES),
                "persistence": {"backend": getattr(self._db, "backend", "sqlite")
                                if self._db is not None else "memory",
                                "path": self._db.path if self._db is not None else None,
                                "export_formats": ["jsonl", "parquet"]},
                "index": {"exact": "cosine", "ann": "faiss-hnsw" if ann else None},
                "competence": {"prior": list(self.prior), "discount": self.discount},
                "redact_keys": sorted(self.redact_keys)}

    # ------------------------------------------------------------------ dispatch
    def dispatch(self, op: str, **kwargs) -> dict:
        """Run operation ``op`` with JSON-like arguments; return a JSON-ready dict.

        Arguments are checked against :data:`OPERATIONS` first (unknown operation, unknown
        or missing parameter -> :class:`ConfigError` naming it; nothing runs). ``to_dataset``
        writes Parquet when given ``path`` and answers with the schema and row count.
        Every answer has ``op`` and ``persistence_status``.
        """
        spec = OPERATIONS.get(op) if isinstance(op, str) else None
        if spec is None:
            raise ConfigError("op", op, f"unknown operation; one of {sorted(OPERATIONS)}")
        names = {p.name for p in spec.params}
        for key in kwargs:
            if key not in names:
                raise ConfigError(key, kwargs[key], f"unknown parameter of {op}")
        for p in spec.params:
            if p.required and kwargs.get(p.name) is None:
                raise ConfigError(p.name, None, f"is required by {op}")
        args = {k: v for k, v in kwargs.items() if v is not None}
        if op == "to_dataset":
            path = args.pop("path", None)
            df = self.to_dataset(**args)
            if path is not None:
                with _jsonl.atomic_target(path) as tmp:
                    df.write_parquet(tmp, compression="zstd")
            out = {"n_rows": df.height, "schema": {k: str(v) for k, v in df.schema.items()},
                   "path": path}
        else:
            out = getattr(self, op)(**args)
        out = _json_ready(out)
        out["op"] = op
        out["persistence_status"] = self.persistence_status
        return out

    def close(self) -> None:
        """Close the SQLite connection (idempotent).

        Raises
        ------
        StoreWriteError
            (after closing) Something was not written: the buffer held episodes the file
            lacks, or a transaction was left open on the connection (rolled back). Neither
            happens through this class's methods, whose writes commit or raise.
        """
        unflushed, self._unflushed = self._unflushed, 0
        self._fcache, self._fcache_key = None, None
        if self._db is not None:
            self._db.close()
        if unflushed:
            raise StoreWriteError(self._db.path if self._db is not None else ":memory:",
                                  f"{unflushed} episodes in memory were never written")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self) -> int:
        with self._view():
            return len(self._buf)
