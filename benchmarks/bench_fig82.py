"""Speed of the full Figure 8.2 experiment: compiled kernel vs plain per-step Python Dyna-Q.

Run with ``pytest benchmarks/bench_fig82.py -s``. All are measured in the same run on the
same machine; one-off compilation is excluded and reported apart (a cold compile into an
empty cache and a warm start from the cache, each in a fresh process).

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
import time

import numpy as np

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


def test_fig82_kernel_vs_python(benchmark):
    table, _ = envs.make_table("dyna/DynaMaze-v0")
    with tempfile.TemporaryDirectory() as cache:
        cold = _fresh_process_warmup(cache)
        warm = _fresh_process_warmup(cache)
    warmup()
    fast = benchmark.pedantic(kernel_fig82, args=(table,), rounds=5, iterations=1)
    t_kernel = benchmark.stats.stats.median
    t0 = time.perf_counter()
    slow = python_fig82(table)
    t_python = time.perf_counter() - t0
    t0 = time.perf_counter()
    lists = python_fig82(table, python_lists_dyna_q)
    t_lists = time.perf_counter() - t0
    ratio, ratio_lists = t_python / t_kernel, t_lists / t_kernel
    print(f"\nFigure 8.2 (30 runs x 50 episodes x n in {NS}): kernel {t_kernel:.3f} s "
          "(median of 5); "
          f"per-step Python with numpy {t_python:.1f} s -> {ratio:.0f}x; "
          f"with lists only {t_lists:.2f} s -> {ratio_lists:.0f}x; "
          f"compile: cold {cold:.1f} s, from cache {warm:.2f} s")
    benchmark.extra_info.update(python_seconds=t_python, ratio=ratio, lists_seconds=t_lists,
                                ratio_lists=ratio_lists, compile_cold_s=cold, compile_cached_s=warm)
    # all implement the same algorithm: their curves agree statistically
    for f, s, l in zip(fast, slow, lists):
        assert abs(f[:, 1:].mean() - s[:, 1:].mean()) < 0.25 * s[:, 1:].mean()
        assert abs(f[:, 1:].mean() - l[:, 1:].mean()) < 0.25 * l[:, 1:].mean()
    assert ratio >= 100
    assert ratio_lists >= 5
