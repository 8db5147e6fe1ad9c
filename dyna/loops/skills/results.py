"""What the skill library's methods hand back: the result of an add, a history entry,
a staged proposal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dyna.loops.skills.record import Skill

__all__ = ["AddResult", "HistoryEntry", "PendingItem"]


@dataclass(frozen=True)
class AddResult:
    """What :meth:`SkillLibrary.add` did.

    Attributes
    ----------
    skill : Skill
        The skill as written.
    evicted : Skill or None
        The skill evicted to make room at the cap (moved to the retired folder).
    """

    skill: Skill
    evicted: Skill | None = None


@dataclass(frozen=True)
class HistoryEntry:
    """One change in the append-only history.

    Attributes
    ----------
    seq : int
        1, 2, ... in order of the change.
    time : str
        ISO 8601 timestamp (library clock).
    op : str
        ``create``, ``patch``, ``outcome``, ``retire``, ``restore``, ``evict``, ``stage``,
        ``approve``, ``reject`` or ``undo``.
    name : str
        The skill (or, for ``stage``/``reject``, the staged destination).
    run_id : str
        The run that caused the change (``undo:<run>`` for an undo).
    reason : str
    before, after : object
        In memory: the :class:`Skill` before and after (None for a library folder).
    change : mapping
        For a library folder: the change as recorded (``diff``, a unified diff of the
        SKILL.md text as a list of lines; ``loc_before``/``loc_after``, ``"active"``,
        ``"retired"`` or None; ``sha_after``; ``book_before``/``book_after``, the
        bookkeeping in the state file); empty for ``stage``/``reject``.
    """

    seq: int
    time: str
    op: str
    name: str
    run_id: str
    reason: str
    before: object = field(default=None, repr=False, compare=False)
    after: object = field(default=None, repr=False, compare=False)
    change: Mapping = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class PendingItem:
    """A proposal staged for approval.

    Attributes
    ----------
    id : str
        ``p0001``, ``p0002``, ... in staging order.
    dest : str
        The skill name it will be written to; fixed when staged.
    skill : Skill
    run_id : str
    staged_at : str
    provenance : tuple of str
    reason : str
    """

    id: str
    dest: str
    skill: Skill
    run_id: str
    staged_at: str
    provenance: tuple[str, ...]
    reason: str = ""

    @property
    def summary(self) -> str:
        """One line: ``skill NAME: DESCRIPTION`` (what an approver is asked about; the
        whole text is in :attr:`skill`, shown by ``dyna skills pending``)."""
        return f"{self.skill.kind} {self.dest}: {' '.join(self.skill.description.split())}"
