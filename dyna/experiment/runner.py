"""Run an experiment of any kind: every variant x sweep point x run, into one output folder.

:func:`run_experiment` works for every experiment kind (:mod:`dyna.experiment.protocol`,
found through :mod:`dyna.experiment.registry`). It asks the kind to resolve its inputs
before anything touches the disk (for ``tabular``: one env table per sweep point, so an
unknown env id or bad kwarg fails cleanly), splits the runs into jobs
(:class:`dyna.experiment.backends.Job`: a variant at a sweep point for a block of run
indices), hands them to a backend with a progress bar, puts the results in canonical order
(variant, point, first run index), and writes atomically the kind's tables
(``<name>.parquet``), ``manifest.json`` (validated config and its hash, seed, package
versions, the git commit, what the kind resolved, backend, tables with their sha256, timings: compile, run,
output, wall; seconds), ``plots/`` and ``report.md``. :func:`load_output` reads a folder
back; :func:`draw_output_plots` redraws its plots (``dyna plot DIR``).

Everything is written into a hidden temporary sibling folder that is renamed into place at
the end; on any error or Ctrl-C it is removed, so no partial output folder is ever left. Its
name records the writing process (id and start time, :mod:`dyna.store.tmpfiles`): the next
run into the same folder removes one left by a killed run, never one of a run still going.

Part of the experiment machinery: it knows kinds only through the registry.
"""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import importlib.metadata
import io
import json
import math
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import polars as pl

from dyna.errors import ConfigError, DynaError, MissingFileError, check_range
from dyna.experiment.backends import Backend, InProcessBackend, Job
from dyna.experiment.config import json_default
from dyna.experiment.protocol import DEFAULT_KIND, ExperimentOutput, config_kind
from dyna.experiment.registry import get_kind, parse_experiment
from dyna.experiment.render_worker import (RenderWorker, WorkerFailed, free_cores,
                                           render_mode, reply_timeout, start_render_worker)
from dyna.store.tmpfiles import clean_orphans, make_temp_dir

__all__ = ["ExperimentOutput", "draw_output_plots", "load_output", "package_versions",
           "project_revision", "run_experiment", "run_tables", "start_render_worker"]


_PACKAGES = ("dyna", "numpy", "scipy", "numba", "gymnasium", "polars", "matplotlib", "tqdm")


def load_output(folder: str | Path) -> ExperimentOutput:
    """Read an output folder written by :func:`run_experiment` (any kind).

    Every table listed in the manifest is read; the config is rebuilt from the manifest
    with :func:`dyna.experiment.registry.parse_experiment`.

    Raises
    ------
    MissingFileError
        ``folder`` has no ``manifest.json``, or a table the manifest lists (or the kind
        requires; ``results.parquet`` and ``runs.parquet`` for tabular) is missing.
    ConfigError
        ``folder`` is a file; ``manifest.json`` is not valid JSON or not a manifest; a table
        is not the file the manifest's sha256 records, or not readable Parquet (field
        ``DIR``, naming the file).
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError("DIR", str(folder), "is a file, not an output folder")
    if not folder.is_dir():
        raise MissingFileError("DIR", folder, "no such folder")
    if not (folder / "manifest.json").is_file():
        raise MissingFileError("DIR", folder, "not a dyna output folder (no manifest.json)")
    try:
        manifest = json.loads((folder / "manifest.json").read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError("DIR", str(folder / "manifest.json"),
                          f"damaged: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config"), dict):
        raise ConfigError("DIR", str(folder / "manifest.json"),
                          "damaged: not a dyna manifest (no config table)")
    kind_name = manifest.get("kind", DEFAULT_KIND)
    kind = get_kind(kind_name)
    listed = manifest.get("tables", {})
    if not isinstance(listed, dict):
        raise ConfigError("DIR", str(folder / "manifest.json"), "damaged: 'tables' is not a table")
    names = [f"{t}.parquet" for t in kind.required_tables()]
    names += [n for n in listed if n not in names]
    raw = {}   # each table read once: hashed, then parsed from the same bytes
    for name in names:
        if not (folder / name).is_file():
            raise MissingFileError("DIR", folder / name)
        raw[name] = (folder / name).read_bytes()
        want = listed.get(name, {}).get("sha256") if isinstance(listed.get(name), dict) else None
        if want is not None and hashlib.sha256(raw[name]).hexdigest() != want:
            raise ConfigError("DIR", str(folder / name), "damaged or edited: its sha256 is not "
                              "the one manifest.json records")
    config_data = dict(manifest["config"])
    if kind_name != DEFAULT_KIND:
        config_data["kind"] = kind_name
    config = parse_experiment(config_data)
    tables = {}
    for n in names:
        try:
            tables[n[:-len(".parquet")]] = pl.read_parquet(io.BytesIO(raw.pop(n)))
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise ConfigError("DIR", str(folder / n), f"damaged: not a readable Parquet file "
                              f"({type(exc).__name__})") from None
    return ExperimentOutput(config=config, manifest=manifest, tables=tables)


def package_versions() -> dict:
    """Installed versions of dyna's main dependencies (None when missing)."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def project_revision() -> dict:
    """The git commit of the checkout dyna runs from, for the manifest.

    Returns
    -------
    dict
        ``{"commit": <40 hex>, "dirty": bool}`` (``dirty``: tracked files differ from the
        commit) when dyna's package folder lies in the top of a git work tree, else
        ``{"commit": None, "reason": "not a git checkout"}`` (an installed package, no git
        binary). Reads only: no lock is taken, no index is refreshed.
    """
    import subprocess

    import dyna

    root = Path(dyna.__file__).resolve().parents[1]
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, env=env, timeout=10)

    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
            return {"commit": None, "reason": "not a git checkout"}
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": None, "reason": "not a git checkout (no commit yet)"}
        dirty = git("diff-index", "--quiet", "HEAD", "--").returncode != 0
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "reason": "not a git checkout (git not available)"}
    return {"commit": head.stdout.strip(), "dirty": dirty}


def default_out_dir(config, root: str | Path = "runs") -> Path:
    """``<root>/<name>-<YYYYmmdd-HHMMSS>-<4 hex>`` (with ``-2``, ``-3``... if taken).

    The random suffix keeps two runs of one experiment started in the same second apart
    (it comes from the operating system, not from the experiment's seed, so it changes no
    result)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{config.name}-{stamp}-{os.urandom(2).hex()}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def _check_writable(out: Path) -> None:
    """Refuse, before any job runs, an output folder that cannot be written (``/proc``, a
    read-only mount, a file on the way): a probe folder is made and removed in its nearest
    existing ancestor, so the check holds for root too.

    Raises
    ------
    ConfigError
        Field ``--out``.
    """
    import tempfile

    anc = out.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise ConfigError("--out", str(out), f"{str(anc)!r} is not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dyna-probe-", dir=anc))
    except OSError as exc:
        raise ConfigError("--out", str(out), f"cannot write in {str(anc)!r}: "
                          f"{exc.strerror or exc}") from None


def _rename_into_place(tmp: Path, out: Path) -> Path:
    """Rename the finished ``tmp`` to ``out``; if another process took ``out`` meanwhile,
    to ``out-2``, ``out-3``, ... (said on stderr): a finished run is never lost.

    Returns
    -------
    Path
        Where the run is.
    """
    target, k = out, 1
    while True:
        if not target.exists():
            try:
                os.rename(tmp, target)
                if target != out:
                    print(f"dyna: {out} was taken by another run meanwhile; this run is in "
                          f"{target}", file=sys.stderr)
                return target
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
        k += 1
        target = out.with_name(f"{out.name}-{k}")


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _auto_block_size(n_groups: int, runs: int, backend: Backend) -> int:
    if backend.workers <= 1 or n_groups >= backend.workers:
        return runs
    blocks_per_group = math.ceil(backend.workers / n_groups)
    return max(1, math.ceil(runs / blocks_per_group))


def _canonical(jobs: list[Job], results: list, runs: int) -> tuple[list[Job], list]:
    """Sort jobs and results by ``Job.key``; check each group covers runs 0..runs-1."""
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].key)
    covered: dict[tuple, list] = {}
    for i in order:
        covered.setdefault((jobs[i].variant, jobs[i].point), []).extend(jobs[i].run_indices)
    for key, got in covered.items():
        if got != list(range(runs)):
            raise RuntimeError(f"jobs of {key} covered runs {got}, expected 0..{runs - 1}")
    return [jobs[i] for i in order], [results[i] for i in order]


def draw_output_plots(out: ExperimentOutput, folder: str | Path) -> list[Path]:
    """Draw the plots of an output of any kind (``dyna plot DIR``)."""
    return get_kind(out.kind).draw_plots(out, Path(folder))


# --------------------------------------------------------------------------- running

def run_experiment(config, out_dir: str | Path | None = None, *,
                   backend: Backend | None = None, block_size: int | None = None,
                   progress: bool | None = None, source: str | Path | None = None,
                   root: str | Path = "runs", render: str | None = None,
                   worker: RenderWorker | None = None) -> Path:
    """Run every variant x sweep point x run and write one output folder atomically.

    Works for every experiment kind (:mod:`dyna.experiment.registry`); the kind is read from
    the config (``to_dict()["kind"]``, default ``tabular``).

    Parameters
    ----------
    config : ExperimentConfig or another kind's config
        Validated experiment (:func:`dyna.experiment.registry.load_experiment`).
    out_dir : str or Path, optional
        Output folder; must not exist. Default ``<root>/<name>-<timestamp>``.
    backend : Backend, optional
        Where jobs run; default :class:`InProcessBackend`.
    block_size : int, optional
        Runs per job; default: all runs of a variant and sweep point in one job, split
        further only to keep every worker of a parallel backend busy. The results do not
        depend on it.
    progress : bool, optional
        Show a tqdm progress bar on stderr (default: when stderr is a terminal).
    source : str or Path, optional
        The config file, recorded in the manifest.
    root : str or Path
        Parent of the default output folder.
    render : {"worker", "serial", "auto"}, optional
        Where the plots and report are drawn. ``"worker"`` (for a kind that offers
        ``preload_render``): a second process started at once imports matplotlib and
        scipy.stats while this one runs, then draws (:mod:`dyna.experiment.render_worker`;
        if it fails in any way this process draws instead); ``"serial"``: this process,
        after the runs; ``"auto"``: the worker when a core is free for it
        (:func:`dyna.experiment.render_worker.free_cores`). Default: the environment
        variable ``DYNA_RENDER``, else ``"worker"`` when ``worker`` is given (``dyna run``,
        which starts one only under ``"auto"`` with a free core, or ``"worker"``), else
        ``"serial"``. The files are the same bytes either way.
    worker : RenderWorker, optional
        A render worker already started for this config's kind (``dyna run`` starts one
        before it reads the config, :func:`start_render_worker`); from here on this
        function owns it and stops it on every exit path. Ignored (stopped) with
        ``render="serial"`` or a kind that renders only in-process.

    Returns
    -------
    Path
        The output folder.

    Raises
    ------
    ConfigError
        Whatever the kind's ``prepare`` finds (unknown env id
        (:class:`dyna.errors.UnknownEnvError`), bad env kwargs, a missing
        ``optimal_path_length`` for ``stop_at_optimal``, a bad data file), an existing
        ``out_dir`` (field ``"--out"``), ``block_size`` < 1 (field ``"--block-size"``), a
        ``render`` or ``DYNA_RENDER`` other than worker/serial/auto, a ``DYNA_RENDER_TIMEOUT``
        that is not a positive number.
    Exception
        Whatever a job raised (with a note naming the job). In every error case (and on
        KeyboardInterrupt) no output folder is left behind.
    """
    t_start = time.perf_counter()
    try:
        backend = backend or InProcessBackend()
        kind_name = config_kind(config)
        kind = get_kind(kind_name)
        if render is None:
            render = render_mode("worker" if worker is not None else "serial")
        elif render not in ("worker", "serial", "auto"):
            raise ConfigError("render", render, "must be 'worker', 'serial' or 'auto'")
        elif render == "auto":
            render = "worker" if free_cores() >= 1 else "serial"
        timeout = reply_timeout()
        if render == "worker" and callable(getattr(kind, "preload_render", None)):
            if worker is None:
                worker = RenderWorker.start(kind_name)   # None if it cannot start
        elif worker is not None:
            worker.close()
            worker = None
        return _run(config, out_dir, kind_name, kind, backend, block_size, progress,
                    source, root, worker, timeout, t_start)
    finally:
        if worker is not None:
            worker.close()     # reaped on every exit path (errors, Ctrl-C, SIGTERM)


def _run(config, out_dir, kind_name, kind, backend, block_size, progress, source, root,
         worker, timeout, t_start) -> Path:
    """:func:`run_experiment` once the render worker (or None) is chosen."""
    # 1. Everything that can fail on bad input, before touching the disk.
    prepared = kind.prepare(config)
    if block_size is None:
        block_size = _auto_block_size(kind.n_groups(config), config.runs, backend)
    block_size = check_range("--block-size", block_size, lo=1, integer=True)
    out = Path(out_dir) if out_dir is not None else default_out_dir(config, root)
    if out.exists():
        raise ConfigError("--out", str(out), "already exists; choose a new folder")
    _check_writable(out)
    jobs = kind.plan_jobs(config, prepared, block_size=block_size)
    if worker is not None:
        # the run will render: only now may the worker import matplotlib, which creates
        # its config and cache folders (a rejected config leaves nothing anywhere)
        worker.go()

    # 2. Compile, then run the jobs.
    jobs, results, failed, compile_s, run_s = _execute(kind, config, jobs, backend, progress)

    # 3. Write into a hidden sibling, rename into place at the end.
    t_out = time.perf_counter()
    created_parent = None
    try:
        if not out.parent.exists():
            created_parent = out.parent
            while not created_parent.parent.exists():
                created_parent = created_parent.parent
            out.parent.mkdir(parents=True)
        # a killed run's temporary folder (owner no longer running) goes; a live run's stays
        clean_orphans(out, folder=True)
        tmp = make_temp_dir(out)
    except OSError as exc:
        if created_parent is not None:
            _remove_empty_dirs(out.parent, created_parent)
        raise ConfigError("--out", str(out), f"cannot write there: "
                          f"{exc.strerror or exc}") from None
    try:
        jobs, results = _canonical(jobs, results, config.runs)
        frames = kind.build_tables(config, prepared, jobs, results)
        files = {}
        for name, frame in frames.items():
            path = tmp / f"{name}.parquet"
            frame.write_parquet(path, statistics=False)
            files[path.name] = {"rows": frame.height, "sha256": _file_sha256(path)}
        manifest = {
            "name": config.name,
            "kind": kind_name,
            "config": config.to_dict(),
            "config_hash": config.hash,
            "seed": config.seed,
            "runs": config.runs,
            "source": str(source) if source is not None else None,
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "packages": package_versions(),
            "platform": platform.platform(),
            "git": project_revision(),
        }
        clash = set(prepared.manifest) & (set(manifest) | {"backend", "tables", "timing"})
        if clash:
            raise RuntimeError(f"kind {kind_name!r} manifest entries clash: {sorted(clash)}")
        manifest.update(prepared.manifest)
        manifest.update({
            "backend": {**backend.describe(), "block_size": block_size, "jobs": len(jobs)},
            "tables": files,
            "timing": {"compile_time_s": round(compile_s, 4), "run_time_s": round(run_s, 4)},
        })
        timing = None
        if worker is not None:
            now = time.perf_counter()
            try:
                timing = worker.render(tmp, config, manifest,
                                       {n: f["sha256"] for n, f in files.items()},
                                       {"output": now - t_out, "wall": now - t_start},
                                       timeout)
            except WorkerFailed:
                worker.close()
                _remove_all_but(tmp, set(files))   # what it wrote goes; render here
        output = ExperimentOutput(config=config, manifest=manifest, tables=dict(frames))
        if timing is not None:
            manifest["timing"].update(timing)
        elif callable(getattr(kind, "render", None)):
            # plots and report in one call (the kind overlaps them); its report does not
            # show the timing, so the times include the report
            kind.render(output, tmp)
            manifest["timing"]["output_time_s"] = round(time.perf_counter() - t_out, 4)
            manifest["timing"]["wall_time_s"] = round(time.perf_counter() - t_start, 4)
        else:
            kind.draw_plots(output, tmp)
            manifest["timing"]["output_time_s"] = round(time.perf_counter() - t_out, 4)
            manifest["timing"]["wall_time_s"] = round(time.perf_counter() - t_start, 4)
            kind.write_report(output, tmp)
        if failed is not None:
            manifest["complete"] = False
            manifest["failed_jobs"] = [{"job": job.describe(), "variant": job.variant, "point": job.point,
                                        "runs": list(job.run_indices), "error": f"{type(e).__name__}: {e}",
                                        "attempts": attempts} for job, e, attempts in failed.failures]
        (tmp / "manifest.json").write_text(
            json.dumps(manifest, indent=2, default=json_default, allow_nan=False) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; the results are for everyone
        out = _rename_into_place(tmp, out)
    except BaseException:
        if worker is not None:
            worker.close()             # stopped before its folder goes
        shutil.rmtree(tmp, ignore_errors=True)
        if created_parent is not None:
            _remove_empty_dirs(out.parent, created_parent)
        if failed is not None:
            raise failed from None
        raise
    if failed is not None:
        failed.args = (f"{failed}; the complete variants were written to {out} "
                       "(manifest.json: complete = false, failed_jobs)",)
        failed.output = out
        raise failed
    return out


def _execute(kind, config, jobs: list[Job], backend: Backend, progress: bool | None):
    """Compile (``kind.warm_up``), then run ``jobs`` on ``backend`` with a progress bar.

    Returns
    -------
    (jobs, results, failed, compile_s, run_s)
        ``failed`` is None, or the backend's error when it finished the other jobs before
        reporting failures (Ray): ``jobs`` and ``results`` then hold every (variant, point)
        whose runs all finished.
    """
    compile_s = kind.warm_up()
    t_run = time.perf_counter()
    total_runs = sum(len(j.run_indices) for j in jobs)
    if progress is None:
        progress = sys.stderr.isatty()
    failed = None
    with _progress_bar(progress, total=total_runs, desc=config.name,
                       unit=kind.progress_unit) as bar:
        try:
            results = backend.map(kind.job_function, jobs,
                                  on_result=lambda job, _res: bar.update(len(job.run_indices)))
        except DynaError as exc:
            # a backend that finishes the other jobs before reporting failures (Ray) hands
            # their results over: keep every (variant, point) whose runs all finished
            if not hasattr(exc, "failures") or not getattr(exc, "results", None):
                raise
            failed = exc
            jobs, results = _complete_groups([exc.jobs[i] for i in sorted(exc.results)],
                                             [exc.results[i] for i in sorted(exc.results)],
                                             config.runs)
            if not jobs:
                raise
    return jobs, results, failed, compile_s, time.perf_counter() - t_run


def run_tables(config, *, backend: Backend | None = None, block_size: int | None = None,
               progress: bool | None = None, pairs=None) -> dict:
    """Run an experiment's jobs and return the kind's tables, writing nothing (the pilot
    of a calibrated experiment, :func:`dyna.experiment.calibration_commands.run_pilot`,
    writes its own files from them).

    Parameters
    ----------
    config, backend, block_size, progress
        As for :func:`run_experiment`.
    pairs : set of (int, int), optional
        Run only the jobs of these ``(variant index, point index)`` pairs; default all.

    Returns
    -------
    dict of str -> polars.DataFrame
        ``kind.build_tables`` of the runs, in canonical order.

    Raises
    ------
    ConfigError
        Whatever the kind's ``prepare`` finds, a ``block_size`` below 1.
    Exception
        Whatever a job raised; also a backend's partial failure.
    """
    backend = backend or InProcessBackend()
    kind = get_kind(config_kind(config))
    prepared = kind.prepare(config)
    if block_size is None:
        block_size = _auto_block_size(kind.n_groups(config), config.runs, backend)
    block_size = check_range("--block-size", block_size, lo=1, integer=True)
    jobs = kind.plan_jobs(config, prepared, block_size=block_size)
    if pairs is not None:
        jobs = [j for j in jobs if (j.variant, j.point) in pairs]
    jobs, results, failed, _, _ = _execute(kind, config, jobs, backend, progress)
    if failed is not None:
        raise failed
    jobs, results = _canonical(jobs, results, config.runs)
    return kind.build_tables(config, prepared, jobs, results)


class _NoBar:
    """What the runner needs of a tqdm bar when none is shown (tqdm is not imported)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n=1):
        return None


def _progress_bar(show: bool, **opts):
    """A tqdm bar on stderr when ``show``, else a stand-in: importing tqdm.auto (asyncio
    with it) cost ~30-40 ms of every run whose stderr is not a terminal."""
    if not show:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(file=sys.stderr, leave=False, **opts)


def _complete_groups(jobs: list[Job], results: list, runs: int) -> tuple[list[Job], list]:
    """The jobs (and results) of every (variant, point) whose runs 0..runs-1 all finished."""
    groups: dict[tuple, list] = {}
    for job, res in zip(jobs, results):
        groups.setdefault((job.variant, job.point), []).append((job, res))
    kept = [pair for items in groups.values()
            if sorted(i for job, _ in items for i in job.run_indices) == list(range(runs))
            for pair in items]
    return [job for job, _ in kept], [res for _, res in kept]


def _remove_all_but(folder: Path, keep: set[str]) -> None:
    """Remove every entry of ``folder`` whose name is not in ``keep`` (symbolic links are
    removed, never followed)."""
    for entry in folder.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _remove_empty_dirs(leaf: Path, top: Path) -> None:
    """Remove ``leaf`` and its parents up to ``top`` while they are empty."""
    path = leaf
    while True:
        try:
            path.rmdir()
        except OSError:
            return
        if path == top:
            return
        path = path.parent
