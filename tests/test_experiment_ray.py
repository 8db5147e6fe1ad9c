"""Ray backend: identical tables to the in-process backend on a local Ray instance
with 2 workers, bounded retries, failed jobs reported after the others finished, Ctrl-C
cancelling tasks and shutting down the instance, and the one-line message without Ray.

One local Ray instance is started for the whole module (about 5-8 s) and shut down at the
end; the Ray tests are skipped only when Ray is not installed.
"""

import functools
import hashlib
import importlib.util
import json
import operator
import signal
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import tables_only
from dyna import cli
from dyna.errors import ConfigError, check_range
from dyna.experiment.kinds.tabular import job as tabular_job
from dyna.experiment.backends import InProcessBackend, Job, split_runs
from dyna.experiment.registry import get_backend, parse_experiment
from dyna.experiment.runner import run_experiment

HAS_RAY = importlib.util.find_spec("ray") is not None
NO_RAY = 'Ray is not installed (pip install -e ".[ray]"), so the Ray backend cannot run'
TABLES = ("results.parquet", "evals.parquet", "runs.parquet")
REPO = Path(__file__).resolve().parents[1]


def config(**changes):
    data = {
        "name": "tiny",
        "seed": 5,
        "runs": 5,
        "env": {"id": "dyna/DynaMaze-v0"},
        "schedule": {"episodes": 4, "eval_every": 2, "eval_episodes": 1},
        "defaults": {"agent": "dyna_q", "alpha": 0.1, "gamma": 0.95, "epsilon": 0.1},
        "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=5", "n_planning": 5}],
    }
    data.update(changes)
    return parse_experiment(data)


def table_bytes(folder: Path) -> dict:
    return {name: (folder / name).read_bytes() for name in TABLES}


@pytest.fixture(scope="module")
def ray_backend():
    """A local Ray instance with 2 CPUs, owned by this backend, for the whole module."""
    if not HAS_RAY:
        pytest.skip(NO_RAY)
    from dyna.experiment.ray_backend import RayBackend

    backend = RayBackend(2, keep_alive=True)
    SIGTERM_BEFORE.append(signal.getsignal(signal.SIGTERM))
    backend.start()
    yield backend
    backend.close()
    assert signal.getsignal(signal.SIGTERM) is SIGTERM_BEFORE[-1]


SIGTERM_BEFORE: list = []   # the SIGTERM disposition before each ray.init of the fixture (the
#                             last: the one running; another module may import the fixture)


def test_tables_bit_identical_to_in_process_and_manifest_records_cluster(ray_backend,
                                                                        tmp_path):
    cfg = config(env={"id": "dyna/AsciiMaze-v0"}, sweep={"resolution": [1, 2]},
                 variants=[{"name": "dq", "n_planning": 3},
                           {"name": "ps", "agent": "prioritized_sweeping", "n_planning": 3}])
    with tables_only():
        ref = run_experiment(cfg, tmp_path / "inprocess", backend=InProcessBackend())
        out = run_experiment(cfg, tmp_path / "ray", backend=ray_backend, block_size=2)
    assert table_bytes(out) == table_bytes(ref)
    manifest = json.loads((out / "manifest.json").read_text())
    for name in TABLES:   # the recorded digests are those of the in-process tables
        assert (manifest["tables"][name]["sha256"]
                == hashlib.sha256((ref / name).read_bytes()).hexdigest())
    b = manifest["backend"]
    assert (b["name"], b["workers"], b["address"], b["nodes"]) == ("ray", 2, "local", 1)
    assert b["resources"]["CPU"] == 2
    assert b["resources"]["memory"] > 0 and b["resources"]["object_store_memory"] > 0
    assert b["node_ip"] == "127.0.0.1"          # local instance on the loopback only
    assert b["gcs_address"].startswith("127.0.0.1:")
    assert b["block_size"] == 2
    assert b["jobs"] == 2 * 2 * len(split_runs(5, 2)) == 12
    assert (b["max_retries"], b["retried"]) == (2, 0)


def test_results_in_job_order_and_progress_for_every_job(ray_backend):
    jobs = [Job(variant=v, point=0, run_indices=r) for v in (1, 0) for r in ((0, 1), (2,))]
    seen = []
    out = ray_backend.map(operator.attrgetter("run_indices"), jobs,
                          on_result=lambda job, res: seen.append((job.key, res)))
    assert out == [(0, 1), (2,), (0, 1), (2,)]
    assert sorted(seen) == sorted((j.key, j.run_indices) for j in jobs)
    assert ray_backend.map(operator.attrgetter("run_indices"), []) == []


def test_failed_job_retried_then_reported_others_kept(ray_backend, tmp_path, monkeypatch):
    from dyna.experiment.ray_backend import JobsFailedError, RayBackend

    cfg = config()
    jobs = tabular_job.plan_jobs(cfg, [{}], block_size=2)   # 2 variants x blocks (0,1) (2,3) (4,)
    attempts_log = tmp_path / "attempts.txt"
    real = tabular_job.execute_job

    def failing(job):
        if job.variant == 1 and job.run_indices[0] == 2:
            with open(attempts_log, "a") as fh:
                fh.write("x\n")
            raise RuntimeError("boom")
        return real(job)

    backend = RayBackend(max_retries=1)   # joins the running instance
    progressed = []
    with pytest.raises(JobsFailedError) as err:
        backend.map(failing, jobs, on_result=lambda job, res: progressed.append(job.key))
    e = err.value
    assert attempts_log.read_text() == "x\n" * 2                  # 1 + max_retries attempts
    assert [(job.key, attempts) for job, _, attempts in e.failures] == [((1, 0, 2), 2)]
    assert isinstance(e.failures[0][1], RuntimeError)
    msg = str(e)
    assert msg.startswith("1 of 6 jobs failed: variant 'n=5', runs 2..3, seed 5 "
                          "(RuntimeError: boom; 2 attempts)")
    assert msg.endswith("; 5 other jobs finished")
    assert isinstance(e.__cause__, RuntimeError)
    # every other job finished and its result is kept, equal to running it here
    assert sorted(e.results) == [i for i, j in enumerate(jobs) if j.key != (1, 0, 2)]
    assert sorted(progressed) == sorted(j.key for j in jobs if j.key != (1, 0, 2))
    for i, result in e.results.items():
        direct = real(jobs[i])
        for name, arr in direct.items():
            np.testing.assert_array_equal(result[name], arr)
    assert backend.describe()["retried"] == 1

    # through the runner: the error names the job; the variants whose runs all finished are
    # written (a complete folder, marked complete = false), the failed variant is left out
    monkeypatch.setattr(tabular_job, "execute_job", failing)
    with pytest.raises(JobsFailedError, match="variant 'n=5', runs 2..3") as err2:
        run_experiment(cfg, tmp_path / "out", backend=backend, block_size=2)
    out = tmp_path / "out"
    assert f"written to {out}" in str(err2.value)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is False
    assert [(f["variant"], f["runs"]) for f in manifest["failed_jobs"]] == [(1, [2, 3])]
    kept = pl.read_parquet(out / "results.parquet")
    assert kept["variant"].unique().to_list() == [cfg.variants[0].name]
    assert sorted(kept["run"].unique().to_list()) == list(range(cfg.runs))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attempts.txt", "out"]


def test_cli_reports_failed_job_in_one_line(ray_backend, tmp_path, monkeypatch, capsys):
    real = tabular_job.execute_job

    def failing(job):
        if job.variant == 1:
            raise ValueError("diverged")
        return real(job)

    monkeypatch.setattr(tabular_job, "execute_job", failing)
    toml = tmp_path / "tiny.toml"
    toml.write_text('name = "tiny"\nseed = 3\nruns = 2\n[env]\nid = "dyna/DynaMaze-v0"\n'
                    '[schedule]\nepisodes = 2\n[defaults]\nagent = "dyna_q"\nalpha = 0.1\n'
                    'gamma = 0.95\nepsilon = 0.1\n[[variants]]\nname = "a"\nn_planning = 0\n'
                    '[[variants]]\nname = "b"\nn_planning = 2\n')
    out = tmp_path / "out"
    rc = cli.main(["run", str(toml), "--backend", "ray", "--out", str(out), "--no-progress",
                   "--block-size", "2"])
    captured = capsys.readouterr()
    assert rc == 2
    assert captured.err == ("dyna: error: 1 of 2 jobs failed: variant 'b', runs 0..1, seed 3 "
                            "(ValueError: diverged; 3 attempts); 1 other job finished; the "
                            f"complete variants were written to {out} (manifest.json: "
                            "complete = false, failed_jobs)\n")
    assert json.loads((out / "manifest.json").read_text())["complete"] is False


def test_flaky_job_retried_gives_identical_tables(ray_backend, tmp_path, monkeypatch):
    marker = tmp_path / "failed-once"
    real = tabular_job.execute_job

    def flaky(job):
        if job.variant == 0 and job.run_indices[0] == 0 and not marker.exists():
            marker.touch()
            raise OSError("transient")
        return real(job)

    cfg = config()
    with tables_only():
        ref = run_experiment(cfg, tmp_path / "ref")
    monkeypatch.setattr(tabular_job, "execute_job", flaky)
    from dyna.experiment.ray_backend import RayBackend

    backend = RayBackend()
    with tables_only():
        out = run_experiment(cfg, tmp_path / "ray", backend=backend, block_size=3)
    assert marker.exists()
    assert table_bytes(out) == table_bytes(ref)
    assert json.loads((out / "manifest.json").read_text())["backend"]["retried"] == 1


def test_bad_input_in_a_job_stops_at_once_as_config_error(ray_backend):
    jobs = [Job(variant=v, point=0, run_indices=(0,)) for v in range(3)]
    with pytest.raises(ConfigError) as err:
        ray_backend.map(functools.partial(check_range, "probe"), jobs)
    assert err.value.field == "probe"
    assert any(n.startswith("in job: variant ") for n in err.value.__notes__)
    assert ray_backend.describe()["retried"] == 0   # bad input is not retried


REPEATED_BAD_INPUT = """
import functools, sys
from dyna.errors import ConfigError, check_range
from dyna.experiment.backends import Job
from dyna.experiment.ray_backend import RayBackend
backend = RayBackend(2, keep_alive=True)
backend.start()
jobs = [Job(variant=v, point=0, run_indices=(0,)) for v in range(3)]
fields = []
for _ in range(int(sys.argv[1])):
    try:
        backend.map(functools.partial(check_range, "probe"), jobs)
    except ConfigError as err:
        fields.append(err.field)
backend.close()
print(len(fields), sorted(set(fields)))
"""


def test_repeated_bad_input_on_a_kept_instance_does_not_abort_the_driver(tmp_path):
    """Three jobs failing at once, 60 times on one kept-alive instance, in a child process.

    Cancelling every pending ref raced the failed tasks' completion replies and aborted the
    driver (Ray 2.60 ``task_manager.cc`` "Tried to complete task that was not pending",
    exit 1 with no Python traceback): 5 of 10 series of 40 maps crashed, after 4-12 maps.
    Cancelling only the refs still running after a short wait: 0 of 10 series.
    """
    if not HAS_RAY:
        pytest.skip(NO_RAY)
    import subprocess

    proc = subprocess.run([sys.executable, "-c", REPEATED_BAD_INPUT, "60"],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == "60 ['probe']"


def test_options_are_validated_and_unreachable_head_fails_fast():
    if not HAS_RAY:
        pytest.skip(NO_RAY)
    from dyna.experiment.ray_backend import RayBackend, _probe

    for kwargs, field in [({"workers": 0}, "--workers"), ({"max_retries": -1}, "max_retries"),
                          ({"address": " "}, "--address")]:
        with pytest.raises(ConfigError) as err:
            RayBackend(**kwargs)
        assert err.value.field == field
    assert get_backend("ray", 2).workers == 2
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="no Ray head answers") as err:
        _probe("127.0.0.1:1")     # nothing listens on port 1
    assert (err.value.field, err.value.value) == ("--address", "127.0.0.1:1")
    assert time.perf_counter() - t0 < 5.0
    with pytest.raises(ConfigError, match="port must be an integer"):
        _probe("head:port")
    assert cli.main(["run", "x.toml", "--address", "h:1"]) == 2   # --address needs ray


WITHOUT_RAY = """
import contextlib, io, json, sys
sys.modules["ray"] = None               # `import ray` now raises ImportError
from dyna import cli
from dyna.errors import ConfigError
from dyna.experiment.ray_backend import RayNotInstalledError
from dyna.experiment.registry import get_backend
try:
    get_backend("ray")
    kind = None
except RayNotInstalledError as err:
    kind = [isinstance(err, ImportError), isinstance(err, ConfigError)]
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    rc = cli.main(["run", sys.argv[1], "--backend", "ray", "--out", sys.argv[2]])
print(json.dumps({"kind": kind, "rc": rc, "out": out.getvalue(), "err": err.getvalue()}))
"""


def test_without_ray_one_line_and_exit_2(tmp_path):
    # In a child process: hiding Ray from sys.modules in this one, while the module's Ray
    # instance is live here, lets any Ray callback that imports fail inside Ray's threads.
    import subprocess

    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", WITHOUT_RAY,
                           str(REPO / "experiments" / "dyna_maze.toml"), str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["kind"] == [True, True]
    assert got["rc"] == 2
    assert got["err"] == ("dyna: error: --backend='ray': Ray is not installed; install it "
                          'with pip install -e ".[ray]"\n')
    assert got["out"] == ""
    assert not out.exists()


def test_agent_tasks_v1_two_scenarios_bit_identical_on_ray_and_the_process_pool(ray_backend,
                                                                                  tmp_path):
    """Issue "Agent tasks v2": two v1 scenarios, --runs 1, on Ray and on the process pool:
    the same table bytes."""
    import tomllib

    from dyna.experiment.backends import ProcessPoolBackend
    from dyna.experiment.registry import parse_experiment

    data = tomllib.loads((REPO / "experiments" / "agent_tasks_v2_skill.toml").read_text())
    data.pop("run", None)
    data["sweeps"] = [sw for sw in data["sweeps"] if sw["name"] == "learning_from_failure"]
    data["sweeps"][0]["values"] = [0.0, 0.5]
    data["hypotheses"] = []
    data["variants"] = ["no_learning", "naive_loop", "skill_loop"]
    data["episodes"] = 40
    cfg = parse_experiment(data, runs=1)
    assert len(cfg.scenarios) == 2
    with tables_only():
        ray = run_experiment(cfg, tmp_path / "ray", backend=ray_backend, block_size=1,
                             progress=False)
        pool = run_experiment(cfg, tmp_path / "pool", backend=ProcessPoolBackend(2),
                              block_size=1, progress=False)
    for name in ("episodes.parquet", "runs.parquet"):
        assert (ray / name).read_bytes() == (pool / name).read_bytes()


def test_ctrl_c_cancels_tasks_and_shuts_down_own_instance(ray_backend):
    """Last test of the module: it ends the module's Ray instance."""
    import ray

    from dyna.experiment.ray_backend import RayBackend

    def slow_unless_first(job):
        if job.variant != 0:
            time.sleep(60)
        return job.variant

    def interrupt(job, result):
        raise KeyboardInterrupt

    jobs = [Job(variant=v, point=0, run_indices=(0,)) for v in range(4)]
    joined = RayBackend()                  # not the instance's owner: cancels, keeps Ray up
    with pytest.raises(KeyboardInterrupt):
        joined.map(slow_unless_first, jobs, on_result=interrupt)
    assert ray.is_initialized()
    t0 = time.perf_counter()   # both CPUs free again: the 60 s task was stopped
    assert joined.map(operator.attrgetter("variant"), jobs[:2]) == [0, 1]
    assert time.perf_counter() - t0 < 30.0
    with pytest.raises(KeyboardInterrupt):
        ray_backend.map(slow_unless_first, jobs, on_result=interrupt)
    assert not ray.is_initialized()        # the owner shut its instance down
    # and put back the SIGTERM disposition it found (Ray's handler, sys.exit(15), had
    # outlived the instance before)
    assert signal.getsignal(signal.SIGTERM) is SIGTERM_BEFORE[-1]
