"""Speed of the agent-task loops, each against a peer in the same run.

Run with ``pytest benchmarks/bench_agent_tasks.py -s`` (takes minutes: the first test *is*
the full experiment). Each contestant is a test and a pytest-benchmark entry of its own
(:mod:`conftest`), the ratio in the test after them.

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
- ``test_v2_loop_agents``: on the v2 worlds, each loop agent's CPU time against the
  no-learning agent's in the same run; the ratios reported, not asserted.
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


@pytest.mark.benchmark(group="full skill-loop ablation, whole grid (reported)")
def test_full_skill_ablation(benchmark):
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

    t0 = time.perf_counter()
    benchmark.pedantic(run_all)
    total = time.perf_counter() - t0
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
    benchmark.extra_info.update({f"eps_per_worker_s_{v}": n / t for v, t in cpu.items()})
    assert done[0] == len(cfg.variants) * len(cfg.scenarios) * cfg.runs   # every run ran


def _skill_loop_run(folder, on_files: bool) -> np.ndarray:
    """300 skill-loop episodes; on a library folder and a MEMORY.md file in ``folder``
    (``durable=False``) when ``on_files``, else on the in-memory store."""
    from dyna.agents.loop_agents import LoopAgent, PolicyParams, make_variant
    from envs.agent_tasks import AgentTaskEnv

    env = AgentTaskEnv(n_families=8, n_tools=8, max_steps=16, tokens_per_entry=50)
    agent = LoopAgent(make_variant("skill_loop"), env, 0, PolicyParams(), env_seed=0)
    if on_files:
        cfg = agent.spec.config
        agent.loop.skills = cfg.skill_library(folder / "skills", clock=agent.clock,
                                              log_outcomes=False, durable=False)
        agent.loop.memory = cfg.memory_store(folder / "MEMORY.md", clock=agent.clock,
                                             durable=False)
    return np.array([agent.episode()["success"] for _ in range(300)])


@pytest.mark.benchmark(group="skill loop, 300 episodes: in-memory store vs files")
@pytest.mark.parametrize("contestant", ["dyna", "files"])
def test_memory_backend(tmp_path, benchmark, contestant):
    folders = iter(range(1_000))

    def fresh_folder():
        folder = tmp_path / f"run{next(folders)}"
        folder.mkdir()
        return (folder,), {}

    if contestant == "dyna":
        assert np.array_equal(_skill_loop_run(None, False), _skill_loop_run(tmp_path, True))
    benchmark.pedantic(lambda folder: _skill_loop_run(folder, contestant == "files"),
                       setup=fresh_folder, rounds=3, warmup_rounds=1)


@pytest.mark.ratio(of="test_memory_backend")
def test_memory_backend_faster_than_files(medians):
    assert medians.ratio("dyna", "files") < 1.0


V2 = [pytest.param(store, v, id=f"{store}-{v}", marks=pytest.mark.benchmark(
          group=f"v2 {store} loop agents, 1,000 episodes, CPU seconds", timer=time.process_time))
      for store in ("skill", "memory") for v in ("no_learning", "naive_loop", f"{store}_loop")]


@pytest.mark.parametrize("store, contestant", V2)
def test_v2_loop_agents(benchmark, store, contestant):
    """On the v2 worlds (experiments/agent_tasks_v2_*.toml, base scenario), a loop agent's
    time for 1,000 episodes, :data:`ROUNDS` rounds (round r: run index r % 5, each world
    twice, the same worlds for every variant).

    Timed in CPU seconds of this process (``time.process_time``, the entries' timer): the
    runs are single-threaded, and on a machine shared with other jobs the wall clock also
    counts the time the process waited for a core.
    """
    import tomllib

    from dyna.agents.loop_agents import run_loop_agent

    with open(f"experiments/agent_tasks_v2_{store}.toml", "rb") as fh:
        cfg = tomllib.load(fh)
    rnd = [0]

    def next_run():
        rnd[0] += 1
        return (rnd[0] % 5,), {}

    benchmark.pedantic(lambda run: run_loop_agent(
        contestant, store=store, env_kwargs=cfg["env"], episodes=1000, seed=0, run_index=run,
        params=cfg["policy"], loop_config=cfg["loop"]), setup=next_run, rounds=ROUNDS)


@pytest.mark.parametrize("store", ["skill", "memory"])
@pytest.mark.ratio(of="test_v2_loop_agents")
def test_v2_loop_agents_against_no_learning(medians, store):
    """Each loop agent's CPU time over the no-learning agent's: printed and saved with its
    entry (``ratio_vs_no_learning``), not asserted."""
    for v in ("naive_loop", f"{store}_loop"):
        medians.ratio(v, "no_learning")
