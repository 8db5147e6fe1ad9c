"""`dyna run` talks: a line per stage in a log file, a bar on a terminal, the compile line,
a line at least every 30 s while a stage lasts, and a summary naming report.md at the end."""

import io
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
from test_cli import GOOD

from dyna import kernel_cache
from dyna.cli import main
from dyna.experiment import progress as progress_mod
from dyna.experiment.progress import RunProgress, duration, headline_lines, run_summary
from dyna.experiment.registry import load_experiment
from dyna.experiment.runner import run_experiment

# two variants of test_cli's experiment: 2 jobs of 3 runs
SMALL = GOOD.replace('name = "cli"', 'name = "talk"') + '\n[[variants]]\nname = "n=0"\n' \
    'n_planning = 0\n'

TIME = r"(?:[0-9.]+ s|\d+ min \d\d s|\d+ h \d\d min)"     # what duration() writes


def _small(tmp_path) -> Path:
    path = tmp_path / "talk.toml"
    path.write_text(SMALL)
    return path


def test_a_run_logged_to_a_file_shows_every_stage_and_ends_with_the_report(tmp_path):
    out = tmp_path / "out"
    log = tmp_path / "log.txt"
    dyna = Path(sys.executable).with_name("dyna")
    cmd = [str(dyna)] if dyna.exists() else [sys.executable, "-m", "dyna.cli"]
    with open(log, "w") as fh:
        proc = subprocess.run([*cmd, "run", str(_small(tmp_path)), "--out", str(out)],
                              stdout=fh, stderr=subprocess.STDOUT, timeout=600)
    assert proc.returncode == 0
    lines = [ln for ln in log.read_text().splitlines()
             if not ln.startswith("talk: compil")]    # a fresh kernel cache adds those
    rows = sum(pl.read_parquet(p).height for p in out.glob("*.parquet"))
    head = headline_lines(out / "report.md")
    assert len(head) >= 2 and head[0].startswith("- ")
    want = [
        "talk: runs: 6 runs in 2 jobs",
        f"talk: runs: 6 of 6 runs done in {TIME}",
        f"talk: tables: 2 tables, {rows:,} rows in {TIME}",
        f"talk: plots: {len(list((out / 'plots').iterdir()))} plot files in {TIME}",
        f"talk: statistics and report: report.md in {TIME}",
        re.escape(str(out)),
        re.escape(f"report: {out / 'report.md'}"),
        re.escape(f"plots:  {out / 'plots'}/"),
        "headline:",
        *[re.escape(f"  {h}") for h in head],
    ]
    assert len(lines) == len(want), lines
    for line, pattern in zip(lines, want):
        assert re.fullmatch(pattern, line), (line, pattern)


def test_stdout_is_the_folder_alone_and_the_summary_is_on_stderr(tmp_path):
    out = tmp_path / "out"
    dyna = Path(sys.executable).with_name("dyna")
    cmd = [str(dyna)] if dyna.exists() else [sys.executable, "-m", "dyna.cli"]
    proc = subprocess.run([*cmd, "run", str(_small(tmp_path)), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{out}\n"
    err = proc.stderr.splitlines()
    first = err.index(f"report: {out / 'report.md'}")
    assert err[first - 1].startswith("talk: statistics and report: report.md in ")
    assert err[first + 1:first + 3] == [f"plots:  {out / 'plots'}/", "headline:"]


def test_quiet_prints_the_folder_alone(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(_small(tmp_path)), "--out", str(out), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (f"{out}\n", "")


def test_the_compile_line_comes_first_when_the_kernel_cache_is_empty(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_cache, "compiled_kernels", lambda directory=None, module=None: 0)
    stream = io.StringIO()
    shown = RunProgress("talk", "log", stream=stream, ticker=False)
    run_experiment(load_experiment(_small(tmp_path)), tmp_path / "out", progress=shown)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "talk: compiling kernels, first run only (numba caches them on disk)"
    assert re.fullmatch(f"talk: compile: kernels compiled in {TIME}", lines[1])
    assert lines[2] == "talk: runs: 6 runs in 2 jobs"


def test_compiled_kernels_counts_numba_index_files(tmp_path, monkeypatch):
    (tmp_path / "agents_ab12").mkdir()
    (tmp_path / "agents_ab12" / "tabular.run-10.py311.nbi").write_bytes(b"")
    (tmp_path / "agents_ab12" / "tabular.run-10.py311.1.nbc").write_bytes(b"")
    (tmp_path / "model.q-3.py311.nbi").write_bytes(b"")
    assert kernel_cache.compiled_kernels(str(tmp_path)) == 2
    assert kernel_cache.compiled_kernels(str(tmp_path / "none")) == 0
    # per module: another module's kernels (here the model's) do not count
    assert kernel_cache.compiled_kernels(str(tmp_path), module="dyna.agents.tabular") == 1
    assert kernel_cache.compiled_kernels(str(tmp_path), module="dyna.model") == 0
    (tmp_path / "dyna_cd34").mkdir()
    (tmp_path / "dyna_cd34" / "model.q-3.py311.nbi").write_bytes(b"")
    assert kernel_cache.compiled_kernels(str(tmp_path), module="dyna.model") == 1
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert kernel_cache.compiled_kernels() is None


def test_a_log_line_at_least_every_30_s_with_the_time_left():
    now = [100.0]
    stream = io.StringIO()
    p = RunProgress("x", "log", stream=stream, clock=lambda: now[0], ticker=False)
    p.stage("runs", 10, detail="5 jobs")
    now[0] += 10
    p.advance(2)
    p.tick()                       # 10 s since the last line: nothing
    now[0] += 20
    p.tick()                       # 30 s: a line
    now[0] += 29
    p.advance(3)
    p.tick()                       # 29 s since that line: nothing
    now[0] += 1
    p.tick()
    p.advance(5)
    p.finish()
    p.stage("plots")
    now[0] += 95
    p.tick()
    p.finish("3 plot files")
    p.close()
    assert stream.getvalue().splitlines() == [
        "x: runs: 10 runs in 5 jobs",
        "x: runs: 2 of 10 runs done, 30 s elapsed, about 2 min 00 s left",
        "x: runs: 5 of 10 runs done, 1 min 00 s elapsed, about 1 min 00 s left",
        "x: runs: 10 of 10 runs done in 1 min 00 s",
        "x: plots: still working, 1 min 35 s elapsed",
        "x: plots: 3 plot files in 1 min 35 s",
    ]
    assert progress_mod.HEARTBEAT_S == 30.0


def test_no_runs_done_yet_says_the_time_left_is_unknown():
    now = [0.0]
    p = RunProgress("x", "log", stream=io.StringIO(), clock=lambda: now[0], ticker=False)
    p.stage("runs", 1)
    now[0] = 31.0
    assert p.status() == "runs: 0 of 1 run done, 31 s elapsed, time left unknown"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_each_stage_is_a_bar_that_is_removed_after():
    stream = _Terminal()
    p = RunProgress("x", stream=stream, ticker=False)
    assert p.mode == "bar"
    p.stage("runs", 4)
    p.advance(3)
    p.tick()
    drawn = stream.getvalue()
    assert "x: runs:  75%" in drawn and "3/4" in drawn
    p.finish()
    p.stage("plots")
    p.tick()
    assert re.search(r"x: plots: 00:0\d", stream.getvalue())
    p.close()
    assert p._bar is None


def test_off_writes_nothing():
    stream = io.StringIO()
    with RunProgress("x", "off", stream=stream) as p:
        p.note("compiling")
        p.stage("runs", 3)
        p.advance(3)
        p.finish()
    assert stream.getvalue() == ""


def test_headline_lines_stop_at_the_section_end_and_cut_long_lines(tmp_path):
    report = tmp_path / "report.md"
    report.write_text("# t\n\n## Headline\n\n- a\n- " + "b" * 300 + "\n\n- after\n## Setup\n")
    assert headline_lines(report) == ["- a", "- " + "b" * 235 + "..."]
    report.write_text("# t\n\n## Headline\n\n- 1\n- 2\n- 3\n- 4\n- 5\n- 6\n")
    assert headline_lines(report) == ["- 1", "- 2", "- 3", "- 4", "- 5"]
    report.write_text("# t\n\nno headline\n")
    assert headline_lines(report) == []
    assert run_summary(tmp_path) == [f"report: {report}"]


def test_durations_read_as_people_write_them():
    assert [duration(s) for s in (0.04, 9.94, 12.4, 65, 3599, 3720)] == [
        "0.0 s", "9.9 s", "12 s", "1 min 05 s", "59 min 59 s", "1 h 02 min"]


def test_the_compile_line_comes_when_only_other_kernels_are_cached(tmp_path, monkeypatch):
    """A cache that holds the index's and the buffer's kernels but not the tabular agents'
    is cold for a tabular run: the line is said."""
    cache = tmp_path / "cache"
    (cache / "index_ab12").mkdir(parents=True)
    (cache / "index_ab12" / "kernels.topk_scaled-97.py311.nbi").write_bytes(b"")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    stream = io.StringIO()
    shown = RunProgress("talk", "log", stream=stream, ticker=False)
    run_experiment(load_experiment(_small(tmp_path)), tmp_path / "out", progress=shown)
    assert stream.getvalue().splitlines()[0] == (
        "talk: compiling kernels, first run only (numba caches them on disk)")
