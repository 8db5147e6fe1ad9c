"""Kind ``agent_tasks``: the statistics of an ablation, from its ``runs`` table.

Every comparison is *paired by run index*: run ``r`` of every variant meets the same tasks
and draws the same random numbers (common random numbers), so the unit is the per-run
difference ``d_r = x_r - y_r``; runs where either value is NaN (e.g. no recovery measured)
are left out of that comparison and the number of pairs is reported.

* :func:`compare` -- one paired comparison: mean difference with a bootstrap interval, the
  sign-flip p-value (one-sided in a predicted direction, else two-sided), the standardised
  effect ``d_z = mean / sd``, the smallest difference the runs could detect, and whether it
  was testable at all: a comparison of a safeguard's ablation with the full loop in a
  scenario where the full loop's count for that safeguard is 0 in every run is *inert*
  (the two are the same runs; nothing to test), and one whose differences are all 0 is
  *no difference in any run* (a constant non-zero difference is tested: its sign-flip p
  is the smallest possible, 2^-n one-sided).
* :func:`evaluate_hypotheses` -- the declared primary hypotheses, each an
  intersection-union test over its comparisons, with Holm's correction over the family.
* :func:`exploratory_cells` -- the effect of removing each safeguard, per scenario and
  metric, with Benjamini-Hochberg control over every testable cell.
* :func:`aggregates` -- rliable-style aggregates over scenarios x runs.
* :func:`safeguard_activity` -- the counts table (what each safeguard did).

Nothing here draws or writes; :mod:`.report` renders it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from dyna.experiment.stats import (Interval, benjamini_hochberg, bootstrap_ci, holm,
                                   min_detectable_difference, performance_profile,
                                   probability_of_improvement, sign_flip_test, stratified_iqm)
from dyna.loops import LoopConfig

__all__ = ["Comparison", "Crossover", "HypothesisResult", "LoopCrossover", "compare_slope",
           "crossover_map", "MIN_RUNS_CLAIMS", "MIN_RUNS_NO_WARNING", "aggregates",
           "baseline_crossovers", "compare", "evaluate_hypotheses", "exploratory_cells",
           "inert_switches", "judge_differences", "restores_benefit", "safeguard_activity",
           "base_scenarios", "scenario_metrics"]

#: Below this many runs the report makes no significance claims: a sign-flip test over
#: n runs cannot go below 2^-n (1/16 for 4 runs), so nothing could pass a 0.05 level.
MIN_RUNS_CLAIMS = 5
#: Below this many runs the report carries a warning at the top.
MIN_RUNS_NO_WARNING = 10

#: Metrics of the exploratory "effect of removing each safeguard" tables.
EXPLORATORY_METRICS = ("final_success", "tokens_per_success", "incidents", "poisoned_final",
                       "stale_final", "recovery")


def values(runs: pl.DataFrame, scenario: str, variant: str, metric: str) -> np.ndarray:
    """One value per run index (float64, ordered by run), NaN where missing; empty when
    the table has no row of that scenario and variant.

    Raises
    ------
    polars.exceptions.ColumnNotFoundError
        ``metric`` is not a column of ``runs``.
    """
    sel = runs.filter((pl.col("scenario") == scenario) & (pl.col("variant") == variant))
    return sel.sort("run")[metric].cast(pl.Float64).to_numpy()


def ablated_switch(variant: str, store: str) -> str | None:
    """The safeguard a ``<store>_loop-no_<switch>`` variant switches off, else None."""
    head, _, switch = variant.partition("-no_")
    return switch if head == f"{store}_loop" and switch in LoopConfig.SWITCHES else None


def inert_switches(runs: pl.DataFrame, store: str) -> dict[str, set[str]]:
    """Per scenario, the safeguards the full loop never used (count 0 in every run)."""
    loop = f"{store}_loop"
    out: dict[str, set[str]] = {}
    full = runs.filter(pl.col("variant") == loop)
    for s in runs["scenario"].unique(maintain_order=True).to_list():
        sub = full.filter(pl.col("scenario") == s)
        if sub.is_empty():
            continue
        out[s] = {sw for sw in LoopConfig.SWITCHES
                  if f"acted_{sw}" in sub.columns and int(sub[f"acted_{sw}"].sum()) == 0}
    return out


@dataclass(frozen=True)
class Comparison:
    """One paired comparison ``variant - versus`` of ``metric`` in ``scenario``.

    Attributes
    ----------
    status : {"tested", "inert", "inert knob", "no difference", "too few pairs"}
        "inert": the safeguard compared never acted; "inert knob" (slope comparisons):
        the swept knob changed neither variant's value in any run.
    n : int
        Pairs (runs where both values exist).
    interval : Interval or None
        Mean paired difference with its bootstrap interval.
    p : float
        Sign-flip p-value (one-sided toward ``direction`` when given, else two-sided);
        1.0 when not tested.
    d_z : float
        Mean difference over the standard deviation of the differences (NaN if 0).
    mdd : float
        Smallest mean difference the runs could detect at ``alpha`` with 80% power.
    """

    scenario: str
    variant: str
    versus: str
    metric: str
    direction: str | None
    status: str
    n: int
    interval: Interval | None = None
    p: float = 1.0
    d_z: float = math.nan
    mdd: float = math.nan

    @property
    def tested(self) -> bool:
        return self.status == "tested"


def compare(runs: pl.DataFrame, scenario: str, variant: str, versus: str, metric: str, *,
            direction: str | None = None, store: str = "skill",
            inert: dict[str, set[str]] | None = None, alpha: float = 0.05,
            confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0) -> Comparison:
    """The paired comparison of two variants on one metric (module docstring).

    Parameters
    ----------
    runs : polars.DataFrame
        The runs table (``scenario, variant, run`` and the metric).
    direction : {"greater", "less"} or None
        Predicted sign of ``mean(variant - versus)``; None: two-sided.
    inert : dict, optional
        :func:`inert_switches` of the table (computed when not given).
    alpha : float
        Level of the smallest detectable difference (one-sided with a direction).

    Returns
    -------
    Comparison
    """
    inert = inert_switches(runs, store) if inert is None else inert
    sw = _ablated_pair(variant, versus, store)
    x, y = values(runs, scenario, variant, metric), values(runs, scenario, versus, metric)
    if not (x.size and y.size):   # a pair a scoped run left out: nothing to compare
        x = y = np.empty(0)
    if x.size != y.size:
        raise ValueError(f"{scenario}: {variant} has {x.size} runs, {versus} {y.size}")
    keep = np.isfinite(x) & np.isfinite(y)
    base = dict(scenario=scenario, variant=variant, versus=versus, metric=metric,
                direction=direction)
    return judge_differences(x[keep] - y[keep], base,
                             sw is not None and sw in inert.get(scenario, set()),
                             alpha=alpha, confidence=confidence, n_resamples=n_resamples,
                             seed=seed)


def _ablated_pair(variant: str, versus: str, store: str) -> str | None:
    """The safeguard a comparison of the full loop with one of its ablations is about."""
    loop = f"{store}_loop"
    return (ablated_switch(variant, store) if versus == loop else
            ablated_switch(versus, store) if variant == loop else None)


def judge_differences(d: np.ndarray, base: dict, inert: bool, *, alpha: float,
                      confidence: float, n_resamples: int, seed: int) -> Comparison:
    """A :class:`Comparison` of paired per-run values ``d`` (differences, or per-run
    slopes): inert, too few pairs, no difference in any run, or tested (bootstrap interval
    of the mean, sign-flip p toward ``base["direction"]``, d_z, smallest detectable).

    Parameters
    ----------
    d : numpy.ndarray, float64, shape (n,)
        One finite value per run.
    base : dict
        ``scenario, variant, versus, metric, direction`` of the :class:`Comparison`.
    inert : bool
        The comparison is of a safeguard that never acted: nothing is tested.
    """
    base = {**base, "n": int(d.size)}
    if inert:
        return Comparison(status="inert", **base)
    if d.size < 2:
        return Comparison(status="too few pairs", **base)
    iv = bootstrap_ci(d, confidence=confidence, n_resamples=n_resamples, seed=seed)
    if not np.any(d):
        return Comparison(status="no difference", interval=iv, **base)
    alt = base["direction"] or "two-sided"
    p = sign_flip_test(d, alternative=alt, seed=seed)
    sd = float(np.std(d, ddof=1))
    return Comparison(status="tested", interval=iv, p=p,
                      d_z=float(np.mean(d)) / sd if sd > 0 else math.nan,
                      mdd=min_detectable_difference(d, alpha=alpha, alternative=alt), **base)


def compare_slope(runs: pl.DataFrame, sweep, variant: str, versus: str, metric: str, *,
                  direction: str | None = None, store: str = "skill",
                  inert: dict[str, set[str]] | None = None, alpha: float = 0.05,
                  confidence: float = 0.95, n_resamples: int = 2000,
                  seed: int = 0) -> Comparison:
    """Whether the paired gap ``variant - versus`` grows with severity: per run ``r`` the
    least-squares slope ``b_r`` of ``d_r(s) = x_r(s) - y_r(s)`` against the severity ``s``
    (the sweep's values, negated for a grid that decreases as it grows more severe, such
    as a step slack; :meth:`Sweep.severity`; runs with a missing value at any point left
    out), then the sign-flip test of the ``b_r`` (one-sided toward ``direction``) and a
    bootstrap interval of their mean.

    The unit of the slope is the metric's unit per unit of the knob. The comparison is
    *inert* when the safeguard ablated is inert at every grid point, and *inert knob* when
    the knob did not act on the comparison: in every run both variants' values are the
    same at every grid point (with common random numbers a knob the variants never read
    gives exactly equal values). A run whose gap is the same at every point has slope
    exactly 0 (not the rounding residue of ``d @ xc``).

    Returns
    -------
    Comparison
        ``scenario`` is the sweep's name; ``interval`` the mean slope.
    """
    inert = inert_switches(runs, store) if inert is None else inert
    sw = _ablated_pair(variant, versus, store)
    pts = sweep.points()
    xs = np.array(sweep.severity())   # increasing with severity, whichever way the knob runs
    x = np.stack([values(runs, sc, variant, metric) for sc, _ in pts], axis=1)
    y = np.stack([values(runs, sc, versus, metric) for sc, _ in pts], axis=1)  # (runs, points)
    keep = np.all(np.isfinite(x) & np.isfinite(y), axis=1)
    x, y = x[keep], y[keep]
    d = x - y
    xc = xs - xs.mean()
    flat = np.all(d == d[:, :1], axis=1)                          # (runs,): gap constant
    slopes = np.where(flat, 0.0, d @ xc / float(xc @ xc))
    base = dict(scenario=sweep.name, variant=variant, versus=versus, metric=metric,
                direction=direction)
    all_inert = sw is not None and all(sw in inert.get(sc, set()) for sc, _ in pts)
    if not all_inert:
        if x.size and np.all(x == x[:, :1]) and np.all(y == y[:, :1]):
            return Comparison(status="inert knob", n=int(x.shape[0]), **base)
    return judge_differences(slopes, base, all_inert, alpha=alpha, confidence=confidence,
                             n_resamples=n_resamples, seed=seed)


@dataclass(frozen=True)
class HypothesisResult:
    """A declared hypothesis as measured.

    Attributes
    ----------
    verdict : {"holds", "does not hold", "inert", "not tested"}
        "inert": every comparison is of a safeguard that never acted in the scenario, or
        (slope hypotheses) of variants the swept knob never changed;
        "not tested": fewer than :data:`MIN_RUNS_CLAIMS` runs.
    p : float
        Intersection-union p-value: the largest p of its comparisons (1 for an untestable
        comparison, which cannot support the hypothesis).
    p_holm : float
        Holm-adjusted over the declared family.
    weakest : Comparison
        The comparison with the largest p (the one the verdict hinges on).
    """

    hypothesis: object
    comparisons: tuple
    verdict: str
    p: float
    p_holm: float
    weakest: Comparison | None = None
    notes: tuple = field(default_factory=tuple)


def evaluate_hypotheses(cfg, runs: pl.DataFrame) -> list[HypothesisResult]:
    """Test the config's declared hypotheses: each an intersection-union test of its
    one-sided paired comparisons, Holm-corrected over the family at ``analysis.alpha``.

    A hypothesis *holds* when its Holm-adjusted p is at most ``alpha`` (every comparison
    then has its mean difference in the predicted direction); *does not hold* otherwise,
    with the effect and the smallest detectable difference of its weakest comparison;
    *inert* when all its comparisons are inert. With fewer than :data:`MIN_RUNS_CLAIMS`
    runs nothing is tested.
    """
    a = cfg.analysis
    alpha = float(a["alpha"])
    m = max(1, len(cfg.hypotheses))
    inert = inert_switches(runs, cfg.store)
    opts = dict(store=cfg.store, inert=inert, alpha=alpha / m,
                confidence=float(a["confidence"]), n_resamples=int(a["n_resamples"]),
                seed=cfg.seed)
    raw = []
    sweeps = {sw.name: sw for sw in getattr(cfg, "sweeps", ())}
    for h in cfg.hypotheses:
        if getattr(h, "test", "sign") == "slope":
            comps = tuple(compare_slope(runs, sweeps[h.sweep], v, w, met, direction=d,
                                        **opts) for v, w, met, d in h.components())
        else:
            comps = tuple(compare(runs, h.scenario, v, w, met, direction=d, **opts)
                          for v, w, met, d in h.components())
        p = max((c.p if c.tested else 1.0) for c in comps) if comps else 1.0
        weakest = max(comps, key=lambda c: (c.p if c.tested else 1.0)) if comps else None
        raw.append((h, comps, p, weakest))
    adjusted = holm([p for _, _, p, _ in raw]) if raw else []
    out = []
    for (h, comps, p, weakest), p_adj in zip(raw, adjusted):
        if cfg.runs < MIN_RUNS_CLAIMS:
            verdict = "not tested"
        elif comps and all(c.status in ("inert", "inert knob") for c in comps):
            verdict = "inert"
        elif p_adj <= alpha and all(c.tested for c in comps):
            verdict = "holds"
        else:
            verdict = "does not hold"
        out.append(HypothesisResult(h, comps, verdict, float(p), float(p_adj), weakest))
    return out


@dataclass(frozen=True)
class Crossover:
    """Where, on one severity sweep, the naive loop first becomes worse than no learning.

    Attributes
    ----------
    sweep : str
    metric : str
    points : tuple of Comparison
        ``naive_loop - no_learning`` at every grid point, one-sided toward "worse".
    at : object or None
        The first grid value whose interval lies wholly on the worse side (None: nowhere).
    estimate_at : object or None
        The first grid value whose mean difference is on the worse side.
    restores : tuple of (str, Interval)
        At ``at``, the ``naive_loop+<switch>`` variants that restore the benefit
        (:func:`restores_benefit`), best first, with their interval against no learning.
    oracle_gap : Interval or None
        ``oracle - no_learning`` at ``at`` (paired by run); None when there is no crossover
        or no ``oracle`` variant (then no safeguard can be said to restore the benefit).
    """

    sweep: str
    metric: str
    points: tuple
    at: object = None
    estimate_at: object = None
    restores: tuple = ()
    oracle_gap: Interval | None = None


def _worse(iv, better: str) -> tuple[bool, bool]:
    """(mean on the worse side, whole interval on the worse side)."""
    est, lo, hi = float(iv.estimate), float(iv.low), float(iv.high)
    if better == "greater":
        return est < 0, hi < 0
    return est > 0, lo > 0


def restores_benefit(gain: Interval, oracle_gap: Interval, better: str) -> bool:
    """Whether a safeguard added to the naive loop restores the benefit of learning.

    Both must hold: the safeguard's paired difference against no learning (``gain``,
    ``naive_loop+X - no_learning``) is not worse than no learning (its interval does not
    lie wholly on the worse side), and its mean is at least half of the oracle's
    (``oracle_gap``, ``oracle - no_learning``) in the better direction. A safeguard that
    merely stops learning meets the first and fails the second.

    Parameters
    ----------
    gain, oracle_gap : Interval
        0-d mean paired differences with their intervals, in the metric's unit.
    better : {"greater", "less"}
        Which way the metric is better.
    """
    sign = 1.0 if better == "greater" else -1.0
    not_worse = not _worse(gain, better)[1]
    return not_worse and sign * float(gain.estimate) >= 0.5 * sign * float(oracle_gap.estimate)


def _crossover_opts(cfg) -> dict:
    a = cfg.analysis
    return dict(store=cfg.store, confidence=float(a["confidence"]),
                n_resamples=int(a["n_resamples"]), seed=cfg.seed, alpha=float(a["alpha"]))


def _first_worse(runs: pl.DataFrame, sw, variant: str, opts: dict) -> tuple:
    """``variant - no_learning`` at every grid point of sweep ``sw`` (one-sided toward
    worse), the first grid value whose whole interval is on the worse side and the first
    whose mean is (None: nowhere)."""
    worse_dir = {"greater": "less", "less": "greater"}
    comps, at, est = [], None, None
    for sc, v in sw.points():
        c = compare(runs, sc, variant, "no_learning", sw.metric,
                    direction=worse_dir[sw.better], **opts)
        comps.append(c)
        if c.interval is None:
            continue
        mean_worse, all_worse = _worse(c.interval, sw.better)
        if est is None and mean_worse:
            est = v
        if at is None and all_worse:
            at = v
    return comps, at, est


def crossover_map(cfg, runs: pl.DataFrame) -> list[Crossover]:
    """The crossover map (one :class:`Crossover` per sweep of the config): the severity at
    which ``naive_loop`` first becomes worse than ``no_learning`` on the sweep's primary
    metric, and which single safeguard (a ``naive_loop+<switch>`` variant) restores the
    benefit there (:func:`restores_benefit`: not worse than no learning and at least half
    of ``oracle - no_learning``; nothing restores without an ``oracle`` variant).
    Exploratory: intervals at ``analysis.confidence``, no correction."""
    if not {"naive_loop", "no_learning"} <= set(cfg.variants):
        return []
    opts = _crossover_opts(cfg)
    out = []
    for sw in getattr(cfg, "sweeps", ()):
        comps, at, est = _first_worse(runs, sw, "naive_loop", opts)
        restores, gap = [], None
        if at is not None and "oracle" in cfg.variants:
            sc = sw.scenario(list(sw.values).index(at))
            gap = compare(runs, sc, "oracle", "no_learning", sw.metric, **opts).interval
            for var in cfg.variants:
                if not var.startswith("naive_loop+") or gap is None:
                    continue
                c = compare(runs, sc, var, "no_learning", sw.metric, **opts)
                if c.interval is not None and restores_benefit(c.interval, gap, sw.better):
                    restores.append((var.partition("+")[2], c.interval))
            sign = -1.0 if sw.better == "greater" else 1.0
            restores.sort(key=lambda r: sign * float(r[1].estimate))
        out.append(Crossover(sw.name, sw.metric, tuple(comps), at, est, tuple(restores),
                             gap))
    return out


@dataclass(frozen=True)
class LoopCrossover:
    """One literature baseline on the crossover map of one severity sweep.

    Attributes
    ----------
    sweep, variant : str
    points : tuple of Comparison
        ``variant - no_learning`` at every grid point, one-sided toward "worse".
    at, estimate_at : object or None
        The first grid value whose whole interval (``at``) or mean (``estimate_at``) lies
        on the worse side (None: nowhere).
    gain : Interval or None
        ``variant - no_learning`` where the naive loop is worse (its crossover's ``at``);
        None when the naive loop is nowhere worse or the baseline was not run there.
    restores : bool or None
        Whether the baseline restores the benefit there (:func:`restores_benefit`); None
        without a crossover or an ``oracle`` variant.
    """

    sweep: str
    variant: str
    points: tuple
    at: object = None
    estimate_at: object = None
    gain: Interval | None = None
    restores: bool | None = None


def baseline_crossovers(cfg, runs: pl.DataFrame,
                        cmap: list[Crossover]) -> list[LoopCrossover]:
    """Each literature baseline of the config (:data:`dyna.agents.baselines.BASELINES`) on
    the crossover map ``cmap`` (:func:`crossover_map`): per sweep, where the baseline itself
    is first worse than no learning, and, where the naive loop is worse, whether the
    baseline restores the benefit by the rule of :func:`restores_benefit`. Empty without
    a baseline variant or a crossover map. Exploratory, as the map."""
    from dyna.agents.baselines import BASELINES
    names = [v for v in cfg.variants if v in BASELINES]
    if not (names and cmap):
        return []
    opts = _crossover_opts(cfg)
    out = []
    for sw, cx in zip(cfg.sweeps, cmap):
        at_index = None if cx.at is None else list(sw.values).index(cx.at)
        for name in names:
            comps, at, est = _first_worse(runs, sw, name, opts)
            gain = None if at_index is None else comps[at_index].interval
            restores = (None if gain is None or cx.oracle_gap is None
                        else restores_benefit(gain, cx.oracle_gap, sw.better))
            out.append(LoopCrossover(sw.name, name, tuple(comps), at, est, gain, restores))
    return out


def exploratory_cells(cfg, runs: pl.DataFrame, primary: set | None = None) -> list[Comparison]:
    """The effect of removing each safeguard (``<loop>-no_X`` minus ``<loop>``), per
    scenario and metric of :data:`EXPLORATORY_METRICS`, two-sided. Comparisons that are
    part of a declared hypothesis (``primary``: ``(scenario, variant, versus, metric)``)
    are left out: they are tested there."""
    loop = f"{cfg.store}_loop"
    if loop not in cfg.variants:
        return []
    a = cfg.analysis
    inert = inert_switches(runs, cfg.store)
    primary = primary or set()
    cells = []
    for s, _ in cfg.scenarios:
        for v in cfg.variants:
            if ablated_switch(v, cfg.store) is None:
                continue
            if not (ran(runs, s, v) and ran(runs, s, loop)):
                continue   # not run (a scoped confirmatory run)
            for met in EXPLORATORY_METRICS:
                if (s, v, loop, met) in primary:
                    continue
                cells.append(compare(runs, s, v, loop, met, store=cfg.store, inert=inert,
                                     alpha=float(a["fdr"]), confidence=float(a["confidence"]),
                                     n_resamples=int(a["n_resamples"]), seed=cfg.seed))
    return cells


def bh_marks(cells: list[Comparison], fdr: float, runs: int) -> dict[int, float]:
    """Benjamini-Hochberg q-values of the tested cells (index -> q); empty with fewer
    than :data:`MIN_RUNS_CLAIMS` runs (no claims)."""
    idx = [i for i, c in enumerate(cells) if c.tested]
    if runs < MIN_RUNS_CLAIMS or not idx:
        return {}
    q = benjamini_hochberg([cells[i].p for i in idx])
    return dict(zip(idx, q.tolist()))


def safeguard_activity(cfg, runs: pl.DataFrame) -> dict[str, dict[str, tuple]]:
    """Per switch and scenario, the full loop's counts over runs: ``(total, min, max)``."""
    loop = f"{cfg.store}_loop"
    full = runs.filter(pl.col("variant") == loop)
    out: dict[str, dict[str, tuple]] = {}
    for sw in LoopConfig.SWITCHES:
        col = f"acted_{sw}"
        if col not in full.columns:
            continue
        out[sw] = {}
        for s, _ in cfg.scenarios:
            v = full.filter(pl.col("scenario") == s)[col].to_numpy()
            if v.size:
                out[sw][s] = (int(v.sum()), int(v.min()), int(v.max()))
    return out


def ran(runs: pl.DataFrame, scenario: str, variant: str) -> bool:
    """Whether the ``runs`` table holds runs of ``variant`` in ``scenario`` (a scoped
    confirmatory run leaves pairs out)."""
    return runs.filter((pl.col("scenario") == scenario)
                       & (pl.col("variant") == variant)).height > 0


def score_matrix(cfg, runs: pl.DataFrame, variant: str, metric: str = "final_success"
                 ) -> np.ndarray:
    """Scores of one variant, shape ``(runs, scenarios)`` (a task per scenario)."""
    return np.stack([values(runs, s, variant, metric) for s, _ in cfg.scenarios], axis=1)


#: Thresholds of the performance profiles (final success rate).
PROFILE_TAUS = np.linspace(0.0, 1.0, 101)


def aggregates(cfg, runs: pl.DataFrame) -> dict:
    """rliable-style aggregates of the final success rate over scenarios x runs.

    Returns
    -------
    dict
        ``"iqm"``: variant -> :class:`Interval` (stratified bootstrap);
        ``"poi"``: switch -> :class:`Interval` of P(full loop > loop without it);
        ``"profiles"``: variant -> :class:`Interval` over :data:`PROFILE_TAUS`;
        ``"n_resamples"``.
    """
    a = cfg.analysis
    opts = dict(confidence=float(a["confidence"]), n_resamples=int(a["n_resamples"]),
                seed=cfg.seed)
    out: dict = {"iqm": {}, "poi": {}, "profiles": {}, "n_resamples": opts["n_resamples"]}
    # a variant run in only some scenarios (a scoped confirmatory run) has no aggregate
    counts = runs.group_by("variant").agg(pl.col("scenario").n_unique().alias("n"))
    complete = set(counts.filter(pl.col("n") == len(cfg.scenarios))["variant"].to_list())
    for v in cfg.variants:
        if v not in complete:
            continue
        sc = score_matrix(cfg, runs, v)
        if np.all(np.isfinite(sc)):
            out["iqm"][v] = stratified_iqm(sc, **opts)
            out["profiles"][v] = performance_profile(sc, PROFILE_TAUS, **opts)
    loop = f"{cfg.store}_loop"
    if loop in complete:
        full = score_matrix(cfg, runs, loop)
        for v in cfg.variants:
            sw = ablated_switch(v, cfg.store)
            if sw is not None and v in complete:
                out["poi"][sw] = probability_of_improvement(full, score_matrix(cfg, runs, v),
                                                            **opts)
    return out


def base_scenarios(cfg) -> list[str]:
    """The scenarios in config order without the robustness copies (the declared ones and
    the sweeps' points): those the analyses other than the robustness table are about."""
    rob = getattr(cfg, "robustness", None)
    copies = {c.scenario for c in rob.copies} if rob else set()
    return [s for s, _ in cfg.scenarios if s not in copies]


def scenario_metrics(cfg, scenario: str) -> tuple[str, ...]:
    """The primary metrics of one scenario, in order, without repeats: the metric of the
    sweep it is a point of, then those of the sign hypotheses declared on it; a scenario
    with neither has ``("late_success",)`` (success over episodes ``late_from`` .. end, the
    agent-tasks default score). A robustness copy has those of the scenario it copies."""
    rob = getattr(cfg, "robustness", None)
    scenario = next((c.source for c in rob.copies if c.scenario == scenario),
                    scenario) if rob else scenario
    out = [sw.metric for sw in getattr(cfg, "sweeps", ())
           if scenario in {sc for sc, _ in sw.points()}]
    out += [m for h in cfg.hypotheses if getattr(h, "test", "sign") == "sign"
            and h.scenario == scenario for m in h.metrics]
    return tuple(dict.fromkeys(out)) or ("late_success",)
