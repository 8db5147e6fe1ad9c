"""Speed of the first seconds: a process that uses the store, and every `dyna` command's
start, against peers in the same benchmark.

Run with ``pytest benchmarks/bench_startup.py -s``. Each measurement is a fresh Python
process; the two sides alternate, at least 30 runs each, and the ratio of the medians is
asserted:

- ``import dyna.experience`` within 1.3x of ``import numpy, numba, polars, scipy.special``
  (what the store needs at least); measured when written: about 1.1x;
- ``dyna --help`` and ``dyna run --help`` within 5x of ``python -c "import argparse"``;
  measured when written: about 1.6-2x (the command modules import the loops, the
  escalation kind and scipy.stats only when a command needs them).
"""

import statistics
import subprocess
import sys
import time

RUNS = 30


def _time(argv) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _ratio(ours, peer, runs=RUNS) -> tuple[float, float, float]:
    a, b = [], []
    for _ in range(runs):
        a.append(_time(ours))
        b.append(_time(peer))
    ma, mb = statistics.median(a), statistics.median(b)
    return ma / mb, ma, mb


def test_import_experience_within_1_3x_of_its_dependencies():
    r, ours, peer = _ratio([sys.executable, "-c", "import dyna.experience"],
                           [sys.executable, "-c", "import numpy, numba, polars, scipy.special"])
    print(f"\nimport dyna.experience {ours:.3f} s, peers {peer:.3f} s: x{r:.2f}")
    assert r <= 1.3


def test_help_within_5x_of_a_bare_argparse_program():
    peer = [sys.executable, "-c", "import argparse"]
    for argv in (["--help"], ["run", "--help"]):
        r, ours, base = _ratio([sys.executable, "-m", "dyna.cli", *argv], peer)
        print(f"\ndyna {' '.join(argv)} {ours:.3f} s, argparse {base:.3f} s: x{r:.2f}")
        assert r <= 5.0
