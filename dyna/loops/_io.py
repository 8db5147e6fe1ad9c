"""Atomic file writes, append-only JSON-lines logs and the redaction safety net used by the
loop stores."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

from dyna.redact import redact, scan
from dyna.store.jsonl import atomic_target


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
