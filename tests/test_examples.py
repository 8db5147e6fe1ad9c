"""Every file in examples/ runs as written, in a fresh process and a temporary folder, and
prints the figures below; the Python block of docs/loops.md is the example's code."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_pages import after_heading

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

# What each example prints, line by line; the last line (the temporary folder) is checked
# apart, by `files_in`.
EXPECTED = {
    "learning_loop.py": [
        "run-1: skills ['deploy-staging'], facts 1",
        "  digest: 1 redacted, last output 200 chars: 'deployed; API_KEY=[REDACTED] l'",
        "  gate: gate passed",
        "  committed skill (grade 0.95; untrusted: none): recover-make-deploy-web",
        "  committed memory (grade 0.90; untrusted: none): For deploy web, "
        "`make target=deploy-staging` works",
        "run-2: skills ['deploy-staging', 'recover-make-deploy-web'], facts 2",
        "  digest: 0 redacted, last output 4 chars: 'done'",
        "  gate: gate passed",
        "  staged memory (grade 0.89; untrusted: tool_output, tool_argument): For roll back, "
        "`make target=rollback-staging` works",
        "run-3: skills ['recover-make-deploy-web', 'deploy-staging'], facts 2",
        "  digest: 0 redacted, last output 17 chars: 'permission denied'",
        "  gate: outcome gate: no verified success",
        "pending m0001: fact: For roll back, `make target=rollback-staging` works",
        "approved m0001",
        "yours: valid True, grade 0.96, committed",
        "runs' own cost: 2370 tokens; learning cost: 800 reviewer tokens, 3 proposals graded",
        "skills now: ['deploy-staging', 'recover-make-deploy-web']; facts 4",
    ],
}


def run_example(path: Path, tmp_path: Path) -> tuple[list[str], Path]:
    """Run one example with its working folder and TMPDIR in ``tmp_path``; its lines and
    the folder it says it wrote."""
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONHASHSEED="0")
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    m = re.fullmatch(r"files in (.+)", lines[-1])
    assert m, lines[-1]
    return lines[:-1], Path(m.group(1))


def test_every_example_has_expected_output():
    assert [p.name for p in EXAMPLES] == sorted(EXPECTED)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_and_prints_its_figures(path, tmp_path):
    lines, out = run_example(path, tmp_path)
    assert lines == EXPECTED[path.name]
    assert out.parent == tmp_path                   # wrote only below the temporary folder
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_learning_loop_writes_what_it_printed(tmp_path):
    _, out = run_example(ROOT / "examples" / "learning_loop.py", tmp_path)
    from dyna.loops import MemoryStore, SkillLibrary

    lib = SkillLibrary(out / "skills")
    assert sorted(lib) == ["deploy-staging", "recover-make-deploy-web"]
    learned = lib["recover-make-deploy-web"]
    assert learned.source_run == "run-1" and learned.trust == "trusted"
    assert learned.body == ("If `make target=deploy` fails, call `make target=deploy-staging` "
                            "instead.")
    mem = MemoryStore(out / "MEMORY.md")
    assert [(e.trust, e.source) for e in mem] == [
        ("user", "setup"), ("trusted", "run-1"), ("approved", "run-2"), ("user", "alice")]
    assert mem.pending() == []
    written = "".join(p.read_text(encoding="utf-8") for p in out.rglob("*") if p.is_file())
    assert "sk-live" not in written                 # the run's API key reached no file


def test_loops_page_python_block_is_the_example():
    section = after_heading("Use the loops from Python")
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    example = (ROOT / "examples" / "learning_loop.py").read_text(encoding="utf-8")
    docstring, code = example.split('"""\n', 1)
    assert block == code.lstrip("\n")
    assert docstring.startswith('"""A learning loop around an agent')


def test_loops_page_shell_block_runs_as_written(tmp_path):
    section = after_heading("Use the loops from Python")
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-e", "-c", block], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"== m0001  \(run cli, staged \S+, provenance web\)", lines.pop(3))
    assert lines == [
        "added skill rollback-staging (grade 1.00): skills/rollback-staging/SKILL.md",
        "added fact (grade 1.00): The staging deploy needs the VPN: run `vpn up staging` first",
        "staged m0001: fact (untrusted source web); approve with: dyna memory approve "
        "MEMORY.md m0001",
        "   + Release notes live at https://wiki.example.com/releases",
        "",
        "1 pending; approve or reject with: dyna memory approve|reject PATH ID",
        "approved m0001: added 'Release notes live at https://wiki.example.com/releases'"]
    from dyna.loops import MemoryStore, SkillLibrary

    assert [e.trust for e in MemoryStore(tmp_path / "MEMORY.md")] == ["user", "approved"]
    assert SkillLibrary(tmp_path / "skills")["rollback-staging"].triggers == \
        ("roll back", "rollback")


def test_learning_loop_docstring_example_runs():
    import doctest

    import dyna.loops.review as review

    finder = doctest.DocTestFinder(recurse=False)
    (test,) = finder.find(review.LearningLoop, "LearningLoop", globs=vars(review).copy())
    result = doctest.DocTestRunner().run(test)
    assert (result.failed, result.attempted) == (0, 5)
