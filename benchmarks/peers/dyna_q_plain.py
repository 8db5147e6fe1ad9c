"""Plain-Python tabular Dyna-Q on the Dyna maze (Sutton & Barto 2018, Section 8.2, Figure 8.2).

The peer of ``benchmarks/bench_process.py``: the textbook algorithm as a reader would write
it in one file, with dicts, lists and the ``random`` module only, one run at a time. Same
protocol as ``experiments/dyna_maze.toml``: 30 runs x 50 episodes for n in {0, 5, 50}
planning steps, alpha = 0.1, gamma = 0.95, epsilon = 0.1 (greedy ties broken at random).
Prints, per n, the mean steps of episode 2 and of episodes 41-50 over the runs.
"""

import random
import sys

MAZE = [".......#G", "..#....#.", "S.#....#.", "..#......", ".....#...", "........."]
MOVES = ((-1, 0), (1, 0), (0, 1), (0, -1))          # up, down, right, left
RUNS, EPISODES, NS = 30, 50, (0, 5, 50)
ALPHA, GAMMA, EPSILON = 0.1, 0.95, 0.1


def step(s, a):
    """Deterministic move: (next cell, reward, reached the goal)."""
    r, c = s[0] + MOVES[a][0], s[1] + MOVES[a][1]
    if not (0 <= r < len(MAZE) and 0 <= c < len(MAZE[0])) or MAZE[r][c] == "#":
        r, c = s
    goal = MAZE[r][c] == "G"
    return (r, c), (1.0 if goal else 0.0), goal


def dyna_q(n, seed):
    """One run of tabular Dyna-Q; returns the steps of each episode."""
    rng = random.Random(seed)
    Q, model, states, actions = {}, {}, [], {}      # actions: state -> actions tried there
    start = next((r, row.index("S")) for r, row in enumerate(MAZE) if "S" in row)
    steps_per_episode = []
    for _ in range(EPISODES):
        s, steps, done = start, 0, False
        while not done:
            q = Q.setdefault(s, [0.0] * 4)
            if rng.random() < EPSILON:
                a = rng.randrange(4)
            else:
                best = max(q)
                a = rng.choice([i for i in range(4) if q[i] == best])
            s2, reward, done = step(s, a)
            target = reward if done else reward + GAMMA * max(Q.setdefault(s2, [0.0] * 4))
            q[a] += ALPHA * (target - q[a])
            if (s, a) not in model:
                if s not in actions:
                    states.append(s)
                    actions[s] = []
                actions[s].append(a)
            model[(s, a)] = (s2, reward, done)
            for _ in range(n):          # planning: a seen state, then an action tried there
                ps = rng.choice(states)
                pa = rng.choice(actions[ps])
                ps2, pr, pdone = model[(ps, pa)]
                pq = Q[ps]
                pq[pa] += ALPHA * ((pr if pdone else pr + GAMMA * max(Q[ps2])) - pq[pa])
            s, steps = s2, steps + 1
        steps_per_episode.append(steps)
    return steps_per_episode


def main():
    for n in NS:
        runs = [dyna_q(n, seed) for seed in range(RUNS)]
        ep2 = sum(r[1] for r in runs) / RUNS
        last = sum(sum(r[40:]) / 10 for r in runs) / RUNS
        print(f"n={n}: episode 2 {ep2:.1f} steps, episodes 41-50 {last:.1f} steps "
              f"(mean of {RUNS} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
