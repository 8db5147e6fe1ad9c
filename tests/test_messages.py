"""Messages that name the real cause: each bad input below gets one line saying what is
wrong with it (exit status 2, nothing written), and the help screens say what they do."""

import sys
from pathlib import Path

import pytest

import envs
from dyna.agents import run_agent
from dyna.cli import main
from dyna.errors import ConfigError, StoreError
from dyna.experiment.cli import KIND_HELP, run_description
from dyna.experiment.kinds.escalation.config import RULES
from dyna.experiment.registry import KINDS
from dyna.store.postgres_dsn import load_psycopg

REPO = Path(__file__).resolve().parents[1]

MAZE = """\
name = "msg"
runs = 2

[env]
id = "dyna/DynaMaze-v0"

[schedule]
episodes = {episodes}

[defaults]
agent = "dyna_q"

[[variants]]
name = "n=0"
n_planning = 0
"""


def _refused(tmp_path, capsys, argv) -> str:
    """Run ``dyna argv`` expecting exit 2, nothing on stdout and nothing written."""
    before = sorted(tmp_path.iterdir())
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert sorted(tmp_path.iterdir()) == before
    return captured.err


@pytest.mark.parametrize("episodes, shown", [("1e9", "1000000000"),
                                             ("100000000", "100000000")])
def test_too_many_episodes_names_the_schedule_field(tmp_path, capsys, episodes, shown):
    toml = tmp_path / "big.toml"
    toml.write_text(MAZE.format(episodes=episodes))
    err = _refused(tmp_path, capsys, ["run", str(toml), "--out", str(tmp_path / "o")])
    assert err == (f"dyna: error: schedule.episodes={shown}: "
                   "must be <= MAX_EPISODES=1000000\n")


def test_the_step_cap_is_named_when_the_episodes_are_too_many_for_it():
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    with pytest.raises(ConfigError) as exc:
        run_agent("dyna_q", {"n_planning": 5}, table, seed=0, run_indices=[0, 1],
                  episodes=100, max_total_steps=3000)
    assert str(exc.value) == (
        "max_total_steps=3000: run(s) [1] hit this cap on time steps per run after 88 of "
        "100 episodes: ask for fewer episodes (or, if an episode never ends, give the env a "
        "max_episode_steps)")


def test_an_episode_that_never_ends_is_told_apart():
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    with pytest.raises(ConfigError) as exc:
        run_agent("q_learning", {"epsilon": 0.0, "q_init": -1.0}, table, seed=0,
                  run_indices=[0], episodes=5, max_total_steps=10_000)
    assert str(exc.value) == (
        "max_total_steps=10000: run(s) [0] took that many steps without finishing episode 1 "
        "(the policy never reaches a goal?); give the env a max_episode_steps")


def test_plot_of_a_file_says_it_is_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small.toml").write_text(MAZE.format(episodes=3))
    err = _refused(tmp_path, capsys, ["plot", "small.toml"])
    assert err == ("dyna: error: DIR='small.toml': is a file, expected an output folder "
                   "(what `dyna run` writes)\n")


def test_an_empty_file_says_it_is_empty(tmp_path, capsys):
    (tmp_path / "empty.toml").write_text("")
    err = _refused(tmp_path, capsys, ["run", str(tmp_path / "empty.toml")])
    assert err == ("dyna: error: name=None: missing: the file is empty (an experiment needs "
                   "name, [env] and [schedule]; see experiments/dyna_maze.toml)\n")


def test_a_file_without_a_name_says_the_name_is_missing(tmp_path, capsys):
    (tmp_path / "noname.toml").write_text(MAZE.format(episodes=3).replace('name = "msg"\n', ""))
    err = _refused(tmp_path, capsys, ["run", str(tmp_path / "noname.toml")])
    assert err == ('dyna: error: name=None: missing: the file has no name = "..." (letters, '
                   "digits, _ . -; used in the output folder's name)\n")


@pytest.mark.parametrize("command", [["check"], ["replay", "--system", "x"]])
def test_escalation_of_a_folder_says_it_is_a_folder(tmp_path, capsys, command):
    (tmp_path / "data").mkdir()
    err = _refused(tmp_path, capsys, ["escalation", command[0], str(tmp_path / "data"),
                                      *command[1:]])
    assert err == (f"dyna: error: CSV={str(tmp_path / 'data')!r}: is a folder, expected an "
                   "outcome log (a CSV file)\n")


def test_the_postgres_hint_installs_from_the_checkout(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)   # import psycopg fails
    from dyna.store.postgres_dsn import display_dsn
    with pytest.raises(StoreError) as exc:
        load_psycopg("postgresql://u@h/db")
    # the DSN is shown as display_dsn shows it (in full only when psycopg can parse it)
    assert str(exc.value) == (f'DB={display_dsn("postgresql://u@h/db")}: the PostgreSQL '
                              'backend needs psycopg 3: pip install -e ".[postgres]" in the '
                              'dyna checkout')


def test_run_help_lists_the_kinds_the_shipped_files_and_where_the_report_goes(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert [name for name, _ in KIND_HELP] == list(KINDS)
    for name in KINDS:
        assert f"\n  {name:<13} " in text
    shipped = sorted(p.name for p in (REPO / "experiments").glob("*.toml"))
    assert len(shipped) >= 20
    listed = text.split("experiment files in ")[1].split("\n\n")[0]
    assert sorted(n.strip() for n in listed.split(":", 1)[1].replace("\n", " ").split(",")) \
        == shipped
    assert "the report is\nDIR/report.md, the plots are in DIR/plots/" in text


def test_run_description_without_a_checkout_lists_no_files(tmp_path):
    text = run_description(tmp_path / "nowhere")
    assert "experiment files" not in text and text.endswith(
        "  trajectories  real agent trajectories (tau-bench) through the loops")


def test_replay_help_lists_every_rule_and_what_it_prints(capsys):
    with pytest.raises(SystemExit):
        main(["escalation", "replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "comma-separated policy rules, of: " + ", ".join(RULES) + " (the risk class's " \
        "own rule)" in text
    assert RULES[-1] == "preset"
    assert ("Prints one row per policy: cost per task, regret per task (against the "
            "task-type oracle), escalation rate, failure rate and AURC") in text


def test_the_readme_says_the_benchmarks_need_the_dev_install():
    text = " ".join((REPO / "README.md").read_text().split())
    assert ('The benchmarks (`benchmarks/`, [docs/benchmarks.md](docs/benchmarks.md)) need '
            'this install too') in text
