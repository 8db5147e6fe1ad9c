"""Shared helpers of the benchmarks: dyna and each peer timed as entries of their own.

Every benchmark times dyna and each of its peers separately, each as its own
pytest-benchmark entry named ``<test>[<contestant>]``, all in one group (the test's name),
so pytest-benchmark's tables, ``--benchmark-save`` and ``--benchmark-compare`` show each
contestant's own statistics. A target is a ratio of two entries' medians, computed from
those statistics and asserted; never a number of seconds. Run them explicitly (they are not
in the default test paths)::

    pytest benchmarks/ --benchmark-only                 # all of them
    pytest benchmarks/bench_buffer.py -s                # one file, with its printed figures

``OPENBLAS_CORETYPE`` may be set on the benchmark machine; it is left untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from pytest_benchmark.utils import NameWrapper


class Comparison:
    """The entries of one benchmark test: one per contestant, in one group.

    Parameters
    ----------
    request : pytest.FixtureRequest
        The test's request; its pytest-benchmark session and options make the entries.
    benchmark : BenchmarkFixture
        The test's own ``benchmark`` fixture: the first contestant's entry.
    """

    def __init__(self, request, benchmark: BenchmarkFixture):
        self.request = request
        self.benchmark = benchmark
        self.entries: dict[str, BenchmarkFixture] = {}
        #: What the test adds for the reader (sizes, CPU seconds, ratios), saved with every
        #: entry: the ``benchmark`` fixture's own ``extra_info``.
        self.extra_info: dict = benchmark.extra_info

    def _entry(self, name: str) -> BenchmarkFixture:
        """The pytest-benchmark entry ``<test>[<name>]`` in the test's group: the test's
        ``benchmark`` fixture for the first contestant, then new ones made as that fixture
        is made (the session's options and the test's ``benchmark`` mark)."""
        if name in self.entries:
            raise ValueError(f"contestant {name!r} is already timed in this test")
        node = self.request.node
        if self.entries:
            session = self.request.config._benchmarksession
            marker = node.get_closest_marker("benchmark")
            options = dict(marker.kwargs) if marker else {}
            if "timer" in options:
                options["timer"] = NameWrapper(options["timer"])
            entry = BenchmarkFixture(node, add_stats=session.benchmarks.append,
                                     logger=session.logger, warner=node.warn,
                                     disabled=session.disabled,
                                     **dict(session.options, **options))
            self.request.addfinalizer(entry._cleanup)
        else:
            entry = self.benchmark
        callspec = getattr(node, "callspec", None)
        entry.param = name if callspec is None else f"{callspec.id}-{name}"
        entry.params = {**(callspec.params if callspec else {}), "contestant": name}
        entry.name = f"{node.originalname}[{entry.param}]"
        entry.fullname = f"{node.nodeid.split('[')[0]}[{entry.param}]"
        entry.group = entry.group or node.name
        entry.extra_info = self.extra_info
        self.entries[name] = entry
        return entry

    def time(self, name: str, fn: Callable[..., object], *, rounds: int,
             setup: Callable[[], object] | None = None,
             teardown: Callable[..., object] | None = None, warmup: int = 1):
        """Time ``fn`` as contestant ``name``: ``warmup`` untimed calls, then ``rounds``
        timed calls (``setup`` before and ``teardown`` after each, outside the timing, as
        :meth:`BenchmarkFixture.pedantic` takes them). Returns the last call's result."""
        return self._entry(name).pedantic(fn, setup=setup, teardown=teardown, rounds=rounds,
                                          warmup_rounds=warmup, iterations=1)

    def record(self, name: str, seconds: Iterable[float]) -> None:
        """Enter durations measured elsewhere (inside a child process, or a latency between
        two events) as contestant ``name``, one round each."""
        entry = self._entry(name)
        entry._mode = "record"
        if entry.disabled:
            return
        stats = entry._make_stats(1)
        for s in seconds:
            stats.update(float(s))

    def median(self, name: str) -> float:
        """Median seconds of contestant ``name``'s rounds (pytest-benchmark's statistics).

        Skips the test when timing is off (``--benchmark-disable``): there is no ratio to
        assert, and the contestants have each run once as a test."""
        stats = self.entries[name].stats
        if stats is None:
            pytest.skip("timing is off (--benchmark-disable): no ratio to assert")
        return stats.stats.median

    def ratio(self, name: str, peer: str) -> float:
        """median(``name``) / median(``peer``): below 1 means ``name`` is faster."""
        r = self.median(name) / self.median(peer)
        self.extra_info[f"ratio_{name}_vs_{peer}"] = r
        return r

    def __call__(self, label: str, ours: Callable[[], object],
                 peers: dict[str, Callable[[], object]], *, rounds: int = 7,
                 setup_ours: Callable[[], object] | None = None,
                 warmup: int = 1) -> dict[str, float]:
        """Time ``ours`` (contestant ``dyna``) and then each peer; print the medians and
        return ``{peer name: median(dyna) / median(peer)}``.

        ``setup_ours`` runs before every call of ``ours``, outside the timing (e.g. to
        restore the data that a destructive operation consumed).
        """
        def setup():
            if setup_ours is not None:
                setup_ours()          # (returns nothing for pedantic: ``ours`` takes no arguments)

        self.time("dyna", ours, rounds=rounds, warmup=warmup, setup=setup)
        for name, fn in peers.items():
            self.time(name, fn, rounds=rounds, warmup=warmup)
        ratios = {name: self.ratio("dyna", name) for name in peers}
        self.report(label, ["dyna", *peers], {f"dyna/{n}": r for n, r in ratios.items()})
        return ratios

    def report(self, label: str, names: list[str], ratios: dict[str, float]) -> None:
        """Print each contestant's median (and min) and the named ``ratios``."""
        print(f"\n{label}:")
        for name in names:
            stats = self.entries[name].stats
            if stats is not None:
                print(f"    {name}: median {stats.stats.median * 1e3:.3f} ms "
                      f"(min {stats.stats.min * 1e3:.3f}, {stats.stats.rounds} rounds)")
        for what, r in ratios.items():
            print(f"    ratio {what} = {r:.3f}")


@pytest.fixture
def compare(request, benchmark):
    """A :class:`Comparison` for this test (through ``benchmark``, ``--benchmark-only``
    runs it)."""
    return Comparison(request, benchmark)
