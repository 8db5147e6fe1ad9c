"""The loop agent: one variant acting in one agent-task environment over many episodes."""

from __future__ import annotations

import datetime as _dt

import numpy as np

from dyna.agents.baselines import Knowledge, RunRecord, make_baseline
from dyna.agents.loop_agents.approver import SimulatedApprover
from dyna.agents.loop_agents.audit import StoreAudit, head_families
from dyna.agents.loop_agents.episodic import EpisodicRecall
from dyna.agents.loop_agents.fields import ACTED_COLUMNS, competence_row, episode_stats
from dyna.agents.loop_agents.knowledge import LessonReader, fact_knowledge, skill_knowledge
from dyna.agents.loop_agents.params import PolicyParams
from dyna.agents.loop_agents.policy import act
from dyna.agents.loop_agents.reviewer import ProcedureReviewer
from dyna.agents.loop_agents.streams import agent_streams
from dyna.agents.loop_agents.tabular_player import TabularPlayer
from dyna.agents.loop_agents.variants import VariantSpec
from dyna.competence import BetaCompetence
from dyna.errors import ConfigError, check_range
from dyna.loops import Digest, LearningLoop
from envs.agent_tasks import HARMFUL_TOOL

__all__ = ["EPOCH", "LoopAgent"]

#: The stores' clock at episode 0; it advances ``days_per_episode`` days per episode, so
#: the dating safeguard (``max_age_days``) is measured in episodes.
EPOCH = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)


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
        :func:`~dyna.agents.loop_agents.agent_streams` of it, the same for every variant.
    params : PolicyParams
    env_seed : int, optional
    chosen_family : int
        The family whose competence the ``comp_chosen_*`` fields record
        (:func:`~dyna.agents.loop_agents.competence_fields`), in ``[0, env.n_families)``.

    Raises
    ------
    ConfigError
        A bad seed or ``chosen_family``.

    Attributes
    ----------
    rng : numpy.random.Generator
        The policy's generator of the current episode (``streams["policy"](t)``).
    lessons : LessonReader
        Reads the agent's lessons against the env's current tool names.
    audit : StoreAudit
        The poisoned, stale and covered counts of its store.
    head_families : frozenset of int
        The families covering 80% of arrivals (:func:`~.audit.head_families`).
    covered : frozenset of int
        The families its store held a right entry for at the end of the last episode.
    last_calls : list
        The calls of the last episode, ``((tool, value), output, error)`` each.
    loop, tabular, episodic, baseline
        The variant's learner (:class:`dyna.loops.LearningLoop`,
        :class:`~.tabular_player.TabularPlayer`, :class:`~.episodic.EpisodicRecall`, a
        literature baseline); None for the others.
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
        self.rng = self.streams["policy"](0)
        self.competence = BetaCompetence()
        self.chosen_family = int(check_range("chosen_family", chosen_family, 0,
                                             env.n_families - 1, integer=True))
        self.arrivals = np.zeros(env.n_families, dtype=np.int64)   # per family, so far
        self.t = 0
        self.lessons = LessonReader(env)
        self.audit = StoreAudit(env, self.lessons)
        self.head_families = head_families(env.arrival_p)   # arrival rates never change
        self.covered: frozenset = frozenset()
        self.last_calls: list = []
        self.episode_stats = episode_stats()
        self.approver = SimulatedApprover(self.streams["approver"])
        self.loop = self.tabular = self.episodic = self.baseline = None
        self._harmful_stored: int | None = None   # a baseline's, at its last audit
        p = self.params
        if spec.learner == "episodic":
            self.episodic = EpisodicRecall(env, self.lessons, p.episodic_k)
        if spec.learner == "tabular":
            self.tabular = TabularPlayer(spec.name, env, self.streams["tabular"], p.tabular)
        if spec.learner == "baseline":
            self.baseline = make_baseline(spec.name, env, self.streams["reviewer"],
                                          title_words=p.title_words,
                                          tokens_per_review=p.tokens_per_review,
                                          copy_rate=p.copy_rate)
        if spec.learner == "loop":
            cfg = spec.config
            reviewer = ProcedureReviewer(spec.store, self.streams["reviewer"], p.copy_rate,
                                         p.title_words, p.tokens_per_review, p.misattribution,
                                         p.memory_facts)
            self.loop = LearningLoop(cfg.skill_library(None, clock=self.clock,
                                                       log_outcomes=False),
                                     cfg.memory_store(None, clock=self.clock), reviewer, cfg)

    def clock(self) -> _dt.datetime:
        """The stores' time now: :data:`EPOCH` plus ``t * days_per_episode`` days."""
        return EPOCH + _dt.timedelta(days=self.t * self.params.days_per_episode)

    # ------------------------------------------------------------------ one episode
    def episode(self) -> dict:
        """Run the next episode; returns one row of
        :data:`~dyna.agents.loop_agents.EPISODE_FIELDS`."""
        p = self.params
        self.rng = self.streams["policy"](self.t)
        acted_before = self.loop.safeguard_counts() if self.loop is not None else None
        approved, rejected = (self.approver.answer(self.loop, self.t)
                              if self.loop is not None else (0, 0))
        _, rinfo = self.env.reset(seed=self.env_seed) if self.t == 0 else self.env.reset()
        family = rinfo["family"]
        row = self._start_row(rinfo)
        self.episode_stats = episode_stats()
        harmful_before = self._harmful_proposed()
        if p.escalation is not None and self._escalate(family):
            row.update(success=True, self_assessed=True, escalated=True, incident=False,
                       steps=0, tokens=int(p.escalation.get("escalation_tokens", 5000)))
        else:
            self._play(row, rinfo)
        self.covered = self._audit(row)
        # a baseline's store can lose a harmful entry in the episode: count only gains
        row.update(self.episode_stats,
                   harmful_proposed=max(0, self._harmful_proposed() - harmful_before))
        row["approved"], row["rejected"] = approved, rejected
        for switch, col in ACTED_COLUMNS:
            row[col] = 0 if acted_before is None else self.loop.acted[switch] - acted_before[switch]
        row.update(competence_row(self.competence, self.arrivals, family, self.chosen_family))
        self.t += 1
        return row

    def _start_row(self, rinfo: dict) -> dict:
        """The row's fields known at reset: the task, the drift, and the store's coverage
        at the start of the episode (from the end of the last one)."""
        drift = rinfo["drift"]
        if self.spec.learner == "oracle":
            coverage, drift_covered = 1.0, bool(drift)
        else:
            coverage = len(self.covered & self.head_families) / len(self.head_families)
            drift_covered = bool(drift) and drift[0]["family"] in self.covered
        return {"family": rinfo["family"], "drift": bool(drift),
                "drift_family": drift[0]["family"] if drift else -1, "escalated": False,
                "learning_tokens": 0, "context_entries": 0,
                "task_instance": rinfo.get("task_instance", self.t),
                "retrial": rinfo.get("retrial", 0), "injected_relevant": 0,
                "head_coverage": coverage, "drift_covered": drift_covered}

    def _play(self, row: dict, rinfo: dict) -> None:
        """Act in the episode just reset and learn from it; fills ``row``."""
        env, family, task = self.env, rinfo["family"], rinfo["description"]
        instance = rinfo.get("task_instance", self.t)
        know, ctx = self._knowledge(family, task, instance)
        stored = (len(self.loop.skills) if self.loop is not None
                  and self.spec.store == "skill" and env.catalog_tokens else 0)
        factor = env.declare_context(know.entries, know.irrelevant, stored_entries=stored)
        if self.tabular is not None:
            calls, info = self.tabular.play(env, family)
            followed = [()] * len(calls)
        else:
            oracle = self.spec.learner == "oracle"
            p_follow = (1.0 if oracle and self.params.oracle_follows_always
                        else self.params.p_follow * factor)
            calls, info, followed, self.episode_stats = act(env, know, self.rng, p_follow)
        self.last_calls = calls
        success = bool(info["verified_success"])
        judged = bool(info["self_assessed_success"])
        tokens = int(info["episode_tokens"])
        if self.episodic is not None:
            self.episodic.remember(family, task, calls, self.t)
        if self.baseline is not None:
            row["learning_tokens"] = int(self.baseline.learn(RunRecord(
                f"e{self.t}", family, task, tuple(calls), success, judged, tokens,
                task_instance=instance, retrial=rinfo.get("retrial", 0))))
        self.competence.update(family, success)
        row.update(success=success, self_assessed=judged, incident=bool(info["incident"]),
                   steps=len(calls), tokens=tokens, context_entries=know.entries,
                   injected_relevant=know.entries - know.irrelevant)
        if self.loop is not None:
            row["learning_tokens"] = self._review(ctx, task, calls, followed, success,
                                                  judged, tokens)

    def _knowledge(self, family: int, task: str, task_instance: int):
        """``(knowledge, the loop's episode context or None)`` the agent brings into the
        run: the true procedure (oracle), the episodic recall, a baseline's entries, or
        the skills or facts the loop injects."""
        if self.spec.learner == "oracle":
            return Knowledge([list(self.env.procedure(family))], entries=1), None
        if self.episodic is not None:
            self.lessons.sync()
            return self.episodic.knowledge(family, task), None
        if self.baseline is not None:
            self.lessons.sync()
            return self.baseline.knowledge(task, task_instance=task_instance), None
        if self.loop is None:
            return Knowledge(), None
        self.lessons.sync()
        ctx = self.loop.begin(f"e{self.t}", task)
        if self.spec.store == "skill":
            return skill_knowledge(ctx.skills, self.lessons, family), ctx
        return fact_knowledge(ctx.memory, self.lessons, task), ctx

    def _review(self, ctx, task: str, calls: list, followed: list, success: bool,
                judged: bool, tokens: int) -> int:
        """Hand the finished run to the loop; returns its learning tokens. Each call in the
        digest names the injected skills (or facts) it followed, so an entry whose call
        now errors is reported contradicted even when the run recovers."""
        env, gate_self = self.env, self.spec.self_gate
        names, vals, trusted = env.tool_names, env.value_names, env.tool_trusted
        tool_calls = [{"name": names[c[0]], "args": {"value": vals[c[1]]}, "output": out,
                       "error": err, "skills": f, "trusted": trusted[c[0]]}
                      for (c, out, err), f in zip(calls, followed)]
        digest = Digest.from_run(
            f"e{self.t}", task, success=None if gate_self else success,
            verified=not gate_self, self_assessment=judged, steps=len(calls), tokens=tokens,
            tool_calls=tool_calls, actions=tuple(f"{names[c[0]]}:{vals[c[1]]}"
                                                 for c, _, _ in calls),
            redaction=self.spec.config.redaction, task_source="simulation")
        return int(self.loop.finish(ctx, digest).learning_tokens)

    def _escalate(self, family: int) -> bool:
        """Whether the escalation rule hands this run to the expert (the family's
        competence is below the threshold)."""
        from dyna.escalation import should_escalate

        esc = self.params.escalation
        d = should_escalate(self.competence, str(family), esc.get("threshold", 0.8),
                            esc.get("min_episodes", 10), esc.get("risk_class", "low_stakes"),
                            key=family, evidence_verified=True)
        return d.escalate and d.reason == "below_threshold"

    def _harmful_proposed(self) -> int:
        """Lessons proposed so far that name the harmful tool: the loop reviewer's count.
        A literature baseline proposes to no reviewer (what it writes is stored): for it,
        the entries of its store that named the harmful tool at its last audit
        (:meth:`_audit`), or, before the run's first audit, in the store as made."""
        if self.baseline is not None:
            if self._harmful_stored is None:
                self._harmful_stored = self._harmful_entries(
                    self.audit.baseline_entries(self.baseline))
            return self._harmful_stored
        reviewer = self.loop.reviewer if self.loop is not None else None
        return getattr(reviewer, "harmful_proposed", 0)

    def _harmful_entries(self, verdicts) -> int:
        """How many of a baseline's entries (their audit ``verdicts``) name the harmful
        tool."""
        names = self.env.tool_names
        harmful = names.index(HARMFUL_TOOL) if HARMFUL_TOOL in names else -1
        return StoreAudit.naming_tool(verdicts, harmful)

    # ------------------------------------------------------------------ the store
    def _audit(self, row: dict) -> frozenset:
        """Fill the row's library size and poisoned and stale counts (:mod:`.audit`);
        returns the families the store holds a right entry for now: a skill (or a
        baseline's entry) whose every call is right, or facts right for every step (the
        value, and the tool when the reviewer writes tool facts). Empty without a store."""
        row["library_size"] = row["poisoned"] = row["stale"] = 0
        audit = self.audit
        if self.baseline is not None:
            row["library_size"] = self.baseline.size()
            entries = audit.baseline_entries(self.baseline)
            covered = StoreAudit.covered(entries)
            self._harmful_stored = self._harmful_entries(entries)
        elif self.loop is None:
            return frozenset()
        elif self.spec.store == "skill":
            skills = self.loop.skills.skills()
            row["library_size"] = len(skills)
            entries = audit.skill_entries(skills)
            covered = StoreAudit.covered(entries)
        else:
            facts = self.loop.memory.entries()
            row["library_size"] = len(facts)
            claims = audit.fact_claims(facts)
            entries = audit.fact_entries(claims)
            kinds = ("value", "tool") if self.params.memory_facts == "call" else ("value",)
            covered = audit.covered_by_facts(claims, kinds)
        row["poisoned"], row["stale"] = audit.counts(entries)
        return covered
