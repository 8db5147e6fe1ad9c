"""The redaction safety net under every write of a loop library."""

from __future__ import annotations

import collections

from dyna.redact import redact, scan, scan_found

__all__ = ["SafetyNet"]


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
        found = scan_found(obj)
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
