"""Shared fixture code of the benchmarks: contestants timed one per test, ratios after them.

Every benchmark is a test parametrized by ``contestant`` (dyna and each of its peers), each
timed with pytest-benchmark's own ``benchmark`` fixture, all contestants of one comparison
in one group (``@pytest.mark.benchmark(group=...)``). pytest-benchmark's tables,
``--benchmark-save`` and ``--benchmark-compare`` then show each contestant's own statistics.

A target is asserted in a test of its own, marked ``@pytest.mark.ratio(of="test_x")``: its
:func:`medians` fixture gives the median of each contestant of ``test_x`` (with the same
other parameters), computed by pytest-benchmark, and the ratio of two of them. Never a number
of seconds. The ratio test is moved after its contestants (also under pytest-randomly) and
skips, saying why, when a contestant did not run or timing is off. Run them explicitly
(they are not in the default test paths)::

    pytest benchmarks/ --benchmark-only                 # all of them
    pytest benchmarks/bench_buffer.py -s                # one file, with its printed figures

Durations measured elsewhere (inside a child process, a latency between two events) enter
through the ``timer`` of the benchmark mark: :class:`replay.ReplayTimer`.
``OPENBLAS_CORETYPE`` may be set on the benchmark machine; it is left untouched.
"""

from __future__ import annotations

import pytest

#: Medians of the contestants that ran: {comparison key: {contestant: entry}}, where an
#: entry is the contestant's ``benchmark`` fixture.
TIMED = pytest.StashKey[dict]()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "ratio(of): the ratio test of the contestants of benchmark test `of`")
    config.stash[TIMED] = {}


def _params(item, leave_out: str | None = None) -> tuple:
    """The item's parameters other than ``leave_out``, as a sortable key."""
    spec = getattr(item, "callspec", None)
    params = spec.params if spec is not None else {}
    return tuple(sorted((k, str(v)) for k, v in params.items() if k != leave_out))


def _contestant_key(item) -> tuple | None:
    """(module, test name, other parameters) of a contestant item, else None."""
    spec = getattr(item, "callspec", None)
    if spec is None or "contestant" not in spec.params:
        return None
    return (str(item.path), item.originalname, _params(item, "contestant"))


def _ratio_key(item) -> tuple | None:
    """The key of the contestants a ``ratio`` item compares, else None."""
    mark = item.get_closest_marker("ratio")
    if mark is None:
        return None
    return (str(item.path), mark.kwargs["of"], _params(item))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Move each ratio test right after the last of its contestants (after any reordering
    by other plugins, pytest-randomly's included), and let it use pytest-benchmark's
    ``benchmark`` fixture without timing anything (so ``--benchmark-only`` runs it)."""
    for item in [i for i in items if _ratio_key(i) is not None]:
        item.add_marker(pytest.mark.filterwarnings(
            "ignore:Benchmark fixture was not used at all in this test"))
        key = _ratio_key(item)
        last = [n for n, other in enumerate(items) if _contestant_key(other) == key]
        if last and last[-1] > items.index(item):
            items.remove(item)
            items.insert(last[-1], item)      # (one place earlier once the item is out)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep the ``benchmark`` fixture of every contestant whose test passed."""
    report = yield
    key = _contestant_key(item)
    if key is not None and call.when == "call" and report.passed:
        entry = getattr(item, "funcargs", {}).get("benchmark")
        if entry is not None:
            timed = item.config.stash[TIMED].setdefault(key, {})
            timed[item.callspec.params["contestant"]] = entry
    return report


class Medians:
    """The medians of the contestants of one comparison (pytest-benchmark's statistics).

    Parameters
    ----------
    of : str
        The name of the contestants' test.
    entries : dict
        Contestant name -> its ``benchmark`` fixture, for those whose test passed.
    """

    def __init__(self, of: str, entries: dict):
        self.of = of
        self.entries = entries

    def entry(self, name: str):
        """Contestant ``name``'s ``benchmark`` fixture; skips the test when it did not run."""
        if name not in self.entries:
            pytest.skip(f"contestant {name!r} of {self.of} did not run (deselected, skipped "
                        "or failed): no ratio to assert")
        return self.entries[name]

    def __getitem__(self, name: str) -> float:
        """Median seconds of contestant ``name``'s rounds."""
        stats = self.entry(name).stats
        if stats is None:
            pytest.skip("timing is off (--benchmark-disable): no ratio to assert")
        return stats.stats.median

    def extra_info(self, name: str) -> dict:
        """What contestant ``name``'s test saved with its entry (``benchmark.extra_info``)."""
        return self.entry(name).extra_info

    def ratio(self, name: str, peer: str) -> float:
        """median(``name``) / median(``peer``), below 1 when ``name`` is faster; printed and
        saved with ``name``'s entry as ``ratio_vs_<peer>``."""
        r = self[name] / self[peer]
        self.entry(name).extra_info[f"ratio_vs_{peer}"] = r
        print(f"\n{self.of}: {name} median {self[name] * 1e3:.3f} ms, {peer} median "
              f"{self[peer] * 1e3:.3f} ms, ratio {r:.4f}")
        return r


@pytest.fixture
def medians(request, benchmark) -> Medians:
    """The :class:`Medians` of the test named by this test's ``ratio`` mark.

    Takes pytest-benchmark's ``benchmark`` fixture, unused, so that ``--benchmark-only`` runs
    the ratio test and ``--benchmark-skip`` skips it."""
    if benchmark.disabled:
        pytest.skip("timing is off (--benchmark-disable): no ratio to assert")
    key = _ratio_key(request.node)
    if key is None:
        raise ValueError(f"{request.node.name} has no ratio(of=...) mark")
    return Medians(key[1], request.config.stash[TIMED].get(key, {}))
