"""Fingerprints of the agent-task runs, to show that a speed-up changed no result.

Every job runs :func:`dyna.agents.loop_agents.run_loop_agent` for one variant in one
scenario with fixed seeds and hashes its per-episode outputs (every field of
:data:`~dyna.agents.loop_agents.EPISODE_FIELDS`, the safeguards' ``acted_*`` counts among
them, in that order, as the bytes of their numpy arrays): the same numbers the
``agent_tasks`` kind stacks into ``episodes.parquet``. The jobs cover

- the v2 worlds (``experiments/agent_tasks_v2_{skill,memory}.toml``): six scenarios of each
  store (the most severe point of each failure mode and the drift by rename) for every
  variant of the file, the ablations of the other switches, ``self_reflection``, the
  ``-self_gate`` loops, the episodic and tabular agents and the literature baselines;
- the v0 ablations (``experiments/{skill,memory}_loop_ablation.toml``): all five scenarios
  for every variant of the file;
- the v0 env alone: the ``V0_GOLDEN`` play of ``tests/test_agent_tasks_v1.py``.

Usage (from the repository root)::

    python benchmarks/fingerprint_agent_tasks.py --write benchmarks/agent_tasks_fingerprints.json
    python benchmarks/fingerprint_agent_tasks.py --check benchmarks/agent_tasks_fingerprints.json

``--check`` prints every job whose hash differs and exits 1 if any does. ``--jobs N``
runs N worker processes (default 2). ``pytest benchmarks/fingerprint_agent_tasks.py``
runs the check as a test (minutes: it is not in the default test paths).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).with_name("agent_tasks_fingerprints.json")

#: v2 scenarios fingerprinted per store (drift at 300, so 350 episodes see 50 after it).
V2_SCENARIOS = ("learning_from_failure-0.5", "drift-rename", "drift-procedure",
                "volume-0.5", "injection-0.5", "wrong_guidance-1")
V2_EPISODES = 350
V0_EPISODES = 300
RUNS = (0,)


def _extra_variants(store: str) -> list[str]:
    from dyna.agents.baselines import BASELINES
    from dyna.agents.loop_agents import variant_names

    return [*variant_names(store), f"{store}_loop-self_gate", *BASELINES]


def jobs() -> list[tuple]:
    """Every job: ``(label, variant, store, env_kwargs, episodes, seed, run, policy,
    loop)``."""
    from dyna.experiment.registry import load_experiment

    out = []
    for store in ("skill", "memory"):
        cfg = load_experiment(ROOT / f"experiments/agent_tasks_v2_{store}.toml")
        names = dict(cfg.scenarios)
        variants = list(dict.fromkeys([*cfg.variants, *_extra_variants(store)]))
        for scen in V2_SCENARIOS:
            ix = list(names).index(scen)
            for v in variants:
                for r in RUNS:
                    out.append((f"v2/{store}/{scen}/{v}/r{r}", v, cfg.store,
                                cfg.env_kwargs(ix), V2_EPISODES, cfg.seed, r,
                                dict(cfg.policy), dict(cfg.loop)))
        cfg = load_experiment(ROOT / f"experiments/{store}_loop_ablation.toml")
        for ix, (scen, _) in enumerate(cfg.scenarios):
            for v in cfg.variants:
                out.append((f"v0/{store}/{scen}/{v}/r0", v, cfg.store, cfg.env_kwargs(ix),
                            V0_EPISODES, cfg.seed, 0, dict(cfg.policy), dict(cfg.loop)))
    return out


#: The per-episode fields fingerprinted: what the agent did and what its store held (the
#: competence columns, which only report, and the fields added for the v3 checks are not
#: among them, so adding a report column leaves every fingerprint as it is).
FINGERPRINT_FIELDS = ("family", "success", "self_assessed", "escalated", "incident", "steps",
                      "tokens", "learning_tokens", "context_entries", "library_size",
                      "poisoned", "stale", "drift", "drift_family", "acted_outcome_gate",
                      "acted_redaction", "acted_secret_scan", "acted_novelty_check",
                      "acted_grading", "acted_cap_eviction", "acted_dating",
                      "acted_retire_on_contradiction", "acted_approval_for_untrusted",
                      "acted_consolidation_every", "approved", "rejected")


def run_job(job: tuple) -> tuple[str, str]:
    """``(label, sha256 hex)`` of one job's per-episode outputs (:data:`FINGERPRINT_FIELDS`)."""
    from dyna.agents.loop_agents import EPISODE_FIELDS, run_loop_agent

    label, variant, store, env_kwargs, episodes, seed, run, policy, loop = job
    out = run_loop_agent(variant, store=store, env_kwargs=env_kwargs, episodes=episodes,
                         seed=seed, run_index=run, params=policy, loop_config=loop)
    h = hashlib.sha256()
    for k in FINGERPRINT_FIELDS:
        dt = EPISODE_FIELDS[k]
        arr = out[k]
        assert arr.dtype == dt, (k, arr.dtype)
        h.update(k.encode())
        h.update(arr.tobytes())
    return label, h.hexdigest()


def env_fingerprints() -> dict[str, str]:
    """The v0 env's own play (tests/test_agent_tasks_v1.py ``_fingerprint``)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import test_agent_tasks_v1 as t

    return {f"env/v0/{c}/{s}": t._fingerprint(t.V0_CONFIGS[c], s) for c, s in t.V0_GOLDEN}


def fingerprints(workers: int = 2, only: str = "") -> dict[str, str]:
    """Every fingerprint, ``{label: sha256 hex}`` (only the labels containing ``only``)."""
    todo = [j for j in jobs() if only in j[0]]
    # longest first (the 200-family volume worlds), so no worker idles at the end
    todo.sort(key=lambda j: -j[3].get("n_families", 0))
    got = {k: v for k, v in env_fingerprints().items() if only in k}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        got.update(pool.map(run_job, todo, chunksize=4))
    return dict(sorted(got.items()))


def compare(got: dict[str, str], want: dict[str, str]) -> list[str]:
    """Labels whose hash differs or that are on one side only."""
    return sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))


def test_fingerprints_unchanged():
    want = json.loads(GOLDEN.read_text())
    bad = compare(fingerprints(), want)
    assert not bad, bad[:20]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", type=Path, help="write the fingerprints to this JSON file")
    g.add_argument("--check", type=Path, help="compare with the fingerprints in this file")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--only", default="", help="only the labels containing this text "
                    "(--check compares those only)")
    args = ap.parse_args(argv)
    got = fingerprints(args.jobs, args.only)
    if args.write:
        if args.only:
            ap.error("--write writes every fingerprint: no --only")
        tmp = args.write.with_suffix(".tmp")
        tmp.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        tmp.replace(args.write)
        print(f"{len(got)} fingerprints written to {args.write}")
        return 0
    want = {k: v for k, v in json.loads(args.check.read_text()).items() if args.only in k}
    bad = compare(got, want)
    for k in bad:
        print(f"DIFFERS: {k}")
    print(f"{len(got)} fingerprints, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
