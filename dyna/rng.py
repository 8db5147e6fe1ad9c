"""Per-run random streams for compiled kernels.

Each run owns a xoshiro256** generator (Blackman & Vigna, "Scrambled linear pseudorandom
number generators", ACM TOMS 2021) whose 256-bit state is drawn from
``numpy.random.SeedSequence([seed, run_index, stream])``. A run's draws therefore depend only
on the experiment seed, the run's index and the stream number -- never on which other runs
share a kernel call, a process or a machine -- and the integer arithmetic makes them
bit-identical on every platform.

The state is a ``uint64`` array of shape ``(4,)`` (one row of an ``(R, 4)`` array for R runs),
advanced in place by the ``@njit`` functions below.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Stream numbers: training (environment and behaviour policy) and greedy evaluation.
STREAM_TRAIN = 0
STREAM_EVAL = 1


def run_states(seed: int, run_indices, stream: int = STREAM_TRAIN) -> np.ndarray:
    """Initial generator states for the given runs.

    Parameters
    ----------
    seed : int
        Experiment seed, >= 0.
    run_indices : int array-like (R,)
        Global indices of the runs (0-based, >= 0).
    stream : int
        Independent stream number for the same run (:data:`STREAM_TRAIN`, :data:`STREAM_EVAL`).

    Returns
    -------
    uint64 array (R, 4)
    """
    idx = np.asarray(run_indices, dtype=np.int64).reshape(-1)
    out = np.empty((idx.size, 4), dtype=np.uint64)
    for i, r in enumerate(idx):
        ss = np.random.SeedSequence([int(seed), int(r), int(stream)])
        st = ss.generate_state(4, dtype=np.uint64)
        if not st.any():  # the all-zero state is a fixed point of xoshiro
            st[0] = 1
        out[i] = st
    return out


@njit(inline="always")
def _rotl(x, k):
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True)
def next_u64(st):
    """Advance ``st`` (uint64 (4,)) and return the next 64-bit output (xoshiro256**)."""
    result = _rotl(st[1] * np.uint64(5), 7) * np.uint64(9)
    t = st[1] << np.uint64(17)
    st[2] ^= st[0]
    st[3] ^= st[1]
    st[1] ^= st[2]
    st[0] ^= st[3]
    st[2] ^= t
    st[3] = _rotl(st[3], 45)
    return result


@njit(cache=True)
def uniform(st):
    """A float64 uniform on [0, 1) with 53 random bits."""
    return float(next_u64(st) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def randint(st, n):
    """A uniform integer in [0, n), n >= 1 (multiply-shift on 53 bits; bias < n / 2**53)."""
    return int(uniform(st) * n)


def draw_uniform(states: np.ndarray, n: int) -> np.ndarray:
    """``n`` uniforms from one generator state (uint64 (4,)), for tests and Python callers."""
    return _draw_uniform(states, n)


@njit(cache=True)
def _draw_uniform(st, n):
    out = np.empty(n)
    for i in range(n):
        out[i] = uniform(st)
    return out
