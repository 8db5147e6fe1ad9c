"""The render worker of ``dyna run`` (dyna.experiment.render_worker): plots and report drawn
in a second process give the same bytes as drawn in-process; every way the worker can fail
ends in the in-process rendering (or the same typed error), never a half-written folder,
a hang or an orphan process."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dyna.errors import ConfigError
from dyna.experiment import render_worker, runner
from dyna.experiment.registry import load_experiment
from dyna.experiment.render_worker import RenderWorker, serve

ROOT = Path(__file__).resolve().parents[1]
MAZE = ROOT / "experiments" / "dyna_maze.toml"
RUNS = 3


@pytest.fixture(autouse=True)
def _fixed_revision(monkeypatch):
    # the shared work tree's dirty flag may change between two runs of one test
    monkeypatch.setattr(runner, "project_revision", lambda: {"commit": "0" * 40,
                                                             "dirty": False})
    monkeypatch.delenv("DYNA_RENDER", raising=False)
    monkeypatch.delenv("DYNA_RENDER_TIMEOUT", raising=False)
    # dyna run's default (auto) starts the worker only on a free core: here, always
    monkeypatch.setattr(render_worker, "free_cores", lambda: 1.0)


@pytest.fixture
def spy(monkeypatch):
    """Every RenderWorker made, and what each render() returned or raised."""
    made, calls = [], []
    init, render = RenderWorker.__init__, RenderWorker.render

    def spy_init(self, proc):
        init(self, proc)
        made.append(self)

    def spy_render(self, *args, **kwargs):
        try:
            out = render(self, *args, **kwargs)
        except render_worker.WorkerFailed as exc:
            calls.append(exc)
            raise
        calls.append(out)
        return out

    monkeypatch.setattr(RenderWorker, "__init__", spy_init)
    monkeypatch.setattr(RenderWorker, "render", spy_render)
    return made, calls


def _config():
    return load_experiment(MAZE, runs=RUNS)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _assert_same_output(a: Path, b: Path) -> None:
    """Same files, same bytes; manifest.json apart from created_utc and the timing values,
    report.md apart from its time line."""
    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    assert {"results.parquet", "runs.parquet", "manifest.json", "report.md",
            "plots/steps_per_episode.png", "plots/steps_per_episode.svg"} <= set(fa)
    for name in fa:
        if name == "manifest.json":
            ma, mb = json.loads(fa[name]), json.loads(fb[name])
            ta, tb = ma.pop("timing"), mb.pop("timing")
            assert list(ta) == list(tb) == ["compile_time_s", "run_time_s",
                                            "output_time_s", "wall_time_s"]
            assert all(v > 0 for v in [*ta.values(), *tb.values()])
            ma.pop("created_utc"), mb.pop("created_utc")
            assert ma == mb
        elif name == "report.md":
            la = [ln for ln in fa[name].decode().splitlines() if not ln.startswith("- time:")]
            lb = [ln for ln in fb[name].decode().splitlines() if not ln.startswith("- time:")]
            assert len(la) == len(lb) > 20
            assert la == lb
        else:
            assert fa[name] == fb[name], name


@pytest.fixture(scope="module")
def serial_output(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial") / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "project_revision", lambda: {"commit": "0" * 40, "dirty": False})
        runner.run_experiment(_config(), out, progress=False, render="serial")
    return out


def test_worker_output_is_the_serial_output_byte_for_byte(tmp_path, spy, serial_output):
    made, calls = spy
    out = runner.run_experiment(_config(), tmp_path / "w", progress=False, render="worker")
    assert len(made) == 1 and len(calls) == 1 and isinstance(calls[0], dict)
    assert made[0].proc.returncode == 0          # it answered, exited and was reaped
    timing = json.loads((out / "manifest.json").read_text())["timing"]
    # the manifest holds the worker's measurement, and the report says the same numbers
    assert timing["output_time_s"] == calls[0]["output_time_s"]
    assert timing["wall_time_s"] == calls[0]["wall_time_s"] >= timing["output_time_s"]
    report = (out / "report.md").read_text()
    assert f"output {timing['output_time_s']:.2f} s, total {timing['wall_time_s']:.2f} s" \
        in report
    _assert_same_output(out, serial_output)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_dyna_run_uses_the_worker_and_dyna_render_serial_does_not(tmp_path, spy,
                                                                  monkeypatch, capsys):
    from dyna.cli import main

    made, calls = spy
    assert main(["run", str(MAZE), "--runs", str(RUNS), "--out", str(tmp_path / "w"),
                 "--no-progress"]) == 0
    assert len(made) == 1 and isinstance(calls[0], dict)
    monkeypatch.setenv("DYNA_RENDER", "serial")
    assert main(["run", str(MAZE), "--runs", str(RUNS), "--out", str(tmp_path / "s"),
                 "--no-progress"]) == 0
    assert len(made) == 1                        # no second worker was started
    _assert_same_output(tmp_path / "w", tmp_path / "s")
    monkeypatch.setenv("DYNA_RENDER", "sideways")
    capsys.readouterr()
    assert main(["run", str(MAZE), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dyna: error: DYNA_RENDER")
    assert "'sideways'" in err[0]
    assert not (tmp_path / "x").exists() and len(made) == 1


def test_a_library_call_renders_in_process_unless_asked(tmp_path, spy, monkeypatch):
    made, _ = spy
    runner.run_experiment(_config(), tmp_path / "a", progress=False)
    assert made == []
    monkeypatch.setenv("DYNA_RENDER", "worker")
    runner.run_experiment(_config(), tmp_path / "b", progress=False)
    assert len(made) == 1
    with pytest.raises(ConfigError) as err:
        runner.run_experiment(_config(), tmp_path / "c", render="both")
    assert err.value.field == "render"
    monkeypatch.setenv("DYNA_RENDER_TIMEOUT", "-1")
    with pytest.raises(ConfigError) as err:
        runner.run_experiment(_config(), tmp_path / "d", render="worker")
    assert err.value.field == "DYNA_RENDER_TIMEOUT" and not (tmp_path / "d").exists()


# Fake workers: each reads (or not) the parent's message and misbehaves in one way.
_JUNK = """
import json, sys, pathlib
msg = json.loads(sys.stdin.readline())
folder = pathlib.Path(msg["folder"])
(folder / "plots").mkdir(exist_ok=True)
(folder / "plots" / "steps_per_episode.png").write_bytes(b"half a png")
(folder / "report.md").write_text("# half a report")
(folder / "stray.txt").write_text("x")
sys.exit(1)
"""
FAKES = {
    "cannot start": None,
    "dies at once": "import sys; sys.exit(3)",
    "answers nonsense": "import sys; sys.stdin.readline(); print('{\"ok\": tru')",
    "answers bad timing": ("import sys, json; sys.stdin.readline(); print(json.dumps("
                           "{'ok': True, 'timing': {'output_time_s': -1, "
                           "'wall_time_s': float('nan')}}))"),
    "reports an error": ("import sys, json; sys.stdin.readline(); print(json.dumps("
                         "{'ok': False, 'error': 'ConfigError: boom'}))"),
    "says ok, did nothing": ("import sys, json; sys.stdin.readline(); print(json.dumps("
                             "{'ok': True, 'timing': {'output_time_s': 1.0, "
                             "'wall_time_s': 2.0}}))"),
    "hangs": "import time; time.sleep(120)",
    "writes half, then dies": _JUNK,
}


@pytest.mark.parametrize("how", list(FAKES))
def test_a_failing_worker_leaves_the_serial_output(tmp_path, spy, monkeypatch, how,
                                                   serial_output):
    made, calls = spy
    code = FAKES[how]
    argv = ["/nonexistent/python"] if code is None else [sys.executable, "-c", code]
    monkeypatch.setattr(render_worker, "_command", lambda kind: argv)
    monkeypatch.setenv("DYNA_RENDER_TIMEOUT", "2")
    t0 = time.monotonic()
    out = runner.run_experiment(_config(), tmp_path / "o", progress=False, render="worker")
    if code is None:
        assert made == [] and calls == []
    else:
        assert len(made) == 1 and len(calls) == 1
        assert isinstance(calls[0], render_worker.WorkerFailed)
        assert made[0].proc.returncode is not None        # stopped and reaped
    if how == "hangs":
        assert "no answer within 2 s" in str(calls[0])
        assert time.monotonic() - t0 < 60                  # not the fake's 120 s
    _assert_same_output(out, serial_output)


def test_what_the_worker_prints_on_stderr_reaches_the_parents_stderr(tmp_path, spy,
                                                                     monkeypatch, capsys,
                                                                     serial_output):
    made, calls = spy
    script = ("import sys; print('a warning while drawing', file=sys.stderr); "
              "from dyna.experiment.render_worker import main; main()")
    monkeypatch.setattr(render_worker, "_command", lambda kind: [
        sys.executable, "-c", script, "--kind", kind, "--parent", str(os.getpid())])
    capsys.readouterr()
    out = runner.run_experiment(_config(), tmp_path / "o", progress=False, render="worker")
    assert isinstance(calls[0], dict)           # the worker did the job
    assert capsys.readouterr().err.count("a warning while drawing") == 1
    _assert_same_output(out, serial_output)


def test_a_worker_failure_then_an_error_in_process_is_that_typed_error(tmp_path, spy,
                                                                       monkeypatch):
    from dyna.experiment.kinds.tabular import plots

    made, _ = spy
    monkeypatch.setattr(render_worker, "_command", lambda kind: [
        sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(1)"])

    def broken(out, folder):
        (Path(folder) / "plots").mkdir()
        raise ConfigError("analysis.metrics", "steps_per_episode", "cannot be drawn")

    monkeypatch.setattr(plots, "draw_plots", broken)
    with pytest.raises(ConfigError) as err:
        runner.run_experiment(_config(), tmp_path / "o", progress=False, render="worker")
    assert err.value.field == "analysis.metrics"
    assert list(tmp_path.iterdir()) == [] and made[0].proc.returncode is not None


def test_ctrl_c_during_the_runs_stops_the_worker_and_leaves_no_folder(tmp_path, spy,
                                                                      monkeypatch):
    from dyna.experiment.kinds.tabular import job as tabular_job

    made, calls = spy

    def interrupted(job):
        raise KeyboardInterrupt

    monkeypatch.setattr(tabular_job, "execute_job", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.run_experiment(_config(), tmp_path / "o", progress=False, render="worker")
    assert len(made) == 1 and calls == []
    assert made[0].proc.returncode is not None
    assert list(tmp_path.iterdir()) == []


def test_the_worker_exits_when_its_stdin_closes_without_a_job():
    worker = RenderWorker.start("tabular")
    assert worker is not None
    worker.proc.stdin.close()
    assert worker.proc.wait(timeout=60) == 0
    worker.close()


# --------------------------------------------------------------------------- the message

class _Kind:
    """Records whether it was asked to draw (it must not be, for a refused message)."""

    def __init__(self):
        self.drawn = []

    def draw_plots(self, out, folder):
        self.drawn.append(folder)
        return []

    def write_report(self, out, folder):
        (Path(folder) / "report.md").write_text("report\n")


def _message(folder: Path, tables: dict, objects=None, **extra) -> bytes:
    if objects is None:
        objects = base64.b64encode(pickle.dumps(({"a": 1}, {"timing": {}}))).decode()
    msg = {"v": 1, "folder": str(folder), "tables": tables,
           "elapsed": {"output": 0.5, "wall": 1.0}, "sent": time.time(),
           "objects": objects, **extra}
    return json.dumps(msg).encode()


@pytest.fixture
def job_folder(tmp_path):
    import polars as pl

    folder = tmp_path / f".out.tmp-{os.getpid()}-123-0123abcd-xyz"
    folder.mkdir()
    pl.DataFrame({"x": [1, 2, 3]}).write_parquet(folder / "results.parquet")
    digest = hashlib.sha256((folder / "results.parquet").read_bytes()).hexdigest()
    return folder, {"results.parquet": digest}


def test_a_good_message_is_rendered_with_the_measured_times(job_folder):
    folder, tables = job_folder
    kind = _Kind()
    answer = serve(kind, _message(folder, tables), os.getpid())
    assert answer["ok"] is True and kind.drawn == [folder]
    assert answer["timing"]["output_time_s"] >= 0.5
    assert answer["timing"]["wall_time_s"] - answer["timing"]["output_time_s"] == \
        pytest.approx(0.5, abs=1e-3)
    assert (folder / "report.md").read_text() == "report\n"


@pytest.mark.parametrize("case", ["other process", "outside", "relative", "traversal",
                                  "symlink table", "edited table", "bad global",
                                  "bad elapsed", "not json"])
def test_a_refused_message_writes_nothing(job_folder, tmp_path, case):
    folder, tables = job_folder
    pid = os.getpid()
    if case == "other process":
        pid += 1
        msg = _message(folder, tables)
    elif case == "outside":
        msg = _message(tmp_path, tables)
    elif case == "relative":
        msg = _message(Path(folder.name), tables)
    elif case == "traversal":
        msg = _message(folder, {"../results.parquet": tables["results.parquet"]})
    elif case == "symlink table":
        (folder / "runs.parquet").symlink_to(folder / "results.parquet")
        msg = _message(folder, {**tables, "runs.parquet": tables["results.parquet"]})
    elif case == "edited table":
        msg = _message(folder, {"results.parquet": "0" * 64})
    elif case == "bad global":
        msg = _message(folder, tables,
                       objects=base64.b64encode(pickle.dumps((os.system, {}))).decode())
    elif case == "bad elapsed":
        msg = _message(folder, tables, elapsed={"output": -1, "wall": 1})
    else:
        msg = b"{not json"
    before = sorted(p.name for p in folder.iterdir())
    kind = _Kind()
    answer = serve(kind, msg, pid)
    assert answer["ok"] is False and answer["error"].startswith("message refused")
    assert kind.drawn == [] and sorted(p.name for p in folder.iterdir()) == before


# --------------------------------------------------------------------------- signals

def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_dyna_run_leaves_no_worker(tmp_path, sig):
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DYNA_RENDER": "worker"}
    proc = subprocess.Popen([sys.executable, "-m", "dyna.cli", "run", str(MAZE), "--out",
                             str(out), "--no-progress"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    kids = []
    while not kids and time.monotonic() < deadline and proc.poll() is None:
        kids = _children(proc.pid)
        time.sleep(0.005)
    assert kids, "dyna run started no worker"
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == (128 + signal.SIGTERM if sig == signal.SIGTERM else -sig)
    deadline = time.monotonic() + 10
    while not all(_gone(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(k) for k in kids)
    if sig == signal.SIGTERM:                  # cleaned up: nothing left at all
        assert list(tmp_path.iterdir()) == []
    assert not out.exists()


def test_worker_module_runs_as_a_script_and_refuses_a_bad_command_line():
    done = subprocess.run([sys.executable, "-m", "dyna.experiment.render_worker"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "--kind" in done.stderr
    script = textwrap.dedent("""
        import os, subprocess, sys
        p = subprocess.run([sys.executable, "-m", "dyna.experiment.render_worker",
                            "--kind", "tabular", "--parent", str(os.getpid())],
                           input=b"", capture_output=True)
        print(p.returncode, len(p.stdout))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.stdout.split() == ["0", "0"], done.stderr


def test_the_worker_imports_the_parents_dyna_and_no_site_folder_goes_first(monkeypatch):
    import site

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = render_worker._environment()
    assert env["PYTHONPATH"] == f"{ROOT}{os.pathsep}/elsewhere"   # a checkout: first
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(ROOT)])
    assert render_worker._environment()["PYTHONPATH"] == "/elsewhere"   # installed


def test_a_kind_that_renders_in_process_stops_its_speculative_worker(tmp_path, spy,
                                                                      monkeypatch):
    from dyna.cli import main
    from dyna.experiment.kinds.tabular.kind import TabularKind

    made, calls = spy
    monkeypatch.delattr(TabularKind, "preload_render")   # as the other kinds are
    assert main(["run", str(MAZE), "--runs", str(RUNS), "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 0
    assert len(made) == 1 and calls == []        # started from the file, never used
    assert made[0].proc.returncode is not None
    worker = RenderWorker.start("escalation")   # on its own it exits 0 at once
    assert worker.proc.wait(timeout=60) == 0
    worker.close()
