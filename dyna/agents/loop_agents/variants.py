"""The variants a loop-agent experiment compares: their names and what each one is."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dyna.agents.baselines import BASELINES
from dyna.errors import ConfigError
from dyna.loops import LoopConfig

__all__ = ["BASE_VARIANTS", "STORES", "VariantSpec", "make_variant", "variant_names"]

BASE_VARIANTS = ("no_learning", "oracle", "naive_loop", "self_reflection", "skill_loop",
                 "memory_loop", "episodic", "dyna_q", "dyna_q_plus")
#: What a loop keeps: procedures (skills) or facts (memory).
STORES = ("skill", "memory")


@dataclass(frozen=True)
class VariantSpec:
    """One agent configuration.

    Attributes
    ----------
    name : str
    learner : {"none", "oracle", "loop", "tabular", "episodic", "baseline"}
    store : {"skill", "memory"}
        What a loop keeps.
    config : LoopConfig or None
        The loop's switches (loops only).
    self_gate : bool
        The digest carries the agent's self-assessment instead of the verified outcome.
    """

    name: str
    learner: str
    store: str = "skill"
    config: LoopConfig | None = None
    self_gate: bool = False


def variant_names(store: str = "skill") -> list[str]:
    """Every variant of an ablation over ``store``: the baselines, the full loop and one
    variant per safeguard switched off (:attr:`LoopConfig.SWITCHES`)."""
    loop = f"{store}_loop"
    return (["no_learning", "oracle", "naive_loop", "self_reflection", loop]
            + [f"{loop}-no_{s}" for s in LoopConfig.SWITCHES]
            + ["episodic", "dyna_q", "dyna_q_plus"])


def make_variant(name: str, store: str = "skill", config: LoopConfig | None = None,
                 field_name: str = "variant") -> VariantSpec:
    """The :class:`VariantSpec` called ``name``.

    Parameters
    ----------
    name : str
        A base variant (:data:`BASE_VARIANTS`), ``"<skill|memory>_loop-no_<switch>"`` (the
        full loop without one safeguard), ``"naive_loop+<switch>"`` (the naive loop with
        one safeguard, as in the full loop) or a literature baseline
        (:data:`dyna.agents.baselines.BASELINES`).
    store : {"skill", "memory"}
        Store of ``naive_loop`` and ``self_reflection`` (the loops name their own).
    config : LoopConfig, optional
        Base settings of the full loop (default ``LoopConfig()``).

    Raises
    ------
    ConfigError
        Unknown name, store or switch.
    """
    if store not in STORES:
        raise ConfigError("store", store, f"must be one of {STORES}")
    base = config or LoopConfig()
    if name == "no_learning":
        return VariantSpec(name, "none", store)
    if name == "oracle":
        return VariantSpec(name, "oracle", store)
    if name in ("dyna_q", "dyna_q_plus"):
        return VariantSpec(name, "tabular", store)
    if name == "episodic":
        return VariantSpec(name, "episodic", store)
    if name in BASELINES:
        return VariantSpec(name, "baseline", store)
    if name.startswith("naive_loop+"):
        switch = name.partition("+")[2]
        if switch not in LoopConfig.SWITCHES:
            raise ConfigError(field_name, name, f"unknown safeguard {switch!r}; one of "
                              f"{LoopConfig.SWITCHES}")
        naive = LoopConfig.naive(max_lessons=base.max_lessons, match_limit=base.match_limit,
                                 skill_cap=base.skill_cap, memory_cap=base.memory_cap,
                                 memory_k=base.memory_k)
        return VariantSpec(name, "loop", store,
                           replace(naive, **{switch: getattr(base, switch)}))
    if name == "naive_loop":
        # the full loop's sizes (lessons, matches, caps, facts retrieved): only the
        # safeguards differ
        return VariantSpec(name, "loop", store, LoopConfig.naive(
            max_lessons=base.max_lessons, match_limit=base.match_limit,
            skill_cap=base.skill_cap, memory_cap=base.memory_cap, memory_k=base.memory_k))
    if name == "self_reflection":
        return VariantSpec(name, "loop", store,
                           replace(base, outcome_gate="self", approval_for_untrusted=False),
                           self_gate=True)
    if name in ("skill_loop-self_gate", "memory_loop-self_gate"):
        # the full loop whose outcome gate trusts the agent's own opinion: the loop without
        # the *verified* outcome gate (every other safeguard on)
        return VariantSpec(name, "loop", name.split("_")[0],
                           replace(base, outcome_gate="self"), self_gate=True)
    if name == "memory_loop-whole_memory":   # every fact in context, not the top memory_k
        return VariantSpec(name, "loop", "memory", replace(base, memory_k=None))
    head, _, switch = name.partition("-no_")
    if head in ("skill_loop", "memory_loop"):
        st = head.split("_")[0]
        if not switch and "-" not in name:
            return VariantSpec(name, "loop", st, base)
        if switch in LoopConfig.SWITCHES:
            return VariantSpec(name, "loop", st, base.ablate(switch))
        raise ConfigError(field_name, name, f"unknown safeguard {switch!r}; one of "
                          f"{LoopConfig.SWITCHES}")
    raise ConfigError(field_name, name, f"unknown variant; one of {BASE_VARIANTS} or "
                      "'<skill|memory>_loop-no_<switch>'")
