"""Kind ``agent_tasks``: draw scenario figures in helper processes.

An agent-tasks experiment draws one many-panel figure per scenario (22 in the registered
sweeps, about 2 s each), one after the other in one process: a third of a ``--runs 1``
look. :func:`draw_all` shares them out between this process and n - 1 helpers
(``python -P -m dyna.experiment.kinds.agent_tasks.figure_helper``, each a fresh
interpreter, never a fork of a process whose polars threads exist; ``-P``: the working
directory is not on its path). This module is the parent's side; it imports nothing of
the plots, which hand it the figure function.

A helper is handed one figure at a time from a queue this process also takes from (after
drawing the summary figures and computing the report's statistics), so no process idles
while another has several figures left. The message to a helper (its stdin, a pipe its
parent made; closed when the queue is empty) is, per figure, one JSON line ``{"i":
<index>, "scenario": <name>, "same": [<variant>...], "folder": <absolute path>, "note":
<text under the title, may be empty>, "config": {"name", "store", "variants", "window",
"chosen_family", "runs", "seed"}, "sizes": [<bytes>...]}`` followed by that many bytes
of each series table in Arrow IPC (one per row of the figure,
:data:`~dyna.experiment.kinds.agent_tasks.plots.ROWS` order; the drift episodes are the
rows whose ``drift`` column is true). No pickle: nothing in the message can run code.
The helper answers one JSON line ``{"i": <index>, "paths": [...]}`` on stdout per figure
saved, and exits 0 when its stdin closes.

Robustness: a figure a helper did not report (it could not start, died, answered
nonsense, or did not finish within :func:`dyna.experiment.helper_process.reply_timeout`
seconds) is drawn by this process after the helper is stopped, so a failure raises the
same typed error as drawing in one process would, and the files are the same bytes
either way (a figure depends on its arguments only). A helper writes only
``scenario_<name>.png|.svg`` into the folder it is given, which must already be a real
folder (not a symbolic link); it exits when its parent dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import io
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["draw_all"]


def _config_fields(cfg) -> dict:
    """What a scenario figure reads of the experiment's config, as JSON values."""
    return {"name": cfg.name, "store": cfg.store, "variants": list(cfg.variants),
            "window": int(cfg.analysis["window"]),
            "chosen_family": int(cfg.analysis["chosen_family"]), "runs": int(cfg.runs),
            "seed": int(cfg.seed)}


def _encode(i: int, job: tuple, rows) -> bytes:
    """One figure's message (module docstring); ``rows``: the series' keys in order."""
    cfg, scenario, sub, same, folder, note = job
    blobs = []
    for key in rows:
        buf = io.BytesIO()
        sub[key].write_ipc(buf)
        blobs.append(buf.getvalue())
    head = {"i": i, "scenario": scenario, "same": sorted(same),
            "folder": str(Path(folder).resolve()), "note": note, "config": _config_fields(cfg),
            "sizes": [len(b) for b in blobs]}
    return json.dumps(head).encode() + b"\n" + b"".join(blobs)


def _start():
    """A helper process, or None when none can be started."""
    from dyna.experiment.helper_process import child_environment

    try:
        return subprocess.Popen(
            [sys.executable, "-P", "-m", "dyna.experiment.kinds.agent_tasks.figure_helper",
             "--parent", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True, env=child_environment())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _take(left: queue.SimpleQueue) -> int | None:
    """The next figure not yet taken (None: all are), from the queue this process and
    the threads that feed the helpers share."""
    try:
        return left.get_nowait()
    except queue.Empty:
        return None


def _feed(proc, jobs, rows, left: queue.SimpleQueue, done: dict) -> None:
    """Hand ``proc`` one figure at a time until the queue is empty, reading its answer
    after each into ``done``; at the first failure (the helper died, answered nonsense or
    was stopped) the helper is given up: the figure it had stays out of ``done`` and is
    drawn by the parent, as are the figures still queued."""
    try:
        while True:
            i = _take(left)
            if i is None:
                break
            proc.stdin.write(_encode(i, jobs[i], rows))
            proc.stdin.flush()
            msg = json.loads(proc.stdout.readline())
            paths = [Path(p) for p in msg["paths"]]
            if int(msg["i"]) != i or not all(p.is_file() for p in paths):
                raise ValueError("not the figure asked for")
            done[i] = paths
    except (OSError, ValueError, KeyError, TypeError):
        pass
    finally:
        try:
            proc.stdin.close()
        except (OSError, ValueError):
            pass


def draw_all(jobs: list[tuple], processes: int, here=None, *, draw, rows) -> list[list[Path]]:
    """Each job's figure (``draw(*job)``,
    :func:`~dyna.experiment.kinds.agent_tasks.plots.scenario_figure`), in order, drawn by
    ``processes`` processes: this one and ``processes - 1`` helpers, which take the
    figures one at a time from one queue (so a slow figure or a slow process does not
    leave the others idle).

    Parameters
    ----------
    jobs : list of tuple
        :func:`~dyna.experiment.kinds.agent_tasks.plots.scenario_job` results: (config,
        scenario, series by row, same, folder, note).
    processes : int
        >= 1; 1 draws every figure here.
    here : callable, optional
        Work of this process (no arguments) done first, while the helpers start and draw;
        then this process takes figures from the queue too.

    Returns
    -------
    list of list of Path
        Each job's files.

    Raises
    ------
    Exception
        Whatever ``here`` or drawing a figure raises (drawn here when a helper did not),
        after every helper is stopped.
    """
    from dyna.experiment.helper_process import reply_timeout

    n = max(1, min(int(processes), len(jobs)))
    if n <= 1:
        if here is not None:
            here()
        return [draw(*job) for job in jobs]
    for job in jobs:
        Path(job[4]).mkdir(parents=True, exist_ok=True)
    left: queue.SimpleQueue = queue.SimpleQueue()
    for i in range(len(jobs)):
        left.put(i)
    done: dict[int, list[Path]] = {}
    helpers = []
    try:
        for _ in range(n - 1):
            proc = _start()
            if proc is None:
                continue
            feeder = threading.Thread(target=_feed, args=(proc, jobs, rows, left, done),
                                      daemon=True)
            feeder.start()
            helpers.append((proc, feeder))
        if here is not None:
            here()
        while (i := _take(left)) is not None:
            done[i] = draw(*jobs[i])
        deadline = time.monotonic() + reply_timeout()
        for proc, feeder in helpers:
            feeder.join(max(0.0, deadline - time.monotonic()))
    finally:
        # stopped on every path: a helper whose feeder still runs (it hung past the
        # timeout, or this process failed) is killed, which also frees its feeder from a
        # blocked write or read; the others saw their stdin close and exit by themselves
        for proc, feeder in helpers:
            if feeder.is_alive():
                proc.kill()
            feeder.join(timeout=10)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            try:
                proc.stdout.close()
            except (OSError, ValueError):
                pass
    for i in range(len(jobs)):
        if i not in done:          # a helper failed or hung: drawn here (same bytes)
            done[i] = draw(*jobs[i])
    return [done[i] for i in range(len(jobs))]
