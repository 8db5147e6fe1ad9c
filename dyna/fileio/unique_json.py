"""JSON that names no key twice in one object.

JSON readers disagree on an object that names one key twice (Python's keeps the last
value, others the first, a person reading the text sees both): text from a file, a model
or a dataset that does so is refused as damaged rather than read one way
(:func:`loads_unique`), and the safety net reads such text as the plain text it is
(:mod:`dyna.redact`), so a value the parsed copy would drop is still scanned.
"""

from __future__ import annotations

import json

__all__ = ["DuplicateKeyError", "loads_unique"]


#: How a message shows a key: :mod:`dyna.redact` sets it to its redaction when it loads
#: (it reads JSON with this module, so this module cannot import it); until then no key
#: is shown.
show_key = None


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice. ``key`` is the key as parsed (text from the
    input); the message shows it redacted (:func:`dyna.redact.redact_text`) and cut to
    60 characters."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        if show_key is None:
            return "duplicate key (not shown)"
        shown = show_key(self.key[:4096])
        if len(shown) > 60:
            shown = shown[:60] + "..."
        return f"duplicate key {shown!r}"

    def __reduce__(self):
        return (type(self), (self.key,))


def _unique_object(pairs: list) -> dict:
    """``object_pairs_hook`` of :func:`loads_unique`."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


def loads_unique(text, **kwargs):
    """``json.loads(text, **kwargs)``, refusing an object that names a key twice
    (equal after JSON's escapes are read: ``"a"`` and ``"\\u0061"`` are one key).

    Raises
    ------
    json.JSONDecodeError
        Not JSON.
    DuplicateKeyError
        A key named twice in one object (a ValueError).
    RecursionError
        Nested deeper than the decoder goes.
    """
    return json.loads(text, object_pairs_hook=_unique_object, **kwargs)
