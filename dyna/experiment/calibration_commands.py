"""The commands of calibration before confirmation (:mod:`dyna.experiment.calibration`):
``dyna run FILE --pilot`` (:func:`pilot_config`, :func:`run_pilot`), ``dyna freeze FILE``
(:func:`freeze`) and the gate of ``dyna run FILE`` on a calibrated file
(:func:`confirmatory_config`).

Part of the experiment machinery: it reaches kinds only through the registry and the
methods :mod:`dyna.experiment.calibration` names.
"""

from __future__ import annotations

import datetime as _dt
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from dyna.errors import ConfigError
from dyna.experiment.calibration import (Frozen, append_pilot_entry, checkout_state,
                                         file_digest, pilot_log_path, read_pilot_log,
                                         write_frozen)
from dyna.experiment.calibration_stats import (checks_frame, checks_table, recommendation,
                                               size_runs, sizing_frame, sizing_lines)

__all__ = ["PILOT_FILES", "PilotResult", "confirmatory_config", "freeze", "pilot_config",
           "pilot_text", "run_pilot"]

#: The files a pilot writes into its output folder, and nothing else.
PILOT_FILES = ("checks.md", "checks.parquet", "pilot_sd.md", "pilot_sd.parquet")


def _top_level_seed(path) -> None:
    """Refuse a top-level ``seed`` in a file with ``[calibration]`` (its seeds are the
    declared seed sets)."""
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    if "seed" in raw:
        raise ConfigError("seed", raw["seed"], "a file with [calibration] runs on the seeds it "
                          "declares there (pilot_seed, confirmatory_seed, replication_seed): "
                          "remove the top-level seed")


# ============================================================================ dyna run

def confirmatory_config(path, config, *, seed: int | None = None, seeds: str | None = None):
    """The config ``dyna run FILE`` runs: ``config`` itself for a file without
    ``[calibration]``; for one with it, the confirmatory seed set (``seeds =
    "replication"``: the replication set; ``seed``, already applied to ``config``: that
    base seed), only when the file is frozen and unchanged since.

    Raises
    ------
    ConfigError
        ``--seeds`` for a file without ``[calibration]``; for a calibrated file: not frozen
        (``calibration.frozen``, also with ``--seed``), edited after freezing (its sha256
        differs from the record), a top-level ``seed``, ``--seed`` with ``--seeds``, a
        ``--seed`` that is the pilot's, ``--seeds replication`` without a
        ``replication_seed``, or ``seeds`` not ``confirmatory``/``replication``.
    """
    cal = getattr(config, "calibration", None)
    if cal is None:
        if seeds is not None:
            raise ConfigError("--seeds", seeds, "only for a file with [calibration]")
        return config
    if seeds not in (None, "confirmatory", "replication"):
        raise ConfigError("--seeds", seeds, "must be 'confirmatory' or 'replication'")
    _top_level_seed(path)
    if cal.frozen is None:
        what = "a --seed override runs" if seed is not None else "the confirmatory seeds run"
        raise ConfigError("calibration.frozen", None, f"the file is not frozen: {what} only "
                          "after the checks pass on the pilot seeds (`dyna run FILE --pilot`, "
                          "commit, then `dyna freeze FILE`)")
    digest = file_digest(path)
    if digest != cal.frozen.sha256:
        raise ConfigError("calibration.frozen.sha256", cal.frozen.sha256[:12],
                          f"the file was edited after freezing (its sha256 is now "
                          f"{digest[:12]})")
    if seed is not None:
        if seeds is not None:
            raise ConfigError("--seeds", seeds, "give --seed or --seeds, not both")
        if seed == cal.pilot_seed:
            raise ConfigError("--seed", seed, "is calibration.pilot_seed: the pilot's runs")
        return config
    if seeds == "replication":
        if cal.replication_seed is None:
            raise ConfigError("--seeds", seeds, "the file declares no "
                              "calibration.replication_seed")
        return config.with_overrides(seed=cal.replication_seed)
    return config.with_overrides(seed=cal.confirmatory_seed)


def pilot_config(path, config, *, runs: int | None = None, seed: int | None = None,
                 seeds: str | None = None):
    """The config of ``dyna run FILE --pilot``: the pilot seed set (``pilot_runs`` runs,
    or ``runs``).

    Raises
    ------
    ConfigError
        A file without ``[calibration]`` (field ``--pilot``), ``--seed`` or ``--seeds``
        given, a top-level ``seed``.
    """
    cal = getattr(config, "calibration", None)
    if cal is None:
        raise ConfigError("--pilot", True, "only for a file with [calibration]")
    if seed is not None:
        raise ConfigError("--seed", seed, "the pilot runs on calibration.pilot_seed")
    if seeds is not None:
        raise ConfigError("--seeds", seeds, "not with --pilot (it runs the pilot seeds)")
    _top_level_seed(path)
    return config.with_overrides(seed=cal.pilot_seed, runs=runs or cal.pilot_runs)


@dataclass(frozen=True)
class PilotResult:
    """What a pilot wrote.

    Attributes
    ----------
    out : Path
        Its output folder (:data:`PILOT_FILES`).
    checks : list of CheckResult
    sizing : list of SizingRow
    recommended : int or None
        The recommended ``runs`` (:func:`~dyna.experiment.calibration_stats.size_runs`).
    floor : int
        The fewest runs with which the hypotheses can pass Holm at ``alpha``.
    alpha : float
        The family's alpha.
    log : Path
        The pilot log appended to.
    """

    out: Path
    checks: list
    sizing: list
    recommended: int | None
    floor: int
    alpha: float
    log: Path

    @property
    def all_pass(self) -> bool:
        """Every check passed."""
        return all(c.passed for c in self.checks)


def run_pilot(path, config, *, out=None, backend=None, block_size=None, progress=None,
              root: str | Path = "runs") -> PilotResult:
    """Run a pilot (``config`` from :func:`pilot_config`) and record it.

    Runs only the ``(variant, point)`` pairs the kind's ``calibration_pairs`` names; writes
    into the output folder (atomically: a temporary sibling renamed into place) only
    :data:`PILOT_FILES`; then appends to the pilot log (:func:`pilot_log_path`) one line:
    ``time`` (UTC, ISO 8601), ``file`` (the file's name), ``sha256`` (:func:`file_digest`),
    ``commit`` and ``dirty`` (:func:`checkout_state`), ``seed``, ``runs``, ``out``,
    ``checks`` (each check's value, interval and pass) and ``all_pass``.

    Raises
    ------
    ConfigError
        An existing or unwritable ``out`` (field ``--out``), before anything runs.
    """
    from types import SimpleNamespace

    from dyna.experiment.output_folder import check_writable, default_out_dir, rename_into_place
    from dyna.experiment.protocol import config_kind
    from dyna.experiment.registry import get_kind
    from dyna.experiment.runner import run_tables
    from dyna.fileio.tempfiles import make_temp_dir

    digest = file_digest(path)
    state = checkout_state(path)        # what runs: the file and the code as they are now
    kind = get_kind(config_kind(config))
    out = Path(out) if out is not None else default_out_dir(
        SimpleNamespace(name=f"{config.name}-pilot"), root)
    if out.exists():
        raise ConfigError("--out", str(out), "already exists; choose a new folder")
    check_writable(out)
    tables = run_tables(config, backend=backend, block_size=block_size, progress=progress,
                        pairs=kind.calibration_pairs(config))
    checks = kind.check_results(config, tables)
    contrasts, alpha = kind.sizing_contrasts(config, tables)
    power = config.calibration.power
    rows, recommended, floor = size_runs(contrasts, alpha=alpha, power=power)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(out)
    try:
        checks_frame(checks).write_parquet(tmp / "checks.parquet", statistics=False)
        (tmp / "checks.md").write_text("\n".join(
            [f"# Pilot: manipulation checks of {config.name}", "",
             f"{config.runs} pilot runs from base seed {config.seed}.", ""]
            + checks_table(checks)) + "\n")
        sizing_frame(rows).write_parquet(tmp / "pilot_sd.parquet", statistics=False)
        (tmp / "pilot_sd.md").write_text("\n".join(
            sizing_lines(rows, recommended, floor, alpha=alpha, power=power)) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)   # mkdtemp makes 0700; the results are for everyone
        out = rename_into_place(tmp, out)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    result = PilotResult(out, checks, rows, recommended, floor, alpha,
                         pilot_log_path(path, config.name))
    append_pilot_entry(result.log, {
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "file": Path(path).name, "sha256": digest, "commit": state["commit"],
        "dirty": state["dirty"], "seed": config.seed, "runs": config.runs, "out": str(out),
        "checks": [c.to_dict() for c in checks], "all_pass": result.all_pass})
    return result


def pilot_text(result: PilotResult) -> str:
    """What ``dyna run FILE --pilot`` prints: the check table and the recommended runs."""
    lines = checks_table(result.checks)
    lines += ["", f"checks {sum(c.passed for c in result.checks)} of {len(result.checks)} "
              "pass",
              recommendation(result.sizing, result.recommended, result.floor,
                              alpha=result.alpha),
              f"pilot log: {result.log}"]
    return "\n".join(lines)


# ============================================================================ dyna freeze

def freeze(path) -> Frozen:
    """Freeze a calibrated experiment file (``dyna freeze FILE``): write ``frozen = {
    commit, sha256 }`` into its ``[calibration]`` table (:func:`write_frozen`).

    Refused unless the pilot log's last entry for this file has the file's current sha256,
    ran the declared ``pilot_runs`` on the ``pilot_seed``, passed every check, and was made
    at the current HEAD with a clean tree.

    Raises
    ------
    ConfigError
        One line naming what is missing: no ``[calibration]``, frozen already, no pilot of
        the file, a stale entry (another sha256 or another commit), a failing one, one made
        with uncommitted changes, or a file outside a git checkout.
    """
    from dyna.experiment.registry import load_experiment

    config = load_experiment(path)
    cal = getattr(config, "calibration", None)
    if cal is None:
        raise ConfigError("calibration", None, "the file has no [calibration] table")
    if cal.frozen is not None:
        raise ConfigError("calibration.frozen", cal.frozen.commit[:12], "frozen already")
    digest = file_digest(path)
    log = pilot_log_path(path, config.name)
    mine = [e for e in read_pilot_log(log) if e.get("file") == Path(path).name]
    if not mine:
        raise ConfigError("pilot_log", str(log), "holds no pilot of this file: run "
                          "`dyna run FILE --pilot` first")
    last = mine[-1]
    if last.get("sha256") != digest:
        raise ConfigError("pilot_log", str(log), f"stale: the last pilot ran another version "
                          f"of the file (sha256 {str(last.get('sha256'))[:12]}, the file's "
                          f"{digest[:12]}); run the pilot again")
    if last.get("all_pass") is not True:
        failing = [c.get("check") for c in last.get("checks", []) if not c.get("pass")]
        raise ConfigError("pilot_log", str(log), "the last pilot's checks did not all pass "
                          f"(failing: {', '.join(map(str, failing)) or '?'})")
    if last.get("runs") != cal.pilot_runs or last.get("seed") != cal.pilot_seed:
        raise ConfigError("pilot_log", str(log), f"the last pilot ran {last.get('runs')} runs "
                          f"on seed {last.get('seed')}, not the declared pilot_runs = "
                          f"{cal.pilot_runs} on pilot_seed = {cal.pilot_seed}: run "
                          "`dyna run FILE --pilot` without --runs")
    if last.get("dirty") is not False or not last.get("commit"):
        raise ConfigError("pilot_log", str(log), "the last pilot ran with uncommitted changes "
                          "(or outside a git checkout): commit, then run the pilot again")
    state = checkout_state(path)
    if state["commit"] is None:
        raise ConfigError("FILE", str(path), f"cannot freeze: {state['reason']}")
    if last["commit"] != state["commit"]:
        raise ConfigError("pilot_log", str(log), f"stale: the last pilot ran at commit "
                          f"{last['commit'][:12]}, HEAD is {state['commit'][:12]}; run the "
                          "pilot again")
    frozen = Frozen(last["commit"], digest)
    write_frozen(path, frozen)
    return frozen
