"""Loop agents for the agent tasks (:class:`envs.agent_tasks.AgentTaskEnv`): one policy
model for every variant, so that only the learning differs.

The policy model (one episode = one run on one task; :mod:`.policy`)
    At each procedure position the agent decides once whether it follows what it knows
    (probability ``p_follow`` times the env's ``follow_factor``, which falls with the
    irrelevant entries in its context); it tries the calls its knowledge gives, then
    explores calls it has not tried. It explores among the tools that exist now
    (:meth:`~envs.agent_tasks.AgentTaskEnv.callable_tools`: a renamed tool's old name is
    gone) and reads its lessons' tool names against the current tool list
    (:class:`~.knowledge.LessonReader`), so a lesson naming a renamed tool sends it to the
    old name, which errors. Planted instructions: with the env's ``planted_follow_rate``
    None (v0) they are not obeyed by the policy itself and do harm only when a loop writes
    them down and a later run follows the lesson.

Knowledge per variant
    * ``no_learning``: none (a fixed prompt; every run starts from scratch).
    * ``oracle``: the current true procedure (reads the hidden world; upper bound), always
      followed (``oracle_follows_always``; False: followed with ``p_follow`` like every
      other variant, the same-policy oracle); it counts as one context entry.
    * loops: a :class:`dyna.loops.LearningLoop` on the in-memory store (the same code as
      on files: ``SkillLibrary(None)``, ``MemoryStore(None)``) with a
      :class:`ProcedureReviewer` (:mod:`.reviewer`). The ``skill`` store gives procedures
      (tool and value per step) matched on the task text; the ``memory`` store gives facts
      ("<task words> step k value is val_j"), the whole memory in context, or with
      ``memory_k`` the facts the loop retrieves for the task. Each tool call in the digest
      names the injected skills it followed, or the facts (a step's tool fact and value
      fact) whose call it made, so a skill or fact whose call returned an error is reported
      to the store as a failure (contradicted) even when the agent recovered and the run
      succeeded (:meth:`dyna.loops.LearningLoop.finish`). A fact is followed only on a task
      whose words hold its key words, and counts only when the loop retrieved it for the
      task.

      - ``naive_loop``: :meth:`LoopConfig.naive` (writes after every run: no gate, no
        novelty check, no cap, no approval), with the full loop's sizes (lessons,
        matches, caps and ``memory_k``).
      - ``self_reflection``: the reviewer gates on the agent's own opinion (the digest
        carries the self-assessment, not the verified outcome) and its untrusted inputs
        are not held for approval.
      - ``skill_loop`` / ``memory_loop``: every safeguard of :class:`LoopConfig` on.
      - ``skill_loop-no_<switch>`` / ``memory_loop-no_<switch>``: one safeguard off
        (:meth:`LoopConfig.ablate`).
    * literature baselines (:data:`dyna.agents.baselines.BASELINES`): the baseline's own
      store, asked for knowledge before the run and given the finished run after it.
    * ``episodic`` (:mod:`.episodic`): no artifacts. Every tool call of every run is recorded in a
      :class:`dyna.experience.ExperienceStore` (in memory) under the task type
      ``f<family>-s<position>``, with the task text as its state; at each position the
      agent asks :meth:`~dyna.experience.ExperienceStore.get_recommendation` for the call
      that worked best among the ``episodic_k`` past runs most similar to this task (the
      cosine neighbours that :meth:`~dyna.experience.ExperienceStore.query_similar` also
      returns) and follows it like a skill when it has worked at least once. Its context
      is the one recommendation.
    * ``dyna_q`` / ``dyna_q_plus`` (:mod:`.tabular_player`): the RL baseline, no
      artifacts. The tabular agents of :class:`dyna.agents.DynaAgent` (the same compiled
      kernels as the chapter 8 experiments) over the state ``(family, position)`` and the
      actions ``(tool, value)``, learning a transition-table model of tool outcomes and
      planning from it; Dyna-Q+ adds the exploration bonus ``kappa * sqrt(tau)`` that
      makes it revisit calls not tried for long (drift-aware). They act epsilon-greedily
      instead of through the shared policy model (an RL agent's own behaviour policy) and
      carry no context tokens.

Competence and escalation
    Every variant keeps a :class:`dyna.competence.BetaCompetence` per task family, fed
    with the verified outcome of each run it made itself. With an escalation rule
    (:func:`dyna.escalation.should_escalate`) a run whose family is judged below the
    threshold is handed to an expert that succeeds at ``escalation_tokens``; while the
    rule still lacks evidence (``insufficient_episodes``) the agent acts, to gather it.
    Each row records the current family's posterior (``comp_a``, ``comp_b``), the chosen
    family's and the arrival-weighted competence over the families seen so far
    (:func:`competence_fields`).

The store audit (:mod:`.audit`)
    After every episode the agent counts the entries of its store that were wrong when
    written (poisoned) and those right when written and wrong now (stale), and the
    families it covers; a simulated approver (:mod:`.approver`) answers the proposals held
    for approval.

Time
    The stores' clock advances ``days_per_episode`` days per episode from 2025-01-01, so
    the dating safeguard (``max_age_days``) is measured in episodes.

The modules: :mod:`.variants` (the variant names and :func:`make_variant`), :mod:`.params`
(:class:`PolicyParams`), :mod:`.streams` (the random streams), :mod:`.fields` (the
per-episode record), :mod:`.knowledge`, :mod:`.policy`, :mod:`.reviewer`, :mod:`.audit`,
:mod:`.approver`, :mod:`.episodic`, :mod:`.tabular_player`, :mod:`.agent`
(:class:`LoopAgent`) and :mod:`.run` (:func:`run_loop_agent`).
"""

from dyna.agents.loop_agents.agent import EPOCH, LoopAgent
from dyna.agents.loop_agents.approver import APPROVER_DELAY, APPROVER_REJECT_PLANTED
from dyna.agents.loop_agents.fields import EPISODE_FIELDS, competence_fields, competence_row
from dyna.agents.loop_agents.params import TABULAR_DEFAULTS, PolicyParams
from dyna.agents.loop_agents.reviewer import ProcedureReviewer
from dyna.agents.loop_agents.run import run_loop_agent
from dyna.agents.loop_agents.streams import agent_streams
from dyna.agents.loop_agents.variants import (
    BASE_VARIANTS,
    STORES,
    VariantSpec,
    make_variant,
    variant_names,
)

__all__ = ["APPROVER_DELAY", "APPROVER_REJECT_PLANTED", "BASE_VARIANTS", "EPISODE_FIELDS",
           "EPOCH", "LoopAgent", "PolicyParams", "ProcedureReviewer", "STORES",
           "TABULAR_DEFAULTS", "VariantSpec", "agent_streams", "competence_fields",
           "competence_row", "make_variant", "run_loop_agent", "variant_names"]
