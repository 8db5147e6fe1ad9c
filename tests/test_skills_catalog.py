"""`dyna skills catalog --format xml|markdown|json`: the XML is the `<available_skills>`
block of the Agent Skills reference tooling (skills-ref's `to-prompt`), line for line;
`dyna skills add --body` says when the body is empty and reads standard input for `-`."""

import io
import json
import sys

import pytest
from skills_ref.prompt import to_prompt

from dyna.cli import main
from dyna.errors import ConfigError
from dyna.loops.skills import Skill, SkillLibrary
from dyna.loops.skills.catalog import CATALOG_FORMATS, render_catalog

HAND = (b"---\nname: pdf\ndescription: 'Read & merge PDFs; use for \"<form>\" files, it''s'\n"
        b"license: Apache-2.0\n---\n\n# PDF\n")


@pytest.fixture
def lib_dir(tmp_path):
    d = tmp_path / "skills"
    lib = SkillLibrary(d)
    lib.add(Skill("git-push", "Push safely: <branch> & tags", triggers="git"), "r1")
    lib.add(Skill("1e3", "Café notes, 1.5e3 of them"), "r1")
    lib.add(Skill("old", "Retired one"), "r1")
    lib.retire("old", "r1")
    (d / "pdf").mkdir()
    (d / "pdf" / "SKILL.md").write_bytes(HAND)
    return d


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_xml_is_the_reference_to_prompt_block(lib_dir):
    xml = render_catalog(SkillLibrary(lib_dir), "xml")
    folders = [lib_dir / n for n in ("1e3", "git-push", "pdf")]
    assert xml == to_prompt(folders) + "\n"
    lines = xml.splitlines()
    assert len(lines) == 2 + 3 * 11
    assert lines[:12] == ["<available_skills>", "<skill>", "<name>", "1e3", "</name>",
                          "<description>", "Café notes, 1.5e3 of them", "</description>",
                          "<location>", str((lib_dir / "1e3" / "SKILL.md").resolve()),
                          "</location>", "</skill>"]
    assert lines[17] == "Push safely: &lt;branch&gt; &amp; tags"
    assert lines[28] == "Read &amp; merge PDFs; use for &quot;&lt;form&gt;&quot; files, it&#x27;s"


def test_json_and_markdown(lib_dir):
    lib = SkillLibrary(lib_dir)
    data = json.loads(render_catalog(lib, "json"))
    assert [d["name"] for d in data] == ["1e3", "git-push", "pdf"]
    assert data[1] == {"name": "git-push", "description": "Push safely: <branch> & tags",
                       "location": str((lib_dir / "git-push" / "SKILL.md").resolve())}
    assert render_catalog(lib) == ("- 1e3: Café notes, 1.5e3 of them\n"
                                   "- git-push: Push safely: <branch> & tags\n"
                                   "- pdf: Read & merge PDFs; use for \"<form>\" files, "
                                   "it's\n")
    mem = SkillLibrary(None)
    mem.add(Skill("a", "A & b"), "r")
    assert render_catalog(mem, "xml") == ("<available_skills>\n<skill>\n<name>\na\n</name>\n"
                                          "<description>\nA &amp; b\n</description>\n"
                                          "</skill>\n</available_skills>\n")
    assert json.loads(render_catalog(mem, "json")) == [
        {"name": "a", "description": "A & b", "location": None}]
    assert render_catalog(SkillLibrary(None), "xml") == to_prompt([]) + "\n"
    with pytest.raises(ConfigError, match="--format='yaml': must be one of markdown, xml, json"):
        render_catalog(mem, "yaml")


def test_cli_catalog_formats(capsys, lib_dir):
    rc, out, err = run(capsys, "skills", "catalog", str(lib_dir), "--format", "xml")
    assert rc == 0 and out == render_catalog(SkillLibrary(lib_dir), "xml")
    assert err == (f"dyna: 3 skills, {len(out)} characters, about {-(-len(out) // 4)} tokens "
                   "(estimate: characters / 4)\n")
    rc, out, err = run(capsys, "skills", "catalog", str(lib_dir), "--format", "json")
    assert rc == 0 and len(json.loads(out)) == 3
    rc, out, err = run(capsys, "skills", "catalog", str(lib_dir))
    assert rc == 0 and err == "" and out.splitlines()[-1] == (
        "3 skills, 129 characters, about 33 tokens (estimate: characters / 4)")
    with pytest.raises(SystemExit) as exc:
        main(["skills", "catalog", str(lib_dir), "--format", "yaml"])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == "" and err == (
        "dyna: error: argument --format: invalid choice: 'yaml' (choose from 'markdown', "
        "'xml', 'json')\n")
    assert CATALOG_FORMATS == ("markdown", "xml", "json")


@pytest.mark.parametrize("content,why", [
    ("", "the file holds no text"),
    ("  \n\n\t\n", "the file holds white space only"),
])
def test_skills_add_says_the_body_is_empty(capsys, tmp_path, content, why):
    body = tmp_path / "empty.md"
    body.write_text(content)
    rc, out, err = run(capsys, "skills", "add", str(tmp_path / "lib"), "--name", "deploy",
                       "--description", "Deploy the web app", "--body", str(body))
    assert rc == 2 and out == ""
    assert err == (f"dyna: error: --body='{body}': the body is empty ({why}): a skill "
                   "needs its instructions\n")
    assert not (tmp_path / "lib").exists()


class _Stdin:
    def __init__(self, data: bytes):
        self.buffer = io.BytesIO(data)


def test_skills_add_reads_the_body_from_standard_input(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Stdin(b"Run `make rollback`, then check /health.\n"))
    rc, out, err = run(capsys, "skills", "add", str(tmp_path / "lib"), "--name", "rollback",
                       "--description", "Roll back the staging web app", "--trigger",
                       "roll back", "--body", "-")
    assert rc == 0 and err == ""
    assert out.startswith("added skill rollback (grade ")
    assert SkillLibrary(tmp_path / "lib")["rollback"].body == (
        "Run `make rollback`, then check /health.")
    monkeypatch.setattr(sys, "stdin", _Stdin(b""))
    rc, out, err = run(capsys, "skills", "add", str(tmp_path / "lib"), "--name", "other",
                       "--description", "Another", "--body", "-")
    assert rc == 2 and err == ("dyna: error: --body='-': the body is empty (standard input "
                               "holds no text): a skill needs its instructions\n")
    monkeypatch.setattr(sys, "stdin", _Stdin(b"\xff\xfe"))
    rc, out, err = run(capsys, "skills", "add", str(tmp_path / "lib"), "--name", "other",
                       "--description", "Another", "--body", "-")
    assert rc == 2 and err == "dyna: error: --body='-': is not UTF-8 text (byte 0)\n"
    monkeypatch.setattr(sys, "stdin", None)
    rc, out, err = run(capsys, "skills", "add", str(tmp_path / "lib"), "--name", "other",
                       "--description", "Another", "--body", "-")
    assert rc == 2 and err == ("dyna: error: --body='-': standard input is closed; give a "
                               "file\n")
    assert sorted(p.name for p in (tmp_path / "lib").iterdir()) == [".dyna", "rollback"]


def test_cli_xml_escapes_the_location(capsys, tmp_path):
    d = tmp_path / "lib&<x>"
    SkillLibrary(d).add(Skill("a", "A"), "r1")
    rc, out, _ = run(capsys, "skills", "catalog", str(d), "--format", "xml")
    loc = str((d / "a" / "SKILL.md").resolve()).replace("&", "&amp;").replace("<", "&lt;")
    assert rc == 0 and "lib&amp;&lt;x&gt;" in loc.replace(">", "&gt;")
    assert out.splitlines()[8:11] == ["<location>", loc.replace(">", "&gt;"), "</location>"]
