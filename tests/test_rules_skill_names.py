"""Skill names are looked up after NFKC case folding, at every public entry point that
finds a skill by name (library methods and ``dyna skills`` commands), and two skills whose
names fold the same cannot both be stored (the second is refused, naming the first)."""

import datetime as dt

import pytest

from dyna.cli import main
from dyna.errors import ConfigError
from dyna.loops.skills import Skill, SkillLibrary

NOON = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)
SPELLINGS = ("deploy", "Deploy", "DEPLOY", "Ｄeploy", "ＤＥＰＬＯＹ")


@pytest.fixture(params=["memory", "folder"])
def lib(request, tmp_path):
    lib = (SkillLibrary.in_memory(clock=lambda: NOON) if request.param == "memory"
           else SkillLibrary(tmp_path / "lib", clock=lambda: NOON))
    lib.add(Skill("deploy", "Deploy the web app.", "1. run `make web`"), "r1")
    lib.add(Skill("straße", "Street names.", "1. look"), "r1")
    return lib


def test_reading_finds_a_skill_in_every_spelling(lib):
    for name in SPELLINGS:
        assert lib.stored_name(name) == "deploy", name
        assert lib.get(name).name == lib[name].name == "deploy", name
        assert name in lib, name
    assert lib.get("STRASSE").name == lib["Strasse"].name == "straße"
    assert lib.stored_name("nope") is None and lib.get("nope") is None and "nope" not in lib
    with pytest.raises(ConfigError) as e:
        lib["Nope"]
    assert (e.value.field, e.value.value, e.value.reason) == ("name", "Nope", "no such skill")


def test_writing_finds_a_skill_in_every_spelling(lib):
    assert lib.patch("DEPLOY", "r2", body="1. run `make web2`").name == "deploy"
    assert lib["deploy"].body == "1. run `make web2`"
    assert lib.retire("Ｄeploy", "r3").status == "retired"
    assert "deploy" not in lib and lib.get("Deploy").status == "retired"
    assert lib.restore("ＤＥＰＬＯＹ", "r4").skill.status == "active"
    assert lib.record_outcome(["Deploy", "deploy", "DEPLOY", "nope"], True, "r5") == []
    assert lib["deploy"].successes == 1                       # one skill, counted once
    assert [h.op for h in lib.history(name="DEPLOY")] == \
        ["create", "patch", "retire", "restore", "outcome"]
    assert [h.op for h in lib.history(name="STRASSE")] == ["create"]


def test_a_second_skill_whose_name_folds_the_same_is_refused(lib):
    with pytest.raises(ConfigError) as e:
        lib.add(Skill("strasse", "Another."), "r2")
    assert (e.value.field, e.value.value) == ("name", "strasse")
    assert "'straße'" in e.value.reason and "NFKC, case-folded" in e.value.reason
    with pytest.raises(ConfigError) as e:
        lib.add(Skill("deploy", "Again."), "r2")
    assert e.value.reason == "an active skill has this name; use patch()"
    lib.retire("straße", "r3")
    with pytest.raises(ConfigError) as e:               # a retired skill keeps its name
        lib.add(Skill("strasse", "Another."), "r2")
    assert "'straße'" in e.value.reason
    # the approval path writes through the same check
    item = lib.stage(Skill("strasse", "Staged."), "r4", ("web",))
    with pytest.raises(ConfigError) as e:
        lib.approve(item.id)
    assert (e.value.field, e.value.value) == ("name", "strasse")
    assert sorted(s.name for s in lib.skills(include_retired=True)) == ["deploy", "straße"]


def test_skills_cli_finds_a_skill_in_every_spelling(tmp_path, capsys):
    folder = tmp_path / "lib"
    lib = SkillLibrary(folder, clock=lambda: NOON)
    lib.add(Skill("deploy", "Deploy the web app.", "1. run `make web`"), "r1")
    for name in SPELLINGS:
        assert main(["skills", "show", str(folder), name]) == 0, name
        assert "name: deploy" in capsys.readouterr().out
    assert main(["skills", "retire", str(folder), "DEPLOY"]) == 0
    assert capsys.readouterr().out == "retired deploy\n"
    assert main(["skills", "restore", str(folder), "Ｄeploy"]) == 0
    assert capsys.readouterr().out == "restored deploy\n"
    assert main(["skills", "history", str(folder), "--name", "Deploy"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[2] for line in out.splitlines()[2:]] == \
        ["create", "retire", "restore"]
    assert main(["skills", "show", str(folder), "../../etc"]) == 2
    assert "name='../../etc'" in capsys.readouterr().err
    assert main(["skills", "show", str(folder), "Nope"]) == 2
    assert "name='Nope': no such skill" in capsys.readouterr().err


def test_a_snapshot_finds_a_skill_by_width_case_and_compatibility_form(lib):
    lib.add(Skill("file-sync", "Sync the files.", "1. run `rsync`"), "r1")
    snap = lib.snapshot()
    forms = {"file-sync": "file-sync", "ｆｉｌｅ-ｓｙｎｃ": "file-sync",   # width
             "FILE-Sync": "file-sync", "STRASSE": "straße",               # case
             "\ufb01le-sync": "file-sync", "ﬁle\uff0dsync": "file-sync",  # compatibility
             "Ｄeploy": "deploy"}
    for name, stored in forms.items():
        assert snap.stored_name(name) == stored, name
        assert snap.get(name) is snap.skills[stored], name
        assert name in snap, name
    assert snap.stored_name("file_sync") is None and snap.get("file_sync") is None
    assert "filesync" not in snap and 3 not in snap and snap.get(None) is None
    lib.retire("deploy", "r2")           # a snapshot keeps the skills it was taken with
    assert snap.get("DEPLOY").name == "deploy" and lib.snapshot().get("DEPLOY") is None


def test_the_library_and_its_snapshot_fold_names_with_one_function(lib):
    from dyna.loops.skills.names import folded_name

    assert folded_name("ＤＥＰＬＯＹ", ["deploy", "build"]) == "deploy"
    assert folded_name("deploy", ["deploy", "Deploy"]) == "deploy"      # exact first
    assert folded_name("DEPLOY", ["deploy", "Deploy"]) == "Deploy"      # else sorted first
    assert folded_name(["deploy"], ["deploy"]) is None
    snap = lib.snapshot()
    for name in SPELLINGS + ("STRASSE", "nope"):
        assert snap.stored_name(name) == lib.stored_name(name), name
