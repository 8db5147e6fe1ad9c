"""Retirement on contradiction: the rule both stores apply after a failure.

A skill (:meth:`dyna.loops.skills.SkillLibrary.record_outcome`) or a memory fact
(:meth:`dyna.loops.memory.MemoryStore.record_outcomes`) keeps a Beta posterior
``Beta(a, b)`` of its competence, the probability that following it works. After a
failure, an entry with at least ``min_uses`` outcomes whose posterior mean ``a / (a + b)``
is below ``below`` is retired: taken out of what is matched or retrieved, kept aside. The
mean is compared exactly (:func:`dyna.ties.mean_below`): a mean equal to ``below``
is not below it, and the entry stays.
Requiring ``min_uses`` outcomes keeps a single unlucky run from retiring a fresh entry.
Beta-Bernoulli updating: Gelman et al., *Bayesian Data Analysis* (3rd ed.), section 2.4.
"""

from __future__ import annotations

from dyna.ties import mean_below

__all__ = ["retirement_reason"]


def retirement_reason(a: float, b: float, uses: int, below: float | None,
                      min_uses: int) -> str | None:
    """Why an entry that has just failed is retired, or None when it stays.

    Parameters
    ----------
    a, b : float
        Its Beta posterior after the failure (both > 0).
    uses : int
        Its outcomes so far, the failure included.
    below : float or None
        Retire when the posterior mean ``a / (a + b)`` is below this; None: never.
    min_uses : int
        Retire only with at least this many outcomes.

    Returns
    -------
    str or None
        ``"contradicted: competence mean 0.200 < 0.4 after a failure"`` (the mean to three
        decimals), or None.

    Examples
    --------
    Uniform prior ``Beta(1, 1)``, three failures and no success:

    >>> retirement_reason(1.0, 4.0, 3, 0.4, 3)
    'contradicted: competence mean 0.200 < 0.4 after a failure'
    >>> retirement_reason(1.0, 3.0, 2, 0.4, 3) is None   # too few outcomes yet
    True
    """
    if below is None or uses < min_uses:
        return None
    if mean_below(a, b, below):
        mean = a / (a + b)
        return f"contradicted: competence mean {mean:.3f} < {below} after a failure"
    return None
