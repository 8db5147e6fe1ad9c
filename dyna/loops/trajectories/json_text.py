"""JSON text of a trajectories file: read strictly (untrusted input) or plainly (a tool's
output, to look inside)."""

from __future__ import annotations

import json

from dyna.fileio.unique_json import loads_unique
from dyna.loops.llm.client import json_depth

__all__ = ["MAX_DEPTH", "plain_json", "strict_json"]

#: Deepest nesting of arrays and objects accepted in a run's JSON texts (the airline
#: tools' outputs nest 4 levels; the redactor and the store read recursively).
MAX_DEPTH = 32


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def strict_json(text: str):
    """Strict JSON of untrusted text: NaN and Infinity refused (ValueError), an object
    naming a key twice refused (:class:`dyna.fileio.unique_json.DuplicateKeyError`, a
    ValueError: which value counts differs between readers), nesting past :data:`MAX_DEPTH` (or the
    parser's own limit) a ValueError "nested too deeply"."""
    try:
        value = loads_unique(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if json_depth(value) > MAX_DEPTH:
        raise ValueError("nested too deeply")
    return value


def plain_json(text: str):
    """The parsed JSON of a text that looks like an object or array (a tool output), or
    None: plain parsing, no detector."""
    s = text.strip()
    if s[:1] not in "{[" or s[-1:] not in "}]":
        return None
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        return None
