"""Inverse L2 norms of float32 rows: what the exact index scores with.

Squares are summed in float32, and again in float64 for a row where float32 over- or
underflowed; rows whose norm is below 1e-30 count as zero vectors (inverse 0, so they score
exactly 0), and a row with NaN or inf, or a norm beyond the float32 range, is invalid.
"""

from __future__ import annotations

import numba
import numpy as np

from dyna.errors import ConfigError

__all__ = ["copy_with_inverse_norms", "inverse_norms", "inverse_norms_into"]

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
