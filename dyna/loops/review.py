"""The review pipeline: what an agent learns from a finished run, and the safeguards.

    Digest -> Reviewer -> Proposal -> validate -> grade -> commit, or stage for approval

- :class:`Digest`: the finished run, redacted (sensitive keys and secret-looking values
  become ``"(redacted)"``) with tool outputs cut to 200 characters.
- :class:`ReviewPolicy`: whether to review (outcome gate, minimum tool calls) and how
  (inline or in the background; a background review never blocks the run, a failing
  review never fails it, and a review cannot trigger another review).
- :class:`Reviewer`: any object with ``review(digest, context)``; :class:`RuleBasedReviewer`
  is a deterministic one with knobs for experiments (how often it proposes, how specific
  its lessons are, how often it copies text from tool outputs).
- :func:`validate` and :func:`grade`: format, size, secrets, path-safe names, allowed
  workflow actions, novelty across skills *and* memories; a score for specificity, novelty
  and agreement.
- :class:`LoopConfig`: every safeguard is a switch, so experiments can ablate one at a
  time; :class:`LearningLoop` wires it all together and keeps the learning cost apart from
  the run's own cost; :func:`impact_report` compares episodes before the first active lesson
  with episodes after, with bootstrap intervals (:func:`scipy.stats.bootstrap`).
"""

from __future__ import annotations

import logging
import re
import threading
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Protocol, runtime_checkable

import numpy as np

from dyna._quick import quick_init
from dyna.errors import ConfigError, check_range
from dyna.loops._text import (FEATURE_CACHE_SIZE, TextFeatures, concrete_parts, content_words,
                              is_concrete, jaccard, text_features)
from dyna.loops.memory import MemoryEntry, MemorySnapshot, MemoryStore, relation
from dyna.loops.provenance import Source, mixed_scripts, untrusted_sources
from dyna.loops.skills import (ACTION_RE, AddResult, Match, PendingItem, Skill, SkillLibrary,
                               SkillSnapshot, check_skill_name, is_untrusted)
from dyna.redact import DEFAULT_SENSITIVE_KEYS, REDACTED, redact, redact_text

__all__ = [
    "Decision", "Digest", "EpisodeContext", "EpisodeRecord", "Grade", "ImpactReport",
    "LearningCost", "LearningLoop", "LoopConfig", "Proposal", "ReviewContext", "ReviewPolicy",
    "ReviewResult", "Reviewer", "ReviewerOutput", "RuleBasedReviewer", "ToolCall",
    "Validation", "grade", "impact_report", "validate",
]

log = logging.getLogger("dyna.loops")

REDACTED_MARK = "(redacted)"
OUTPUT_CHARS = 200
GATES = ("verified", "self", "none")
MODES = ("inline", "background")
KINDS = ("skill", "memory", "workflow")
_SHELL_RE = re.compile(r"[;|&$`<>(){}\\\s'\"]")


# ============================================================================ digest

_TOOL_OUTPUT, _TOOL_ARGUMENT = Source.TOOL_OUTPUT.value, Source.TOOL_ARGUMENT.value


def _mark(obj):
    """Replace dyna.redact's marker by ``(redacted)`` in every string of ``obj``."""
    if isinstance(obj, str):
        return obj.replace(REDACTED, REDACTED_MARK)
    if isinstance(obj, Mapping):
        return {k: _mark(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_mark(v) for v in obj)
    return obj


def has_secret(text: str) -> bool:
    """True when ``text`` contains a secret-looking value (:func:`dyna.redact.redact_text`);
    an already redacted value (``"(redacted)"``) is not one."""
    # A one-character stand-in keeps "token=(redacted)" from reading as an assignment.
    text = text.replace(REDACTED_MARK, "\x00").replace(REDACTED, "\x00")
    return redact_text(text) != text


@quick_init
@dataclass(frozen=True)
class ToolCall:
    """One tool call of a run as the reviewer sees it.

    Attributes
    ----------
    name : str
        Tool name.
    args : Mapping
        Arguments, redacted.
    error : bool
        The call failed.
    output : str
        Output, redacted, then cut to 200 characters.
    skills : tuple of str
        The injected entries this call followed: skills by name, memory facts by text
        (empty: the call came from the agent itself). A call that followed an entry and
        returned an error *contradicts* it (see :meth:`Digest.contradicted`).
    trusted : bool
        The tool declared its output trusted (an internal service that reads no external
        content). False by default: a file reader, a web fetch, an e-mail or retrieval
        tool, or any tool that did not say, can carry planted instructions, and so can
        the arguments a run gave it.
    """

    name: str
    args: Mapping = field(default_factory=dict)
    error: bool = False
    output: str = ""
    skills: tuple[str, ...] = ()
    trusted: bool = False


def _tool_call(name: str, args: dict, error: bool, output: str, skills: tuple,
               trusted: bool) -> ToolCall:
    """``ToolCall(name, args, error, output, skills, trusted)`` for values already checked
    and converted (:meth:`Digest.from_run`), set without the frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field); the same object."""
    call = object.__new__(ToolCall)
    call.__dict__.update(name=name, args=args, error=error, output=output, skills=skills,
                         trusted=trusted)
    return call


@quick_init
@dataclass(frozen=True)
class Digest:
    """A finished run, as handed to a reviewer. Build it with :meth:`from_run`.

    Attributes
    ----------
    run_id : str
    task : str
        Task statement (redacted).
    success : bool or None
        The run's outcome (None: unknown).
    verified : bool
        ``success`` comes from a trusted verifier (tests, an environment's reward), not
        from the agent.
    self_assessment : bool or None
        The agent's own verdict.
    steps : int
        Environment / agent steps.
    tokens : int
        The run's own token usage (its cost; learning cost is counted apart).
    tool_calls : tuple of ToolCall
    sources : tuple of str
        Inputs the run saw besides tool calls (``"web"``, ``"user_files"``, ``"email"``,
        ``"retrieved"``; parsed by :func:`dyna.loops.provenance.parse_source`, so an
        unknown name counts as untrusted).
    actions : tuple of str
        The action names the run took, in order (material for workflows).
    review_depth : int
        0 for a run; > 0 for anything produced by a review (never reviewed again).
    redactions : int
        How many of the digest's texts (the task, each tool call's arguments and output)
        redaction changed (0 when built with ``redaction=False``).
    """

    run_id: str
    task: str
    success: bool | None = None
    verified: bool = False
    self_assessment: bool | None = None
    steps: int = 0
    tokens: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    sources: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    review_depth: int = 0
    redactions: int = 0

    @classmethod
    def from_run(cls, run_id: str, task: str, *, success=None, verified: bool = False,
                 self_assessment=None, steps: int = 0, tokens=0, tool_calls=(), sources=(),
                 actions=(), redaction: bool = True,
                 sensitive_keys=DEFAULT_SENSITIVE_KEYS,
                 output_chars: int = OUTPUT_CHARS) -> "Digest":
        """Build a digest, redacting as it goes.

        Parameters
        ----------
        run_id, task : str
        success, verified, self_assessment, steps, sources, actions :
            As the attributes.
        tokens : int or Mapping
            Token usage; a mapping (e.g. ``{"input": 900, "output": 120}``) is summed.
        tool_calls : iterable of Mapping or ToolCall
            Mappings with ``name``, ``args``, ``output`` and ``error`` (or ``is_error``),
            and optionally ``skills``: the name (str) or names of the injected skills the
            call followed, and ``trusted``: the tool declared its output trusted (default
            False: the call taints the run's proposals, :meth:`taint`).
        redaction : bool
            Redact (default). Values under ``sensitive_keys`` (whole key names, see
            :func:`dyna.redact.redact`) and secret-looking substrings anywhere become
            ``"(redacted)"``. Redaction happens *before* outputs are cut, so a secret is
            never half kept.
        sensitive_keys : iterable of str
        output_chars : int
            Tool outputs are cut to this many characters (200).

        Raises
        ------
        ConfigError
            Bad ``run_id``, ``steps``, ``tokens`` or tool call.
        """
        if not isinstance(run_id, str) or not run_id:
            raise ConfigError("run_id", run_id, "must be a non-empty string")
        steps = check_range("steps", steps, 0, None, integer=True)
        if isinstance(tokens, Mapping):
            tokens = sum(check_range(f"tokens.{k}", v, 0, None, integer=True)
                         for k, v in tokens.items())
        tokens = check_range("tokens", tokens, 0, None, integer=True)

        changed = [0]

        def clean(obj):
            if not redaction:
                return obj
            out = redact(obj, sensitive_keys)
            # nothing redacted and no marker to rewrite: _mark is a no-op, nothing changed
            if type(obj) is str:
                if out is obj and REDACTED not in obj:
                    return obj
            elif (type(out) is dict and out == obj
                  and all(type(v) is str and REDACTED not in v for v in out.values())):
                return out
            out = _mark(out)
            if out != obj:
                changed[0] += 1
            return out

        calls = []
        for i, tc in enumerate(tool_calls):
            if type(tc) is not dict:   # (a plain dict, the common case, is a Mapping)
                if isinstance(tc, ToolCall):
                    tc = {"name": tc.name, "args": dict(tc.args), "output": tc.output,
                          "error": tc.error, "skills": tc.skills, "trusted": tc.trusted}
                elif not isinstance(tc, Mapping):
                    raise ConfigError(f"tool_calls[{i}]", tc,
                                      "must be a mapping with a 'name'")
            if "name" not in tc:
                raise ConfigError(f"tool_calls[{i}]", tc, "must be a mapping with a 'name'")
            followed = tc.get("skills") or ()
            if isinstance(followed, str):
                followed = (followed,)
            if followed and (not isinstance(followed, (list, tuple)) or not all(
                    isinstance(n, str) and n for n in followed)):
                raise ConfigError(f"tool_calls[{i}].skills", followed,
                                  "must be a skill name or a list of skill names")
            out = str(tc.get("output", "") or "")
            trusted = tc.get("trusted", False)
            if not isinstance(trusted, (bool, np.bool_)):
                raise ConfigError(f"tool_calls[{i}].trusted", trusted, "must be true or false")
            calls.append(_tool_call(str(tc["name"]), clean(dict(tc.get("args") or {})),
                                    bool(tc.get("error", tc.get("is_error", False))),
                                    clean(out)[:output_chars],
                                    tuple(dict.fromkeys(followed)) if followed else (),
                                    bool(trusted)))
        task = clean(task)
        return cls(run_id, task, None if success is None else bool(success),
                   bool(verified), None if self_assessment is None else bool(self_assessment),
                   steps, tokens, tuple(calls), tuple(sources), tuple(actions),
                   redactions=changed[0])

    def taint(self) -> tuple[str, ...]:
        """The untrusted sources this run carried, which taint every proposal drawn from it:
        ``tool_output`` when a tool not declared trusted (:attr:`ToolCall.trusted`)
        answered, ``tool_argument`` when such a call had arguments, and each untrusted
        declared source (:attr:`sources`, parsed by
        :func:`dyna.loops.provenance.parse_source`: unknown names are untrusted)."""
        output = argument = False
        for tc in self.tool_calls:
            if not tc.trusted:
                output = True
                if tc.args:
                    argument = True
                    break   # (both found: the rest adds nothing)
        out = ([_TOOL_OUTPUT] if output else []) + ([_TOOL_ARGUMENT] if argument else [])
        if self.sources:
            out += [s.value for s in untrusted_sources(self.sources)]
        return tuple(dict.fromkeys(out))

    def contradicted(self) -> frozenset[str]:
        """Skills this run contradicted: those named by a tool call that followed them
        and returned an error (the skill's step no longer works, e.g. after a drift),
        whatever the run's outcome."""
        return frozenset(n for tc in self.tool_calls if tc.error for n in tc.skills)

    def skill_outcomes(self, names) -> dict[str, bool | None]:
        """The outcome to report for each injected skill in ``names``.

        A contradicted skill (:meth:`contradicted`) gets a failure (False), even in a run
        that succeeded after the agent recovered from the error; any other skill gets the
        run's outcome: ``success``, or the self-assessment when ``success`` is None (None
        when both are unknown: nothing is reported). Without skill attributions on the
        tool calls every skill gets the run's outcome.
        """
        outcome = self.success if self.success is not None else self.self_assessment
        bad = self.contradicted()
        return {n: (False if n in bad else outcome) for n in dict.fromkeys(names)}


# ============================================================================ policy

@dataclass(frozen=True)
class ReviewPolicy:
    """When and how to review a finished run.

    Parameters
    ----------
    outcome_gate : {"verified", "self", "none"}
        ``"verified"``: review only runs with a verified success; ``"self"``: runs the
        agent judged successful (or verified successes); ``"none"``: every run, failures
        included (the naive loop that learns from failures).
    min_tool_calls : int
        Review only runs with at least this many tool calls.
    mode : {"inline", "background"}
        Inline reviews run before :meth:`LearningLoop.finish` returns; background reviews
        run on a worker thread and never block the run.
    """

    outcome_gate: str = "verified"
    min_tool_calls: int = 0
    mode: str = "inline"

    def __post_init__(self):
        if self.outcome_gate not in GATES:
            raise ConfigError("outcome_gate", self.outcome_gate, f"must be one of {GATES}")
        if self.mode not in MODES:
            raise ConfigError("mode", self.mode, f"must be one of {MODES}")
        check_range("min_tool_calls", self.min_tool_calls, 0, None, integer=True)

    def should_review(self, digest: Digest) -> tuple[bool, str]:
        """Whether the policy reviews ``digest``, and why.

        Returns
        -------
        tuple of (bool, str)
            ``(True, "gate passed")``, or False with the reason: produced by a review
            (``review_depth > 0``), fewer tool calls than ``min_tool_calls``, or the
            outcome gate (``"outcome gate: no verified success"`` for ``"verified"``).
        """
        if digest.review_depth > 0:
            return False, "produced by a review: a review never triggers another review"
        if len(digest.tool_calls) < self.min_tool_calls:
            return False, f"{len(digest.tool_calls)} tool calls < {self.min_tool_calls}"
        if self.outcome_gate == "verified" and not (digest.verified and digest.success):
            return False, "outcome gate: no verified success"
        if self.outcome_gate == "self" and not (
                (digest.verified and digest.success) or
                (not digest.verified and digest.self_assessment)):
            return False, "outcome gate: neither verified nor self-assessed success"
        return True, "gate passed"


# ============================================================================ proposals

@quick_init
@dataclass(frozen=True)
class Proposal:
    """A lesson a reviewer proposes.

    Attributes
    ----------
    kind : {"skill", "memory", "workflow"}
    name : str
        Skill or workflow name (skill kinds).
    description, body : str
        Skill kinds.
    triggers : tuple of str
        Skill kinds.
    text : str
        The fact (memory).
    actions : tuple of str
        Workflow action names.
    provenance : tuple of str
        What the lesson was drawn from; ``"tool_output"``, ``"web"`` or ``"user_files"``
        make it untrusted.
    """

    kind: str
    name: str = ""
    description: str = ""
    body: str = ""
    triggers: tuple[str, ...] = ()
    text: str = ""
    actions: tuple[str, ...] = ()
    provenance: tuple[str, ...] = ()

    def lesson_text(self) -> str:
        """The text that carries the lesson (for novelty, specificity and secrets)."""
        if self.kind == "memory":
            return self.text
        return " ".join([self.description, self.body, " ".join(self.actions)]).strip()

    def to_skill(self, run_id: str = "") -> Skill:
        """The :class:`Skill` a skill/workflow proposal writes.

        Raises
        ------
        ConfigError
            A memory proposal, or invalid skill fields.
        """
        if self.kind == "memory":
            raise ConfigError("kind", self.kind, "a memory proposal is not a skill")
        global _LAST_SKILL
        last = _LAST_SKILL
        if last[0] is self:   # validate built it a moment ago (same object: immutable)
            base = last[1]
        else:
            try:
                base = _proposal_skill(self)   # validate and commit build the same skill
            except TypeError:   # a field that cannot be hashed (a list for a tuple), which
                base = _build_skill(self)   # can change in place: not remembered either
            else:
                _LAST_SKILL = (self, base)   # one assignment: safe beside a review thread
        return base if run_id == "" else base.evolve(source_run=run_id)


def _build_skill(p: Proposal) -> Skill:
    return Skill(p.name, p.description, p.body, p.triggers,
                 kind="workflow" if p.kind == "workflow" else "skill", actions=p.actions,
                 provenance=p.provenance)


#: :meth:`Proposal.to_skill` without a run id, remembered per proposal (a proposal and a
#: skill are immutable).
_proposal_skill = lru_cache(maxsize=1024)(_build_skill)
#: The last proposal :meth:`Proposal.to_skill` built a skill for, and that skill (found by
#: identity, before the cache's look-up by value, which hashes and compares every field).
_LAST_SKILL: tuple = (None, None)


@quick_init
@dataclass(frozen=True)
class ReviewContext:
    """What a reviewer may look at besides the digest (read-only views).

    Attributes
    ----------
    skills : SkillSnapshot
        The library's active skills as the run started (or as the review starts).
    memory : MemorySnapshot
        The facts, likewise.
    max_lessons : int
        At most this many proposals are considered (later ones are ``dropped``).
    """

    skills: SkillSnapshot
    memory: MemorySnapshot
    max_lessons: int


@quick_init
@dataclass(frozen=True)
class ReviewerOutput:
    """A reviewer's answer: proposals (possibly none) and its token usage.

    A reviewer that talks to a model (:class:`dyna.loops.llm.LLMReviewer`) also says how
    the review ended and what it refused before anything became a proposal.

    Attributes
    ----------
    proposals : tuple of Proposal
    tokens : int
        Learning cost in tokens (prompt + completion).
    status : {"reviewed", "incomplete", "failed"}
        ``incomplete``: a budget (tokens, turns), rate limit or timeout ended the review
        early; ``failed``: the endpoint kept failing. Either way the run is unchanged.
    reason : str
        Why (empty: the loop writes the number of proposals).
    refused : tuple of Decision
        The reviewer's tool calls that could not become a proposal (action
        ``"refused"``, the reason first in ``detail``, e.g. ``malformed_arguments``).
    prompt_tokens, completion_tokens, turns : int
    seconds : float
        Wall-clock time of the review (never part of a results table).
    """

    proposals: tuple[Proposal, ...] = ()
    tokens: int = 0
    status: str = "reviewed"
    reason: str = ""
    refused: tuple = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    turns: int = 0
    seconds: float = 0.0


@runtime_checkable
class Reviewer(Protocol):
    """Turns a digest into proposals: any object with ``review(digest, context)``.

    ``review`` returns a :class:`ReviewerOutput` (proposals, tokens, how the review ended)
    or a sequence of :class:`Proposal`; an empty answer ("nothing learned") is valid. It
    sees only the redacted :class:`Digest` and the read-only :class:`ReviewContext`, and
    writes nothing: every proposal goes through :func:`validate` and :func:`grade` in
    :meth:`LearningLoop.review`, so a reviewer needs no safeguard of its own. Whatever it
    raises is caught by :meth:`LearningLoop.finish` (the review ends ``failed``, the run is
    unchanged). :class:`RuleBasedReviewer` is deterministic; :class:`dyna.loops.llm.LLMReviewer`
    asks an OpenAI-compatible chat-completions model.
    """

    def review(self, digest: Digest, context: ReviewContext):  # pragma: no cover - protocol
        ...


def _slug(words: Sequence[str], prefix: str) -> str:
    parts = [prefix] + [re.sub(r"[^a-z0-9]+", "-", w.casefold()).strip("-") for w in words]
    name = "-".join(p for p in parts if p)
    name = re.sub(r"-+", "-", name)[:64].strip("-")
    return name or prefix


class RuleBasedReviewer:
    """A deterministic reviewer for experiments.

    From a digest it can propose: a *skill* for a recovery (a tool call that failed and a
    later call of the same tool that worked), a *memory* fact (the arguments of the last
    successful call), and a *workflow* (the run's action sequence). Randomness comes from
    a generator seeded by ``(seed, crc32(run_id))``, so the same run gets the same answer
    in every process.

    Parameters
    ----------
    seed : int
    propose_rate : float
        Probability of proposing anything for a run, in [0, 1].
    specificity : float
        Probability that a lesson names the concrete tool and arguments; otherwise it is
        vague ("Retry tools that fail."), which grading rejects.
    copy_rate : float
        Probability that a lesson copies text from a tool output (its provenance then
        includes ``"tool_output"``, so it is untrusted).
    kinds : tuple of str
        Kinds it may propose, from ``("skill", "memory", "workflow")``.
    tokens_per_review : int
        Simulated reviewer cost, counted as learning cost.
    """

    def __init__(self, seed: int = 0, propose_rate: float = 1.0, specificity: float = 1.0,
                 copy_rate: float = 0.0, kinds: Sequence[str] = ("skill", "memory"),
                 tokens_per_review: int = 0):
        self.seed = check_range("seed", seed, 0, None, integer=True)
        self.propose_rate = float(check_range("propose_rate", propose_rate, 0.0, 1.0))
        self.specificity = float(check_range("specificity", specificity, 0.0, 1.0))
        self.copy_rate = float(check_range("copy_rate", copy_rate, 0.0, 1.0))
        for k in kinds:
            if k not in KINDS:
                raise ConfigError("kinds", k, f"must be among {KINDS}")
        self.kinds = tuple(kinds)
        self.tokens_per_review = check_range("tokens_per_review", tokens_per_review, 0, None,
                                             integer=True)

    def rng(self, run_id: str) -> np.random.Generator:
        """The generator used for ``run_id``."""
        return np.random.default_rng([self.seed, zlib.crc32(run_id.encode("utf-8"))])

    def review(self, digest: Digest, context: ReviewContext) -> ReviewerOutput:
        """Proposals for ``digest`` (see the class docstring); the same for the same
        ``(seed, run_id)`` in every process.

        Returns
        -------
        ReviewerOutput
            At most one proposal per kind in :attr:`kinds` (0-3), in the order skill,
            memory, workflow; ``tokens`` is ``tokens_per_review``.
        """
        rng = self.rng(digest.run_id)
        cost = self.tokens_per_review
        if rng.random() >= self.propose_rate:
            return ReviewerOutput((), cost)
        words = content_words(digest.task)[:2]
        triggers = tuple(words)
        out: list[Proposal] = []
        calls = digest.tool_calls
        ok_calls = [c for c in calls if not c.error]

        def copy(text: str, prov: tuple) -> tuple[str, tuple]:
            outputs = [c.output for c in calls if c.output]
            if outputs and rng.random() < self.copy_rate:
                return f"{text} Tool said: {outputs[-1][:80]}", prov + ("tool_output",)
            return text, prov

        def fmt(c: ToolCall) -> str:
            args = " ".join(f"{k}={v}" for k, v in sorted(c.args.items()))
            return f"`{c.name} {args}`".replace(" `", "`") if args else f"`{c.name}`"

        if "skill" in self.kinds:
            failed = next((c for c in calls if c.error), None)
            fix = next((c for c in reversed(ok_calls) if failed and c.name == failed.name),
                       None)
            if failed is not None and fix is not None:
                specific = rng.random() < self.specificity
                if specific:
                    desc = f"Recover when {failed.name} fails: call {fmt(fix)}"
                    body = f"If {fmt(failed)} fails, call {fmt(fix)} instead."
                else:
                    desc, body = "Retry tools that fail.", "Try again with other settings."
                body, prov = copy(body, ())
                out.append(Proposal("skill", _slug((failed.name,) + words, "recover"), desc,
                                    body, triggers or (failed.name,), provenance=prov))
        if "memory" in self.kinds and ok_calls:
            c = ok_calls[-1]
            specific = rng.random() < self.specificity
            text = (f"For {' '.join(words) or 'this task'}, {fmt(c)} works" if specific
                    else "Be careful with tools.")
            text, prov = copy(text, ())
            out.append(Proposal("memory", text=text, provenance=prov))
        if "workflow" in self.kinds and len(digest.actions) >= 2:
            out.append(Proposal("workflow", _slug(words, "flow"),
                                f"Run {' then '.join(digest.actions)} for "
                                f"{' '.join(words) or 'this task'}",
                                triggers=triggers or tuple(digest.actions[:1]),
                                actions=digest.actions))
        return ReviewerOutput(tuple(out), cost)


# ============================================================================ config

@dataclass(frozen=True)
class LoopConfig:
    """Every safeguard of the loop as a switch, plus its settings.

    Switches (True = safeguard on): ``outcome_gate`` (a gate name; ``"none"`` is off),
    ``redaction``, ``novelty_check``, ``grading``, ``cap_eviction``, ``dating``,
    ``retire_on_contradiction``, ``approval_for_untrusted``, ``secret_scan``;
    ``consolidation_every`` (episodes; 0 is off), ``max_lessons`` and ``match_limit``.
    :meth:`naive` turns them all off; :meth:`ablate` turns one off.

    Parameters
    ----------
    outcome_gate : {"verified", "self", "none"}
    min_tool_calls : int
    review_mode : {"inline", "background"}
    redaction : bool
        Redact digests (sensitive keys, secret-looking values).
    secret_scan : bool
        Refuse proposals that contain a secret-looking value.
    novelty_check : bool
        Refuse lessons that repeat a stored skill or memory (content-word Jaccard
        >= ``novelty_threshold``, or the same fact).
    novelty_threshold : float
    grading : bool
        Refuse proposals graded below ``grade_threshold``.
    grade_threshold : float
    cap_eviction : bool
        Cap the skill library at ``skill_cap`` and the memory at ``memory_cap`` with
        recorded eviction; off: no caps.
    skill_cap, memory_cap : int
    dating : bool
        Skills not verified for ``max_age_days`` are suspect (score times
        ``suspect_factor``).
    max_age_days : float
    suspect_factor : float
    retire_on_contradiction : bool
        Retire a skill or a memory fact whose competence mean falls below
        ``retire_below`` after a failure (with at least ``retire_min_uses`` outcomes).
    retire_below : float
    retire_min_uses : int
    approval_for_untrusted : bool
        Stage proposals with untrusted provenance instead of writing them.
    consolidation_every : int
        Consolidate the memory every this many episodes (0: never).
    max_lessons : int
        At most this many proposals are considered per run (2).
    match_limit : int
        Skills injected per episode (3).
    memory_k : int or None
        Memory facts a run sees: the ``memory_k`` most relevant to the task (Okapi BM25 of
        the fact's words against the task text, stemmed, :mod:`dyna.loops.bm25`; ties in
        memory order); None (the default): the whole memory in context.
    max_body_chars : int
        Size limit of a skill body.
    allowed_actions : tuple of str or None
        Actions a workflow may use (None: any action name).
    prior, discount, level :
        Of the per-skill competence estimator.
    """

    outcome_gate: str = "verified"
    min_tool_calls: int = 0
    review_mode: str = "inline"
    redaction: bool = True
    secret_scan: bool = True
    novelty_check: bool = True
    novelty_threshold: float = 0.6
    grading: bool = True
    grade_threshold: float = 0.5
    cap_eviction: bool = True
    skill_cap: int = 50
    memory_cap: int = 30
    dating: bool = True
    max_age_days: float = 90.0
    suspect_factor: float = 0.5
    retire_on_contradiction: bool = True
    retire_below: float = 0.4
    retire_min_uses: int = 3
    approval_for_untrusted: bool = True
    consolidation_every: int = 10
    max_lessons: int = 2
    match_limit: int = 3
    memory_k: int | None = None
    max_body_chars: int = 4000
    allowed_actions: tuple[str, ...] | None = None
    prior: object = "uniform"
    discount: float = 1.0
    level: float = 0.95

    SWITCHES = ("outcome_gate", "redaction", "secret_scan", "novelty_check", "grading",
                "cap_eviction", "dating", "retire_on_contradiction", "approval_for_untrusted",
                "consolidation_every")

    def __post_init__(self):
        ReviewPolicy(self.outcome_gate, self.min_tool_calls, self.review_mode)
        for f in ("redaction", "secret_scan", "novelty_check", "grading", "cap_eviction",
                  "dating", "retire_on_contradiction", "approval_for_untrusted"):
            if not isinstance(getattr(self, f), bool):
                raise ConfigError(f, getattr(self, f), "must be true or false")
        for f in ("novelty_threshold", "grade_threshold", "suspect_factor", "retire_below"):
            check_range(f, getattr(self, f), 0.0, 1.0)
        for f, lo in (("skill_cap", 1), ("memory_cap", 1), ("retire_min_uses", 0),
                      ("consolidation_every", 0), ("max_lessons", 0), ("match_limit", 0),
                      ("max_body_chars", 1)):
            check_range(f, getattr(self, f), lo, None, integer=True)
        check_range("max_age_days", self.max_age_days, 0.0, None)
        if self.allowed_actions is not None:
            object.__setattr__(self, "allowed_actions", tuple(self.allowed_actions))
        if self.memory_k is not None:
            check_range("memory_k", self.memory_k, 1, None, integer=True)

    @classmethod
    def naive(cls, **overrides) -> "LoopConfig":
        """Every safeguard off (the naive loop), then ``overrides``."""
        off = dict(outcome_gate="none", redaction=False, secret_scan=False,
                   novelty_check=False, grading=False, cap_eviction=False, dating=False,
                   retire_on_contradiction=False, approval_for_untrusted=False,
                   consolidation_every=0)
        off.update(overrides)
        return cls(**off)

    def ablate(self, switch: str) -> "LoopConfig":
        """This config with one safeguard (a name from :attr:`SWITCHES`) turned off.

        Raises
        ------
        ConfigError
            Unknown switch.
        """
        if switch not in self.SWITCHES:
            raise ConfigError("switch", switch, f"must be one of {self.SWITCHES}")
        value = {"outcome_gate": "none", "consolidation_every": 0}.get(switch, False)
        return replace(self, **{switch: value})

    def policy(self) -> ReviewPolicy:
        """The :class:`ReviewPolicy` of this config."""
        return ReviewPolicy(self.outcome_gate, self.min_tool_calls, self.review_mode)

    def skill_library(self, dir=None, **kwargs) -> SkillLibrary:
        """A :class:`SkillLibrary` (folder ``dir``, created if missing, or in memory) with
        these switches (cap, dating, retirement, competence prior); ``kwargs`` override
        (e.g. ``clock``).

        Raises
        ------
        ConfigError
            A bad keyword value, or a symbolic link in the way of the folder.
        """
        kw = dict(cap=self.skill_cap if self.cap_eviction else None,
                  max_age_days=self.max_age_days if self.dating else None,
                  suspect_factor=self.suspect_factor,
                  retire_below=self.retire_below if self.retire_on_contradiction else None,
                  retire_min_uses=self.retire_min_uses, level=self.level, prior=self.prior,
                  discount=self.discount)
        kw.update(kwargs)
        return SkillLibrary(dir, **kw)

    def memory_store(self, path=None, **kwargs) -> MemoryStore:
        """A :class:`MemoryStore` (file ``path``, created at the first write, or in memory)
        with these switches (cap, retirement, competence prior and discount, as the
        skills'); ``kwargs`` override (e.g. ``clock``).

        Raises
        ------
        ConfigError
            A bad keyword value, ``path`` a folder, or a MEMORY.md line that cannot be read.
        """
        kw = dict(cap=self.memory_cap if self.cap_eviction else None,
                  retire_below=self.retire_below if self.retire_on_contradiction else None,
                  retire_min_uses=self.retire_min_uses, prior=self.prior,
                  discount=self.discount)
        kw.update(kwargs)
        return MemoryStore(path, **kw)


# ============================================================================ validate, grade

@quick_init
@dataclass(frozen=True)
class Validation:
    """Result of :func:`validate`.

    Attributes
    ----------
    ok : bool
        The proposal may go on to :func:`grade`.
    reasons : tuple of str
        Why not (empty when ``ok``), e.g. ``"secret-looking value in body"``,
        ``"not novel: 0.83 similar to memory '...'"``.
    """

    ok: bool
    reasons: tuple[str, ...] = ()


@lru_cache(maxsize=FEATURE_CACHE_SIZE)
def _skill_features(description: str, body: str, actions: tuple[str, ...]
                    ) -> tuple[TextFeatures, TextFeatures, frozenset]:
    """Features of a skill's description, of description + body, and its content words
    (description, body and actions), memoised by the texts themselves: a skill whose text
    changes is looked up under its new text, so the cache cannot go stale."""
    return (text_features(description), text_features(" ".join([description, body])),
            frozenset(content_words(" ".join([description, body, " ".join(actions)]))))


#: The rows of :func:`_closest` for the last tuple of skills it was given (a library's
#: active skills by name, :meth:`SkillLibrary._active_by_name`: a new tuple after every
#: change), so a review's two comparisons (validate, grade) read the features once. One
#: entry; the tuple is held, so its identity cannot pass to another one.
_LAST_ROWS: tuple = ((), [])

#: Rows of :func:`_skill_row` by skill object (``id`` -> row; the row holds the skill, so
#: the id cannot pass to another object while it is here): after a library change, the
#: skills that did not change keep their rows. Emptied past :data:`_ROW_OF_MAX` entries.
_ROW_OF: dict[int, tuple] = {}
_ROW_OF_MAX = 4096


def _skill_rows(skills) -> list:
    """``(skill, description, body, actions, (description features, description + body
    features), words)`` per stored skill, in the given order; a remembered row is used
    only while its skill still holds those very texts (a skill changed in place is
    looked up again)."""
    global _LAST_ROWS
    last = _LAST_ROWS
    if type(skills) is tuple and last[0] is skills:
        rows = last[1]
        for i, (s, d, b, a, _, _) in enumerate(rows):
            if s.description is not d or s.body is not b or s.actions is not a:
                rows[i] = _skill_row(s)
        return rows
    memo = _ROW_OF
    rows = []
    for s in (skills.values() if isinstance(skills, Mapping) else skills):
        row = memo.get(id(s))
        if (row is None or row[0] is not s or row[1] is not s.description
                or row[2] is not s.body or row[3] is not s.actions):
            row = memo[id(s)] = _skill_row(s)
        rows.append(row)
    if len(memo) > _ROW_OF_MAX:
        memo.clear()
    if type(skills) is tuple:
        _LAST_ROWS = (skills, rows)
    return rows


def _skill_row(s: Skill) -> tuple:
    d, b, a = s.description, s.body, s.actions
    desc, desc_body, words = _skill_features(d, b, a)
    return (s, d, b, a, (desc, desc_body), words)


def _closest(proposal: Proposal, skills, memory, same_parts: bool = False) -> tuple[float, str]:
    """Highest similarity of the proposal's lesson to a stored skill or memory, and what.

    Similarity is 1 for the same fact (:func:`fact_key`), else the Jaccard similarity of
    content words; with ``same_parts`` only lessons with the same concrete parts (numbers,
    names, files) count, since those are different facts however alike their words.
    Each stored text's key, parts and words come from :func:`text_features` (memoised).
    The first of equally close lessons (skills in the order given, then facts) is named.
    """
    mine = text_features(proposal.lesson_text())
    words, key = mine.words, mine.key
    parts = mine.parts if same_parts else None
    best, what = 0.0, ""
    for s, _, _, _, features, s_words in _skill_rows(skills):
        for f in features:
            if f.key == key:
                sim = 1.0
            elif parts is not None and f.parts != parts:
                continue                      # a different fact: never the closest
            else:
                sim = jaccard(words, s_words)
            if sim > best:
                best, what = sim, f"skill {s.name}"
    for e in memory:
        f = text_features(e.text)
        if f.key == key:
            sim = 1.0
        elif parts is not None and f.parts != parts:
            continue
        else:
            sim = jaccard(words, f.words)
        if sim > best:
            best, what = sim, f"memory {e.text!r}"
    return best, what


def _skills_of(skills):
    """The stored skills :func:`_closest` compares with: a mapping, or a library's active
    skills sorted by name (remembered until the library changes)."""
    if isinstance(skills, (SkillLibrary, SkillSnapshot)):
        return skills.skills if isinstance(skills, SkillSnapshot) else \
            skills._active_by_name()
    return skills or {}


def _memory_of(memory) -> Sequence[MemoryEntry]:
    if isinstance(memory, (MemoryStore, MemorySnapshot)):
        return tuple(memory)
    return memory or ()


def validate(proposal: Proposal, skills=None, memory=None,
             config: LoopConfig | None = None) -> Validation:
    """Check a proposal before it can be written.

    Checks: kind; format and size limits (a valid :class:`Skill` or
    :class:`MemoryEntry`, body at most ``config.max_body_chars``); a secret scan of every
    text field (``config.secret_scan``); a path-safe name; a workflow made only of action
    names (no code, no shell) from ``config.allowed_actions`` when set; novelty against
    stored skills *and* memories (``config.novelty_check``).

    Parameters
    ----------
    proposal : Proposal
    skills : SkillLibrary, SkillSnapshot or Mapping[str, Skill], optional
    memory : MemoryStore, MemorySnapshot or sequence of MemoryEntry, optional
    config : LoopConfig, optional

    Returns
    -------
    Validation
    """
    config = config or LoopConfig()
    reasons: list[str] = []
    if proposal.kind not in KINDS:
        return Validation(False, (f"kind {proposal.kind!r} is not one of {KINDS}",))
    if config.secret_scan:
        for f in ("name", "description", "body", "text"):
            if has_secret(getattr(proposal, f)):
                reasons.append(f"secret-looking value in {f}")
        if any(has_secret(t) for t in proposal.triggers + proposal.actions):
            reasons.append("secret-looking value in triggers or actions")
    if proposal.kind == "memory":
        try:
            MemoryEntry(proposal.text)
            if "\n" in proposal.text.strip():
                reasons.append("a memory fact is one line")
        except ConfigError as exc:
            reasons.append(f"{exc.field}: {exc.reason}")
    else:
        try:
            check_skill_name(proposal.name)
        except ConfigError as exc:
            reasons.append(f"name {proposal.name!r} is not path-safe: {exc.reason}")
        else:
            mixed = mixed_scripts(proposal.name)
            if mixed:
                reasons.append(f"name {proposal.name!r} mixes the scripts "
                               f"{', '.join(mixed)}: a look-alike of another name")
            if len(proposal.body) > config.max_body_chars:
                reasons.append(f"body has {len(proposal.body)} characters > "
                               f"{config.max_body_chars}")
            if proposal.kind == "workflow":
                bad = [a for a in proposal.actions
                       if _SHELL_RE.search(a) or not ACTION_RE.fullmatch(a)]
                if bad or not proposal.actions:
                    reasons.append(f"workflow actions must be action names, got {bad or '[]'}")
                elif config.allowed_actions is not None:
                    extra = [a for a in proposal.actions if a not in config.allowed_actions]
                    if extra:
                        reasons.append(f"actions not allowed: {extra}")
            try:
                proposal.to_skill()
            except ConfigError as exc:
                reasons.append(f"{exc.field}: {exc.reason}")
    if config.novelty_check and not reasons:
        sim, what = _closest(proposal, _skills_of(skills), _memory_of(memory), same_parts=True)
        if sim >= config.novelty_threshold:
            reasons.append(f"not novel: {sim:.2f} similar to {what}")
    return Validation(not reasons, tuple(reasons))


@quick_init
@dataclass(frozen=True)
class Grade:
    """Result of :func:`grade`.

    Attributes
    ----------
    score : float
        ``0.6 * specificity + 0.25 * novelty + 0.15 * agreement``, in [0, 1]; a
        vague lesson (specificity 0) scores at most 0.4.
    specificity : float
        ``min(1, n / 2)`` with n the concrete parts, code spans and command lines named.
    novelty : float
        1 minus the highest similarity to a stored skill or memory (1 when the novelty
        check is off).
    agreement : float
        1, or 0.5 when it contradicts stored learning (a fact giving another value for
        the same attribute, :func:`dyna.loops.memory.relation` "conflict", or a skill of
        the same name retired as contradicted).
    accepted : bool
    reason : str
    """

    score: float
    specificity: float
    novelty: float
    agreement: float
    accepted: bool
    reason: str


def specificity(text: str) -> float:
    """``min(1, n / 2)``: n counts concrete parts, code spans and command lines."""
    return _specificity(text)


@lru_cache(maxsize=FEATURE_CACHE_SIZE)
def _specificity(text: str) -> float:
    from dyna.loops._text import _CODE_RE, _COMMAND_RE
    n = len(concrete_parts(text)) + len(_CODE_RE.findall(text)) + len(_COMMAND_RE.findall(text))
    if n == 0 and is_concrete(text):
        n = 1
    return min(1.0, n / 2.0)


def grade(proposal: Proposal, skills=None, memory=None,
          config: LoopConfig | None = None) -> Grade:
    """Score a proposal for specificity, novelty and agreement with existing learning.

    Below ``config.grade_threshold`` it is rejected with the reason (when
    ``config.grading`` is off everything is accepted, the score still reported). Grade
    only what :func:`validate` passed: grading does not look for secrets or bad names.

    Parameters
    ----------
    proposal : Proposal
    skills : SkillLibrary, SkillSnapshot or Mapping[str, Skill], optional
        Stored skills, for novelty (and, for a library, agreement with a skill of the
        same name retired as contradicted).
    memory : MemoryStore, MemorySnapshot or sequence of MemoryEntry, optional
        Stored facts, for novelty and agreement.
    config : LoopConfig, optional
        ``grading``, ``grade_threshold`` and ``novelty_check`` (defaults: on, 0.5, on).

    Returns
    -------
    Grade
        Scores in [0, 1]; see :class:`Grade` for the formula.
    """
    config = config or LoopConfig()
    text = proposal.lesson_text()
    spec = specificity(text)
    # the stored facts are read only where they count (novelty, a fact's agreement)
    store = memory if isinstance(memory, MemoryStore) else None
    mem = (_memory_of(memory) if config.novelty_check
           or (proposal.kind == "memory" and store is None) else ())
    novelty = 1.0
    if config.novelty_check:
        novelty = 1.0 - _closest(proposal, _skills_of(skills), mem)[0]
    agreement = 1.0
    if proposal.kind == "memory" and (
            any(r == "conflict" for _, r in store.relations(proposal.text))
            if store is not None   # (a store compares only facts of the same subject)
            else any(relation(proposal.text, e.text) == "conflict" for e in mem)):
        agreement = 0.5
    if proposal.kind != "memory" and isinstance(skills, SkillLibrary):
        old = skills.get(proposal.name)
        if old is not None and not old.active and old.retired_reason.startswith("contradicted"):
            agreement = 0.5
    score = 0.6 * spec + 0.25 * novelty + 0.15 * agreement
    detail = f"specificity {spec:.2f}, novelty {novelty:.2f}, agreement {agreement:.2f}"
    if config.grading and score < config.grade_threshold:
        return Grade(score, spec, novelty, agreement, False,
                     f"score {score:.2f} < {config.grade_threshold} ({detail})")
    return Grade(score, spec, novelty, agreement, True, f"score {score:.2f} ({detail})")


# ============================================================================ the loop

@quick_init
@dataclass(frozen=True)
class Decision:
    """What happened to one proposal: ``action`` is ``committed``, ``staged``,
    ``invalid``, ``rejected`` (grade), ``dropped`` (over ``max_lessons``) or ``refused``
    (a reviewer's tool call that never became a proposal, :attr:`ReviewerOutput.refused`).

    Attributes
    ----------
    proposal : Proposal
        As decided on: its provenance includes the run's untrusted sources
        (:meth:`Digest.taint`).
    action : str
        One of the above.
    detail : str
        ``committed``: what the store did (``"written"``, ``"evicted NAME"``, ``"added"``,
        ``"superseded"``, ...); ``staged``: the pending id (``p0001`` a skill, ``m0001`` a
        fact), then ``": "`` and the reason when it is not only untrusted provenance;
        ``invalid``: the validation reasons joined by ``"; "``; ``rejected``: the grade's
        reason.
    grade : Grade or None
        None when the proposal was not graded (``invalid``, ``dropped``, ``refused``).
    """

    proposal: Proposal
    action: str
    detail: str = ""
    grade: Grade | None = None


@quick_init
@dataclass(frozen=True)
class LearningCost:
    """Learning cost of one review, apart from the run's own cost.

    Attributes
    ----------
    reviewer_tokens : int
    grading_calls : int
        Proposals graded.
    prompt_tokens, completion_tokens : int
        The reviewer's split of ``reviewer_tokens``, when it reports one (a model does).
    turns : int
        Requests the reviewer made to its model (0 for a rule-based reviewer).
    seconds : float
        Wall-clock seconds of the review (reported, never part of a results table).
    """

    reviewer_tokens: int = 0
    grading_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    turns: int = 0
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        """``reviewer_tokens`` (what :attr:`EpisodeRecord.learning_tokens` records)."""
        return self.reviewer_tokens


@quick_init
@dataclass(frozen=True)
class ReviewResult:
    """Outcome of reviewing one run: ``status`` is ``reviewed``, ``skipped`` (policy),
    ``incomplete`` (the reviewer ran out of budget, was rate-limited or timed out) or
    ``failed`` (the reviewer raised or its endpoint kept failing; logged, never raised to
    the run).

    Attributes
    ----------
    run_id : str
    status : str
        One of the above.
    reason : str
        ``"N proposals"``, the policy's reason for ``skipped``, or the error / the
        reviewer's reason.
    decisions : tuple of Decision
        One per proposal (and per refused tool call), in the reviewer's order; empty
        unless ``reviewed`` or ``incomplete``.
    cost : LearningCost
        This review's learning cost (zero when skipped).
    """

    run_id: str
    status: str
    reason: str = ""
    decisions: tuple[Decision, ...] = ()
    cost: LearningCost = LearningCost()


@quick_init
@dataclass(frozen=True)
class EpisodeContext:
    """What an episode starts with: matched skills and the memory snapshot.

    Attributes
    ----------
    run_id, task : str
    skills : tuple of Match
        Skills to inject (at most ``match_limit``).
    memory : MemorySnapshot
    skill_snapshot : SkillSnapshot
        The library as the run started.
    """

    run_id: str
    task: str
    skills: tuple[Match, ...]
    memory: MemorySnapshot
    skill_snapshot: SkillSnapshot

    @property
    def active_lessons(self) -> int:
        """Lessons in effect: injected skills plus memory facts."""
        return len(self.skills) + len(self.memory)


@dataclass
class EpisodeRecord:
    """One episode in the learning ledger (:attr:`LearningLoop.records`).

    Attributes
    ----------
    run_id : str
    success : bool or None
        The run's outcome as the digest gave it.
    tokens, steps : int
        The run's own cost, as the digest gave it (never changed by its review).
    active_lessons : int
        Skills injected plus memory facts the run saw.
    learning_tokens : int
        The review's tokens, filled in when the review ends (also for a background
        review; 0 until then and when skipped).
    review : ReviewResult or None
        None until the review ends (background) or when none was started.
    retired : tuple of str
        Skills the episode's outcome reports retired on contradiction.
    retired_facts : tuple of str
        Memory facts (their texts) the episode's outcome retired on contradiction.
    """

    run_id: str
    success: bool | None
    tokens: int
    steps: int
    active_lessons: int
    learning_tokens: int = 0
    review: ReviewResult | None = None
    retired: tuple[str, ...] = ()
    retired_facts: tuple[str, ...] = ()


def _fact_outcomes(digest: Digest, memory: MemorySnapshot) -> dict[str, bool]:
    """Per fact retrieved for the run (``memory``, the context's facts) that a tool call of
    ``digest`` followed (named by its text in :attr:`ToolCall.skills`): False when such a
    call returned an error (the run contradicted it), else the run's outcome, as an
    injected skill's (:meth:`Digest.skill_outcomes`: the verified outcome, or the
    self-assessment when unverified; nothing when both are unknown). A name that is no fact
    retrieved for this run gets nothing."""
    if not len(memory):
        return {}
    retrieved = set(memory.texts())
    erred: dict[str, bool] = {}
    for tc in digest.tool_calls:
        for name in tc.skills:
            if name in retrieved:
                erred[name] = erred.get(name, False) or tc.error
    outcome = digest.success if digest.success is not None else digest.self_assessment
    return {name: (False if bad else outcome) for name, bad in erred.items()
            if bad or outcome is not None}


class LearningLoop:
    """Skills and memories around episodes: match before, review after.

    Parameters
    ----------
    skills : SkillLibrary
        Matched before each run; written by committed skill and workflow proposals. Build
        it with :meth:`LoopConfig.skill_library` so its cap, dating and retirement follow
        the config's switches.
    memory : MemoryStore
        Read (as a snapshot) before each run; written by committed facts
        (:meth:`LoopConfig.memory_store`).
    reviewer : Reviewer
        Any object with ``review(digest, context)``.
    config : LoopConfig, optional
        The safeguards (default: all on).

    Attributes
    ----------
    records : list of EpisodeRecord
        One per :meth:`finish`, in order: the runs' own cost and the learning cost apart.
    policy : ReviewPolicy
        The outcome gate and review mode of ``config``.

    Raises
    ------
    ConfigError
        ``reviewer`` has no ``review`` method.

    Examples
    --------
    ``examples/learning_loop.py`` is a whole loop around a stand-in agent; in short:

    >>> cfg = LoopConfig()
    >>> loop = LearningLoop(cfg.skill_library(), cfg.memory_store(), RuleBasedReviewer(), cfg)
    >>> ctx = loop.begin("run-1", "deploy the web app")     # inject ctx.skills, ctx.memory
    >>> digest = Digest.from_run("run-1", "deploy the web app", success=True, verified=True,
    ...                          tool_calls=[{"name": "make", "args": {"target": "deploy"},
    ...                                       "trusted": True}])
    >>> [d.action for d in loop.finish(ctx, digest).review.decisions]
    ['committed']
    """

    def __init__(self, skills: SkillLibrary, memory: MemoryStore, reviewer, config=None):
        if not hasattr(reviewer, "review"):
            raise ConfigError("reviewer", reviewer, "must have a review(digest, context) method")
        self.skills = skills
        self.memory = memory
        self.reviewer = reviewer
        self.config = config or LoopConfig()
        self.policy = self.config.policy()
        self._ungated = replace(self.policy, outcome_gate="none")
        self.records: list[EpisodeRecord] = []
        #: Per safeguard (a name of :attr:`LoopConfig.SWITCHES`), how often it changed a
        #: decision: a verdict other than the one the pipeline would have reached, in the
        #: same state, with that switch off (see :meth:`safeguard_counts`).
        self.acted: dict[str, int] = dict.fromkeys(LoopConfig.SWITCHES, 0)
        self._episodes = 0
        self._local = threading.local()
        self._executor: ThreadPoolExecutor | None = None
        self._futures: list[Future] = []

    # ------------------------------------------------------------------ episode
    def safeguard_counts(self) -> dict[str, int]:
        """How often each safeguard changed a decision so far, by switch name.

        A count is taken where the switch's verdict differs from the one the pipeline
        would reach in the same state with the switch off: ``outcome_gate`` reviews the
        gate blocked; ``redaction`` texts redaction changed in reviewed digests;
        ``secret_scan`` proposals refused for a secret-looking value; ``novelty_check``
        proposals refused as not novel, and grades whose verdict the novelty term decided;
        ``grading`` proposals rejected by their grade; ``cap_eviction`` entries evicted at
        a cap; ``dating`` matches whose result dating changed; ``retire_on_contradiction``
        skills and memory facts retired; ``approval_for_untrusted`` proposals staged instead of written;
        ``consolidation_every`` facts merged, superseded, dropped or evicted by a
        consolidation (an eviction at consolidation counts under both switches). A count
        of 0 over a whole run means the switch never acted: the same run with it off makes
        the same decisions (and, with common random numbers, gives the same episodes).

        Returns
        -------
        dict of str to int
            A copy; keys are :attr:`LoopConfig.SWITCHES`.
        """
        return dict(self.acted)

    def begin(self, run_id: str, task: str) -> EpisodeContext:
        """Start an episode: snapshot the stores and match skills for ``task``.

        Parameters
        ----------
        run_id : str
            The run's id (the same as its digest's).
        task : str
            The task statement, matched against the skills' triggers, then their
            descriptions (:meth:`SkillLibrary.match`), and, with ``memory_k``, against the
            facts (BM25).

        Returns
        -------
        EpisodeContext
            ``skills``: at most ``match_limit`` matches, best first; ``memory``: all facts,
            or the ``memory_k`` most relevant; both frozen for the run.

        Raises
        ------
        ConfigError
            ``task`` is not a string.
        """
        snap = self.skills.snapshot()
        limit = self.config.match_limit
        matches = snap.match(task, limit)
        today = snap.today() if snap.max_age_days is not None else None
        if today is not None and any(snap.is_suspect(s, today) for s in snap.skills.values()):
            undated = snap.match(task, limit, dating=False)
            if [m.name for m in undated] != [m.name for m in matches]:
                self.acted["dating"] += 1
        memory = self.memory.snapshot()
        if self.config.memory_k is not None and len(memory) > self.config.memory_k:
            memory = self._relevant_facts(memory, task, self.config.memory_k)
        return EpisodeContext(run_id, task, tuple(matches), memory, snap)

    def _relevant_facts(self, memory: MemorySnapshot, task: str, k: int) -> MemorySnapshot:
        """The ``k`` facts of ``memory`` most relevant to ``task`` by BM25 (facts with no
        word in common with the task are never chosen), best first; the index is rebuilt
        only when the memory changed."""
        from dyna.loops.bm25 import BM25Index, query_terms
        entries = tuple(memory.entries)
        texts = tuple(e.text for e in entries)
        cached = getattr(self, "_fact_index", None)
        if cached is None or cached[0] != texts:
            index = BM25Index()
            for i, text in enumerate(texts):
                index.add(f"{i:08d}", query_terms(text))
            cached = self._fact_index = (texts, index)
        ranked = cached[1].scores(query_terms(task), k)
        return MemorySnapshot(tuple(entries[int(key)] for _, key in ranked))

    def finish(self, context: EpisodeContext, digest: Digest,
               skill_outcomes: Mapping[str, bool] | None = None) -> EpisodeRecord:
        """Close an episode: report outcomes to the injected skills, consolidate on
        cadence, and review it per the policy.

        Each injected skill gets its own outcome (:meth:`SkillLibrary.record_outcome`, in
        injection order): the one given in ``skill_outcomes``, else the one the digest
        derives (:meth:`Digest.skill_outcomes`): a failure when a tool call that followed
        the skill returned an error (the skill is *contradicted*, even if the agent then
        recovered and the run succeeded), else the run's outcome (verified, or the
        self-assessment when unverified; nothing when unknown). Digests without skill
        attributions on their tool calls, and no ``skill_outcomes``, give every skill the
        run's outcome. A failure can retire the skill (retire on contradiction, when the
        library has ``retire_below``); the record's ``retired`` names those skills.

        Each memory fact retrieved for the run (``context.memory``) that a tool call
        followed gets an outcome (:meth:`MemoryStore.record_outcomes`): a failure when
        such a call returned an error, else the run's outcome (as a skill's); a fact no
        call followed, or one not retrieved for this run, gets none. A failure can retire the fact (with the
        store's ``retire_below``); the record's ``retired_facts`` names those facts.
        Retirements of both kinds count under ``acted["retire_on_contradiction"]``.

        The returned record holds the run's own outcome, tokens and steps as the digest
        gave them; nothing the review does (or fails to do) changes them. With a
        background policy the review runs on a worker thread (see :meth:`wait`).

        Parameters
        ----------
        context : EpisodeContext
            From :meth:`begin`.
        digest : Digest
        skill_outcomes : Mapping of str to bool, optional
            Outcomes that override the derived ones, for injected skills only.

        Raises
        ------
        ConfigError
            ``skill_outcomes`` names a skill that was not injected, or a value that is
            not a bool.
        """
        names = [m.name for m in context.skills]
        outcomes = digest.skill_outcomes(names)
        for name, ok in (skill_outcomes or {}).items():
            if name not in outcomes:
                raise ConfigError("skill_outcomes", name, "is not a skill injected in "
                                  "this episode")
            if not isinstance(ok, (bool, np.bool_)):
                raise ConfigError(f"skill_outcomes.{name}", ok, "must be true or false")
            outcomes[name] = bool(ok)
        retired: list[str] = []
        for name, ok in outcomes.items():
            if ok is not None:
                retired += self.skills.record_outcome([name], ok, digest.run_id)
        retired_facts = self.memory.record_outcomes(_fact_outcomes(digest, context.memory),
                                                    digest.run_id)
        self.acted["retire_on_contradiction"] += len(retired) + len(retired_facts)
        rec = EpisodeRecord(digest.run_id, digest.success, digest.tokens, digest.steps,
                            context.active_lessons, retired=tuple(retired),
                            retired_facts=tuple(retired_facts))
        self.records.append(rec)
        self._episodes += 1
        every = self.config.consolidation_every
        if every and self._episodes % every == 0:
            report = self.memory.consolidate(run_id=digest.run_id)
            # an eviction at consolidation happens only with both switches on: counted
            # under both, so that neither count can be 0 when switching it off matters
            self.acted["consolidation_every"] += report.n_removed
            self.acted["cap_eviction"] += len(report.evicted)
        if getattr(self._local, "reviewing", False):
            rec.review = ReviewResult(digest.run_id, "skipped",
                                      "a review cannot trigger another review")
            return rec
        go, why = self.policy.should_review(digest)
        if not go:
            if self._ungated.should_review(digest)[0]:
                self.acted["outcome_gate"] += 1
            rec.review = ReviewResult(digest.run_id, "skipped", why)
            return rec
        self.acted["redaction"] += digest.redactions
        if self.policy.mode == "background":
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1,
                                                    thread_name_prefix="dyna-review")
            snap = (context.skill_snapshot, context.memory)
            self._futures.append(self._executor.submit(self._review_into, rec, digest, snap))
        else:
            self._review_into(rec, digest, (context.skill_snapshot, context.memory))
        return rec

    def wait(self, timeout: float | None = None) -> None:
        """Wait for background reviews to end (their failures are already logged)."""
        futures, self._futures = self._futures, []
        for f in futures:
            f.result(timeout)

    def close(self) -> None:
        """Wait for background reviews and stop the worker."""
        self.wait()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def learning_cost(self) -> "LearningCost":
        """The cost of learning so far, summed over every review that ended (skipped ones
        cost nothing), kept apart from the runs' own cost
        (``sum(r.tokens for r in loop.records)``).

        Returns
        -------
        LearningCost
            ``reviewer_tokens`` (with its ``prompt_tokens`` / ``completion_tokens`` split
            when the reviewer reported one), ``grading_calls``, ``turns`` and ``seconds``,
            each a sum; a background review still running is not counted yet
            (:meth:`wait` first).
        """
        costs = [r.review.cost for r in self.records if r.review is not None]
        return LearningCost(*(sum(getattr(c, f) for c in costs) for f in (
            "reviewer_tokens", "grading_calls", "prompt_tokens", "completion_tokens",
            "turns")), seconds=float(sum(c.seconds for c in costs)))

    def impact(self, **kwargs) -> "ImpactReport":
        """:func:`impact_report` of this loop's episodes."""
        return impact_report(self.records, **kwargs)

    # ------------------------------------------------------------------ review
    def _review_into(self, rec: EpisodeRecord, digest: Digest, snaps) -> None:
        self._local.reviewing = True
        try:
            result = self.review(digest, snaps)
        except Exception as exc:  # a failing review never fails the run
            log.exception("review of run %s failed", digest.run_id)
            result = ReviewResult(digest.run_id, "failed", f"{type(exc).__name__}: {exc}")
        finally:
            self._local.reviewing = False
        rec.review = result
        rec.learning_tokens = result.cost.tokens

    def review(self, digest: Digest, snaps=None) -> ReviewResult:
        """Run the reviewer on ``digest`` and validate, grade, commit or stage each
        proposal (at most ``max_lessons``). Raises whatever the reviewer raises (the loop
        catches it in :meth:`finish`)."""
        cfg = self.config
        skills_snap, mem_snap = snaps or (self.skills.snapshot(), self.memory.snapshot())
        ctx = ReviewContext(skills_snap, mem_snap, cfg.max_lessons)
        out = self.reviewer.review(digest, ctx)
        if not isinstance(out, ReviewerOutput):
            out = ReviewerOutput(tuple(out or ()), 0)
        decisions = list(out.refused)
        graded = 0
        untrusted_inputs = digest.taint()
        for i, p in enumerate(out.proposals):
            if not isinstance(p, Proposal):
                raise ConfigError("proposal", p, "a reviewer must return Proposal objects")
            if i >= cfg.max_lessons:
                decisions.append(Decision(p, "dropped", f"over max_lessons={cfg.max_lessons}"))
                continue
            d = self._decide(p, digest.run_id, untrusted_inputs)
            graded += d.grade is not None
            decisions.append(d)
        return ReviewResult(digest.run_id, out.status,
                            out.reason or f"{len(out.proposals)} proposals", tuple(decisions),
                            LearningCost(out.tokens, graded, out.prompt_tokens,
                                         out.completion_tokens, out.turns, out.seconds))

    def submit(self, proposal: Proposal, run_id: str = "", *, provenance=(),
               by_person: bool = False) -> Decision:
        """Validate, grade, then commit or stage one proposal, as :meth:`review` does with
        each proposal of a reviewer (same checks, same counts in :meth:`safeguard_counts`).

        For lessons that come from elsewhere than a review: a person's own
        (``dyna skills add``, ``dyna memory add``), or another program's.

        Parameters
        ----------
        proposal : Proposal
        run_id : str
            Recorded as the writer (history, ``source_run``; ``dyna skills undo-run`` finds
            the change by it). A secret in it is refused.
        provenance : iterable of str
            Sources the lesson was drawn from, added to ``proposal.provenance`` and parsed
            (:func:`dyna.loops.provenance.parse_source`): any untrusted or unknown source
            stages the proposal for approval (when ``approval_for_untrusted`` is on).
        by_person : bool
            A person wrote the lesson (trusted provenance only): a fact is written with
            trust ``user``, a skill with trust ``approved``, so no loop replaces them
            without approval; and a person's lesson may replace another person's (no
            owner check). Never set it for a reviewer's output.

        Returns
        -------
        Decision
            ``action`` is ``committed``, ``staged`` (``detail`` starts with the pending id),
            ``invalid`` (``detail``: the validation reasons) or ``rejected`` (the grade's
            reason); ``grade`` is None for ``invalid``.

        Raises
        ------
        ConfigError
            ``proposal`` is not a :class:`Proposal`; a ``run_id`` holding a secret.
        """
        if not isinstance(proposal, Proposal):
            raise ConfigError("proposal", proposal, "must be a Proposal")
        return self._decide(proposal, run_id, tuple(provenance), by_person)

    def _decide(self, p: Proposal, run_id: str, taint: tuple, by_person: bool = False
                ) -> Decision:
        """validate -> grade -> commit or stage, for one proposal (``taint``: the untrusted
        sources of its run, added to its provenance)."""
        cfg = self.config
        prov = tuple(dict.fromkeys(p.provenance + taint))
        if prov != p.provenance and type(p) is not Proposal:
            p = replace(p, provenance=prov)
        elif prov != p.provenance:
            # replace(p, provenance=prov) without the frozen __init__ (a Proposal has no
            # checks of its own: the same object)
            q = object.__new__(Proposal)
            q.__dict__.update(p.__dict__)
            q.__dict__["provenance"] = prov
            p = q
        v = validate(p, self.skills, self.memory, cfg)
        if not v.ok:
            if any(r.startswith("secret-looking") for r in v.reasons):
                self.acted["secret_scan"] += 1
            if any(r.startswith("not novel") for r in v.reasons):
                self.acted["novelty_check"] += 1
            return Decision(p, "invalid", "; ".join(v.reasons))
        g = grade(p, self.skills, self.memory, cfg)
        if cfg.novelty_check and cfg.grading and g.novelty < 1.0:
            score_off = g.score + 0.25 * (1.0 - g.novelty)  # novelty 1 when it is off
            if (score_off >= cfg.grade_threshold) != g.accepted:
                self.acted["novelty_check"] += 1
        if not g.accepted:
            self.acted["grading"] += 1
            return Decision(p, "rejected", g.reason, g)
        return self._commit(p, run_id, g, by_person)

    def pending(self) -> list:
        """Every staged proposal of both stores: skills' (:class:`PendingItem`, ids
        ``p0001``...) then facts' (:class:`~dyna.loops.memory.PendingFact`, ``m0001``...)."""
        return list(self.skills.pending()) + list(self.memory.pending())

    def approve(self, pid: str):
        """Approve a staged proposal of either store (by id: ``p...`` a skill, ``m...`` a
        fact) and count the evictions its write causes at a cap.

        Raises
        ------
        ConfigError
            Unknown id.
        """
        if pid.startswith("m"):
            res = self.memory.approve(pid)
            self.acted["cap_eviction"] += len(res.evicted)
        else:
            res = self.skills.approve(pid)
            self.acted["cap_eviction"] += res.evicted is not None
        return res

    def reject(self, pid: str):
        """Reject a staged proposal of either store (by id, as :meth:`approve`).

        Raises
        ------
        ConfigError
            Unknown id.
        """
        return (self.memory if pid.startswith("m") else self.skills).reject(pid)

    def _owner_conflict(self, p: Proposal) -> str | None:
        """Why a proposal may not be written without a person's approval, whatever its
        provenance: it would replace a skill or a fact a person wrote or approved (a
        skill loaded without a loop ``source_run``, or approved; a fact of trust ``user``
        or ``approved`` stating the same attribute in other words or with another value,
        :meth:`MemoryStore.relations`), or its name is a
        look-alike (:func:`dyna.loops.provenance.skeleton`) of another skill's. None
        otherwise: a trusted loop proposal may replace a loop-written entry (logged and
        undoable), so drift recovery works."""
        if p.kind == "memory":
            for e, rel in self.memory.relations(p.text):
                if e.trust in ("user", "approved") and rel != "unsure" and e.text != p.text:
                    return f"would replace a fact a person wrote or approved: {e.text!r}"
            return None
        for s in self.skills.look_alikes(p.name):
            if s.name != p.name:
                return f"name {p.name!r} looks like the skill {s.name!r}"
            if s.trust == "approved" or not s.source_run:
                return f"would replace the skill {s.name!r}, written or approved by a person"
        return None

    def _commit(self, p: Proposal, run_id: str, g: Grade, by_person: bool = False
                ) -> Decision:
        approval = self.config.approval_for_untrusted
        owner = None if by_person else self._owner_conflict(p)
        if owner is not None:
            if p.kind == "memory":
                item = self.memory.stage(p.text, run_id=run_id, provenance=p.provenance,
                                         reason=owner)
            else:
                item = self.skills.stage(p.to_skill(run_id), run_id, p.provenance, owner)
            return Decision(p, "staged", f"{item.id}: {owner}", g)
        if p.kind == "memory":
            if approval and is_untrusted(p.provenance):
                item = self.memory.stage(p.text, run_id=run_id, provenance=p.provenance)
                self.acted["approval_for_untrusted"] += 1
                return Decision(p, "staged", item.id, g)
            trust = ("untrusted" if is_untrusted(p.provenance)
                     else "user" if by_person else "trusted")
            res = self.memory.add(p.text, run_id=run_id, trust=trust, approval=approval)
            if res.status == "staged":
                return Decision(p, "staged", f"{res.pending.id}: {res.pending.reason}", g)
            self.acted["cap_eviction"] += len(res.evicted)
            return Decision(p, "committed", res.status, g)
        skill = p.to_skill(run_id)
        if by_person:
            skill = replace(skill, trust="approved")   # propose() demotes it if untrusted
        res = self.skills.propose(skill, run_id, p.provenance, require_approval=approval)
        if isinstance(res, PendingItem):
            self.acted["approval_for_untrusted"] += 1
            return Decision(p, "staged", res.id, g)
        assert isinstance(res, AddResult)
        self.acted["cap_eviction"] += res.evicted is not None
        detail = f"evicted {res.evicted.name}" if res.evicted is not None else "written"
        return Decision(p, "committed", detail, g)


# ============================================================================ impact

@dataclass(frozen=True)
class ImpactReport:
    """Before/after comparison of episodes around the first active lesson.

    Attributes
    ----------
    n_before, n_after : int
        Episodes before the first episode with an active lesson, and from it on.
    first_active : int or None
        Index of that episode (None: no lesson was ever active).
    metrics : dict
        For each of ``success_rate``, ``median_tokens``, ``median_steps`` and
        ``median_learning_tokens``: ``{"before", "after", "diff", "before_ci",
        "after_ci", "diff_ci"}``; intervals are None until each cohort has >= 2 episodes.
    level : float
    """

    n_before: int
    n_after: int
    first_active: int | None
    metrics: dict
    level: float

    def __str__(self) -> str:
        def ci(x):
            return "-" if x is None else f"[{x[0]:.3g}, {x[1]:.3g}]"

        def num(x):
            return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.3g}"
        lines = [f"episodes before first lesson: {self.n_before}, after: {self.n_after}",
                 f"{'metric':<24}{'before':>10}{'after':>10}{'diff':>10}  "
                 f"{int(self.level * 100)}% interval of diff"]
        for k, m in self.metrics.items():
            lines.append(f"{k:<24}{num(m['before']):>10}{num(m['after']):>10}"
                         f"{num(m['diff']):>10}  {ci(m['diff_ci'])}")
        return "\n".join(lines)


def _median(x, axis=-1):
    return np.median(x, axis=axis)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def impact_report(records: Sequence[EpisodeRecord], *, level: float = 0.95,
                  n_resamples: int = 2000, seed: int = 0) -> ImpactReport:
    """Compare episodes before the first active lesson with episodes from it on.

    Metrics: success rate, median run tokens, median steps, median learning tokens, each
    with intervals for each cohort and for the difference after - before once each cohort
    has at least two episodes. The success rate, a proportion, gets Wilson score intervals
    (:func:`dyna.competence.wilson_interval`) and Newcombe's hybrid score interval for the
    difference (:func:`dyna.competence.newcombe_diff`): unlike a bootstrap of 0/1 outcomes
    they keep a width when a cohort always (or never) succeeds (0 of 10 before: (0,
    0.278); 3 of 3 after: (0.439, 1)). The medians get percentile bootstrap intervals
    (:func:`scipy.stats.bootstrap`, Efron & Tibshirani 1993, ch. 13; independent resampling
    of the two cohorts for the difference).

    Parameters
    ----------
    records : sequence of EpisodeRecord
        In episode order; episodes with unknown success count as failures in the rate.
    level : float
        Confidence level in (0, 1).
    n_resamples : int
    seed : int
        Seed of the bootstrap generator (same seed, same intervals).

    Returns
    -------
    ImpactReport
    """
    from scipy import stats

    level = float(check_range("level", level, 0.0, 1.0, lo_open=True, hi_open=True))
    n_resamples = check_range("n_resamples", n_resamples, 1, None, integer=True)
    first = next((i for i, r in enumerate(records) if r.active_lessons > 0), None)
    split = len(records) if first is None else first
    before, after = records[:split], records[split:]

    def arrays(rs):
        return {"success_rate": np.array([1.0 if r.success else 0.0 for r in rs]),
                "median_tokens": np.array([r.tokens for r in rs], dtype=float),
                "median_steps": np.array([r.steps for r in rs], dtype=float),
                "median_learning_tokens": np.array([r.learning_tokens for r in rs],
                                                   dtype=float)}

    a, b = arrays(before), arrays(after)
    enough = len(before) >= 2 and len(after) >= 2
    rng = np.random.default_rng(seed)
    metrics = {}
    for k in a:
        stat = _mean if k == "success_rate" else _median
        x, y = a[k], b[k]
        if k == "success_rate":
            from dyna.competence import newcombe_diff, wilson_interval

            vb = float(x.mean()) if len(x) else None
            va = float(y.mean()) if len(y) else None
            m = {"before": vb, "after": va,
                 "diff": None if vb is None or va is None else va - vb,
                 "before_ci": None, "after_ci": None, "diff_ci": None}
            if enough:
                kb, ka = int(x.sum()), int(y.sum())
                m["before_ci"] = tuple(float(v) for v in wilson_interval(kb, len(x), level))
                m["after_ci"] = tuple(float(v) for v in wilson_interval(ka, len(y), level))
                m["diff_ci"] = newcombe_diff(kb, len(x), ka, len(y), level)
            metrics[k] = m
            continue
        vb = float(stat(x)) if len(x) else None
        va = float(stat(y)) if len(y) else None
        m = {"before": vb, "after": va,
             "diff": None if vb is None or va is None else va - vb,
             "before_ci": None, "after_ci": None, "diff_ci": None}
        if enough:
            kw = dict(n_resamples=n_resamples, confidence_level=level, method="percentile",
                      vectorized=True, rng=rng)
            for name, data in (("before_ci", x), ("after_ci", y)):
                ci = stats.bootstrap((data,), stat, **kw).confidence_interval
                m[name] = (float(ci.low), float(ci.high))

            def diff(u, v, axis=-1, _s=stat):
                return _s(v, axis=axis) - _s(u, axis=axis)
            ci = stats.bootstrap((x, y), diff, paired=False, **kw).confidence_interval
            m["diff_ci"] = (float(ci.low), float(ci.high))
        metrics[k] = m
    return ImpactReport(len(before), len(after), first, metrics, level)
