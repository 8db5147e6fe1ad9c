"""Every command's --help: an example, a help line for every argument with its default,
ACTION for sub-actions."""

import argparse
import shlex

from dyna.cli import EXAMPLES, build_parser


def _walk(parser, path=("dyna",)):
    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, child in a.choices.items():
                yield from _walk(child, path + (name,))


def test_every_command_has_an_example_and_every_argument_a_help_line():
    seen = 0
    for path, parser in _walk(build_parser()):
        seen += 1
        text = parser.format_help()
        assert "example:\n  dyna" in text, " ".join(path)
        assert EXAMPLES[" ".join(path)].split()[0] == "dyna"
        for a in parser._actions:
            if isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if isinstance(a, argparse._SubParsersAction):
                assert a.metavar == ("COMMAND" if len(path) == 1 else "ACTION"), path
                continue
            assert a.help, (path, a.dest)
            if a.option_strings and not a.required and a.default not in (None, False):
                assert "default" in a.help, (path, a.dest)
    assert seen >= 30


def test_escalation_check_lists_the_columns_and_mcp_names_its_extra():
    from envs.escalation import OUTCOME_COLUMNS

    parsers = dict(_walk(build_parser()))
    text = parsers[("dyna", "escalation", "check")].format_help()
    assert all(c in text for c in OUTCOME_COLUMNS)
    assert "pip install -e '.[mcp]'" in parsers[("dyna", "mcp")].format_help()


def test_every_example_parses_as_written():
    # A newcomer copies the example line: it must be accepted by the parser of its command
    # (the escalation replay example once used an --out option that command never had).
    parser = build_parser()
    for command, example in EXAMPLES.items():
        words = shlex.split(example)
        assert words[:len(command.split())] == command.split(), command
        try:
            parser.parse_args(words[1:])
        except SystemExit as exc:
            raise AssertionError(f"{command}: example does not parse: {example}") from exc


def test_store_db_help_says_which_actions_take_a_postgresql_dsn():
    parsers = dict(_walk(build_parser()))
    for action in ("stats", "export", "delete", "prune", "compact"):
        assert "postgresql:// DSN" in parsers[("dyna", "store", action)].format_help(), action
    for action in ("recover", "scrub", "cache"):   # these refuse a DSN with one line
        text = parsers[("dyna", "store", action)].format_help()
        assert "SQLite experience store file" in text and "DSN" not in text, action
