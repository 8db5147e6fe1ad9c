"""``dyna escalation``: check an outcome log, replay it through escalation policies.

``dyna escalation check CSV``
    Validate an outcome log (columns ``system, task_id, task_type, success`` and optionally
    ``cost_usd``) and print its size, systems, task types and success rate.
``dyna escalation replay CSV --system S [--rules never,mean,thompson] [--risk-class C]
[--feedback censored|full] [--runs N] [--seed S] [--c-escalate X]``
    Replay one system's log (``--system all_by_date``: every system in date order) through
    policies and print cost, regret, escalation and failure rates and AURC per policy --
    the numbers of one group of ``kind = "escalation"`` experiments, without an output
    folder.

Bad input (missing columns, non-binary success, an unknown system, an empty stream, an
unknown rule) is a :class:`dyna.errors.ConfigError`: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse

from dyna.errors import ConfigError


def _check_not_folder(csv: str) -> None:
    """Refuse a folder given as the outcome log (field ``CSV``), before it is read."""
    from pathlib import Path

    if Path(csv).is_dir():
        raise ConfigError("CSV", csv, "is a folder, expected an outcome log (a CSV file)")


def _cmd_check(args: argparse.Namespace) -> int:
    import polars as pl

    from envs.escalation import load_outcomes

    _check_not_folder(args.csv)
    frame = load_outcomes(args.csv, field_name="CSV")
    per = frame.group_by("system").agg(pl.col("success").mean()).sort("system")
    print(f"{args.csv}: {frame.height} rows, {per.height} systems, "
          f"{frame['task_type'].n_unique()} task types, success rate "
          f"{frame['success'].mean():.3f}")
    for system, rate in per.iter_rows():
        print(f"  {system}: {rate:.3f}")
    return 0


_OPTIONS = {"scenarios.replay.data": "CSV", "scenarios.replay.systems": "--system",
            "risk_classes": "--risk-class", "feedback": "--feedback", "variants": "--rules",
            "runs": "--runs", "seed": "--seed", "costs.c_escalate": "--c-escalate",
            "scenarios.replay.order": "--order"}


def _option(field: str) -> str:
    for prefix, option in _OPTIONS.items():
        if field.startswith(prefix):
            return option
    return field


def _cmd_replay(args: argparse.Namespace) -> int:
    from dyna.experiment.kinds.escalation import KIND

    _check_not_folder(args.csv)
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    raw = {
        "name": "replay", "seed": args.seed, "runs": args.runs,
        "risk_classes": [args.risk_class], "feedback": [args.feedback],
        "costs": {"c_escalate": args.c_escalate},
        "scenarios": [{"name": "replay", "source": "replay", "data": args.csv,
                       "systems": "all_by_date" if args.system == "all_by_date"
                       else [args.system], "order": args.order}],
        "variants": [{"name": r, "rule": r} for r in rules],
        "analysis": {"n_resamples": 100},
    }
    try:
        config = KIND.parse(raw)
        prepared = KIND.prepare(config)
    except ConfigError as exc:  # name the command-line option, not the config field
        raise ConfigError(_option(exc.field), exc.value, exc.reason) from None
    jobs = KIND.plan_jobs(config, prepared, block_size=config.runs)
    results = [KIND.job_function(job) for job in jobs]
    runs = KIND.build_tables(config, prepared, jobs, results)["runs"]
    print(f"{args.system} ({args.risk_class}, {args.feedback} feedback, {config.runs} "
          f"order(s), escalation cost {args.c_escalate:g})")
    print(f"{'policy':<14}{'cost/task':>11}{'regret/task':>13}{'escalation':>12}"
          f"{'failure':>9}{'AURC':>8}")
    for name in rules:
        r = runs.filter(runs["variant"] == name)
        steps = r["steps"].cast(float)
        print(f"{name:<14}{(r['total_cost'] / steps).mean():>11.4f}"
              f"{(r['regret_type'] / steps).mean():>13.4f}{r['escalation_rate'].mean():>12.3f}"
              f"{r['failure_rate'].mean():>9.3f}{r['aurc'].mean():>8.3f}")
    from dyna.escalation import RISK_CLASSES
    p_star = RISK_CLASSES[args.risk_class].p_star
    print(f"cost/task and regret/task (against the task-type oracle) in units of the "
          f"log's costs: an escalation costs {args.c_escalate:g}, a failure "
          f"{args.c_escalate / (1 - p_star):g} (c_escalate / (1 - p*), p* = {p_star:g}); "
          "escalation and failure are rates per task; AURC is the area under the "
          "risk-coverage curve (lower is better); means over the orders")
    return 0


def register(sub) -> None:
    """Add ``dyna escalation check|replay``."""
    esc = sub.add_parser("escalation", help="check an outcome log or replay it through "
                         "escalation policies",
                         description="Check outcome logs and replay them through "
                         "escalation policies.")
    cmds = esc.add_subparsers(dest="escalation_command", metavar="COMMAND",
                              parser_class=type(esc))
    check = cmds.add_parser("check", help="validate an outcome log and summarise it")
    check.add_argument("csv", metavar="CSV")
    check.set_defaults(func=_cmd_check)
    rep = cmds.add_parser("replay", help="replay one system's log through policies",
                          description="Replay one system's outcome log through escalation "
                          "policies. Prints one row per policy: cost per task, regret per "
                          "task (against the task-type oracle), escalation rate, failure rate "
                          "and AURC (area under the risk-coverage curve, lower is better), "
                          "means over the seeded task orders, then the units. Writes nothing.")
    rep.add_argument("csv", metavar="CSV")
    rep.add_argument("--system", required=True,
                     help="system id in the log, or all_by_date")
    rep.add_argument("--rules", default="never,always,mean,lower_bound,thompson,chow",
                     help="comma-separated policy rules, of: never, always, mean, "
                     "lower_bound, thompson, chow, preset (the risk class's own rule) "
                     "(default: %(default)s)")
    rep.add_argument("--risk-class", default="low_stakes",
                     help="low_stakes, elevated or high_stakes (default: %(default)s)")
    rep.add_argument("--feedback", default="censored", help="censored or full")
    rep.add_argument("--runs", type=int, default=5, help="seeded task orders (default 5)")
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--order", default="random", help="random or task_id")
    rep.add_argument("--c-escalate", type=float, default=1.0,
                     help="cost of an escalation; a failure costs c_escalate / (1 - p*)")
    rep.set_defaults(func=_cmd_replay)
