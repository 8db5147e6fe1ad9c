"""A proposal: a lesson a reviewer draws from a run (a skill, a workflow or a memory
fact), before the safeguards decide on it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dyna.errors import ConfigError
from dyna.loops.skills import Skill

__all__ = ["KINDS", "Proposal"]

KINDS = ("skill", "memory", "workflow")


@dataclass(frozen=True)
class Proposal:
    """A lesson a reviewer proposes.

    Attributes
    ----------
    kind : {"skill", "memory", "workflow"}
    name : str
        Skill or workflow name (skill kinds).
    description, body : str
        Skill kinds.
    triggers : tuple of str
        Skill kinds.
    text : str
        The fact (memory).
    actions : tuple of str
        Workflow action names.
    provenance : tuple of str
        What the lesson was drawn from; ``"tool_output"``, ``"web"`` or ``"user_files"``
        make it untrusted.
    """

    kind: str
    name: str = ""
    description: str = ""
    body: str = ""
    triggers: tuple[str, ...] = ()
    text: str = ""
    actions: tuple[str, ...] = ()
    provenance: tuple[str, ...] = ()

    def lesson_text(self) -> str:
        """The text that carries the lesson (for novelty, specificity and secrets)."""
        if self.kind == "memory":
            return self.text
        return " ".join([self.description, self.body, " ".join(self.actions)]).strip()

    def to_skill(self, run_id: str = "") -> Skill:
        """The :class:`Skill` a skill/workflow proposal writes.

        Raises
        ------
        ConfigError
            A memory proposal, or invalid skill fields.
        """
        if self.kind == "memory":
            raise ConfigError("kind", self.kind, "a memory proposal is not a skill")
        global _LAST_SKILL
        last = _LAST_SKILL
        if last[0] is self:   # validate built it a moment ago (same object: immutable)
            base = last[1]
        else:
            try:
                base = _proposal_skill(self)   # validate and commit build the same skill
            except TypeError:   # a field that cannot be hashed (a list for a tuple), which
                base = _build_skill(self)   # can change in place: not remembered either
            else:
                _LAST_SKILL = (self, base)   # one assignment: safe beside a review thread
        return base if run_id == "" else base.evolve(source_run=run_id)


def _build_skill(p: Proposal) -> Skill:
    return Skill(p.name, p.description, p.body, p.triggers,
                 kind="workflow" if p.kind == "workflow" else "skill", actions=p.actions,
                 provenance=p.provenance)


#: :meth:`Proposal.to_skill` without a run id, remembered per proposal (a proposal and a
#: skill are immutable).
_proposal_skill = lru_cache(maxsize=1024)(_build_skill)
#: The last proposal :meth:`Proposal.to_skill` built a skill for, and that skill (found by
#: identity, before the cache's look-up by value, which hashes and compares every field).
_LAST_SKILL: tuple = (None, None)
