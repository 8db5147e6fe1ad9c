"""Experiment config: TOML loading, validation of every field, overrides, hash."""

import copy
import json
import hashlib
from pathlib import Path

import pytest

from dyna.errors import ConfigError, MissingFileError
from dyna.experiment.config import config_hash
from dyna.experiment.registry import load_experiment, parse_experiment

REPO = Path(__file__).resolve().parents[1]

BASE = {
    "name": "tiny",
    "description": "a tiny maze experiment",
    "seed": 3,
    "runs": 4,
    "env": {"id": "dyna/DynaMaze-v0"},
    "schedule": {"episodes": 5},
    "defaults": {"agent": "dyna_q", "alpha": 0.1, "gamma": 0.95, "epsilon": 0.1},
    "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=5", "n_planning": 5}],
}


def with_changes(**changes):
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = data
        for part in path:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[last] = value
    return data


def test_valid_config_merges_defaults_into_variants():
    cfg = parse_experiment(BASE)
    assert [v.name for v in cfg.variants] == ["n=0", "n=5"]
    assert cfg.variants[1].agent == "dyna_q"
    assert cfg.variants[1].hparams["n_planning"] == 5
    assert cfg.variants[0].hparams["alpha"] == 0.1
    assert cfg.variants[0].hparams["gamma"] == 0.95
    assert cfg.schedule.episodes == 5 and cfg.schedule.total_steps is None
    assert cfg.analysis.metrics == ("steps_per_episode",)   # default for episodes
    assert cfg.sweep_points() == [{}]


@pytest.mark.parametrize("changes, field, value", [
    ({"schedule__episods": 5}, "schedule.episods", 5),
    ({"runz": 3}, "runz", 3),
    ({"defaults__alpah": 0.2}, "defaults.alpah", 0.2),
    ({"variants__1__epsilonn": 0.2}, "variants.n=5.epsilonn", 0.2),
    ({"env__idd": "x"}, "env.idd", "x"),
    ({"analysis__metrics": ["steps_per_episod"]}, "analysis.metrics[0]", "steps_per_episod"),
    ({"analysis__checks": ["figure_82"]}, "analysis.checks[0]", "figure_82"),
])
def test_misspelt_key_names_dotted_field_and_suggests(changes, field, value):
    with pytest.raises(ConfigError) as err:
        parse_experiment(with_changes(**changes))
    assert err.value.field == field
    assert err.value.value == value
    assert "did you mean" in str(err.value)


def test_suggestion_is_the_close_match():
    with pytest.raises(ConfigError, match="did you mean 'episodes'"):
        parse_experiment(with_changes(schedule__episods=5))
    with pytest.raises(ConfigError, match="did you mean 'alpha'"):
        parse_experiment(with_changes(defaults__alpah=0.2))


@pytest.mark.parametrize("changes, field, value", [
    ({"defaults__alpha": -0.1}, "defaults.alpha", -0.1),
    ({"variants__0__alpha": 1.5}, "variants.n=0.alpha", 1.5),
    ({"defaults__epsilon": 1.2}, "defaults.epsilon", 1.2),
    ({"variants__1__epsilon": -0.01}, "variants.n=5.epsilon", -0.01),
    ({"runs": 0}, "runs", 0),
    ({"seed": -1}, "seed", -1),
    ({"schedule__episodes": 0}, "schedule.episodes", 0),
    ({"variants__0__agent": "sarsa"}, "variants.n=0.agent", "sarsa"),
    ({"name": "has space"}, "name", "has space"),
    ({"schedule__eval_every": 2}, "schedule.eval_episodes", 0),
    ({"analysis__first_episode": 6}, "analysis.first_episode", 6),
])
def test_out_of_range_values_name_field_and_value(changes, field, value):
    with pytest.raises(ConfigError) as err:
        parse_experiment(with_changes(**changes))
    assert err.value.field == field
    assert err.value.value == value


def test_schedule_needs_exactly_one_length():
    both = with_changes(schedule__total_steps=100)
    with pytest.raises(ConfigError, match="exactly one"):
        parse_experiment(both)
    neither = with_changes()
    neither["schedule"] = {}
    with pytest.raises(ConfigError, match="exactly one"):
        parse_experiment(neither)


def test_metric_must_fit_the_schedule():
    with pytest.raises(ConfigError) as err:
        parse_experiment(with_changes(analysis__metrics=["cumulative_reward"]))
    assert err.value.field == "analysis.metrics[0]"
    assert "total_steps" in err.value.reason


def test_duplicate_variant_names_rejected():
    data = with_changes(variants__1__name="n=0")
    with pytest.raises(ConfigError) as err:
        parse_experiment(data)
    assert err.value.field == "variants[1].name"


def test_sweep_crosses_variants_in_file_order():
    data = with_changes(env__id="dyna/AsciiMaze-v0",
                        sweep={"resolution": [1, 2, 3]})
    cfg = parse_experiment(data)
    assert cfg.sweep_points() == [{"resolution": 1}, {"resolution": 2}, {"resolution": 3}]
    assert cfg.env_kwargs({"resolution": 2}) == {"resolution": 2}
    two = parse_experiment(with_changes(sweep={"a": [1, 2], "b": ["x", "y"]}))
    assert two.sweep_points() == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"},
                                  {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


@pytest.mark.parametrize("sweep, field", [
    ({"resolution": []}, "sweep.resolution"),
    ({"resolution": 3}, "sweep.resolution"),
    ({"resolution": [1, 1]}, "sweep.resolution"),
    ({"run": [1, 2]}, "sweep.run"),
])
def test_bad_sweeps(sweep, field):
    with pytest.raises(ConfigError) as err:
        parse_experiment(with_changes(sweep=sweep))
    assert err.value.field == field


def test_cli_overrides_and_their_validation():
    cfg = parse_experiment(BASE, runs=7, seed=11)
    assert (cfg.runs, cfg.seed) == (7, 11)
    with pytest.raises(ConfigError) as err:
        parse_experiment(BASE, runs=0)
    assert (err.value.field, err.value.value) == ("--runs", 0)
    with pytest.raises(ConfigError) as err:
        parse_experiment(BASE, seed=-2)
    assert (err.value.field, err.value.value) == ("--seed", -2)


def test_hash_is_sha256_of_canonical_json_and_tracks_changes():
    cfg = parse_experiment(BASE)
    text = json.dumps(cfg.to_dict(), sort_keys=True, separators=(",", ":"))
    assert config_hash(cfg) == hashlib.sha256(text.encode()).hexdigest()
    assert cfg.hash == parse_experiment(copy.deepcopy(BASE)).hash
    assert parse_experiment(BASE, runs=5).hash != cfg.hash
    assert parse_experiment(with_changes(variants__1__n_planning=6)).hash != cfg.hash


def test_to_dict_round_trips():
    cfg = parse_experiment(with_changes(env__id="dyna/AsciiMaze-v0",
                                    sweep={"resolution": [1, 2]},
                                    analysis={"checks": [], "first_episode": 2}))
    again = parse_experiment(cfg.to_dict())
    assert again == cfg
    assert again.hash == cfg.hash


def test_load_config_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(MissingFileError) as err:
        load_experiment(tmp_path / "nope.toml")
    assert err.value.field == "config"
    assert isinstance(err.value, FileNotFoundError)
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_experiment(bad)


@pytest.mark.parametrize("name", ["dyna_maze", "blocking_maze", "shortcut_maze",
                                  "prioritized_sweeping", "frozenlake", "taxi"])
def test_shipped_experiment_files_validate(name):
    cfg = load_experiment(REPO / "experiments" / f"{name}.toml")
    assert cfg.name == name
    assert cfg.runs >= 1 and len(cfg.variants) >= 2


def test_dyna_maze_file_is_figure_8_2():
    cfg = load_experiment(REPO / "experiments" / "dyna_maze.toml")
    assert cfg.runs == 30 and cfg.schedule.episodes == 50
    assert [v.hparams["n_planning"] for v in cfg.variants] == [0, 5, 50]
    for v in cfg.variants:
        assert (v.hparams["alpha"], v.hparams["gamma"], v.hparams["epsilon"]) == \
            (0.1, 0.95, 0.1)
    assert cfg.analysis.first_episode == 2
