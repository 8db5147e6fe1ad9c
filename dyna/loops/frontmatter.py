"""Reading and writing Markdown files with YAML frontmatter (the SKILL.md format).

A file is ``---`` on the first line, a YAML mapping, ``---`` on a line of its own, then the
Markdown body. Reading is forgiving about encoding details and strict about content:

- a UTF-8 byte-order mark and CRLF or CR line endings are accepted (case SKL-01 (c));
- YAML is read with PyYAML's safe loader with *no implicit typing*: every plain scalar
  stays the string that was written, so ``yes``, ``no``, ``on``, ``off``, ``1.10`` or
  ``2024-05-01`` are never turned into booleans, floats or dates;
- invalid YAML (for example an unquoted ``description: Debug mazes: walls and goal``,
  which PyYAML refuses with "mapping values are not allowed here") raises
  :class:`FrontmatterError` naming the file, the line and the field (case SKL-01 (a));
- a mapping key given twice, at any depth (``description:`` twice, a key twice inside
  ``metadata:`` or deeper, in block or flow style), raises :class:`FrontmatterError` naming
  the key's dotted path as the field and the line of its second occurrence. PyYAML would
  keep the last value silently, while a person reading the file sees the first: a SKILL.md
  from elsewhere must not say one thing to its reviewer and another to dyna.

Writing uses PyYAML's safe dumper, quoting whatever needs it (colons, quotes, leading
spaces) and escaping characters that YAML would otherwise fold (NEL, LINE SEPARATOR), so
that any mapping of strings written and read back is equal. A string that any YAML 1.1 or
1.2 reader would type (``yes``, ``on``, ``~``, ``1e3``, ``0o17``, ``1.5e3``, ``.inf``,
``1_000``, ``2024-05-01``: :func:`typed_by_some_reader`) is written quoted, so PyYAML,
ruamel.yaml, js-yaml and the npm ``yaml`` package all read every written value as a string.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dyna.errors import ConfigError

__all__ = ["FrontmatterError", "dump_frontmatter", "parse_frontmatter",
           "typed_by_some_reader"]


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

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _DuplicateKey(Exception):
    """A mapping key given twice: its dotted path and both (0-based, YAML-relative) lines."""

    def __init__(self, field: str, key, first: int, second: int):
        self.field, self.key, self.first, self.second = field, key, first, second


def _child(path: str, part: str) -> str:
    return f"{path}.{part}" if path and not part.startswith("[") else f"{path}{part}"


def _check_duplicates(loader, root) -> None:
    """Raise :class:`_DuplicateKey` for the key, anywhere below ``root``, whose second
    occurrence comes first in the text (when several keys are repeated).

    Keys are compared as the constructor will build them (so ``a`` and ``"a"`` are the same
    key), before merge keys (an explicit ``!!merge``) are flattened: a key a merge brings in
    and the mapping's own key are YAML's defined override, not a duplicate. Non-scalar keys
    are left to the constructor, which refuses them as unhashable. Shared (aliased) nodes are
    walked once, so recursive or exponential aliases cannot make the walk loop or blow up.
    """
    seen_nodes: set[int] = set()
    found: list[_DuplicateKey] = []
    found_fields: set[str] = set()   # (a set: a file of many repeats stays linear)
    stack = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: dict = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:      # merged keys land in this mapping
                    merged = (value_node.value if isinstance(value_node, yaml.SequenceNode)
                              else [value_node])
                    stack.extend((m, path) for m in merged)
                    continue
                if not isinstance(key_node, yaml.ScalarNode):
                    continue                        # unhashable: the constructor refuses it
                key = loader.construct_object(key_node)
                here = _child(path, str(key))
                stack.append((value_node, here))
                try:
                    first = keys.get(key)
                except TypeError:
                    continue
                if first is None:
                    keys[key] = key_node.start_mark.line
                elif here not in found_fields:
                    found_fields.add(here)
                    found.append(_DuplicateKey(here, key, first, key_node.start_mark.line))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
    if found:
        raise min(found, key=lambda f: f.second)


class _Dumper(_BaseDumper):
    """Safe dumper that double-quotes strings YAML would fold or mangle."""


# Characters that single-quoted or plain YAML scalars cannot carry through a round trip:
# NEL, LINE/PARAGRAPH SEPARATOR and BOM are folded or dropped by the reader.
_NEEDS_ESCAPE = re.compile("[\x85\u2028\u2029\ufeff]")


# Plain scalars that some YAML reader types as something other than a string: the union of
# YAML 1.1's types (https://yaml.org/type/: bool with y/n/on/off, null, int in base 2, 8, 10,
# 16 or 60 with underscores, float, whose regex also takes 1.2.3, timestamp, merge, value),
# YAML 1.2's core and JSON schemas (0o17, 1e3, 1.5e3) and the default schemas of js-yaml and
# the npm yaml package, matched case-insensitively (a reader that accepts one more spelling
# still reads a string).
_TYPED_WORDS = frozenset(["y", "n", "yes", "no", "true", "false", "on", "off", "null", "~",
                          ".inf", "+.inf", "-.inf", ".nan", "<<", "="])
_TYPED_NUMBER = re.compile(r"""[-+]?(?:
        0b[01_]+ | 0o?[0-7_]+ | 0x[0-9a-f_]+
      | [0-9][0-9_]*(?::[0-5]?[0-9])*(?:\.[0-9_.]*)?(?:e[-+]?[0-9]+)?
      | \.[0-9_.]*(?:e[-+]?[0-9]+)?
    )""", re.IGNORECASE | re.VERBOSE)
_TYPED_DATE = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt\s]\s*[0-9].*)?", re.DOTALL)


def typed_by_some_reader(s: str) -> bool:
    """True when a YAML 1.1 or 1.2 reader (PyYAML, ruamel.yaml, js-yaml, the npm ``yaml``
    package) would read the plain scalar ``s`` as a boolean, null, number, date or merge key
    rather than as a string; such a string is written quoted. Errs towards quoting: a
    quoted string reads as the same string everywhere."""
    return (not s or s.lower() in _TYPED_WORDS or _TYPED_NUMBER.fullmatch(s) is not None
            or _TYPED_DATE.fullmatch(s) is not None)


def _represent_str(dumper, s: str):
    if _NEEDS_ESCAPE.search(s):
        style = '"'
    elif typed_by_some_reader(s):
        style = "'"           # (the emitter falls back to '"' where '' cannot carry s)
    else:
        style = None
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


def shown(text: str, limit: int) -> str:
    """``text`` redacted (:func:`dyna.redact.redact_text`), at most ``limit`` characters
    (then ``...``)."""
    from dyna.redact import redact_text

    clean = redact_text(text[:4096])
    return clean if len(clean) <= limit else clean[:limit] + "..."


def _load(text: str):
    """``yaml.load(text, Loader=_StringLoader)``, refusing repeated mapping keys
    (:class:`_DuplicateKey`) before anything is constructed from the document."""
    loader = _StringLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicates(loader, node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


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
        line and the field), a mapping key given twice at any depth (the field is the key's
        dotted path, e.g. ``metadata.author``, and the line its second occurrence), or YAML
        that is not a mapping.
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
        meta = _load("\n".join(yaml_lines))
    except _DuplicateKey as dup:
        # a key is text from the file: shown redacted and cut short (a key can be a
        # token, or 50,000 characters long)
        key = shown(str(dup.key), 60)
        raise FrontmatterError(path, dup.second + 2, shown(dup.field, 120),
                               f"duplicate key {key!r} (first at line "
                               f"{dup.first + 2}): a reader sees the first value, a YAML "
                               "loader keeps the last; remove one", key) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = field = None
        if mark is not None:
            line = mark.line + 2  # 1-based, after the opening '---'
            field = _field_at(yaml_lines, mark.line)
        hint = " (quote the value)" if "mapping values are not allowed" in problem else ""
        raise FrontmatterError(path, line, shown(field, 120) if field else "frontmatter",
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
