"""Execution backends: where the runner's independent jobs run.

A *job* is one variant at one sweep point for a contiguous block of run indices
(:class:`Job`). A backend maps a picklable, top-level job function over a list of jobs and
returns the results in job order; the runner then merges them in a canonical order
(variant, sweep point, first run index), so the output is bit-identical whichever backend ran
the jobs and however the runs were split into blocks (a run's random stream depends only on
``(seed, run_index)``).

Backends here: :class:`InProcessBackend` (no processes; the default) and
:class:`ProcessPoolBackend` (a local :class:`concurrent.futures.ProcessPoolExecutor` with the
``spawn`` start method, safe on every platform and with numba/threads in the parent). The
cluster backend :class:`dyna.experiment.ray_backend.RayBackend` (optional extra ``ray``)
implements the same two methods.
"""

from __future__ import annotations

import importlib
import inspect
import multiprocessing
import os
import pickle
import queue
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from dyna.errors import ConfigError

__all__ = ["Backend", "CarriedError", "InProcessBackend", "Job", "JobFailedError",
           "ProcessPoolBackend", "annotate", "portable_call", "split_runs"]


@dataclass(frozen=True)
class Job:
    """One unit of work: a variant at a sweep point for a block of runs.

    Attributes
    ----------
    variant : int
        Index of the variant in the config.
    point : int
        Index of the sweep point (0 without a sweep).
    run_indices : tuple of int
        Contiguous run indices of this block.
    payload : dict
        Everything the job function needs (agent, hparams, env id and kwargs, seed,
        schedule); plain picklable data so the job can cross process or machine borders.
    """

    variant: int
    point: int
    run_indices: tuple
    payload: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> tuple:
        """Canonical merge key ``(variant, point, first run index)``."""
        return (self.variant, self.point, self.run_indices[0])

    def describe(self) -> str:
        """Human-readable job name for error messages."""
        name = self.payload.get("variant_name", self.variant)
        runs = self.run_indices
        span = f"{runs[0]}" if len(runs) == 1 else f"{runs[0]}..{runs[-1]}"
        point = self.payload.get("point_kwargs") or {}
        where = f" at {point}" if point else ""
        return f"variant {name!r}{where}, runs {span}"


class JobFailedError(RuntimeError):
    """A job raised an exception that could not be carried back from its worker as is.

    The original type name and message are kept in the message.
    """


def split_runs(runs: int, block_size: int) -> list[tuple]:
    """Split run indices ``0..runs-1`` into contiguous blocks of at most ``block_size``.

    Parameters
    ----------
    runs : int
        Number of runs (>= 1).
    block_size : int
        Maximum runs per block (>= 1).

    Returns
    -------
    list of tuple of int
        The blocks in order, e.g. ``split_runs(5, 2) == [(0, 1), (2, 3), (4,)]``.
    """
    return [tuple(range(lo, min(lo + block_size, runs))) for lo in range(0, runs, block_size)]


class Backend(ABC):
    """Runs jobs and returns their results in job order.

    Subclasses implement :meth:`map` and :meth:`describe`.
    """

    #: Name used by ``--backend`` and recorded in the manifest.
    name: str = ""
    #: Parallel workers the runner may plan blocks for.
    workers: int = 1

    @abstractmethod
    def map(self, fn: Callable, jobs: Sequence[Job],
            on_result: Callable[[Job, object], None] | None = None) -> list:
        """Apply ``fn`` to every job.

        Parameters
        ----------
        fn : callable
            A picklable top-level function ``fn(job) -> result``.
        jobs : sequence of Job
            Jobs to run.
        on_result : callable, optional
            Called as ``on_result(job, result)`` in the calling process as each job finishes
            (any order), e.g. to advance a progress bar.

        Returns
        -------
        list
            ``[fn(job) for job in jobs]``, in the order of ``jobs``.

        Raises
        ------
        Exception
            The exception of the earliest failing job in the order of ``jobs`` (the lowest
            index), whichever job ends first, with a note naming the job: the same error on
            every run and backend. When a job fails, the jobs after it are cancelled (or
            their outcome ignored); the jobs before it still running are waited for, and
            the first of them to fail, if any, is raised instead.
        """

    def describe(self) -> dict:
        """JSON-ready description of the backend for the manifest."""
        return {"name": self.name, "workers": self.workers}


def annotate(exc: BaseException, job: Job) -> BaseException:
    """``exc`` with a note naming the job it came from (added once); returned for
    ``raise annotate(exc, job)``."""
    note = f"in job: {job.describe()}"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
    return exc


class InProcessBackend(Backend):
    """Run every job in the calling process, one after the other."""

    name = "inprocess"

    def __init__(self, workers: int = 1):
        self.workers = 1

    def map(self, fn, jobs, on_result=None):
        """Run the jobs one after the other, in order; see :meth:`Backend.map`.

        The first job to fail is the earliest in job order: its exception is raised (with a
        note naming the job) and the jobs after it are not run.
        """
        out = []
        for job in jobs:
            try:
                result = fn(job)
            except Exception as exc:
                raise annotate(exc, job)
            if on_result is not None:
                on_result(job, result)
            out.append(result)
        return out


class CarriedError(Exception):
    """Picklable stand-in for a worker exception whose own pickling fails.

    Exceptions with a custom ``__init__`` (such as :class:`dyna.errors.ConfigError`) do not
    survive pickling; their type and constructor arguments (read back from attributes of
    the same names) are carried instead and the exception is rebuilt in the parent, so a
    ConfigError raised in a worker is still a ConfigError (CLI exit status 2).
    """

    def rebuild(self) -> BaseException:
        """The worker's exception rebuilt from its type and constructor arguments, or a
        :class:`JobFailedError` with its type name and message when that fails."""
        module, qualname, kwargs, message = self.args
        if kwargs is not None:
            try:
                return getattr(importlib.import_module(module), qualname)(**kwargs)
            except Exception:
                pass
        return JobFailedError(f"{qualname}: {message}")


def _carry(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        pass
    cls = type(exc)
    kwargs = None
    try:
        names = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        if all(hasattr(exc, n) for n in names):
            kwargs = {n: getattr(exc, n) for n in names}
            pickle.dumps(kwargs)
    except Exception:
        kwargs = None
    return CarriedError(cls.__module__, cls.__qualname__, kwargs, str(exc))


#: Seconds between a worker's checks that its parent still lives.
PARENT_POLL_S = 1.0


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:   # re-parented: the sweep's process is gone
            os._exit(1)
        time.sleep(PARENT_POLL_S)


def _worker_init(parent: int | None = None) -> None:
    """Worker processes leave Ctrl-C to the parent, which cancels the sweep, and exit
    within :data:`PARENT_POLL_S` seconds of the death of ``parent`` (the sweep's process,
    passed in rather than read here: a worker still starting when the parent died is
    already re-parented), even by SIGKILL, which the parent cannot pass on."""
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                         name="dyna-parent-watch").start()


def _stop_workers(pool: ProcessPoolExecutor, timeout: float = 5.0) -> None:
    """Terminate a pool's workers and wait until they are gone (at most ``timeout`` s,
    then SIGKILL), including any worker the pool spawns meanwhile to replace a dead one;
    then release the pool's manager thread so the interpreter can exit.

    A worker killed while sending a result leaves half a message in the result pipe. The
    pool's manager thread, reading it, would wait for the rest forever (this process holds
    a write end of that pipe too, so the read never sees end-of-file), and the interpreter
    joins that thread at exit: the process hung there. Once every worker is gone, this
    closes our write end, the read ends in ``EOFError``, and the manager thread marks the
    pool broken and finishes (joined here, at most ``timeout`` s).
    """
    deadline = time.monotonic() + timeout
    # Take the worker handles, the result queue and the manager thread first: shutdown()
    # sets them to None (CPython 3.11+), after which nothing reaches them.
    seen: dict[int, multiprocessing.process.BaseProcess] = dict(
        getattr(pool, "_processes", None) or {})
    results = getattr(pool, "_result_queue", None)
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    while True:
        seen.update((getattr(pool, "_processes", None) or {}).copy())
        alive = [p for p in seen.values() if p.is_alive()]
        if not alive:
            break
        late = time.monotonic() > deadline
        for p in alive:
            if late:
                p.kill()
            else:
                p.terminate()
        for p in alive:
            p.join(timeout=0.2)
        if late:
            break
    if results is not None and not any(p.is_alive() for p in seen.values()):
        try:
            results._writer.close()
        except (AttributeError, OSError):
            pass
    if manager is not None:
        manager.join(timeout=max(0.0, deadline - time.monotonic()) + 1.0)


def portable_call(fn, job):
    """Run ``fn(job)`` in a worker process (of a pool or of Ray); an exception that cannot
    be pickled is raised as a :class:`CarriedError`, so it survives the trip back."""
    try:
        return fn(job)
    except Exception as exc:
        raise _carry(exc) from None


class ProcessPoolBackend(Backend):
    """Run jobs in a local pool of worker processes (``spawn`` start method).

    Parameters
    ----------
    workers : int, optional
        Worker processes; default ``os.cpu_count()``.

    Raises
    ------
    ConfigError
        ``workers`` < 1 (field ``"--workers"``).
    """

    name = "process"

    def __init__(self, workers: int | None = None):
        if workers is None:
            workers = os.cpu_count() or 1
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError("--workers", workers, "must be an integer >= 1")
        self.workers = workers

    def map(self, fn, jobs, on_result=None):
        """Run the jobs on the pool; results in job order; see :meth:`Backend.map`.

        When jobs fail, the exception raised (with a note naming the job; a worker's
        exception that cannot be pickled is rebuilt, a :class:`~dyna.errors.ConfigError`
        stays one, others become :class:`JobFailedError`) is that of the earliest failing
        job in job order, not the first to end: after job ``k`` fails, the jobs before
        ``k`` still running are waited for (a failure among them takes over), the jobs
        after ``k`` not yet started are cancelled and the outcome of the others ignored
        (those running are waited for at the pool's shutdown, as before).
        """
        jobs = list(jobs)
        if not jobs:
            return []
        ctx = multiprocessing.get_context("spawn")
        results: dict[int, object] = {}
        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(jobs)), mp_context=ctx,
                                   initializer=_worker_init, initargs=(os.getpid(),))
        # Each future reports its own completion on a queue. concurrent.futures.wait over
        # the pending set costs O(pending) per call (a waiter installed on every future,
        # new sets built): with 6,160 one-run jobs that is ~8 ms per call, several calls a
        # second, and the parent took ~11% of a core from the workers on a 2-core machine.
        finished: queue.SimpleQueue = queue.SimpleQueue()
        futures = []
        # Jobs whose outcome still matters: all of them, then, once job k has failed, only
        # those before k (the earliest failure in job order is raised, whichever ends first).
        waiting = set(range(len(jobs)))
        cutoff = len(jobs)          # index of the earliest failure so far
        failure = None              # its exception
        try:
            for i, job in enumerate(jobs):
                fut = pool.submit(portable_call, fn, job)
                fut.add_done_callback(lambda f, i=i: finished.put((i, f)))
                futures.append(fut)
            while waiting:
                # wake at least every 0.2 s: results (and the progress bar) are handled as
                # jobs finish, and a signal delivered to another thread of this process is
                # acted on at once (the main thread runs Python's signal handlers)
                try:
                    i, fut = finished.get(timeout=0.2)
                except queue.Empty:
                    continue
                if i not in waiting:    # after the earliest failure (or cancelled)
                    continue
                waiting.discard(i)
                exc = fut.exception()
                if exc is not None:
                    # later jobs cannot change the outcome: drop them, cancel those not
                    # started (the running ones end in the shutdown below, as before)
                    for j in range(i + 1, cutoff):
                        if j in waiting:
                            waiting.discard(j)
                            futures[j].cancel()
                    cutoff, failure = i, exc
                    continue
                results[i] = fut.result()
                if on_result is not None:
                    on_result(jobs[i], results[i])
            if failure is not None:
                if isinstance(failure, CarriedError):
                    failure = failure.rebuild()
                raise annotate(failure, jobs[cutoff])
        except KeyboardInterrupt:
            # Ctrl-C, or SIGTERM turned into dyna.cli.Terminated by the CLI. Workers ignore
            # SIGINT (the parent decides) and never see a SIGTERM sent to the parent alone;
            # stop them now rather than let them finish their jobs for nobody or outlive us.
            _stop_workers(pool)
            raise
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return [results[i] for i in range(len(jobs))]
