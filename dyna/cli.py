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
    "dyna.llm_local.cli",
    "dyna.loops.cli",
    "dyna.mcp_server",
    "dyna.store.cli",
]


class _Parser(argparse.ArgumentParser):
    """argparse parser whose usage errors print one line and exit 2."""

    def error(self, message):  # noqa: D102 - argparse override
        from dyna.redact import redact_text   # (a secret given as an argument's value)

        self.exit(2, f"dyna: error: {redact_text(message)}\n")


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
    registered = {name: importlib.import_module(name).register(sub)
                  for name in _COMMAND_MODULES}
    # `dyna store competence` draws, so it is added from dyna.experiment
    from dyna.experiment.store_competence.cli import add_parser

    add_parser(registered["dyna.store.cli"])
    _describe(parser)
    _document(parser, ("dyna",))
    return parser


#: One example (or two) per command, shown at the end of its --help.
EXAMPLES = {
    "dyna": "dyna run experiments/dyna_maze.toml",
    "dyna run": "dyna run experiments/dyna_maze.toml --runs 5 --out runs/quick",
    "dyna plot": "dyna plot runs/dyna_maze-20261201-120000-1a2b",
    "dyna report": "dyna report runs/dyna_maze-20261201-120000-1a2b5c6d",
    "dyna freeze": "dyna freeze experiments/agent_tasks_v3_skill.toml",
    "dyna escalation": "dyna escalation check data/swebench_verified_bash_only.csv",
    "dyna escalation check": "dyna escalation check data/swebench_verified_bash_only.csv",
    "dyna escalation replay": "dyna escalation replay data/swebench_verified_bash_only.csv "
                              "--system all_by_date --rules never,mean,thompson",
    "dyna skills": "dyna skills list ~/.agent/skills",
    "dyna skills list": "dyna skills list ~/.agent/skills",
    "dyna skills show": "dyna skills show ~/.agent/skills deploy-staging",
    "dyna skills match": 'dyna skills match ~/.agent/skills "deploy the web app to staging"',
    "dyna skills catalog": "dyna skills catalog ~/.agent/skills",
    "dyna skills add": 'dyna skills add ~/.agent/skills --name deploy-staging --description '
                       '"Deploy the web app to staging" --trigger deploy --trigger staging '
                       '--body deploy.md',
    "dyna skills pending": "dyna skills pending ~/.agent/skills",
    "dyna skills approve": "dyna skills approve ~/.agent/skills p0001",
    "dyna skills reject": "dyna skills reject ~/.agent/skills p0001",
    "dyna skills retire": 'dyna skills retire ~/.agent/skills old-deploy --reason "replaced"',
    "dyna skills restore": "dyna skills restore ~/.agent/skills old-deploy",
    "dyna skills history": "dyna skills history ~/.agent/skills --name deploy-staging",
    "dyna skills undo-run": "dyna skills undo-run ~/.agent/skills run-42",
    "dyna memory": "dyna memory show ~/.agent/MEMORY.md",
    "dyna memory show": "dyna memory show ~/.agent/MEMORY.md",
    "dyna memory add": 'dyna memory add ~/.agent/MEMORY.md "The staging host is '
                       'staging.example.com" --source person',
    "dyna memory pending": "dyna memory pending ~/.agent/MEMORY.md",
    "dyna memory approve": "dyna memory approve ~/.agent/MEMORY.md m0001",
    "dyna memory reject": "dyna memory reject ~/.agent/MEMORY.md m0001",
    "dyna memory consolidate": "dyna memory consolidate ~/.agent/MEMORY.md --dry-run",
    "dyna llm": "dyna llm serve",
    "dyna llm serve": "dyna llm serve --port 8080",
    "dyna mcp": "dyna mcp --db ~/.dyna/experience.db --tenant my-agent",
    "dyna store": "dyna store stats ~/.dyna/experience.db",
    "dyna store stats": "dyna store stats ~/.dyna/experience.db --tenant my-agent",
    "dyna store export": "dyna store export ~/.dyna/experience.db --tenant my-agent "
                         "--out episodes.parquet",
    "dyna store delete": "dyna store delete ~/.dyna/experience.db --tenant my-agent "
                         "--run-id run-42 --dry-run",
    "dyna store prune": "dyna store prune ~/.dyna/experience.db --max-age 2592000",
    "dyna store compact": "dyna store compact ~/.dyna/experience.db --keep 1000",
    "dyna store recover": "dyna store recover damaged.db --out recovered.db",
    "dyna store scrub": "dyna store scrub ~/.dyna/experience.db --dry-run",
    "dyna store cache": "dyna store cache ~/.dyna/experience.db",
    "dyna store competence": "dyna store competence ~/.dyna/experience.db --tenant my-agent "
                             "--task-type triage --out competence.png",
}

#: Help of arguments their modules left without one: (command, dest) -> text.
ARG_HELP = {
    ("dyna escalation check", "csv"): "outcome log: a CSV with the columns system, task_id, "
                                      "task_type, success (cost_usd optional)",
    ("dyna escalation replay", "csv"): "outcome log: a CSV with the columns system, task_id, "
                                       "task_type, success (cost_usd optional)",
    ("dyna escalation replay", "seed"): "seed of the task orders",
    ("dyna skills show", "name"): "skill name (its folder)",
    ("dyna skills match", "text"): "the task or situation, as text",
    ("dyna skills match", "limit"): "at most this many skills",
    ("dyna skills approve", "id"): "pending proposal id (from `dyna skills pending`)",
    ("dyna skills reject", "id"): "pending proposal id (from `dyna skills pending`)",
    ("dyna skills retire", "name"): "skill name",
    ("dyna skills retire", "reason"): "why (kept in the history)",
    ("dyna skills restore", "name"): "retired skill name",
    ("dyna skills restore", "reason"): "why (kept in the history)",
    ("dyna skills history", "name"): "only this skill",
    ("dyna skills history", "run"): "only this run id",
    ("dyna skills undo-run", "run"): "run id whose changes are undone",
    ("dyna skills undo-run", "force"): "undo even when later runs changed the same skills",
    ("dyna memory consolidate", "cap"): "keep at most this many facts",
}
for _cmd in ("show", "pending", "approve", "reject", "consolidate"):
    ARG_HELP[("dyna memory " + _cmd, "path")] = "MEMORY.md file"
for _cmd in ("stats", "export", "delete", "prune", "compact"):
    ARG_HELP[("dyna store " + _cmd, "db")] = ("experience store (must exist): a SQLite file or a "
                                              "postgresql:// DSN (password in PGPASSWORD or "
                                              "~/.pgpass)")
for _cmd in ("recover", "scrub", "cache"):
    ARG_HELP[("dyna store " + _cmd, "db")] = "SQLite experience store file (must exist)"


def _document(parser: argparse.ArgumentParser, path: tuple) -> None:
    """Every command's --help ends with an example; every argument has a help line that
    names its default; sub-actions below the top level are called ACTION."""
    cmd = " ".join(path)
    example = EXAMPLES.get(cmd)
    if example and not parser.epilog:
        parser.epilog = f"example:\n  {example}"
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if len(path) > 1:
                action.metavar = "ACTION"
            for name, child in action.choices.items():
                _document(child, path + (name,))
            continue
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        if not action.help:
            action.help = ARG_HELP.get((cmd, action.dest), action.dest.replace("_", " "))
        has_default = (action.default not in (None, False, argparse.SUPPRESS)
                       and not action.required and action.option_strings)
        if has_default and "default" not in action.help:
            action.help += " (default: %(default)s)"


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
        # an error names the value it refuses: a secret typed as an argument (a token as
        # a run id or tenant) is not echoed to the terminal or to a log of it
        from dyna.redact import redact_text

        print(f"dyna: error: {redact_text(str(exc))}", file=sys.stderr)
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
