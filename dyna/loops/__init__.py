"""Skill and memory loops: what an agent keeps between runs, and the safeguards.

- :mod:`dyna.loops.skills`: :class:`SkillLibrary` of Agent Skills ``SKILL.md`` files.
- :mod:`dyna.loops.memory`: :class:`MemoryStore` of facts in ``MEMORY.md``.
- :mod:`dyna.loops.llm`: an OpenAI-compatible chat-completions client and
  :class:`LLMReviewer` (optional dependency httpx: ``pip install -e ".[llm]"``).
- :mod:`dyna.loops.review`: the review pipeline (digest, policy, reviewer, validate,
  grade), :class:`LoopConfig` with every safeguard as a switch, :class:`LearningLoop` and
  the impact report.

Every store also runs in memory (``SkillLibrary(None)``, ``MemoryStore(None)``) with the
same code, for simulations with many episodes.
"""

from dyna._lazy import lazy_getattr

# Names load their module on first use (PEP 562): `dyna --help` and the CLI's start pay for
# none of the loops (scipy, the redactor) until a command needs them.
_LAZY = {
    "FrontmatterError": "frontmatter", "dump_frontmatter": "frontmatter",
    "parse_frontmatter": "frontmatter",
    "ConsolidationReport": "memory", "MemoryEntry": "memory", "MemorySnapshot": "memory",
    "MemoryStore": "memory",
    "Decision": "review", "Digest": "review", "EpisodeContext": "review",
    "EpisodeRecord": "review", "LearningCost": "review", "ReviewContext": "review",
    "Grade": "review", "ImpactReport": "review", "LearningLoop": "review",
    "LoopConfig": "review", "Proposal": "review", "ReviewPolicy": "review",
    "ReviewResult": "review", "Reviewer": "review", "ReviewerOutput": "review",
    "RuleBasedReviewer": "review", "ToolCall": "review", "grade": "review",
    "impact_report": "review", "validate": "review",
    "ChatClient": "llm", "Endpoint": "llm", "LLMReviewer": "llm",
    "Match": "skills", "PendingItem": "skills", "Skill": "skills", "SkillLibrary": "skills",
    "SkillSnapshot": "skills",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
