"""The input JSON schemas (2020-12) of the MCP server's tools.

Built from the operations' declarations (:data:`dyna.experience.OPERATIONS`) for clients
that read schemas literally or translate them to a smaller dialect: every property has one
plain ``type`` and a ``description``, enumerations and ranges are spelled out, no ``null``,
and no conditional or combining keyword (``if``, ``anyOf``, ...) anywhere. A rule a schema
cannot state that way (:data:`RECORD_RULE`) is written in the description and checked by
the server (see :mod:`dyna.mcp_server`). Output schemas: :mod:`dyna.mcp_server.results`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ENUMS", "EPISODE_REQUIRED", "FILE_NAME_PATTERN", "FILE_NAME_REASON", "READ_TOOLS",
           "RECORD_RULE", "SERVER_FIXED", "WRITE_TOOLS", "input_schema"]

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
#: What ``record`` takes, which its input schema leaves to the server to check: the schema
#: requires no field at the top level (a conditional ``required`` is what strict clients
#: and schema translators cannot express), and the server refuses a call that breaks it.
RECORD_RULE = ("Give either episodes (a batch) or one episode's fields, not both; without "
               "episodes, " + ", ".join(EPISODE_REQUIRED[:-1]) + " and "
               + EPISODE_REQUIRED[-1] + " are required.")


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
    "batch_size": "number of episodes sampled",
    "domain_risk_class": "how costly a wrong autonomous action is: the higher the class, the "
                         "stricter the evidence should_escalate asks for",
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
        for ``record`` also the ``episodes`` item schema, and :data:`RECORD_RULE` in the
        descriptions of ``episodes`` and of the fields it makes required.
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
                             "none); omitted: one episode given by the other fields. "
                             + RECORD_RULE}
        for name in EPISODE_REQUIRED:
            props[name] = {**props[name], "description": props[name]["description"]
                           + "; required unless episodes is given"}
    return schema
