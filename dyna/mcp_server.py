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
    JSON schema is generated from the operation's declaration in
    :data:`dyna.experience.OPERATIONS` (the same table :meth:`ExperienceStore.dispatch`
    checks arguments against), with the server-fixed parameters removed and ``confirm``
    added to destructive tools. Results come back as structured content (the JSON answer of
    :meth:`ExperienceStore.dispatch`, with ``op`` and ``persistence_status``) and, for
    clients that read only text, the same JSON as one text block.

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
    are not offered.

Errors
    Bad arguments, unknown tools and store errors come back as MCP tool errors
    (``isError: true``) whose text names the field and the value (``k=0: must be >= 1``)
    and whose structured content is ``{"error": {"type", "field", "value", "reason",
    "message"}, "op"}``; the server keeps serving. Unexpected exceptions are logged on
    stderr and reported the same way with ``type`` ``internal``.

Visibility of other writers
    The store keeps an in-memory view loaded at start; episodes written to the same file by
    other processes after that become visible when the server is restarted.

The SDK (PyPI ``mcp``, the ``mcp`` extra of dyna) is imported only when the server runs;
:class:`ExperienceTools` (the tool table and the call logic) does not need it.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dyna.errors import (ConfigError, DynaError, MissingFileError, NotAStoreError,
                         StoreBusyError, check_range)

__all__ = ["READ_TOOLS", "WRITE_TOOLS", "ExperienceTools", "build_server", "register",
           "serve_http", "serve_stdio"]

#: Tools every server offers (they never change the store or write files).
READ_TOOLS = ("capabilities", "get_stats", "get_competence", "get_recommendation",
              "query_similar", "should_escalate", "list_task_types", "get_transition_table",
              "get_data_consumption")
#: Tools a read-only server leaves out.
WRITE_TOOLS = ("record", "replay_experience", "prune_old", "compact", "export_data",
               "delete_data", "reset")
#: Operation parameters the server fixes itself; never tool inputs.
SERVER_FIXED = ("tenant_id", "all_tenants")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

log = logging.getLogger("dyna.mcp")


def _jsonable(value):
    """``value`` if it is JSON-serialisable, else its repr (for error payloads)."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _path_name(path) -> str:
    """``["episodes", 0, "reward"]`` -> ``"episodes[0].reward"``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


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
            d.mkdir(parents=True, exist_ok=True)
            self.export_dir = d.resolve()
        confirm = Param("confirm", "boolean", True, description="must be true: this tool "
                        "deletes episodes (or rewrites the file) and cannot be undone")
        names = READ_TOOLS if self.read_only else READ_TOOLS + WRITE_TOOLS
        #: tool name -> (tool-level Operation, library Operation)
        self.specs: dict[str, tuple[Operation, Operation]] = {}
        for name in names:
            lib = OPERATIONS[name]
            params = [p for p in lib.params if p.name not in SERVER_FIXED]
            if name == "export_data":
                params = self._export_params(params, Param)
            if lib.destructive:
                params.append(confirm)
            note = f" Scoped to tenant {tenant_id!r}."
            if lib.destructive:
                note += " Destructive: requires confirm=true."
            tool = Operation(name, lib.description + note, tuple(params), lib.mutates,
                             lib.destructive)
            self.specs[name] = (tool, lib)
        self._validators = {n: Draft202012Validator(t.json_schema())
                            for n, (t, _) in self.specs.items()}

    def _export_params(self, params: list, Param) -> list:
        if self.export_dir is None:  # inline only: no file, so no path or format
            return [p for p in params if p.name not in ("path", "format")]
        return [Param("path", "string", description="file name (no directories) written "
                      "inside the server's export directory; omitted: records inline")
                if p.name == "path" else p for p in params]

    # ------------------------------------------------------------------ listing
    def list_tools(self) -> list[dict]:
        """The tools offered: ``name``, ``description``, ``input_schema``, ``annotations``.

        ``annotations`` holds the MCP hints ``read_only_hint`` (the operation does not
        change the store or write a file), ``destructive_hint`` and ``open_world_hint``
        (always False: the tools touch only this store).
        """
        out = []
        for name, (tool, lib) in self.specs.items():
            writes_file = name == "export_data" and self.export_dir is not None
            out.append({"name": name, "description": tool.description,
                        "input_schema": tool.json_schema(),
                        "annotations": {"read_only_hint": not lib.mutates and not writes_file,
                                        "destructive_hint": lib.destructive,
                                        "open_world_hint": False}})
        return out

    # ------------------------------------------------------------------ calling
    def call(self, name: str, arguments: Mapping[str, Any] | None) -> tuple[dict, bool]:
        """Run tool ``name``; return ``(structured result, is_error)``. Never raises.

        Errors (bad arguments, unknown tool, store errors) give ``is_error=True`` and
        ``{"error": {"type", "field", "value", "reason", "message"}, "op": name}``.
        """
        try:
            return self._call(name, arguments), False
        except DynaError as exc:
            err = {"type": type(exc).__name__, "field": getattr(exc, "field", None),
                   "value": _jsonable(getattr(exc, "value", None)),
                   "reason": getattr(exc, "reason", str(exc)), "message": str(exc)}
            if isinstance(exc, StoreBusyError):
                err["retryable"] = True
            return {"error": err, "op": name}, True
        except Exception as exc:  # noqa: BLE001 - a tool call must never end the server
            log.exception("tool %r failed unexpectedly", name)
            return {"error": {"type": "internal", "field": None, "value": None,
                              "reason": f"{type(exc).__name__}: {exc}",
                              "message": f"internal error: {type(exc).__name__}: {exc}"},
                    "op": name}, True

    def _call(self, name, arguments) -> dict:
        spec = self.specs.get(name) if isinstance(name, str) else None
        if spec is None:
            if self.read_only and name in WRITE_TOOLS:
                raise ConfigError("name", name, "not available: this server is read-only")
            raise ConfigError("name", name, f"unknown tool; one of {sorted(self.specs)}")
        tool, lib = spec
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise ConfigError("arguments", type(arguments).__name__, "must be an object")
        args = dict(arguments)
        names = {p.name for p in tool.params}
        for key, value in args.items():
            if key in SERVER_FIXED:
                raise ConfigError(key, value, f"not an input: this server serves tenant "
                                  f"{self.tenant_id!r} only")
            if key not in names:
                raise ConfigError(key, value, f"unknown parameter of {name}; one of "
                                  f"{sorted(names)}")
        for p in tool.params:
            if p.required and args.get(p.name) is None:
                how = " (destructive: pass confirm=true)" if p.name == "confirm" else ""
                raise ConfigError(p.name, None, f"is required by {name}{how}")
        from jsonschema.exceptions import best_match  # noqa: PLC0415

        err = best_match(self._validators[name].iter_errors(args))
        if err is not None:
            if err.validator == "type":
                types = err.validator_value
                types = [types] if isinstance(types, str) else list(types)
                reason = "must be " + " or ".join(types)
            else:
                reason = err.message
            raise ConfigError(_path_name(err.absolute_path) or "arguments", err.instance, reason)
        if lib.destructive and args.pop("confirm") is not True:
            raise ConfigError("confirm", arguments.get("confirm"),
                              "must be true to run a destructive tool")
        if name == "export_data" and args.get("path") is not None:
            args["path"] = str(self._confine(args["path"]))
        if any(p.name == "tenant_id" for p in lib.params):
            args["tenant_id"] = self.tenant_id
        out = self.store.dispatch(name, **args)
        if name == "get_stats" and isinstance(out.get("store"), dict):
            out["store"].pop("rows", None)  # the file's total counts every tenant's records
        if name == "capabilities":
            out["server"] = {"tenant_id": self.tenant_id, "read_only": self.read_only,
                             "tools": list(self.specs),
                             "export_dir": None if self.export_dir is None
                             else str(self.export_dir)}
        return out

    def _confine(self, path: str) -> Path:
        """The file ``path`` inside the export directory; refuse anything else."""
        if not _FILE_NAME.fullmatch(path):
            raise ConfigError("path", path, "must be a plain file name (letters, digits, "
                              "'.', '_', '-'; no directories), written inside the server's "
                              "export directory")
        target = (self.export_dir / path).resolve()
        if target.parent != self.export_dir:  # e.g. a symlink pointing elsewhere
            raise ConfigError("path", path, "resolves outside the export directory")
        return target


# ============================================================================ the SDK layer
_INSTRUCTIONS = (
    "Experience store of tenant {tenant!r}: the memory of what this agent did and how it "
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
                         input_schema=t["input_schema"],
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
                  instructions=_INSTRUCTIONS.format(tenant=tools.tenant_id, ro=ro),
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
    from dyna.store.sqlite import stored_dim  # noqa: PLC0415

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
                       "Context Protocol (stdio, or streamable HTTP on 127.0.0.1)")
    p.add_argument("--db", required=True, help="SQLite experience store (created unless "
                   "--read-only)")
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
    p.add_argument("--export-dir", dest="export_dir", default=None, help="directory "
                   "export_data may write files into (default: inline exports only)")
    p.set_defaults(func=_run)
