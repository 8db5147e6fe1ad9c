"""The change log of a skill library: what a record holds, the checks a record read back
passes, and the history and undo of a :class:`dyna.loops.skills.library.SkillLibrary`.

Every write of a library appends one record (``create``, ``patch``, ``outcome``,
``retire``, ``restore``, ``evict``, ``stage``, ``approve``, ``reject`` or ``undo``) with its
values through the library's redaction safety net; :meth:`HistoryMixin.undo_run` reverts a
run's changes from these records.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

from dyna.errors import ConfigError
from dyna.fileio.jsonfiles import CorruptFileError
from dyna.loops._text import identity_text
from dyna.loops.safety_net import SafetyNet
from dyna.loops.skills.fields import STATUSES, check_date, check_skill_name
from dyna.loops.skills.record import Skill
from dyna.loops.skills.results import HistoryEntry
from dyna.redact import check_label

__all__ = ["HistoryMixin", "append_record", "check_history", "check_write", "history_record"]


def append_record(backend, net: SafetyNet, now: _dt.datetime, seq: int, op: str, name: str,
                  run_id: str, reason: str, staged: int, change: dict | None) -> None:
    """Append the :func:`history_record` of a change made at ``now`` to ``backend``'s
    history. An in-memory history (a backend with ``append_history_later``) makes the
    record (its redaction, its time's text) when it is first read, from these values: an
    exact datetime with a fixed offset formats the same then, the texts are immutable, and
    ``change`` holds immutable :class:`Skill` objects or None."""
    later = getattr(backend, "append_history_later", None)
    if (later is not None and type(now) is _dt.datetime
            and (now.tzinfo is None or type(now.tzinfo) is _dt.timezone)):
        later(history_record, net, now, seq, op, name, run_id, reason, staged, change)
        return
    backend.append_history(history_record(net, _dt.datetime.isoformat(now, timespec="seconds"),
                                          seq, op, name, run_id, reason, staged, change))


def check_write(run_id, reason) -> None:
    """The run id and reason of a write are texts (what the history's reader accepts), the
    run id a label without a secret (:func:`dyna.redact.check_label`); checked before
    anything is changed.

    Raises
    ------
    ConfigError
        ``run_id`` or ``reason`` not a string (the value shown is its type, never the
        value), or a run id holding a secret.
    """
    if not isinstance(run_id, str):
        raise ConfigError("run_id", type(run_id).__name__, "must be a string")
    if not isinstance(reason, str):
        raise ConfigError("reason", type(reason).__name__, "must be a string")
    check_label("run_id", run_id)


def history_record(net: SafetyNet, now, seq: int, op: str, name: str, run_id: str,
                   reason: str, staged: int, change: dict | None) -> dict:
    """One history record of a skill library, its values through the safety net
    ``net``; ``now`` is its time's text, or a datetime formatted to the second."""
    if not isinstance(now, str):
        now = _dt.datetime.isoformat(now, timespec="seconds")
    # "time" is not scanned: it is a datetime's own ISO text (digits, "-", ":", "T",
    # "+"), and no detector catches such a text (60,000 random ones checked)
    rec = {"seq": seq, "op": op, "name": name,
           "run_id": run_id, "reason": reason, "staged": staged}
    change = dict(change or {})
    # hashes are not text (a hex digest can look like a phone number to a detector)
    # and a diff is made of texts the net has seen (its "+" prefix can make a date
    # look like a phone number)
    hashes = {k: change.pop(k) for k in ("sha_after", "diff") if k in change}
    for k in ("before", "after"):
        # the in-memory backend's skill objects: the scan does not look into a Skill
        # (nor None), so they are passed, not walked (the same record, quicker)
        if k in change and (change[k] is None or type(change[k]) is Skill):
            hashes[k] = change.pop(k)
    books = {}
    for k in ("book_before", "book_after"):
        b = change.get(k)
        if isinstance(b, dict) and "sha256" in b:
            books[k] = b["sha256"]
            change[k] = {x: v for x, v in b.items() if x != "sha256"}
    rec.update(change)
    # values only: the keys are the record's schema (``name`` is the skill's identifier)
    rec = net.values(rec)
    rec = {"seq": rec["seq"], "time": now, **rec}   # seq, then time, then the rest
    rec.update(hashes)
    for k, h in books.items():
        rec[k] = dict(rec[k], sha256=h)
    return rec


_HISTORY_KEYS = {"seq": int, "time": str, "op": str, "name": str, "run_id": str, "reason": str}


def check_history(recs: list[dict], path: Path) -> list[dict]:
    """History records with their fields checked (CorruptFileError names file and line).

    An undo acts on what the history says (which skill, which file, which place, which
    diff), so a record that says what dyna never writes is refused: a name that is not a
    skill name (``../x``), a file other than ``SKILL.md`` / ``skill.md`` (``run.sh``,
    ``../x/SKILL.md``), a place other than active, retired or absent, a diff that is not
    a list of lines."""
    for i, r in enumerate(recs):
        for k, t in _HISTORY_KEYS.items():
            if not isinstance(r.get(k), t) or (t is int and isinstance(r.get(k), bool)):
                raise CorruptFileError(path, i + 1,
                                       f"history record has no valid {k!r}")
        try:
            check_skill_name(r["name"])
        except ConfigError:
            raise CorruptFileError(path, i + 1, "history record's 'name' is not a skill "
                                   "name") from None
        if "file" in r and r["file"] not in ("SKILL.md", "skill.md"):
            raise CorruptFileError(path, i + 1, "history record's 'file' is not SKILL.md "
                                   "or skill.md")
        for k in ("loc_before", "loc_after"):
            if k in r and r[k] not in STATUSES and r[k] is not None:
                raise CorruptFileError(path, i + 1, f"history record's {k!r} is not "
                                       "active, retired or null")
        d = r.get("diff", [])
        if not isinstance(d, list) or not all(isinstance(x, str) for x in d):
            raise CorruptFileError(path, i + 1, "history record's 'diff' is not a list of "
                                   "lines")
        if "diff" in r:   # what an undo of a file change reads besides the diff
            for k in ("loc_before", "loc_after", "book_before", "book_after"):
                if k not in r:
                    raise CorruptFileError(path, i + 1, f"history record has no {k!r}")
        for k in ("book_before", "book_after"):
            why = _bad_book(r[k]) if k in r else None
            if why is not None:
                raise CorruptFileError(path, i + 1, f"history record's {k!r} {why}")
    return recs


def _bad_book(entry) -> str | None:
    """Why ``entry`` is not a state-file entry dyna writes (None: it is one, or null): a
    mapping whose bookkeeping fields (outcome counts, posterior, last verified date,
    retired reason), ``path`` and ``sha256`` are each of the type the skill's own checks
    accept, so an undo never writes a state file that no later open can read (other
    fields are never read back)."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        return "is not a mapping"
    for k, v in entry.items():
        if k in ("successes", "failures"):
            ok = type(v) is int and v >= 0
        elif k in ("a", "b"):
            ok = v is None or (type(v) in (int, float) and math.isfinite(v) and v > 0)
        elif k == "last_verified":
            try:
                ok = check_date(k, v) is not None
            except ConfigError:
                ok = False
        elif k in ("retired_reason", "path", "sha256"):
            ok = isinstance(v, str)
        else:
            continue   # (not read back: the skill takes only the bookkeeping fields)
        if not ok:
            return f"has a bad {k!r}"
    if ("a" in entry) != ("b" in entry) or (entry.get("a") is None) != (entry.get("b") is None):
        return "has 'a' and 'b' not given together"
    return None


class HistoryMixin:
    """The history and undo of a :class:`~dyna.loops.skills.library.SkillLibrary` (a base
    class of it, using its backend, its write lock, its in-memory view and its log)."""

    def history(self, name: str | None = None, run_id: str | None = None) -> list[HistoryEntry]:
        """The change log, oldest first, optionally for one skill (its name compared after
        folding, :func:`dyna.loops._text.identity_text`) and/or one run."""
        out = []
        key = None if name is None else identity_text(name)
        for h in self.backend.history():
            if ((key is None or identity_text(h["name"]) == key)
                    and (run_id is None or h["run_id"] == run_id)):
                change = {k: h[k] for k in ("loc_before", "loc_after", "file", "diff",
                                            "sha_after", "book_before", "book_after") if k in h}
                out.append(HistoryEntry(h["seq"], h["time"], h["op"], h["name"], h["run_id"],
                                        h["reason"], h.get("before"), h.get("after"), change))
        return out

    def undo_run(self, run_id: str, force: bool = False) -> list[str]:
        """Revert everything run ``run_id`` wrote: each skill it changed goes back to its
        state before the run's first change (files byte for byte), and proposals it staged
        are dropped. The undo itself is logged (run id ``undo:<run_id>``).

        Parameters
        ----------
        run_id : str
        force : bool
            Revert even skills that later runs changed after this one (their later
            changes are lost). Without it such a conflict raises.

        Returns
        -------
        list of str
            Names of the skills reverted, sorted.

        Raises
        ------
        ConfigError
            ``run_id`` wrote nothing, or (without ``force``) later changes conflict.
        """
        if not isinstance(run_id, str) or not run_id:
            raise ConfigError("run_id", run_id, "must be a non-empty string")
        with self._writing():
            recs = self.backend.history()
            if not any(h["run_id"] == run_id for h in recs):
                raise ConfigError("run_id", run_id, "no change in the history has this run id")
            first: dict[str, int] = {}
            last: dict[str, dict] = {}
            for h in recs:
                if h["run_id"] != run_id or h["op"] in ("stage", "reject"):
                    continue
                first.setdefault(h["name"], h["seq"])
                last[h["name"]] = h
            conflicts = [n for n in sorted(first) if not self.backend.matches(n, last[n])]
            if conflicts and not force:
                raise ConfigError("run_id", run_id, "skills changed by later runs: "
                                  f"{', '.join(conflicts)} (use force to revert anyway)")
            # every file the undo reads is read (a damaged one raises) before it changes one,
            # and the clock too (a naive time is refused before anything is reverted)
            now = self._read_clock()
            staged = [item for item in self.pending() if item.run_id == run_id]
            for name in sorted(first):
                chain = [h for h in recs if h["name"] == name and h["seq"] >= first[name]
                         and h["op"] not in ("stage", "reject")]
                skill, change = self.backend.revert(name, chain[::-1], clean=self._net.values)
                if skill is not None:   # read back from its file: through the net first
                    skill = self._redactor.clean(skill)
                self._place(skill, name)
                self._log("undo", name, f"undo:{run_id}", f"reverted run {run_id}", change,
                          now)
            for item in staged:
                self.backend.drop_pending(item.id)
                self._log("reject", item.dest, f"undo:{run_id}",
                          f"{item.id}: run {run_id} undone", None, now)
            return sorted(first)
