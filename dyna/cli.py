"""The ``dyna`` command line.

Sub-commands are contributed by the layers that own them; each module listed in
``_COMMAND_MODULES`` exposes ``register(subparsers)`` which adds its parsers and sets
``func`` on them. ``func(args) -> int`` returns the exit status.

Any :class:`dyna.errors.DynaError` (bad input) is printed as one line on stderr and the
process exits with status 2; nothing else is printed.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from dyna import __version__
from dyna.errors import DynaError

# Each module provides ``register(subparsers)``.
_COMMAND_MODULES = [
    "dyna.experiment.cli",
    "dyna.experiment.escalation_cli",
    "dyna.loops.cli",
    "dyna.mcp_server",
    "dyna.store.cli",
]


class _Parser(argparse.ArgumentParser):
    """argparse parser whose usage errors print one line and exit 2."""

    def error(self, message):  # noqa: D102 - argparse override
        self.exit(2, f"dyna: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered sub-command."""
    parser = _Parser(prog="dyna", description="Dyna-style learning from experience: "
                     "run experiments, plot results, inspect stores, skills and memories.")
    parser.add_argument("--version", action="version", version=f"dyna {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    # every sub-command's --help opens with its one-line summary
    for action in sub._choices_actions:
        child = sub.choices.get(action.dest)
        if child is not None and not child.description and action.help:
            child.description = action.help[:1].upper() + action.help[1:] + "."
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dyna`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except DynaError as exc:
        print(f"dyna: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dyna: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `dyna ... | head`): stop quietly, as Unix tools do
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
