"""Kind ``agent_tasks``: the exploratory robustness table.

The primary contrasts are re-run with the simulated policy's parameters scaled: the file's
``[robustness]`` table::

    [robustness]
    factors = [0.5, 2.0]      # each parameter at half and at double its value
    params = ["p_follow"]     # PolicyParams fields (dyna.agents.loop_agents)

adds, for every scenario a sign hypothesis is declared on, one *copy* of that scenario per
parameter and factor, named ``<scenario>-<param>-x<factor>`` (e.g. ``drift-p_follow-x0.5``):
the same env and tasks, the policy with that one parameter scaled (:func:`scaled`). The
report then gives each hypothesis's comparisons in every copy beside the base scenario,
uncorrected and marked exploratory (:func:`robustness_rows`): the claims stay with the
frozen primary family.

A probability (``p_follow``, ``copy_rate``, ``misattribution``) is scaled on the odds
scale, ``p / (1 - p)`` times the factor: doubling 0.9 cannot give a probability, doubling
its odds gives 18 / 19 = 0.947, and halving gives 4.5 / 5.5 = 0.818 (half and double stay
reciprocal, and a small probability is scaled almost as the plain product). The
exploration of this policy is the complement of ``p_follow`` (when it does not follow its
knowledge it explores), so its odds move with ``p_follow``'s. Other numbers are multiplied
(integers rounded to the nearest).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from dyna.errors import ConfigError

__all__ = ["ODDS_SCALED", "Robustness", "RobustnessCopy", "parse_robustness",
           "robustness_rows", "scaled"]

#: PolicyParams fields that are probabilities: scaled on the odds scale.
ODDS_SCALED = ("p_follow", "copy_rate", "misattribution")

_KEYS = ("factors", "params")
_DEFAULTS = {"factors": [0.5, 2.0], "params": ["p_follow"]}


@dataclass(frozen=True)
class RobustnessCopy:
    """One scenario copy with one policy parameter scaled.

    Attributes
    ----------
    scenario : str
        The copy's name, ``<source>-<param>-x<factor>``.
    source : str
        The scenario it copies (env and tasks).
    param : str
        The PolicyParams field scaled.
    factor : float
        The scale (> 0, not 1).
    value : int or float
        The parameter's value in the copy (:func:`scaled`).
    """

    scenario: str
    source: str
    param: str
    factor: float
    value: float


@dataclass(frozen=True)
class Robustness:
    """The ``[robustness]`` table, validated, with the scenario copies it adds.

    Attributes
    ----------
    factors : tuple of float
    params : tuple of str
    copies : tuple of RobustnessCopy
        In the order they follow the other scenarios.
    """

    factors: tuple
    params: tuple
    copies: tuple

    def to_dict(self) -> dict:
        """The TOML form (what the config hash covers)."""
        return {"factors": list(self.factors), "params": list(self.params)}

    def policy_overrides(self, scenario: str) -> dict:
        """``{param: value}`` of copy ``scenario``; ``{}`` for any other scenario."""
        return {c.param: c.value for c in self.copies if c.scenario == scenario}


def scaled(param: str, value, factor: float):
    """``value`` of PolicyParams field ``param`` scaled by ``factor``.

    A probability (:data:`ODDS_SCALED`) is scaled on the odds scale,
    ``odds' = factor * p / (1 - p)``, ``p' = odds' / (1 + odds')`` (0 and 1 stay); an
    integer is multiplied and rounded to the nearest; any other number is multiplied.

    Returns
    -------
    int or float
    """
    if param in ODDS_SCALED:
        p = float(value)
        if p <= 0.0 or p >= 1.0:
            return p
        odds = factor * p / (1.0 - p)
        return odds / (1.0 + odds)
    if isinstance(value, int):
        return int(round(value * factor))
    return float(value) * factor


def _scalable(defaults: dict) -> tuple:
    """PolicyParams fields with a number (not a flag) as default value."""
    return tuple(k for k, v in defaults.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool))


def parse_robustness(raw, policy: dict, scenarios: tuple, hypotheses: tuple):
    """The ``[robustness]`` table (module docstring) -> :class:`Robustness`, or None when
    the file has none.

    Parameters
    ----------
    raw : dict or None
        The table as read.
    policy : dict
        The file's ``[policy]`` keywords (the base values).
    scenarios : tuple of (str, dict)
        Every scenario so far (declared and sweep points): copy names must be new.
    hypotheses : tuple of Hypothesis
        The sign hypotheses name the scenarios copied.

    Raises
    ------
    ConfigError
        Naming ``robustness.<key>`` and the value: an unknown key, factors that are not
        distinct positive numbers other than 1, a parameter that is not a number of
        PolicyParams, a scaled value PolicyParams refuses, no sign hypothesis to re-run,
        or a copy's name taken.
    """
    from dyna.agents.loop_agents import PolicyParams

    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("robustness", raw, "must be a table")
    for k in raw:
        if k not in _KEYS:
            raise ConfigError(f"robustness.{k}", raw[k], f"unknown key; one of {_KEYS}")
    table = {**_DEFAULTS, **raw}
    factors = table["factors"]
    if not isinstance(factors, list) or not factors:
        raise ConfigError("robustness.factors", factors, "must be a non-empty list")
    for j, f in enumerate(factors):
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) \
                or f <= 0 or f == 1:
            raise ConfigError(f"robustness.factors[{j}]", f,
                              "must be a number > 0 other than 1 (1 is the base scenario)")
    if len(set(factors)) != len(factors):
        raise ConfigError("robustness.factors", factors, "factors must be distinct")
    defaults = {f.name: f.default for f in dataclasses.fields(PolicyParams)}
    numbers = _scalable(defaults)
    params = table["params"]
    if not isinstance(params, list) or not params:
        raise ConfigError("robustness.params", params, "must be a non-empty list")
    for j, p in enumerate(params):
        if p not in numbers:
            raise ConfigError(f"robustness.params[{j}]", p,
                              f"must be a number of the policy; one of {numbers}")
    if len(set(params)) != len(params):
        raise ConfigError("robustness.params", params, "names must be distinct")
    sources = list(dict.fromkeys(h.scenario for h in hypotheses
                                 if getattr(h, "test", "sign") == "sign"))
    if not sources:
        raise ConfigError("robustness", raw, "re-runs the primary contrasts: declare at "
                          "least one sign hypothesis ([[hypotheses]] with a scenario)")
    taken = {name for name, _ in scenarios}
    copies = []
    for j, p in enumerate(params):
        base = policy.get(p, defaults[p])
        for f in factors:
            value = scaled(p, base, float(f))
            try:
                PolicyParams(**{**policy, p: value})
            except ConfigError as exc:
                raise ConfigError(f"robustness.params[{j}]", p,
                                  f"x{f:g} gives {value!r}: {exc.reason}") from None
            for src in sources:
                name = f"{src}-{p}-x{f:g}"
                if name in taken:
                    raise ConfigError("robustness", name, "a scenario of that name exists")
                taken.add(name)
                copies.append(RobustnessCopy(name, src, p, float(f), value))
    return Robustness(tuple(float(f) for f in factors), tuple(params), tuple(copies))


def robustness_rows(cfg, runs) -> list[tuple]:
    """Each sign hypothesis's comparisons re-run in every robustness copy of its scenario.

    Returns
    -------
    list of (Hypothesis, RobustnessCopy, Comparison, Comparison)
        The hypothesis, the copy, the comparison in the copy and the same comparison in
        the base scenario (one row per comparison of the hypothesis); one-sided toward the
        hypothesis's direction, uncorrected (exploratory). Empty without ``[robustness]``.
    """
    from dyna.experiment.kinds.agent_tasks.analysis import compare, inert_switches

    rob = getattr(cfg, "robustness", None)
    if rob is None:
        return []
    a = cfg.analysis
    opts = dict(store=cfg.store, inert=inert_switches(runs, cfg.store),
                alpha=float(a["alpha"]), confidence=float(a["confidence"]),
                n_resamples=int(a["n_resamples"]), seed=cfg.seed)
    rows = []
    for h in cfg.hypotheses:
        if getattr(h, "test", "sign") != "sign":
            continue
        for v, w, met, d in h.components():
            base = compare(runs, h.scenario, v, w, met, direction=d, **opts)
            for copy in rob.copies:
                if copy.source == h.scenario:
                    rows.append((h, copy, compare(runs, copy.scenario, v, w, met,
                                                  direction=d, **opts), base))
    return rows
