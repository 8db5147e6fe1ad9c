"""Shared parts of every experiment file: TOML reading, field checks, the config hash, [run].

Every kind parses its own sections (its package's ``config`` module) with the checks here,
so a misspelt key or a bad value is reported the same way in every kind: a
:class:`dyna.errors.ConfigError` naming the dotted field (``schedule.episods``), the value
and, for a misspelt key, the close match. The optional ``[run]`` table (where and how to
run) is read by :func:`load_run_options` and is never part of a config or its hash.

Part of the experiment machinery: imports no experiment kind.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import tomllib
from pathlib import Path

import numpy as np

from dyna.errors import ConfigError, MissingFileError, check_range

__all__ = ["MAX_EPISODES", "MAX_RUNS", "MAX_RUN_EPISODES", "MAX_TOML_DEPTH", "NAME_RE",
           "RUN_KEYS", "canonical_json", "check_bool", "check_keys", "check_run_sizes",
           "check_scalar", "check_string", "config_hash", "json_default", "load_run_options",
           "load_toml", "name_list", "read_toml", "table_of"]


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")

#: Deepest nesting of tables and arrays in an experiment file (shipped files nest at most 5).
MAX_TOML_DEPTH = 32
#: Most runs of an experiment (``runs`` or ``--runs``; shipped experiments use at most 80).
MAX_RUNS = 10_000
#: Most episodes per run (any ``episodes`` count; shipped experiments use at most 2,000).
MAX_EPISODES = 1_000_000
#: Most episodes of all runs together (runs x episodes; shipped: at most 64,000), which
#: bounds the per-episode tables a run allocates.
MAX_RUN_EPISODES = 100_000_000
_FLOAT_MAX = int(np.finfo(np.float64).max)


def json_default(obj):
    """``json.dumps(default=...)`` for numpy scalars and arrays, tuples, sets and paths.

    Raises
    ------
    TypeError
        Any other object (as :func:`json.dumps` expects).
    """
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def canonical_json(obj) -> str:
    """Sorted keys, no spaces: one text per value (cache keys, hashes)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=json_default)


def config_hash(config) -> str:
    """sha256 hex digest of the canonical JSON (sorted keys, no spaces) of a config."""
    text = json.dumps(config.to_dict(), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def with_run_overrides(config, runs: int | None = None, seed: int | None = None):
    """A dataclass config with ``--runs`` (>= 1) and ``--seed`` (>= 0) applied; the same
    object when neither is given.

    Raises
    ------
    ConfigError
        Field ``--runs`` or ``--seed``, naming the value.
    """
    import dataclasses

    changes = {}
    if runs is not None:
        changes["runs"] = check_range("--runs", runs, lo=1, integer=True)
    if seed is not None:
        changes["seed"] = check_range("--seed", seed, lo=0, integer=True)
    return dataclasses.replace(config, **changes) if changes else config


def check_keys(table: dict, allowed, prefix: str) -> None:
    """Raise ConfigError for the first key of ``table`` not in ``allowed`` (field
    ``<prefix><key>``, with the close match or the list of allowed keys)."""
    for key, value in table.items():
        if key not in allowed:
            close = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else \
                f"; expected one of {', '.join(sorted(allowed))}"
            raise ConfigError(f"{prefix}{key}", value, f"unknown key{hint}")


def table_of(data: dict, key: str, field_name: str, required: bool = False) -> dict:
    """``data[key]`` as a table (``{}`` when absent and not ``required``).

    Raises
    ------
    ConfigError
        ``field_name``: missing although required, or not a table.
    """
    value = data.get(key)
    if value is None:
        if required:
            raise ConfigError(field_name, None, "missing (a table is required)")
        return {}
    if not isinstance(value, dict):
        raise ConfigError(field_name, value, "must be a table")
    return value


def check_string(value, field_name: str, *, pattern: re.Pattern | None = None,
                 allow_empty: bool = False) -> str:
    """``value`` if it is a (non-empty, unless ``allow_empty``) string matching ``pattern``.

    Raises
    ------
    ConfigError
        ``field_name``: not a string, empty, or not matching (folder-safe names).
    """
    if not isinstance(value, str) or (not allow_empty and not value):
        raise ConfigError(field_name, value, "must be a non-empty string")
    if pattern is not None and not pattern.match(value):
        raise ConfigError(field_name, value,
                          "must use only letters, digits, '_', '.', '-' (used in folder names)")
    return value


def check_bool(value, field_name: str) -> bool:
    """``value`` if it is ``true`` or ``false``; a ConfigError on ``field_name`` otherwise."""
    if not isinstance(value, bool):
        raise ConfigError(field_name, value, "must be true or false")
    return value


def check_scalar(value, field_name: str):
    """``value`` if it is a boolean, integer, string or finite float.

    Raises
    ------
    ConfigError
        ``field_name``: another type, or a NaN or infinite float.
    """
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(field_name, value, "must be finite")
        return value
    raise ConfigError(field_name, value, "must be a number, string or boolean")


def name_list(values, allowed: tuple, field_name: str, what: str) -> list:
    """Check an array of names against ``allowed`` (difflib suggestion on a miss).

    Raises
    ------
    ConfigError
        ``field_name`` not an array, or ``field_name[j]`` not in ``allowed``.
    """
    if not isinstance(values, list):
        raise ConfigError(field_name, values, "must be an array of strings")
    for j, name in enumerate(values):
        if name not in allowed:
            close = difflib.get_close_matches(str(name), allowed, n=1)
            hint = f"did you mean {close[0]!r}?" if close else \
                f"expected one of {', '.join(allowed)}"
            raise ConfigError(f"{field_name}[{j}]", name, f"unknown {what}; {hint}")
    return list(values)


def read_toml(path: str | Path) -> dict:
    """Read an experiment TOML file into a dict, without its ``[run]`` table.

    Raises
    ------
    MissingFileError
        ``path`` does not exist (field ``"config"``).
    ConfigError
        ``path`` is a directory, or not valid TOML, nested too deeply or holding an integer
        beyond the float64 range (:func:`load_toml`).
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError("config", str(path), "is a directory; give an experiment .toml file")
    data = load_toml(path)
    data.pop("run", None)  # where to run is not part of the experiment (see load_run_options)
    return data


#: Keys of the optional ``[run]`` table: where and how to run, never part of the config hash.
RUN_KEYS = ("backend", "address", "workers", "block_size")


def load_run_options(path: str | Path) -> dict:
    """The optional ``[run]`` table of an experiment file: ``backend``, ``address``,
    ``workers``, ``block_size``. Command-line flags override it; it does not enter the config
    or its hash, since the results do not depend on where they were computed.

    Raises
    ------
    MissingFileError, ConfigError
        No such file; not valid TOML; an unknown key (``run.<key>``) or a bad value.
    """
    raw = load_toml(path).get("run", {})
    if not isinstance(raw, dict):
        raise ConfigError("run", raw, "must be a table")
    check_keys(raw, RUN_KEYS, "run.")
    out = {}
    for key in ("backend", "address"):
        if key in raw:
            out[key] = check_string(raw[key], f"run.{key}")
    for key in ("workers", "block_size"):
        if key in raw:
            out[key] = check_range(f"run.{key}", raw[key], lo=1, integer=True)
    return out


def load_toml(path: str | Path) -> dict:
    """The whole TOML file ``path`` as a dict, checked before anything walks it recursively:
    at most :data:`MAX_TOML_DEPTH` nested tables and arrays, no integer beyond the float64
    range.

    Raises
    ------
    MissingFileError
        ``path`` does not exist (field ``"config"``).
    ConfigError
        Field ``"config"``, value = path: not valid TOML, or nested too deeply (also when
        the TOML reader itself runs out of stack on thousands of levels); an integer beyond
        the float64 range, naming its dotted field.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError("config", path)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except (tomllib.TOMLDecodeError, ValueError) as exc:   # ValueError: an int of > 4,300 digits
        raise ConfigError("config", str(path), f"not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError("config", str(path), f"nested too deeply (more than "
                          f"MAX_TOML_DEPTH={MAX_TOML_DEPTH} tables and arrays)") from None
    stack = [("", data, 1)]
    while stack:
        where, value, depth = stack.pop()
        if depth > MAX_TOML_DEPTH:
            raise ConfigError("config", str(path), f"nested too deeply (more than "
                              f"MAX_TOML_DEPTH={MAX_TOML_DEPTH} tables and arrays, at "
                              f"{where or 'top'})")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, v in items:
            name = f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]"
            name = name.lstrip(".")
            if isinstance(v, (dict, list)):
                stack.append((name, v, depth + 1))
            elif type(v) is int and abs(v) > _FLOAT_MAX:
                raise ConfigError(name, v, "beyond the float64 range (|x| <= 1.8e308)")
    return data


def check_run_sizes(data: dict, runs: int | None = None) -> None:
    """Refuse an experiment asking for more than :data:`MAX_RUNS` runs, :data:`MAX_EPISODES`
    episodes per run (any integer ``episodes`` in the file, e.g. ``schedule.episodes``) or
    :data:`MAX_RUN_EPISODES` episodes in all, before anything is allocated for them.

    Parameters
    ----------
    data : dict
        The experiment as read (:func:`read_toml`), already depth-checked.
    runs : int, optional
        The ``--runs`` override, checked instead of the file's ``runs``.

    Raises
    ------
    ConfigError
        Naming ``runs`` (or ``--runs``), the episodes field, and the bound.
    """
    field, n_runs = ("--runs", runs) if runs is not None else ("runs", data.get("runs"))
    if type(n_runs) is int and n_runs > MAX_RUNS:
        raise ConfigError(field, n_runs, f"must be <= MAX_RUNS={MAX_RUNS}")
    stack = [("", data)]
    while stack:
        where, table = stack.pop()
        for key, v in table.items():
            name = f"{where}{key}"
            if isinstance(v, dict):
                stack.append((name + ".", v))
            elif key == "episodes" and type(v) is int:
                if v > MAX_EPISODES:
                    raise ConfigError(name, v, f"must be <= MAX_EPISODES={MAX_EPISODES}")
                if type(n_runs) is int and n_runs * v > MAX_RUN_EPISODES:
                    raise ConfigError(name, v, f"{field}={n_runs} x {v} episodes is more than "
                                      f"MAX_RUN_EPISODES={MAX_RUN_EPISODES}")
