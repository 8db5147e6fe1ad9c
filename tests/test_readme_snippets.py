"""Every TOML snippet of the README parses as it stands (pasted verbatim, it must work)."""

import re
import tomllib
from pathlib import Path

import pytest

from dyna.experiment.registry import parse_experiment

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```toml\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_the_readme_has_toml_snippets():
    assert len(BLOCKS) >= 1


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_each_readme_toml_snippet_runs(i, tmp_path):
    from dyna.experiment.backends import InProcessBackend
    from dyna.experiment.runner import run_experiment

    data = tomllib.loads(BLOCKS[i])
    cfg = parse_experiment(data)
    assert cfg.name == data["name"]
    # the snippet as written, with 2 runs for speed: its env, sweep and agents must work
    out = run_experiment(cfg.with_overrides(runs=2), tmp_path / "out",
                         backend=InProcessBackend(), progress=False)
    assert (out / "report.md").exists()


def _options(parser, *path):
    for name in path:
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = sub.choices[name]
    return {o for a in parser._actions for o in a.option_strings if o.startswith("--")} - {
        "--help"}


@pytest.mark.parametrize("path", [("run",), ("mcp",)])
def test_the_readme_synopsis_lists_every_option(path):
    # The one-line synopses under "Commands" and "Use from an agent (MCP)": a newcomer reads
    # the options there (the --replay option of `dyna run` was once missing).
    from dyna.cli import build_parser

    line = next(ln for ln in README.read_text(encoding="utf-8").splitlines()
                if ln.startswith(f"dyna {' '.join(path)} ") and "[" in ln)
    written = set(re.findall(r"--[a-z][a-z-]*", line))
    assert written == _options(build_parser(), *path)
