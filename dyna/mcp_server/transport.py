"""Serving the MCP tools: the SDK's low-level server over stdio or loopback HTTP.

The SDK (PyPI ``mcp``, the ``mcp`` extra of dyna) is imported only here, when the server
runs. HTTP requires a bearer token (:func:`read_token`, :func:`require_token`); see
:mod:`dyna.mcp_server` for what is promised.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path

from dyna.errors import ConfigError, MissingFileError
from dyna.mcp_server.tools import ExperienceTools

__all__ = ["MCP_PATH", "MIN_TOKEN_CHARS", "NO_OAUTH_REASON", "REALM", "SHUTDOWN_GRACE_S",
           "STATIC_TOKEN_REASON", "TOKEN_ENV", "AnsweringReader", "build_server", "error_answer",
           "handing_back_signals", "read_token", "request_id", "require_token", "serve_http",
           "serve_stdio"]

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
        await server.run(AnsweringReader(read, write), write,
                         server.create_initialization_options())


#: One JSON token: a string, a bracket or separator, or a bare literal (number, true, ...).
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')


def request_id(line: str) -> int | str | None:
    """The top-level ``"id"`` of a JSON-RPC line that could not be parsed whole (nested too
    deeply, say): found by a flat scan of its tokens, without recursion. None when there
    is none, or it is not an integer or a string."""
    depth, last = 0, ("", "")
    for m in _TOKEN.finditer(line):
        tok = m.group()
        if depth == 1 and last == ('"id"', ":"):
            try:
                value = json.loads(tok)
            except ValueError:
                return None
            return value if type(value) in (int, str) else None
        if tok in ("{", "["):
            depth += 1
        elif tok in ("}", "]"):
            depth -= 1
        last = (last[1], tok)
    return None


def error_answer(exc: Exception):
    """The JSON-RPC error answering a line the SDK could not read as a message (``exc``,
    what its stdio transport yields): ``-32700`` (parse error: not JSON, or nested past
    the parser's depth limit) or ``-32600`` (invalid request), with the request's id when
    :func:`request_id` finds it, else ``null`` as JSON-RPC 2.0 asks. The message names the
    problem and where, never the line's content.

    Returns
    -------
    mcp_types.JSONRPCError
    """
    import mcp_types as types  # noqa: PLC0415

    errors = exc.errors() if callable(getattr(exc, "errors", None)) else []
    first = errors[0] if errors else {}
    line = first.get("input")
    parse = first.get("type") == "json_invalid"
    why = first.get("msg") or type(exc).__name__
    if "recursion limit" in why:
        why += " (request nested too deeply)"
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id(line) if isinstance(line, str) else None,
        error=types.ErrorData(code=types.PARSE_ERROR if parse else types.INVALID_REQUEST,
                              message=("Parse error: " if parse else "Invalid request: ") + why))


class AnsweringReader:
    """The stdio server's read stream, answering every line the SDK could not read as a
    JSON-RPC message (:func:`error_answer`) instead of dropping it silently; messages pass
    through unchanged."""

    def __init__(self, read, write):
        self._read = read
        self._write = write

    def __getattr__(self, name):
        return getattr(self._read, name)   # close, aclose, last_context, ...

    def __aiter__(self):
        return self

    async def __anext__(self):
        from mcp.shared.message import SessionMessage  # noqa: PLC0415

        while True:
            item = await self._read.__anext__()
            if not isinstance(item, Exception):
                return item
            await self._write.send(SessionMessage(error_answer(item)))

    async def receive(self):
        """The next message (lines that are not one are answered and skipped)."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            import anyio  # noqa: PLC0415
            raise anyio.EndOfStream from None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        await self._read.aclose()


#: Environment variable with the bearer token of ``dyna mcp --http``.
TOKEN_ENV = "DYNA_MCP_TOKEN"
#: Shortest token accepted (characters).
MIN_TOKEN_CHARS = 16
#: Seconds the HTTP server gives open requests to finish after SIGINT or SIGTERM.
SHUTDOWN_GRACE_S = 5


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


#: Realm of the bearer challenge (RFC 6750) of ``dyna mcp --http``.
REALM = "dyna"
#: Why a request without the right ``Authorization`` header is refused: said in the 401's
#: ``WWW-Authenticate`` challenge (``error_description``) and its body, so that a client
#: asks its user for the token instead of starting an OAuth flow (no ``resource_metadata``
#: is given, and the OAuth discovery documents answer 404).
STATIC_TOKEN_REASON = ("a static bearer token is expected: send Authorization: Bearer "
                       "<token>, the token this server was started with (" + TOKEN_ENV
                       + " or --token-file); this server has no OAuth authorization server")
#: Answer (404) to a request for any path but :data:`MCP_PATH`: the OAuth discovery
#: documents (``/.well-known/...``) and an authorization server's default endpoints
#: (``/register``, ``/authorize``, ``/token``), which a client may try after the 401.
NO_OAUTH_REASON = "no such path, and no OAuth here: " + STATIC_TOKEN_REASON
#: The path of the MCP endpoint.
MCP_PATH = "/mcp"


def require_token(app, token: str, allowed_origins):
    """ASGI middleware: 401 without ``Authorization: Bearer <token>`` (constant-time
    comparison), 403 for an ``Origin`` header not in ``allowed_origins``, 404 for any path
    but :data:`MCP_PATH` (no token needed: it tells a client there is no OAuth).

    The 401 follows RFC 6750 section 3 and the MCP SDK's own bearer middleware:
    ``WWW-Authenticate: Bearer realm="dyna", error="invalid_token",
    error_description="<STATIC_TOKEN_REASON>"`` and the JSON body ``{"error":
    "invalid_token", "error_description": ...}``. It names no ``resource_metadata``: the MCP
    authorization spec has a client look for OAuth metadata there (or at the well-known
    URIs, which answer 404 as every path but ``/mcp`` does), and this server has none.
    """
    expected = f"Bearer {token}".encode("utf-8")
    challenge = (f'Bearer realm="{REALM}", error="invalid_token", '
                 f'error_description="{STATIC_TOKEN_REASON}"').encode("ascii")

    async def send_error(send, status: int, body: dict, headers=()):
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode()), *headers]})
        await send({"type": "http.response.body", "body": data})

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin")
        if origin is not None and origin.decode("latin-1") not in allowed_origins():
            return await send_error(send, 403, {"error": "forbidden",
                                                "error_description": "foreign origin"})
        if scope.get("path", "").rstrip("/") != MCP_PATH:
            return await send_error(send, 404, {"error": "not_found",
                                                "error_description": NO_OAUTH_REASON})
        if not hmac.compare_digest(headers.get(b"authorization", b""), expected):
            return await send_error(send, 401, {"error": "invalid_token",
                                                "error_description": STATIC_TOKEN_REASON},
                                    [(b"www-authenticate", challenge)])
        return await app(scope, receive, send)

    return wrapped


@contextlib.contextmanager
def handing_back_signals(server, caught: list):
    """Stand-in for uvicorn's ``Server.capture_signals``: SIGINT and SIGTERM start its
    graceful shutdown and are appended to ``caught``, and are not re-raised when serving
    ends (uvicorn re-raises them inside the event loop, where dyna's SIGTERM handler would
    end the task group with a traceback). The caller re-raises them after the loop.
    Outside the main thread (no signals there) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(sig, frame):
        caught.append(sig)
        # uvicorn's own handler (a second Ctrl-C forces the exit), as patched by
        # sse_starlette, which then ends the open event streams
        server.handle_exit(sig, frame)

    originals = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in originals.items():
            signal.signal(sig, handler)


async def serve_http(tools: ExperienceTools, port: int, *, token: str,
                     announce=None) -> tuple[int, ...]:
    """Serve ``tools`` over streamable HTTP at ``http://127.0.0.1:port/mcp`` (loopback only)
    until SIGINT or SIGTERM.

    Parameters
    ----------
    port : int
        TCP port; 0 picks a free one.
    token : str
        The bearer token every request must carry (:func:`require_token`).
    announce : callable, optional
        Called with the URL once the socket listens (default: print it on stderr).

    Returns
    -------
    tuple of int
        The signals that stopped the server, in arrival order (empty if none did): the
        server shuts down gracefully (open requests get :data:`SHUTDOWN_GRACE_S` seconds)
        and leaves re-raising them to the caller, outside the event loop
        (:func:`handing_back_signals`).
    """
    import anyio  # noqa: PLC0415
    import uvicorn  # noqa: PLC0415 - a dependency of mcp

    host = "127.0.0.1"
    bound: list[int] = []

    def origins():
        return {f"http://{h}:{p}" for h in (host, "localhost") for p in bound}

    app = require_token(build_server(tools).streamable_http_app(
        host=host, streamable_http_path=MCP_PATH), token, origins)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           lifespan="on",
                                           timeout_graceful_shutdown=SHUTDOWN_GRACE_S))
    caught: list[int] = []
    server.capture_signals = functools.partial(handing_back_signals, server, caught)
    if announce is None:
        def announce(url):
            print(f"dyna mcp: tenant {tools.tenant_id!r} on {url}", file=sys.stderr,
                  flush=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        while not server.started:
            if server.should_exit:
                return tuple(caught)
            await anyio.sleep(0.02)
        real = server.servers[0].sockets[0].getsockname()[1]
        bound.append(real)
        announce(f"http://{host}:{real}{MCP_PATH}")
    return tuple(caught)
