"""Speed of the full Figure 8.2 experiment: compiled kernel vs plain per-step Python Dyna-Q.

Run with ``pytest benchmarks/bench_fig82.py -s``. All are measured in the same run on the
same machine, each contestant a test and a pytest-benchmark entry of its own
(:mod:`conftest`; the kernel 5 rounds, each Python baseline once: it takes minutes), the
ratios asserted in the test after them; one-off compilation is excluded and reported apart
(a cold compile into an empty cache and a warm start from the cache, each in a fresh
process). All implement the same algorithm: their mean steps per episode (after the first)
agree within 25%.

Two baselines, both the book's tabular Dyna-Q box (Section 8.2) run per step and per run:

* ``python_dyna_q`` -- written the way tabular RL code is usually written: the Q table a
  numpy array, ``np.argmax``-style greedy choice with random ties, numpy's Generator for
  draws. The ratio against it is asserted (>= 100x).
* ``python_lists_dyna_q`` -- the same with Python lists and ``random`` only, avoiding
  numpy's per-call overhead on tiny arrays: the fastest plain Python we know. Its ratio is
  printed (and asserted >= 5x), so the reader sees both.
"""

import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import envs
from dyna.agents import run_agent, warmup

RUNS, EPISODES, NS = 30, 50, (0, 5, 50)
HP = {"alpha": 0.1, "epsilon": 0.1, "gamma": 0.95}


def kernel_fig82(table):
    return [run_agent("dyna_q", {**HP, "n_planning": n}, table, seed=0, run_indices=range(RUNS),
                      episodes=EPISODES).episode_steps for n in NS]


def python_dyna_q(P, start, n_states, n_actions, n_planning, seed):
    """Tabular Dyna-Q (Section 8.2 box), one run, per step, with a numpy Q table."""
    rng = np.random.default_rng(seed)
    alpha, gamma, eps = HP["alpha"], HP["gamma"], HP["epsilon"]
    Q = np.zeros((n_states, n_actions))
    model = {}
    seen = {}
    steps_per_episode = []
    for _ in range(EPISODES):
        s, steps, done = start, 0, False
        while not done:
            if rng.random() < eps:
                a = int(rng.integers(n_actions))
            else:
                a = int(rng.choice(np.flatnonzero(Q[s] == Q[s].max())))
            _, s2, r, done = P[s][a][0]
            Q[s, a] += alpha * (r + (0.0 if done else gamma * Q[s2].max()) - Q[s, a])
            model[(s, a)] = (s2, r, done)
            seen.setdefault(s, set()).add(a)
            states = list(seen)
            for _ in range(n_planning):
                ps = states[rng.integers(len(states))]
                acts = sorted(seen[ps])
                pa = acts[rng.integers(len(acts))]
                ps2, pr, pdone = model[(ps, pa)]
                Q[ps, pa] += alpha * (pr + (0.0 if pdone else gamma * Q[ps2].max()) - Q[ps, pa])
            s = s2
            steps += 1
        steps_per_episode.append(steps)
    return steps_per_episode


def python_lists_dyna_q(P, start, n_states, n_actions, n_planning, seed):
    """The same algorithm with Python lists and the ``random`` module only."""
    rng = random.Random(seed)
    alpha, gamma, eps = HP["alpha"], HP["gamma"], HP["epsilon"]
    Q = [[0.0] * n_actions for _ in range(n_states)]
    model = {}
    seen_states, seen_actions = [], {}
    steps_per_episode = []
    for _ in range(EPISODES):
        s, steps, done = start, 0, False
        while not done:
            if rng.random() < eps:
                a = rng.randrange(n_actions)
            else:
                row = Q[s]
                best = max(row)
                a = rng.choice([i for i, v in enumerate(row) if v == best])
            _, s2, r, done = P[s][a][0]
            Q[s][a] += alpha * (r + (0.0 if done else gamma * max(Q[s2])) - Q[s][a])
            if (s, a) not in model:
                if s not in seen_actions:
                    seen_states.append(s)
                    seen_actions[s] = []
                seen_actions[s].append(a)
            model[(s, a)] = (s2, r, done)
            for _ in range(n_planning):
                ps = rng.choice(seen_states)
                pa = rng.choice(seen_actions[ps])
                ps2, pr, pdone = model[(ps, pa)]
                Q[ps][pa] += alpha * (pr + (0.0 if pdone else gamma * max(Q[ps2])) - Q[ps][pa])
            s = s2
            steps += 1
        steps_per_episode.append(steps)
    return steps_per_episode


def python_fig82(table, impl=None):
    impl = impl or python_dyna_q
    P = table.to_P()
    start = int(np.argmax(table.isd_cum > 0))
    return [np.array([impl(P, start, table.n_states, table.n_actions, n, seed)
                      for seed in range(RUNS)]) for n in NS]


def _fresh_process_warmup(cache_dir):
    code = "from dyna.agents import warmup; print(warmup())"
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.benchmark(group=f"Figure 8.2: {RUNS} runs x {EPISODES} episodes x n in {NS}")
@pytest.mark.parametrize("contestant", ["dyna", "python numpy", "python lists"])
def test_fig82(benchmark, contestant):
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    if contestant == "dyna":
        with tempfile.TemporaryDirectory() as cache:
            cold = _fresh_process_warmup(cache)
            warm = _fresh_process_warmup(cache)
        warmup()
        benchmark.extra_info.update(compile_cold_s=cold, compile_cached_s=warm)
        print(f"\ncompile: cold {cold:.1f} s, from cache {warm:.2f} s")
        curves = benchmark.pedantic(lambda: kernel_fig82(table), rounds=5, warmup_rounds=1)
    else:
        impl = python_dyna_q if contestant == "python numpy" else python_lists_dyna_q
        curves = benchmark.pedantic(lambda: python_fig82(table, impl), rounds=1)
    benchmark.extra_info["mean_steps"] = [float(c[:, 1:].mean()) for c in curves]


@pytest.mark.ratio(of="test_fig82")
def test_fig82_kernel_within_0_01x_of_numpy_python_and_0_2x_of_list_python(medians):
    steps = {name: medians.extra_info(name)["mean_steps"]
             for name in ("dyna", "python numpy", "python lists")}
    for peer in ("python numpy", "python lists"):
        for f, p in zip(steps["dyna"], steps[peer]):
            assert abs(f - p) < 0.25 * p, (steps["dyna"], peer, steps[peer])
    ratio = medians.ratio("dyna", "python numpy")
    ratio_lists = medians.ratio("dyna", "python lists")
    assert ratio <= 0.01, f"the kernel takes {ratio:.4f}x per-step numpy Python (target 0.01x)"
    assert ratio_lists <= 0.2, f"the kernel takes {ratio_lists:.3f}x list Python (target 0.2x)"
