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
so a log of 1,000 frames is checked in milliseconds.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from dyna.errors import StoreDamagedError

__all__ = ["WalReport", "check_wal", "read_wal"]

_MAGIC = (0x377F0682, 0x377F0683)
_HEADER = 32
_FRAME_HEADER = 24
_MASK = np.uint64(0xFFFFFFFF)
#: Frames summed per numpy step (bounds the memory of a large log).
_CHUNK = 256


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
    """

    def __init__(self, frames: int, valid: int, first_bad: int | None, lost: int,
                 lost_commits: int):
        self.frames, self.valid, self.first_bad = frames, valid, first_bad
        self.lost, self.lost_commits = lost, lost_commits

    @property
    def damaged(self) -> bool:
        """True when committed frames written after a damaged one would be dropped."""
        return self.lost_commits > 0

    def __repr__(self) -> str:
        return (f"WalReport(frames={self.frames}, valid={self.valid}, "
                f"first_bad={self.first_bad}, lost={self.lost}, "
                f"lost_commits={self.lost_commits})")


def _powers(n: int) -> np.ndarray:
    """``P[k] = M**(n - 1 - k)`` mod 2**64 for k < n (shape (n, 2, 2), uint64)."""
    m = np.array([[1, 1], [1, 2]], dtype=np.uint64)
    out = np.empty((n, 2, 2), dtype=np.uint64)
    cur = np.eye(2, dtype=np.uint64)
    for k in range(n - 1, -1, -1):
        out[k] = cur
        cur = (m @ cur) & _MASK
    return out


def _matrix_power(p: np.ndarray, n: int) -> np.ndarray:
    """``M**n`` (mod 2**32) from ``P[0] = M**(n - 1)``."""
    m = np.array([[1, 1], [1, 2]], dtype=np.uint64)
    return (m @ p[0]) & _MASK


def _checksum_pairs(header_sum: tuple[int, int], words: np.ndarray, p: np.ndarray
                    ) -> list[tuple[int, int]]:
    """Cumulative checksums after each frame: ``words`` (frames, n, 2) are the checksummed
    words (uint64) of each frame, ``p`` the powers of :func:`_powers`."""
    n = words.shape[1]
    mn = _matrix_power(p, n)
    s = np.array(header_sum, dtype=np.uint64)
    out = []
    for lo in range(0, words.shape[0], _CHUNK):
        w = words[lo:lo + _CHUNK]
        b = np.stack([w[:, :, 0], (w[:, :, 0] + w[:, :, 1]) & _MASK], axis=2)
        contrib = np.einsum("kij,fkj->fi", p, b) & _MASK
        for c in contrib:
            s = ((mn @ s) + c) & _MASK
            out.append((int(s[0]), int(s[1])))
    return out


def read_wal(data: bytes) -> WalReport | None:
    """The frames of a ``-wal`` file's bytes checked as SQLite replays them; None when it
    holds no valid header (SQLite then ignores it: nothing of it was committed)."""
    if len(data) < _HEADER:
        return None
    magic, _version, page, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", data[:_HEADER])
    if magic not in _MAGIC or page < 512 or page > 65536 or page & (page - 1):
        return None
    order = ">u4" if magic & 1 else "<u4"
    head = np.frombuffer(data[:24], dtype=order).astype(np.uint64).reshape(3, 2)
    s0 = s1 = 0
    for x0, x1 in head.tolist():
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    if (s0, s1) != (c1, c2):
        return None
    size = _FRAME_HEADER + page
    n = (len(data) - _HEADER) // size
    if n == 0:
        return WalReport(0, 0, None, 0, 0)
    frames = np.frombuffer(data, dtype=np.uint8, count=n * size, offset=_HEADER)
    frames = frames.reshape(n, size)
    heads = frames[:, :_FRAME_HEADER].copy().view(">u4").reshape(n, 6).astype(np.int64)
    summed = np.concatenate([frames[:, :8], frames[:, _FRAME_HEADER:]], axis=1)
    words = summed.copy().view(order).astype(np.uint64).reshape(n, -1, 2)
    sums = _checksum_pairs((c1, c2), words, _powers(words.shape[1]))
    salted = (heads[:, 2] == salt1) & (heads[:, 3] == salt2)
    first_bad = None
    for i in range(n):
        if not salted[i] or (int(heads[i, 4]), int(heads[i, 5])) != sums[i]:
            first_bad = i
            break
    if first_bad is None:
        return WalReport(n, n, None, 0, 0)
    after = np.flatnonzero(salted[first_bad + 1:]) + first_bad + 1
    commits = int((heads[after, 1] != 0).sum()) + int(heads[first_bad, 1] != 0
                                                      and salted[first_bad])
    return WalReport(n, first_bad, first_bad, int(after.size), commits if after.size else 0)


def check_wal(path) -> WalReport | None:
    """Check the ``-wal`` beside the store at ``path`` before SQLite opens it; returns the
    report (None: no ``-wal``, or one SQLite ignores as a whole).

    The file is read whole, and its header read again after: a log that a live writer
    restarted meanwhile is read again (up to three times), so a restart is not taken for
    damage.

    Raises
    ------
    dyna.errors.StoreDamagedError
        Committed frames after a damaged one (:attr:`WalReport.damaged`): SQLite would
        drop them silently. Nothing is opened, written or removed.
    """
    wal = Path(f"{path}-wal")
    report = None
    for _ in range(3):
        try:
            with open(wal, "rb") as fh:
                data = fh.read()
                fh.seek(0)
                again = fh.read(_HEADER)
        except FileNotFoundError:
            return None
        except OSError:
            return None   # unreadable: SQLite's own open reports why
        if again != data[:_HEADER]:
            continue
        report = read_wal(data)
        if report is None or not report.damaged:
            return report
        if os.path.getsize(wal) == len(data):
            break
    if report is not None and report.damaged:
        raise StoreDamagedError(str(path), (
            f"{wal.name}: frame {report.first_bad + 1} of {report.frames} fails its "
            f"checksum, and {report.lost} frames written after it ({report.lost_commits} "
            "commits) would be dropped silently by SQLite; keep a copy of the file and its "
            "-wal before anything opens the store"))
    return report
