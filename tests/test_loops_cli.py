"""`dyna skills ...` and `dyna memory ...` on real folders."""

import os

import pytest

from dyna.cli import main
from dyna.loops.memory import MemoryStore
from dyna.loops.skills import Skill, SkillLibrary


@pytest.fixture
def lib_dir(tmp_path):
    d = tmp_path / "skills"
    lib = SkillLibrary(d)
    lib.add(Skill("git-push", "Push safely", triggers="git"), "r1")
    lib.add(Skill("code-review", "Review code", triggers="code review"), "r1")
    lib.stage(Skill("web-tip", "Tip from a page", triggers="tip"), "r2", ["web"])
    return d


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_skills_list_and_failures(capsys, lib_dir):
    rc, out, _ = run(capsys, "skills", "list", str(lib_dir))
    lines = out.splitlines()
    assert rc == 0 and lines[0].split() == ["name", "status", "kind", "triggers", "ok", "fail",
                                            "mean", "lower", "verified", "trust"]
    assert lines[2].split()[:4] == ["code-review", "active", "skill", "code"]
    assert lines[3].split()[:4] == ["git-push", "active", "skill", "git"]
    assert "2 active, 0 retired, 1 pending, 0 failed to load (2 skill files)" in out
    (lib_dir / "broken").mkdir()
    (lib_dir / "broken" / "SKILL.md").write_text(
        "---\nname: broken\ndescription: Debug mazes: walls\n---\n")
    rc, out, _ = run(capsys, "skills", "list", str(lib_dir))
    assert rc == 1 and "1 failed to load (3 skill files)" in out
    assert f"error: {lib_dir / 'broken' / 'SKILL.md'}:3: field 'description'" in out


def test_skills_match_show_pending_approve_undo(capsys, lib_dir):
    rc, out, _ = run(capsys, "skills", "match", str(lib_dir), "Do a code review, then git push")
    rows = [line.split()[:3] for line in out.splitlines()[2:]]
    assert rc == 0 and rows == [["1", "code-review", "2"], ["2", "git-push", "1"]]
    rc, out, _ = run(capsys, "skills", "match", str(lib_dir), "nothing here")
    assert out.strip() == "no skill matches"
    rc, out, _ = run(capsys, "skills", "show", str(lib_dir), "git-push")
    assert out.startswith("---\nname: git-push\n") and "Beta(a=1, b=1), mean 0.500" in out
    rc, out, _ = run(capsys, "skills", "pending", str(lib_dir))
    head = out.splitlines()[0]
    assert head.startswith("== p0001: web-tip  (run r2, staged ") and "provenance web)" in head
    assert "   a new skill:" in out and "   | description: Tip from a page" in out
    assert run(capsys, "skills", "approve", str(lib_dir), "p0001")[1] == \
        "approved p0001: wrote web-tip\n"
    assert "web-tip" in SkillLibrary(lib_dir)
    rc, out, _ = run(capsys, "skills", "history", str(lib_dir), "--run", "r2")
    assert [line.split()[2] for line in out.splitlines()[2:]] == ["stage", "approve"]
    assert run(capsys, "skills", "undo-run", str(lib_dir), "r2")[1] == \
        "reverted run r2: web-tip\n"
    assert "web-tip" not in SkillLibrary(lib_dir)


def test_skills_retire_restore_reject_and_errors(capsys, lib_dir):
    assert run(capsys, "skills", "retire", str(lib_dir), "git-push")[0] == 0
    rc, out, _ = run(capsys, "skills", "list", str(lib_dir), "--all")
    assert "git-push     retired" in out
    assert run(capsys, "skills", "restore", str(lib_dir), "git-push")[1] == "restored git-push\n"
    assert run(capsys, "skills", "reject", str(lib_dir), "p0001")[1] == "rejected p0001 (web-tip)\n"
    rc, _, err = run(capsys, "skills", "show", str(lib_dir), "nope")
    assert rc == 2 and err == "dyna: error: name='nope': no such skill\n"
    rc, _, err = run(capsys, "skills", "approve", str(lib_dir), "p0009")
    assert rc == 2 and "no pending proposal" in err
    rc, _, err = run(capsys, "skills", "list", str(lib_dir / "missing"))
    assert rc == 2 and "no such folder" in err
    rc, _, err = run(capsys, "skills", "match", str(lib_dir), "x", "--limit", "-1")
    assert rc == 2 and "limit=-1" in err


def test_memory_show_and_consolidate(capsys, tmp_path):
    p = tmp_path / "MEMORY.md"
    m = MemoryStore(p)
    m.add("The API port is 8080", source="r1")
    m.add("Be careful with tools.", source="r1")
    rc, out, _ = run(capsys, "memory", "show", str(p))
    assert rc == 0 and out.splitlines()[2].split()[-5:] == ["The", "API", "port", "is", "8080"]
    assert "2 facts, 0 pending" in out
    rc, out, _ = run(capsys, "memory", "consolidate", str(p))
    assert out == "vague:      'Be careful with tools.'\n\n2 -> 1 facts\n"
    rc, out, _ = run(capsys, "memory", "consolidate", str(p))
    assert out == "nothing to consolidate\n\n1 -> 1 facts\n"
    rc, _, err = run(capsys, "memory", "show", str(tmp_path / "none.md"))
    assert rc == 2


# ---------------------------------------------------------------- skills add / memory add

def tree(root):
    """Every file below ``root`` with its bytes (what a refused command must leave alone)."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def body(tmp_path):
    f = tmp_path / "body.md"
    f.write_text("Run `make rollback-staging`, then open the health page.\n")
    return f


def test_skills_add_writes_a_persons_skill_and_undo_reverts_it(capsys, tmp_path, body):
    d = tmp_path / "skills"                       # missing: created once the skill passes
    rc, out, err = run(capsys, "skills", "add", str(d), "--name", "rollback-staging",
                       "--description", "Roll back the staging web app", "--trigger",
                       "roll back", "--trigger", "rollback", "--body", str(body))
    assert (rc, err) == (0, "")
    assert out == f"added skill rollback-staging (grade 1.00): {d}/rollback-staging/SKILL.md\n"
    s = SkillLibrary(d)["rollback-staging"]
    assert s.triggers == ("roll back", "rollback") and s.trust == "approved"
    assert s.body == "Run `make rollback-staging`, then open the health page."
    assert s.source_run == "cli" and s.provenance == ("person",)
    assert [m.name for m in SkillLibrary(d).match("please roll back staging")] == \
        ["rollback-staging"]
    assert run(capsys, "skills", "undo-run", str(d), "cli")[1] == \
        "reverted run cli: rollback-staging\n"
    assert "rollback-staging" not in SkillLibrary(d)


@pytest.mark.parametrize("source", ["web", "forum"])     # untrusted, and unknown (untrusted)
def test_skills_add_from_an_untrusted_source_is_staged(capsys, lib_dir, body, source):
    rc, out, _ = run(capsys, "skills", "add", str(lib_dir), "--name", "rollback-staging",
                     "--description", "Roll back the staging web app", "--body", str(body),
                     "--source", source)
    assert rc == 0 and out == (f"staged p0002: skill rollback-staging (untrusted source "
                               f"{source}); approve with: dyna skills approve {lib_dir} p0002\n")
    lib = SkillLibrary(lib_dir)
    assert "rollback-staging" not in lib
    item = lib.pending()[-1]
    assert (item.id, item.dest, item.provenance, item.skill.trust) == \
        ("p0002", "rollback-staging", (source,), "untrusted")
    assert run(capsys, "skills", "approve", str(lib_dir), "p0002")[1] == \
        "approved p0002: wrote rollback-staging\n"
    assert SkillLibrary(lib_dir)["rollback-staging"].trust == "approved"


SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.mark.parametrize("argv, err", [
    (["--name", "Bad"], "--name='Bad': must be lowercase letters, digits and single hyphens "
                        "(no path separators)"),
    (["--name", "git-push"], "--name='git-push': an active skill has this name (retire it "
                             "first, or edit its SKILL.md)"),
    (["--body", "none.md"], "--body='{tmp}/none.md': no such file"),
    (["--body", "notutf8.md"], "--body='{tmp}/notutf8.md': is not UTF-8 text (byte 0)"),
    (["--body", "fifo"], "--body='{tmp}/fifo': is not a regular file"),
    (["--body", "skills"], "--body='{tmp}/skills': is a folder, not a file"),
    (["--body", "secret.md"], "--name='rollback': refused (invalid): secret-looking value in "
                              "body"),
    (["--trigger", "x" * 129], "--name='rollback': refused (invalid): triggers: a trigger has "
                               "at most 128 characters"),
    (["--source", SECRET], "--source='[REDACTED]': a label must not hold a secret or personal "
                           "data (detected: github_token); a redacted label would merge buckets"),
])
def test_skills_add_bad_input_is_one_line_and_writes_nothing(capsys, tmp_path, lib_dir, body,
                                                             argv, err):
    (tmp_path / "notutf8.md").write_bytes(b"\xff\xfe")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "secret.md").write_text(f"Push with token {SECRET}.\n")
    opts = {"--name": "rollback", "--description": "Roll back staging", "--body": str(body)}
    for k, v in zip(argv[::2], argv[1::2]):
        opts[k] = str(tmp_path / v) if k == "--body" else v
    before = tree(tmp_path)
    rc, out, got = run(capsys, "skills", "add", str(lib_dir),
                       *[x for kv in opts.items() for x in kv])
    assert (rc, out) == (2, "")
    assert got == f"dyna: error: {err.format(tmp=tmp_path)}\n" and SECRET not in got
    assert tree(tmp_path) == before


def test_skills_add_refused_for_a_new_folder_creates_nothing(capsys, tmp_path, body):
    (tmp_path / "secret.md").write_text(f"token {SECRET}\n")
    before = tree(tmp_path)
    rc, _, err = run(capsys, "skills", "add", str(tmp_path / "new"), "--name", "x",
                     "--description", "Push code", "--body", str(tmp_path / "secret.md"))
    assert rc == 2 and err == "dyna: error: --name='x': refused (invalid): secret-looking " \
                              "value in body\n"
    rc, _, err = run(capsys, "skills", "add", str(tmp_path / "a" / "b"), "--name", "x",
                     "--description", "Push code", "--body", str(body))
    assert rc == 2 and err == (f"dyna: error: DIR='{tmp_path / 'a'}': no such folder (the "
                               "library's parent folder is not created: make it first)\n")
    rc, _, err = run(capsys, "skills", "add", str(body), "--name", "x",
                     "--description", "Push code", "--body", str(body))
    assert rc == 2 and err == f"dyna: error: DIR='{body}': is a file, not a skill library " \
                              "folder\n"
    assert tree(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == \
        ["body.md", "secret.md"]


def test_memory_add_a_persons_fact_supersedes_and_untrusted_is_staged(capsys, tmp_path):
    import re

    p = tmp_path / "MEMORY.md"
    assert run(capsys, "memory", "add", str(p), "The API port is 8080")[1] == \
        "added fact (grade 1.00): The API port is 8080\n"
    assert run(capsys, "memory", "add", str(p), "The API port is 9090")[1] == \
        "superseded fact (grade 0.80): The API port is 9090\n"
    assert re.fullmatch(r"- \[\d{4}-\d\d-\d\d \| cli \| user\] The API port is 9090",
                        p.read_text().splitlines()[-1])
    text = p.read_bytes()
    rc, out, _ = run(capsys, "memory", "add", str(p), "The API host is api.example.com",
                     "--source", "email")
    assert rc == 0 and out == ("staged m0001: fact (untrusted source email); approve with: "
                               f"dyna memory approve {p} m0001\n")
    rc, out, _ = run(capsys, "memory", "add", str(p), "The API port is 7070",
                     "--source", "internal")              # trusted, but a person wrote 9090
    assert out == ("staged m0002: fact (would replace a fact a person wrote or approved: "
                   f"'The API port is 9090'); approve with: dyna memory approve {p} m0002\n")
    assert p.read_bytes() == text                          # staging writes no fact
    pend = MemoryStore(p).pending()
    assert [(f.id, f.provenance, f.entry.trust) for f in pend] == \
        [("m0001", ("email",), "untrusted"), ("m0002", ("internal",), "untrusted")]
    assert run(capsys, "memory", "approve", str(p), "m0001")[1] == \
        "approved m0001: added 'The API host is api.example.com'\n"
    assert [(e.trust, e.text) for e in MemoryStore(p)] == \
        [("user", "The API port is 9090"), ("approved", "The API host is api.example.com")]


@pytest.mark.parametrize("text, err", [
    ("Be careful with tools.", "TEXT='Be careful with tools.': refused (rejected): score 0.40 "
                               "< 0.5 (specificity 0.00, novelty 1.00, agreement 1.00)"),
    (f"Push with token {SECRET}", "TEXT='Push with token [REDACTED]': refused (invalid): "
                                  "secret-looking value in text"),
    ("line one\nline two", "TEXT='line one line two': refused (invalid): a memory fact is one "
                           "line"),
    ("", "TEXT='': refused (invalid): text: must not be empty"),
])
def test_memory_add_bad_input_is_one_line_and_creates_no_file(capsys, tmp_path, text, err):
    rc, out, got = run(capsys, "memory", "add", str(tmp_path / "MEMORY.md"), text)
    assert (rc, out, got) == (2, "", f"dyna: error: {err}\n")
    assert list(tmp_path.iterdir()) == []                  # no MEMORY.md, no .dyna/


def test_memory_add_bad_paths(capsys, tmp_path):
    rc, _, err = run(capsys, "memory", "add", str(tmp_path), "The API port is 8080")
    assert rc == 2 and err == f"dyna: error: PATH='{tmp_path}': is a folder, not a MEMORY.md " \
                              "file\n"
    rc, _, err = run(capsys, "memory", "add", str(tmp_path / "no" / "MEMORY.md"), "x 8080")
    assert rc == 2 and err == (f"dyna: error: PATH='{tmp_path / 'no'}': no such folder "
                               "(MEMORY.md's folder is not created: make it first)\n")
    assert list(tmp_path.iterdir()) == []


def test_add_help_has_examples(capsys):
    for cmd in (["skills", "add"], ["memory", "add"]):
        with pytest.raises(SystemExit):
            main(cmd + ["--help"])
        out = capsys.readouterr().out
        assert f"example:\n  dyna {' '.join(cmd)} ~/.agent/" in out
        assert "--source SOURCE" in out and "(default: person)" in out


def test_skills_add_without_triggers_matches_on_its_description(capsys, tmp_path, body):
    d = tmp_path / "skills"
    assert run(capsys, "skills", "add", str(d), "--name", "rollback-staging", "--description",
               "Roll back the staging web app", "--body", str(body))[0] == 0
    lib = SkillLibrary(d)
    assert lib["rollback-staging"].triggers == ()
    (m,) = lib.match("the staging app needs a roll back")
    assert (m.name, m.by_trigger) == ("rollback-staging", False)


def test_terminal_control_characters_from_files_are_printed_escaped(tmp_path, capsys):
    """A security review: `skills catalog` and `memory show` printed ESC, OSC and U+202E
    from hand-dropped files raw, so a file could retitle or recolour the terminal."""
    lib = tmp_path / "lib"
    (lib / "evil").mkdir(parents=True)
    # YAML's own escapes: a double-quoted scalar cannot hold these characters raw
    hostile = r"Deploy \e]0;owned\a the \e[31mweb\e[0m app \u202eog\u202c now\x9b2J"
    (lib / "evil" / "SKILL.md").write_text(
        f'---\nname: evil\ndescription: "{hostile}"\n---\nRun it.\n', encoding="utf-8")
    (tmp_path / "MEMORY.md").write_text(
        "# Memory\n\n- [2024-05-01 | run-1 | trusted] The port is 80\x1b[2J80 \u2066x\u2069\n",
        encoding="utf-8")
    outs = []
    for argv in (["skills", "catalog", str(lib)], ["skills", "list", str(lib)],
                 ["skills", "show", str(lib), "evil"],
                 ["skills", "match", str(lib), "deploy the web app"],
                 ["memory", "show", str(tmp_path / "MEMORY.md")]):
        main(argv)
        outs.append(capsys.readouterr().out)
    text = "".join(outs)
    for c in ("\x1b", "\x07", "\x9b", "\u202e", "\u202c", "\u2066", "\u2069"):
        assert c not in text, repr(c)
    assert "\\x1b]0;owned\\x07" in outs[0] and "\\u202eog\\u202c" in outs[0]
    assert "80\\x1b[2J80" in outs[4]
    import sys
    assert type(sys.stdout).__name__ != "_SafeText"   # put back after each command
