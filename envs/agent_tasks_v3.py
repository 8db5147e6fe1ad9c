"""``dyna/AgentTasks-v3``: ``dyna/AgentTasks-v2`` with the extra wordings drawn after the
world, so that the number of wordings changes nothing else.

Everything is as in :class:`envs.agent_tasks_v2.AgentTaskEnvV2` (read its module docstring)
but one thing. In v2 the trigger words of the wordings beyond the first are part of the
world's own vocabulary draw, so ``n_paraphrases`` changes how many words the world draws and
with it every later draw of the world stream (triggers, procedures, destructive tools):
1, 2, 4 and 8 wordings are four different worlds, and a difference between grid points mixes
the effect of the wordings with that of the world. In v3 the world is drawn exactly as at
one wording, and the extra wordings' words are drawn afterwards, from a stream of their own
(:data:`WORDING_STREAM`), among the words the world did not take; their ids follow every
other word's. So at every ``n_paraphrases`` the vocabulary's first ``vocab_size`` words, the
procedures, the arrivals and every per-episode draw are those of one wording, and only the
task texts (which wording each fresh task shows, from the ``paraphrase`` stream) differ.
With ``n_paraphrases = 1`` v3 and v2 are the same environment, draw for draw.

Version history
    v3: the extra wordings drawn after the world. v0, v1 and v2 are unchanged.
"""

from __future__ import annotations

import numpy as np

from envs.agent_task_world import word_list
from envs.agent_tasks_v2 import EARLIER_STREAMS, V2_STREAMS, AgentTaskEnvV2

__all__ = ["AgentTaskEnvV3", "WORDING_STREAM"]

#: Index of the stream the extra wordings' words are drawn from: the child of the world
#: seed's SeedSequence spawned after v2's (so no earlier stream moves).
WORDING_STREAM = EARLIER_STREAMS + len(V2_STREAMS)


class AgentTaskEnvV3(AgentTaskEnvV2):
    """``dyna/AgentTasks-v3`` (see the module docstring).

    Parameters
    ----------
    preset : {"base", "tau_airline"}
        As :class:`envs.agent_tasks_v2.AgentTaskEnvV2`.
    **kwargs
        Any keyword of :class:`envs.agent_tasks_v2.AgentTaskEnvV2`.

    Raises
    ------
    ConfigError
        As :class:`envs.agent_tasks_v2.AgentTaskEnvV2`.
    """

    def __init__(self, preset: str = "base", **kwargs):
        super().__init__(preset, **kwargs)
        self.n_late_words = self.n_paraphrase_words

    def _paraphrase_word_ids(self) -> np.ndarray:
        """Draw the extra wordings' words among those the world did not take, from their
        own stream, append them to the vocabulary and return their ids: int64
        ``(n_paraphrase_words,)``, the ids after every other word's."""
        n = self.n_paraphrase_words
        first = len(self.vocabulary)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        taken = set(self.vocabulary)
        rest = [w for w in word_list() if w not in taken]
        seed = np.random.SeedSequence(self._world_seed).spawn(WORDING_STREAM + 1)[-1]
        pick = np.random.Generator(np.random.PCG64(seed)).choice(len(rest), size=n,
                                                                 replace=False)
        self.vocabulary = self.vocabulary + tuple(rest[i] for i in pick.tolist())
        return first + np.arange(n, dtype=np.int64)
