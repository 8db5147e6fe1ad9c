"""The experience store's operations as data: names, parameters, effects and limits.

:data:`OPERATIONS` declares every operation of :class:`dyna.experience.ExperienceStore`:
:meth:`~dyna.experience.ExperienceStore.dispatch` checks arguments against it, and it gives
:meth:`~dyna.experience.ExperienceStore.capabilities` and the JSON schemas of tool servers
(:mod:`dyna.mcp_server`). The ``MAX_*`` limits bound what one call may ask for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from dyna.buffer import REQUIRED_FIELDS

__all__ = ["MAX_BATCH_SIZE", "MAX_BIN_COUNT", "MAX_K", "MAX_KEEP", "OPERATIONS", "Operation",
           "Param", "json_ready"]

#: Largest ``bin_count`` of :meth:`dyna.experience.ExperienceStore.get_transition_table`.
MAX_BIN_COUNT = 10_000
#: Most episodes one replay_experience call returns (it samples with replacement, so the
#: data cannot bound it: without a maximum a caller could ask for 10**9).
MAX_BATCH_SIZE = 10_000
#: Most neighbours a query (query_similar, get_recommendation) may ask for.
MAX_K = 10_000
#: Largest keep count of compact (beyond any store; keeps integer arithmetic in int64).
MAX_KEEP = 2 ** 62


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
        """JSON Schema of the parameter (nullable unless required or defaulted)."""
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
               Param("ids", "array", description="episode ids the priorities refer to (each once)",
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


def json_ready(obj):
    """Numpy scalars/arrays and tuples to plain JSON types; NaN/inf to None; a timezone-aware
    datetime to ISO 8601 text with microseconds and its UTC offset
    (``"2026-01-01T12:00:00.000000+00:00"``, as exports write times)."""
    if isinstance(obj, datetime):
        return obj.isoformat(timespec="microseconds")
    if isinstance(obj, Mapping):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_ready(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
