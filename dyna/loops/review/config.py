"""The loop's settings: when and how a run is reviewed (:class:`ReviewPolicy`), and every
safeguard as a switch (:class:`LoopConfig`), so experiments can ablate one at a time."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dyna.errors import ConfigError, check_range
from dyna.loops.memory import MemoryStore
from dyna.loops.review.digest import Digest
from dyna.loops.skills import SkillLibrary

__all__ = ["GATES", "MODES", "LoopConfig", "ReviewPolicy"]

GATES = ("verified", "self", "none")
MODES = ("inline", "background")


@dataclass(frozen=True)
class ReviewPolicy:
    """When and how to review a finished run.

    Parameters
    ----------
    outcome_gate : {"verified", "self", "none"}
        ``"verified"``: review only runs with a verified success; ``"self"``: runs the
        agent judged successful (or verified successes); ``"none"``: every run, failures
        included (the naive loop that learns from failures).
    min_tool_calls : int
        Review only runs with at least this many tool calls.
    mode : {"inline", "background"}
        Inline reviews run before :meth:`LearningLoop.finish` returns; background reviews
        run on a worker thread and never block the run.
    """

    outcome_gate: str = "verified"
    min_tool_calls: int = 0
    mode: str = "inline"

    def __post_init__(self):
        if self.outcome_gate not in GATES:
            raise ConfigError("outcome_gate", self.outcome_gate, f"must be one of {GATES}")
        if self.mode not in MODES:
            raise ConfigError("mode", self.mode, f"must be one of {MODES}")
        check_range("min_tool_calls", self.min_tool_calls, 0, None, integer=True)

    def should_review(self, digest: Digest) -> tuple[bool, str]:
        """Whether the policy reviews ``digest``, and why.

        Returns
        -------
        tuple of (bool, str)
            ``(True, "gate passed")``, or False with the reason: produced by a review
            (``review_depth > 0``), fewer tool calls than ``min_tool_calls``, or the
            outcome gate (``"outcome gate: no verified success"`` for ``"verified"``).
        """
        if digest.review_depth > 0:
            return False, "produced by a review: a review never triggers another review"
        if len(digest.tool_calls) < self.min_tool_calls:
            return False, f"{len(digest.tool_calls)} tool calls < {self.min_tool_calls}"
        if self.outcome_gate == "verified" and not (digest.verified and digest.success):
            return False, "outcome gate: no verified success"
        if self.outcome_gate == "self" and not (
                (digest.verified and digest.success) or
                (not digest.verified and digest.self_assessment)):
            return False, "outcome gate: neither verified nor self-assessed success"
        return True, "gate passed"


@dataclass(frozen=True)
class LoopConfig:
    """Every safeguard of the loop as a switch, plus its settings.

    Switches (True = safeguard on): ``outcome_gate`` (a gate name; ``"none"`` is off),
    ``redaction``, ``novelty_check``, ``grading``, ``cap_eviction``, ``dating``,
    ``retire_on_contradiction``, ``approval_for_untrusted``, ``secret_scan``;
    ``consolidation_every`` (episodes; 0 is off), ``max_lessons`` and ``match_limit``.
    :meth:`naive` turns them all off; :meth:`ablate` turns one off.

    Parameters
    ----------
    outcome_gate : {"verified", "self", "none"}
    min_tool_calls : int
    review_mode : {"inline", "background"}
    redaction : bool
        Redact digests (sensitive keys, secret-looking values).
    secret_scan : bool
        Refuse proposals that contain a secret-looking value.
    novelty_check : bool
        Refuse lessons that repeat a stored skill or memory (content-word Jaccard
        >= ``novelty_threshold``, or the same fact).
    novelty_threshold : float
    grading : bool
        Refuse proposals graded below ``grade_threshold``.
    grade_threshold : float
    cap_eviction : bool
        Cap the skill library at ``skill_cap`` and the memory at ``memory_cap`` with
        recorded eviction; off: no caps.
    skill_cap, memory_cap : int
    dating : bool
        Skills not verified for ``max_age_days`` are suspect (score times
        ``suspect_factor``).
    max_age_days : float
    suspect_factor : float
    retire_on_contradiction : bool
        Retire a skill or a memory fact whose competence mean falls below
        ``retire_below`` after a failure (with at least ``retire_min_uses`` outcomes).
    retire_below : float
    retire_min_uses : int
    approval_for_untrusted : bool
        Stage proposals with untrusted provenance instead of writing them.
    consolidation_every : int
        Consolidate the memory every this many episodes (0: never).
    max_lessons : int
        At most this many proposals are considered per run (2).
    match_limit : int
        Skills injected per episode (3).
    memory_k : int or None
        Memory facts a run sees: the ``memory_k`` most relevant to the task (Okapi BM25 of
        the fact's words against the task text, stemmed, :mod:`dyna.loops.bm25`; ties in
        memory order); None (the default): the whole memory in context.
    max_body_chars : int
        Size limit of a skill body.
    allowed_actions : tuple of str or None
        Actions a workflow may use (None: any action name).
    prior, discount, level :
        Of the per-skill competence estimator.
    """

    outcome_gate: str = "verified"
    min_tool_calls: int = 0
    review_mode: str = "inline"
    redaction: bool = True
    secret_scan: bool = True
    novelty_check: bool = True
    novelty_threshold: float = 0.6
    grading: bool = True
    grade_threshold: float = 0.5
    cap_eviction: bool = True
    skill_cap: int = 50
    memory_cap: int = 30
    dating: bool = True
    max_age_days: float = 90.0
    suspect_factor: float = 0.5
    retire_on_contradiction: bool = True
    retire_below: float = 0.4
    retire_min_uses: int = 3
    approval_for_untrusted: bool = True
    consolidation_every: int = 10
    max_lessons: int = 2
    match_limit: int = 3
    memory_k: int | None = None
    max_body_chars: int = 4000
    allowed_actions: tuple[str, ...] | None = None
    prior: object = "uniform"
    discount: float = 1.0
    level: float = 0.95

    SWITCHES = ("outcome_gate", "redaction", "secret_scan", "novelty_check", "grading",
                "cap_eviction", "dating", "retire_on_contradiction", "approval_for_untrusted",
                "consolidation_every")

    def __post_init__(self):
        ReviewPolicy(self.outcome_gate, self.min_tool_calls, self.review_mode)
        for f in ("redaction", "secret_scan", "novelty_check", "grading", "cap_eviction",
                  "dating", "retire_on_contradiction", "approval_for_untrusted"):
            if not isinstance(getattr(self, f), bool):
                raise ConfigError(f, getattr(self, f), "must be true or false")
        for f in ("novelty_threshold", "grade_threshold", "suspect_factor", "retire_below"):
            check_range(f, getattr(self, f), 0.0, 1.0)
        for f, lo in (("skill_cap", 1), ("memory_cap", 1), ("retire_min_uses", 0),
                      ("consolidation_every", 0), ("max_lessons", 0), ("match_limit", 0),
                      ("max_body_chars", 1)):
            check_range(f, getattr(self, f), lo, None, integer=True)
        check_range("max_age_days", self.max_age_days, 0.0, None)
        if self.allowed_actions is not None:
            object.__setattr__(self, "allowed_actions", tuple(self.allowed_actions))
        if self.memory_k is not None:
            check_range("memory_k", self.memory_k, 1, None, integer=True)

    @classmethod
    def naive(cls, **overrides) -> "LoopConfig":
        """Every safeguard off (the naive loop), then ``overrides``."""
        off = dict(outcome_gate="none", redaction=False, secret_scan=False,
                   novelty_check=False, grading=False, cap_eviction=False, dating=False,
                   retire_on_contradiction=False, approval_for_untrusted=False,
                   consolidation_every=0)
        off.update(overrides)
        return cls(**off)

    def ablate(self, switch: str) -> "LoopConfig":
        """This config with one safeguard (a name from :attr:`SWITCHES`) turned off.

        Raises
        ------
        ConfigError
            Unknown switch.
        """
        if switch not in self.SWITCHES:
            raise ConfigError("switch", switch, f"must be one of {self.SWITCHES}")
        value = {"outcome_gate": "none", "consolidation_every": 0}.get(switch, False)
        return replace(self, **{switch: value})

    def policy(self) -> ReviewPolicy:
        """The :class:`ReviewPolicy` of this config."""
        return ReviewPolicy(self.outcome_gate, self.min_tool_calls, self.review_mode)

    def skill_library(self, dir=None, **kwargs) -> SkillLibrary:
        """A :class:`SkillLibrary` (folder ``dir``, created if missing, or in memory) with
        these switches (cap, dating, retirement, competence prior); ``kwargs`` override
        (e.g. ``clock``).

        Raises
        ------
        ConfigError
            A bad keyword value, or a symbolic link in the way of the folder.
        """
        kw = dict(cap=self.skill_cap if self.cap_eviction else None,
                  max_age_days=self.max_age_days if self.dating else None,
                  suspect_factor=self.suspect_factor,
                  retire_below=self.retire_below if self.retire_on_contradiction else None,
                  retire_min_uses=self.retire_min_uses, level=self.level, prior=self.prior,
                  discount=self.discount)
        kw.update(kwargs)
        return SkillLibrary(dir, **kw)

    def memory_store(self, path=None, **kwargs) -> MemoryStore:
        """A :class:`MemoryStore` (file ``path``, created at the first write, or in memory)
        with these switches (cap, retirement, competence prior and discount, as the
        skills'); ``kwargs`` override (e.g. ``clock``).

        Raises
        ------
        ConfigError
            A bad keyword value, ``path`` a folder, or a MEMORY.md line that cannot be read.
        """
        kw = dict(cap=self.memory_cap if self.cap_eviction else None,
                  retire_below=self.retire_below if self.retire_on_contradiction else None,
                  retire_min_uses=self.retire_min_uses, prior=self.prior,
                  discount=self.discount)
        kw.update(kwargs)
        return MemoryStore(path, **kw)
