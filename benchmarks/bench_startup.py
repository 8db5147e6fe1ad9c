"""Speed of the first seconds: a process that uses the store, and every `dyna` command's
start, against peers in the same benchmark.

Run with ``pytest benchmarks/bench_startup.py -s``. Each measurement is a fresh Python
process; each contestant is a pytest-benchmark entry of its own (:mod:`conftest`), timed
over :data:`RUNS` processes after one untimed run, and the ratio of the medians is
asserted:

- ``import dyna.experience`` within 1.3x of ``import numpy, numba, polars, scipy.special``
  (what the store needs at least);
- ``dyna --help`` and ``dyna run --help`` within 5x of ``python -c "import argparse"`` (the
  command modules import the loops, the escalation kind and scipy.stats only when a command
  needs them).
"""

import subprocess
import sys

#: Timed processes per contestant.
RUNS = 30


def _process(argv):
    """A contestant: run ``argv`` as a child process to its end."""
    return lambda: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def test_import_experience_within_1_3x_of_its_dependencies(compare):
    ratios = compare("import dyna.experience, fresh process",
                     _process([sys.executable, "-c", "import dyna.experience"]),
                     {"dependencies": _process([sys.executable, "-c",
                                                "import numpy, numba, polars, scipy.special"])},
                     rounds=RUNS)
    assert ratios["dependencies"] <= 1.3


def test_help_within_5x_of_a_bare_argparse_program(compare):
    compare.time("argparse", _process([sys.executable, "-c", "import argparse"]), rounds=RUNS)
    names = {"dyna --help": ["--help"], "dyna run --help": ["run", "--help"]}
    for name, argv in names.items():
        compare.time(name, _process([sys.executable, "-m", "dyna.cli", *argv]), rounds=RUNS)
    ratios = {name: compare.ratio(name, "argparse") for name in names}
    compare.report("a command's help, fresh process", ["argparse", *names],
                   {f"{name}/argparse": r for name, r in ratios.items()})
    for name, r in ratios.items():
        assert r <= 5.0, f"{name} takes {r:.2f}x a bare argparse program (target 5x)"
