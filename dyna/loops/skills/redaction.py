"""The redaction of a skill library: every skill it writes goes through its always-on
safety net (:class:`dyna.loops.safety_net.SafetyNet`) first.

A skill's free-text values (description, body, triggers, run, provenance, retired reason
and the other frontmatter values) are redacted; its ``name`` is an identifier and kept.
:class:`SkillRedactor` remembers which skill objects went through the net already, so a
skill written again (an outcome changes only its numbers) is not scanned twice and its
catches are counted once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from dyna.loops.safety_net import SafetyNet
from dyna.loops.skills.fields import frozen_values
from dyna.loops.skills.record import Skill
from dyna.redact import known_clean, scan_found

__all__ = ["SkillRedactor"]


class SkillRedactor:
    """The safety net of one library, and the skills that went through it.

    Parameters
    ----------
    live : tuple of Mapping[str, Skill]
        The library's skills (active, retired), read when the memory of cleaned skills is
        pruned to those still in the library.

    Attributes
    ----------
    net : SafetyNet
        Its ``counts`` are the library's :attr:`~SkillLibrary.redactions`.
    cleaned : dict of int to Skill
        Skills (by ``id``) whose text went through the net. Strong references (an id is
        not reused while its skill is here), pruned to the skills in the library when it
        outgrows them (:meth:`mark_clean`).
    """

    def __init__(self, live: tuple[Mapping[str, Skill], ...]):
        self.net = SafetyNet()
        self.live = live
        self.cleaned: dict[int, Skill] = {}
        self.cleaned_limit = 256
        # (description, body, triggers) of skills the net passed unchanged, by value (exact
        # strings only: a str subclass could compare equal to a text it is not); at most
        # 1,024 kept. The library holds these texts anyway, and they hold no catch.
        self.clean_texts: dict[tuple, None] = {}

    def clean(self, skill: Skill) -> Skill:
        """``skill`` with every free-text frontmatter value and the body redacted (the
        schema field ``name`` is kept: an identifier, not a person's name)."""
        if self.cleaned.get(id(skill)) is skill:   # its text was through the safety net
            return skill
        net = self.net
        texts = None
        if (not skill.extra and not skill.extra_metadata and type(skill.description) is str
                and type(skill.body) is str and type(skill.triggers) is tuple
                and all(type(t) is str for t in skill.triggers)):
            texts = (skill.description, skill.body, skill.triggers)
        if texts is not None and texts in self.clean_texts:
            # the same description, body and triggers came through the net unchanged
            # before, in a skill with nothing else to catch: the scan of the whole record
            # is theirs (nothing) plus the rest's, entry by entry (the rest's keys are
            # no cue of any detector, so each value is scanned alone; a short or
            # known-clean text, a run id most often, is not scanned again)
            rest = (skill.source_run, skill.retired_reason, *skill.provenance)
            if all(map(known_clean, rest)) or not scan_found(
                    {"source_run": skill.source_run, "provenance": list(skill.provenance),
                     "retired_reason": skill.retired_reason}):
                self.mark_clean(skill)
                return skill
        fields = {"description": skill.description, "body": skill.body,
                  "triggers": list(skill.triggers), "source_run": skill.source_run,
                  "provenance": list(skill.provenance), "retired_reason": skill.retired_reason}
        out = net.values(fields)
        extra = net.free(dict(skill.extra)) if skill.extra else {}
        meta = net.free(dict(skill.extra_metadata)) if skill.extra_metadata else {}
        if out is fields and extra == dict(skill.extra) and meta == dict(skill.extra_metadata):
            self.mark_clean(skill)
            if texts is not None:
                if len(self.clean_texts) >= 1024:
                    self.clean_texts.clear()
                self.clean_texts[texts] = None
            return skill
        clean = replace(skill, description=out["description"], body=out["body"],
                        triggers=tuple(out["triggers"]), source_run=out["source_run"],
                        provenance=tuple(out["provenance"]),
                        retired_reason=out["retired_reason"], extra=tuple(extra.items()),
                        extra_metadata=tuple(meta.items()))
        self.mark_clean(clean)
        return clean

    def mark_clean(self, skill: Skill) -> None:
        """Remember that ``skill``'s text went through the net; past a limit, forget every
        skill that is not in the library (active or retired) any more, so the memory stays
        within about twice the library's size."""
        if ((skill.extra and not frozen_values(skill.extra))
                or (skill.extra_metadata and not frozen_values(skill.extra_metadata))):
            # a list or dict among them can change after this scan (the skill is frozen,
            # its values need not be): such a skill is scanned on every write
            return
        memo = self.cleaned
        memo[id(skill)] = skill
        if len(memo) > self.cleaned_limit:
            keep = {id(s): s for d in self.live for s in d.values()
                    if memo.get(id(s)) is s}
            keep[id(skill)] = skill
            self.cleaned = keep
            self.cleaned_limit = 2 * len(keep) + 256

    def pass_on(self, old: Skill, new: Skill) -> bool:
        """When ``old`` went through the net, let ``new`` (a copy of it whose numbers
        changed, not its text) take its place in :attr:`cleaned`, and return True; False
        when ``old`` was not there. The memory then holds the skill as it is now, not one
        copy per outcome."""
        if self.cleaned.get(id(old)) is not old:
            return False
        del self.cleaned[id(old)]
        self.mark_clean(new)
        return True
