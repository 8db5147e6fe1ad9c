"""The SKILL.md format of a skill: its frontmatter mapping, and parsing a file's text.

A SKILL.md has YAML frontmatter with ``name`` and ``description``; all of dyna's own fields
live under ``metadata`` as strings (triggers as a comma-separated list, dates as ISO dates,
counts as decimal strings), so the files stay valid Agent Skills. A file that breaks a rule
of the specification can be read leniently (as the specification's client guide asks),
with a :class:`LoadWarning`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from dyna.errors import ConfigError
from dyna.loops.frontmatter import FrontmatterError, parse_frontmatter, shown
from dyna.loops.skills.fields import MAX_DESCRIPTION, METADATA_KEYS, check_skill_name

__all__ = ["LoadWarning", "skill_from_text", "skill_frontmatter"]


@dataclass(frozen=True)
class LoadWarning:
    """A skill file loaded although it breaks a rule of the Agent Skills specification (as
    the specification's client guide asks); dyna refuses to write such a skill until the
    file is fixed.

    Attributes
    ----------
    path : str
        The skill file.
    rule : str
        ``"description-length"`` (over 1,024 characters), ``"name-folder"`` (the
        frontmatter ``name`` differs from the folder; loaded under the folder name) or
        ``"look-alike-name"`` (two skills whose names share a confusable skeleton),
        ``"bookkeeping-fields"`` (a file dyna did not write sets outcome counts or trust
        ``approved``: they are ignored, the skill loaded untrusted), ``"unknown-fields"``
        (top-level fields the specification does not define, one warning per file naming
        them all: kept as read and written back, used by nothing) or ``"nested-folders"``
        (SKILL.md files in folders below the library's skill folders, which a library
        does not read: the path is the library folder). Only the first two are waived
        rules that keep the skill from being written back.
    message : str
    """

    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}: {self.message}"


def _warn(warnings: list | None, path, rule: str, message: str) -> None:
    """Append a :class:`LoadWarning` to ``warnings`` (when there is a list)."""
    if warnings is not None:
        warnings.append(LoadWarning(str(path), rule, message))


def _flatten(trig):
    """Triggers given both at the top level and under ``metadata``, as one flat list."""
    if isinstance(trig, list) and any(isinstance(t, list) for t in trig):
        out = []
        for t in trig:
            out.extend(t if isinstance(t, list) else [t])
        return out
    return trig


def _normalised_text(text: str | bytes) -> str:
    """``text`` as a string without a BOM, its line ends LF."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _line_of(text: str, key: str) -> int | None:
    """1-based line of top-level ``key:`` in a frontmatter text (None if absent)."""
    rx = re.compile(rf"^['\"]?{re.escape(key)}['\"]?\s*:")
    for i, line in enumerate(text.split("\n")):
        if i and line.rstrip() == "---":
            return None
        if rx.match(line):
            return i + 1
    return None


def skill_frontmatter(skill) -> dict:
    """The frontmatter mapping written to a skill's SKILL.md: ``name``, ``description``, the
    other top-level fields as read (:attr:`Skill.extra`), and ``metadata`` holding dyna's
    fields, every value a string, then the other metadata entries as read."""
    meta: dict = {"triggers": ", ".join(skill.triggers)}
    if skill.kind != "skill":
        meta["kind"] = skill.kind
    if skill.actions:
        meta["actions"] = " ".join(skill.actions)
    meta.update(created=skill.created, last_verified=skill.last_verified,
                source_run=skill.source_run, provenance=", ".join(skill.provenance),
                trust=skill.trust, successes=str(skill.successes),
                failures=str(skill.failures))
    if skill.a is not None:
        meta["a"] = repr(skill.a)
        meta["b"] = repr(skill.b)
    meta["status"] = skill.status
    if skill.retired_reason:
        meta["retired_reason"] = skill.retired_reason
    meta.update(skill.extra_metadata)
    out = {"name": skill.name, "description": skill.description}
    out.update(skill.extra)
    out["metadata"] = meta
    return out


def skill_from_text(cls, text: str | bytes, path="<text>", folder: str | None = None, *,
                    lenient: bool = False, warnings: list | None = None):
    """Parse SKILL.md text into a skill of class ``cls``: :meth:`Skill.from_text`, whose
    parameters and errors (a :class:`FrontmatterError` naming the file, the line and the
    field) these are."""
    meta, body = parse_frontmatter(text, path)
    raw = _normalised_text(text)

    def fail(field_name, reason, value=None, key=None):
        raise FrontmatterError(path, _line_of(raw, key or field_name.split(".")[0]),
                               field_name, reason, value)

    for req in ("name", "description"):
        if req not in meta:
            fail(req, "is required")
        if not isinstance(meta[req], str):
            fail(req, "must be a string", meta[req])
    md = meta.get("metadata", {})
    if md in ("", None):
        md = {}
    if not isinstance(md, dict):
        fail("metadata", "must be a mapping", md)
    kw: dict = {"name": meta["name"], "description": meta["description"], "body": body}
    trig = meta.get("triggers")
    if "triggers" in md:
        trig = md["triggers"] if trig is None else [trig, md["triggers"]]
    kw["triggers"] = _flatten(trig)
    kw.update(_metadata_fields(md, fail))
    kw["extra"] = tuple((str(k), v) for k, v in meta.items()
                        if k not in ("name", "description", "metadata", "triggers"))
    _warn_unknown(kw["extra"], path, warnings)
    kw["lenient"] = _waived(kw, path, folder, warnings) if lenient else ()
    try:
        skill = cls(**kw)
    except ConfigError as exc:
        top = exc.field if exc.field in meta else ("metadata" if exc.field in md else "name")
        fail(exc.field if top != "metadata" else f"metadata.{exc.field}", exc.reason,
             exc.value, key=top)
    if folder is not None and skill.name != unicodedata.normalize("NFKC", folder):
        fail("name", f"must equal the folder name {folder!r}", skill.name)
    return skill


#: The top-level frontmatter fields of the Agent Skills specification (those the reference
#: validator, ``skills-ref``, allows), and ``triggers``, which dyna also reads at the top.
SPEC_FIELDS = ("name", "description", "license", "compatibility", "allowed-tools", "metadata")
KNOWN_FIELDS = frozenset(SPEC_FIELDS + ("triggers",))


def _warn_unknown(extra: tuple, path, warnings: list | None) -> None:
    """One ``unknown-fields`` :class:`LoadWarning` naming every top-level field of
    ``extra`` (the fields other than name, description, metadata and triggers) that the
    specification does not define: such a field is kept as read, and no client uses it."""
    unknown = [k for k, _ in extra if k not in KNOWN_FIELDS]
    if unknown:
        shown_fields = ", ".join(repr(shown(k, 40)) for k in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        _warn(warnings, path, "unknown-fields",
              f"unknown top-level field{'s' if len(unknown) > 1 else ''} {shown_fields}"
              f"{more}: kept as read, used by nothing (the specification's fields are "
              f"{', '.join(SPEC_FIELDS)}; put others under metadata)")


def _metadata_fields(md: dict, fail) -> dict:
    """The skill's fields read from the frontmatter's ``metadata`` mapping ``md``: dyna's
    own (:data:`METADATA_KEYS`, counts and the posterior as numbers; triggers are read by
    the caller) and ``extra_metadata``, the other entries as read. ``fail(field, reason,
    value, key=...)`` raises for a count or posterior that is not a number."""
    kw: dict = {}
    extra_md = []
    for k, v in md.items():
        k = str(k)
        if k == "triggers":
            continue
        if k not in METADATA_KEYS:
            extra_md.append((k, v))
            continue
        try:
            if k in ("successes", "failures"):
                v = int(v) if isinstance(v, str) and v.strip().isdigit() else v
                if isinstance(v, str):
                    raise ValueError
            elif k in ("a", "b"):
                v = float(v)
        except (TypeError, ValueError):
            fail(f"metadata.{k}", "must be a number", v, key="metadata")
        kw[k] = v
    kw["extra_metadata"] = tuple(extra_md)
    return kw


def _waived(kw: dict, path, folder: str | None, warnings: list | None) -> tuple[str, ...]:
    """The rules waived to read a file leniently: a description over the limit, a name
    that differs from its folder (then ``kw["name"]`` becomes the folder's name); a
    :class:`LoadWarning` for each goes to ``warnings``."""
    waived = []
    if len(kw["description"]) > MAX_DESCRIPTION:
        waived.append("description-length")
        _warn(warnings, path, "description-length",
              f"description has {len(kw['description'])} characters (limit "
              f"{MAX_DESCRIPTION}); loaded anyway, not written back until shortened")
    if folder is not None:
        folder_n = check_skill_name(folder, "folder")
        try:
            given = check_skill_name(kw["name"])
        except ConfigError:
            given = None
        if given is not None and given != folder_n:
            waived.append("name-folder")
            _warn(warnings, path, "name-folder",
                  f"name {kw['name']!r} differs from its folder {folder!r}; loaded as "
                  f"{folder_n!r}, not written back until fixed")
            kw["name"] = folder_n
    return tuple(waived)
