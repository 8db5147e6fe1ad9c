"""The docs' examples say what they do: the TOML example's book checks are about the maze
they name only, and the experience-store example finds its 40 episodes however often it runs.
"""

import re

import pytest
from doc_pages import after_heading, blocks

from dyna.errors import ConfigError
from dyna.experiment.kinds.tabular.reference import applies
from dyna.experiment.registry import parse_experiment


def _toml_example():
    """The config of docs/experiments.md's annotated TOML example (its ``[sweep]`` of
    resolutions 1, 2, 3 of the Dyna maze)."""
    import tomllib

    text = next(t for page, t in blocks("toml") if page == "docs/experiments.md"
                and "[sweep]" in t and "checks" in t)
    return parse_experiment(tomllib.loads(text))


def test_figure_8_2_is_about_the_toml_example_at_resolution_1_only():
    config = _toml_example()
    assert config.analysis.checks == ("figure_8_2",)
    points = config.sweep_points()
    assert [p["resolution"] for p in points] == [1, 2, 3]
    assert [applies("figure_8_2", config.env.id, config.env_kwargs(p)) for p in points] \
        == [True, False, False]
    # Example 8.4 refines the same maze: every resolution is its subject
    assert [applies("prioritized_sweeping", config.env.id, config.env_kwargs(p))
            for p in points] == [True, True, True]


@pytest.mark.parametrize("check, env_id, kwargs, expected", [
    ("figure_8_2", "dyna/DynaMaze-v0", {}, True),
    ("figure_8_2", "dyna/AsciiMaze-v0", {"layouts": "S.G\n"}, False),
    ("figure_8_2", "dyna/AsciiMaze-v0", {"change_at": [10]}, False),
    ("figure_8_2", "dyna/BlockingMaze-v0", {}, False),
    ("figure_8_2", "FrozenLake", {}, False),
    ("blocking", "dyna/BlockingMaze-v0", {"change_at": 1000}, True),
    ("blocking", "dyna/BlockingMaze-v0", {"change_at": 500}, False),
    ("shortcut", "dyna/ShortcutMaze-v0", {}, True),
    ("shortcut", "dyna/BlockingMaze-v0", {}, False),
    ("prioritized_sweeping", "dyna/ShortcutMaze-v0", {"resolution": 2}, False),
])
def test_each_check_is_about_its_own_maze(check, env_id, kwargs, expected):
    assert applies(check, env_id, kwargs) is expected


def test_an_unknown_check_is_named():
    with pytest.raises(ConfigError) as exc:
        applies("figure_9_1", "dyna/DynaMaze-v0")
    assert str(exc.value) == ("check='figure_9_1': expected one of figure_8_2, blocking, "
                              "shortcut, prioritized_sweeping")


def test_the_store_example_finds_40_episodes_every_time_it_runs(tmp_path, monkeypatch,
                                                                capsys):
    monkeypatch.chdir(tmp_path)
    code = re.search(r"```python\n(.*?)```", after_heading("The experience store from Python"),
                     re.S).group(1)
    # print what the example's last line returns (get_stats), run twice in one folder
    code = code.replace('    store.dispatch("get_stats", tenant_id="acme")',
                        '    print(store.dispatch("get_stats", tenant_id="acme")["n_records"])')
    for _ in range(2):
        exec(compile(code, "docs/experience-store.md", "exec"), {})
    assert capsys.readouterr().out == "40\n40\n"
    assert list(tmp_path.iterdir()) == []


def test_the_toml_example_checks_the_book_at_resolution_1_only(tmp_path):
    from dyna.experiment.runner import run_experiment

    out = run_experiment(_toml_example().with_overrides(runs=3), tmp_path / "out")
    report = (out / "report.md").read_text()
    verdicts = [ln for ln in report.splitlines() if ln.startswith("- ") and "(book: " in ln]
    assert len(verdicts) == 1     # n=5's plateau at resolution 1; none at resolutions 2, 3
    assert verdicts[0].startswith("- n=5: episodes 41-50 average ")
    assert report.count("NOT consistent") == 0
