"""Speed of the agent-task loops, each against a peer in the same run.

Run with ``pytest benchmarks/bench_agent_tasks.py -s`` (takes minutes: the first test *is*
the full experiment). Each contestant is a pytest-benchmark entry of its own
(:mod:`conftest`).

- ``test_full_skill_ablation``: the full skill-loop ablation of
  ``experiments/skill_loop_ablation.toml`` -- all 18 variants, five scenarios, 10 seeds,
  1,000 episodes each (900,000 agent runs) -- on a local process pool with one worker per
  core, the loops running the same code as on files but on the in-memory store. It prints
  episodes per second per variant (per worker: that variant's 50 runs over the worker
  time they took) and the ratio of each variant's time to ``no_learning`` (the
  environment and policy alone, measured in the same run: the cost the learning loop
  adds), and the wall time of the whole ablation against :data:`TARGET_S` on a 2-core
  machine: reported, not asserted (a whole grid's time depends on the machine's load).
- ``test_memory_backend_vs_files``: one skill-loop run on the in-memory store against the
  same run on a library folder and a MEMORY.md file (``durable=False``); same outcomes,
  and the in-memory store is not slower (ratio of medians < 1).
- ``test_v2_loop_agents_against_no_learning``: on the v2 worlds, each loop agent's CPU
  time against the no-learning agent's in the same run; reported, not asserted.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

#: Seconds the whole skill-loop ablation may take on a 2-core machine.
TARGET_S = 600.0
#: rounds of test_v2_loop_agents_against_no_learning (round r: run index r % 5, so each of
#: the 5 worlds twice)
ROUNDS = 10


def _one(args):
    from dyna.agents.loop_agents import run_loop_agent

    variant, store, env_kwargs, episodes, seed, run, policy, loop = args
    t0 = time.perf_counter()
    out = run_loop_agent(variant, store=store, env_kwargs=env_kwargs, episodes=episodes,
                         seed=seed, run_index=run, params=policy, loop_config=loop)
    return time.perf_counter() - t0, float(out["success"].mean())


def test_full_skill_ablation(compare):
    from dyna.experiment.registry import load_experiment

    cfg = load_experiment("experiments/skill_loop_ablation.toml")
    assert cfg.runs == 10 and cfg.episodes == 1000 and len(cfg.scenarios) == 5
    workers = os.cpu_count() or 1
    cpu: dict[str, float] = {}
    done = [0]

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
                done[0] += 1

    compare.time("dyna", run_all, rounds=1, warmup=0)
    total = compare.median("dyna")
    n = cfg.runs * cfg.episodes * len(cfg.scenarios)
    base = cpu["no_learning"]
    print(f"\nfull skill-loop ablation: {len(cfg.variants)} variants x "
          f"{len(cfg.scenarios)} scenarios x {cfg.runs} seeds x {cfg.episodes} episodes "
          f"= {n * len(cfg.variants)} episodes on {workers} workers")
    for v in cfg.variants:
        print(f"  {v:40s} {n / cpu[v]:7.0f} episodes/s per worker ({cpu[v]:6.1f} worker-s; "
              f"x{cpu[v] / base:5.2f} no_learning)")
    print(f"  total {total:.1f} s wall ({n * len(cfg.variants) / total:.0f} episodes/s), "
          f"x{total / TARGET_S:.2f} the {TARGET_S:.0f} s of a 2-core machine")
    compare.extra_info.update({f"eps_per_worker_s_{v}": n / t for v, t in cpu.items()})
    assert done[0] == len(cfg.variants) * len(cfg.scenarios) * cfg.runs   # every run ran


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
            lib = cfg.skill_library(tmp_path / f"skills{count[0]}", clock=agent.clock,
                                    log_outcomes=False, durable=False)
            mem = cfg.memory_store(tmp_path / f"m{count[0]}" / "MEMORY.md",
                                   clock=agent.clock, durable=False)
            agent.loop.skills, agent.loop.memory = lib, mem
        return np.array([agent.episode()["success"] for _ in range(300)])

    assert np.array_equal(run(False), run(True))
    ratios = compare("skill loop, 300 episodes: in-memory store (dyna) vs files",
                     lambda: run(False), {"files": lambda: run(True)}, rounds=3)
    assert ratios["files"] < 1.0


@pytest.mark.benchmark(timer=time.process_time)
def test_v2_loop_agents_against_no_learning(compare):
    """On the v2 worlds (experiments/agent_tasks_v2_*.toml, base scenario), each loop
    agent's time for 1,000 episodes against the no-learning agent's in the same run:
    :data:`ROUNDS` rounds each (round r: run index r % 5, each world twice, the same worlds
    for every variant); printed: episodes per second and the ratio of the medians to
    ``no_learning``.

    Timed in CPU seconds of this process (``time.process_time``, the entries' timer): the
    runs are single-threaded, and on a machine shared with other jobs the wall clock also
    counts the time the process waited for a core.
    """
    import tomllib

    from dyna.agents.loop_agents import run_loop_agent

    for store in ("skill", "memory"):
        with open(f"experiments/agent_tasks_v2_{store}.toml", "rb") as fh:
            cfg = tomllib.load(fh)
        variants = ("no_learning", "naive_loop", f"{store}_loop")
        for v in variants:
            rnd = [0]

            def next_run():
                rnd[0] += 1
                return (rnd[0] % 5,), {}

            compare.time(f"{store} {v}", lambda run, v=v: run_loop_agent(
                v, store=store, env_kwargs=cfg["env"], episodes=1000, seed=0, run_index=run,
                params=cfg["policy"], loop_config=cfg["loop"]), setup=next_run,
                rounds=ROUNDS, warmup=0)
        names = [f"{store} {v}" for v in variants]
        compare.report(f"v2 {store} loop agents, 1,000 episodes, CPU seconds", names,
                       {f"{n}/no_learning": compare.ratio(n, names[0]) for n in names[1:]})
