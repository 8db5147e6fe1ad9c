"""The ``dyna`` command line.

Sub-commands are contributed by the layers that own them; each module listed in
``_COMMAND_MODULES`` exposes ``register(subparsers)`` which adds its parsers and sets
``func`` on them. ``func(args) -> int`` returns the exit status.

Any :class:`dyna.errors.DynaError` (bad input) is printed as one line on stderr and the
process exits with status 2; nothing else is printed.

Ctrl-C and SIGTERM stop a command the same way: the main thread unwinds through
:class:`KeyboardInterrupt` (SIGTERM as its subclass :class:`Terminated`), so every clean-up a
command does for Ctrl-C also runs for SIGTERM (worker processes stopped, temporary output
removed), then one line goes to stderr and the exit status is 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from dyna import __version__
from dyna.errors import DynaError

# Each module provides ``register(subparsers)``.
_COMMAND_MODULES = [
    "dyna.experiment.cli",
    "dyna.experiment.kinds.escalation.cli",
    "dyna.loops.cli",
    "dyna.mcp_server",
    "dyna.store.cli",
]


class _Parser(argparse.ArgumentParser):
    """argparse parser whose usage errors print one line and exit 2."""

    def error(self, message):  # noqa: D102 - argparse override
        self.exit(2, f"dyna: error: {message}\n")


#: Exit status after SIGTERM: 128 + 15, what a POSIX shell reports for a process that
#: SIGTERM killed, so scripts see the same status whether or not dyna cleaned up first.
EXIT_SIGTERM = 128 + signal.SIGTERM
#: Exit status after Ctrl-C (SIGINT): 128 + 2, by the same convention.
EXIT_SIGINT = 128 + signal.SIGINT


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM.

    A subclass of :class:`KeyboardInterrupt`, so code that cleans up after Ctrl-C (the
    process-pool and Ray backends stop their workers, the runner removes its temporary
    output folder) does the same after SIGTERM without knowing about signals.
    """


# Set by the SIGTERM handler: a library between the handler and main() may turn the
# Terminated it raised into a plain KeyboardInterrupt (Ray's C++ wait loop does).
_sigterm_received = threading.Event()


def _on_sigterm(signum, frame) -> None:
    # The first SIGTERM unwinds the command; later ones arrive during the clean-up it
    # triggered and are dropped so that clean-up finishes (SIGKILL still stops everything).
    _sigterm_received.set()
    signal.signal(signal.SIGTERM, _ignore_signal)
    raise Terminated()


def _ignore_signal(signum, frame) -> None:
    # A Python-level no-op rather than SIG_IGN: an ignored disposition would be inherited
    # by processes started during clean-up, a Python handler is reset at exec.
    return None


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered sub-command."""
    parser = _Parser(prog="dyna", description="Dyna-style learning from experience: "
                     "run experiments, plot results, inspect stores, skills and memories.")
    parser.add_argument("--version", action="version", version=f"dyna {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _describe(parser)
    return parser


def _describe(parser: argparse.ArgumentParser) -> None:
    """Open every (nested) sub-command's --help with its one-line summary."""
    for group in parser._actions:
        if not isinstance(group, argparse._SubParsersAction):
            continue
        for action in group._choices_actions:
            child = group.choices.get(action.dest)
            if child is None:
                continue
            if not child.description and action.help:
                child.description = action.help[:1].upper() + action.help[1:] + "."
            _describe(child)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dyna`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    in_main_thread = threading.current_thread() is threading.main_thread()
    _sigterm_received.clear()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    try:
        return int(args.func(args) or 0)
    except DynaError as exc:
        print(f"dyna: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated) or _sigterm_received.is_set():
            print("dyna: terminated (SIGTERM)", file=sys.stderr)
            return EXIT_SIGTERM
        print("dyna: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except BrokenPipeError:
        # the reader went away (e.g. `dyna ... | head`): stop quietly, as Unix tools do
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        if in_main_thread and previous is not None:   # None: a handler not set from Python
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
