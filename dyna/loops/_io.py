"""Atomic file writes, append-only JSON-lines logs and the redaction safety net used by the
loop stores."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import filelock

from dyna.errors import DynaError
from dyna.redact import redact, scan
from dyna.store.jsonl import atomic_target


class LibraryLockTimeout(DynaError, TimeoutError):
    """Another process (or another library object) held a library's file lock longer than
    the timeout; nothing was written.

    Attributes
    ----------
    path : str
        The lock file (``<library>/.dyna/lock`` or ``<file>.lock``).
    timeout : float
        Seconds waited.
    """

    def __init__(self, path: object, timeout: float):
        self.path = str(path)
        self.timeout = timeout
        super().__init__(f"lock={self.path!r}: held by another writer for more than "
                         f"{timeout:g} s; nothing was written, try again")

    def __reduce__(self):
        return (type(self), (self.path, self.timeout))


class _LibraryFileLock(filelock.FileLock):
    """A :class:`filelock.FileLock` whose timeout raises :class:`LibraryLockTimeout`."""

    def acquire(self, timeout=None, *args, **kwargs):
        try:
            return super().acquire(timeout, *args, **kwargs)
        except filelock.Timeout:
            raise LibraryLockTimeout(self.lock_file,
                                     self.timeout if timeout is None else timeout) from None


def lock_path(folder_or_file: Path) -> Path:
    """The lock file :func:`library_lock` uses for ``folder_or_file``: ``.dyna/lock`` inside
    a library folder (an existing folder, or a path without a suffix), ``<name>.lock`` beside
    a file (``MEMORY.md`` -> ``MEMORY.md.lock``)."""
    p = Path(folder_or_file)
    if p.is_dir() or (not p.exists() and not p.suffix):
        return p / ".dyna" / "lock"
    return p.with_name(p.name + ".lock")


def library_lock(folder_or_file: Path, timeout: float = 30) -> filelock.FileLock:
    """An inter-process lock (:mod:`filelock`, ``fcntl.flock`` on POSIX) for every write to a
    skill library folder or a memory file.

    Hold it around the whole read-modify-write (re-read the state under the lock). The lock is
    re-entrant within one thread of one lock object, so keep one object per library and
    nest freely; two objects (two processes, or two libraries on one folder in one process)
    exclude each other. The lock file is :func:`lock_path` (``<folder>/.dyna/lock``, or
    ``MEMORY.md.lock`` beside a memory file); its folder is created if missing.

    Parameters
    ----------
    folder_or_file : Path
        The library folder, or the memory file.
    timeout : float
        Seconds to wait for the lock on each acquisition (> 0).

    Raises
    ------
    LibraryLockTimeout
        (on acquisition) The lock was not obtained within ``timeout``; names the lock file.
    dyna.errors.ConfigError
        ``timeout`` is not a positive number, or the lock file or its folder is a symlink
        (a lock written through a link could land outside the library).
    """
    from dyna.errors import ConfigError, check_range

    check_range("timeout", timeout, 0, lo_open=True)
    path = lock_path(folder_or_file)
    for p in (path.parent, path):
        if p.is_symlink():
            raise ConfigError("path", str(p), "is a symlink; refusing to write through it")
    path.parent.mkdir(parents=True, exist_ok=True)
    return _LibraryFileLock(str(path), timeout=timeout)


def atomic_write(path: Path, data: str | bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically: readers see the old or the new file, never
    a part of it.

    The data goes to a temporary file in the same folder (:func:`dyna.store.jsonl.atomic_target`),
    is flushed (and fsync'ed when ``durable``) and then renamed over ``path``. Text is written
    as UTF-8 with the newlines it contains (no platform translation); lone surrogates
    (bytes that were not UTF-8, read with ``surrogateescape``) are written back as the
    original bytes.

    Raises
    ------
    OSError
        The folder is not writable; ``path`` is then unchanged.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    with atomic_target(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())


def read_text_exact(path: Path) -> str | None:
    """File content as text that :func:`atomic_write` writes back byte for byte, or None
    when the file does not exist."""
    try:
        return Path(path).read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return None


def append_jsonl(path: Path, record: dict, *, durable: bool = True) -> None:
    """Append one JSON record as a line to ``path`` (created with its folder if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, ensure_ascii=True, sort_keys=True) + "\n"
    with open(path, "ab") as fh:
        fh.write(line.encode("ascii"))
        fh.flush()
        if durable:
            os.fsync(fh.fileno())


def read_jsonl(path: Path) -> list[dict]:
    """All complete records of a JSON-lines file ([] when missing). A torn last line (a
    crash during an append) is ignored; a corrupt line elsewhere raises ValueError."""
    try:
        raw = Path(path).read_text(encoding="ascii")
    except FileNotFoundError:
        return []
    lines = raw.split("\n")
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: corrupt log line")
    return out


class SafetyNet:
    """The always-on redaction under every write of a loop library (skills, memory,
    pending items, history records), with its catches counted per detector.

    Independent of a loop's ``redaction`` switch (which governs only the digest a reviewer
    sees): whatever reaches a library is passed through here before it is written.
    :meth:`values` redacts string values only (:func:`dyna.redact.redact` with no sensitive
    key names), for records whose keys are schema fields (a SKILL.md's ``name`` is not a
    person's name); :meth:`free` also redacts the values of sensitive keys of a free-form
    mapping (frontmatter ``extra`` entries). ``counts`` maps detector name -> catches
    (:func:`dyna.redact.scan`; ``"sensitive_key"`` for a value redacted by its key name).
    """

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()

    def values(self, obj):
        found = scan(obj)
        if not found:
            return obj
        self.counts.update(found)
        return redact(obj, (), values=True)

    def free(self, obj):
        out = redact(obj)
        if out == obj:
            return obj
        found = scan(obj)
        if found:
            self.counts.update(found)
        else:
            self.counts["sensitive_key"] += 1
        return out
