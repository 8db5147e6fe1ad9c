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
read and update them and are what the compiled agent kernels call. :class:`TabularModel`
holds the same arrays with a leading run axis for use from Python.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dyna.errors import ConfigError
from dyna.rng import randint

# A model is a tuple of 8 arrays (with an optional leading run axis):
#   out       int64   (S, A, K, 3)  per outcome k of (s, a): next state, count, terminated (0/1)
#   rew       float64 (S, A, K)     per outcome: reward
#   pair      int64   (S, A, 3)     n distinct outcomes, n(s, a) tries, last step tried (-1: never)
#   seen_s    int64   (S,)          observed states in order of first visit
#   seen_a    int64   (S, A + 1)    [s, 0] = number of actions tried in s, [s, 1:] those actions
#   pred_head int64   (S,)          first predecessor link of s' (-1: none)
#   pred_link int64   (L, 2)        link: (s * A + a, next link or -1)
#   info      int64   (4,)          n observed states, n links used, overflow flag, free-link head
# The compiled functions take these arrays one by one (``*m``) rather than the tuple: numba
# passes a tuple of arrays by value, which costs far more per call than the arrays do.
MODEL_FIELDS = ("out", "rew", "pair", "seen_s", "seen_a", "pred_head", "pred_link", "info")


def new_model(n_states: int, n_actions: int, max_outcomes: int, runs: int | None = None,
              max_links: int | None = None):
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
    max_links : int, optional
        L, room for predecessor links (default ``S * A * K``).

    Returns
    -------
    tuple of the 8 arrays named in :data:`MODEL_FIELDS` (layout in the module source).
    """
    S, A, K = int(n_states), int(n_actions), int(max_outcomes)
    if S < 1 or A < 1 or K < 1:
        raise ConfigError("model shape", (S, A, K),
                          "n_states, n_actions and max_outcomes must be >= 1")
    L = S * A * K if max_links is None else int(max_links)
    lead = () if runs is None else (int(runs),)
    pair = np.zeros(lead + (S, A, 3), np.int64)
    pair[..., 2] = -1
    return (
        np.zeros(lead + (S, A, K, 3), np.int64),
        np.zeros(lead + (S, A, K), np.float64),
        pair,
        np.zeros(lead + (S,), np.int64),
        np.zeros(lead + (S, A + 1), np.int64),
        np.full(lead + (S,), -1, np.int64),
        np.zeros(lead + (L, 2), np.int64),
        np.array([0, 0, 0, -1], np.int64) * np.ones(lead + (4,), np.int64),
    )


@njit(cache=True)
def model_reset(out, rew, pair, seen_s, seen_a, pred_head, pred_link, info):
    """Empty a model in place (for reuse by the next run)."""
    out[:] = 0
    rew[:] = 0.0
    pair[:] = 0
    pair[:, :, 2] = -1
    seen_s[:] = 0
    seen_a[:] = 0
    pred_head[:] = -1
    pred_link[:] = 0
    info[:] = 0
    info[3] = -1


@njit(cache=True)
def _link_predecessor(pred_head, pred_link, info, sa, s2):
    """Add the link (s, a) -> s2 (``sa = s * A + a``) unless it is there already.

    A free link (left by :func:`_unlink_predecessor`) is reused first.
    """
    e = pred_head[s2]
    while e >= 0:
        if pred_link[e, 0] == sa:
            return True
        e = pred_link[e, 1]
    if info[3] >= 0:
        e = info[3]
        info[3] = pred_link[e, 1]
    else:
        e = info[1]
        if e >= pred_link.shape[0]:
            info[2] = 1
            return False
        info[1] = e + 1
    pred_link[e, 0] = sa
    pred_link[e, 1] = pred_head[s2]
    pred_head[s2] = e
    return True


@njit(cache=True)
def _unlink_predecessor(pred_head, pred_link, info, sa, s2):
    """Remove the link (s, a) -> s2 if present and put it on the free list."""
    prev = -1
    e = pred_head[s2]
    while e >= 0:
        if pred_link[e, 0] == sa:
            if prev < 0:
                pred_head[s2] = pred_link[e, 1]
            else:
                pred_link[prev, 1] = pred_link[e, 1]
            pred_link[e, 1] = info[3]
            info[3] = e
            return
        prev = e
        e = pred_link[e, 1]


@njit(cache=True)
def model_update(out, rew, pair, seen_s, seen_a, pred_head, pred_link, info,
                 s, a, s2, r, term, t, keep_last):
    """Record one real transition ``(s, a) -> (s2, r, term)`` seen at total step ``t``.

    By default every distinct outcome of (s, a) is counted. With ``keep_last`` the pair
    keeps only its latest outcome -- the book's deterministic model ``Model(S, A) <- R, S'``
    (Section 8.2), which follows a changing environment (Section 8.3) at once; its count is
    then the pair's number of tries, and the predecessor link of the forgotten outcome goes.
    Invariant: ``sum_k out[s, a, k, 1] == pair[s, a, 1]``.

    Returns False (and sets the overflow flag ``info[2]``) when (s, a) already has K
    distinct outcomes and this is a new one; the transition is then not recorded.
    """
    n = pair[s, a, 0]
    k = -1
    for j in range(n):
        if out[s, a, j, 0] == s2 and rew[s, a, j] == r and out[s, a, j, 2] == term:
            k = j
            break
    if keep_last and n > 0 and k != 0:
        # forget the old outcome (and its predecessor link); slot 0 takes the new one
        if out[s, a, 0, 0] != s2:
            _unlink_predecessor(pred_head, pred_link, info, s * out.shape[1] + a, out[s, a, 0, 0])
        n = 0
        k = -1
    if k < 0:
        if n == out.shape[2]:
            info[2] = 1
            return False
        if not _link_predecessor(pred_head, pred_link, info, s * out.shape[1] + a, s2):
            return False
        k = n
        out[s, a, k, 0] = s2
        out[s, a, k, 1] = 0
        out[s, a, k, 2] = term
        rew[s, a, k] = r
        pair[s, a, 0] = n + 1
    if pair[s, a, 1] == 0:
        if seen_a[s, 0] == 0:
            seen_s[info[0]] = s
            info[0] += 1
        seen_a[s, 0] += 1
        seen_a[s, seen_a[s, 0]] = a
    pair[s, a, 1] += 1
    if keep_last:
        out[s, a, 0, 1] = pair[s, a, 1]
    else:
        out[s, a, k, 1] += 1
    pair[s, a, 2] = t
    return True


@njit(cache=True)
def model_sample_index(out, pair, s, a, st):
    """Index k of an outcome of (s, a) drawn with probability ``count_k / n(s, a)``.

    The pair must have been observed (``pair[s, a, 1] > 0``); callers only sample observed
    pairs, so the model never makes up a transition.
    """
    if pair[s, a, 0] == 1:   # one outcome seen (always so in deterministic worlds): no draw
        return 0
    u = randint(st, pair[s, a, 1])
    acc = 0
    for j in range(pair[s, a, 0]):
        acc += out[s, a, j, 1]
        if u < acc:
            return j
    return 0


@njit(cache=True)
def model_expected_target(out, rew, pair, Q, s, a, gamma):
    """Expected one-step target ``Σ p̂(s',r|s,a) [r + gamma (1 - terminated) max_a' Q[s', a']]``.

    Used by prioritized sweeping's expected updates (Sections 8.4-8.5); for a deterministic
    model it equals the sample target.
    """
    tot = 0.0
    for j in range(pair[s, a, 0]):
        target = rew[s, a, j]
        if out[s, a, j, 2] == 0:
            s2 = out[s, a, j, 0]
            best = Q[s2, 0]
            for b in range(1, Q.shape[1]):
                if Q[s2, b] > best:
                    best = Q[s2, b]
            target += gamma * best
        tot += out[s, a, j, 1] * target
    return tot / pair[s, a, 1]


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

    The arrays are the attribute ``arrays`` (tuple, see :data:`MODEL_FIELDS`); the compiled
    agents use exactly the same update and sampling functions.

    Examples
    --------
    >>> m = TabularModel(16, 4)
    >>> for s2 in (1, 1, 4):
    ...     m.update(0, 2, s2, 0.0, False)
    >>> m.distribution(0, 2)
    {(1, 0.0): 0.6666666666666666, (4, 0.0): 0.3333333333333333}
    """

    def __init__(self, n_states: int, n_actions: int, max_outcomes: int = 8, runs: int = 1):
        self.n_states, self.n_actions = int(n_states), int(n_actions)
        self.max_outcomes = int(max_outcomes)
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
        ok = model_update(*_run_view(self.arrays, run), s, a, s2, float(r), bool(terminated), t,
                          keep_last)
        if not ok:
            raise ConfigError("max_outcomes", self.max_outcomes, f"exceeded by (s={s}, a={a})")

    def count(self, s: int, a: int, run: int = 0) -> int:
        """n(s, a): how often (s, a) was tried."""
        self._check(s, a, run)
        return int(self.arrays[2][run, s, a, 1])

    def observed(self, run: int = 0) -> np.ndarray:
        """bool (S, A): which pairs have been tried."""
        return self.arrays[2][run, :, :, 1] > 0

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
        n = int(self.arrays[2][run, s, a, 0])
        if n == 0:
            return None
        out, rew = self.arrays[0][run, s, a], self.arrays[1][run, s, a]
        return [(int(out[k, 0]), float(rew[k]), bool(out[k, 2]), int(out[k, 1])) for k in range(n)]

    def expected_reward(self, s: int, a: int, run: int = 0) -> float | None:
        """r̂(s, a) = Σ p̂(s', r | s, a) r; None for an unseen pair."""
        outs = self.outcomes(s, a, run)
        if outs is None:
            return None
        n = sum(o[3] for o in outs)
        return sum(o[1] * o[3] for o in outs) / n

    def sample(self, s: int, a: int, rng_state: np.ndarray,
               run: int = 0) -> tuple[int, float, bool]:
        """Draw ``(s', r, terminated)`` with a :mod:`dyna.rng` state (uint64 (4,)).

        Raises
        ------
        KeyError
            The pair was never observed (the model does not invent transitions).
        """
        self._check(s, a, run)
        if self.arrays[2][run, s, a, 1] == 0:
            raise KeyError(f"(s={s}, a={a}) was never observed")
        out, rew, pair = self.arrays[0][run], self.arrays[1][run], self.arrays[2][run]
        k = model_sample_index(out, pair, s, a, rng_state)
        return int(out[s, a, k, 0]), float(rew[s, a, k]), bool(out[s, a, k, 2])

    def predecessors(self, s: int, run: int = 0) -> list[tuple[int, int]]:
        """Pairs (s̄, ā) observed to lead to ``s`` (newest first)."""
        head, link = self.arrays[5][run], self.arrays[6][run]
        found, e = [], int(head[s])
        while e >= 0:
            found.append(divmod(int(link[e, 0]), self.n_actions))
            e = int(link[e, 1])
        return found
