"""Every secret format of tests/data/secrets/ in every place a value can go, counted per place.

The 208 formats are planted, batched into few calls, where a user's or a tool's text ends
up: the experience store's free-text fields (a value, a dict key, a nested dict, JSON inside
a string, a numpy string array) and its labels; the store's ``-wal`` while open and its main
file after the checkpoint of ``close``; its JSONL and Parquet exports; the feature cache; the
SKILL.md files and MEMORY.md the learning loop writes (from a reviewed run and from a
submitted lesson); a review digest; and the answers of the MCP tools, called in-process.
A format is "in clear" in a place when its secret is found there, byte for byte (raw, JSON-
escaped once or twice, each long line of a block) or in any string of the parsed output:
never judged by the redactor's own detectors. The count is 0 of 208 in every place. Every
benign look-alike (121) goes through the same places and is read back unchanged: altered 0
of 121. ``pytest -s`` prints the counts.
"""

import dataclasses
import json

import numpy as np
import polars as pl
from test_redact_corpus import _strings
from test_secrets_corpus import BENIGN, FORMATS, _plain

from dyna.errors import ConfigError
from dyna.experience import ExperienceStore
from dyna.loops.review import Digest, LearningLoop, LoopConfig, Proposal, RuleBasedReviewer
from dyna.loops.skills import SkillLibrary
from dyna.mcp_server import ExperienceTools
from dyna.store.jsonl import read_jsonl

TENANT = "acme"

#: The store's free-text places: field name and how a text is put there.
STORE_PLACES = {
    "value": ("state_before", lambda t: {"note": t}),
    "dict_key": ("action_taken", lambda t: {t: {"ok": True}}),
    "nested": ("metadata", lambda t: {"a": [{"b": {"c": t}}]}),
    "json_in_string": ("state_after", lambda t: {"tool_output": json.dumps({"out": t,
                                                                            "step": 3})}),
    "numpy_array": ("state_before", lambda t: {"arr": np.array([["x", t]])}),
}


def _needles(secret: str) -> list[bytes]:
    """The byte strings a planted secret would show in a file: raw, JSON-escaped once and
    twice (JSON inside a JSON string), and each long line of a multi-line block."""
    once = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    forms = once | {json.dumps(f)[1:-1] for f in once}
    forms.update(line for line in secret.split("\n") if len(line) >= 16)
    return [f.encode("utf-8") for f in forms if f]


def _in_bytes(blob: bytes, texts) -> set[str]:
    """Ids of the formats whose secret is in ``blob``."""
    return {f["id"] for f in texts if any(n in blob for n in _needles(f["secret"]))}


def _in_objects(obj, texts) -> set[str]:
    """Ids of the formats whose secret is in any string (or parsed JSON) of ``obj``."""
    joined = "\x00".join(_strings(_plain(obj)))     # every string once, then each search
    return {f["id"] for f in texts
            if f["secret"] in joined or f["secret"].replace("\\n", "\n") in joined}


def _episode(i: int, field: str = "state_before", value=None, **labels) -> dict:
    ep = dict(task_type="deploy", action_type="shell", outcome="success", reward=1.0,
              run_id=f"run-{i}", timestamp=1_700_000_000.0 + i, **labels)
    if value is not None:
        ep[field] = value
    return ep


def _store_files(db) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(db.parent.glob(db.name + "*"))
                    if p.is_file())


def _parquet_rows(path) -> list[dict]:
    return pl.read_parquet(path).to_dicts()


def _store_place(tmp_path, name, field, build, texts):
    """Plant every text of ``texts`` in one store's ``field``; the outputs searched for the
    place (store bytes open and after the checkpoint, exports, feature cache), and the
    records read back."""
    db = tmp_path / f"{name}.db"
    store = ExperienceStore(db, dim=4)
    store.record(TENANT, episodes=[_episode(i, field, build(t)) for i, t in enumerate(texts)])
    out = {"store_open": _store_files(db)}          # the main file and its -wal
    store.export_data(TENANT, str(tmp_path / f"{name}.jsonl"))
    store.export_data(TENANT, str(tmp_path / f"{name}.parquet"), format="parquet")
    cache = store.write_feature_cache()
    records = store.export_data(TENANT)["records"]
    store.close()                                    # the checkpoint into the main file
    assert not (tmp_path / f"{name}.db-wal").exists()
    out["store_closed"] = db.read_bytes()
    out["jsonl"] = (tmp_path / f"{name}.jsonl").read_bytes()
    out["parquet"] = _parquet_rows(tmp_path / f"{name}.parquet")
    out["feature_cache"] = b"".join(p.read_bytes() for p in
                                    sorted(tmp_path.glob(f"{name}.db.features*")))
    assert cache["n_rows"] == len(texts) and out["feature_cache"]
    return out, records


def _description(i: int, text: str) -> str:
    """A skill description holding ``text``, novel beside the others (its host)."""
    return f"Use {text} for release {i} of host{i}.example.org"


def _as_json(obj):
    """``obj`` as JSON gives it back (numpy arrays as lists): what a store returns."""
    return json.loads(json.dumps(obj, default=np.ndarray.tolist))


def _loop(root) -> LearningLoop:
    cfg = LoopConfig(approval_for_untrusted=False, max_lessons=2)
    return LearningLoop(cfg.skill_library(root / "skills", durable=False, cap=None),
                        cfg.memory_store(root / "MEMORY.md", durable=False, cap=None),
                        RuleBasedReviewer(copy_rate=1.0), cfg)


def _digest(i: int, text: str) -> Digest:
    calls = [{"name": "deploy", "args": {"env": "prod"}, "error": True, "output": "denied",
              "trusted": True},
             {"name": "fetch", "args": {"q": text, text: 1}, "output": text, "trusted": True}]
    return Digest.from_run(f"run-{i}", f"deploy the web service with {text}", success=True,
                           verified=True, steps=3, tool_calls=calls, task_source="operator",
                           output_chars=100_000)


def _loop_places(tmp_path, texts) -> dict:
    """SKILL.md files and MEMORY.md the loop writes: from reviewed runs whose tool output
    and task hold each text, and from lessons a person submits with it."""
    root = tmp_path / "loop"
    root.mkdir()
    loop = _loop(root)
    for i, t in enumerate(texts):
        loop.finish(loop.begin(f"run-{i}", "deploy the web service"), _digest(i, t))
        loop.submit(Proposal("skill", f"deploy-with-{i:03d}", _description(i, t),
                             f"Steps:\n1. run the deploy with {t}\n", ("deploy",)),
                    f"run-s{i}", by_person=True)
        loop.submit(Proposal("memory", text=f"Fact {i}: the deploy uses {t}"), f"run-m{i}",
                    by_person=True)
    skills = b"".join(p.read_bytes() for p in sorted((root / "skills").rglob("*"))
                      if p.is_file())
    memory = b"".join(p.read_bytes() for p in sorted(root.rglob("*MEMORY.md*"))
                      if p.is_file())
    return {"skill_md": skills, "memory_md": memory, "loop": loop}


def _mcp_answers(tmp_path, texts) -> list:
    """Every answer of the MCP tools that carry episode text, for episodes holding each
    text in a value, a key, a nested dict and JSON in a string; and the tool errors of a
    record whose label holds it."""
    store = ExperienceStore(tmp_path / "mcp.db", dim=4)
    tools = ExperienceTools(store, TENANT)
    answers = []
    for i, t in enumerate(texts):
        ep = _episode(i, "state_before", {"note": t, t: 1, "n": {"a": [t]}},
                      state_features=[1.0, 0.0, 0.0, float(i)])
        ep["state_after"] = {"tool_output": json.dumps({"out": t})}
        answers.append(tools.call("record", ep))
        answers.append(tools.call("record", dict(ep, run_id=t)))
    answers.append(tools.call("export_data", {}))
    answers.append(tools.call("query_similar", {"state_features": [1.0, 0.0, 0.0, 1.0],
                                                "k": len(texts)}))
    answers.append(tools.call("replay_experience", {"batch_size": len(texts), "seed": 1}))
    store.close()
    return answers


def _label_refusals(tmp_path, texts) -> tuple[int, bytes]:
    """Each text as a label (``run_id``, ``request_id``, ``task_type``) of its own record:
    the refusals counted, and the store's bytes after."""
    db = tmp_path / "labels.db"
    store = ExperienceStore(db, dim=4)
    refused = 0
    for i, t in enumerate(texts):
        for label in ("run_id", "request_id", "task_type"):
            try:
                store.record(TENANT, **dict(_episode(i), **{label: t}))
            except ConfigError as err:
                refused += 1
                assert t not in str(err)
    store.close()
    return refused, db.read_bytes()


def test_formats_in_clear_per_place(tmp_path):
    assert len(FORMATS) == 208
    control = json.dumps([f["text"] for f in FORMATS]).encode()
    assert len(_in_bytes(control, FORMATS)) == 208      # the search finds every one
    assert len(_in_objects([f["text"] for f in FORMATS], FORMATS)) == 208
    texts = [f["text"] for f in FORMATS]
    found = {}
    for name, (field, build) in STORE_PLACES.items():
        out, _ = _store_place(tmp_path, name, field, build, texts)
        for where, got in out.items():
            found[f"{name}/{where}"] = (_in_objects(got, FORMATS) if where == "parquet"
                                        else _in_bytes(got, FORMATS))
    refused, blob = _label_refusals(tmp_path, texts)
    found["labels"] = _in_bytes(blob, FORMATS)
    loop = _loop_places(tmp_path, texts)
    found["skill_md"] = _in_bytes(loop["skill_md"], FORMATS)
    found["memory_md"] = _in_bytes(loop["memory_md"], FORMATS)
    found["digest"] = _in_objects([dataclasses.asdict(_digest(i, t))
                                   for i, t in enumerate(texts)], FORMATS)
    found["mcp_answers"] = _in_objects(_mcp_answers(tmp_path, texts), FORMATS)
    counts = {place: len(ids) for place, ids in found.items()}
    print(f"\nformats in clear (of {len(FORMATS)}), per place:", counts)
    assert len(found) == 5 * 5 + 5
    assert {p: sorted(ids) for p, ids in found.items() if ids} == {}
    # labels: every format is refused as run_id, request_id and task_type
    assert refused == 3 * len(FORMATS)


def test_benign_texts_unchanged_in_every_place(tmp_path):
    assert len(BENIGN) == 121
    texts = [b["text"] for b in BENIGN]
    altered = {}
    for name, (field, build) in STORE_PLACES.items():
        out, records = _store_place(tmp_path, name, field, build, texts)
        want = [_as_json(build(t)) for t in texts]
        jsonl, _ = read_jsonl(tmp_path / f"{name}.jsonl")
        parquet = out["parquet"]
        for where, rows in (("store", records), ("jsonl", jsonl)):
            altered[f"{name}/{where}"] = sum(r[field] != w for r, w in zip(rows, want))
        altered[f"{name}/parquet"] = sum(json.loads(r[field]) != w
                                         for r, w in zip(parquet, want))
    # values under keys that hold a secret word inside another word (monkey, author, pwd)
    keyed = [b for b in BENIGN if "key" in b]
    out, records = _store_place(tmp_path, "keyed", "state_before", lambda t: t,
                                [{b["key"]: b["text"]} for b in keyed])
    altered["under_keys/store"] = sum(r["state_before"] != {b["key"]: b["text"]}
                                      for r, b in zip(records, keyed))
    refused, _ = _label_refusals(tmp_path, texts)
    loop = _loop_places(tmp_path, texts)
    memory_md = loop["memory_md"].decode()
    reread = SkillLibrary(tmp_path / "loop" / "skills")      # the SKILL.md files as written
    altered["skill_md"] = sum(f"deploy-with-{i:03d}" not in reread
                              or reread.get(f"deploy-with-{i:03d}").description
                              != _description(i, t) for i, t in enumerate(texts))
    altered["memory_md"] = sum(f"Fact {i}: the deploy uses {' '.join(t.split())}"
                               not in memory_md for i, t in enumerate(texts))
    altered["digest"] = sum(_digest(i, t).tool_calls[1].output != t
                            for i, t in enumerate(texts))
    answers = _mcp_answers(tmp_path, texts)
    exported = answers[2 * len(texts)][0]["records"]   # two records per text: see below
    altered["mcp_answers"] = sum(r["state_before"] != {"note": texts[j // 2], texts[j // 2]: 1,
                                                       "n": {"a": [texts[j // 2]]}}
                                 for j, r in enumerate(exported))
    print(f"\nbenign altered (of {len(BENIGN)}), per place:", altered)
    assert altered == dict.fromkeys(altered, 0)
    assert loop["loop"].skills.redactions == {} and loop["loop"].memory.redactions == {}
    # benign labels are taken: the MCP record with the text as run_id too
    assert refused == 0 and not any(is_error for _, is_error in answers)
    assert len(exported) == 2 * len(texts) and len(keyed) >= 3
