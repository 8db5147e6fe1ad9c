"""The experiment-kind registry: dispatch, the runner's common parts for a toy kind."""

import json
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest

from dyna.errors import ConfigError
from dyna.experiment import registry, runner
from dyna.experiment.backends import Job, split_runs
from dyna.experiment.config import config_hash
from dyna.experiment.protocol import ExperimentKind, Prepared
from dyna.experiment.registry import parse_experiment, register_kind


@dataclass(frozen=True)
class ToyConfig:
    name: str
    seed: int
    runs: int
    scale: float
    kind: str = "toy"

    def to_dict(self):
        return {"kind": "toy", "name": self.name, "seed": self.seed, "runs": self.runs,
                "scale": self.scale}

    @property
    def hash(self):
        return config_hash(self)

    def with_overrides(self, runs=None, seed=None):
        return ToyConfig(self.name, self.seed if seed is None else seed,
                         self.runs if runs is None else runs, self.scale)


def toy_job(job):
    """Each run draws from its own (seed, run) stream: results do not depend on blocks."""
    draws = [np.random.default_rng([job.payload["seed"], r]).random() for r in job.run_indices]
    return {"value": np.asarray(draws) * job.payload["scale"] * (job.variant + 1)}


class ToyKind(ExperimentKind):
    name = "toy"

    def parse(self, data, *, runs=None, seed=None):
        extra = set(data) - {"name", "seed", "runs", "scale"}
        if extra:
            raise ConfigError(sorted(extra)[0], data[sorted(extra)[0]], "unknown key")
        cfg = ToyConfig(data["name"], data.get("seed", 0), data.get("runs", 1),
                        float(data.get("scale", 1.0)))
        return cfg.with_overrides(runs=runs, seed=seed)

    def prepare(self, config):
        if config.scale < 0:
            raise ConfigError("scale", config.scale, "must be >= 0")
        return Prepared(manifest={"toy": {"scale": config.scale}})

    def n_groups(self, config):
        return 2

    def plan_jobs(self, config, prepared, *, block_size):
        return [Job(variant=v, point=0, run_indices=b,
                    payload={"variant_name": f"v{v}", "seed": config.seed,
                             "scale": config.scale})
                for v in (1, 0) for b in reversed(split_runs(config.runs, block_size))]

    @property
    def job_function(self):
        return toy_job

    def build_tables(self, config, prepared, jobs, results):
        rows = [(job.variant, r, float(x)) for job, res in zip(jobs, results)
                for r, x in zip(job.run_indices, res["value"])]
        return {"values": pl.DataFrame(rows, schema=["variant", "run", "value"], orient="row")}

    def draw_plots(self, out, folder):
        (folder / "plots").mkdir(exist_ok=True)
        path = folder / "plots" / "n.txt"
        path.write_text(str(out.tables["values"].height))
        return [path]

    def write_report(self, out, folder):
        path = folder / "report.md"
        path.write_text(f"# {out.config.name}\n")
        return path


@pytest.fixture
def toy():
    register_kind("toy", ToyKind())
    yield
    registry.KINDS.pop("toy", None)
    registry._loaded.pop("toy", None)


def test_unknown_kind_names_field_and_suggests():
    with pytest.raises(ConfigError) as err:
        parse_experiment({"kind": "escalaton", "name": "x"})
    assert err.value.field == "kind" and "did you mean 'escalation'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_experiment({"kind": 3})
    assert err.value.field == "kind"


def test_tabular_is_the_default_and_kind_key_is_accepted():
    data = {"name": "t", "env": {"id": "dyna/DynaMaze-v0"}, "schedule": {"episodes": 2},
            "defaults": {"agent": "q_learning"}}
    plain = parse_experiment(data)
    assert plain == parse_experiment({**data, "kind": "tabular"}) == parse_experiment(data)
    assert "kind" not in plain.to_dict()  # tabular hashes are unchanged by the registry


def test_toy_kind_runs_through_the_common_runner(toy, tmp_path):
    cfg = parse_experiment({"kind": "toy", "name": "toy", "seed": 3, "runs": 5, "scale": 2.0})
    assert isinstance(cfg, ToyConfig)
    out = runner.run_experiment(cfg, tmp_path / "a", block_size=2)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "toy" and manifest["toy"] == {"scale": 2.0}
    assert manifest["backend"]["jobs"] == 2 * 3
    values = pl.read_parquet(out / "values.parquet")
    # canonical order whatever order plan_jobs returned: variant, then run
    assert values.select("variant", "run").rows() == [(v, r) for v in (0, 1) for r in range(5)]
    expected = [np.random.default_rng([3, r]).random() * 2.0 * (v + 1)
                for v in (0, 1) for r in range(5)]
    np.testing.assert_array_equal(values.get_column("value").to_numpy(), expected)
    # block size does not change a bit
    other = runner.run_experiment(cfg, tmp_path / "b", block_size=5)
    assert pl.read_parquet(other / "values.parquet").equals(values)
    loaded = runner.load_output(out)
    assert loaded.config == cfg and loaded.kind == "toy"
    assert loaded.tables["values"].equals(values) and loaded.results is None
    assert runner.draw_output_plots(loaded, out)[0].read_text() == "10"


def test_toy_kind_bad_input_fails_before_writing(toy, tmp_path):
    cfg = parse_experiment({"kind": "toy", "name": "toy", "scale": -1.0})
    with pytest.raises(ConfigError) as err:
        runner.run_experiment(cfg, tmp_path / "a")
    assert err.value.field == "scale"
    assert list(tmp_path.iterdir()) == []
