"""Experiments: TOML configs -> variants x sweep points x runs -> tidy Parquet, plots, report.

The machinery every experiment kind shares (it imports no kind):

* :mod:`dyna.experiment.protocol` -- the contract a kind implements
  (:class:`ExperimentKind`, :class:`Prepared`) and :class:`ExperimentOutput`, an output
  folder read back.
* :mod:`dyna.experiment.registry` -- the kinds and backends by name, and the loaders of an
  experiment file or dict of any kind (:func:`load_experiment`, :func:`parse_experiment`).
* :mod:`dyna.experiment.config` -- TOML reading, field checks, the config hash, ``[run]``.
* :mod:`dyna.experiment.runner` -- :func:`run_experiment` plans, executes, writes and
  renders one output folder; :func:`load_output` reads it back.
* :mod:`dyna.experiment.output_folder` -- the output folder built hidden and renamed into
  place.
* :mod:`dyna.experiment.backends`, :mod:`dyna.experiment.ray_backend` -- where jobs run
  (in-process, local process pool, Ray).
* :mod:`dyna.experiment.stats` -- mean / IQM with bootstrap confidence intervals.
* :mod:`dyna.experiment.plotting`, :mod:`dyna.experiment.reporting` -- helpers of every
  kind's plots and report.md.
* :mod:`dyna.experiment.cli` -- ``dyna run`` and ``dyna plot``.

The kinds, one package each under :mod:`dyna.experiment.kinds`: ``tabular`` (the default),
``escalation``, ``agent_tasks``.
"""

import importlib

# Lazy attributes: ``import dyna.experiment`` (done by every ``dyna`` CLI call) stays cheap;
# scipy, polars and matplotlib load on first use. Every entry names a module of the
# machinery; ``ExperimentConfig`` (the tabular kind's config) is found through the registry.
_LAZY = {
    "Backend": "backends", "InProcessBackend": "backends", "Job": "backends",
    "ProcessPoolBackend": "backends", "get_backend": "registry",
    "config_hash": "config",
    "ExperimentKind": "protocol", "Prepared": "protocol", "get_kind": "registry",
    "load_experiment": "registry", "parse_experiment": "registry",
    "register_kind": "registry",
    "ExperimentOutput": "protocol", "load_output": "runner", "run_experiment": "runner",
    "bootstrap_ci": "stats", "curve_ci": "stats", "diff_ci": "stats", "iqm": "stats",
}

__all__ = sorted([*_LAZY, "ExperimentConfig"])


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"dyna.experiment.{_LAZY[name]}"), name)
    if name == "ExperimentConfig":  # the default kind's config class, via the registry
        registry = importlib.import_module("dyna.experiment.registry")
        module = registry.KINDS[registry.DEFAULT_KIND].partition(":")[0]
        return importlib.import_module(module).ExperimentConfig
    raise AttributeError(f"module 'dyna.experiment' has no attribute {name!r}")
