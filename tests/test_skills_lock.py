"""The inter-process lock of skill libraries and memory files (dyna.fileio.library_lock)."""

import os

import pytest

from dyna.errors import ConfigError
from dyna.fileio import LibraryLockTimeout, library_lock, lock_path


def test_lock_paths(tmp_path):
    assert lock_path(tmp_path) == tmp_path / ".dyna" / "lock"
    assert lock_path(tmp_path / "lib") == tmp_path / "lib" / ".dyna" / "lock"
    assert lock_path(tmp_path / "MEMORY.md") == tmp_path / "MEMORY.md.lock"


def test_two_lock_objects_exclude_each_other_and_one_is_reentrant(tmp_path):
    a = library_lock(tmp_path)
    b = library_lock(tmp_path, timeout=0.1)
    with a:
        with a:                                   # re-entrant on one object
            assert a.is_locked
        with pytest.raises(LibraryLockTimeout) as exc:
            with b:
                pass
        assert exc.value.path == str(tmp_path / ".dyna" / "lock")
        assert exc.value.timeout == 0.1
        assert isinstance(exc.value, TimeoutError)
    with b:                                       # free again once a is released
        assert b.is_locked


def test_memory_file_lock(tmp_path):
    f = tmp_path / "MEMORY.md"
    f.write_text("# Memory\n")
    with library_lock(f):
        assert (tmp_path / "MEMORY.md.lock").exists()
    assert f.read_text() == "# Memory\n"


def test_symlinked_lock_folder_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    lib = tmp_path / "lib"
    lib.mkdir()
    os.symlink(outside, lib / ".dyna")
    with pytest.raises(ConfigError) as exc:
        library_lock(lib)
    assert exc.value.value == str(lib / ".dyna")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "5"])
def test_bad_timeout(tmp_path, bad):
    with pytest.raises(ConfigError) as exc:
        library_lock(tmp_path, timeout=bad)
    assert exc.value.field == "timeout"
