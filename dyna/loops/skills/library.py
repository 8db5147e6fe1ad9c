"""The skill library: procedures an agent keeps between runs, as Agent Skills SKILL.md
files, with matching, competence, a cap, dating, history and approval.

:class:`SkillLibrary` keeps its skills in a folder (:class:`~dyna.loops.skills.
file_backend.FileSkillBackend`, the layout is described there) or in memory
(:class:`~dyna.loops.skills.in_memory.MemorySkillBackend`, ``SkillLibrary(None)``): the
same code path either way. Its matching is :mod:`dyna.loops.skills.matching`'s, its
approval queue :mod:`dyna.loops.skills.approval`'s, its history and undo
:mod:`dyna.loops.skills.history`'s.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import operator
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from dyna.competence import BetaCompetence
from dyna.errors import ConfigError, MissingFileError, check_range
from dyna.fileio.jsonfiles import CorruptFileError
from dyna.loops.provenance import skeleton
from dyna.loops.retirement import retirement_reason
from dyna.loops.skills.approval import ApprovalMixin
from dyna.loops.skills.file_backend import FileSkillBackend
from dyna.loops.skills.history import HistoryMixin, append_record, check_write
from dyna.loops.skills.in_memory import MemorySkillBackend
from dyna.loops.skills.matching import MatchIndex, SkillMatcher, SkillSnapshot
from dyna.loops.skills.names import FoldedNames
from dyna.loops.skills.nested import nested_folders_warning
from dyna.loops.skills.record import Skill
from dyna.loops.skills.redaction import SkillRedactor
from dyna.loops.skills.results import AddResult
from dyna.loops.skills.skill_md import LoadWarning

__all__ = ["SkillLibrary"]

_NAME = operator.attrgetter("name")


def _look_alikes(skills: list, backend) -> list:
    """A :class:`LoadWarning` for each skill whose name has the confusable skeleton of an
    earlier one (``deploy`` and ``dep1oy``)."""
    seen: dict[str, str] = {}
    out = []
    for s in sorted(skills, key=lambda s: s.name):
        k = skeleton(s.name)
        if k in seen and seen[k] != s.name:
            path = backend.path(s.name, not s.active) if backend.location else s.name
            out.append(LoadWarning(str(path), "look-alike-name",
                                   f"name {s.name!r} looks like {seen[k]!r} (same "
                                   "confusable skeleton); both loaded"))
        seen.setdefault(k, s.name)
    return out


def _weakest(skills: dict[str, Skill], competence: BetaCompetence,
             level: float) -> Skill | None:
    """The eviction candidate among the active ``skills``: the loop-written skill (one with
    a ``source_run``, approved or not) with the lowest competence lower bound at credible
    level ``level`` (then oldest, then name). A skill a person wrote (no ``source_run``) is
    never evicted; None when only such skills are left."""
    names = sorted(n for n, s in skills.items() if s.source_run)
    if not names:
        return None
    lb = competence.lower_bound(names, level)
    order = sorted(range(len(names)), key=lambda i: (lb[i], skills[names[i]].created, names[i]))
    return skills[names[order[0]]]


def _utc_now() -> _dt.datetime:
    """Now, in UTC."""
    return _dt.datetime.now(_dt.timezone.utc)


def library_folder(dir, create: bool = False) -> Path:
    """The library folder ``dir`` as a Path, checked: its parent folder must exist unless
    ``create`` (then :class:`SkillLibrary` makes the missing folders), as
    :class:`dyna.experience.ExperienceStore` never makes its file's folder, so a mistyped
    path leaves no new folder tree behind.

    Raises
    ------
    MissingFileError
        The parent folder is missing and ``create`` is False (field ``dir``, the folder).
    """
    path = Path(dir)
    if not create and not path.parent.is_dir():
        raise MissingFileError("dir", path.parent, "no such folder (the library's parent "
                               "folder is made only with create=True)")
    return path


class SkillLibrary(FoldedNames, ApprovalMixin, HistoryMixin, SkillMatcher):
    """A library of skills with matching, competence, a cap, dating, history and approval.

    Parameters
    ----------
    dir : str or Path or None
        Library folder (made if missing; its missing parents only with ``create``, else
        :class:`dyna.errors.MissingFileError` names them); None keeps everything in memory.
    cap : int or None
        Maximum number of active skills; at the cap a new skill replaces the weakest one
        (lowest lower credible bound of competence, then oldest ``created``, then name),
        and the eviction is recorded. None: no cap.
    max_age_days : float or None
        Dating: a skill not verified for longer is *suspect* and scores
        ``suspect_factor`` times less in :meth:`match`. None: no dating.
    suspect_factor : float
        In [0, 1].
    retire_below : float or None
        Retire on contradiction: after a failure, a skill with at least
        ``retire_min_uses`` outcomes whose posterior mean competence ``a / (a + b)`` is
        below this is retired. None: never.
    retire_min_uses : int
    level : float
        Credible level of the lower bound used for eviction, in (0, 1).
    prior, discount :
        Of the :class:`dyna.competence.BetaCompetence` estimator (Beta prior, and the
        per-update evidence discount in (0, 1]).
    clock : callable returning an aware datetime, optional
        Time source (UTC now by default); tests and simulations pass their own.
    log_outcomes : bool
        Record every outcome report in the history (so :meth:`undo_run` also reverts a
        run's outcome counts). Simulations with very many episodes may turn it off.
    durable : bool
        fsync every file write (folder backend).

    Attributes
    ----------
    errors : list of FrontmatterError
        Skill files that could not be read at load time; each names the file, the line
        and the field. They count in :meth:`summary`.
    warnings : list of LoadWarning
        Skill files loaded although they break a rule (a description over 1,024
        characters, a name that differs from its folder, a look-alike name, unknown
        top-level fields), and, found at open, SKILL.md files in nested folders, not read
        (:func:`~dyna.loops.skills.nested.nested_folders_warning`).
    competence : BetaCompetence
        Per-skill posteriors, keyed by skill name.
    redactions : dict of str to int
        Catches of the always-on redaction safety net, per detector name: every skill
        written (description, body, triggers and the other frontmatter values; the schema
        field ``name`` is an identifier, never redacted), every staged proposal and every
        history record is redacted first (:class:`dyna.loops.safety_net.SafetyNet`). A ``run_id``
        holding a secret is refused (:func:`dyna.redact.check_label`): undo finds runs by it.

    Several processes (or several objects) may share one folder: every write holds the
    folder's file lock (:func:`dyna.fileio.lock.library_lock`, ``.dyna/lock``) and first
    re-reads the folder when anyone else wrote to it since; reads use the state as of the
    last write or :meth:`refresh`.

    Raises
    ------
    ConfigError
        Bad parameters; :class:`dyna.fileio.paths.SymlinkError` for a symbolic link below the
        folder in the way of a write.
    CorruptFileError
        ``.dyna/history.jsonl``, ``.dyna/state.json`` or a pending file cannot be read
        (names the file and the line; at open or at the write that reads it).
    LibraryLockTimeout
        Another writer held the lock for longer than 30 s.
    """

    def __init__(self, dir=None, *, cap: int | None = None, max_age_days: float | None = None,
                 suspect_factor: float = 0.5, retire_below: float | None = 0.4,
                 retire_min_uses: int = 3, level: float = 0.95, prior="uniform",
                 discount: float = 1.0, clock: Callable[[], _dt.datetime] | None = None,
                 log_outcomes: bool = True, durable: bool = True, create: bool = False):
        if cap is not None:
            cap = check_range("cap", cap, 1, None, integer=True)
        if max_age_days is not None:
            check_range("max_age_days", max_age_days, 0, None)
        if retire_below is not None:
            check_range("retire_below", retire_below, 0.0, 1.0)
        self.cap = cap
        self.max_age_days = max_age_days
        self.suspect_factor = float(check_range("suspect_factor", suspect_factor, 0.0, 1.0))
        self.retire_below = retire_below
        self.retire_min_uses = check_range("retire_min_uses", retire_min_uses, 0, None,
                                           integer=True)
        self.level = float(check_range("level", level, 0.0, 1.0, lo_open=True, hi_open=True))
        self.competence = BetaCompetence(prior, discount)
        self._clock = clock or _utc_now
        self.log_outcomes = bool(log_outcomes)
        self.backend = (MemorySkillBackend() if dir is None
                        else FileSkillBackend(library_folder(dir, create), durable=durable))
        self._lock = threading.RLock()
        self._flock = self.backend.lock
        self._depth = 0
        self._mark = None
        self._skills: dict[str, Skill] = {}
        self._retired: dict[str, Skill] = {}
        self._redactor = SkillRedactor()
        self._net = self._redactor.net
        self._skeletons: dict[str, set[str]] = {}   # skeleton -> names, active or retired
        self._journal: list[str] = []   # names placed since _journal_base (placed_since)
        self._journal_base = 0
        self._by_name: tuple | None = None   # (journal mark, active skills by name)
        self._index = MatchIndex()
        self._shared = False
        self.errors: list = []
        self.warnings: list[LoadWarning] = []
        self._nested: list[LoadWarning] = []
        self._seq = self._staged = 0
        if self.location is not None:
            self.backend.history()      # a corrupt log is reported at once (file and line)
            self._refresh(force=True)

    # ------------------------------------------------------------------ processes
    def _writing(self):
        """Hold the thread lock and, for a folder, the library's file lock
        (:func:`dyna.fileio.lock.library_lock`) around a write, re-reading the library first
        when another process (or library object) wrote since we last looked."""
        if self._flock is None:   # in memory: the (re-entrant) thread lock alone
            return self._lock
        return self._writing_folder()

    @contextlib.contextmanager
    def _writing_folder(self):
        with self._lock:
            with self._flock:
                outer = self._depth == 0
                if outer:
                    self._refresh()
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                    if outer:
                        self._mark = self.backend.mark()

    def refresh(self) -> None:
        """Re-read the library folder now if anyone wrote to it since this object last
        looked (writes do this by themselves, under the file lock).

        Raises
        ------
        CorruptFileError
            The state file or the history cannot be read (file and line).
        """
        with self._lock:
            if self._flock is None:
                return
            with self._flock:
                self._refresh()

    def _refresh(self, force: bool = False) -> None:
        mark = self.backend.mark()
        if not force and mark == self._mark:
            return
        skills, self.errors, warnings = self.backend.scan()
        if force:   # at open (a run does not change the folders' layout)
            self._nested = list(filter(None, [nested_folders_warning(self.location)]))
        self.warnings = warnings + _look_alikes(skills, self.backend) + self._nested
        gone = (set(self._skills) | set(self._retired)) - {s.name for s in skills}
        for name in gone:
            self._place(None, name)
        for s in skills:   # text read from a file enters here: through the net first
            self._place(self._redactor.clean(s))
        tail = self.backend.tail()
        path = self.location / ".dyna" / "history.jsonl"
        if tail is not None and (not isinstance(tail.get("seq"), int)
                                 or isinstance(tail.get("seq"), bool)):
            raise CorruptFileError(path, None, "last history record has no valid 'seq'")
        self._seq = tail["seq"] if tail else 0
        if tail is not None and isinstance(tail.get("staged"), int):
            staged = tail["staged"]
        else:   # a log written by an older dyna: count its stage records
            staged = sum(1 for h in self.backend.history() if h["op"] == "stage")
        self._staged = max([staged] + self.backend.pending_numbers())
        self._mark = mark

    @classmethod
    def in_memory(cls, **kwargs) -> "SkillLibrary":
        """A library with no files (same behaviour, for simulations)."""
        return cls(None, **kwargs)

    # ------------------------------------------------------------------ reading
    @property
    def location(self) -> Path | None:
        """The library folder (None in memory)."""
        return self.backend.location

    def _active_by_name(self) -> tuple[Skill, ...]:
        """The active skills sorted by name, as :meth:`skills` gives them, built again only
        after a placement (every change of ``_skills`` goes through :meth:`_place`, which
        advances the journal's mark)."""
        mark = self._journal_base + len(self._journal)
        got = self._by_name
        if got is None or got[0] != mark:
            got = self._by_name = (mark, tuple(sorted(self._skills.values(), key=_NAME)))
        return got[1]

    def skills(self, include_retired: bool = False) -> list[Skill]:
        """Active skills (and retired ones if asked), sorted by name."""
        out = list(self._skills.values())
        if include_retired:
            out += list(self._retired.values())
        # a name is active or retired, never both: (name, status) orders as name alone
        out.sort(key=_NAME)
        return out

    def look_alikes(self, name: str) -> list[Skill]:
        """The active and retired skills whose name has the confusable skeleton of
        ``name`` (:func:`dyna.loops.provenance.skeleton`; a skill called ``name`` among
        them), sorted by name."""
        names = self._skeletons.get(skeleton(name), ())
        return sorted((self._skills.get(n) or self._retired[n] for n in names), key=_NAME)

    def summary(self) -> dict:
        """Counts shown to users: ``active``, ``retired``, ``pending``, ``failed`` (files
        that could not be read), ``warned`` (loaded with a :class:`LoadWarning`, counted
        among active or retired too) and ``total`` (active + retired + failed)."""
        d = {"active": len(self._skills), "retired": len(self._retired),
             "pending": len(self.pending()), "failed": len(self.errors),
             "warned": len({w.path for w in self.warnings if w.rule != "nested-folders"})}
        d["total"] = d["active"] + d["retired"] + d["failed"]
        return d

    def posterior(self, name: str) -> tuple[float, float]:
        """Beta posterior ``(a, b)`` of a skill's competence."""
        return self.competence.posterior(name)

    def snapshot(self) -> SkillSnapshot:
        """A frozen view of the active skills now (copy-on-write: O(n) once)."""
        with self._lock:
            self._shared = True
            return SkillSnapshot(dict(self._skills), self._index, self.max_age_days,
                                 self.suspect_factor, self._clock)

    # ------------------------------------------------------------------ internals
    def placed_since(self, mark: int | None) -> tuple[list[str] | None, int]:
        """The names of the skills whose in-memory state changed (written, counted,
        retired, restored, evicted, removed, re-read) since ``mark``, oldest first, with
        repeats, and the mark of now; None instead of the names when ``mark`` is None or
        older than the journal kept (then look at every skill). For a reader that keeps a
        view of the library up to date (the agent-task audit)."""
        end = self._journal_base + len(self._journal)
        if mark is None or mark < self._journal_base:
            return None, end
        return self._journal[mark - self._journal_base:], end

    def _place(self, skill: Skill | None, name: str | None = None, *,
               posterior_held: bool = False) -> None:
        """Put ``skill`` in the in-memory view (index, competence); None removes ``name``.
        ``posterior_held``: the competence estimator holds ``(skill.a, skill.b)`` for it
        already (an outcome just updated both), so that check is skipped."""
        name = skill.name if skill is not None else name
        journal = self._journal
        if len(journal) >= 4096 + 4 * (len(self._skills) + len(self._retired)):
            self._journal_base += len(journal)   # older marks now read everything again
            journal.clear()
        journal.append(name)
        old = self._skills.get(name) if skill is not None else None
        if (old is not None and skill.active and old.triggers == skill.triggers
                and old.description == skill.description):
            # still active, indexed under the same triggers and description (an outcome, a
            # patched body): the index is unchanged, and the skill keeps its place (every
            # reader sorts by name; a dict without holes is copied in one block by the
            # next snapshot, ~1 us for 300 skills against ~10 with the holes a removal
            # and an insertion leave)
            self._skills[name] = skill
            comp = self.competence
            if posterior_held:
                return
            if skill.a is None:
                comp.reset(name)
            elif name not in comp or comp.posterior(name) != (skill.a, skill.b):
                comp.set_posterior(name, skill.a, skill.b)   # else it holds them already
            return
        if self._shared:
            self._index = self._index.copy()
            self._shared = False
        self._skills.pop(name, None)
        self._retired.pop(name, None)
        self._index.remove(name)
        if skill is None:
            same = self._skeletons.get(skeleton(name))
            if same is not None:
                same.discard(name)
            self.competence.reset(name)
            return
        self._skeletons.setdefault(skeleton(name), set()).add(name)
        if skill.active:
            self._skills[name] = skill
            self._index.add(skill)
        else:
            self._retired[name] = skill
        if skill.a is not None:
            self.competence.set_posterior(name, skill.a, skill.b)
        else:
            self.competence.reset(name)

    def _now(self, now: _dt.datetime | None = None) -> str:
        """The ISO text of ``now`` (else the clock's time) to the second, by
        :class:`datetime.datetime`'s own ``isoformat`` whatever a subclass overrides: only
        digits and ``-:T+`` (the history record relies on it)."""
        if now is None:
            now = self._read_clock()
        return _dt.datetime.isoformat(now, timespec="seconds")

    @property
    def redactions(self) -> dict[str, int]:
        """Catches of the redaction safety net so far, per detector name."""
        made = getattr(self.backend, "made", None)
        if made is not None:
            made()   # the in-memory history's records still to make are scanned now
        return dict(self._net.counts)

    def _commit(self, op: str, skill: Skill, run_id: str, reason: str = "", *,
                content: bool = True, netted: bool = False) -> Skill:
        """Write ``skill`` (or, ``content`` False, only its bookkeeping and status),
        redacted (``netted``: it was, by the caller), and log the change; returns the
        skill as written."""
        check_write(run_id, reason)
        now = self._read_clock()   # (a clock that fails, fails before the write)
        if not netted:
            skill = self._redactor.clean(skill)
        change = self.backend.write(skill, content=content, clean=self._net.values)
        self._place(skill)
        self._log(op, skill.name, run_id, reason, change, now)
        return skill

    def _log(self, op, name, run_id, reason, change: dict | None = None,
             now: _dt.datetime | None = None) -> None:
        """Append the history record of a change made at ``now`` (read from the clock
        once, by the caller before it changed anything, or here)."""
        if now is None:
            now = self._read_clock()
        self._seq += 1
        append_record(self.backend, self._net, now, self._seq, op, name, run_id, reason,
                      self._staged, change)

    def _make_room(self, incoming: str, run_id: str) -> Skill | None:
        """At the cap, evict the weakest loop-written skill for ``incoming`` and return it
        (None: below the cap, no cap, or only skills a person wrote)."""
        if self.cap is None or len(self._skills) < self.cap:
            return None
        victim = _weakest(self._skills, self.competence, self.level)
        if victim is None:   # only skills a person wrote or approved: stay over the cap
            return None
        reason = f"evicted at cap {self.cap} for {incoming}"
        self._commit("evict", replace(victim, status="retired", retired_reason=reason),
                     run_id, reason, content=False)
        return victim

    # ------------------------------------------------------------------ writing
    def add(self, skill: Skill, run_id: str = "", reason: str = "", *,
            op: str = "create") -> AddResult:
        """Create a skill (dated today; ``source_run`` defaults to ``run_id``).

        At the cap the weakest active skill is evicted first (recorded as ``evict``). A
        retired skill of the same name is replaced (its text is kept in the history).

        Returns
        -------
        AddResult

        Raises
        ------
        ConfigError
            An active skill with this name exists (use :meth:`patch`), or a stored skill
            whose name folds like it (:meth:`check_new_name`).
        """
        if not isinstance(skill, Skill):
            raise ConfigError("skill", skill, "must be a Skill")
        check_write(run_id, reason)
        with self._writing():
            self.check_new_name(skill.name)
            today = self.today().isoformat()
            skill = replace(skill, status="active", retired_reason="",
                            created=skill.created or today,
                            last_verified=skill.last_verified or skill.created or today,
                            source_run=skill.source_run or run_id)
            evicted = self._make_room(skill.name, run_id)
            skill = self._commit(op, skill, run_id, reason)
            return AddResult(skill, evicted)

    def patch(self, name: str, run_id: str = "", reason: str = "", **changes) -> Skill:
        """Change fields of an active skill (``description``, ``body``, ``triggers``, ...).

        Raises
        ------
        ConfigError
            No active skill ``name``; a change of ``name`` or ``status`` (use
            :meth:`retire` / :meth:`restore`); an invalid value.
        """
        check_write(run_id, reason)
        with self._writing():
            name = self.stored_name(name) or name   # compared after folding
            if name not in self._skills:
                raise ConfigError("name", name, "no active skill with this name")
            for k in ("name", "status"):
                if k in changes:
                    raise ConfigError(k, changes[k], "cannot be patched")
            skill = replace(self._skills[name], **changes)
            return self._commit("patch", skill, run_id, reason)

    def retire(self, name: str, run_id: str = "", reason: str = "retired") -> Skill:
        """Move an active skill to the retired folder (restorable).

        Raises
        ------
        ConfigError
            No active skill ``name``.
        """
        check_write(run_id, reason)
        with self._writing():
            name = self.stored_name(name) or name   # compared after folding
            if name not in self._skills:
                raise ConfigError("name", name, "no active skill with this name")
            skill = replace(self._skills[name], status="retired", retired_reason=reason)
            return self._commit("retire", skill, run_id, reason, content=False)

    def restore(self, name: str, run_id: str = "", reason: str = "restored") -> AddResult:
        """Bring a retired (or evicted) skill back; at the cap the weakest other skill is
        evicted.

        Raises
        ------
        ConfigError
            No retired skill ``name``.
        """
        check_write(run_id, reason)
        with self._writing():
            name = self.stored_name(name) or name   # compared after folding
            if name not in self._retired:
                raise ConfigError("name", name, "no retired skill with this name")
            evicted = self._make_room(name, run_id)
            skill = replace(self._retired[name], status="active", retired_reason="")
            skill = self._commit("restore", skill, run_id, reason, content=False)
            return AddResult(skill, evicted)

    def record_outcome(self, names: Iterable[str], success: bool, run_id: str = "") -> list[str]:
        """Report the outcome of an episode in which ``names`` were injected.

        Each skill's Beta posterior gets the outcome (:meth:`BetaCompetence.update`); a
        success also marks it verified today. After a failure, retire-on-contradiction
        applies (see ``retire_below``). Names not active now (retired meanwhile) are
        ignored. A skill named more than once (in any spelling that folds the same,
        :meth:`stored_name`) gets the outcome once.

        Returns
        -------
        list of str
            The skills retired by this report.
        """
        success = bool(success)
        check_write(run_id, "")
        retired = []
        with self._writing():
            self._read_clock()   # (a clock that fails, fails before a posterior changes)
            for name in dict.fromkeys(map(self.stored_name, names)):
                skill = self._skills.get(name)
                if skill is None:
                    continue
                a, b = self.competence.record(name, success)
                counts = ({"successes": skill.successes + 1,
                           "last_verified": self.today().isoformat()} if success
                          else {"failures": skill.failures + 1})
                # only numbers changed: the text went through the net when it entered
                new = self._redactor.recheck(replace(skill, a=a, b=b, **counts))
                if self.log_outcomes:
                    self._commit("outcome", new, run_id, "success" if success else "failure",
                                 content=False, netted=True)
                else:
                    self.backend.write(new, content=False, log=False)
                    # the estimator holds (a, b): they were read from it just now, unless
                    # the net changed the skill (then its numbers are still a, b)
                    self._place(new, posterior_held=True)
                why = None if success else retirement_reason(
                    a, b, new.uses, self.retire_below, self.retire_min_uses)
                if why is not None:
                    self.retire(name, run_id, why)
                    retired.append(name)
        return retired

