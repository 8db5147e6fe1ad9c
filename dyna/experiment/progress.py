"""What ``dyna run`` tells a person while it works, and what it found at the end.

:class:`RunProgress` shows every stage of a run (the kernel compile, the runs, the tables,
the plots, the statistics and report) on a stream (stderr by default), in one of two forms:

* on a terminal: a tqdm bar per stage; the runs stage ticks once per run, the other stages
  show their name and elapsed time, redrawn every second;
* otherwise (a log file, CI, a job scheduler): plain lines, one when the runs start (how
  many runs in how many jobs), one when each stage ends (its counts and seconds), and while
  a stage lasts a line at least every :data:`HEARTBEAT_S` seconds (for the runs: done of
  total, elapsed time and the time left estimated from the rate so far).

:func:`run_summary` gives the lines written to stderr when a run ends (stdout has the output
folder alone): the report's path, the plots' folder and the first lines of the report's
``## Headline`` section, read from the written ``report.md``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["HEARTBEAT_S", "RunProgress", "duration", "headline_lines", "run_summary"]

#: Longest gap, in seconds, between two log lines while a stage runs (plain-line form).
HEARTBEAT_S = 30.0

#: Seconds between two redraws of a terminal bar (so the elapsed time moves).
_REDRAW_S = 1.0

#: Longest headline line printed at the end (characters); the report has the rest.
_LINE_CHARS = 240


def duration(seconds: float) -> str:
    """A duration for people: ``0.4 s``, ``12 s``, ``3 min 05 s``, ``1 h 02 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class RunProgress:
    """The progress display of one run: stages, their counts, and the time left.

    Parameters
    ----------
    name : str
        The experiment's name, at the start of every line.
    mode : {"auto", "bar", "log", "off"}
        ``bar``: tqdm bars (a terminal); ``log``: plain lines; ``off``: nothing;
        ``auto``: ``bar`` when ``stream`` is a terminal, else ``log``.
    stream : text stream, optional
        Where it writes; default ``sys.stderr`` (looked up when created).
    clock : callable, optional
        Seconds, monotonic; default :func:`time.monotonic` (a test passes a fake one).
    ticker : bool
        Start a background thread that calls :meth:`tick` (every second for bars, every
        second checking the :data:`HEARTBEAT_S` gap for lines). A test turns it off and
        calls :meth:`tick` itself.

    Use it as a context manager, or call :meth:`close` at the end: it stops the thread
    and removes a bar left on the terminal.
    """

    def __init__(self, name: str, mode: str = "auto", *, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, ticker: bool = True):
        if mode not in ("auto", "bar", "log", "off"):
            raise ValueError(f"mode must be auto, bar, log or off, not {mode!r}")
        self.stream = stream if stream is not None else sys.stderr
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "bar" if callable(isatty) and isatty() else "log"
        self.name, self.mode, self.clock = name, mode, clock
        self.label: str | None = None
        self.total: int | None = None
        self.unit = "run"
        self.done = 0
        self._start = self._last_line = clock()
        self._bar = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = None
        if ticker and mode != "off":
            self._thread = threading.Thread(target=self._tick_loop, name="dyna-progress",
                                            daemon=True)
            self._thread.start()

    # ----------------------------------------------------------------- what a run calls
    def note(self, text: str) -> None:
        """Write one line now (e.g. ``compiling kernels, first run only``), in both forms."""
        if self.mode == "off":
            return
        with self._lock:
            if self._bar is not None:
                self._bar.write(f"{self.name}: {text}", file=self.stream)
            else:
                self._write(text)

    def stage(self, label: str, total: int | None = None, *, unit: str = "run",
              detail: str = "") -> None:
        """Begin a stage (ending the one before without a line).

        ``total``: the units the stage counts (the runs), or None for a stage that only
        takes time. ``detail``: what a plain line says at the start (only for a counted
        stage, e.g. ``"3 jobs"``).
        """
        with self._lock:
            self._close_bar()
            self.label, self.total, self.unit, self.done = label, total, unit, 0
            self._start = self.clock()
            if self.mode == "bar":
                from tqdm.auto import tqdm

                fmt = None if total is not None else "{desc}: {elapsed}"
                self._bar = tqdm(total=total, desc=f"{self.name}: {label}", unit=unit,
                                 leave=False, file=self.stream, bar_format=fmt)
            elif self.mode == "log" and total is not None:
                extra = f" in {detail}" if detail else ""
                self._write(f"{label}: {total:,} {self._units(total)}{extra}")

    def advance(self, n: int = 1) -> None:
        """``n`` more units of the current stage are done."""
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)

    def finish(self, detail: str = "") -> None:
        """End the current stage; a plain line says what it made (``detail``) and when."""
        with self._lock:
            if self.label is None:
                return
            took = duration(self.clock() - self._start)
            self._close_bar()
            if self.mode == "log":
                if self.total is not None:
                    what = f"{self.done:,} of {self.total:,} {self._units(self.total)} done"
                    self._write(f"{self.label}: {what} in {took}")
                else:
                    self._write(f"{self.label}: {detail + ' ' if detail else ''}in {took}")
            self.label = None

    def status(self) -> str:
        """The current stage as a plain line's text: done of total, elapsed, time left."""
        elapsed = self.clock() - self._start
        if self.total is None:
            return f"{self.label}: still working, {duration(elapsed)} elapsed"
        text = (f"{self.label}: {self.done:,} of {self.total:,} {self._units(self.total)} "
                f"done, {duration(elapsed)} elapsed")
        if self.done and self.done < self.total:
            left = elapsed / self.done * (self.total - self.done)
            return f"{text}, about {duration(left)} left"
        return f"{text}, time left unknown" if not self.done else text

    def tick(self) -> None:
        """What the background thread does: redraw a bar; or write :meth:`status` when no
        line was written for :data:`HEARTBEAT_S` seconds during a stage."""
        with self._lock:
            if self._bar is not None:
                self._bar.refresh()
            elif (self.mode == "log" and self.label is not None
                  and self.clock() - self._last_line >= HEARTBEAT_S):
                self._write(self.status())

    def close(self) -> None:
        """Stop the background thread and remove a bar still drawn."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            self._close_bar()

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------- internals
    def _units(self, n: int) -> str:
        return self.unit if n == 1 else f"{self.unit}s"

    def _write(self, text: str) -> None:
        self.stream.write(f"{self.name}: {text}\n")
        self.stream.flush()
        self._last_line = self.clock()

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _tick_loop(self) -> None:
        while not self._stop.wait(_REDRAW_S):
            try:
                self.tick()
            except (OSError, ValueError):   # the stream was closed under us: stop talking
                return


def headline_lines(report: str | Path, limit: int = 5) -> list[str]:
    """The first ``limit`` non-empty lines of the ``## Headline`` section of a report.

    Lines longer than 240 characters are cut (ending ``...``). Empty when the file or the
    section is missing.
    """
    try:
        text = Path(report).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    lines = text.splitlines()
    if "## Headline" not in lines:
        return []
    out = []
    for line in lines[lines.index("## Headline") + 1:]:
        if line.startswith("#") or (out and not line.strip()):
            break
        if line.strip():
            out.append(line if len(line) <= _LINE_CHARS else line[:_LINE_CHARS - 3] + "...")
        if len(out) == limit:
            break
    return out


def run_summary(folder: str | Path) -> list[str]:
    """The lines ``dyna run`` writes to stderr when a run ends (its stdout is the output
    folder alone, the line scripts read).

    ``report:`` and ``plots:`` with their paths (each only when present), then the first
    lines of the report's headline (:func:`headline_lines`), indented.
    """
    folder = Path(folder)
    out = []
    report = folder / "report.md"
    if report.is_file():
        out.append(f"report: {report}")
    if (folder / "plots").is_dir():
        out.append(f"plots:  {folder / 'plots'}/")
    head = headline_lines(report)
    if head:
        out.append("headline:")
        out += [f"  {line}" for line in head]
    return out
