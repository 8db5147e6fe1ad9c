"""The memory store: facts an agent keeps between runs, in a MEMORY.md file.

MEMORY.md holds one fact per line, with its date, source and trust
(:mod:`dyna.loops.memory_format`)::

    # Memory

    - [2024-05-01 | run-12 | trusted] The test command is `make test-fast`.
    - [2024-05-02 | run-14 | approved] API port: 8080

A line ``- fact`` without the bracket (written by hand) is read as a fact with no date,
no source and trust ``user``. Other lines (headings, prose, comments) are not facts and are
kept byte for byte. Superseded, evicted and merged facts are kept in an append-only history
beside it (``.dyna/MEMORY.md.history.jsonl``), and facts waiting for approval in
``.dyna/MEMORY.md.pending.json`` (:mod:`dyna.loops.memory_backends`).

Identity of facts (:func:`dyna.loops._text.fact_key`): entries that differ only in case,
spacing or punctuation are one fact; entries that differ in a number or a name are
different facts.

Conflicts (:mod:`dyna.loops.fact_attributes`): the store's *fact rule* reads the typed
*attribute* a fact states; the default, :data:`~dyna.loops.fact_attributes.ENGLISH_FACTS`,
reads English facts of the form "<subject> is/are/:/= <value>" (another rule is passed as
``rule``). A new fact replaces a stored one only when both give the same attribute of the
same subject different values ("API port: 8080" and "API port: 9090"); facts about
different attributes of one subject are both kept; when it cannot tell ("The cache is
redis", "The cache is fast") both are kept and the pair is flagged
(:meth:`MemoryStore.unsure_pairs`, listed by ``dyna memory show`` and ``consolidate``).

Who may replace what (:meth:`MemoryStore.add`, :func:`staging_reason`): a person's fact
(trust ``user`` or ``approved``) is replaced at once only by a person; a trusted loop fact
replacing a loop-written fact is applied and logged (drift recovery needs it); a
replacement of a person's fact by a loop, or any replacement from an untrusted source, is
staged for approval.

Outcomes and retirement (:meth:`MemoryStore.record_outcomes`): each fact counts the runs in
which a tool call that followed it succeeded or returned an error (``successes``,
``failures``, written on its line) and keeps its Beta posterior of competence ``(a, b)``,
updated as the skills' is (:class:`dyna.competence.BetaCompetence`, with the store's
``discount``: older outcomes weigh less, so a fact that once worked can still be retired
after the world changes). With ``retire_below`` set, a fact contradicted often enough is
retired by the rule the skills use (:func:`dyna.loops.retirement.retirement_reason`) on that
posterior: it leaves MEMORY.md, so it is not retrieved or put in context any more, and is
kept in the history (op ``retire``, :meth:`MemoryStore.retired`).

Several processes may share one MEMORY.md: every write takes an inter-process file lock
(:func:`dyna.fileio.library_lock`, ``.dyna/MEMORY.md.lock``) and re-reads the file and the
history under it. Files the store writes (MEMORY.md, ``.dyna`` and its files) are never
written through a symlink.

``MemoryStore(None)`` keeps everything in memory (same code, no files).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import operator
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from dyna.competence import BetaCompetence
from dyna.errors import ConfigError, check_range, check_time
from dyna.loops.safety_net import SafetyNet
from dyna.loops._text import fact_key, jaccard_ratio, text_features
from dyna.loops.fact_attributes import (ENGLISH_FACTS, Attribute, EnglishFactRule, FactRule,
                                        attribute_of, compare_attributes, relation, subject_of,
                                        unsure_pairs)
from dyna.loops.memory_backends import FileMemoryBackend, InMemoryBackend, PendingFacts
from dyna.loops.memory_consolidation import ConsolidationReport, consolidation_plan
from dyna.loops.memory_format import (HEADER, MAX_FACT, PERSON, TRUST, MemoryEntry,
                                      MemoryFileError, PendingFact, StoreResult, parse_memory,
                                      render_memory)
from dyna.loops.memory_outcomes import check_outcomes, fact_posterior, fact_with_outcome
from dyna.loops.retirement import retirement_reason
from dyna.redact import check_label
from dyna.ties import at_least

__all__ = ["ENGLISH_FACTS", "Attribute", "ConsolidationReport", "EnglishFactRule", "FactRule",
           "HEADER", "MAX_FACT", "MemoryEntry", "MemoryFileError", "MemorySnapshot",
           "MemoryStore", "PERSON", "PendingFact", "StoreResult", "TRUST", "attribute_of",
           "evict_over_cap", "parse_memory", "relation", "render_memory", "staging_reason",
           "subject_of"]


@dataclass(frozen=True)
class MemorySnapshot:
    """The facts a run sees: taken at the run's start, unchanged afterwards.

    Attributes
    ----------
    entries : tuple of MemoryEntry
    """

    entries: tuple[MemoryEntry, ...]

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def texts(self) -> list[str]:
        """The facts' texts."""
        return [e.text for e in self.entries]

    def render(self) -> str:
        """MEMORY.md text of the snapshot (what an agent would read)."""
        return render_memory(self.entries)


def evict_over_cap(entries: list[MemoryEntry], keep: MemoryEntry | None,
                   cap: int | None) -> list[MemoryEntry]:
    """Remove from ``entries`` (in place) the oldest facts (date, then position) until at
    most ``cap`` are left, and return them in eviction order. Never ``keep`` and never a
    fact a person wrote (trust ``user``): when only those are left the list stays over its
    cap rather than drop them. An approved loop fact is evicted like any loop fact (else
    approvals would make the cap ineffective). ``cap`` None: nothing is evicted."""
    evicted: list[MemoryEntry] = []
    while cap is not None and len(entries) > cap:
        cand = [(e.date, i) for i, e in enumerate(entries)
                if e is not keep and e.trust != "user"]
        if not cand:
            break
        _, i = min(cand)
        evicted.append(entries.pop(i))
    return evicted


def staging_reason(entry: MemoryEntry, replaced) -> str | None:
    """Why the new fact ``entry``, replacing the stored facts ``replaced``, waits for
    approval; None when it may replace them at once.

    A replacement by an untrusted source waits; so does one by a loop (trust ``trusted``)
    of a fact a person wrote or approved (trust ``user`` or ``approved``). A person's fact
    replaces anything, and a trusted loop fact replaces loop-written facts at once (drift
    recovery needs it)."""
    who = [e for e in replaced if e.trust in PERSON]
    if replaced and (entry.trust == "untrusted" or (entry.trust == "trusted" and who)):
        return (f"would replace a fact a person wrote or approved: {who[0].text!r}"
                if who else f"untrusted replacement of {replaced[0].text!r}")
    return None


def _utc_now(clock: Callable[[], _dt.datetime] | None = None) -> _dt.datetime:
    """The time of ``clock`` (None: the system's), timezone-aware and in UTC
    (:func:`dyna.errors.check_time`), so every date a store writes is a UTC date;
    ConfigError for a naive datetime."""
    return check_time("clock", _dt.datetime.now(_dt.timezone.utc) if clock is None
                      else clock())


class MemoryStore(PendingFacts):
    """Facts in MEMORY.md with de-duplication, superseding on real conflicts, a cap and
    consolidation.

    Parameters
    ----------
    path : str or Path or None
        The MEMORY.md file (created on first write, in an existing folder); None keeps
        everything in memory.
    cap : int or None
        Maximum number of facts (30 by default). Past it the oldest facts (by date, then
        position) are evicted, never the one just written; each eviction is in the
        history and in the returned result. None: no cap.
    similarity : float
        Jaccard similarity of content words at or above which two facts with the same
        concrete parts are near-duplicates for :meth:`consolidate`, in (0, 1].
    clock : callable returning an aware datetime, optional
    durable : bool
        fsync every write (file backend).
    lock_timeout : float
        Seconds a write waits for another process's lock (file backend) before
        :class:`dyna.fileio.LibraryLockTimeout`.
    retire_below : float or None
        Retire on contradiction (:meth:`record_outcomes`): after a failure, a fact with at
        least ``retire_min_uses`` outcomes whose posterior mean ``a / (a + b)`` is below
        this, in [0, 1], is retired. None (the default): outcomes are counted, nothing is
        retired.
    retire_min_uses : int
        >= 0.
    prior : {"uniform", "jeffreys"} or (float, float)
        The Beta prior ``(a0, b0)`` of a fact's competence
        (:func:`dyna.competence.prior_shapes`).
    discount : float
        In (0, 1]: the factor by which a fact's evidence (its posterior above the prior)
        decays before each of its outcomes, as for skills (discounted Thompson sampling,
        Raj & Kalyani 2017; :mod:`dyna.competence`). With 1 (the default) a fact's
        posterior is ``Beta(a0 + successes, b0 + failures)`` and its line holds the counts
        alone; below 1 the posterior after the outcomes is written on the line beside them
        (:class:`MemoryEntry` ``a``, ``b``).
    rule : FactRule, optional
        The conflict rule: reads the typed attribute a fact states
        (:class:`dyna.loops.fact_attributes.FactRule`). Default
        :data:`~dyna.loops.fact_attributes.ENGLISH_FACTS`, for facts written in English.
    create : bool
        Also make the missing folders of ``path`` (default False: a missing folder is
        refused with :class:`dyna.errors.MissingFileError` naming it, as
        :class:`dyna.experience.ExperienceStore` never makes its file's folder).

    Attributes
    ----------
    redactions : dict of str to int
        Catches of the always-on redaction safety net, per detector name: every fact
        written to MEMORY.md, every staged fact and every history record is redacted first
        (:class:`dyna.loops.safety_net.SafetyNet`), whatever the loop's ``redaction`` switch. A
        ``source`` or ``run_id`` holding a secret is refused (:func:`dyna.redact.check_label`).

    Raises
    ------
    ConfigError
        Bad parameters, or a MEMORY.md line that cannot be read.
    MemoryFileError
        MEMORY.md is not UTF-8 (the byte offset is named), or a history line is corrupt
        (``path:line``).
    MissingFileError
        The folder of ``path`` does not exist and ``create`` is False.
    """

    def __init__(self, path=None, *, cap: int | None = 30, similarity: float = 0.8,
                 clock: Callable[[], _dt.datetime] | None = None, durable: bool = True,
                 lock_timeout: float = 30.0, retire_below: float | None = None,
                 retire_min_uses: int = 3, prior="uniform", discount: float = 1.0,
                 rule: FactRule = ENGLISH_FACTS, create: bool = False):
        if cap is not None:
            cap = check_range("cap", cap, 1, None, integer=True)
        self.cap = cap
        if retire_below is not None:
            retire_below = float(check_range("retire_below", retire_below, 0.0, 1.0))
        self.retire_below = retire_below
        self.retire_min_uses = check_range("retire_min_uses", retire_min_uses, 0, None,
                                           integer=True)
        # the update rule of a fact's posterior (:meth:`record_outcomes`); the posteriors
        # themselves live on the facts (MEMORY.md), which other processes may rewrite
        self._competence = BetaCompetence(prior, discount)
        self.prior = (self._competence.a0, self._competence.b0)
        self.discount = self._competence.discount
        self.similarity = float(check_range("similarity", similarity, 0.0, 1.0, lo_open=True))
        self.rule = rule
        self._clock = functools.partial(_utc_now, clock)
        self.backend = (InMemoryBackend() if path is None
                        else FileMemoryBackend(path, durable, lock_timeout, create))
        self._lock = threading.RLock()
        self._net = SafetyNet()
        self._entries: tuple[MemoryEntry, ...] = tuple(self.backend.read())
        self._index: tuple | None = None   # _lookup's (entries, texts, by key, by subject)

    @classmethod
    def in_memory(cls, **kwargs) -> "MemoryStore":
        """A store with no files."""
        return cls(None, **kwargs)

    @property
    def location(self) -> Path | None:
        """The MEMORY.md file (None in memory)."""
        return self.backend.location

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def entries(self) -> tuple[MemoryEntry, ...]:
        """Current facts in file order (as of the last read or write; see :meth:`reload`)."""
        return self._entries

    def reload(self) -> tuple[MemoryEntry, ...]:
        """Re-read MEMORY.md if another writer changed it; returns the facts."""
        with self._lock:
            self._reread()
            return self._entries

    def snapshot(self) -> MemorySnapshot:
        """What a run starting now sees (unchanged by later writes)."""
        return MemorySnapshot(self._entries)

    def history(self) -> list[dict]:
        """Append-only log: ``seq, time, op, run_id, text, reason`` per change.

        Raises
        ------
        MemoryFileError
            A corrupt line (field ``path:line``).
        """
        return self.backend.history()

    @property
    def redactions(self) -> dict[str, int]:
        """Catches of the redaction safety net so far, per detector name."""
        return dict(self._net.counts)

    @contextlib.contextmanager
    def _writing(self, now: _dt.datetime | None = None):
        """Thread lock, inter-process file lock, and the facts re-read under them; yields the
        write's time, read once before anything changes (``now``: the caller's reading), so
        a naive time is refused first and every record of the write carries the same time."""
        now = self._clock() if now is None else now
        with self._lock, self.backend.locked():
            self._reread()
            yield now

    def _reread(self) -> None:
        """The facts as the backend holds them now; the same tuple kept when they are the
        very same objects in the same order (so what is remembered of it stays valid)."""
        new = self.backend.read()
        old = self._entries
        if not (len(new) == len(old) and all(map(operator.is_, new, old))):
            self._entries = tuple(new)

    def _log(self, op: str, text: str, run_id: str, reason: str, at: _dt.datetime) -> None:
        # "time" is not scanned: datetime's own isoformat (whatever a subclass the clock
        # returns overrides) writes digits and "-:T+" only, which no detector catches
        now = _dt.datetime.isoformat(at, timespec="seconds")
        rec = self._net.values({"seq": self.backend.seq + 1, "op": op, "run_id": run_id,
                                "text": text, "reason": reason})
        self.backend.append_history({"seq": rec["seq"], "time": now, **rec})

    def _entry(self, text, date: str, source: str, trust: str, run_id: str) -> MemoryEntry:
        """A new fact, its text redacted; a source or run id holding a secret is refused."""
        check_label("source", source)
        check_label("run_id", run_id)
        entry = MemoryEntry(text, date, source, trust)   # validates (and joins white space)
        clean = self._net.values(entry.text)
        return entry if clean is entry.text else replace(entry, text=clean)

    def _save(self, entries: list[MemoryEntry],
              updated: Mapping[int, MemoryEntry] | None = None) -> None:
        """Write ``entries``, every fact's text through the safety net first (facts read
        from a hand-written file too); ``updated`` maps ``id(fact)`` of some of them to a
        copy with other outcome counts and posterior, written on that fact's line (its
        place kept)."""
        subst = {}
        for e in entries:
            w = updated.get(id(e), e) if updated else e   # (same text as e)
            text = self._net.values(w.text)
            if text is not w.text:
                w = replace(w, text=text)
            if w is not e:
                subst[id(e)] = w
        self._entries = tuple(self.backend.write(entries, subst))

    def _lookup(self) -> tuple:
        """``(entries, texts, first fact by key, facts by attribute subject)``, in the facts'
        order; built again for another tuple of facts or a text unlike the one indexed."""
        entries = self._entries
        texts = tuple(e.text for e in entries)
        if self._index is None or self._index[0] is not entries or self._index[1] != texts:
            by_key: dict = {}
            by_subject: dict = {}
            for e, text in zip(entries, texts):
                by_key.setdefault(fact_key(text), e)
                a = self.rule.attribute(text)
                if a is not None:
                    by_subject.setdefault(a.subject, []).append(e)
            self._index = (entries, texts, by_key, by_subject)
        return self._index

    def find(self, text: str) -> MemoryEntry | None:
        """The stored fact that is the same fact as ``text`` (None if none): the first
        with its :func:`fact_key`."""
        return self._lookup()[2].get(fact_key(text))

    def relations(self, text: str) -> list[tuple[MemoryEntry, str]]:
        """Stored facts about the same subject as ``text`` that a write of it would touch,
        with their relation to it under the store's rule (:func:`compare_attributes`):
        ``"conflict"`` (replaced), ``"restated"`` (same value, other words) or ``"unsure"``
        (kept beside it, flagged); in the facts' order. Only facts of the same attribute
        subject are compared (any other is ``"unrelated"``, as is every fact when ``text``
        states no attribute)."""
        a = self.rule.attribute(text)
        if a is None:
            return []
        out = []
        for e in self._lookup()[3].get(a.subject, ()):
            r = compare_attributes(a, self.rule.attribute(e.text))
            if r in ("conflict", "restated", "unsure"):
                out.append((e, r))
        return out

    def unsure_pairs(self) -> list[tuple[MemoryEntry, MemoryEntry]]:
        """Pairs of stored facts (earlier, later) that may contradict each other and were
        both kept (relation ``"unsure"`` under the store's rule): check them by hand."""
        return unsure_pairs(self._entries, self.rule)

    def add(self, text: str, source: str = "", trust: str = "untrusted", run_id: str = "",
            date: str | None = None, *, approval: bool = True) -> StoreResult:
        """Write a fact.

        ``trust`` defaults to ``"untrusted"``: a caller vouches for a fact by saying
        ``"trusted"`` (a trusted loop review), ``"approved"`` (a person approved it) or
        ``"user"`` (a person wrote it).

        - A fact equal to a stored one (:func:`fact_key`), or restating a stored fact's
          attribute with the same value, is not written again (``"duplicate"``; a person's
          restatement replaces a loop's wording).
        - One giving another value for the same attribute of a stored fact
          (relation ``"conflict"``) replaces it (``"superseded"``; the old text goes to
          the history), except that with ``approval`` a replacement
          :func:`staging_reason` holds back is staged instead (``"staged"``,
          :meth:`stage`). ``approval=False`` (the loop's ``approval_for_untrusted``
          ablation) applies it at once.
        - Otherwise it is appended (``"added"``); stored facts it may contradict
          (``"unsure"``) are kept and returned in ``flagged``.

        Past the cap the oldest facts are evicted.

        Returns
        -------
        StoreResult

        Raises
        ------
        ConfigError
            Invalid text, source, trust or date.
        """
        at = self._clock()
        entry = self._entry(text, date or at.date().isoformat(), source or run_id, trust,
                            run_id)
        with self._writing(at):
            result, records = self._apply(entry, run_id, approval)
            for op, e, why in records:
                self._log(op, e.text, run_id, why, at)
            return result

    def _apply(self, entry: MemoryEntry, run_id: str,
               approval: bool) -> tuple[StoreResult, list[tuple[str, MemoryEntry, str]]]:
        """Write ``entry`` to MEMORY.md as :meth:`add` says (under the write lock); the
        result and the history records ``(op, fact, reason)`` the change still needs, so
        the caller logs them once everything the change makes is written."""
        same = self.find(entry.text)
        if same is not None:
            return StoreResult("duplicate", same), []
        rels = self.relations(entry.text)
        flagged = tuple(e for e, r in rels if r == "unsure")
        replaced = [e for e, r in rels if r == "conflict"
                    or (r == "restated" and entry.trust in PERSON
                        and e.trust not in PERSON)]
        restated = [e for e, r in rels if r == "restated" and e not in replaced]
        if restated and not replaced:
            return StoreResult("duplicate", restated[0], flagged=flagged), []
        reason = staging_reason(entry, replaced) if approval else None
        if reason is not None:
            item = self.stage(entry.text, entry.source, run_id, reason=reason)
            return StoreResult("staged", entry, tuple(replaced), flagged=flagged,
                               pending=item), []
        gone = {id(e) for e in replaced}
        entries = [e for e in self._entries if id(e) not in gone]
        entries.append(entry)
        evicted = evict_over_cap(entries, entry, self.cap)
        self._save(entries)       # the history records a change once it is made
        records = [*(("supersede", e, f"by: {entry.text}") for e in replaced),
                   ("add", entry, entry.source),
                   *(("evict", e, f"cap {self.cap}") for e in evicted)]
        return (StoreResult("superseded" if replaced else "added", entry, tuple(replaced),
                            tuple(evicted), flagged), records)

    def remove(self, text: str, run_id: str = "", reason: str = "removed") -> MemoryEntry:
        """Remove the fact equal to ``text`` (kept in the history).

        Raises
        ------
        ConfigError
            No such fact.
        """
        with self._writing() as at:
            e = self.find(text)
            if e is None:
                raise ConfigError("text", text, "no such fact")
            self._save([x for x in self._entries if x is not e])
            self._log("remove", e.text, run_id, reason, at)
            return e

    def record_outcomes(self, outcomes: Mapping[str, bool], run_id: str = "") -> list[str]:
        """Count one run's outcome for each fact a tool call followed, and retire the
        facts the run contradicted past the threshold.

        ``outcomes`` maps a fact (its text, found by :func:`dyna.loops._text.fact_key`)
        to True when the calls that followed it in the run succeeded and False when one
        returned an error (the run contradicted it). A True adds 1 to the fact's
        ``successes``, a False 1 to its ``failures``, and its Beta posterior
        (:meth:`posterior`) gets the outcome under the store's prior and ``discount``
        (:mod:`dyna.loops.memory_outcomes`). The counts, and the posterior when the fact
        carries one, are written on the fact's line (MEMORY.md, or the in-memory store), its
        place kept, in one atomic write. After a failure, with ``retire_below`` set, the
        fact is retired when :func:`dyna.loops.retirement.retirement_reason` says so for
        its posterior ``(a, b)`` and ``uses``: it leaves the store (not retrieved or in
        context any more) and the history records it (op ``retire``, the reason with its
        counts). Facts not stored any more (superseded, evicted or retired meanwhile) are
        ignored. Outcomes are not logged in the history one by one.

        Parameters
        ----------
        outcomes : Mapping of str to bool
        run_id : str
            The run, recorded with a retirement.

        Returns
        -------
        list of str
            The texts of the facts retired by this report, in ``outcomes`` order.

        Raises
        ------
        ConfigError
            Bad ``outcomes`` (:func:`~dyna.loops.memory_outcomes.check_outcomes`), or a run
            id holding a secret; nothing is written.
        """
        check_outcomes(outcomes)
        check_label("run_id", run_id)
        retired: list[str] = []
        if not outcomes:
            return retired
        with self._writing() as at:
            updated: dict[int, MemoryEntry] = {}
            gone: dict[int, str] = {}     # id of a fact retired -> the history's reason
            for text, ok in outcomes.items():
                fact = self.find(text)
                if fact is None or id(fact) in gone:
                    continue
                now = fact_with_outcome(updated.get(id(fact), fact), bool(ok),
                                        self._competence)
                updated[id(fact)] = now
                why = None if ok else retirement_reason(
                    *fact_posterior(now, self.prior), now.uses, self.retire_below,
                    self.retire_min_uses)
                if why is not None:
                    gone[id(fact)] = (f"{why} (successes {now.successes}, failures "
                                      f"{now.failures})")
                    retired.append(fact.text)
            if updated:
                self._save([e for e in self._entries if id(e) not in gone], updated)
            for text, reason in zip(retired, gone.values()):
                self._log("retire", text, run_id, reason, at)
        return retired

    def posterior(self, text: str) -> tuple[float, float]:
        """The Beta posterior ``(a, b)`` of the stored fact that is the same fact as
        ``text`` (:meth:`find`): the one on its line, else the store's prior plus its
        counts ``(a0 + successes, b0 + failures)``.

        Raises
        ------
        ConfigError
            No such fact (field ``text``).
        """
        fact = self.find(text)
        if fact is None:
            raise ConfigError("text", text, "no such fact")
        return fact_posterior(fact, self.prior)

    def retired(self) -> list[dict]:
        """Facts retired on contradiction, oldest first: their history records (``seq,
        time, op, run_id, text, reason``; the reason gives the posterior mean and the
        counts). A retired fact written again later is a new fact with no outcomes.

        Raises
        ------
        MemoryFileError
            A corrupt history line.
        """
        return [r for r in self.history() if r["op"] == "retire"]

    def similar(self, text: str, threshold: float | None = None) -> list[MemoryEntry]:
        """Stored facts that are the same fact as ``text`` or near-duplicates of it
        (content-word Jaccard >= ``threshold``, default the store's ``similarity``, with
        the same concrete parts; the Jaccard ratio is compared exactly, so a similarity
        equal to the threshold is similar)."""
        t = self.similarity if threshold is None else threshold
        key, sig, words = text_features(text)
        out = []
        for e in self._entries:
            f = text_features(e.text)
            if f.key == key or (f.parts == sig and at_least(jaccard_ratio(words, f.words), t)):
                out.append(e)
        return out

    # ------------------------------------------------------------------ consolidation
    def consolidate(self, run_id: str = "", *, dry_run: bool = False) -> ConsolidationReport:
        """Merge near-duplicates, drop superseded and vague facts, enforce the cap.

        Steps (:func:`dyna.loops.memory_consolidation.consolidation_plan`), each on what
        the previous left: 1. *vague* loop facts are dropped; 2. of facts giving values for
        the same attribute one stays (*superseded*: a person's latest line, else the newest
        approved fact, else the newest); 3. near-duplicates are *merged* into the newest;
        4. *evicted*: oldest loop facts past the cap.

        Pairs that may contradict each other but cannot be told apart are kept and
        listed (``unsure``). Lines that are not facts (headings, prose) are kept byte for
        byte. Different groups share no link, so a second pass finds nothing:
        consolidation is idempotent and then reports no change (and writes nothing).

        Parameters
        ----------
        run_id : str
            Recorded in the history.
        dry_run : bool
            Report what would change; write nothing, create no file.

        Returns
        -------
        ConsolidationReport
        """
        with (self._lock if dry_run else self._writing()) as at:
            if dry_run:
                self._reread()   # (a write re-reads under its locks)
            entries, vague, superseded, merged = consolidation_plan(
                self._entries, self.similarity, self.rule)
            evicted = evict_over_cap(entries, None, self.cap)
            unsure = [(a.text, b.text) for a, b in unsure_pairs(entries, self.rule)]
            report = ConsolidationReport(tuple(merged), tuple(superseded),
                                         tuple(v.text for v in vague),
                                         tuple(e.text for e in evicted), tuple(unsure),
                                         dry_run)
            if not dry_run:
                if report.changed:
                    self._save(entries)
                for op, text, reason in report.history_records(self.cap):
                    self._log(op, text, run_id, reason, at)
            return report
