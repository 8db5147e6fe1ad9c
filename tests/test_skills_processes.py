"""One library folder, several processes: every write holds the library's file
lock and re-reads the state under it, so nothing is lost and sequence numbers stay unique."""

import multiprocessing as mp
from collections import Counter

from dyna.loops.skills import Skill, SkillLibrary

N_PROC = 4
N_EACH = 5       # proposals staged and approved per process
N_OUTCOMES = 6   # outcomes per process on one shared skill


def _worker(folder, k, start):
    lib = SkillLibrary(folder, retire_below=None, durable=False)
    start.wait(60)
    for i in range(N_EACH):
        item = lib.stage(Skill(f"w{k}-{i}", f"skill {i} of worker {k}"), f"w{k}", ["web"])
        lib.record_outcome(["shared"], True, f"w{k}")
        lib.approve(item.id)
    for _ in range(N_OUTCOMES - N_EACH):
        lib.record_outcome(["shared"], False, f"w{k}")


def test_four_processes_stage_approve_and_record_at_once(tmp_path):
    lib = SkillLibrary(tmp_path, retire_below=None)
    lib.add(Skill("shared", "used by every worker", triggers="shared"), "setup")
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), k, start)) for k in range(N_PROC)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * N_PROC

    back = SkillLibrary(tmp_path)
    hist = back.history()
    # 1 create, then per worker N_EACH stage + approve + outcome and 1 failure outcome
    assert len(hist) == 1 + N_PROC * (3 * N_EACH + (N_OUTCOMES - N_EACH))
    assert [h.seq for h in hist] == list(range(1, len(hist) + 1))
    ops = Counter(h.op for h in hist)
    assert ops == {"create": 1, "stage": N_PROC * N_EACH, "approve": N_PROC * N_EACH,
                   "outcome": N_PROC * N_OUTCOMES}
    staged = sorted(h.reason.split(":")[0] for h in hist if h.op == "stage")
    assert staged == [f"p{i:04d}" for i in range(1, N_PROC * N_EACH + 1)]
    assert back.pending() == []
    assert sorted(back) == sorted(["shared"] + [f"w{k}-{i}" for k in range(N_PROC)
                                                for i in range(N_EACH)])
    s = back["shared"]
    assert (s.successes, s.failures) == (N_PROC * N_EACH, N_PROC * (N_OUTCOMES - N_EACH))
    assert back.posterior("shared") == (1 + N_PROC * N_EACH,
                                        1 + N_PROC * (N_OUTCOMES - N_EACH))


def test_two_library_objects_on_one_folder(tmp_path):
    one = SkillLibrary(tmp_path, retire_below=None)
    two = SkillLibrary(tmp_path, retire_below=None)
    one.add(Skill("a", "skill a"), "r1")
    assert one.stage(Skill("x", "x"), "r1", ["web"]).id == "p0001"
    assert two.stage(Skill("y", "y"), "r2", ["web"]).id == "p0002"   # not p0001 again
    two.record_outcome(["a"], True, "r2")                            # two sees a now
    one.record_outcome(["a"], True, "r3")
    assert [h.seq for h in SkillLibrary(tmp_path).history()] == [1, 2, 3, 4, 5]
    assert (one["a"].successes, two["a"].successes) == (2, 1)        # two reads on write
    two.refresh()
    assert two["a"].successes == 2 and [p.id for p in two.pending()] == ["p0001", "p0002"]


def test_unlogged_outcomes_of_two_objects_are_not_lost(tmp_path):
    # an unlogged outcome changes only state.json; 1 -> 2 keeps its size, and an atomic
    # replacement may reuse the inode: the re-read under the lock compares its content
    one = SkillLibrary(tmp_path, retire_below=None, log_outcomes=False)
    one.add(Skill("a", "skill a"), "r1")
    two = SkillLibrary(tmp_path, retire_below=None, log_outcomes=False)
    for _ in range(5):
        one.record_outcome(["a"], True)
        two.record_outcome(["a"], True)
    assert SkillLibrary(tmp_path)["a"].successes == 10
    assert SkillLibrary(tmp_path).posterior("a") == (11.0, 1.0)
