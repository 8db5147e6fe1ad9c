"""Skill files a library folder holds but does not read: SKILL.md files in nested folders.

A library reads ``DIR/<name>/SKILL.md``. A repository whose skills sit deeper (public
collections use ``skills/<name>/SKILL.md`` or ``skills/<category>/<name>/SKILL.md``),
opened at its root, would list the few skills at the top, or none, without a word; the
library names the others in one hint (a ``nested-folders``
:class:`~dyna.loops.skills.skill_md.LoadWarning`) with the folders to open instead.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from dyna.loops.skills.skill_md import LoadWarning

__all__ = ["MAX_DEPTH", "MAX_FOLDERS", "nested_folders_warning", "nested_skill_files"]

#: How many folder levels below the library folder are searched (``skills/<category>/<name>``
#: is level 3).
MAX_DEPTH = 4
#: At most this many folders are visited (a repository with a large tree stays quick).
MAX_FOLDERS = 20_000

_SKILL_FILES = ("SKILL.md", "skill.md")


def nested_skill_files(root) -> list[Path]:
    """The skill files (``SKILL.md`` or ``skill.md``) below the folders of ``root`` that
    hold none themselves, relative to ``root``, sorted.

    Searched: at most :data:`MAX_DEPTH` levels below ``root`` and :data:`MAX_FOLDERS`
    folders; hidden folders (``.dyna``, ``.git``) and symbolic links are not entered, and
    a folder with a skill file is not searched further (its ``scripts/`` or ``reference/``
    are resources). The folders directly below ``root`` that hold a skill file are the
    library's own skills: never listed.
    """
    root = Path(root)
    found: list[Path] = []
    for visited, (top, dirs, files) in enumerate(os.walk(root, followlinks=False), 1):
        rel = Path(top).relative_to(root)
        depth = len(rel.parts)
        skill_file = next((n for n in _SKILL_FILES if n in files), None)
        if depth >= 1 and skill_file is not None:
            if depth >= 2:
                found.append(rel / skill_file)
            dirs[:] = []                # a skill folder: its subfolders are resources
        elif depth >= MAX_DEPTH or visited >= MAX_FOLDERS:
            dirs[:] = []
        else:
            dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                             and not os.path.islink(os.path.join(top, d)))
    return sorted(found)


def nested_folders_warning(root) -> LoadWarning | None:
    """A ``nested-folders`` :class:`LoadWarning` (its path the library folder ``root``)
    counting the skill files :func:`nested_skill_files` finds, with the folders that hold
    their skill folders (most first, at most three named), or None when there are none.

    For example: ``17 SKILL.md files found in nested folders, not loaded (a library reads
    DIR/<name>/SKILL.md): open the folder that holds them instead: skills/document (12),
    skills/design (5)``.
    """
    files = nested_skill_files(root)
    if not files:
        return None
    by_parent = Counter(f.parent.parent.as_posix() for f in files)
    ranked = sorted(by_parent.items(), key=lambda kv: (-kv[1], kv[0]))
    named = ", ".join(f"{folder} ({n})" for folder, n in ranked[:3])
    more = f", and {len(ranked) - 3} more folders" if len(ranked) > 3 else ""
    n = len(files)
    return LoadWarning(str(root), "nested-folders",
                       f"{n} SKILL.md file{'s' if n > 1 else ''} found in nested folders, "
                       f"not loaded (a library reads DIR/<name>/SKILL.md): open the folder "
                       f"that holds them instead: {named}{more}")
