"""The learning loop: skills and memories around episodes, matched before a run and
reviewed after it, with the learning cost kept apart from the run's own cost."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from dyna.errors import ConfigError
from dyna.loops._text import fact_key
from dyna.loops.bm25 import BM25Index, query_terms
from dyna.loops.memory import MemorySnapshot, MemoryStore
from dyna.loops.review.config import LoopConfig
from dyna.loops.review.digest import Digest
from dyna.loops.review.impact import ImpactReport, impact_report
from dyna.loops.review.proposal import Proposal
from dyna.loops.review.results import (
    Decision,
    EpisodeContext,
    EpisodeRecord,
    LearningCost,
    ReviewResult,
)
from dyna.loops.review.reviewer import ReviewContext, ReviewerOutput
from dyna.loops.review.safeguards import (Grade, accepted_without_novelty, grade, look_alike,
                                          validate)
from dyna.loops.skills import AddResult, PendingItem, SkillLibrary, is_untrusted

__all__ = ["LearningLoop"]

log = logging.getLogger("dyna.loops")


def _fact_outcomes(digest: Digest, memory: MemorySnapshot) -> dict[str, bool]:
    """Per fact retrieved for the run (``memory``, the context's facts) that a tool call of
    ``digest`` followed (named by its text in :attr:`ToolCall.skills`, compared by
    :func:`dyna.loops._text.fact_key`): False when such a
    call returned an error (the run contradicted it), else the run's outcome, as an
    injected skill's (:meth:`Digest.skill_outcomes`: the verified outcome, or the
    self-assessment when unverified; nothing when both are unknown). A name that is no fact
    retrieved for this run gets nothing."""
    if not len(memory):
        return {}
    retrieved = {fact_key(t): t for t in memory.texts()}
    erred: dict[str, bool] = {}
    for tc in digest.tool_calls:
        for name in tc.skills:
            if (text := retrieved.get(fact_key(name))) is not None:
                erred[text] = erred.get(text, False) or tc.error
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
    ...                                       "trusted": True}], task_source="operator")
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
        skills and memory facts retired; ``approval_for_untrusted`` proposals staged
        instead of written; ``consolidation_every`` facts merged, superseded, dropped or
        evicted by a consolidation (an eviction at consolidation counts under both
        switches). A count of 0 over a whole run means the switch never acted: the same
        run with it off makes the same decisions (and, with common random numbers, gives
        the same episodes).

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
        call followed, or one not retrieved for this run, gets none. A failure can retire
        the fact (with the store's ``retire_below``); the record's ``retired_facts`` names
        those facts. Retirements of both kinds count under
        ``acted["retire_on_contradiction"]``.

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
        if prov != p.provenance:
            p = replace(p, provenance=prov)
        v = validate(p, self.skills, self.memory, cfg)
        if not v.ok:
            if any(r.startswith("secret-looking") for r in v.reasons):
                self.acted["secret_scan"] += 1
            if any(r.startswith("not novel") for r in v.reasons):
                self.acted["novelty_check"] += 1
            return Decision(p, "invalid", "; ".join(v.reasons))
        g = grade(p, self.skills, self.memory, cfg)
        if cfg.novelty_check and cfg.grading and g.novelty < 1.0:
            if accepted_without_novelty(g, cfg.grade_threshold) != g.accepted:
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
        if by_person and p.kind != "memory":
            other = look_alike(p.name, self.skills)
            if other is not None:   # a loop's look-alike is staged (_owner_conflict)
                return Decision(p, "invalid", f"name {p.name!r} looks like the skill {other!r}")
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
