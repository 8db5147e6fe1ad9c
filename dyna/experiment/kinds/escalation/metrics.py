"""Kind ``escalation``: selective-prediction and bandit metrics (numpy only; the package
docstring defines each). Used by the job and by the report."""

from __future__ import annotations

import math

import numpy as np

from dyna.errors import ConfigError

__all__ = ["aurc", "e_aurc", "fit_log_growth", "optimal_aurc", "oracle_actions",
           "recovery_steps", "risk_coverage"]


# =========================================================================== metrics

def risk_coverage(scores, losses) -> tuple[np.ndarray, np.ndarray]:
    """Risk-coverage curve with ties averaged over random orders (module docstring).

    Parameters
    ----------
    scores : array_like of float, shape (n,)
        Confidence of each task (higher: accepted first).
    losses : array_like of float, shape (n,)
        Loss of accepting each task (1 = the agent fails, 0 = it succeeds).

    Returns
    -------
    coverage, risk : ndarray of float64, shape (n,)
        ``coverage[k-1] = k / n`` and the expected risk of the first k tasks.

    Raises
    ------
    ConfigError
        Mismatched shapes, empty input or non-finite values.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    loss = np.asarray(losses, dtype=np.float64).reshape(-1)
    if s.shape != loss.shape:
        raise ConfigError("losses", loss.shape, f"must match scores {s.shape}")
    n = s.size
    if n == 0:
        raise ConfigError("scores", s.shape, "need at least one task")
    if not (np.isfinite(s).all() and np.isfinite(loss).all()):
        raise ConfigError("scores", "non-finite", "scores and losses must be finite")
    order = np.argsort(-s, kind="stable")
    s_sorted, l_sorted = s[order], loss[order]
    starts = np.flatnonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]])
    sizes = np.diff(np.r_[starts, n])
    block_loss = np.add.reduceat(l_sorted, starts)
    before = np.r_[0.0, np.cumsum(block_loss)[:-1]]
    k = np.arange(1, n + 1, dtype=np.float64)
    block = np.repeat(np.arange(starts.size), sizes)
    j = k - starts[block]  # position within the block, 1..m
    expected = before[block] + j * block_loss[block] / sizes[block]
    return k / n, expected / k


def aurc(scores, losses) -> float:
    """Area under the risk-coverage curve: mean risk over coverages k/n, k = 1..n.

    Ties in ``scores`` are averaged over random orders (:func:`risk_coverage`); a constant
    score gives the mean loss.
    """
    return float(np.mean(risk_coverage(scores, losses)[1]))


def optimal_aurc(losses) -> float:
    """AURC of the perfect score (every success before every failure).

    With n tasks and s successes, ``(1/n) * sum_{k=s+1..n} (k - s) / k``.
    """
    loss = np.asarray(losses, dtype=np.float64).reshape(-1)
    return aurc(-loss, loss)


def e_aurc(scores, losses) -> float:
    """Excess AURC: ``aurc(scores, losses) - optimal_aurc(losses)`` (Geifman et al. 2019)."""
    return aurc(scores, losses) - optimal_aurc(losses)


def oracle_actions(p, c_escalate, c_failure, c_act=0.0) -> np.ndarray:
    """The type oracle's actions: act iff ``c_act + (1 - p) c_failure <= c_escalate``.

    Parameters
    ----------
    p : array_like of float64, shape (..., T)
        True success rate of each task's type.
    c_escalate, c_failure : float or array_like broadcastable to ``p``
    c_act : float or array_like broadcastable to ``p``

    Returns
    -------
    ndarray of bool, shape of ``p``
    """
    p = np.asarray(p, dtype=np.float64)
    return np.asarray(c_act) + (1.0 - p) * np.asarray(c_failure) <= np.asarray(c_escalate)


def recovery_steps(agreement, change_at: int, *, window: int, tolerance: float = 0.05,
                   end: int | None = None) -> int | None:
    """Tasks after a change point until agreement with the oracle is back (module docstring).

    Parameters
    ----------
    agreement : array_like of float64, shape (T,)
        Fraction of runs agreeing with the type oracle at each step.
    change_at : int
        First step (0-based) of the new regime; needs ``window <= change_at``.
    window : int
        Window length (steps).
    tolerance : float
        Allowed shortfall against the pre-change level.
    end : int, optional
        End of the regime (next change point or T).

    Returns
    -------
    int or None
        Steps j after the change, or None if agreement does not come back before ``end``.
    """
    g = np.asarray(agreement, dtype=np.float64)
    end = g.size if end is None else int(end)
    window = int(window)
    if change_at < window or change_at + window > end:
        return None
    level = g[change_at - window:change_at].mean()
    csum = np.r_[0.0, np.cumsum(g[change_at:end])]
    means = (csum[window:] - csum[:-window]) / window
    ok = np.flatnonzero(means >= level - tolerance)
    return int(ok[0]) if ok.size else None


def fit_log_growth(t, regret) -> dict:
    """Fit ``R(t) = alpha + beta ln t`` and ``R(t) = alpha' + gamma t`` by least squares.

    Parameters
    ----------
    t : array_like of float, shape (m,)
        Steps (>= 1).
    regret : array_like of float, shape (m,)
        Mean cumulative regret at those steps.

    Returns
    -------
    dict
        ``slope_log`` (beta), ``r2_log``, ``slope_linear`` (gamma), ``r2_linear``, and
        ``exponent``, the slope of ``ln R`` on ``ln t`` (1 for linear growth, ~0 for
        logarithmic; NaN if some R <= 0).
    """
    t = np.asarray(t, dtype=np.float64)
    r = np.asarray(regret, dtype=np.float64)

    def fit(x, y):
        A = np.c_[np.ones_like(x), x]
        coef, *_ = np.linalg.lstsq(A, y, rcond=None)
        resid = y - A @ coef
        ss = ((y - y.mean()) ** 2).sum()
        return float(coef[1]), float(1.0 - (resid ** 2).sum() / ss) if ss > 0 else math.nan

    b_log, r2_log = fit(np.log(t), r)
    b_lin, r2_lin = fit(t, r)
    exponent = fit(np.log(t), np.log(r))[0] if (r > 0).all() else math.nan
    out = {"slope_log": b_log, "r2_log": r2_log, "slope_linear": b_lin,
           "r2_linear": r2_lin, "exponent": exponent}
    out.update(growth_aic(t, r))
    return out


#: Growth models of cumulative regret compared by :func:`growth_aic`: name -> x(t).
GROWTH_MODELS = {"log": np.log, "sqrt": np.sqrt, "linear": lambda t: t}


def growth_aic(t, regret) -> dict:
    """Which of ``R(t) = a + b log t``, ``a + b sqrt(t)`` and ``a + b t`` fits the regret
    curve best, by AIC (Akaike 1974) under Gaussian errors: ``m ln(RSS / m) + 2k`` with
    ``k = 3`` (a, b and the error variance) for each model, so the ranking is by residual
    sum of squares and the differences are comparable. Logarithmic growth is what a
    consistent bandit policy achieves (Lai & Robbins 1985); linear growth means the policy
    keeps paying a fixed regret per task: it is flagged.

    Parameters
    ----------
    t : array_like of float, shape (m,), m >= 3
        Steps (>= 1).
    regret : array_like of float, shape (m,)

    Returns
    -------
    dict
        ``aic_log``, ``aic_sqrt``, ``aic_linear`` (NaN with fewer than 3 points), ``growth``
        (the name of the best model, ties to the slower growth) and ``linear_growth``
        (True when the linear model is best and its slope is positive).
    """
    t = np.asarray(t, dtype=np.float64)
    r = np.asarray(regret, dtype=np.float64)
    m = t.size
    out = {}
    for name, f in GROWTH_MODELS.items():
        if m < 3:
            out[f"aic_{name}"] = math.nan
            continue
        A = np.c_[np.ones(m), f(t)]
        coef, *_ = np.linalg.lstsq(A, r, rcond=None)
        rss = float(((r - A @ coef) ** 2).sum())
        out[f"aic_{name}"] = (m * math.log(max(rss, 1e-300) / m) + 2 * 3)
        out[f"_slope_{name}"] = float(coef[1])
    aics = [(out[f"aic_{n}"], i, n) for i, n in enumerate(GROWTH_MODELS)]
    if any(math.isnan(a) for a, _, _ in aics):
        out.update(growth=None, linear_growth=False)
    else:
        best = min(aics)[2]
        out.update(growth=best, linear_growth=best == "linear"
                   and out["_slope_linear"] > 0)
    return {k: v for k, v in out.items() if not k.startswith("_")}
