"""Reading and writing Markdown files with YAML frontmatter (the SKILL.md format).

A file is ``---`` on the first line, a YAML mapping, ``---`` on a line of its own, then the
Markdown body. Reading is forgiving about encoding details and strict about content:

- a UTF-8 byte-order mark and CRLF or CR line endings are accepted (case SKL-01 (c));
- YAML is read with PyYAML's safe loader with *no implicit typing*: every plain scalar
  stays the string that was written, so ``yes``, ``no``, ``on``, ``off``, ``1.10`` or
  ``2024-05-01`` are never turned into booleans, floats or dates;
- invalid YAML (for example an unquoted ``description: Debug mazes: walls and goal``,
  which PyYAML refuses with "mapping values are not allowed here") raises
  :class:`FrontmatterError` naming the file, the line and the field (case SKL-01 (a)).

Writing uses PyYAML's safe dumper, quoting whatever needs it (colons, quotes, ``yes``,
leading spaces) and escaping characters that YAML would otherwise fold (NEL, LINE
SEPARATOR), so that any mapping of strings written and read back is equal.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dyna.errors import ConfigError

__all__ = ["FrontmatterError", "dump_frontmatter", "parse_frontmatter"]


class FrontmatterError(ConfigError):
    """A frontmatter file that cannot be read, with where and why.

    Attributes
    ----------
    path : str
        The file (or ``"<text>"``).
    line : int or None
        1-based line in the file.
    field : str
        The frontmatter field at fault (``"frontmatter"`` when no single field is).
    reason : str
    """

    def __init__(self, path, line: int | None, field: str, reason: str, value=None):
        self.path = str(path)
        self.line = line
        super().__init__(field, value, reason)

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: field {self.field!r}: {self.reason}"


_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _StringLoader(_BaseLoader):
    """Safe loader whose plain scalars all stay strings (no implicit resolvers)."""


_StringLoader.yaml_implicit_resolvers = {}


class _Dumper(_BaseDumper):
    """Safe dumper that double-quotes strings YAML would fold or mangle."""


# Characters that single-quoted or plain YAML scalars cannot carry through a round trip:
# NEL, LINE/PARAGRAPH SEPARATOR and BOM are folded or dropped by the reader.
_NEEDS_ESCAPE = re.compile("[\x85\u2028\u2029\ufeff]")


def _represent_str(dumper, s: str):
    style = '"' if _NEEDS_ESCAPE.search(s) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


_Dumper.add_representer(str, _represent_str)

_KEY_LINE = re.compile(r"^([^\s#:][^:]*?)\s*:")


def _normalise(text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _field_at(lines: list[str], idx: int) -> str:
    """Top-level key whose value covers YAML line ``idx`` (0-based)."""
    for j in range(min(idx, len(lines) - 1), -1, -1):
        m = _KEY_LINE.match(lines[j])
        if m:
            return m.group(1).strip().strip("'\"")
    return "frontmatter"


def parse_frontmatter(text: str | bytes, path="<text>") -> tuple[dict, str]:
    """Split and parse a frontmatter file.

    Parameters
    ----------
    text : str or bytes
        File content; bytes are decoded as UTF-8. A leading BOM is dropped and line
        endings are normalised to ``\\n``.
    path : str or Path
        Used in error messages only.

    Returns
    -------
    meta : dict
        The YAML mapping; scalars are ``str``, sequences ``list``, mappings ``dict``.
    body : str
        Text after the closing ``---``, with leading and trailing newlines removed.

    Raises
    ------
    FrontmatterError
        Not UTF-8, no opening or closing ``---``, YAML that does not parse (with the file
        line and the field), or YAML that is not a mapping.
    """
    try:
        text = _normalise(text)
    except UnicodeDecodeError as exc:
        raise FrontmatterError(path, None, "frontmatter", f"not UTF-8 ({exc.reason})")
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        raise FrontmatterError(path, 1, "frontmatter", "file must start with a '---' line")
    close = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if close is None:
        raise FrontmatterError(path, None, "frontmatter", "no closing '---' line")
    yaml_lines = lines[1:close]
    try:
        meta = yaml.load("\n".join(yaml_lines), Loader=_StringLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = field = None
        if mark is not None:
            line = mark.line + 2  # 1-based, after the opening '---'
            field = _field_at(yaml_lines, mark.line)
        hint = " (quote the value)" if "mapping values are not allowed" in problem else ""
        raise FrontmatterError(path, line, field or "frontmatter",
                               f"invalid YAML: {problem}{hint}") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise FrontmatterError(path, 2, "frontmatter", "frontmatter must be a YAML mapping")
    body = "\n".join(lines[close + 1:]).strip("\n")
    return meta, body


def dump_frontmatter(meta: dict, body: str) -> str:
    """Render a frontmatter file: ``---``, YAML of ``meta`` in key order, ``---``, body.

    Parameters
    ----------
    meta : dict
        Mapping of strings to strings, lists or mappings of strings.
    body : str
        Markdown body; written after the closing line followed by one newline.

    Returns
    -------
    str
        Text with ``\\n`` line endings; :func:`parse_frontmatter` gives back
        ``(meta, body.strip("\\n"))``.
    """
    text = yaml.dump(meta, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     width=1 << 30, default_flow_style=False)
    body = body.strip("\n")
    return f"---\n{text}---\n{body}\n" if body else f"---\n{text}---\n"


def read_frontmatter_file(path: Path) -> tuple[dict, str, str]:
    """Read ``path`` and parse it; returns ``(meta, body, raw_text)``.

    Raises
    ------
    FrontmatterError
        As :func:`parse_frontmatter`, or when the file cannot be read.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise FrontmatterError(path, None, "frontmatter", f"cannot read ({exc.strerror})")
    meta, body = parse_frontmatter(raw, path)
    return meta, body, raw.decode("utf-8")
