"""The README's main job as a whole process against the textbook written in plain Python.

Run with ``pytest benchmarks/bench_process.py -s`` (about 1-2 minutes on a quiet machine).

Measured, each as a fresh process, in rounds whose order rotates (at least 10 rounds):

- ``dyna run experiments/dyna_maze.toml`` (Sutton & Barto Figure 8.2: 30 runs x 50 episodes
  x n in {0, 5, 50}): start-up, loading the cached compiled kernel, the runs, both Parquet
  tables, manifest, report.md and the PNG and SVG plot, into a fresh output folder each
  time. The folder is checked after every run (the files are there; ``results.parquet``
  has the sha256 its manifest records, the same in every round) and then removed;
- the peer, ``benchmarks/peers/dyna_q_plain.py``: the same protocol as a one-file
  plain-Python Dyna-Q (dicts, lists and ``random``, one run at a time), printing a summary;
- for the reader, the floor: a process that only imports what the whole job needs (numpy,
  numba, polars, gymnasium, scipy.stats, matplotlib with its Agg and SVG backends). Its
  ratio to the peer is printed, not asserted: no serial start of dyna can be faster.

One run of each comes first, untimed, so numba's kernel cache and the file cache are warm
(the issue's "warm cache"). Wall time is what is asserted (the ratio of medians, dyna over
the peer, at most :data:`TARGET`); the CPU time (user + system) of each process is printed
beside it, as it depends less on what else the machine is doing.
"""

from __future__ import annotations

import hashlib
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "dyna_maze.toml"
PEER = ROOT / "benchmarks" / "peers" / "dyna_q_plain.py"
#: Timed rounds (each times every contestant once).
ROUNDS = 10
#: The issue's target: dyna's median at most this fraction of the peer's.
TARGET = 0.6

FLOOR_IMPORTS = ("import numpy, numba, polars, gymnasium, scipy.stats, matplotlib; "
                 "matplotlib.use('Agg'); "
                 "import matplotlib.figure, matplotlib.backends.backend_agg, "
                 "matplotlib.backends.backend_svg")


def _timed(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system) and stdout of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def _check_output(folder: Path) -> str:
    """The sha256 of ``results.parquet`` after checking the folder holds the whole job."""
    for name in ("results.parquet", "runs.parquet", "manifest.json", "report.md",
                 "plots/steps_per_episode.png", "plots/steps_per_episode.svg"):
        assert (folder / name).is_file() and (folder / name).stat().st_size > 0, name
    manifest = json.loads((folder / "manifest.json").read_text())
    digest = hashlib.sha256((folder / "results.parquet").read_bytes()).hexdigest()
    assert manifest["tables"]["results.parquet"]["sha256"] == digest
    assert (folder / "plots/steps_per_episode.svg").read_text().lstrip().startswith("<?xml")
    return digest


def _check_peer(stdout: str) -> None:
    lines = stdout.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["n=0", "n=5", "n=50"], stdout


def test_dyna_run_whole_process_within_0_6_of_plain_python():
    work = Path(tempfile.mkdtemp(prefix="dyna-bench-process-"))
    counter = [0]
    digests: set[str] = set()

    def dyna_run():
        counter[0] += 1
        out = work / f"run{counter[0]}"
        timing = _timed([sys.executable, "-m", "dyna.cli", "run", str(EXPERIMENT),
                         "--out", str(out), "--no-progress"])
        digests.add(_check_output(out))
        shutil.rmtree(out)
        return timing

    def peer():
        timing = _timed([sys.executable, str(PEER)])
        _check_peer(timing[2])
        return timing

    def floor():
        return _timed([sys.executable, "-c", FLOOR_IMPORTS])

    contestants = {"dyna": dyna_run, "peer": peer, "floor": floor}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in contestants}
    try:
        for fn in contestants.values():          # warm: numba's cache, the file cache
            fn()
        names = list(contestants)
        for k in range(ROUNDS):
            for name in names[k % 3:] + names[:k % 3]:
                wall, cpu, _ = contestants[name]()
                times[name].append((wall, cpu))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert len(digests) == 1, "results.parquet differed between runs of the same seed"
    med = {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
           for name, t in times.items()}
    ratio = med["dyna"][0] / med["peer"][0]
    print(f"\nwhole process, median of {ROUNDS} rounds (wall s / CPU s):"
          f"\n  dyna run experiments/dyna_maze.toml  {med['dyna'][0]:.3f} / {med['dyna'][1]:.3f}"
          f"\n  plain-Python Dyna-Q (peer)            {med['peer'][0]:.3f} / {med['peer'][1]:.3f}"
          f"\n  imports only (floor)                  {med['floor'][0]:.3f} / {med['floor'][1]:.3f}"
          f"\n  dyna / peer: wall x{ratio:.2f}, CPU x{med['dyna'][1] / med['peer'][1]:.2f}"
          f"; floor / peer: wall x{med['floor'][0] / med['peer'][0]:.2f}"
          f" (target: dyna / peer wall <= {TARGET})")
    assert ratio <= TARGET
