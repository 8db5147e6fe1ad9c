"""Ranked description matching (BM25, stemmed, negation-aware) on skills without triggers.

The fixture library is written for this test in the style of public Agent Skills (a name
and a description saying what the skill is for and when not to use it); the queries are
what a person would type. Each defect of the old fallback (every description word worth
0.5, no stemming, ties broken alphabetically, "Do NOT use for PDFs" counted as a match for
PDFs) has a query that needs it fixed.
"""

import pytest

from dyna.loops.bm25 import document_terms, query_terms
from dyna.loops.skills import Skill, SkillLibrary

SKILLS = {
    "slide-decks": "Build and edit slide decks: presentations in .pptx with layouts, speaker "
                   "notes and charts. Use it when someone wants a presentation made or "
                   "changed. Do NOT use for PDFs or for word-processor documents.",
    "pdf-toolkit": "Work with PDF files: extract text and tables, merge and split documents, "
                   "fill in PDF forms, add watermarks, rotate pages.",
    "word-documents": "Create and revise word-processor documents (.docx) with tracked "
                      "changes, comments, headings and tables of contents. Not for slides.",
    "spreadsheets": "Read, clean and write spreadsheets (.xlsx, .csv): formulas, pivot "
                    "tables, charts from tabular data.",
    "mcp-builder": "Guide for writing an MCP server that exposes tools to language-model "
                   "agents: the protocol, tool schemas, transports, testing the server.",
    "web-tests": "Test a running web application in a real browser: click through pages, "
                 "fill forms, take screenshots, read the console log.",
    "brand-style": "Apply the company's brand: colours, fonts, logo placement and tone of "
                   "voice for any artifact that leaves the building.",
    "gif-maker": "Make small animated GIFs for chat apps, sized and optimised for Slack "
                 "emoji and reactions.",
    "canvas-art": "Design posters and visual art as PNG or PDF from a short creative brief, "
                  "with original compositions rather than copies of existing works.",
    "skill-writer": "Write a new skill: folder layout, the SKILL.md frontmatter, when to "
                    "split reference files, and how to test that agents find it.",
    "release-notes": "Draft internal communications: status reports, release notes, "
                     "incident summaries and newsletters in the company's format.",
    "theme-factory": "Style an artifact with one of ten ready-made themes (palette and font "
                     "pairs) or generate a new theme on the fly.",
}

QUERIES = [
    ("create a presentation about our quarterly results", "slide-decks"),
    ("make some slides for the all-hands", "slide-decks"),
    ("merge two PDFs into one", "pdf-toolkit"),
    ("fill out this PDF form", "pdf-toolkit"),
    ("extract the tables from a pdf report", "pdf-toolkit"),
    ("write an mcp server for our ticket system", "mcp-builder"),
    ("add tracked changes to the contract docx", "word-documents"),
    ("build a pivot table from this csv", "spreadsheets"),
    ("take screenshots of the signup page in a browser", "web-tests"),
    ("animated gif for slack", "gif-maker"),
    ("design a poster for the conference", "canvas-art"),
    ("how do I write a new skill", "skill-writer"),
    ("draft the release notes for version 2.1", "release-notes"),
    ("apply our brand colours and logo to the deck", "brand-style"),
    ("generate a theme with a new palette", "theme-factory"),
]


@pytest.fixture(scope="module")
def lib():
    lib = SkillLibrary(None)
    for name, desc in SKILLS.items():
        lib.add(Skill(name, desc))
    return lib


@pytest.mark.parametrize("query, want", QUERIES)
def test_the_right_skill_comes_first(lib, query, want):
    got = lib.match(query, limit=3)
    assert got and got[0].name == want, [(m.name, round(m.score, 3)) for m in got]
    assert not got[0].by_trigger


def test_a_negated_mention_is_no_match(lib):
    terms = document_terms("slide-decks", SKILLS["slide-decks"])
    assert "pdf" not in terms and "document" not in terms and "present" in terms
    ranked = [m.name for m in lib.match("merge these pdf documents", limit=12)]
    assert "slide-decks" not in ranked
    assert document_terms("xy", "Never use for invoices; use for receipts.") == ["xy", "receipt"]


def test_stemming_and_stopwords():
    assert query_terms("Presentations, presenting and the presenter") == ["present"]
    assert query_terms("the a of") == []


def test_triggers_still_rank_first_and_exact():
    lib = SkillLibrary(None)
    lib.add(Skill("pdf-toolkit", SKILLS["pdf-toolkit"]))
    lib.add(Skill("invoices", "Book invoices", triggers=("invoice",)))
    got = lib.match("merge the invoice pdf", limit=3)
    assert [m.name for m in got] == ["invoices", "pdf-toolkit"]
    assert got[0].by_trigger and got[0].score == 1.0
    assert lib.match("invoices", limit=3) == []      # triggers stay whole-word, exact


def test_ties_are_broken_by_name_and_limit_holds():
    lib = SkillLibrary(None)
    for n in ("b-tool", "a-tool", "c-tool"):
        lib.add(Skill(n, "Rotate the logs"))
    assert [m.name for m in lib.match("rotate logs", limit=2)] == ["a-tool", "b-tool"]


def test_catalog_lists_name_and_description_with_a_token_estimate(tmp_path, capsys):
    from dyna.cli import main
    from dyna.loops._text import estimate_tokens

    lib = SkillLibrary(tmp_path)
    lib.add(Skill("pdf-toolkit", SKILLS["pdf-toolkit"]))
    lib.add(Skill("gif-maker", SKILLS["gif-maker"]))
    assert main(["skills", "catalog", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    body = f"- gif-maker: {SKILLS['gif-maker']}\n- pdf-toolkit: {SKILLS['pdf-toolkit']}\n"
    assert out.startswith(body)
    assert f"2 skills, {len(body)} characters, about {-(-len(body) // 4)} tokens" in out
    assert estimate_tokens("") == 0 and estimate_tokens("abcde") == 2
