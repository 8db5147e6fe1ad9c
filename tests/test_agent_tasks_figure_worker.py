"""The agent-tasks output stage (the quick look): scenario figures drawn by
helper processes are the same files, byte for byte, as drawn in one process, and a helper
that fails, hangs or is sent a bad message changes nothing but who draws; the runs
table's cells are split once, and tables in many chunks give the same plots and
report."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import tables_only
from dyna.errors import ConfigError
from dyna.experiment.backends import InProcessBackend
from dyna.experiment.kinds.agent_tasks import figure_helper as FH
from dyna.experiment.kinds.agent_tasks import figure_worker as FW
from dyna.experiment.kinds.agent_tasks import plots as P
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import load_output, run_experiment

KEYS = [key for key, _, _ in P.ROWS]
CFG = {"kind": "agent_tasks", "name": "fw", "seed": 3, "runs": 2, "episodes": 60,
       "store": "skill", "variants": ["no_learning", "naive_loop", "skill_loop"],
       "env": {"n_families": 3, "max_steps": 16},
       "scenarios": [{"name": "clean"}, {"name": "drifty", "env": {"drift_at": [30]}},
                     {"name": "noisy", "env": {"false_success_rate": 0.3}}]}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fw") / "o"
    with tables_only():           # the tests draw their own plots from the tables
        run_experiment(parse_experiment(CFG), folder, backend=InProcessBackend(),
                       progress=False)
    return load_output(folder)


@pytest.fixture(scope="module")
def one_process(out, tmp_path_factory):
    """Digests of the files :func:`P.draw_plots` writes in one process, by file name."""
    return _digests(P.draw_plots(out, tmp_path_factory.mktemp("one"), processes=1))


@pytest.fixture(scope="module")
def two_calls(out, tmp_path_factory):
    """Every file ``KIND.draw_plots`` then ``KIND.write_report`` write of ``out``, by path
    relative to their folder."""
    from dyna.experiment.kinds.agent_tasks.kind import KIND

    return _two_calls(KIND, out, tmp_path_factory.mktemp("two_calls"))


def _two_calls(kind, out, folder):
    kind.draw_plots(out, folder)
    kind.write_report(out, folder)
    return _files(folder)


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _digests(paths):
    return {Path(p).name: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


def _jobs(out, folder):
    cfg = out.config
    series = P._series(out.tables["episodes"], int(cfg.analysis["window"]),
                       max(1, cfg.episodes // 100),
                       chosen_family=int(cfg.analysis["chosen_family"]))
    return [P.scenario_job(out, s, series, folder) for s, _ in cfg.scenarios]


def test_two_and_three_processes_write_the_bytes_one_process_writes(out, one_process,
                                                                     tmp_path):
    ref = one_process
    # 3 scenario figures x (PNG, SVG) + profiles, recovery (a drift scenario)
    assert sum(k.startswith("scenario_") for k in ref) == 6
    for n in (2, 3):
        got = P.draw_plots(out, tmp_path / f"n{n}", processes=n)
        assert _digests(got) == ref
        assert [Path(p).name for p in got] == list(ref)      # same order


def test_a_helper_that_dies_or_hangs_leaves_its_figures_to_this_process(out, one_process,
                                                                        tmp_path, monkeypatch):
    ref = one_process
    monkeypatch.setenv("DYNA_RENDER_TIMEOUT", "1")
    cases = {"dies": "import sys; sys.exit(3)",
             "nonsense": "import sys; sys.stdin.buffer.readline(); print('not json', "
                         "flush=True); sys.stdin.read()",
             "wrong figure": "import sys; sys.stdin.buffer.readline(); "
                             "print('{\"i\": 99, \"paths\": []}', flush=True); "
                             "sys.stdin.read()",
             "hangs": "import time; time.sleep(60)"}
    for what, code in cases.items():
        started = []

        def fake(code=code):
            proc = FW.subprocess.Popen([sys.executable, "-c", code], stdin=FW.subprocess.PIPE,
                                       stdout=FW.subprocess.PIPE)
            started.append(proc)
            return proc
        monkeypatch.setattr(FW, "_start", fake)
        got = P.draw_plots(out, tmp_path / what.replace(" ", "_"), processes=2)
        assert _digests(got) == ref, what
        assert started and all(p.poll() is not None for p in started), what  # reaped
    monkeypatch.setattr(FW, "_start", lambda: None)          # cannot start at all
    assert _digests(P.draw_plots(out, tmp_path / "none", processes=2)) == ref


def test_helpers_take_figures_from_one_queue(out, tmp_path, monkeypatch):
    """While this process does its own work first (here: it waits until every figure is
    on disk), the helper takes every figure from the queue, one at a time; none is drawn
    twice, and the answer lists them in order."""
    import time as _time

    drawn_here = []
    real = P.scenario_figure

    def counting(*job):
        drawn_here.append(job[1])
        return real(*job)
    monkeypatch.setattr(P, "scenario_figure", counting)
    folder = tmp_path / "q"
    jobs = _jobs(out, folder)
    want = [folder / f"scenario_{j[1]}.svg" for j in jobs]

    def wait_for_the_helper():
        end = _time.monotonic() + 120
        while not all(p.is_file() for p in want) and _time.monotonic() < end:
            _time.sleep(0.2)
    got = FW.draw_all(jobs, 2, here=wait_for_the_helper, draw=counting, rows=KEYS)
    assert [[Path(p).name for p in g] for g in got] == [
        [f"scenario_{j[1]}.png", f"scenario_{j[1]}.svg"] for j in jobs]
    assert drawn_here == []                 # the helper drew all three


def test_a_figure_that_fails_raises_here_after_the_helpers_stop(out, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise ConfigError("plot", "x", "broken on purpose")
    monkeypatch.setattr(P, "scenario_figure", boom)
    with pytest.raises(ConfigError, match="broken on purpose"):
        P.draw_plots(out, tmp_path / "b", processes=2)


def test_the_helper_refuses_a_bad_folder_or_scenario_name(out, tmp_path):
    job = _jobs(out, tmp_path / "plots")[0]
    (tmp_path / "plots").mkdir()
    os.symlink(tmp_path / "plots", tmp_path / "link")
    cases = {"symlink": (job[1], tmp_path / "link"), "missing": (job[1], tmp_path / "nope"),
             "dotdot": ("../evil", tmp_path / "plots"), "slash": ("a/b", tmp_path / "plots")}
    for what, (scenario, folder) in cases.items():
        head, rest = FW._encode(0, (job[0], scenario, job[2], job[3], folder, ""),
                                KEYS).split(b"\n", 1)
        head = {**json.loads(head), "folder": str(folder)}    # as sent, not resolved
        msg = json.dumps(head).encode() + b"\n" + rest
        res = subprocess.run([sys.executable, "-m", FH.__name__, "--parent", str(os.getpid())],
                             input=msg, capture_output=True, env=_env())
        assert res.returncode == 1, what
        assert res.stdout == b"", what
        assert "ValueError" in res.stderr.decode(), what
    assert sorted(os.listdir(tmp_path / "plots")) == []
    assert not (tmp_path / "evil.png").exists() and not (tmp_path / "scenario_..").exists()


def test_the_helper_draws_what_it_is_sent_and_answers_one_line_per_figure(out, tmp_path):
    jobs = _jobs(out, tmp_path)
    msg = b"".join(FW._encode(i, j, KEYS) for i, j in enumerate(jobs))
    res = subprocess.run([sys.executable, "-m", FH.__name__, "--parent", str(os.getpid())],
                         input=msg, capture_output=True, env=_env())
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [x["i"] for x in lines] == [0, 1, 2]
    ref = {}
    for job in jobs:
        ref.update(_digests(P.scenario_figure(*job[:4], tmp_path / "here")))
    assert _digests(p for x in lines for p in x["paths"]) == ref
    # a truncated message: exit 1 after the figures before it
    res = subprocess.run([sys.executable, "-m", FH.__name__, "--parent", str(os.getpid())],
                         input=msg[:-10], capture_output=True, env=_env())
    assert res.returncode == 1 and len(res.stdout.splitlines()) == 2


def test_the_message_round_trips_the_series_exactly(out, tmp_path):
    job = _jobs(out, tmp_path)[1]
    msg = FW._encode(7, job, KEYS)
    head, rest = msg.split(b"\n", 1)
    head = json.loads(head)
    assert head["i"] == 7 and head["scenario"] == "drifty" and sum(head["sizes"]) == len(rest)
    import polars as pl
    off = 0
    for (key, _, _), n in zip(P.ROWS, head["sizes"]):
        assert pl.read_ipc(io.BytesIO(rest[off:off + n])).equals(job[2][key])
        off += n
    cfg = FH._as_config(head["config"])
    assert (cfg.variants, cfg.store, cfg.runs, cfg.seed, cfg.analysis["window"],
            cfg.analysis["chosen_family"]) == (
        tuple(out.config.variants), "skill", 2, 3, int(out.config.analysis["window"]),
        int(out.config.analysis["chosen_family"]))


def test_how_many_processes(monkeypatch):
    monkeypatch.delenv("DYNA_RENDER", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert P.plot_processes(3) == 1                 # too few figures to repay a helper
    assert P.plot_processes(8) == 2 and P.plot_processes(22) == 2
    assert P.plot_processes(22, processes=5) == 5
    monkeypatch.setenv("DYNA_RENDER", "serial")
    assert P.plot_processes(22) == 1
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ConfigError) as err:
            P.plot_processes(22, processes=bad)
        assert err.value.field == "processes"


def _env():
    from dyna.experiment.helper_process import child_environment
    return child_environment()


def test_cells_of_a_chunked_table_equal_the_filters_they_replace(out):
    from dyna.experiment.kinds.agent_tasks import analysis as A
    import polars as pl

    runs = out.tables["runs"]
    chunked = pl.concat(runs.partition_by(["variant", "scenario"]), rechunk=False)
    assert chunked.n_chunks() == 9
    for t in (runs, chunked):
        for s, _ in out.config.scenarios:
            for v in out.config.variants:
                for m in ("final_success", "tokens_per_success", "recovery"):
                    want = (t.filter((pl.col("scenario") == s) & (pl.col("variant") == v))
                            .sort("run")[m].cast(pl.Float64).to_numpy())
                    got = A.values(t, s, v, m)
                    assert np.array_equal(got, want, equal_nan=True) and got.size == 2
    assert A.values(runs, "nope", "skill_loop", "final_success").size == 0
    with pytest.raises(pl.exceptions.ColumnNotFoundError):
        A.values(runs, "clean", "skill_loop", "no_such_metric")
    # a new table gives its own values
    doubled = runs.with_columns(pl.col("final_success") * 2)
    assert np.array_equal(A.values(doubled, "clean", "skill_loop", "final_success"),
                          2 * A.values(runs, "clean", "skill_loop", "final_success"))


def test_plots_and_report_of_chunked_tables_are_the_same_bytes(out, two_calls, tmp_path):
    import polars as pl

    from dyna.experiment.kinds.agent_tasks.kind import KIND
    from dyna.experiment.protocol import ExperimentOutput

    chunked = ExperimentOutput(config=out.config, manifest=out.manifest, tables={
        k: pl.concat(t.partition_by(["variant", "scenario"]), rechunk=False)
        for k, t in out.tables.items()})
    assert all(t.n_chunks() > 1 for t in chunked.tables.values())
    files = {"whole": two_calls, "chunked": _two_calls(KIND, chunked, tmp_path / "chunked")}
    assert files["whole"] == files["chunked"] and "report.md" in files["whole"]


def test_render_writes_what_draw_plots_then_write_report_write(out, two_calls, tmp_path):
    from dyna.experiment.kinds.agent_tasks.kind import KIND

    b = tmp_path / "render"
    paths = KIND.render(out, b)
    files = [two_calls, _files(b)]
    assert files[0] == files[1] and "report.md" in files[0]
    assert sorted(p.relative_to(b).as_posix() for p in paths) == sorted(
        k for k in files[1] if k.startswith("plots/"))
