"""A proposal: a lesson a reviewer draws from a run (a skill, a workflow or a memory
fact), before the safeguards decide on it."""

from __future__ import annotations

from dataclasses import dataclass

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
        skill = Skill(self.name, self.description, self.body, self.triggers,
                      kind="workflow" if self.kind == "workflow" else "skill",
                      actions=self.actions, provenance=self.provenance)
        return skill if run_id == "" else skill.evolve(source_run=run_id)
