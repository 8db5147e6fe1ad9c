"""Kind ``escalation``: the :class:`~dyna.experiment.protocol.ExperimentKind` object."""

from __future__ import annotations

from pathlib import Path

from dyna.errors import ConfigError
from dyna.experiment.backends import Job, split_runs
from dyna.experiment.kinds.escalation.config import (EscalationConfig, build_policy, class_costs,
                                                     parse_escalation)
from dyna.experiment.kinds.escalation.job import (cached_log, crc_key, file_sha, load_dates,
                                                  resolve_data_path, run_job)
from dyna.experiment.kinds.escalation.tables import build_tables
from dyna.experiment.protocol import ExperimentKind, Prepared

__all__ = ["KIND", "EscalationKind"]


# =========================================================================== the kind

def _points(config: EscalationConfig, prepared_systems: dict) -> list[dict]:
    """(scenario, system, feedback) points in canonical order."""
    pts = []
    for sc in config.scenarios:
        systems = prepared_systems.get(sc.name, [""])
        for system in systems:
            for fb in config.feedback:
                pts.append({"scenario": sc.name, "system": system, "feedback": fb})
    return pts


class EscalationKind(ExperimentKind):
    """Kind ``escalation``: every policy x risk class on every stream x feedback mode."""

    name = "escalation"
    progress_unit = "run"

    def parse(self, data, *, runs=None, seed=None, base_dir=None):
        return parse_escalation(data, runs=runs, seed=seed, base_dir=base_dir)

    def prepare(self, config: EscalationConfig) -> Prepared:
        """Load and check every outcome log and system name before anything is written."""
        from envs.escalation import system_dates

        systems, data_info, sc_info = {}, {}, {}
        for sc in config.scenarios:
            if sc.source == "synthetic":
                sc_info[sc.name] = {"n_types": len(sc.params["rates"]),
                                    "type_names": [f"type{i}" for i in
                                                   range(len(sc.params["rates"]))]}
                continue
            field = f"scenarios.{sc.name}.data"
            path = resolve_data_path(sc.params["data"], field, config.base_dir)
            sha = file_sha(path)
            try:
                frame, _, _ = cached_log(str(path), sha)
            except ConfigError as exc:
                raise ConfigError(field, exc.value, exc.reason) from None
            known = sorted(set(frame.get_column("system").to_list()))
            chosen = sc.params["systems"]
            dates = None
            if "systems_file" in sc.params:
                sf = resolve_data_path(sc.params["systems_file"],
                                       f"scenarios.{sc.name}.systems_file", config.base_dir)
                try:
                    dates = load_dates(str(sf))
                except ConfigError as exc:
                    raise ConfigError(f"scenarios.{sc.name}.systems_file", str(sf),
                                      exc.reason) from None
            if chosen == "all":
                chosen = known
            elif chosen == "all_by_date":
                try:
                    system_dates(frame, dates)
                except ConfigError as exc:
                    raise ConfigError(f"scenarios.{sc.name}.systems", exc.value,
                                      exc.reason) from None
                chosen = ["all_by_date"]
            else:
                for j, s in enumerate(chosen):
                    if s not in known:
                        shown = ", ".join(known[:3]) + (", ..." if len(known) > 3 else "")
                        raise ConfigError(f"scenarios.{sc.name}.systems[{j}]", s,
                                          f"unknown system (not in {path.name}: {shown})")
                chosen = list(chosen)
            systems[sc.name] = chosen
            names = sorted(set(frame.get_column("task_type").to_list()))
            sc_info[sc.name] = {"n_types": len(names), "type_names": names,
                                "data": str(path), "data_sha": sha, "dates": dates}
            data_info[sc.name] = {"path": str(path), "sha256": sha, "rows": frame.height,
                                  "systems": len(known), "task_types": len(names)}
        points = _points(config, systems)
        manifest = {"points": points, "data": data_info,
                    "scenario_types": {k: v["type_names"] for k, v in sc_info.items()},
                    # keyed by cost setting (the risk class's name without a p* grid)
                    "risk_class_costs": {st.name: {**dict(zip(("c_escalate", "c_failure",
                                                               "c_act"),
                                                              class_costs(config.costs, st))),
                                                   "risk_class": st.risk_class,
                                                   "p_star": st.p_star}
                                         for st in config.settings()}}
        return Prepared(manifest=manifest, state={"points": points, "sc": sc_info})

    def n_groups(self, config) -> int:
        return len(config.groups()) * max(1, len(config.scenarios) * len(config.feedback))

    def plan_jobs(self, config, prepared, *, block_size):
        from dyna.escalation import RISK_CLASSES

        points, sc_info = prepared.state["points"], prepared.state["sc"]
        scen = {s.name: s for s in config.scenarios}
        jobs = []
        for g, (variant, st) in enumerate(config.groups()):
            policy = build_policy(config, variant, st)
            c_e, c_f, c_a = class_costs(config.costs, st)
            rc = st.risk_class
            for pi, pt in enumerate(points):
                sc = scen[pt["scenario"]]
                info = sc_info[sc.name]
                payload = {
                    "variant_name": f"{variant.name}/{st.name}",
                    "point_kwargs": {k: v for k, v in pt.items() if v},
                    "policy": policy, "prior": variant.prior, "discount": variant.discount,
                    "discount_clock": variant.discount_clock,
                    "requires_provenance": RISK_CLASSES[rc].requires_provenance,
                    "c_escalate": c_e, "c_failure": c_f, "c_act": c_a,
                    "costs": dict(config.costs), "feedback": pt["feedback"],
                    "seed": config.seed, "stream_key": crc_key(sc.name, pt["system"]),
                    "source": sc.source, "params": dict(sc.params),
                    "system": pt["system"], "order": sc.params.get("order", "random"),
                    "data": info.get("data"), "data_sha": info.get("data_sha"),
                    "dates": info.get("dates"), "type_names": info["type_names"],
                    "n_types": info["n_types"], "checkpoints": config.analysis.checkpoints,
                    "coverage_points": config.analysis.coverage_points,
                    "store_competence": variant.name in config.analysis.competence_variant,
                }
                for block in split_runs(config.runs, block_size):
                    jobs.append(Job(variant=g, point=pi, run_indices=block, payload=payload))
        return jobs

    @property
    def job_function(self):
        return run_job

    def build_tables(self, config, prepared, jobs, results):
        return build_tables(config, prepared.state["points"], prepared.state["sc"], jobs,
                            results)

    def draw_plots(self, out, folder):
        from dyna.experiment.kinds.escalation.plots import draw_plots

        return draw_plots(_complete(out), Path(folder))

    def write_report(self, out, folder):
        from dyna.experiment.kinds.escalation.report import write_report

        return write_report(_complete(out), Path(folder))

    def required_tables(self):
        return ("runs", "curves")

    def table_schema(self, config) -> dict[str, dict[str, str]]:
        """Columns the plots and report read in the two required tables (kinds as in
        :func:`dyna.experiment.runner.load_output`). ``cost_setting``, ``p_star`` and
        ``aurc_type_oracle`` are left out: :func:`.tables.with_cost_settings` adds them to
        a folder written without them. Costs, regrets and the escalation rate must be
        finite; the other rates and areas are checked to be numbers only."""
        keys = {"variant": "str", "rule": "str", "risk_class": "str", "scenario": "str",
                "system": "str", "feedback": "str", "run": "int"}
        return {
            "runs": {**keys, "steps": "int", "total_cost": "finite", "regret_type": "finite",
                     "regret_task": "finite", "escalation_rate": "finite",
                     "agent_failure_rate": "float", "evidence": "float", "agreement": "float",
                     "aurc": "float", "aurc_optimal": "float", "e_aurc": "float"},
            "curves": {**keys, "step": "int", "cum_cost": "finite",
                       "cum_pseudo_regret": "float"},
        }


def _complete(out):
    """``out`` with tables of an older folder completed (:func:`.tables.with_cost_settings`)."""
    import dataclasses

    from dyna.experiment.kinds.escalation.tables import with_cost_settings

    tables = with_cost_settings(out.tables, out.config)
    return out if all(tables[k] is out.tables[k] for k in tables) else \
        dataclasses.replace(out, tables=tables)


#: The ``escalation`` kind registered in :data:`dyna.experiment.registry.KINDS`.
KIND = EscalationKind()
