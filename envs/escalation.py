"""Escalation stream: act on a task or hand it over, one task per step.

The streams (synthetic, with known truth, or replayed from real outcome logs) are built by
plain functions -- :func:`synthetic_stream`, :func:`replay_stream`, :func:`date_order_stream`
-- that the vectorised benchmark (:func:`dyna.escalation.run_policies`) and the Gymnasium
environment :class:`EscalationEnv` share, so both see exactly the same tasks for a seed.

Outcome logs are CSV files with columns ``system, task_id, task_type, success`` (and
optionally ``cost_usd``): one row per (system, task), ``success`` 0 or 1. They are read and
checked by :func:`load_outcomes`; every problem (missing column, non-binary success, unknown
system, empty stream) is a :class:`dyna.errors.ConfigError` naming it.
"""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import polars as pl
from gymnasium import spaces

from dyna.errors import ConfigError, MissingFileError, check_range
from envs.episode import EpisodeOverError

__all__ = ["ALL_BY_DATE", "EscalationEnv", "OUTCOME_COLUMNS", "ReplayIndex",
           "date_order_stream", "load_outcomes", "replay_stream", "synthetic_stream",
           "system_dates"]

#: Columns an outcome log must have.
OUTCOME_COLUMNS = ("system", "task_id", "task_type", "success")

#: ``system`` value meaning: every system of the log, one after the other in date order.
ALL_BY_DATE = "all_by_date"

_DATE_RE = re.compile(r"^(\d{4})(\d{2})(\d{2})")


# --------------------------------------------------------------------------- synthetic

def _rates(values, field_name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1) if not isinstance(values, str) \
        else None
    if arr is None or arr.size == 0:
        raise ConfigError(field_name, values, "must be a non-empty list of probabilities")
    bad = ~(np.isfinite(arr) & (arr >= 0) & (arr <= 1))
    if bad.any():
        raise ConfigError(field_name, values, "every rate must lie in [0, 1]")
    return arr


def synthetic_stream(rates, n_steps: int, rng: np.random.Generator, *, change_at=(),
                     rates_after=(), drift_to=None, type_weights=None,
                     verified_prob: float = 1.0) -> dict:
    """A synthetic task stream with known true success rates.

    Step t draws a task type ``k_t ~ Categorical(type_weights)``, its true rate ``p_t``
    (piecewise constant with ``change_at``/``rates_after``, or drifting linearly from
    ``rates`` at step 0 to ``drift_to`` at step ``n_steps - 1``), the agent's outcome
    ``U_t < p_t`` with ``U_t ~ Uniform[0, 1)``, and whether the outcome has provenance
    (``V_t < verified_prob``). The draws come from ``rng`` in that order, whole arrays at a
    time, so a seed fixes the stream.

    Parameters
    ----------
    rates : sequence of float, length K
        Initial true success rate of each task type, in [0, 1].
    n_steps : int
        Tasks in the stream (>= 1).
    rng : numpy.random.Generator
    change_at : sequence of int
        Steps (0-based, increasing, in 1..n_steps-1) at which the rates jump.
    rates_after : sequence of sequence of float
        The rates from each change point on (one list of K per change point).
    drift_to : sequence of float, optional
        Final rates of a linear drift (exclusive with ``change_at``).
    type_weights : sequence of float, optional
        Relative frequency of each type (default uniform).
    verified_prob : float
        Probability that an outcome has provenance (``outcome_verified_by`` and
        ``anti_gaming_policy`` set), in [0, 1].

    Returns
    -------
    dict
        ``types`` (T,) int64, ``p`` (T,) float64 true rate of the task's type,
        ``outcomes`` (T,) bool, ``verified`` (T,) bool, ``rates`` (T, K) float64 true rates of
        every type at each step (piecewise or drifting; shared rows are views).

    Raises
    ------
    ConfigError
        Rates outside [0, 1], mismatched lengths, change points out of order or range,
        both a change and a drift.
    """
    r0 = _rates(rates, "rates")
    K = r0.size
    n_steps = check_range("steps", n_steps, 1, None, integer=True)
    verified_prob = float(check_range("verified_prob", verified_prob, 0.0, 1.0))
    change_at = [check_range(f"change_at[{i}]", c, 1, n_steps - 1, integer=True)
                 for i, c in enumerate(change_at)]
    if any(b <= a for a, b in zip(change_at, change_at[1:])):
        raise ConfigError("change_at", change_at, "must be strictly increasing")
    if len(rates_after) != len(change_at):
        raise ConfigError("rates_after", rates_after,
                          f"needs one list of rates per change point ({len(change_at)})")
    if drift_to is not None and change_at:
        raise ConfigError("drift_to", drift_to, "set either change_at or drift_to, not both")
    table = np.empty((n_steps, K))
    table[:] = r0
    for i, (c, ra) in enumerate(zip(change_at, rates_after)):
        r = _rates(ra, f"rates_after[{i}]")
        if r.size != K:
            raise ConfigError(f"rates_after[{i}]", ra, f"must have {K} rates like 'rates'")
        table[c:] = r
    if drift_to is not None:
        r1 = _rates(drift_to, "drift_to")
        if r1.size != K:
            raise ConfigError("drift_to", drift_to, f"must have {K} rates like 'rates'")
        frac = np.arange(n_steps) / max(n_steps - 1, 1)
        table = r0 + frac[:, None] * (r1 - r0)
    if type_weights is None:
        w = np.full(K, 1.0 / K)
    else:
        w = np.asarray(type_weights, dtype=np.float64).reshape(-1)
        if w.size != K or not (np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0):
            raise ConfigError("type_weights", type_weights,
                              f"must be {K} non-negative weights with a positive sum")
        w = w / w.sum()
    types = rng.choice(K, size=n_steps, p=w).astype(np.int64)
    p = table[np.arange(n_steps), types]
    outcomes = rng.random(n_steps) < p
    verified = rng.random(n_steps) < verified_prob
    return {"types": types, "p": p, "outcomes": outcomes, "verified": verified,
            "rates": table}


# --------------------------------------------------------------------------- outcome logs

def load_outcomes(path, *, field_name: str = "data") -> pl.DataFrame:
    """Read and check an outcome log (CSV).

    Parameters
    ----------
    path : str or Path
        CSV with a header; columns :data:`OUTCOME_COLUMNS` required, ``cost_usd`` optional,
        others ignored.
    field_name : str
        Field named in errors (the TOML key that gave the path).

    Returns
    -------
    polars.DataFrame
        Columns ``system`` (String), ``task_id`` (String), ``task_type`` (String),
        ``success`` (Boolean), ``cost_usd`` (Float64, 0.0 when the column is absent), in
        file order.

    Raises
    ------
    MissingFileError
        No such file.
    ConfigError
        Not a readable CSV, missing columns, no rows, empty ``system``/``task_id``/
        ``task_type``, a ``success`` value other than 0 or 1, a negative or non-numeric
        ``cost_usd``. The message names the file, the column and the first offending row
        (1-based data row). A task may appear several times (repeated trials, as in
        tau-bench); each row is one task of the stream.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(field_name, path)
    try:
        raw = pl.read_csv(path, infer_schema_length=0)  # every column as String
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(field_name, str(path), f"not a readable CSV: {first}") from None
    missing = [c for c in OUTCOME_COLUMNS if c not in raw.columns]
    if missing:
        raise ConfigError(field_name, str(path), f"missing column(s) {', '.join(missing)} "
                          f"(need {', '.join(OUTCOME_COLUMNS)}; found "
                          f"{', '.join(raw.columns) or 'none'})")
    if raw.height == 0:
        raise ConfigError(field_name, str(path), "has no data rows (empty stream)")
    for col in ("system", "task_id", "task_type"):
        s = raw.get_column(col)
        blank = s.is_null() | (s.str.strip_chars() == "")
        if blank.any():
            row = int(blank.arg_max()) + 1
            raise ConfigError(field_name, str(path), f"column {col!r} is empty in row {row}")
    succ = raw.get_column("success").str.strip_chars()
    ok = succ.is_in(["0", "1"]).fill_null(False)
    if not ok.all():
        row = int((~ok).arg_max())
        raise ConfigError(field_name, str(path), f"column 'success' must be 0 or 1; row "
                          f"{row + 1} has {succ[row]!r}")
    if "cost_usd" in raw.columns:
        cost = raw.get_column("cost_usd").str.strip_chars().cast(pl.Float64, strict=False)
        bad = cost.is_null() | cost.is_nan() | (cost < 0)
        if bad.any():
            row = int(bad.arg_max())
            raise ConfigError(field_name, str(path), f"column 'cost_usd' must be a number "
                              f">= 0; row {row + 1} has {raw['cost_usd'][row]!r}")
    else:
        cost = pl.Series("cost_usd", np.zeros(raw.height))
    frame = pl.DataFrame({
        "system": raw.get_column("system"), "task_id": raw.get_column("task_id"),
        "task_type": raw.get_column("task_type"), "success": succ == "1",
        "cost_usd": cost.alias("cost_usd")})
    return frame


class ReplayIndex:
    """Per-system arrays of an outcome log, in ``task_id`` order, built once.

    Streams drawn from it are the same as :func:`replay_stream` / :func:`date_order_stream`
    (which use it); build one per log to draw many streams cheaply.

    Parameters
    ----------
    frame : polars.DataFrame
        From :func:`load_outcomes`.
    type_names : sequence of str, optional
        Type index order (default: sorted type names of the frame).
    """

    def __init__(self, frame: pl.DataFrame, type_names=None):
        self.type_names = sorted(set(frame.get_column("task_type").to_list())) \
            if type_names is None else list(type_names)
        index = {n: i for i, n in enumerate(self.type_names)}
        self.systems = sorted(set(frame.get_column("system").to_list()))
        self._rows = {}
        for (system,), rows in frame.sort("system", "task_id", maintain_order=True) \
                .group_by(["system"], maintain_order=True):
            self._rows[system] = {
                "types": np.array([index[t] for t in rows.get_column("task_type").to_list()],
                                  dtype=np.int64),
                "outcomes": rows.get_column("success").to_numpy().astype(bool),
                "cost_usd": rows.get_column("cost_usd").to_numpy().astype(np.float64),
                "task_id": rows.get_column("task_id").to_list()}

    def stream(self, system: str, rng: np.random.Generator | None, *, order: str = "random",
               field_name: str = "system") -> dict:
        """One system's stream; see :func:`replay_stream`."""
        if order not in ("random", "task_id"):
            raise ConfigError("order", order, "must be 'random' or 'task_id'")
        rows = self._rows.get(system)
        if rows is None:
            shown = ", ".join(self.systems[:5]) + (
                f", ... ({len(self.systems)} systems)" if len(self.systems) > 5 else "")
            raise ConfigError(field_name, system, f"unknown system (not in the data: {shown})")
        n = rows["types"].size
        perm = rng.permutation(n) if order == "random" else np.arange(n)
        return {"types": rows["types"][perm], "outcomes": rows["outcomes"][perm],
                "cost_usd": rows["cost_usd"][perm],
                "task_id": [rows["task_id"][i] for i in perm],
                "type_names": list(self.type_names), "system": [system] * n}

    def date_order(self, rng: np.random.Generator | None, *, order: str = "random",
                   dates: dict | None = None, when: dict | None = None) -> dict:
        """Every system one after the other by date; see :func:`date_order_stream`."""
        if when is None:
            when = system_dates_of(self.systems, dates)
        systems = sorted(self.systems, key=lambda s: (when[s], s))
        parts = [self.stream(s, rng, order=order) for s in systems]
        starts = np.cumsum([0] + [len(p["types"]) for p in parts])
        return {
            "types": np.concatenate([p["types"] for p in parts]),
            "outcomes": np.concatenate([p["outcomes"] for p in parts]),
            "cost_usd": np.concatenate([p["cost_usd"] for p in parts]),
            "task_id": sum((p["task_id"] for p in parts), []),
            "system": sum((p["system"] for p in parts), []),
            "type_names": list(self.type_names), "systems": systems,
            "change_at": [int(s) for s in starts[1:-1]],
        }


def replay_stream(frame: pl.DataFrame, system: str, rng: np.random.Generator | None, *,
                  order: str = "random", type_names=None, field_name: str = "system") -> dict:
    """One system's outcomes as a task stream.

    Parameters
    ----------
    frame : polars.DataFrame
        From :func:`load_outcomes`.
    system : str
        The system that plays the agent.
    rng : numpy.random.Generator or None
        Draws the order (``order="random"``: ``rng.permutation(n)`` applied to the
        system's rows sorted by ``task_id``); unused for ``order="task_id"``.
    order : {"random", "task_id"}
    type_names : sequence of str, optional
        Type index order (default: sorted type names of the whole frame).

    Returns
    -------
    dict
        ``types`` (T,) int64, ``outcomes`` (T,) bool, ``cost_usd`` (T,) float64,
        ``task_id`` list of str, ``type_names`` list of str, ``system`` list of str.

    Raises
    ------
    ConfigError
        Unknown system (naming it and some known ones), unknown order.
    """
    return ReplayIndex(frame, type_names).stream(system, rng, order=order,
                                                 field_name=field_name)


def system_dates_of(systems, dates: dict | None = None) -> dict:
    """Date (``YYYY-MM-DD``) of every system: from ``dates``, else the id's leading
    ``YYYYMMDD`` (SWE-bench leaderboard folder ids start with it).

    Raises
    ------
    ConfigError
        A system with no date.
    """
    out = {}
    for s in sorted(systems):
        if dates and s in dates:
            out[s] = str(dates[s])
            continue
        m = _DATE_RE.match(s)
        if not m:
            raise ConfigError("systems", s, "no date for this system (give a systems file "
                              "with a 'date' column, or ids starting with YYYYMMDD)")
        out[s] = f"{m.group(1)}-{m.group(2)}-{m.group(3)}"
    return out


def system_dates(frame: pl.DataFrame, dates: dict | None = None) -> dict:
    """:func:`system_dates_of` for the systems of an outcome log."""
    return system_dates_of(set(frame.get_column("system").to_list()), dates)


def date_order_stream(frame: pl.DataFrame, rng: np.random.Generator | None, *,
                      order: str = "random", dates: dict | None = None,
                      type_names=None) -> dict:
    """A non-stationary stream: every system's tasks, one system after the other by date.

    Systems are sorted by (date, id); each contributes its tasks in the order of
    :func:`replay_stream` (its own permutation drawn from ``rng`` in that system order).

    Returns
    -------
    dict
        As :func:`replay_stream`, plus ``change_at`` (list of int: the step at which each
        system after the first starts) and ``systems`` (the order).

    Raises
    ------
    ConfigError
        A system without a date.
    """
    return ReplayIndex(frame, type_names).date_order(rng, order=order, dates=dates)


# --------------------------------------------------------------------------- the env

class EscalationEnv(gym.Env):
    """Act on a task, or escalate it to a human or a stronger system.

    Each step is one task of a task type. The agent sees the type and chooses to act
    (action 0) or escalate (action 1). Acting reveals success or failure and pays
    ``c_act`` plus ``c_failure`` on failure; escalating pays ``c_escalate`` and always
    succeeds. With ``feedback="censored"`` (default) an escalated task does not reveal
    whether the agent would have succeeded; ``feedback="full"`` (shadow mode) reveals it
    anyway.

    Tasks come from one of two sources, rebuilt from the seed at every ``reset``:

    * ``source="synthetic"``: task types with true success probabilities ``rates``,
      optionally jumping at ``change_at`` to ``rates_after`` or drifting to ``drift_to``
      (:func:`synthetic_stream`);
    * ``source="replay"``: a real outcome log ``data`` (CSV path or the frame of
      :func:`load_outcomes`) with one ``system`` as the agent, its tasks in a seeded random
      order (or ``order="task_id"``); ``system="all_by_date"`` streams every system one after
      the other in date order, a non-stationary stream (:func:`date_order_stream`).

    Spaces
    ------
    Observation: ``Discrete(n_types)``, the current task's type (``type_names`` lists them).
    Action: ``Discrete(2)``: 0 act, 1 escalate.

    Rewards
    -------
    Minus the cost of the step: ``-(c_act + c_failure * failed)`` when acting,
    ``-c_escalate`` when escalating. With ``act_cost="cost_usd"`` (replay), ``c_act`` is the
    task's logged API cost times ``act_cost_scale``.

    Episode
    -------
    One pass over the stream: ``terminated`` after its last task (no truncation; wrap with
    ``TimeLimit`` for shorter episodes). A step before the first ``reset`` or after the last
    task raises :class:`envs.episode.EpisodeOverError`.

    Info
    ----
    ``outcome``: 1 success, 0 failure, -1 not revealed (escalated under censoring);
    ``acted``; ``cost``; ``verified`` (the outcome has provenance); ``step``; ``task_id``
    (replay); ``p_true`` (synthetic: the true rate of the task's type); after ``reset``
    also ``n_steps`` and ``type_names``.

    Version history
    ---------------
    v0: first version.
    """

    metadata = {"render_modes": []}

    def __init__(self, source: str = "synthetic", *, rates=(0.3, 0.6, 0.85, 0.95),
                 steps: int = 1000, change_at=(), rates_after=(), drift_to=None,
                 type_weights=None, verified_prob: float = 1.0, data=None,
                 system: str | None = None, order: str = "random",
                 feedback: str = "censored", c_escalate: float = 1.0,
                 c_failure: float = 5.0, c_act: float = 0.0, act_cost: str | None = None,
                 act_cost_scale: float = 1.0, render_mode=None):
        if render_mode is not None:   # no render modes (metadata): refuse, as the mazes do
            raise ConfigError("render_mode", render_mode, "must be None: this env does not "
                              "render")
        if source not in ("synthetic", "replay"):
            raise ConfigError("source", source, "must be 'synthetic' or 'replay'")
        if feedback not in ("censored", "full"):
            raise ConfigError("feedback", feedback, "must be 'censored' or 'full'")
        for name, v in (("c_escalate", c_escalate), ("c_failure", c_failure),
                        ("c_act", c_act), ("act_cost_scale", act_cost_scale)):
            check_range(name, v, 0.0, None)
        if act_cost not in (None, "cost_usd"):
            raise ConfigError("act_cost", act_cost, "must be None or 'cost_usd'")
        self.source, self.feedback, self.order = source, feedback, order
        self.c_escalate, self.c_failure, self.c_act = float(c_escalate), float(c_failure), \
            float(c_act)
        self.act_cost, self.act_cost_scale = act_cost, float(act_cost_scale)
        if source == "synthetic":
            self._syn = dict(rates=rates, n_steps=steps, change_at=tuple(change_at),
                             rates_after=tuple(rates_after), drift_to=drift_to,
                             type_weights=type_weights, verified_prob=verified_prob)
            # validate now (a fixed generator; the stream is redrawn at reset)
            synthetic_stream(rng=np.random.default_rng(0), **self._syn)
            self.type_names = [f"type{i}" for i in range(len(rates))]
        else:
            if data is None:
                raise ConfigError("data", None, "replay needs an outcome log (CSV path)")
            self.frame = data if isinstance(data, pl.DataFrame) else load_outcomes(data)
            if system is None:
                raise ConfigError("system", None, "replay needs a system (or 'all_by_date')")
            self.system = system
            self._index = ReplayIndex(self.frame)
            self.type_names = self._index.type_names
            if system != ALL_BY_DATE:
                self._index.stream(system, None, order="task_id")  # unknown system fails
            else:
                system_dates(self.frame)
        self.observation_space = spaces.Discrete(len(self.type_names))
        self.action_space = spaces.Discrete(2)
        self.render_mode = render_mode
        self._s: dict | None = None
        self._t = 0

    def _stream(self, rng: np.random.Generator) -> dict:
        if self.source == "synthetic":
            return synthetic_stream(rng=rng, **self._syn)
        if self.system == ALL_BY_DATE:
            s = self._index.date_order(rng, order=self.order)
        else:
            s = self._index.stream(self.system, rng, order=self.order)
        s["verified"] = np.ones(len(s["types"]), dtype=bool)
        return s

    def stream(self) -> dict:
        """The current episode's stream (arrays of :func:`synthetic_stream` or
        :func:`replay_stream`); only valid after :meth:`reset`."""
        if self._s is None:
            raise RuntimeError("call reset() first")
        return self._s

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self._s = self._stream(self.np_random)
        self._t = 0
        info = {"n_steps": len(self._s["types"]), "type_names": list(self.type_names)}
        return int(self._s["types"][0]), info

    def step(self, action):
        """Act on (0) or escalate (1) the current task; see the class docstring.

        Raises
        ------
        EpisodeOverError
            Called before reset or after the last task (:mod:`envs.episode`).
        ConfigError
            An action other than 0 or 1.
        """
        if self._s is None or self._t >= len(self._s["types"]):
            raise EpisodeOverError(action)
        if not self.action_space.contains(action):
            raise ConfigError("action", action, "must be 0 (act) or 1 (escalate)")
        s, t = self._s, self._t
        acted = int(action) == 0
        win = bool(s["outcomes"][t])
        c_act = self.c_act if self.act_cost is None else \
            float(s["cost_usd"][t]) * self.act_cost_scale
        cost = (c_act + (0.0 if win else self.c_failure)) if acted else self.c_escalate
        revealed = acted or self.feedback == "full"
        info = {"outcome": int(win) if revealed else -1, "acted": acted, "cost": cost,
                "verified": bool(s["verified"][t]), "step": t}
        if "p" in s:
            info["p_true"] = float(s["p"][t])
        if "task_id" in s:
            info["task_id"] = s["task_id"][t]
        self._t = t + 1
        terminated = self._t >= len(s["types"])
        obs = int(s["types"][min(self._t, len(s["types"]) - 1)])
        return obs, -cost, terminated, False, info
