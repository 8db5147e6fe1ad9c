"""Kind ``tabular``: the :class:`~dyna.experiment.protocol.ExperimentKind` object."""

from __future__ import annotations

import dyna.experiment.kinds.tabular.job as tabular_job
from dyna.errors import ConfigError
from dyna.experiment.kinds.tabular.config import ExperimentConfig, parse_tabular
from dyna.experiment.kinds.tabular.job import make_env_table, merge_results, plan_jobs
from dyna.experiment.kinds.tabular.tables import build_tables
from dyna.experiment.protocol import ExperimentKind, Prepared

__all__ = ["KIND", "TabularKind"]


# --------------------------------------------------------------------------- tabular kind

class TabularKind(ExperimentKind):
    """Kind ``tabular``: tabular Dyna agents on Gymnasium tables (the package docstring)."""

    name = "tabular"
    kernel_module = "dyna.agents.tabular"

    def parse(self, data, *, runs=None, seed=None):
        return parse_tabular(data, runs=runs, seed=seed)

    def prepare(self, config: ExperimentConfig) -> Prepared:
        metas = []
        reference = config.schedule.optimal_protocol == "reference"
        for point in config.sweep_points():
            try:
                _, meta = make_env_table(config.env.id, config.env_kwargs(point))
            except ConfigError as exc:
                if not (reference and exc.field == "env.kwargs.goal_block"
                        and "goal_block" not in config.env.kwargs):
                    raise
                # the protocol adds this keyword, the user did not write it: say so
                raise ConfigError("schedule.optimal_protocol", "reference",
                                  f"needs a refined maze that takes goal_block "
                                  f"(dyna/AsciiMaze-v0); env {config.env.id!r} does not "
                                  f"({exc.reason})") from None
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
        return tabular_job.execute_job  # looked up at call time (tests monkeypatch it)

    def warm_up(self) -> float:
        return _warm_up()

    def build_tables(self, config, prepared, jobs, results):
        return build_tables(config, merge_results(list(jobs), list(results), config))

    def draw_plots(self, out, folder):
        from dyna.experiment.kinds.tabular.plots import draw_plots

        return draw_plots(out, folder)

    def write_report(self, out, folder):
        from dyna.experiment.kinds.tabular.report import write_report

        return write_report(out, folder)

    def required_tables(self):
        return ("results", "runs")

    def table_schema(self, config: ExperimentConfig) -> dict[str, dict[str, str]]:
        """Columns the plots and report read, per table (kinds as in
        :func:`dyna.experiment.runner.load_output`): ``results`` per episode, or per logged
        step with ``schedule.episodes`` unset; ``runs`` per run (``final_greedy_steps`` is
        null when the greedy policy never reached the goal)."""
        ids = {"variant": "str", "agent": "str", "run": "int"}
        if config.schedule.episodes is not None:
            results = {"episode": "int", "steps": "int", "return": "finite",
                       "terminated": "bool", "updates": "int"}
        else:
            results = {"step": "int", "reward": "finite", "cumulative_reward": "finite"}
        return {"results": {**ids, **results},
                "runs": {**ids, "total_steps": "int", "total_return": "finite",
                         "final_greedy_steps": "int?"}}


def _warm_up() -> float:
    """Load the agents' compiled kernel from numba's on-disk cache (compiling it on a
    first run); seconds taken.

    Every agent and both schedules run through one kernel with one signature
    (:func:`dyna.agents.run_agent`), so one episode on FrozenLake's table loads it;
    :func:`dyna.agents.warmup` runs all eight agent x schedule combinations, ~10 ms each
    once the kernel is in (tested: after the one run it adds no compiled signature).
    """
    import time

    import envs
    from dyna import agents

    t0 = time.perf_counter()
    table, _ = envs.make_table("FrozenLake", is_slippery=True)
    agents.run_agent("dyna_q", {}, table, seed=0, run_indices=[0], episodes=1)
    return time.perf_counter() - t0


#: The ``tabular`` kind instance registered in :data:`dyna.experiment.registry.KINDS`.
KIND = TabularKind()
