"""The random streams of one loop-agent run, shared by every variant (common random numbers).

Every stream is a child of the run's ``SeedSequence([seed, run_index])``, tagged by a
``spawn_key``; the env's own streams come from the same sequence
(:func:`dyna.agents.loop_agents.run_loop_agent`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["STREAM_APPROVER", "STREAM_POLICY", "STREAM_REVIEWER", "STREAM_TABULAR",
           "agent_streams"]

#: ``spawn_key`` tags of the agent's random streams, children of the run's
#: ``SeedSequence([seed, run_index])`` (:func:`agent_streams`).
STREAM_POLICY, STREAM_REVIEWER, STREAM_TABULAR, STREAM_APPROVER = 1, 2, 3, 4


def agent_streams(seed: int, run_index: int) -> dict:
    """The seeds of one run's agent-side random streams (common random numbers).

    Every stream derives from ``(seed, run_index)`` only, never from the variant, so two
    variants that make the same decisions draw the same numbers: ``policy(t)`` is the
    generator of episode ``t`` (a fresh substream per episode, so variants that diverged
    once are back in step at the next episode), ``reviewer`` seeds the
    :class:`~dyna.agents.loop_agents.ProcedureReviewer` (which draws per run id),
    ``tabular`` the Dyna agents, and ``approver(t, k)`` is the simulated approver's uniform
    draw for a proposal it first saw at episode ``t`` whose text has CRC-32 ``k`` (keyed by
    content, not by a staging counter, so the same proposal gets the same answer in every
    variant).

    Parameters
    ----------
    seed, run_index : int
        Each >= 0.

    Returns
    -------
    dict
        ``{"policy": callable t -> numpy.random.Generator, "reviewer": int,
        "tabular": int, "approver": callable (t, k) -> float}``; ``policy(t)`` is
        ``Generator(PCG64(SeedSequence([seed, run_index], spawn_key=(STREAM_POLICY, t))))``.
    """
    entropy = [int(seed), int(run_index)]

    def policy(t: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(entropy,
                                                            spawn_key=(STREAM_POLICY, t)))

    def child(tag: int) -> int:
        return int(np.random.SeedSequence(entropy, spawn_key=(tag,)).generate_state(1)[0])

    def approver(t: int, k: int) -> float:
        ss = np.random.SeedSequence(entropy, spawn_key=(STREAM_APPROVER, t, k))
        return float(np.random.default_rng(ss).random())

    return {"policy": policy, "reviewer": child(STREAM_REVIEWER),
            "tabular": child(STREAM_TABULAR), "approver": approver}
