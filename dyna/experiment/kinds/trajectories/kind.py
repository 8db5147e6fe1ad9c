"""Kind ``trajectories``: the :class:`~dyna.experiment.protocol.ExperimentKind` object."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from dyna.experiment.backends import Job, split_runs
from dyna.experiment.kinds.trajectories.config import (
    TrajectoriesConfig,
    parse_trajectories,
    variant_spec,
)
from dyna.experiment.kinds.trajectories.job import (
    EPISODE_FIELDS,
    cached_runs,
    file_sha,
    resolve_data_path,
    run_job,
)
from dyna.experiment.protocol import ExperimentKind, Prepared

__all__ = ["KIND", "TrajectoriesKind", "induction_summary", "personal_data_table"]


def _data(config: TrajectoriesConfig) -> tuple[str, str]:
    path = resolve_data_path(config.data, config.base_dir)
    return str(path), file_sha(path)


class TrajectoriesKind(ExperimentKind):
    """Kind ``trajectories`` (package docstring)."""

    name = "trajectories"
    progress_unit = "run"

    def parse(self, data, *, runs=None, seed=None, base_dir=None):
        return parse_trajectories(data, runs=runs, seed=seed, base_dir=base_dir)

    def prepare(self, config: TrajectoriesConfig) -> Prepared:
        """Read and check the trajectories file (a malformed file stops here, before the
        output folder exists)."""
        from dyna.loops.trajectories import harvest_by_field
        path, sha = _data(config)
        runs = cached_runs(path, sha, config.first_runs)
        types: dict[str, int] = {}
        for r in runs:
            if r.trial == runs[0].trial:
                types[r.task_type] = types.get(r.task_type, 0) + 1
        harvested = {}
        for r in runs:
            for k, vs in harvest_by_field(r).items():
                harvested.setdefault(k, set()).update(vs)
        info = {"path": path, "sha256": sha, "runs": len(runs),
                "tasks": len({r.task_id for r in runs}),
                "trials": len({r.trial for r in runs}),
                "successes": sum(r.success for r in runs),
                "tool_calls": sum(len(r.tool_calls) for r in runs),
                "tokens_recorded": sum(r.tokens for r in runs),
                "task_types": dict(sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))),
                "personal_values": {k: len(v) for k, v in harvested.items()}}
        return Prepared(manifest={"data": info}, state={"path": path, "sha": sha})

    def n_groups(self, config) -> int:
        return len(config.variants) + 1

    def plan_jobs(self, config, prepared, *, block_size):
        jobs = []
        for v, name in enumerate(config.variants):
            spec = variant_spec(name, config.store, config.loop)
            payload = {"variant_name": name, "point_kwargs": {}, "store": spec.store,
                       "learner": spec.learner, "seed": config.seed,
                       "data": prepared.state["path"], "data_sha": prepared.state["sha"],
                       "reviewer": dict(config.reviewer), "loop": dict(config.loop),
                       "redaction": bool(spec.config.redaction) if spec.config else False,
                       "extra_sensitive_keys": list(config.digest["extra_sensitive_keys"]),
                       "trusted": bool(config.digest["tools_trusted"]),
                       "near_duplicate": config.analysis["near_duplicate"],
                       "first_runs": config.first_runs, "llm": config.llm,
                       "replay": config.replay}
            for block in split_runs(config.runs, block_size):
                jobs.append(Job(variant=v, point=0, run_indices=block, payload=payload))
        # one more group, computed once for all its runs: the importer's episodes in an
        # experience store (it depends on the data only)
        jobs.append(Job(variant=len(config.variants), point=0,
                        run_indices=tuple(range(config.runs)),
                        payload={"variant_name": "experience_store", "point_kwargs": {},
                                 "learner": "store", "data": prepared.state["path"],
                                 "data_sha": prepared.state["sha"],
                                 "first_runs": config.first_runs}))
        return jobs

    @property
    def job_function(self):
        return run_job

    def build_tables(self, config, prepared, jobs, results):
        from dyna.loops.trajectories import leave_one_task_out
        runs = cached_runs(prepared.state["path"], prepared.state["sha"], config.first_runs)
        groups: dict[int, list] = {}
        store = None
        for job, res in zip(jobs, results):
            if job.payload["learner"] == "store":
                store = res["store_episodes"]
                continue
            groups.setdefault(job.variant, []).append(res)
        ep_frames, run_frames = [], []
        E = len(runs)
        trial = np.array([r.trial for r in runs], dtype=np.int64)
        task = np.array([r.task_id for r in runs], dtype=np.int64)
        success = np.array([r.success for r in runs])
        for v, parts in sorted(groups.items()):
            name = config.variants[v]
            learner = variant_spec(name, config.store, config.loop).learner
            arrays = {k: np.concatenate([x["episodes"][k] for x in parts])
                      for k in EPISODE_FIELDS}
            rows = [row for x in parts for row in x["runs"]]
            R = len(rows)
            ep_frames.append(pl.DataFrame({
                "variant": pl.Series([name] * (R * E), dtype=pl.String),
                "run": np.repeat(np.arange(R, dtype=np.int64), E),
                "episode": np.tile(np.arange(1, E + 1, dtype=np.int64), R),
                "trial": np.tile(trial, R), "task_id": np.tile(task, R),
                "success": np.tile(success, R),
                **{k: a.ravel() for k, a in arrays.items()}}))
            cols = sorted({k for row in rows for k in row})
            run_frames.append(pl.DataFrame({
                "variant": pl.Series([name] * R, dtype=pl.String),
                "learner": pl.Series(["baseline" if learner == "baseline" else "loop"] * R,
                                     dtype=pl.String),
                "run": np.arange(R, dtype=np.int64),
                **{k: np.array([int(row.get(k, 0)) for row in rows], dtype=np.int64)
                   for k in cols}}))
        induction = pl.DataFrame(leave_one_task_out(runs), infer_schema_length=None)
        tables = {"episodes": pl.concat(ep_frames, how="vertical"),
                  "runs": pl.concat(run_frames, how="diagonal_relaxed").fill_null(0),
                  "induction": induction,
                  "induction_summary": induction_summary(induction, config.analysis,
                                                         config.seed),
                  "store_episodes": pl.DataFrame(store)}
        if config.llm is not None:
            from dyna.experiment.kinds.trajectories.llm_tables import llm_tables
            tables.update(llm_tables(config, jobs, results))
        return tables

    def draw_plots(self, out, folder):
        from dyna.experiment.kinds.trajectories.plots import draw_plots

        return draw_plots(out, Path(folder))

    def write_report(self, out, folder):
        from dyna.experiment.kinds.trajectories.report import build_report

        from dyna.experiment.reporting import write_report_file

        return write_report_file(folder, build_report(out, Path(folder)))

    def required_tables(self):
        return ("episodes", "runs", "induction", "induction_summary")

    def table_schema(self, config) -> dict[str, dict[str, str]]:
        """Columns every folder of this kind has and its plots and report read (kinds as
        in :func:`dyna.experiment.runner.load_output`). A ``runs`` counter is written only
        when some variant counts it, and an ``induction`` score column is all null when no
        task was scored, so those are left out; the bootstrap interval of
        ``induction_summary`` is NaN with fewer than two scored tasks."""
        return {
            "episodes": {"variant": "str", "run": "int", "episode": "int", "trial": "int",
                         "task_id": "int", "success": "bool",
                         **{k: "int" for k in EPISODE_FIELDS}},
            "runs": {"variant": "str", "learner": "str", "run": "int"},
            "induction": {"task_id": "int", "status": "str"},
            "induction_summary": {"predictor": "str", "metric": "str", "n_tasks": "int",
                                  "mean": "float", "low": "float", "high": "float"},
        }


def personal_data_table(runs_table: pl.DataFrame) -> pl.DataFrame:
    """Per variant, the mean over runs of the personal-data counts (``pd_*`` columns and
    the safety net's catches)."""
    cols = ["pd_digest", "pd_proposals", "pd_reviewer", "pd_store", "safety_net_catches"]
    return (runs_table.group_by("variant", maintain_order=True)
            .agg([pl.col(c).mean() for c in cols]))


def induction_summary(induction: pl.DataFrame, analysis: dict, seed: int) -> pl.DataFrame:
    """Mean precision, recall and exact-sequence rate of each predictor over the scored
    tasks, with percentile bootstrap intervals over tasks (:func:`scipy.stats.bootstrap`),
    and each baseline's paired difference from the induced workflow.

    Returns
    -------
    polars.DataFrame
        ``predictor, metric, n_tasks, mean, low, high`` (``predictor`` ``induced -
        <baseline>`` for the paired differences).
    """
    from scipy import stats

    from dyna.loops.trajectories import PREDICTORS
    scored = induction.filter(pl.col("status") == "scored")
    n = scored.height
    rows = []
    conf, B = analysis["confidence"], analysis["n_resamples"]

    def interval(x):
        x = np.asarray(x, dtype=np.float64)
        if n < 2 or np.ptp(x) == 0:
            return float(x.mean()) if n else float("nan"), \
                (float(x.mean()) if n >= 2 else float("nan")), \
                (float(x.mean()) if n >= 2 else float("nan"))
        res = stats.bootstrap((x,), np.mean, n_resamples=B, confidence_level=conf,
                              method="percentile", rng=np.random.default_rng(seed))
        return float(x.mean()), float(res.confidence_interval.low), \
            float(res.confidence_interval.high)

    for metric in ("precision", "recall", "exact"):
        base = scored.get_column(f"induced_{metric}").cast(pl.Float64).to_numpy() \
            if n else np.zeros(0)
        for p in PREDICTORS:
            x = scored.get_column(f"{p}_{metric}").cast(pl.Float64).to_numpy() if n \
                else np.zeros(0)
            rows.append((p, metric, n, *interval(x)))
            if p != "induced":
                rows.append((f"induced - {p}", metric, n, *interval(base - x)))
    return pl.DataFrame(rows, schema=["predictor", "metric", "n_tasks", "mean", "low",
                                      "high"], orient="row")


KIND = TrajectoriesKind()
