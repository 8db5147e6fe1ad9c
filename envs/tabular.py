"""Transition tables in array form, and a batched stepper over them.

Gymnasium's toy-text environments expose their dynamics as ``P[s][a] = [(prob, next_state,
reward, terminated), ...]``. :func:`table_from_P` turns such a table into dense arrays
(:class:`TabularTable`) so that one numpy call (:class:`BatchedStepper`) or one compiled
kernel (:mod:`dyna.agents.tabular`) can step many independent copies of the environment.

A table may have several *phases*: phase ``p`` holds from total time step
``phase_start[p]`` on (counted over the whole run, across episode resets). This is how the
blocking and shortcut mazes of Sutton & Barto (2018) Section 8.3 change their walls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dyna.errors import ConfigError


@dataclass(frozen=True)
class TabularTable:
    """Dense transition table of a finite MDP, possibly changing in phases.

    Attributes
    ----------
    next_state : int32 array (n_phases, n_states, n_actions, K)
        Next state of each listed outcome; entries ``k >= n_outcomes[p, s, a]`` are unused.
    cum_prob : float64 array (n_phases, n_states, n_actions, K)
        Cumulative outcome probabilities; the last used entry is exactly 1.
    reward : float64 array (n_phases, n_states, n_actions, K)
    terminated : bool array (n_phases, n_states, n_actions, K)
    n_outcomes : int32 array (n_phases, n_states, n_actions)
        Number of listed outcomes, >= 1.
    isd_cum : float64 array (n_states,)
        Cumulative initial-state distribution (last entry exactly 1).
    phase_start : int64 array (n_phases,)
        Total time step (0-based, over the whole run) from which each phase applies;
        ``phase_start[0] == 0``, strictly increasing.
    max_episode_steps : int
        Truncation limit in steps per episode; 0 means no limit.
    """

    next_state: np.ndarray
    cum_prob: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    n_outcomes: np.ndarray
    isd_cum: np.ndarray
    phase_start: np.ndarray
    max_episode_steps: int = 0
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def n_states(self) -> int:
        """Number of states S."""
        return int(self.next_state.shape[1])

    @property
    def n_actions(self) -> int:
        """Number of actions A."""
        return int(self.next_state.shape[2])

    @property
    def max_outcomes(self) -> int:
        """K, the largest number of listed outcomes of any (s, a)."""
        return int(self.next_state.shape[3])

    def phase_at(self, t: int | np.ndarray) -> np.ndarray:
        """Phase index in force at total time step ``t`` (int or int array)."""
        return np.searchsorted(self.phase_start, t, side="right") - 1

    def to_P(self, phase: int = 0) -> dict[int, dict[int, list[tuple]]]:
        """The table of ``phase`` back in Gymnasium toy-text form ``P[s][a]``."""
        probs = np.diff(self.cum_prob[phase], axis=-1, prepend=0.0)
        P: dict[int, dict[int, list[tuple]]] = {}
        for s in range(self.n_states):
            P[s] = {}
            for a in range(self.n_actions):
                P[s][a] = [
                    (float(probs[s, a, k]), int(self.next_state[phase, s, a, k]),
                     float(self.reward[phase, s, a, k]), bool(self.terminated[phase, s, a, k]))
                    for k in range(int(self.n_outcomes[phase, s, a]))
                ]
        return P


def _checked_outcome(outcome, where: str, n_states: int) -> tuple[float, int, float, bool]:
    """``(prob, next_state, reward, terminated)`` of one outcome of a toy-text table, checked.

    Raises
    ------
    ConfigError
        Not a 4-tuple, a probability outside [0, 1], a reward that is not finite, a next
        state outside ``[0, n_states)`` or a ``terminated`` that is not a bool (field ``P``,
        value ``where``).
    """
    import math

    if not isinstance(outcome, (tuple, list)) or len(outcome) != 4:
        raise ConfigError("P", where, "must be (prob, next_state, reward, terminated)")
    prob, s2, r, done = outcome
    try:
        prob, r = float(prob), float(r)
    except (TypeError, ValueError):
        raise ConfigError("P", where, "probability and reward must be numbers") from None
    if not (0.0 <= prob <= 1.0):  # also refuses NaN
        raise ConfigError("P", where, f"probability {prob} is not in [0, 1]")
    if not math.isfinite(r):
        raise ConfigError("P", where, f"reward {r} is not finite")
    if isinstance(s2, (bool, np.bool_)) or not isinstance(s2, (int, np.integer)) \
            or not 0 <= s2 < n_states:
        raise ConfigError("P", where, f"next state {s2!r} is not in [0, {n_states})")
    if not isinstance(done, (bool, np.bool_)):
        raise ConfigError("P", where, f"terminated {done!r} is not a bool")
    return prob, s2, r, done


def table_from_P(P_phases, isd, *, phase_start=(0,), max_episode_steps: int = 0,
                 meta: dict | None = None) -> TabularTable:
    """Build a :class:`TabularTable` from one or more toy-text tables.

    Parameters
    ----------
    P_phases : list of dict
        One Gymnasium-style ``P[s][a] = [(prob, s', r, terminated), ...]`` per phase (a single
        dict is accepted for one phase). Every phase must have the same states and actions.
    isd : array-like (n_states,)
        Initial-state distribution; must sum to 1.
    phase_start : sequence of int
        Total step at which each phase starts; first must be 0.
    max_episode_steps : int
        Truncation limit per episode (0: none).

    Raises
    ------
    ConfigError
        Probabilities that do not sum to 1 (tolerance 1e-9), mismatched phases, bad starts.
    """
    if isinstance(P_phases, dict):
        P_phases = [P_phases]
    if not isinstance(P_phases, (list, tuple)) or not P_phases \
            or not all(isinstance(P, dict) for P in P_phases):
        raise ConfigError("P", type(P_phases).__name__,
                          "must be a toy-text table P[s][a] (a dict) or a list of them")
    n_phases = len(P_phases)
    try:
        phase_start = np.asarray(phase_start, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError("phase_start", phase_start, "must be integers") from None
    if phase_start.shape != (n_phases,) or phase_start[0] != 0 or np.any(np.diff(phase_start) <= 0):
        raise ConfigError("phase_start", phase_start.tolist(),
                          "must start at 0, increase strictly and give one start per phase")
    S = len(P_phases[0])
    if S == 0 or set(P_phases[0]) != set(range(S)):
        raise ConfigError("P", sorted(P_phases[0])[:5], f"states must be exactly 0..{S - 1}")
    row0 = P_phases[0][0]
    A = len(row0) if isinstance(row0, dict) else 0
    if A == 0:
        raise ConfigError("P", "[0]", "must map actions 0..A-1 to outcome lists")
    for p, P in enumerate(P_phases):
        if set(P) != set(range(S)):
            raise ConfigError("P", f"phase {p}",
                              f"has states {len(P)}, expected exactly 0..{S - 1}")
        for st, row in P.items():
            if not isinstance(row, dict) or set(row) != set(range(A)):
                raise ConfigError("P", f"phase {p} [{st}]",
                                  f"must have exactly the actions 0..{A - 1}")
    K = max(len(outs) for P in P_phases for row in P.values() for outs in row.values())
    nxt = np.zeros((n_phases, S, A, K), np.int32)
    cum = np.ones((n_phases, S, A, K), np.float64)
    rew = np.zeros((n_phases, S, A, K), np.float64)
    term = np.zeros((n_phases, S, A, K), np.bool_)
    nout = np.zeros((n_phases, S, A), np.int32)
    for p, P in enumerate(P_phases):
        for s in range(S):
            for a in range(A):
                outs = P[s][a]
                where = f"[{s}][{a}]" if n_phases == 1 else f"phase {p} [{s}][{a}]"
                if not outs:
                    raise ConfigError("P", where, "has no outcome")
                total = 0.0
                for k, outcome in enumerate(outs):
                    prob, s2, r, done = _checked_outcome(outcome, f"{where}[{k}]", S)
                    total += prob
                    nxt[p, s, a, k] = int(s2)
                    cum[p, s, a, k] = total
                    rew[p, s, a, k] = r
                    term[p, s, a, k] = bool(done)
                if abs(total - 1.0) > 1e-9:
                    raise ConfigError("P", where, f"probabilities sum to {total}, not 1")
                cum[p, s, a, len(outs) - 1:] = 1.0
                nout[p, s, a] = len(outs)
    try:
        isd = np.asarray(isd, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError("isd", isd, "must be numbers") from None
    if isd.shape != (S,) or not np.all(np.isfinite(isd)) or abs(isd.sum() - 1.0) > 1e-9 \
            or np.any(isd < 0):
        raise ConfigError("isd", isd.tolist() if isd.size < 20 else "...",
                          f"must be a distribution over {S} states")
    isd_cum = np.cumsum(isd)
    isd_cum[-1] = 1.0
    from dyna.errors import check_range

    max_episode_steps = check_range("max_episode_steps", max_episode_steps, 0, 2**62, integer=True)
    return TabularTable(nxt, cum, rew, term, nout, isd_cum, phase_start,
                        int(max_episode_steps), dict(meta or {}))


class BatchedStepper:
    """Step R independent copies of a tabular environment with numpy.

    Each call advances every copy by one step in a handful of vectorised numpy operations.
    Each copy keeps its own total-step counter, so phase changes (Section 8.3's changing
    mazes) happen per copy after the right number of steps, across episode resets.

    Parameters
    ----------
    table : TabularTable
    n_copies : int
        R, the number of copies.

    Examples
    --------
    >>> stepper = BatchedStepper(table, 8)                     # doctest: +SKIP
    >>> s = stepper.reset(rng)                                 # int64 (8,)
    >>> s2, r, terminated, truncated = stepper.step(actions, rng)
    """

    def __init__(self, table: TabularTable, n_copies: int):
        from dyna.errors import check_range

        n_copies = check_range("n_copies", n_copies, 1, 10**9, integer=True)
        self.table = table
        self.n_copies = int(n_copies)
        self.state = np.zeros(self.n_copies, np.int64)
        self.t = np.zeros(self.n_copies, np.int64)            # total steps per copy
        self.elapsed = np.zeros(self.n_copies, np.int64)      # steps in the current episode

    def reset(self, rng: np.random.Generator, mask: np.ndarray | None = None) -> np.ndarray:
        """Draw start states for all copies (or those where ``mask`` is True).

        Returns a copy of the int64 (R,) state array.
        """
        if mask is None:
            idx = np.arange(self.n_copies)
        else:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_ or mask.shape != (self.n_copies,):
                raise ConfigError("mask", mask.tolist()[:8], f"must be {self.n_copies} bools")
            idx = np.flatnonzero(mask)
        u = rng.random(idx.size)
        self.state = self.state.copy()
        self.state[idx] = np.searchsorted(self.table.isd_cum, u, side="right")
        self.elapsed[idx] = 0
        return self.state.copy()

    def step(self, actions: np.ndarray, rng: np.random.Generator):
        """Advance every copy by one step.

        Parameters
        ----------
        actions : int array (R,)
        rng : numpy Generator, one uniform draw per copy

        Returns
        -------
        next_state : int64 (R,)
        reward : float64 (R,)
        terminated : bool (R,)
        truncated : bool (R,)  -- step limit reached without termination
        """
        tb = self.table
        actions = np.asarray(actions, dtype=np.int64)
        if actions.shape != (self.n_copies,) or np.any((actions < 0) | (actions >= tb.n_actions)):
            raise ConfigError("actions", actions.tolist()[:8],
                              f"must be {self.n_copies} ints in [0, {tb.n_actions})")
        phase = tb.phase_at(self.t)
        s = self.state
        cum = tb.cum_prob[phase, s, actions]                           # (R, K)
        u = rng.random(self.n_copies)
        k = np.minimum((u[:, None] >= cum).sum(axis=1), tb.n_outcomes[phase, s, actions] - 1)
        s2 = tb.next_state[phase, s, actions, k].astype(np.int64)
        r = tb.reward[phase, s, actions, k]
        term = tb.terminated[phase, s, actions, k]
        self.t += 1
        self.elapsed += 1
        trunc = ~term & (tb.max_episode_steps > 0) & (self.elapsed >= tb.max_episode_steps)
        self.state = s2
        return s2.copy(), r, term, trunc
