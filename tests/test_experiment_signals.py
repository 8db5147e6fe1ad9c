"""SIGTERM to ``dyna run`` behaves like Ctrl-C: worker processes are stopped, no output
folder (nor its hidden temporary sibling) is left, exit status 143, one line on stderr.

The processes are found through Linux's /proc (``/proc/PID/task/*/children``), so the tests
need no extra dependency; they are skipped where /proc does not list children.
"""

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dyna import cli

HAS_PROC = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists()
pytestmark = pytest.mark.skipif(not HAS_PROC, reason="needs Linux /proc/PID/task/*/children "
                                "to find the worker processes")

# One variant, 400 runs of Dyna-Q (n = 50) on the Dyna maze: about 13 s of work on 2 cores,
# so the sweep is surely still running when the signal arrives ~1 s after the workers start.
LONG = """
name = "sigterm_probe"
seed = 0
runs = 400
[env]
id = "dyna/DynaMaze-v0"
[schedule]
episodes = 50
[defaults]
agent = "dyna_q"
alpha = 0.1
gamma = 0.95
epsilon = 0.1
[[variants]]
name = "n50"
n_planning = 50
"""


def children(pid: int) -> list[int]:
    """Direct child pids of ``pid`` (all its threads), [] once it is gone."""
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        kids = children(todo.pop())
        found.update(kids)
        todo += kids
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def dyna_command() -> list[str]:
    script = Path(sys.executable).with_name("dyna")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dyna.cli"]


def terminate_mid_sweep(tmp_path: Path, backend: str, is_worker, n_workers: int = 2,
                        start_timeout: float = 60.0):
    """Start ``dyna run`` on LONG, wait for ``n_workers`` workers, SIGTERM the parent.

    Returns (exit status, stderr text, every descendant seen, the ones still alive after
    10 s). Any process left over is killed before returning, so a failure leaves no
    orphans behind.
    """
    toml = tmp_path / "long.toml"
    toml.write_text(LONG)
    out = tmp_path / "runs" / "out"
    err_path = tmp_path / "stderr.txt"
    seen: set[int] = set()
    with open(err_path, "w") as err:   # a file, not a pipe: a leaked worker would hold it
        proc = subprocess.Popen([*dyna_command(), "run", str(toml), "--out", str(out),
                                 "--backend", backend, "--workers", str(n_workers),
                                 "--no-progress"],
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            seen |= descendants(proc.pid)
            if sum(is_worker(cmdline(p)) for p in seen if alive(p)) >= n_workers:
                break
            assert proc.poll() is None, f"dyna run ended early: {err_path.read_text()}"
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        time.sleep(0.5)                  # let the workers pick up their jobs
        seen |= descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = {p for p in seen if alive(p)}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in seen:
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    return status, err_path.read_text(), seen, left


def test_sigterm_stops_process_pool_workers_and_leaves_no_folder(tmp_path):
    status, stderr, seen, left = terminate_mid_sweep(
        tmp_path, "process", lambda cmd: "multiprocessing.spawn" in cmd)
    assert status == 143 == cli.EXIT_SIGTERM
    assert stderr == "dyna: terminated (SIGTERM)\n"
    assert len(seen) >= 2
    assert left == set(), [cmdline(p) for p in left]
    # neither the output folder, nor its hidden temporary sibling, nor the created parent
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.toml", "stderr.txt"]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason='Ray is not installed (pip install -e ".[ray]")')
def test_sigterm_on_the_ray_backend_shuts_down_the_local_instance(tmp_path):
    # ray.init replaces the SIGTERM handler with Ray's (exit status 1 and a C++ stack
    # report); the backend keeps the CLI's, so the outcome matches the process pool's.
    status, stderr, seen, left = terminate_mid_sweep(
        tmp_path, "ray", lambda cmd: cmd.startswith("ray::portable_call"))
    assert status == 143
    assert stderr.splitlines()[-1] == "dyna: terminated (SIGTERM)"
    assert stderr.count("dyna:") == 1 and "SIGTERM received" not in stderr
    assert len(seen) >= 4                # gcs_server, raylet, agents and the 2 workers
    assert left == set()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.toml", "stderr.txt"]


def use_command(monkeypatch, func):
    """Make cli.main() run ``func(args)`` as the parsed sub-command."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=func)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)


def test_sigterm_handler_is_installed_only_while_a_command_runs(monkeypatch, capsys):
    """In-process: the handler turns SIGTERM into Terminated (a KeyboardInterrupt), main()
    reports it as one line with status 143 and puts the previous handler back."""
    seen = {}

    def command(args):
        seen["handler"] = signal.getsignal(signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)                    # the handler raises before this ends
        return 0

    use_command(monkeypatch, command)
    before = signal.getsignal(signal.SIGTERM)
    t0 = time.monotonic()
    assert cli.main([]) == 143
    assert time.monotonic() - t0 < 4
    assert seen["handler"] is cli._on_sigterm
    assert signal.getsignal(signal.SIGTERM) is before
    assert capsys.readouterr().err == "dyna: terminated (SIGTERM)\n"


def test_ctrl_c_still_exits_130_and_a_thread_leaves_signals_alone(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    use_command(monkeypatch, interrupted)
    assert cli.main([]) == 130
    assert capsys.readouterr().err == "dyna: interrupted\n"

    result = {}
    before = signal.getsignal(signal.SIGTERM)

    def ok(args):
        result["handler"] = signal.getsignal(signal.SIGTERM)
        return 0

    use_command(monkeypatch, ok)
    thread = threading.Thread(target=lambda: result.setdefault("status", cli.main([])))
    thread.start()
    thread.join(10)
    assert result == {"handler": before, "status": 0}   # signal.signal would fail off-main
