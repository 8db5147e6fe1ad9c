"""The contract of an experiment kind, and the output folder every kind is read back as.

An experiment file names its *kind* with a top-level key ``kind = "..."``; without it the
kind is ``"tabular"`` (the tabular Dyna experiments of Sutton & Barto ch. 8, unchanged).
Each kind is an :class:`ExperimentKind` object that knows its own TOML sections, jobs,
tables, plots and report. The runner (:func:`dyna.experiment.runner.run_experiment`) keeps
the parts every kind shares: validation before anything touches the disk, the backend
(in-process, process pool, Ray), the progress bar, the canonical merge order, the atomic
output folder, the manifest and ``dyna plot DIR``.

The contract
------------
A kind's **config** object (any class; frozen dataclasses recommended) has

``name : str``
    Folder-safe experiment name (letters, digits, ``_ . -``).
``seed : int``, ``runs : int``
    Base seed and runs (seeds) per group; run ``r`` of every group must draw only from
    streams derived from ``(seed, r)`` (plus group-specific constants), so results never
    depend on how runs were split into jobs or which backend ran them.
``to_dict() -> dict``
    JSON-ready canonical form. For every kind but ``tabular`` it contains
    ``"kind": <name>``; :func:`dyna.experiment.registry.parse_experiment` accepts it back
    (``load_output`` rebuilds the config from ``manifest.json`` this way).
``hash : str``
    sha256 hex of the canonical JSON of ``to_dict()`` (use
    :func:`dyna.experiment.config.config_hash`, which only needs ``to_dict``).
``with_overrides(runs=None, seed=None)``
    Copy with the CLI's ``--runs`` / ``--seed`` applied (validated; fields ``"--runs"``,
    ``"--seed"``).

A *group* is one variant (index ``v``) at one sweep point or scenario (index ``p``); a
:class:`~dyna.experiment.backends.Job` is one group for a contiguous block of run indices,
with a plain picklable ``payload`` (it crosses process and machine borders; put
``"variant_name"`` and ``"point_kwargs"`` in it for readable error notes). The runner
checks that the jobs of each group cover runs ``0 .. runs - 1`` exactly once.

The **kind** implements (see the method docstrings):

* :meth:`ExperimentKind.parse` -- validate the raw TOML dict (without ``kind``);
* :meth:`ExperimentKind.prepare` -- resolve everything that can fail on bad input (env
  ids, data files, ...) *before* the output folder exists; returns a :class:`Prepared`
  whose ``manifest`` entries go into ``manifest.json``;
* :meth:`ExperimentKind.n_groups` -- number of groups (for the automatic block size);
* :meth:`ExperimentKind.plan_jobs` -- the jobs, any order (the runner sorts by ``Job.key``);
* :attr:`ExperimentKind.job_function` -- a *top-level* function ``fn(job) -> result``
  (picklable; the result should be a dict of numpy arrays or other picklable data);
* :meth:`ExperimentKind.warm_up` -- compile kernels before the clock starts (optional);
* :meth:`ExperimentKind.build_tables` -- tidy polars tables from the results, given in
  canonical order; each table is written as ``<name>.parquet``;
* :meth:`ExperimentKind.draw_plots` and :meth:`ExperimentKind.write_report` -- from an
  :class:`ExperimentOutput` (``config``, ``manifest``, ``tables``),
  which is all ``dyna plot DIR`` has when it redraws the plots later;
* ``render(out, folder)`` (optional) -- plots and report in one call, for a kind that
  overlaps them (``agent_tasks``); when present the runner calls it instead of the two
  above, and the manifest's output and wall times then include the report;
* ``table_schema(config)`` (optional) -- per table name, the columns its plots and report
  read and the kind of each: ``"int"``, ``"finite"`` (finite numbers), ``"float"`` (any
  numbers, NaN allowed), ``"bool"`` or ``"str"`` (``"int?"``, ``"finite?"``: nulls
  allowed). :func:`dyna.experiment.runner.load_output` checks every table it reads
  against it, so a folder with a column missing, of another type or holding NaN fails
  with one ``ConfigError`` naming the file and column instead of deep in a plot.

Errors on bad input are :class:`dyna.errors.ConfigError` (or another
:class:`dyna.errors.DynaError`) naming the field; the CLI prints one line, exit status 2.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dyna.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl

    from dyna.experiment.backends import Job

__all__ = ["DEFAULT_KIND", "ExperimentKind", "ExperimentOutput", "Prepared", "config_kind",
           "kind_of"]


#: The kind of a file without a ``kind`` key.
DEFAULT_KIND = "tabular"


@dataclass
class Prepared:
    """What :meth:`ExperimentKind.prepare` resolved, before any file is written.

    Attributes
    ----------
    manifest : dict
        JSON-ready entries merged into ``manifest.json`` at top level (e.g. ``"envs"`` for
        tabular experiments, ``"data"`` with file hashes for replayed logs). Must not use
        the runner's own keys (``name``, ``kind``, ``config``, ``config_hash``, ``seed``,
        ``runs``, ``source``, ``created_utc``, ``packages``, ``platform``, ``git``, ``backend``,
        ``tables``, ``timing``).
    state : object
        Anything else the kind wants to pass from ``prepare`` to ``plan_jobs`` and
        ``build_tables`` (resolved env tables, loaded data); never pickled by the runner.
    """

    manifest: dict = field(default_factory=dict)
    state: Any = None


class ExperimentKind(ABC):
    """Base class of an experiment kind (see the module docstring for the contract)."""

    #: Registry name, the value of the TOML ``kind`` key.
    name: str = ""
    #: Unit shown by the progress bar (one tick per run of a job).
    progress_unit: str = "run"

    @abstractmethod
    def parse(self, data: dict, *, runs: int | None = None, seed: int | None = None):
        """Validate the raw TOML dict (``kind`` removed) into this kind's config object.

        Raises
        ------
        ConfigError
            Naming the dotted field (``variants.thompson.threshold``) and the value.
        """

    def prepare(self, config) -> Prepared:
        """Resolve and check everything that can fail on bad input; write nothing.

        Default: nothing to resolve.
        """
        return Prepared()

    @abstractmethod
    def n_groups(self, config) -> int:
        """Number of (variant, point) groups; jobs are split so a parallel backend's
        workers stay busy when there are fewer groups than workers."""

    @abstractmethod
    def plan_jobs(self, config, prepared: Prepared, *, block_size: int) -> list["Job"]:
        """The jobs: every group split into blocks of at most ``block_size`` runs
        (:func:`dyna.experiment.backends.split_runs`)."""

    @property
    @abstractmethod
    def job_function(self) -> Callable[["Job"], Any]:
        """A top-level (picklable) function ``fn(job) -> result``."""

    #: The dotted name of the module whose compiled kernels :meth:`warm_up` loads (None: the
    #: kind compiles nothing); ``dyna run`` says a first-run compile is coming when numba's
    #: cache holds none of that module's kernels.
    kernel_module: str | None = None

    def warm_up(self) -> float:
        """Compile kernels before the runs are timed; seconds taken (default 0)."""
        return 0.0

    @abstractmethod
    def build_tables(self, config, prepared: Prepared, jobs: Sequence["Job"],
                     results: Sequence[Any]) -> dict[str, "pl.DataFrame"]:
        """Tidy tables (name -> polars DataFrame) from the job results.

        ``jobs`` and ``results`` are aligned and in canonical order: sorted by
        ``(variant, point, first run index)``; each group's blocks cover its runs in order.
        """

    @abstractmethod
    def draw_plots(self, out: "ExperimentOutput", folder: Path) -> list[Path]:
        """Draw the plots into ``folder / "plots"``; return the files written."""

    @abstractmethod
    def write_report(self, out: "ExperimentOutput", folder: Path) -> Path:
        """Write ``folder / "report.md"``; return its path."""

    def required_tables(self) -> tuple[str, ...]:
        """Tables :func:`dyna.experiment.runner.load_output` insists on (default none)."""
        return ()


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


def kind_of(data: dict) -> str:
    """The ``kind`` of a raw experiment dict (:data:`DEFAULT_KIND` when absent).

    Raises
    ------
    ConfigError
        ``kind`` present but not a string.
    """
    kind = data.get("kind", DEFAULT_KIND)
    if not isinstance(kind, str) or not kind:
        raise ConfigError("kind", kind, "must be a non-empty string")
    return kind


def config_kind(config) -> str:
    """Kind name of a config object (``to_dict()["kind"]``, default ``tabular``)."""
    return getattr(config, "kind", None) or config.to_dict().get("kind", DEFAULT_KIND)
