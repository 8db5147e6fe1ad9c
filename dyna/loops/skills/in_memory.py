"""The in-memory backend of a skill library: skills, history and pending proposals held
in memory, for simulations with many episodes (no files)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from dyna.loops.skills.record import Skill
from dyna.loops.skills.results import PendingItem

__all__ = ["MemorySkillBackend"]


class _Later:
    """A history record still to make: ``build(*args)`` (:meth:`MemorySkillBackend.
    append_history_later`)."""

    __slots__ = ("build", "args")

    def __init__(self, build, args):
        self.build = build
        self.args = args


class MemorySkillBackend:
    """Skills, history and pending proposals held in memory (no files).

    The state of a skill is the :class:`Skill` object itself (or None); a history record
    keeps the objects before and after a change (``before``/``after``)."""

    location = None
    lock = None

    def __init__(self):
        self._skills: dict[str, Skill] = {}
        self._history: list = []   # records, and records still to make (_Later)
        self._later_from = 0   # every record before this index is made
        self._later_lock = threading.Lock()
        self._pending: dict[str, PendingItem] = {}

    def scan(self):
        """(skills sorted by name, no errors, no warnings)."""
        return [self._skills[k] for k in sorted(self._skills)], [], []

    def mark(self):
        """None: no other process writes to memory."""
        return None

    def tail(self) -> dict | None:
        """The last history record (None when there is none)."""
        hist = self.made()
        return hist[-1] if hist else None

    def write(self, skill: Skill, *, content: bool = True, log: bool = True,
              clean=None) -> dict:
        """Put ``skill`` in place; the change record holds the objects before and after."""
        before = self._skills.get(skill.name)
        self._skills[skill.name] = skill
        return {"before": before, "after": skill}

    def matches(self, name: str, rec: dict) -> bool:
        """True when ``name`` is now as the change ``rec`` left it."""
        return self._skills.get(name) == rec.get("after")

    def revert(self, name: str, records: list[dict], clean=None) -> tuple[Skill | None, dict]:
        """Put back what ``name`` was before the oldest of ``records`` (newest first);
        returns it (None: no skill) and the change record of the undo."""
        before = self._skills.get(name)
        target = records[-1].get("before")
        if target is None:
            self._skills.pop(name, None)
        else:
            self._skills[name] = target
        return target, {"before": before, "after": target}

    def append_history(self, rec: dict) -> None:
        """Append a history record."""
        self._history.append(rec)

    def append_history_later(self, build: Callable[..., dict], *args) -> None:
        """Append the record ``build(*args)`` makes, made when the history is first read
        (:meth:`tail`, :meth:`history`): nothing here reaches a file, and a run that never
        reads its history never pays for its records (the redaction of each, its time's
        text). ``args`` must be immutable, or left unchanged by the caller from now on."""
        self._history.append(_Later(build, args))

    def made(self) -> list[dict]:
        """The records appended so far, each made now if it was still to make (a copy of
        the list)."""
        hist = self._history
        with self._later_lock:   # one thread makes a record, once
            end = len(hist)   # (a record another thread appends now: the next read's)
            for i in range(self._later_from, end):
                rec = hist[i]
                if type(rec) is _Later:
                    hist[i] = rec.build(*rec.args)
            self._later_from = end
        return hist[:end]

    def history(self) -> list[dict]:
        """Every history record, oldest first."""
        return self.made()

    def put_pending(self, item: PendingItem) -> None:
        """Keep a staged proposal."""
        self._pending[item.id] = item

    def pending(self) -> list[PendingItem]:
        """Staged proposals, by id."""
        return [self._pending[k] for k in sorted(self._pending)]

    def drop_pending(self, pid: str) -> None:
        """Forget the staged proposal ``pid`` (no-op if absent)."""
        self._pending.pop(pid, None)

    def pending_numbers(self) -> list[int]:
        """The numbers of the staged proposals' ids."""
        return [int(k[1:]) for k in self._pending]
