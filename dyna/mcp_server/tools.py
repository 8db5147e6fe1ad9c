"""The MCP tool table and call logic over one experience store, for one tenant.

:class:`ExperienceTools` turns the store's operations into tools (schemas from
:mod:`dyna.mcp_server.schemas`), checks every call's arguments against its tool's schema,
runs it with the server's tenant and hides the server's paths in every answer and error. It
does not need the MCP SDK; :mod:`dyna.mcp_server.transport` serves it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dyna.errors import ConfigError, DynaError, MissingFileError, StoreBusyError
from dyna.fileio.paths import resolve_in_folder
from dyna.mcp_server.results import output_schema
from dyna.mcp_server.schemas import (EPISODE_REQUIRED, FILE_NAME_PATTERN, FILE_NAME_REASON,
                                     READ_TOOLS, RECORD_RULE, SERVER_FIXED, WRITE_TOOLS,
                                     input_schema)
from dyna.mcp_server.wording import (json_list, json_text, json_value, missing_error,
                                     schema_error, unknown_error)

__all__ = ["ExperienceTools"]

#: A file name ``export_data`` may write inside the export directory.
FILE_NAME = re.compile(FILE_NAME_PATTERN)

log = logging.getLogger("dyna.mcp")

#: The list of episodes in a tool's answer, by tool (``query_similar``'s hold theirs under
#: ``episode`` in each result).
EPISODE_LISTS = {"query_similar": "results", "replay_experience": "episodes",
                 "export_data": "records"}


def episodes_in(name: str, out: dict) -> list[tuple[str, dict]]:
    """The episodes in tool ``name``'s answer ``out``, each with its JSON path
    (``results[0].episode``, ``episodes[0]``, ``records[0]``); [] for a tool that answers
    with none."""
    key = EPISODE_LISTS.get(name)
    items = out.get(key) or () if key else ()
    if name == "query_similar":
        return [(f"{key}[{i}].episode", r["episode"]) for i, r in enumerate(items)]
    return [(f"{key}[{i}]", ep) for i, ep in enumerate(items)]


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
        from dyna.experience.episodes import check_tenant  # noqa: PLC0415

        check_tenant(tenant_id, "tenant")   # NFKC, matched byte for byte, never folded
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
            if name == "record":
                note = f" {RECORD_RULE}{note}"
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
                props["path"]["pattern"] = FILE_NAME_PATTERN
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
            value = json_value(exc.value)
        elif getattr(exc, "path", None):
            value = Path(exc.path).name
        else:
            value = None
        if isinstance(value, str):
            value = self._hide(value)
        reason = getattr(exc, "reason", None)
        if isinstance(exc, (ConfigError, MissingFileError)) and field is not None:
            reason = self._hide(reason or "no such file")
            message = f"{field}={json_text(value)}: {reason}"
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
            raise ConfigError("name", name, f"unknown tool; one of {json_list(self.specs)}")
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
                raise unknown_error(key, value, f"parameter of {name}", names)
        # null is "omitted": a client may send it for any optional parameter
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
        if name == "record" and "episodes" not in args:   # RECORD_RULE
            missing = [f for f in EPISODE_REQUIRED if f not in args]
            if missing:
                raise missing_error(name, missing)
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

        raise schema_error(name, min(errors, key=key))

    def _public(self, name: str, out: dict) -> dict:
        """The store's answer as a client sees it: this tenant only, no server paths, an
        episode's ``timestamp`` and ``prune_old``'s ``cutoff`` as ISO 8601 text in UTC
        (:func:`dyna.experience.times.iso_utc`)."""
        # imported here: dyna.experience and dyna.store load the buffer and its compiled
        # kernels, and `dyna --help` imports this module without serving anything
        from dyna.experience.times import iso_utc
        from dyna.store.columns import time_in_range

        for where, episode in episodes_in(name, out):
            episode["timestamp"] = iso_utc(episode["timestamp"], f"{where}.timestamp")
        if name == "prune_old":   # now - max_age_seconds: any finite number of seconds
            cutoff = out["cutoff"]
            out["cutoff"] = iso_utc(cutoff, "cutoff") if time_in_range(cutoff) else None
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
        if not FILE_NAME.fullmatch(path):
            raise ConfigError("path", path, FILE_NAME_REASON)
        return resolve_in_folder(self.export_dir, path, "the export directory")
