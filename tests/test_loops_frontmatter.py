"""SKILL.md frontmatter: parsing, writing, BOM and line endings, property tests."""

import os
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dyna.errors import ConfigError
from dyna.loops.frontmatter import FrontmatterError, dump_frontmatter, parse_frontmatter
from dyna.loops.skills import Skill, SkillLibrary

CASE_A = "---\nname: maze-debug\ndescription: Debug mazes: walls and goal\ntriggers: [maze]\n---\nBody\n"
CASE_B = ("---\nname: maze-debug\ndescription: \"Debug mazes: walls and goal\"\n"
          "triggers: [maze]\n---\nBody\n")
CASE_C = (b"\xEF\xBB\xBF---\r\nname: maze-debug\r\ndescription: \"Debug mazes\"\r\n"
          b"triggers: [maze]\r\n---\r\nBody\r\n")


def _write(root: Path, folder: str, data) -> Path:
    (root / folder).mkdir(parents=True, exist_ok=True)
    p = root / folder / "SKILL.md"
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return p


# ------------------------------------------------------------------ SKL-01
def test_skl01_a_unquoted_colon_reported_with_file_line_field(tmp_path):
    path = _write(tmp_path, "maze-debug", CASE_A)
    _write(tmp_path, "other", "---\nname: other\ndescription: fine\n---\n")
    lib = SkillLibrary(tmp_path)
    assert list(lib) == ["other"]
    assert len(lib.errors) == 1
    err = lib.errors[0]
    assert err.path == str(path)
    assert err.line == 3 and err.field == "description"
    assert str(err).startswith(f"{path}:3: field 'description': invalid YAML: mapping values")
    assert lib.summary() == {"active": 1, "retired": 0, "pending": 0, "failed": 1, "warned": 0,
                              "total": 2}


def test_skl01_b_quoted_description_loads(tmp_path):
    _write(tmp_path, "maze-debug", CASE_B)
    lib = SkillLibrary(tmp_path)
    assert lib.errors == []
    s = lib["maze-debug"]
    assert s.description == "Debug mazes: walls and goal"
    assert s.triggers == ("maze",)
    assert s.body == "Body"


def test_skl01_c_bom_crlf_loads_like_lf(tmp_path):
    _write(tmp_path, "maze-debug", CASE_C)
    lf = CASE_C[3:].replace(b"\r\n", b"\n")
    _write(tmp_path / "lf", "maze-debug", lf)
    s = SkillLibrary(tmp_path)["maze-debug"]
    assert s.name == "maze-debug" and s.body == "Body" and s.description == "Debug mazes"
    assert s == SkillLibrary(tmp_path / "lf")["maze-debug"]


def test_cr_only_line_endings():
    meta, body = parse_frontmatter("---\rname: x\rdescription: d\r---\rline1\rline2\r")
    assert meta == {"name": "x", "description": "d"} and body == "line1\nline2"


# ------------------------------------------------------------------ robust values
def test_yes_no_on_dates_numbers_stay_strings():
    meta, _ = parse_frontmatter("---\na: yes\nb: no\nc: on\nd: off\ne: 2024-05-01\n"
                                "f: 1.10\ng: true\nh: ~\n---\n")
    assert meta == {"a": "yes", "b": "no", "c": "on", "d": "off", "e": "2024-05-01",
                    "f": "1.10", "g": "true", "h": "~"}


def test_triggers_string_or_list_and_metadata(tmp_path):
    _write(tmp_path, "s1", "---\nname: s1\ndescription: d\ntriggers: deploy, code review\n---\n")
    _write(tmp_path, "s2", "---\nname: s2\ndescription: d\nmetadata:\n  triggers: [deploy, "
                           "'code review']\n  trust: approved\n  successes: '4'\n---\n")
    lib = SkillLibrary(tmp_path)
    assert lib["s1"].triggers == ("deploy", "code review") == lib["s2"].triggers
    # a hand-written file's trust and counts are not believed (dyna did not write it)
    assert lib["s2"].trust == "untrusted" and lib["s2"].successes == 0
    assert [w.rule for w in lib.warnings] == ["bookkeeping-fields"]


def test_quotes_and_colons_round_trip(tmp_path):
    s = Skill("q", "It's \"quoted\": yes: no", body="a: b\n---\nc", triggers=["on", "a'b"])
    lib = SkillLibrary(tmp_path)
    lib.add(s, "r1")
    back = SkillLibrary(tmp_path)["q"]
    assert back.description == s.description and back.body == "a: b\n---\nc"
    assert back.triggers == ("on", "a'b")


def test_unknown_fields_are_kept(tmp_path):
    _write(tmp_path, "k", "---\nname: k\ndescription: d\nlicense: MIT\nallowed-tools: Bash Read\n"
                          "metadata:\n  author: ann\n---\nbody\n")
    lib = SkillLibrary(tmp_path)
    lib.patch("k", "r1", body="new body")
    text = (tmp_path / "k" / "SKILL.md").read_text()
    assert "license: MIT" in text and "allowed-tools: Bash Read" in text and "author: ann" in text
    assert SkillLibrary(tmp_path)["k"].extra == (("license", "MIT"), ("allowed-tools", "Bash Read"))


@pytest.mark.parametrize("text, field", [
    ("---\ndescription: d\n---\n", "name"),
    ("---\nname: Bad_Name\ndescription: d\n---\n", "name"),
    ("---\nname: x\ndescription: ''\n---\n", "description"),
    ("---\nname: x\ndescription: d\nmetadata:\n  successes: many\n---\n", "metadata.successes"),
    ("---\nname: x\ndescription: d\nmetadata: [1, 2]\n---\n", "metadata"),
    ("no frontmatter\n", "frontmatter"),
    ("---\nname: x\n", "frontmatter"),
])
def test_bad_files_name_the_field(text, field):
    with pytest.raises(FrontmatterError) as ei:
        Skill.from_text(text, "f/SKILL.md")
    assert ei.value.field == field


def test_name_must_equal_folder(tmp_path):
    path = _write(tmp_path, "folder", "---\nname: other\ndescription: d\n---\n")
    with pytest.raises(FrontmatterError, match="must equal the folder name 'folder'"):
        Skill.from_text(path.read_bytes(), path, folder="folder")
    # a library loads it anyway, under its folder name, with a warning (Agent Skills
    # client guide), and refuses to write it back
    lib = SkillLibrary(tmp_path)
    assert list(lib) == ["folder"] and lib.errors == []
    assert [(w.path, w.rule) for w in lib.warnings] == [(str(path), "name-folder")]
    with pytest.raises(ConfigError, match="differs from its folder"):
        lib.patch("folder", "r1", body="x")
    assert path.read_text() == "---\nname: other\ndescription: d\n---\n"


def test_description_limits():
    Skill("x", "d" * 1024)
    with pytest.raises(ConfigError) as ei:
        Skill("x", "d" * 1025)
    assert ei.value.field == "description"


# ------------------------------------------------------------------ path safety
@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/b", "..", "A", "a--b", "-a",
                                  "a" * 65, "", "x\n", "a_b"])
def test_bad_names_refused(tmp_path, name):
    with pytest.raises(ConfigError) as ei:
        Skill(name, "d")
    assert ei.value.field == "name"


def test_symlink_escape_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    os.symlink(outside, lib_dir / "evil")
    lib = SkillLibrary(lib_dir)
    with pytest.raises(ConfigError, match="outside"):
        lib.add(Skill("evil", "d"), "r1")
    assert list(outside.iterdir()) == []


# ------------------------------------------------------------------ properties
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_line = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1,
                max_size=30)
_names = st.from_regex(r"\A[a-z0-9]{1,8}(-[a-z0-9]{1,8}){0,3}\Z")
_trigger = _line.filter(lambda t: "," not in t and any(c.isalnum() or not c.isspace()
                                                       for c in t.strip()))
_date = st.dates().map(lambda d: d.isoformat()).filter(lambda s: len(s) == 10)

skills = st.builds(
    Skill, name=_names,
    description=_text.filter(lambda s: s.strip() and len(s) <= 1024),
    body=_text, triggers=st.lists(_trigger, max_size=4),
    created=_date | st.just(""), last_verified=_date | st.just(""),
    source_run=_line, trust=st.sampled_from(["trusted", "approved", "untrusted"]),
    successes=st.integers(0, 10**6), failures=st.integers(0, 10**6),
    extra_metadata=st.dictionaries(st.sampled_from(["author", "version", "x-y"]), _text,
                                   max_size=2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skill=skills)
def test_property_round_trip_through_text(skill):
    assert Skill.from_text(skill.to_text(), folder=skill.name) == skill


@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(skill=skills)
def test_property_round_trip_through_library(tmp_path_factory, skill):
    d = tmp_path_factory.mktemp("lib")
    SkillLibrary(d, durable=False).add(skill, "r1")
    back = SkillLibrary(d)[skill.name]
    assert back == SkillLibrary(d, durable=False).get(skill.name)
    assert back.description == skill.description and back.body == skill.body
    assert back.triggers == skill.triggers and back.successes == skill.successes


@settings(max_examples=150, deadline=None)
@given(meta=st.dictionaries(st.text(string.ascii_letters, min_size=1, max_size=6),
                            _text | st.lists(_text, max_size=3), max_size=5), body=_text)
def test_property_dump_parse_inverse(meta, body):
    # Bodies are normalised to LF line endings on reading.
    lf = body.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
    assert parse_frontmatter(dump_frontmatter(meta, body)) == (meta, lf)


@settings(max_examples=200, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=0, max_size=20), description=_text, body=_text)
def test_property_nothing_written_outside(tmp_path_factory, name, description, body):
    root = tmp_path_factory.mktemp("sandbox")
    lib_dir = root / "lib"
    lib = SkillLibrary(lib_dir, durable=False)
    try:
        lib.add(Skill(name, description or "d", body), "r1")
    except ConfigError:
        pass
    text = f"---\nname: {name!r}\ndescription: d\n---\n"
    try:
        Skill.from_text(text)
    except ConfigError:
        pass
    outside = [p for p in root.rglob("*") if not p.is_relative_to(lib_dir)]
    assert outside == []
    for p in lib_dir.rglob("SKILL.md"):
        assert p.resolve().is_relative_to(lib_dir.resolve())
