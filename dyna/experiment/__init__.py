"""Experiments: TOML configs -> variants x sweep points x runs -> tidy Parquet, plots, report.

* :mod:`dyna.experiment.kinds` -- the registry of experiment kinds (``kind = "tabular"``,
  the default; ``"escalation"``; ``"agent_tasks"``) and the contract a kind implements.
* :mod:`dyna.experiment.config` -- load and validate an experiment file of any kind
  (:func:`load_config`; tabular configs are parsed here).
* :mod:`dyna.experiment.backends` -- where jobs run (in-process, local process pool).
* :mod:`dyna.experiment.runner` -- :func:`run_experiment` writes one output folder
  atomically; :func:`load_output` reads it back.
* :mod:`dyna.experiment.stats` -- mean / IQM with bootstrap confidence intervals.
* :mod:`dyna.experiment.plots`, :mod:`dyna.experiment.report` -- standard plots and
  report.md.
* :mod:`dyna.experiment.escalation`, :mod:`dyna.experiment.escalation_report` -- kind
  ``escalation``: policies on task streams, selective-prediction and bandit metrics.
* :mod:`dyna.experiment.cli` -- ``dyna run`` and ``dyna plot``.
"""

import importlib

# Lazy attributes: ``import dyna.experiment`` (done by every ``dyna`` CLI call) stays cheap;
# scipy, polars and matplotlib load on first use.
_LAZY = {
    "Backend": "backends", "InProcessBackend": "backends", "Job": "backends",
    "ProcessPoolBackend": "backends", "get_backend": "backends",
    "ExperimentConfig": "config", "load_config": "config", "parse_config": "config",
    "ExperimentKind": "kinds", "get_kind": "kinds", "load_experiment": "kinds",
    "parse_experiment": "kinds", "register_kind": "kinds",
    "ExperimentOutput": "runner", "load_output": "runner", "run_experiment": "runner",
    "bootstrap_ci": "stats", "curve_ci": "stats", "diff_ci": "stats", "iqm": "stats",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"dyna.experiment.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'dyna.experiment' has no attribute {name!r}")
