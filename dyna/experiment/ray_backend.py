"""Ray backend: run the runner's jobs on a Ray cluster, or on a local Ray instance.

The jobs are the runner's own (:class:`dyna.experiment.backends.Job`: one variant at one
sweep point for a block of run indices) and each becomes one Ray task that calls the same
top-level job function the other backends call. Results come back as the same arrays and
:meth:`RayBackend.map` returns them in job order, so the runner merges them in its canonical
order and the output tables are bit-identical to the in-process backend's for the same config
and seed (a run's random stream depends only on ``(seed, run_index)``).

Where it runs

* ``address=None`` (``dyna run FILE --backend ray``): start a local Ray instance sized to this
  machine (``os.cpu_count()`` CPUs, or ``workers``), without dashboard, without forwarding
  worker logs, every Ray service bound to the loopback address; it is shut down when the
  sweep ends (or on Ctrl-C).
* ``address="HOST:PORT"`` or ``"auto"`` (``--address ADDR``): join an existing cluster started
  with Ray's own ``ray start --head`` / ``ray start --address=...``; the connection is closed
  at the end, the cluster keeps running.
* If this process is already connected to Ray (``ray.init`` was called), that connection is
  used and left open.

Failures

* A job that raises is run again, up to ``max_retries`` more times (Ray's own ``max_retries``
  covers system failures such as a worker process dying; application exceptions are retried
  by this backend's loop, since Ray does not retry them by default).
* A job that still fails is recorded and the sweep goes on. When every other job has
  finished, :class:`JobsFailedError` is raised: it names each failed job by variant, sweep
  point, runs and seed, and carries the results of the jobs that finished
  (``JobsFailedError.results``) and the failures (``JobsFailedError.failures``).
* A job raising a :class:`dyna.errors.DynaError` (bad input: deterministic, so retrying is
  pointless) stops the sweep, as with the other backends, and that error propagates
  unchanged (with a note naming the job), so the CLI prints it as one line with status 2.
  With several, it is the earliest job's in job order, whichever ends first: the jobs
  before it still running are waited for, those after it dropped (see :meth:`RayBackend.map`).
* Ctrl-C (``KeyboardInterrupt``, also when raised by the ``on_result`` callback) closes
  what this backend opened: a local instance it started is shut down, a connection it
  opened to a cluster is closed (Ray then ends that job's tasks). When the process was
  already connected (``ray.init`` called elsewhere), the tasks still running are cancelled
  (``ray.cancel(force=True)``) after a short wait that leaves finishing tasks alone (a
  cancel racing a task's completion can abort the driver in Ray 2.x); a bad-input error
  with ``keep_alive`` cancels the same way. The runner writes its output folder only after
  ``map`` returns, so nothing is left on disk. SIGTERM to ``dyna run`` does the same (exit status
  143): the CLI's SIGTERM handler, which ``ray.init`` would replace, is kept.

Ray is an optional extra (``pip install -e ".[ray]"``); without it, constructing the backend
raises :class:`RayNotInstalledError`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence

from dyna.errors import ConfigError, DynaError
from dyna.experiment.backends import Backend, CarriedError, Job, annotate, portable_call

__all__ = ["INSTALL_HINT", "JobsFailedError", "RayBackend", "RayNotInstalledError"]

#: How to install the optional dependency.
INSTALL_HINT = 'pip install -e ".[ray]"'

# Ray reads this at import: "0" makes a local node use the loopback address (Ray's own
# switch for machines that are not meant to form clusters).
_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

# Seconds between checks for finished tasks (also the latency of Ctrl-C while waiting).
_POLL_S = 0.1
_CANCEL_GRACE_S = 0.05   # wait for finishing tasks before cancelling the rest (s)

# Seconds to wait for a TCP connection to a cluster's head before giving up.
_CONNECT_TIMEOUT_S = 5.0


class RayNotInstalledError(ConfigError, ImportError):
    """``--backend ray`` was asked for but Ray is not importable.

    The message says how to install it (``pip install -e ".[ray]"``).
    """

    def __init__(self, field: str = "--backend", value: object = "ray",
                 reason: str = f"Ray is not installed; install it with {INSTALL_HINT}"):
        super().__init__(field, value, reason)


class JobsFailedError(DynaError, RuntimeError):
    """Some jobs still failed after their retries; every other job finished.

    Attributes
    ----------
    failures : list of (Job, BaseException, int)
        Each failed job, its last exception and how many times it was attempted.
    results : dict of int -> object
        Results of the jobs that finished, keyed by their index in the ``jobs`` given to
        :meth:`RayBackend.map`.
    jobs : list of Job
        All jobs of the sweep.
    """

    def __init__(self, failures: list, results: dict, jobs: list):
        self.failures = failures
        self.results = results
        self.jobs = jobs
        parts = []
        for job, exc, attempts in failures:
            seed = job.payload.get("seed")
            where = f"{job.describe()}" + (f", seed {seed}" if seed is not None else "")
            parts.append(f"{where} ({type(exc).__name__}: {exc}; {attempts} attempts)")
        done = len(results)
        super().__init__(f"{len(failures)} of {len(jobs)} jobs failed: {'; '.join(parts)}; "
                         f"{done} other job{'' if done == 1 else 's'} finished")


def _import_ray(*, loopback: bool):
    """Import Ray, or raise :class:`RayNotInstalledError`.

    With ``loopback`` and Ray not yet imported, Ray is imported with its cluster switch off,
    so that a local instance binds its services to the loopback address only.
    """
    module = sys.modules.get("ray")
    if module is not None:
        return module
    saved = os.environ.get(_LOOPBACK_ENV)
    if loopback and saved is None:
        os.environ[_LOOPBACK_ENV] = "0"
    try:
        import ray
    except ImportError:
        raise RayNotInstalledError() from None
    finally:
        if loopback and saved is None:
            os.environ.pop(_LOOPBACK_ENV, None)
    return ray


def _probe(address: str, timeout: float = _CONNECT_TIMEOUT_S) -> None:
    """Fail fast when nothing listens at a ``HOST:PORT`` address.

    Ray itself keeps retrying an unreachable head for minutes. ``"auto"``, ``"local"`` and
    ``scheme://`` addresses are left to Ray.

    Raises
    ------
    ConfigError
        ``address`` is malformed or refuses a TCP connection within ``timeout`` seconds
        (field ``"--address"``).
    """
    if "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        port_number = int(port)
    except ValueError:
        raise ConfigError("--address", address, "port must be an integer") from None
    try:
        with socket.create_connection((host.strip("[]"), port_number), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError("--address", address, f"no Ray head answers there ({exc}); start "
                          "one with `ray start --head`") from None


@contextlib.contextmanager
def _keep_sigterm_handler():
    """Keep a Python SIGTERM handler the caller installed across ``ray.init``.

    ``ray.init`` replaces the SIGTERM handler with Ray's own, which kills the local Ray
    processes and exits with status 1 after a multi-line C++ stack report. When the caller
    already handles SIGTERM (the ``dyna`` CLI turns it into
    :class:`dyna.cli.Terminated`, a KeyboardInterrupt), that handler is put back, so
    :meth:`RayBackend.map` stops its tasks and shuts the instance down exactly as for
    Ctrl-C. With no Python handler installed (default disposition), Ray's is kept: it is
    better than dying with the Ray processes left running.
    """
    in_main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if in_main else None
    try:
        yield
    finally:
        if callable(before):
            signal.signal(signal.SIGTERM, before)


def _cause(ray, err: BaseException) -> BaseException:
    """The job's own exception inside a Ray task error."""
    cause = getattr(err, "cause", None) if isinstance(err, ray.exceptions.RayTaskError) else None
    if cause is None:
        return err
    if isinstance(cause, CarriedError):
        return cause.rebuild()
    return cause


class RayBackend(Backend):
    """Run jobs as Ray tasks, on a local instance or an existing cluster.

    Parameters
    ----------
    workers : int, optional
        Local instance: its CPU count (default ``os.cpu_count()``). Cluster: parallel jobs
        the runner plans for (default: the cluster's CPU count).
    address : str, optional
        Ray cluster address (``"HOST:PORT"``, ``"auto"``, ``"ray://HOST:PORT"``); default
        start a local instance.
    max_retries : int
        Further attempts of a failed job (>= 0; default 2): Ray's ``max_retries`` for system
        failures, and this backend's own loop for exceptions raised by the job.
    keep_alive : bool
        Keep a Ray instance or connection this backend opened after :meth:`map` returns, for
        several sweeps in one process; then call :meth:`close` (or use ``with``).

    Raises
    ------
    RayNotInstalledError
        Ray is not importable (field ``"--backend"``).
    ConfigError
        ``workers`` < 1 (``"--workers"``), ``max_retries`` < 0 (``"max_retries"``), an
        empty ``address`` (``"--address"``).
    """

    name = "ray"

    def __init__(self, workers: int | None = None, *, address: str | None = None,
                 max_retries: int = 2, keep_alive: bool = False):
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                    or workers < 1):
            raise ConfigError("--workers", workers, "must be an integer >= 1")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError("max_retries", max_retries, "must be an integer >= 0")
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ConfigError("--address", address, "must be a Ray address such as HOST:PORT")
        self._ray = _import_ray(loopback=address is None)
        self.address = address
        self.max_retries = max_retries
        self.keep_alive = keep_alive
        self._workers = workers if address is not None else (workers or os.cpu_count() or 1)
        self._own = False          # this backend called ray.init
        self._sigterm_before = None  # SIGTERM disposition before that ray.init
        self._info: dict = {}      # cluster snapshot taken at start
        self._retried = 0          # re-submissions after job exceptions

    # ------------------------------------------------------------------ lifetime

    @property
    def workers(self) -> int:
        """Parallel jobs the runner plans for (a cluster is joined to count its CPUs)."""
        if self._workers is None:
            self.start()
        return self._workers

    def start(self) -> None:
        """Start the local instance or join the cluster, unless already connected.

        Raises
        ------
        ConfigError
            No Ray cluster answers at ``address`` (field ``"--address"``).
        """
        ray = self._ray
        if not ray.is_initialized():
            common = dict(include_dashboard=False, log_to_driver=False,
                          logging_level=logging.WARNING)
            if threading.current_thread() is threading.main_thread():
                self._sigterm_before = signal.getsignal(signal.SIGTERM)
            with _keep_sigterm_handler():
                if self.address is None:
                    ray.init(address="local", num_cpus=self._workers, **common)
                else:
                    _probe(self.address)
                    try:
                        ray.init(address=self.address, **common)
                    except (ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
                        hint = ("" if os.environ.get("RAY_AUTH_MODE") else
                                "; if the cluster uses token authentication, set "
                                "RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN "
                                "or ~/.ray/auth_token)")
                        raise ConfigError("--address", self.address,
                                          f"cannot join a Ray cluster there: {exc}{hint}"
                                          ) from None
            self._own = True
        resources = ray.cluster_resources()
        if self._workers is None:
            self._workers = max(1, int(resources.get("CPU", 1)))
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self._info = {
            "address": self.address or "local",
            "gcs_address": ray.get_runtime_context().gcs_address,
            "node_ip": ray.util.get_node_ip_address(),
            "ray_version": ray.__version__,
            "nodes": len(nodes),
            "resources": {k: (int(v) if float(v).is_integer() else float(v))
                          for k, v in sorted(resources.items()) if not k.startswith("node:")},
        }

    def close(self) -> None:
        """Shut down the Ray instance (or close the connection) this backend opened.

        The SIGTERM disposition found before ``ray.init`` is put back: Ray's driver handler
        (``sys.exit(15)``) would otherwise outlive the instance it was installed for.
        """
        if self._own:
            self._own = False
            self._ray.shutdown()
            before, self._sigterm_before = self._sigterm_before, None
            if before is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, before)

    def __enter__(self) -> RayBackend:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> dict:
        """Manifest entry: name, workers, retries, and the cluster seen at start.

        Returns
        -------
        dict
            ``name, workers, max_retries, retried, address, gcs_address, node_ip,
            ray_version, nodes`` and ``resources`` (Ray's totals: ``CPU``, ``memory`` and
            ``object_store_memory`` in bytes, ``GPU`` when present).
        """
        return {"name": self.name, "workers": self.workers, "max_retries": self.max_retries,
                "retried": self._retried, **self._info}

    # ------------------------------------------------------------------ jobs

    def _cancel(self, pending) -> None:
        """Stop the tasks of ``pending`` (ObjectRefs) that have not finished.

        Only used when the Ray instance or connection outlives this call (opened elsewhere,
        or kept alive); when this backend closes what it opened, Ray ends the tasks itself.
        ``ray.cancel`` on a task whose completion reply is in flight can abort the driver
        (Ray 2.x ``task_manager.cc`` "Tried to complete task that was not pending",
        ray-project/ray#54846): measured here with Ray 2.60, 5 of 10 series of 40 bad-input
        sweeps crashed when every pending ref was cancelled, 0 of 10 with this. So refs
        that become ready within a short wait are left alone, and only the rest are
        cancelled; if that wait fails, every ref is cancelled.
        """
        if not pending:
            return
        ray = self._ray
        refs = list(pending)
        try:
            _, running = ray.wait(refs, num_returns=len(refs), timeout=_CANCEL_GRACE_S)
        except Exception:   # cannot tell which are finishing: cancel them all
            running = refs
        for ref in running:
            try:
                ray.cancel(ref, force=True)
            except Exception:   # finished or gone meanwhile
                pass

    def map(self, fn: Callable, jobs: Sequence[Job],
            on_result: Callable[[Job, object], None] | None = None) -> list:
        """Run ``fn(job)`` for every job as Ray tasks; results in job order.

        Parameters
        ----------
        fn : callable
            Picklable ``fn(job) -> result`` (by reference for importable functions; Ray's
            cloudpickle also ships closures).
        jobs : sequence of Job
        on_result : callable, optional
            ``on_result(job, result)``, called in this process as each job finishes.

        Returns
        -------
        list
            ``[fn(job) for job in jobs]``; results are copied out of Ray's object store.

        Raises
        ------
        JobsFailedError
            Some jobs failed ``1 + max_retries`` times; raised after every other job
            finished, carrying their results; the failures are listed in job order and
            the exception is chained (``__cause__``) to the earliest one's.
        DynaError
            A job's bad-input error: that of the earliest such job in job order (lowest
            index), whichever ends first, so the same on every run and backend. Once job
            ``k`` raised one, the jobs after ``k`` are dropped (their tasks cancelled at
            once, as below, when the instance outlives the call) and the jobs before ``k``
            still running are waited for (with their retries); the earliest bad-input
            error among them, if any, is raised instead, else ``k``'s, as soon as they
            have ended. Then what this backend opened is closed, unless ``keep_alive``;
            otherwise the tasks still running are cancelled.
        KeyboardInterrupt
            What this backend opened is closed; when the connection was opened elsewhere,
            the tasks still running are cancelled.
        """
        jobs = list(jobs)
        if not jobs:
            return []
        ray = self._ray
        self.start()
        task = ray.remote(portable_call).options(num_cpus=1, max_retries=self.max_retries,
                                                  retry_exceptions=False)
        fn_ref = ray.put(fn)
        pending: dict = {}                 # ObjectRef -> job index
        attempts = [0] * len(jobs)
        results: dict[int, object] = {}
        failures: dict[int, BaseException] = {}

        def submit(i: int) -> None:
            attempts[i] += 1
            pending[task.remote(fn_ref, jobs[i])] = i

        # The earliest bad-input error in job order is raised, whichever job ends first:
        # once job k raised one, only the jobs before k are waited for (one of them may
        # raise another); the jobs after k do not matter.
        cutoff = len(jobs)                 # index of the earliest bad-input error so far
        bad = None                         # its exception
        # a DynaError closes what this backend opened (then Ray ends the tasks) unless
        # keep_alive; otherwise the tasks after k are cancelled as soon as k fails
        closing = self._own and not self.keep_alive

        try:
            for i in range(len(jobs)):
                submit(i)
            while pending:
                waiting = list(pending) if bad is None else [
                    ref for ref, i in pending.items() if i < cutoff]
                if not waiting:
                    break
                ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=_POLL_S)
                for ref in ready:
                    i = pending.pop(ref, None)
                    if i is None or i > cutoff:   # dropped after an earlier bad-input error
                        continue
                    try:
                        result = copy.deepcopy(ray.get(ref))
                    except ray.exceptions.RayTaskError as err:
                        exc = _cause(ray, err)
                        if isinstance(exc, DynaError):
                            cutoff, bad = i, exc
                            if not closing:
                                later = [r for r, j in pending.items() if j > i]
                                for r in later:
                                    del pending[r]
                                self._cancel(later)
                            continue
                        if attempts[i] <= self.max_retries:
                            self._retried += 1
                            submit(i)
                        else:
                            failures[i] = annotate(exc, jobs[i])
                        continue
                    except ray.exceptions.RayError as err:  # Ray already retried it
                        attempts[i] += self.max_retries
                        failures[i] = annotate(err, jobs[i])
                        continue
                    results[i] = result
                    if on_result is not None:
                        on_result(jobs[i], result)
            if bad is not None:
                raise annotate(bad, jobs[cutoff]) from None
        except BaseException as exc:
            shutting_down = self._own and (isinstance(exc, KeyboardInterrupt)
                                           or not self.keep_alive)
            if not shutting_down:
                self._cancel(pending)
            if isinstance(exc, KeyboardInterrupt) or not self.keep_alive:
                self.close()
            raise
        if not self.keep_alive:
            self.close()
        if failures:
            failed = [(jobs[i], failures[i], attempts[i]) for i in sorted(failures)]
            raise JobsFailedError(failed, results, jobs) from failed[0][1]
        return [results[i] for i in range(len(jobs))]
