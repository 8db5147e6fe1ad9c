"""The README's main job as a whole process against the textbook written in plain Python.

Run with ``pytest benchmarks/bench_process.py -s`` (about 2 minutes on a quiet machine).

Measured, each as a fresh process, each contestant a test and a pytest-benchmark entry of its
own (:mod:`conftest`, :data:`ROUNDS` timed processes after one untimed one):

- ``dyna run experiments/dyna_maze.toml`` (Sutton & Barto Figure 8.2: 30 runs x 50 episodes
  x n in {0, 5, 50}): start-up, loading the cached compiled kernel, the runs, both Parquet
  tables, manifest, report.md and the PNG and SVG plot, into a fresh output folder each
  time, as a user runs it. The folder is checked after every run, outside the timing (the
  files are there; ``results.parquet`` has the sha256 its manifest records, the same in
  every round; the PNG and SVG the same bytes in every round) and then removed;
- the peer, ``benchmarks/peers/dyna_q_plain.py``: the same protocol as a one-file
  plain-Python Dyna-Q (dicts, lists and ``random``, one run at a time), printing a summary;
- for the reader, the floor: a process that only imports what the whole job needs (numpy,
  numba, polars, gymnasium, scipy.stats, matplotlib with its Agg and SVG backends). Its
  ratio to the peer is printed, not asserted: no start of dyna can be faster.

The untimed first run of each warms numba's kernel cache and the file cache. Wall time is
what is asserted (the ratio of medians, dyna over the peer, at most :data:`TARGET`: the main
job no slower than the plain script); the CPU time (user + system) of each process and the
peak resident memory of one more, untimed, run of each (:data:`PEAK_LAUNCHER`) are printed
and saved beside it, and the load average before and after, as the times depend on what else
the machine is doing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "dyna_maze.toml"
PEER = ROOT / "benchmarks" / "peers" / "dyna_q_plain.py"
#: Timed processes per contestant.
ROUNDS = 10
#: dyna's median wall time at most this fraction of the peer's.
TARGET = 1.0

FLOOR_IMPORTS = ("import numpy, numba, polars, gymnasium, scipy.stats, matplotlib; "
                 "matplotlib.use('Agg'); "
                 "import matplotlib.figure, matplotlib.backends.backend_agg, "
                 "matplotlib.backends.backend_svg")


#: Runs ``sys.argv[1:]`` and prints its exit code and peak resident memory in KiB. A child
#: of the benchmark itself would report at least the benchmark's own size: at ``exec`` Linux
#: folds the peak of the address space being replaced (the forked, or vfork-shared, copy of
#: the parent) into the child's maximum. A child of this small launcher reports at least the
#: launcher's size instead, about that of a bare interpreter (11 MiB here).
PEAK_LAUNCHER = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], "
                 "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
                 "_, status, usage = os.wait4(p.pid, 0); "
                 "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)")


def _peak_mib(argv: list[str]) -> float:
    """Peak resident memory (MiB) of one untimed run of ``argv``, which must succeed."""
    out = subprocess.run([sys.executable, "-c", PEAK_LAUNCHER, *argv], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout
    code, kib = (int(x) for x in out.split())
    assert code == 0, argv
    return kib / 1024


def _child(argv: list[str], usage: list[float]) -> str:
    """Run one child process to its end; append its CPU seconds (user + system,
    ``os.wait4``: that child's own) to ``usage`` and return its stdout."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=ROOT)
    stdout = proc.stdout.read()
    proc.stdout.close()
    _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, argv
    usage.append(rusage.ru_utime + rusage.ru_stime)
    return stdout


def _check_output(folder: Path) -> tuple[str, str, str]:
    """The sha256 of ``results.parquet``, the PNG and the SVG after checking the folder
    holds the whole job."""
    for name in ("results.parquet", "runs.parquet", "manifest.json", "report.md",
                 "plots/steps_per_episode.png", "plots/steps_per_episode.svg"):
        assert (folder / name).is_file() and (folder / name).stat().st_size > 0, name
    manifest = json.loads((folder / "manifest.json").read_text())
    digest = hashlib.sha256((folder / "results.parquet").read_bytes()).hexdigest()
    assert manifest["tables"]["results.parquet"]["sha256"] == digest
    assert (folder / "plots/steps_per_episode.svg").read_text().lstrip().startswith("<?xml")
    return tuple(hashlib.sha256((folder / name).read_bytes()).hexdigest()
                 for name in ("results.parquet", "plots/steps_per_episode.png",
                              "plots/steps_per_episode.svg"))


def _load(avg) -> str:
    return ", ".join(f"{x:.2f}" for x in avg)


def _check_peer(stdout: str) -> None:
    lines = stdout.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["n=0", "n=5", "n=50"], stdout


def _argv(contestant: str, out: Path) -> list[str]:
    """The command line of one contestant (dyna writes into ``out``)."""
    return {"dyna": [sys.executable, "-m", "dyna.cli", "run", str(EXPERIMENT), "--out",
                     str(out), "--no-progress"],
            "peer": [sys.executable, str(PEER)],
            "floor": [sys.executable, "-c", FLOOR_IMPORTS]}[contestant]


LABEL = {"dyna": "dyna run experiments/dyna_maze.toml", "peer": "plain-Python Dyna-Q (peer)",
         "floor": "imports only (floor)"}


@pytest.mark.benchmark(group="whole process: dyna run dyna_maze.toml vs plain-Python Dyna-Q")
@pytest.mark.parametrize("contestant", list(LABEL))
def test_whole_process(benchmark, tmp_path, contestant):
    usage: list[float] = []
    digests: set[tuple[str, str, str]] = set()
    counter = [0]

    def fresh_folder():
        counter[0] += 1
        return (tmp_path / f"run{counter[0]}",), {}

    def run(out):
        return _child(_argv(contestant, out), usage)

    def checked(out):
        if contestant == "dyna":
            digests.add(_check_output(out))
            shutil.rmtree(out)

    load_before = os.getloadavg()
    stdout = benchmark.pedantic(run, setup=fresh_folder, teardown=checked, rounds=ROUNDS,
                                warmup_rounds=1)
    load_after = os.getloadavg()
    if contestant == "dyna":
        assert len(digests) == 1, "results.parquet or a plot differed between runs of a seed"
    if contestant == "peer":
        _check_peer(stdout)
    cpu = statistics.median(usage[1:])        # (the first process is the untimed warm-up)
    peak = _peak_mib(_argv(contestant, tmp_path / "peak"))
    benchmark.extra_info.update(cpu_s=cpu, peak_mib=peak, load_before=load_before,
                                load_after=load_after)
    print(f"\n  {LABEL[contestant]:38s} CPU {cpu:.3f} s, peak {peak:.0f} MiB (median of "
          f"{ROUNDS} processes); load average (1, 5, 15 min) before {_load(load_before)}, "
          f"after {_load(load_after)}; {os.cpu_count()} CPUs")


@pytest.mark.ratio(of="test_whole_process")
def test_dyna_run_whole_process_no_slower_than_plain_python(medians):
    cpu = {name: medians.extra_info(name)["cpu_s"] for name in LABEL}
    floor = medians.ratio("floor", "peer")
    ratio = medians.ratio("dyna", "peer")
    print(f"  dyna / peer: wall x{ratio:.2f}, CPU x{cpu['dyna'] / cpu['peer']:.2f}; "
          f"floor / peer: wall x{floor:.2f} (target: dyna / peer wall <= {TARGET})")
    assert ratio <= TARGET
