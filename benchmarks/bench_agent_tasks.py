"""Speed of the agent-task ablation (issue 5).

Run with ``pytest benchmarks/bench_agent_tasks.py -s`` (takes minutes: it *is* the full
experiment).

- ``test_full_skill_ablation``: the full skill-loop ablation of
  ``experiments/skill_loop_ablation.toml`` -- all 18 variants, five scenarios, 10 seeds,
  1,000 episodes each (900,000 agent runs) -- on a local process pool with one worker per
  core, the loops running the same code as on files but on the in-memory store. It prints
  episodes per second per variant (per worker: that variant's 50 runs over the worker
  time they took) and the ratio of each variant's time to ``no_learning`` (the
  environment and policy alone, measured in the same run: the cost the learning loop
  adds), and the wall time of the whole ablation. Target of the issue: the whole ablation
  in under 10 minutes on this 2-core machine; asserted. Measured when written: 446 s
  (x0.74 the target) with the runs submitted at once, longest first; 612 s when each
  variant's runs waited for the previous variant's to end. Since the novelty check reads
  cached text features: 145 s wall for ``dyna run experiments/skill_loop_ablation.toml``.
- ``test_memory_backend_vs_files``: one skill-loop run on the in-memory store against the
  same run on a library folder and a MEMORY.md file (``durable=False``); same outcomes,
  and the in-memory store is not slower.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

TARGET_S = 600.0
#: rounds of test_v2_loop_agents_within_3x_of_no_learning (round r: run index r % 5, so
#: each of the 5 worlds twice)
ROUNDS = 10


def _one(args):
    from dyna.agents.loop_agents import run_loop_agent

    variant, store, env_kwargs, episodes, seed, run, policy, loop = args
    t0 = time.perf_counter()
    out = run_loop_agent(variant, store=store, env_kwargs=env_kwargs, episodes=episodes,
                         seed=seed, run_index=run, params=policy, loop_config=loop)
    return time.perf_counter() - t0, float(out["success"].mean())


def test_full_skill_ablation(benchmark):
    from dyna.experiment.registry import load_experiment

    cfg = load_experiment("experiments/skill_loop_ablation.toml")
    assert cfg.runs == 10 and cfg.episodes == 1000 and len(cfg.scenarios) == 5
    workers = os.cpu_count() or 1
    cpu: dict[str, float] = {}

    def run_all():
        # every (variant, scenario, seed) run is one task on the pool, all submitted at
        # once, longest first (the volume scenario), so no worker idles at a variant's end
        jobs = [(v, cfg.store, cfg.env_kwargs(p), cfg.episodes, cfg.seed, r,
                 dict(cfg.policy), dict(cfg.loop))
                for v in cfg.variants for p in range(len(cfg.scenarios))
                for r in range(cfg.runs)]
        jobs.sort(key=lambda j: -j[2].get("n_families", 0))
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for job, (t, _) in zip(jobs, pool.map(_one, jobs)):
                cpu[job[0]] = cpu.get(job[0], 0.0) + t

    t0 = time.perf_counter()
    benchmark.pedantic(run_all, rounds=1, iterations=1)
    total = time.perf_counter() - t0
    n = cfg.runs * cfg.episodes * len(cfg.scenarios)
    base = cpu["no_learning"]
    print(f"\nfull skill-loop ablation: {len(cfg.variants)} variants x "
          f"{len(cfg.scenarios)} scenarios x {cfg.runs} seeds x {cfg.episodes} episodes "
          f"= {n * len(cfg.variants)} episodes on {workers} workers")
    for v in cfg.variants:
        print(f"  {v:40s} {n / cpu[v]:7.0f} episodes/s per worker ({cpu[v]:6.1f} worker-s; "
              f"x{cpu[v] / base:5.2f} no_learning)")
    met = total < TARGET_S
    print(f"  total {total:.1f} s wall ({n * len(cfg.variants) / total:.0f} episodes/s), "
          f"target < {TARGET_S:.0f} s: {'met' if met else 'NOT met'} "
          f"(x{total / TARGET_S:.2f} the target)")
    benchmark.extra_info.update({"total_s": total,
                                 **{f"eps_per_worker_s_{v}": n / t for v, t in cpu.items()}})
    assert met


def test_memory_backend_vs_files(tmp_path, compare):
    from dyna.agents.loop_agents import LoopAgent, PolicyParams, make_variant
    from envs.agent_tasks import AgentTaskEnv

    kw = dict(n_families=8, n_tools=8, max_steps=16, tokens_per_entry=50)
    count = [0]

    def run(on_files: bool):
        env = AgentTaskEnv(**kw)
        agent = LoopAgent(make_variant("skill_loop"), env, 0, PolicyParams(), env_seed=0)
        if on_files:
            count[0] += 1
            cfg = agent.spec.config
            lib = cfg.skill_library(tmp_path / f"skills{count[0]}", clock=agent._clock,
                                    log_outcomes=False, durable=False)
            mem = cfg.memory_store(tmp_path / f"m{count[0]}" / "MEMORY.md",
                                   clock=agent._clock, durable=False)
            agent.loop.skills, agent.loop.memory = lib, mem
        return np.array([agent.episode()["success"] for _ in range(300)])

    assert np.array_equal(run(False), run(True))
    ratios = compare("skill loop, 300 episodes: in-memory store vs files",
                     lambda: run(False), {"files": lambda: run(True)}, rounds=3)
    assert ratios["files"] < 1.0


def test_v2_loop_agents_within_3x_of_no_learning():
    """Issue "Agent tasks v2": on the v2 worlds (experiments/agent_tasks_v2_*.toml, base
    scenario), each loop agent's episodes per second against the no-learning agent's in
    the same run: 10 alternating rounds of 1,000 episodes (round r: run index r % 5, each
    world twice, the same world for the three variants), the ratio asserted the median over rounds of each
    round's own ratio (the variant's time over no_learning's, run back to back), the ratio
    of the medians printed beside it; target within 3x. (Until session 15: medians of 5
    rounds, their ratio.)

    Timed in CPU seconds of this process (``time.process_time``): the runs are
    single-threaded and CPU-bound, and on a machine shared with other jobs the wall
    clock also counts the time the process waited for a core (under a load of 5 on 2
    cores the wall-clock ratios moved by +-0.5 between identical runs).

    Measured when written (wall clock, 2 cores, a test suite beside it): skill store
    naive_loop x5.0, skill_loop x2.9; memory store naive_loop x2.4, memory_loop x3.0.
    On the restored pre-registered world, this protocol, a load of 5-7 on 2 cores: at
    commit 96f1a68 (before the loop-agent speed work) skill naive_loop x6.09 (788
    episodes/s), skill_loop x2.12, memory naive_loop x3.09, memory_loop x2.55
    (no_learning ~4,750 episodes/s); after it, three runs: skill naive_loop x3.04-3.61
    (1,155-1,368 episodes/s), skill_loop x1.70-1.87, memory naive_loop x2.77-2.90,
    memory_loop x1.69-1.73. Not met: the skill store's naive loop (a new or patched
    skill after every run, through validation, the safety net and the history). Outputs
    unchanged throughout: ``benchmarks/fingerprint_agent_tasks.py --check``.

    With the redaction prefilters (dyna/redact.py: a detector that cannot match is not run;
    a first-seen text scans in ~5.6 us instead of ~30), two runs, a load of 3.5-5 on 2
    cores: skill naive_loop x3.23 and x3.05 (1,474 and 1,566 episodes/s), skill_loop x1.64
    and x1.76, memory naive_loop x2.86 and x2.11, memory_loop x1.64 and x1.51. The same
    process, prefilters on and off alternately, 10 rounds, detect cache emptied before
    each run, fastest round: skill naive_loop 657 -> 638 us per episode, memory naive_loop
    555 -> 530 (no_learning 201). Still not met: skill naive_loop (~x3.1-3.2).

    After the loop-only cuts of commits 75dfd23..4a1ea18 (the safety net's scan without
    reference cycles and with one cached look-up per dict key; memos of texts the net
    passed, in the memory store and the skill library; redact()'s fast path for a flat
    mapping of strings; the reviewer's draws in integer arithmetic; the novelty check's
    stored-skill features kept for one library state; fewer copies and re-checks on the
    commit path), with a sweep of the v2 grids on both cores and other tests beside it
    (load 2.5-4): at the session's start, one run, skill naive_loop x2.89, skill_loop
    x1.67, memory naive_loop x2.40, memory_loop x1.59; after, five runs: skill naive_loop
    x2.06-2.72 (1,549-1,840 episodes/s), skill_loop x1.20-1.72, memory naive_loop
    x2.09-2.30, memory_loop x1.50-1.70 (no_learning 3,193-5,012 episodes/s: the load moves
    every number). Old and new code in alternating processes, fastest of 15 runs of 1,000
    episodes each (load ~3.5): no_learning ~192 us per episode either way; skill
    naive_loop 538 -> 488, skill_loop 313 -> 292; memory naive_loop 468 -> 399,
    memory_loop 304 -> 292. Outputs unchanged: 576 of 576 fingerprints equal.

    Session 7, after cuts shared by every variant (the per-episode SeedSequences built
    from uint32 words, 11.4 -> 5.0 us each, four per episode) and one in the capped
    library's eviction (Beta quantiles from scipy.special): with a sweep beside it (load
    ~2) skill naive_loop x2.82; with no other job (load 0.5-1.8), three runs, skill
    naive_loop x3.09, x3.02, x3.03 (1,460-1,561 episodes/s against 4,430-4,831 for
    no_learning), skill_loop x1.46-1.68, memory naive_loop x2.14-2.40, memory_loop
    x1.75-1.80. **Not met** on a quiet machine for the skill store's naive loop: the
    shared cost fell, the loop's own did not.

    Session 8, no other job: at c33993a, three runs, skill naive_loop x2.10, x2.86, x2.45
    (no_learning 2,780-3,535 episodes/s: a slow phase of the VM), skill_loop x1.11-1.58,
    memory naive_loop x1.86-2.26, memory_loop x1.28-1.80. Then the per-episode generators
    every variant uses (the env's three v1 streams and the policy's) came to be built 256
    episodes at a time (envs.seeding.spawned_uniforms / spawned_states: ~45 us less per
    episode, for every variant). no_learning then ran 5,542-5,829 episodes/s (172-180 us
    per episode), and skill naive_loop x3.40 and x3.73 (1,561-1,628 episodes/s),
    skill_loop x1.86-2.12, memory naive_loop x1.80-2.45, memory_loop x1.33-2.17. **Not
    met**, and further away: the skill store's naive loop spends ~470 us per episode of
    its own (a reviewed and committed skill after ~90% of runs: review ~190 us, matching
    and following the larger library, outcomes), and within 3x of 175 us leaves it 350 us.

    Session 9, no other job, the VM in a slow phase all session (no_learning 2,300-2,900
    episodes/s, 350-430 us per episode, against 5,500-5,800 in session 8): at 3cfcb94 skill
    naive_loop x2.65, skill_loop x1.61, memory naive_loop x2.11, memory_loop x1.96 (the
    assert held); after that session's cuts, most of them shared by every variant
    (family posteriors read through BetaCompetence.shapes_of, check_range's fast path,
    the env's family draw by bisect, callable_tools remembered), skill naive_loop x3.19,
    skill_loop x1.89, memory naive_loop x2.20, memory_loop x1.58 (the assert failed); at
    931bb9a (callable_tools remembered as well) skill naive_loop x3.33, skill_loop x1.75,
    memory naive_loop x2.12, memory_loop x1.57 (no_learning 2,615-3,121 episodes/s). The
    ratio moves with the VM's phase as much as with the code: **not met**.

    Session 13, no other job, the VM in a fast phase: at 8e6cacb skill naive_loop x3.70
    (1,560 episodes/s against 5,772), skill_loop x1.70, memory naive_loop x2.75, memory_loop
    x1.57. Then the reviewer's draws 256 run ids at a time, the digest built directly when
    redaction is off, the memory store's index of facts by key and subject, the safety
    net's catches as a list, memos of clean texts by value, and the runs freed without the
    cyclic collector (a naive skill run left ~16,000 objects in reference cycles, ~50 ms
    of a later gen-2 collection that fell in whichever run came next, often
    no_learning's). Instructions per episode under valgrind (1,000 episodes less the
    import; the count itself moves by up to ~8% between identical runs): skill naive_loop
    2.05M -> 1.82M, no_learning ~0.78M. Timed at 7827efb, three runs: skill naive_loop
    x3.45, x3.79, x3.33 (1,792-2,081 episodes/s against 5,969-7,883), skill_loop
    x1.87-2.29, memory naive_loop x3.02, x2.73, x2.92, memory_loop x1.97-2.05. At a
    like no_learning speed (5,772 and 5,969 episodes/s) the skill naive loop went from 641
    to 558 us per episode (-13%), its own cost from ~470 to ~390 us (-17%); no_learning
    gained too (no gen-2 collections of other runs' garbage), and the loop's own cost is
    still ~2.3 times the no-learning episode. **Not met** for the skill store's naive
    loop; the memory store's naive loop is at the edge (x2.7-3.05).

    Session 14, no other job, the VM in its fastest phase yet (no_learning 7,112-9,567
    episodes/s): at 5e3485d skill naive_loop x3.61 and x3.88, memory naive_loop x3.90 and
    x2.68; at 7d58899 (the loops changed only by a memoised name check and three detectors
    behind prefilters; outputs unchanged, 576 of 576 fingerprints equal) skill naive_loop
    x3.68 and x4.17, skill_loop x1.94-2.13, memory naive_loop x2.92 and x2.52, memory_loop
    x1.73-1.91. **Not met.**

    Session 15, no other job, the VM again in its fastest phase (no_learning 9,280-9,647
    episodes/s, ~106 us per episode): at 4c18086..5d9ea76, after cuts of the loops' own
    work (an outcome's copy set in its ``__dict__``, Beta shapes in Python floats, the
    safety net's walk without a call per short or known value, ``fact_key`` remembered,
    ``content_words`` from ``tokenize``'s cache, a skill keeping its place in the active
    dict so a snapshot copies it in one block, ``concrete_parts`` running only the
    patterns a text can match; outputs unchanged, 576 of 576 fingerprints equal), two
    runs: skill naive_loop x3.30 and x3.48 (2,851 and 2,667 episodes/s), skill_loop x1.94
    and x1.87, memory naive_loop x2.50 and x2.54 (from x2.52-3.90), memory_loop x1.83 and
    x1.84. Timed by parts in a run (perf_counter around each call; 3 runs of 1,000
    episodes), a naive skill review that adds a skill costs ~190-200 us (955 of 3,000
    runs: new text through validation, grading, the safety net's detectors, the index and
    the history), one that patches ~70 us (1,754 runs). **Not met** for the skill store's
    naive loop: ~360 us per episode against ~106, where 3x needs ~320.

    Session 16, no other job, the VM in its fastest phase yet (no_learning 8,900-12,200
    episodes/s). Three runs of the old protocol at 84d5ca0: skill naive_loop x2.93, x2.93,
    x3.68 (one of three failed). Then frozen dataclasses built per episode store their
    fields in the instance dict (``dyna._quick.quick_init``: a 20-field Skill, a digest, a
    proposal, its validation, grade and decision ...), and the in-memory history makes a
    record (its safety-net scan, its time's text) when it is first read: instructions per
    episode under callgrind (PYTHONHASHSEED=0, 3 runs less 1) skill naive_loop 1.746M ->
    1.661M, no_learning 0.807M. This protocol, before (84d5ca0) and after (31c6973), the
    paired ratio first and the ratio of medians in brackets: before skill naive_loop x2.96
    (x2.94) and x3.04 (x3.17), one of two failed; after, three runs, x2.79 (x2.97), x2.72
    (x2.99), x2.82 (x2.88), skill_loop x1.75-1.80, memory naive_loop x2.24-2.35,
    memory_loop x1.77-2.00; later, the VM a little slower (no_learning ~8,800-9,250),
    x2.95, x2.87, x3.10 (one of three failed): at the edge. Then (dcb590d) the cyclic
    collector paused for a run (its passes over the stores' long-lived objects cost ~12 us
    of a naive skill episode: paired A/B in one process, 20 rounds; the run makes no
    cycles), the clean memo no longer keeping every outcome copy alive, and 10 rounds
    (each world twice): at 57ff7d3 three runs x2.69 (x2.71), x2.62 (x2.74), x2.76
    (x2.85), skill_loop x1.75-1.82, memory naive_loop x2.22-2.25, memory_loop x1.78-2.03
    (no_learning 11,209-11,904 episodes/s): **met**, by ~8-12%.
    """
    import statistics
    import tomllib

    from dyna.agents.loop_agents import run_loop_agent

    worst = {}
    for store in ("skill", "memory"):
        with open(f"experiments/agent_tasks_v2_{store}.toml", "rb") as fh:
            cfg = tomllib.load(fh)
        variants = ("no_learning", "naive_loop", f"{store}_loop")
        times: dict[str, list[float]] = {v: [] for v in variants}
        for rnd in range(ROUNDS):
            for v in variants:
                t0 = time.process_time()
                run_loop_agent(v, store=store, env_kwargs=cfg["env"], episodes=1000,
                               seed=0, run_index=rnd % 5, params=cfg["policy"],
                               loop_config=cfg["loop"])
                times[v].append(time.process_time() - t0)
        base = statistics.median(times["no_learning"])
        for v in variants[1:]:
            # each round's variant and no_learning ran back to back: their ratio cancels
            # the machine's slower and faster phases, which last longer than a round
            paired = statistics.median(t / b for t, b in zip(times[v], times["no_learning"]))
            worst[f"{store}:{v}"] = paired
            print(f"\n{store} {v:14s} {1000 / statistics.median(times[v]):6.0f} episodes/s, "
                  f"x{paired:.2f} no_learning paired (x{statistics.median(times[v]) / base:.2f}"
                  f" as a ratio of medians; no_learning {1000 / base:.0f} episodes/s)")
    assert max(worst.values()) <= 3.0, worst
