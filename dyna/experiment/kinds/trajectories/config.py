"""Kind ``trajectories``: the experiment file, validated (see the package docstring)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import ClassVar

from dyna.errors import ConfigError, check_range
from dyna.experiment.config import (
    check_bool,
    with_run_overrides,
    check_keys,
    check_string,
    config_hash,
    table_of,
)

__all__ = ["NOT_APPLICABLE", "TrajectoriesConfig", "default_variants", "parse_trajectories",
           "variant_spec"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_TOP = ("name", "description", "seed", "runs", "data", "store", "variants", "reviewer",
        "loop", "digest", "analysis", "first_runs", "llm")
_REVIEWER = {"propose_rate": 1.0, "specificity": 1.0, "copy_rate": 0.5,
             "kinds": ["skill", "memory", "workflow"], "tokens_per_review": 300}
_DIGEST = {"extra_sensitive_keys": ["payment_id", "payment_methods"], "tools_trusted": True}
_ANALYSIS = {"confidence": 0.95, "n_resamples": 2000, "near_duplicate": 0.6}

#: Variants that need what a recorded run does not have: an oracle of the hidden task, no
#: learning at all (nothing to measure), a tabular agent or retrieval that acts, or the
#: agent's own verdict on its run (tau-bench records none).
NOT_APPLICABLE = {"no_learning": "learns nothing (every count is 0 by construction)",
                  "oracle": "needs the hidden task world, which recorded runs do not have",
                  "dyna_q": "acts in an environment; a recorded run cannot be re-acted",
                  "dyna_q_plus": "acts in an environment; a recorded run cannot be "
                                 "re-acted",
                  "episodic": "acts on retrieved episodes; a recorded run cannot be "
                              "re-acted",
                  "self_reflection": "needs the agent's own verdict on each run, which "
                                     "tau-bench runs do not record"}


def default_variants(store: str = "skill") -> tuple[str, ...]:
    """``variants = "all"``: the naive loop, both full loops with each safeguard switched
    off in turn (:attr:`dyna.loops.review.LoopConfig.SWITCHES`), and every literature
    baseline (:data:`dyna.agents.baselines.BASELINES`)."""
    from dyna.agents.baselines import BASELINES
    from dyna.loops.review import LoopConfig
    out = ["naive_loop"]
    for st in ("skill", "memory"):
        out += [f"{st}_loop"] + [f"{st}_loop-no_{s}" for s in LoopConfig.SWITCHES]
    return tuple(out + list(BASELINES))


def variant_spec(name: str, store: str, loop: dict, field_name: str = "variant"):
    """The :class:`dyna.agents.loop_agents.VariantSpec` of a variant name.

    Raises
    ------
    ConfigError
        Unknown name (as :func:`dyna.agents.loop_agents.make_variant`), or a variant that
        does not apply to recorded runs (:data:`NOT_APPLICABLE`, or one whose gate reads
        the agent's self-assessment).
    """
    from dyna.agents.loop_agents import make_variant
    from dyna.loops.review import LoopConfig
    if name in NOT_APPLICABLE:
        raise ConfigError(field_name, name, f"does not apply to recorded runs: "
                          f"{NOT_APPLICABLE[name]}")
    spec = make_variant(name, store, LoopConfig(**loop), field_name)
    if spec.self_gate or (spec.config is not None and spec.config.outcome_gate == "self"):
        raise ConfigError(field_name, name, "does not apply to recorded runs: its gate "
                          "reads the agent's own verdict, which tau-bench runs do not record")
    return spec


@dataclass(frozen=True)
class TrajectoriesConfig:
    """A validated ``kind = "trajectories"`` experiment.

    Attributes
    ----------
    name, description : str
    seed, runs : int
        Run ``r`` draws the reviewer's stream from ``(seed, r)``; the recorded runs are
        replayed in the same order in every run (trial by trial).
    data : str
        The trajectories file (relative to the experiment file's folder).
    store : {"skill", "memory"}
        Store of ``naive_loop`` (the loops name their own).
    variants : tuple of str
    reviewer : dict
        :class:`dyna.loops.review.RuleBasedReviewer` keywords (``propose_rate``,
        ``specificity``, ``copy_rate``, ``kinds``, ``tokens_per_review``; the latter also
        the baselines' learning tokens per write).
    loop : dict
        :class:`dyna.loops.review.LoopConfig` settings of the full loop.
    digest : dict
        ``extra_sensitive_keys`` (keys redacted besides the redactor's defaults) and
        ``tools_trusted`` (the airline tools declare their output trusted).
    analysis : dict
        ``confidence``, ``n_resamples`` (bootstrap over tasks), ``near_duplicate`` (the
        content-word Jaccard at or above which two stored lessons are near-duplicates).
    base_dir : str or None
        The experiment file's folder (not hashed).
    first_runs : int or None
        Replay only the first N recorded runs in replay order (trial 0 by task id, then
        trial 1, ...); None: all.
    llm : dict or None
        The ``[llm]`` reviewer (:func:`dyna.experiment.kinds.trajectories.llm.parse_llm_table`)
        used instead of the rule-based one; None: the rule-based reviewer.
    replay : str or None
        ``--replay DIR``: answer the model's requests from DIR's recording (not hashed).
    """

    name: str
    description: str
    seed: int
    runs: int
    data: str
    store: str
    variants: tuple
    reviewer: dict
    loop: dict
    digest: dict
    analysis: dict
    kind: str = "trajectories"
    base_dir: str | None = field(default=None, compare=False)
    first_runs: int | None = None
    llm: dict | None = None
    replay: str | None = field(default=None, compare=False)

    #: Columns a recording (``llm_exchanges.parquet``) must have for ``--replay``.
    replay_columns: ClassVar[tuple[str, ...]] = (
        "variant", "run", "seq", "key", "request", "response", "status", "reason",
        "attempts", "seconds")

    def to_dict(self) -> dict:
        """Canonical JSON-ready form (accepted back by :func:`parse_trajectories`)."""
        return {"kind": "trajectories", "name": self.name, "description": self.description,
                "seed": self.seed, "runs": self.runs, "data": self.data,
                "store": self.store, "variants": list(self.variants),
                "reviewer": dict(self.reviewer), "loop": dict(self.loop),
                "digest": dict(self.digest), "analysis": dict(self.analysis),
                **({"first_runs": self.first_runs} if self.first_runs is not None else {}),
                **({"llm": dict(self.llm)} if self.llm is not None else {})}

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON of :meth:`to_dict`."""
        return config_hash(self)

    def with_overrides(self, *, runs: int | None = None, seed: int | None = None):
        """Copy with ``--runs`` / ``--seed`` applied."""
        return with_run_overrides(self, runs, seed)

    def with_replay(self, folder) -> "TrajectoriesConfig":
        """Copy that answers the reviewer model's requests from ``folder``'s recording.

        Raises
        ------
        ConfigError
            The experiment has no ``[llm]`` reviewer (nothing asks a model).
        """
        if self.llm is None:
            raise ConfigError("--replay", str(folder), "only for an experiment with an "
                              "[llm] reviewer (nothing else asks a model)")
        return dataclasses.replace(self, replay=str(folder))


def _section(data: dict, key: str, defaults: dict) -> dict:
    raw = table_of(data, key, key)
    check_keys(raw, tuple(defaults), f"{key}.")
    return {**defaults, **raw}


def parse_trajectories(data: dict, *, runs=None, seed=None, base_dir=None
                       ) -> TrajectoriesConfig:
    """Validate a raw ``kind = "trajectories"`` dict (``kind`` removed).

    Raises
    ------
    ConfigError
        Naming the field: an unknown key, a bad name, seed or runs, a missing ``data``, an
        unknown or inapplicable variant, a reviewer, loop, digest or analysis value out of
        range, a bad ``first_runs`` or ``[llm]`` value.
    """
    from dyna.loops.review import KINDS, LoopConfig, RuleBasedReviewer
    check_keys(data, _TOP, "")
    name = check_string(data.get("name"), "name", pattern=_NAME_RE)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError("description", description, "must be a string")
    seed_v = check_range("seed", data.get("seed", 0), lo=0, integer=True)
    runs_v = check_range("runs", data.get("runs", 3), lo=1, integer=True)
    if "data" not in data:
        raise ConfigError("data", None, "missing: the trajectories file (JSON)")
    path = check_string(data["data"], "data")
    store = data.get("store", "skill")
    if store not in ("skill", "memory"):
        raise ConfigError("store", store, "must be 'skill' or 'memory'")
    reviewer = _section(data, "reviewer", _REVIEWER)
    kinds = reviewer["kinds"]
    if not isinstance(kinds, list) or not kinds or any(k not in KINDS for k in kinds):
        raise ConfigError("reviewer.kinds", kinds, f"must be a non-empty list of {KINDS}")
    reviewer["kinds"] = list(dict.fromkeys(kinds))
    try:
        RuleBasedReviewer(0, reviewer["propose_rate"], reviewer["specificity"],
                          reviewer["copy_rate"], tuple(kinds), reviewer["tokens_per_review"])
    except ConfigError as exc:
        raise ConfigError(f"reviewer.{exc.field}", exc.value, exc.reason) from None
    loop = table_of(data, "loop", "loop")
    known = tuple(f.name for f in dataclasses.fields(LoopConfig))
    check_keys(loop, known, "loop.")
    try:
        LoopConfig(**loop)
    except ConfigError as exc:
        raise ConfigError(f"loop.{exc.field}", exc.value, exc.reason) from None
    except TypeError as exc:
        raise ConfigError("loop", loop, str(exc)) from None
    loop = dict(loop)
    digest = _section(data, "digest", _DIGEST)
    extra = digest["extra_sensitive_keys"]
    if not isinstance(extra, list) or not all(isinstance(k, str) and k for k in extra):
        raise ConfigError("digest.extra_sensitive_keys", extra,
                          "must be a list of key names")
    check_bool(digest["tools_trusted"], "digest.tools_trusted")
    analysis = _section(data, "analysis", _ANALYSIS)
    analysis["confidence"] = float(check_range("analysis.confidence", analysis["confidence"],
                                               0.0, 1.0, lo_open=True, hi_open=True))
    check_range("analysis.n_resamples", analysis["n_resamples"], 100, None, integer=True)
    analysis["near_duplicate"] = float(check_range(
        "analysis.near_duplicate", analysis["near_duplicate"], 0.0, 1.0, lo_open=True))
    raw_v = data.get("variants", "all")
    if raw_v == "all":
        variants = default_variants(store)
    elif isinstance(raw_v, list) and raw_v and all(isinstance(v, str) for v in raw_v):
        variants = tuple(raw_v)
    else:
        raise ConfigError("variants", raw_v, 'must be "all" or a non-empty list of names')
    if len(set(variants)) != len(variants):
        raise ConfigError("variants", list(raw_v), "names must be distinct")
    for j, v in enumerate(variants):
        variant_spec(v, store, loop, f"variants[{j}]")
    first = data.get("first_runs")
    if first is not None:
        check_range("first_runs", first, lo=1, integer=True)
    llm = None
    if "llm" in data:
        from dyna.experiment.kinds.trajectories.llm import parse_llm_table
        llm = parse_llm_table(data["llm"])
    cfg = TrajectoriesConfig(name, description, seed_v, runs_v, path, store, variants,
                             reviewer, loop, digest, analysis,
                             base_dir=None if base_dir is None else str(base_dir),
                             first_runs=first, llm=llm)
    return cfg.with_overrides(runs=runs, seed=seed)
