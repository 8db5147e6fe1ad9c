"""Tabular Q-learning, Dyna-Q, Dyna-Q+ and prioritized sweeping, vectorised across runs.

Sutton & Barto (2018), *Reinforcement Learning: An Introduction*, 2nd ed.:

* ``q_learning`` -- one-step Q-learning, Section 6.5, Equation (6.8); Dyna-Q with n = 0.
* ``dyna_q`` -- tabular Dyna-Q, Section 8.2 (box on p. 164): act ε-greedily, update Q from
  the real transition, update the model, then ``n_planning`` simulated updates from
  uniformly chosen remembered (state, action) pairs.
* ``dyna_q_plus`` -- Dyna-Q+, Section 8.3: planning rewards get ``kappa * sqrt(tau)``.
* ``prioritized_sweeping`` -- Section 8.4 (box on p. 170): real transitions only update the
  model and push (s, a) when its priority exceeds ``theta``; up to ``n_planning`` backups per
  step, in priority order, each pushing its state's predecessors.

One compiled kernel (:func:`_run_kernel`) advances any number of independent runs of one
agent on one :class:`envs.tabular.TabularTable`. A run draws from its own generator
(:mod:`dyna.rng`), seeded from ``(seed, run_index)``, so its result is the same whether it is
computed alone or in any batch. Greedy choices break ties uniformly at random, and the
bootstrap is dropped on ``terminated`` only: a time-limit truncation bootstraps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange

# the names and checks of the hyper-parameters live without numba (a config is validated
# without defining a kernel); re-exported here
from dyna.agents.hparams import AGENTS, HPARAMS, MAX_PLANNING_STEPS, validate_hparams  # noqa: F401
from dyna.errors import ConfigError, check_range
from dyna.model import model_reset, model_update, new_model
from dyna.planning import dyna_planning, new_queue, ps_planning, ps_push_if, q_update, queue_clear
from dyna.rng import STREAM_EVAL, STREAM_TRAIN, randint, run_states, uniform

#: Greedy rollouts that must all succeed for the optimal-path check of Example 8.4.
OPTIMAL_CHECKS = 5
#: Default budget of time steps per run (episodes mode): a run that has not finished its
#: episodes by then stops with an error instead of looping forever.
MAX_TOTAL_STEPS = 10_000_000


# --------------------------------------------------------------------------- kernels
@njit(cache=True)
def greedy_action(Q, s, st):
    """argmax_a Q[s, a] with ties broken uniformly at random (one draw when tied)."""
    A = Q.shape[1]
    best = Q[s, 0]
    n_best = 1
    for b in range(1, A):
        if Q[s, b] > best:
            best = Q[s, b]
            n_best = 1
        elif Q[s, b] == best:
            n_best += 1
    if n_best == 1:
        for b in range(A):
            if Q[s, b] == best:
                return b
    j = randint(st, n_best)
    for b in range(A):
        if Q[s, b] == best:
            if j == 0:
                return b
            j -= 1
    return A - 1


@njit(cache=True)
def epsilon_greedy_action(Q, s, epsilon, st):
    """ε-greedy: with probability ε a uniform action, else :func:`greedy_action`."""
    if uniform(st) < epsilon:
        return randint(st, Q.shape[1])
    return greedy_action(Q, s, st)


@njit(cache=True)
def agent_learn(code, Q, out, rew, pair, seen_s, seen_a, pred_head, pred_link, info,
                hkey, hprio, hpos, hinfo, s, a, r, s2, terminated, t,
                alpha, gamma, n_planning, kappa, theta, keep_last, st):
    """Learn from one real transition; returns (number of Q updates, model ok flag).

    ``out ... info`` are the model's arrays (:data:`dyna.model.MODEL_FIELDS`), ``hkey ...
    hinfo`` the prioritized-sweeping queue's (:func:`dyna.planning.new_queue`); ``t`` is the
    total step count after this transition (Dyna-Q+ uses it for ``tau``) and ``keep_last``
    selects the latest-outcome model instead of counts.
    """
    if code == 0:
        q_update(Q, s, a, r, s2, terminated, alpha, gamma)
        return 1, True
    ok = model_update(out, rew, pair, seen_s, seen_a, pred_head, pred_link, info,
                      s, a, s2, r, terminated, t, keep_last)
    if code == 3:
        if ok:
            ps_push_if(Q, out, rew, pair, hkey, hprio, hpos, hinfo, s, a, gamma, theta)
        return ps_planning(Q, out, rew, pair, pred_head, pred_link, hkey, hprio, hpos, hinfo,
                           n_planning, alpha, gamma, theta), ok
    q_update(Q, s, a, r, s2, terminated, alpha, gamma)
    return 1 + dyna_planning(Q, out, rew, pair, seen_s, seen_a, info, n_planning, alpha, gamma,
                             kappa, code == 2, t, st), ok


@njit(cache=True)
def _env_step(nxt, cum, rew, trm, nout, p, s, a, st):
    n = nout[p, s, a]
    k = 0
    if n > 1:
        u = uniform(st)
        while k < n - 1 and u >= cum[p, s, a, k]:
            k += 1
    return nxt[p, s, a, k], rew[p, s, a, k], trm[p, s, a, k]


@njit(cache=True)
def _start_state(isd_cum, st):
    if isd_cum.shape[0] == 1 or isd_cum[0] >= 1.0:
        return 0
    u = uniform(st)
    s = 0
    while s < isd_cum.shape[0] - 1 and u >= isd_cum[s]:
        s += 1
    return s


@njit(cache=True)
def _greedy_return(Q, nxt, cum, rew, trm, nout, isd_cum, p, max_steps, st):
    """One greedy episode (ties random): returns (undiscounted return, steps, terminated)."""
    s = _start_state(isd_cum, st)
    ret = 0.0
    for i in range(max_steps):
        a = greedy_action(Q, s, st)
        s2, r, term = _env_step(nxt, cum, rew, trm, nout, p, s, a, st)
        ret += r
        if term:
            return ret, i + 1, True
        s = s2
    return ret, max_steps, False


@njit(cache=True)
def _phase_at(phase_start, p, t):
    """The layout phase in force at total step ``t``, searching from phase ``p`` on."""
    while p + 1 < phase_start.shape[0] and t >= phase_start[p + 1]:
        p += 1
    return p


@njit(cache=True)
def _mean_greedy_return(Q, nxt, cum, rew, trm, nout, isd_cum, p, max_steps, episodes, st):
    """Mean undiscounted return of ``episodes`` greedy episodes (:func:`_greedy_return`)."""
    tot = 0.0
    for _ in range(episodes):
        g, _, _ = _greedy_return(Q, nxt, cum, rew, trm, nout, isd_cum, p, max_steps, st)
        tot += g
    return tot / episodes


@njit(cache=True)
def _greedy_is_optimal(Q, nxt, cum, rew, trm, nout, isd_cum, p, optimal_length, checks, st):
    """Whether the greedy path reaches a goal within ``optimal_length`` steps in every one
    of ``checks`` rollouts (ties random, so a lucky tie-break cannot pass)."""
    for _ in range(checks):
        _, n_steps, reached = _greedy_return(Q, nxt, cum, rew, trm, nout, isd_cum, p,
                                             optimal_length, st)
        if not (reached and n_steps <= optimal_length):
            return False
    return True


@njit(cache=True, parallel=True)
def _run_kernel(code, alpha, gamma, epsilon, n_planning, kappa, theta, q_init, keep_last,
                nxt, cum, rew, trm, nout, isd_cum, phase_start, max_steps,
                n_episodes, total_steps, eval_every, eval_episodes, eval_max_steps,
                optimal_length, optimal_checks, max_total_steps, train_st, eval_st,
                out, rew_m, pair, seen_s, seen_a, pred_head, pred_link, info,
                hkey, hprio, hpos, hinfo,
                ep_steps, ep_ret, ep_term, ep_upd, step_rew, eval_score, upd_to_opt,
                final_greedy, Q_out, overflow, budget_hit):
    R = train_st.shape[0]
    by_steps = total_steps > 0
    # Runs are independent (own random streams, own model and queue: leading axis R), so
    # they are spread over the cores; a run's result does not depend on the thread it ran on.
    for r in prange(R):
        st = train_st[r]
        est = eval_st[r]
        Q = Q_out[r]
        Q[:, :] = q_init
        r_out, r_rew, r_pair, r_seen_s, r_seen_a = out[r], rew_m[r], pair[r], seen_s[r], seen_a[r]
        r_pred_head, r_pred_link, r_info = pred_head[r], pred_link[r], info[r]
        r_hkey, r_hprio, r_hpos, r_hinfo = hkey[r], hprio[r], hpos[r], hinfo[r]
        model_reset(r_out, r_rew, r_pair, r_seen_s, r_seen_a, r_pred_head, r_pred_link, r_info)
        queue_clear(r_hkey, r_hprio, r_hpos, r_hinfo)
        t = p = updates = n_eval = ep = 0
        while (t < total_steps) if by_steps else (ep < n_episodes):
            s = _start_state(isd_cum, st)
            steps, ret, term = 0, 0.0, False
            while True:
                p = _phase_at(phase_start, p, t)
                a = epsilon_greedy_action(Q, s, epsilon, st)
                s2, rwd, term = _env_step(nxt, cum, rew, trm, nout, p, s, a, st)
                if by_steps:
                    step_rew[r, t] = rwd
                t += 1
                steps += 1
                ret += rwd
                if code == 0:  # Q-learning: no model (kept apart: the call below costs more)
                    q_update(Q, s, a, rwd, s2, term, alpha, gamma)
                    u, ok = 1, True
                else:
                    u, ok = agent_learn(code, Q, r_out, r_rew, r_pair, r_seen_s, r_seen_a,
                                        r_pred_head, r_pred_link, r_info, r_hkey, r_hprio,
                                        r_hpos, r_hinfo, s, a, rwd, s2, term, t,
                                        alpha, gamma, n_planning, kappa, theta, keep_last, st)
                updates += u
                if not ok:
                    overflow[r] = 1
                if term or (max_steps > 0 and steps >= max_steps):
                    break
                if by_steps and t >= total_steps:
                    break
                if t >= max_total_steps:
                    budget_hit[r] = 1
                    break
                s = s2
            if budget_hit[r]:
                break
            p = _phase_at(phase_start, p, t)  # evaluate in the layout in force for the next step
            if not by_steps:
                ep_steps[r, ep] = steps
                ep_ret[r, ep] = ret
                ep_term[r, ep] = term
                ep_upd[r, ep] = updates
            ep += 1
            if eval_every > 0 and ep % eval_every == 0 and n_eval < eval_score.shape[1]:
                eval_score[r, n_eval] = _mean_greedy_return(Q, nxt, cum, rew, trm, nout,
                                                            isd_cum, p, eval_max_steps,
                                                            eval_episodes, est)
                n_eval += 1
            # the optimal-path check (Example 8.4): default OPTIMAL_CHECKS rollouts
            if optimal_length > 0 and upd_to_opt[r] < 0 and _greedy_is_optimal(
                    Q, nxt, cum, rew, trm, nout, isd_cum, p, optimal_length, optimal_checks,
                    est):
                upd_to_opt[r] = updates
                break
        _, n_steps, reached = _greedy_return(Q, nxt, cum, rew, trm, nout, isd_cum, p,
                                             eval_max_steps, est)
        final_greedy[r] = n_steps if reached else -1


def _kernel_code(agent: str, hp: dict) -> int:
    """Kernel code; Dyna-Q and Dyna-Q+ with n = 0 are one-step Q-learning (Section 8.2:
    planning is what the model is for), so they skip the model and run as ``q_learning``."""
    if agent in ("dyna_q", "dyna_q_plus") and hp["n_planning"] == 0:
        return AGENTS["q_learning"]
    return AGENTS[agent]


# --------------------------------------------------------------------------- Python API
@dataclass
class RunResult:
    """Results of R runs of one agent (see :func:`run_agent` for shapes)."""

    agent: str
    hparams: dict
    run_indices: np.ndarray
    episode_steps: np.ndarray
    episode_return: np.ndarray
    episode_terminated: np.ndarray
    episode_updates: np.ndarray
    step_reward: np.ndarray
    eval_score: np.ndarray
    eval_episode: np.ndarray
    updates_to_optimal: np.ndarray
    final_greedy_steps: np.ndarray
    Q: np.ndarray
    wall_seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def _budget_error(cap: int, bad: list, ep_steps: np.ndarray, episodes: int) -> ConfigError:
    """The error of runs ``bad`` that hit ``cap`` time steps (their ``ep_steps`` rows, -1 for
    episodes not played): an episode that never ended when none finished, else too many
    episodes for the cap."""
    done = int((ep_steps >= 0).sum(axis=1).min())
    if done == 0:
        return ConfigError("max_total_steps", cap,
                           f"run(s) {bad[:5]} took that many steps without finishing episode 1 "
                           "(the policy never reaches a goal?); give the env a max_episode_steps")
    return ConfigError("max_total_steps", cap,
                       f"run(s) {bad[:5]} hit this cap on time steps per run after {done:,} of "
                       f"{episodes:,} episodes: ask for fewer episodes (or, if an episode never "
                       "ends, give the env a max_episode_steps)")


def run_agent(agent: str, hparams: dict, table, *, seed: int, run_indices,
              episodes: int | None = None, total_steps: int | None = None,
              eval_every: int = 0, eval_episodes: int = 0, eval_max_steps: int | None = None,
              optimal_length: int = 0, max_total_steps: int = MAX_TOTAL_STEPS,
              optimal_checks: int = OPTIMAL_CHECKS) -> RunResult:
    """Run R independent runs of a tabular agent on a transition table, in one kernel call.

    Parameters
    ----------
    agent : str
        One of :data:`AGENTS`.
    hparams : dict
        See :data:`HPARAMS` and :func:`validate_hparams`.
    table : envs.tabular.TabularTable
    seed : int
        Experiment seed (>= 0).
    run_indices : int array-like (R,)
        Global run indices; run i's draws depend only on ``(seed, run_indices[i])``.
    episodes : int, optional
        Train for this many episodes (episodes mode) ...
    total_steps : int, optional
        ... or for this many time steps (steps mode; episodes restart as needed).
    eval_every, eval_episodes : int
        After every ``eval_every`` training episodes, the greedy policy (ties random, its own
        random stream) plays ``eval_episodes`` episodes; their mean return is recorded.
    eval_max_steps : int, optional
        Step cap of evaluation episodes (default: the table's limit, else 100 * S).
    optimal_length : int
        If > 0: after every episode greedy rollouts from the start (:data:`OPTIMAL_CHECKS` of
        them, ties random, all must succeed) check whether the policy reaches a goal within
        ``optimal_length`` steps; the run then records its cumulative updates in
        ``updates_to_optimal`` and stops (Example 8.4). Pass the shortest path length times a
        tolerance (e.g. 1.2): with ε-greedy exploration a model can settle on a
        near-shortest path long before it has seen the shortest one.
    optimal_checks : int
        Greedy rollouts of that check, all of which must succeed (>= 1; default
        :data:`OPTIMAL_CHECKS`; the reference implementation of Example 8.4 makes one).
    max_total_steps : int
        Budget of time steps per run in episodes mode (default :data:`MAX_TOTAL_STEPS`): an
        environment without a step limit where the policy never reaches a goal would
        otherwise loop forever inside the compiled kernel, where Ctrl-C cannot reach it.

    Returns
    -------
    RunResult with, for R runs, E episodes, T steps, V evaluations:

    * ``episode_steps`` int64 (R, E): steps per episode; -1 for episodes not played
      because the run stopped at the optimal path; (R, 0) in steps mode.
    * ``episode_return`` float64 (R, E), ``episode_terminated`` bool (R, E)
    * ``episode_updates`` int64 (R, E): cumulative Q updates (real + planning)
    * ``step_reward`` float64 (R, T): reward of each step (steps mode; else (R, 0))
    * ``eval_score`` float64 (R, V) (NaN where not reached), ``eval_episode`` int64 (V,);
      V = E // eval_every, or T // eval_every in steps mode (an upper bound that depends
      only on the schedule, so results of separately run batches line up)
    * ``updates_to_optimal`` int64 (R,): -1 if never (or not asked)
    * ``final_greedy_steps`` int64 (R,): steps of one greedy episode (ties random) after
      training, in the layout then in force; -1 if it does not reach a goal within
      ``eval_max_steps`` (e.g. whether Dyna-Q+ found the shortcut of Figure 8.5)
    * ``Q`` float64 (R, S, A): final action values

    Raises
    ------
    ConfigError
        Bad agent or hyper-parameters, neither or both of ``episodes``/``total_steps``,
        negative counts, a stochastic environment with more distinct outcomes per (s, a)
        than the table lists, or a run that exhausted ``max_total_steps`` (field
        ``max_total_steps``; the message says after how many of the episodes: too many
        episodes for the cap, or an episode that never ends).
    """
    from envs.tabular import TabularTable

    hp = validate_hparams(agent, hparams)
    if not isinstance(table, TabularTable):
        raise ConfigError("table", type(table).__name__,
                          "must be an envs.tabular.TabularTable (envs.make_table)")
    try:
        raw = list(np.asarray(run_indices, dtype=object).reshape(-1))
    except TypeError:
        raw = [run_indices]
    runs = np.array([check_range("run_indices", v, 0, 2**62, integer=True) for v in raw],
                    dtype=np.int64)
    if runs.size == 0:
        raise ConfigError("run_indices", [], "must be a non-empty list of indices >= 0")
    check_range("seed", seed, 0, 2**63 - 1, integer=True)
    if (episodes is None) == (total_steps is None):
        raise ConfigError("schedule", {"episodes": episodes, "total_steps": total_steps},
                          "give exactly one of episodes and total_steps")
    E = 0 if episodes is None else check_range("episodes", episodes, 1, 10**8, integer=True)
    T = 0 if total_steps is None else check_range("total_steps", total_steps, 1, 10**9,
                                                  integer=True)
    if runs.size * (E + T) > 5 * 10**8:
        raise ConfigError("episodes" if E else "total_steps", E or T,
                          f"x {runs.size} runs needs more than 5e8 result cells; use fewer "
                          "runs per call")
    eval_every = check_range("eval_every", eval_every, 0, integer=True)
    eval_episodes = check_range("eval_episodes", eval_episodes, 0, integer=True)
    if eval_every > 0 and eval_episodes < 1:
        raise ConfigError("eval_episodes", eval_episodes, "must be >= 1 when eval_every > 0")
    optimal_length = check_range("optimal_length", optimal_length, 0, 2**62, integer=True)
    optimal_checks = check_range("optimal_checks", optimal_checks, 1, 1000, integer=True)
    max_total_steps = check_range("max_total_steps", max_total_steps, 1, 2**62, integer=True)
    S, A, K = table.n_states, table.n_actions, table.max_outcomes
    if eval_max_steps is None:
        eval_max_steps = table.max_episode_steps or 100 * S
    eval_max_steps = check_range("eval_max_steps", eval_max_steps, 1, 2**62, integer=True)
    R = runs.size
    # evaluations: exact count in episodes mode; an upper bound in steps mode (every episode
    # takes at least one step), fixed by the schedule alone
    V = (E // eval_every if E else T // eval_every) if eval_every else 0
    ep_steps = np.full((R, E), -1, np.int64)
    ep_ret = np.zeros((R, E))
    ep_term = np.zeros((R, E), np.bool_)
    ep_upd = np.zeros((R, E), np.int64)
    step_rew = np.zeros((R, T))
    eval_score = np.full((R, V), np.nan)
    upd_to_opt = np.full(R, -1, np.int64)
    final_greedy = np.full(R, -1, np.int64)
    Q = np.empty((R, S, A))
    overflow = np.zeros(R, np.int64)
    budget_hit = np.zeros(R, np.int64)
    # a changing environment can show up to K outcomes per phase for the same (s, a)
    m = new_model(S, A, K * table.phase_start.shape[0], runs=R)
    q = new_queue(S * A, runs=R)
    t0 = time.perf_counter()
    _run_kernel(_kernel_code(agent, hp), hp["alpha"], hp["gamma"], hp["epsilon"], hp["n_planning"],
                hp.get("kappa", 0.0), hp.get("theta", 0.0), hp["q_init"], hp.get("model") == "last",
                table.next_state, table.cum_prob, table.reward, table.terminated, table.n_outcomes,
                table.isd_cum, table.phase_start, table.max_episode_steps,
                E, T, eval_every, eval_episodes, eval_max_steps, optimal_length, optimal_checks,
                max_total_steps if E else 2**62, run_states(seed, runs, STREAM_TRAIN),
                run_states(seed, runs, STREAM_EVAL), *m, *q,
                ep_steps, ep_ret, ep_term, ep_upd, step_rew, eval_score, upd_to_opt, final_greedy,
                Q, overflow, budget_hit)
    wall = time.perf_counter() - t0
    if budget_hit.any():
        raise _budget_error(max_total_steps, runs[budget_hit > 0].tolist(),
                            ep_steps[budget_hit > 0], E)
    if overflow.any():
        raise ConfigError("env", table.meta.get("resolved_id", "table"),
                          f"has more distinct outcomes per (s, a) than its table lists (K={K})")
    eval_episode = ((np.arange(1, V + 1, dtype=np.int64) * eval_every) if V
                    else np.zeros(0, np.int64))
    return RunResult(agent, hp, runs, ep_steps, ep_ret, ep_term, ep_upd, step_rew, eval_score,
                     eval_episode, upd_to_opt, final_greedy, Q, wall)


def warmup() -> float:
    """Compile (or load from numba's on-disk cache) every kernel; returns seconds taken."""
    import envs

    t0 = time.perf_counter()
    table, _ = envs.make_table("FrozenLake", is_slippery=True)
    for name in AGENTS:
        run_agent(name, {}, table, seed=0, run_indices=[0], episodes=2, eval_every=1,
                  eval_episodes=1, optimal_length=1)
        run_agent(name, {}, table, seed=0, run_indices=[0], total_steps=5)
    return time.perf_counter() - t0


class DynaAgent:
    """One run of a tabular agent, stepped from Python against any Gymnasium env.

    The same compiled update functions as :func:`run_agent` do the work. (A Python-driven
    run does not draw the same random numbers as the kernel, which also draws the
    environment's randomness -- start states, slips -- from the run's stream.)

    Parameters
    ----------
    agent : str
        One of :data:`AGENTS`.
    n_states, n_actions : int
    seed, run_index : int
        Seed the agent's random stream (ε-greedy draws, tie-breaking, planning samples).
    max_outcomes : int
        K of the model (distinct outcomes kept per (s, a)).
    **hparams
        See :data:`HPARAMS`.

    Examples
    --------
    >>> agent = DynaAgent("dyna_q", 16, 4, n_planning=5)          # doctest: +SKIP
    >>> a = agent.act(s); s2, r, term, trunc, _ = env.step(a)     # doctest: +SKIP
    >>> agent.learn(s, a, r, s2, term, trunc)                     # doctest: +SKIP
    """

    def __init__(self, agent: str, n_states: int, n_actions: int, *, seed: int = 0,
                 run_index: int = 0, max_outcomes: int = 8, **hparams):
        self.agent = agent
        self.hparams = validate_hparams(agent, hparams)
        self.code = _kernel_code(agent, self.hparams)
        n_states = check_range("n_states", n_states, 1, 10**8, integer=True)
        n_actions = check_range("n_actions", n_actions, 1, 10**6, integer=True)
        max_outcomes = check_range("max_outcomes", max_outcomes, 1, 10**4, integer=True)
        seed = check_range("seed", seed, 0, 2**63 - 1, integer=True)
        run_index = check_range("run_index", run_index, 0, 2**62, integer=True)
        self.Q = np.full((n_states, n_actions), self.hparams["q_init"])
        self.model = new_model(n_states, n_actions, max_outcomes)
        self.queue = new_queue(n_states * n_actions)
        self.rng_state = run_states(seed, [run_index])[0]
        self.t = 0
        self.updates = 0

    def _obs(self, s, name):
        if isinstance(s, tuple):
            raise ConfigError(name, s,
                              "is a tuple: pass the observation, not reset()'s (obs, info)")
        return self._index(s, name, self.Q.shape[0])

    @staticmethod
    def _index(v, name, n):
        import numbers

        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
            raise ConfigError(name, v, "must be an integer")
        if not (0 <= v < n):
            raise ConfigError(name, v, f"must be in [0, {n})")
        return int(v)

    def act(self, s, greedy: bool = False) -> int:
        """ε-greedy action in state ``s`` (greedy with random ties if ``greedy``)."""
        s = self._obs(s, "s")
        if greedy:
            return int(greedy_action(self.Q, s, self.rng_state))
        return int(epsilon_greedy_action(self.Q, s, self.hparams["epsilon"], self.rng_state))

    def learn(self, s, a, r, s2, terminated: bool, truncated: bool = False) -> int:
        """Learn from one real transition; returns the number of Q updates made.

        ``truncated`` never stops the bootstrap; only ``terminated`` does (when both are
        true, the step is terminal).
        """
        import math

        s, s2 = self._obs(s, "s"), self._obs(s2, "s2")
        a = self._index(a, "a", self.Q.shape[1])
        if isinstance(r, (bool, np.bool_)) \
                or not isinstance(r, (int, float, np.integer, np.floating)) \
                or not math.isfinite(r):
            raise ConfigError("r", r, "must be a finite number")
        for flag, v in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(v, (bool, np.bool_)):
                raise ConfigError(flag, v, "must be a bool")
        self.t += 1
        u, ok = agent_learn(self.code, self.Q, *self.model, *self.queue, s, int(a), float(r), s2,
                            bool(terminated), self.t, self.hparams["alpha"], self.hparams["gamma"],
                            self.hparams["n_planning"], self.hparams.get("kappa", 0.0),
                            self.hparams.get("theta", 0.0), self.hparams.get("model") == "last",
                            self.rng_state)
        if not ok:
            raise ConfigError("max_outcomes", self.model[0].shape[2], f"exceeded at (s={s}, a={a})")
        self.updates += int(u)
        return int(u)
