"""Values and schema errors worded in JSON terms, for the MCP server's error messages.

A client sees its own arguments as JSON, so a message names them that way: ``null``,
``false``, ``"text"``, ``episodes[0].reward``; a value is shortened to :data:`VALUE_CHARS`
characters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from dyna.errors import ConfigError
from dyna.mcp_server.schemas import FILE_NAME_REASON

__all__ = ["VALUE_CHARS", "json_list", "json_text", "json_value", "missing_error", "path_name",
           "schema_error", "unknown_error"]

#: Message texts show at most this many characters of a value.
VALUE_CHARS = 120


def json_value(value):
    """``value`` as plain JSON data (numpy scalars and tuples converted; non-finite floats
    and other objects as strings), for error payloads."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # numpy scalars and arrays
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return repr(value)


def json_text(value) -> str:
    """``value`` written as JSON (``null``, ``false``, ``"text"``), shortened for a message."""
    text = json.dumps(json_value(value), ensure_ascii=False)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 3] + "..."


def json_list(values) -> str:
    """``["a", "b"]`` -> ``'"a", "b"'``."""
    return ", ".join(json.dumps(v) for v in values)


def path_name(path) -> str:
    """``["episodes", 0, "reward"]`` -> ``"episodes[0].reward"``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def unknown_error(field: str, value, what: str, known) -> ConfigError:
    """The error of an argument (or episode field) ``field`` that is not one of ``known``:
    ``colour=null: unknown parameter of get_competence; one of "task_type", "level"``, or
    ``... takes no parameters`` when ``known`` is empty (``what`` names the kind)."""
    known = list(known)
    if not known:
        return ConfigError(field, value, f"unknown {what}: it takes no parameters")
    return ConfigError(field, value, f"unknown {what}; one of {json_list(known)}")


def missing_error(name: str, missing, path=()) -> ConfigError:
    """The error of a call to tool ``name`` that leaves out the required fields ``missing``
    (names, in the schema's order; at least one) of the object at ``path`` (``[]``: the
    arguments, ``["episodes", 0]``: an episode). ``field`` is the first missing one; the
    reason names all of them: ``task_type=null: is required by record; missing: task_type,
    action_type, outcome, reward (or give episodes=[...])``."""
    missing = list(missing)
    where = "in every episode" if path else f"by {name}"
    reason = f"is required {where}"
    if len(missing) > 1:
        reason += "; missing: " + ", ".join(missing)
    if "confirm" in missing:
        reason += " (destructive: pass confirm=true)"
    elif name == "record" and not path:
        reason += " (or give episodes=[...])"
    return ConfigError(path_name(list(path) + [missing[0]]), None, reason)


def schema_error(name: str, err) -> ConfigError:
    """One :mod:`jsonschema` error of tool ``name``'s arguments as a :class:`ConfigError`:
    the field's path (``episodes[0].reward``), the value, and a reason in JSON terms."""
    path, kw, arg, inst = list(err.absolute_path), err.validator, err.validator_value, \
        err.instance
    words = {"string": "a string", "number": "a number", "integer": "an integer",
             "boolean": "a boolean (true or false)", "array": "an array",
             "object": "an object", "null": "null"}
    if kw == "required":
        return missing_error(name, [p for p in arg if p not in inst], path)
    if kw == "additionalProperties":
        extra = next(k for k in inst if k not in err.schema.get("properties", {}))
        return unknown_error(path_name(path + [extra]), inst[extra], "episode field",
                             err.schema.get("properties", {}))
    field = path_name(path) or "arguments"
    if kw == "type":
        types = [arg] if isinstance(arg, str) else list(arg)
        reason = "must be " + " or ".join(words.get(t, t) for t in types)
    elif kw == "enum":
        reason = f"must be one of {json_list(arg)}"
    elif kw == "const":
        reason = ("must be true to run a destructive tool" if path == ["confirm"] else
                  f"must be {json.dumps(arg)}" + (" (the server's tenant)"
                                                  if path[-1:] == ["tenant_id"] else ""))
    elif kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">",
              "exclusiveMaximum": "<"}[kw]
        reason = f"must be {op} {arg:g}" if isinstance(arg, float) else f"must be {op} {arg}"
    elif kw in ("minItems", "maxItems"):
        lo = err.schema.get("minItems")
        hi = err.schema.get("maxItems")
        if lo == hi and path[-1:] == ["state_features"]:
            reason = f"must have length dim={lo}"
        elif kw == "minItems":
            reason = f"must have at least {arg} item" + ("s" if arg != 1 else "")
        else:
            reason = f"must have at most {arg} items"
    elif kw == "minLength":
        reason = "must be a non-empty string"
    elif kw == "pattern":
        reason = FILE_NAME_REASON if path == ["path"] else f"must match {arg}"
    else:  # a keyword this schema does not use today
        reason = f"does not satisfy {kw} {json.dumps(json_value(arg))}"
    return ConfigError(field, inst, reason)
