"""The skill library: procedures an agent keeps between runs, as Agent Skills SKILL.md files.

A library folder holds one ``<name>/SKILL.md`` folder per active skill, readable by any
tool that reads Agent Skills, and dyna's own files under ``.dyna/`` (history, pending
proposals, bookkeeping, the write lock; :mod:`~dyna.loops.skills.file_backend` shows the
layout). The same :class:`SkillLibrary` runs in memory (``SkillLibrary(None)``) with no
files, for simulations with many episodes.

The modules, one concept each:

- :mod:`~dyna.loops.skills.fields`: the rules of a skill's fields (names, lists, dates,
  trust);
- :mod:`~dyna.loops.skills.record`: :class:`Skill`, validated when it is built;
- :mod:`~dyna.loops.skills.skill_md`: the SKILL.md format (frontmatter, lenient reading);
- :mod:`~dyna.loops.skills.matching`: trigger and description matching, snapshots;
- :mod:`~dyna.loops.skills.catalog`: the catalog an agent gets in context (Markdown, the
  Agent Skills ``<available_skills>`` XML, JSON);
- :mod:`~dyna.loops.skills.nested`: SKILL.md files in nested folders, named in a hint;
- :mod:`~dyna.loops.skills.file_backend` and :mod:`~dyna.loops.skills.in_memory`: where the
  skills live;
- :mod:`~dyna.loops.skills.redaction`: the safety net every written skill goes through;
- :mod:`~dyna.loops.skills.history`: the change log and undo;
- :mod:`~dyna.loops.skills.approval`: the queue of proposals waiting for a person;
- :mod:`~dyna.loops.skills.library`: :class:`SkillLibrary`, which ties them together;
- :mod:`~dyna.loops.skills.results`: what its methods hand back.
"""

from dyna.loops.skills.fields import (
                                      ACTION_RE,
                                      MAX_DESCRIPTION,
                                      MAX_NAME,
                                      MAX_TRIGGER,
                                      NAME_RE,
                                      UNTRUSTED_SOURCES,
                                      check_skill_name,
                                      is_untrusted,
)
from dyna.loops.skills.file_backend import FileSkillBackend
from dyna.loops.skills.in_memory import MemorySkillBackend
from dyna.loops.skills.library import SkillLibrary
from dyna.loops.skills.matching import Match, MatchIndex, SkillSnapshot
from dyna.loops.skills.record import Skill
from dyna.loops.skills.results import AddResult, HistoryEntry, PendingItem
from dyna.loops.skills.skill_md import LoadWarning

__all__ = [
    "ACTION_RE", "MAX_DESCRIPTION", "MAX_NAME", "MAX_TRIGGER", "NAME_RE", "UNTRUSTED_SOURCES",
    "AddResult", "FileSkillBackend", "HistoryEntry", "LoadWarning", "Match", "MatchIndex",
    "MemorySkillBackend", "PendingItem", "Skill", "SkillLibrary", "SkillSnapshot",
    "check_skill_name", "is_untrusted",
]
