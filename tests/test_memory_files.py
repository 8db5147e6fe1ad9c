"""Memory files: typed errors for a non-UTF-8 MEMORY.md and a
corrupt history line, no write through a symlink, and a file lock under which 4 processes
adding and staging at once lose nothing."""

import json
import multiprocessing as mp
import os

import pytest

from dyna.cli import main
from dyna.errors import ConfigError
from dyna.loops.memory import MemoryFileError, MemoryStore


def test_non_utf8_memory_file_is_a_typed_error_naming_file_and_offset(tmp_path, capsys):
    p = tmp_path / "MEMORY.md"
    p.write_bytes(b"# Memory\n\n- API port: 8080\n- caf\xe9 is open\n")
    with pytest.raises(MemoryFileError) as ei:
        MemoryStore(p)
    assert ei.value.field == str(p) and ei.value.value == "byte 32"
    assert "offset 32" in str(ei.value) and "0xe9" in str(ei.value)
    assert main(["memory", "show", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(p) in err and "offset 32" in err


def test_corrupt_history_line_is_a_typed_error_naming_file_and_line(tmp_path, capsys):
    p = tmp_path / "MEMORY.md"
    m = MemoryStore(p)
    m.add("API port: 8080", trust="trusted")
    m.add("Python version is 3.12", trust="trusted")
    hist = tmp_path / ".dyna" / "MEMORY.md.history.jsonl"
    lines = hist.read_text().splitlines(keepends=True)
    hist.write_text(lines[0] + '{"seq": 2, "op": "add", \n' + "".join(lines[1:]))
    with pytest.raises(MemoryFileError) as ei:
        MemoryStore(p)
    assert ei.value.field == f"{hist}:2"
    with pytest.raises(MemoryFileError):
        m.add("The worker count is 8", trust="trusted")      # re-read under the lock
    assert main(["memory", "show", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{hist}:2" in err


def test_a_torn_last_history_line_is_cut_before_the_next_append(tmp_path):
    p = tmp_path / "MEMORY.md"
    m = MemoryStore(p)
    m.add("API port: 8080", trust="trusted")
    hist = tmp_path / ".dyna" / "MEMORY.md.history.jsonl"
    with open(hist, "ab") as fh:                 # a writer killed mid-append
        fh.write(b'{"seq": 2, "op": "ad')
    again = MemoryStore(p)
    again.add("Python version is 3.12", trust="trusted")
    assert [(h["seq"], h["op"], h["text"]) for h in MemoryStore(p).history()] == [
        (1, "add", "API port: 8080"), (2, "add", "Python version is 3.12")]


@pytest.mark.parametrize("target", ["MEMORY.md", ".dyna/MEMORY.md.history.jsonl",
                                    ".dyna/MEMORY.md.pending.json", ".dyna"])
def test_no_write_through_a_symlink(tmp_path, target):
    root, outside = tmp_path / "lib", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "victim").write_text("keep me\n")
    (root / ".dyna").mkdir()
    link = root / target
    if target == ".dyna":
        link.rmdir()
        link.symlink_to(outside, target_is_directory=True)
    else:
        link.symlink_to(outside / "victim")
    with pytest.raises(ConfigError) as ei:    # on opening (dyna's own files) or writing
        m = MemoryStore(root / "MEMORY.md")
        if target.endswith("pending.json"):
            m.stage("The deploy host is prod-8", run_id="r1")
        else:
            m.add("API port: 8080", trust="trusted")
    assert ei.value.field == "path" and ei.value.value == str(link)
    assert "symlink" in ei.value.reason or "symbolic link" in ei.value.reason
    assert (outside / "victim").read_text() == "keep me\n"
    assert sorted(x.name for x in outside.iterdir()) == ["victim"]


def _writer(path, k, n, barrier):
    m = MemoryStore(path, cap=None)
    barrier.wait()
    for i in range(n):
        m.add(f"Service s{k}x{i} listens on {1000 * k + i}", run_id=f"p{k}", trust="trusted")
        if i % 5 == 0:
            m.stage(f"Host h{k}x{i} answers on {2000 * k + i}", run_id=f"p{k}")


def test_four_processes_adding_and_staging_at_once_lose_nothing(tmp_path):
    path = tmp_path / "MEMORY.md"
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_writer, args=(path, k, 20, barrier)) for k in range(1, 5)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    m = MemoryStore(path, cap=None)
    want = {f"Service s{k}x{i} listens on {1000 * k + i}" for k in range(1, 5) for i in range(20)}
    assert len(m) == 80 and {e.text for e in m} == want
    pend = m.pending()
    assert len(pend) == 16 and len({p.id for p in pend}) == 16
    hist = m.history()
    assert [h["seq"] for h in hist] == list(range(1, 97))          # unique, no gap
    assert sum(h["op"] == "add" for h in hist) == 80
    assert sum(h["op"] == "stage" for h in hist) == 16
    assert os.path.getsize(path) > 0 and json.loads(
        (tmp_path / ".dyna" / "MEMORY.md.pending.json").read_text())[0]["id"] == "m0001"


def test_corrupt_pending_file_is_a_typed_error_naming_it(tmp_path, capsys):
    p = tmp_path / "MEMORY.md"
    m = MemoryStore(p)
    m.add("The deploy host is prod-7", trust="user")
    m.stage("The deploy host is prod-8", run_id="r1")
    pend = tmp_path / ".dyna" / "MEMORY.md.pending.json"
    pend.write_text('[{"id": "m0001", "entry": ')
    with pytest.raises(MemoryFileError) as ei:
        m.pending()
    assert ei.value.field == str(pend)
    assert main(["memory", "pending", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(pend) in err
