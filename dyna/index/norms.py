"""Inverse L2 norms of float32 rows: what the exact index scores with.

Squares are summed in float32, and again in float64 for a row where float32 over- or
underflowed; rows whose norm is below 1e-30 count as zero vectors (inverse 0, so they score
exactly 0), and a row with NaN or inf, or a norm beyond the float32 range, is invalid.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic

from dyna.errors import ConfigError

__all__ = ["copy_checked", "copy_with_inverse_norms", "inverse_norms", "inverse_norms_into"]

# Norms below this are treated as zero vectors (their inverse would overflow float32).
_TINY_NORM = 1e-30
_HUGE_SQ = float(np.finfo(np.float32).max) ** 2


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")
def _inv_from_sq(X, i, acc):  # pragma: no cover - compiled
    """1 / ||X[i]|| from the float32 sum of squares ``acc``; NaN if the row is invalid.

    Redoes the row in float64 only when float32 over- or underflowed; (near-)zero rows give 0.
    """
    if acc > np.float32(1e-30) and acc < np.float32(1e37):
        return np.float32(1.0) / np.sqrt(acc)
    acc64 = 0.0
    for j in range(X.shape[1]):
        w = np.float64(X[i, j])
        acc64 += w * w
    if not acc64 < _HUGE_SQ:
        return np.float32(np.nan)
    return np.float32(1.0 / np.sqrt(acc64)) if acc64 > _TINY_NORM * _TINY_NORM else np.float32(0.0)


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def inverse_norms_into(X, out):  # pragma: no cover - compiled
    """``out[i] = 1 / ||X[i]||`` for the float32 rows of ``X`` (n, d) into ``out`` (n,);
    returns the first invalid row (its ``out`` is not written) or -1."""
    for i in range(X.shape[0]):
        acc = np.float32(0.0)
        for j in range(X.shape[1]):
            v = X[i, j]
            acc += v * v
        inv = _inv_from_sq(X, i, acc)
        if inv != inv:
            return i
        out[i] = inv
    return -1


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def copy_with_inverse_norms(X, dst, base, inv_dst):  # pragma: no cover - compiled
    """``dst[base + i] = X[i]`` and ``inv_dst[base + i] = 1 / ||X[i]||`` in one pass over X.

    The same arithmetic as :func:`inverse_norms`. Returns the first invalid row (NaN, inf,
    norm beyond float32) or -1; rows up to it have been written.
    """
    for i in range(X.shape[0]):
        acc = np.float32(0.0)
        for j in range(X.shape[1]):
            v = X[i, j]
            dst[base + i, j] = v
            acc += v * v
        inv = _inv_from_sq(X, i, acc)
        if inv != inv:
            return i
        inv_dst[base + i] = inv
    return -1


# copy_checked copies and checks this many bytes at a time (they stay in the L2 cache).
_CHECK_BYTES = 65536


@intrinsic
def _memcpy_rows(typingctx, dst, src):  # pragma: no cover - compiled
    """Copy ``src`` (C-contiguous) onto the first ``len(src)`` rows of ``dst`` (C-contiguous,
    same dtype and row shape) with the C library's ``memcpy``, which moves large blocks
    faster than an element loop."""
    if dst.layout != "C" or src.layout != "C" or dst.dtype != src.dtype:
        raise numba.core.errors.TypingError("_memcpy_rows needs C-contiguous arrays of one dtype")
    sig = types.void(dst, src)

    def codegen(context, builder, signature, args):
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[1])(context, builder, args[1])
        nbytes = builder.mul(s.nitems, context.get_constant(types.intp, src.dtype.bitwidth // 8))
        cgutils.raw_memcpy(builder, d.data, s.data, nbytes, 1)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def copy_checked(X, dst, base):  # pragma: no cover - compiled
    """``dst[base + i] = X[i]``, checking that every row would get a valid inverse norm.

    X and dst are C-contiguous float32 with the same row length. The rows are copied with
    ``memcpy`` in chunks of ``_CHECK_BYTES``, each checked while it is in the L2 cache: one
    running float32 sum of squares over the batch, vectorised (NaN and inf propagate:
    ``reassoc`` and ``contract`` are the only fast-math flags). If it is finite and below
    1e37, every element is finite and every row's norm is far inside the float32 range.
    Otherwise the rows are checked one by one by :func:`inverse_norms_into`, so a large but valid
    batch is accepted. Returns the first invalid row or -1; the rows are copied either way
    (the caller discards them on error). No norm is stored: the owner computes them later
    (see :meth:`dyna.buffer.ExperienceBuffer.search`).
    """
    n = X.shape[0]
    out = dst[base:base + n]
    acc = np.float32(0.0)
    step = max(1, _CHECK_BYTES // max(1, X.shape[1] * 4))
    for a in range(0, n, step):   # chunks stay in cache between the copy and the check
        chunk = out[a:a + step]
        _memcpy_rows(chunk, X[a:a + step])
        flat = chunk.reshape(chunk.size)
        for j in range(flat.shape[0]):
            acc += flat[j] * flat[j]
    if acc < np.float32(1e37):   # False for NaN and inf
        return -1
    return inverse_norms_into(X, np.empty(n, np.float32))


def inverse_norms(vectors: np.ndarray, field: str = "vectors") -> np.ndarray:
    """Inverse L2 norms of the rows of a float32 matrix; 0 for zero rows.

    Squares are summed in float32, and again in float64 for a row where float32 over- or
    underflowed. Rows whose norm is below 1e-30 count as zero vectors (inverse 0, so they
    score exactly 0).

    Parameters
    ----------
    vectors : numpy.ndarray
        float32, shape ``(n, d)``.
    field : str
        Name used in errors.

    Returns
    -------
    numpy.ndarray
        float32, shape ``(n,)``.

    Raises
    ------
    ConfigError
        If a row holds NaN or inf, or its norm exceeds the float32 range (the row is named).
    """
    out = np.empty(vectors.shape[0], dtype=np.float32)
    bad = inverse_norms_into(vectors, out)
    if bad >= 0:
        raise ConfigError(f"{field}[{bad}]", vectors[bad][:4].tolist(),
                          "must be finite with a norm within the float32 range")
    return out
