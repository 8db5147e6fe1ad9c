"""The ``dyna_q`` and ``dyna_q_plus`` variants: the tabular RL baseline on the agent tasks.

The tabular agents of :class:`dyna.agents.DynaAgent` (the same compiled kernels as the
chapter 8 experiments) over the state ``(family, position)`` and the actions ``(tool,
value)``, learning a transition-table model of tool outcomes and planning from it;
Dyna-Q+ adds the exploration bonus ``kappa * sqrt(tau)`` that makes it revisit calls not
tried for long. They act epsilon-greedily instead of through the shared policy model (an
RL agent's own behaviour policy) and carry no context tokens.
"""

from __future__ import annotations

from dyna.agents.loop_agents.params import TABULAR_DEFAULTS

__all__ = ["TabularPlayer"]


class TabularPlayer:
    """A tabular Dyna agent playing one :class:`envs.agent_tasks.AgentTaskEnv`.

    Parameters
    ----------
    name : {"dyna_q", "dyna_q_plus"}
    env : envs.agent_tasks.AgentTaskEnv
    seed : int
        The agent's random stream.
    hparams : dict
        On top of :data:`~dyna.agents.loop_agents.params.TABULAR_DEFAULTS` (``kappa`` is
        dropped for ``dyna_q``).
    """

    def __init__(self, name: str, env, seed: int, hparams: dict):
        from dyna.agents.tabular import DynaAgent

        hp = {**TABULAR_DEFAULTS, **hparams}
        if name == "dyna_q":
            hp.pop("kappa", None)
        n_states = env.n_families * (env.length + 1)
        #: The tool slot of each tool action: every ordinary slot, the spare ones for
        #: renamed tools included (they error until a rename installs them), never the
        #: harmful tool.
        self.slots = [t for t in range(env.action_space.nvec[0]) if t != env.harmful_tool]
        self.agent = DynaAgent(name, n_states, len(self.slots) * env.n_values, seed=seed, **hp)

    def play(self, env, family: int) -> tuple[list, dict]:
        """Play the episode: state ``family * (length + 1) + position``, action ``slot *
        n_values + value``; the env's reward (1 on success), model and planning per real
        step (Sutton & Barto 8.2/8.3). Returns ``(calls, info)`` as
        :func:`dyna.agents.loop_agents.policy.act` does."""
        nv, base = env.n_values, family * (env.length + 1)
        calls, info = [], None
        s = base + env.position
        while True:
            a = self.agent.act(s)
            call = (self.slots[a // nv], a % nv)
            _, r, terminated, truncated, info = env.step(call)
            s2 = base + env.position
            self.agent.learn(s, a, r, s2, terminated, truncated)
            calls.append((call, info["tool_output"], env.last_result != 1))
            s = s2
            if terminated or truncated:
                return calls, info
