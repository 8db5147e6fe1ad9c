"""What an Agent Skills client sees in a library folder: unknown top-level frontmatter fields
warned once per file, SKILL.md files in nested folders named in one hint, and a description
over the specification's 1,024 characters that cannot win a match by its length."""

import pytest

from dyna.cli import main
from dyna.loops.skills import Skill, SkillLibrary
from dyna.loops.skills.nested import nested_folders_warning, nested_skill_files


def write(folder, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(text)


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---------------------------------------------------------------- unknown fields
def test_unknown_top_level_fields_are_warned_once_per_file(tmp_path):
    write(tmp_path / "pdf", "---\nname: pdf\ndescription: Read PDFs\nlicense: MIT\n"
                            "version: 1.2.0\nauthor: someone\nallowed-tools: Read\n"
                            "triggers: pdf\n---\nUse pypdf.\n")
    write(tmp_path / "csv", "---\nname: csv\ndescription: Read CSV files\n---\nUse csv.\n")
    lib = SkillLibrary(tmp_path)
    assert [(w.rule, w.message) for w in lib.warnings] == [
        ("unknown-fields", ("unknown top-level fields 'version', 'author': kept as read, used "
                            "by nothing (the specification's fields are name, description, "
                            "license, compatibility, allowed-tools, metadata; put others "
                            "under metadata)"))]
    assert lib.warnings[0].path == str(tmp_path / "pdf" / "SKILL.md")
    assert dict(lib["pdf"].extra) == {"license": "MIT", "version": "1.2.0",
                                      "author": "someone", "allowed-tools": "Read"}
    assert lib.summary()["warned"] == 1
    lib.refresh()
    assert len(lib.warnings) == 1


def test_unknown_fields_warning_counts_many_and_is_absent_for_spec_fields():
    text = "---\nname: x\ndescription: d\n" + "".join(f"f{i}: v\n" for i in range(7)) + "---\n"
    warnings: list = []
    Skill.from_text(text, "x/SKILL.md", warnings=warnings)
    assert [w.message.split(":")[0] for w in warnings] == [
        "unknown top-level fields 'f0', 'f1', 'f2', 'f3', 'f4' and 2 more"]
    warnings = []
    Skill.from_text("---\nname: x\ndescription: d\nlicense: MIT\ncompatibility: any\n"
                    "metadata:\n  version: '1'\n---\n", "x/SKILL.md", warnings=warnings)
    assert warnings == []


# ---------------------------------------------------------------- nested folders
def collection(root):
    """A repository laid out as public collections are: one skill at the top, 17 below
    skills/<category>/<name>/, resources and hidden folders that hold SKILL.md too."""
    write(root / "template", "---\nname: template\ndescription: A template skill\n---\n")
    cats = {"document": 9, "design": 5, "dev": 3}
    for cat, n in cats.items():
        for i in range(n):
            write(root / "skills" / cat / f"{cat}-{i}",
                  f"---\nname: {cat}-{i}\ndescription: Skill {i} of {cat}\n---\n")
    write(root / "skills" / "document" / "document-0" / "reference" / "inner",
          "---\nname: inner\ndescription: a resource, not a skill\n---\n")
    write(root / ".git" / "x", "---\nname: x\ndescription: hidden\n---\n")
    write(root / "a" / "b" / "c" / "d" / "too-deep", "---\nname: too-deep\ndescription: d\n---\n")
    return root


def test_nested_skill_folders_are_named_in_one_hint(tmp_path):
    root = collection(tmp_path / "repo")
    files = nested_skill_files(root)
    assert len(files) == 17
    assert files[0].as_posix() == "skills/design/design-0/SKILL.md"
    lib = SkillLibrary(root)
    assert [s.name for s in lib.skills()] == ["template"]
    hint = nested_folders_warning(root)
    assert lib.warnings == [hint]
    assert hint.rule == "nested-folders" and hint.path == str(root)
    assert hint.message == (
        "17 SKILL.md files found in nested folders, not loaded (a library reads "
        "DIR/<name>/SKILL.md): open the folder that holds them instead: skills/document (9), "
        "skills/design (5), skills/dev (3)")
    assert lib.summary()["warned"] == 0
    assert [s.name for s in SkillLibrary(root / "skills" / "document").skills()] == [
        f"document-{i}" for i in range(9)]
    assert SkillLibrary(root / "skills" / "document").warnings == []


def test_a_library_dyna_wrote_has_no_hint(tmp_path):
    lib = SkillLibrary(tmp_path)
    lib.add(Skill("a", "A skill"), "r1")
    lib.add(Skill("b", "B skill"), "r1")
    lib.retire("b", "r1")
    (tmp_path / "a" / "scripts").mkdir()
    write(tmp_path / "a" / "scripts" / "x", "---\nname: x\ndescription: resource\n---\n")
    assert nested_skill_files(tmp_path) == []
    assert SkillLibrary(tmp_path).warnings == []


def test_the_cli_shows_the_hint(capsys, tmp_path):
    root = collection(tmp_path / "repo")
    hint = ("17 SKILL.md files found in nested folders, not loaded (a library reads "
            "DIR/<name>/SKILL.md): open the folder that holds them instead: skills/document "
            "(9), skills/design (5), skills/dev (3)")
    rc, out, err = run(capsys, "skills", "catalog", str(root))
    assert rc == 0 and out.startswith("- template: A template skill\n")
    assert err == f"dyna: warning: {hint}\n"
    rc, out, err = run(capsys, "skills", "list", str(root))
    assert rc == 0 and out.splitlines()[-1] == f"warning: {root}: nested-folders: {hint}"
    assert "1 active, 0 retired, 0 pending, 0 failed to load (1 skill file)\n" in out


# ---------------------------------------------------------------- long descriptions
def test_a_long_junk_description_cannot_win_by_its_length(tmp_path):
    filler = " ".join(f"word{i}" for i in range(200))[:1030]
    junk = filler + " " + "roll back failed staging deploy web app restore database. " * 20
    write(tmp_path / "junk-notes", f"---\nname: junk-notes\ndescription: {junk}\n---\n")
    write(tmp_path / "rollback", "---\nname: rollback\ndescription: Roll back a failed "
                                 "deploy of the staging web app.\n---\n")
    for i in range(5):
        write(tmp_path / f"fmt-{i}", f"---\nname: fmt-{i}\ndescription: Format python code "
                                     f"number {i} with black and ruff\n---\n")
    lib = SkillLibrary(tmp_path)
    assert len(lib["junk-notes"].description) == 2190
    assert [w.rule for w in lib.warnings] == ["description-length"]
    res = lib.match("roll back the failed staging deploy", limit=3)
    assert [m.name for m in res] == ["rollback"]
    assert res[0].score == pytest.approx(12.2232, abs=1e-4)
    assert res[0].matched == ("back", "deploy", "fail", "roll", "stage")
    # the words within the first 1,024 characters still match
    assert [m.name for m in lib.match("word7 word8", limit=3)] == ["junk-notes"]
