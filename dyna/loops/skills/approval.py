"""Approval: proposals from untrusted sources wait in a queue until a person approves or
rejects them.

A proposal whose provenance holds an untrusted source (tool output, a web page, a user
file, ...; :func:`dyna.loops.skills.fields.is_untrusted`) is *staged* with a fixed
destination instead of written; :meth:`ApprovalMixin.approve` writes it (trust
``approved``) under the run that proposed it, so an undo of that run reverts it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from dyna.errors import ConfigError
from dyna.loops.skills.fields import is_untrusted
from dyna.loops.skills.history import check_write
from dyna.loops.skills.record import Skill
from dyna.loops.skills.results import AddResult, PendingItem

__all__ = ["ApprovalMixin"]


class ApprovalMixin:
    """The approval queue of a :class:`~dyna.loops.skills.library.SkillLibrary` (a base
    class of it, using its backend, its write lock, its redaction and its log)."""

    def stage(self, skill: Skill, run_id: str = "", provenance: Iterable[str] = (),
              reason: str = "") -> PendingItem:
        """Stage a proposal for approval instead of writing it; its destination (the
        skill name) is fixed now."""
        if not isinstance(skill, Skill):
            raise ConfigError("skill", skill, "must be a Skill")
        check_write(run_id, reason)
        with self._writing():
            self._staged += 1
            taken = set(self.backend.pending_numbers())
            while self._staged in taken:
                self._staged += 1
            prov = tuple(dict.fromkeys(provenance))
            skill = replace(skill, trust="untrusted", source_run=skill.source_run or run_id,
                            provenance=tuple(dict.fromkeys(skill.provenance + prov)))
            skill = self._redactor.clean(skill)
            clean = self._net.values({"provenance": list(prov), "reason": reason})
            now = self._read_clock()
            item = PendingItem(f"p{self._staged:04d}", skill.name, skill, run_id,
                               self._now(now), tuple(clean["provenance"]), clean["reason"])
            self.backend.put_pending(item)
            self._log("stage", item.dest, run_id, f"{item.id}: {reason}".rstrip(": "),
                      now=now)
            return item

    def propose(self, skill: Skill, run_id: str = "", provenance: Iterable[str] = (),
                require_approval: bool = True, reason: str = "") -> AddResult | PendingItem:
        """Write a trusted proposal (create, or patch if the name exists); stage an
        untrusted one (provenance with tool output, web pages or user files) when
        ``require_approval``."""
        provenance = tuple(provenance)
        check_write(run_id, reason)
        if require_approval and is_untrusted(provenance):
            return self.stage(skill, run_id, provenance, reason)
        changes = {}
        prov = tuple(dict.fromkeys(skill.provenance + provenance))
        if prov != skill.provenance:
            changes["provenance"] = prov
        if is_untrusted(provenance) and skill.trust != "untrusted":
            changes["trust"] = "untrusted"
        if changes:   # (a skill's own provenance, again, and its trust: the same skill)
            skill = replace(skill, **changes)
        return self._upsert(skill, run_id, reason, "create")

    def _upsert(self, skill: Skill, run_id: str, reason: str, op: str) -> AddResult:
        """Write ``skill``: a new one through :meth:`add` (logged as ``op``), else over the
        active skill of its name, which keeps its creation date, outcome counts and
        posterior (logged as ``patch``, or ``op`` when that is not ``create``)."""
        with self._writing():
            if skill.name in self._skills:
                old = self._skills[skill.name]
                new = replace(skill, status="active", last_verified=self.today().isoformat(),
                              created=old.created, successes=old.successes,
                              failures=old.failures, a=old.a, b=old.b)
                new = self._commit(op if op != "create" else "patch", new, run_id, reason)
                return AddResult(new)
            return self.add(skill, run_id, reason, op=op)

    def pending(self) -> list[PendingItem]:
        """Staged proposals, oldest first."""
        return self.backend.pending()

    def _pending_item(self, pid: str) -> PendingItem:
        """The staged proposal ``pid``.

        Raises
        ------
        ConfigError
            No staged proposal has this id.
        """
        for item in self.pending():
            if item.id == pid:
                return item
        raise ConfigError("id", pid, "no pending proposal with this id")

    def approve(self, pid: str, reason: str = "approved") -> AddResult:
        """Write a staged proposal to its fixed destination (trust becomes ``approved``).

        The change is recorded under the run that proposed it, so :meth:`undo_run` of that
        run also reverts it.

        Raises
        ------
        ConfigError
            Unknown id, or a pending record whose skill name differs from its destination.
        """
        with self._writing():
            item = self._pending_item(pid)
            if item.skill.name != item.dest:
                raise ConfigError("dest", item.skill.name,
                                  f"pending {pid} was staged for {item.dest!r}")
            skill = replace(item.skill, trust="approved")
            result = self._upsert(skill, item.run_id, f"{pid}: {reason}", "approve")
            self.backend.drop_pending(pid)
            return result

    def reject(self, pid: str, reason: str = "rejected") -> PendingItem:
        """Drop a staged proposal (recorded in the history).

        Raises
        ------
        ConfigError
            Unknown id.
        """
        with self._writing():
            item = self._pending_item(pid)
            now = self._read_clock()   # (a clock that fails, fails before the drop)
            self.backend.drop_pending(pid)
            self._log("reject", item.dest, item.run_id, f"{pid}: {reason}", None, now)
            return item

