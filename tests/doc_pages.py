"""The pages whose code blocks the tests run as written: the README and every page of docs/.

A fenced block is run (or parsed) by its language tag: ``toml`` blocks are experiment files,
``python`` blocks programs, ``json`` blocks JSON, and the ``dyna`` command lines of ``bash``
blocks are checked against the command-line parser. A block without a tag, or tagged
``text``, is shown to the reader and not run: that is how a page marks a fragment (a table
that is only part of a file, a synopsis) as not runnable.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def page_name(path: Path) -> str:
    """The page's path relative to the repository root (``docs/loops.md``)."""
    return path.relative_to(ROOT).as_posix()


def blocks(language: str) -> list[tuple[str, str]]:
    """``(page name, block text)`` of every fenced block tagged ``language``, page by page
    (README first, then docs/ in name order) and in page order."""
    return [(page_name(path), m.group(2)) for path in PAGES
            for m in FENCE.finditer(path.read_text(encoding="utf-8")) if m.group(1) == language]


def after_heading(title: str) -> str:
    """The text of the one page that has a heading ``title`` (any level), from the line after
    that heading to the end of the page.

    Raises
    ------
    LookupError
        No page, or more than one, has that heading.
    """
    heading = re.compile(rf"^#+ {re.escape(title)}\n", re.MULTILINE)
    found = [(path, m) for path in PAGES
             for m in heading.finditer(path.read_text(encoding="utf-8"))]
    if len(found) != 1:
        raise LookupError(f"heading {title!r} on {len(found)} pages (expected 1)")
    path, m = found[0]
    return path.read_text(encoding="utf-8")[m.end():]
