"""The ``dyna mcp`` command: open the store, build the tools, serve them."""

from __future__ import annotations

import functools
import logging
import signal
import sys
from pathlib import Path

from dyna.errors import ConfigError, MissingFileError, NotAStoreError, check_range
from dyna.mcp_server.tools import ExperienceTools
from dyna.mcp_server.transport import TOKEN_ENV, read_token, serve_http, serve_stdio

__all__ = ["register"]


def _open_store(db: str, dim: int | None, read_only: bool, create: bool = False):
    """The store ``db`` for the server: an existing store, or a new one in a missing file of
    an existing folder (never with ``read_only``); an empty file (0 bytes) only with
    ``create`` (:class:`dyna.store.sqlite_file.EmptyStoreFileError` otherwise).

    Raises
    ------
    MissingFileError, NotAStoreError, ConfigError
        A missing file for a reader or a missing folder; a file that is not a store; a
        ``dim`` other than the store's.
    """
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
    return ExperienceStore(path, dim=64 if dim is None else dim, read_only=read_only,
                           create=create)


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
    if args.create and args.read_only:
        raise ConfigError("--create", True, "not with --read-only (a read-only server never "
                          "creates a store)")
    store = _open_store(args.db, args.dim, args.read_only, args.create)
    try:
        tools = ExperienceTools(store, args.tenant, read_only=args.read_only,
                                export_dir=args.export_dir)
        if args.http is None:
            anyio.run(serve_stdio, tools)
        else:
            caught = anyio.run(functools.partial(serve_http, tools, args.http, token=token))
            if caught:  # stopped by a signal: end as dyna does for it (one line, 143 or 130)
                signal.raise_signal(caught[0])
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
    p.add_argument("--create", action="store_true", help="make a new store in an existing "
                   "empty file (0 bytes); without it such a file is refused as 'empty file, "
                   "not a store' (a missing file in an existing folder is created either way)")
    p.add_argument("--dim", type=int, default=None, help="feature dimension of a new "
                   "store (default 64; an existing store's is read from the file)")
    p.add_argument("--token-file", dest="token_file", default=None, metavar="PATH",
                   help=f"with --http: file (mode 600) holding the bearer token clients "
                   f"must send (default: the {TOKEN_ENV} environment variable)")
    p.add_argument("--export-dir", dest="export_dir", default=None, metavar="DIR",
                   help="existing directory export_data may write files into (default: "
                   "inline exports only)")
    p.set_defaults(func=_run)
