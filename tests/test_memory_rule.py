"""The memory store's conflict rule is replaceable: the store compares what its rule reads."""

import re

from dyna.loops.fact_attributes import ENGLISH_FACTS, Attribute, EnglishFactRule, relation
from dyna.loops.memory import MemoryStore


class GermanPorts:
    """A toy rule for German facts "<Subjekt> ist <Zahl>": the number as the value."""

    language = "German"

    def attribute(self, text):
        m = re.fullmatch(r"(?:der |die |das )?(.+?) ist (\d+)\.?", text.strip(), re.I)
        return None if m is None else Attribute(m.group(1).casefold(), "number", m.group(2), "")


def test_the_default_rule_is_the_english_one():
    assert isinstance(ENGLISH_FACTS, EnglishFactRule) and ENGLISH_FACTS.language == "English"
    assert MemoryStore.in_memory().rule is ENGLISH_FACTS
    assert ENGLISH_FACTS.attribute("Der API-Port ist 8080") is None   # not English
    assert relation("API port: 9090", "The API port is 8080") == "conflict"


def test_another_rule_decides_the_conflicts():
    german = MemoryStore.in_memory(rule=GermanPorts())
    german.add("Der API-Port ist 8080", trust="trusted")
    res = german.add("Der API-Port ist 9090", trust="trusted")
    assert res.status == "superseded" and [e.text for e in german] == ["Der API-Port ist 9090"]
    assert relation("Der API-Port ist 1", "Der API-Port ist 2", GermanPorts()) == "conflict"
    english = MemoryStore.in_memory()
    english.add("Der API-Port ist 8080", trust="trusted")
    assert english.add("Der API-Port ist 9090", trust="trusted").status == "added"
    assert len(english) == 2
