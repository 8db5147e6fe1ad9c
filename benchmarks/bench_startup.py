"""Speed of the first seconds: a process that uses the store, and every `dyna` command's
start, against peers in the same benchmark.

Run with ``pytest benchmarks/bench_startup.py -s``. Each measurement is a fresh Python
process; each contestant is a test and a pytest-benchmark entry of its own (:mod:`conftest`),
timed over :data:`RUNS` processes after one untimed run, and the ratio of the medians is
asserted in the test after them:

- ``import dyna.experience`` within 1.3x of ``import numpy, numba, polars, scipy.special``
  (what the store needs at least);
- ``dyna --help`` and ``dyna run --help`` within 5x of ``python -c "import argparse"`` (the
  command modules import the loops, the escalation kind and scipy.stats only when a command
  needs them).
"""

import subprocess
import sys

import pytest

#: Timed processes per contestant.
RUNS = 30

IMPORTS = {"dyna": "import dyna.experience",
           "dependencies": "import numpy, numba, polars, scipy.special"}
HELP = {"argparse": ["-c", "import argparse"], "dyna --help": ["-m", "dyna.cli", "--help"],
        "dyna run --help": ["-m", "dyna.cli", "run", "--help"]}


def _process(argv):
    """A contestant: run ``argv`` as a child process to its end."""
    return lambda: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


@pytest.mark.benchmark(group="import dyna.experience, fresh process")
@pytest.mark.parametrize("contestant", list(IMPORTS))
def test_import_experience(benchmark, contestant):
    benchmark.pedantic(_process([sys.executable, "-c", IMPORTS[contestant]]), rounds=RUNS,
                       warmup_rounds=1)


@pytest.mark.ratio(of="test_import_experience")
def test_import_experience_within_1_3x_of_its_dependencies(medians):
    assert medians.ratio("dyna", "dependencies") <= 1.3


@pytest.mark.benchmark(group="a command's help, fresh process")
@pytest.mark.parametrize("contestant", list(HELP))
def test_help(benchmark, contestant):
    benchmark.pedantic(_process([sys.executable, *HELP[contestant]]), rounds=RUNS,
                       warmup_rounds=1)


@pytest.mark.ratio(of="test_help")
def test_help_within_5x_of_a_bare_argparse_program(medians):
    ratios = {name: medians.ratio(name, "argparse") for name in ("dyna --help",
                                                                  "dyna run --help")}
    for name, r in ratios.items():
        assert r <= 5.0, f"{name} takes {r:.2f}x a bare argparse program (target 5x)"
