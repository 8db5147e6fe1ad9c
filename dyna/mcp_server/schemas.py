"""The JSON schemas (2020-12) of the MCP server's tools: their inputs and their results.

Input schemas are built from the operations' declarations
(:data:`dyna.experience.OPERATIONS`) for clients that read schemas literally: one plain
``type`` per property, enumerations and ranges spelled out, no ``null`` (see
:mod:`dyna.mcp_server`). Output schemas describe each tool's result or its tool error.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ENUMS", "EPISODE_REQUIRED", "FILE_NAME_PATTERN", "FILE_NAME_REASON", "READ_TOOLS",
           "SERVER_FIXED", "WRITE_TOOLS", "input_schema", "output_schema"]

#: Tools every server offers (they never change the store or write files).
READ_TOOLS = ("capabilities", "get_stats", "get_competence", "get_recommendation",
              "query_similar", "should_escalate", "list_task_types", "get_transition_table",
              "get_data_consumption")
#: Tools a read-only server leaves out.
WRITE_TOOLS = ("record", "replay_experience", "prune_old", "compact", "export_data",
               "delete_data", "reset")
#: Operation parameters the server fixes itself; never tool inputs.
SERVER_FIXED = ("tenant_id", "all_tenants")
#: Values of the enumerated parameters, as :class:`~dyna.experience.ExperienceStore` checks
#: them (``domain_risk_class``: the keys of :data:`dyna.escalation.RISK_CLASSES`).
ENUMS: dict[str, tuple[str, ...]] = {
    "criterion": ("success_rate", "mean_reward"),
    "strategy": ("uniform", "recency", "priority"),
    "domain_risk_class": ("low_stakes", "elevated", "high_stakes"),
    "format": ("jsonl", "parquet"),
}
#: A file name ``export_data`` may write inside the export directory: no directories.
FILE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
#: Why a ``path`` that does not match :data:`FILE_NAME_PATTERN` is refused.
FILE_NAME_REASON = ('must be a plain file name (letters, digits, ".", "_", "-"; no '
                     "directories), written inside the server's export directory")
#: Fields every episode needs (:data:`dyna.buffer.REQUIRED_FIELDS` less the tenant).
EPISODE_REQUIRED = ("task_type", "action_type", "outcome", "reward")


#: Descriptions of parameters the operation table leaves undescribed.
_DESCRIPTIONS = {
    "task_type": "kind of task, an exact label (competence is kept per task type)",
    "action_type": "what the agent did, an exact label (recommendations rank action types)",
    "outcome": "\"success\" counts as a success of the task type; any other label (e.g. "
               "\"failure\") as a failure",
    "reward": "the episode's reward, a finite number",
    "run_id": "label of the run the episode belongs to (exact)",
    "task_id": "label of the task the episode belongs to (exact)",
    "request_id": "label of the request the episode belongs to (exact)",
    "outcome_source": "who or what decided the outcome (e.g. \"tests\", \"user\")",
    "outcome_verified_by": "who verified the outcome (provenance: elevated and high_stakes "
                           "escalation count only outcomes with it and anti_gaming_policy)",
    "anti_gaming_policy": "the policy that kept the outcome honest (provenance)",
    "state_before": "JSON object: the state before acting (secrets are redacted)",
    "action_taken": "JSON object: the action (secrets are redacted)",
    "state_after": "JSON object: the state after acting (secrets are redacted)",
    "metadata": "JSON object: anything else (secrets are redacted)",
    "k": "number of neighbours",
    "min_episodes": "episodes needed before the answer counts",
    "threshold": "competence needed to act without escalating, in [0, 1]",
    "bin_count": "number of state bins",
    "half_life_seconds": "strategy recency: a sample weight halves every this many seconds",
    "priority_exponent": "strategy priority: weight |priority| ** priority_exponent",
    "seed": "random seed (omitted: fresh randomness)",
    "max_age_seconds": "delete episodes older than this many seconds before now",
    "compact_keep_records": "keep the newest this many episodes per task type (omitted: "
                            "delete nothing, only reclaim space)",
    "format": "file format of the export",
}


def _limits() -> dict:
    """Ranges of the bounded parameters, as the store checks them; keyed by parameter name
    or by ``(tool, parameter)`` where tools differ."""
    from dyna.experience import MAX_BATCH_SIZE, MAX_BIN_COUNT, MAX_K, MAX_KEEP  # noqa: PLC0415

    return {"k": {"minimum": 1, "maximum": MAX_K},
            "batch_size": {"minimum": 1, "maximum": MAX_BATCH_SIZE},
            "compact_keep_records": {"minimum": 0, "maximum": MAX_KEEP},
            "bin_count": {"minimum": 1, "maximum": MAX_BIN_COUNT},
            "level": {"exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "threshold": {"minimum": 0, "maximum": 1},
            "max_age_seconds": {"minimum": 0},
            "half_life_seconds": {"exclusiveMinimum": 0},
            "priority_exponent": {"minimum": 0},
            "seed": {"minimum": 0},
            ("get_recommendation", "min_episodes"): {"minimum": 1},
            ("should_escalate", "min_episodes"): {"minimum": 0}}


def _property(tool: str, param, dim: int | None) -> dict:
    """The schema of one parameter: one plain ``type``, enum or range, no ``null``."""
    out: dict[str, Any] = {"type": param.type}
    desc = param.description or _DESCRIPTIONS.get(param.name, "")
    if desc:
        out["description"] = desc
    if param.items is not None:
        out["items"] = {"type": param.items}
    if param.name == "state_features" and dim is not None:
        out["minItems"] = out["maxItems"] = dim
    if param.name in ENUMS:
        out["enum"] = list(ENUMS[param.name])
    limits = _limits()
    out.update(limits.get((tool, param.name)) or limits.get(param.name) or {})
    if tool == "record" and param.name in EPISODE_REQUIRED and param.type == "string":
        out["minLength"] = 1
    if param.default is not None:
        out["default"] = param.default
    return out


def input_schema(tool: str, params, *, dim: int | None = None,
                 tenant_id: str | None = None) -> dict:
    """The input JSON schema (2020-12) of tool ``tool`` with parameters ``params``.

    Parameters
    ----------
    tool : str
        The tool's name (a few ranges and ``record``'s episode rules depend on it).
    params : sequence of dyna.experience.Param
        The tool's parameters (server-fixed ones already removed).
    dim : int, optional
        The store's feature dimension: the length of ``state_features``.
    tenant_id : str, optional
        The server's tenant: the only ``tenant_id`` an episode of ``record`` may carry.

    Returns
    -------
    dict
        ``{"type": "object", "properties", "required", "additionalProperties": false}``;
        for ``record`` also the ``episodes`` item schema and the top-level ``if``/``else``
        that requires :data:`EPISODE_REQUIRED` when ``episodes`` is not given.
    """
    props = {p.name: _property(tool, p, dim) for p in params}
    schema = {"type": "object", "properties": props,
              "required": [p.name for p in params if p.required],
              "additionalProperties": False}
    if tool == "record" and "episodes" in props:
        fields = {k: v for k, v in props.items() if k != "episodes"}
        item = {"type": "object",
                "properties": {**fields,
                               "id": {"type": "integer", "description": "ignored (an exported "
                                      "record's id; the store assigns new ids)"},
                               "tenant_id": {"type": "string", "description": "optional; "
                                             "must be the server's tenant"}},
                "required": list(EPISODE_REQUIRED), "additionalProperties": False}
        if tenant_id is not None:
            item["properties"]["tenant_id"]["const"] = tenant_id
        props["episodes"] = {**props["episodes"], "items": item, "minItems": 1,
                             "description": "a batch of episodes recorded at once (all or "
                             "none); omitted: one episode given by the other fields"}
        schema["if"] = {"required": ["episodes"]}
        schema["else"] = {"required": list(EPISODE_REQUIRED)}
    return schema


_S, _N, _I, _B = ({"type": "string"}, {"type": "number"}, {"type": "integer"},
                  {"type": "boolean"})
_ANY = {"description": "any JSON value"}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(props: dict, required=None, **extra) -> dict:
    """An object schema; ``required`` defaults to every property. Open to new properties."""
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else list(required), **extra}


def _arr(items: dict) -> dict:
    return {"type": "array", "items": items}


_LABELS = ("run_id", "task_id", "request_id", "outcome_source", "outcome_verified_by",
           "anti_gaming_policy")
_EPISODE = _obj({"id": _I, "tenant_id": _S, "task_type": _S, "action_type": _S,
                 "outcome": _S, **{k: _nullable(_S) for k in _LABELS}, "reward": _N,
                 "timestamp": _N,
                 **{k: {"description": "the recorded JSON value, or null"}
                    for k in ("state_before", "action_taken", "state_after", "metadata")}},
                required=("id", "tenant_id", "task_type", "action_type", "outcome", "reward",
                          "timestamp"))
_RECORD = {**_EPISODE, "properties": {**_EPISODE["properties"],
                                      "state_features": _arr(_N)},
           "required": [*_EPISODE["required"], "state_features"]}
_CANDIDATE = _obj({"action_type": _S, "n": _I, "n_success": _I, "success_rate": _N,
                   "lower": _N, "upper": _N, "mean_reward": _N})
_COMPETENCE = _obj({"task_type": _S, **{k: _N for k in ("a", "b", "n_success", "n_failure",
                                                        "mean", "lower", "upper", "level")}})
_ERROR = _obj({"type": {"type": "string", "description": "error class, or \"internal\""},
               "field": _nullable(_S), "value": _ANY, "reason": _S, "message": _S,
               "retryable": _B}, required=("type", "field", "value", "reason", "message"))


def _results() -> dict[str, tuple[dict, tuple]]:
    """Each tool's result properties and the ones always present."""
    stats_store = _obj({"path": {"type": "string", "description": "base name of the store "
                                 "file"}, "persistent": _B, "status": _S, "page_count": _I,
                        "freelist_count": _I, "page_size": _I, "file_bytes": _I,
                        "schema_version": _I, "busy_timeout_s": _N, "read_only": _B},
                       required=("status", "file_bytes"))
    tool_info = _obj({"description": _S, "input_schema": {"type": "object"},
                      "mutates": _B, "destructive": _B})
    return {
        "capabilities": ({
            "version": _S, "dim": _I,
            "operations": {"type": "object", "additionalProperties": tool_info,
                           "description": "the tools this server offers"},
            "risk_classes": _arr(_S),
            "persistence": _obj({"backend": {"enum": ["sqlite", "memory"]},
                                 "path": _nullable({"type": "string", "description":
                                                    "base name of the store file"}),
                                 "export_formats": _arr(_S)}, required=("backend",)),
            "index": {"type": "object"}, "competence": {"type": "object"},
            "redact_keys": _arr(_S),
            "server": _obj({"tenant_id": _S, "read_only": _B, "tools": _arr(_S),
                            "export_dir": _nullable({"type": "string", "description":
                                                     "base name of the export directory"})}),
        }, ("version", "dim", "operations", "server")),
        "get_stats": ({
            "n_records": _I, "n_tenants": _I, "n_task_types": _I, "oldest": _nullable(_N),
            "newest": _nullable(_N), "dim": _I, "persistent": _B, "n_unpersisted": _I,
            "store": stats_store,
        }, ("n_records", "n_tenants", "n_task_types", "oldest", "newest", "dim")),
        "get_competence": ({"competence": _arr(_COMPETENCE)}, ("competence",)),
        "get_recommendation": ({
            "action_type": _nullable(_S), "criterion": {"enum": list(ENUMS["criterion"])},
            "best": _nullable(_CANDIDATE), "candidates": _arr(_CANDIDATE), "n_episodes": _I,
            "scope": {"enum": ["similar", "task"]},
        }, ("action_type", "criterion", "best", "candidates", "n_episodes", "scope")),
        "query_similar": ({"results": _arr(_obj({"score": _N, "episode": _EPISODE}))},
                          ("results",)),
        "should_escalate": ({
            "escalate": _B, "reason": {"enum": ["insufficient_episodes",
                                                "unverified_evidence", "below_threshold",
                                                "competent"]},
            "escalation_block_reason": _S, "task_type": _S,
            "risk_class": {"enum": list(ENUMS["domain_risk_class"])}, "n_episodes": _I,
            "n_evidence": _N, "n_success": _N, "mean": _N, "lower": _N, "upper": _N,
            "statistic": {"enum": ["mean", "lower"]}, "threshold": _N, "level": _N,
            "min_episodes": _I, "policy": _S,
        }, ("escalate", "reason", "escalation_block_reason", "task_type", "risk_class",
            "n_episodes", "mean", "lower", "upper", "threshold", "level", "min_episodes")),
        "list_task_types": ({"task_types": _arr(_obj({"task_type": _S, "n_episodes": _I,
                                                      "mean": _N, "lower": _N,
                                                      "upper": _N}))}, ("task_types",)),
        "get_transition_table": ({
            "bin_count": _I, "edges": _nullable(_arr(_N)), "state_key": _nullable(_S),
            "transitions": _arr(_obj({"action_type": _S, "from_bin": _I, "to_bin": _I,
                                      "count": _I, "mean_reward": _N})),
            "n_episodes": _I,
        }, ("bin_count", "edges", "state_key", "transitions", "n_episodes")),
        "get_data_consumption": ({
            "consumption": _arr(_obj({"tenant_id": _S, "task_type": _S, "records": _I,
                                      "bytes": _I})),
            "total_records": _I, "total_bytes": _I,
        }, ("consumption", "total_records", "total_bytes")),
        "record": ({"ids": _arr(_I), "n": _I}, ("ids", "n")),
        "replay_experience": ({"episodes": _arr(_EPISODE), "ids": _arr(_I)},
                              ("episodes", "ids")),
        "prune_old": ({"deleted": _I, "cutoff": _N}, ("deleted", "cutoff")),
        "compact": ({"deleted": _I, "bytes_before": _I, "bytes_after": _I,
                     "freelist_count": _I},
                    ("deleted", "bytes_before", "bytes_after", "freelist_count")),
        "export_data": ({
            "n": _I, "records": {**_arr(_RECORD), "description": "inline export (no path)"},
            "path": {"type": "string", "description": "the file written, inside the "
                     "server's export directory"},
            "format": {"enum": list(ENUMS["format"])},
        }, ("n",)),
        "delete_data": ({"deleted": _I}, ("deleted",)),
        "reset": ({"deleted": _I}, ("deleted",)),
    }


def output_schema(tool: str) -> dict:
    """The output JSON schema (2020-12) of tool ``tool``: its result or a tool error.

    A result has the tool's properties (those always present ``required``), ``op`` (the tool
    name) and ``persistence_status``; an error result (``isError: true``) has ``error``
    (``type``, ``field``, ``value``, ``reason``, ``message``) and ``op``. The two are told
    apart by a top-level ``anyOf`` of their ``required`` lists; properties that may be
    ``null`` use ``anyOf`` with ``{"type": "null"}``. Objects stay open to new properties.

    Raises
    ------
    KeyError
        An unknown tool.
    """
    props, required = _results()[tool]
    return {"type": "object",
            "properties": {**props, "op": {"const": tool},
                           "persistence_status": {"enum": ["ok", "missing",
                                                           "write_degraded"]},
                           "error": _ERROR},
            "required": ["op"],
            "anyOf": [{"required": [*required, "persistence_status"]},
                      {"required": ["error"]}]}
