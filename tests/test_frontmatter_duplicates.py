"""Hostile SKILL.md input: repeated YAML keys, and a --trigger that holds a comma.

A repeated key shows a reviewer its first value while a YAML loader keeps the last, so the
frontmatter parser refuses it at any depth (the key's dotted path as the field, the line
of its second occurrence). ``dyna skills add --trigger "a, b"`` would become two triggers
(they are stored comma-separated), so the CLI refuses it.
"""

import pytest

from dyna.cli import main
from dyna.loops.frontmatter import FrontmatterError, parse_frontmatter
from dyna.loops.skills import Skill, SkillLibrary

REASON = ("duplicate key {key!r} (first at line {first}): a reader sees the first value, a "
          "YAML loader keeps the last; remove one")

TOP = """---
name: dup-skill
description: Safe description a reviewer reads
description: Hidden description dyna would use
---
Body
"""

NAME = """---
name: dup-skill
description: Fine
'name': other-skill
---
"""

META = """---
name: dup-skill
description: Fine
metadata:
  author: alice
  kind: skill
  author: mallory
---
"""

DEEP = """---
name: dup-skill
description: Fine
metadata:
  x:
    y:
      - keep: 1
      - z: one
        w: two
        z: three
---
"""

FLOW = """---
name: dup-skill
description: Fine
metadata: {a: one, b: two, a: three}
---
"""


@pytest.mark.parametrize("text, line, field, key, first", [
    (TOP, 4, "description", "description", 3),
    (NAME, 4, "name", "name", 2),                     # 'name' and name are one key
    (META, 7, "metadata.author", "author", 5),
    (DEEP, 10, "metadata.x.y[1].z", "z", 8),
    (FLOW, 4, "metadata.a", "a", 4),
])
def test_a_repeated_key_at_any_depth_is_refused(text, line, field, key, first):
    for variant in (text, text.replace("\n", "\r\n"), "\ufeff" + text):
        with pytest.raises(FrontmatterError) as exc:
            parse_frontmatter(variant, "x/SKILL.md")
        err = exc.value
        assert (err.path, err.line, err.field, err.value) == ("x/SKILL.md", line, field, key)
        assert err.reason == REASON.format(key=key, first=first)
        assert str(err) == f"x/SKILL.md:{line}: field {field!r}: {err.reason}"
    with pytest.raises(FrontmatterError) as exc:      # Skill.from_text keeps the error as is
        Skill.from_text(text, "x/SKILL.md")
    assert (exc.value.line, exc.value.field) == (line, field)


def test_the_earliest_second_occurrence_is_reported():
    text = "---\nname: a\nmetadata:\n  k: 1\n  k: 2\ndescription: d\ndescription: e\n---\n"
    with pytest.raises(FrontmatterError) as exc:
        parse_frontmatter(text, "f")
    assert (exc.value.line, exc.value.field) == (5, "metadata.k")


def test_same_key_in_different_mappings_and_aliases_are_not_duplicates():
    text = ("---\nname: a\ndescription: d\ntriggers: x\nmetadata:\n  triggers: y\n"
            "  one: &m {k: v}\n  two: *m\n  list:\n    - k: 1\n    - k: 2\n---\n")
    meta, _ = parse_frontmatter(text)
    assert meta["metadata"]["two"] == {"k": "v"} and meta["metadata"]["list"] == \
        [{"k": "1"}, {"k": "2"}]
    meta, _ = parse_frontmatter("---\na: &x [*x]\n---\n")          # recursive alias
    assert meta["a"][0] is meta["a"]


def _write(root, folder, text):
    (root / folder).mkdir(parents=True)
    (root / folder / "SKILL.md").write_text(text)


def test_a_library_loads_the_good_skill_and_reports_the_bad_one(tmp_path):
    d = tmp_path / "skills"
    _write(d, "dup-skill", TOP)
    _write(d, "good-skill", "---\nname: good-skill\ndescription: Works\n---\nDo it.\n")
    lib = SkillLibrary(d)
    assert [s.name for s in lib.skills(include_retired=True)] == ["good-skill"]
    assert len(lib.errors) == 1
    err = lib.errors[0]
    assert isinstance(err, FrontmatterError)
    assert (err.path, err.line, err.field) == (str(d / "dup-skill" / "SKILL.md"), 4,
                                               "description")
    assert err.reason == REASON.format(key="description", first=3)


# ---------------------------------------------------------------- dyna skills add --trigger

def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("new_library", [False, True])
@pytest.mark.parametrize("triggers", [["a, b"], ["rollback", "roll back,staging"], [","]])
def test_skills_add_refuses_a_trigger_with_a_comma(capsys, tmp_path, new_library, triggers):
    d = tmp_path / "skills"
    if not new_library:
        SkillLibrary(d).add(Skill("git-push", "Push safely", triggers="git"), "r1")
    body = tmp_path / "body.md"
    body.write_text("Run `make rollback-staging`.\n")
    before = files(tmp_path)
    argv = ["skills", "add", str(d), "--name", "rollback", "--description", "Roll back",
            "--body", str(body)]
    for t in triggers:
        argv += ["--trigger", t]
    rc, out, err = run(capsys, *argv)
    bad = triggers[-1]
    assert (rc, out) == (2, "")
    assert err == (f"dyna: error: --trigger={bad!r}: holds a comma; a trigger is one word or "
                   "phrase (triggers are stored comma-separated): give each with its own "
                   "--trigger\n")
    assert files(tmp_path) == before and d.exists() is not new_library


def test_skills_add_with_separate_triggers_still_works(capsys, tmp_path):
    body = tmp_path / "body.md"
    body.write_text("Run `make rollback-staging`.\n")
    rc, _, err = run(capsys, "skills", "add", str(tmp_path / "skills"), "--name", "rollback",
                     "--description", "Roll back", "--body", str(body), "--trigger", "a",
                     "--trigger", "b")
    assert (rc, err) == (0, "")
    assert SkillLibrary(tmp_path / "skills")["rollback"].triggers == ("a", "b")


def test_skills_list_names_the_repeated_key(capsys, tmp_path):
    d = tmp_path / "skills"
    _write(d, "dup-skill", META)
    _write(d, "good-skill", "---\nname: good-skill\ndescription: Works\n---\nDo it.\n")
    rc, out, _ = run(capsys, "skills", "list", str(d))
    assert rc == 1 and "1 active, 0 retired, 0 pending, 1 failed to load (2 skill files)" in out
    assert (f"error: {d / 'dup-skill' / 'SKILL.md'}:7: field 'metadata.author': "
            + REASON.format(key="author", first=5)) in out


def test_a_duplicated_key_is_shown_redacted_and_cut_short():
    """A key is text from the file: a token as a key is never echoed, and a key of 50,000
    characters gives a message of a few hundred (duplicated or malformed alike)."""
    token = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
    text = (f"---\nname: a\ndescription: d\nmetadata:\n  {token}: x\n  {token}: y\n"
            "---\nbody\n")
    with pytest.raises(FrontmatterError) as err:
        parse_frontmatter(text, "x/SKILL.md")
    assert str(err.value) == ("x/SKILL.md:6: field 'metadata.[REDACTED]': duplicate key "
                              "'[REDACTED]' (first at line 5): a reader sees the first "
                              "value, a YAML loader keeps the last; remove one")
    assert err.value.value == "[REDACTED]" and token not in repr(err.value.__dict__)
    key = "k" * 1000
    with pytest.raises(FrontmatterError) as err:
        parse_frontmatter(f"---\nname: a\ndescription: d\n{key}: 1\n{key}: 2\n---\n")
    assert str(err.value).startswith(f"<text>:5: field '{'k' * 120}...': duplicate key "
                                     f"'{'k' * 60}...' (first at line 4)")
    with pytest.raises(FrontmatterError) as err:
        parse_frontmatter(f"---\nname: a\ndescription: d\n{'k' * 50_000}: 1\n---\n")
    assert len(str(err.value)) < 300 and str(err.value).endswith("invalid YAML: could not "
                                                                 "find expected ':'")


def test_match_and_catalog_say_which_skill_files_were_not_loaded(capsys, tmp_path):
    """A skill that failed to load is never matched nor in the catalog: both say so on
    stderr (one line per file), not only ``list``."""
    d = tmp_path / "skills"
    _write(d, "dup-skill", META)
    _write(d, "good-skill", "---\nname: good-skill\ndescription: Works\n---\nDo it.\n")
    warning = (f"dyna: warning: not loaded: {d / 'dup-skill' / 'SKILL.md'}:7: field "
               f"'metadata.author': " + REASON.format(key="author", first=5) + "\n")
    rc, out, err = run(capsys, "skills", "match", str(d), "anything at all")
    assert (rc, out, err) == (0, "no skill matches\n", warning)
    rc, out, err = run(capsys, "skills", "catalog", str(d))
    assert rc == 0 and err == warning
    # "- good-skill: Works\n": 20 characters, ceil(20 / 4) = 5 tokens
    assert out == ("- good-skill: Works\n\n1 skill, 20 characters, about 5 tokens "
                   "(estimate: characters / 4)\n")


def test_skills_add_refuses_an_empty_trigger(capsys, tmp_path):
    body = tmp_path / "body.md"
    body.write_text("Run `make rollback-staging`.\n")
    rc, _, err = run(capsys, "skills", "add", str(tmp_path / "skills"), "--name", "rollback",
                     "--description", "Roll back", "--body", str(body), "--trigger", " ")
    assert rc == 2 and err == ("dyna: error: --trigger=' ': is empty; give a word or phrase, "
                               "or no --trigger to match on the description\n")
    assert not (tmp_path / "skills").exists()
