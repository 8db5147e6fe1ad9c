"""Escalation benchmark: experiment kind ``escalation`` and its metrics.

When should an agent act on a task and when should it hand it over? Every policy of
:mod:`dyna.escalation` is run on task streams -- synthetic ones with known true success
rates (stationary, with change points, drifting) and replays of real agent outcome logs
(:mod:`envs.escalation`) -- and scored with the standard metrics of selective prediction and
bandits.

Metrics (functions of this module, used by the job and tested on hand-made tables)
---------------------------------------------------------------------------------
Costs per task: acting costs ``c_act`` plus ``c_failure`` on failure, escalating costs
``c_escalate`` (:func:`dyna.escalation.run_policies`).

* **Total cost** and **regret** against two oracles on the same stream: the *type oracle*
  knows each task type's true rate p and acts iff ``c_act + (1 - p) c_failure <=
  c_escalate`` (iff p >= Chow's p*); the *task oracle* knows each task's outcome and acts
  iff the agent would succeed (and acting is cheaper). Realised regret is the cost
  difference on the realised outcomes; the *pseudo-regret* (the bandit quantity, used for
  the log-T check) sums the expected-cost gap ``|c_act + (1 - p_t) c_failure - c_escalate|``
  over the steps where the policy's action differs from the type oracle's.
* **Escalation rate** (escalated tasks / tasks) and **failure rate** (failed attempts /
  tasks).
* **Risk-coverage curve** (El-Yaniv & Wiener 2010; Geifman, Uziel & El-Yaniv, "Bias-reduced
  uncertainty estimation for deep neural classifiers", ICLR 2019): order tasks by the
  competence score the policy had when the task arrived (posterior mean of its type,
  highest first); at coverage k/n the risk is the failure rate of the agent on the first k
  tasks. **AURC** is the mean risk over k = 1..n; **E-AURC** subtracts the AURC of the
  perfect score (all successes first).
  *Ties*: per-type scores tie massively, and the order within a tie is arbitrary. The
  curve here is the *expectation over a uniformly random order within each tie*: inside a
  block of m tied tasks with f failures, entered after k0 tasks with F0 failures, the risk
  at k0 + j is ``(F0 + j f / m) / (k0 + j)`` (exact, because the denominator is fixed).
  A constant score therefore has AURC equal to the failure rate -- the AURC of a random
  score in expectation -- and the result never depends on sort stability.
* **Competence vs truth**: the posterior mean of every type against its true rate at log-
  spaced checkpoints (mean absolute error, and the full posterior for run 0).
* **Recovery after a change point**: the agreement curve g(t) = fraction of runs whose
  action at step t equals the type oracle's. With ĝ the mean of g over the ``window``
  steps before the change, recovery takes the smallest j >= 0 such that the mean of g over
  steps ``[c + j, c + j + window)`` is at least ``ĝ - tolerance``; reported in tasks
  (steps) after the change, or "not recovered" before the next change or the end.

Experiment file (``kind = "escalation"``)
-----------------------------------------
::

    kind = "escalation"
    name = "escalation_policies"
    seed = 0
    runs = 20
    risk_classes = ["low_stakes", "elevated", "high_stakes"]
    feedback = ["censored", "full"]

    [costs]                # c_failure defaults to c_escalate / (1 - p*) of each risk class
    c_escalate = 1.0

    [[scenarios]]
    name = "stationary"
    source = "synthetic"
    rates = [0.3, 0.6, 0.86, 0.97]
    steps = 2000

    [[scenarios]]
    name = "swebench"
    source = "replay"
    data = "data/swebench_verified_bash_only.csv"
    systems = "all"          # or a list, or "all_by_date"

    [defaults]
    prior = "uniform"

    [[variants]]
    name = "thompson"
    rule = "thompson"

A *variant* is a policy (``rule`` in :data:`dyna.escalation.POLICY_RULES` or ``"preset"``,
the risk class's own (p*, delta) rule; ``p_star``, ``delta``, ``min_episodes``, ``epsilon``,
``prior``, ``discount``); each variant runs under every risk class (groups are variant x
risk class); each scenario stream (one per system for replays) runs under every feedback
mode (points). Runs differ in the stream's random draws and order; a run's stream depends
only on ``(seed, scenario, system, run)``, so every policy and both feedback modes see the
same tasks (common random numbers).

Tables: ``runs`` (one row per group x point x run: costs, regrets, rates, AURC ...),
``curves`` (cumulative quantities at checkpoints per run), ``risk_coverage`` (risk at a
coverage grid per run), ``agreement`` (agreement with the type oracle per step, summed over
runs), ``competence`` (run 0: every type's posterior at the checkpoints with the true rate).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dyna.errors import ConfigError, MissingFileError, check_range
from dyna.experiment.backends import Job, split_runs
from dyna.experiment.config import (_NAME_RE, _bool, _check_keys, _string, _table,
                                    config_hash)
from dyna.experiment.kinds import ExperimentKind, Prepared

if TYPE_CHECKING:  # pragma: no cover
    from dyna.experiment.runner import ExperimentOutput

__all__ = ["EscalationConfig", "KIND", "Scenario", "PolicyVariant", "aurc", "e_aurc",
           "fit_log_growth", "optimal_aurc", "oracle_actions", "recovery_steps",
           "risk_coverage"]

FEEDBACK = ("censored", "full")


# =========================================================================== metrics

def risk_coverage(scores, losses) -> tuple[np.ndarray, np.ndarray]:
    """Risk-coverage curve with ties averaged over random orders (module docstring).

    Parameters
    ----------
    scores : array_like of float, shape (n,)
        Confidence of each task (higher: accepted first).
    losses : array_like of float, shape (n,)
        Loss of accepting each task (1 = the agent fails, 0 = it succeeds).

    Returns
    -------
    coverage, risk : ndarray of float64, shape (n,)
        ``coverage[k-1] = k / n`` and the expected risk of the first k tasks.

    Raises
    ------
    ConfigError
        Mismatched shapes, empty input or non-finite values.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    loss = np.asarray(losses, dtype=np.float64).reshape(-1)
    if s.shape != loss.shape:
        raise ConfigError("losses", loss.shape, f"must match scores {s.shape}")
    n = s.size
    if n == 0:
        raise ConfigError("scores", s.shape, "need at least one task")
    if not (np.isfinite(s).all() and np.isfinite(loss).all()):
        raise ConfigError("scores", "non-finite", "scores and losses must be finite")
    order = np.argsort(-s, kind="stable")
    s_sorted, l_sorted = s[order], loss[order]
    starts = np.flatnonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]])
    sizes = np.diff(np.r_[starts, n])
    block_loss = np.add.reduceat(l_sorted, starts)
    before = np.r_[0.0, np.cumsum(block_loss)[:-1]]
    k = np.arange(1, n + 1, dtype=np.float64)
    block = np.repeat(np.arange(starts.size), sizes)
    j = k - starts[block]  # position within the block, 1..m
    expected = before[block] + j * block_loss[block] / sizes[block]
    return k / n, expected / k


def aurc(scores, losses) -> float:
    """Area under the risk-coverage curve: mean risk over coverages k/n, k = 1..n.

    Ties in ``scores`` are averaged over random orders (:func:`risk_coverage`); a constant
    score gives the mean loss.
    """
    return float(np.mean(risk_coverage(scores, losses)[1]))


def optimal_aurc(losses) -> float:
    """AURC of the perfect score (every success before every failure).

    With n tasks and s successes, ``(1/n) * sum_{k=s+1..n} (k - s) / k``.
    """
    loss = np.asarray(losses, dtype=np.float64).reshape(-1)
    return aurc(-loss, loss)


def e_aurc(scores, losses) -> float:
    """Excess AURC: ``aurc(scores, losses) - optimal_aurc(losses)`` (Geifman et al. 2019)."""
    return aurc(scores, losses) - optimal_aurc(losses)


def oracle_actions(p, c_escalate, c_failure, c_act=0.0) -> np.ndarray:
    """The type oracle's actions: act iff ``c_act + (1 - p) c_failure <= c_escalate``.

    Parameters
    ----------
    p : array_like of float64, shape (..., T)
        True success rate of each task's type.
    c_escalate, c_failure : float or array_like broadcastable to ``p``
    c_act : float or array_like broadcastable to ``p``

    Returns
    -------
    ndarray of bool, shape of ``p``
    """
    p = np.asarray(p, dtype=np.float64)
    return np.asarray(c_act) + (1.0 - p) * np.asarray(c_failure) <= np.asarray(c_escalate)


def recovery_steps(agreement, change_at: int, *, window: int, tolerance: float = 0.05,
                   end: int | None = None) -> int | None:
    """Tasks after a change point until agreement with the oracle is back (module docstring).

    Parameters
    ----------
    agreement : array_like of float64, shape (T,)
        Fraction of runs agreeing with the type oracle at each step.
    change_at : int
        First step (0-based) of the new regime; needs ``window <= change_at``.
    window : int
        Window length (steps).
    tolerance : float
        Allowed shortfall against the pre-change level.
    end : int, optional
        End of the regime (next change point or T).

    Returns
    -------
    int or None
        Steps j after the change, or None if agreement does not come back before ``end``.
    """
    g = np.asarray(agreement, dtype=np.float64)
    end = g.size if end is None else int(end)
    window = int(window)
    if change_at < window or change_at + window > end:
        return None
    level = g[change_at - window:change_at].mean()
    csum = np.r_[0.0, np.cumsum(g[change_at:end])]
    means = (csum[window:] - csum[:-window]) / window
    ok = np.flatnonzero(means >= level - tolerance)
    return int(ok[0]) if ok.size else None


def fit_log_growth(t, regret) -> dict:
    """Fit ``R(t) = alpha + beta ln t`` and ``R(t) = alpha' + gamma t`` by least squares.

    Parameters
    ----------
    t : array_like of float, shape (m,)
        Steps (>= 1).
    regret : array_like of float, shape (m,)
        Mean cumulative regret at those steps.

    Returns
    -------
    dict
        ``slope_log`` (beta), ``r2_log``, ``slope_linear`` (gamma), ``r2_linear``, and
        ``exponent``, the slope of ``ln R`` on ``ln t`` (1 for linear growth, ~0 for
        logarithmic; NaN if some R <= 0).
    """
    t = np.asarray(t, dtype=np.float64)
    r = np.asarray(regret, dtype=np.float64)

    def fit(x, y):
        A = np.c_[np.ones_like(x), x]
        coef, *_ = np.linalg.lstsq(A, y, rcond=None)
        resid = y - A @ coef
        ss = ((y - y.mean()) ** 2).sum()
        return float(coef[1]), float(1.0 - (resid ** 2).sum() / ss) if ss > 0 else math.nan

    b_log, r2_log = fit(np.log(t), r)
    b_lin, r2_lin = fit(t, r)
    exponent = fit(np.log(t), np.log(r))[0] if (r > 0).all() else math.nan
    return {"slope_log": b_log, "r2_log": r2_log, "slope_linear": b_lin,
            "r2_linear": r2_lin, "exponent": exponent}


# =========================================================================== config

@dataclass(frozen=True)
class Scenario:
    """A source of task streams.

    Attributes
    ----------
    name : str
    source : {"synthetic", "replay"}
    params : dict
        Synthetic: ``rates``, ``steps``, ``change_at``, ``rates_after``, ``drift_to``,
        ``type_weights``, ``verified_prob``. Replay: ``data`` (CSV path), ``systems``
        (``"all"``, ``"all_by_date"`` or a list), ``order`` (``"random"``/``"task_id"``),
        ``systems_file`` (CSV with ``system`` and ``date`` columns, optional).
    """

    name: str
    source: str
    params: dict


@dataclass(frozen=True)
class PolicyVariant:
    """One policy of the benchmark.

    Attributes
    ----------
    name : str
    rule : str
        One of :data:`dyna.escalation.POLICY_RULES` or ``"preset"``.
    p_star, delta : float or None
        Overrides of the risk class's preset (None: use the class's).
    min_episodes : int
    epsilon : float
    prior : str or tuple
    discount : float
    discount_clock : {"step", "update"}
        See :func:`dyna.escalation.run_policies` ("step": Raj & Kalyani 2017, every type
        decays at every task).
    """

    name: str
    rule: str
    p_star: float | None = None
    delta: float | None = None
    min_episodes: int = 0
    epsilon: float = 0.0
    prior: object = "uniform"
    discount: float = 1.0
    discount_clock: str = "step"


@dataclass(frozen=True)
class EscalationAnalysis:
    """Analysis options.

    Attributes
    ----------
    checkpoints : int
        Log-spaced checkpoints (steps) of the curves (plus the last step).
    coverage_points : int
        Points of the stored risk-coverage grid.
    recovery_window : int
        Window (steps) of the recovery measure.
    recovery_tolerance : float
    competence_variant : tuple of str
        Variants whose posteriors of run 0 are stored and plotted (a name or a list in the
        TOML; default: the first Thompson-sampling variant, else the first variant).
    confidence : float
    n_resamples : int
    svg : bool
        Also write SVG copies of the plots.
    """

    checkpoints: int = 40
    coverage_points: int = 20
    recovery_window: int = 50
    recovery_tolerance: float = 0.05
    competence_variant: tuple = ()
    confidence: float = 0.95
    n_resamples: int = 1000
    svg: bool = True


@dataclass(frozen=True)
class EscalationConfig:
    """A validated escalation experiment (kind ``escalation``)."""

    name: str
    description: str
    seed: int
    runs: int
    costs: dict
    risk_classes: tuple
    feedback: tuple
    scenarios: tuple
    variants: tuple
    analysis: EscalationAnalysis = field(default_factory=EscalationAnalysis)
    kind: str = "escalation"

    def to_dict(self) -> dict:
        """Canonical JSON-ready form (accepted back by :func:`parse_escalation`)."""
        defaults = PolicyVariant("", "")
        variants = []
        for v in self.variants:
            d = {"name": v.name, "rule": v.rule}
            for f in dataclasses.fields(PolicyVariant)[2:]:
                val = getattr(v, f.name)
                if val != getattr(defaults, f.name):
                    d[f.name] = list(val) if isinstance(val, tuple) else val
            variants.append(d)
        return {
            "kind": "escalation", "name": self.name, "description": self.description,
            "seed": self.seed, "runs": self.runs, "costs": dict(self.costs),
            "risk_classes": list(self.risk_classes), "feedback": list(self.feedback),
            "scenarios": [{"name": s.name, "source": s.source, **_plain(s.params)}
                          for s in self.scenarios],
            "variants": variants,
            "analysis": {k: list(v) if isinstance(v, tuple) else v
                         for k, v in dataclasses.asdict(self.analysis).items()},
        }

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON of :meth:`to_dict`."""
        return config_hash(self)

    def with_overrides(self, *, runs: int | None = None, seed: int | None = None):
        """Copy with ``--runs`` / ``--seed`` applied."""
        changes = {}
        if runs is not None:
            changes["runs"] = check_range("--runs", runs, lo=1, integer=True)
        if seed is not None:
            changes["seed"] = check_range("--seed", seed, lo=0, integer=True)
        return dataclasses.replace(self, **changes) if changes else self

    def groups(self) -> list[tuple[PolicyVariant, str]]:
        """(variant, risk class) pairs in canonical order (variant-major)."""
        return [(v, rc) for v in self.variants for rc in self.risk_classes]


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


_TOP = ("name", "description", "seed", "runs", "costs", "risk_classes", "feedback",
        "scenarios", "defaults", "variants", "analysis")
_COSTS = ("c_escalate", "c_failure", "c_act", "act_cost", "act_cost_scale")
_SYN = ("name", "source", "rates", "steps", "change_at", "rates_after", "drift_to",
        "type_weights", "verified_prob")
_REPLAY = ("name", "source", "data", "systems", "order", "systems_file")
_VARIANT = tuple(f.name for f in dataclasses.fields(PolicyVariant))
_ANALYSIS = tuple(f.name for f in dataclasses.fields(EscalationAnalysis))
RULES = ("never", "always", "mean", "lower_bound", "thompson", "chow", "preset")


def _names(values, allowed, fname):
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not values:
        raise ConfigError(fname, values, "must be a non-empty array of strings")
    for j, v in enumerate(values):
        if v not in allowed:
            raise ConfigError(f"{fname}[{j}]", v, f"expected one of {', '.join(allowed)}")
    if len(set(values)) != len(values):
        raise ConfigError(fname, values, "values must be distinct")
    return tuple(values)


def _parse_costs(raw: dict) -> dict:
    _check_keys(raw, _COSTS, "costs.")
    out = {"c_escalate": float(check_range("costs.c_escalate", raw.get("c_escalate", 1.0),
                                           0.0, None, lo_open=True))}
    if "c_failure" in raw:
        out["c_failure"] = float(check_range("costs.c_failure", raw["c_failure"], 0.0, None,
                                             lo_open=True))
    out["c_act"] = float(check_range("costs.c_act", raw.get("c_act", 0.0), 0.0, None))
    act_cost = raw.get("act_cost", "")
    if act_cost not in ("", "cost_usd"):
        raise ConfigError("costs.act_cost", act_cost, "must be '' or 'cost_usd'")
    out["act_cost"] = act_cost
    out["act_cost_scale"] = float(check_range("costs.act_cost_scale",
                                              raw.get("act_cost_scale", 1.0), 0.0, None))
    for k, v in out.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"costs.{k}", v, "must be finite")
    return out


def _float_list(value, fname):
    if not isinstance(value, list) or not value or \
            not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
        raise ConfigError(fname, value, "must be a non-empty array of numbers")
    return [float(x) for x in value]


def _parse_scenario(raw, i) -> Scenario:
    if not isinstance(raw, dict):
        raise ConfigError(f"scenarios[{i}]", raw, "must be a table")
    name = _string(raw.get("name"), f"scenarios[{i}].name", pattern=_NAME_RE)
    prefix = f"scenarios.{name}."
    source = raw.get("source", "synthetic")
    if source == "synthetic":
        _check_keys(raw, _SYN, prefix)
        params = {"rates": _float_list(raw.get("rates"), prefix + "rates"),
                  "steps": check_range(prefix + "steps", raw.get("steps", 1000), 1, None,
                                       integer=True)}
        if "change_at" in raw:
            ch = raw["change_at"]
            if not isinstance(ch, list):
                raise ConfigError(prefix + "change_at", ch, "must be an array of steps")
            params["change_at"] = [check_range(f"{prefix}change_at[{j}]", c, 1, None,
                                               integer=True) for j, c in enumerate(ch)]
            ra = raw.get("rates_after", [])
            if not isinstance(ra, list):
                raise ConfigError(prefix + "rates_after", ra, "must be an array of arrays")
            params["rates_after"] = [_float_list(r, f"{prefix}rates_after[{j}]")
                                     for j, r in enumerate(ra)]
        elif "rates_after" in raw:
            raise ConfigError(prefix + "rates_after", raw["rates_after"], "needs change_at")
        if "drift_to" in raw:
            params["drift_to"] = _float_list(raw["drift_to"], prefix + "drift_to")
        if "type_weights" in raw:
            params["type_weights"] = _float_list(raw["type_weights"], prefix + "type_weights")
        params["verified_prob"] = float(check_range(prefix + "verified_prob",
                                                    raw.get("verified_prob", 1.0), 0.0, 1.0))
        # full validation through the generator itself (errors renamed to this scenario)
        from envs.escalation import synthetic_stream

        try:
            synthetic_stream(rng=np.random.default_rng(0), n_steps=params["steps"],
                             **{k: v for k, v in params.items() if k != "steps"})
        except ConfigError as exc:
            raise ConfigError(prefix + exc.field, exc.value, exc.reason) from None
    elif source == "replay":
        _check_keys(raw, _REPLAY, prefix)
        params = {"data": _string(raw.get("data"), prefix + "data")}
        systems = raw.get("systems", "all")
        if isinstance(systems, list):
            if not systems or not all(isinstance(s, str) and s for s in systems):
                raise ConfigError(prefix + "systems", systems,
                                  "must be 'all', 'all_by_date' or an array of system ids")
            if len(set(systems)) != len(systems):
                raise ConfigError(prefix + "systems", systems, "values must be distinct")
        elif systems not in ("all", "all_by_date"):
            raise ConfigError(prefix + "systems", systems,
                              "must be 'all', 'all_by_date' or an array of system ids")
        params["systems"] = systems
        order = raw.get("order", "random")
        if order not in ("random", "task_id"):
            raise ConfigError(prefix + "order", order, "must be 'random' or 'task_id'")
        params["order"] = order
        if "systems_file" in raw:
            params["systems_file"] = _string(raw["systems_file"], prefix + "systems_file")
    else:
        raise ConfigError(prefix + "source", source, "must be 'synthetic' or 'replay'")
    return Scenario(name=name, source=source, params=params)


def _parse_variant(raw: dict, defaults: dict, i: int) -> PolicyVariant:
    if not isinstance(raw, dict):
        raise ConfigError(f"variants[{i}]", raw, "must be a table")
    name = _string(raw.get("name"), f"variants[{i}].name", pattern=_NAME_RE)
    prefix = f"variants.{name}."
    _check_keys(raw, _VARIANT, prefix)
    merged = {**defaults, **raw}
    rule = merged.get("rule")
    if rule not in RULES:
        raise ConfigError(prefix + "rule", rule, f"expected one of {', '.join(RULES)}")
    kw = {}
    for key in ("p_star", "delta"):
        if merged.get(key) is not None:
            lo_open = key == "delta"
            kw[key] = float(check_range(prefix + key, merged[key], 0.0, 1.0, lo_open=lo_open,
                                        hi_open=lo_open))
    kw["min_episodes"] = check_range(prefix + "min_episodes", merged.get("min_episodes", 0),
                                     0, None, integer=True)
    kw["epsilon"] = float(check_range(prefix + "epsilon", merged.get("epsilon", 0.0), 0.0,
                                      1.0))
    kw["discount"] = float(check_range(prefix + "discount", merged.get("discount", 1.0), 0.0,
                                       1.0, lo_open=True))
    clock = merged.get("discount_clock", "step")
    if clock not in ("step", "update"):
        raise ConfigError(prefix + "discount_clock", clock, "must be 'step' or 'update'")
    kw["discount_clock"] = clock
    prior = merged.get("prior", "uniform")
    from dyna.competence import prior_shapes

    try:
        prior_shapes(prior)
    except ConfigError as exc:
        raise ConfigError(prefix + "prior", prior, exc.reason) from None
    kw["prior"] = tuple(float(x) for x in prior) if isinstance(prior, list) else prior
    return PolicyVariant(name=name, rule=rule, **kw)


def parse_escalation(data: dict, *, runs=None, seed=None) -> EscalationConfig:
    """Validate a raw ``kind = "escalation"`` dict (``kind`` removed).

    Raises
    ------
    ConfigError
        Naming the dotted field: misspelt keys (with a suggestion), values out of range,
        unknown rules, risk classes or feedback modes, bad scenario rates.
    """
    _check_keys(data, _TOP, "")
    name = _string(data.get("name"), "name", pattern=_NAME_RE)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError("description", description, "must be a string")
    cfg_seed = check_range("seed", data.get("seed", 0), lo=0, integer=True)
    cfg_runs = check_range("runs", data.get("runs", 1), lo=1, integer=True)
    costs = _parse_costs(_table(data, "costs", "costs"))
    from dyna.escalation import RISK_CLASSES

    risk = _names(data.get("risk_classes", ["low_stakes"]), tuple(RISK_CLASSES),
                  "risk_classes")
    feedback = _names(data.get("feedback", ["censored"]), FEEDBACK, "feedback")
    raw_sc = data.get("scenarios")
    if not isinstance(raw_sc, list) or not raw_sc:
        raise ConfigError("scenarios", raw_sc, "must be a non-empty array of tables "
                          "([[scenarios]])")
    scenarios = tuple(_parse_scenario(r, i) for i, r in enumerate(raw_sc))
    if len({s.name for s in scenarios}) != len(scenarios):
        raise ConfigError("scenarios", [s.name for s in scenarios], "duplicate scenario name")
    if costs["act_cost"] and any(s.source != "replay" for s in scenarios):
        raise ConfigError("costs.act_cost", costs["act_cost"],
                          "logged API cost exists only for replay scenarios")
    defaults = _table(data, "defaults", "defaults")
    _check_keys(defaults, tuple(k for k in _VARIANT if k != "name"), "defaults.")
    raw_v = data.get("variants")
    if not isinstance(raw_v, list) or not raw_v:
        raise ConfigError("variants", raw_v, "must be a non-empty array of tables")
    variants = tuple(_parse_variant(r, defaults, i) for i, r in enumerate(raw_v))
    if len({v.name for v in variants}) != len(variants):
        raise ConfigError("variants", [v.name for v in variants], "duplicate variant name")
    raw_a = _table(data, "analysis", "analysis")
    _check_keys(raw_a, _ANALYSIS, "analysis.")
    comp = raw_a.get("competence_variant", [])
    comp = [comp] if isinstance(comp, str) else comp
    if not isinstance(comp, list) or not all(isinstance(c, str) for c in comp):
        raise ConfigError("analysis.competence_variant", comp,
                          "must be a variant name or an array of them")
    for c in comp:
        if c not in {v.name for v in variants}:
            raise ConfigError("analysis.competence_variant", c, "is not a variant name")
    if not comp:
        comp = [next((v.name for v in variants if v.rule == "thompson"), variants[0].name)]
    comp = tuple(dict.fromkeys(comp))
    analysis = EscalationAnalysis(
        checkpoints=check_range("analysis.checkpoints", raw_a.get("checkpoints", 40), 2,
                                1000, integer=True),
        coverage_points=check_range("analysis.coverage_points",
                                    raw_a.get("coverage_points", 20), 2, 1000, integer=True),
        recovery_window=check_range("analysis.recovery_window",
                                    raw_a.get("recovery_window", 50), 1, None, integer=True),
        recovery_tolerance=float(check_range("analysis.recovery_tolerance",
                                             raw_a.get("recovery_tolerance", 0.05), 0.0, 1.0)),
        competence_variant=comp,
        confidence=float(check_range("analysis.confidence", raw_a.get("confidence", 0.95),
                                     0.0, 1.0, lo_open=True, hi_open=True)),
        n_resamples=check_range("analysis.n_resamples", raw_a.get("n_resamples", 1000), 100,
                                None, integer=True),
        svg=_bool(raw_a.get("svg", True), "analysis.svg"))
    cfg = EscalationConfig(name=name, description=description, seed=cfg_seed, runs=cfg_runs,
                           costs=costs, risk_classes=risk, feedback=feedback,
                           scenarios=scenarios, variants=variants, analysis=analysis)
    for v in variants:  # every (variant, class) must build a policy
        for rc in risk:
            build_policy(cfg, v, rc)
    return cfg.with_overrides(runs=runs, seed=seed)


# =========================================================================== policies

def class_costs(costs: dict, risk_class: str) -> tuple[float, float, float]:
    """``(c_escalate, c_failure, c_act)`` under a risk class.

    ``c_failure`` defaults to ``c_escalate / (1 - p*)`` with the class's preset p*, so that
    Chow's cost threshold equals the class's p* (higher stakes: a failure costs more).
    """
    from dyna.escalation import RISK_CLASSES

    c_e = costs["c_escalate"]
    c_f = costs.get("c_failure") or c_e / (1.0 - RISK_CLASSES[risk_class].p_star)
    return c_e, c_f, costs.get("c_act", 0.0)


def build_policy(config: EscalationConfig, variant: PolicyVariant, risk_class: str):
    """The :class:`dyna.escalation.Policy` of a variant under a risk class.

    Threshold rules take p* (and delta) from the variant or else from the risk class's
    preset; ``"chow"`` takes its threshold from the class's costs (:func:`class_costs`);
    ``"preset"`` is the class's own preset rule.

    Raises
    ------
    ConfigError
        Naming ``variants.<name>.<field>``.
    """
    from dyna.escalation import RISK_CLASSES, make_policy

    rc = RISK_CLASSES[risk_class]
    c_e, c_f, c_a = class_costs(config.costs, risk_class)
    rule = variant.rule
    delta = variant.delta if variant.delta is not None else (rc.delta or 0.05)
    if rule == "preset":
        rule = "mean" if rc.delta is None else "lower_bound"
    return make_policy(rule, p_star=variant.p_star if variant.p_star is not None
                       else rc.p_star, delta=delta, min_episodes=variant.min_episodes,
                       epsilon=variant.epsilon, c_escalate=c_e, c_failure=c_f, c_act=c_a,
                       field_prefix=f"variants.{variant.name}.")


# =========================================================================== data

_REPO = Path(__file__).resolve().parents[2]


def resolve_data_path(path: str, field_name: str) -> Path:
    """A data path as given, else relative to the repository root (``data/...``).

    Raises
    ------
    MissingFileError
        Neither exists.
    """
    p = Path(path)
    if p.is_file():
        return p.resolve()
    if not p.is_absolute() and (_REPO / p).is_file():
        return (_REPO / p).resolve()
    raise MissingFileError(field_name, path)


@functools.lru_cache(maxsize=8)
def _cached_log(path: str, sha: str):
    """Outcome log, its :class:`envs.escalation.ReplayIndex` and per-(system, type) true
    rates, cached per process (keyed by path and content hash)."""
    from envs.escalation import ReplayIndex, load_outcomes

    frame = load_outcomes(path)
    rates = frame.group_by("system", "task_type").agg(pl.col("success").mean())
    rate = {(s, t): float(r) for s, t, r in rates.iter_rows()}
    return frame, ReplayIndex(frame), rate


def _load_dates(path: str | None) -> dict | None:
    if not path:
        return None
    frame = pl.read_csv(path, infer_schema_length=0)
    if "system" not in frame.columns or "date" not in frame.columns:
        raise ConfigError("systems_file", path, "needs columns 'system' and 'date'")
    return dict(zip(frame.get_column("system").to_list(), frame.get_column("date").to_list()))


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _crc(*parts) -> int:
    return zlib.crc32("\x1f".join(str(p) for p in parts).encode())


# =========================================================================== the job

def checkpoints_for(T: int, n: int) -> np.ndarray:
    """Checkpoint steps in 1..T: ``n`` log-spaced and ``n`` evenly spaced ones (unique,
    increasing, T included), so curves read well on log and on linear axes."""
    ck = np.unique(np.r_[np.round(np.geomspace(1, T, n)), np.round(np.linspace(1, T, n))]
                   .astype(np.int64))
    return ck[(ck >= 1) & (ck <= T)]


def _stream(payload: dict, run: int) -> dict:
    """The stream of one run (same for every policy and feedback mode)."""
    from envs.escalation import synthetic_stream

    rng = np.random.default_rng([payload["seed"], payload["stream_key"], run])
    if payload["source"] == "synthetic":
        prm = payload["params"]
        s = synthetic_stream(rng=rng, n_steps=prm["steps"],
                             **{k: v for k, v in prm.items() if k != "steps"})
        s["rates_tk"] = s["rates"]
        s["c_act"] = None
        return s
    _, index, rate = _cached_log(payload["data"], payload["data_sha"])
    names = index.type_names
    if payload["system"] == "all_by_date":
        s = index.date_order(rng, order=payload["order"], dates=payload["dates"])
    else:
        s = index.stream(payload["system"], rng, order=payload["order"])
    systems = s["system"]
    s["p"] = np.array([rate[(sy, names[k])] for sy, k in zip(systems, s["types"])])
    # true rate of every type at every step: the current system's rate (NaN if absent)
    sys_rates = {}
    rt = np.empty((len(systems), len(names)))
    for t, sy in enumerate(systems):
        if sy not in sys_rates:
            sys_rates[sy] = np.array([rate.get((sy, n), np.nan) for n in names])
        rt[t] = sys_rates[sy]
    s["rates_tk"] = rt
    s["verified"] = np.ones(len(systems), dtype=bool)
    s["change_at"] = s.get("change_at", [])
    c = payload["costs"]
    s["c_act"] = s["cost_usd"] * c["act_cost_scale"] if c["act_cost"] == "cost_usd" else None
    return s


def run_job(job: Job) -> dict:
    """Run one (variant, risk class) group at one (stream, feedback) point for a block of
    runs; top-level so process pools and Ray can pickle it.

    Returns
    -------
    dict
        Arrays with a leading run axis ``R = len(job.run_indices)`` (see
        :meth:`EscalationKind.build_tables` for the columns), ``agreement_sum`` of shape
        (T,) int64 summed over the block's runs, and ``competence`` (run 0 only).
    """
    from dyna.competence import prior_shapes
    from dyna.escalation import run_policies

    p = job.payload
    policy = p["policy"]
    R = len(job.run_indices)
    streams = [_stream(p, r) for r in job.run_indices]
    T = len(streams[0]["types"])
    K = p["n_types"]
    types = np.stack([s["types"] for s in streams])
    outcomes = np.stack([s["outcomes"] for s in streams])
    verified = np.stack([s["verified"] for s in streams])
    p_true = np.stack([s["p"] for s in streams])
    c_e, c_f, c_a = p["c_escalate"], p["c_failure"], p["c_act"]
    if streams[0]["c_act"] is not None:
        c_a = np.stack([s["c_act"] for s in streams])
    u = None
    if policy.randomised:
        u = np.stack([np.random.default_rng([p["seed"], p["stream_key"], r, 1]).random((T, 2))
                      for r in job.run_indices])
    ck = checkpoints_for(T, p["checkpoints"])
    res = run_policies([policy], np.zeros(R, dtype=np.int64), types, outcomes, n_types=K,
                       c_escalate=c_e, c_failure=c_f, c_act=c_a, verified=verified,
                       requires_provenance=p["requires_provenance"],
                       prior=prior_shapes(p["prior"]), discount=p["discount"],
                       discount_clock=p["discount_clock"], feedback=p["feedback"], u=u,
                       checkpoints=ck)
    act, cost = res["act"], res["cost"]
    c_a_arr = np.broadcast_to(np.asarray(c_a, dtype=np.float64)
                              if np.ndim(c_a) == 2 else np.float64(c_a), (R, T))
    o_act = oracle_actions(p_true, c_e, c_f, c_a_arr)
    o_cost = np.where(o_act, c_a_arr + np.where(outcomes, 0.0, c_f), c_e)
    task_cost = np.where(outcomes, np.minimum(c_e, c_a_arr), np.minimum(c_e, c_a_arr + c_f))
    gap = np.abs(c_a_arr + (1.0 - p_true) * c_f - c_e)
    pseudo = np.where(act != o_act, gap, 0.0)
    fail = act & ~outcomes
    idx = ck - 1
    cum = lambda x: np.cumsum(x, axis=1)[:, idx]  # noqa: E731
    losses = (~outcomes).astype(np.float64)
    grid = np.linspace(1.0 / p["coverage_points"], 1.0, p["coverage_points"])
    rc_rows, aurc_v, aurc_opt = [], [], []
    for i in range(R):
        cov, risk = risk_coverage(res["score"][i], losses[i])
        rc_rows.append(risk[np.ceil(grid * T).astype(np.int64) - 1])
        aurc_v.append(float(risk.mean()))
        aurc_opt.append(optimal_aurc(losses[i]))
    a_ck, b_ck = res["a_ck"], res["b_ck"]  # (C, R, K)
    mean_ck = a_ck / (a_ck + b_ck)
    rates_ck = np.stack([s["rates_tk"][idx] for s in streams], axis=1)  # (C, R, K)
    err = np.abs(mean_ck - rates_ck)
    abs_err = np.nanmean(err, axis=2).T  # (R, C)
    out = {
        "steps": np.full(R, T, dtype=np.int64),
        "total_cost": cost.sum(axis=1),
        "oracle_type_cost": o_cost.sum(axis=1),
        "oracle_task_cost": task_cost.sum(axis=1),
        "pseudo_regret": pseudo.sum(axis=1),
        "escalations": (~act).sum(axis=1).astype(np.int64),
        "failures": fail.sum(axis=1).astype(np.int64),
        "agent_failures": (~outcomes).sum(axis=1).astype(np.int64),
        "evidence": (a_ck[-1] + b_ck[-1]).sum(axis=1) - K * sum(prior_shapes(p["prior"])),
        "agreement": (act == o_act).mean(axis=1),
        "aurc": np.asarray(aurc_v), "aurc_optimal": np.asarray(aurc_opt),
        "final_abs_error": abs_err[:, -1],
        "checkpoints": ck,
        "cum_cost": cum(cost), "cum_regret_type": cum(cost - o_cost),
        "cum_regret_task": cum(cost - task_cost), "cum_pseudo_regret": cum(pseudo),
        "cum_escalations": cum((~act).astype(np.float64)), "abs_error": abs_err,
        "coverage": grid, "risk": np.asarray(rc_rows),
        "agreement_sum": (act == o_act).sum(axis=0).astype(np.int64),
        "change_at": np.asarray(streams[0].get("change_at", []) or
                                p["params"].get("change_at", []), dtype=np.int64),
    }
    if 0 in job.run_indices and p["store_competence"]:
        i = job.run_indices.index(0)
        out["competence"] = {"a": a_ck[:, i], "b": b_ck[:, i], "rate": rates_ck[:, i]}
    return out


# =========================================================================== the kind

def _points(config: EscalationConfig, prepared_systems: dict) -> list[dict]:
    """(scenario, system, feedback) points in canonical order."""
    pts = []
    for sc in config.scenarios:
        systems = prepared_systems.get(sc.name, [""])
        for system in systems:
            for fb in config.feedback:
                pts.append({"scenario": sc.name, "system": system, "feedback": fb})
    return pts


class EscalationKind(ExperimentKind):
    """Kind ``escalation``: every policy x risk class on every stream x feedback mode."""

    name = "escalation"
    progress_unit = "run"

    def parse(self, data, *, runs=None, seed=None):
        return parse_escalation(data, runs=runs, seed=seed)

    def prepare(self, config: EscalationConfig) -> Prepared:
        """Load and check every outcome log and system name before anything is written."""
        from envs.escalation import system_dates

        systems, data_info, sc_info = {}, {}, {}
        for sc in config.scenarios:
            if sc.source == "synthetic":
                sc_info[sc.name] = {"n_types": len(sc.params["rates"]),
                                    "type_names": [f"type{i}" for i in
                                                   range(len(sc.params["rates"]))]}
                continue
            field = f"scenarios.{sc.name}.data"
            path = resolve_data_path(sc.params["data"], field)
            sha = _file_sha(path)
            try:
                frame, _, _ = _cached_log(str(path), sha)
            except ConfigError as exc:
                raise ConfigError(field, exc.value, exc.reason) from None
            known = sorted(set(frame.get_column("system").to_list()))
            chosen = sc.params["systems"]
            dates = None
            if "systems_file" in sc.params:
                sf = resolve_data_path(sc.params["systems_file"],
                                       f"scenarios.{sc.name}.systems_file")
                try:
                    dates = _load_dates(str(sf))
                except ConfigError as exc:
                    raise ConfigError(f"scenarios.{sc.name}.systems_file", str(sf),
                                      exc.reason) from None
            if chosen == "all":
                chosen = known
            elif chosen == "all_by_date":
                try:
                    system_dates(frame, dates)
                except ConfigError as exc:
                    raise ConfigError(f"scenarios.{sc.name}.systems", exc.value,
                                      exc.reason) from None
                chosen = ["all_by_date"]
            else:
                for j, s in enumerate(chosen):
                    if s not in known:
                        shown = ", ".join(known[:3]) + (", ..." if len(known) > 3 else "")
                        raise ConfigError(f"scenarios.{sc.name}.systems[{j}]", s,
                                          f"unknown system (not in {path.name}: {shown})")
                chosen = list(chosen)
            systems[sc.name] = chosen
            names = sorted(set(frame.get_column("task_type").to_list()))
            sc_info[sc.name] = {"n_types": len(names), "type_names": names,
                                "data": str(path), "data_sha": sha, "dates": dates}
            data_info[sc.name] = {"path": str(path), "sha256": sha, "rows": frame.height,
                                  "systems": len(known), "task_types": len(names)}
        points = _points(config, systems)
        manifest = {"points": points, "data": data_info,
                    "scenario_types": {k: v["type_names"] for k, v in sc_info.items()},
                    "risk_class_costs": {rc: dict(zip(("c_escalate", "c_failure", "c_act"),
                                                      class_costs(config.costs, rc)))
                                         for rc in config.risk_classes}}
        return Prepared(manifest=manifest, state={"points": points, "sc": sc_info})

    def n_groups(self, config) -> int:
        return len(config.groups()) * max(1, len(config.scenarios) * len(config.feedback))

    def plan_jobs(self, config, prepared, *, block_size):
        from dyna.escalation import RISK_CLASSES

        points, sc_info = prepared.state["points"], prepared.state["sc"]
        scen = {s.name: s for s in config.scenarios}
        jobs = []
        for g, (variant, rc) in enumerate(config.groups()):
            policy = build_policy(config, variant, rc)
            c_e, c_f, c_a = class_costs(config.costs, rc)
            for pi, pt in enumerate(points):
                sc = scen[pt["scenario"]]
                info = sc_info[sc.name]
                payload = {
                    "variant_name": f"{variant.name}/{rc}",
                    "point_kwargs": {k: v for k, v in pt.items() if v},
                    "policy": policy, "prior": variant.prior, "discount": variant.discount,
                    "discount_clock": variant.discount_clock,
                    "requires_provenance": RISK_CLASSES[rc].requires_provenance,
                    "c_escalate": c_e, "c_failure": c_f, "c_act": c_a,
                    "costs": dict(config.costs), "feedback": pt["feedback"],
                    "seed": config.seed, "stream_key": _crc(sc.name, pt["system"]),
                    "source": sc.source, "params": dict(sc.params),
                    "system": pt["system"], "order": sc.params.get("order", "random"),
                    "data": info.get("data"), "data_sha": info.get("data_sha"),
                    "dates": info.get("dates"), "type_names": info["type_names"],
                    "n_types": info["n_types"], "checkpoints": config.analysis.checkpoints,
                    "coverage_points": config.analysis.coverage_points,
                    "store_competence": variant.name in config.analysis.competence_variant,
                }
                for block in split_runs(config.runs, block_size):
                    jobs.append(Job(variant=g, point=pi, run_indices=block, payload=payload))
        return jobs

    @property
    def job_function(self):
        return run_job

    def build_tables(self, config, prepared, jobs, results):
        return build_tables(config, prepared.state["points"], prepared.state["sc"], jobs,
                            results)

    def draw_plots(self, out, folder):
        from dyna.experiment import escalation_report

        return escalation_report.draw_plots(out, Path(folder))

    def write_report(self, out, folder):
        from dyna.experiment import escalation_report

        return escalation_report.write_report(out, Path(folder))

    def required_tables(self):
        return ("runs", "curves")


def build_tables(config: EscalationConfig, points: list[dict], sc_info: dict, jobs,
                 results) -> dict[str, pl.DataFrame]:
    """Tidy tables from the job results (canonical order).

    Returns
    -------
    dict of polars.DataFrame
        ``runs``: variant, rule, risk_class, scenario, system, feedback, run, steps,
        total_cost, oracle_type_cost, oracle_task_cost, regret_type, regret_task,
        pseudo_regret, escalation_rate, failure_rate, agent_failure_rate, evidence,
        agreement, aurc, aurc_optimal, e_aurc, final_abs_error. Costs are totals over the
        run's ``steps`` tasks; rates are per task (``failure_rate``: failed attempts,
        ``agent_failure_rate``: tasks the agent would fail); ``evidence`` is the counted
        evidence at the end, summed over types (decayed for discounted variants);
        ``agreement`` the fraction of tasks where the action equals the type oracle's;
        ``final_abs_error`` the mean over types of |posterior mean - true rate| at the end.
        ``curves``: ids + step, cum_cost, cum_regret_type, cum_regret_task,
        cum_pseudo_regret, cum_escalations, abs_error.
        ``risk_coverage``: ids + coverage, risk.
        ``agreement``: variant, risk_class, scenario, system, feedback, step, agreement
        (fraction of runs), only for streams with change points.
        ``competence``: variant, risk_class, scenario, system, feedback, step, task_type,
        a, b, mean, lower, upper (95% equal-tailed), rate (run 0 of the competence variant).
    """
    from dyna.competence import beta_interval

    groups = config.groups()
    runs_f, curves_f, rc_f, agree_f, comp_f = [], [], [], [], []
    slots: dict[tuple, list] = {}
    for job, res in zip(jobs, results):
        slots.setdefault((job.variant, job.point), []).append((job, res))
    for (g, pi), parts in slots.items():
        variant, rc = groups[g]
        pt = points[pi]
        ids = {"variant": variant.name, "rule": variant.rule, "risk_class": rc,
               "scenario": pt["scenario"], "system": pt["system"],
               "feedback": pt["feedback"]}

        def cat(name):
            return np.concatenate([r[name] for _, r in parts], axis=0)

        run_idx = np.concatenate([np.asarray(j.run_indices, dtype=np.int64)
                                  for j, _ in parts])
        R = run_idx.size
        steps = cat("steps").astype(np.float64)
        idcols = {k: pl.Series(k, [v] * R, dtype=pl.String) for k, v in ids.items()}
        runs_f.append(pl.DataFrame({
            **idcols, "run": run_idx, "steps": cat("steps"),
            "total_cost": cat("total_cost"), "oracle_type_cost": cat("oracle_type_cost"),
            "oracle_task_cost": cat("oracle_task_cost"),
            "regret_type": cat("total_cost") - cat("oracle_type_cost"),
            "regret_task": cat("total_cost") - cat("oracle_task_cost"),
            "pseudo_regret": cat("pseudo_regret"),
            "escalation_rate": cat("escalations") / steps,
            "failure_rate": cat("failures") / steps,
            "agent_failure_rate": cat("agent_failures") / steps,
            "evidence": cat("evidence"), "agreement": cat("agreement"),
            "aurc": cat("aurc"), "aurc_optimal": cat("aurc_optimal"),
            "e_aurc": cat("aurc") - cat("aurc_optimal"),
            "final_abs_error": cat("final_abs_error"),
        }))
        ck = parts[0][1]["checkpoints"]
        C = ck.size
        cid = {k: pl.Series(k, [v] * (R * C), dtype=pl.String) for k, v in ids.items()}
        curves_f.append(pl.DataFrame({
            **cid, "run": np.repeat(run_idx, C), "step": np.tile(ck, R),
            **{name: cat(name).ravel() for name in
               ("cum_cost", "cum_regret_type", "cum_regret_task", "cum_pseudo_regret",
                "cum_escalations", "abs_error")}}))
        grid = parts[0][1]["coverage"]
        Gn = grid.size
        gid = {k: pl.Series(k, [v] * (R * Gn), dtype=pl.String) for k, v in ids.items()}
        rc_f.append(pl.DataFrame({**gid, "run": np.repeat(run_idx, Gn),
                                  "coverage": np.tile(grid, R), "risk": cat("risk").ravel()}))
        change = parts[0][1]["change_at"]
        if change.size:
            total = np.sum([r["agreement_sum"] for _, r in parts], axis=0)
            T = total.size
            aid = {k: pl.Series(k, [v] * T, dtype=pl.String) for k, v in ids.items()
                   if k != "rule"}
            agree_f.append(pl.DataFrame({**aid, "step": np.arange(1, T + 1, dtype=np.int64),
                                         "agreement": total / config.runs}))
        comp = next((r["competence"] for _, r in parts if "competence" in r), None)
        if comp is not None:
            names = sc_info[pt["scenario"]]["type_names"]
            K = len(names)
            a, b = comp["a"].ravel(), comp["b"].ravel()
            lo, hi = beta_interval(a, b, 0.95)
            n = C * K
            kid = {k: pl.Series(k, [v] * n, dtype=pl.String) for k, v in ids.items()
                   if k != "rule"}
            comp_f.append(pl.DataFrame({
                **kid, "step": np.repeat(ck, K), "task_type": np.tile(names, C),
                "a": a, "b": b, "mean": a / (a + b), "lower": lo, "upper": hi,
                "rate": comp["rate"].ravel()}))
    tables = {"runs": pl.concat(runs_f), "curves": pl.concat(curves_f),
              "risk_coverage": pl.concat(rc_f)}
    if agree_f:
        tables["agreement"] = pl.concat(agree_f)
    if comp_f:
        tables["competence"] = pl.concat(comp_f)
    return tables


#: The ``escalation`` kind registered in :data:`dyna.experiment.kinds.KINDS`.
KIND = EscalationKind()
