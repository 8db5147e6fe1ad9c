"""SkillLibrary: matching (SKL-03), competence, cap and eviction, dating, retire on
contradiction, history and undo, snapshots, approval queue; on real files."""

import datetime as dt
import json
from pathlib import Path

import math

import pytest
from scipy import stats

from dyna.errors import ConfigError
from dyna.loops.skills import PendingItem, Skill, SkillLibrary


class Clock:
    """A settable UTC clock."""

    def __init__(self, day=dt.date(2024, 5, 1)):
        self.day = day

    def __call__(self):
        return dt.datetime(self.day.year, self.day.month, self.day.day, 12,
                           tzinfo=dt.timezone.utc)

    def advance(self, days):
        self.day += dt.timedelta(days=days)


def files(root: Path) -> dict:
    """Every file's bytes under root, except the append-only history log."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "history.jsonl"}


def names(matches):
    return [m.name for m in matches]


# ------------------------------------------------------------------ SKL-03
@pytest.fixture
def skl03(tmp_path):
    lib = SkillLibrary(tmp_path, clock=Clock())
    for name, trig in [("a", ["ui"]), ("b", ["git"]), ("c", ["code review"]), ("d", ["/plan"])]:
        lib.add(Skill(name, f"skill {name}", triggers=trig), "r1")
    return SkillLibrary(tmp_path, clock=Clock())  # read back from the files


def test_skl03_word_boundaries_and_limit(skl03):
    q2 = "Fix the UI, then git push"
    assert skl03.match("build the github guide") == []
    assert set(names(skl03.match(q2))) == {"a", "b"}
    assert names(skl03.match("please do a code review")) == ["c"]
    assert names(skl03.match("run /plan now")) == ["d"]
    assert names(skl03.match(q2, limit=1)) == ["a"]  # tie on score 1.0, then name
    assert [skl03.match(q2, limit=1)[0].name for _ in range(5)] == ["a"] * 5
    assert skl03.match(q2, limit=0) == []


@pytest.mark.parametrize("limit", [-1, None, 1.5, True, "3"])
def test_skl03_bad_limit_never_unlimited(skl03, limit):
    with pytest.raises(ConfigError) as ei:
        skl03.match("Fix the UI, then git push", limit=limit)
    assert ei.value.field == "limit"


@pytest.mark.parametrize("text", ["redeployment-notes", "deployed", "predeploy", "deploy_all"])
def test_never_substrings(tmp_path, text):
    lib = SkillLibrary(tmp_path)
    lib.add(Skill("dep", "d", triggers="deploy"))
    assert lib.match(text) == []
    assert names(lib.match(f"{text}, then Deploy!")) == ["dep"]


def test_phrase_spacing_and_plan_boundaries(tmp_path):
    lib = SkillLibrary(tmp_path)
    lib.add(Skill("d", "d", triggers="/plan"))
    lib.add(Skill("c", "c", triggers="code review"))
    assert names(lib.match("(/plan)")) == ["d"]
    assert lib.match("/ plan") == [] and lib.match("/planning") == []
    assert names(lib.match("CODE\n  Review")) == ["c"]
    assert lib.match("code-review") == [] and lib.match("review code") == []


def test_ranking_scores_small_library(tmp_path):
    lib = SkillLibrary(tmp_path, clock=Clock())
    lib.add(Skill("cr", "Review code", triggers=["code review"]))
    lib.add(Skill("rev", "Review", triggers=["review"]))
    lib.add(Skill("dep", "Deploy", triggers=["deploy", "deploy script"]))
    lib.add(Skill("desc", "Helper that checks a deploy script for typos"))  # no triggers
    lib.add(Skill("zzz", "Unrelated", triggers=["maze"]))
    q = "please do a code review of the deploy script"
    res = lib.match(q, limit=10)
    # BM25 of "desc", the one skill without triggers (N = 1 document of 6 stems: desc,
    # helper, check, deploy, script, typo; |d| = avgdl): each matched stem scores
    # idf * tf (k1 + 1) / (tf + k1) = ln(1 + 0.5 / 1.5) * 2.5 / 2.5
    bm25 = 2 * math.log(1 + 0.5 / 1.5)
    assert [(m.name, m.score) for m in res] == [
        ("dep", 3.0),    # "deploy" (1) + "deploy script" (2)
        ("cr", 2.0),     # one two-word phrase
        ("rev", 1.0),
        ("desc", pytest.approx(bm25, abs=1e-12)),  # description matches rank after triggers
    ]
    assert res[0].matched == ("deploy", "deploy script") and res[0].by_trigger
    assert res[3].matched == ("deploy", "script") and not res[3].by_trigger
    assert names(lib.match(q, limit=2)) == ["dep", "cr"]


def test_retired_excluded_and_restored(tmp_path):
    lib = SkillLibrary(tmp_path)
    lib.add(Skill("a", "d", triggers="git"))
    lib.retire("a", reason="obsolete")
    assert lib.match("git push") == []
    assert not (tmp_path / "a").exists()
    assert (tmp_path / ".dyna" / "retired" / "a" / "SKILL.md").is_file()
    assert SkillLibrary(tmp_path).get("a").status == "retired"
    lib.restore("a")
    assert names(lib.match("git push")) == ["a"] and (tmp_path / "a" / "SKILL.md").is_file()


# ------------------------------------------------------------------ competence
def test_competence_is_beta_posterior_and_persists(tmp_path):
    lib = SkillLibrary(tmp_path, retire_below=None)
    lib.add(Skill("a", "d", triggers="x"))
    for ok in (True, True, False, True):
        lib.record_outcome(["a"], ok, "r2")
    assert lib.posterior("a") == (4.0, 2.0)
    s = SkillLibrary(tmp_path)["a"]
    assert (s.successes, s.failures, s.a, s.b) == (3, 1, 4.0, 2.0)
    lo, hi = SkillLibrary(tmp_path).competence.interval("a", 0.95)
    assert lo == pytest.approx(stats.beta.ppf(0.025, 4, 2))
    assert hi == pytest.approx(stats.beta.ppf(0.975, 4, 2))


def test_discounted_competence_survives_reload(tmp_path):
    lib = SkillLibrary(tmp_path, discount=0.5, retire_below=None)
    lib.add(Skill("a", "d", triggers="x"))
    lib.record_outcome(["a"], True)
    lib.record_outcome(["a"], False)
    assert lib.posterior("a") == (1.5, 2.0)  # a: 1 + 0.5 * 1, b: 1 + 1
    assert SkillLibrary(tmp_path, discount=0.5).posterior("a") == (1.5, 2.0)


# ------------------------------------------------------------------ cap + eviction
def test_eviction_order_at_cap(tmp_path):
    clock = Clock()
    lib = SkillLibrary(tmp_path, cap=3, retire_below=None, clock=clock)
    for name in ("a", "b", "c"):
        lib.add(Skill(name, f"skill {name}", triggers=name), "r1")
        clock.advance(1)
    for _ in range(5):
        lib.record_outcome(["a"], True, "r1")   # Beta(6, 1): strong
    lib.record_outcome(["c"], False, "r1")
    lib.record_outcome(["c"], False, "r1")      # Beta(1, 3): lower bound 0.0084 < 0.025
    r = lib.add(Skill("d", "skill d", triggers="d"), "r2")
    assert r.evicted.name == "c"
    clock.advance(1)
    r = lib.add(Skill("e", "skill e", triggers="e"), "r3")
    assert r.evicted.name == "b"  # b and d tie at Beta(1, 1); b is older
    assert list(lib) == ["a", "d", "e"]
    ev = [(h.name, h.run_id, h.reason) for h in lib.history() if h.op == "evict"]
    assert ev == [("c", "r2", "evicted at cap 3 for d"), ("b", "r3", "evicted at cap 3 for e")]
    assert SkillLibrary(tmp_path).get("c").retired_reason == "evicted at cap 3 for d"
    assert sorted(p.name for p in (tmp_path / ".dyna" / "retired").iterdir()) == ["b", "c"]


# ------------------------------------------------------------------ dating and drift
def test_suspect_after_max_age_scores_lower(tmp_path):
    clock = Clock()
    lib = SkillLibrary(tmp_path, max_age_days=30, suspect_factor=0.5, clock=clock)
    lib.add(Skill("old", "d", triggers="deploy"))
    clock.advance(31)
    lib.add(Skill("new", "d", triggers="deploy"))
    res = lib.match("deploy now")
    assert [(m.name, m.score, m.suspect) for m in res] == [("new", 1.0, False),
                                                         ("old", 0.5, True)]
    lib.record_outcome(["old"], True)  # verified again today
    assert [(m.name, m.suspect) for m in lib.match("deploy now")] == [("new", False),
                                                                     ("old", False)]


def test_drifted_skill_retired_after_failures(tmp_path):
    lib = SkillLibrary(tmp_path, retire_below=0.4, retire_min_uses=3, clock=Clock())
    lib.add(Skill("maze-route", "Route through the maze", triggers="maze"), "r0")
    for i in range(4):
        assert lib.record_outcome(["maze-route"], True, f"ok{i}") == []
    # The world changes: the route now fails. Mean 5 / (6 + k) drops below 0.4 at k = 7.
    for k in range(1, 7):
        assert lib.record_outcome(["maze-route"], False, f"fail{k}") == []
        assert "maze-route" in lib
    assert lib.record_outcome(["maze-route"], False, "fail7") == ["maze-route"]
    assert "maze-route" not in lib and lib.match("maze") == []
    last = lib.history()[-1]
    assert (last.op, last.run_id) == ("retire", "fail7")
    assert last.reason == "contradicted: competence mean 0.385 < 0.4 after a failure"
    assert SkillLibrary(tmp_path).get("maze-route").status == "retired"


# ------------------------------------------------------------------ history and undo
def test_undo_run_restores_files_byte_for_byte(tmp_path):
    clock = Clock()
    lib = SkillLibrary(tmp_path, cap=3, clock=clock)
    for n in ("a", "b", "c"):
        lib.add(Skill(n, f"skill {n}", body=f"Do {n}.", triggers=n), "r1")
    # A hand-written file with CRLF and odd formatting must also come back exactly.
    hand = b"---\r\nname: hand\r\ndescription:   'Hand made'\r\n---\r\nBody\r\n"
    (tmp_path / "hand").mkdir()
    (tmp_path / "hand" / "SKILL.md").write_bytes(hand)
    lib = SkillLibrary(tmp_path, cap=4, clock=clock)
    before = files(tmp_path)
    clock.advance(3)
    lib.patch("a", "r2", body="Changed.")
    lib.patch("hand", "r2", triggers="hand")
    lib.record_outcome(["b"], False, "r2")
    lib.retire("c", "r2", "test")
    lib.add(Skill("d", "skill d", triggers="d"), "r2")
    lib.add(Skill("e", "skill e", triggers="e"), "r2")  # at the cap: evicts one
    lib.stage(Skill("f", "skill f"), "r2", ["web"])
    assert files(tmp_path) != before
    assert lib.undo_run("r2") == ["a", "b", "c", "d", "e", "hand"]
    assert files(tmp_path) == before
    assert (tmp_path / "hand" / "SKILL.md").read_bytes() == hand
    assert lib.pending() == []
    assert list(lib) == ["a", "b", "c", "hand"]
    assert lib.skills() == SkillLibrary(tmp_path).skills()
    ops = [h.op for h in lib.history()]
    assert ops[-7:] == ["undo"] * 6 + ["reject"]  # the undo is itself logged


@pytest.mark.parametrize("field, value, reason", [
    ("file", "scripts/run.sh", "history record's 'file' is not SKILL.md or skill.md"),
    ("file", "../b/SKILL.md", "history record's 'file' is not SKILL.md or skill.md"),
    ("name", "../b", "history record's 'name' is not a skill name"),
    ("loc_before", "elsewhere",
     "history record's 'loc_before' is not active, retired or null"),
    ("diff", "+x", "history record's 'diff' is not a list of lines"),
    ("diff", ["+x\n", 3], "history record's 'diff' is not a list of lines"),
    ("book_before", "junk", "history record's 'book_before' is not a mapping"),
    ("book_before", {"a": "x", "b": 1.0}, "history record's 'book_before' has a bad 'a'"),
    ("book_after", {"successes": -1}, "history record's 'book_after' has a bad 'successes'"),
    ("book_before", {"last_verified": "May 1"},
     "history record's 'book_before' has a bad 'last_verified'"),
    ("book_before", {"a": 2.0},
     "history record's 'book_before' has 'a' and 'b' not given together"),
    ("loc_after", None, "history record has no 'loc_after'"),   # (None: the key removed)
])
def test_undo_refuses_a_forged_history_record(tmp_path, field, value, reason):
    """undo acts on what the history says: a record naming a file, skill, place or diff
    dyna never writes is a corrupt line (file and line named), and nothing moves."""
    from dyna.fileio import CorruptFileError

    lib = SkillLibrary(tmp_path)
    lib.add(Skill("a", "one"), "r1")
    lib.add(Skill("b", "two"), "r0")
    (tmp_path / "b" / "scripts").mkdir()
    (tmp_path / "b" / "scripts" / "run.sh").write_text("echo ok\n")
    lib.patch("a", "r2", description="changed")
    log = tmp_path / ".dyna" / "history.jsonl"
    lines = log.read_text().splitlines()
    rec = json.loads(lines[-1])
    assert rec["run_id"] == "r2" and rec["file"] == "SKILL.md"
    if value is None:
        del rec[field]
    else:
        rec[field] = value
    log.write_text("\n".join(lines[:-1] + [json.dumps(rec)]) + "\n")
    before = files(tmp_path)
    with pytest.raises(CorruptFileError) as err:
        SkillLibrary(tmp_path).undo_run("r2")
    assert f"history.jsonl:{len(lines)}: {reason}" in str(err.value)
    assert files(tmp_path) == before


def test_undo_conflict_needs_force(tmp_path):
    lib = SkillLibrary(tmp_path)
    lib.add(Skill("a", "one"), "r1")
    lib.patch("a", "r2", description="two")
    lib.patch("a", "r3", description="three")
    with pytest.raises(ConfigError, match="changed by later runs: a"):
        lib.undo_run("r2")
    assert lib["a"].description == "three"
    lib.undo_run("r2", force=True)
    assert lib["a"].description == "one"
    with pytest.raises(ConfigError):
        lib.undo_run("never-ran")


def test_history_is_append_only_log(tmp_path):
    lib = SkillLibrary(tmp_path, clock=Clock())
    lib.add(Skill("a", "d"), "r1")
    lib.retire("a", "r2", "why")
    lib.restore("a", "r3")
    log = (tmp_path / ".dyna" / "history.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in log]
    assert [(r["seq"], r["op"], r["run_id"]) for r in recs] == [
        (1, "create", "r1"), (2, "retire", "r2"), (3, "restore", "r3")]
    assert recs[1]["time"] == "2024-05-01T12:00:00+00:00"
    assert [h.op for h in SkillLibrary(tmp_path).history(name="a", run_id="r2")] == ["retire"]


# ------------------------------------------------------------------ snapshot
def test_snapshot_unchanged_while_library_changes(tmp_path):
    lib = SkillLibrary(tmp_path)
    lib.add(Skill("a", "d", triggers="git"))
    lib.add(Skill("b", "d", triggers="push"))
    snap = lib.snapshot()
    before = [(m.name, m.score) for m in snap.match("git push")]
    lib.retire("a")
    lib.patch("b", triggers="pull")
    lib.add(Skill("c", "d", triggers="git"))
    assert [(m.name, m.score) for m in snap.match("git push")] == before == [("a", 1.0),
                                                                            ("b", 1.0)]
    assert snap.get("b").triggers == ("push",) and sorted(snap) == ["a", "b"]
    assert names(lib.match("git push")) == ["c"]
    with pytest.raises(TypeError):
        snap.skills["x"] = None


# ------------------------------------------------------------------ approval queue
def test_untrusted_pending_until_approved(tmp_path):
    lib = SkillLibrary(tmp_path)
    item = lib.propose(Skill("web-tip", "Tip from a page", triggers="tip"), "r1", ["web"])
    assert isinstance(item, PendingItem) and item.id == "p0001" and item.dest == "web-tip"
    assert "web-tip" not in lib and not (tmp_path / "web-tip").exists()
    assert lib.match("a tip") == []
    trusted = lib.propose(Skill("ok", "From a verified run"), "r1", ["verifier"])
    assert trusted.skill.trust == "trusted" and "ok" in lib
    other = lib.propose(Skill("tool-tip", "From a tool"), "r2", ["tool_output"])
    assert [p.id for p in SkillLibrary(tmp_path).pending()] == ["p0001", "p0002"]
    res = lib.approve("p0001")
    assert res.skill.trust == "approved" and names(lib.match("a tip")) == ["web-tip"]
    assert SkillLibrary(tmp_path)["web-tip"].provenance == ("web",)
    lib.reject(other.id)
    assert lib.pending() == [] and "tool-tip" not in lib
    assert [h.op for h in lib.history()] == ["stage", "create", "stage", "approve", "reject"]
    with pytest.raises(ConfigError):
        lib.approve("p0001")


def test_pending_destination_is_fixed(tmp_path):
    lib = SkillLibrary(tmp_path)
    item = lib.stage(Skill("safe", "d"), "r1", ["user_files"])
    p = tmp_path / ".dyna" / "pending" / f"{item.id}.json"
    rec = json.loads(p.read_text())
    rec["text"] = rec["text"].replace("name: safe", "name: other")
    p.write_text(json.dumps(rec))
    with pytest.raises(ConfigError, match="staged for 'safe'"):
        lib.approve(item.id)
    assert "other" not in lib and not (tmp_path / "other").exists()


# ------------------------------------------------------------------ in-memory backend
def test_memory_backend_same_behaviour(tmp_path):
    def script(lib):
        lib.add(Skill("a", "skill a", triggers="git"), "r1")
        lib.add(Skill("b", "skill b", triggers="push"), "r1")
        lib.record_outcome(["a", "b"], True, "r2")
        lib.add(Skill("c", "skill c", triggers="git push"), "r2")
        lib.propose(Skill("d", "skill d"), "r3", ["web"])
        lib.undo_run("r2")
        return ([s for s in lib.skills(include_retired=True)],
                [(h.op, h.name, h.run_id) for h in lib.history()],
                [(m.name, m.score) for m in lib.match("git push")], len(lib.pending()))

    mem = script(SkillLibrary.in_memory(cap=2, clock=Clock()))
    disk = script(SkillLibrary(tmp_path, cap=2, clock=Clock()))
    assert mem == disk
    assert mem[2] == [("a", 1.0), ("b", 1.0)]
    assert list(tmp_path.iterdir()) != [] and SkillLibrary.in_memory().location is None


def test_record_times_follow_the_clock_through_equal_instants_in_other_offsets():
    # the same instant with another UTC offset is written in UTC; a later second is not
    # the earlier one's text; a naive clock reading is refused
    utc = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    plus2 = utc.astimezone(dt.timezone(dt.timedelta(hours=2)))
    readings = [utc, utc.replace(microsecond=999), plus2, utc + dt.timedelta(seconds=1), utc]
    ticks = iter(readings)
    lib = SkillLibrary()
    lib._clock = lambda: next(ticks)
    assert [lib._now() for _ in readings] == [
        "2026-05-01T12:00:00+00:00", "2026-05-01T12:00:00+00:00",
        "2026-05-01T12:00:00+00:00", "2026-05-01T12:00:01+00:00",
        "2026-05-01T12:00:00+00:00"]
    lib._clock = lambda: utc.replace(tzinfo=None)
    with pytest.raises(ConfigError) as e:
        lib._now()
    assert e.value.field == "clock"
