"""The skill catalog an agent gets in context: every active skill's name and description
(the Agent Skills format's progressive disclosure; a body is read only when the skill is
used), in three formats:

- ``markdown``: a list, ``- name: description`` (white space of a description collapsed);
- ``xml``: the ``<available_skills>`` block of the Agent Skills reference tooling's
  ``to-prompt`` (``skills-ref``, ``skills_ref.prompt.to_prompt``), line for line: each
  element's tag and its text on lines of their own, name and description escaped with
  :func:`html.escape`, the location the absolute path of the skill's SKILL.md;
- ``json``: a list of ``{"name", "description", "location"}`` objects (``location`` None
  for a library in memory).
"""

from __future__ import annotations

import html
import json

from dyna.errors import ConfigError

__all__ = ["CATALOG_FORMATS", "catalog_entries", "render_catalog"]

CATALOG_FORMATS = ("markdown", "xml", "json")


def catalog_entries(lib) -> list[tuple[str, str, str | None]]:
    """``(name, description, location)`` of every active skill of the
    :class:`~dyna.loops.skills.SkillLibrary` ``lib``, by name; ``location`` is the absolute
    path of its skill file, or None for a library in memory."""
    out = []
    for s in sorted(lib.skills(), key=lambda s: s.name):
        loc = None
        if lib.location is not None:
            loc = str(lib.backend.path(s.name).resolve())
        out.append((s.name, s.description, loc))
    return out


def _xml(entries) -> str:
    """The ``<available_skills>`` block of ``skills-ref to-prompt`` (module docstring)."""
    lines = ["<available_skills>"]
    for name, description, loc in entries:
        lines += ["<skill>", "<name>", html.escape(name), "</name>", "<description>",
                  html.escape(description), "</description>"]
        if loc is not None:
            lines += ["<location>", html.escape(loc), "</location>"]
        lines.append("</skill>")
    lines.append("</available_skills>")
    return "\n".join(lines) + "\n"


def render_catalog(lib, fmt: str = "markdown") -> str:
    """The catalog of ``lib``'s active skills in format ``fmt`` (one of
    :data:`CATALOG_FORMATS`, module docstring), ending with a newline (markdown of an empty
    library: ``""``).

    Raises
    ------
    ConfigError
        ``fmt`` is not one of :data:`CATALOG_FORMATS` (field ``--format``).
    """
    if fmt not in CATALOG_FORMATS:
        raise ConfigError("--format", fmt, f"must be one of {', '.join(CATALOG_FORMATS)}")
    entries = catalog_entries(lib)
    if fmt == "xml":
        return _xml(entries)
    if fmt == "json":
        return json.dumps([{"name": n, "description": d, "location": loc}
                           for n, d, loc in entries], indent=2, ensure_ascii=False) + "\n"
    return "".join(f"- {n}: {' '.join(d.split())}\n" for n, d, _ in entries)
