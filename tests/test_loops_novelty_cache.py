"""The novelty check's memoised text features: equal to computing them afresh, and never
stale when a stored skill's or memory's text changes after it was looked up."""

import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from dyna.loops._text import concrete_parts, content_words, fact_key, text_features
from dyna.loops.memory import MemoryStore, subject_of
from dyna.loops.review import LoopConfig, Proposal, grade, validate
from dyna.loops.skills import Skill, SkillLibrary


def clock():
    return dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)


_ALPHABET = st.sampled_from(list("abcXYZ019 ._-/`'\":=,;é") + ["make ", "The ", " is "])


@settings(max_examples=200, deadline=None)
@given(st.lists(_ALPHABET, max_size=30).map("".join))
def test_text_features_equal_the_uncached_functions(text):
    f = text_features(text)
    assert f == (fact_key(text), concrete_parts(text), frozenset(content_words(text)))
    assert text_features(text) is f          # the second look-up is the cached object


def test_skill_edited_after_cached_is_judged_on_its_new_text():
    lib = SkillLibrary.in_memory(clock=clock)
    lib.add(Skill("build-docs", "Build the docs with make html"))
    prop = Proposal("skill", "docs-quick", "Build the docs with make")
    # {build, docs, make} vs {build, docs, make, html}: 3 / 4
    assert grade(prop, lib, None).novelty == 0.25
    v = validate(prop, lib, None, LoopConfig())
    assert v.reasons == ("not novel: 0.75 similar to skill build-docs",)

    # an edit through the library (a new Skill object): {build, site, make, html}: 2 / 5
    lib.patch("build-docs", description="Build the site with make html")
    assert grade(prop, lib, None).novelty == 0.6
    assert validate(prop, lib, None, LoopConfig()).ok

    # an edit of the very object that was looked up (same object, new text): 0 / 7
    stored = lib.get("build-docs")
    object.__setattr__(stored, "description", "Restart the cache server nightly")
    assert grade(prop, lib, None).novelty == 1.0
    # and back to the first text: 3 / 4 again
    object.__setattr__(stored, "description", "Build the docs with make html")
    assert grade(prop, lib, None).novelty == 0.25

    # the body counts too: an edited body makes it the same fact (key equality)
    object.__setattr__(stored, "description", "Build the docs")
    object.__setattr__(stored, "body", "with make")
    v = validate(prop, lib, None, LoopConfig())
    assert v.reasons == ("not novel: 1.00 similar to skill build-docs",)


def test_memory_edited_after_cached_is_judged_on_its_new_text():
    mem = MemoryStore.in_memory(clock=clock)
    mem.add("Run the tests with make check")
    prop = Proposal("memory", text="Run the tests with make check quickly")
    # {run, tests, make, check} vs the same + {quickly}: 4 / 5
    v = validate(prop, None, mem, LoopConfig())
    assert v.reasons == ("not novel: 0.80 similar to memory 'Run the tests with make check'",)
    assert [e.text for e in mem.similar(prop.text, 0.8)] == ["Run the tests with make check"]

    (entry,) = mem.entries()
    object.__setattr__(entry, "text", "Deploy the site with make release")
    # {deploy, site, make, release} vs {run, tests, make, check, quickly}: 1 / 8
    assert grade(prop, None, mem).novelty == 0.875
    assert validate(prop, None, mem, LoopConfig()).ok
    assert mem.similar(prop.text, 0.8) == []
    assert entry.key == "deploy the site with make release"
    assert mem.find("run the tests with make check") is None
    assert mem.find("Deploy the site with make release.") is entry


def test_memory_subject_follows_an_edited_text():
    mem = MemoryStore.in_memory(clock=clock)
    mem.add("The test command is make check", trust="trusted")
    (entry,) = mem.entries()
    assert entry.subject == ("test command", "make check")
    prop = Proposal("memory", text="The test command is make test-fast")
    assert grade(prop, None, mem).agreement == 0.5       # same subject, other value

    object.__setattr__(entry, "text", "The build command is make all")
    assert entry.subject == ("build command", "make all") == subject_of(entry.text)
    assert grade(prop, None, mem).agreement == 1.0
    # a fact with the edited subject supersedes the edited entry, not the old subject
    res = mem.add("The build command is make release", trust="trusted")
    assert res.status == "superseded" and [e.text for e in res.superseded] == [
        "The build command is make all"]
