"""The I/O boundary (dyna.fileio): what is at a path, special files, never-overwriting
placement, hidden characters; the logs, locks and atomic writes have their own tests
(test_skills_io.py, test_skills_lock.py, test_store_durability.py)."""

import os

import pytest

from dyna.fileio import (
    SymlinkError,
    file_kind,
    file_mark,
    first_hidden,
    open_regular,
    open_write_nofollow,
    place_new,
    read_bytes_within,
    terminal_safe,
    visible,
)


def test_file_kind_names_what_is_there_without_following_a_link(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    os.symlink(tmp_path / "f", tmp_path / "link")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    os.mkfifo(tmp_path / "fifo")
    kinds = {n: file_kind(tmp_path / n) for n in ("f", "d", "link", "dangling", "fifo", "no")}
    assert kinds == {"f": "regular", "d": "folder", "link": "link", "dangling": "link",
                     "fifo": "special", "no": "missing"}
    assert file_kind(tmp_path / "f" / "below") == "missing"      # a file used as a folder
    assert file_kind("nul\0byte") == "missing"
    assert file_kind("/dev/null") == "special"


def test_file_mark_changes_with_a_write_and_is_none_when_missing(tmp_path):
    p = tmp_path / "log"
    assert file_mark(p) is None
    p.write_bytes(b"a\n")
    first = file_mark(p)
    with open(p, "ab") as fh:
        fh.write(b"b\n")
    assert file_mark(p) != first and file_mark(p)[1] == 4


def test_open_regular_refuses_a_fifo_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        open_regular(tmp_path / "fifo")
    (tmp_path / "f").write_bytes(b"data")
    with open_regular(tmp_path / "f") as fh:
        assert fh.read() == b"data"


def test_read_bytes_within_follows_links_only_inside_the_folder(tmp_path):
    lib, outside = tmp_path / "lib", tmp_path / "secret"
    lib.mkdir()
    outside.write_bytes(b"s")
    (lib / "a").write_bytes(b"a")
    os.symlink(lib / "a", lib / "inner")
    os.symlink(outside, lib / "out")
    real = lib.resolve()
    assert read_bytes_within(real, lib / "inner") == b"a"
    with pytest.raises(SymlinkError, match="links outside the library folder"):
        read_bytes_within(real, lib / "out")


def test_resolve_in_folder_gives_an_entry_of_the_folder_itself(tmp_path):
    from dyna.errors import ConfigError
    from dyna.fileio import resolve_in_folder

    root = tmp_path / "exports"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "x").write_bytes(b"x")
    os.symlink(tmp_path / "outside", root / "out")
    os.symlink(root / "sub" / "x", root / "deeper")
    os.symlink(root, root / "itself")
    real = root.resolve()
    assert resolve_in_folder(real, "a.jsonl") == real / "a.jsonl"
    for name in ("out", "deeper", "itself", "../escape", str(tmp_path / "abs"), "sub/x"):
        with pytest.raises(ConfigError) as exc:
            resolve_in_folder(real, name, "the export directory")
        assert type(exc.value) is ConfigError
        assert str(exc.value) == f"path={name!r}: resolves outside the export directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports"]


def test_open_write_nofollow_writes_a_file_but_never_through_a_link(tmp_path):
    log = tmp_path / "log"
    fd = open_write_nofollow(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, b"a\n")
    os.close(fd)
    assert log.read_bytes() == b"a\n" and (os.stat(log).st_mode & 0o777) == 0o644 & ~_umask()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(SymlinkError) as ei:
        open_write_nofollow(tmp_path / "link", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    assert ei.value.field == "path" and ei.value.value == str(tmp_path / "link")
    assert victim.read_text() == "keep me\n"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_place_new_never_overwrites(tmp_path):
    tmp, target = tmp_path / "tmp", tmp_path / "target"
    tmp.write_bytes(b"new")
    place_new(tmp, target)
    assert target.read_bytes() == b"new"
    target.write_bytes(b"old")
    with pytest.raises(FileExistsError):
        place_new(tmp, target)
    assert target.read_bytes() == b"old"


def test_hidden_characters_are_found_and_shown_as_escapes():
    assert first_hidden("plain text") is None
    assert first_hidden("a\u202eb") == "\u202e"
    assert first_hidden("two\nlines") == "\n" and first_hidden("two\nlines", "\n") is None
    assert first_hidden("zero\u200bwidth") == "\u200b"
    assert visible("a\x1b[31mb\u202ec\n\t") == "a\\x1b[31mb\\u202ec\n\t"
    assert visible("\x85") == "\\u0085" and terminal_safe("\x85") == "\\x85"
    assert terminal_safe("\u061c\u200b") == "\\u061c\u200b"   # a zero-width space prints


def test_an_atomic_write_fsyncs_the_folder_after_the_rename(tmp_path, monkeypatch):
    from dyna.fileio import atomic

    real, synced = atomic.fsync_dir, []
    monkeypatch.setattr(atomic, "fsync_dir", synced.append)
    atomic.atomic_write(tmp_path / "a", "x")
    atomic.atomic_write(tmp_path / "b", "x", durable=False)
    assert synced == [tmp_path] and (tmp_path / "b").read_text() == "x"
    real(tmp_path)                                              # a real folder: no error
    real(tmp_path / "missing")                                  # best effort: nothing raised


def test_an_atomic_write_keeps_the_permissions_of_the_file_it_replaces(tmp_path):
    from dyna.fileio import atomic

    shared = tmp_path / "report.md"
    shared.write_text("old")
    shared.chmod(0o644)
    atomic.atomic_write(shared, "new")
    assert shared.read_text() == "new" and shared.stat().st_mode & 0o777 == 0o644
    private = tmp_path / "store.json"
    private.write_text("old")
    private.chmod(0o600)
    atomic.atomic_write(private, "new")
    assert private.stat().st_mode & 0o777 == 0o600
    # a new file is mkstemp's 0600
    atomic.atomic_write(tmp_path / "new.json", "x")
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o600
