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
