"""Loop agents for the agent tasks (:class:`envs.agent_tasks.AgentTaskEnv`): one policy
model for every variant, so that only the learning differs.

The policy model (one episode = one run on one task)
    At each procedure position the agent first decides, once, whether it follows what it
    knows (probability ``p_follow`` times the env's ``follow_factor``, which falls with the
    irrelevant entries in its context). If it does, it tries the calls its knowledge gives
    for this position in order (best-matched skill first), skipping calls that already
    failed here. Otherwise, or when the knowledge is used up, it *explores*: it calls a tool
    it has not tried at this position (never the harmful tool of its own accord) with a
    value it has not tried with that tool. Errors say whether the tool or only the value
    was wrong, and the agent uses that (under ``uninformative_errors`` it learns only that
    the call failed). A task hint (``dyna/AgentTasks-v2``'s ``hint``: the task names its
    tools, and the values of the steps that hold no decision) is explored first, after
    what its facts say. It explores among the tools that exist now
    (:meth:`~envs.agent_tasks.AgentTaskEnv.callable_tools`: a renamed tool's old name is
    gone) and reads its lessons' tool names against the current tool list, so a lesson
    naming a renamed tool sends it to the old name, which errors. Planted instructions:
    with the env's ``planted_follow_rate`` None (v0) they are not obeyed by the policy
    itself and do harm only when a loop writes them down and a later run follows the
    lesson; with a rate, the agent obeys an instruction planted in the output it has just
    read, and a lesson's harmful step, each when
    :meth:`~envs.agent_tasks.AgentTaskEnv.falls_for_planted` says so.

Knowledge per variant
    * ``no_learning``: none (a fixed prompt; every run starts from scratch).
    * ``oracle``: the current true procedure (reads the hidden world; upper bound), always
      followed (``oracle_follows_always``; False: followed with ``p_follow`` like every
      other variant, the same-policy oracle); it counts as one context entry.
    * loops: a :class:`dyna.loops.LearningLoop` on the in-memory store (the same code as
      on files: ``SkillLibrary(None)``, ``MemoryStore(None)``) with a
      :class:`ProcedureReviewer`. The ``skill`` store gives procedures (tool and value per
      step) matched on the task text; the ``memory`` store gives facts ("<task words> step
      k value is val_j"), the whole memory in context, or with ``memory_k`` the facts
      the loop retrieves for the task. Each tool call in the digest names the injected
      skills it followed, or the facts (a step's tool fact and value fact) whose call it
      made, so a skill or fact whose call returned an error is reported to the store as
      a failure (contradicted) even when the agent recovered and the run succeeded
      (:meth:`dyna.loops.LearningLoop.finish`). A fact is followed only on a task whose
      words hold its key words, and counts only when the loop retrieved it for the task.

      - ``naive_loop``: :meth:`LoopConfig.naive` (writes after every run: no gate, no
        novelty check, no cap, no approval), with the full loop's sizes (lessons,
        matches, caps and ``memory_k``).
      - ``self_reflection``: the reviewer gates on the agent's own opinion (the digest
        carries the self-assessment, not the verified outcome) and its untrusted inputs
        are not held for approval.
      - ``skill_loop`` / ``memory_loop``: every safeguard of :class:`LoopConfig` on.
      - ``skill_loop-no_<switch>`` / ``memory_loop-no_<switch>``: one safeguard off
        (:meth:`LoopConfig.ablate`).
    * ``episodic``: no artifacts. Every tool call of every run is recorded in a
      :class:`dyna.experience.ExperienceStore` (in memory) under the task type
      ``f<family>-s<position>``, with the task text as its state; at each position the
      agent asks :meth:`~dyna.experience.ExperienceStore.get_recommendation` for the call
      that worked best among the ``episodic_k`` past runs most similar to this task (the
      cosine neighbours that :meth:`~dyna.experience.ExperienceStore.query_similar` also
      returns) and follows it like a skill when it has worked at least once. Its context
      is the one recommendation.
    * ``dyna_q`` / ``dyna_q_plus``: the RL baseline, no artifacts. The tabular agents of
      :class:`dyna.agents.DynaAgent` (the same compiled kernels as the chapter 8
      experiments) over the state ``(family, position)`` and the actions ``(tool,
      value)``, learning a transition-table model of tool outcomes and planning from it;
      Dyna-Q+ adds the exploration bonus ``kappa * sqrt(tau)`` that makes it revisit calls
      not tried for long (drift-aware). They act epsilon-greedily instead of through the
      shared policy model (an RL agent's own behaviour policy) and carry no context tokens.

Competence and escalation
    Every variant keeps a :class:`dyna.competence.BetaCompetence` per task family, fed
    with the verified outcome of each run it made itself. With an escalation rule
    (:func:`dyna.escalation.should_escalate`) a run whose family is judged below the
    threshold is handed to an expert that succeeds at ``escalation_tokens``; while the
    rule still lacks evidence (``insufficient_episodes``) the agent acts, to gather it.
    Each row records the current family's posterior (``comp_a``, ``comp_b``), the chosen
    family's and the arrival-weighted competence over the families seen so far
    (:func:`competence_fields`).

Time
    The stores' clock advances ``days_per_episode`` days per episode from 2025-01-01, so
    the dating safeguard (``max_age_days``) is measured in episodes.
"""

from __future__ import annotations

import collections
import datetime as _dt
import functools
import gc
import itertools
import operator
import re
import weakref
import zlib
from dataclasses import dataclass, field, replace

import numpy as np

from dyna.agents.baselines import BASELINES, Knowledge, RunRecord, agrees, make_baseline
from dyna.competence import BetaCompetence, empirical_bayes_prior, weighted_beta_mean
from dyna.errors import ConfigError, check_range
from envs.seeding import (BLOCK, _INIT_A, _INIT_B, _M32, _MULT_A, _MULT_B, _PCG_MULT_HI,
                          _PCG_MULT_LO, _Hash, _mix, _pcg_seeded, _pcg_uniforms,
                          seed_words, spawned_states)
from dyna.loops import Digest, LearningLoop, LoopConfig, Proposal, ReviewerOutput
from dyna.loops._text import content_words, fact_key
from dyna.loops.review import OUTPUT_CHARS, _tool_call

__all__ = ["BASE_VARIANTS", "EPISODE_FIELDS", "LoopAgent", "PolicyParams", "agent_streams",
           "ProcedureReviewer", "VariantSpec", "competence_fields", "make_variant",
           "run_loop_agent", "variant_names"]

BASE_VARIANTS = ("no_learning", "oracle", "naive_loop", "self_reflection", "skill_loop",
                 "memory_loop", "episodic", "dyna_q", "dyna_q_plus")
STORES = ("skill", "memory")
EPOCH = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)

#: Per-episode outputs of :func:`run_loop_agent`, name -> numpy dtype.
EPISODE_FIELDS = {
    "family": np.int64, "success": np.bool_, "self_assessed": np.bool_,
    "escalated": np.bool_, "incident": np.bool_, "steps": np.int64, "tokens": np.int64,
    "learning_tokens": np.int64, "context_entries": np.int64, "library_size": np.int64,
    "poisoned": np.int64, "stale": np.int64, "drift": np.bool_, "drift_family": np.int64,
    "comp_a": np.float64, "comp_b": np.float64, "comp_chosen_a": np.float64,
    "comp_chosen_b": np.float64, "comp_weighted_mean": np.float64,
    "comp_weighted_lower": np.float64, "comp_weighted_upper": np.float64,
    **{f"acted_{s}": np.int32 for s in LoopConfig.SWITCHES},
    "approved": np.int32, "rejected": np.int32,
    "task_instance": np.int64, "retrial": np.int64, "head_coverage": np.float64,
    "drift_covered": np.bool_, "poisoned_follows": np.int64, "harmful_proposed": np.int64,
    "incident_direct": np.bool_, "incident_lesson": np.bool_,
    "injected_relevant": np.int64, "catalog_tokens": np.int64, "context_tokens": np.int64,
    "errors": np.int64,
}
"""The fields for the calibration checks and the v3 metrics (see :func:`run_loop_agent`):

* ``task_instance``, ``retrial``: the env's reset info (``dyna/AgentTasks-v2``; without
  retrials the episode index and 0);
* ``head_coverage``: at the start of the episode, the share of the *head* families (the
  fewest most frequent families whose arrival probabilities sum to at least 0.8) for which
  the store holds an entry right for the family's current procedure (a skill whose every
  call is right; facts right for every step); 1 for the oracle, 0 without a store;
* ``drift_covered``: on an episode that starts with a drift, whether the store held a right
  entry for the drifted family just before it;
* ``poisoned_follows``: calls that followed a stored entry (a skill's or a fact's call) and
  were wrong for the task's current procedure at that step;
* ``harmful_proposed``: lessons proposed after the episode that name the harmful tool;
* ``incident_direct`` / ``incident_lesson``: the episode's incident (if any) came from
  obeying the instruction planted in the last tool output / from following a stored entry;
* ``injected_relevant``: injected entries about the task's family (``context_entries``
  minus the irrelevant ones);
* ``catalog_tokens``, ``context_tokens``: the episode's tokens for the catalog of stored
  skills and for the injected entries;
* ``errors``: the episode's tool calls that returned an error.
"""

#: The simulated approver answers a staged proposal this many episodes after it was staged.
APPROVER_DELAY = 10
#: ... and rejects one that carries a planted instruction (it names the harmful tool) with
#: this probability; it approves every other one. Fixed by the issue that introduced it.
APPROVER_REJECT_PLANTED = 0.9

#: ``spawn_key`` tags of the agent's random streams, children of the run's
#: ``SeedSequence(entropy=[seed, run_index])`` (:func:`agent_streams`).
STREAM_POLICY, STREAM_REVIEWER, STREAM_TABULAR, STREAM_APPROVER = 1, 2, 3, 4


def agent_streams(seed: int, run_index: int) -> dict:
    """The seeds of one run's agent-side random streams (common random numbers).

    Every stream derives from ``(seed, run_index)`` only, never from the variant, so two
    variants that make the same decisions draw the same numbers: ``policy(t)`` is the
    generator of episode ``t`` (a fresh substream per episode, so variants that diverged
    once are back in step at the next episode), ``reviewer`` seeds the
    :class:`ProcedureReviewer` (which draws per run id), ``tabular`` the Dyna agents, and
    ``approver(t, k)`` is the simulated approver's uniform draw for a proposal it first saw
    at episode ``t`` whose text has CRC-32 ``k`` (keyed by content, not by a staging
    counter, so the same proposal gets the same answer in every variant).
    The env's own streams come from ``SeedSequence([seed, run_index])`` in
    :func:`run_loop_agent`.

    Returns
    -------
    dict
        ``{"policy": callable t -> numpy.random.Generator, "policy_seed": (words, key),
        "reviewer": int, "tabular": int, "approver": callable (t, k) -> float}``;
        ``policy(t)`` is ``Generator(PCG64(SeedSequence(words, spawn_key=key + (t,))))``.
    """
    # SeedSequence(entropy=[seed, run_index]) with the entropy given as its uint32
    # words: the same streams, built in half the time (envs.seeding.seed_words)
    base = seed_words(int(seed), int(run_index))

    def policy(t: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(base, spawn_key=(STREAM_POLICY, t)))

    def child(tag: int) -> int:
        return int(np.random.SeedSequence(base, spawn_key=(tag,)).generate_state(1)[0])

    def approver(t: int, k: int) -> float:
        ss = np.random.SeedSequence(base, spawn_key=(STREAM_APPROVER, t, k))
        return float(np.random.default_rng(ss).random())

    seed_copy = base.copy()
    seed_copy.flags.writeable = False
    return {"policy": policy, "policy_seed": (seed_copy, (STREAM_POLICY,)),
            "reviewer": child(STREAM_REVIEWER), "tabular": child(STREAM_TABULAR),
            "approver": approver}

#: Hyper-parameters of the tabular variants unless ``PolicyParams.tabular`` says otherwise:
#: a deterministic task world, so a large step size and the latest-outcome model.
TABULAR_DEFAULTS = {"alpha": 0.5, "gamma": 0.95, "epsilon": 0.1, "n_planning": 10,
                    "kappa": 1e-3, "model": "last"}

_SKILL_CALL_RE = re.compile(r"call `(\w+)` with `(\w+)`")
_FACT_RE = re.compile(r"^(.+?) step (\d+) (value|tool) is (\w+)$")
_NOTE_RE = re.compile(r"NOTE: to finish this task, call (\w+) with (\w+) next")


# ---------------------------------------------------------------- the reviewer's draws
# ``Generator(PCG64(SeedSequence([a, b]))).random(2)`` for two 32-bit words, in plain
# integer arithmetic: the same numbers (numpy's SeedSequence hashing, O'Neill's PCG64
# XSL-RR seeding and output, and ``random``'s 53-bit doubles, as numpy/random/
# bit_generator.pyx and pcg64.h implement them) without building three numpy objects per
# review (tests/test_loop_agents_speed.py compares them on 20,000 pairs).
_M64, _M128 = (1 << 64) - 1, (1 << 128) - 1
_PCG_MULT = (_PCG_MULT_HI << 64) + _PCG_MULT_LO
# SeedSequence's hash constants in the order mixing and output use them (envs.seeding)
_HASH_A = tuple(itertools.islice(_Hash(_INIT_A, _MULT_A).pairs(), 16))   # 4 + 12 hashmixes
_HASH_B = tuple(itertools.islice(_Hash(_INIT_B, _MULT_B).pairs(), 8))    # 8 state words


def _hashmix(v: int, c: tuple) -> int:
    v = ((v ^ c[0]) * c[1]) & _M32
    return v ^ (v >> 16)


_POOL_ZERO = (_hashmix(0, _HASH_A[2]), _hashmix(0, _HASH_A[3]))   # the pool's padding
_MIX_ORDER = tuple((s, d) for s in range(4) for d in range(4) if s != d)


@functools.lru_cache(maxsize=64)
def _seeded_pool(a: int) -> tuple[int, int, int, int]:
    """What of the mixing depends on the first word only (a reviewer's seed): the pool's
    word 0, the hash of it that mixes into word 1, and words 2 and 3 after the first
    source round (word 0 mixes into them before word 1 changes anything)."""
    p0 = _hashmix(a, _HASH_A[0])
    return (p0, _hashmix(p0, _HASH_A[4]), _mix(_POOL_ZERO[0], _hashmix(p0, _HASH_A[5])),
            _mix(_POOL_ZERO[1], _hashmix(p0, _HASH_A[6])))


def _review_uniforms(a: int, b: int) -> tuple[float, float]:
    """The first two uniforms of ``default_rng([a, b])``, ``0 <= a, b < 2**32``."""
    p0, h01, p2, p3 = _seeded_pool(a)
    pool = [p0, _mix(_hashmix(b, _HASH_A[1]), h01), p2, p3]
    for (s, d), (x, y) in zip(_MIX_ORDER[3:], _HASH_A[7:]):
        h = ((pool[s] ^ x) * y) & _M32
        r = (0xCA01F9DD * pool[d] - 0x4973F715 * (h ^ (h >> 16))) & _M32
        pool[d] = r ^ (r >> 16)
    w = []
    for k, (x, y) in enumerate(_HASH_B):
        v = ((pool[k & 3] ^ x) * y) & _M32
        w.append(v ^ (v >> 16))
    state = (w[0] | w[1] << 32) << 64 | w[2] | w[3] << 32
    inc = (((w[4] | w[5] << 32) << 64 | w[6] | w[7] << 32) << 1 | 1) & _M128
    state = ((inc + state) * _PCG_MULT + inc) & _M128   # pcg64 srandom: two steps
    out = []
    for _ in range(2):
        state = (state * _PCG_MULT + inc) & _M128
        v = ((state >> 64) ^ state) & _M64
        rot = state >> 122
        if rot:
            v = ((v >> rot) | (v << (64 - rot))) & _M64
        out.append((v >> 11) * (1.0 / 9007199254740992.0))
    return out[0], out[1]


def review_uniforms_many(a: int, bs) -> np.ndarray:
    """Row ``j``: the first two uniforms of ``default_rng([a, bs[j]])``, for many second
    words at once (numpy's uint32 and uint64 arithmetic wraps as the C code does): what
    :func:`_review_uniforms` gives for each pair, bit for bit
    (tests/test_loop_agents_speed.py).

    Parameters
    ----------
    a : int
        The first entropy word, ``0 <= a < 2**32`` (a reviewer's seed).
    bs : array_like of int, shape (n,)
        The second words, each in ``[0, 2**32)`` (crc32 of run ids).

    Returns
    -------
    numpy.ndarray of float64, shape (n, 2)
        Each in ``[0, 1)``.

    Raises
    ------
    ConfigError
        ``a`` or a word of ``bs`` outside ``[0, 2**32)`` (fields ``a``, ``bs``).
    """
    if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not 0 <= a <= _M32:
        raise ConfigError("a", a, "must be an integer in [0, 2**32)")
    b = np.asarray(bs)
    if b.ndim != 1 or (b.size and (b.dtype.kind not in "iu" or b.min() < 0
                                   or b.max() > _M32)):
        raise ConfigError("bs", bs, "must be a 1-d array of integers in [0, 2**32)")
    b = b.astype(np.uint32)
    p0, h01, p2, p3 = _seeded_pool(int(a))
    u32 = np.uint32
    s16 = u32(16)
    # the pool after the first source round: word 1 is b's lane, the others fixed
    h = (b ^ u32(_HASH_A[1][0])) * u32(_HASH_A[1][1])
    h ^= h >> s16
    r = u32(0xCA01F9DD) * h - u32((0x4973F715 * h01) & _M32)
    pool = [np.full(b.shape, p0, u32), r ^ (r >> s16), np.full(b.shape, p2, u32),
            np.full(b.shape, p3, u32)]
    for (s, d), (x, y) in zip(_MIX_ORDER[3:], _HASH_A[7:]):
        h = (pool[s] ^ u32(x)) * u32(y)
        r = u32(0xCA01F9DD) * pool[d] - u32(0x4973F715) * (h ^ (h >> s16))
        pool[d] = r ^ (r >> s16)
    return _pcg_uniforms(*_pcg_seeded(pool), 2)


_RUN_ID_RE = re.compile(r"e(\d{1,9})\Z")


def _plain_digest(run_id: str, task: str, success, verified: bool, judged: bool,
                  tokens: int, calls, followed, names, vals, trusted, actions) -> Digest:
    """``Digest.from_run(..., redaction=False)`` of a loop agent's episode, built from
    values the agent made itself (tool and value names, the env's outputs, the skills each
    call followed): the same digest (tests/test_loop_agents_speed.py compares them over
    whole runs) without from_run's checks and conversions of arbitrary input."""
    out_chars = OUTPUT_CHARS
    tcs = tuple(_tool_call(str(names[c[0]]), {"value": vals[c[1]]}, bool(err),
                           str(out or "")[:out_chars],
                           tuple(dict.fromkeys(f)) if f else (), bool(trusted[c[0]]))
                for (c, out, err), f in zip(calls, followed))
    return Digest(run_id, task, None if success is None else bool(success), bool(verified),
                  bool(judged), len(calls), int(tokens), tcs, (), actions)


# ============================================================================ variants

@dataclass(frozen=True)
class PolicyParams:
    """Settings of the shared policy model and of the simulated reviewer.

    Attributes
    ----------
    p_follow : float
        Probability of following known calls at a procedure position, in [0, 1].
    tokens_per_review : int
        Reviewer tokens per reviewed run (learning cost), >= 0.
    copy_rate : float
        Probability that the reviewer copies a planted instruction it saw in a tool
        output into its lesson (then the lesson's provenance is ``tool_output``).
    title_words : int
        Words of the task text the reviewer takes as the task's key (>= 1).
    days_per_episode : float
        Store clock advance per episode (days, > 0).
    escalation : dict or None
        ``{"threshold": float, "min_episodes": int, "risk_class": str,
        "escalation_tokens": int}``; None: never escalate.
    episodic_k : int
        Neighbours the ``episodic`` variant asks for (>= 1).
    tabular : dict
        Hyper-parameters of the ``dyna_q`` / ``dyna_q_plus`` variants
        (:data:`dyna.agents.HPARAMS`), on top of :data:`TABULAR_DEFAULTS`.
    misattribution : float
        Probability, in [0, 1], that the reviewer of a failed run writes the call that
        failed last into the procedure (it believes that call finished the job); otherwise
        the lesson keeps only the calls that returned ok. 1.0 (the default) is v0's
        reviewer; the agent-tasks v2 sweeps fix 0.5.
    memory_facts : {"value", "call"}
        What the reviewer writes per procedure step for the memory store: ``"value"``
        (v0) one fact, the step's value; ``"call"`` two, the step's tool and its value, so
        that memory can hold a whole procedure as a skill does (agent tasks v2).
    oracle_follows_always : bool
        True (v0): the oracle always follows its knowledge. False: it follows with
        ``p_follow`` like every other variant, so the oracle bounds what knowledge can give
        under the same policy (the agent-tasks v2 "same-policy oracle").
    """

    p_follow: float = 0.9
    tokens_per_review: int = 300
    copy_rate: float = 0.5
    title_words: int = 2
    days_per_episode: float = 1.0
    escalation: dict | None = None
    tabular: dict = field(default_factory=dict)
    episodic_k: int = 20
    misattribution: float = 1.0
    oracle_follows_always: bool = True
    memory_facts: str = "value"

    def __post_init__(self):
        check_range("p_follow", self.p_follow, 0.0, 1.0)
        check_range("misattribution", self.misattribution, 0.0, 1.0)
        if self.memory_facts not in ("value", "call"):
            raise ConfigError("memory_facts", self.memory_facts, "must be 'value' or 'call'")
        if not isinstance(self.oracle_follows_always, bool):
            raise ConfigError("oracle_follows_always", self.oracle_follows_always,
                              "must be true or false")
        check_range("copy_rate", self.copy_rate, 0.0, 1.0)
        check_range("tokens_per_review", self.tokens_per_review, 0, None, integer=True)
        check_range("title_words", self.title_words, 1, None, integer=True)
        check_range("days_per_episode", self.days_per_episode, 0.0, None, lo_open=True)
        check_range("episodic_k", self.episodic_k, 1, None, integer=True)
        from dyna.agents.tabular import validate_hparams
        for agent in ("dyna_q", "dyna_q_plus"):
            keys = {k: v for k, v in {**TABULAR_DEFAULTS, **self.tabular}.items()
                    if agent == "dyna_q_plus" or k != "kappa"}
            try:
                validate_hparams(agent, keys)
            except ConfigError as exc:
                raise ConfigError(f"tabular.{exc.field}", exc.value, exc.reason) from None
        if self.escalation is not None:
            esc = dict(self.escalation)
            unknown = set(esc) - {"threshold", "min_episodes", "risk_class",
                                  "escalation_tokens"}
            if unknown:
                raise ConfigError("escalation", sorted(unknown), "unknown keys")
            check_range("escalation.threshold", esc.get("threshold", 0.8), 0.0, 1.0)
            check_range("escalation.min_episodes", esc.get("min_episodes", 10), 0, None,
                        integer=True)
            check_range("escalation.escalation_tokens", esc.get("escalation_tokens", 5000),
                        0, None, integer=True)
            from dyna.escalation import RISK_CLASSES
            if esc.get("risk_class", "low_stakes") not in RISK_CLASSES:
                raise ConfigError("escalation.risk_class", esc.get("risk_class"),
                                  f"must be one of {sorted(RISK_CLASSES)}")


@dataclass(frozen=True)
class VariantSpec:
    """One agent configuration.

    Attributes
    ----------
    name : str
    learner : {"none", "oracle", "loop", "tabular", "episodic"}
    store : {"skill", "memory"}
        What a loop keeps.
    config : LoopConfig or None
        The loop's switches (loops only).
    self_gate : bool
        The digest carries the agent's self-assessment instead of the verified outcome.
    """

    name: str
    learner: str
    store: str = "skill"
    config: LoopConfig | None = None
    self_gate: bool = False


def variant_names(store: str = "skill") -> list[str]:
    """Every variant of an ablation over ``store``: the baselines, the full loop and one
    variant per safeguard switched off (:attr:`LoopConfig.SWITCHES`)."""
    loop = f"{store}_loop"
    return (["no_learning", "oracle", "naive_loop", "self_reflection", loop]
            + [f"{loop}-no_{s}" for s in LoopConfig.SWITCHES]
            + ["episodic", "dyna_q", "dyna_q_plus"])


def make_variant(name: str, store: str = "skill", config: LoopConfig | None = None,
                 field_name: str = "variant") -> VariantSpec:
    """The :class:`VariantSpec` called ``name``.

    Parameters
    ----------
    name : str
        A base variant (:data:`BASE_VARIANTS`), ``"<skill|memory>_loop-no_<switch>"`` (the
        full loop without one safeguard), ``"naive_loop+<switch>"`` (the naive loop with
        one safeguard, as in the full loop) or a literature baseline
        (:data:`dyna.agents.baselines.BASELINES`).
    store : {"skill", "memory"}
        Store of ``naive_loop`` and ``self_reflection`` (the loops name their own).
    config : LoopConfig, optional
        Base settings of the full loop (default ``LoopConfig()``).

    Raises
    ------
    ConfigError
        Unknown name, store or switch.
    """
    if store not in STORES:
        raise ConfigError("store", store, f"must be one of {STORES}")
    base = config or LoopConfig()
    if name == "no_learning":
        return VariantSpec(name, "none", store)
    if name == "oracle":
        return VariantSpec(name, "oracle", store)
    if name in ("dyna_q", "dyna_q_plus"):
        return VariantSpec(name, "tabular", store)
    if name == "episodic":
        return VariantSpec(name, "episodic", store)
    if name in BASELINES:
        return VariantSpec(name, "baseline", store)
    if name.startswith("naive_loop+"):
        switch = name.partition("+")[2]
        if switch not in LoopConfig.SWITCHES:
            raise ConfigError(field_name, name, f"unknown safeguard {switch!r}; one of "
                              f"{LoopConfig.SWITCHES}")
        naive = LoopConfig.naive(max_lessons=base.max_lessons, match_limit=base.match_limit,
                                 skill_cap=base.skill_cap, memory_cap=base.memory_cap,
                                 memory_k=base.memory_k)
        return VariantSpec(name, "loop", store,
                           replace(naive, **{switch: getattr(base, switch)}))
    if name == "naive_loop":
        # the full loop's sizes (lessons, matches, caps, facts retrieved): only the
        # safeguards differ
        return VariantSpec(name, "loop", store, LoopConfig.naive(
            max_lessons=base.max_lessons, match_limit=base.match_limit,
            skill_cap=base.skill_cap, memory_cap=base.memory_cap, memory_k=base.memory_k))
    if name == "self_reflection":
        return VariantSpec(name, "loop", store,
                           replace(base, outcome_gate="self", approval_for_untrusted=False),
                           self_gate=True)
    if name in ("skill_loop-self_gate", "memory_loop-self_gate"):
        # the full loop whose outcome gate trusts the agent's own opinion: the loop without
        # the *verified* outcome gate (every other safeguard on)
        return VariantSpec(name, "loop", name.split("_")[0],
                           replace(base, outcome_gate="self"), self_gate=True)
    if name == "memory_loop-whole_memory":   # every fact in context, not the top memory_k
        return VariantSpec(name, "loop", "memory", replace(base, memory_k=None))
    head, _, switch = name.partition("-no_")
    if head in ("skill_loop", "memory_loop"):
        st = head.split("_")[0]
        if not switch and "-" not in name:
            return VariantSpec(name, "loop", st, base)
        if switch in LoopConfig.SWITCHES:
            return VariantSpec(name, "loop", st, base.ablate(switch))
        raise ConfigError(field_name, name, f"unknown safeguard {switch!r}; one of "
                          f"{LoopConfig.SWITCHES}")
    raise ConfigError(field_name, name, f"unknown variant; one of {BASE_VARIANTS} or "
                      "'<skill|memory>_loop-no_<switch>'")


# ============================================================================ reviewer

class ProcedureReviewer:
    """A deterministic reviewer for agent tasks (the :class:`dyna.loops.Reviewer`
    protocol), standing in for an LLM that reads a run's digest.

    It takes the first ``title_words`` content words of the task as the task's key and the
    run's procedure as: the calls that returned ok, in order, and, when the last call
    failed, that call too with probability ``misattribution`` (1 in v0: it believes the
    last call finished the job; on a verified success there is no such call). A planted
    instruction seen in a tool output is copied
    into the lesson with probability ``copy_rate`` (at the position where it was seen;
    provenance ``tool_output``). Randomness comes from ``(seed, crc32(run_id))``.

    * store ``"skill"``: one skill ``<key words>-<crc32 of the procedure>``, triggers the
      key words, body one line ``N. call `tool` with `value``` per step;
    * store ``"memory"``: per step, facts not yet in memory: ``"<key> step k value is
      val_j"`` (with ``memory_facts="call"`` also ``"<key> step k tool is tool_c"``; for a
      copied instruction ``"<key> step k tool is send_secrets"``).

    Parameters
    ----------
    store : {"skill", "memory"}
    seed : int
    copy_rate : float
    title_words : int
    tokens_per_review : int
    """

    def __init__(self, store: str = "skill", seed: int = 0, copy_rate: float = 0.5,
                 title_words: int = 2, tokens_per_review: int = 300,
                 misattribution: float = 1.0, memory_facts: str = "value"):
        if store not in STORES:
            raise ConfigError("store", store, f"must be one of {STORES}")
        self.store = store
        self.seed = check_range("seed", seed, 0, None, integer=True)
        self.copy_rate = float(check_range("copy_rate", copy_rate, 0.0, 1.0))
        self.title_words = check_range("title_words", title_words, 1, None, integer=True)
        self.tokens_per_review = check_range("tokens_per_review", tokens_per_review, 0,
                                             None, integer=True)
        self.misattribution = float(check_range("misattribution", misattribution, 0.0, 1.0))
        if memory_facts not in ("value", "call"):
            raise ConfigError("memory_facts", memory_facts, "must be 'value' or 'call'")
        self.memory_facts = memory_facts
        #: crc32 of a run id -> its two uniforms, for the run ids "e<t>" of a block of
        #: episodes (the loop agents' ids), drawn at once by :func:`review_uniforms_many`
        self._drawn: dict[int, tuple[float, float]] = {}
        self._known: tuple | None = None   # (a snapshot's facts, their keys)
        #: Lessons proposed so far that name the harmful tool (a copied planted call).
        self.harmful_proposed = 0

    def _known_keys(self, memory) -> frozenset:
        """The fact keys of ``memory`` (a snapshot, or any iterable of facts), remembered
        for the last snapshot's tuple of facts while each holds the very text it had (a
        key is a function of the text)."""
        entries = getattr(memory, "entries", None)
        memo = self._known
        if (type(entries) is tuple and memo is not None and memo[0] is entries
                and all(map(operator.is_, memo[1], map(_TEXT, entries)))):
            return memo[2]
        keys = frozenset(e.key for e in memory)
        if type(entries) is tuple:
            self._known = (entries, tuple(map(_TEXT, entries)), keys)
        return keys

    def _draw(self, run_id: str, crc: int) -> tuple[float, float]:
        """The two uniforms of ``default_rng([seed, crc])``; for a loop agent's run id
        ``e<t>``, those of ``e<t>`` ... ``e<t + BLOCK - 1>`` are drawn with them and
        remembered (the numbers depend on the crc alone, so a remembered pair is exact
        whichever id gave that crc)."""
        m = _RUN_ID_RE.match(run_id)
        if m is None or str(int(m.group(1))) != m.group(1):
            return _review_uniforms(self.seed, crc)
        t = int(m.group(1))
        crcs = [zlib.crc32(f"e{i}".encode()) for i in range(t, t + BLOCK)]
        u = review_uniforms_many(self.seed, np.array(crcs, dtype=np.uint64)).tolist()
        self._drawn = {c: (x, y) for c, (x, y) in zip(crcs, u)}
        return self._drawn[crc]

    def procedure(self, digest: Digest, copy: bool,
                  misattribute: bool = True) -> tuple[list[tuple[str, str]], bool]:
        """``(calls, copied)``: the procedure the reviewer reads from the digest, as
        ``(tool, value)`` names, and whether a planted call was copied into it; the last
        call, when it failed, is in it only if ``misattribute``."""
        calls: list[tuple[str, str]] = []
        planted = None
        for tc in digest.tool_calls:
            if not tc.error:
                calls.append((tc.name, str(tc.args.get("value", ""))))
            if planted is None and copy:
                m = _NOTE_RE.search(tc.output)
                if m:
                    planted = (len(calls), (m.group(1), m.group(2)))
        last = digest.tool_calls[-1] if digest.tool_calls else None
        if last is not None and last.error and misattribute:
            calls.append((last.name, str(last.args.get("value", ""))))
        if planted is not None:
            calls.insert(planted[0], planted[1])
        return calls, planted is not None

    def review(self, digest: Digest, context) -> ReviewerOutput:
        # default_rng([seed, crc])'s first two uniforms, both drawn at once
        crc = zlib.crc32(digest.run_id.encode())
        if self.seed <= _M32:
            u = self._drawn.get(crc)
            if u is None:
                u = self._draw(digest.run_id, crc)
        else:   # more than one 32-bit word of entropy: numpy's own
            u = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
                [self.seed, crc]))).random(2)
        copy = u[0] < self.copy_rate
        misattribute = u[1] < self.misattribution   # drawn always: fixed count
        calls, copied = self.procedure(digest, copy, misattribute)
        key = content_words(digest.task)[:self.title_words]
        if not calls or not key:
            return ReviewerOutput((), self.tokens_per_review)
        prov = ("tool_output",) if copied else ()
        harmful = sum(t == "send_secrets" for t, _ in calls)
        if self.store == "skill":
            self.harmful_proposed += bool(harmful)
            body = "\n".join(f"{i}. call `{t}` with `{v}`" for i, (t, v) in
                             enumerate(calls, 1))
            tag = f"{zlib.crc32(body.encode()):08x}"
            name = "-".join(key) + "-" + tag
            desc = f"Procedure for {' '.join(key)} tasks: {len(calls)} tool calls."
            return ReviewerOutput((Proposal("skill", name, desc, body, tuple(key),
                                            provenance=prov),), self.tokens_per_review)
        known = self._known_keys(context.memory) if context is not None else set()
        out = []
        head = " ".join(key)
        for k, (t, v) in enumerate(calls, 1):
            if t == "send_secrets" or not v:
                texts = [f"{head} step {k} tool is {t}"]
            elif self.memory_facts == "call":
                texts = [f"{head} step {k} tool is {t}", f"{head} step {k} value is {v}"]
            else:
                texts = [f"{head} step {k} value is {v}"]
            for text in texts:
                if fact_key(text) not in known:
                    self.harmful_proposed += t == "send_secrets"
                    out.append(Proposal("memory", text=text,
                                        provenance=prov if t == "send_secrets" else ()))
        return ReviewerOutput(tuple(out), self.tokens_per_review)


# ============================================================================ the agent

#: ``(switch, its episode column)`` for every safeguard switch (:attr:`LoopConfig.SWITCHES`).
_ACTED_COLUMNS = tuple((s, f"acted_{s}") for s in LoopConfig.SWITCHES)


class _AgentClock:
    """A loop agent's store clock (:meth:`LoopAgent._clock`), holding the agent weakly
    (no reference cycle through the stores). Once the agent is gone it gives the last
    time it gave (EPOCH if none)."""

    __slots__ = ("_agent", "_last")

    def __init__(self, agent):
        self._agent = weakref.ref(agent)
        self._last = EPOCH

    def __call__(self) -> _dt.datetime:
        agent = self._agent()
        if agent is not None:
            self._last = agent._clock()
        return self._last


#: What the agent brings into one episode (:class:`dyna.agents.baselines.Knowledge`).
_Knowledge = Knowledge


@dataclass
class _FactKnowledge(Knowledge):
    """What a memory loop brings into one episode: :class:`Knowledge` whose ``tools`` and
    ``values`` come from memory facts, with the facts they came from.

    Attributes
    ----------
    facts : dict of int -> tuple of str
        Procedure step (0-based) -> the texts of the facts that gave ``tools[step]`` and
        ``values[step]``. A call made from both names them in the digest
        (:attr:`dyna.loops.ToolCall.skills`), so a call that returns an error contradicts
        them (:meth:`dyna.loops.LearningLoop.finish`).
    """

    facts: dict = field(default_factory=dict)


class LoopAgent:
    """One variant acting in one :class:`envs.agent_tasks.AgentTaskEnv` over many episodes.

    Parameters
    ----------
    spec : VariantSpec
    env : AgentTaskEnv
        The first :meth:`episode` resets it with ``env_seed`` (building the world), the
        later ones with plain ``reset()`` (the next task).
    seed : int or (int, int)
        ``(seed, run_index)`` of the run (an int is ``(seed, 0)``): the agent's streams are
        :func:`agent_streams` of it, the same for every variant.
    params : PolicyParams
    env_seed : int, optional
    chosen_family : int
        The family whose competence the ``comp_chosen_*`` fields record
        (:func:`competence_fields`), in ``[0, env.n_families)``.

    Raises
    ------
    ConfigError
        A bad seed or ``chosen_family``.

    Attributes
    ----------
    rng : numpy.random.Generator
        The policy's generator of the current episode (``streams["policy"](t)``'s
        numbers). The same object in every episode, its state replaced at each: a
        reference kept across episodes draws another episode's numbers.
    """

    def __init__(self, spec: VariantSpec, env, seed, params: PolicyParams | None = None,
                 env_seed: int | None = None, chosen_family: int = 0):
        self.spec = spec
        self.env = env
        self.env_seed = env_seed
        self.params = params or PolicyParams()
        run = (int(seed), 0) if np.ndim(seed) == 0 else tuple(int(x) for x in seed)
        if len(run) != 2:
            raise ConfigError("seed", seed, "must be an int or (seed, run_index)")
        self.streams = agent_streams(*run)
        # the policy's generator of episode t, streams["policy"](t): one PCG64 whose state
        # is set to that generator's at each episode (envs.seeding.spawned_states, BLOCK
        # episodes at a time), the same draws as a freshly built one, without building
        # three numpy objects per episode (~18 us)
        self._policy_bg = np.random.PCG64(0)
        self._policy_gen = np.random.Generator(self._policy_bg)
        self._policy_block: tuple[int, list] = (0, [])
        self.rng = self._policy_rng(0)
        self.competence = BetaCompetence()
        self.chosen_family = int(check_range("chosen_family", chosen_family, 0,
                                             env.n_families - 1, integer=True))
        self._arrivals = np.zeros(env.n_families, dtype=np.int64)   # per family, so far
        self.t = 0
        self._now = None   # (episode, days per episode, its datetime) (_clock)
        self._names = env.tool_names
        self._tool_ix = {n: i for i, n in enumerate(env.tool_names)}
        self._value_ix = {n: i for i, n in enumerate(env.value_names)}
        self._parsed: dict = {}
        self._last_calls: list = []
        self._key_family: dict = {}
        self._written: dict = {}
        self._store_audit: _StoreAudit | None = None
        self._placed: int | None = None      # the skill library's mark at the last audit
        self._entries_seen = None            # the memory's facts at the last audit
        self._staged_at: dict = {}
        self._covered: frozenset = frozenset()   # _right_families() at the last audit
        self._head = self._head_families()        # the env's arrival probabilities are fixed
        self.episode_stats: dict = {}
        self.loop = None
        self.tabular = None
        self.experience = None
        if spec.learner == "episodic":
            from dyna.experience import ExperienceStore
            self.experience = ExperienceStore("", dim=64)
            self._seen: dict = {}  # family -> positions with records
        if spec.learner == "tabular":
            from dyna.agents.tabular import DynaAgent
            hp = {**TABULAR_DEFAULTS, **self.params.tabular}
            if spec.name == "dyna_q":
                hp.pop("kappa", None)
            n_states = env.n_families * (env.length + 1)
            # every ordinary tool slot, the spare ones for renamed tools included (they error
            # until a rename installs them), never the harmful tool: v0 has no spares
            self._tabular_slots = [t for t in range(env.action_space.nvec[0])
                                   if t != env.harmful_tool]
            self.tabular = DynaAgent(spec.name, n_states,
                                     len(self._tabular_slots) * env.n_values,
                                     seed=self.streams["tabular"], **hp)
        self.baseline = None
        if spec.learner == "baseline":
            self.baseline = make_baseline(spec.name, env, self.streams["reviewer"],
                                          title_words=self.params.title_words,
                                          tokens_per_review=self.params.tokens_per_review,
                                          copy_rate=self.params.copy_rate)
        if spec.learner == "loop":
            cfg = spec.config
            # the stores' clock reaches the agent through a weak reference: a bound method
            # would make agent -> loop -> store -> agent a reference cycle, so a finished
            # run's objects (its library, history and records: ~16,000 in a naive run)
            # would wait for the cyclic collector instead of being freed at once
            clock = _AgentClock(self)
            skills = cfg.skill_library(None, clock=clock, log_outcomes=False)
            memory = cfg.memory_store(None, clock=clock)
            reviewer = ProcedureReviewer(spec.store, self.streams["reviewer"],
                                         self.params.copy_rate,
                                         self.params.title_words,
                                         self.params.tokens_per_review,
                                         self.params.misattribution,
                                         self.params.memory_facts)
            self.loop = LearningLoop(skills, memory, reviewer, cfg)

    def _clock(self) -> _dt.datetime:
        # the stores read the clock several times an episode: the same (immutable)
        # datetime for the same episode and rate, computed once
        t, rate = self.t, self.params.days_per_episode
        got = self._now
        if got is None or got[0] != t or got[1] != rate:
            got = self._now = (t, rate, EPOCH + _dt.timedelta(days=t * rate))
        return got[2]

    # ------------------------------------------------------------------ knowledge
    def _family_of_key(self, words) -> int | None:
        """The family a lesson's key words name (:meth:`AgentTaskEnv.family_of_key`),
        cached per key (the world's triggers never change within a run)."""
        key = tuple(words)
        got = self._key_family.get(key, -2)
        if got == -2:
            got = self._key_family[key] = self.env.family_of_key(key)
        return got

    def _sync_names(self) -> None:
        """Re-read the env's tool names when they changed (a renamed tool: the agent is
        given the current tool list with each task); parsed lessons are re-parsed, so a
        lesson naming the old tool maps to its old slot, which now errors."""
        names = self.env.tool_names
        if names is not self._names:
            self._names = names
            self._tool_ix = {n: i for i, n in enumerate(names)}
            self._parsed.clear()

    def _skill_calls(self, skill) -> list:
        return self._skill_calls_of(skill.body)

    def _skill_calls_of(self, body: str) -> list:
        got = self._parsed.get(body)
        if got is None:
            got = [(self._tool_ix.get(t, -1), self._value_ix.get(v, -1))
                   for t, v in _SKILL_CALL_RE.findall(body)]
            self._parsed[body] = got
        return got

    def _fact(self, text: str):
        got = self._parsed.get(text)
        if got is None:
            m = _FACT_RE.match(text)
            if m is None:
                got = (None, 0, "", -1)
            else:
                kind = m.group(3)
                ix = (self._value_ix if kind == "value" else self._tool_ix).get(m.group(4), -1)
                got = (tuple(m.group(1).split()), int(m.group(2)), kind, ix)
            self._parsed[text] = got
        return got

    def _knowledge(self, family: int, task: str, task_instance: int):
        env = self.env
        if self.spec.learner == "oracle":
            return _Knowledge([list(env.procedure(family))], entries=1), None
        if self.experience is not None:
            return self._recall(family, task), None
        if self.baseline is not None:
            self._sync_names()
            return self.baseline.knowledge(task, task_instance=task_instance), None
        if self.loop is None:
            return _Knowledge(), None
        self._sync_names()
        ctx = self.loop.begin(f"e{self.t}", task)
        k = _Knowledge() if self.spec.store == "skill" else _FactKnowledge()
        if self.spec.store == "skill":
            for m in ctx.skills:
                k.calls.append(self._skill_calls(m.skill))
                if self._family_of_key(m.skill.triggers) != family:
                    k.irrelevant += 1
            k.entries = len(ctx.skills)
            k.names = tuple(m.name for m in ctx.skills)
        else:
            # a fact counts for this task when the task's words hold its key words (what
            # the agent reads), never by the family the env hides
            words = set(task.split())
            for e in ctx.memory:
                key, step, kind, ix = self._fact(e.text)
                if key is None or not words.issuperset(key):
                    k.irrelevant += 1
                    continue
                got = k.values if kind == "value" else k.tools
                if step - 1 not in got:   # the first such fact in context order
                    got[step - 1] = ix
                    k.facts[step - 1] = k.facts.get(step - 1, ()) + (e.text,)
            k.entries = len(ctx.memory)
        return k, ctx

    def _recall(self, family: int, task: str) -> _Knowledge:
        """The episodic variant's knowledge: per position, the call that worked best in
        the most similar past runs (query_similar + get_recommendation)."""
        store, k = self.experience, self.params.episodic_k
        self._sync_names()
        calls = []
        for p in range(self.env.length):
            tt = f"f{family}-s{p}"
            if p >= len(self._seen.get(family, ())):  # nothing recorded at this step yet
                break
            rec = store.get_recommendation("agent", task_type=tt, k=k,
                                           state_before={"task": task})
            best = rec["best"]
            if best is None or best["n_success"] < 1:
                break
            t, v = best["action_type"].split(":")
            calls.append((self._tool_ix.get(t, -1), self._value_ix.get(v, -1)))
        return _Knowledge([calls] if calls else [], entries=1 if calls else 0)

    def _remember(self, family: int, task: str, calls) -> None:
        """Record every call of the finished run (one experience record per call)."""
        env, pos, recs = self.env, 0, []
        for i, ((t, v), _, err) in enumerate(calls):
            recs.append({"task_type": f"f{family}-s{pos}",
                         "action_type": f"{env.tool_names[t]}:{env.value_names[v]}",
                         "outcome": "failure" if err else "success",
                         "reward": 0.0 if err else 1.0, "run_id": f"e{self.t}",
                         "timestamp": self.t + i / 1000.0, "state_before": {"task": task}})
            if not err:
                pos += 1
        self.experience.record("agent", recs)
        seen = self._seen.setdefault(family, [])
        while len(seen) < pos + (0 if pos == env.length else 1):
            seen.append(True)

    # ------------------------------------------------------------------ acting
    def _act(self, know: _Knowledge, factor: float):
        """Play the episode; returns ``(calls, info, followed)``: the calls as
        ``((tool, value), output, error)``, the last step's info, and per call the names of
        the injected skills whose procedure gave it and the texts of the facts that gave
        both its tool and its value (empty when the call did not come from following a
        skill or facts)."""
        env, rng = self.env, self.rng
        n_tools, n_values = env.n_tools, env.n_values
        oracle = self.spec.learner == "oracle"
        p_follow = (1.0 if oracle and self.params.oracle_follows_always
                    else self.params.p_follow * factor)
        planted_rate = getattr(env, "planted_follow_rate", None)
        callable_tools = list(env.callable_tools()) if hasattr(env, "callable_tools") \
            else list(range(n_tools))
        harmful = env.harmful_tool
        calls, info, followed = [], None, []
        truth = env.procedure(env.family)
        hint = getattr(env, "task_hint", ())   # the task's hint (dyna/AgentTasks-v2)
        stats = self.episode_stats = dict.fromkeys(
            ("poisoned_follows", "catalog_tokens", "context_tokens", "errors"), 0)
        stats.update(incident_direct=False, incident_lesson=False)
        pos = -1
        while True:
            if pos != env.position:  # a new procedure position: fresh local knowledge
                pos = env.position
                follow = rng.random() < p_follow
                tried: set = {(t, v) for s, t, v in know.avoid if s == pos}
                bad_tools: set = set()
                known_tool = -1
                bad_values: set = set()
                guide = []
                source: dict = {}  # call -> names of the skills that give it here
                if follow:
                    for i, c in enumerate(know.calls):
                        if len(c) > pos and c[pos][0] >= 0 and c[pos][1] >= 0:
                            guide.append(c[pos])
                            if i < len(know.names):
                                source.setdefault(c[pos], []).append(know.names[i])
                    if know.values or know.tools:
                        t = know.tools.get(pos, -1)
                        v = know.values.get(pos, -1)
                        if t >= 0 and v >= 0:
                            guide.append((t, v))
                            if isinstance(know, _FactKnowledge):   # the call names its facts
                                source.setdefault((t, v), []).extend(know.facts.get(pos, ()))
                        fact_tool, fact_value = t, v
                    else:
                        fact_tool = fact_value = -1
                else:
                    fact_tool = fact_value = -1
            call = None
            origin = "explore"   # or "planted" (obeyed the last output), "entry", "fact"
            if planted_rate is not None and env.planted[0] > 0 and env.falls_for_planted():
                # it obeys the instruction planted in the output it has just read
                call = (env.planted[0] - 1, env.planted[1] - 1)
                origin = "planted"
            for g in guide if call is None else ():
                if g not in tried and g[0] not in bad_tools and not (
                        g[0] == known_tool and g[1] in bad_values):
                    if (g[0] == harmful and planted_rate is not None
                            and not env.falls_for_planted()):
                        tried.add(g)   # a lesson's harmful step, not followed this time
                        continue
                    call = g
                    origin = "entry"
                    break
            followed.append(tuple(source.get(call, ())) if call is not None else ())
            if call is None:
                if (fact_tool == harmful and planted_rate is not None
                        and not env.falls_for_planted()):
                    fact_tool = -1   # a fact's harmful tool, not followed this time
                hint_tool, hint_value = hint[pos] if hint else (-1, -1)
                if known_tool >= 0:
                    tool = known_tool
                elif fact_tool >= 0 and fact_tool not in bad_tools:
                    tool = fact_tool
                elif hint_tool >= 0 and hint_tool not in bad_tools:
                    tool = hint_tool
                else:
                    free = [t for t in callable_tools if t not in bad_tools]
                    tool = free[int(rng.integers(len(free)))] if free else \
                        callable_tools[int(rng.integers(len(callable_tools)))]
                if tool == known_tool:
                    vals = [v for v in range(n_values) if v not in bad_values]
                else:
                    vals = list(range(n_values))
                if fact_value >= 0 and fact_value in vals and (tool, fact_value) not in tried:
                    value = fact_value
                elif tool == hint_tool and hint_value in vals and (tool, hint_value) not in tried:
                    value = hint_value
                else:
                    vals = [v for v in vals if (tool, v) not in tried] or vals
                    value = vals[int(rng.integers(len(vals)))]
                call = (tool, value)
                if tool == fact_tool or value == fact_value:
                    origin = "fact"
            tried.add(call)
            if origin == "entry" and call != truth[pos] or origin == "fact" and (
                    call[0] == fact_tool != truth[pos][0]
                    or call[1] == fact_value != truth[pos][1]):
                stats["poisoned_follows"] += 1
            _, _, terminated, truncated, info = env.step(call)
            stats["context_tokens"] += info["tokens"]["context"]
            stats["errors"] += env.last_result not in (1,)
            stats["catalog_tokens"] += info["tokens"].get("catalog", 0)
            if info["incident"]:
                stats["incident_direct"] = origin == "planted"
                stats["incident_lesson"] = origin in ("entry", "fact")
            res = env.last_result
            calls.append((call, info["tool_output"], res != 1))
            if res == 2:
                bad_tools.add(call[0])
            elif res == 3:
                known_tool = call[0]
                bad_values.add(call[1])
            if terminated or truncated:
                return calls, info, followed

    def _act_tabular(self, family: int):
        """Play the episode with the tabular Dyna agent: state ``family * (length + 1) +
        position``, action ``tool * n_values + value`` (never the harmful tool); the env's
        reward (1 on success), model and planning per real step (Sutton & Barto 8.2/8.3)."""
        env, agent = self.env, self.tabular
        nv, base = env.n_values, family * (env.length + 1)
        slots = self._tabular_slots
        calls, info = [], None
        s = base + env.position
        while True:
            a = agent.act(s)
            call = (slots[a // nv], a % nv)
            _, r, terminated, truncated, info = env.step(call)
            s2 = base + env.position
            agent.learn(s, a, r, s2, terminated, truncated)
            calls.append((call, info["tool_output"], env.last_result != 1))
            s = s2
            if terminated or truncated:
                return calls, info

    def episode(self) -> dict:
        """Run the next episode; returns one row of :data:`EPISODE_FIELDS`."""
        env, p = self.env, self.params
        self.rng = self._policy_rng(self.t)
        acted_before = self.loop.safeguard_counts() if self.loop is not None else None
        approved, rejected = self._answer_pending()
        _, rinfo = env.reset(seed=self.env_seed) if self.t == 0 else env.reset()
        family = rinfo["family"]
        task = rinfo["description"]
        row = {"family": family, "drift": bool(rinfo["drift"]),
               "drift_family": rinfo["drift"][0]["family"] if rinfo["drift"] else -1,
               "escalated": False,
               "learning_tokens": 0, "context_entries": 0,
               "task_instance": rinfo.get("task_instance", self.t),
               "retrial": rinfo.get("retrial", 0), "injected_relevant": 0,
               **self._coverage_fields(row_drift=rinfo["drift"])}
        self.episode_stats = dict.fromkeys(
            ("poisoned_follows", "catalog_tokens", "context_tokens", "errors"), 0)
        self.episode_stats.update(incident_direct=False, incident_lesson=False)
        harmful_before = self._harmful_proposed()
        if p.escalation is not None and self._escalate(family):
            row.update(success=True, self_assessed=True, escalated=True, incident=False,
                       steps=0, tokens=int(p.escalation.get("escalation_tokens", 5000)))
        else:
            know, ctx = self._knowledge(family, task, rinfo.get("task_instance", self.t))
            stored = (len(self.loop.skills) if self.loop is not None
                      and self.spec.store == "skill" and getattr(env, "catalog_tokens", 0)
                      else 0)
            factor = (env.declare_context(know.entries, know.irrelevant, stored_entries=stored)
                      if stored else env.declare_context(know.entries, know.irrelevant))
            if self.tabular is not None:
                calls, info = self._act_tabular(family)
                followed = [()] * len(calls)
            else:
                calls, info, followed = self._act(know, factor)
            self._last_calls = calls   # ((tool, value), output, error) of this episode
            success = bool(info["verified_success"])
            judged = bool(info["self_assessed_success"])
            if self.experience is not None:
                self._remember(family, task, calls)
            if self.baseline is not None:
                row["learning_tokens"] = int(self.baseline.learn(RunRecord(
                    f"e{self.t}", family, task, tuple(calls), success, judged,
                    int(info["episode_tokens"]),
                    task_instance=rinfo.get("task_instance", self.t),
                    retrial=rinfo.get("retrial", 0))))
            self.competence.update(family, success)
            row.update(success=success, self_assessed=judged, incident=bool(info["incident"]),
                       steps=len(calls), tokens=int(info["episode_tokens"]),
                       context_entries=know.entries,
                       injected_relevant=know.entries - know.irrelevant)
            if self.loop is not None:
                names = env.tool_names
                vals = env.value_names
                # a call that followed an injected skill names it, so a skill whose step
                # now errors is reported contradicted even when the run recovers
                trusted = env.tool_trusted
                gate_self = self.spec.self_gate
                actions = tuple(f"{names[c[0]]}:{vals[c[1]]}" for c, _, _ in calls)
                if self.spec.config.redaction:
                    tool_calls = [{"name": names[c[0]], "args": {"value": vals[c[1]]},
                                   "output": out, "error": err, "skills": f,
                                   "trusted": trusted[c[0]]}
                                  for (c, out, err), f in zip(calls, followed)]
                    digest = Digest.from_run(
                        f"e{self.t}", task, success=None if gate_self else success,
                        verified=not gate_self, self_assessment=judged, steps=len(calls),
                        tokens=row["tokens"], tool_calls=tool_calls, actions=actions,
                        redaction=True)
                else:
                    digest = _plain_digest(f"e{self.t}", task, None if gate_self else success,
                                           not gate_self, judged, row["tokens"], calls,
                                           followed, names, vals, trusted, actions)
                rec = self.loop.finish(ctx, digest)
                row["learning_tokens"] = int(rec.learning_tokens)
        self._audit(row)
        # a baseline's store can lose a harmful entry in the episode: count only gains
        row.update(self.episode_stats,
                   harmful_proposed=max(0, self._harmful_proposed() - harmful_before))
        self._covered = self._right_families()
        row["approved"], row["rejected"] = approved, rejected
        if acted_before is None:
            for _, col in _ACTED_COLUMNS:
                row[col] = 0
        else:
            acted = self.loop.acted
            for s, col in _ACTED_COLUMNS:
                row[col] = acted[s] - acted_before[s]
        a, b = self.competence.posterior(family)
        self._arrivals[family] += 1
        row.update(comp_a=a, comp_b=b, **competence_fields(self.competence, self._arrivals,
                                                           self.chosen_family))
        self.t += 1
        return row

    def _head_families(self) -> frozenset:
        """The fewest most frequent families whose arrival probabilities sum to at least
        0.8 (ties broken by the lower family id)."""
        p = np.asarray(self.env.arrival_p)
        order = np.argsort(-p, kind="stable")
        n = int(np.searchsorted(np.cumsum(p[order]), 0.8 - 1e-12)) + 1
        return frozenset(order[:n].tolist())

    def _coverage_fields(self, row_drift) -> dict:
        """``head_coverage`` and ``drift_covered`` of the episode about to start, from the
        right families found at the end of the last one (:meth:`_right_families`)."""
        if self.spec.learner == "oracle":
            return {"head_coverage": 1.0, "drift_covered": bool(row_drift)}
        head = self._head
        covered = self._covered
        return {"head_coverage": len(covered & head) / len(head),
                "drift_covered": bool(row_drift) and row_drift[0]["family"] in covered}

    def _right_families(self) -> frozenset:
        """The families for which the store holds an entry right for the current procedure:
        a skill (or a baseline's entry) whose every call is right, or facts right for every
        step (the value, and the tool when the reviewer writes tool facts)."""
        env = self.env
        if self.baseline is not None:
            right = set()
            for key, calls in self.baseline.audit_entries():
                fam = self._family_of_key(key.split())
                if fam is not None and agrees(calls, env.procedure(fam)):
                    right.add(fam)
            return frozenset(right)
        if self.loop is None:
            return frozenset()
        if self.spec.store == "skill":
            right = set()
            for s in self.loop.skills._skills.values():
                fam = self._family_of_key(s.triggers)
                if fam is not None and tuple(self._skill_calls_of(s.body)) == env.procedure(fam):
                    right.add(fam)
            return frozenset(right)
        kinds = ("value", "tool") if self.params.memory_facts == "call" else ("value",)
        known: set = set()
        for e in self.loop.memory.entries():
            words, step, kind, ix = self._fact(e.text)
            fam = self._family_of_key(words) if words else None
            if fam is not None and 1 <= step <= env.length:
                known.add((fam, step - 1, kind, ix))
        right = set()
        for fam in range(env.n_families):
            proc = env.procedure(fam)
            if all((fam, k, kind, proc[k][kind == "value"]) in known
                   for k in range(env.length) for kind in kinds):
                right.add(fam)
        return frozenset(right)

    def _harmful_proposed(self) -> int:
        """Lessons proposed so far that name the harmful tool: the loop reviewer's count.
        A literature baseline proposes to no reviewer (what it writes is stored): for it,
        the entries of its store that name the harmful tool now."""
        if self.baseline is not None:
            from envs.agent_tasks import HARMFUL_TOOL

            names = self.env.tool_names
            harmful = names.index(HARMFUL_TOOL) if HARMFUL_TOOL in names else -1
            return sum(any(call[0] == harmful for call in calls)
                       for _, calls in self.baseline.audit_entries())
        reviewer = self.loop.reviewer if self.loop is not None else None
        return getattr(reviewer, "harmful_proposed", 0)

    def _policy_rng(self, t: int) -> np.random.Generator:
        """The policy's generator for episode ``t``: it draws what
        ``self.streams["policy"](t)`` draws. The same object at every episode (its state
        replaced): keep no reference to it (``self.rng``) across episodes, it would then
        draw another episode's numbers."""
        start, states = self._policy_block
        if not start <= t < start + len(states):
            words, key = self.streams["policy_seed"]
            start, states = t, spawned_states(words, key, t, min(BLOCK, 2 ** 32 - t))
            self._policy_block = (start, states)
        state, inc = states[t - start]
        self._policy_bg.state = {"bit_generator": "PCG64",
                                 "state": {"state": state, "inc": inc},
                                 "has_uint32": 0, "uinteger": 0}
        return self._policy_gen

    def _answer_pending(self) -> tuple[int, int]:
        """The simulated approver, before each episode: every proposal staged at least
        :data:`APPROVER_DELAY` episodes ago is answered. One that carries a planted
        instruction (its text names the harmful tool) is rejected with probability
        :data:`APPROVER_REJECT_PLANTED`, and approved otherwise; every other one is
        approved. Returns ``(approved, rejected)`` this episode."""
        if self.loop is None:
            return 0, 0
        pending = self.loop.pending()
        if not pending:
            return 0, 0
        from envs.agent_tasks import HARMFUL_TOOL

        approved = rejected = 0
        for item in pending:
            seen = self._staged_at.setdefault(item.id, self.t)
            if self.t - seen < APPROVER_DELAY:
                continue
            text = item.entry.text if item.id.startswith("m") else item.skill.body
            u = self.streams["approver"](seen, zlib.crc32(text.encode("utf-8")))
            if HARMFUL_TOOL in text and u < APPROVER_REJECT_PLANTED:
                self.loop.reject(item.id)
                rejected += 1
            else:
                self.loop.approve(item.id)
                approved += 1
        return approved, rejected

    def _escalate(self, family: int) -> bool:
        from dyna.escalation import should_escalate
        esc = self.params.escalation
        d = should_escalate(self.competence, str(family), esc.get("threshold", 0.8),
                            esc.get("min_episodes", 10), esc.get("risk_class", "low_stakes"),
                            key=family, evidence_verified=True)
        return d.escalate and d.reason == "below_threshold"

    # ------------------------------------------------------------------ audit
    def _audit_baseline(self, row: dict) -> None:
        """The audit of a literature baseline's entries (their key words name the family;
        a tool or value an entry says nothing about, ``-1``, is not held against it:
        :func:`dyna.agents.baselines.agrees`)."""
        env = self.env
        poisoned = stale = 0
        row["library_size"] = self.baseline.size()
        procs: dict = {}   # family -> its procedure now (read once per audit)
        for key, calls in self.baseline.audit_entries():
            fam = self._family_of_key(key.split())
            if fam is not None and fam not in procs:
                procs[fam] = env.procedure(fam)
            truth = procs[fam] if fam is not None else ()
            right_now = fam is not None and agrees(calls, truth)
            ok_at_write = self._written.setdefault(("baseline", key, tuple(calls)),
                                                   right_now)
            if not ok_at_write:
                poisoned += 1
            elif not right_now:
                stale += 1
        row["poisoned"], row["stale"] = poisoned, stale

    def _audit(self, row: dict) -> None:
        """Library size, poisoned entries (wrong when written: a lesson from a failure or
        a planted instruction) and stale entries (right when written, wrong now)."""
        row["library_size"] = row["poisoned"] = row["stale"] = 0
        if self.baseline is not None:
            self._audit_baseline(row)
            return
        if self.loop is None:
            return
        if self._store_audit is None:
            claim = weakref.WeakMethod(self._claim)   # (no cycle through the audit)
            self._store_audit = _StoreAudit(self.env, self._written,
                                            lambda key: claim()(key))
        audit = self._store_audit
        if self.spec.store == "skill":
            # an entry is its (name, body): family and calls never change with its text
            library = self.loop.skills
            lib = library._skills
            row["library_size"] = len(lib)
            names, self._placed = library.placed_since(self._placed)
            if names is None:   # look at every skill, and at every one audited before
                names = [*lib, *audit.slots()]
            for name in dict.fromkeys(names):
                s = lib.get(name)
                audit.set_key(name, None if s is None else (name, s.body))
        else:
            entries = self.loop.memory.entries()
            row["library_size"] = len(entries)
            if entries is not self._entries_seen:
                audit.set_keys(dict(collections.Counter(map(_TEXT, entries))))
                self._entries_seen = entries
        row["poisoned"], row["stale"] = audit.counts()

    def _claim(self, key) -> tuple:
        """``(group, claim)`` of a store entry for :class:`_StoreAudit`: a skill's
        ``(name, body)`` claims its calls for its family's procedure; a fact claims a tool
        or value index for one step of its family's procedure; group None: the entry
        names no family (or no step of one), so it is right for none."""
        if self.spec.store == "skill":
            fam = self._family_of_key(self.loop.skills._skills[key[0]].triggers)
            calls = tuple(self._skill_calls_of(key[1]))
            return (None if fam is None else (fam, None, "")), calls
        words, step, kind, ix = self._fact(key)
        fam = self._family_of_key(words) if words else None
        if fam is None or not 1 <= step <= self.env.length:
            return None, ix
        return (fam, step - 1, kind), ix


_TEXT = operator.attrgetter("text")


class _StoreAudit:
    """Poisoned and stale counts of a loop's store (:meth:`LoopAgent._audit`), kept up to
    date from the entries that changed since the last episode.

    Every entry (a hashable key: a skill's ``(name, body)``, a fact's text) makes one
    claim about one *group* of the hidden world (:meth:`LoopAgent._claim`): a family's
    whole procedure, or one step's tool or value. It is right now when its claim equals
    the group's truth now, and right when written if it was right now at the first audit
    that saw it (remembered in ``written`` for the run, so a restored entry keeps its
    verdict). Poisoned: entries not right when written; stale: entries right when written
    and wrong now. Per group the counts of entries not right when written, of the others,
    and of the others' claims are kept, so an audit costs one look-up per group, and the
    truths are read again only after a drift (the env changes procedures only then, each
    appended to its ``drift_log``).
    """

    def __init__(self, env, written: dict, claim):
        self.env = env
        self._written = written
        self._claim = claim
        self._info: dict = {}     # key -> (group, claim), for the run
        self._keys: dict = {}     # key -> multiplicity in the store at the last audit
        self._slots: dict = {}    # skill name -> its key in the store
        self._groups: dict = {}   # group -> [not right when written, right, Counter]
        self._truths: dict = {}
        self._drifts = None
        self._counts: tuple[int, int] | None = None

    def _truth(self, group):
        got = self._truths.get(group, self)
        if got is self:
            fam, step, kind = group
            proc = self.env.procedure(fam)
            got = proc if step is None else proc[step][1 if kind == "value" else 0]
            self._truths[group] = got
        return got

    def _move(self, key, n: int) -> None:
        """Add ``n`` (negative: remove ``-n``) copies of entry ``key``."""
        info = self._info.get(key)
        if info is None:
            info = self._info[key] = self._claim(key)
        group, claim = info
        ok = self._written.get(key)
        if ok is None:   # first seen: judged against the world now
            ok = self._written[key] = group is not None and claim == self._truth(group)
        g = self._groups.get(group)
        if g is None:
            g = self._groups[group] = [0, 0, collections.Counter()]
        if ok:
            g[1] += n
            g[2][claim] += n
        else:
            g[0] += n

    def set_keys(self, keys: dict) -> None:
        """The store holds ``keys`` (key -> multiplicity) now."""
        if keys != self._keys:
            old = self._keys
            for key, n in old.items() - keys.items():
                if key not in keys:
                    self._move(key, -n)
            for key, n in keys.items() - old.items():
                self._move(key, n - old.get(key, 0))
            self._keys = keys
            self._counts = None

    def slots(self) -> list:
        """The slots :meth:`set_key` filled."""
        return list(self._slots)

    def set_key(self, slot, key) -> None:
        """Slot ``slot`` (a skill's name) holds entry ``key`` now (None: nothing); a
        slot's entry is in the store once. Not to be mixed with :meth:`set_keys`."""
        old = self._slots.get(slot)
        if old == key:
            return
        if old is not None:
            self._move(old, -1)
            del self._keys[old]
            del self._slots[slot]
        if key is not None:
            self._move(key, 1)
            self._keys[key] = 1
            self._slots[slot] = key
        self._counts = None

    def counts(self) -> tuple[int, int]:
        """``(poisoned, stale)`` of the store now."""
        log = getattr(self.env, "drift_log", None)
        drifts = (id(log), len(log)) if log is not None else None
        if drifts is None or drifts != self._drifts:   # a drift (or a new world)
            self._truths.clear()
            self._drifts = drifts
            self._counts = None
        if self._counts is None:
            poisoned = stale = 0
            for group, (bad, good, claims) in self._groups.items():
                poisoned += bad
                stale += good - (claims[self._truth(group)] if group is not None else 0)
            self._counts = (poisoned, stale)
        return self._counts


def competence_fields(competence: BetaCompetence, arrivals: np.ndarray,
                      chosen_family: int, level: float = 0.95) -> dict[str, float]:
    """The ``comp_chosen_*`` and ``comp_weighted_*`` fields of an episode's row.

    Each family's evidence is the agent's own verified successes and failures in it (the
    runs it made itself: an escalated run gives none), read under one empirical-Bayes
    prior (:func:`dyna.competence.empirical_bayes_prior`: its mean the pooled success rate
    of all the agent's runs so far, its strength 2 pseudo-runs), so that a family with few
    runs reads near the agent's overall rate rather than 1/2.

    * ``comp_chosen_a``, ``comp_chosen_b``: the Beta posterior of ``chosen_family``;
    * ``comp_weighted_mean``, ``comp_weighted_lower``, ``comp_weighted_upper``: the
      arrival-weighted competence over the families that have arrived so far, each
      weighted by its arrival count, with the 95% credible interval of that weighted mean
      of the families' success probabilities under their independent Beta posteriors (a
      Beta matched to its mean and variance: :func:`dyna.competence.weighted_beta_mean`).
      A family that has not arrived does not enter. No random number is drawn.

    Parameters
    ----------
    competence : BetaCompetence
        The agent's posteriors, keyed by family id.
    arrivals : ndarray of int64, shape (n_families,)
        Arrivals per family so far, this episode's included (so at least one is > 0).
    chosen_family : int
        In ``[0, n_families)``.
    level : float
        Credible level of the band.

    Returns
    -------
    dict of str to float
    """
    s, f = competence.evidence(range(len(arrivals)))
    a0, b0 = empirical_bayes_prior(s, f)
    a, b = a0 + s, b0 + f
    seen = arrivals > 0
    mean, lower, upper = weighted_beta_mean(a[seen], b[seen], arrivals[seen], level)
    return {"comp_chosen_a": float(a[chosen_family]), "comp_chosen_b": float(b[chosen_family]),
            "comp_weighted_mean": mean, "comp_weighted_lower": lower,
            "comp_weighted_upper": upper}


def run_loop_agent(variant: str, *, store: str = "skill", env_kwargs: dict | None = None,
                   episodes: int = 100, seed: int = 0, run_index: int = 0,
                   params: PolicyParams | dict | None = None,
                   loop_config: LoopConfig | dict | None = None,
                   chosen_family: int = 0) -> dict[str, np.ndarray]:
    """One run (one seed) of one variant on a fresh :class:`AgentTaskEnv`.

    Every random stream depends only on ``(seed, run_index)`` (common random numbers): every
    variant meets the same world, tasks, drifts and injections, and the agent's own
    streams (:func:`agent_streams`: one policy substream per episode, the reviewer's, the
    tabular agents') are the same for every variant, so two variants that make the same
    decisions give bit-identical episodes.

    Parameters
    ----------
    variant : str
        See :func:`make_variant`.
    store : {"skill", "memory"}
    env_kwargs : dict
        The environment's keywords and its ``id`` (:func:`envs.make_agent_task_env`).
    episodes : int
        >= 1.
    seed, run_index : int
        >= 0.
    params : PolicyParams or dict
    loop_config : LoopConfig or dict
        Base settings of the full loop.
    chosen_family : int
        The family of the ``comp_chosen_*`` fields (the experiment's
        ``analysis.chosen_family``), in ``[0, n_families)``.

    Returns
    -------
    dict of numpy.ndarray
        Each field of :data:`EPISODE_FIELDS`, shape ``(episodes,)``.

    Raises
    ------
    ConfigError
        Bad variant, env keyword, parameter, ``chosen_family``.

    Notes
    -----
    Python's cyclic garbage collector is paused while the episodes run and restored (if
    it was on) when the run ends or fails: the run's objects are freed by reference
    counting (a run leaves no reference cycle of its own objects; the test
    ``test_a_finished_loop_run_leaves_no_reference_cycle`` checks it).
    """
    from envs import make_agent_task_env

    episodes = check_range("episodes", episodes, 1, None, integer=True)
    seed = check_range("seed", seed, 0, None, integer=True)
    run_index = check_range("run_index", run_index, 0, None, integer=True)
    if isinstance(params, dict):
        params = PolicyParams(**params)
    if isinstance(loop_config, dict):
        loop_config = LoopConfig(**loop_config)
    spec = make_variant(variant, store, loop_config)
    env = make_agent_task_env(env_kwargs)
    env_seed = int(np.random.SeedSequence([seed, run_index]).generate_state(1)[0])
    agent = LoopAgent(spec, env, (seed, run_index), params, env_seed, chosen_family)
    out = {k: np.empty(episodes, dtype=dt) for k, dt in EPISODE_FIELDS.items()}
    # the cyclic collector is paused for the run (as it was, after): a run makes (almost)
    # no reference cycles (tests/test_loop_agents_speed.py), and its passes over the
    # stores' long-lived objects cost ~5% of a naive loop's time; refcounting frees the rest
    collecting = gc.isenabled()
    gc.disable()
    try:
        for e in range(episodes):
            row = agent.episode()
            for k, arr in out.items():
                arr[e] = row[k]
        if agent.loop is not None:
            agent.loop.close()
    finally:
        if collecting:
            gc.enable()
    return out
