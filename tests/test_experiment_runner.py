"""Experiment runner: output folder contents, exact transfer of agent results, determinism
across backends and block sizes, atomic output."""

import functools
import hashlib
import json
import operator
import re
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import envs
from conftest import tables_only
from dyna.agents import run_agent
from dyna.errors import ConfigError, UnknownEnvError, check_range
from dyna.experiment import runner
from dyna.experiment.kinds.tabular import job as tabular_job
from dyna.experiment.backends import InProcessBackend, Job, ProcessPoolBackend, split_runs
from dyna.experiment.registry import get_backend, load_experiment, parse_experiment
from dyna.experiment.runner import load_output, run_experiment

REPO = Path(__file__).resolve().parents[1]


def config(**changes):
    data = {
        "name": "tiny",
        "seed": 5,
        "runs": 3,
        "env": {"id": "dyna/DynaMaze-v0"},
        "schedule": {"episodes": 4, "eval_every": 2, "eval_episodes": 1},
        "defaults": {"agent": "dyna_q", "alpha": 0.1, "gamma": 0.95, "epsilon": 0.1},
        "variants": [{"name": "n=0", "n_planning": 0}, {"name": "n=5", "n_planning": 5}],
    }
    data.update(changes)
    return parse_experiment(data)


def test_episode_outputs_match_the_agents_exactly(tmp_path):
    cfg = config()
    out = run_experiment(cfg, tmp_path / "out")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["evals.parquet", "manifest.json", "plots", "report.md", "results.parquet",
                     "runs.parquet"]
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "eval_score.png", "eval_score.svg", "steps_per_episode.png", "steps_per_episode.svg"]
    res = pl.read_parquet(out / "results.parquet")
    assert res.columns == ["variant", "agent", "run", "episode", "steps", "return",
                           "terminated", "updates"]
    assert res.height == 2 * 3 * 4
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    for variant in cfg.variants:
        direct = run_agent(variant.agent, variant.hparams, table, seed=5, run_indices=[0, 1, 2],
                           episodes=4, eval_every=2, eval_episodes=1)
        rows = res.filter(pl.col("variant") == variant.name).sort("run", "episode")
        np.testing.assert_array_equal(rows.get_column("steps").to_numpy().reshape(3, 4),
                                      direct.episode_steps)
        np.testing.assert_array_equal(rows.get_column("updates").to_numpy().reshape(3, 4),
                                      direct.episode_updates)
        ev = pl.read_parquet(out / "evals.parquet").filter(pl.col("variant") == variant.name)
        assert ev.get_column("episode").to_list() == [2, 4] * 3
        np.testing.assert_array_equal(ev.get_column("score").to_numpy().reshape(3, 2),
                                      direct.eval_score)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config_hash"] == cfg.hash
    assert manifest["seed"] == 5 and manifest["runs"] == 3
    assert manifest["config"] == json.loads(json.dumps(cfg.to_dict()))
    assert manifest["envs"][0]["meta"]["resolved_id"] == "dyna/DynaMaze-v0"
    assert manifest["envs"][0]["meta"]["optimal_path_length"] == 14
    assert manifest["packages"]["numpy"] == np.__version__
    assert manifest["backend"]["name"] == "inprocess"
    assert set(manifest["timing"]) == {"compile_time_s", "run_time_s", "output_time_s",
                                       "wall_time_s"}
    digest = hashlib.sha256((out / "results.parquet").read_bytes()).hexdigest()
    assert manifest["tables"]["results.parquet"] == {"rows": 24, "sha256": digest}


def test_total_steps_rows_are_logged_cumulative_rewards(tmp_path):
    cfg = config(env={"id": "dyna/BlockingMaze-v0", "kwargs": {"change_at": 100}},
                 schedule={"total_steps": 200, "log_every": 7},
                 variants=[{"name": "plus", "agent": "dyna_q_plus", "alpha": 1.0,
                            "kappa": 1e-3}])
    out = run_experiment(cfg, tmp_path / "o")
    res = pl.read_parquet(out / "results.parquet")
    assert res.columns == ["variant", "agent", "run", "step", "reward", "cumulative_reward"]
    steps = list(range(7, 200, 7)) + [200]
    assert res.filter(pl.col("run") == 0).get_column("step").to_list() == steps
    table, meta = envs.make_table("dyna/BlockingMaze-v0", change_at=100)
    direct = run_agent("dyna_q_plus", cfg.variants[0].hparams, table, seed=5,
                       run_indices=[0, 1, 2], total_steps=200)
    cum = np.cumsum(direct.step_reward, axis=1)[:, np.array(steps) - 1]
    np.testing.assert_array_equal(
        res.sort("run", "step").get_column("cumulative_reward").to_numpy().reshape(3, -1), cum)
    per_run_reward = res.group_by("run").agg(pl.col("reward").sum()).sort("run")
    np.testing.assert_array_equal(per_run_reward.get_column("reward").to_numpy(),
                                  direct.step_reward.sum(axis=1))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["envs"][0]["meta"]["change_at"] == [100]


def _table_bytes(folder):
    return {name: (folder / name).read_bytes()
            for name in ("results.parquet", "evals.parquet", "runs.parquet")}


def test_bit_identical_across_backends_and_block_sizes(tmp_path):
    cfg = config(runs=5, env={"id": "dyna/AsciiMaze-v0"}, sweep={"resolution": [1, 2]},
                 variants=[{"name": "dq", "n_planning": 3},
                           {"name": "ps", "agent": "prioritized_sweeping", "n_planning": 3}])
    with tables_only():
        ref = run_experiment(cfg, tmp_path / "ref")
    ref_bytes = _table_bytes(ref)
    ref_frame = pl.read_parquet(ref / "results.parquet")
    assert ref_frame.columns[:4] == ["variant", "agent", "resolution", "run"]
    assert ref_frame.height == 2 * 2 * 5 * 4
    for name, backend, block in [("b1", InProcessBackend(), 1),
                                 ("b2", InProcessBackend(), 2),
                                 ("pool", ProcessPoolBackend(2), 3)]:
        with tables_only():
            out = run_experiment(cfg, tmp_path / name, backend=backend, block_size=block)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["backend"]["block_size"] == block
        assert manifest["backend"]["jobs"] == 2 * 2 * len(split_runs(5, block))
        assert pl.read_parquet(out / "results.parquet").equals(ref_frame)
        assert _table_bytes(out) == ref_bytes, name


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    with tables_only():
        a = run_experiment(config(), tmp_path / "a")
        b = run_experiment(config(), tmp_path / "b")
        c = run_experiment(config(seed=6), tmp_path / "c")
    assert _table_bytes(a) == _table_bytes(b)
    assert _table_bytes(a)["results.parquet"] != _table_bytes(c)["results.parquet"]


def test_stop_at_optimal_records_updates_and_drops_unplayed_episodes(tmp_path):
    cfg = config(env={"id": "dyna/AsciiMaze-v0"},
                 schedule={"episodes": 300, "stop_at_optimal": True, "optimal_tolerance": 1.2,
                           "eval_every": 10, "eval_episodes": 1},
                 variants=[{"name": "ps", "agent": "prioritized_sweeping", "alpha": 0.5,
                            "n_planning": 5}])
    out = run_experiment(cfg, tmp_path / "o")
    table, meta = envs.make_table("dyna/AsciiMaze-v0")
    direct = run_agent("prioritized_sweeping", cfg.variants[0].hparams, table, seed=5,
                       run_indices=[0, 1, 2], episodes=300, optimal_length=16,  # floor(14*1.2)
                       eval_every=10, eval_episodes=1)
    runs = pl.read_parquet(out / "runs.parquet")
    expected = [int(u) if u >= 0 else None for u in direct.updates_to_optimal]
    assert runs.get_column("updates_to_optimal").to_list() == expected
    assert any(u is not None for u in expected)
    res = pl.read_parquet(out / "results.parquet")
    assert res.height == int((direct.episode_steps > 0).sum())
    assert res.get_column("steps").min() > 0
    assert (out / "plots" / "updates_to_optimal.png").is_file()
    # evaluations after a run stopped (NaN from the agent) get no row
    evals = pl.read_parquet(out / "evals.parquet")
    assert evals.height == int(np.isfinite(direct.eval_score).sum())
    assert evals.get_column("score").is_nan().sum() == 0
    found = int((direct.updates_to_optimal >= 0).sum())
    assert f"| {found}/3 |" in (out / "report.md").read_text()


def test_failing_job_leaves_no_folder(tmp_path, monkeypatch):
    calls = []
    real = tabular_job.execute_job

    def flaky(job):
        calls.append(job.key)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return real(job)

    monkeypatch.setattr(tabular_job, "execute_job", flaky)
    parent = tmp_path / "deep" / "er"
    with pytest.raises(RuntimeError, match="boom") as err:
        run_experiment(config(), parent / "out")
    assert any("variant 'n=5'" in note for note in err.value.__notes__)
    assert not (tmp_path / "deep").exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("exc", [KeyboardInterrupt, OSError])
def test_interrupted_writing_leaves_no_folder(tmp_path, monkeypatch, exc):
    from dyna.experiment.kinds.tabular import report

    def broken(*args, **kwargs):
        raise exc("stop")

    monkeypatch.setattr(report, "write_report", broken)
    with pytest.raises(exc):
        run_experiment(config(), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []   # neither the folder nor its hidden temp sibling


def test_bad_env_and_existing_folder_fail_before_writing(tmp_path):
    with pytest.raises(UnknownEnvError) as err:
        run_experiment(config(env={"id": "dyna/NoSuchMaze-v0"}), tmp_path / "x")
    assert err.value.field == "env.id"
    with pytest.raises(ConfigError) as err:
        run_experiment(config(env={"id": "dyna/DynaMaze-v0", "kwargs": {"size": 3}}),
                       tmp_path / "x")
    assert err.value.field == "env.kwargs.size"
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConfigError) as err:
        run_experiment(config(), tmp_path / "taken")
    assert err.value.field == "--out"
    assert list((tmp_path / "taken").iterdir()) == []


def test_default_out_dir_is_name_and_timestamp(tmp_path):
    out = run_experiment(config(), root=tmp_path / "runs")
    assert out.parent == tmp_path / "runs"
    # <name>-<YYYYmmdd-HHMMSS>-<8 hex>: two runs started in the same second differ
    assert re.fullmatch(r"tiny-\d{8}-\d{6}-[0-9a-f]{8}", out.name), out.name
    second = runner.default_out_dir(config(), tmp_path / "runs")
    assert second != out


def test_load_output_round_trip(tmp_path):
    cfg = config()
    out = run_experiment(cfg, tmp_path / "o")
    loaded = load_output(out)
    assert loaded.config == cfg
    assert loaded.results.equals(pl.read_parquet(out / "results.parquet"))
    assert loaded.evals is not None and loaded.evals.height == 2 * 3 * 2
    assert loaded.env_metas[0]["n_states"] == 54


def test_process_pool_returns_in_job_order_and_carries_config_errors():
    jobs = [Job(variant=v, point=0, run_indices=r) for v in (1, 0) for r in ((0, 1), (2,))]
    pool = ProcessPoolBackend(2)
    seen = []
    out = pool.map(operator.attrgetter("run_indices"), jobs,
                   on_result=lambda job, res: seen.append(job.key))
    assert out == [(0, 1), (2,), (0, 1), (2,)]
    assert sorted(seen) == sorted(j.key for j in jobs)
    with pytest.raises(ConfigError) as err:   # ConfigError does not pickle by itself
        pool.map(functools.partial(check_range, "probe"), jobs[:1])
    assert err.value.field == "probe"
    assert any("variant 1" in n for n in err.value.__notes__)


def test_backend_registry_and_split():
    assert get_backend("inprocess").name == "inprocess"
    assert get_backend("process", 3).workers == 3
    with pytest.raises(ConfigError) as err:
        get_backend("ray2")
    assert (err.value.field, err.value.value) == ("--backend", "ray2")
    with pytest.raises(ConfigError):
        get_backend("process", 0)
    assert split_runs(5, 2) == [(0, 1), (2, 3), (4,)]
    assert split_runs(3, 10) == [(0, 1, 2)]


def test_figure_8_2_numbers_with_ten_runs(tmp_path):
    """Sutton & Barto Figure 8.2 through the runner: episode 2 takes several hundred steps
    for n = 0 and under ~60 for n = 50; every n settles near 14 steps + exploration."""
    cfg = load_experiment(REPO / "experiments" / "dyna_maze.toml", runs=10)
    with tables_only():
        out = run_experiment(cfg, tmp_path / "fig82")
    res = pl.read_parquet(out / "results.parquet")
    ep2 = dict(res.filter(pl.col("episode") == 2).group_by("variant")
               .agg(pl.col("steps").mean()).iter_rows())
    late = dict(res.filter(pl.col("episode") >= 40).group_by("variant")
                .agg(pl.col("steps").mean()).iter_rows())
    assert ep2["n=0"] > 200
    assert ep2["n=50"] < 60
    assert ep2["n=0"] > ep2["n=5"] > ep2["n=50"]
    for name in ("n=0", "n=5", "n=50"):
        assert 14.5 <= late[name] <= 20.0


def test_process_pool_interrupt_propagates_and_stops_workers():
    jobs = [Job(variant=0, point=0, run_indices=(r,)) for r in range(6)]
    pool = ProcessPoolBackend(2)

    def interrupt(job, result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pool.map(operator.attrgetter("run_indices"), jobs, on_result=interrupt)
    import multiprocessing

    # every worker is gone when map re-raises: no join, no grace period. (It used to
    # terminate nothing -- shutdown() drops the pool's process table before _stop_workers
    # read it -- so the workers' own exit raced this assertion: 1 full-suite run in ~8.)
    assert multiprocessing.active_children() == []


def test_process_pool_workers_exit_when_the_parent_is_killed(tmp_path):
    """SIGKILL of the sweep's process (nothing can be passed on) still ends its workers,
    within about PARENT_POLL_S seconds, instead of leaving them running jobs for nobody."""
    import signal
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing, sys, time
        from dyna.experiment.backends import Job, ProcessPoolBackend

        def slow(job):
            time.sleep(120)

        if __name__ == "__main__":
            import threading
            def report():
                while len(multiprocessing.active_children()) < 2:
                    time.sleep(0.05)
                print(" ".join(str(p.pid) for p in multiprocessing.active_children()),
                      flush=True)
            threading.Thread(target=report, daemon=True).start()
            ProcessPoolBackend(2).map(slow, [Job(0, 0, (r,)) for r in range(2)])
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            cwd=str(tmp_path))
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]
        assert len(pids) == 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        alive = pids
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [p for p in pids if _alive(p)]
        assert alive == []
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()


def test_interrupted_process_pool_lets_the_interpreter_exit(tmp_path):
    """Workers killed while sending a large result leave half a message in the result pipe;
    the pool's manager thread must not wait for the rest at interpreter exit (before the
    fix this script printed its line, then hung until killed: 3 of 3 runs)."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "big.py"
    script.write_text(textwrap.dedent("""
        import time
        from dyna.experiment.backends import Job, ProcessPoolBackend

        def big(job):
            time.sleep(0.3 + 0.05 * job.run_indices[0])
            return b"x" * (40 * 1024 * 1024)

        def stop(job, result):
            raise KeyboardInterrupt

        if __name__ == "__main__":
            try:
                ProcessPoolBackend(2).map(big, [Job(0, 0, (r,)) for r in range(8)], stop)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
    """))
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              cwd=str(tmp_path), timeout=60)
        assert (proc.returncode, proc.stdout) == (0, "interrupted\n"), proc.stderr[-2000:]
        assert "leaked semaphore" not in proc.stderr


def _alive(pid: int) -> bool:
    import os

    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
