"""Where the runner finds experiment kinds and backends: two registries of names.

:data:`KINDS` maps a kind's name (the TOML ``kind`` key) to ``"module:attribute"`` of its
:class:`~dyna.experiment.protocol.ExperimentKind` instance, imported on first use; every
shipped kind is a package of :mod:`dyna.experiment.kinds`. :data:`BACKENDS` does the same
for execution backends (the Ray backend is an optional extra). The loaders
(:func:`load_experiment`, :func:`parse_experiment`) read a file or dict of any kind and hand
it to its kind.

Registered kinds:

============  =======================================  =========================================
kind          what it runs                             package
============  =======================================  =========================================
tabular       tabular Dyna agents on Gymnasium tables  :mod:`dyna.experiment.kinds.tabular`
escalation    escalation policies on task streams      :mod:`dyna.experiment.kinds.escalation`
agent_tasks   skill / memory loops on agent tasks      :mod:`dyna.experiment.kinds.agent_tasks`
trajectories  recorded agent runs through the loops    :mod:`dyna.experiment.kinds.trajectories`
============  =======================================  =========================================

Adding a kind: a package with a module-level instance of a subclass of
:class:`~dyna.experiment.protocol.ExperimentKind` and one line in :data:`KINDS` (or a call
of :func:`register_kind` at import time of a plugin). This module is the only part of the
machinery that names a kind, and only by these strings; a kind never imports it.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from pathlib import Path

from dyna.errors import ConfigError
from dyna.experiment.backends import Backend, InProcessBackend, ProcessPoolBackend
from dyna.experiment.config import check_run_sizes, read_toml
from dyna.experiment.protocol import DEFAULT_KIND, ExperimentKind, kind_of

__all__ = ["BACKENDS", "DEFAULT_KIND", "KINDS", "get_backend", "get_kind", "load_experiment",
           "parse_experiment", "register_kind"]


#: Kind name -> ``"module:attribute"`` of its :class:`ExperimentKind` instance.
KINDS: dict[str, str] = {
    "tabular": "dyna.experiment.kinds.tabular:KIND",
    "escalation": "dyna.experiment.kinds.escalation:KIND",
    "agent_tasks": "dyna.experiment.kinds.agent_tasks:KIND",
    "trajectories": "dyna.experiment.kinds.trajectories:KIND",
}


_loaded: dict[str, "ExperimentKind"] = {}


def register_kind(name: str, target: "str | ExperimentKind") -> None:
    """Register a kind: ``target`` is an :class:`ExperimentKind` or ``"module:attribute"``.

    Raises
    ------
    ConfigError
        A name that is not a non-empty identifier-like string (field ``kind``).
    """
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise ConfigError("kind", name, "kind names use letters, digits and '_'")
    if isinstance(target, ExperimentKind):
        _loaded[name] = target
        KINDS[name] = f"{type(target).__module__}:<instance>"
    else:
        KINDS[name] = target
        _loaded.pop(name, None)


def get_kind(name) -> ExperimentKind:
    """The registered kind ``name`` (imported on first use).

    Raises
    ------
    ConfigError
        Unknown kind (field ``kind``, with a close-match suggestion), or a registered kind
        whose module is not installed.
    """
    if name in _loaded:
        return _loaded[name]
    if not isinstance(name, str) or name not in KINDS:
        close = difflib.get_close_matches(str(name), list(KINDS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else \
            f"expected one of {', '.join(sorted(KINDS))}"
        raise ConfigError("kind", name, f"unknown experiment kind; {hint}")
    module, _, attr = KINDS[name].partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise ConfigError("kind", name, f"kind is registered but {module} is not "
                              "available in this installation") from None
        raise
    kind = getattr(mod, attr)
    _loaded[name] = kind
    return kind


def parse_experiment(data: dict, *, runs: int | None = None, seed: int | None = None,
                     base_dir: str | Path | None = None):
    """Validate a raw experiment dict of any kind into its config object.

    Parameters
    ----------
    data : dict
        Parsed TOML or a config's ``to_dict()``; ``kind`` selects the kind (without it,
        ``tabular``).
    runs, seed : int, optional
        CLI overrides.
    base_dir : str or Path, optional
        The experiment file's folder: relative file paths in it are resolved against it
        (passed to kinds whose ``parse`` takes ``base_dir``); None: the working directory.

    Raises
    ------
    ConfigError
        Unknown kind, more runs or episodes than the bounds of
        :func:`dyna.experiment.config.check_run_sizes`, or whatever the kind's
        :meth:`~ExperimentKind.parse` raises.
    """
    if not isinstance(data, dict):
        raise ConfigError("config", data, "must be a table")
    check_run_sizes(data, runs)
    kind = get_kind(kind_of(data))
    rest = {k: v for k, v in data.items() if k != "kind"}
    if base_dir is not None and "base_dir" in inspect.signature(kind.parse).parameters:
        return kind.parse(rest, runs=runs, seed=seed, base_dir=Path(base_dir))
    return kind.parse(rest, runs=runs, seed=seed)


#: Backend name -> class, or ``"module:Class"`` imported on first use (optional extras).
BACKENDS: dict[str, type[Backend] | str] = {
    InProcessBackend.name: InProcessBackend,
    ProcessPoolBackend.name: ProcessPoolBackend,
    "ray": "dyna.experiment.ray_backend:RayBackend",
}


def get_backend(name: str, workers: int | None = None, **options) -> Backend:
    """Backend by name.

    Parameters
    ----------
    name : {"inprocess", "process", "ray"}
        Backend name (``--backend``).
    workers : int, optional
        Worker processes (process backend; CPUs of a local Ray instance; ignored
        in-process).
    **options
        Backend-specific keywords, e.g. ``address`` for ``"ray"``.

    Raises
    ------
    ConfigError
        Unknown backend name (field ``"--backend"``) or bad ``workers``;
        :class:`dyna.experiment.ray_backend.RayNotInstalledError` for ``"ray"`` without Ray.
    """
    cls = BACKENDS.get(name)
    if cls is None:
        raise ConfigError("--backend", name, f"unknown backend; expected one of "
                          f"{', '.join(sorted(BACKENDS))}")
    if isinstance(cls, str):
        module, _, attr = cls.partition(":")
        cls = getattr(importlib.import_module(module), attr)
    return cls(workers, **options) if workers is not None else cls(**options)


def load_experiment(path: str | Path, *, runs: int | None = None, seed: int | None = None):
    """Read an experiment TOML file of any kind and validate it into its kind's config.

    Parameters
    ----------
    path : str or Path
        The ``.toml`` file; its optional ``[run]`` table is ignored here (see
        :func:`dyna.experiment.config.load_run_options`).
    runs, seed : int, optional
        CLI overrides (``--runs``, ``--seed``).

    Raises
    ------
    MissingFileError
        ``path`` does not exist (field ``"config"``). Relative file paths inside the file
    (e.g. an escalation log's ``data``) are resolved against the file's folder.
    ConfigError
        The file is not valid TOML (field ``"config"``, value = path), an unknown kind, or a
        field is invalid (whatever the kind's ``parse`` raises).
    """
    return parse_experiment(read_toml(path), runs=runs, seed=seed,
                            base_dir=Path(path).resolve().parent)
