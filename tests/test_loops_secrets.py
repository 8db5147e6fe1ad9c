"""The libraries' safety net: no planted secret reaches a skills folder or a memory file.

Every format of tests/data/secret_corpus.txt is planted in a skill (description, body, a
frontmatter metadata value, the change reason), in staged proposals (approved and rejected)
and in memory facts (added, staged, approved, rejected); then every file under the library
folder (SKILL.md files, ``.dyna/pending/*.json``, ``.dyna/history.jsonl``) and MEMORY.md with
its ``.dyna`` history and pending files are searched byte for byte for the planted values
themselves (raw, JSON-escaped, white space joined, and each long line of a block): 0 found.
The catches are counted per detector on the library objects. Benign texts
(tests/data/benign_corpus.txt) are written unchanged and counted 0 times.
"""

import json
from pathlib import Path

import pytest

from dyna.errors import ConfigError
from dyna.loops.memory import MemoryStore
from dyna.loops.skills import Skill, SkillLibrary

DATA = Path(__file__).parent / "data"


def _lines(name):
    return [line for line in (DATA / name).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


def _secrets():
    out = []
    for line in _lines("secret_corpus.txt"):
        parts = line.split("\t")
        text = parts[1].replace("\\n", "\n")
        secret = (parts[2] if len(parts) == 3 else parts[1]).replace("\\n", "\n")
        out.append((parts[0], text, secret))
    return out


SECRETS = _secrets()
BENIGN = _lines("benign_corpus.txt")


def _needles(secret: str) -> list[bytes]:
    forms = {secret, " ".join(secret.split()), json.dumps(secret)[1:-1],
             json.dumps(" ".join(secret.split()))[1:-1]}
    forms.update(line for line in secret.split("\n") if len(line) >= 16)
    return [f.encode("utf-8") for f in forms if f]


def _blob(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def _leaked(root: Path) -> list[str]:
    blob = _blob(root)
    return [name for name, _, secret in SECRETS if any(n in blob for n in _needles(secret))]


def _control(tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    (control / "f").write_text(json.dumps([t for _, t, _ in SECRETS]), encoding="utf-8")
    assert len(_leaked(control)) == len(SECRETS)   # the search finds every planted value


@pytest.mark.usefixtures("tau_bench_formats")
def test_skills_library_never_writes_a_planted_secret(tmp_path):
    assert len(SECRETS) >= 60
    _control(tmp_path)
    root = tmp_path / "skills"
    lib = SkillLibrary(root)
    for i, (_, text, _) in enumerate(SECRETS):
        name = f"skill-{i:03d}"
        lib.add(Skill(name, f"Deploy helper that uses {text}",
                      body=f"Steps:\n1. export creds\n2. run with {text}\n",
                      extra_metadata={"note": text}), run_id=f"run-{i}", reason=text)
        if i % 3 == 0:
            lib.patch(name, run_id=f"run-{i}", reason=f"patched: {text}", body=f"use {text}")
        if i % 5 == 0:
            lib.record_outcome([name], success=False, run_id=f"run-{i}")
            lib.retire(name, run_id=f"run-{i}", reason=f"retired: {text}")
    staged = [lib.stage(Skill(f"staged-{i:03d}", f"Proposal {text}", body=text),
                        run_id=f"run-s{i}", provenance=["tool_output"], reason=text)
              for i, (_, text, _) in enumerate(SECRETS)]
    for j, item in enumerate(staged):
        if j % 2:
            lib.approve(item.id, reason=f"ok {SECRETS[j][1]}")
        elif j % 4 == 0:
            lib.reject(item.id, reason=f"no {SECRETS[j][1]}")
    lib.undo_run("run-3")
    # left pending: the items j with j % 4 == 2 (odd ones approved, j % 4 == 0 rejected)
    assert len(list((root / ".dyna" / "pending").glob("*.json"))) == (len(SECRETS) + 1) // 4
    assert _leaked(root) == []
    # every write with a secret was caught and counted per detector
    caught = lib.redactions
    print("skills redactions:", sum(caught.values()), caught)
    assert sum(caught.values()) >= 2 * len(SECRETS)
    assert caught["aws_access_key_id"] >= 1 and caught["pem_private_key"] >= 1
    # the schema field ``name`` is an identifier, never redacted as a person's name
    hist = [json.loads(line) for line in
            (root / ".dyna" / "history.jsonl").read_text().splitlines()]
    assert {h["name"] for h in hist} >= {f"skill-{i:03d}" for i in range(len(SECRETS))}
    assert "[REDACTED]" in lib.get("skill-001").body
    assert SkillLibrary(root).get("skill-001").name == "skill-001"   # reads back


def test_skills_library_writes_benign_texts_unchanged(tmp_path):
    assert len(BENIGN) >= 30
    root = tmp_path / "skills"
    lib = SkillLibrary(root)
    for i, text in enumerate(BENIGN):
        lib.add(Skill(f"benign-{i:03d}", text, body=f"Run:\n{text}",
                      extra_metadata={"note": text}), run_id=f"run-{i}", reason=text)
    item = lib.stage(Skill("benign-staged", BENIGN[0], body=BENIGN[1]), run_id="run-x",
                     provenance=["tool_output"], reason=BENIGN[2])
    assert lib.redactions == {}
    again = SkillLibrary(root)
    for i, text in enumerate(BENIGN):
        skill = again.get(f"benign-{i:03d}")
        assert skill.description == text and skill.body == f"Run:\n{text}"
        assert dict(skill.extra_metadata)["note"] == text
    assert again.pending()[0].skill.body == BENIGN[1]
    lib.approve(item.id)
    assert lib.redactions == {}


def test_skills_refuse_a_run_id_holding_a_secret(tmp_path):
    lib = SkillLibrary(tmp_path / "skills")
    secret = "ghp_9sUtE9UzQn2JRXBjNO2Dz7sTKOaYVSb4azlJ"
    with pytest.raises(ConfigError) as err:
        lib.add(Skill("a-skill", "does a"), run_id=f"run {secret}")
    assert "run_id" in str(err.value) and secret not in str(err.value)
    with pytest.raises(ConfigError, match="run_id"):
        lib.stage(Skill("b-skill", "does b"), run_id=secret)
    assert lib.skills() == [] and lib.pending() == []


@pytest.mark.usefixtures("tau_bench_formats")
def test_memory_never_writes_a_planted_secret(tmp_path):
    _control(tmp_path)
    root = tmp_path / "mem"
    mem = MemoryStore(root / "MEMORY.md", cap=None, create=True)   # makes mem/
    for i, (_, text, _) in enumerate(SECRETS):
        mem.add(f"Fact {i}: the deploy uses {text}", source=f"run-{i}", trust="trusted",
                run_id=f"run-{i}")
    staged = [mem.stage(f"Staged {i}: login with {text}", run_id=f"run-s{i}",
                        provenance=["tool_output"], reason=text)
              for i, (_, text, _) in enumerate(SECRETS)]
    for j, item in enumerate(staged):
        if j % 2:
            mem.approve(item.id)
        elif j % 4 == 0:
            mem.reject(item.id)
    mem.remove(mem.entries()[0].text, run_id="run-r")
    mem.consolidate(run_id="run-c")
    files = sorted(p.name for p in root.rglob("*") if p.is_file())
    assert files == ["MEMORY.md", "MEMORY.md.history.jsonl", "MEMORY.md.lock",
                     "MEMORY.md.pending.json"]
    assert _leaked(root) == []
    caught = mem.redactions
    print("memory redactions:", sum(caught.values()), caught)
    assert sum(caught.values()) >= 2 * len(SECRETS)
    assert len(MemoryStore(root / "MEMORY.md", cap=None)) == len(mem)


def test_memory_redacts_a_hand_written_secret_on_the_next_write(tmp_path):
    path = tmp_path / "MEMORY.md"
    secret = "sk_live_Xg4HEb9ohHDFpifIyd6nHCSC"
    path.write_text(f"- deploy key is {secret}\n", encoding="utf-8")
    mem = MemoryStore(path)
    mem.add("builds run with make", trust="user")
    assert secret not in path.read_text() and mem.redactions == {"stripe_key": 1}


def test_memory_writes_benign_texts_unchanged(tmp_path):
    path = tmp_path / "MEMORY.md"
    mem = MemoryStore(path, cap=None)
    for i, text in enumerate(BENIGN):
        mem.add(f"Benign {i}: {text}", source=f"run-{i}", trust="trusted")
    item = mem.stage(f"Staged: {BENIGN[0]}", run_id="run-x", reason=BENIGN[1])
    mem.approve(item.id)
    content = path.read_text(encoding="utf-8")
    for i, text in enumerate(BENIGN):
        assert f"Benign {i}: {' '.join(text.split())}" in content
    assert mem.redactions == {}


def test_memory_refuses_a_source_holding_a_secret(tmp_path):
    mem = MemoryStore(tmp_path / "MEMORY.md")
    with pytest.raises(ConfigError, match="source") as err:
        mem.add("a fact", source="mia.li@example.com")
    assert "mia.li@example.com" not in str(err.value)
    assert len(mem) == 0
