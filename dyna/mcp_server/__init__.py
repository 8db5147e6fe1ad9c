"""A Model Context Protocol server over the experience store: ``dyna mcp``.

Agents that people already run (coding agents, assistants) reach tools over the Model
Context Protocol (MCP). ``dyna mcp`` exposes the experience loop of one
:class:`dyna.experience.ExperienceStore` as MCP tools, so such an agent can record its
outcomes and ask for its competence, similar past episodes and escalation decisions while
it works::

    dyna mcp --db PATH [--tenant T] [--read-only] [--http PORT [--token-file F]] [--dim D]
             [--export-dir DIR]

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
    refuses to start. A request without the token gets 401 with ``WWW-Authenticate: Bearer
    realm="dyna", error="invalid_token", error_description="a static bearer token is
    expected ..."`` (:data:`STATIC_TOKEN_REASON`) and no ``resource_metadata``; every path
    but ``/mcp``, the OAuth discovery documents included, answers 404 without a token. So a
    client that would look for an OAuth authorization server (the MCP authorization spec)
    finds none and is told to send the static token instead.

    SIGTERM or Ctrl-C stop the HTTP server gracefully (connected clients' event streams are
    ended, open requests get :data:`~dyna.mcp_server.transport.SHUTDOWN_GRACE_S` seconds),
    the store is closed, and the command ends as every dyna command does after a signal:
    one line ``dyna: terminated (SIGTERM)`` on stderr and exit status 143 (130 after
    Ctrl-C), no traceback. Over stdio the server ends when the client closes its stdin (the
    SDK reads stdin in a thread that a signal cannot interrupt, so a SIGTERM before that
    takes effect then, with the same line and status).

Tools
    One tool per experience-loop operation, named as the operation:
    :data:`READ_TOOLS` always, :data:`WRITE_TOOLS` unless ``--read-only``. Each tool's input
    schema (JSON Schema 2020-12) is built from the operation's declaration in
    :data:`dyna.experience.OPERATIONS` (the table :meth:`ExperienceStore.dispatch` checks
    arguments against), with the server-fixed parameters removed and ``confirm`` added to
    destructive tools, and written for clients that read schemas literally (MCP Inspector
    0.15 reads a property's ``type`` and nothing else) or translate them to a smaller
    dialect (the OpenAPI subset of Gemini function declarations; model APIs that refuse a
    top-level ``anyOf``):

    * no conditional or combining keyword (``if``/``then``/``else``, ``allOf``, ``anyOf``,
      ``oneOf``, ``not``) anywhere;
    * every property has one plain ``type`` (no type arrays such as ``["number", "null"]``)
      and a ``description``; an optional parameter is simply not in ``required``, and an
      explicit ``null`` is read as "omitted";
    * enumerated parameters list their values (:data:`ENUMS`), bounded ones their range
      (``k`` 1..:data:`~dyna.experience.MAX_K`, ``level`` in the open interval (0, 1), ...),
      ``state_features`` its length (the store's ``dim``);
    * ``record`` takes one episode as fields or a batch as ``episodes``, by
      :data:`RECORD_RULE`: either ``episodes`` or one episode's fields, not both, and
      without ``episodes`` the fields ``task_type``, ``action_type``, ``outcome`` and
      ``reward`` are required. The episodes' items list them in ``required``; for the fields
      themselves the schema requires nothing (saying "required unless" needs a conditional)
      and the rule is written in the descriptions of ``record`` and of its fields, and
      checked by the server: a call that breaks it is a tool error naming the fields.

    Every tool also has an ``outputSchema`` (:func:`output_schema`) and every result carries
    ``structuredContent`` matching it (MCP 2025-06-18): the JSON answer of
    :meth:`ExperienceStore.dispatch` with ``op`` and ``persistence_status``, and, for
    clients that read only text, the same JSON as one text block. Output schemas keep the
    same rules, with one exception: a property that may be ``null`` (or hold any JSON value)
    is an ``anyOf`` of branches that each have one plain ``type``, the spelling the MCP
    Inspector's portability check recommends. Results and error results share one schema,
    whose ``description`` names the fields a result always has (:func:`result_fields`).

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
    keeps serving. A call that leaves out required parameters names all of them
    (``max_age_seconds=null: is required by prune_old; missing: max_age_seconds, confirm
    ...``); an unknown parameter is named with the tool's parameters, or "it takes no
    parameters". Unexpected exceptions are logged on stderr and reported the same way
    with ``type`` ``internal``.

Visibility of other writers
    Every tool call sees every episode committed to the store before it started, by any
    process (the store's live view: :class:`dyna.experience.ExperienceStore`); deletes,
    prunes and compactions by others are seen too. No restart is needed.

The SDK (PyPI ``mcp``, the ``mcp`` extra of dyna) is imported only when the server runs;
:class:`ExperienceTools` (the tool table and the call logic) does not need it.
"""

from dyna.mcp_server.command import register
from dyna.mcp_server.results import output_schema, result_fields
from dyna.mcp_server.schemas import (ENUMS, EPISODE_REQUIRED, READ_TOOLS, RECORD_RULE,
                                     SERVER_FIXED, WRITE_TOOLS, input_schema)
from dyna.mcp_server.tools import ExperienceTools
from dyna.mcp_server.transport import (MIN_TOKEN_CHARS, STATIC_TOKEN_REASON, TOKEN_ENV,
                                       build_server, read_token, require_token, serve_http,
                                       serve_stdio)

__all__ = ["ENUMS", "EPISODE_REQUIRED", "MIN_TOKEN_CHARS", "READ_TOOLS", "RECORD_RULE",
           "SERVER_FIXED", "STATIC_TOKEN_REASON", "TOKEN_ENV", "WRITE_TOOLS", "ExperienceTools",
           "build_server", "input_schema", "output_schema", "read_token", "register",
           "require_token", "result_fields", "serve_http", "serve_stdio"]
