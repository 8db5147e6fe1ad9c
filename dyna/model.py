"""The transition-table world model of tabular Dyna (Sutton & Barto 2018, Section 8.2).

The model keeps, for every state-action pair that was tried, the *counts* of each distinct
outcome ``(s', r, terminated)``. A deterministic environment is thus modelled exactly and a
stochastic one by its observed distribution ``p̂(s', r | s, a) = n(s, a, s', r) / n(s, a)``
(the "sample model" of Section 8.1 built from counts; keeping only the last outcome, as the
book's deterministic Dyna-Q box does, would treat the latest slip on FrozenLake as certain).
It also records which pairs were observed, in which order states were first visited, when
each pair was last tried (for Dyna-Q+'s ``tau``, Section 8.3) and, for prioritized sweeping
(Section 8.4), the predecessors of every state.

The arrays of one run form a tuple (see :func:`new_model`); the ``@njit`` functions here
read and update it and are what the compiled agent kernels call. :class:`TabularModel`
holds the same arrays with a leading run axis for use from Python.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dyna.errors import ConfigError
from dyna.rng import randint

# Positions inside a model tuple, in order.
# nxt int32 (S,A,K); rew float64 (S,A,K); term bool (S,A,K); cnt int64 (S,A,K)
# nout int32 (S,A); total int64 (S,A); last int64 (S,A)
# obs_s int32 (S,); obs_a int32 (S,A); n_obs_a int32 (S,)
# pred_head int32 (S,); pred_next int32 (S*A*K,); pred_sa int32 (S*A*K,)
# info int64 (3,): [n observed states, n predecessor links, overflow flag]


def new_model(n_states: int, n_actions: int, max_outcomes: int, runs: int | None = None):
    """Allocate an empty model.

    Parameters
    ----------
    n_states, n_actions : int
        S and A.
    max_outcomes : int
        K, the most distinct outcomes ``(s', r, terminated)`` kept per (s, a); for a table
        built from an environment, its largest outcome count is a safe bound.
    runs : int or None
        With an int R every array gets a leading run axis of length R.

    Returns
    -------
    tuple of 14 numpy arrays (layout in this module's source).
    """
    S, A, K = int(n_states), int(n_actions), int(max_outcomes)
    if S < 1 or A < 1 or K < 1:
        raise ConfigError("model shape", (S, A, K), "n_states, n_actions and max_outcomes must be >= 1")
    lead = () if runs is None else (int(runs),)
    return (
        np.zeros(lead + (S, A, K), np.int32),
        np.zeros(lead + (S, A, K), np.float64),
        np.zeros(lead + (S, A, K), np.bool_),
        np.zeros(lead + (S, A, K), np.int64),
        np.zeros(lead + (S, A), np.int32),
        np.zeros(lead + (S, A), np.int64),
        np.full(lead + (S, A), -1, np.int64),
        np.zeros(lead + (S,), np.int32),
        np.zeros(lead + (S, A), np.int32),
        np.zeros(lead + (S,), np.int32),
        np.full(lead + (S,), -1, np.int32),
        np.zeros(lead + (S * A * K,), np.int32),
        np.zeros(lead + (S * A * K,), np.int32),
        np.zeros(lead + (3,), np.int64),
    )


@njit(cache=True)
def model_reset(m):
    """Empty a model in place (for reuse by the next run)."""
    m[0][:] = 0
    m[1][:] = 0.0
    m[2][:] = False
    m[3][:] = 0
    m[4][:] = 0
    m[5][:] = 0
    m[6][:] = -1
    m[7][:] = 0
    m[8][:] = 0
    m[9][:] = 0
    m[10][:] = -1
    m[11][:] = 0
    m[12][:] = 0
    m[13][:] = 0


@njit(cache=True)
def _link_predecessor(m, s, a, s2):
    """Add the link (s, a) -> s2 to s2's predecessor list unless it is there already."""
    pred_head, pred_next, pred_sa, info = m[10], m[11], m[12], m[13]
    sa = s * m[0].shape[1] + a
    e = pred_head[s2]
    while e >= 0:
        if pred_sa[e] == sa:
            return True
        e = pred_next[e]
    e = info[1]
    if e >= pred_sa.shape[0]:
        info[2] = 1
        return False
    pred_sa[e] = sa
    pred_next[e] = pred_head[s2]
    pred_head[s2] = e
    info[1] = e + 1
    return True


@njit(cache=True)
def model_update(m, s, a, s2, r, term, t, keep_last=False):
    """Record one real transition ``(s, a) -> (s2, r, term)`` seen at total step ``t``.

    By default every distinct outcome of (s, a) is counted. With ``keep_last`` the pair
    keeps only its latest outcome -- the book's deterministic model ``Model(S, A) <- R, S'``
    (Section 8.2), which follows a changing environment (Section 8.3) at once.
    Invariant: ``sum_k cnt[s, a, k] == total[s, a]``.

    Returns False (and sets the overflow flag ``info[2]``) when (s, a) already has K
    distinct outcomes and this is a new one; the transition is then not recorded.
    """
    nxt, rew, trm, cnt, nout, total, last = m[0], m[1], m[2], m[3], m[4], m[5], m[6]
    obs_s, obs_a, n_obs_a, info = m[7], m[8], m[9], m[13]
    n = nout[s, a]
    k = -1
    for j in range(n):
        if nxt[s, a, j] == s2 and rew[s, a, j] == r and trm[s, a, j] == term:
            k = j
            break
    if keep_last and n > 0 and k != 0:
        n = 0          # forget the old outcome; the single slot 0 takes the new one
        k = -1
    if k < 0:
        if n == nxt.shape[2]:
            info[2] = 1
            return False
        if not _link_predecessor(m, s, a, s2):
            return False
        k = n
        nxt[s, a, k] = s2
        rew[s, a, k] = r
        trm[s, a, k] = term
        cnt[s, a, k] = 0
        nout[s, a] = n + 1
    if total[s, a] == 0:
        if n_obs_a[s] == 0:
            obs_s[info[0]] = s
            info[0] += 1
        obs_a[s, n_obs_a[s]] = a
        n_obs_a[s] += 1
    total[s, a] += 1
    if keep_last:
        cnt[s, a, 0] = total[s, a]
    else:
        cnt[s, a, k] += 1
    last[s, a] = t
    return True


@njit(cache=True)
def model_sample(m, s, a, st):
    """Draw ``(s', r, terminated)`` from p̂(. | s, a) with generator state ``st``.

    The pair must have been observed (``total[s, a] > 0``); callers only sample observed
    pairs, so the model never makes up a transition.
    """
    nxt, rew, trm, cnt, nout, total = m[0], m[1], m[2], m[3], m[4], m[5]
    u = randint(st, total[s, a])
    acc = 0
    k = 0
    for j in range(nout[s, a]):
        acc += cnt[s, a, j]
        if u < acc:
            k = j
            break
    return nxt[s, a, k], rew[s, a, k], trm[s, a, k]


@njit(cache=True)
def model_expected_target(m, Q, s, a, gamma):
    """Expected one-step target ``Σ p̂(s',r|s,a) [r + gamma (1 - terminated) max_a' Q[s', a']]``.

    Used by prioritized sweeping's expected updates (Section 8.4, Section 8.5); for a
    deterministic model it equals the sample target.
    """
    nxt, rew, trm, cnt, nout, total = m[0], m[1], m[2], m[3], m[4], m[5]
    tot = 0.0
    for j in range(nout[s, a]):
        s2 = nxt[s, a, j]
        target = rew[s, a, j]
        if not trm[s, a, j]:
            best = Q[s2, 0]
            for b in range(1, Q.shape[1]):
                if Q[s2, b] > best:
                    best = Q[s2, b]
            target += gamma * best
        tot += cnt[s, a, j] * target
    return tot / total[s, a]


def _run_view(arrays, r):
    return tuple(x[r] for x in arrays)


class TabularModel:
    """Transition-table model for R runs (leading run axis), usable from Python.

    Parameters
    ----------
    n_states, n_actions : int
    max_outcomes : int
        K, distinct outcomes kept per (s, a) (default 8).
    runs : int
        R (default 1).

    The arrays are the attribute ``arrays`` (tuple, layout in the module source); the
    compiled agents use exactly the same update and sampling functions.

    Examples
    --------
    >>> m = TabularModel(16, 4)
    >>> for s2 in (1, 1, 4):
    ...     m.update(0, 2, s2, 0.0, False)
    >>> m.distribution(0, 2)
    {(1, 0.0): 0.6666666666666666, (4, 0.0): 0.3333333333333333}
    """

    def __init__(self, n_states: int, n_actions: int, max_outcomes: int = 8, runs: int = 1):
        self.n_states, self.n_actions, self.max_outcomes = int(n_states), int(n_actions), int(max_outcomes)
        self.runs = int(runs)
        self.arrays = new_model(n_states, n_actions, max_outcomes, runs=self.runs)
        self._t = np.zeros(self.runs, np.int64)

    def _check(self, s, a, run):
        if not (0 <= run < self.runs):
            raise ConfigError("run", run, f"must be in [0, {self.runs})")
        if not (0 <= s < self.n_states):
            raise ConfigError("s", s, f"must be in [0, {self.n_states})")
        if not (0 <= a < self.n_actions):
            raise ConfigError("a", a, f"must be in [0, {self.n_actions})")

    def update(self, s: int, a: int, s2: int, r: float, terminated: bool, run: int = 0,
               t: int | None = None, keep_last: bool = False) -> None:
        """Record a real transition of run ``run`` at total step ``t`` (default: a counter).

        ``keep_last`` forgets the pair's earlier outcomes (the book's deterministic model).

        Raises
        ------
        ConfigError
            Out-of-range indices, or more than ``max_outcomes`` distinct outcomes for (s, a).
        """
        self._check(s, a, run)
        if not (0 <= s2 < self.n_states):
            raise ConfigError("s2", s2, f"must be in [0, {self.n_states})")
        if t is None:
            t = int(self._t[run])
        self._t[run] = t + 1
        ok = model_update(_run_view(self.arrays, run), s, a, s2, float(r), bool(terminated), t, keep_last)
        if not ok:
            raise ConfigError("max_outcomes", self.max_outcomes, f"exceeded by (s={s}, a={a})")

    def count(self, s: int, a: int, run: int = 0) -> int:
        """n(s, a): how often (s, a) was tried."""
        self._check(s, a, run)
        return int(self.arrays[5][run, s, a])

    def observed(self, run: int = 0) -> np.ndarray:
        """bool (S, A): which pairs have been tried."""
        return self.arrays[5][run] > 0

    def distribution(self, s: int, a: int, run: int = 0) -> dict | None:
        """p̂(s', r | s, a) as ``{(s', r): probability}``; ``None`` for an unseen pair.

        Outcomes that differ only in ``terminated`` are merged here (use :meth:`outcomes`).
        """
        outs = self.outcomes(s, a, run)
        if outs is None:
            return None
        dist: dict = {}
        n = sum(c for *_, c in outs)
        for s2, r, _, c in outs:
            dist[(s2, r)] = dist.get((s2, r), 0.0) + c / n
        return dist

    def outcomes(self, s: int, a: int, run: int = 0) -> list[tuple] | None:
        """Distinct outcomes ``[(s', r, terminated, count), ...]`` of (s, a); None if unseen."""
        self._check(s, a, run)
        n = int(self.arrays[4][run, s, a])
        if n == 0:
            return None
        nxt, rew, trm, cnt = (x[run, s, a] for x in self.arrays[:4])
        return [(int(nxt[k]), float(rew[k]), bool(trm[k]), int(cnt[k])) for k in range(n)]

    def expected_reward(self, s: int, a: int, run: int = 0) -> float | None:
        """r̂(s, a) = Σ p̂(s', r | s, a) r; None for an unseen pair."""
        outs = self.outcomes(s, a, run)
        if outs is None:
            return None
        n = sum(o[3] for o in outs)
        return sum(o[1] * o[3] for o in outs) / n

    def sample(self, s: int, a: int, rng_state: np.ndarray, run: int = 0) -> tuple[int, float, bool]:
        """Draw ``(s', r, terminated)`` with a :mod:`dyna.rng` state (uint64 (4,)).

        Raises
        ------
        KeyError
            The pair was never observed (the model does not invent transitions).
        """
        self._check(s, a, run)
        if self.arrays[5][run, s, a] == 0:
            raise KeyError(f"(s={s}, a={a}) was never observed")
        s2, r, term = model_sample(_run_view(self.arrays, run), s, a, rng_state)
        return int(s2), float(r), bool(term)

    def predecessors(self, s: int, run: int = 0) -> list[tuple[int, int]]:
        """Pairs (s̄, ā) observed to lead to ``s`` (newest first)."""
        head, nxt_link, sa = self.arrays[10][run], self.arrays[11][run], self.arrays[12][run]
        out, e = [], int(head[s])
        while e >= 0:
            out.append(divmod(int(sa[e]), self.n_actions))
            e = int(nxt_link[e])
        return out
