"""Seeding helpers for :class:`numpy.random.SeedSequence` (numpy only, no numba: the
environments import this).
"""

from __future__ import annotations

import numpy as np

from dyna.errors import ConfigError

__all__ = ["seed_words", "sequence_words", "spawned_states", "spawned_uniforms"]


def seed_words(*values: int) -> np.ndarray:
    """The 32-bit words :class:`numpy.random.SeedSequence` makes of ``entropy=[v0, v1,
    ...]``: each non-negative integer as its little-endian 32-bit words (at least one, so
    0 is ``[0]``), concatenated. ``SeedSequence(seed_words(*vs), spawn_key=k)`` is the
    same sequence as ``SeedSequence(list(vs), spawn_key=k)`` (the same ``generate_state``
    words, so the same generators) but skips numpy's conversion of Python integers,
    about 6.5 us of the 11 us a SeedSequence takes to build. Many streams that differ
    only in their last spawn-key element: :func:`spawned_uniforms`, :func:`spawned_states`.

    Parameters
    ----------
    *values : int
        Each >= 0 (any size).

    Returns
    -------
    numpy.ndarray of uint32, shape (n_words,)

    Raises
    ------
    ConfigError
        A value that is not a non-negative integer (field ``seed``).
    """
    words: list[int] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ConfigError("seed", v, "must be a non-negative integer")
        v = int(v)
        while True:
            words.append(v & 0xFFFFFFFF)
            v >>= 32
            if not v:
                break
    return np.array(words, dtype=np.uint32)


def sequence_words(ss: np.random.SeedSequence) -> tuple[np.ndarray, tuple]:
    """``(words, spawn_key)`` such that ``SeedSequence(words, spawn_key=spawn_key + k)``
    is ``SeedSequence(ss.entropy, spawn_key=ss.spawn_key + k)`` for every tuple ``k``
    (:func:`seed_words` of ``ss.entropy``, an integer or a sequence of integers).

    Raises
    ------
    ConfigError
        ``ss.entropy`` is not a non-negative integer or a sequence of them.
    """
    e = ss.entropy
    words = seed_words(e) if isinstance(e, (int, np.integer)) else seed_words(*e)
    return words, tuple(ss.spawn_key)


# ---------------------------------------------------------------------------------------
# Per-index streams, many at once.
#
# ``Generator(PCG64(SeedSequence(words, spawn_key=key + (i,)))).random(n)`` for a run of
# indices ``i``, computed for all of them at once with numpy's integer arithmetic: the same
# numbers (numpy's SeedSequence hashing, ``generate_state(4, uint64)``, O'Neill's PCG64
# seeding and XSL-RR output, and ``random``'s 53-bit doubles, as numpy/random/
# bit_generator.pyx, _pcg64.pyx and pcg64.h implement them), about 40 times faster than
# building the three numpy objects per index (the agent tasks build three per episode).
# Only the index's own word differs between the streams, and it is the last word of the
# entropy SeedSequence mixes, so everything before it is hashed once, as plain integers.

_M32 = 0xFFFFFFFF
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875       # SeedSequence.mix_entropy's hash
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED       # SeedSequence.generate_state's hash
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_POOL = 4                                        # SeedSequence's default pool size
_PCG_MULT_HI, _PCG_MULT_LO = 2549297995355413924, 4865540595714422341
#: Streams computed at once by the callers of :func:`spawned_uniforms` and
#: :func:`spawned_states` (the agent tasks' per-episode draws); the values do not depend on it.
BLOCK = 256


class _Hash:
    """SeedSequence's running hash constant (``hashmix``), on plain integers."""

    def __init__(self, init: int, mult: int):
        self.h, self.mult = init, mult

    def pairs(self):
        """Every following ``(before, after)`` pair of :meth:`consts`, without end."""
        while True:
            yield self.consts()

    def consts(self) -> tuple[int, int]:
        """The constant before and after the next step (``hashmix`` uses both)."""
        old = self.h
        self.h = (self.h * self.mult) & _M32
        return old, self.h

    def mix(self, value: int) -> int:
        old, new = self.consts()
        v = ((value ^ old) * new) & _M32
        return v ^ (v >> 16)


def _mix(x: int, y: int) -> int:
    r = (_MIX_L * x - _MIX_R * y) & _M32
    return r ^ (r >> 16)


def _mul_add_128(hi, lo, inc_hi, inc_lo):
    """``(hi, lo) * PCG64's multiplier + (inc_hi, inc_lo)`` modulo 2**128, each a uint64
    array (one 128-bit number per lane, high and low words)."""
    m32 = np.uint64(_M32)
    s32 = np.uint64(32)
    a0, a1 = lo & m32, lo >> s32
    b0, b1 = np.uint64(_PCG_MULT_LO & _M32), np.uint64(_PCG_MULT_LO >> 32)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> s32) + (p01 & m32) + (p10 & m32)
    new_lo = (p00 & m32) | (mid << s32)
    new_hi = (p11 + (p01 >> s32) + (p10 >> s32) + (mid >> s32)
              + lo * np.uint64(_PCG_MULT_HI) + hi * np.uint64(_PCG_MULT_LO))
    out_lo = new_lo + inc_lo
    out_hi = new_hi + inc_hi + (out_lo < new_lo).astype(np.uint64)
    return out_hi, out_lo


def _check_run(words, start, count) -> tuple[list[int], int, int]:
    """The entropy words as Python ints, and ``start`` and ``count`` checked."""
    for field, v in (("start", start), ("count", count)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not \
                0 <= v <= 2 ** 32:
            raise ConfigError(field, v, "must be an integer in [0, 2**32]")
    start, count = int(start), int(count)
    if start + count > 2 ** 32:
        raise ConfigError("count", count, f"start + count must be <= 2**32 (start {start})")
    arr = np.asarray(words)
    if arr.dtype != np.uint32 or arr.ndim != 1:
        raise ConfigError("words", words, "must be a 1-d uint32 array (seed_words)")
    return arr.tolist(), start, count


def _seeded(run: list[int], key, start: int, count: int):
    """The PCG64 states right after seeding, one lane per index: ``(hi, lo, inc_hi,
    inc_lo)``, uint64 arrays of shape (count,); ``run`` the entropy words (checked)."""
    run = list(run)
    spawn = [int(w) for w in seed_words(*key)] if key else []
    if len(run) < _POOL:                       # there is a spawn key: padded to the pool
        run += [0] * (_POOL - len(run))
    fixed = run + spawn                        # the index's word comes after these
    ha = _Hash(_INIT_A, _MULT_A)
    pool = [ha.mix(fixed[i]) for i in range(_POOL)]
    for s in range(_POOL):
        for d in range(_POOL):
            if s != d:
                pool[d] = _mix(pool[d], ha.mix(pool[s]))
    for s in range(_POOL, len(fixed)):
        for d in range(_POOL):
            pool[d] = _mix(pool[d], ha.mix(fixed[s]))
    # the index's word, one lane per index (uint32 arithmetic wraps as in the C code)
    idx = np.arange(start, start + count, dtype=np.uint64).astype(np.uint32)
    s16 = np.uint32(16)
    lanes = []
    for d in range(_POOL):
        old, new = ha.consts()
        h = (idx ^ np.uint32(old)) * np.uint32(new)
        h ^= h >> s16
        r = np.uint32((_MIX_L * pool[d]) & _M32) - np.uint32(_MIX_R) * h
        lanes.append(r ^ (r >> s16))
    return _pcg_seeded(lanes)


def _pcg_seeded(lanes: list):
    """The PCG64 states right after seeding from SeedSequence pools, one lane per
    stream: ``lanes`` the four mixed pool words (uint32 arrays of one shape);
    ``(hi, lo, inc_hi, inc_lo)``, uint64 arrays (``generate_state(4, uint64)``, then
    O'Neill's srandom)."""
    s16 = np.uint32(16)
    hb = _Hash(_INIT_B, _MULT_B)
    w = []
    for k in range(8):                         # generate_state(4, uint64): 8 words
        old, new = hb.consts()
        v = (lanes[k % _POOL] ^ np.uint32(old)) * np.uint32(new)
        w.append((v ^ (v >> s16)).astype(np.uint64))
    s32, one = np.uint64(32), np.uint64(1)
    seed_hi, seed_lo = w[0] | (w[1] << s32), w[2] | (w[3] << s32)
    seq_hi, seq_lo = w[4] | (w[5] << s32), w[6] | (w[7] << s32)
    inc_hi = (seq_hi << one) | (seq_lo >> np.uint64(63))
    inc_lo = (seq_lo << one) | one
    # pcg64 srandom: state = 0; step; state += seed; step
    lo = inc_lo + seed_lo
    hi = inc_hi + seed_hi + (lo < inc_lo).astype(np.uint64)
    hi, lo = _mul_add_128(hi, lo, inc_hi, inc_lo)
    return hi, lo, inc_hi, inc_lo


def spawned_uniforms(words, key, start: int, count: int, n: int) -> np.ndarray:
    """Row ``j``: ``Generator(PCG64(SeedSequence(words, spawn_key=key + (start + j,))))
    .random(n)``, for ``j`` in ``range(count)``; the same float64 values, bit for bit
    (tests/test_seeding.py compares them with numpy's own on thousands of streams).

    Parameters
    ----------
    words : array_like of uint32, shape (n_words,)
        The entropy as its 32-bit words (:func:`seed_words`, :func:`sequence_words`).
    key : tuple of int
        The spawn key before the index (each >= 0).
    start, count : int
        The first index and how many (``0 <= start``, ``start + count <= 2**32``).
    n : int
        Uniforms per stream, >= 0.

    Returns
    -------
    numpy.ndarray of float64, shape (count, n)
        Each in ``[0, 1)``.

    Raises
    ------
    ConfigError
        ``start``, ``count`` or ``n`` out of range (field named), ``words`` not a 1-d
        uint32 array (field ``words``), or a key element that is not a non-negative
        integer (field ``seed``).
    """
    run, start, count = _check_run(words, start, count)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ConfigError("n", n, "must be an integer >= 0")
    return _pcg_uniforms(*_seeded(run, key, start, count), n)


def _pcg_uniforms(hi, lo, inc_hi, inc_lo, n: int) -> np.ndarray:
    """Row ``j``: the first ``n`` ``random()`` doubles of the PCG64 whose seeded state
    is lane ``j`` of ``(hi, lo, inc_hi, inc_lo)`` (:func:`_pcg_seeded`); shape
    ``(lanes, n)``, float64."""
    out = np.empty((hi.shape[0], n), dtype=np.float64)
    s58, s11, m63 = np.uint64(58), np.uint64(11), np.uint64(63)
    for j in range(n):
        hi, lo = _mul_add_128(hi, lo, inc_hi, inc_lo)
        v = hi ^ lo
        rot = hi >> s58                         # state >> 122
        v = (v >> rot) | (v << ((np.uint64(64) - rot) & m63))
        out[:, j] = (v >> s11).astype(np.float64) * (1.0 / 9007199254740992.0)
    return out


def spawned_states(words, key, start: int, count: int) -> list[tuple[int, int]]:
    """Item ``j``: ``(state, inc)`` of ``PCG64(SeedSequence(words, spawn_key=key +
    (start + j,)))`` as just seeded (its ``state["state"]``), for ``j`` in
    ``range(count)``. Set on a PCG64 (with ``has_uint32`` 0), they make it draw exactly
    what the freshly seeded one draws (tests/test_seeding.py), at a tenth of the cost of
    building one.

    Parameters
    ----------
    words, key, start, count
        As in :func:`spawned_uniforms`.

    Returns
    -------
    list of (int, int)
        128-bit integers.

    Raises
    ------
    ConfigError
        As :func:`spawned_uniforms`.
    """
    run, start, count = _check_run(words, start, count)
    hi, lo, inc_hi, inc_lo = _seeded(run, key, start, count)
    return [(h << 64 | low, ih << 64 | il) for h, low, ih, il in
            zip(hi.tolist(), lo.tolist(), inc_hi.tolist(), inc_lo.tolist())]
