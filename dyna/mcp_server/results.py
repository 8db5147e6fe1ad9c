"""The output JSON schemas (2020-12) of the MCP server's tools: their results and errors.

Written for strict clients and schema translators (the MCP Inspector's portability check,
the OpenAPI subset of Gemini function declarations): no conditional or combining keyword at
the top level of a schema, and every property, at any depth, has a ``description`` and a
``type``. The one exception to a plain ``type`` is a value that may be ``null`` (or any JSON
value): an ``anyOf`` of branches that each have one plain ``type``, the spelling the
Inspector recommends over a type array. A result and an error result (``isError: true``)
share one schema: which fields a result always has is listed in the schema's
``description`` and by :func:`result_fields`, since telling the two apart in the schema would
need a top-level ``anyOf``.
"""

from __future__ import annotations

from dyna.mcp_server.schemas import ENUMS

__all__ = ["PERSISTENCE_STATUSES", "output_schema", "result_fields"]

#: Values of ``persistence_status``
#: (:attr:`dyna.experience.ExperienceStore.persistence_status`).
PERSISTENCE_STATUSES = ("ok", "missing", "write_degraded")


def _t(kind: str, description: str, **extra) -> dict:
    """A described property of one plain JSON type."""
    return {"type": kind, "description": description, **extra}


def _nullable(schema: dict) -> dict:
    """``schema`` or ``null``: ``anyOf`` of two single-type branches, described outside."""
    branch = {k: v for k, v in schema.items() if k != "description"}
    return {"anyOf": [branch, {"type": "null"}], "description": schema["description"]}


def _any_json(description: str) -> dict:
    """Any JSON value, each JSON type as one branch."""
    return {"anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean",
                                            "null")], "description": description}


def _obj(description: str, props: dict, required=None) -> dict:
    """An object; ``required`` defaults to every property. Open to new properties."""
    return {"type": "object", "description": description, "properties": props,
            "required": list(props) if required is None else list(required)}


def _arr(description: str, items: dict) -> dict:
    return {"type": "array", "description": description, "items": items}


def _enum(description: str, values) -> dict:
    return _t("string", description, enum=list(values))


_LABELS = {
    "run_id": "label of the run the episode belongs to",
    "task_id": "label of the task the episode belongs to",
    "request_id": "label of the request the episode belongs to",
    "outcome_source": "who or what decided the outcome",
    "outcome_verified_by": "who verified the outcome",
    "anti_gaming_policy": "the policy that kept the outcome honest",
}
_EPISODE = _obj("one stored episode", {
    "id": _t("integer", "the episode's id in the store"),
    "tenant_id": _t("string", "the tenant the episode belongs to (the server's)"),
    "task_type": _t("string", "kind of task"),
    "action_type": _t("string", "what the agent did"),
    "outcome": _t("string", "\"success\" or another label"),
    **{k: _nullable(_t("string", f"{v}; null when not given")) for k, v in _LABELS.items()},
    "reward": _t("number", "the episode's reward"),
    "timestamp": _t("string", "when the episode happened (ISO 8601 in UTC, e.g. "
                    "2026-01-01T12:00:00.000000+00:00)", format="date-time"),
    **{k: _any_json(f"the recorded {k} (secrets redacted), or null")
       for k in ("state_before", "action_taken", "state_after", "metadata")},
}, required=("id", "tenant_id", "task_type", "action_type", "outcome", "reward", "timestamp"))
_RECORD = {**_EPISODE, "description": "one exported episode with its features",
           "properties": {**_EPISODE["properties"],
                          "state_features": _arr("the episode's numeric features (length dim)",
                                                 {"type": "number"})},
           "required": [*_EPISODE["required"], "state_features"]}
_BOUNDS = {"lower": _t("number", "lower end of the credible interval"),
           "upper": _t("number", "upper end of the credible interval")}
_CANDIDATE = _obj("one action type's record among the episodes considered", {
    "action_type": _t("string", "the action type"),
    "n": _t("integer", "episodes with this action type"),
    "n_success": _t("integer", "of them, successes"),
    "success_rate": _t("number", "posterior mean success rate"),
    **_BOUNDS,
    "mean_reward": _t("number", "mean reward of these episodes"),
})
_COMPETENCE = _obj("the Beta posterior of success of one task type", {
    "task_type": _t("string", "the task type"),
    "a": _t("number", "Beta posterior parameter alpha (prior plus successes)"),
    "b": _t("number", "Beta posterior parameter beta (prior plus failures)"),
    "n_success": _t("number", "successes counted (discounted)"),
    "n_failure": _t("number", "failures counted (discounted)"),
    "mean": _t("number", "posterior mean success rate"),
    **_BOUNDS,
    "level": _t("number", "credible level of the interval"),
})
_ERROR = _obj("why the call failed (error results only, isError true)", {
    "type": _t("string", "error class, or \"internal\""),
    "field": _nullable(_t("string", "the argument at fault (a JSON path such as "
                          "episodes[0].reward), or null")),
    "value": _any_json("the value refused, as JSON (null when missing)"),
    "reason": _t("string", "what is wrong with the value"),
    "message": _t("string", "field=value: reason, the text of the error result"),
    "retryable": _t("boolean", "true when the same call may succeed later (store busy)"),
}, required=("type", "field", "value", "reason", "message"))


def _capabilities() -> tuple[dict, tuple]:
    tool_info = _obj("one tool", {
        "description": _t("string", "what the tool does"),
        "input_schema": _t("object", "the tool's input JSON schema"),
        "mutates": _t("boolean", "whether the tool changes the store"),
        "destructive": _t("boolean", "whether the tool deletes episodes (needs confirm)"),
    })
    return ({
        "version": _t("string", "dyna's version"),
        "dim": _t("integer", "the store's feature dimension"),
        "operations": {**_t("object", "the tools this server offers, by name"),
                       "additionalProperties": tool_info},
        "risk_classes": _arr("values of should_escalate's domain_risk_class",
                             {"type": "string"}),
        "persistence": _obj("where the store keeps its episodes", {
            "backend": _enum("storage backend", ("sqlite", "memory")),
            "path": _nullable(_t("string", "base name of the store file, or null")),
            "export_formats": _arr("file formats export_data writes", {"type": "string"}),
        }, required=("backend",)),
        "index": _t("object", "the similarity index: search kinds and their methods"),
        "competence": _t("object", "the competence model: prior and discount"),
        "redact_keys": _arr("keys whose values are redacted before storing",
                            {"type": "string"}),
        "server": _obj("this server", {
            "tenant_id": _t("string", "the one tenant served"),
            "read_only": _t("boolean", "whether only reading tools are offered"),
            "tools": _arr("names of the tools offered", {"type": "string"}),
            "export_dir": _nullable(_t("string", "base name of the export directory, or "
                                       "null (inline exports only)")),
        }),
    }, ("version", "dim", "operations", "server"))


def _get_stats() -> tuple[dict, tuple]:
    store = _obj("the store file's state (sizes describe the file shared by every tenant)", {
        "path": _t("string", "base name of the store file"),
        "persistent": _t("boolean", "whether episodes are kept in a file"),
        "status": _t("string", "persistence status of the file"),
        "page_count": _t("integer", "SQLite pages in the file"),
        "freelist_count": _t("integer", "unused SQLite pages"),
        "page_size": _t("integer", "bytes per SQLite page"),
        "file_bytes": _t("integer", "size of the file, bytes"),
        "schema_version": _t("integer", "version of the store's table layout"),
        "busy_timeout_s": _t("number", "how long a write waits for a lock, seconds"),
        "read_only": _t("boolean", "whether the file is opened read-only"),
    }, required=("status", "file_bytes"))
    return ({
        "n_records": _t("integer", "episodes of this tenant"),
        "n_tenants": _t("integer", "tenants counted (1: this server's)"),
        "n_task_types": _t("integer", "task types of this tenant"),
        "oldest": _nullable(_t("string", "time of the oldest episode (ISO 8601 in UTC, "
                               "e.g. 2026-01-01T12:00:00.000000+00:00), or null when there is none",
                               format="date-time")),
        "newest": _nullable(_t("string", "time of the newest episode (ISO 8601 in UTC, "
                               "e.g. 2026-01-01T12:00:00.000000+00:00), or null when there is none",
                               format="date-time")),
        "dim": _t("integer", "the store's feature dimension"),
        "persistent": _t("boolean", "whether episodes are kept in a file"),
        "n_unpersisted": _t("integer", "episodes not yet written to the file"),
        "store": store,
    }, ("n_records", "n_tenants", "n_task_types", "oldest", "newest", "dim"))


def _get_recommendation() -> tuple[dict, tuple]:
    return ({
        "action_type": _nullable(_t("string", "the recommended action type, or null when "
                                    "too few episodes")),
        "criterion": _enum("what candidates were ranked by", ENUMS["criterion"]),
        "best": _nullable({**_CANDIDATE, "description": "the recommended candidate, or null"}),
        "candidates": _arr("every action type considered, best first", _CANDIDATE),
        "n_episodes": _t("integer", "episodes considered"),
        "scope": _enum("similar: the query's neighbours; task: the task type's episodes",
                       ("similar", "task")),
    }, ("action_type", "criterion", "best", "candidates", "n_episodes", "scope"))


def _should_escalate() -> tuple[dict, tuple]:
    return ({
        "escalate": _t("boolean", "true: hand the task to a person (or a stronger agent)"),
        "reason": _enum("why", ("insufficient_episodes", "unverified_evidence",
                                "below_threshold", "competent")),
        "escalation_block_reason": _t("string", "the reason in words"),
        "task_type": _t("string", "the task type decided on"),
        "risk_class": _enum("the domain risk class applied", ENUMS["domain_risk_class"]),
        "n_episodes": _t("integer", "outcomes of the task type"),
        "n_evidence": _t("number", "outcomes counted as evidence (discounted, verified "
                         "where the risk class asks)"),
        "n_success": _t("number", "of them, successes"),
        "mean": _t("number", "posterior mean success rate"),
        **_BOUNDS,
        "statistic": _enum("which of mean and lower was compared with the threshold",
                           ("mean", "lower")),
        "threshold": _t("number", "competence needed to act without escalating"),
        "level": _t("number", "credible level of the interval"),
        "min_episodes": _t("integer", "outcomes needed before deciding on competence"),
        "policy": _t("string", "name of the decision rule applied"),
    }, ("escalate", "reason", "escalation_block_reason", "task_type", "risk_class",
        "n_episodes", "mean", "lower", "upper", "threshold", "level", "min_episodes"))


def _reads() -> dict[str, tuple[dict, tuple]]:
    task_type = _obj("one task type", {
        "task_type": _t("string", "the task type"),
        "n_episodes": _t("integer", "its episodes"),
        "mean": _t("number", "posterior mean success rate"), **_BOUNDS})
    transition = _obj("transitions of one action between two state bins", {
        "action_type": _t("string", "the action type"),
        "from_bin": _t("integer", "bin of the state before"),
        "to_bin": _t("integer", "bin of the state after"),
        "count": _t("integer", "episodes with this transition"),
        "mean_reward": _t("number", "their mean reward")})
    consumption = _obj("the share of one tenant's task type", {
        "tenant_id": _t("string", "the tenant (the server's)"),
        "task_type": _t("string", "the task type"),
        "records": _t("integer", "episodes"),
        "bytes": _t("integer", "bytes they take in the store")})
    return {
        "capabilities": _capabilities(),
        "get_stats": _get_stats(),
        "get_competence": ({"competence": _arr("one posterior per task type", _COMPETENCE)},
                           ("competence",)),
        "get_recommendation": _get_recommendation(),
        "query_similar": ({"results": _arr("the most similar episodes, most similar first",
                                           _obj("one neighbour", {
                                               "score": _t("number", "cosine similarity"),
                                               "episode": _EPISODE}))}, ("results",)),
        "should_escalate": _should_escalate(),
        "list_task_types": ({"task_types": _arr("the tenant's task types", task_type)},
                            ("task_types",)),
        "get_transition_table": ({
            "bin_count": _t("integer", "number of state bins"),
            "edges": _nullable(_arr("bin edges of state_key's values, or null when states "
                                    "are hashed into bins", {"type": "number"})),
            "state_key": _nullable(_t("string", "the state field binned by value, or null")),
            "transitions": _arr("counts and mean reward per action and bin pair", transition),
            "n_episodes": _t("integer", "episodes counted"),
        }, ("bin_count", "edges", "state_key", "transitions", "n_episodes")),
        "get_data_consumption": ({
            "consumption": _arr("records and bytes per task type", consumption),
            "total_records": _t("integer", "episodes of the tenant"),
            "total_bytes": _t("integer", "bytes they take in the store"),
        }, ("consumption", "total_records", "total_bytes")),
    }


def _writes() -> dict[str, tuple[dict, tuple]]:
    deleted = {"deleted": _t("integer", "episodes deleted")}
    return {
        "record": ({"ids": _arr("ids of the recorded episodes, in order", {"type": "integer"}),
                    "n": _t("integer", "episodes recorded")}, ("ids", "n")),
        "replay_experience": ({"episodes": _arr("the sampled episodes", _EPISODE),
                               "ids": _arr("their ids, in order", {"type": "integer"})},
                              ("episodes", "ids")),
        "prune_old": ({**deleted, "cutoff": _nullable(_t(
            "string", "episodes older than this time were deleted (ISO 8601 in UTC, e.g. "
            "2026-01-01T12:00:00.000000+00:00); null when it is outside the years 1 to 9999",
            format="date-time"))},
                      ("deleted", "cutoff")),
        "compact": ({**deleted, "bytes_before": _t("integer", "file size before, bytes"),
                     "bytes_after": _t("integer", "file size after, bytes"),
                     "freelist_count": _t("integer", "unused SQLite pages left")},
                    ("deleted", "bytes_before", "bytes_after", "freelist_count")),
        "export_data": ({
            "n": _t("integer", "episodes exported"),
            "records": _arr("the episodes (inline export, no path given)", _RECORD),
            "path": _t("string", "the file written, inside the server's export directory"),
            "format": _enum("the file's format", ENUMS["format"]),
        }, ("n",)),
        "delete_data": (deleted, ("deleted",)),
        "reset": (deleted, ("deleted",)),
    }


def _results() -> dict[str, tuple[dict, tuple]]:
    """Each tool's result properties and the ones always present."""
    return {**_reads(), **_writes()}


def result_fields(tool: str) -> tuple[str, ...]:
    """The fields every successful result of ``tool`` has (``persistence_status`` and ``op``
    included); an error result has ``error`` and ``op`` instead.

    Raises
    ------
    KeyError
        An unknown tool.
    """
    return (*_results()[tool][1], "persistence_status", "op")


def output_schema(tool: str) -> dict:
    """The output JSON schema (2020-12) of tool ``tool``: its result or a tool error.

    A result has the tool's properties, ``op`` (the tool name) and ``persistence_status``;
    an error result (``isError: true``) has ``error`` (``type``, ``field``, ``value``,
    ``reason``, ``message``) and ``op``. Only ``op`` is ``required``: the fields a result
    always has (:func:`result_fields`) are named in the schema's ``description``. Objects
    stay open to new properties.

    Raises
    ------
    KeyError
        An unknown tool.
    """
    props, _ = _results()[tool]
    always = ", ".join(result_fields(tool))
    return {"type": "object",
            "description": f"The result of {tool}: always {always}; an error result "
                           "(isError true) has error and op instead.",
            "properties": {
                **props, "op": _t("string", "the tool called", const=tool),
                "persistence_status": _enum("ok; missing: this server created the store and "
                                            "nothing is written yet; write_degraded: the "
                                            "last write failed", PERSISTENCE_STATUSES),
                "error": _ERROR},
            "required": ["op"]}
