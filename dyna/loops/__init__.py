"""Skill and memory loops: what an agent keeps between runs, and the safeguards.

- :mod:`dyna.loops.skills`: :class:`SkillLibrary` of Agent Skills ``SKILL.md`` files.
- :mod:`dyna.loops.memory`: :class:`MemoryStore` of facts in ``MEMORY.md``.
- :mod:`dyna.loops.review`: the review pipeline (digest, policy, reviewer, validate,
  grade), :class:`LoopConfig` with every safeguard as a switch, :class:`LearningLoop` and
  the impact report.

Every store also runs in memory (``SkillLibrary(None)``, ``MemoryStore(None)``) with the
same code, for simulations with many episodes.
"""

from dyna.loops.frontmatter import FrontmatterError, dump_frontmatter, parse_frontmatter
from dyna.loops.memory import ConsolidationReport, MemoryEntry, MemorySnapshot, MemoryStore
from dyna.loops.review import (Digest, EpisodeContext, EpisodeRecord, Grade, ImpactReport,
                               LearningLoop, LoopConfig, Proposal, ReviewPolicy, ReviewResult,
                               Reviewer, ReviewerOutput, RuleBasedReviewer, ToolCall, grade,
                               impact_report, validate)
from dyna.loops.skills import Match, PendingItem, Skill, SkillLibrary, SkillSnapshot

__all__ = [
    "ConsolidationReport", "Digest", "EpisodeContext", "EpisodeRecord", "FrontmatterError",
    "Grade", "ImpactReport", "LearningLoop", "LoopConfig", "Match", "MemoryEntry",
    "MemorySnapshot", "MemoryStore", "PendingItem", "Proposal", "ReviewPolicy",
    "ReviewResult", "Reviewer", "ReviewerOutput", "RuleBasedReviewer", "Skill",
    "SkillLibrary", "SkillSnapshot", "ToolCall", "dump_frontmatter", "grade",
    "impact_report", "parse_frontmatter", "validate",
]
