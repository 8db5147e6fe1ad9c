"""CLI commands of the experiment layer: ``dyna run``, ``dyna report`` and ``dyna plot``.

``dyna run FILE [--runs N] [--out DIR] [--seed S] [--backend inprocess|process|ray]
[--address ADDR] [--workers N] [--block-size N] [--quiet] [--replay DIR]``
    Runs the experiment in the TOML file FILE (any kind: ``kind = "tabular"`` by default,
    see :mod:`dyna.experiment.kinds`). Standard output carries one line, the output folder's
    path (what ``out=$(dyna run FILE)`` captures); everything else goes to stderr: every
    stage (:mod:`dyna.experiment.progress`), then the report's path, the plots' folder and
    the report's first headline lines (``--quiet``, alias ``--no-progress``: nothing on
    stderr but errors). ``--replay DIR``
    answers an ``agent = "llm"`` experiment's model requests from DIR's recording. For a
    file with ``[calibration]`` (:mod:`dyna.experiment.calibration`) it runs the
    confirmatory seeds (``--seeds replication``: the replication seeds) only when the file
    is frozen and unchanged since; ``--pilot`` runs the manipulation checks on the pilot
    seeds instead, writes only the check and standard-deviation files, appends to the
    pilot log and prints the pilot's folder (its checks on stderr).
``dyna freeze FILE``
    Writes the freeze record into a calibrated file's ``[calibration]`` once its last pilot
    passed every check at the current commit with a clean tree.
``dyna report DIR``
    Writes DIR's ``report.md`` again from its tables with this checkout's analysis (the
    runs are not simulated again); ``manifest.json`` records the commit that wrote it.
    Prints the report's path (its headline on stderr).
``dyna plot DIR [--only competence]``
    Redraws the plots of an output folder from its Parquet tables and prints the plots'
    folder (how many files, on stderr); ``--only competence`` draws only the competence over
    episodes of an agent-tasks folder.

Bad input raises a :class:`dyna.errors.DynaError`, which :mod:`dyna.cli` prints as one line
with exit status 2; no output folder is left behind.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dyna.errors import ConfigError, MissingFileError, check_range


def _cmd_run(args: argparse.Namespace) -> int:
    """``dyna run``: run the experiment (or its pilot) and print the output folder."""
    from dyna.experiment.config import load_run_options
    from dyna.experiment.registry import get_backend, load_experiment
    from dyna.experiment.runner import run_experiment

    config = load_experiment(args.file, runs=args.runs, seed=args.seed)
    if (args.pilot or args.seeds is not None
            or getattr(config, "calibration", None) is not None):
        config = _calibrated_config(args, config)
    if args.replay is not None:
        config = _replay_config(config, Path(args.replay))
    # the file's [run] table, overridden by the command line
    run_opts = load_run_options(args.file)
    backend_name = args.backend or run_opts.get("backend", "inprocess")
    address = args.address if args.address is not None else (
        run_opts.get("address") if backend_name == run_opts.get("backend") else None)
    workers = args.workers if args.workers is not None else run_opts.get("workers")
    if workers is not None:
        check_range("--workers", workers, lo=1, integer=True)
    block_size = args.block_size if args.block_size is not None else run_opts.get("block_size")
    options = {}
    if address is not None:
        if backend_name != "ray":
            raise ConfigError("--address", address, "only with --backend ray")
        options["address"] = address
    backend = get_backend(backend_name, workers, **options)
    progress = not args.quiet
    if args.pilot:
        from dyna.experiment.calibration_commands import pilot_text, run_pilot

        pilot = run_pilot(args.file, config, out=args.out, backend=backend,
                          block_size=block_size, progress=progress)
        _print_result(pilot.out, [] if args.quiet else [pilot_text(pilot)])
        return 0
    out = run_experiment(config, args.out, backend=backend, block_size=block_size,
                         progress=progress, source=args.file)
    from dyna.experiment.progress import run_summary

    _print_result(out, [] if args.quiet else run_summary(out))
    return 0


def _print_result(path, notes: list[str]) -> None:
    """Write ``path`` alone on stdout (the one line a script captures), flushed so that it
    comes before ``notes`` in a log that holds both streams, then ``notes`` on stderr."""
    print(path, flush=True)
    if notes:
        print("\n".join(notes), file=sys.stderr, flush=True)


def _calibrated_config(args: argparse.Namespace, config):
    """The config of a file with ``[calibration]``: the pilot's (``--pilot``) or the
    confirmatory one, refused when the file is not frozen or was edited since
    (:func:`dyna.experiment.calibration_commands.confirmatory_config`)."""
    from dyna.experiment.calibration_commands import confirmatory_config, pilot_config

    if args.pilot:
        return pilot_config(args.file, config, runs=args.runs, seed=args.seed,
                            seeds=args.seeds)
    return confirmatory_config(args.file, config, seed=args.seed, seeds=args.seeds)


def _cmd_freeze(args: argparse.Namespace) -> int:
    from dyna.experiment.calibration_commands import freeze

    frozen = freeze(args.file)
    print(f"{args.file}: frozen at commit {frozen.commit[:12]}, sha256 {frozen.sha256[:12]}")
    return 0


def _replay_config(config, folder: Path):
    """``config`` answering its model requests from ``folder``'s recording (``--replay``).

    Raises
    ------
    MissingFileError
        ``folder`` holds no recording.
    ConfigError
        The experiment asks no model, or ``folder`` was recorded with another config.
    """
    import json

    if not (folder / "llm_exchanges.parquet").is_file():
        raise MissingFileError("--replay", folder, "holds no llm_exchanges.parquet (the "
                               "output folder of a run with agent = 'llm')")
    if not hasattr(config, "with_replay"):
        raise ConfigError("--replay", str(folder), "only for an experiment with "
                          "agent = 'llm'")
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        recorded = manifest["config_hash"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError("--replay", str(folder), "has no readable manifest.json") from None
    if recorded != config.hash:
        raise ConfigError("--replay", str(folder), f"was recorded with another config "
                          f"(hash {str(recorded)[:12]}, this one {config.hash[:12]}): give "
                          "the same file, --runs and --seed")
    _check_recording(folder, manifest, config.replay_columns)
    return config.with_replay(folder.resolve())


def _check_recording(folder: Path, manifest, columns) -> None:
    """The recording is the file the manifest lists (same SHA-256: not edited, truncated
    or swapped since the run) and a readable table with the recording's columns.

    Raises
    ------
    ConfigError
        Field ``--replay``, naming what differs.
    """
    import hashlib

    import polars as pl

    from dyna.fileio import SymlinkError, read_bytes_nofollow

    path = folder / "llm_exchanges.parquet"
    try:
        listed = manifest["tables"]["llm_exchanges.parquet"]["sha256"]
    except (KeyError, TypeError):
        listed = None
    if not isinstance(listed, str):
        raise ConfigError("--replay", str(folder), "manifest.json lists no sha256 of "
                          "llm_exchanges.parquet")
    try:
        data = read_bytes_nofollow(path)
    except SymlinkError:
        raise ConfigError("--replay", str(path), "is a symbolic link, not the recording") \
            from None
    if data is None:
        raise MissingFileError("--replay", path)
    digest = hashlib.sha256(data).hexdigest()
    if digest != listed:
        raise ConfigError("--replay", str(path), f"is not the recorded file (sha256 "
                          f"{digest[:12]}, the manifest's {listed[:12]}): it was changed "
                          "after the run")
    try:
        present = pl.read_parquet_schema(path)
    except Exception as exc:   # noqa: BLE001 -- polars raises several types for bad files
        raise ConfigError("--replay", str(path), f"is not a readable table "
                          f"({type(exc).__name__})") from None
    missing = [c for c in columns if c not in present]
    if missing:
        raise ConfigError("--replay", str(path), f"lacks the columns {missing}")


def _cmd_plot(args: argparse.Namespace) -> int:
    from dyna.experiment.runner import draw_output_plots, load_output

    folder = Path(args.dir)
    if folder.exists() and not folder.is_dir():
        raise ConfigError("DIR", args.dir, "is a file, expected an output folder (what "
                          "`dyna run` writes)")
    if not folder.is_dir():
        raise MissingFileError("DIR", folder, "no such folder")
    out = load_output(folder)
    if args.only is None:
        paths = draw_output_plots(out, folder)
    else:
        from dyna.experiment.registry import get_kind

        draw_only = getattr(get_kind(out.kind), "draw_only", None)
        if draw_only is None:
            raise ConfigError("--only", args.only, f"is for agent-tasks output folders; "
                              f"{folder} holds a {out.kind!r} experiment")
        paths = draw_only(out, folder, args.only)
    _print_result(folder / "plots", [f"{len(paths)} plot files written to {folder / 'plots'}"])
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dyna.experiment.progress import run_summary
    from dyna.experiment.runner import rewrite_report

    folder = Path(args.dir)
    if folder.exists() and not folder.is_dir():
        raise ConfigError("DIR", args.dir, "is a file, expected an output folder (what "
                          "`dyna run` writes)")
    path = rewrite_report(folder)
    _print_result(path, [line for line in run_summary(folder) if not line.startswith(
        ("report:", "plots:"))])
    return 0


#: The experiment kinds ``dyna run --help`` lists (the file's ``kind``), with what each
#: runs; a test checks it names every kind of :data:`dyna.experiment.registry.KINDS`
#: (not imported here: it would import numpy for every ``dyna`` command).
KIND_HELP = (
    ("tabular", "tabular Dyna agents on mazes and toy-text envs (default)"),
    ("escalation", "escalation policies on synthetic task streams or replayed outcome logs"),
    ("agent_tasks", "skill and memory loops on agent-task environments, ablations"),
    ("trajectories", "real agent trajectories (tau-bench) through the loops"),
)


def run_description(experiments: Path | None = None) -> str:
    """The description of ``dyna run --help``: what it writes and where, what it shows while
    it runs, the experiment kinds and the experiment files in ``experiments`` (default: the
    checkout's ``experiments/`` folder, when dyna runs from one)."""
    import textwrap

    if experiments is None:
        experiments = Path(__file__).resolve().parents[2] / "experiments"
    shipped = sorted(p.name for p in experiments.glob("*.toml")) if experiments.is_dir() else []
    para = [
        "Run every variant x sweep point x run of an experiment (a TOML file) and write one "
        "output folder: the tables (Parquet), manifest.json, plots/ and report.md.",
        "Where: --out DIR (default runs/<name>-<timestamp>); the report is DIR/report.md, the "
        "plots are in DIR/plots/. While it runs: a progress bar per stage on a terminal (runs, "
        "tables, plots, statistics and report), a line per stage with the time left in a log "
        "file. At the end: the report's and plots' paths and the first lines of the "
        "report's headline.",
        "Standard output carries one line, the output folder's path (out=$(dyna run FILE) "
        "captures it); everything else goes to stderr, and --quiet leaves only errors there.",
    ]
    lines = [line for text in para for line in textwrap.wrap(text, 78) + [""]]
    lines.append('experiment kinds (kind = "..." in the file):')
    lines += [f"  {name:<13} {what}" for name, what in KIND_HELP]
    if shipped:
        lines += ["", f"experiment files in {experiments}:"]
        lines += textwrap.wrap(", ".join(shipped), 78, initial_indent="  ",
                               subsequent_indent="  ")
    return "\n".join(lines)


def register(sub) -> None:
    """Add ``run``, ``freeze``, ``plot`` and ``report`` to the ``dyna`` sub-command parsers
    ``sub``."""
    run = sub.add_parser("run", help="run an experiment (TOML file) into one output folder",
                         description=run_description(),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("file", metavar="FILE", help="experiment TOML file")
    run.add_argument("--runs", type=int, default=None, metavar="N",
                     help="runs (seeds) per variant, overriding the file")
    run.add_argument("--seed", type=int, default=None, metavar="S",
                     help="base seed, overriding the file")
    run.add_argument("--out", default=None, metavar="DIR",
                     help="output folder (must not exist); default runs/<name>-<timestamp>")
    run.add_argument("--backend", default=None, metavar="NAME",
                     help="where jobs run: inprocess (default), process (local pool) or ray "
                     '(Ray; pip install -e ".[ray]"); also settable in the file\'s [run] table')
    run.add_argument("--address", default=None, metavar="ADDR",
                     help="with --backend ray: join the Ray cluster at ADDR (HOST:PORT or auto) "
                     "instead of starting a local instance")
    run.add_argument("--workers", type=int, default=None, metavar="N",
                     help="worker processes for --backend process, CPUs of a local Ray "
                     "instance (default: CPU count)")
    run.add_argument("--block-size", type=int, default=None, metavar="N",
                     help="runs per job (results do not depend on it)")
    run.add_argument("--quiet", "--no-progress", dest="quiet", action="store_true",
                     help="nothing on stderr but errors (stdout holds the output folder "
                     "either way); default on stderr: a progress bar on a terminal, a line per "
                     "stage with the time left in a log file, and a summary at the end")
    run.add_argument("--replay", default=None, metavar="DIR",
                     help="answer every model request from the recording in DIR (the output "
                     "folder of an earlier run of the same agent = 'llm' experiment): offline, "
                     "same tables; default: ask the endpoint")
    run.add_argument("--pilot", action="store_true",
                     help="for a file with [calibration]: run the manipulation checks on the "
                     "pilot seeds, write only checks.md/.parquet and pilot_sd.md/.parquet, "
                     "and append to the pilot log")
    run.add_argument("--seeds", default=None, choices=("confirmatory", "replication"),
                     help="for a frozen file with [calibration]: which declared seed set "
                     "to run (default: confirmatory)")
    run.set_defaults(func=_cmd_run)

    freeze = sub.add_parser("freeze", help="freeze a calibrated experiment file once its "
                            "checks pass",
                            description="Write frozen = {commit, sha256} into the "
                            "[calibration] table of FILE, when the pilot log's last entry "
                            "for it has the file's sha256, passed every check and was made "
                            "at the current commit with a clean tree.")
    freeze.add_argument("file", metavar="FILE", help="experiment TOML file with [calibration]")
    freeze.set_defaults(func=_cmd_freeze)

    plot = sub.add_parser("plot", help="redraw the plots of an output folder",
                          description="Redraw the plots of an experiment output folder from "
                          "its Parquet tables and manifest.")
    plot.add_argument("dir", metavar="DIR", help="output folder of `dyna run`")
    plot.add_argument("--only", choices=("competence",), default=None,
                      help="draw only this figure: competence (an agent-tasks folder's "
                      "competence over episodes, plots/competence_<scenario>.png)")
    plot.set_defaults(func=_cmd_plot)

    report = sub.add_parser("report", help="write an output folder's report.md again",
                            description="Write report.md of an experiment output folder "
                            "again from its Parquet tables and manifest, with this "
                            "checkout's analysis: the runs are read, not simulated again. "
                            "manifest.json records the commit that wrote the report, and a "
                            "report that names its commit names both. Prints the report's "
                            "path, then its headline on stderr.")
    report.add_argument("dir", metavar="DIR", help="output folder of `dyna run`")
    report.set_defaults(func=_cmd_report)
