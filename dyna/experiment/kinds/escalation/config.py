"""Kind ``escalation``: the experiment file, validated (see the package docstring)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from dyna.errors import ConfigError, check_range
from dyna.experiment.config import (NAME_RE, check_bool, check_keys, check_string, config_hash,
                                    table_of, with_run_overrides)

__all__ = ["CostSetting", "EscalationConfig", "FEEDBACK", "PolicyVariant", "RULES",
           "Scenario", "build_policy", "class_costs", "cost_unit", "parse_escalation"]


FEEDBACK = ("censored", "full")


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
class CostSetting:
    """One cost setting of the benchmark: a risk class at one threshold p*.

    Without a ``costs.p_star`` grid there is one setting per risk class, at the class's
    preset p* (named after the class); with a grid, one per risk class and grid value
    (named ``p*=0.4``, or ``low_stakes p*=0.4`` when several classes are run).

    Attributes
    ----------
    name : str
        Label in the tables (column ``cost_setting``), plots and report.
    risk_class : str
        Key of :data:`dyna.escalation.RISK_CLASSES` (which outcomes count, the preset rule
        and delta).
    p_star : float
        The competence threshold in (0, 1): the threshold of every threshold rule whose
        variant does not set its own, and the failure cost ``c_failure = c_escalate /
        (1 - p*)`` unless ``costs.c_failure`` is given (so the type oracle acts iff the
        type's rate is >= p* when attempts cost nothing).
    """

    name: str
    risk_class: str
    p_star: float


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
    #: The experiment file's folder, against which relative ``data`` and ``systems_file``
    #: paths are resolved (None: the working directory). Not part of the config's
    #: identity: not in :meth:`to_dict`, not hashed, not compared.
    base_dir: str | None = field(default=None, compare=False)

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
            "seed": self.seed, "runs": self.runs, "costs": _plain(self.costs),
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
        return with_run_overrides(self, runs, seed)

    def settings(self) -> list[CostSetting]:
        """The cost settings in canonical order (risk class, then grid value)."""
        from dyna.escalation import RISK_CLASSES

        grid = self.costs.get("p_star", ())
        if not grid:
            return [CostSetting(rc, rc, RISK_CLASSES[rc].p_star) for rc in self.risk_classes]
        many = len(self.risk_classes) > 1
        return [CostSetting(f"{rc} p*={p:g}" if many else f"p*={p:g}", rc, p)
                for rc in self.risk_classes for p in grid]

    def groups(self) -> list[tuple[PolicyVariant, CostSetting]]:
        """(variant, cost setting) pairs in canonical order (variant-major)."""
        return [(v, st) for v in self.variants for st in self.settings()]


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


_TOP = ("name", "description", "seed", "runs", "costs", "risk_classes", "feedback",
        "scenarios", "defaults", "variants", "analysis")


_COSTS = ("c_escalate", "c_failure", "c_act", "act_cost", "act_cost_scale", "p_star")


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
    check_keys(raw, _COSTS, "costs.")
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
    if "p_star" in raw:  # the cost-setting grid (left out when absent: older files' hash)
        grid = raw["p_star"]
        if not isinstance(grid, list) or not grid:
            raise ConfigError("costs.p_star", grid, "must be a non-empty array of thresholds")
        values = tuple(float(check_range(f"costs.p_star[{j}]", x, 0.0, 1.0, lo_open=True,
                                         hi_open=True)) for j, x in enumerate(grid))
        if any(b <= a for a, b in zip(values, values[1:])):
            raise ConfigError("costs.p_star", grid, "values must be strictly increasing")
        if "c_failure" in out:
            raise ConfigError("costs.c_failure", out["c_failure"], "cannot be set with "
                              "costs.p_star: each grid value sets its own failure cost "
                              "c_escalate / (1 - p*)")
        out["p_star"] = values
    return out


def _float_list(value, fname):
    if not isinstance(value, list) or not value or \
            not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
        raise ConfigError(fname, value, "must be a non-empty array of numbers")
    return [float(x) for x in value]


def _parse_scenario(raw, i) -> Scenario:
    if not isinstance(raw, dict):
        raise ConfigError(f"scenarios[{i}]", raw, "must be a table")
    name = check_string(raw.get("name"), f"scenarios[{i}].name", pattern=NAME_RE)
    prefix = f"scenarios.{name}."
    source = raw.get("source", "synthetic")
    if source == "synthetic":
        check_keys(raw, _SYN, prefix)
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
        check_keys(raw, _REPLAY, prefix)
        params = {"data": check_string(raw.get("data"), prefix + "data")}
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
            params["systems_file"] = check_string(raw["systems_file"], prefix + "systems_file")
    else:
        raise ConfigError(prefix + "source", source, "must be 'synthetic' or 'replay'")
    return Scenario(name=name, source=source, params=params)


def _parse_variant(raw: dict, defaults: dict, i: int) -> PolicyVariant:
    if not isinstance(raw, dict):
        raise ConfigError(f"variants[{i}]", raw, "must be a table")
    name = check_string(raw.get("name"), f"variants[{i}].name", pattern=NAME_RE)
    prefix = f"variants.{name}."
    check_keys(raw, _VARIANT, prefix)
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


def parse_escalation(data: dict, *, runs=None, seed=None, base_dir=None) -> EscalationConfig:
    """Validate a raw ``kind = "escalation"`` dict (``kind`` removed); ``base_dir`` is the
    experiment file's folder (relative data paths are resolved against it).

    Raises
    ------
    ConfigError
        Naming the dotted field: misspelt keys (with a suggestion), values out of range,
        unknown rules, risk classes or feedback modes, bad scenario rates.
    """
    check_keys(data, _TOP, "")
    name = check_string(data.get("name"), "name", pattern=NAME_RE)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError("description", description, "must be a string")
    cfg_seed = check_range("seed", data.get("seed", 0), lo=0, integer=True)
    cfg_runs = check_range("runs", data.get("runs", 1), lo=1, integer=True)
    costs = _parse_costs(table_of(data, "costs", "costs"))
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
    defaults = table_of(data, "defaults", "defaults")
    check_keys(defaults, tuple(k for k in _VARIANT if k != "name"), "defaults.")
    raw_v = data.get("variants")
    if not isinstance(raw_v, list) or not raw_v:
        raise ConfigError("variants", raw_v, "must be a non-empty array of tables")
    variants = tuple(_parse_variant(r, defaults, i) for i, r in enumerate(raw_v))
    if len({v.name for v in variants}) != len(variants):
        raise ConfigError("variants", [v.name for v in variants], "duplicate variant name")
    raw_a = table_of(data, "analysis", "analysis")
    check_keys(raw_a, _ANALYSIS, "analysis.")
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
        svg=check_bool(raw_a.get("svg", True), "analysis.svg"))
    cfg = EscalationConfig(name=name, description=description, seed=cfg_seed, runs=cfg_runs,
                           costs=costs, risk_classes=risk, feedback=feedback,
                           scenarios=scenarios, variants=variants, analysis=analysis,
                           base_dir=None if base_dir is None else str(base_dir))
    for v, st in cfg.groups():  # every (variant, cost setting) must build a policy
        build_policy(cfg, v, st)
    return cfg.with_overrides(runs=runs, seed=seed)


# =========================================================================== policies

def _setting(setting) -> CostSetting:
    """A :class:`CostSetting`, or a risk class name as the class's preset setting."""
    if isinstance(setting, CostSetting):
        return setting
    from dyna.escalation import RISK_CLASSES

    return CostSetting(setting, setting, RISK_CLASSES[setting].p_star)


def class_costs(costs: dict, setting) -> tuple[float, float, float]:
    """``(c_escalate, c_failure, c_act)`` under a cost setting.

    Parameters
    ----------
    costs : dict
        The config's ``costs``.
    setting : CostSetting or str
        A cost setting, or a risk class name (its preset p*).

    ``c_failure`` defaults to ``c_escalate / (1 - p*)`` with the setting's p*, so that
    Chow's cost threshold equals p* when attempts cost nothing (higher stakes: a failure
    costs more).
    """
    st = _setting(setting)
    c_e = costs["c_escalate"]
    c_f = costs.get("c_failure") or c_e / (1.0 - st.p_star)
    return c_e, c_f, costs.get("c_act", 0.0)


def build_policy(config: EscalationConfig, variant: PolicyVariant, setting):
    """The :class:`dyna.escalation.Policy` of a variant under a cost setting.

    Threshold rules take p* (and delta) from the variant or else from the setting (its
    p*; the risk class's preset delta); ``"chow"`` takes its threshold from the setting's
    costs (:func:`class_costs`, the failure cost derived from p* as an exact
    :class:`fractions.Fraction`); ``"preset"`` is the risk class's own preset rule at the
    setting's p*. ``setting`` is a :class:`CostSetting` or a risk class name.

    Raises
    ------
    ConfigError
        Naming ``variants.<name>.<field>``.
    """
    from dyna.escalation import RISK_CLASSES, make_policy
    from dyna.ties import as_fraction

    st = _setting(setting)
    rc = RISK_CLASSES[st.risk_class]
    c_e, c_f, c_a = class_costs(config.costs, st)
    if not config.costs.get("c_failure"):
        # derived from the setting's p*: exact, so that Chow's threshold is that p* and a
        # posterior mean equal to it acts, as the rule says
        c_f = as_fraction(c_e) / (1 - as_fraction(st.p_star))
    rule = variant.rule
    delta = variant.delta if variant.delta is not None else (rc.delta or 0.05)
    if rule == "preset":
        rule = "mean" if rc.delta is None else "lower_bound"
    return make_policy(rule, p_star=variant.p_star if variant.p_star is not None
                       else st.p_star, delta=delta, min_episodes=variant.min_episodes,
                       epsilon=variant.epsilon, c_escalate=c_e, c_failure=c_f, c_act=c_a,
                       field_prefix=f"variants.{variant.name}.")


def cost_unit(config) -> str:
    """The unit of the costs of an escalation experiment ``config``: ``"USD"`` when its
    acting cost is the replayed log's ``cost_usd`` column unscaled (``costs.act_cost =
    "cost_usd"``, ``costs.act_cost_scale = 1``), as the escalation and failure costs it is
    added to must then be US dollars too; else ``"cost units"`` (synthetic streams and
    logs replayed without their costs carry no unit)."""
    costs = config.costs
    if costs.get("act_cost") == "cost_usd" and costs.get("act_cost_scale") == 1.0:
        return "USD"
    return "cost units"
