"""The file backend of a skill library: skills as Agent Skills SKILL.md folders.

Layout of a library folder ``DIR`` (readable by any tool that reads Agent Skills)::

    DIR/<name>/SKILL.md                 active skills (with their scripts/, reference/, ...;
                                        a lowercase skill.md is read too)
    DIR/.dyna/retired/<name>/           retired or evicted skills, whole folders (restorable)
    DIR/.dyna/history.jsonl             append-only log of every change, as diffs
    DIR/.dyna/pending/<id>.json         proposals waiting for approval
    DIR/.dyna/state.json                dyna's bookkeeping (outcome counts, posteriors) and
                                        the sha256 of every file dyna wrote itself
    DIR/.dyna/lock                      the file lock every write holds (several processes)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import replace
from pathlib import Path

from dyna.errors import ConfigError
from dyna.fileio.atomic import atomic_target, atomic_write
from dyna.fileio.jsonfiles import (
    CorruptFileError,
    append_record,
    read_json,
    read_last_record,
    read_records,
)
from dyna.fileio.lock import library_lock
from dyna.fileio.paths import (
    SymlinkError,
    check_no_symlink,
    file_mark,
    read_bytes_nofollow,
    read_bytes_within,
)
from dyna.loops._text import apply_diff, text_diff
from dyna.loops.frontmatter import FrontmatterError
from dyna.loops.skills.fields import MAX_DESCRIPTION, STATUSES, check_skill_name
from dyna.loops.skills.history import check_history
from dyna.loops.skills.record import Skill
from dyna.loops.skills.results import PendingItem
from dyna.loops.skills.skill_md import LoadWarning

__all__ = ["FileSkillBackend"]

_BOOK = ("successes", "failures", "a", "b", "last_verified", "retired_reason")
"""Dyna's bookkeeping of a skill, kept in ``.dyna/state.json`` (and, only in a file dyna
wrote itself, also in its frontmatter)."""

#: The outcome counts and posterior a file not written by dyna may not set: without an entry
#: in the state file they start from these values, whatever its frontmatter says.
UNOWNED_COUNTS = {"successes": 0, "failures": 0, "a": None, "b": None}

#: The places of a skill folder: the library folder (active) or ``.dyna/retired``.
_LOCS = STATUSES


def _sha256(text: str) -> str:
    """The hex sha256 of ``text`` as UTF-8 (lone surrogates kept as read)."""
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


class FileSkillBackend:
    """Skills as ``DIR/<name>/SKILL.md`` (see the module docstring for the layout).

    * Bookkeeping (outcome counts, posterior, last verified date, retired reason) lives in
      ``DIR/.dyna/state.json``; it is also written into a skill's frontmatter only when
      dyna wrote that file itself, as the state file records (path and sha256 of the text
      dyna wrote; the skill's own frontmatter is never trusted for this). A file written by
      someone else is never rewritten for bookkeeping: retiring moves its folder, an
      outcome changes only the state file.
    * ``history.jsonl`` records each change as a unified diff of the SKILL.md text
      (:func:`dyna.loops._text.text_diff`), the folder it moved from and to, the sha256 of
      the text after, and the bookkeeping before and after, so undo reverses the changes
      exactly (the whole skill folder moves back, resources included).
    * Every write is atomic (write-then-rename) and refuses to go through a symbolic link
      below the library folder; a skill file that links outside the folder is not read.
    * ``SKILL.md`` is preferred, a lowercase ``skill.md`` accepted (and written back under
      its own name).

    Raises
    ------
    ConfigError
        A name that is not a valid skill name; :class:`dyna.fileio.SymlinkError` (a
        ConfigError) for a symbolic link in the way.
    CorruptFileError
        ``history.jsonl``, a pending file or ``state.json`` cannot be read (file and line).
    """

    def __init__(self, root, durable: bool = True):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._real = self.root.resolve()
        self.meta = self.root / ".dyna"
        self.durable = durable
        self.lock = library_lock(self.root)

    @property
    def location(self) -> Path:
        """The library folder."""
        return self.root

    # ------------------------------------------------------------------ paths
    def _folder(self, name: str, retired: bool) -> Path:
        check_skill_name(name)
        base = self.meta / "retired" if retired else self.root
        folder = base / name
        if folder.is_symlink():
            real = folder.resolve()
            where = ("outside the library" if not real.is_relative_to(self._real)
                     else "inside the library")
            raise SymlinkError(folder, f"is a symbolic link (to {where}); skill folder "
                               "resolves outside its place, dyna does not write through it")
        check_no_symlink(self.root, folder)
        return folder

    def path(self, name: str, retired: bool = False) -> Path:
        """Path of the skill file of ``name`` (active or retired): ``SKILL.md``, or an
        existing lowercase ``skill.md``."""
        folder = self._folder(name, retired)
        return _skill_file(folder) or folder / "SKILL.md"

    def _rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix()

    def _read(self, md: Path) -> bytes:
        """A skill file's bytes; a symbolic link (of the file or a folder above it) is
        followed only to a file inside the library folder."""
        return read_bytes_within(self._real, md)

    def locate(self, name: str) -> tuple[str | None, Path | None]:
        """Where ``name`` is: ``("active", file)``, ``("retired", file)`` or
        ``(None, None)``."""
        for loc in _LOCS:
            md = _skill_file(self._folder(name, loc == "retired"))
            if md is not None:
                return loc, md
        return None, None

    def _text(self, md: Path | None) -> str | None:
        if md is None:
            return None
        return self._read(md).decode("utf-8", "surrogateescape")

    # ------------------------------------------------------------------ state file
    def _state_path(self) -> Path:
        return self.meta / "state.json"

    def load_state(self) -> dict:
        """``.dyna/state.json``: ``{"skills": {name: {bookkeeping..., "path", "sha256"}}}``
        (empty when missing).

        Raises
        ------
        CorruptFileError
            Not JSON, or not that shape.
        """
        p = self._state_path()
        st = read_json(p)
        if st is None:
            return {"skills": {}}
        if (not isinstance(st, dict) or not isinstance(st.get("skills"), dict)
                or not all(isinstance(v, dict) for v in st["skills"].values())):
            raise CorruptFileError(p, None, 'expected {"skills": {name: {...}}}')
        return st

    def _save_state(self, st: dict) -> None:
        p = check_no_symlink(self.root, self._state_path())
        if not st["skills"]:          # nothing kept: no file (an undo restores its absence)
            p.unlink(missing_ok=True)
            return
        p.parent.mkdir(exist_ok=True)
        atomic_write(p, _state_text(st), durable=self.durable)

    def _owned(self, entry: dict | None, md: Path | None, text: str | None) -> bool:
        """True when dyna wrote this file itself (path and sha256 in the state file)."""
        return bool(entry and md is not None and text is not None
                    and entry.get("path") == self._rel(md)
                    and entry.get("sha256") == _sha256(text))

    def mark(self):
        """A fingerprint of the library's log and state files: it changes with every write
        by any process (the library re-reads its state when it did). The log only grows
        (its size says it); the state file is compared by content, since an atomic
        replacement can reuse an inode number and keep size and (coarse) mtime, as an
        unlogged outcome 1 -> 2 does."""
        log = file_mark(self.meta / "history.jsonl")
        raw = read_bytes_nofollow(self._state_path())
        return log, None if raw is None else hashlib.sha256(raw).digest()

    # ------------------------------------------------------------------ reading
    def scan(self):
        """(skills, errors, warnings) of every skill folder, active and retired."""
        skills, errors, warnings = [], [], []
        st = self.load_state()["skills"]
        for retired, base in ((False, self.root), (True, self.meta / "retired")):
            if not base.is_dir() or (retired and (self.meta.is_symlink()
                                                  or base.is_symlink())):
                continue
            for entry in sorted(base.iterdir()):
                if entry.name.startswith(".") or not entry.is_dir():
                    continue
                md = _skill_file(entry)
                if md is None:
                    continue
                try:
                    check_skill_name(entry.name, "folder")
                    raw = self._read(md)
                    w: list = []
                    skill = Skill.from_text(raw, md, folder=entry.name, lenient=True,
                                            warnings=w)
                    skill = self._overlay(skill, st.get(skill.name), md, raw, retired, w)
                    skills.append(skill)
                    warnings.extend(w)
                except FrontmatterError as exc:
                    errors.append(exc)
                except ConfigError as exc:
                    errors.append(FrontmatterError(md, None, exc.field, exc.reason, exc.value))
        return skills, errors, warnings

    def _overlay(self, skill: Skill, entry: dict | None, md: Path, raw: bytes,
                 retired: bool, warnings: list | None = None) -> Skill:
        """The skill as dyna knows it: bookkeeping from the state file (when it has an
        entry), status from the folder. The bookkeeping fields of a file dyna did not
        write (:meth:`_owned`) are never believed: its counts start from
        :data:`UNOWNED_COUNTS`, and a claim of trust ``approved`` (only dyna's approval
        gives it) loads the skill ``untrusted``; either adds a ``bookkeeping-fields``
        :class:`LoadWarning` to ``warnings``."""
        changes: dict = {}
        want = "retired" if retired else "active"
        if skill.status != want:
            changes["status"] = want
        if not self._owned(entry, md, raw.decode("utf-8", "surrogateescape")):
            claimed = [k for k, v in UNOWNED_COUNTS.items() if getattr(skill, k) != v
                       and not (entry and k in entry)]
            changes.update((k, UNOWNED_COUNTS[k]) for k in claimed)
            if skill.trust == "approved":
                changes["trust"] = "untrusted"
                claimed.append("trust")
            if claimed and warnings is not None:
                warnings.append(LoadWarning(
                    str(md), "bookkeeping-fields",
                    f"{', '.join(claimed)} set by hand, not by dyna: ignored"
                    + ("; loaded untrusted" if "trust" in claimed else "")))
        if entry:
            for k in _BOOK:
                if k in entry:
                    changes[k] = entry[k]
        return replace(skill, **changes) if changes else skill

    def skill_at(self, name: str) -> Skill | None:
        """The skill ``name`` as it is on disk now (None if there is no file)."""
        loc, md = self.locate(name)
        if md is None:
            return None
        raw = self._read(md)
        skill = Skill.from_text(raw, md, folder=name, lenient=True, warnings=[])
        return self._overlay(skill, self.load_state()["skills"].get(name), md, raw,
                             loc == "retired")

    # ------------------------------------------------------------------ writing
    def _move(self, name: str, src_loc: str, dst_loc: str) -> None:
        """Move the whole folder of ``name`` (resources included)."""
        src = self._folder(name, src_loc == "retired")
        dst = self._folder(name, dst_loc == "retired")
        _check_free(name, dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        check_no_symlink(self.root, dst.parent)
        src.rename(dst)

    def _put_text(self, name: str, loc: str, filename: str, text: str | None,
                  state: dict | None = None) -> Path:
        """Write (or remove, ``text`` None) the skill's file; with ``state``, the state file
        too: both go to temporary files first and are renamed only when both were written
        whole, so a full disk leaves both as they were."""
        folder = self._folder(name, loc == "retired")
        md = check_no_symlink(self.root, folder / filename)
        if text is None:
            md.unlink(missing_ok=True)
            _rmdir_if_empty(folder)
            return md
        folder.parent.mkdir(parents=True, exist_ok=True)
        check_no_symlink(self.root, folder)
        made = not folder.exists()
        folder.mkdir(exist_ok=True)
        targets = [(md, text)]
        if state is not None:
            sp = check_no_symlink(self.root, self._state_path())
            sp.parent.mkdir(exist_ok=True)
            targets.append((sp, _state_text(state)))
        try:
            with contextlib.ExitStack() as stack:
                for path, data in targets:
                    tmp = stack.enter_context(atomic_target(path, durable=self.durable))
                    with open(tmp, "wb") as fh:
                        fh.write(data.encode("utf-8"))
                        fh.flush()
                        if self.durable:
                            os.fsync(fh.fileno())
        except BaseException:
            if made:                 # a failed write (a full disk) leaves no empty folder
                _rmdir_if_empty(folder)
            raise
        return md

    def write(self, skill: Skill, *, content: bool = True, log: bool = True,
              clean=None) -> dict:
        """Write ``skill`` (its text and/or its bookkeeping and place) and return the change
        record for the history.

        ``content``: the skill's text changed (create, patch, approve): the file is
        rewritten. Otherwise (outcome, retire, restore, evict) a file dyna did not write
        keeps its bytes (it moves when the status changes) and only the state file
        changes; a file dyna wrote gets the new bookkeeping in its frontmatter too, unless
        ``log`` is off (an unlogged change never touches a file, so undo still applies).
        ``clean`` (the library's redaction safety net) is applied to the text before the
        change when diffing, so the history never holds a secret the old file had (an
        undo then restores the redacted text).

        Raises
        ------
        ConfigError
            A skill loaded leniently (description over 1,024 characters, name differing
            from its folder) whose text would be rewritten: fix it first.
        """
        name = skill.name
        st = self.load_state()
        entry_b = st["skills"].get(name)
        loc_b, md_b = self.locate(name)
        text_b = self._text(md_b)
        owned = self._owned(entry_b, md_b, text_b)
        loc_a = "active" if skill.active else "retired"
        moved = loc_b is not None and loc_b != loc_a
        if moved:
            _check_free(name, self._folder(name, loc_a == "retired"))
        filename = md_b.name if md_b is not None else "SKILL.md"
        rewrite = content or text_b is None or (owned and log)
        md_a = self._folder(name, loc_a == "retired") / filename
        text_a = text_b
        if rewrite:
            _check_writable(skill, md_a)
            text_a = skill.to_text()
        entry_a = {k: getattr(skill, k) for k in _BOOK}
        if rewrite or owned:
            entry_a.update(path=self._rel(md_a), sha256=_sha256(text_a))
        st["skills"][name] = entry_a
        # the writes that need space first, where the file is now, and the folder moved
        # (a rename) last: a full disk stops the change before anything of it is made
        if rewrite:     # the text and the state renamed together once both are written
            self._put_text(name, loc_b if moved else loc_a, filename, text_a, state=st)
        else:
            self._save_state(st)
        try:
            if moved:
                self._move(name, loc_b, loc_a)
        except BaseException:
            # best effort: the text and bookkeeping as they were (a new file removed)
            if rewrite:
                self._put_text(name, loc_b if moved else loc_a, filename, text_b)
            self._save_state(_state_with(st, name, entry_b))
            raise
        return {"loc_before": loc_b, "loc_after": loc_a, "file": filename,
                "diff": text_diff(_cleaned(clean, text_b), text_a),
                "sha_after": _sha256(text_a),
                "book_before": entry_b, "book_after": entry_a}

    def matches(self, name: str, rec: dict) -> bool:
        """True when ``name`` is now as the change ``rec`` left it (place and text)."""
        loc, md = self.locate(name)
        if "diff" not in rec:                        # a record of an older dyna
            return [self._text(md) if loc == "active" else None,
                    self._text(md) if loc == "retired" else None] == rec.get("after")
        text = self._text(md)
        return loc == rec["loc_after"] and (None if text is None else _sha256(text)) == \
            rec["sha_after"]

    def revert(self, name: str, records: list[dict], clean=None) -> tuple[Skill | None, dict]:
        """Undo the changes ``records`` (newest first) made to ``name``: reverse each diff,
        move the folder back, restore the bookkeeping; returns the skill now in place and
        the change record of the undo.

        Raises
        ------
        ConfigError
            The file changed outside dyna since (a diff does not apply any more).
        """
        st = self.load_state()
        loc0, md0 = self.locate(name)
        text0 = self._text(md0)
        filename = md0.name if md0 is not None else "SKILL.md"
        loc, text, entry = loc0, text0, st["skills"].get(name)
        for rec in records:
            if "diff" not in rec:                    # older dyna: whole texts
                act, ret = rec.get("before") or [None, None]
                loc = "active" if act is not None else ("retired" if ret is not None else None)
                text = act if act is not None else ret
                continue
            if loc != rec["loc_after"]:
                raise ConfigError("name", name, f"changed outside dyna since history record "
                                  f"{rec['seq']} (it is {loc or 'absent'}); cannot undo")
            try:
                text = apply_diff(text or "", rec["diff"], reverse=True)
            except ValueError as exc:
                raise ConfigError("name", name, f"edited outside dyna since history record "
                                  f"{rec['seq']} ({exc}); cannot undo") from None
            loc = rec["loc_before"]
            text = None if loc is None else text
            entry = rec["book_before"]
            filename = rec.get("file", filename)
        # apply the target state: folder place first, then the text
        if loc0 is not None and loc is not None and loc0 != loc:
            self._move(name, loc0, loc)
        if loc is None:
            if loc0 is not None:
                self._put_text(name, loc0, (md0.name if md0 else filename), None)
        elif text != text0 or loc0 is None:
            if md0 is not None and md0.name != filename and loc0 is not None:
                self._put_text(name, loc, md0.name, None)
            self._put_text(name, loc, filename, text)
        if entry is None:
            st["skills"].pop(name, None)
        else:
            st["skills"][name] = entry
        entry_b = self.load_state()["skills"].get(name)
        self._save_state(st)
        skill = self.skill_at(name)
        return skill, {"loc_before": loc0, "loc_after": loc, "file": filename,
                       "diff": text_diff(_cleaned(clean, text0), text or ""),
                       "sha_after": None if text is None else _sha256(text),
                       "book_before": entry_b, "book_after": entry}

    # ------------------------------------------------------------------ log and queue
    def _meta_file(self, *parts) -> Path:
        return check_no_symlink(self.root, self.meta.joinpath(*parts))

    def append_history(self, rec: dict) -> None:
        """Append a record to ``.dyna/history.jsonl``."""
        append_record(self._meta_file("history.jsonl"), rec, durable=self.durable)

    def history(self) -> list[dict]:
        """Every history record, oldest first, checked (:func:`check_history`).

        Raises
        ------
        CorruptFileError
            A line that is not JSON or not a record dyna writes (file and line).
        """
        return check_history(read_records(self._meta_file("history.jsonl")),
                             self.meta / "history.jsonl")

    def tail(self) -> dict | None:
        """The last history record (read from the end of the file)."""
        return read_last_record(self._meta_file("history.jsonl"))

    def put_pending(self, item: PendingItem) -> None:
        """Write a staged proposal to ``.dyna/pending/<id>.json``.

        Raises
        ------
        ConfigError
            That file exists (it is never overwritten).
        """
        folder = self._meta_file("pending")
        folder.mkdir(parents=True, exist_ok=True)
        rec = {"id": item.id, "dest": item.dest, "text": item.skill.to_text(),
               "run_id": item.run_id, "staged_at": item.staged_at,
               "provenance": list(item.provenance), "reason": item.reason}
        p = self._meta_file("pending", f"{item.id}.json")
        if p.exists():
            raise ConfigError("id", item.id, f"{p} exists; not overwritten")
        atomic_write(p, json.dumps(rec, indent=1, sort_keys=True), durable=self.durable)

    def pending(self) -> list[PendingItem]:
        """Staged proposals, by id.

        Raises
        ------
        CorruptFileError
            A pending file that is not JSON of a proposal (file and line).
        """
        folder = self._meta_file("pending")
        if not folder.is_dir():
            return []
        out = []
        for p in sorted(folder.glob("p*.json")):
            rec = read_json(check_no_symlink(self.root, p))
            keys = ("id", "dest", "text", "run_id", "staged_at", "provenance", "reason")
            if not isinstance(rec, dict) or any(k not in rec for k in keys):
                missing = [k for k in keys if not isinstance(rec, dict) or k not in rec]
                raise CorruptFileError(p, None, "not a pending proposal (missing "
                                       f"{', '.join(missing)})")
            if not (isinstance(rec["text"], str) and isinstance(rec["provenance"], list)
                    and all(isinstance(rec[k], str) for k in ("id", "dest", "run_id",
                                                              "staged_at", "reason"))):
                raise CorruptFileError(p, None, "not a pending proposal (wrong field types)")
            skill = Skill.from_text(rec["text"], p)
            out.append(PendingItem(rec["id"], rec["dest"], skill, rec["run_id"],
                                   rec["staged_at"], tuple(rec["provenance"]), rec["reason"]))
        return out

    def drop_pending(self, pid: str) -> None:
        """Remove the staged proposal ``pid``'s file (no-op if absent).

        Raises
        ------
        ConfigError
            ``pid`` is not a pending id (``p`` and digits).
        """
        if not re.fullmatch(r"p\d+", pid):
            raise ConfigError("id", pid, "not a pending id")
        self._meta_file("pending", f"{pid}.json").unlink(missing_ok=True)

    def pending_numbers(self) -> list[int]:
        """The numbers of the pending files' ids (from their names, unparsed)."""
        folder = self._meta_file("pending")
        if not folder.is_dir():
            return []
        return [int(p.stem[1:]) for p in folder.glob("p*.json") if p.stem[1:].isdigit()]


def _cleaned(clean, text: str | None) -> str:
    """``text`` through the redaction ``clean`` (when given); ``""`` for no text."""
    if text is None:
        return ""
    return clean(text) if clean is not None else text


def _skill_file(folder: Path) -> Path | None:
    """``folder/SKILL.md``, else an existing lowercase ``folder/skill.md``, else None."""
    for n in ("SKILL.md", "skill.md"):
        p = folder / n
        if p.is_file() or p.is_symlink():
            return p
    return None


def _check_writable(skill: Skill, md: Path) -> None:
    """Refuse to write a skill that was loaded only leniently (rules waived on reading)."""
    if "description-length" in skill.lenient and len(skill.description) > MAX_DESCRIPTION:
        raise ConfigError("description", skill.description[:40] + "...",
                          f"must have at most {MAX_DESCRIPTION} characters (has "
                          f"{len(skill.description)}); {md} was loaded with a warning and is "
                          "not rewritten until the description is shortened")
    if "name-folder" in skill.lenient:
        raise ConfigError("name", skill.name, f"{md}: its frontmatter name differs from its "
                          "folder (loaded with a warning); fix the file before dyna writes it")


def _check_free(name: str, dst: Path) -> None:
    """Refuse (ConfigError) to move skill ``name`` to folder ``dst`` when a folder holding
    something is there (an empty one is removed)."""
    if dst.exists():
        _rmdir_if_empty(dst)
        if dst.exists():
            raise ConfigError("name", name, f"cannot move it to {dst}: it exists")


def _state_text(st: dict) -> str:
    """The state file's text: one line per skill (readable, and dumped by the C encoder:
    ``indent=`` is pure Python)."""
    lines = [f" {json.dumps(k)}: {json.dumps(st['skills'][k], sort_keys=True)}"
             for k in sorted(st["skills"])]
    return '{"skills": {\n' + ",\n".join(lines) + "\n}}\n"


def _state_with(st: dict, name: str, entry: dict | None) -> dict:
    """The state ``st`` with the bookkeeping of ``name`` set to ``entry`` (None: removed)."""
    skills = {k: v for k, v in st["skills"].items() if k != name}
    if entry is not None:
        skills[name] = entry
    return {**st, "skills": skills}


def _rmdir_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it is an empty folder (else leave it)."""
    try:
        folder.rmdir()
    except OSError:
        pass
