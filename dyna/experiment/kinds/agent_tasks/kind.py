"""Kind ``agent_tasks``: the :class:`~dyna.experiment.protocol.ExperimentKind` object."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from dyna.experiment.backends import Job, split_runs
from dyna.experiment.kinds.agent_tasks.config import AgentTasksConfig, parse_agent_tasks
from dyna.experiment.kinds.agent_tasks.job import execute_agent_job
from dyna.experiment.kinds.agent_tasks.metrics import run_summaries
from dyna.experiment.protocol import ExperimentKind, ExperimentOutput, Prepared

__all__ = ["KIND", "AgentTasksKind", "runs_table"]


# ============================================================================ the kind

class AgentTasksKind(ExperimentKind):
    """Kind ``agent_tasks`` (module docstring)."""

    name = "agent_tasks"
    progress_unit = "run"

    def parse(self, data, *, runs=None, seed=None):
        return parse_agent_tasks(data, runs=runs, seed=seed)

    def prepare(self, config: AgentTasksConfig) -> Prepared:
        from envs import make_agent_task_env
        scen = []
        for i, (name, _) in enumerate(config.scenarios):
            kw = config.env_kwargs(i)
            env = make_agent_task_env(kw)
            scen.append({"scenario": name, "env_kwargs": kw, "n_families": env.n_families,
                         "arrival_p": env.arrival_p.tolist()})
        from dyna.experiment.kinds.agent_tasks.report import statistics_manifest

        return Prepared(manifest={"scenarios": scen, "statistics": statistics_manifest(config)})

    def n_groups(self, config) -> int:
        return len(config.variants) * len(config.scenarios)

    def plan_jobs(self, config, prepared, *, block_size):
        jobs = []
        wanted = _scoped_pairs(config)
        for v, variant in enumerate(config.variants):
            for p, (sname, _) in enumerate(config.scenarios):
                if wanted is not None and (v, p) not in wanted:
                    continue
                payload = {"variant_name": variant, "point_kwargs": {"scenario": sname},
                           "store": config.store, "env_kwargs": config.env_kwargs(p),
                           "episodes": config.episodes, "seed": config.seed,
                           "policy": config.policy_kwargs(p), "loop": dict(config.loop),
                           "chosen_family": int(config.analysis["chosen_family"])}
                if config.agent == "llm":
                    payload.update(agent="llm", llm=dict(config.llm), replay=config.replay)
                for block in split_runs(config.runs, block_size):
                    jobs.append(Job(variant=v, point=p, run_indices=block, payload=payload))
        return jobs

    @property
    def job_function(self):
        return execute_agent_job

    def build_tables(self, config, prepared, jobs, results):
        from dyna.agents.loop_agents import EPISODE_FIELDS

        groups: dict[tuple, list] = {}
        for job, res in zip(jobs, results):
            groups.setdefault((job.variant, job.point), []).append(res)
        ep_frames = []
        E = config.episodes
        for (v, p), parts in sorted(groups.items()):
            arrays = {k: np.concatenate([x[k] for x in parts]) for k in EPISODE_FIELDS}
            R = arrays["success"].shape[0]
            ids = {"variant": pl.Series([config.variants[v]] * (R * E), dtype=pl.String),
                   "scenario": pl.Series([config.scenarios[p][0]] * (R * E),
                                         dtype=pl.String),
                   "run": np.repeat(np.arange(R, dtype=np.int64), E),
                   "episode": np.tile(np.arange(1, E + 1, dtype=np.int64), R)}
            ep_frames.append(pl.DataFrame({**ids, **{k: a.ravel() for k, a in
                                                     arrays.items()}}))
        episodes = pl.concat(ep_frames)
        tables = {"episodes": episodes, "runs": runs_table(config, episodes)}
        if config.agent == "llm":
            from dyna.experiment.kinds.agent_tasks.job import exchanges_table
            tables["llm_exchanges"] = exchanges_table(config, jobs, results)
        return tables

    def derived_tables(self, config, tables) -> dict:
        """The tables computed from the episodes (``dyna report`` computes them again with
        this checkout's metrics): ``runs`` (:func:`runs_table`)."""
        return {"runs": runs_table(config, tables["episodes"])}

    def draw_plots(self, out, folder):
        from dyna.experiment.kinds.agent_tasks.plots import draw_plots

        return draw_plots(_contiguous(out), Path(folder))

    def draw_only(self, out, folder, name: str) -> list[Path]:
        """One figure of :meth:`draw_plots` alone (``dyna plot DIR --only NAME``):
        ``competence``, the competence over episodes, ``plots/competence_<scenario>.png``
        (:func:`~dyna.experiment.kinds.agent_tasks.plots.draw_competence`).

        Raises
        ------
        ConfigError
            Another name (field ``--only``), or an episodes table without the competence
            fields.
        """
        from dyna.errors import ConfigError
        from dyna.experiment.kinds.agent_tasks.plots import draw_competence

        if name != "competence":
            raise ConfigError("--only", name, "must be 'competence'")
        return draw_competence(_contiguous(out), Path(folder))

    def write_report(self, out, folder, body=None):
        from dyna.experiment.kinds.agent_tasks.report import build_report

        from dyna.experiment.reporting import write_report_file

        drawn = sorted(p.stem for p in (Path(folder) / "plots").glob("*.png"))
        return write_report_file(folder, build_report(_contiguous(out), drawn, body=body))

    def render(self, out, folder) -> list[Path]:
        """Plots and ``report.md`` together (what :func:`dyna.experiment.runner.
        run_experiment` calls instead of :meth:`draw_plots` then :meth:`write_report`):
        the report's statistics are computed in this process while other processes draw
        the scenario figures. The same files as the two calls one after the other."""
        from dyna.experiment.kinds.agent_tasks.plots import draw_plots
        from dyna.experiment.kinds.agent_tasks.report import report_body

        whole = _contiguous(out)
        box = {}
        paths = draw_plots(whole, Path(folder), also=lambda: box.update(body=report_body(whole)))
        self.write_report(whole, folder, body=box.get("body"))
        return paths

    def required_tables(self):
        return ("episodes", "runs")

    def table_schema(self, config) -> dict[str, dict[str, str]]:
        """Columns every folder of this kind has and its report, plots and
        :func:`runs_table` read (kinds as in :func:`dyna.experiment.runner.load_output`):
        the episodes table's :data:`EPISODES_NEEDED`, and the keys of the runs table
        (whose metrics :func:`runs_table` derives from the episodes again)."""
        return {
            "episodes": {"variant": "str", "scenario": "str", "run": "int", "episode": "int",
                         "success": "bool", "incident": "bool", "escalated": "bool",
                         **{c: "int" for c in ("tokens", "learning_tokens", "poisoned",
                                               "stale", "library_size", "family",
                                               "drift_family")}},
            "runs": {"variant": "str", "scenario": "str", "run": "int"},
        }

    # the calibration of a file with [calibration] (dyna.experiment.calibration)

    def calibration_pairs(self, config) -> set[tuple[int, int]]:
        """``(variant index, scenario index)`` of the groups a pilot runs: those its checks
        and hypotheses read (:func:`.checks.pilot_pairs`)."""
        from dyna.experiment.kinds.agent_tasks.checks import pilot_pairs

        return pilot_pairs(config)

    def check_results(self, config, tables) -> list:
        """The manipulation checks measured on ``tables`` (:func:`.checks.check_results`)."""
        from dyna.experiment.kinds.agent_tasks.checks import check_results

        return check_results(config, tables)

    def sizing_contrasts(self, config, tables) -> tuple[list, float]:
        """Every hypothesis comparison's per-run differences and the family's alpha, for
        sizing the runs (:func:`.checks.sizing_contrasts`)."""
        from dyna.experiment.kinds.agent_tasks.checks import sizing_contrasts

        return sizing_contrasts(config, tables)


#: The columns of an episodes table :func:`runs_table` reads: the keys, then the fields
#: :func:`~.metrics.run_summaries` needs (numeric or boolean).
EPISODES_NEEDED = ("variant", "scenario", "run", "episode", "success", "tokens",
                   "learning_tokens", "incident", "escalated", "poisoned", "stale",
                   "library_size", "family", "drift_family")


def runs_table(config, episodes: pl.DataFrame) -> pl.DataFrame:
    """The ``runs`` table: one row per variant x scenario x run, in the config's order of
    variants then scenarios, with :func:`~.metrics.run_summaries` of that run's episodes.

    Parameters
    ----------
    config : AgentTasksConfig
    episodes : polars.DataFrame
        The ``episodes`` table: ``variant``, ``scenario``, ``run`` (int64, 0-based),
        ``episode`` (int64, 1-based) and the per-episode fields, ``config.episodes`` rows
        per run in episode order. Pairs a scoped run left out have no rows and no row here.

    Raises
    ------
    ConfigError
        The table lacks a column of :data:`EPISODES_NEEDED`, one is not numeric, it has no
        rows, or a pair's rows are not ``config.episodes`` episodes 1.. per run in order
        (field ``episodes.parquet``).
    """
    from dyna.errors import ConfigError

    E = config.episodes
    missing = [c for c in EPISODES_NEEDED if c not in episodes.columns]
    wrong = [c for c in EPISODES_NEEDED[4:] if c in episodes.columns
             and not (episodes[c].dtype.is_numeric() or episodes[c].dtype == pl.Boolean)]
    if missing or wrong or episodes.height == 0:
        raise ConfigError("episodes.parquet", f"{episodes.height} rows",
                          "not an agent-tasks episodes table: " + (
                              f"no column {', '.join(missing)}" if missing else
                              f"column {', '.join(wrong)} is not numeric" if wrong else
                              "no rows"))
    fields = [c for c in episodes.columns if c not in ("variant", "scenario", "run",
                                                       "episode")]
    pairs = episodes.partition_by("variant", "scenario", as_dict=True, maintain_order=True)
    frames = []
    for variant in config.variants:
        for scenario, _ in config.scenarios:
            part = pairs.get((variant, scenario))
            if part is None:
                continue
            R = part.height // E
            if R * E != part.height or not part["episode"].equals(
                    pl.Series(np.tile(np.arange(1, E + 1, dtype=np.int64), R))):
                raise ConfigError("episodes.parquet", f"{variant}/{scenario}",
                                  f"not {E} episodes 1..{E} per run, in order")
            arrays = {k: part[k].to_numpy().reshape(R, E) for k in fields}
            frames.append(pl.DataFrame({
                "variant": pl.Series([variant] * R, dtype=pl.String),
                "scenario": pl.Series([scenario] * R, dtype=pl.String),
                "run": np.arange(R, dtype=np.int64),
                **run_summaries(arrays, config.analysis)}))
    return pl.concat(frames)


def _scoped_pairs(config) -> set | None:
    """The ``(variant, scenario)`` index pairs a run of ``config`` covers: None for every
    pair; with ``[calibration] scope = "hypotheses"``, the pairs its hypotheses and checks
    compare and the reference variants (``no_learning``, ``oracle``) in every scenario."""
    cal = getattr(config, "calibration", None)
    if cal is None or cal.scope == "grid":
        return None
    from dyna.experiment.kinds.agent_tasks.checks import pilot_pairs

    refs = [v for v, name in enumerate(config.variants) if name in ("no_learning", "oracle")]
    return pilot_pairs(config) | {(v, p) for v in refs for p in range(len(config.scenarios))}


def _contiguous(out):
    """``out`` with every table in one chunk (the same rows, laid out contiguously).

    The tables a run builds concatenate one frame per variant and scenario, and every
    filter of the plots and report pays per chunk: the report body of the skill grid
    (14 variants, 16 scenarios: 224 chunks; 2 runs of 300 episodes) takes 80 s of CPU on
    them and 15 s on one chunk. The written files are made before this and do not
    change."""
    if all(t.n_chunks() == 1 for t in out.tables.values()):
        return out
    return ExperimentOutput(config=out.config, manifest=out.manifest,
                            tables={k: t.rechunk() for k, t in out.tables.items()})


KIND = AgentTasksKind()
