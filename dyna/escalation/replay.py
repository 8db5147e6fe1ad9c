"""Lockstep replay of outcome streams through vectorised escalation policies.

:func:`run_policies` is the engine of the escalation benchmark
(:mod:`dyna.experiment.kinds.escalation`): one lane per policy x stream, all lanes advanced
one task at a time, each keeping a Beta posterior per task type; it agrees step for step
with :class:`envs.escalation.EscalationEnv`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dyna.errors import ConfigError

__all__ = ["run_policies"]


def run_policies(policies, lane_policy, types, outcomes, *, n_types: int,
                 c_escalate, c_failure, c_act=0.0, verified=None,
                 requires_provenance=False, prior=(1.0, 1.0), discount=1.0,
                 discount_clock: str = "step", feedback: str = "censored", u=None,
                 checkpoints=None) -> dict:
    """Replay outcome streams through policies, all lanes in lockstep.

    Each lane is one policy on one stream of ``T`` tasks. At step t the lane's task has
    type ``types[l, t]``; the policy reads that type's posterior and acts or escalates.
    Acting costs ``c_act`` plus ``c_failure`` if the agent fails (``outcomes[l, t]`` is
    False); escalating costs ``c_escalate`` and always succeeds. The outcome is observed
    when the lane acted, or always with ``feedback="full"`` (shadow mode); an observed
    outcome counts as evidence unless the lane ``requires_provenance`` and the outcome is
    not ``verified``.

    Discounting (Raj & Kalyani 2017) with the lane's ``discount`` d < 1 decays evidence as
    ``a <- a0 + d (a - a0)`` (and ``b``) on one of two clocks: ``discount_clock="step"``
    (discounted Thompson sampling as published: at every task *every* type decays, so a
    type that stops being observed drifts back to the prior and gets explored again) or
    ``"update"`` (only the type being updated decays, just before its update -- the clock
    of :meth:`dyna.competence.BetaCompetence.update`).

    Parameters
    ----------
    policies : sequence of Policy
    lane_policy : array_like of int, shape (L,)
        Index into ``policies`` for each lane.
    types : array_like of int, shape (L, T)
        Task type of each step, in ``0 .. n_types - 1``.
    outcomes : array_like of bool, shape (L, T)
        Whether the agent would succeed on the task (revealed only as above).
    n_types : int
    c_escalate, c_failure : float or array_like, shape (L,)
    c_act : float or array_like, shape (L,) or (L, T)
        Cost of an attempt (e.g. per-task API cost).
    verified : array_like of bool, shape (L, T), optional
        Outcome has provenance (default all True).
    requires_provenance : bool or array_like of bool, shape (L,)
    prior : (float, float) or array_like, shape (L, 2)
        Beta prior shapes per lane.
    discount : float or array_like, shape (L,)
        In (0, 1].
    discount_clock : {"step", "update"}
    feedback : {"censored", "full"}
    u : array_like of float64, shape (L, T, 2), optional
        Uniforms for randomised policies (required if any is).
    checkpoints : array_like of int, optional
        Steps (1-based counts of tasks seen) after which every type's ``a`` and ``b`` are
        recorded.

    Returns
    -------
    dict of ndarray
        ``act`` (L, T) bool; ``observed`` (L, T) bool; ``cost`` (L, T) float64;
        ``score`` (L, T) float64, the posterior mean of the task's type at decision time;
        ``n_counted`` (L, T) float64, its counted evidence; and with ``checkpoints``
        ``a_ck``, ``b_ck`` of shape (C, L, n_types).

    Raises
    ------
    ConfigError
        Shape mismatch, a type outside the range, bad feedback mode, missing uniforms.
    """
    types = np.asarray(types)
    outcomes = np.asarray(outcomes, dtype=bool)
    if types.ndim != 2 or outcomes.shape != types.shape:
        raise ConfigError("outcomes", outcomes.shape, f"must match types {types.shape}, (L, T)")
    L, T = types.shape
    if L and T and (types.min() < 0 or types.max() >= n_types):
        raise ConfigError("types", int(types.max()), f"must lie in 0..{n_types - 1}")
    if feedback not in ("censored", "full"):
        raise ConfigError("feedback", feedback, "must be 'censored' or 'full'")
    if discount_clock not in ("step", "update"):
        raise ConfigError("discount_clock", discount_clock, "must be 'step' or 'update'")
    lane_policy = np.asarray(lane_policy, dtype=np.int64).reshape(L)
    lanes = _Lanes.broadcast(L, T, verified, requires_provenance, prior, discount, c_escalate,
                             c_failure, c_act)
    groups = _policy_groups(policies, lane_policy)
    if any(pol.randomised for pol, _ in groups):
        if u is None:
            raise ConfigError("u", None, "randomised policies need uniforms (L, T, 2)")
        u = np.asarray(u, dtype=np.float64)
        if u.shape != (L, T, 2):
            raise ConfigError("u", u.shape, f"must have shape ({L}, {T}, 2)")
    full = feedback == "full"
    ck = np.asarray([] if checkpoints is None else checkpoints, dtype=np.int64)
    act, score, n_counted, a_ck, b_ck = _replay(groups, lanes, types, outcomes, n_types, full,
                                                discount_clock, u, ck)
    observed = act | full
    cost = np.where(act, lanes.c_a + np.where(outcomes, 0.0, lanes.c_f[:, None]),
                    lanes.c_e[:, None])
    out = {"act": act, "observed": observed, "cost": cost, "score": score,
           "n_counted": n_counted}
    if checkpoints is not None:
        out["a_ck"], out["b_ck"] = a_ck, b_ck
    return out


@dataclass(frozen=True)
class _Lanes:
    """The per-lane settings of :func:`run_policies`, broadcast to ``L`` lanes."""

    verified: np.ndarray     # (L, T) bool
    need_prov: np.ndarray    # (L,) bool
    a0: np.ndarray           # (L,) prior shapes
    b0: np.ndarray
    disc: np.ndarray         # (L,) discount
    c_e: np.ndarray          # (L,) cost of an escalation
    c_f: np.ndarray          # (L,) cost of a failure
    c_a: np.ndarray          # (L, T) cost of an attempt

    @classmethod
    def broadcast(cls, L, T, verified, requires_provenance, prior, discount, c_escalate,
                  c_failure, c_act) -> _Lanes:
        """The arguments of :func:`run_policies` for ``L`` lanes of ``T`` steps."""
        verified = np.ones((L, T), dtype=bool) if verified is None else \
            np.asarray(verified, dtype=bool)
        need_prov = np.broadcast_to(np.asarray(requires_provenance, dtype=bool), (L,))
        prior = np.broadcast_to(np.asarray(prior, dtype=np.float64), (L, 2))
        a0, b0 = prior[:, 0].copy(), prior[:, 1].copy()
        disc = np.broadcast_to(np.asarray(discount, dtype=np.float64), (L,))
        c_e = np.broadcast_to(np.asarray(c_escalate, dtype=np.float64), (L,))
        c_f = np.broadcast_to(np.asarray(c_failure, dtype=np.float64), (L,))
        c_a = np.asarray(c_act, dtype=np.float64)
        c_a = np.broadcast_to(c_a[:, None] if c_a.ndim == 1 else c_a, (L, T))
        return cls(verified, need_prov, a0, b0, disc, c_e, c_f, c_a)


def _policy_groups(policies, lane_policy: np.ndarray) -> list:
    """``(policy, lanes)`` for every policy that has lanes; a contiguous block of lanes is a
    slice (its arrays are views), any other set an index array."""
    groups = [(pol, np.flatnonzero(lane_policy == i)) for i, pol in enumerate(policies)]
    return [(pol, slice(int(lanes[0]), int(lanes[-1]) + 1)
             if lanes[-1] - lanes[0] + 1 == lanes.size else lanes)
            for pol, lanes in groups if lanes.size]


def _replay(groups, lanes: _Lanes, types, outcomes, n_types, full, discount_clock, u,
            ck) -> tuple:
    """The step loop of :func:`run_policies`: ``(act, score, n_counted, a_ck, b_ck)``."""
    L, T = types.shape
    a0, b0, disc = lanes.a0, lanes.b0, lanes.disc
    whole = groups[0][0] if len(groups) == 1 and \
        np.arange(L)[groups[0][1]].size == L else None
    A = np.repeat(a0[:, None], n_types, axis=1)
    B = np.repeat(b0[:, None], n_types, axis=1)
    lanes_all = np.arange(L)
    act = np.zeros((L, T), dtype=bool)
    score = np.empty((L, T), dtype=np.float64)
    n_counted = np.empty((L, T), dtype=np.float64)
    a_ck = np.empty((ck.size, L, n_types))
    b_ck = np.empty((ck.size, L, n_types))
    ck_pos = {int(c): i for i, c in enumerate(ck)}
    discounting = bool((disc != 1.0).any())
    step_clock = discounting and discount_clock == "step"
    if step_clock:
        a0c, b0c, dc = a0[:, None], b0[:, None], disc[:, None]
    for t in range(T):
        k = types[:, t]
        a = A[lanes_all, k]
        b = B[lanes_all, k]
        n = (a - a0) + (b - b0)
        score[:, t] = a / (a + b)
        n_counted[:, t] = n
        if whole is not None:  # one policy on every lane: no gathers
            act[:, t] = whole.act(a, b, n, u[:, t].T if whole.randomised else None)
        else:
            for pol, sel in groups:
                ut = u[sel, t, :].T if pol.randomised else None
                act[sel, t] = pol.act(a[sel], b[sel], n[sel], ut)
        seen = act[:, t] | full
        upd = seen & (lanes.verified[:, t] | ~lanes.need_prov)
        if step_clock:
            A = a0c + dc * (A - a0c)
            B = b0c + dc * (B - b0c)
        if upd.any():
            li, ki = lanes_all[upd], k[upd]
            if discounting and not step_clock:
                d = disc[upd]
                A[li, ki] = a0[upd] + d * (A[li, ki] - a0[upd])
                B[li, ki] = b0[upd] + d * (B[li, ki] - b0[upd])
            win = outcomes[upd, t]
            A[li, ki] += win
            B[li, ki] += ~win
        if t + 1 in ck_pos:
            a_ck[ck_pos[t + 1]] = A
            b_ck[ck_pos[t + 1]] = B
    return act, score, n_counted, a_ck, b_ck
