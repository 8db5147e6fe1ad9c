"""Seeding helpers for :class:`numpy.random.SeedSequence` (numpy only, no numba: the
environments import this).
"""

from __future__ import annotations

import numpy as np

from dyna.errors import ConfigError

__all__ = ["seed_words", "sequence_words"]


def seed_words(*values: int) -> np.ndarray:
    """The 32-bit words :class:`numpy.random.SeedSequence` makes of ``entropy=[v0, v1,
    ...]``: each non-negative integer as its little-endian 32-bit words (at least one, so
    0 is ``[0]``), concatenated. ``SeedSequence(seed_words(*vs), spawn_key=k)`` is the
    same sequence as ``SeedSequence(list(vs), spawn_key=k)`` (the same ``generate_state``
    words, so the same generators) but skips numpy's conversion of Python integers,
    about 6.5 us of the 11 us a SeedSequence takes to build; the per-episode streams of
    the agent tasks build four per episode.

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
