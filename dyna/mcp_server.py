"""A Model Context Protocol server over the experience store: ``dyna mcp``.

Agents that people already run (coding agents, assistants) reach tools over the Model
Context Protocol (MCP). ``dyna mcp`` exposes the experience loop of one
:class:`dyna.experience.ExperienceStore` as MCP tools, so such an agent can record its
outcomes and ask for its competence, similar past episodes and escalation decisions while
it works::

    dyna mcp --db PATH [--tenant T] [--read-only] [--http PORT [--token-file F]] [--dim D] [--export-dir DIR]

Transport
    stdio by default (the client starts the server as a subprocess). ``--http PORT`` serves
    streamable HTTP at ``http://127.0.0.1:PORT/mcp`` instead, bound to the loopback
    interface only (``PORT`` 0 picks a free port; the URL is printed on stderr) with the
    SDK's DNS-rebinding protection on. Any local process can reach a loopback port, so HTTP
    requires a bearer token: every request must carry ``Authorization: Bearer <token>``
    (compared in constant time, :func:`hmac.compare_digest`) and no ``Origin`` other than
    the server's own; others get 401 or 403. The token comes from the environment variable
    ``DYNA_MCP_TOKEN`` or from ``--token-file PATH``, a file readable by its owner only
    (mode ``0600`` or stricter); it is never printed or logged, and without one the server
    refuses to start.

Tools
    One tool per experience-loop operation, named as the operation:
    :data:`READ_TOOLS` always, :data:`WRITE_TOOLS` unless ``--read-only``. Each tool's input
    schema (JSON Schema 2020-12) is built from the operation's declaration in
    :data:`dyna.experience.OPERATIONS` (the table :meth:`ExperienceStore.dispatch` checks
    arguments against), with the server-fixed parameters removed and ``confirm`` added to
    destructive tools, and written for clients that read schemas literally (MCP Inspector
    0.15 reads a property's ``type`` and nothing else):

    * every property has one plain ``type`` (no type arrays such as ``["number", "null"]``,
      no ``anyOf``); an optional parameter is simply not in ``required``, and an explicit
      ``null`` is read as "omitted";
    * enumerated parameters list their values (:data:`ENUMS`), bounded ones their range
      (``k`` 1..:data:`~dyna.experience.MAX_K`, ``level`` in the open interval (0, 1), ...),
      ``state_features`` its length (the store's ``dim``);
    * ``record`` takes one episode as fields or a batch as ``episodes``; an episode needs
      ``task_type``, ``action_type``, ``outcome`` and ``reward`` (``required`` of the
      ``episodes`` items, and of the fields themselves when ``episodes`` is not given, a
      top-level ``if``/``else``: clients that send schemas on to a model API reject a
      top-level ``anyOf``).

    Every tool also has an ``outputSchema`` (:func:`output_schema`) and every result carries
    ``structuredContent`` matching it (MCP 2025-06-18): the JSON answer of
    :meth:`ExperienceStore.dispatch` with ``op`` and ``persistence_status``, and, for
    clients that read only text, the same JSON as one text block. Output properties that
    may be ``null`` say so with ``anyOf`` (the only place it is used).

Tenancy
    The server serves one tenant, fixed at start (``--tenant``, default ``default``).
    ``tenant_id`` is not an input of any tool: every call runs with the server's tenant,
    and the operations that could span tenants (``get_stats``, ``get_data_consumption``,
    ``prune_old``, ``compact``, ``reset``) are always scoped to it (``reset`` has no
    ``all_tenants``). A call that names ``tenant_id`` (or ``all_tenants``) is refused, as is
    an episode of ``record`` that carries another tenant's id. ``get_stats`` leaves out the
    file's total row count, which would count other tenants' records; the file-level sizes
    it and ``compact`` report (bytes, pages) describe the shared file.

Destructive tools
    ``reset``, ``delete_data``, ``prune_old`` and ``compact`` (the operations declared
    ``destructive`` in :data:`~dyna.experience.OPERATIONS`) require ``confirm: true``;
    without it they fail and change nothing. A read-only server offers none of
    :data:`WRITE_TOOLS`; a call to one is a tool error.

Files
    ``export_data`` answers inline (the records in the result) unless the server was
    started with ``--export-dir DIR``; then it also accepts ``path``, a plain file name
    (letters, digits, ``.``, ``_``, ``-``; no directories) written inside ``DIR`` and
    nowhere else. ``import_data`` and ``to_dataset``, which read or write arbitrary paths,
    are not offered. No answer or error names a directory of the server's machine: the
    store file and the export directory appear by their base names only.

Errors
    Bad arguments, unknown tools and store errors come back as MCP tool errors
    (``isError: true``) whose text names the field and the value in JSON terms
    (``k=0: must be >= 1``, ``confirm=false: must be true ...``, ``reward=null: is
    required``) and whose structured content is ``{"error": {"type", "field", "value",
    "reason", "message"}, "op"}`` (allowed by every tool's ``outputSchema``); the server
    keeps serving. Unexpected exceptions are logged on stderr and reported the same way
    with ``type`` ``internal``.

Visibility of other writers
    Every tool call sees every episode committed to the store before it started, by any
    process (the store's live view: :class:`dyna.experience.ExperienceStore`); deletes,
    prunes and compactions by others are seen too. No restart is needed.

The SDK (PyPI ``mcp``, the ``mcp`` extra of dyna) is imported only when the server runs;
:class:`ExperienceTools` (the tool table and the call logic) does not need it.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import math
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dyna.errors import (ConfigError, DynaError, MissingFileError, NotAStoreError,
                         StoreBusyError, check_range)

__all__ = ["ENUMS", "EPISODE_REQUIRED", "READ_TOOLS", "WRITE_TOOLS", "ExperienceTools",
           "build_server", "input_schema", "output_schema", "register", "serve_http",
           "serve_stdio"]

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
_FILE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
_FILE_NAME = re.compile(_FILE_NAME_PATTERN)
_FILE_NAME_REASON = ('must be a plain file name (letters, digits, ".", "_", "-"; no '
                     "directories), written inside the server's export directory")
#: Fields every episode needs (:data:`dyna.buffer.REQUIRED_FIELDS` less the tenant).
EPISODE_REQUIRED = ("task_type", "action_type", "outcome", "reward")
#: Message texts show at most this many characters of a value.
_VALUE_CHARS = 120

log = logging.getLogger("dyna.mcp")


# ============================================================================ JSON wording
def _json_value(value):
    """``value`` as plain JSON data (numpy scalars and tuples converted; non-finite floats
    and other objects as strings), for error payloads."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # numpy scalars and arrays
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return repr(value)


def _json_text(value) -> str:
    """``value`` written as JSON (``null``, ``false``, ``"text"``), shortened for a message."""
    text = json.dumps(_json_value(value), ensure_ascii=False)
    return text if len(text) <= _VALUE_CHARS else text[:_VALUE_CHARS - 3] + "..."


def _json_list(values) -> str:
    """``["a", "b"]`` -> ``'"a", "b"'``."""
    return ", ".join(json.dumps(v) for v in values)


def _path_name(path) -> str:
    """``["episodes", 0, "reward"]`` -> ``"episodes[0].reward"``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# ============================================================================ input schemas
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


@functools.cache
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


# ============================================================================ output schemas
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


@functools.cache
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


# ============================================================================ tool table
class ExperienceTools:
    """The MCP tool table and call logic over one store, for one tenant.

    Parameters
    ----------
    store : dyna.experience.ExperienceStore
        The store served (not closed by this object).
    tenant_id : str
        The only tenant whose records any call reads or changes.
    read_only : bool
        Offer only :data:`READ_TOOLS`.
    export_dir : str or Path, optional
        Directory ``export_data`` may write files into (created if missing). Without it
        ``export_data`` answers inline only.

    Raises
    ------
    ConfigError
        An empty or non-string ``tenant_id``; an ``export_dir`` that is not a directory.
    MissingFileError
        An ``export_dir`` that does not exist (it is never created).
    """

    def __init__(self, store, tenant_id: str, *, read_only: bool = False,
                 export_dir=None):
        from jsonschema import Draft202012Validator  # noqa: PLC0415 - a dependency of mcp

        from dyna.experience import OPERATIONS, Operation, Param  # noqa: PLC0415

        if not isinstance(tenant_id, str) or not tenant_id:
            raise ConfigError("tenant", tenant_id, "a non-empty tenant id is required")
        self.store = store
        self.tenant_id = tenant_id
        self.read_only = bool(read_only)
        self.export_dir = None
        if export_dir is not None:
            d = Path(export_dir)
            if d.exists() and not d.is_dir():
                raise ConfigError("export_dir", str(d), "is not a directory")
            if not d.is_dir():   # a mistyped folder must not be created (as root: anywhere)
                raise MissingFileError("export_dir", d, "no such folder")
            self.export_dir = d.resolve()
        self._hidden = self._hidden_paths(store)
        dim = getattr(store, "dim", None)
        confirm = Param("confirm", "boolean", True, description="must be true: this tool "
                        "deletes episodes (or rewrites the file) and cannot be undone")
        names = READ_TOOLS if self.read_only else READ_TOOLS + WRITE_TOOLS
        #: tool name -> (tool-level Operation, library Operation)
        self.specs: dict[str, tuple[Operation, Operation]] = {}
        #: tool name -> input JSON schema
        self.schemas: dict[str, dict] = {}
        for name in names:
            lib = OPERATIONS[name]
            params = [p for p in lib.params if p.name not in SERVER_FIXED]
            if name == "export_data":
                params = self._export_params(params, Param)
            if lib.destructive:
                params.append(confirm)
            note = f" Scoped to tenant {json.dumps(tenant_id)}."
            if lib.destructive:
                note += " Destructive: requires confirm=true."
            tool = Operation(name, lib.description + note, tuple(params), lib.mutates,
                             lib.destructive)
            self.specs[name] = (tool, lib)
            self.schemas[name] = input_schema(name, params, dim=dim, tenant_id=tenant_id)
            props = self.schemas[name]["properties"]
            if lib.destructive:
                props["confirm"]["const"] = True
            if name == "export_data" and "path" in props:
                props["path"]["pattern"] = _FILE_NAME_PATTERN
        self._validators = {n: Draft202012Validator(s) for n, s in self.schemas.items()}
        self._order = {p: i for s in self.schemas.values()
                       for i, p in enumerate(s["properties"])}

    def _export_params(self, params: list, Param) -> list:
        if self.export_dir is None:  # inline only: no file, so no path or format
            return [p for p in params if p.name not in ("path", "format")]
        return [Param("path", "string", description="file name (no directories) written "
                      "inside the server's export directory; omitted: records inline")
                if p.name == "path" else p for p in params]

    @staticmethod
    def _hidden_paths(store) -> dict[str, str]:
        """Spellings of the store file's path -> its base name (never shown to clients)."""
        db = getattr(getattr(store, "_db", None), "path", None)
        if not db:
            return {}
        p = Path(db)
        spellings = {str(p), str(p.resolve()), str(p.absolute())}
        return {s: p.name for s in sorted(spellings, key=len, reverse=True)
                if s and s != p.name}

    def _hide(self, text):
        """``text`` with the store file's path replaced by its base name."""
        if not isinstance(text, str):
            return text
        for path, name in self._hidden.items():
            text = text.replace(path, name)
        return text

    # ------------------------------------------------------------------ listing
    def list_tools(self) -> list[dict]:
        """The tools offered: ``name``, ``description``, ``input_schema``, ``output_schema``,
        ``annotations``.

        ``annotations`` holds the MCP hints ``read_only_hint`` (the operation does not
        change the store or write a file), ``destructive_hint`` and ``open_world_hint``
        (always False: the tools touch only this store).
        """
        out = []
        for name, (tool, lib) in self.specs.items():
            writes_file = name == "export_data" and self.export_dir is not None
            out.append({"name": name, "description": tool.description,
                        "input_schema": self.schemas[name],
                        "output_schema": output_schema(name),
                        "annotations": {"read_only_hint": not lib.mutates and not writes_file,
                                        "destructive_hint": lib.destructive,
                                        "open_world_hint": False}})
        return out

    # ------------------------------------------------------------------ calling
    def call(self, name: str, arguments: Mapping[str, Any] | None) -> tuple[dict, bool]:
        """Run tool ``name``; return ``(structured result, is_error)``. Never raises.

        Errors (bad arguments, unknown tool, store errors) give ``is_error=True`` and
        ``{"error": {"type", "field", "value", "reason", "message"}, "op": name}``, the
        message written in JSON terms (``field=value: reason`` with ``value`` as JSON) and
        without the store file's directory.
        """
        try:
            return self._call(name, arguments), False
        except DynaError as exc:
            return {"error": self._error(exc), "op": name}, True
        except Exception as exc:  # noqa: BLE001 - a tool call must never end the server
            log.exception("tool %r failed unexpectedly", name)
            reason = self._hide(f"{type(exc).__name__}: {exc}")
            return {"error": {"type": "internal", "field": None, "value": None,
                              "reason": reason, "message": f"internal error: {reason}"},
                    "op": name}, True

    def _error(self, exc: DynaError) -> dict:
        """The error payload of a :class:`DynaError`, in JSON terms, paths hidden."""
        field = getattr(exc, "field", None)
        if hasattr(exc, "value"):
            value = _json_value(exc.value)
        elif getattr(exc, "path", None):
            value = Path(exc.path).name
        else:
            value = None
        if isinstance(value, str):
            value = self._hide(value)
        reason = getattr(exc, "reason", None)
        if isinstance(exc, (ConfigError, MissingFileError)) and field is not None:
            reason = self._hide(reason or "no such file")
            message = f"{field}={_json_text(value)}: {reason}"
        else:
            message = self._hide(str(exc))
            reason = self._hide(reason) if reason else message
        err = {"type": type(exc).__name__, "field": field, "value": value,
               "reason": reason, "message": message}
        if isinstance(exc, StoreBusyError):
            err["retryable"] = True
        return err

    def _call(self, name, arguments) -> dict:
        spec = self.specs.get(name) if isinstance(name, str) else None
        if spec is None:
            if self.read_only and name in WRITE_TOOLS:
                raise ConfigError("name", name, "not available: this server is read-only")
            raise ConfigError("name", name, f"unknown tool; one of {_json_list(self.specs)}")
        tool, lib = spec
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise ConfigError("arguments", type(arguments).__name__, "must be an object")
        names = [p.name for p in tool.params]
        for key, value in arguments.items():
            if key in SERVER_FIXED:
                raise ConfigError(key, value, f"not an input: this server serves tenant "
                                  f"{json.dumps(self.tenant_id)} only")
            if key not in names:
                raise ConfigError(key, value, f"unknown parameter of {name}; one of "
                                  f"{_json_list(names)}")
        # null is "omitted" (the earlier schemas declared every optional parameter nullable)
        args = {k: v for k, v in arguments.items() if v is not None}
        if isinstance(args.get("episodes"), list):
            args["episodes"] = [{k: v for k, v in ep.items() if v is not None}
                                if isinstance(ep, Mapping) else ep for ep in args["episodes"]]
        if name == "record" and "episodes" in args:
            both = next((p for p in names if p != "episodes" and p in args), None)
            if both is not None:
                raise ConfigError(both, args[both], "give episodes=[...] or one episode's "
                                  "fields, not both")
        self._check(name, args)
        if lib.destructive:
            args.pop("confirm")
        if name == "export_data" and args.get("path") is not None:
            args["path"] = str(self._confine(args["path"]))
        if any(p.name == "tenant_id" for p in lib.params):
            args["tenant_id"] = self.tenant_id
        out = self.store.dispatch(name, **args)
        return self._public(name, out)

    def _check(self, name: str, args: dict) -> None:
        """Validate ``args`` against the tool's input schema; raise the first error as a
        :class:`ConfigError` worded in JSON terms.

        Errors about given values come before missing fields, each in the order of the
        schema's properties (array items by index).
        """
        errors = list(self._validators[name].iter_errors(args))
        if not errors:
            return
        order = self._order

        def key(err):
            parts = [(0, p, "") if isinstance(p, int) else (1, order.get(p, len(order)), p)
                     for p in err.absolute_path]
            return (err.validator == "required", parts)

        raise self._config_error(name, min(errors, key=key))

    def _config_error(self, name: str, err) -> ConfigError:
        """One jsonschema error -> :class:`ConfigError` (field path, value, JSON wording)."""
        path, kw, arg, inst = list(err.absolute_path), err.validator, err.validator_value, \
            err.instance
        words = {"string": "a string", "number": "a number", "integer": "an integer",
                 "boolean": "a boolean (true or false)", "array": "an array",
                 "object": "an object", "null": "null"}
        if kw == "required":
            missing = next(p for p in arg if p not in inst)
            how = " (destructive: pass confirm=true)" if missing == "confirm" else ""
            where = "in every episode" if path else f"by {name}" + (
                " (or give episodes=[...])" if name == "record" else "")
            return ConfigError(_path_name(path + [missing]), None, f"is required {where}{how}")
        if kw == "additionalProperties":
            extra = next(k for k in inst if k not in err.schema.get("properties", {}))
            known = list(err.schema.get("properties", {}))
            return ConfigError(_path_name(path + [extra]), inst[extra],
                               f"unknown episode field; one of {_json_list(known)}")
        field = _path_name(path) or "arguments"
        if kw == "type":
            types = [arg] if isinstance(arg, str) else list(arg)
            reason = "must be " + " or ".join(words.get(t, t) for t in types)
        elif kw == "enum":
            reason = f"must be one of {_json_list(arg)}"
        elif kw == "const":
            reason = ("must be true to run a destructive tool" if path == ["confirm"] else
                      f"must be {json.dumps(arg)}" + (" (the server's tenant)"
                                                      if path[-1:] == ["tenant_id"] else ""))
        elif kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">",
                  "exclusiveMaximum": "<"}[kw]
            reason = f"must be {op} {arg:g}" if isinstance(arg, float) else f"must be {op} {arg}"
        elif kw in ("minItems", "maxItems"):
            lo = err.schema.get("minItems")
            hi = err.schema.get("maxItems")
            if lo == hi and path[-1:] == ["state_features"]:
                reason = f"must have length dim={lo}"
            elif kw == "minItems":
                reason = f"must have at least {arg} item" + ("s" if arg != 1 else "")
            else:
                reason = f"must have at most {arg} items"
        elif kw == "minLength":
            reason = "must be a non-empty string"
        elif kw == "pattern":
            reason = _FILE_NAME_REASON if path == ["path"] else f"must match {arg}"
        else:  # a keyword this schema does not use today
            reason = f"does not satisfy {kw} {json.dumps(_json_value(arg))}"
        return ConfigError(field, inst, reason)

    def _public(self, name: str, out: dict) -> dict:
        """The store's answer as a client sees it: this tenant only, no server paths."""
        if name == "get_stats" and isinstance(out.get("store"), dict):
            out["store"].pop("rows", None)  # the file's total counts every tenant's records
            if out["store"].get("path"):
                out["store"]["path"] = Path(out["store"]["path"]).name
        if name == "export_data" and out.get("path"):
            out["path"] = Path(out["path"]).name
        if name == "capabilities":
            persistence = out.get("persistence")
            if isinstance(persistence, dict) and persistence.get("path"):
                persistence["path"] = Path(persistence["path"]).name
            out["operations"] = {   # the tools offered, not the library's operations
                n: {"description": t.description, "input_schema": self.schemas[n],
                    "mutates": t.mutates, "destructive": t.destructive}
                for n, (t, _) in self.specs.items()}
            out["server"] = {"tenant_id": self.tenant_id, "read_only": self.read_only,
                             "tools": list(self.specs),
                             "export_dir": None if self.export_dir is None
                             else self.export_dir.name}
        return out

    def _confine(self, path: str) -> Path:
        """The file ``path`` inside the export directory; refuse anything else."""
        if not _FILE_NAME.fullmatch(path):
            raise ConfigError("path", path, _FILE_NAME_REASON)
        target = (self.export_dir / path).resolve()
        if target.parent != self.export_dir:  # e.g. a symlink pointing elsewhere
            raise ConfigError("path", path, "resolves outside the export directory")
        return target


# ============================================================================ the SDK layer
_INSTRUCTIONS = (
    "Experience store of tenant {tenant}: the memory of what this agent did and how it "
    "went. After finishing a task, call record (task_type, action_type, outcome 'success' or "
    "'failure', reward). Before a task, get_competence or should_escalate tell how reliable "
    "you have been on its task type; query_similar and get_recommendation find similar past "
    "episodes and the action type that worked best.{ro}")


def build_server(tools: ExperienceTools):
    """An MCP low-level :class:`mcp.server.lowlevel.Server` serving ``tools``.

    Tool calls run in a worker thread (the store is thread-safe), so a long call does not
    stall the protocol loop.

    Raises
    ------
    ImportError
        The MCP SDK is not installed (``pip install -e '.[mcp]'``).
    """
    import anyio  # noqa: PLC0415
    import mcp.types as types  # noqa: PLC0415
    from mcp.server.lowlevel import Server  # noqa: PLC0415

    from dyna import __version__  # noqa: PLC0415

    listed = [types.Tool(name=t["name"], description=t["description"],
                         input_schema=t["input_schema"], output_schema=t["output_schema"],
                         annotations=types.ToolAnnotations(**t["annotations"]))
              for t in tools.list_tools()]

    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def on_call_tool(ctx, params) -> types.CallToolResult:
        out, is_error = await anyio.to_thread.run_sync(tools.call, params.name,
                                                       params.arguments)
        text = out["error"]["message"] if is_error else json.dumps(out, allow_nan=False)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=out, is_error=is_error)

    ro = " This server is read-only." if tools.read_only else ""
    return Server("dyna", version=__version__,
                  instructions=_INSTRUCTIONS.format(tenant=json.dumps(tools.tenant_id),
                                                    ro=ro),
                  on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_stdio(tools: ExperienceTools) -> None:
    """Serve ``tools`` over the process's stdin/stdout until the client closes stdin."""
    from mcp.server.stdio import stdio_server  # noqa: PLC0415

    server = build_server(tools)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


#: Environment variable with the bearer token of ``dyna mcp --http``.
TOKEN_ENV = "DYNA_MCP_TOKEN"
#: Shortest token accepted (characters).
MIN_TOKEN_CHARS = 16


def read_token(token_file: str | None) -> str:
    """The bearer token: from ``token_file`` (owner-only permissions) or ``$DYNA_MCP_TOKEN``.

    Raises
    ------
    ConfigError
        No token, a token shorter than :data:`MIN_TOKEN_CHARS`, or a file that group or
        others can read (field ``--token-file``; the token itself is never in a message).
    MissingFileError
        ``token_file`` does not exist.
    """
    if token_file is not None:
        path = Path(token_file)
        if not path.is_file():
            raise MissingFileError("--token-file", path)
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise ConfigError("--token-file", str(path), f"mode {mode:04o}: readable by "
                              "others; make it readable by its owner only (chmod 600)")
        token = path.read_text(encoding="utf-8").strip()
        field = "--token-file"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        field = TOKEN_ENV
        if not token:
            raise ConfigError("--http", "no token", f"HTTP needs a bearer token: set "
                              f"{TOKEN_ENV} or pass --token-file PATH (mode 600)")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(field, f"{len(token)} characters",
                          f"the token must have at least {MIN_TOKEN_CHARS} characters")
    return token


def require_token(app, token: str, allowed_origins):
    """ASGI middleware: 401 without ``Authorization: Bearer <token>`` (constant-time
    comparison), 403 for an ``Origin`` header not in ``allowed_origins``."""
    expected = f"Bearer {token}".encode("utf-8")

    async def send_error(send, status: int, text: str):
        body = text.encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain"),
                                (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin")
        if origin is not None and origin.decode("latin-1") not in allowed_origins():
            return await send_error(send, 403, "foreign origin")
        if not hmac.compare_digest(headers.get(b"authorization", b""), expected):
            return await send_error(send, 401, "bearer token required")
        return await app(scope, receive, send)

    return wrapped


async def serve_http(tools: ExperienceTools, port: int, *, token: str, announce=None) -> None:
    """Serve ``tools`` over streamable HTTP at ``http://127.0.0.1:port/mcp`` (loopback only).

    Parameters
    ----------
    port : int
        TCP port; 0 picks a free one.
    token : str
        The bearer token every request must carry (:func:`require_token`).
    announce : callable, optional
        Called with the URL once the socket listens (default: print it on stderr).
    """
    import anyio  # noqa: PLC0415
    import uvicorn  # noqa: PLC0415 - a dependency of mcp

    host = "127.0.0.1"
    bound: list[int] = []

    def origins():
        return {f"http://{h}:{p}" for h in (host, "localhost") for p in bound}

    app = require_token(build_server(tools).streamable_http_app(host=host), token, origins)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           lifespan="on"))
    if announce is None:
        def announce(url):
            print(f"dyna mcp: tenant {tools.tenant_id!r} on {url}", file=sys.stderr,
                  flush=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.02)
        real = server.servers[0].sockets[0].getsockname()[1]
        bound.append(real)
        announce(f"http://{host}:{real}/mcp")


# ============================================================================ CLI
def _open_store(db: str, dim: int | None, read_only: bool):
    from dyna.experience import ExperienceStore  # noqa: PLC0415
    from dyna.store import postgres  # noqa: PLC0415
    from dyna.store.sqlite import stored_dim  # noqa: PLC0415

    if postgres.is_dsn(db):  # a PostgreSQL store: never shown with its password
        have = postgres.stored_dim(db)
        if have is None and read_only:
            raise MissingFileError("db", postgres.display_dsn(db), "no dyna store there")
        if have is not None and dim is not None and dim != have:
            raise ConfigError("dim", dim, f"the store at {postgres.display_dsn(db)} has "
                              f"dim {have}")
        return ExperienceStore(db, dim=have or dim or 64, read_only=read_only)
    path = Path(db)
    if path.is_file() and path.stat().st_size:
        have = stored_dim(path)
        if have is None:
            raise NotAStoreError(path, "no dim in a meta table", field="db")
        if dim is not None and dim != have:
            raise ConfigError("dim", dim, f"the store at {str(path)!r} has dim {have}")
        dim = have
    elif read_only:
        raise MissingFileError("db", path)  # a read-only server never creates a store
    elif not path.parent.is_dir():
        # a mistyped path must not silently give an agent a new, empty store
        raise MissingFileError("db", path.parent)
    return ExperienceStore(path, dim=64 if dim is None else dim, read_only=read_only)


def _run(args) -> int:
    if args.http is not None:
        check_range("http", args.http, 0, 65535, integer=True)
    if args.dim is not None:
        check_range("dim", args.dim, 1, None, integer=True)
    if not args.tenant:
        raise ConfigError("tenant", args.tenant, "a non-empty tenant id is required")
    try:
        import anyio  # noqa: PLC0415
        import mcp  # noqa: F401, PLC0415
    except ImportError:
        raise ConfigError("dyna mcp", "mcp", "the MCP SDK is not installed; from the repository: "
                          "pip install -e '.[mcp]'") from None
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    token = read_token(args.token_file) if args.http is not None else None
    if args.http is None and args.token_file is not None:
        raise ConfigError("--token-file", args.token_file, "only with --http")
    store = _open_store(args.db, args.dim, args.read_only)
    try:
        tools = ExperienceTools(store, args.tenant, read_only=args.read_only,
                                export_dir=args.export_dir)
        if args.http is None:
            anyio.run(serve_stdio, tools)
        else:
            anyio.run(functools.partial(serve_http, tools, args.http, token=token))
    finally:
        store.close()
    return 0


def register(sub) -> None:
    """Add ``dyna mcp`` to the top-level sub-parsers ``sub``."""
    p = sub.add_parser("mcp", help="serve an experience store to agents over the Model "
                       "Context Protocol (stdio, or streamable HTTP on 127.0.0.1)",
                       description="Serve an experience store to agents over the Model "
                       "Context Protocol (stdio, or streamable HTTP on 127.0.0.1). Needs "
                       "the MCP SDK, the mcp extra: pip install -e '.[mcp]'.")
    p.add_argument("--db", required=True, help="SQLite experience store file, or a "
                   "postgresql:// DSN (created unless --read-only; a DSN's password belongs "
                   "in PGPASSWORD or ~/.pgpass, not on the command line, where ps shows it)")
    p.add_argument("--tenant", default="default", help="the one tenant served "
                   "(default: %(default)s)")
    p.add_argument("--read-only", dest="read_only", action="store_true",
                   help="offer only the tools that read")
    p.add_argument("--http", type=int, default=None, metavar="PORT",
                   help="serve streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio "
                   "(0: a free port, printed on stderr)")
    p.add_argument("--dim", type=int, default=None, help="feature dimension of a new "
                   "store (default 64; an existing store's is read from the file)")
    p.add_argument("--token-file", dest="token_file", default=None, metavar="PATH",
                   help=f"with --http: file (mode 600) holding the bearer token clients "
                   f"must send (default: the {TOKEN_ENV} environment variable)")
    p.add_argument("--export-dir", dest="export_dir", default=None, metavar="DIR",
                   help="existing directory export_data may write files into (default: "
                   "inline exports only)")
    p.set_defaults(func=_run)
