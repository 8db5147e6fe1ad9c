"""Render an experiment's plots and report in a second process while the runs go on.

``dyna run`` spends most of its time not in the runs but in imports: the runs need numba
and the compiled kernels, the plots and report need matplotlib and scipy.stats (bootstrap
intervals), each some tenths of a second. Done one after the other they make the whole
process about as slow as a plain-Python Dyna-Q (issue 17, "Speed of the first seconds").
So ``dyna run`` starts this module as a fresh process (``python -m
dyna.experiment.render_worker``; a new interpreter, never a fork of a process whose numba
or polars threads exist) first thing, for a kind in :data:`WORKER_KINDS` (read from the
TOML file without importing the kind), and
:func:`dyna.experiment.runner.run_experiment` as soon as it knows the kind, for any other
kind that offers ``preload_render()``; in both cases only when a core is free for it
(:func:`free_cores`) or ``DYNA_RENDER=worker`` asks for it. The worker imports what
rendering needs while the parent imports numba, loads the kernels and runs, in two steps:

1. at once, what writes no file (the kind's ``preload_render_early()``: scipy.stats and
   the report's modules, about three quarters of the time), while the parent reads and
   validates the config;
2. only when the parent says "go" (:meth:`RenderWorker.go`: one byte on a pipe of its
   own, ``--go-fd``), which it does once the config is validated and the kind has
   resolved its inputs (the run will render), the rest (``preload_render()``:
   matplotlib, which creates its config and cache folders, ``~/.config/matplotlib`` and
   ``~/.cache/matplotlib`` or wherever ``MPLCONFIGDIR`` says, and may write its font
   list there, when imported).

So a rejected config creates nothing anywhere: the pipe closes without a "go" and the
worker exits 0 having written nothing. When the parent has written the tables into its
temporary output folder it sends one JSON line on the worker's stdin, and the worker draws
the plots (PNG and SVG) and writes ``report.md`` into that folder, answers one JSON line
on stdout and exits 0. The parent then writes ``manifest.json`` and renames the folder
into place, as the serial path does; the files are the same bytes either way.

The message (parent to worker) is ``{"v": 1, "folder": <absolute path of the temporary
output folder>, "tables": {<file name>: <sha256>}, "elapsed": {"output": s, "wall": s},
"sent": <epoch seconds>, "objects": <base64 of a pickle of (config, manifest)>}``; the answer is ``{"ok": true,
"timing": {"output_time_s": s, "wall_time_s": s}}`` or ``{"ok": false, "error": "..."}``.
The config and manifest are pickled so the worker gets the parent's objects exactly (a
config rebuilt from JSON would have to be validated again, which imports the agents and
numba); they are unpickled with a restricted unpickler that loads no global but the
dataclasses of ``dyna.experiment`` modules already imported.

What the worker trusts: only its stdin, a pipe its parent made. Even so it writes nowhere
but the folder named in the message, and only if that folder is a real folder (not a
symbolic link) named as its parent's temporary output folder (``.<name>.tmp-<parent pid>-
...``, :func:`dyna.store.tmpfiles.make_temp_dir`); table names are plain ``<word>.parquet``
names of regular files in it with the sha256 the parent sent.

Robustness: the parent treats any failure of the worker (it cannot start, dies, answers
nonsense, reports an error, or does not answer within :func:`reply_timeout` seconds) by
stopping it, removing whatever it wrote and rendering in its own process, so errors are
the same typed errors (and exit statuses) as without a worker, and no half-written folder
is left. The worker exits (status 0, nothing written) when the "go" pipe or its stdin
closes without a word (the parent stopped early: a rejected config, an error before the
runs), on Linux when its parent dies (``PR_SET_PDEATHSIG``), and quietly on Ctrl-C; the
parent stops and reaps it on every exit path (errors, Ctrl-C, SIGTERM). Started without
``--go-fd`` (by hand), the job line itself is the "go".

``dyna run`` uses the worker where the kind offers one and a core is free for it
(:func:`free_cores`; ``DYNA_RENDER=auto``, the default), always with ``DYNA_RENDER=worker``
and never with ``DYNA_RENDER=serial`` (environment); a program calling
:func:`~dyna.experiment.runner.run_experiment` renders in its own process unless it passes
``render="worker"`` (or ``"auto"``) or sets ``DYNA_RENDER`` (so a test that patches a plot
function, or a caller that runs many small experiments, gets what it had).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import math
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

from dyna.errors import ConfigError
from dyna.experiment.helper_process import (DEFAULT_TIMEOUT, ENV_MODE,  # noqa: F401
                                            ENV_TIMEOUT, _die_with_parent, _environment,
                                            reply_timeout, usable_cores)

__all__ = ["RenderWorker", "WorkerFailed", "free_cores", "main", "render_mode",
           "reply_timeout", "start_render_worker"]

#: Message format version (parent and worker are the same installed dyna).
VERSION = 1
_MODES = ("worker", "serial", "auto")
_TABLE_RE = re.compile(r"[A-Za-z0-9_]+\.parquet\Z")
#: The built-in kinds that offer ``preload_render`` (render in a worker), so ``dyna run``
#: starts the worker before it imports any kind, and for no other kind.
WORKER_KINDS = frozenset({"tabular"})
#: Where Linux tells the number of running tasks (:func:`free_cores`).
LOADAVG = "/proc/loadavg"


class WorkerFailed(Exception):
    """The render worker did not do the job (the parent renders in its own process)."""


def render_mode(default: str) -> str:
    """Where plots and report are drawn: ``"worker"`` or ``"serial"``.

    Read from the environment variable ``DYNA_RENDER``; empty or unset: ``default``
    (``dyna run`` passes ``"auto"``, a library call of ``run_experiment`` ``"serial"``).
    ``"auto"`` is resolved here: ``"worker"`` when a core is free for it
    (:func:`free_cores` >= 1), else ``"serial"`` -- on a busy machine the worker only
    adds its own start-up and imports to a core the runs need.

    Raises
    ------
    ConfigError
        Field ``DYNA_RENDER``: a value other than worker, serial or auto.
    """
    value = os.environ.get(ENV_MODE, "").strip() or default
    if value not in _MODES:
        raise ConfigError(ENV_MODE, value, f"must be one of {list(_MODES)} (environment)")
    if value == "auto":
        return "worker" if free_cores() >= 1 else "serial"
    return value


def free_cores() -> float:
    """Cores this process may use that no other task needs now (may be negative).

    The usable cores (``os.sched_getaffinity``) less this process and the tasks that are
    running or runnable at this moment (the fourth field of Linux's ``/proc/loadavg``,
    which counts the reader itself), so a machine whose other cores are busy with other
    jobs gives < 1. The 1-minute load average would count this command's own previous
    seconds (a benchmark's rounds, a script's loop of runs) as other work; it is used only
    where ``/proc/loadavg`` cannot be read.

    Returns
    -------
    float
        ``usable - 1 - others``; ``others`` a whole number (or the load average).
    """
    usable = usable_cores()
    try:
        with open(LOADAVG, "rb") as fh:
            running = int(fh.read().split()[3].split(b"/")[0])
        others = float(max(0, running - 1))
    except (OSError, ValueError, IndexError):
        try:
            others = max(0.0, os.getloadavg()[0])
        except (AttributeError, OSError):
            others = 0.0
    return usable - 1 - others


def _command(kind_name: str) -> list[str]:
    """The worker's command line (a fresh interpreter running this module)."""
    # -P: the working directory is not put on sys.path (a polars.py or dyna/ there would
    # run in the worker); the worker finds dyna through PYTHONPATH (_environment)
    return [sys.executable, "-P", "-m", "dyna.experiment.render_worker", "--kind", kind_name,
            "--parent", str(os.getpid())]


# --------------------------------------------------------------------------- parent side

def start_render_worker(kind_name: str, mode: str | None = None) -> "RenderWorker | None":
    """Start a render worker for ``kind_name`` now, to hand to
    :func:`~dyna.experiment.runner.run_experiment` (``worker=``) once the config is read.
    This module imports nothing heavy, so ``dyna run`` calls this before it imports the
    runner (polars, gymnasium: ~0.25 s the worker would otherwise wait for), and only for a
    kind in :data:`WORKER_KINDS` (known without importing the kind; for another kind that
    offers ``preload_render``, ``run_experiment`` starts the worker once the kind is known).

    Parameters
    ----------
    kind_name : str
        The config's kind.
    mode : {"worker", "serial"}, optional
        Already decided (:func:`render_mode`); default ``render_mode("auto")``.

    Returns
    -------
    RenderWorker or None
        None in serial mode (``DYNA_RENDER=serial``, or ``auto`` with no core free for
        the worker: :func:`render_mode`), for a kind not in :data:`WORKER_KINDS`, or when
        no process could be started.

    Raises
    ------
    ConfigError
        ``DYNA_RENDER`` is not worker, serial or auto (only when ``mode`` is None).
    """
    if mode is None:
        mode = render_mode("auto")
    if mode != "worker" or kind_name not in WORKER_KINDS:
        return None
    return RenderWorker.start(kind_name)


class RenderWorker:
    """The parent's handle on one render worker process (one job, then it exits).

    Use :meth:`start`, then :meth:`render` once, and :meth:`close` on every exit path.
    """

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self._go: int | None = None     # write end of the "go" pipe, until go() or close()

    @classmethod
    def start(cls, kind_name: str) -> "RenderWorker | None":
        """Start a worker that preloads what ``kind_name``'s plots and report need: what
        writes no file at once, the rest (matplotlib) after :meth:`go`.

        Returns
        -------
        RenderWorker or None
            None when the process cannot be started (the caller renders serially).
        """
        command = list(_command(kind_name))
        read_end = write_end = None
        if os.name == "posix":   # elsewhere no pass_fds: the job line is the "go"
            try:
                read_end, write_end = os.pipe()     # neither inheritable (PEP 446)
                command = [*command, "--go-fd", str(read_end)]
            except OSError:
                return None
        try:
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, close_fds=True,
                                    pass_fds=() if read_end is None else (read_end,),
                                    env=_environment())
        except (OSError, ValueError, subprocess.SubprocessError):
            if write_end is not None:
                os.close(write_end)
            return None
        finally:
            if read_end is not None:
                os.close(read_end)
        worker = cls(proc)
        worker._go = write_end
        return worker

    def go(self) -> None:
        """Tell the worker the run will render (the config is valid and resolved): it
        imports matplotlib now, which creates matplotlib's config and cache folders.
        Idempotent, never raises (a worker that died is found out by :meth:`render`)."""
        fd, self._go = self._go, None
        if fd is None:
            return
        try:
            os.write(fd, b"g")
        except OSError:     # the worker is gone (EPIPE): render() reports it
            pass
        finally:
            os.close(fd)

    def render(self, folder: Path, config, manifest: dict, tables: dict[str, str],
               elapsed: dict[str, float], timeout: float) -> dict[str, float]:
        """Hand the job to the worker and wait for it.

        Parameters
        ----------
        folder : Path
            The temporary output folder holding the tables (absolute or not).
        config, manifest
            The experiment's config object and the manifest so far.
        tables : dict of str to str
            Table file name -> sha256 of the file in ``folder``.
        elapsed : dict
            ``{"output": s, "wall": s}``: seconds since the output phase and the run began;
        the worker adds the seconds from now (the message carries the epoch time) until
        its plots are drawn, as the serial path measures its output phase.
        timeout : float
            Seconds to wait for the answer.

        Returns
        -------
        dict
            ``{"output_time_s": s, "wall_time_s": s}`` as the worker measured them. What
            the worker wrote on stderr (warnings) is passed on to this process's stderr,
            but only when it succeeded: after a failure the in-process rendering prints
            it again.

        Raises
        ------
        WorkerFailed
            Whatever went wrong (the worker is stopped before this returns).
        """
        self.go()     # a caller that skipped it: the job is the "go"
        try:
            objects = base64.b64encode(pickle.dumps((config, manifest), protocol=5)).decode()
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            self.close()
            raise WorkerFailed(f"the config cannot be sent ({exc})") from None
        message = json.dumps({"v": VERSION, "folder": str(Path(folder).resolve()),
                              "tables": tables, "elapsed": elapsed, "sent": time.time(),
                              "objects": objects})
        try:
            out, err = self.proc.communicate((message + "\n").encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise WorkerFailed(f"no answer within {timeout:g} s") from None
        except (OSError, ValueError) as exc:   # the worker died before reading
            self.close()
            raise WorkerFailed(f"could not hand over the job ({exc})") from None
        if self.proc.returncode != 0:
            raise WorkerFailed(f"exit status {self.proc.returncode}")
        timing = _parse_reply(out)
        if not (Path(folder) / "report.md").is_file():
            raise WorkerFailed("answered ok but wrote no report.md")
        if err:   # what drawing printed (matplotlib's warnings), as it would in-process
            sys.stderr.write(err.decode("utf-8", errors="replace"))
            sys.stderr.flush()
        return timing

    def close(self) -> None:
        """Stop the worker if it still runs and reap it (idempotent, never raises). Before
        :meth:`go` the "go" pipe closes unsaid: the worker has imported nothing that writes
        a file and exits at once if it is not killed first."""
        fd, self._go = self._go, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        proc = self.proc
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:   # pragma: no cover -- SIGKILL was sent
            pass


def _parse_reply(raw: bytes) -> dict[str, float]:
    """The timing in the worker's answer (last line of its stdout), checked."""
    try:
        lines = raw.decode("utf-8").strip().splitlines()
        reply = json.loads(lines[-1]) if lines else None
    except (UnicodeDecodeError, ValueError):
        reply = None
    if not isinstance(reply, dict):
        raise WorkerFailed("malformed answer")
    if reply.get("ok") is not True:
        raise WorkerFailed(f"the worker failed: {str(reply.get('error'))[:500]}")
    timing = reply.get("timing")
    keys = ("output_time_s", "wall_time_s")
    if not (isinstance(timing, dict) and set(timing) == set(keys)
            and all(isinstance(timing[k], (int, float)) and not isinstance(timing[k], bool)
                    and math.isfinite(timing[k]) and timing[k] >= 0 for k in keys)):
        raise WorkerFailed("malformed timing in the answer")
    return {k: float(timing[k]) for k in keys}


# --------------------------------------------------------------------------- worker side

class _Unpickler(pickle.Unpickler):
    """Loads no global but dataclasses defined in already-imported ``dyna.experiment``
    modules (the config objects); everything else in the message is plain data."""

    def find_class(self, module, name):
        mod = sys.modules.get(module)
        obj = getattr(mod, name, None) if mod is not None else None
        if (module.startswith("dyna.experiment.") and isinstance(obj, type)
                and dataclasses.is_dataclass(obj)):
            return obj
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")


def _check_folder(raw, parent: int) -> Path:
    if not isinstance(raw, str) or not os.path.isabs(raw):
        raise ValueError(f"folder {raw!r}: not an absolute path")
    folder = Path(raw)
    pattern = re.compile(r"\..+\.tmp-" + str(parent) + r"-\d+-[0-9a-f]{8}-[A-Za-z0-9_]+\Z")
    if not pattern.match(folder.name):
        raise ValueError(f"folder {raw!r}: not the temporary output folder of process "
                         f"{parent}")
    if folder.is_symlink() or not folder.is_dir():
        raise ValueError(f"folder {raw!r}: not a folder")
    return folder


def _read_tables(folder: Path, listed) -> dict:
    import polars as pl

    if not isinstance(listed, dict) or not listed:
        raise ValueError("tables: expected a table of file names and sha256 digests")
    tables = {}
    for name, digest in listed.items():
        if not isinstance(name, str) or not _TABLE_RE.match(name):
            raise ValueError(f"table {name!r}: not a plain <name>.parquet file name")
        path = folder / name
        if path.is_symlink() or not path.is_file():
            raise ValueError(f"table {name!r}: not a regular file in the folder")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"table {name!r}: sha256 differs from the parent's")
        tables[name[:-len(".parquet")]] = pl.read_parquet(io.BytesIO(data))
    return tables


def _seconds(value, what: str) -> float:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0):
        raise ValueError(f"{what} {value!r}: expected seconds >= 0")
    return float(value)


def _elapsed(msg: dict) -> tuple[float, float, float]:
    raw = msg.get("elapsed")
    if not isinstance(raw, dict):
        raise ValueError("elapsed: expected a table")
    return (_seconds(raw.get("output"), "elapsed.output"),
            _seconds(raw.get("wall"), "elapsed.wall"), _seconds(msg.get("sent"), "sent"))


def serve(kind, line: bytes, parent: int) -> dict:
    """Do the job one message asks for; return the answer (``ok`` true or false).

    Parameters
    ----------
    kind : ExperimentKind
        The kind whose ``draw_plots`` and ``write_report`` render.
    line : bytes
        The parent's message (one JSON line, the module docstring).
    parent : int
        The parent's process id (the temporary folder must be named for it).

    Returns
    -------
    dict
        ``{"ok": True, "timing": {...}}``, or ``{"ok": False, "error": "..."}`` when the
        message is refused or rendering raised.
    """
    from dyna.experiment.protocol import ExperimentOutput

    try:
        msg = json.loads(line.decode("utf-8"))
        if not isinstance(msg, dict) or msg.get("v") != VERSION:
            raise ValueError("not a version-1 render message")
        folder = _check_folder(msg.get("folder"), parent)
        out_s, wall_s, sent = _elapsed(msg)
        tables = _read_tables(folder, msg.get("tables"))
        objects = msg.get("objects")
        if not isinstance(objects, str):
            raise ValueError("objects: expected base64 text")
        config, manifest = _Unpickler(io.BytesIO(base64.b64decode(objects,
                                                                   validate=True))).load()
        if not isinstance(manifest, dict) or not isinstance(manifest.get("timing"), dict):
            raise ValueError("objects: no manifest with a timing table")
    except (ValueError, TypeError, OSError, pickle.UnpicklingError, EOFError,
            AttributeError) as exc:
        return {"ok": False, "error": f"message refused: {exc}"}
    try:
        output = ExperimentOutput(config=config, manifest=manifest, tables=tables)
        kind.draw_plots(output, folder)
        spent = max(0.0, time.time() - sent)   # the parent's clock: the same machine
        timing = {"output_time_s": round(out_s + spent, 4),
                  "wall_time_s": round(wall_s + spent, 4)}
        manifest["timing"].update(timing)
        kind.write_report(output, folder)
    except Exception as exc:  # noqa: BLE001 -- the parent renders again and raises it
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "timing": timing}


def _wait_for_go(go_fd: int) -> str:
    """Wait for the parent's word: ``"go"`` (a byte on ``go_fd``), ``"stop"`` (``go_fd``
    closed unsaid) or ``"stdin"`` (stdin can be read first: a job line, which is a "go"
    too, or its end); ``go_fd`` is closed when it has spoken."""
    import select

    try:
        ready, _, _ = select.select([go_fd, sys.stdin.buffer.fileno()], [], [])
    except (OSError, ValueError):   # not a usable descriptor: the job line says go
        return "stdin"
    if go_fd not in ready:
        return "stdin"
    try:
        said = os.read(go_fd, 1)
    except OSError:
        said = b""
    try:
        os.close(go_fd)
    except OSError:
        pass
    return "go" if said else "stop"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m dyna.experiment.render_worker --kind K --parent PID
    [--go-fd FD]``.

    Preloads what of the kind's rendering writes no file (``preload_render_early``), waits
    for the parent's "go" (one byte on FD; without ``--go-fd``, the job line), preloads the
    rest (``preload_render``: matplotlib, which creates its config and cache folders),
    reads one message, renders, answers; exit status 0 after an answer (even ``ok:
    false``), 0 when the "go" pipe or stdin closes without a word (nothing written), 2 on
    a bad command line, 130 on Ctrl-C.
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dyna.experiment.render_worker")
    ap.add_argument("--kind", required=True)
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--go-fd", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        _die_with_parent(args.parent)
        from dyna.experiment.registry import get_kind

        kind = get_kind(args.kind)
        preload = getattr(kind, "preload_render", None)
        if not callable(preload):
            return 0                  # a kind that renders only in its own process
        early = getattr(kind, "preload_render_early", None)
        if callable(early):
            early()                   # writes no file: done while the parent validates
        heard = _wait_for_go(args.go_fd) if args.go_fd is not None else "stdin"
        if heard == "stop":
            return 0                  # the parent stopped before the run: nothing to do
        if heard == "go":
            preload()                 # matplotlib: while the parent runs
            line = sys.stdin.buffer.readline()
            if not line.strip():
                return 0              # the parent closed the pipe: nothing to do
        else:                         # the job line (or the end of stdin) comes first
            line = sys.stdin.buffer.readline()
            if not line.strip():
                return 0              # the parent closed the pipe: nothing to do
            preload()
        answer = serve(kind, line, args.parent)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
        # the job is done and its files are closed: skip the interpreter's tear-down of
        # matplotlib, polars and scipy (~0.2-0.5 s the parent would wait for)
        os._exit(0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
