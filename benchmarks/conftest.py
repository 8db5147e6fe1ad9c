"""Shared helpers for the buffer and index benchmarks.

Each benchmark measures dyna's operation and its peer in the same run, alternating them
round by round so both see the same machine state, then prints and asserts the ratio of the
medians. Run them explicitly (they are not in the default test paths)::

    pytest benchmarks/bench_buffer.py benchmarks/bench_index.py -s

``OPENBLAS_CORETYPE`` may be set on the benchmark machine; it is left untouched.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pytest


def pytest_collect_file(parent, file_path):
    """Collect ``bench_*.py`` files when the folder is given (``pytest benchmarks/``).

    A file named on the command line is already collected by pytest itself.
    """
    if (file_path.suffix == ".py" and file_path.name.startswith("bench_")
            and not parent.session.isinitpath(file_path)):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


class Comparison:
    """Interleaved timing of an operation and its peers, recorded through pytest-benchmark."""

    def __init__(self, benchmark):
        self.benchmark = benchmark
        self._recorded = False

    def __call__(self, label: str, ours: Callable[[], object],
                 peers: dict[str, Callable[[], object]], *, rounds: int = 7,
                 setup_ours: Callable[[], object] | None = None,
                 warmup: int = 1) -> dict[str, float]:
        """Time ``ours`` and each peer alternately; return ``{peer name: median ratio}``.

        The ratio is median(ours) / median(peer): below 1 means dyna is faster. ``setup_ours``
        runs before every timed call of ``ours``, outside the timing (e.g. to restore the data
        that a destructive operation consumed). The order of the contestants rotates each round.
        pytest-benchmark records the time of one whole round of the first comparison of a test
        (its fixture can time only once); later comparisons in the same test are timed the
        same way and add their medians to its extra info.
        """
        names = ["dyna", *peers]
        fns = [ours, *peers.values()]
        times: dict[str, list[float]] = {name: [] for name in names}

        def timed(fn, acc):
            if fn is ours and setup_ours is not None:
                setup_ours()
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)

        for _ in range(warmup):
            for fn in fns:
                timed(fn, [])
        shift = [0]

        def one_round():
            k = shift[0] % len(fns)
            shift[0] += 1
            for name, fn in list(zip(names, fns))[k:] + list(zip(names, fns))[:k]:
                timed(fn, times[name])

        if self._recorded:
            for _ in range(rounds):
                one_round()
        else:
            self.benchmark.pedantic(one_round, rounds=rounds, iterations=1)
            self._recorded = True
        med = {name: statistics.median(t) for name, t in times.items()}
        ratios = {name: med["dyna"] / med[name] for name in peers}
        info = {f"{name}_median_s": m for name, m in med.items() if name != "dyna"}
        # dyna's median of the test's first comparison, and of each under its peers' names
        info.setdefault("dyna_median_s", self.benchmark.extra_info.get("dyna_median_s",
                                                                        med["dyna"]))
        info[f"dyna_median_s_vs_{'_'.join(peers)}"] = med["dyna"]
        info.update({f"ratio_vs_{name}": r for name, r in ratios.items()})
        self.benchmark.extra_info.update(info)
        print(f"\n{label}: dyna {med['dyna'] * 1e3:.3f} ms (min {min(times['dyna']) * 1e3:.3f})")
        for name in peers:
            print(f"    {name}: {med[name] * 1e3:.3f} ms (min {min(times[name]) * 1e3:.3f}); "
                  f"ratio dyna/{name} = {ratios[name]:.3f}")
        return ratios


@pytest.fixture
def compare(benchmark):
    """A :class:`Comparison` bound to this test's pytest-benchmark fixture."""
    return Comparison(benchmark)
