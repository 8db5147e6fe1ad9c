"""Whole-process time of the agent-tasks v3 confirmatory runs (reported, not asserted).

Runs ``dyna run FILE --backend process --workers 2 --no-progress`` in a fresh process for
each file (the confirmatory seeds, or ``--seeds replication``), into a temporary output
folder that is removed afterwards, and prints the wall and CPU time the process and its
workers used. The budget for each store's primary confirmatory family is 20 minutes on 2
cores; measured figures are in experiments/results/agent_tasks_v3/README.md.

Usage::

    python benchmarks/time_agent_tasks_v3.py                   # both stores, confirmatory
    python benchmarks/time_agent_tasks_v3.py --seeds replication --only skill

Not collected by pytest (a run takes minutes).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = {"skill": "experiments/agent_tasks_v3_skill.toml",
         "memory": "experiments/agent_tasks_v3_memory.toml"}


def time_run(path: str, seeds: str) -> dict:
    """Wall and CPU seconds of one ``dyna run`` of ``path`` (children included)."""
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dyna.cli", "run", path, "--seeds", seeds,
                        "--backend", "process", "--workers", "2", "--no-progress",
                        "--out", str(Path(tmp) / "out")], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": wall, "user_s": after.ru_utime - before.ru_utime,
            "sys_s": after.ru_stime - before.ru_stime}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", choices=("confirmatory", "replication"),
                        default="confirmatory")
    parser.add_argument("--only", choices=tuple(FILES))
    args = parser.parse_args()
    for store, path in FILES.items():
        if args.only and store != args.only:
            continue
        t = time_run(path, args.seeds)
        print(f"{store} ({args.seeds}): wall {t['wall_s']:.0f} s, user {t['user_s']:.0f} s, "
              f"system {t['sys_s']:.0f} s (budget 1200 s wall)")


if __name__ == "__main__":
    main()
