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

from dyna.mcp_server.command import register
from dyna.mcp_server.schemas import (ENUMS, EPISODE_REQUIRED, READ_TOOLS, SERVER_FIXED,
                                     WRITE_TOOLS, input_schema, output_schema)
from dyna.mcp_server.tools import ExperienceTools
from dyna.mcp_server.transport import (MIN_TOKEN_CHARS, TOKEN_ENV, build_server, read_token,
                                       require_token, serve_http, serve_stdio)

__all__ = ["ENUMS", "EPISODE_REQUIRED", "MIN_TOKEN_CHARS", "READ_TOOLS", "SERVER_FIXED",
           "TOKEN_ENV", "WRITE_TOOLS", "ExperienceTools", "build_server", "input_schema",
           "output_schema", "read_token", "register", "require_token", "serve_http",
           "serve_stdio"]
