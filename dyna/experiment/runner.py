"""Run an experiment: every variant x sweep point x run, into one output folder.

:func:`run_experiment` works for every experiment kind (:mod:`dyna.experiment.kinds`). It
asks the kind to resolve its inputs before anything touches the disk (for ``tabular``: one
env table per sweep point, so an unknown env id or bad kwarg fails cleanly), splits the runs
into jobs (:class:`dyna.experiment.backends.Job`: a variant at a sweep point for a block of
run indices), hands them to a backend with a progress bar, puts the results in canonical
order, and writes atomically the kind's tables (``<name>.parquet``), ``manifest.json``,
``plots/`` and ``report.md``. For kind ``tabular`` (:class:`TabularKind`) the tables are:

``results.parquet``
    Tidy, one row per variant x sweep point x run x episode (``episodes`` schedule:
    ``variant, agent, <sweep keys>, run, episode, steps, return, terminated, updates``) or per
    logged time step (``total_steps`` schedule: ``variant, agent, <sweep keys>, run, step,
    reward, cumulative_reward``).
``evals.parquet``
    When evaluating: ``variant, agent, <sweep keys>, run, episode, score`` (no row for an
    evaluation a run did not reach because it had stopped at the optimal path).
``runs.parquet``
    One row per run: totals and, for ``stop_at_optimal``, ``updates_to_optimal`` (null if
    the run never found an optimal path).
``manifest.json``
    Validated config and its hash, seed, package versions, resolved env ids and metadata
    per sweep point, backend, and timings (wall, compile, run, output; seconds).
``plots/``, ``report.md``
    See :mod:`dyna.experiment.plots` and :mod:`dyna.experiment.report`.

Everything is written into a hidden temporary sibling folder that is renamed into place at
the end; on any error or Ctrl-C it is removed, so no partial output folder is ever left.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dyna.errors import ConfigError, DynaError, MissingFileError, check_range
from dyna.experiment.backends import Backend, InProcessBackend, Job, split_runs
from dyna.experiment.config import ExperimentConfig, parse_config
from dyna.experiment.kinds import (DEFAULT_KIND, ExperimentKind, Prepared, config_kind,
                                   get_kind, parse_experiment)

__all__ = ["ExperimentOutput", "TABULAR", "TabularKind", "draw_output_plots", "execute_job",
           "load_output", "plan_jobs", "run_experiment"]

RESULT_FIELDS = ("episode_steps", "episode_return", "episode_terminated", "episode_updates",
                 "step_reward", "eval_score", "eval_episode", "updates_to_optimal",
                 "final_greedy_steps")

_PACKAGES = ("dyna", "numpy", "scipy", "numba", "gymnasium", "polars", "matplotlib", "tqdm")


# --------------------------------------------------------------------------- environments

@functools.lru_cache(maxsize=16)
def _cached_table(env_id: str, kwargs_json: str):
    import envs

    return envs.make_table(env_id, **json.loads(kwargs_json))


def _canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def make_env_table(env_id: str, kwargs: dict):
    """``envs.make_table(env_id, **kwargs)``, cached per process.

    Returns
    -------
    (envs.tabular.TabularTable, dict)
        The table and its JSON-ready metadata.

    Raises
    ------
    UnknownEnvError, ConfigError
        From :func:`envs.make_table`; a ``TypeError`` for a wrong keyword becomes a
        ConfigError on ``env.kwargs``.
    """
    try:
        return _cached_table(env_id, _canonical_json(kwargs))
    except DynaError:
        raise
    except TypeError as exc:
        raise ConfigError("env.kwargs", kwargs, str(exc)) from None


# --------------------------------------------------------------------------- jobs

def optimal_length(meta: dict, tolerance: float = 1.0) -> int:
    """Greedy path length (steps) accepted as optimal: ``floor(L * tolerance + 1e-9)``.

    ``L`` is the environment's ``optimal_path_length`` (Example 8.4 of Sutton & Barto).
    """
    return int(math.floor(int(meta["optimal_path_length"]) * tolerance + 1e-9))


def plan_jobs(config: ExperimentConfig, metas: list[dict], *, block_size: int) -> list[Job]:
    """Split the experiment into jobs, in canonical order.

    Parameters
    ----------
    config : ExperimentConfig
    metas : list of dict
        Environment metadata per sweep point (from :func:`envs.make_table`); gives
        ``optimal_path_length`` when ``schedule.stop_at_optimal``.
    block_size : int
        Maximum runs per job.

    Returns
    -------
    list of Job
        Ordered by (variant, sweep point, first run index).
    """
    s = config.schedule
    jobs = []
    for v, variant in enumerate(config.variants):
        for p, point in enumerate(config.sweep_points()):
            optimal = optimal_length(metas[p], s.optimal_tolerance) if s.stop_at_optimal else 0
            payload = {
                "variant_name": variant.name, "agent": variant.agent,
                "hparams": dict(variant.hparams), "env_id": config.env.id,
                "env_kwargs": config.env_kwargs(point), "point_kwargs": dict(point),
                "seed": config.seed, "episodes": s.episodes, "total_steps": s.total_steps,
                "eval_every": s.eval_every, "eval_episodes": s.eval_episodes,
                "optimal_length": optimal,
            }
            for block in split_runs(config.runs, block_size):
                jobs.append(Job(variant=v, point=p, run_indices=block, payload=payload))
    return jobs


def execute_job(job: Job) -> dict:
    """Run one job (top-level, so process pools can pickle it).

    Returns
    -------
    dict
        The :class:`dyna.agents.RunResult` fields as numpy arrays (see
        :data:`RESULT_FIELDS`), with a leading axis of ``len(job.run_indices)`` runs
        (``eval_episode`` has shape ``(n_eval,)``).
    """
    from dyna.agents import run_agent

    p = job.payload
    table, _ = make_env_table(p["env_id"], p["env_kwargs"])
    result = run_agent(p["agent"], p["hparams"], table, seed=p["seed"],
                       run_indices=list(job.run_indices), episodes=p["episodes"],
                       total_steps=p["total_steps"], eval_every=p["eval_every"],
                       eval_episodes=p["eval_episodes"], optimal_length=p["optimal_length"])
    out = {name: np.asarray(getattr(result, name)) for name in RESULT_FIELDS}
    n = len(job.run_indices)
    for name, arr in out.items():
        if name != "eval_episode" and arr.shape[:1] != (n,):
            raise RuntimeError(f"run_agent returned {name} of shape {arr.shape} for {n} runs")
    return out


def _merge(jobs: list[Job], results: list[dict], config: ExperimentConfig) -> dict:
    """Concatenate job results per (variant, point) along the run axis, in run order."""
    merged: dict[tuple, dict] = {}
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].key)
    for i in order:
        job, res = jobs[i], results[i]
        slot = merged.setdefault((job.variant, job.point), {"runs": [], "parts": []})
        slot["runs"].extend(job.run_indices)
        slot["parts"].append(res)
    out = {}
    for key, slot in merged.items():
        if slot["runs"] != list(range(config.runs)):
            raise RuntimeError(f"jobs of {key} covered runs {slot['runs']}, "
                               f"expected 0..{config.runs - 1}")
        parts = slot["parts"]
        arrays = {name: np.concatenate([p[name] for p in parts], axis=0)
                  for name in RESULT_FIELDS if name != "eval_episode"}
        arrays["eval_episode"] = parts[0]["eval_episode"]
        out[key] = arrays
    return out


# --------------------------------------------------------------------------- tables

def _id_columns(n: int, variant, point: dict, runs: np.ndarray) -> dict:
    cols = {
        "variant": pl.Series("variant", [variant.name] * n, dtype=pl.String),
        "agent": pl.Series("agent", [variant.agent] * n, dtype=pl.String),
    }
    for key, value in point.items():
        cols[key] = pl.Series(key, [value] * n)
    cols["run"] = pl.Series("run", runs, dtype=pl.Int64)
    return cols


def build_tables(config: ExperimentConfig, merged: dict) -> dict[str, pl.DataFrame]:
    """Tidy tables from merged results, in canonical row order.

    Parameters
    ----------
    config : ExperimentConfig
    merged : dict
        ``(variant index, point index) -> arrays`` as from the runner's merge step.

    Returns
    -------
    dict of polars.DataFrame
        ``"results"``, ``"runs"`` and, when evaluating, ``"evals"`` (columns in the module
        docstring).
    """
    s = config.schedule
    points = config.sweep_points()
    results, runs_rows, evals = [], [], []
    for v, variant in enumerate(config.variants):
        for p, point in enumerate(points):
            if (v, p) not in merged:   # a failed group left out of a partial output
                continue
            a = merged[(v, p)]
            R = config.runs
            run_idx = np.arange(R, dtype=np.int64)
            if s.episodes is not None:
                steps = a["episode_steps"].astype(np.int64)
                E = steps.shape[1]
                frame = pl.DataFrame({
                    **_id_columns(R * E, variant, point, np.repeat(run_idx, E)),
                    "episode": np.tile(np.arange(1, E + 1, dtype=np.int64), R),
                    "steps": steps.ravel(),
                    "return": a["episode_return"].astype(np.float64).ravel(),
                    "terminated": a["episode_terminated"].astype(bool).ravel(),
                    "updates": a["episode_updates"].astype(np.int64).ravel(),
                })
                if s.stop_at_optimal:  # episodes after a run stopped were never played
                    frame = frame.filter(pl.col("steps") > 0)
                played = steps > 0
                summary = {
                    "episodes": played.sum(axis=1).astype(np.int64),
                    "total_steps": np.where(played, steps, 0).sum(axis=1),
                    "total_return": np.where(played, a["episode_return"], 0.0).sum(axis=1),
                    "updates": a["episode_updates"].astype(np.int64).max(axis=1,
                                                                         initial=0),
                }
            else:
                rewards = a["step_reward"].astype(np.float64)
                T = rewards.shape[1]
                starts = np.arange(0, T, s.log_every)
                ends = np.minimum(starts + s.log_every, T)  # logged at step `end`
                window = np.add.reduceat(rewards, starts, axis=1)
                cum = np.cumsum(rewards, axis=1)[:, ends - 1]
                L = len(starts)
                frame = pl.DataFrame({
                    **_id_columns(R * L, variant, point, np.repeat(run_idx, L)),
                    "step": np.tile(ends.astype(np.int64), R),
                    "reward": window.ravel(),
                    "cumulative_reward": cum.ravel(),
                })
                summary = {"total_steps": np.full(R, T, dtype=np.int64),
                           "total_return": rewards.sum(axis=1)}
            results.append(frame)
            greedy = a["final_greedy_steps"].astype(np.int64)
            summary["final_greedy_steps"] = pl.Series(
                [int(g) if g >= 0 else None for g in greedy], dtype=pl.Int64)
            run_frame = pl.DataFrame({**_id_columns(R, variant, point, run_idx), **summary})
            if s.stop_at_optimal:
                uto = a["updates_to_optimal"].astype(np.int64)
                run_frame = run_frame.with_columns(
                    pl.Series("updates_to_optimal", [int(u) if u >= 0 else None for u in uto],
                              dtype=pl.Int64),
                    pl.Series("found", uto >= 0, dtype=pl.Boolean))
            runs_rows.append(run_frame)
            if s.eval_every:
                scores = a["eval_score"].astype(np.float64)
                ep = a["eval_episode"].astype(np.int64)
                K = len(ep)
                evals.append(pl.DataFrame({
                    **_id_columns(R * K, variant, point, np.repeat(run_idx, K)),
                    "episode": np.tile(ep, R),
                    "score": scores.ravel(),
                }).filter(pl.col("score").is_not_nan()))  # NaN: run had stopped (optimal)
    tables = {"results": pl.concat(results, how="vertical"),
              "runs": pl.concat(runs_rows, how="vertical")}
    if evals:
        tables["evals"] = pl.concat(evals, how="vertical")
    return tables


# --------------------------------------------------------------------------- output

@dataclass
class ExperimentOutput:
    """The contents of an output folder, as read back by :func:`load_output`.

    Attributes
    ----------
    config : ExperimentConfig or another kind's config object
    manifest : dict
        ``manifest.json``.
    results, runs : polars.DataFrame or None
        The ``results`` and ``runs`` tables (always present for kind ``tabular``).
    evals : polars.DataFrame or None
    tables : dict of str to polars.DataFrame
        Every table of the folder by name (``results``, ``runs``, ... -- whatever the kind
        wrote); filled from ``results`` / ``runs`` / ``evals`` when built with those.
    """

    config: Any
    manifest: dict
    results: pl.DataFrame | None = None
    runs: pl.DataFrame | None = None
    evals: pl.DataFrame | None = None
    tables: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("results", "runs", "evals"):
            frame = getattr(self, name)
            if frame is not None:
                self.tables.setdefault(name, frame)
            elif name in self.tables:
                setattr(self, name, self.tables[name])

    @property
    def kind(self) -> str:
        """Experiment kind (``manifest["kind"]``, default ``tabular``)."""
        return self.manifest.get("kind", DEFAULT_KIND)

    @property
    def sweep_keys(self) -> list[str]:
        """Env kwargs swept over (results columns)."""
        return list(getattr(self.config, "sweep", {}) or {})

    @property
    def env_metas(self) -> list[dict]:
        """Environment metadata per sweep point (manifest ``envs[i].meta``)."""
        return [e["meta"] for e in self.manifest.get("envs", [])]


def load_output(folder: str | Path) -> ExperimentOutput:
    """Read an output folder written by :func:`run_experiment` (any kind).

    Every table listed in the manifest is read; the config is rebuilt from the manifest
    with :func:`dyna.experiment.kinds.parse_experiment`.

    Raises
    ------
    MissingFileError
        ``folder`` has no ``manifest.json``, or a table the manifest lists (or the kind
        requires; ``results.parquet`` and ``runs.parquet`` for tabular) is missing.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingFileError("DIR", folder, "no such folder")
    if not (folder / "manifest.json").is_file():
        raise MissingFileError("DIR", folder, "not a dyna output folder (no manifest.json)")
    manifest = json.loads((folder / "manifest.json").read_text())
    kind_name = manifest.get("kind", DEFAULT_KIND)
    kind = get_kind(kind_name)
    names = [f"{t}.parquet" for t in kind.required_tables()]
    names += [n for n in manifest.get("tables", {}) if n not in names]
    for name in names:
        if not (folder / name).is_file():
            raise MissingFileError("DIR", folder / name)
    config_data = dict(manifest["config"])
    if kind_name != DEFAULT_KIND:
        config_data["kind"] = kind_name
    config = parse_experiment(config_data)
    tables = {n[:-len(".parquet")]: pl.read_parquet(folder / n) for n in names}
    return ExperimentOutput(config=config, manifest=manifest, tables=tables)


def _json_default(obj):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def package_versions() -> dict:
    """Installed versions of dyna's main dependencies (None when missing)."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def default_out_dir(config: ExperimentConfig, root: str | Path = "runs") -> Path:
    """``<root>/<name>-<YYYYmmdd-HHMMSS>`` (with ``-2``, ``-3``... if taken)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{config.name}-{stamp}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _auto_block_size(n_groups: int, runs: int, backend: Backend) -> int:
    if backend.workers <= 1 or n_groups >= backend.workers:
        return runs
    blocks_per_group = math.ceil(backend.workers / n_groups)
    return max(1, math.ceil(runs / blocks_per_group))


def _warm_up() -> float:
    """Compile (or load from numba's on-disk cache) the agents' kernels; seconds taken."""
    from dyna import agents

    return float(agents.warmup())


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


# --------------------------------------------------------------------------- tabular kind

class TabularKind(ExperimentKind):
    """Kind ``tabular``: tabular Dyna agents on Gymnasium tables (this module's tables,
    :mod:`dyna.experiment.plots`, :mod:`dyna.experiment.report`)."""

    name = "tabular"

    def parse(self, data, *, runs=None, seed=None):
        return parse_config(data, runs=runs, seed=seed)

    def prepare(self, config: ExperimentConfig) -> Prepared:
        metas = []
        for point in config.sweep_points():
            _, meta = make_env_table(config.env.id, config.env_kwargs(point))
            metas.append(meta)
            if config.schedule.stop_at_optimal and not meta.get("optimal_path_length"):
                raise ConfigError("schedule.stop_at_optimal", True,
                                  f"env {config.env.id!r} reports no optimal_path_length")
        envs_manifest = [{"point": point, "kwargs": config.env_kwargs(point), "meta": meta}
                         for point, meta in zip(config.sweep_points(), metas)]
        return Prepared(manifest={"envs": envs_manifest}, state=metas)

    def n_groups(self, config: ExperimentConfig) -> int:
        return len(config.variants) * len(config.sweep_points())

    def plan_jobs(self, config, prepared, *, block_size):
        return plan_jobs(config, prepared.state, block_size=block_size)

    @property
    def job_function(self):
        return execute_job  # looked up at call time (tests monkeypatch it)

    def warm_up(self) -> float:
        return _warm_up()

    def build_tables(self, config, prepared, jobs, results):
        return build_tables(config, _merge(list(jobs), list(results), config))

    def draw_plots(self, out, folder):
        from dyna.experiment import plots

        return plots.draw_plots(out, folder)

    def write_report(self, out, folder):
        from dyna.experiment import report

        return report.write_report(out, folder)

    def required_tables(self):
        return ("results", "runs")


#: The ``tabular`` kind instance registered in :data:`dyna.experiment.kinds.KINDS`.
TABULAR = TabularKind()


def draw_output_plots(out: ExperimentOutput, folder: str | Path) -> list[Path]:
    """Draw the plots of an output of any kind (``dyna plot DIR``)."""
    return get_kind(out.kind).draw_plots(out, Path(folder))


# --------------------------------------------------------------------------- running

def run_experiment(config, out_dir: str | Path | None = None, *,
                   backend: Backend | None = None, block_size: int | None = None,
                   progress: bool | None = None, source: str | Path | None = None,
                   root: str | Path = "runs") -> Path:
    """Run every variant x sweep point x run and write one output folder atomically.

    Works for every experiment kind (:mod:`dyna.experiment.kinds`); the kind is read from
    the config (``to_dict()["kind"]``, default ``tabular``).

    Parameters
    ----------
    config : ExperimentConfig or another kind's config
        Validated experiment (:func:`dyna.experiment.kinds.load_experiment`).
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
        ``out_dir`` (field ``"--out"``), ``block_size`` < 1 (field ``"--block-size"``).
    Exception
        Whatever a job raised (with a note naming the job). In every error case (and on
        KeyboardInterrupt) no output folder is left behind.
    """
    from tqdm.auto import tqdm

    t_start = time.perf_counter()
    backend = backend or InProcessBackend()
    kind_name = config_kind(config)
    kind = get_kind(kind_name)

    # 1. Everything that can fail on bad input, before touching the disk.
    prepared = kind.prepare(config)
    if block_size is None:
        block_size = _auto_block_size(kind.n_groups(config), config.runs, backend)
    block_size = check_range("--block-size", block_size, lo=1, integer=True)
    out = Path(out_dir) if out_dir is not None else default_out_dir(config, root)
    if out.exists():
        raise ConfigError("--out", str(out), "already exists; choose a new folder")
    jobs = kind.plan_jobs(config, prepared, block_size=block_size)

    # 2. Compile, then run the jobs.
    compile_s = kind.warm_up()
    t_run = time.perf_counter()
    total_runs = sum(len(j.run_indices) for j in jobs)
    if progress is None:
        progress = sys.stderr.isatty()
    failed = None
    with tqdm(total=total_runs, desc=config.name, unit=kind.progress_unit,
              disable=not progress, file=sys.stderr, leave=False) as bar:
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
    run_s = time.perf_counter() - t_run

    # 3. Write into a hidden sibling, rename into place at the end.
    t_out = time.perf_counter()
    created_parent = None
    if not out.parent.exists():
        created_parent = out.parent
        while not created_parent.parent.exists():
            created_parent = created_parent.parent
        out.parent.mkdir(parents=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
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
        output = ExperimentOutput(config=config, manifest=manifest, tables=dict(frames))
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
            json.dumps(manifest, indent=2, default=_json_default, allow_nan=False) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; the results are for everyone
        os.rename(tmp, out)
    except BaseException:
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


def _complete_groups(jobs: list[Job], results: list, runs: int) -> tuple[list[Job], list]:
    """The jobs (and results) of every (variant, point) whose runs 0..runs-1 all finished."""
    groups: dict[tuple, list] = {}
    for job, res in zip(jobs, results):
        groups.setdefault((job.variant, job.point), []).append((job, res))
    kept = [pair for items in groups.values()
            if sorted(i for job, _ in items for i in job.run_indices) == list(range(runs))
            for pair in items]
    return [job for job, _ in kept], [res for _, res in kept]


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
