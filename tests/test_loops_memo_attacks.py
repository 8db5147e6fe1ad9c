"""Attacks on the loops' safety net where it skips a scan.

The skill library scans a skill's text where it enters (a skill written with text of its
own, a skill read from a file) and not at an outcome (numbers alone). A Skill is frozen,
but the values of its ``extra`` and ``extra_metadata`` entries may be lists or dicts: one
mutated after the skill was netted must not reach SKILL.md, the history or the library
unscanned. The plantings are real lines of tests/data/secret_corpus.txt.
"""

import datetime as dt
from pathlib import Path

import pytest

from dyna.loops.skills import Skill, SkillLibrary

DATA = Path(__file__).parent / "data"
CLOCK = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)


def _secret(fmt: str) -> str:
    for line in (DATA / "secret_corpus.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith(fmt + "\t"):
            parts = line.split("\t")
            return parts[2] if len(parts) > 2 else parts[1]
    raise KeyError(fmt)


GITHUB = _secret("github_token (classic)")
STRIPE = _secret("stripe_key (secret)")


def _files(d: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in sorted(d.rglob("*")) if p.is_file())


def _library(tmp_path, **kw) -> SkillLibrary:
    return SkillLibrary(tmp_path / "skills", clock=lambda: CLOCK, **kw)


@pytest.mark.parametrize("log_outcomes", [True, False])
@pytest.mark.parametrize("field", ["extra", "extra_metadata"])
def test_a_netted_skill_whose_extra_list_is_mutated_is_scanned_again(tmp_path, log_outcomes,
                                                                      field):
    lib = _library(tmp_path, log_outcomes=log_outcomes)
    notes = ["a clean note"]
    lib.add(Skill("deploy-app", "Deploy the app", "Run make deploy.", triggers=("deploy",),
                  **{field: {"notes": notes}}), run_id="r1")
    stored = lib.get("deploy-app")
    assert dict(getattr(stored, field)) == {"notes": ["a clean note"]}
    before = lib.redactions if hasattr(lib, "redactions") else None
    # the stored value is the caller's list: planted after the net passed it
    dict(getattr(stored, field))["notes"].append("token " + GITHUB)
    lib.record_outcome(["deploy-app"], True, run_id="r2")
    lib.patch("deploy-app", run_id="r3", body="Run make deploy twice.")
    assert GITHUB not in _files(tmp_path / "skills")
    assert GITHUB not in repr(lib.get("deploy-app"))
    if before is not None:
        assert lib.redactions != before


def test_a_netted_skill_whose_extra_dict_is_mutated_is_scanned_again(tmp_path):
    lib = _library(tmp_path)
    conf = {"env": "staging"}
    lib.add(Skill("ship-it", "Ship the build", "Run make ship.", triggers=("ship",),
                  extra={"conf": conf}), run_id="r1")
    dict(lib.get("ship-it").extra)["conf"]["key"] = STRIPE
    lib.record_outcome(["ship-it"], False, run_id="r2")
    assert STRIPE not in _files(tmp_path / "skills")
    assert STRIPE not in repr(lib.get("ship-it"))


def test_the_same_text_objects_with_a_planted_source_or_provenance_are_caught(tmp_path):
    """The text memo skips description/body/triggers only: a skill that reuses a netted
    skill's very objects but carries a secret in its provenance, source run or retired
    reason is redacted."""
    lib = _library(tmp_path)
    first = lib.add(Skill("build-app", "Build the app", "Run make build.",
                          triggers=("build",)), run_id="r1").skill
    planted = Skill("build-app-2", first.description, first.body, triggers=first.triggers,
                    provenance=("tool_output", "from " + GITHUB))
    assert planted.body is first.body and planted.description is first.description
    lib.add(planted, run_id="r2")
    lib.retire("build-app", run_id="r3", reason="replaced, see " + STRIPE)
    text = _files(tmp_path / "skills")
    assert GITHUB not in text and STRIPE not in text
    assert GITHUB not in repr(lib.get("build-app-2"))


def test_an_equal_but_distinct_planted_body_is_caught(tmp_path):
    """A body equal to nothing netted (a different object holding a secret) is scanned."""
    lib = _library(tmp_path)
    body = "Run make build."
    lib.add(Skill("build-app", "Build the app", body, triggers=("build",)), run_id="r1")
    lib.patch("build-app", run_id="r2", body="".join([body, " Then export ", GITHUB]))
    assert GITHUB not in _files(tmp_path / "skills")
    assert GITHUB not in lib.get("build-app").body


def _counting(lib: SkillLibrary) -> list:
    """Record every skill ``lib``'s redactor scans (its ``clean`` calls), in order."""
    seen, clean = [], lib._redactor.clean

    def counted(skill):
        seen.append(skill.name)
        return clean(skill)
    lib._redactor.clean = counted
    return seen


def test_an_outcome_brings_no_text_and_is_not_scanned():
    for log_outcomes in (True, False):
        lib = SkillLibrary.in_memory(log_outcomes=log_outcomes, clock=lambda: CLOCK)
        scanned = _counting(lib)
        lib.add(Skill("deploy-app", "Deploy the app.", "1. call `make deploy`", ("deploy",)),
                run_id="e1")
        for i in range(50):
            lib.record_outcome(["deploy-app"], i % 3 != 0, f"e{i + 2}")
        assert scanned == ["deploy-app"]
        live = lib.get("deploy-app")
        assert (live.successes, live.failures) == (33, 17)
        lib.patch("deploy-app", run_id="e60", body="1. call `make deploy` twice")
        lib.retire("deploy-app", run_id="e61", reason="replaced")
        lib.restore("deploy-app", run_id="e62")
        assert scanned == ["deploy-app"] * 4
        assert lib.redactions == {}


def test_a_skill_file_written_by_hand_is_redacted_when_read_and_counted_once(tmp_path):
    root = tmp_path / "skills"
    SkillLibrary(root, clock=lambda: CLOCK)
    md = root / "hand-made" / "SKILL.md"
    md.parent.mkdir()
    md.write_text(f"---\nname: hand-made\ndescription: uses {GITHUB}\n---\nrun {GITHUB}\n",
                  encoding="utf-8")
    lib = SkillLibrary(root, clock=lambda: CLOCK)
    skill = lib.get("hand-made")
    assert (skill.description, skill.body) == ("uses [REDACTED]", "run [REDACTED]")
    assert lib.redactions == {"github_token": 2}
    scanned = _counting(lib)
    for i in range(3):
        lib.record_outcome(["hand-made"], True, run_id=f"r{i}")
    # the skill is not scanned again; the file dyna did not write keeps its bytes, and
    # each write's history record redacts its old text (one catch a record)
    assert scanned == [] and lib.redactions == {"github_token": 5}
    assert GITHUB in md.read_text(encoding="utf-8")
    lib.patch("hand-made", run_id="r9", body="run it")
    assert GITHUB not in md.read_text(encoding="utf-8")
    assert lib.redactions == {"github_token": 6}
    assert GITHUB not in repr(lib.history())
    assert lib.get("hand-made").description == "uses [REDACTED]"


def _loop(tmp_path):
    from dyna.loops import LearningLoop, LoopConfig, MemoryStore

    class _Nobody:
        def review(self, digest, context):
            raise AssertionError("not reviewed here")

    return LearningLoop(SkillLibrary(tmp_path / "skills", clock=lambda: CLOCK),
                        MemoryStore(tmp_path / "MEMORY.md", clock=lambda: CLOCK),
                        _Nobody(), LoopConfig())


def test_submit_of_a_netted_body_then_a_planted_one_writes_no_secret(tmp_path):
    """The same description and body texts as a committed skill (equal, other objects) with
    a planted secret in the triggers, then in the body: refused by validation (exact
    reasons), nothing of them on disk."""
    from dyna.loops import Proposal
    loop = _loop(tmp_path)
    body = "Run `make rollback-staging`."
    d = loop.submit(Proposal("skill", "rollback-staging", "Roll back staging", body,
                             ("rollback",)), "alice", by_person=True)
    assert (d.action, d.detail) == ("committed", "written")
    d = loop.submit(Proposal("skill", "rollback-prod", "Roll back staging",
                             "".join(["Run `make rollback-staging`."]),
                             ("rollback", "key " + GITHUB)), "alice", by_person=True)
    assert (d.action, d.detail) == ("invalid", "secret-looking value in triggers or actions")
    d = loop.submit(Proposal("skill", "rollback-all", "Roll back staging",
                             body + " with " + STRIPE, ("rollback",)), "alice",
                    by_person=True)
    assert (d.action, d.detail) == ("invalid", "secret-looking value in body")
    text = _files(tmp_path / "skills")
    assert GITHUB not in text and STRIPE not in text
    assert sorted(s.name for s in loop.skills.skills()) == ["rollback-staging"]


def test_memory_memo_does_not_pass_a_hand_planted_fact(tmp_path):
    """A fact planted in MEMORY.md by hand (a new object on every read) is redacted by the
    next write, though the other facts were netted before."""
    from dyna.loops import MemoryStore
    path = tmp_path / "MEMORY.md"
    mem = MemoryStore(path, clock=lambda: CLOCK)
    mem.add("the build runs with make", run_id="r1", trust="trusted")
    mem.add("the deploy port is 8080", run_id="r2", trust="trusted")
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("the deploy port is 8080",
                                 "the deploy token is " + GITHUB), encoding="utf-8")
    mem2 = MemoryStore(path, clock=lambda: CLOCK)
    mem2.add("the tests run with pytest", run_id="r3", trust="trusted")
    assert GITHUB not in path.read_text(encoding="utf-8")
    assert all(GITHUB not in e.text for e in mem2.entries())
    assert mem2.redactions.get("github_token", 0) == 1
