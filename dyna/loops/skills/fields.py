"""The rules a skill's fields follow: names, lists, dates, kinds and trust.

A skill's name follows the Agent Skills reference validator (``skills-ref``); its triggers,
actions and provenance are lists given as text or as sequences; its dates are ISO dates.
:class:`dyna.loops.skills.record.Skill` applies these rules when it is built.
"""

from __future__ import annotations

import datetime as _dt
import re
import unicodedata
from collections.abc import Iterable

from dyna.errors import ConfigError
from dyna.loops._text import identity_text
from dyna.loops.provenance import TRUSTED, Source
from dyna.loops.provenance import is_untrusted as _is_untrusted

__all__ = [
    "ACTION_RE", "KINDS", "MAX_DESCRIPTION", "MAX_NAME", "MAX_TRIGGER", "METADATA_KEYS",
    "NAME_RE", "STATUSES", "TRUST_LEVELS", "UNTRUSTED_SOURCES", "check_date",
    "check_skill_name", "frozen_values", "is_untrusted", "split_list",
]


NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
ACTION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_TRIGGER = 128

UNTRUSTED_SOURCES = frozenset(s.value for s in Source if s not in TRUSTED)
"""Provenance sources that make a proposal untrusted (:class:`dyna.loops.provenance.Source`):
tool output and arguments, fetched pages, user files, e-mail, retrieved documents, and any
source name that is not one of the trusted ones (:func:`is_untrusted` parses)."""

KINDS = ("skill", "workflow")
TRUST_LEVELS = ("trusted", "approved", "untrusted")
STATUSES = ("active", "retired")


def is_untrusted(provenance: Iterable[str]) -> bool:
    """True when any provenance source is not a trusted one
    (:func:`dyna.loops.provenance.is_untrusted`: parsed, so ``"Tool_Output"``, ``"browser"``
    and a misspelt or unknown source are untrusted too)."""
    return _is_untrusted(provenance)


def check_skill_name(name, field_name: str = "name") -> str:
    """Validate a skill name and return it NFKC-normalised (the rule of the Agent Skills
    reference validator, ``skills-ref``'s ``_validate_name``).

    After NFKC normalisation a name is 1-64 characters, lowercase (``name == name.lower()``),
    made of letters and digits of any script (``str.isalnum``) and single hyphens, and does
    not start or end with a hyphen; so it can never contain ``/``, ``.`` or white space.
    ``"café-notes"`` and ``"данные"`` are names; two names are compared after NFKC (and,
    for look-alikes, after :func:`dyna.loops.provenance.skeleton`).

    Raises
    ------
    ConfigError
        Anything else, e.g. ``"../x"``, ``"/etc"``, ``"Deploy"``, ``"a--b"``, ``"a_b"``.
    """
    if not isinstance(name, str):
        raise ConfigError(field_name, name, "must be a string")
    norm = unicodedata.normalize("NFKC", name)
    if not 1 <= len(norm) <= MAX_NAME:
        raise ConfigError(field_name, name, f"must have 1-{MAX_NAME} characters")
    # (no hyphen at either end, so a name is never all hyphens: what is left without
    # them is non-empty, and isalnum() is every character's isalnum())
    if (norm != norm.lower() or norm.startswith("-") or norm.endswith("-") or "--" in norm
            or not norm.replace("-", "").isalnum()):
        raise ConfigError(field_name, name, "must be lowercase letters, digits and single "
                          "hyphens (no path separators)")
    return norm


def split_list(value, field_name: str, sep: str) -> tuple[str, ...]:
    """A string (split on ``sep``; on white space when ``sep`` is empty) or a list of
    strings -> tuple of items, each with its white space collapsed, empty ones left out and
    repeats (compared by :func:`dyna.loops._text.identity_text`) dropped, first spelling kept.

    Raises
    ------
    ConfigError
        ``value`` is neither a string nor a list or tuple of strings (named ``field_name``).
    """
    if value is None:
        return ()
    return _split_any(value, field_name, sep)


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _frozen(value) -> bool:
    """True when ``value`` cannot change in place: an exact str, int, float, bool or None,
    or a tuple of such values (a list, dict, set or any other object can)."""
    t = type(value)
    return t in _ATOMS or (t is tuple and all(_frozen(v) for v in value))


def frozen_values(items: tuple) -> bool:
    """True when every value of ``items`` (a Skill's ``extra`` pairs) is :func:`_frozen`."""
    return all(_frozen(v) for _, v in items)


def _split_any(value, field_name: str, sep: str) -> tuple[str, ...]:
    """:func:`split_list` of any value (nothing remembered)."""
    if isinstance(value, str):
        items = value.split(sep) if sep else value.split()
    elif isinstance(value, (list, tuple)):
        items = []
        for v in value:
            if not isinstance(v, str):
                raise ConfigError(field_name, value, "items must be strings")
            items.extend(v.split(sep) if sep else v.split())
    else:
        raise ConfigError(field_name, value, "must be a string or a list of strings")
    out: dict[str, str] = {}
    for it in items:
        it = " ".join(it.split())
        if it:
            out.setdefault(identity_text(it), it)
    return tuple(out.values())


def check_date(field_name: str, value) -> str:
    """``value`` if it is an ISO date ``YYYY-MM-DD`` (``""`` for ``""`` or None).

    Raises
    ------
    ConfigError
        Anything else, named ``field_name``.
    """
    if value in ("", None):
        return ""
    if not isinstance(value, str):
        raise ConfigError(field_name, value, "must be an ISO date string YYYY-MM-DD")
    try:
        _dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(field_name, value, "must be an ISO date YYYY-MM-DD") from None
    if len(value) != 10:
        raise ConfigError(field_name, value, "must be an ISO date YYYY-MM-DD")
    return value


#: The ``metadata`` keys of a SKILL.md that hold dyna's own fields of a skill (the other
#: keys are kept as read, in :attr:`Skill.extra_metadata`).
METADATA_KEYS = ("triggers", "kind", "actions", "created", "last_verified", "source_run",
                 "provenance", "trust", "successes", "failures", "a", "b", "status",
                 "retired_reason")

