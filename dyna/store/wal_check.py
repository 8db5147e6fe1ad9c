"""Damage in a SQLite store's write-ahead log, found before SQLite opens the file.

SQLite replays a WAL frame by frame and stops, silently, at the first frame whose checksum
or salt does not match: every transaction after a damaged frame is dropped, and the store
opens as if they had never been committed (4 KB of damage in the middle of a ``-wal`` left
by a crash showed 500 of 1,000 rows, status ok). :func:`check_wal` reads the ``-wal`` as
SQLite would and reports frames that SQLite would drop although they were written after the
damage in the same generation of the log (their salts are the header's), so the loss is
named instead of shown as a smaller store.

The format (https://www.sqlite.org/fileformat.html#the_write_ahead_log): a 32-byte header
(magic ``0x377f0682`` or ``0x377f0683``, the low bit giving the byte order of the
checksum's words; format version; page size; checkpoint sequence; salt-1, salt-2;
checksum-1, checksum-2 of its first 24 bytes), then frames of a 24-byte header (page
number; database size in pages after a commit, else 0; salt-1, salt-2; checksum-1,
checksum-2) and one page. Checksums are cumulative from the header's: over each pair of
32-bit words ``(x0, x1)``, ``s0 += x0 + s1``, ``s1 += x1 + s0`` (mod 2**32), covering the
first 8 bytes of each frame header and its page. The pairs are summed as a linear
recurrence in numpy (``[s0, s1] <- M [s0, s1] + [x0, x0 + x1]``, ``M = [[1, 1], [1, 2]]``)
so a log of 1,000 frames is checked in milliseconds, read from the file 256 KiB at a time
(the memory a check uses does not grow with the log).

A header SQLite ignores (a failed checksum, a magic number or page size that is not one
SQLite writes) makes SQLite ignore the whole log: when frames after it carry one salt pair
and hold commits, that is damage too, reported in the same words.
"""

from __future__ import annotations

import io
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dyna.errors import StoreDamagedError

__all__ = ["WalReport", "check_wal", "db_page_size", "read_wal"]

_MAGIC = (0x377F0682, 0x377F0683)
_HEADER = 32
_FRAME_HEADER = 24
_MASK = np.uint64(0xFFFFFFFF)
#: Reads of a -wal whose damage must agree, and the pause between them (seconds).
_READS, _PAUSE = 2, 0.05
#: Bytes of frames read and summed per numpy step: the memory a check uses, whatever the
#: size of the log (a few times this).
_CHUNK_BYTES = 256 * 1024


class WalReport:
    """What :func:`read_wal` found in a ``-wal`` file.

    Attributes
    ----------
    frames : int
        Whole frames in the file.
    valid : int
        Frames SQLite accepts (salts and cumulative checksum match, from the first on).
    first_bad : int or None
        0-based index of the first frame SQLite stops at (None: every frame is valid).
    lost : int
        Frames after ``first_bad`` that carry the header's salts: written in this
        generation of the log after the damage, dropped by SQLite with it.
    lost_commits : int
        Commit frames among ``first_bad`` and the ``lost`` ones (transactions dropped).
    header_damaged : bool
        The header fails its checksum while frames after it share their salts and hold
        commits: SQLite ignores the whole log, so every frame is counted as ``lost``
        (``first_bad`` 0).
    """

    def __init__(self, frames: int, valid: int, first_bad: int | None, lost: int,
                 lost_commits: int, header_damaged: bool = False):
        self.frames, self.valid, self.first_bad = frames, valid, first_bad
        self.lost, self.lost_commits = lost, lost_commits
        self.header_damaged = header_damaged

    @property
    def damaged(self) -> bool:
        """True when committed frames written after a damaged one would be dropped."""
        return self.lost_commits > 0

    def __repr__(self) -> str:
        return (f"WalReport(frames={self.frames}, valid={self.valid}, "
                f"first_bad={self.first_bad}, lost={self.lost}, "
                f"lost_commits={self.lost_commits}, header_damaged={self.header_damaged})")


def _weights(n: int) -> tuple[np.ndarray, list[list[int]]]:
    """The weights of a frame's ``n`` word pairs in its checksum, and ``M**n``.

    Pair ``k`` adds ``M**(n - 1 - k) @ (x0, x0 + x1)`` to the frame's contribution, so word
    ``x0`` is weighted by the sum of that power's two columns and ``x1`` by its second:
    ``words @ weights`` (shape (2n, 2), uint64) is the contribution (mod 2**32 after the
    mask)."""
    weights = np.empty((2 * n, 2), dtype=np.uint64)
    p = [[1, 0], [0, 1]]                                   # M**0
    for k in range(n - 1, -1, -1):
        weights[2 * k] = (p[0][0] + p[0][1]) & 0xFFFFFFFF, (p[1][0] + p[1][1]) & 0xFFFFFFFF
        weights[2 * k + 1] = p[0][1], p[1][1]
        p = [[(p[0][0] + p[1][0]) & 0xFFFFFFFF, (p[0][1] + p[1][1]) & 0xFFFFFFFF],
             [(p[0][0] + 2 * p[1][0]) & 0xFFFFFFFF, (p[0][1] + 2 * p[1][1]) & 0xFFFFFFFF]]
    return weights, p


def _frame_sums(frames: np.ndarray, order: str, weights: np.ndarray) -> np.ndarray:
    """Each frame's own contribution to the cumulative checksum (shape (frames, 2)) from
    its checksummed words (the first 8 bytes of its header, then its page)."""
    summed = np.concatenate([frames[:, :8], frames[:, _FRAME_HEADER:]], axis=1)
    return (summed.view(order).astype(np.uint64) @ weights) & _MASK


def _length(fh: BinaryIO) -> int:
    """The length of ``fh`` in bytes (its position is left at the end)."""
    return fh.seek(0, os.SEEK_END)


def _chunks(fh: BinaryIO, size: int) -> Iterator[np.ndarray]:
    """The whole frames of ``size`` bytes after the header, as uint8 arrays of shape
    (count, size) of at most :data:`_CHUNK_BYTES` each (a partial last frame is left
    out): the log is read once, front to back, never whole."""
    per = max(1, _CHUNK_BYTES // size)
    fh.seek(_HEADER)
    while True:
        buf = fh.read(per * size)
        count = len(buf) // size
        if count:
            yield np.frombuffer(buf, dtype=np.uint8, count=count * size).reshape(count, size)
        if count < per:
            return


def _headless(fh: BinaryIO, page: int) -> WalReport | None:
    """The frames after a header SQLite ignores (a failed checksum, a damaged magic number
    or page size), taken as frames of ``page`` bytes: a report of the frames that carry
    the first frame's salts, when some of them are commits (SQLite ignores the log, so
    their transactions are dropped); None for a fresh log (no frame, or zeros). Reads 16
    bytes of each frame's header."""
    size = _FRAME_HEADER + page
    n = (_length(fh) - _HEADER) // size
    if n == 0:
        return None
    fh.seek(_HEADER)
    salts = fh.read(16)[8:16]
    if salts == bytes(8):
        return None
    same = commits = 0
    for i in range(n):
        fh.seek(_HEADER + i * size)
        head = fh.read(16)
        if head[8:16] == salts:
            same += 1
            commits += head[4:8] != bytes(4)
    if commits == 0:
        return None
    return WalReport(n, 0, 0, same, commits, header_damaged=True)


def _valid_page(page: int) -> bool:
    return 512 <= page <= 65536 and page & (page - 1) == 0


def _unsound_header(fh: BinaryIO, page: int | None) -> WalReport | None:
    """A header that fails its checksum, or whose magic number or page size is damaged:
    SQLite ignores the whole log. Its frames are read with the database's page size
    ``page`` (when known and valid: the header's own may be the damaged field), else with
    each page size SQLite allows, keeping the one that finds most commits."""
    tries = [page] if page is not None and _valid_page(page) else \
        [2 ** k for k in range(9, 17)]
    found = [r for r in (_headless(fh, p) for p in tries) if r is not None]
    return max(found, key=lambda r: (r.lost_commits, r.lost), default=None)


def read_wal(source: bytes | BinaryIO, page: int | None = None) -> WalReport | None:
    """The frames of a ``-wal`` file checked as SQLite replays them; None when SQLite may
    ignore it without loss (shorter than its header; all zeros; a header failing its
    checksum, magic number or page size with no committed frame after it: a fresh log).

    ``source`` is the file's bytes, or the file open for binary reading (read from the
    start, once, :data:`_CHUNK_BYTES` at a time: the memory used does not grow with the
    log). ``page`` is the database's page size (bytes 16-17 of its header), used to find
    the frames after a header whose page size is damaged.

    A header that fails its checksum, or whose magic number or page size is damaged,
    before committed frames sharing one salt pair is damage
    (:attr:`WalReport.header_damaged`): SQLite would ignore every frame."""
    fh = io.BytesIO(source) if isinstance(source, (bytes, bytearray, memoryview)) \
        else source
    fh.seek(0)
    head = fh.read(_HEADER)
    if len(head) < _HEADER:
        return None
    magic, _version, size, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", head)
    if magic not in _MAGIC or not _valid_page(size):
        return _unsound_header(fh, page)
    order = ">u4" if magic & 1 else "<u4"
    s0 = s1 = 0
    for x0, x1 in np.frombuffer(head[:24], dtype=order).reshape(3, 2).tolist():
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    if (s0, s1) != (c1, c2):
        return _unsound_header(fh, page)
    return _frames_report(fh, size, order, (salt1, salt2), (c1, c2))


def _frames_report(fh: BinaryIO, page: int, order: str, salts: tuple[int, int],
                   sums: tuple[int, int]) -> WalReport:
    """The frames after a sound header, summed chunk by chunk from the header's checksum
    ``sums``: where the first one SQLite stops at is, and what it drops after it."""
    weights, mn = _weights((8 + page) // 8)
    (a, b), (c, d) = mn
    s0, s1 = sums
    n, first_bad, lost, commits = 0, None, 0, 0
    for frames in _chunks(fh, _FRAME_HEADER + page):
        lo, count = n, len(frames)
        n += count
        heads = frames[:, :_FRAME_HEADER].copy().view(">u4").reshape(count, 6)
        salted = (heads[:, 2] == salts[0]) & (heads[:, 3] == salts[1])
        if first_bad is not None:      # after the damage only the headers matter
            lost += int(salted.sum())
            commits += int((salted & (heads[:, 1] != 0)).sum())
            continue
        stored = heads[:, 4:6].tolist()
        for i, (x, y) in enumerate(_frame_sums(frames, order, weights).tolist()):
            s0, s1 = (a * s0 + b * s1 + x) & 0xFFFFFFFF, (c * s0 + d * s1 + y) & 0xFFFFFFFF
            if not salted[i] or stored[i] != [s0, s1]:
                first_bad = lo + i
                rest = salted[i + 1:]
                lost = int(rest.sum())
                commits = int(salted[i] and heads[i, 1] != 0) + \
                    int((rest & (heads[i + 1:, 1] != 0)).sum())
                break
    if first_bad is None:
        return WalReport(n, n, None, 0, 0)
    return WalReport(n, first_bad, first_bad, lost, commits if lost else 0)


def db_page_size(path) -> int | None:
    """The page size of the SQLite database at ``path`` from its header (bytes 16-17,
    big-endian; 1 means 65536), or None when it cannot be read or is not valid."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(18)
    except OSError:
        return None
    if len(head) < 18:
        return None
    page = struct.unpack(">H", head[16:18])[0]
    page = 65536 if page == 1 else page
    return page if _valid_page(page) else None


def _stamp(st: os.stat_result) -> tuple[int, int]:
    """A file's (size in bytes, mtime in ns): what changes when a writer writes it."""
    return st.st_size, st.st_mtime_ns


def check_wal(path) -> WalReport | None:
    """Check the ``-wal`` beside the store at ``path`` before SQLite opens it; returns the
    report (None: no ``-wal``, or one SQLite ignores as a whole).

    Damage is reported only when it is stable: a live writer appends a commit frame before
    it rewrites the checksums of frames it overwrote in place, so a damaged result is read
    again after a short pause and counts only when the file's (size, mtime) did not change
    across both reads and the result is the same (two reads at most, each streaming: the
    memory used does not grow with the log, :func:`read_wal`). A ``-wal`` that vanishes
    meanwhile (the last connection removed it) is no ``-wal``.

    Raises
    ------
    dyna.errors.StoreDamagedError
        Committed frames after a damaged one (:attr:`WalReport.damaged`): SQLite would
        drop them silently. Nothing is opened, written or removed.
    """
    wal = Path(f"{path}-wal")
    page = db_page_size(path)
    report, seen = None, None
    for attempt in range(_READS):
        if attempt:
            time.sleep(_PAUSE)
        try:
            with open(wal, "rb") as fh:
                stamp = _stamp(os.fstat(fh.fileno()))
                report = read_wal(fh, page)
            if report is None or not report.damaged:
                return report
            after = _stamp(os.stat(wal))
        except FileNotFoundError:
            return None
        except OSError:
            return None   # unreadable: SQLite's own open reports why
        if after == stamp and seen == (stamp, repr(report)):
            break
        seen = (after, repr(report)) if after == stamp else None
    else:
        return None       # still changing: a live writer's log, not damage
    if report is not None and report.header_damaged:
        raise StoreDamagedError(str(path), (
            f"{wal.name}: the -wal header is damaged; {report.lost} frames after it "
            f"({report.lost_commits} commits) may hold committed rows that SQLite would "
            "ignore silently; keep a copy of the file and its -wal before anything opens "
            "the store"))
    if report is not None and report.damaged:
        raise StoreDamagedError(str(path), (
            f"{wal.name}: frame {report.first_bad + 1} of {report.frames} fails its "
            f"checksum, and {report.lost} frames written after it ({report.lost_commits} "
            "commits) would be dropped silently by SQLite; keep a copy of the file and its "
            "-wal before anything opens the store"))
    return report
