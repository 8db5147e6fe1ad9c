"""A skill change on a full disk leaves both the SKILL.md and the state file as they were.

The new text and the new state file are written to temporary files first and renamed only
when both were written whole: a disk that has room for the text but not for the state file
changes nothing, and the error raised is the disk's (ENOSPC), not one of a rollback.
"""

import os
from dataclasses import replace

import pytest
import small_tmpfs

from dyna.fileio import FileWriteError
from dyna.loops.skills import Skill, SkillLibrary
from dyna.loops.skills.file_backend import FileSkillBackend


def _leave_free(root, free: int) -> None:
    """Fill the file system at ``root``, then give back ``free`` bytes."""
    filler = root / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while fh.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    os.truncate(filler, filler.stat().st_size - free)


def test_a_full_disk_between_the_text_and_the_state_leaves_both_old(tmp_path):
    with small_tmpfs.mounted(tmp_path / "disk", "1m") as root:
        lib = SkillLibrary(root / "skills")
        for i in range(60):
            lib.add(Skill(f"skill-{i:02d}", f"Skill number {i} of the test", triggers="t"),
                    "r1")
        backend = FileSkillBackend(root / "skills")
        state = backend._state_path()
        md = root / "skills" / "skill-07" / "SKILL.md"
        before = (md.read_bytes(), state.read_bytes(), md.stat().st_ino)
        assert len(before[0]) < 4096 < 3 * 4096 < len(before[1])
        skill = replace(lib.get("skill-07"), body="A new body for the skill.\n")
        _leave_free(root, 2 * 4096)
        with pytest.raises(FileWriteError) as e:
            backend.write(skill)
        assert "ENOSPC" in str(e.value)
        # the same SKILL.md file: never replaced by the new text and put back
        assert (md.read_bytes(), state.read_bytes(), md.stat().st_ino) == before
        assert sorted(os.listdir(md.parent)) == ["SKILL.md"]
        assert sorted(p for p in os.listdir(state.parent) if p.startswith("state")) == \
            ["state.json"]
        (root / "filler").unlink()
        backend.write(skill)
        assert md.read_text().endswith("A new body for the skill.\n")
