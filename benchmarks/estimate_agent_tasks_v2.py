"""Estimated run time of the pre-registered agent-tasks v2 sweeps.

For each store's file (``experiments/agent_tasks_v2_{skill,memory}.toml``) every variant
runs one seed of 1,000 episodes on one representative scenario of each sweep (its most
severe point; the wrong-guidance sweep at its two ends), timed in CPU seconds
(``time.process_time``: on a machine shared with other jobs the wall clock counts
waiting too). A sweep's time is its representative's time times its number of points
(the other points differ only in a knob's value), times the file's runs; the grid's
episodes per second is its episodes over that CPU time, and its wall time on ``W``
workers is that CPU time over ``W`` (the process backend keeps every worker busy:
thousands of independent runs). A first look, not a measurement of the sweep itself.

Usage::

    python benchmarks/estimate_agent_tasks_v2.py [--workers 2] [--episodes 1000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def representatives(cfg) -> list[tuple[str, int, float]]:
    """``(scenario, index, weight)``: the scenarios timed and how many grid points
    each stands for."""
    names = [n for n, _ in cfg.scenarios]
    sweeps: dict[str, list[str]] = {}
    for n in names:
        sweeps.setdefault(n.rsplit("-", 1)[0], []).append(n)
    out = []
    for sweep, points in sweeps.items():
        picks = [points[-1]] if len(points) < 4 or sweep != "wrong_guidance" else [
            points[0], points[-1]]
        for p in picks:
            out.append((p, names.index(p), len(points) / len(picks)))
    return out


def estimate(store: str, episodes: int = 1000, workers: int = 2) -> dict:
    from dyna.agents.loop_agents import run_loop_agent
    from dyna.experiment.registry import load_experiment

    cfg = load_experiment(ROOT / f"experiments/agent_tasks_v2_{store}.toml")
    cpu = 0.0
    for scen, ix, weight in representatives(cfg):
        for v in cfg.variants:
            t0 = time.process_time()
            run_loop_agent(v, store=cfg.store, env_kwargs=cfg.env_kwargs(ix),
                           episodes=episodes, seed=cfg.seed, run_index=0,
                           params=dict(cfg.policy), loop_config=dict(cfg.loop))
            cpu += (time.process_time() - t0) * weight * cfg.episodes / episodes
    cpu *= cfg.runs
    total = cfg.runs * cfg.episodes * len(cfg.variants) * len(cfg.scenarios)
    return {"store": store, "episodes": total, "cpu_s": cpu, "episodes_per_s": total / cpu,
            "wall_min": cpu / workers / 60}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--episodes", type=int, default=1000,
                    help="episodes per timed run (default 1000)")
    args = ap.parse_args(argv)
    for store in ("skill", "memory"):
        e = estimate(store, args.episodes, args.workers)
        print(f"{store}: {e['episodes']:,} episodes, {e['cpu_s']:.0f} CPU s, "
              f"{e['episodes_per_s']:.0f} episodes/s per core, "
              f"~{e['wall_min']:.0f} min on {args.workers} workers", flush=True)
    return 0


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
