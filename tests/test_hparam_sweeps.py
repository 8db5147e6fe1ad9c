"""[sweep] over agent hyper-parameters: crossed with env kwargs, one column each,
never set twice, a sensitivity plot."""

import polars as pl
import pytest

from conftest import tables_only
from dyna.errors import ConfigError
from dyna.experiment.backends import InProcessBackend
from dyna.experiment.registry import load_experiment, parse_experiment
from dyna.experiment.runner import load_output, run_experiment


def _data(**changes):
    data = {"name": "hs", "seed": 3, "runs": 4, "env": {"id": "dyna/AsciiMaze-v0"},
            "schedule": {"episodes": 6}, "defaults": {"agent": "dyna_q"},
            "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=5", "n_planning": 5}],
            "sweep": {"alpha": [0.2, 1.0], "resolution": [1, 2]}}
    data.update(changes)
    return data


def test_a_swept_hyper_parameter_gives_exactly_the_runs_of_a_variant_that_sets_it(tmp_path):
    swept = run_experiment(parse_experiment(_data()), tmp_path / "s",
                           backend=InProcessBackend(), progress=False)
    res = load_output(swept).tables["results"]
    assert {"alpha", "resolution"} <= set(res.columns)
    assert sorted(res["alpha"].unique().to_list()) == [0.2, 1.0]
    with tables_only():
        fixed = run_experiment(parse_experiment(_data(
            variants=[{"name": "n=5", "n_planning": 5, "alpha": 1.0}],
            sweep={"resolution": [1, 2]})), tmp_path / "f", backend=InProcessBackend(),
            progress=False)
    ref = load_output(fixed).tables["results"]
    got = res.filter((pl.col("variant") == "n=5") & (pl.col("alpha") == 1.0)).drop("alpha")
    assert got.sort(["resolution", "run", "episode"]).equals(
        ref.sort(["resolution", "run", "episode"]))
    # alpha matters somewhere in this grid (the two alphas do not give the same episodes)
    a, b = (res.filter(pl.col("alpha") == x).sort(["variant", "resolution", "run", "episode"])
            ["steps"] for x in (0.2, 1.0))
    assert not a.equals(b)
    plots = sorted(p.name for p in (swept / "plots").iterdir())
    assert "sensitivity_alpha.png" in plots and "sensitivity_resolution.png" in plots
    assert "(plots/sensitivity_alpha.png)" in (swept / "report.md").read_text()


@pytest.mark.parametrize("changes,field,words", [
    ({"variants": [{"name": "a", "alpha": 0.3}]}, "sweep.alpha", "variants.a.alpha"),
    ({"defaults": {"agent": "dyna_q", "alpha": 0.3}}, "sweep.alpha", "defaults.alpha"),
    ({"sweep": {"alpha": [0.1, 2.0]}}, "sweep.alpha[1].alpha", "alpha"),
    ({"sweep": {"epsilon": [0.1, 0.1]}}, "sweep.epsilon", "distinct"),
])
def test_a_key_swept_and_set_or_a_bad_value_names_the_field(changes, field, words):
    with pytest.raises(ConfigError) as e:
        parse_experiment(_data(**changes))
    assert e.value.field == field and words in str(e.value)


def test_round_trip_and_the_shipped_parameter_study():
    cfg = parse_experiment(_data())
    again = parse_experiment(cfg.to_dict())
    assert again.to_dict() == cfg.to_dict() and again.hash == cfg.hash
    assert cfg.swept_hparams == ("alpha",)
    assert cfg.env_kwargs({"alpha": 0.2, "resolution": 2}) == {"resolution": 2}
    assert cfg.hparams(cfg.variants[1], {"alpha": 0.2, "resolution": 2})["alpha"] == 0.2
    ship = load_experiment("experiments/dyna_maze_sweep.toml")
    assert ship.sweep == {"alpha": (0.05, 0.1, 0.2, 0.4, 0.8)}
    assert [v.hparams["n_planning"] for v in ship.variants] == [0, 5, 50]
