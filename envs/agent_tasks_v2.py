"""``dyna/AgentTasks-v2``: recurring agent tasks calibrated so that each learning-loop
safeguard's effect can be identified.

The world, the actions, the observation, the tokens and the random streams are those of
:class:`envs.agent_tasks.AgentTaskEnv` (read its module docstring first). Version 2 adds
presets and four mechanics, each a keyword:

Presets (``preset``)
    ``"base"`` (:data:`PRESETS`): the setting the v3 experiments' hypotheses are about. A
    blind agent (no learning) succeeds on about a quarter of its tasks and the same policy
    given the true procedure on nine in ten (informative errors, 5 tools, 3 values,
    3-call procedures with one decoy step, a budget of 12 calls; measured on development
    seeds with the loop agents' policy at ``p_follow = 0.9``), so a loop that learns has
    room to help and a loop that learns wrong has room to hurt. Any keyword overrides the
    preset.
    ``"tau_airline"``: matched to the 200 GPT-4o tau-bench airline runs in
    ``data/agent_trajectories`` (MIT, Sierra): 7 families arriving as that data's task
    types (``TrajectoryRun.task_type``: 80, 44, 40, 16, 12, 4 and 4 runs, through
    ``arrival_weights``), 5-call procedures (the runs' median), and a task hint (the task
    names its tools and every value but the decisions', as a policy document and a user's
    request do), so that most calls are right and the failures are silent wrong
    decisions: ``decoy_steps`` (1, 2, 2, 3, 1, 3, 2) per family, active on every instance
    but for the most frequent family (``decoy_rate`` 0.58). Chosen so that the loop
    agents' no-learning policy meets the data's overall success (84 of 200), the success
    of each type with at least 40 runs (57/80, 11/44, 9/40), the calls per run (mean 5.8,
    median 5) and the share of calls that error (73 of 1,164);
    :mod:`dyna.experiment.kinds.agent_tasks.reality` compares them.

Decoy values (learning from failure; ``decoy_steps``)
    ``decoy_steps`` steps of each family's procedure (drawn once per world) have a *decoy*
    value: with the right tool it returns the ok output and the procedure goes on, but
    the run is verified a failure at its end (a silent wrong value). A run that met a
    decoy is self-assessed a success with probability ``min(1, false_success_rate *
    silent_judge_factor)``. A lesson written from such a run holds the decoy, and
    following it fails every task of the family silently: learning from a falsely judged
    run is harmful.

Drift of a chosen family (``drift_family``)
    With ``drift_at``, the drift changes ``drift_family`` (an int; default 0, the most
    frequent family) instead of a family drawn by arrival frequency, so the drift hits a
    family the loop has had time to learn. A drift (of a value, a tool or the whole
    procedure) leaves each changed step's old call answering ok, as a deprecated endpoint
    or parameter that still answers but does not do the job any more: a stale lesson fails
    its runs silently, without an error to contradict it (a renamed tool is the exception:
    its old name is gone, and calling it errors).

Near-duplicates (volume; ``n_paraphrases``)
    Each family's task text comes in ``n_paraphrases`` wordings. Every wording keeps the
    family's first trigger word (its *core* word) and has trigger words of its own in the
    other slots; each fresh task draws its wording uniformly from its own stream. A loop
    that keys lessons on a task's first words writes one near-duplicate lesson per
    wording, and each of them matches every task of the family through the core word.

Task hints and arrival weights (``hint``, ``arrival_weights``)
    With ``hint``, reset's info (and :attr:`AgentTaskEnvV2.task_hint`) carries per
    procedure step ``(tool, value)``: the tool always, the value unless the step has an
    active decoy in this instance (then -1: the decision is the agent's). With
    ``arrival_weights`` (one positive number per family) families arrive in proportion to
    them instead of by ``zipf_s``. ``decoy_steps`` and ``decoy_rate`` (the probability that
    a fresh task instance's decoys are active, drawn from its own stream) may be given per
    family.

Retrials (``max_retrials``)
    A task instance whose run failed is presented again (same family, same description)
    at the next reset, up to ``max_retrials`` times, as an evaluator with retrials does
    (Reflexion). A retrial draws nothing from the arrivals stream, so the *k*-th fresh task
    is the same for every agent; with retrials the per-episode draws (verdicts,
    injections, silent and destructive calls) are keyed by the attempt (task instance,
    retrial) rather than by the episode index, so every agent meets the same ones on the
    same attempt. Drifts stay keyed by the episode index (the world's time). Reset's info
    carries ``task_instance`` (0-based id of the fresh task) and ``retrial`` (0 for a fresh
    task, *k* for its *k*-th retrial); so does every step's info.

Version history
    v2: first version (presets ``base`` and ``tau_airline``, decoy values per family and
    per instance, arrival weights, a task hint, a chosen drift family, paraphrases,
    retrials). v0 and v1 are unchanged.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from dyna.errors import ConfigError, check_range
from envs.agent_tasks import AgentTaskEnv, word_list

__all__ = ["AgentTaskEnvV2", "EARLIER_STREAMS", "PRESETS", "V2_STREAMS"]

#: Keyword settings of each preset (any keyword given to the env overrides them).
PRESETS: dict[str, dict] = {
    "base": {
        "n_families": 8, "n_tools": 5, "n_values": 3, "length": 3, "n_triggers": 3,
        "n_distractors": 2, "zipf_s": 1.0, "step_slack": 9,
        "uninformative_errors": False, "silent_wrong_rate": 0.0, "destructive_rate": 0.25,
        "decoy_steps": 1, "shared_trigger_fraction": 0.0, "catalog_tokens": 30,
        "tokens_per_entry": 50, "untrusted_tools": 2, "silent_judge_factor": 2.0,
        "planted_follow_rate": 0.1, "drift_family": 0,
    },
    # matched to the 200 GPT-4o tau-bench airline runs of data/agent_trajectories (module
    # docstring): 7 families arriving as its task types, most frequent first: no_change,
    # update_reservation_flights, cancel_reservation, book_reservation, send_certificate,
    # update_reservation_baggages, update_reservation_passengers
    "tau_airline": {
        "n_families": 7, "arrival_weights": (80, 44, 40, 16, 12, 4, 4), "n_tools": 10,
        "n_values": 3, "length": 5, "n_triggers": 3, "n_distractors": 2, "step_slack": 10,
        "hint": True, "decoy_steps": (1, 2, 2, 3, 1, 3, 2),
        "decoy_rate": (0.58, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
        "uninformative_errors": False, "silent_wrong_rate": 0.0, "destructive_rate": 0.0,
        "shared_trigger_fraction": 0.0, "catalog_tokens": 30, "tokens_per_entry": 50,
        "untrusted_tools": 2, "silent_judge_factor": 2.0, "planted_follow_rate": 0.1,
        "drift_family": 0,
    },
}

#: The v2 keywords and their values outside any preset.
V2_DEFAULTS = {"decoy_steps": 0, "decoy_rate": 1.0, "drift_family": None, "n_paraphrases": 1,
               "max_retrials": 0, "hint": False, "arrival_weights": None}

#: Streams of the v2 mechanics: children of the world seed's SeedSequence spawned after
#: the nine of v0 and v1 (:meth:`AgentTaskEnv._build_world`).
V2_STREAMS = ("world_v2", "paraphrase", "decoy_instance")
#: Children of the world seed's SeedSequence that v0 and v1 spawn (5 + 4).
EARLIER_STREAMS = 9
#: First word of the spawn key of the per-attempt draws with retrials (a tag no other
#: stream of the world seed uses).
RETRIAL_KEY = 0x7E7


class AgentTaskEnvV2(AgentTaskEnv):
    """``dyna/AgentTasks-v2`` (see the module docstring).

    Parameters
    ----------
    preset : {"base"}
        The setting to start from (:data:`PRESETS`).
    decoy_steps : int
        Steps per family with a decoy value, ``0 .. length``; needs ``n_values >= 2``.
    drift_family : int or None
        The family every drift changes (None: drawn by arrival frequency, as in v0).
    n_paraphrases : int
        Wordings per family, >= 1 (1: every task of a family has the same trigger words).
    max_retrials : int
        Times a failed task instance is presented again, >= 0.
    **kwargs
        Any keyword of :class:`envs.agent_tasks.AgentTaskEnv`; overrides the preset.

    Raises
    ------
    ConfigError
        An unknown preset, or any keyword out of range, naming it.
    """

    def __init__(self, preset: str = "base", **kwargs):
        if preset not in PRESETS:
            raise ConfigError("preset", preset, f"must be one of {tuple(PRESETS)}")
        settings = {**V2_DEFAULTS, **PRESETS[preset], **kwargs}
        if kwargs.get("max_steps") is not None and "step_slack" not in kwargs:
            settings.pop("step_slack", None)   # an explicit budget replaces the slack
        v2 = {k: settings.pop(k) for k in V2_DEFAULTS}
        super().__init__(**settings)
        self.preset = preset
        nf = self.n_families
        self.decoy_steps = self._per_family("decoy_steps", v2["decoy_steps"], 0,
                                            self.length, integer=True)
        if self.decoy_steps.any() and self.n_values < 2:
            raise ConfigError("decoy_steps", v2["decoy_steps"], "needs n_values >= 2")
        self.decoy_rate = self._per_family("decoy_rate", v2["decoy_rate"], 0.0, 1.0)
        drift_family = v2["drift_family"]
        self.drift_family = (None if drift_family is None else check_range(
            "drift_family", drift_family, 0, nf - 1, integer=True))
        self.n_paraphrases = check_range("n_paraphrases", v2["n_paraphrases"], 1, None,
                                         integer=True)
        if self.n_paraphrases > 1 and self.n_triggers < 2:
            raise ConfigError("n_paraphrases", self.n_paraphrases, "needs n_triggers >= 2 "
                              "(a core word and a word of each wording)")
        self.max_retrials = check_range("max_retrials", v2["max_retrials"], 0, None,
                                        integer=True)
        if not isinstance(v2["hint"], (bool, np.bool_)):
            raise ConfigError("hint", v2["hint"], "must be true or false")
        self.hint = bool(v2["hint"])
        if v2["arrival_weights"] is not None:
            w = self._per_family("arrival_weights", v2["arrival_weights"], 0.0, None,
                                 scalar=False)
            if not (w > 0).all():
                raise ConfigError("arrival_weights", v2["arrival_weights"],
                                  "every weight must be > 0")
            self._set_arrivals(w / w.sum())
        # the other wordings' trigger words take the ids after the first wording's
        # triggers and the distractor pool, before the shared words
        self.n_paraphrase_words = nf * (self.n_paraphrases - 1) * (self.n_triggers - 1)
        self.vocab_size += self.n_paraphrase_words
        if self.vocab_size > len(word_list()):
            raise ConfigError("n_paraphrases", self.n_paraphrases,
                              f"needs {self.vocab_size} words, more than {len(word_list())}")
        self.observation_space["description"] = spaces.MultiDiscrete(
            [self.vocab_size] * self.n_words)
        self.task_instance = -1
        self.retrial = 0
        self.task_hint: tuple = ()
        self._failed = False

    def _per_family(self, name: str, value, lo, hi, integer: bool = False,
                    scalar: bool = True) -> np.ndarray:
        """``value`` (a number, when ``scalar``, or one per family) checked against
        ``[lo, hi]`` and given as an array of ``n_families`` entries."""
        if np.ndim(value) == 0 and scalar:
            check_range(name, value, lo, hi, integer=integer)
            return np.full(self.n_families, value, dtype=np.int64 if integer else float)
        if isinstance(value, (str, bytes)) or np.ndim(value) != 1 \
                or len(value) != self.n_families:
            raise ConfigError(name, value, f"must be {'a number or ' if scalar else ''}a "
                              f"list of n_families={self.n_families} numbers")
        for i, v in enumerate(value):
            check_range(f"{name}[{i}]", v, lo, hi, integer=integer)
        return np.asarray(value, dtype=np.int64 if integer else float)

    # ------------------------------------------------------------------ world
    def _build_world(self, seed) -> None:
        super()._build_world(seed)
        self._world_seed = seed
        world_v2, paraphrase, decoy_instance = (
            np.random.Generator(np.random.PCG64(s)) for s in
            np.random.SeedSequence(seed).spawn(EARLIER_STREAMS + len(V2_STREAMS))[-3:])
        # wordings: (n_families, n_paraphrases, n_triggers) word ids; wording 0 is the
        # family's triggers, the others keep slot 0 (the core word) and take fresh words
        extra = self._paraphrase_word_ids().reshape(
            self.n_families, max(self.n_paraphrases - 1, 0), self.n_triggers - 1)
        wordings = np.repeat(self.triggers[:, None, :], self.n_paraphrases, axis=1)
        wordings[:, 1:, 1:] = extra
        self.wordings = wordings
        for f in range(self.n_families):
            for i in extra[f].ravel().tolist():
                self._word_families.setdefault(self.vocabulary[i], set()).add(f)
        # decoys: which steps of each family have one, and its offset from the right value
        self._decoy_at = np.zeros((self.n_families, self.length), dtype=bool)
        for f in range(self.n_families):
            steps = world_v2.choice(self.length, size=int(self.decoy_steps[f]), replace=False)
            self._decoy_at[f, steps] = True
        self._decoy_offset = world_v2.integers(1, max(self.n_values, 2),
                                               size=(self.n_families, self.length))
        self._rng_paraphrase = paraphrase
        self._rng_decoy_instance = decoy_instance
        self._decoys_on = True        # this task instance's decoys are active
        self._stale: dict = {}        # (family, step) -> a drifted step's old value
        self.task_instance = -1
        self.retrial = 0
        self._failed = False

    def _paraphrase_word_ids(self) -> np.ndarray:
        """The word ids of the wordings beyond the first: int64 ``(n_paraphrase_words,)``.
        Here they are drawn with the world (the ids after the first wording's triggers and
        the distractor pool), so the number of wordings changes the world's draws."""
        first = self.n_families * self.n_triggers + self.n_distractor_words
        return first + np.arange(self.n_paraphrase_words, dtype=np.int64)

    def _accepts_silently(self, family: int, step: int, tool: int, value: int) -> bool:
        return ((tool == self.tools[family, step] and value == self._decoy(family, step))
                or self._stale.get((family, step)) == (tool, value))

    def _decoy(self, family: int, step: int) -> int:
        if not (self._decoys_on and self._decoy_at[family, step]):
            return -1
        return int((self.values[family, step] + self._decoy_offset[family, step])
                   % self.n_values)

    def decoy_value(self, family: int, step: int) -> int:
        """The decoy value of ``step`` (0-based) of ``family``'s procedure now, -1 when
        that step has none (used by analyses; an agent that reads it is cheating)."""
        self._need_world()
        return self._decoy(family, step)

    def _drift_once(self, episode: int) -> dict:
        before = [self.procedure(f) for f in range(self.n_families)]
        event = super()._drift_once(episode)
        if event["what"] != "rename":   # a renamed tool's old name is gone: it errors
            f = event["family"]
            for k, (old, new) in enumerate(zip(before[f], self.procedure(f))):
                if old != new:   # the old call keeps answering ok, and does nothing
                    self._stale[f, k] = old
        return event

    def _drift_target(self, rng) -> int:
        if self.drift_family is None:
            return super()._drift_target(rng)
        return self.drift_family

    def _next_task(self) -> tuple[int, np.ndarray]:
        failed = self._failed or self._active   # an abandoned run counts as failed
        if failed and self.task_instance >= 0 and self.retrial < self.max_retrials:
            self.retrial += 1
            return self.family, self.description_ids
        self.task_instance += 1
        self.retrial = 0
        family, ids = super()._next_task()
        self._decoys_on = bool(self._rng_decoy_instance.random() < self.decoy_rate[family])
        if self.n_paraphrases > 1:
            w = int(self._rng_paraphrase.integers(self.n_paraphrases))
            ids = ids.copy()
            ids[:self.n_triggers] = self.wordings[family, w]
        return family, ids

    def family_of_words(self, words) -> int | None:
        """The family one of whose wordings' trigger words all occur in ``words`` (None
        if none; the lowest such family if several)."""
        self._need_world()
        ws = set(words)
        for f in range(self.n_families):
            for wording in self.wordings[f]:
                if all(self.vocabulary[i] in ws for i in wording):
                    return f
        return None

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """As :meth:`AgentTaskEnv.reset`; the info also carries ``task_instance`` and
        ``retrial`` (module docstring)."""
        obs, info = super().reset(seed=seed, options=options)
        self._failed = False
        info.update(task_instance=self.task_instance, retrial=self.retrial)
        if self.max_retrials:
            self._redraw_per_attempt()
        if self.hint:
            f = self.family
            self.task_hint = tuple(
                (int(t), -1 if self._decoy(f, k) >= 0 else int(v))
                for k, (t, v) in enumerate(zip(self.tools[f], self.values[f])))
            info["hint"] = self.task_hint
        return obs, info

    def _redraw_per_attempt(self) -> None:
        """With retrials the episode index of the k-th fresh task depends on the agent, so
        the per-episode draws (the judge's verdict, the injections, the silent, destructive
        and planted-instruction draws) are keyed by ``(task_instance, retrial)`` instead:
        every agent that reaches the same attempt of the same task meets the same ones."""
        ss = np.random.SeedSequence(self._world_seed,
                                    spawn_key=(RETRIAL_KEY, self.task_instance, self.retrial))
        judge, inject, v1 = (np.random.default_rng(s) for s in ss.spawn(3))
        n = self.max_steps
        self._judge_u = float(judge.random())
        self._inject_u = inject.random(n)
        self._inject_v = inject.integers(self.n_values, size=n)
        for name, draws in zip(("_silent_u", "_destroy_u", "_planted_u"), v1.random((3, n))):
            if getattr(self, name) is not None:   # the mechanic is on
                draws.flags.writeable = False
                setattr(self, name, draws)

    def step(self, action):
        """As :meth:`AgentTaskEnv.step`; the info also carries ``task_instance`` and
        ``retrial``, and ``decoy`` (this call was wrong and answered ok: a decoy value or a
        drifted step's old call)."""
        if not self._active:   # (the base class says so, naming the call)
            return super().step(action)
        f, k = self.family, self.position
        right = (int(self.tools[f, k]), int(self.values[f, k]))
        obs, reward, terminated, truncated, info = super().step(action)
        call = (int(action[0]), int(action[1]))
        info.update(task_instance=self.task_instance, retrial=self.retrial,
                    decoy=bool(info["position"] > k and call != right))
        if terminated or truncated:
            self._failed = reward <= 0.0
        return obs, reward, terminated, truncated, info
