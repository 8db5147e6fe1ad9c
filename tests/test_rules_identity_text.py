"""Text compared for identity (facts, skill names, triggers, dedup keys, matched words) is
compared after one normalisation, NFKC and case-folded
(:func:`dyna.loops._text.identity_text`), at every public entry point that compares it.

Each entry point of the list below is called with a text as stored and with spellings
that differ from it only by width, case or compatibility form; every spelling gives the
same answer. Skill names are also walked, command by command, in
``tests/test_rules_skill_names.py``.
"""

import datetime as dt

from dyna.cli import main
from dyna.loops import Digest
from dyna.loops.memory import MemoryStore
from dyna.loops.review.config import LoopConfig
from dyna.loops.review.loop import _fact_outcomes
from dyna.loops.review.novelty import closest
from dyna.loops.review.proposal import Proposal
from dyna.loops.review.safeguards import validate
from dyna.loops.skills import Skill, SkillLibrary

NOON = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)
FACT = "Deploy files with `make web`"
#: the stored fact, then the same fact in width, case and compatibility forms (the "fi"
#: ligature, an ideographic space)
FACTS = (FACT, "ＤＥＰＬＯＹ files with `make web`", "deploy FILES WITH `MAKE WEB`",
         "Deploy \ufb01les with `make web`", "Deploy\u3000files with `make web`")
NAMES = ("file-sync", "ｆｉｌｅ-ｓｙｎｃ", "FILE-SYNC", "\ufb01le-sync")   # ligature fi
TRIGGERS = ("deploy web now", "ＤＥＰＬＯＹ web now", "DEPLOY WEB now", "Ｄeploy ｗｅｂ now")
WORDS = ("release notes", "ＲＥＬＥＡＳＥ notes", "RELEASE NOTES", "Ｒelease ｎotes")


def _memory():
    mem = MemoryStore.in_memory(clock=lambda: NOON)
    mem.add(FACT)
    mem.add("port is 80")
    return mem


def _library():
    lib = SkillLibrary.in_memory(clock=lambda: NOON)
    lib.add(Skill("file-sync", "Sync the files.", "1. run `rsync`"), "r1")
    lib.add(Skill("ship", "Ship the web app.", "1. run `make ship`", ("Deploy web",)), "r1")
    lib.add(Skill("docs", "Write release notes for the changelog.", "1. edit"), "r1")
    return lib


def _outcome_count(text):
    mem = _memory()
    mem.record_outcomes({text: True})
    return mem.find(FACT).successes


def _reviewed_outcomes(text):
    digest = Digest.from_run("r1", "t", success=True, tool_calls=[
        {"name": "make", "args": {}, "output": "ok", "skills": [text]}])
    return _fact_outcomes(digest, _memory().snapshot())


def _skill_written(call):
    lib = _library()
    return call(lib).name


def _outcome_recorded(name):
    lib = _library()
    lib.record_outcome([name], True, "r2")
    return lib.get("file-sync").successes


def _shown(folder, name, capsys):
    assert main(["skills", "show", str(folder), name]) == 0
    return capsys.readouterr().out


FACT_CALLS = [
    ("MemoryStore.find", lambda t: _memory().find(t).text),
    ("MemoryStore.add (a duplicate)", lambda t: _memory().add(t).status),
    ("MemoryStore.posterior", lambda t: _memory().posterior(t)),
    ("MemoryStore.similar", lambda t: [e.text for e in _memory().similar(t)]),
    ("MemoryStore.remove", lambda t: _memory().remove(t).text),
    ("MemoryStore.record_outcomes", _outcome_count),
    ("review: a fact a tool call followed", _reviewed_outcomes),
    ("validate: novelty of a memory proposal", lambda t: validate(
        Proposal("memory", text=t), memory=_memory().entries(), config=LoopConfig()).reasons),
    ("closest: the nearest stored fact", lambda t: closest(
        Proposal("memory", text=t), {}, list(_memory().entries()))),
]
SUBJECT_CALLS = [   # the subject of an attribute ("port is 81" restates or replaces)
    ("MemoryStore.relations", lambda t: [(e.text, r) for e, r in _memory().relations(t)]),
    ("MemoryStore.add (a conflict)", lambda t: _memory().add(t).status),
]
NAME_CALLS = [
    ("SkillLibrary.stored_name", lambda n: _library().stored_name(n)),
    ("SkillLibrary.get", lambda n: _library().get(n).name),
    ("SkillLibrary[]", lambda n: _library()[n].name),
    ("SkillLibrary in", lambda n: n in _library()),
    ("SkillLibrary.patch", lambda n: _skill_written(lambda lib: lib.patch(n, "r2", body="1."))),
    ("SkillLibrary.retire", lambda n: _skill_written(lambda lib: lib.retire(n, "r2"))),
    ("SkillLibrary.restore", lambda n: _skill_written(
        lambda lib: (lib.retire("file-sync", "r2"), lib.restore(n, "r3"))[1].skill)),
    ("SkillLibrary.record_outcome", _outcome_recorded),
    ("SkillLibrary.history", lambda n: [h.op for h in _library().history(name=n)]),
    ("SkillSnapshot.stored_name", lambda n: _library().snapshot().stored_name(n)),
    ("SkillSnapshot.get", lambda n: _library().snapshot().get(n).name),
    ("SkillSnapshot in", lambda n: n in _library().snapshot()),
]
MATCH_CALLS = [
    ("SkillLibrary.match (triggers)", lambda t: [m.name for m in _library().match(t)]),
    ("SkillSnapshot.match (triggers)",
     lambda t: [m.name for m in _library().snapshot().match(t)]),
]
WORD_CALLS = [
    ("SkillLibrary.match (description words)",
     lambda t: [(m.name, m.score, m.matched) for m in _library().match(t)]),
]


def test_every_entry_point_compares_identity_text_after_one_normalisation(tmp_path, capsys):
    folder = tmp_path / "lib"
    SkillLibrary(folder, clock=lambda: NOON).add(Skill("file-sync", "Sync.", "1. run"), "r1")
    cli = [("dyna skills show", lambda n: _shown(folder, n, capsys))]
    walks = [(FACT_CALLS, FACTS), (SUBJECT_CALLS, ("port is 81", "ＰＯＲＴ is 81", "PORT IS 81")),
             (NAME_CALLS + cli, NAMES), (MATCH_CALLS, TRIGGERS), (WORD_CALLS, WORDS)]
    answers = {}
    for calls, spellings in walks:
        for name, call in calls:
            got = [call(s) for s in spellings]
            assert got == [got[0]] * len(spellings), name
            answers[name] = got[0]
    assert len(answers) == 9 + 2 + 13 + 2 + 1
    # and the answers are the stored things, found
    assert answers["MemoryStore.find"] == FACT
    assert answers["MemoryStore.add (a duplicate)"] == "duplicate"
    assert answers["MemoryStore.record_outcomes"] == 1
    assert answers["review: a fact a tool call followed"] == {FACT: True}
    assert answers["closest: the nearest stored fact"][0] == 1
    assert answers["MemoryStore.relations"] == [("port is 80", "conflict")]
    assert {answers[n] for n in ("SkillLibrary.stored_name", "SkillLibrary.get",
                                 "SkillLibrary.patch", "SkillLibrary.restore",
                                 "SkillSnapshot.get")} == {"file-sync"}
    assert answers["SkillLibrary.history"] == ["create"]
    assert answers["SkillLibrary.match (triggers)"] == ["ship"]
    assert answers["SkillLibrary.match (description words)"][0][0] == "docs"
    assert "name: file-sync" in answers["dyna skills show"]


def test_triggers_and_facts_are_deduplicated_after_one_normalisation():
    assert Skill("a", "d", "", ("Deploy", "ＤＥＰＬＯＹ", "deploy")).triggers == ("Deploy",)
    mem = MemoryStore.in_memory(clock=lambda: NOON)
    assert [mem.add(f).status for f in FACTS] == ["added"] + ["duplicate"] * 4
    assert [e.text for e in mem.entries()] == [FACT]
