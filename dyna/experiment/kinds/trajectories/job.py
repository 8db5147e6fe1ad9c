"""Kind ``trajectories``: the job, the recorded runs replayed through one variant."""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from dyna.errors import MissingFileError
from dyna.experiment.backends import Job
from dyna.loops.trajectories import (
    PERSONAL_FIELDS,
    TAU_BENCH_FORMATS,
    TrajectoryRun,
    find_personal_values,
    harvest_by_field,
    load_trajectories,
)
from dyna.redact import redaction_formats

__all__ = ["EPISODE_FIELDS", "RUN_FIELDS", "cached_runs", "file_sha", "replay_order",
           "resolve_data_path", "reviewer_seed", "run_job", "store_episodes"]

#: Per-episode columns of a job's result, each of shape ``(runs, episodes)``.
EPISODE_FIELDS = ("reviewed", "committed", "staged", "from_failed", "entries")
#: Per-run columns of a job's result, each of shape ``(runs,)``.
RUN_FIELDS = ("reviews", "proposals", "committed", "staged", "invalid", "rejected",
              "dropped", "lessons_from_failed", "committed_from_failed", "pd_digest",
              "pd_proposals", "pd_reviewer", "pd_store", "safety_net_catches",
              "near_duplicates", "skills_end", "facts_end", "pending_end", "entries_end",
              "learning_tokens")
_EPOCH = _dt.datetime(2024, 5, 15, 15, 0, tzinfo=_dt.timezone.utc)


def resolve_data_path(path: str, base_dir: str | None) -> Path:
    """The trajectories file: absolute as given, relative against the experiment file's
    folder (``base_dir``; None: the working directory).

    Raises
    ------
    MissingFileError
        No such file (field ``data``).
    """
    p = Path(path)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    if not p.is_file():
        raise MissingFileError("data", p)
    return p.resolve()


def file_sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@functools.lru_cache(maxsize=4)
def cached_runs(path: str, sha: str, first: int | None = None) -> tuple[TrajectoryRun, ...]:
    """The parsed runs in replay order, cached per process by path and content hash; only
    the first ``first`` of them when given (``first_runs``)."""
    runs = replay_order(load_trajectories(path))
    return runs if first is None else runs[:first]


def replay_order(runs) -> tuple[TrajectoryRun, ...]:
    """Trial by trial: every task of trial 0 by task id, then trial 1, ..."""
    return tuple(sorted(runs, key=lambda r: (r.trial, r.task_id)))


@functools.lru_cache(maxsize=8)
def _digests(path: str, sha: str, redaction: bool, keys: frozenset, trusted: bool,
             first: int | None = None):
    """The runs' digests, cached per process by the file's path and sha256 and the digest
    settings (a changed file has a new hash, so no entry is stale; digests are immutable),
    so the variants' jobs of one process digest the file once (about 1 s each)."""
    return tuple(r.digest(redaction=redaction, trusted=trusted, sensitive_keys=keys)
                 for r in cached_runs(path, sha, first))


@functools.lru_cache(maxsize=4)
def _personal(path: str, sha: str, first: int | None = None):
    """Per run the harvested values, and their union with each value's category; cached
    per process by the file's path and sha256 (a changed file has a new hash)."""
    per_run, category = [], {}
    for r in cached_runs(path, sha, first):
        by = harvest_by_field(r)
        per_run.append(frozenset().union(*by.values()))
        for k in PERSONAL_FIELDS:
            for v in by[k]:
                category.setdefault(v, k)
    return tuple(per_run), category


def reviewer_seed(seed: int, run_index: int) -> int:
    """The reviewer's seed of run ``run_index`` (from ``(seed, run_index)`` only)."""
    return int(np.random.SeedSequence([int(seed), int(run_index)]).generate_state(1)[0])


def _digest_text(d) -> str:
    parts = [d.task]
    for c in d.tool_calls:
        parts += [json.dumps(dict(c.args), sort_keys=True, default=str), c.output]
    return "\n".join(parts)


def _proposal_text(p) -> str:
    return "\n".join([p.name, p.description, p.body, p.text, *p.triggers, *p.actions])


class _Watched:
    """A reviewer wrapper that records which harvested values reach the reviewer: in the
    digest it is handed and in the proposals it returns (``(run_id, value)`` pairs)."""

    def __init__(self, inner, values: dict):
        self.inner = inner
        self.values = values
        self.in_digest: set = set()
        self.in_proposals: set = set()

    def review(self, digest, context):
        out = self.inner.review(digest, context)
        vals = self.values[digest.run_id]
        self.in_digest |= {(digest.run_id, v)
                           for v in find_personal_values(_digest_text(digest), vals)}
        for p in out.proposals:
            self.in_proposals |= {(digest.run_id, v)
                                  for v in find_personal_values(_proposal_text(p), vals)}
        return out


def _scan_files(root: Path, values) -> set[str]:
    """Harvested values found in any file under ``root`` (SKILL.md files, MEMORY.md, the
    history logs, staged proposals)."""
    found: set[str] = set()
    for f in sorted(root.rglob("*")):
        if f.is_file():
            found |= find_personal_values(f.read_bytes().decode("utf-8", "replace"), values)
    return found


def _near_duplicates(texts: list[str], threshold: float) -> int:
    """Pairs of texts whose content-word Jaccard similarity is at least ``threshold``
    (compared exactly: a similarity equal to the threshold counts)."""
    from dyna.loops._text import content_words, jaccard_ratio
    from dyna.ties import at_least
    words = [frozenset(content_words(t)) for t in texts]
    return sum(at_least(jaccard_ratio(words[i], words[j]), threshold)
               for i in range(len(words)) for j in range(i + 1, len(words)))


def _scratch() -> str | None:
    """A memory-backed folder for the replay's stores when there is one (``/dev/shm``),
    else None (the system's temporary folder).

    The stores are real files (SKILL.md, MEMORY.md, logs), rewritten atomically hundreds
    of times per replay. What the memory-backed folder buys, measured on one job of
    ``experiments/taubench_airline_loops.toml`` (``skill_loop``, one run: the 200 recorded
    runs; five times each, interleaved, on a shared 2-core machine): 19 s against 36 s of
    wall time in ``/tmp`` on ext4 (medians), 1.15 against 1.75 CPU seconds; a
    ``memory_loop`` job (one file) takes the same time in either. The tables are the same.
    """
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _by_category(row: dict, prefix: str, found, category: dict) -> None:
    """``row[<prefix>_<category>]``: how many of the values ``found`` are of each
    category of :data:`PERSONAL_FIELDS`."""
    for k in PERSONAL_FIELDS:
        row[f"{prefix}_{k}"] = sum(category.get(v) == k for v in found)


def _rule_reviewer(p: dict, spec, r: int):
    """The rule-based reviewer of run index ``r`` (the kinds of the variant's store)."""
    from dyna.loops.review import RuleBasedReviewer
    kinds = tuple(k for k in p["reviewer"]["kinds"]
                  if (k == "memory") == (spec.store == "memory"))
    rv = {k: v for k, v in p["reviewer"].items() if k != "kinds"}
    return RuleBasedReviewer(reviewer_seed(p["seed"], r), kinds=kinds or ("memory",), **rv)


def _replay_loop(p: dict, runs, digests, values, category, r: int,
                 llm=None) -> tuple[dict, dict]:
    """One replay through a loop variant: its run row and episode columns. ``llm``: an
    :class:`~dyna.experiment.kinds.trajectories.llm.LLMSession` reviewing instead of the
    rule-based reviewer (its log gets every review)."""
    from dyna.agents.loop_agents import make_variant
    from dyna.loops.review import LearningLoop, LoopConfig
    spec = make_variant(p["variant_name"], p["store"], LoopConfig(**p["loop"]))
    cfg = spec.config
    inner = _rule_reviewer(p, spec, r) if llm is None else llm.reviewer(spec.store, r)
    watch = _Watched(inner, {run.run_id: values[i] for i, run in enumerate(runs)})
    E = len(runs)
    ep = {k: np.zeros(E, dtype=np.int64) for k in EPISODE_FIELDS}
    row = dict.fromkeys(RUN_FIELDS, 0)
    with tempfile.TemporaryDirectory(prefix="dyna-traj-", dir=_scratch()) as tmp:
        tick = [0]

        def clock():
            return _EPOCH + _dt.timedelta(hours=tick[0])
        skills = cfg.skill_library(Path(tmp) / "skills", clock=clock, durable=False)
        memory = cfg.memory_store(Path(tmp) / "MEMORY.md", clock=clock, durable=False)
        loop = LearningLoop(skills, memory, watch, cfg)
        for i, run in enumerate(runs):
            tick[0] = i
            d = digests[i]
            ctx = loop.begin(run.run_id, d.task)
            rec = llm.finish(loop, ctx, d, run, values[i]) if llm is not None else \
                loop.finish(ctx, d)
            res = rec.review
            if res is not None and res.status == "reviewed":
                ep["reviewed"][i] = 1
                row["reviews"] += 1
                row["proposals"] += len(res.decisions)
                for dec in res.decisions:
                    row[dec.action] = row.get(dec.action, 0) + 1
                    if dec.action in ("committed", "staged"):
                        ep[dec.action][i] += 1
                        if not run.success:
                            ep["from_failed"][i] += 1
                            row["committed_from_failed"] += dec.action == "committed"
            ep["entries"][i] = len(skills.skills()) + len(memory)
        loop.close()
        row["learning_tokens"] = sum(x.learning_tokens for x in loop.records)
        row["lessons_from_failed"] = int(ep["from_failed"].sum())
        row["pd_digest"] = len(watch.in_digest)
        row["pd_proposals"] = len(watch.in_proposals)
        row["pd_reviewer"] = len(watch.in_digest | watch.in_proposals)
        everything = frozenset().union(*values)
        stored = _scan_files(Path(tmp), everything)
        row["pd_store"] = len(stored)
        _by_category(row, "pd_store", stored, category)
        _by_category(row, "pd_reviewer", {v for _, v in watch.in_digest | watch.in_proposals},
                     category)
        row["safety_net_catches"] = (sum(skills.redactions.values())
                                     + sum(memory.redactions.values()))
        texts = ([" ".join([s.description, s.body]) for s in skills.skills()]
                 + [e.text for e in memory])
        row["near_duplicates"] = _near_duplicates(texts, p["near_duplicate"])
        row["skills_end"] = len(skills.skills())
        row["facts_end"] = len(memory)
        row["pending_end"] = len(loop.pending())
        row["entries_end"] = row["skills_end"] + row["facts_end"]
        for s, n in loop.safeguard_counts().items():
            row[f"acted_{s}"] = n
    return row, ep


class _Names:
    """The tool and value names a literature baseline reads from its env: every tool of
    the recorded runs and every distinct argument object (as canonical JSON), unredacted,
    as the baselines keep calls (they have no redaction step). The runs have no fixed
    procedure length (``length`` 0): an entry about one step ends at that step."""

    length = 0

    def __init__(self, runs):
        calls = [(c["name"], json.dumps(c["args"], sort_keys=True))
                 for r in runs for c in r.tool_calls]
        self.tool_names = tuple(sorted({t for t, _ in calls}))
        self.value_names = tuple(sorted({v for _, v in calls}))
        self._t = {n: i for i, n in enumerate(self.tool_names)}
        self._v = {n: i for i, n in enumerate(self.value_names)}

    def call(self, c) -> tuple[int, int]:
        return self._t[c["name"]], self._v[json.dumps(c["args"], sort_keys=True)]


#: A baseline's attributes that are settings, caches or counters, not what it keeps.
_NOT_KEPT = frozenset({"env", "seed", "title_words", "tokens_per_review", "copy_rate",
                       "ops", "_clock"})


def _kept_text(baseline) -> str:
    """Everything a baseline keeps, as text (its attributes but settings, caches and
    counters), searched for harvested values."""
    return repr({k: v for k, v in vars(baseline).items() if k not in _NOT_KEPT})


def _entries(baseline) -> tuple:
    """What a baseline stores, by its own account (:meth:`Baseline.audit_entries`, with the
    size): a run after which this changed is a write."""
    return baseline.size(), tuple(baseline.audit_entries())


def _replay_baseline(p: dict, runs, values, category, r: int) -> tuple[dict, dict]:
    from dyna.agents.baselines import RunRecord, make_baseline
    names = _Names(runs)
    b = make_baseline(p["variant_name"], names, reviewer_seed(p["seed"], r),
                      tokens_per_review=p["reviewer"]["tokens_per_review"])
    E = len(runs)
    ep = {k: np.zeros(E, dtype=np.int64) for k in EPISODE_FIELDS}
    row = dict.fromkeys(RUN_FIELDS, 0)
    before = _entries(b)
    for i, run in enumerate(runs):
        rec = RunRecord(run.run_id, run.task_id, run.first_message,
                        tuple((names.call(c), c["output"], c["error"])
                              for c in run.tool_calls),
                        run.success, run.success, run.tokens,
                        task_instance=run.task_id, retrial=run.trial)
        row["learning_tokens"] += b.learn(rec)
        after = _entries(b)
        if after != before:
            ep["reviewed"][i] = 1
            ep["committed"][i] = 1
            row["committed"] += 1
            if not run.success:
                ep["from_failed"][i] = 1
        before = after
        ep["entries"][i] = b.size()
    row["lessons_from_failed"] = row["committed_from_failed"] = int(ep["from_failed"].sum())
    row["reviews"] = int(ep["reviewed"].sum())
    everything = frozenset().union(*values)
    stored = find_personal_values(_kept_text(b), everything)
    row["pd_store"] = len(stored)
    _by_category(row, "pd_store", stored, category)
    row["entries_end"] = row["skills_end"] = b.size()
    row["near_duplicates"] = -1
    return row, ep


def store_episodes(runs) -> dict:
    """The importer's experience-store episodes, recorded in an in-memory store and read
    back: per category, harvested values found in the stored rows (the store redacts
    every dict before writing)."""
    from dyna.experience import ExperienceStore
    from dyna.loops.trajectories import import_runs
    find = find_personal_values
    with ExperienceStore("", dim=64) as store:
        n = import_runs(store, runs)["n"]
        rows = store.export_data("taubench-airline")["records"]
    text = json.dumps(rows, sort_keys=True, default=str)
    by: dict[str, set] = {k: set() for k in PERSONAL_FIELDS}
    for r in runs:
        for k, vs in harvest_by_field(r).items():
            by[k] |= vs
    return {"category": list(PERSONAL_FIELDS),
            "harvested": [len(by[k]) for k in PERSONAL_FIELDS],
            "in_store": [len(find(text, by[k])) for k in PERSONAL_FIELDS],
            "episodes": [n] * len(PERSONAL_FIELDS)}


@redaction_formats(TAU_BENCH_FORMATS)   # the runs' ids are personal data in every store
def run_job(job: Job) -> dict:
    """Replay every recorded run, trial by trial, through one variant, for each run index
    of the job (the reviewer's seed differs by run index; the recorded runs do not).

    Returns
    -------
    dict
        ``episodes``: each of :data:`EPISODE_FIELDS` as int64 arrays of shape ``(runs,
        episodes)``; ``runs``: a list of per-run dicts (:data:`RUN_FIELDS` and
        ``acted_<switch>`` for loops). The extra job of learner ``"store"`` returns
        ``store_episodes`` instead (:func:`store_episodes`).
    """
    p = job.payload
    runs = cached_runs(p["data"], p["data_sha"], p.get("first_runs"))
    if p["learner"] == "store":
        return {"store_episodes": store_episodes(runs)}
    first = p.get("first_runs")
    values, category = _personal(p["data"], p["data_sha"], first)
    if p.get("llm") is not None and p["learner"] == "loop":
        from dyna.experiment.kinds.trajectories.llm_session import run_llm_job
        out = run_llm_job(job, lambda r, session: _replay_loop(
            p, runs, _loop_digests(p), values, category, r, session))
        eps = out["episodes"]
        return {**out, "episodes": {k: np.stack([e[k] for e in eps]) for k in EPISODE_FIELDS}}
    rows, eps = [], []
    for r in job.run_indices:
        if p["learner"] == "baseline":
            row, ep = _replay_baseline(p, runs, values, category, r)
        else:
            row, ep = _replay_loop(p, runs, _loop_digests(p), values, category, r)
        rows.append(row)
        eps.append(ep)
    return {"runs": rows,
            "episodes": {k: np.stack([e[k] for e in eps]) for k in EPISODE_FIELDS}}


def _loop_digests(p: dict) -> tuple:
    """The digests a loop variant's reviewer is handed (redacted when its redaction is on)."""
    from dyna.redact import DEFAULT_SENSITIVE_KEYS
    keys = frozenset(DEFAULT_SENSITIVE_KEYS | set(p["extra_sensitive_keys"]))
    return _digests(p["data"], p["data_sha"], bool(p["redaction"]), keys, p["trusted"],
                    p.get("first_runs"))
