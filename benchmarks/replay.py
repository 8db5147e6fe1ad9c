"""A pytest-benchmark timer that replays durations measured elsewhere.

Some durations cannot be taken around a call in this process: a time measured inside a
child process (its start-up left out), or a latency between two events in two processes.
They enter pytest-benchmark through its public ``timer`` option::

    REPLAY = ReplayTimer()

    @pytest.mark.benchmark(group="...", timer=REPLAY)
    def test_x(benchmark, contestant):
        seconds = measure_elsewhere(contestant)
        REPLAY.replay(benchmark, seconds)

Each round of the entry is then one of ``seconds``, exactly, in order.
"""

from __future__ import annotations

from collections.abc import Iterable


class ReplayTimer:
    """A clock that reads 0 before each replayed round and that round's duration after it."""

    __name__ = "ReplayTimer"

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        """The clock's reading, in seconds."""
        return self.now

    def replay(self, benchmark, seconds: Iterable[float]) -> None:
        """Enter ``seconds`` as the rounds of ``benchmark`` (whose mark's ``timer`` is this
        clock), one round each, with ``benchmark.pedantic``.

        Raises ValueError when ``seconds`` is empty."""
        durations = [float(s) for s in seconds]
        if not durations:
            raise ValueError("no durations to replay")
        pending = iter(durations)

        def rewind():
            self.now = 0.0

        def play():
            self.now = next(pending)

        benchmark.pedantic(play, setup=rewind, rounds=len(durations))
