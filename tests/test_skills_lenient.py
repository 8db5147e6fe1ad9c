"""Lenient loading, as the Agent Skills client guide asks, on fixtures written
for these tests (tests/data/skills_fixtures/) that reproduce the two defects of the public
anthropics/skills repository: a description over 1,024 characters (model-api) and a name
that differs from its folder (template). Both load, with a warning naming the file and the
rule, listed by ``dyna skills list``; neither is written back."""

import shutil
import unicodedata
from pathlib import Path

import pytest

from dyna.cli import main
from dyna.errors import ConfigError
from dyna.loops.skills import Skill, SkillLibrary, check_skill_name

FIXTURES = Path(__file__).parent / "data" / "skills_fixtures"
NAMES = ["animated-gif", "brand-style", "browser-testing", "co-writing", "docx",
         "generative-art", "html-artifacts", "mcp-builder", "model-api", "pdf",
         "poster-design", "pptx", "skill-writer", "team-updates", "template", "themes",
         "web-design", "xlsx"]


@pytest.fixture
def lib_dir(tmp_path):
    d = tmp_path / "lib"
    shutil.copytree(FIXTURES, d)
    return d


def tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "lock"}


def test_all_fixtures_load_the_two_defective_ones_with_warnings(lib_dir):
    before = tree(lib_dir)
    lib = SkillLibrary(lib_dir)
    assert sorted(lib) == NAMES and lib.errors == []
    assert [(Path(w.path).relative_to(lib_dir).as_posix(), w.rule) for w in lib.warnings] == [
        ("model-api/SKILL.md", "description-length"), ("template/SKILL.md", "name-folder")]
    assert str(lib.warnings[0]) == (
        f"{lib_dir / 'model-api' / 'SKILL.md'}: description-length: description has 1130 "
        "characters (limit 1024); loaded anyway, not written back until shortened")
    assert lib.summary() == {"active": 18, "retired": 0, "pending": 0, "failed": 0,
                             "warned": 2, "total": 18}
    assert len(lib["model-api"].description) == 1130
    assert lib["template"].name == "template"
    assert tree(lib_dir) == before                 # loading writes nothing


def test_defective_skills_are_refused_on_write_but_still_used(lib_dir):
    lib = SkillLibrary(lib_dir, retire_below=None)
    before = tree(lib_dir)
    with pytest.raises(ConfigError) as exc:
        lib.patch("model-api", "r1", body="new body")
    assert exc.value.field == "description" and "has 1130" in exc.value.reason
    with pytest.raises(ConfigError, match="differs from its folder"):
        lib.patch("template", "r1", body="new body")
    with pytest.raises(ConfigError, match="at most 1024 characters"):
        Skill("new-one", "x" * 1025)                # never written by dyna either
    assert tree(lib_dir) == before
    # outcomes and a retire still work: the files are not rewritten
    lib.record_outcome(["model-api", "template"], True, "r2")
    lib.retire("template", "r2")
    assert (lib_dir / ".dyna" / "retired" / "template" / "SKILL.md").read_bytes() == \
        before["template/SKILL.md"]
    assert (lib_dir / "model-api" / "SKILL.md").read_bytes() == before["model-api/SKILL.md"]
    # once shortened it is written (and is dyna's file from then on)
    lib.patch("model-api", "r3", description="Reference for a hosted model API.")
    back = SkillLibrary(lib_dir)
    assert [(Path(w.path).relative_to(lib_dir).as_posix(), w.rule) for w in back.warnings] == [
        (".dyna/retired/template/SKILL.md", "name-folder")]
    assert back["model-api"].description == "Reference for a hosted model API."
    assert back["model-api"].successes == 1


def test_skills_list_shows_the_warnings(lib_dir, capsys):
    assert main(["skills", "list", str(lib_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3] == ("18 active, 0 retired, 0 pending, 0 failed to load (18 skill files), "
                       "2 loaded with warnings")
    assert out[-2].startswith(f"warning: {lib_dir / 'model-api' / 'SKILL.md'}: "
                              "description-length: description has 1130 characters")
    assert out[-1] == (f"warning: {lib_dir / 'template' / 'SKILL.md'}: name-folder: name "
                       "'template-skill' differs from its folder 'template'; loaded as "
                       "'template', not written back until fixed")


def test_lowercase_skill_md_and_unparseable_files_are_counted(lib_dir):
    (lib_dir / "pdf" / "SKILL.md").rename(lib_dir / "pdf" / "skill.md")
    (lib_dir / "broken").mkdir()
    (lib_dir / "broken" / "SKILL.md").write_text("---\nname: broken\ndescription: a: b\n---\n")
    (lib_dir / "no-front").mkdir()
    (lib_dir / "no-front" / "skill.md").write_text("just text\n")
    lib = SkillLibrary(lib_dir, retire_below=None)
    assert "pdf" in lib and lib["pdf"].body.startswith("# PDF")
    assert sorted(Path(e.path).parent.name for e in lib.errors) == ["broken", "no-front"]
    assert lib.summary()["failed"] == 2 and lib.summary()["total"] == 20
    lib.patch("pdf", "r1", body="# PDF\n\nchanged")
    assert not (lib_dir / "pdf" / "SKILL.md").exists()       # written under its own name
    assert (lib_dir / "pdf" / "skill.md").read_text().endswith("changed\n")
    lib.undo_run("r1")
    assert (lib_dir / "pdf" / "skill.md").read_bytes() == (
        FIXTURES / "pdf" / "SKILL.md").read_bytes()


@pytest.mark.parametrize("name", ["café-notes", "данные", "数据-清洗", "ｆｕｌｌ-width", "x2"])
def test_non_ascii_lowercase_names_as_the_reference_validator(tmp_path, name):
    norm = unicodedata.normalize("NFKC", name)
    assert check_skill_name(name) == norm
    lib = SkillLibrary(tmp_path)
    lib.add(Skill(name, "a skill with an international name"), "r1")
    back = SkillLibrary(tmp_path)
    assert list(back) == [norm] and back.errors == [] and back.warnings == []
    assert (tmp_path / norm / "SKILL.md").is_file()


@pytest.mark.parametrize("name", ["Café", "a_b", "a--b", "-a", "dé.jà", "a b", "ß/x", ""])
def test_names_the_reference_validator_refuses(name):
    with pytest.raises(ConfigError) as exc:
        check_skill_name(name)
    assert exc.value.field == "name"


def test_look_alike_names_are_flagged(tmp_path):
    for folder in ("deploy", "dep1oy"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "SKILL.md").write_text(
            f"---\nname: {folder}\ndescription: ship it\n---\n")
    lib = SkillLibrary(tmp_path)
    assert sorted(lib) == ["dep1oy", "deploy"]
    assert [(w.rule, w.path) for w in lib.warnings] == [
        ("look-alike-name", str(tmp_path / "deploy" / "SKILL.md"))]


def test_fixtures_break_exactly_the_rules_the_reference_validator_names(tmp_path):
    skills_ref = pytest.importorskip("skills_ref")
    found = {d.name: skills_ref.validate(d) for d in sorted(FIXTURES.iterdir())}
    assert {k: v for k, v in found.items() if v} == {
        "model-api": ["Description exceeds 1024 character limit (1130 chars)"],
        "template": ["Directory name 'template' must match skill name 'template-skill'"]}
    lib = SkillLibrary(tmp_path)                   # what dyna writes passes it
    for name in ("café-notes", "данные"):
        lib.add(Skill(name, "a skill", triggers="x"), "r1")
        assert skills_ref.validate(tmp_path / name) == []
