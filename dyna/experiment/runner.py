"""Run an experiment of any kind: every variant x sweep point x run, into one output folder.

:func:`run_experiment` works for every experiment kind (:mod:`dyna.experiment.protocol`,
found through :mod:`dyna.experiment.registry`) in four steps:

1. **plan** (:func:`plan_run`): the kind resolves its inputs before anything touches the
   disk (for ``tabular``: one env table per sweep point, so an unknown env id or bad kwarg
   fails cleanly), the output folder is checked, and the runs are split into jobs
   (:class:`dyna.experiment.backends.Job`: a variant at a sweep point for a block of run
   indices);
2. **execute** (:func:`execute`): the jobs run on a backend; every stage of steps 2-4 is
   shown as it goes (:mod:`dyna.experiment.progress`);
3. **write** (:func:`write_output`): the results are put in canonical order (variant, point,
   first run index) and the kind's tables (``<name>.parquet``) and ``manifest.json``
   (:func:`run_manifest`: validated config and its hash, seed, package versions, the git
   commit, what the kind resolved, backend, tables with their sha256, timings: compile,
   run, output, wall; seconds) are written;
4. **render** (:func:`render_output`): the kind draws ``plots/`` and writes ``report.md``.

Steps 3 and 4 write into a hidden temporary sibling folder that is renamed into place at the
end; on any error or Ctrl-C it is removed, so no partial output folder is ever left
(:mod:`dyna.experiment.output_folder`). One exception: a backend that finishes the other jobs
before reporting failed ones (Ray) has every (variant, point) whose runs all finished written
as a whole folder, with ``complete = false`` and ``failed_jobs`` in ``manifest.json``, before
the error is raised (:func:`run_experiment`). :func:`load_output` reads a folder back;
:func:`draw_output_plots` redraws its plots (``dyna plot DIR``); :func:`run_tables` runs
the jobs and returns the tables without writing anything.

Part of the experiment machinery: it knows kinds only through the registry.
"""

from __future__ import annotations

import copy
import datetime as _dt
import hashlib
import importlib.metadata
import io
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dyna import kernel_cache
from dyna.errors import ConfigError, DynaError, MissingFileError, check_range
from dyna.experiment.backends import Backend, InProcessBackend, Job
from dyna.experiment.config import json_default
from dyna.experiment.helper_process import check_environment
from dyna.experiment.output_folder import TempFolder, check_writable, default_out_dir
from dyna.experiment.progress import RunProgress
from dyna.experiment.protocol import (DEFAULT_KIND, ExperimentKind, ExperimentOutput,
                                      Prepared, config_kind)
from dyna.experiment.registry import get_kind, parse_experiment

__all__ = ["Executed", "ExperimentOutput", "RunPlan", "default_out_dir", "draw_output_plots",
           "execute", "load_output", "package_versions", "plan_run", "project_revision",
           "render_output", "rewrite_report", "run_experiment", "run_manifest", "run_tables",
           "table_file", "write_output"]


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
        ``folder`` is a file; ``manifest.json`` is not valid JSON or not a manifest, or names
        a table that is not a ``.parquet`` file name of the folder (a path); a table is not
        the file the manifest's sha256 records (or it records none), or not readable
        Parquet, or lacks a column of the kind's ``table_schema(config)`` or holds it as
        another type, with nulls, or with NaN or inf where finite numbers are needed (field
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
    for n in names:   # a table is a file of this folder, never a path elsewhere
        if not isinstance(n, str) or Path(n).name != n or not n.endswith(".parquet") \
                or n == ".parquet":
            raise ConfigError("DIR", str(folder / "manifest.json"),
                              f"damaged: table name {str(n)[:80]!r} is not a .parquet file "
                              "name of this folder")
    raw = {}   # each table read once: hashed, then parsed from the same bytes
    for name in names:
        if not (folder / name).is_file():
            raise MissingFileError("DIR", folder / name)
        raw[name] = (folder / name).read_bytes()
        want = listed.get(name, {}).get("sha256") if isinstance(listed.get(name), dict) else None
        if not isinstance(want, str):   # every folder dyna writes records each table's
            raise ConfigError("DIR", str(folder / name), "unverifiable: manifest.json records "
                              "no sha256 for it")
        if hashlib.sha256(raw[name]).hexdigest() != want:
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
    schema = getattr(kind, "table_schema", None)
    for name, columns in (schema(config) if schema else {}).items():
        if name in tables:
            _check_columns(tables[name], columns, folder / f"{name}.parquet")
    return ExperimentOutput(config=config, manifest=manifest, tables=tables)


#: What each column kind of a table schema accepts: a test of the dtype, and the words
#: naming it in an error.
_COLUMN_KINDS = {
    "int": (lambda t: t.is_integer(), "integer"),
    "finite": (lambda t: t.is_numeric(), "numeric"),
    "float": (lambda t: t.is_numeric(), "numeric"),
    "bool": (lambda t: t == pl.Boolean, "boolean"),
    "str": (lambda t: t == pl.String, "text"),
}


def _check_columns(table: pl.DataFrame, columns: dict, path: Path) -> None:
    """Raise ``ConfigError("DIR", path, ...)`` naming the first column of ``columns``
    (name -> ``"int"``, ``"finite"`` (finite numbers), ``"float"`` (any numbers, NaN and
    inf allowed), ``"bool"`` or ``"str"``) that ``table`` lacks, holds as another dtype,
    or holds with a NaN or inf (``int``, ``finite``) or a null (``int``, ``finite``, unless
    the kind ends in ``"?"``: ``"int?"`` is an integer column where null means none)."""
    for col, spec in columns.items():
        kind = spec.rstrip("?")
        if col not in table.columns:
            raise ConfigError("DIR", str(path), f"damaged: column {col!r} missing")
        series = table.get_column(col)
        if kind in ("int", "finite") and series.dtype.is_float():
            bad = series.is_nan() | series.is_infinite()
            if bad.any():
                raise ConfigError("DIR", str(path), f"damaged: column {col!r} holds NaN or "
                                  f"inf (row {bad.arg_true()[0]})")
        accepts, words = _COLUMN_KINDS[kind]
        if not accepts(series.dtype):
            raise ConfigError("DIR", str(path), f"damaged: column {col!r} is {series.dtype}, "
                              f"not {words}")
        if kind in ("int", "finite") and not spec.endswith("?") and series.null_count():
            raise ConfigError("DIR", str(path), f"damaged: column {col!r} has empty (null) "
                              "values")


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


def draw_output_plots(out: ExperimentOutput, folder: str | Path) -> list[Path]:
    """Draw the plots of an output of any kind (``dyna plot DIR``)."""
    return get_kind(out.kind).draw_plots(out, Path(folder))


def table_file(frame: pl.DataFrame) -> tuple[bytes, dict]:
    """A table as the bytes of its Parquet file (no column statistics) and its manifest
    entry ``{"rows", "sha256"}``."""
    buf = io.BytesIO()
    frame.write_parquet(buf, statistics=False)
    data = buf.getvalue()
    return data, {"rows": frame.height, "sha256": hashlib.sha256(data).hexdigest()}


def rewrite_report(folder: str | Path) -> Path:
    """Write ``folder/report.md`` again from the folder's tables (``dyna report DIR``): the
    analysis and wording of this checkout over the episodes the run simulated, which are
    read, never re-simulated. A kind's tables computed from others (its
    ``derived_tables(config, tables)``, such as the agent-tasks per-run metrics) are
    computed again and written where they differ. ``manifest.json`` gains ``report`` (this
    checkout's git commit, the UTC time and the tables computed again) and the new tables'
    sha256; a report that shows its provenance names both commits. Each file is replaced
    whole (:func:`dyna.fileio.atomic.atomic_write`): the report (an analysis that fails
    leaves every file as it was), the changed tables, then the manifest; until the manifest
    is written, :func:`load_output` refuses a changed table as not the one the manifest
    records. Returns the report's path.

    Raises
    ------
    MissingFileError, ConfigError
        As :func:`load_output`: no such folder, not an output folder, a damaged or edited
        table, or a table the kind cannot compute from; nothing is written.
    dyna.fileio.NotRegularFileError
        ``report.md``, ``manifest.json`` or a table to replace is a link or a special file;
        nothing is written.
    dyna.fileio.FileWriteError
        The system refused a write; the files before it are replaced, the rest as they were.
    """
    from dyna.fileio.atomic import atomic_write, check_target

    folder = Path(folder)
    out = load_output(folder)
    kind = get_kind(out.kind)
    manifest = copy.deepcopy(out.manifest)
    tables = dict(out.tables)
    derive = getattr(kind, "derived_tables", None)
    changed = {}
    for name, frame in (derive(out.config, tables) if callable(derive) else {}).items():
        if not frame.equals(tables[name]):
            changed[name], manifest["tables"][f"{name}.parquet"] = table_file(frame)
            tables[name] = frame
    manifest["report"] = {"git": project_revision(), "created_utc": _dt.datetime.now(
        _dt.timezone.utc).isoformat(timespec="seconds"), "tables_recomputed": sorted(changed)}
    out = ExperimentOutput(config=out.config, manifest=manifest, tables=tables)
    # every file to replace is a regular file (or absent) before the first is replaced
    for name in ["report.md", *(f"{n}.parquet" for n in changed), "manifest.json"]:
        check_target(folder / name, name)
    path = kind.write_report(out, folder)
    for name, data in changed.items():
        atomic_write(folder / f"{name}.parquet", data, field=f"{name}.parquet")
    atomic_write(folder / "manifest.json", json.dumps(manifest, indent=2, default=json_default,
                                                      allow_nan=False) + "\n",
                 field="manifest.json")
    return path


# --------------------------------------------------------------------------- running

def run_experiment(config, out_dir: str | Path | None = None, *,
                   backend: Backend | None = None, block_size: int | None = None,
                   progress: bool | None = None, source: str | Path | None = None,
                   root: str | Path = "runs") -> Path:
    """Run every variant x sweep point x run and write one output folder atomically.

    Works for every experiment kind (:mod:`dyna.experiment.registry`); the kind is read from
    the config (``to_dict()["kind"]``, default ``tabular``). Four steps: :func:`plan_run`
    (everything that can fail on bad input, before the disk is touched), :func:`execute`
    (the jobs on the backend), then the tables and manifest are written and the kind draws
    the plots and report (:func:`render_output`) into a hidden folder that is renamed into
    place (:class:`dyna.experiment.output_folder.TempFolder`).

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
    progress : bool or RunProgress, optional
        Show every stage on stderr (:mod:`dyna.experiment.progress`): True a tqdm bar on a
        terminal and plain lines with the time left elsewhere (a log file); False nothing;
        default: a bar when stderr is a terminal, else nothing. A
        :class:`~dyna.experiment.progress.RunProgress` is used as given (and closed).
    source : str or Path, optional
        The config file, recorded in the manifest.
    root : str or Path
        Parent of the default output folder.

    Returns
    -------
    Path
        The output folder.

    Raises
    ------
    ConfigError
        Whatever the kind's ``prepare`` finds (unknown env id
        (:class:`dyna.errors.UnknownEnvError`), bad env kwargs, a missing
        ``optimal_path_length`` for ``stop_at_optimal``, a bad data file), an existing or
        unwritable ``out_dir`` (field ``"--out"``), ``block_size`` < 1 (field
        ``"--block-size"``), a ``DYNA_RENDER`` or ``DYNA_RENDER_TIMEOUT`` the helper
        processes cannot use (:func:`dyna.experiment.helper_process.check_environment`).
    Exception
        Whatever a job raised (with a note naming the job). In every error case (and on
        KeyboardInterrupt) no output folder is left behind; a backend that finished the
        other jobs (Ray) has the complete variants written first, and its error says where.
    """
    t_start = time.perf_counter()
    backend = backend or InProcessBackend()
    check_environment()
    out = Path(out_dir) if out_dir is not None else None
    plan = plan_run(config, backend, block_size, out=out, root=root)
    shown = progress if isinstance(progress, RunProgress) else _progress(config, progress)
    with shown:
        done = execute(plan, backend, shown)
        out = write_output(plan, done, backend, source, t_start, progress=shown)
    if done.failed is not None:
        failed = done.failed
        failed.args = (f"{failed}; the complete variants were written to {out} "
                       "(manifest.json: complete = false, failed_jobs)",)
        failed.output = out
        raise failed
    return out


@dataclass
class RunPlan:
    """What a run will do, resolved before anything touches the disk (:func:`plan_run`).

    Attributes
    ----------
    config : object
        The experiment's config.
    kind_name : str
    kind : ExperimentKind
    prepared : Prepared
        What the kind resolved (``kind.prepare``).
    block_size : int
        Runs per job.
    jobs : list of Job
        The jobs, in the kind's order.
    out : Path or None
        The output folder (checked: it does not exist and can be written), or None for a
        run that writes no folder (:func:`run_tables`).
    """

    config: Any
    kind_name: str
    kind: ExperimentKind
    prepared: Prepared
    block_size: int
    jobs: list[Job]
    out: Path | None = None


@dataclass
class Executed:
    """What :func:`execute` returns: the jobs run, their results and the times.

    Attributes
    ----------
    jobs, results : list
        Aligned; every job when all succeeded. ``failed`` set: the jobs and results of
        every (variant, point) whose runs all finished.
    failed : DynaError or None
        The backend's error when it finished the other jobs before reporting failures
        (Ray), else None.
    compile_s, run_s : float
        Seconds spent compiling (``kind.warm_up``) and running.
    """

    jobs: list[Job]
    results: list
    failed: DynaError | None
    compile_s: float
    run_s: float


def plan_run(config, backend: Backend, block_size: int | None = None, *,
             out: Path | None = None, root: str | Path | None = None,
             pairs=None) -> RunPlan:
    """Resolve a run: the kind, its inputs (``kind.prepare``), the block size, the output
    folder and the jobs. Nothing is written.

    Parameters
    ----------
    config, backend, block_size
        As for :func:`run_experiment`.
    out : Path, optional
        The output folder; with ``root`` and no ``out``: :func:`default_out_dir`. Neither:
        no folder (:attr:`RunPlan.out` None).
    root : str or Path, optional
        Parent of the default output folder.
    pairs : set of (int, int), optional
        Keep only the jobs of these ``(variant index, point index)`` pairs; default all.

    Raises
    ------
    ConfigError
        As :func:`run_experiment` says, but for the helper processes' environment.
    """
    kind_name = config_kind(config)
    kind = get_kind(kind_name)
    prepared = kind.prepare(config)
    if block_size is None:
        block_size = _auto_block_size(kind.n_groups(config), config.runs, backend)
    block_size = check_range("--block-size", block_size, lo=1, integer=True)
    if out is None and root is not None:
        out = default_out_dir(config, root)
    if out is not None:
        if out.exists():
            raise ConfigError("--out", str(out), "already exists; choose a new folder")
        check_writable(out)
    jobs = kind.plan_jobs(config, prepared, block_size=block_size)
    if pairs is not None:
        jobs = [j for j in jobs if (j.variant, j.point) in pairs]
    return RunPlan(config, kind_name, kind, prepared, block_size, jobs, out)


def execute(plan: RunPlan, backend: Backend, progress) -> Executed:
    """Compile (``kind.warm_up``), then run the plan's jobs on ``backend``, showing it.

    ``progress``: a :class:`~dyna.experiment.progress.RunProgress` to report to (left
    open), or what :func:`run_experiment` takes (then one is made here and closed).

    Raises
    ------
    Exception
        Whatever a job raised; a backend's partial failure only when no (variant, point)
        finished all its runs (else it is :attr:`Executed.failed`).
    """
    if not isinstance(progress, RunProgress):
        with _progress(plan.config, progress) as shown:
            return execute(plan, backend, shown)
    kind, config = plan.kind, plan.config
    cold = (kind.kernel_module is not None
            and kernel_cache.compiled_kernels(module=kind.kernel_module) == 0)
    if cold:
        progress.note("compiling kernels, first run only (numba caches them on disk)")
        progress.stage("compile")
    compile_s = kind.warm_up()
    if cold:
        progress.finish("kernels compiled")
    t_run = time.perf_counter()
    total_runs = sum(len(j.run_indices) for j in plan.jobs)
    progress.stage("runs", total_runs, unit=kind.progress_unit,
                   detail=f"{len(plan.jobs):,} job{'s' if len(plan.jobs) != 1 else ''}")
    jobs, failed = plan.jobs, None
    try:
        results = backend.map(kind.job_function, jobs,
                              on_result=lambda job, _res: progress.advance(len(job.run_indices)))
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
    progress.finish()
    return Executed(jobs, results, failed, compile_s, time.perf_counter() - t_run)


def _progress(config, progress: bool | None) -> RunProgress:
    """The display :func:`run_experiment`'s ``progress`` asks for: False nothing, True a bar
    on a terminal and plain lines elsewhere, None a bar on a terminal and nothing elsewhere."""
    if progress is None:
        progress = sys.stderr.isatty()
    return RunProgress(config.name, "auto" if progress else "off")


def write_output(plan: RunPlan, done: Executed, backend: Backend,
                 source: str | Path | None, t_start: float, *,
                 progress: RunProgress | None = None) -> Path:
    """Write the tables, plots, report and ``manifest.json`` of an executed plan into a
    hidden folder and rename it to ``plan.out``; where it went. Each stage is shown on
    ``progress`` (default: nothing).

    Raises
    ------
    ConfigError
        The folder cannot be made (field ``--out``).
    Exception
        Whatever building the tables or rendering raised (``done.failed`` instead, when
        set); the hidden folder is removed first.
    """
    config, kind = plan.config, plan.kind
    progress = progress or RunProgress(config.name, "off")
    t_out = time.perf_counter()
    folder = TempFolder(plan.out)
    try:
        progress.stage("tables")
        jobs, results = _canonical(done.jobs, done.results, config.runs)
        frames = kind.build_tables(config, plan.prepared, jobs, results)
        files = {}
        for name, frame in frames.items():
            data, files[f"{name}.parquet"] = table_file(frame)
            (folder.path / f"{name}.parquet").write_bytes(data)
        rows = sum(f["rows"] for f in files.values())
        progress.finish(f"{len(files)} table{'s' if len(files) != 1 else ''}, {rows:,} rows")
        manifest = run_manifest(plan, done, backend, files, source)
        output = ExperimentOutput(config=config, manifest=manifest, tables=dict(frames))
        render_output(kind, output, folder.path, t_out, t_start, progress=progress)
        if done.failed is not None:
            manifest["complete"] = False
            manifest["failed_jobs"] = [
                {"job": job.describe(), "variant": job.variant, "point": job.point,
                 "runs": list(job.run_indices), "error": f"{type(e).__name__}: {e}",
                 "attempts": attempts} for job, e, attempts in done.failed.failures]
        (folder.path / "manifest.json").write_text(
            json.dumps(manifest, indent=2, default=json_default, allow_nan=False) + "\n")
        return folder.publish()
    except BaseException:
        folder.discard()
        if done.failed is not None:
            raise done.failed from None
        raise


def run_manifest(plan: RunPlan, done: Executed, backend: Backend, files: dict,
                 source: str | Path | None) -> dict:
    """The manifest of a run before its output times: the validated config and its hash,
    seed, runs, source file, creation time (UTC), package versions, platform, git commit,
    what the kind resolved, backend, tables (rows, sha256) and the compile and run times
    (seconds).

    Raises
    ------
    RuntimeError
        The kind's manifest entries use one of the runner's keys.
    """
    config = plan.config
    manifest = {
        "name": config.name,
        "kind": plan.kind_name,
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
    clash = set(plan.prepared.manifest) & (set(manifest) | {"backend", "tables", "timing"})
    if clash:
        raise RuntimeError(f"kind {plan.kind_name!r} manifest entries clash: {sorted(clash)}")
    manifest.update(plan.prepared.manifest)
    manifest.update({
        "backend": {**backend.describe(), "block_size": plan.block_size,
                    "jobs": len(done.jobs)},
        "tables": files,
        "timing": {"compile_time_s": round(done.compile_s, 4),
                   "run_time_s": round(done.run_s, 4)},
    })
    return manifest


def render_output(kind, output: ExperimentOutput, folder: Path, t_out: float,
                  t_start: float, *, progress: RunProgress | None = None) -> None:
    """Draw the plots and write ``report.md`` into ``folder``, and put the output and wall
    times (seconds since ``t_out`` and ``t_start``) into ``output.manifest["timing"]``.

    A kind with ``render(out, folder)`` draws both in one call (its report shows no
    timing, so the times include the report); otherwise the times are taken after the
    plots, before the report, which shows them. Each stage is shown on ``progress``.
    """
    progress = progress or RunProgress(output.config.name, "off")
    timing = output.manifest["timing"]

    def stamp():
        timing["output_time_s"] = round(time.perf_counter() - t_out, 4)
        timing["wall_time_s"] = round(time.perf_counter() - t_start, 4)

    if callable(getattr(kind, "render", None)):
        progress.stage("statistics, plots and report")
        paths = kind.render(output, folder)
        stamp()
        progress.finish(f"{_files(paths)} and report.md")
    else:
        progress.stage("plots")
        paths = kind.draw_plots(output, folder)
        stamp()
        progress.finish(_files(paths))
        progress.stage("statistics and report")
        kind.write_report(output, folder)
        progress.finish("report.md")


def _files(paths) -> str:
    """``"3 plot files"`` for a list of written paths (None: none)."""
    n = len(paths or [])
    return f"{n} plot file{'s' if n != 1 else ''}"


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
    plan = plan_run(config, backend, block_size, pairs=pairs)
    done = execute(plan, backend, progress)
    if done.failed is not None:
        raise done.failed
    jobs, results = _canonical(done.jobs, done.results, config.runs)
    return plan.kind.build_tables(config, plan.prepared, jobs, results)


def _auto_block_size(n_groups: int, runs: int, backend: Backend) -> int:
    """All runs of a group in one job, unless fewer groups than workers: then blocks
    small enough to keep every worker busy."""
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


def _complete_groups(jobs: list[Job], results: list, runs: int) -> tuple[list[Job], list]:
    """The jobs (and results) of every (variant, point) whose runs 0..runs-1 all finished."""
    groups: dict[tuple, list] = {}
    for job, res in zip(jobs, results):
        groups.setdefault((job.variant, job.point), []).append((job, res))
    kept = [pair for items in groups.values()
            if sorted(i for job, _ in items for i in job.run_indices) == list(range(runs))
            for pair in items]
    return [job for job, _ in kept], [res for _, res in kept]
