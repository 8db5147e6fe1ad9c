"""Decisions at a threshold, computed without floating-point rounding.

A decision that compares a quantity with a threshold has a documented tie rule (a mean
equal to its threshold is not below it). With floats the rule can fail on inputs that tie
exactly: ``0.3 / (0.3 + 0.1)`` is ``0.7499999999999999`` in binary floating point, below a
threshold of ``0.75`` that the mean equals. Here every number is taken as the exact rational
it stands for (:func:`as_fraction`: a float as its shortest decimal text, the number that
was written) and the comparison is made on those, so a tie is a tie. Used by escalation
(:class:`dyna.escalation.rules.ThresholdPolicy`), retirement
(:func:`dyna.loops.retirement.retirement_reason`) and grading
(:func:`dyna.loops.review.safeguards.grade`), novelty and near-duplicates (a Jaccard
similarity is a ratio of integer counts, :func:`dyna.loops._text.jaccard_ratio`, compared
with :func:`at_least`) and the deletion rule of
:class:`dyna.agents.baselines.selective.SelectiveAddDelete` (a failure rate, compared with
:func:`above`). A quantity that is irrational in general (a Beta quantile, a cosine) is
compared as a float by its caller.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

import numpy as np

from dyna.errors import ConfigError

__all__ = ["above", "as_fraction", "at_least", "mean_below", "means_below",
           "weighted_sum_below"]


def as_fraction(x) -> Fraction:
    """``x`` as the exact rational number it stands for.

    An int or a :class:`fractions.Fraction` is taken as is; a float (numpy's too) as its
    shortest decimal text, the number that was written: ``0.8`` is 4/5, not the binary
    double 0.8000000000000000444..., so ``8 / 10`` against a threshold of ``0.8`` is a tie.

    Raises
    ------
    ConfigError
        A bool, a non-number, NaN or an infinity (field ``value``).
    """
    if isinstance(x, Fraction):
        return x
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise ConfigError("value", x, "must be a number")
    if isinstance(x, (int, np.integer)):
        return Fraction(int(x))
    f = float(x)
    if not math.isfinite(f):
        raise ConfigError("value", f, "must be finite")
    if f.is_integer() and abs(f) <= _EXACT_INTEGERS:
        return Fraction(int(f))         # a count: its decimal text is this integer
    return Fraction(repr(f))


#: Every integer up to 2**53 in magnitude is a float whose shortest text is that integer.
_EXACT_INTEGERS = 2.0 ** 53


def mean_below(a, b, threshold) -> bool:
    """True when the Beta mean ``a / (a + b)`` is below ``threshold``, computed exactly
    (:func:`as_fraction` of each, cross-multiplied: ``a < threshold * (a + b)``, with
    ``a + b > 0``). A mean equal to the threshold is not below it.

    >>> mean_below(8.0, 2.0, 0.8), mean_below(0.3, 0.1, 0.75), mean_below(3, 1, 0.76)
    (False, False, True)
    """
    fa, fb, ft = as_fraction(a), as_fraction(b), as_fraction(threshold)
    # a < t (a + b) with a = p/q, b = r/s, t = u/v, times q s v > 0: p s v < u (p s + r q)
    p, q, r, s, u, v = (fa.numerator, fa.denominator, fb.numerator, fb.denominator,
                        ft.numerator, ft.denominator)
    return p * s * v < u * (p * s + r * q)


#: Relative distance from the threshold within which :func:`means_below` decides exactly:
#: far above the few ulps by which the float comparison can differ from the exact one.
NEAR_TIE = 1e-9


def means_below(a, b, threshold) -> np.ndarray:
    """:func:`mean_below` element by element over arrays: the float comparison
    ``a < threshold * (a + b)`` where it is far from a tie, the exact one (:func:`mean_below`)
    where the two sides lie within :data:`NEAR_TIE` of each other, relative to the right
    side. ``a`` is exact and the float right side differs from the exact one by a few ulps
    of itself, so the result is the exact decision everywhere; only the near ties pay for
    rational arithmetic.

    Parameters
    ----------
    a, b : array_like of float
        Beta shapes, broadcast together; ``a + b > 0``.
    threshold : float

    Returns
    -------
    ndarray of bool, the broadcast shape of ``a`` and ``b``

    Raises
    ------
    ConfigError
        A shape or the threshold that is not finite (as :func:`as_fraction`).

    >>> means_below([8.0, 0.3, 3.0], [2.0, 0.1, 1.0], 0.8).tolist()
    [False, True, True]
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        a, b = np.broadcast_arrays(a, b)
    exact_t = as_fraction(threshold)
    with np.errstate(over="ignore", invalid="ignore"):
        rhs = float(exact_t) * (a + b)
        below = np.array(a < rhs, dtype=bool)      # an array even for scalar inputs
        # exact where the sides are close, and where they are not finite (the comparison
        # with NaN is False): a NaN or infinite shape (mean_below raises, naming it) or a
        # sum that overflows
        exact = ~(np.abs(a - rhs) > NEAR_TIE * np.abs(rhs))
    flat, flat_a, flat_b = below.reshape(-1), a.reshape(-1), b.reshape(-1)
    for i in np.flatnonzero(exact.reshape(-1)):
        flat[i] = mean_below(flat_a[i], flat_b[i], exact_t)
    return below


def weighted_sum_below(terms: Iterable[tuple[float, float]], threshold) -> bool:
    """True when ``sum(w * x for w, x in terms)`` is below ``threshold``, computed exactly
    (:func:`as_fraction` of each number). A sum equal to the threshold is not below it.

    >>> weighted_sum_below([(0.6, 0.0), (0.25, 0.3), (0.15, 1.0)], 0.225)
    False
    """
    return sum(as_fraction(w) * as_fraction(x) for w, x in terms) < as_fraction(threshold)


def at_least(x, threshold) -> bool:
    """True when ``x >= threshold``, computed exactly (:func:`as_fraction` of each): a
    value equal to its threshold is at least it.

    >>> at_least(Fraction(3, 10), 0.3), at_least(Fraction(29, 100), 0.3)
    (True, False)
    """
    return as_fraction(x) >= as_fraction(threshold)


def above(x, threshold) -> bool:
    """True when ``x > threshold``, computed exactly (:func:`as_fraction` of each): a value
    equal to its threshold is not above it.

    >>> above(Fraction(7, 10), 0.7), above(Fraction(71, 100), 0.7)
    (False, True)
    """
    return as_fraction(x) > as_fraction(threshold)
