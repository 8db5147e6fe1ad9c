"""A fact saved whole whose history record cannot be appended is told as such.

MEMORY.md is written first (whole, :func:`dyna.fileio.atomic_write`), then its history
record. When the disk fills between the two, the fact is in MEMORY.md and its record is
not: the error says exactly that (``the fact is saved; its history record could not be
written: no space left on device (ENOSPC)``), never "nothing was written".

The disk is a real 512 KiB tmpfs, filled to its last page but one: the new MEMORY.md takes
that page (the old one keeps its own while the test holds it open), and the history, padded
with blank lines (which its reader skips) to a whole number of pages, cannot grow by a byte.
"""

import os

import pytest
import small_tmpfs
from test_writes_whole import fill, run

from dyna.errors import DynaError
from dyna.fileio.failures import FileWriteError, HistoryWriteError
from dyna.loops.memory import MemoryStore

PAGE = 4096
OLD = "The deploy host is alpha.example.org"
NEW = "The test port is 8080 today"


@pytest.fixture
def nearly_full(tmp_path):
    """(MEMORY.md, its history) on a tmpfs with one free page; the history ends at a page
    boundary."""
    with small_tmpfs.mounted(tmp_path / "disk") as disk:
        MemoryStore(disk / "MEMORY.md").add(OLD, "person", "user", "r1")
        hist = disk / ".dyna" / "MEMORY.md.history.jsonl"
        with open(hist, "ab") as fh:
            fh.write(b"\n" * (-hist.stat().st_size % PAGE))
        fill(disk)
        filler = disk / "filler"
        os.truncate(filler, filler.stat().st_size - PAGE)
        yield disk / "MEMORY.md", hist


def _facts_and_records(path) -> tuple[list[str], list[str]]:
    mem = MemoryStore(path)
    return [e.text for e in mem.entries()], [r["op"] for r in mem.history()]


@pytest.mark.parametrize("via", ["cli", "library"])
def test_a_history_that_cannot_grow_says_the_fact_is_saved(nearly_full, capsys, via):
    path, hist = nearly_full
    assert hist.stat().st_size % PAGE == 0
    assert _facts_and_records(path) == ([OLD], ["add"])
    line = (f"path={str(hist)!r}: the fact is saved; its history record could not be "
            "written: no space left on device (ENOSPC)")
    with open(path, "rb"):          # the old MEMORY.md keeps its page until the test ends
        if via == "cli":
            rc, out, err = run(capsys, "memory", "add", path, NEW)
            assert (rc, out, err) == (2, "", f"dyna: error: {line}\n")
        else:
            with pytest.raises(HistoryWriteError) as e:
                MemoryStore(path).add(NEW, "person", "user", "r2")
            assert str(e.value) == line
            assert isinstance(e.value, FileWriteError) and isinstance(e.value, DynaError)
            assert (e.value.errno, e.value.saved) == (28, "the fact is saved")
    assert _facts_and_records(path) == ([OLD, NEW], ["add"])
