"""Kind ``agent_tasks``: the manipulation checks of a calibrated experiment, and what its
calibration reads from the tables.

A file with ``[calibration]`` (:mod:`dyna.experiment.calibration`) declares ``[[checks]]``
(:func:`parse_checks`): each a *measure*, one number per run of one variant in one scenario,
whose mean over the runs must lie between ``min`` and ``max``. The measures
(:data:`MEASURES`), from the ``runs`` and ``episodes`` tables:

* any column of the ``runs`` table a hypothesis may test
  (:data:`~dyna.experiment.kinds.agent_tasks.metrics.HYPOTHESIS_METRICS`, e.g.
  ``late_success``);
* ``differs`` (``versus``: a variant, and/or ``versus_scenario``): 1 if the run's episodes
  differ in any outcome column (:data:`OUTCOME_COLUMNS`) between (variant, scenario) and
  (``versus`` or the variant, ``versus_scenario`` or the scenario), else 0. A switch can act
  and change nothing, so this, not a safeguard's ``acted_`` count, says that it matters;
* ``coverage_at`` (``episode``, 1-based): the run's ``head_coverage`` at that episode;
* ``drift_met`` (``min_arrivals``, default 100): 1 if the run's first drift episode has
  ``drift_covered`` and the drifted family (its ``drift_family``) arrives at least
  ``min_arrivals`` times from the drift on;
* ``poisoned_followed``, ``harmful_proposed``: 1 if the run's ``poisoned_follows`` (or
  ``harmful_proposed``) total is above 0;
* ``library_exceeds`` (``cap``): 1 if the run's largest ``library_size`` exceeds ``cap``.

A run without the columns a measure reads has no value (a check with no value fails).
:func:`check_results` summarises every check (:func:`dyna.experiment.calibration_stats.
summarise_check`: Wilson intervals for the 0/1 measures, percentile bootstrap otherwise).

For the pilot and the report: :func:`pilot_pairs` (what a pilot runs),
:func:`hypothesis_differences` and :func:`sizing_contrasts` (a hypothesis's per-run paired
differences, for the sizing and the equivalence test), and :func:`calibrated_hypotheses`
(the verdicts with the checks and the equivalence test).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from dyna.errors import ConfigError, check_range
from dyna.experiment.calibration_stats import (Contrast, calibrated_verdict,
                                               summarise_check)

__all__ = ["Check", "MEASURES", "OUTCOME_COLUMNS", "calibrated_hypotheses",
           "check_results", "hypothesis_differences", "parse_calibrated", "parse_checks",
           "per_run_values", "pilot_pairs", "sizing_contrasts"]

#: Episode columns whose difference between two groups makes ``differs`` 1.
OUTCOME_COLUMNS = ("success", "steps", "tokens", "incident", "library_size",
                   "context_entries")

#: Measures read from the episodes table: name -> (the parameters it takes, whether its
#: per-run value is 0 or 1). Every runs-table column of HYPOTHESIS_METRICS is a measure too
#: (no parameter, not 0/1).
MEASURES = {
    "differs": (("versus", "versus_scenario"), True),
    "coverage_at": (("episode",), False),
    "drift_met": (("min_arrivals",), True),
    "poisoned_followed": ((), True),
    "harmful_proposed": ((), True),
    "library_exceeds": (("cap",), True),
}

_PARAMS = ("versus", "versus_scenario", "episode", "cap", "min_arrivals")
_KEYS = ("name", "scenario", "variant", "measure", "min", "max") + _PARAMS
#: Arrivals of the drifted family ``drift_met`` asks for unless told.
MIN_ARRIVALS = 100


@dataclass(frozen=True)
class Check:
    """A manipulation check, validated (the module docstring lists the measures).

    Attributes
    ----------
    name, scenario, variant, measure : str
    minimum, maximum : float or None
        It passes when ``minimum <= mean over runs <= maximum`` (a bound may be absent).
    versus, versus_scenario : str or None
        ``differs``: the group compared with.
    episode : int or None
        ``coverage_at``: 1-based episode.
    cap : int or None
        ``library_exceeds``: the library size to exceed.
    min_arrivals : int or None
        ``drift_met``: arrivals of the drifted family from the drift on.
    """

    name: str
    scenario: str
    variant: str
    measure: str
    minimum: float | None = None
    maximum: float | None = None
    versus: str | None = None
    versus_scenario: str | None = None
    episode: int | None = None
    cap: int | None = None
    min_arrivals: int | None = None

    @property
    def binary(self) -> bool:
        """Whether the per-run value is 0 or 1."""
        return MEASURES.get(self.measure, ((), False))[1]

    def pairs(self) -> list[tuple[str, str]]:
        """The ``(variant, scenario)`` groups it reads."""
        out = [(self.variant, self.scenario)]
        if self.measure == "differs":
            out.append((self.versus or self.variant, self.versus_scenario or self.scenario))
        return out

    def to_dict(self) -> dict:
        """The TOML form."""
        out = {"name": self.name, "scenario": self.scenario, "variant": self.variant,
               "measure": self.measure}
        if self.minimum is not None:
            out["min"] = self.minimum
        if self.maximum is not None:
            out["max"] = self.maximum
        out.update({k: getattr(self, k) for k in _PARAMS if getattr(self, k) is not None})
        return out


def _one_of(value, allowed, field: str, what: str) -> str:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), list(allowed), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else \
            f"; expected one of {', '.join(allowed)}"
        raise ConfigError(field, value, f"unknown {what}{hint}")
    return value


def _measures() -> tuple:
    from dyna.experiment.kinds.agent_tasks.metrics import HYPOTHESIS_METRICS

    return tuple(MEASURES) + tuple(HYPOTHESIS_METRICS)


def parse_checks(raw, variants: tuple, scenarios: tuple, episodes: int) -> tuple:
    """Validate ``[[checks]]``.

    Parameters
    ----------
    raw : list of dict or None
    variants, scenarios : tuple of str
        The file's variant names and scenario names (sweep points included).
    episodes : int
        Episodes per run (the bound of ``coverage_at``'s ``episode``).

    Returns
    -------
    tuple of Check

    Raises
    ------
    ConfigError
        Naming the field (``checks[2].variant``, ...) and the value: an unknown key,
        variant, scenario or measure; a measure missing its parameter or given one it does
        not take; no threshold, or ``min`` above ``max``; a duplicate name.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise ConfigError("checks", raw, "must be a non-empty array of tables ([[checks]])")
    out, seen = [], set()
    for i, c in enumerate(raw):
        where = f"checks[{i}]"
        _check_table(c, where)
        name = c["name"]
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}.name", name, "must be a non-empty string")
        if name in seen:
            raise ConfigError(f"{where}.name", name, "duplicate check name")
        seen.add(name)
        _one_of(c["scenario"], scenarios, f"{where}.scenario", "scenario")
        _one_of(c["variant"], variants, f"{where}.variant", "variant")
        measure = _one_of(c["measure"], _measures(), f"{where}.measure", "measure")
        takes = MEASURES.get(measure, ((), False))[0]
        for key in _PARAMS:
            if key in c and key not in takes:
                users = [m for m, (p, _) in MEASURES.items() if key in p]
                raise ConfigError(f"{where}.{key}", c[key],
                                  f"only for the measure {' or '.join(users)}")
        params = _parameters(c, measure, where, variants, scenarios, episodes)
        bounds = {}
        for key in ("min", "max"):
            if key in c:
                bounds[key] = float(check_range(f"{where}.{key}", c[key], -math.inf, math.inf,
                                                lo_open=True, hi_open=True))
        if not bounds:
            raise ConfigError(f"{where}.min", None, "a check needs min, max or both (a check "
                              "without a threshold cannot fail)")
        if len(bounds) == 2 and bounds["min"] > bounds["max"]:
            raise ConfigError(f"{where}.max", c["max"], f"is below min ({c['min']})")
        out.append(Check(name, c["scenario"], c["variant"], measure, bounds.get("min"),
                         bounds.get("max"), **params))
    return tuple(out)


def _check_table(c, where: str) -> None:
    """``c`` is a table with only the keys of a check, and those it needs."""
    from dyna.experiment.config import check_keys

    if not isinstance(c, dict):
        raise ConfigError(where, c, "must be a table")
    check_keys(c, _KEYS, f"{where}.")
    missing = [k for k in ("name", "scenario", "variant", "measure") if k not in c]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}", None, "missing")


def _parameters(c: dict, measure: str, where: str, variants, scenarios, episodes) -> dict:
    """The measure's parameters of check table ``c``, validated."""
    if measure == "differs":
        if "versus" not in c and "versus_scenario" not in c:
            raise ConfigError(f"{where}.versus", None, "differs needs versus (a variant), "
                              "versus_scenario, or both")
        versus = c.get("versus")
        other = c.get("versus_scenario")
        if versus is not None:
            _one_of(versus, variants, f"{where}.versus", "variant")
        if other is not None:
            _one_of(other, scenarios, f"{where}.versus_scenario", "scenario")
        if (versus or c["variant"], other or c["scenario"]) == (c["variant"], c["scenario"]):
            raise ConfigError(f"{where}.versus", versus, "compares a group with itself")
        return {"versus": versus, "versus_scenario": other}
    if measure == "coverage_at":
        if "episode" not in c:
            raise ConfigError(f"{where}.episode", None, "coverage_at needs episode (1-based)")
        return {"episode": check_range(f"{where}.episode", c["episode"], 1, episodes,
                                       integer=True)}
    if measure == "library_exceeds":
        if "cap" not in c:
            raise ConfigError(f"{where}.cap", None, "library_exceeds needs cap")
        return {"cap": check_range(f"{where}.cap", c["cap"], 0, None, integer=True)}
    if measure == "drift_met":
        return {"min_arrivals": check_range(f"{where}.min_arrivals",
                                            c.get("min_arrivals", MIN_ARRIVALS), 1, None,
                                            integer=True)}
    return {}


def parse_calibrated(data: dict, variants: tuple, scenarios: tuple, episodes: int,
                     hypotheses: tuple):
    """The ``[calibration]`` table and ``[[checks]]`` of an experiment file, validated
    together with what the hypotheses say about them.

    Returns
    -------
    (Calibration or None, tuple of Check)

    Raises
    ------
    ConfigError
        As :func:`dyna.experiment.calibration.parse_calibration` and :func:`parse_checks`;
        also ``[[checks]]`` or a hypothesis's ``smallest_effect`` or ``checks`` in a file
        without ``[calibration]``; a file with it but no checks; a hypothesis in it without
        ``smallest_effect``; a ``required`` or hypothesis check name that is not a check.
    """
    from dyna.experiment.calibration import parse_calibration

    checks = parse_checks(data.get("checks"), variants, scenarios, episodes)
    if "calibration" not in data:
        if checks:
            raise ConfigError("checks", checks[0].name, "only in a file with [calibration]")
        for i, h in enumerate(hypotheses):
            for key, value in (("smallest_effect", h.smallest_effect), ("checks", h.checks)):
                if value:
                    raise ConfigError(f"hypotheses[{i}].{key}", value,
                                      "only in a file with [calibration]")
        return None, ()
    calibration = parse_calibration(data["calibration"])
    if not checks:
        raise ConfigError("checks", None, "a file with [calibration] declares its "
                          "manipulation checks ([[checks]])")
    names = tuple(c.name for c in checks)
    for j, n in enumerate(calibration.required):
        _one_of(n, names, f"calibration.required[{j}]", "check")
    for i, h in enumerate(hypotheses):
        if h.smallest_effect is None:
            raise ConfigError(f"hypotheses[{i}].smallest_effect", None, "missing: a file with "
                              "[calibration] declares each hypothesis's smallest effect of "
                              "interest (> 0, in the metric's units)")
        for j, n in enumerate(h.checks):
            _one_of(n, names, f"hypotheses[{i}].checks[{j}]", "check")
    _refuse_arm_reads(checks, hypotheses)
    return calibration, checks


def _refuse_arm_reads(checks, hypotheses) -> None:
    """Checks may not read both arms of a hypothesis on its own metric in one of its
    scenarios: they would print, on the pilot seeds, the contrast the hypothesis is about
    (the pilot writes no hypothesis contrast). One arm alone (a base rate) is a check.

    Raises
    ------
    ConfigError
        ``checks[k].measure`` of the check that reads the second arm, naming the
        hypothesis.
    """
    read: dict = {}   # (scenario, variant, metric) -> index of the first check reading it
    for k, c in enumerate(checks):
        if c.measure not in MEASURES:
            read.setdefault((c.scenario, c.variant, c.measure), k)
    for h in hypotheses:
        for v, w, metric, _ in h.components():
            for sc in {s for s, _, _ in read}:
                in_scope = (sc == h.scenario if h.test != "slope"
                            else sc.startswith(f"{h.sweep}-"))
                if in_scope and (sc, v, metric) in read and (sc, w, metric) in read:
                    k = max(read[sc, v, metric], read[sc, w, metric])
                    raise ConfigError(f"checks[{k}].measure", checks[k].measure,
                                      f"with another check it reads both arms of hypothesis "
                                      f"{h.name!r} ({v} and {w}, {metric} in {sc}): the "
                                      "pilot would show its contrast")


# ============================================================================ measures

def _group(episodes: pl.DataFrame, variant: str, scenario: str, columns) -> dict | None:
    """The group's episode columns, each shape ``(runs, episodes)`` ordered by run and
    episode; None when a column is missing. A group with no rows has 0 runs."""
    if any(c not in episodes.columns for c in columns):
        return None
    sel = episodes.filter((pl.col("variant") == variant) & (pl.col("scenario") == scenario))
    sel = sel.sort(["run", "episode"])
    runs = sel["run"].n_unique()
    shape = (runs, sel.height // runs if runs else 0)
    return {c: sel[c].to_numpy().reshape(shape) for c in columns}


def _drift_met(family: np.ndarray, drift_family: np.ndarray, covered: np.ndarray,
               min_arrivals: int) -> float:
    """1.0 if the first drift episode is covered and its family arrives at least
    ``min_arrivals`` times from it on (the drift episode included), else 0.0."""
    drifts = np.flatnonzero(drift_family >= 0)
    if not drifts.size:
        return 0.0
    d = drifts[0]
    arrivals = int(np.count_nonzero(family[d:] == drift_family[d]))
    return float(bool(covered[d]) and arrivals >= min_arrivals)


def per_run_values(check: Check, tables: dict) -> np.ndarray:
    """The check's measure, one value per run (float64, ordered by run; empty when the
    group has no runs; NaN in every run when a column it reads is missing).

    Raises
    ------
    ValueError
        ``differs`` between groups of different shapes (runs x episodes).
    """
    from dyna.experiment.kinds.agent_tasks.analysis import values

    m = check.measure
    if m not in MEASURES:
        return values(tables["runs"], check.scenario, check.variant, m)
    ep = tables["episodes"]
    reads = {"differs": OUTCOME_COLUMNS, "coverage_at": ("head_coverage",),
             "drift_met": ("family", "drift_family", "drift_covered"),
             "poisoned_followed": ("poisoned_follows",),
             "harmful_proposed": ("harmful_proposed",),
             "library_exceeds": ("library_size",)}[m]
    g = _group(ep, check.variant, check.scenario, reads)
    if g is None:
        n = ep.filter((pl.col("variant") == check.variant)
                      & (pl.col("scenario") == check.scenario))["run"].n_unique()
        return np.full(n, np.nan)
    if m == "differs":
        versus, other = check.pairs()[1]
        h = _group(ep, versus, other, reads)
        if h["success"].shape != g["success"].shape:
            raise ValueError(f"check {check.name!r}: {check.pairs()[0]} has shape "
                             f"{g['success'].shape}, {(versus, other)} {h['success'].shape}")
        changed = [np.any(g[c] != h[c], axis=1) for c in reads]
        return np.any(np.stack(changed), axis=0).astype(np.float64)
    if m == "coverage_at":
        return g["head_coverage"][:, check.episode - 1].astype(np.float64)
    if m == "drift_met":
        return np.array([_drift_met(g["family"][r], g["drift_family"][r],
                                    g["drift_covered"][r], check.min_arrivals)
                         for r in range(g["family"].shape[0])], dtype=np.float64)
    if m == "library_exceeds":
        return (g["library_size"].max(axis=1) > check.cap).astype(np.float64)
    return (g[reads[0]].sum(axis=1) > 0).astype(np.float64)


def check_results(cfg, tables: dict) -> list:
    """Every check of the config measured on ``tables`` (``runs`` and ``episodes``), with
    ``analysis.confidence`` intervals (``analysis.n_resamples`` bootstrap resamples seeded
    with the config's seed).

    Returns
    -------
    list of dyna.experiment.calibration_stats.CheckResult
        In file order.
    """
    a = cfg.analysis
    return [summarise_check(c.name, per_run_values(c, tables), binary=c.binary,
                            minimum=c.minimum, maximum=c.maximum,
                            confidence=float(a["confidence"]),
                            n_resamples=int(a["n_resamples"]), seed=cfg.seed)
            for c in cfg.checks]


# ============================================================================ hypotheses

def pilot_pairs(cfg) -> set[tuple[int, int]]:
    """``(variant index, scenario index)`` of every group the checks and hypotheses read
    (a slope hypothesis reads every point of its sweep)."""
    scen = {name: p for p, (name, _) in enumerate(cfg.scenarios)}
    var = {name: v for v, name in enumerate(cfg.variants)}
    sweeps = {sw.name: sw for sw in cfg.sweeps}
    wanted = [pair for c in cfg.checks for pair in c.pairs()]
    for h in cfg.hypotheses:
        points = ([sc for sc, _ in sweeps[h.sweep].points()] if h.test == "slope"
                  else [h.scenario])
        for v, w, _, _ in h.components():
            wanted += [(x, sc) for sc in points for x in (v, w)]
    return {(var[v], scen[s]) for v, s in wanted}


def hypothesis_differences(cfg, runs: pl.DataFrame, h) -> list[tuple[str, np.ndarray]]:
    """Per comparison of hypothesis ``h``: a label and the per-run paired differences
    ``variant - versus`` of its metric in its scenario, float64, runs with a missing value
    left out; for a slope hypothesis the per-run least-squares slope of the difference
    against the sweep's severity (:meth:`Sweep.severity`; exactly 0 for a run whose gap is
    the same at every point), as :func:`.analysis.compare_slope` tests it."""
    from dyna.experiment.kinds.agent_tasks.analysis import values

    out = []
    for v, w, met, _ in h.components():
        if h.test == "slope":
            sweep = next(sw for sw in cfg.sweeps if sw.name == h.sweep)
            pts = [sc for sc, _ in sweep.points()]
            d = np.stack([values(runs, sc, v, met) - values(runs, sc, w, met) for sc in pts],
                         axis=1)
            d = d[np.all(np.isfinite(d), axis=1)]
            xc = np.array(sweep.severity()) - np.mean(sweep.severity())
            flat = np.all(d == d[:, :1], axis=1)
            out.append((f"{v} - {w}, {met}, slope over {h.sweep}",
                        np.where(flat, 0.0, d @ xc / float(xc @ xc))))
        else:
            d = values(runs, h.scenario, v, met) - values(runs, h.scenario, w, met)
            out.append((f"{v} - {w}, {met} in {h.scenario}", d[np.isfinite(d)]))
    return out


def sizing_contrasts(cfg, tables: dict) -> tuple[list, float]:
    """The :class:`~dyna.experiment.calibration_stats.Contrast` of every comparison of
    every hypothesis, from a pilot's ``runs`` table, and the family's ``analysis.alpha``."""
    out = [Contrast(h.name, label, d, h.smallest_effect)
           for h in cfg.hypotheses
           for label, d in hypothesis_differences(cfg, tables["runs"], h)]
    return out, float(cfg.analysis["alpha"])


def calibrated_hypotheses(cfg, tables: dict, results: list, checked: list) -> list:
    """The kind's hypothesis results with the calibrated verdicts
    (:func:`dyna.experiment.calibration_stats.calibrated_verdict`).

    A hypothesis needs its own ``checks`` and the ``required`` ones (``checked``, the
    :func:`check_results` of the same tables): when one fails it is *not testable* (its
    p values stay as computed, and a note names the failing checks). Its equivalence test
    takes each one-sided test at the family's alpha over the number of hypotheses (as the
    sizing does: Bonferroni, conservative).

    Parameters
    ----------
    results : list of HypothesisResult
        :func:`.analysis.evaluate_hypotheses` of ``tables["runs"]``.
    """
    passed = {c.name: c.passed for c in checked}
    alpha = float(cfg.analysis["alpha"]) / max(1, len(cfg.hypotheses))
    out = []
    for r in results:
        h = r.hypothesis
        needs = dict.fromkeys((*cfg.calibration.required, *h.checks))
        failing = [n for n in needs if not passed[n]]
        diffs = [d for _, d in hypothesis_differences(cfg, tables["runs"], h)]
        verdict = calibrated_verdict(r.verdict, checks_pass=not failing, differences=diffs,
                                     smallest_effect=h.smallest_effect, alpha=alpha)
        notes = tuple(r.notes) + ((f"checks failing: {', '.join(failing)}",)
                                  if failing else ())
        out.append(dataclasses.replace(r, verdict=verdict, notes=notes))
    return out
