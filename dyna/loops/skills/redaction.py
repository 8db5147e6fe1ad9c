"""The redaction of a skill library: every skill text that enters it goes through its
always-on safety net (:class:`dyna.loops.safety_net.SafetyNet`) first.

A skill's free-text values (description, body, triggers, run, provenance, retired reason
and the other frontmatter values) are redacted; its ``name`` is an identifier and kept.
Text enters a library where a skill is written with text of its own (created, patched,
staged, approved, retired with a reason, restored, evicted) and where a skill is read
from a file (at open, when the folder is re-read, at an undo): the library scans it
there (:meth:`SkillRedactor.clean`), so every skill it holds has been through the net.
A change of a held skill's numbers alone (an outcome) brings no new text and is not
scanned again (:meth:`SkillRedactor.recheck`).
"""

from __future__ import annotations

from dataclasses import replace

from dyna.loops.safety_net import SafetyNet
from dyna.loops.skills.fields import frozen_values
from dyna.loops.skills.record import Skill

__all__ = ["SkillRedactor"]


class SkillRedactor:
    """The safety net of one library.

    Attributes
    ----------
    net : SafetyNet
        Its ``counts`` are the library's :attr:`~SkillLibrary.redactions`.
    """

    def __init__(self):
        self.net = SafetyNet()

    def clean(self, skill: Skill) -> Skill:
        """``skill`` with every free-text frontmatter value and the body redacted (the
        schema field ``name`` is kept: an identifier, not a person's name); the net counts
        what it catches."""
        net = self.net
        fields = {"description": skill.description, "body": skill.body,
                  "triggers": list(skill.triggers), "source_run": skill.source_run,
                  "provenance": list(skill.provenance), "retired_reason": skill.retired_reason}
        out = net.values(fields)
        extra = net.free(dict(skill.extra)) if skill.extra else {}
        meta = net.free(dict(skill.extra_metadata)) if skill.extra_metadata else {}
        if out is fields and extra == dict(skill.extra) and meta == dict(skill.extra_metadata):
            return skill
        return replace(skill, description=out["description"], body=out["body"],
                       triggers=tuple(out["triggers"]), source_run=out["source_run"],
                       provenance=tuple(out["provenance"]),
                       retired_reason=out["retired_reason"], extra=tuple(extra.items()),
                       extra_metadata=tuple(meta.items()))

    def recheck(self, skill: Skill) -> Skill:
        """``skill``, a copy of a skill the library holds (so netted) whose numbers alone
        changed: returned as it is, unless a value of its ``extra`` or ``extra_metadata``
        is a list, dict or other object that can change in place (the skill is frozen,
        its values need not be), which may have changed since the scan; then
        :meth:`clean`."""
        if frozen_values(skill.extra) and frozen_values(skill.extra_metadata):
            return skill
        return self.clean(skill)
