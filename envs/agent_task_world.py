"""The hidden world of the agent tasks and what an agent may ask of it.

:class:`TaskWorld` is a base class of :class:`envs.agent_tasks.AgentTaskEnv`: it builds the
world from a seed (vocabulary, trigger words, procedures, destructive tools, the random
streams of the episodes) and answers the questions about it (a family's procedure, which
family a set of words names, which tools exist now). The environment's ``__init__`` sets
the sizes it reads (``n_families``, ``n_triggers``, ``n_tools``, ...); see the module
docstring of :mod:`envs.agent_tasks` for the whole specification.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from dyna.errors import ConfigError

__all__ = ["TaskWorld", "V1_STREAMS", "tool_name", "word_list"]

#: Streams of the v1 mechanics, one :class:`numpy.random.SeedSequence` child each, spawned
#: after v0's five (world, arrivals, drift, injection, judge), so v0's draws are unchanged.
V1_STREAMS = ("world_v1", "silent", "destructive", "planted_follow")
#: The v1 streams that draw afresh for every episode (:meth:`TaskWorld._episode_draws`).
EPISODE_STREAMS = ("silent", "destructive", "planted_follow")

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def word_list() -> list[str]:
    """The 4,900 made-up words (consonant-vowel-consonant-vowel, e.g. ``"bako"``) the
    vocabulary is drawn from, in a fixed order. None is an English stop-word, none holds a
    digit, so they never count as concrete parts of a lesson."""
    syl = [c + v for c in _CONSONANTS for v in _VOWELS]
    return [a + b for a, b in itertools.product(syl, syl)]


def tool_name(i: int) -> str:
    """The name of ordinary tool ``i``: ``tool_a`` ... ``tool_z``, then ``tool_26`` ..."""
    return f"tool_{chr(ord('a') + i)}" if i < 26 else f"tool_{i}"


def _generator(ss: np.random.SeedSequence) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(ss))


class TaskWorld:
    """The seeded hidden world of :class:`envs.agent_tasks.AgentTaskEnv`.

    Built by :meth:`_build_world` at a seeded reset. Its attributes: ``vocabulary`` (the
    words, by id), ``triggers`` (int64 ``(n_families, n_triggers)`` word ids), ``tools`` and
    ``values`` (int64 ``(n_families, length)``: each family's procedure now), ``destructive``
    (int64 ``(n_families,)``: each family's destructive tool), ``installed`` (bool, one per
    tool slot: the tool exists now) and ``drift_log`` (the drifts so far).
    """

    #: Words of ``vocab_size`` that a later version draws after the world, from a stream of
    #: its own, so that they move none of the world's draws (0: every word is drawn here).
    n_late_words = 0

    # ------------------------------------------------------------------ building
    def _build_world(self, seed) -> None:
        ss = np.random.SeedSequence(seed)
        world, arrivals, drift, injection, judge = (_generator(s) for s in ss.spawn(5))
        # the v1 mechanics' streams come after v0's five, so v0's draws never move
        self._v1_seeds = dict(zip(V1_STREAMS, ss.spawn(len(V1_STREAMS))))
        words = word_list()
        n_own = self.vocab_size - self.n_shared_words - self.n_late_words
        pick = world.choice(len(words), size=n_own, replace=False)
        vocab = [words[i] for i in pick]
        self.triggers = np.arange(self.n_families * self.n_triggers,
                                  dtype=np.int64).reshape(self.n_families, self.n_triggers)
        if self.n_shared_words:
            vocab += self._share_triggers(words, pick, n_own)
        self.vocabulary = tuple(vocab)
        self._word_families: dict[str, set] = {}
        for f in range(self.n_families):
            for i in self.triggers[f]:
                self._word_families.setdefault(self.vocabulary[i], set()).add(f)
        self.tools = world.integers(0, self.n_tools, size=(self.n_families, self.length))
        self.values = world.integers(0, self.n_values, size=(self.n_families, self.length))
        # one destructive tool per family: one of its procedure's tools (own stream)
        w_d = _generator(self._v1_seeds["destructive"].spawn(1)[0])
        self.destructive = np.array([self.tools[f, int(w_d.integers(self.length))]
                                     for f in range(self.n_families)], dtype=np.int64)
        # the per-episode draws of each mechanic: children of this root, keyed by episode
        self._episode_roots = {k: self._v1_seeds[k].spawn(1)[0] for k in EPISODE_STREAMS}
        self.installed = np.ones(self.n_tools + 1 + self.n_spare_tools, dtype=bool)
        self.installed[self.n_tools + 1:] = False
        self.tool_names = self._base_names
        self.tool_trusted = self._base_trusted
        self._spare_next = 0
        self._rng_arrivals, self._rng_drift = arrivals, drift
        self._rng_injection, self._rng_judge = injection, judge
        self.drift_log: list[dict] = []
        self.episode = -1
        self._drift_next = 0
        self._world_ready = True

    def _share_triggers(self, words: list[str], pick: np.ndarray, n_own: int) -> list[str]:
        """Draw the shared trigger pool (its words, returned) and put each family's first
        ``n_shared_triggers`` trigger slots on words of it (distinct within a family); its
        last slots stay its own, so a task's title (its first words, what a reviewer keys a
        lesson on) names other families too."""
        w1 = _generator(self._v1_seeds["world_v1"])
        taken = set(pick.tolist())
        rest = np.array([i for i in range(len(words)) if i not in taken])
        shared_words = [words[i] for i in w1.choice(rest, size=self.n_shared_words,
                                                     replace=False)]
        for f in range(self.n_families):
            shared = n_own + w1.choice(self.n_shared_words, size=self.n_shared_triggers,
                                       replace=False)
            self.triggers[f, :self.n_shared_triggers] = shared
        return shared_words

    def _episode_draws(self, stream: str, episode: int) -> np.ndarray:
        """``max_steps`` uniforms of one v1 mechanic (:data:`EPISODE_STREAMS`) for one
        episode: the first ``max_steps`` of ``Generator(PCG64(SeedSequence(root.entropy,
        spawn_key=root.spawn_key + (episode,))))``, ``root`` the mechanic's own child of the
        world seed. Element ``i`` (the draw for the episode's step ``i``) is the same
        whatever the budget and whatever the agent did before.

        Returns
        -------
        numpy.ndarray of float64, shape (max_steps,), read-only
        """
        root = self._episode_roots[stream]
        ss = np.random.SeedSequence(root.entropy, spawn_key=root.spawn_key + (episode,))
        draws = _generator(ss).random(self.max_steps)
        draws.flags.writeable = False
        return draws

    def _need_world(self) -> None:
        if not self._world_ready:
            raise ConfigError("reset", None, "call reset() before using the world")

    # ------------------------------------------------------------------ tasks
    def _family_of_uniform(self, u: float) -> int:
        """The family a uniform draw ``u`` picks by arrival frequency: the first family
        whose cumulative arrival probability exceeds ``u``."""
        f = int(np.searchsorted(self._arrival_cum, u, side="right"))
        return min(f, self.n_families - 1)

    def _next_task(self) -> tuple[int, np.ndarray]:
        """The next task: its family (drawn by arrival frequency) and its description's
        word ids (the family's triggers, then fresh distractors), both from the arrivals
        stream."""
        rng = self._rng_arrivals
        f = self._family_of_uniform(rng.random())
        base = self.n_families * self.n_triggers
        distract = base + rng.choice(self.n_distractor_words, size=self.n_distractors,
                                     replace=False)
        return f, np.concatenate([self.triggers[f], distract.astype(np.int64)])

    # ------------------------------------------------------------------ questions
    def procedure(self, family: int) -> tuple[tuple[int, int], ...]:
        """The current true procedure of ``family``: ``length`` pairs ``(tool, value)``
        (used by the oracle and by analyses; an agent that reads it is cheating)."""
        self._need_world()
        return tuple(zip(self.tools[family].tolist(), self.values[family].tolist()))

    def call_text(self, tool: int, value: int) -> str:
        """A call as text: ``"tool_c val_2"``."""
        return f"{self.tool_names[tool]} {self.value_names[value]}"

    def trigger_words(self, family: int) -> tuple[str, ...]:
        """The trigger words of ``family``."""
        self._need_world()
        return tuple(self.vocabulary[i] for i in self.triggers[family])

    def family_of_words(self, words: Sequence[str]) -> int | None:
        """The family whose trigger words all occur in ``words`` (None if none; the
        lowest such family if several)."""
        self._need_world()
        ws = set(words)
        cands = set()
        for w in ws:
            cands |= self._word_families.get(w, set())
        for f in sorted(cands):
            if all(self.vocabulary[i] in ws for i in self.triggers[f]):
                return f
        return None

    def family_of_key(self, words: Sequence[str]) -> int | None:
        """The one family whose trigger words include every word of ``words`` (a lesson's
        key: the first words of a task title), None when no family or several do (a key
        made only of shared words is ambiguous). With the key equal to a family's whole
        trigger set (v0: two triggers, two key words) this is :meth:`family_of_words`."""
        self._need_world()
        ws = set(words)
        if not ws:
            return None
        cands = None
        for w in ws:
            fams = self._word_families.get(w, set())
            cands = set(fams) if cands is None else cands & fams
            if not cands:
                return None
        return next(iter(cands)) if len(cands) == 1 else None

    def families_of_word(self, word: str) -> frozenset:
        """The families that have ``word`` among their triggers (two or more for a word of
        the shared pool, see ``shared_trigger_fraction``)."""
        self._need_world()
        return frozenset(self._word_families.get(word, ()))

    def tool_index(self, name: str) -> int | None:
        """Index of the tool called ``name`` now (None for a name no tool has); after a
        rename the old name still maps to its slot, which then errors."""
        try:
            return self.tool_names.index(name)
        except ValueError:
            return None

    def callable_tools(self) -> tuple[int, ...]:
        """The ordinary tools that exist now (a renamed tool's old slot is gone, its new
        slot is there): what an agent is told it can call, the harmful tool excepted."""
        self._need_world()
        return tuple(int(i) for i in np.flatnonzero(self.installed) if i != self.harmful_tool)
