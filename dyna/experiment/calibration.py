"""Calibration before confirmation, as a feature of ``dyna run``: manipulation checks on
pilot seeds, a frozen file, then the confirmatory run on fresh seeds.

An experiment file with a ``[calibration]`` table declares, before its first pilot run, its
hypotheses, each one's smallest effect of interest, and its manipulation checks with their
thresholds (the kind's ``[[checks]]``). Then:

1. ``dyna run FILE --pilot`` runs, on the pilot seeds, only what the checks and hypotheses
   read; it writes the check table (``checks.md``, ``checks.parquet``) and the standard
   deviations the run count is sized from (``pilot_sd.md``, ``pilot_sd.parquet``), never a
   hypothesis contrast, and appends one line to the pilot log (:func:`append_pilot_entry`).
2. ``dyna freeze FILE`` writes ``frozen = { commit = ..., sha256 = ... }`` into
   ``[calibration]`` (:func:`write_frozen`) once the file's last pilot passed every check,
   on the file as it is, at the checked-out commit (:func:`checkout_state`), with a clean
   tree.
3. ``dyna run FILE`` runs the confirmatory seeds (``--seeds replication``: the replication
   seeds) only for a frozen file whose content still has the frozen hash
   (:func:`file_digest`).
4. The kind's report recomputes the checks from the confirmatory runs and gives each
   hypothesis a verdict that can be *not testable* or *no effect as large as its smallest
   effect of interest*.

This module holds what the procedure keeps: the ``[calibration]`` table
(:func:`parse_calibration`), the file's hash and freeze record, the checkout's state and
the pilot log. The commands are in :mod:`dyna.experiment.calibration_commands`, the
statistics (check intervals, sizing, verdicts with the equivalence test) in
:mod:`dyna.experiment.calibration_stats`.

Seed sets: run ``r`` of a set with base seed ``s`` draws every random stream from
``(s, r)``, so distinct base seeds give disjoint runs.

Source: pre-registration with manipulation checks before confirmation (Nosek et al., "The
preregistration revolution", PNAS 2018).

Part of the experiment machinery: it imports no kind, and neither the registry nor the
runner (a kind's config module parses ``[calibration]`` with it). A kind whose files may
carry ``[calibration]`` gives its config a ``calibration`` attribute (:class:`Calibration`)
and ``with_overrides(runs=, seed=)``, and its kind object the methods
``calibration_pairs(config)`` (the ``(variant index, point index)`` pairs a pilot runs),
``check_results(config, tables)`` (a list of
:class:`~dyna.experiment.calibration_stats.CheckResult`) and ``sizing_contrasts(config,
tables)`` (a list of :class:`~dyna.experiment.calibration_stats.Contrast` and the
family's alpha).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from dyna.errors import ConfigError, MissingFileError, check_range

__all__ = ["Calibration", "Frozen", "append_pilot_entry", "checkout_state", "file_digest",
           "parse_calibration", "pilot_log_path", "read_pilot_log", "strip_frozen",
           "write_frozen"]

_KEYS = ("pilot_seed", "pilot_runs", "confirmatory_seed", "replication_seed", "required",
         "power", "frozen", "scope")
_SEEDS = ("pilot_seed", "confirmatory_seed", "replication_seed")
#: Hex digits of each field of the freeze record.
_HEX_DIGITS = {"commit": 40, "sha256": 64}


# ============================================================================ the table

@dataclass(frozen=True)
class Frozen:
    """The freeze record: the commit the passing pilot ran at and the file's sha256
    (:func:`file_digest`)."""

    commit: str
    sha256: str


@dataclass(frozen=True)
class Calibration:
    """A validated ``[calibration]`` table.

    Attributes
    ----------
    pilot_seed, confirmatory_seed : int
        Base seeds of the pilot runs and of the confirmatory runs (``>= 0``, distinct).
    pilot_runs : int
        Runs of a pilot (``>= 2``: the sizing needs a standard deviation).
    replication_seed : int or None
        Base seed of a second confirmatory run (``dyna run FILE --seeds replication``).
    required : tuple of str
        Checks every hypothesis needs besides its own ``checks``.
    power : float
        In (0, 1): the power the run count is sized for.
    frozen : Frozen or None
        The freeze record; None until ``dyna freeze``.
    scope : {"grid", "hypotheses"}
        What a confirmatory run covers: every variant in every scenario (``"grid"``, the
        default), or only the pairs its hypotheses and checks compare, plus the reference
        variants (``no_learning``, ``oracle``) in every scenario (``"hypotheses"``: the
        primary confirmatory family, with every run spent on it; the crossover map then
        shows what those pairs give).
    """

    pilot_seed: int
    pilot_runs: int
    confirmatory_seed: int
    replication_seed: int | None = None
    required: tuple = ()
    power: float = 0.8
    frozen: Frozen | None = None
    scope: str = "grid"

    def to_dict(self) -> dict:
        """The TOML form."""
        out = {"pilot_seed": self.pilot_seed, "pilot_runs": self.pilot_runs,
               "confirmatory_seed": self.confirmatory_seed, "required": list(self.required),
               "power": self.power}
        if self.replication_seed is not None:
            out["replication_seed"] = self.replication_seed
        if self.frozen is not None:
            out["frozen"] = {"commit": self.frozen.commit, "sha256": self.frozen.sha256}
        if self.scope != "grid":
            out["scope"] = self.scope
        return out


def parse_calibration(raw) -> Calibration:
    """Validate a ``[calibration]`` table (the names in ``required`` are checked by the
    kind, which knows its checks).

    Raises
    ------
    ConfigError
        Naming the field (``calibration.pilot_runs``, ...) and the value: an unknown or
        missing key, a seed below 0, fewer than 2 pilot runs, seeds that are not all
        distinct, ``power`` outside (0, 1), a ``frozen`` record that is not ``{commit =
        <40 hex>, sha256 = <64 hex>}``.
    """
    from dyna.experiment.config import check_keys

    if not isinstance(raw, dict):
        raise ConfigError("calibration", raw, "must be a table")
    check_keys(raw, _KEYS, "calibration.")
    for key in ("pilot_seed", "pilot_runs", "confirmatory_seed"):
        if key not in raw:
            raise ConfigError(f"calibration.{key}", None, "missing")
    seeds = {k: check_range(f"calibration.{k}", raw[k], 0, None, integer=True)
             for k in _SEEDS if k in raw}
    named = list(seeds.items())
    for i, (key, value) in enumerate(named):
        for other, seen in named[:i]:
            if value == seen:
                raise ConfigError(f"calibration.{key}", value, f"equals calibration.{other}: "
                                  "the pilot, confirmatory and replication seeds must be "
                                  "distinct (confirmation runs on fresh seeds)")
    required = raw.get("required", [])
    if not isinstance(required, list):
        raise ConfigError("calibration.required", required, "must be a list of check names")
    for j, name in enumerate(required):
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"calibration.required[{j}]", name, "must be a check name")
    if len(set(required)) != len(required):
        raise ConfigError("calibration.required", required, "names must be distinct")
    return Calibration(
        pilot_seed=seeds["pilot_seed"],
        pilot_runs=check_range("calibration.pilot_runs", raw["pilot_runs"], 2, None,
                               integer=True),
        confirmatory_seed=seeds["confirmatory_seed"],
        replication_seed=seeds.get("replication_seed"), required=tuple(required),
        power=float(check_range("calibration.power", raw.get("power", 0.8), 0.0, 1.0,
                                lo_open=True, hi_open=True)),
        frozen=_parse_frozen(raw["frozen"]) if "frozen" in raw else None,
        scope=_parse_scope(raw.get("scope", "grid")))


#: What a confirmatory run may cover (:attr:`Calibration.scope`).
SCOPES = ("grid", "hypotheses")


def _parse_scope(value) -> str:
    if value not in SCOPES:
        raise ConfigError("calibration.scope", value, f"must be one of {SCOPES}")
    return value


def _parse_frozen(raw) -> Frozen:
    if not isinstance(raw, dict) or set(raw) != {"commit", "sha256"}:
        raise ConfigError("calibration.frozen", raw, "must be { commit = <40 hex>, sha256 = "
                          "<64 hex> } (written by `dyna freeze FILE`)")
    for key, digits in _HEX_DIGITS.items():
        if not isinstance(raw[key], str) or not re.fullmatch(f"[0-9a-f]{{{digits}}}", raw[key]):
            raise ConfigError(f"calibration.frozen.{key}", raw[key],
                              f"must be {digits} lowercase hex digits")
    return Frozen(raw["commit"], raw["sha256"])


# ============================================================================ file hash

_HEADER = re.compile(rb"^[ \t]*\[(\[?)[ \t]*([^\[\]#]*?)[ \t]*\]\]?[ \t]*(?:#.*)?$")
_FROZEN_LINE = re.compile(rb"^[ \t]*frozen[ \t]*=")


def strip_frozen(data: bytes) -> bytes:
    """``data`` (a TOML file's bytes) without the ``frozen = ...`` lines of its
    ``[calibration]`` table, every other byte kept."""
    out, table = [], None
    for line in data.splitlines(keepends=True):
        head = _HEADER.match(line.rstrip(b"\r\n"))
        if head:
            table = None if head.group(1) else head.group(2)
        elif table == b"calibration" and _FROZEN_LINE.match(line):
            continue
        out.append(line)
    return b"".join(out)


def file_digest(path: str | Path) -> str:
    """The file's sha256 as the freeze record holds it: of its bytes without the ``frozen
    = ...`` line (:func:`strip_frozen`), so writing the record does not change it.

    Returns
    -------
    str
        64 lowercase hex digits.

    Raises
    ------
    MissingFileError
        No such file.
    ConfigError
        The record is not one line ``frozen = {...}`` of the ``[calibration]`` table (a
        sub-table or dotted keys would stay in the hashed bytes), or the file is not TOML.
    """
    data = _read_bytes(path)
    stripped = strip_frozen(data)
    try:
        whole = tomllib.loads(data.decode("utf-8"))
        rest = tomllib.loads(stripped.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError("config", str(path), f"not valid TOML: {exc}") from None
    cal = whole.get("calibration")
    if isinstance(cal, dict) and "frozen" in cal:
        cal = {k: v for k, v in cal.items() if k != "frozen"}
        if {**whole, "calibration": cal} != rest:
            raise ConfigError("calibration.frozen", whole["calibration"]["frozen"],
                              "must be one line `frozen = { commit = ..., sha256 = ... }` "
                              "under the [calibration] header")
    return hashlib.sha256(stripped).hexdigest()


def _read_bytes(path) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise MissingFileError("config", path) from None
    except IsADirectoryError:
        raise ConfigError("config", str(path), "is a directory") from None


def write_frozen(path: str | Path, frozen: Frozen) -> None:
    """Write ``frozen = { commit = ..., sha256 = ... }`` on the line after the
    ``[calibration]`` header, atomically (a temporary file renamed over the file, its mode
    kept).

    Raises
    ------
    ConfigError
        The file has no ``[calibration]`` header line (an inline or dotted table: nowhere to
        put the record), or already holds a record.
    """
    from dyna.fileio.atomic import atomic_target

    data = _read_bytes(path)
    if strip_frozen(data) != data:
        raise ConfigError("calibration.frozen", str(path), "the file is frozen already")
    lines = data.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines)
               if (m := _HEADER.match(line.rstrip(b"\r\n"))) and not m.group(1)
               and m.group(2) == b"calibration" and line.endswith(b"\n")), None)
    if at is None:
        raise ConfigError("calibration", str(path), "needs a [calibration] header line for "
                          "`dyna freeze` to write the record under")
    newline = b"\r\n" if lines[at].endswith(b"\r\n") else b"\n"
    record = (f'frozen = {{ commit = "{frozen.commit}", sha256 = "{frozen.sha256}" }}'
              .encode("ascii") + newline)
    new = b"".join(lines[:at + 1] + [record] + lines[at + 1:])
    with atomic_target(path) as tmp:     # keeps the file's permissions
        with open(tmp, "wb") as fh:
            fh.write(new)
            fh.flush()
            os.fsync(fh.fileno())


# ============================================================================ the checkout

def checkout_state(path: str | Path) -> dict:
    """The git state of the checkout holding the experiment file ``path``.

    Returns
    -------
    dict
        ``{"commit": <40 hex>, "dirty": bool}``: ``dirty`` when the file is not tracked or
        differs from the commit, or any other tracked file differs from it, leaving out the
        experiments' results folder beside the file (``<folder>/results/``: pilot logs and
        results are not code). ``{"commit": None, "dirty": True, "reason": ...}`` outside
        a git checkout or without git.
    """
    folder = Path(path).resolve().parent
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args):
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True,
                              env=env, timeout=30)

    try:
        top = git("rev-parse", "--show-toplevel")
        head = git("rev-parse", "HEAD")
        if top.returncode != 0 or head.returncode != 0:
            return {"commit": None, "dirty": True, "reason": "not a git checkout with a commit"}
        root = Path(top.stdout.decode().strip()).resolve()
        tracked = git("ls-files", "--error-unmatch", "--", Path(path).name).returncode == 0
        status = git("status", "--porcelain=v1", "-z", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": True, "reason": "git is not available"}
    results = (folder / "results").relative_to(root).as_posix() + "/"
    items = status.stdout.decode("utf-8", "surrogateescape").split("\0")
    changed, i = [], 0
    while i < len(items):
        entry = items[i]
        if len(entry) > 3:
            changed.append(entry[3:])
            i += 1 if entry[0] not in "RC" else 2   # a rename lists its old path next
        else:
            i += 1
    code = [p for p in changed if not p.startswith(results)]
    return {"commit": head.stdout.decode().strip(), "dirty": bool(code) or not tracked}


# ============================================================================ the pilot log

def pilot_log_path(path: str | Path, name: str) -> Path:
    """``<folder of the file>/results/<name>/pilot_log.jsonl``."""
    return Path(path).parent / "results" / name / "pilot_log.jsonl"


def append_pilot_entry(log: str | Path, entry: dict) -> None:
    """Append ``entry`` as one JSON line to the pilot log ``log`` (its folders created if
    absent), whole or not at all: one ``os.write`` of the whole line on a file opened with
    ``O_APPEND`` and ``O_NOFOLLOW`` (:func:`dyna.fileio.paths.open_write_nofollow`: never
    through a link). The entry goes through :func:`dyna.redact.redact` first (its check
    names are text from the experiment file).

    Raises
    ------
    ValueError
        ``entry`` holds a NaN or infinite number (JSON has none).
    dyna.fileio.SymlinkError
        ``log`` is a symbolic link; nothing is written.
    OSError
        The log cannot be written, or the write was short (a full disk).
    """
    from dyna.fileio.paths import open_write_nofollow
    from dyna.redact import redact

    data = (json.dumps(redact(entry), allow_nan=False) + "\n").encode("utf-8")
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = open_write_nofollow(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"{log}: wrote {written} of {len(data)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def read_pilot_log(log: str | Path) -> list[dict]:
    """The entries of a pilot log, oldest first (``[]`` when it does not exist).

    Raises
    ------
    ConfigError
        Field ``pilot_log``: a line that is not a JSON object (naming its number).
    """
    try:
        text = Path(log).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            raise ConfigError("pilot_log", str(log), f"line {n} is not a JSON object")
        out.append(entry)
    return out
