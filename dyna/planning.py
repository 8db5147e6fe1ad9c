"""Planning as simulated replay from a learned model (Sutton & Barto 2018, Sections 8.2-8.4).

* :func:`q_update` -- the one-step tabular Q-learning update, Equation (6.8).
* :func:`dyna_planning` -- ``n`` planning updates from uniformly chosen remembered
  experience: a state observed before, then an action already taken in it (the
  tabular Dyna-Q box, Section 8.2). With ``plus=True`` it is Dyna-Q+ (Section 8.3): the
  simulated reward gets the bonus ``kappa * sqrt(tau)``, ``tau`` being the time steps since
  the pair was last tried for real, and actions never tried from a visited state are
  considered too, modelled as leading back to the same state with reward 0 (the book's
  footnote to Section 8.3).
* prioritized sweeping (Section 8.4, the box on p. 170): a max-priority queue of (s, a) keyed
  by ``|target - Q(s, a)|`` above ``theta``; popping a pair backs it up and pushes the
  predecessors of its state. Backups use the model's expected target, so the method is
  correct for stochastic models (for a deterministic one it is the book's sample backup).
* :class:`PriorityQueue` -- the same queue discipline for arbitrary Python payloads.

Every ``@njit`` function here works on the arrays of one run; the agent kernels in
:mod:`dyna.agents.tabular` loop them over runs.
"""

from __future__ import annotations

import heapq
import itertools
import math

import numpy as np
from numba import njit

from dyna.model import model_expected_target, model_sample_index
from dyna.rng import randint


@njit(cache=True)
def max_row(Q, s):
    """max_a Q[s, a] for a float64 (S, A) table."""
    best = Q[s, 0]
    for b in range(1, Q.shape[1]):
        if Q[s, b] > best:
            best = Q[s, b]
    return best


@njit(cache=True)
def q_update(Q, s, a, r, s2, terminated, alpha, gamma):
    """Q-learning update, Equation (6.8), in place; returns the TD error.

    ``Q[s, a] += alpha * (r + gamma * max_a' Q[s2, a'] - Q[s, a])``, the bootstrap term
    dropped only when ``terminated`` -- a truncated (time-limit) step bootstraps.

    Parameters
    ----------
    Q : float64 (S, A)
    s, a, s2 : int
    r : float
    terminated : bool
    alpha, gamma : float
    """
    target = r
    if not terminated:
        target += gamma * max_row(Q, s2)
    delta = target - Q[s, a]
    Q[s, a] += alpha * delta
    return delta


@njit(cache=True)
def dyna_planning(Q, out, rew, pair, seen_s, seen_a, info, n, alpha, gamma, kappa, plus, t, st):
    """``n`` Dyna-Q (or Dyna-Q+) planning updates in place; returns how many were made.

    Parameters
    ----------
    Q : float64 (S, A)
    out, rew, pair, seen_s, seen_a, info : arrays of one run's model (:mod:`dyna.model`)
    n : int
        Planning steps n.
    alpha, gamma : float
    kappa : float
        Dyna-Q+ bonus weight (used when ``plus``).
    plus : bool
        Dyna-Q+ instead of Dyna-Q.
    t : int
        Current total time step (for ``tau = t - last tried``).
    st : uint64 (4,)
        The run's generator state.
    """
    n_seen = info[0]
    if n_seen == 0:
        return 0
    A = Q.shape[1]
    for _ in range(n):
        s = seen_s[randint(st, n_seen)]
        if plus:
            a = randint(st, A)
            if pair[s, a, 1] == 0:       # never tried: back to s with reward 0
                s2, r, term = s, 0.0, False
                tau = t
            else:
                k = model_sample_index(out, pair, s, a, st)
                s2, r, term = out[s, a, k, 0], rew[s, a, k], out[s, a, k, 2] != 0
                tau = t - pair[s, a, 2]
            r = r + kappa * math.sqrt(tau)
        else:
            a = seen_a[s, 1 + randint(st, seen_a[s, 0])]
            k = model_sample_index(out, pair, s, a, st)
            s2, r, term = out[s, a, k, 0], rew[s, a, k], out[s, a, k, 2] != 0
        q_update(Q, s, a, r, s2, term, alpha, gamma)
    return n


# --------------------------------------------------------------------------- queue
# An indexed binary max-heap over pair ids sa = s * A + a, for one run, as 4 arrays:
#   hkey  int64 (S*A, 2): (pair id, insertion number) of each heap slot
#   hprio float64 (S*A,): priority of each heap slot
#   hpos  int64 (S*A,):   heap slot of each pair id (-1: not queued)
#   hinfo int64 (2,):     size, next insertion number
# Order: larger priority first; equal priorities in insertion order. A pair is queued at
# most once.


def new_queue(n_pairs: int, runs: int | None = None):
    """Allocate an empty pair queue: tuple ``(hkey, hprio, hpos, hinfo)`` for ``S * A`` pairs."""
    lead = () if runs is None else (int(runs),)
    return (np.zeros(lead + (n_pairs, 2), np.int64), np.zeros(lead + (n_pairs,), np.float64),
            np.full(lead + (n_pairs,), -1, np.int64), np.zeros(lead + (2,), np.int64))


@njit(cache=True)
def _before(hkey, hprio, i, j):
    return hprio[i] > hprio[j] or (hprio[i] == hprio[j] and hkey[i, 1] < hkey[j, 1])


@njit(cache=True)
def _swap(hkey, hprio, hpos, i, j):
    for c in range(2):
        hkey[i, c], hkey[j, c] = hkey[j, c], hkey[i, c]
    hprio[i], hprio[j] = hprio[j], hprio[i]
    hpos[hkey[i, 0]] = i
    hpos[hkey[j, 0]] = j


@njit(cache=True)
def _sift_up(hkey, hprio, hpos, i):
    while i > 0:
        parent = (i - 1) // 2
        if _before(hkey, hprio, i, parent):
            _swap(hkey, hprio, hpos, i, parent)
            i = parent
        else:
            break


@njit(cache=True)
def _sift_down(hkey, hprio, hpos, size, i):
    while True:
        left = 2 * i + 1
        best = i
        if left < size and _before(hkey, hprio, left, best):
            best = left
        if left + 1 < size and _before(hkey, hprio, left + 1, best):
            best = left + 1
        if best == i:
            break
        _swap(hkey, hprio, hpos, i, best)
        i = best


@njit(cache=True)
def queue_push(hkey, hprio, hpos, hinfo, sa, p):
    """Insert pair ``sa`` with priority ``p``; if queued already, keep the larger priority.

    A pair whose priority rises takes a fresh insertion number (it counts as re-inserted).
    """
    i = hpos[sa]
    if i >= 0:
        if p > hprio[i]:
            hprio[i] = p
            hkey[i, 1] = hinfo[1]
            hinfo[1] += 1
            _sift_up(hkey, hprio, hpos, i)
        return
    i = hinfo[0]
    hkey[i, 0] = sa
    hkey[i, 1] = hinfo[1]
    hprio[i] = p
    hinfo[1] += 1
    hpos[sa] = i
    hinfo[0] = i + 1
    _sift_up(hkey, hprio, hpos, i)


@njit(cache=True)
def queue_pop(hkey, hprio, hpos, hinfo):
    """Remove and return ``(sa, priority)`` of the first pair; the queue must not be empty."""
    sa, p = hkey[0, 0], hprio[0]
    last = hinfo[0] - 1
    _swap(hkey, hprio, hpos, 0, last)
    hinfo[0] = last
    hpos[sa] = -1
    if last > 0:
        _sift_down(hkey, hprio, hpos, last, 0)
    return sa, p


@njit(cache=True)
def queue_clear(hkey, hprio, hpos, hinfo):
    """Empty the queue in place."""
    hpos[:] = -1
    hinfo[:] = 0


@njit(cache=True)
def ps_push_if(Q, out, rew, pair, hkey, hprio, hpos, hinfo, s, a, gamma, theta):
    """Push (s, a) with ``P = |expected target - Q[s, a]|`` when ``P > theta``."""
    P = abs(model_expected_target(out, rew, pair, Q, s, a, gamma) - Q[s, a])
    if P > theta:
        queue_push(hkey, hprio, hpos, hinfo, s * Q.shape[1] + a, P)


@njit(cache=True)
def ps_planning(Q, out, rew, pair, pred_head, pred_link, hkey, hprio, hpos, hinfo, n, alpha,
                gamma, theta):
    """Up to ``n`` prioritized-sweeping backups (Section 8.4); returns how many were made.

    Each pops the first pair, applies the expected update
    ``Q[s, a] += alpha * (Σ p̂ (r + gamma max Q[s']) - Q[s, a])`` and pushes every
    predecessor (s̄, ā) of ``s`` whose priority exceeds ``theta``.
    """
    A = Q.shape[1]
    done = 0
    while done < n and hinfo[0] > 0:
        sa, _ = queue_pop(hkey, hprio, hpos, hinfo)
        s = sa // A
        a = sa - s * A
        Q[s, a] += alpha * (model_expected_target(out, rew, pair, Q, s, a, gamma) - Q[s, a])
        done += 1
        e = pred_head[s]
        while e >= 0:
            psa = pred_link[e, 0]
            ps = psa // A
            ps_push_if(Q, out, rew, pair, hkey, hprio, hpos, hinfo, ps, psa - ps * A, gamma, theta)
            e = pred_link[e, 1]
    return done


# --------------------------------------------------------------------------- Python queue
def _freeze(x):
    """A hashable, order-stable key for payloads that may be dicts, lists or numpy arrays."""
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, dict):
        return ("dict", tuple(sorted((_freeze(k), _freeze(v)) for k, v in x.items())))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_freeze(v) for v in x))
    if isinstance(x, set):
        return ("set", tuple(sorted(_freeze(v) for v in x)))
    if isinstance(x, np.generic):
        return x.item()
    return x


class PriorityQueue:
    """Max-priority queue of ``(state, action)`` payloads for prioritized sweeping.

    * Payloads are never compared: entries are ordered by (priority, insertion number), so
      equal priorities pop in insertion order and states may be tuples, dicts or arrays.
    * A payload is queued at most once; pushing it again keeps the larger priority (the
      entry it replaces is dropped, never popped).

    ``len(q)`` counts distinct queued payloads.
    """

    def __init__(self):
        self._heap: list = []
        self._best: dict = {}   # key -> (priority, counter)
        self._counter = itertools.count()

    def __len__(self) -> int:
        return len(self._best)

    def push(self, state, action, priority: float) -> None:
        """Queue ``(state, action)`` with ``priority`` (a finite float).

        Raises
        ------
        ValueError
            NaN priority.
        """
        priority = float(priority)
        if math.isnan(priority):
            raise ValueError("priority is NaN")
        key = (_freeze(state), _freeze(action))
        old = self._best.get(key)
        if old is not None and old[0] >= priority:
            return
        c = next(self._counter)
        self._best[key] = (priority, c)
        heapq.heappush(self._heap, (-priority, c, key, (state, action)))

    def pop(self):
        """Remove the first entry; returns ``((state, action), priority)``.

        Raises
        ------
        IndexError
            The queue is empty.
        """
        while self._heap:
            negp, c, key, payload = heapq.heappop(self._heap)
            if self._best.get(key) == (-negp, c):
                del self._best[key]
                return payload, -negp
        raise IndexError("pop from an empty PriorityQueue")
