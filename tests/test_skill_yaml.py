"""SKILL.md frontmatter that every YAML reader reads as strings: PyYAML (YAML 1.1 with its
implicit types) and ruamel.yaml (YAML 1.2, and 1.1 by directive) read every name,
description and metadata value dyna writes back as the string it wrote."""

import itertools

import pytest
import yaml
from ruamel.yaml import YAML

from dyna.errors import ConfigError
from dyna.loops.frontmatter import dump_frontmatter, typed_by_some_reader
from dyna.loops.skills import Skill, check_skill_name

WORDS = ["y", "n", "yes", "no", "true", "false", "on", "off", "null", "~", ".inf", "-.inf",
         "+.inf", ".nan", "<<", "="]


def casings(word):
    return sorted({word, word.upper(), word.capitalize()})


def numbers():
    """Numbers in the spellings of YAML 1.1, 1.2 and js-yaml: signs, bases, underscores,
    fractions, exponents, base 60, versions."""
    out = ["0o17", "0O17", "0x1F", "0x1f", "0b101", "017", "0", "1_000", "1_000.5", "1:20",
           "190:20:30", "190:20:30.15", "1.2.3", ".5", "5.", "1e3", "1E3", "1e-3", "1e+3",
           "1.5e3", "1.5E-3", ".5e3", "123", "2024-05-01", "2024-5-1",
           "2024-05-01 10:00:00", "2024-05-01T10:00:00Z", "2001-12-14t21:59:43.10-05:00"]
    for sign, mant, exp in itertools.product(["", "-", "+"], ["1", "1.0", "10.25", ".75"],
                                             ["", "e3", "e-3", "E+12"]):
        out.append(f"{sign}{mant}{exp}")
    return out


EDGES = sorted({c for w in WORDS for c in casings(w)} | set(numbers()))


def edge_names():
    """The edge values that are valid skill names (``1e3``, ``0o17``, ``yes``, ...)."""
    names = []
    for v in EDGES:
        try:
            check_skill_name(v)
        except ConfigError:
            continue
        names.append(v)
    return names


def strings_only(value, where="") -> list[str]:
    """Paths of the values in ``value`` that are not strings (empty: all strings)."""
    if isinstance(value, dict):
        return [p for k, v in value.items()
                for p in ([f"{where}.{k!r} (key)"] if not isinstance(k, str) else [])
                + strings_only(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in strings_only(v, f"{where}[{i}]")]
    return [] if isinstance(value, str) else [f"{where}={value!r} ({type(value).__name__})"]


def frontmatter_yaml(text: str) -> str:
    return text.split("---\n")[1]


def readers():
    """(name, load) of each reader: PyYAML's safe loader (YAML 1.1), ruamel.yaml's safe
    loader (YAML 1.2) and ruamel.yaml reading the same text as YAML 1.1."""
    r12 = YAML(typ="safe", pure=True)
    r11 = YAML(typ="safe", pure=True)
    return [("pyyaml", yaml.safe_load), ("ruamel 1.2", r12.load),
            ("ruamel 1.1", lambda t: r11.load("%YAML 1.1\n---\n" + t))]


def written_skills():
    """A skill per edge name, and a skill per edge description, trigger, action and
    metadata value (counts and a posterior included)."""
    skills = [Skill(name, f"Use when {name} comes up.") for name in edge_names()]
    for i, v in enumerate(EDGES):
        skills.append(Skill(f"edge-{i}", v, triggers=[v], created="2024-05-01",
                            source_run=v, provenance=[v], successes=3, failures=1,
                            a=1e-05, b=4.0, extra=(("license", v), (v, "key")),
                            extra_metadata=(("note", v),)))
    return skills


def test_edge_names_include_the_cases_of_the_issue():
    names = edge_names()
    assert {"1e3", "0o17", "yes", "no", "on", "null", "0x1f", "123", "2024-05-01"} <= set(names)
    assert len(names) == 20
    assert len(EDGES) == 110


@pytest.mark.parametrize("reader", readers(), ids=lambda r: r[0])
def test_every_written_value_reads_back_as_a_string(reader):
    name, load = reader
    skills = written_skills()
    bad = {}
    for s in skills:
        data = load(frontmatter_yaml(s.to_text()))
        wrong = strings_only(data)
        if wrong:
            bad[s.name] = wrong
        assert data["name"] == s.name and data["description"] == s.description
    assert bad == {}, f"{name}: {len(bad)} of {len(skills)} files typed a value"
    assert len(skills) == 20 + 110


def test_written_text_quotes_exactly_the_typed_scalars():
    text = Skill("1e3", "1.5e3", triggers=["0o17", "deploy"]).to_text()
    assert text.splitlines()[:4] == ["---", "name: '1e3'", "description: '1.5e3'", "metadata:"]
    assert "  triggers: 0o17, deploy" in text     # one string: "0o17, deploy" is no number
    meta = {"a": "3 steps", "b": "v1.2", "c": "1.2.3", "d": "yes please", "e": "Off",
            "f": "12:30", "g": "", "h": "2024-05-01 release"}
    assert dump_frontmatter(meta, "") == ("---\na: 3 steps\nb: v1.2\nc: '1.2.3'\n"
                                          "d: yes please\ne: 'Off'\nf: '12:30'\ng: ''\n"
                                          "h: 2024-05-01 release\n---\n")


@pytest.mark.parametrize("value,typed", [
    ("1e3", True), ("0o17", True), ("1.5e3", True), ("-.INF", True), ("~", True),
    ("1_000", True), ("0b1_01", True), ("2024-05-01t10:00:00", True), ("NO", True),
    ("noon", False), ("1e3x", False), ("e3", False), ("0x", False), ("v1", False),
    ("1-2", False), ("inf", False), ("nan", False), ("2024-05-01 x", False),
])
def test_typed_by_some_reader(value, typed):
    assert typed_by_some_reader(value) is typed


def test_a_skill_read_back_is_equal():
    for s in written_skills():
        assert Skill.from_text(s.to_text()) == s
