"""Every code block of the README and of docs/ works as it stands (pasted verbatim, it must
work): TOML blocks run as experiments, Python blocks run as programs, JSON blocks parse, and
every ``dyna`` command of a shell block is one the command line accepts. Blocks without a
language tag (or tagged ``text``) are fragments and are not run (:mod:`doc_pages`)."""

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib

import pytest
from doc_pages import PAGES, ROOT, blocks

from dyna.experiment.registry import load_experiment, parse_experiment

TOML = blocks("toml")
PYTHON = blocks("python")
JSON = blocks("json")


def _ids(found):
    """``page-k``: the k-th such block of its page, from 1."""
    pages = [page for page, _ in found]
    return [f"{page}-{pages[:i + 1].count(page)}" for i, page in enumerate(pages)]


def _commands() -> list[tuple[str, str]]:
    """``(page, command)`` for every ``dyna`` command of every bash block: continued lines
    joined, comments dropped, each command of an ``&&`` chain apart; synopses (with ``[``)
    and placeholders in capitals are left out."""
    found = []
    for page, text in blocks("bash"):
        for line in text.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words[:1] == ["dyna"] and not any("[" in w or w.isupper() for w in words):
                    found.append((page, shlex.join(words)))
    return found


COMMANDS = _commands()


def test_the_pages_have_blocks_of_every_kind():
    assert TOML and PYTHON and JSON and COMMANDS


@pytest.mark.parametrize("page, text", TOML, ids=_ids(TOML))
def test_each_toml_block_runs(page, text, tmp_path):
    from dyna.experiment.backends import InProcessBackend
    from dyna.experiment.runner import run_experiment

    data = tomllib.loads(text)
    cfg = parse_experiment(data)
    assert cfg.name == data["name"]
    # the block as written, with 2 runs for speed: its env, sweep and agents must work
    out = run_experiment(cfg.with_overrides(runs=2), tmp_path / "out",
                         backend=InProcessBackend(), progress=False)
    assert (out / "report.md").exists()


@pytest.mark.parametrize("page, text", PYTHON, ids=_ids(PYTHON))
def test_each_python_block_runs(page, text, tmp_path):
    # in a fresh process and a folder of its own that sees the repository's data and
    # experiments where a reader at the repository root sees them
    for name in ("data", "experiments"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "block.py").write_text(text, encoding="utf-8")
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONHASHSEED="0")
    proc = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"{page}:\n{proc.stderr}"


@pytest.mark.parametrize("page, text", JSON, ids=_ids(JSON))
def test_each_json_block_parses(page, text):
    json.loads(text)


@pytest.mark.parametrize("page, command", COMMANDS, ids=[c for _, c in COMMANDS])
def test_each_dyna_command_is_accepted(page, command):
    from dyna.cli import build_parser

    args = shlex.split(command)[1:]
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit as exc:                      # argparse's way of refusing
        pytest.fail(f"{page}: {command!r} refused by the parser (exit {exc.code})")
    if args[0] == "run":                           # the file exists and is a valid experiment
        load_experiment(ROOT / parsed.file)


def _options(parser, *path):
    for name in path:
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = sub.choices[name]
    return {o for a in parser._actions for o in a.option_strings if o.startswith("--")} - {
        "--help"}


@pytest.mark.parametrize("path", [("run",), ("mcp",), ("plot",)])
def test_the_synopsis_lists_every_option(path):
    # The one-line synopses of docs/experiments.md and docs/mcp.md: a newcomer reads the
    # options there.
    from dyna.cli import build_parser

    lines = [ln for page in PAGES for ln in page.read_text(encoding="utf-8").splitlines()
             if ln.startswith(f"dyna {' '.join(path)} ") and "[" in ln]
    assert len(lines) == 1
    written = set(re.findall(r"--[a-z][a-z-]*", lines[0]))
    assert written == _options(build_parser(), *path)
