"""The README and docs/ as a reader meets them: every page reachable from the README, every
link pointing at a file or heading that exists, pages short enough to read, and no history
(commit hashes, issue or session numbers, accounts of past versions) in their prose: what changed
lives in CHANGELOG.md, measured results in experiments/results/ and benchmarks/."""

import re

import pytest
from doc_pages import FENCE, PAGES, ROOT, page_name
from test_structure import HISTORY

MAX_PAGE_LINES = 300
DOCS = [p for p in PAGES if p.parent.name == "docs"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: A commit hash as prose quotes one: 7 to 40 hex digits, with a digit and a letter.
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def prose(path) -> list[tuple[int, str]]:
    """``(line number, line)`` of a page outside its fenced code blocks."""
    text = path.read_text(encoding="utf-8")
    inside = set()
    for m in FENCE.finditer(text):
        first = text.count("\n", 0, m.start()) + 1
        inside.update(range(first, first + m.group(0).count("\n") + 1))
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if n not in inside]


def anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading's text."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path) -> set[str]:
    return {anchor(line.lstrip("#")) for _, line in prose(path) if line.startswith("#")}


IDS = [page_name(p) for p in PAGES]


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [page_name(p) for p in DOCS if f"]({page_name(p)})" not in readme] == []


@pytest.mark.parametrize("path", DOCS, ids=[page_name(p) for p in DOCS])
def test_docs_page_is_short(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_PAGE_LINES


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_every_link_resolves(path):
    broken = []
    for n, line in prose(path):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):          # https:, mailto: ...
                continue
            file, _, fragment = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists() or (fragment and fragment not in anchors(dest)):
                broken.append(f"{n}: {target}")
    assert broken == []


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_no_history_in_the_prose(path):
    found = [f"{n}: {line.strip()}" for n, line in prose(path)
             if HISTORY.search(line) or COMMIT.search(line)]
    assert found == []
