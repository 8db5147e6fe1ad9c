"""The loop agents' per-episode outputs on the v2 worlds are those of before the speed work.

sha256 prefixes of every field of EPISODE_FIELDS (the safeguards' acted_* counts among
them) of one run of 250 episodes (seed 0, run 1), computed by
benchmarks/fingerprint_agent_tasks.py's run_job with the code as it was at commit 96f1a68,
before the loop-agent speed-ups of issue 16. The full set (every variant, six v2 and five
v0 scenarios per store) is benchmarks/fingerprint_agent_tasks.py --check.
"""

import sys
from pathlib import Path

import pytest

from dyna.experiment.registry import load_experiment

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from fingerprint_agent_tasks import run_job  # noqa: E402

GOLDEN = {
    ("skill", "injection-0.5", "naive_loop"): "a367038b5f995d67",
    ("skill", "injection-0.5", "skill_loop"): "7716eb74c23fe167",
    ("skill", "injection-0.5", "skill_loop-no_outcome_gate"): "818233111df5f30b",
    ("skill", "injection-0.5", "skill_loop-no_approval_for_untrusted"): "c2c8af574b662bf2",
    ("skill", "learning_from_failure-0.5", "skill_loop-no_outcome_gate"): "9cc4d46e92d4e91a",
    ("memory", "injection-0.5", "naive_loop"): "45cfc279a29702a5",
    ("memory", "injection-0.5", "memory_loop"): "b1a930ac023c3bee",
    ("memory", "injection-0.5", "memory_loop-no_outcome_gate"): "5bad64e23160336c",
    ("memory", "injection-0.5", "memory_loop-no_approval_for_untrusted"): "a9e17944773ee3a4",
    ("memory", "learning_from_failure-0.5", "memory_loop-no_outcome_gate"):
        "60996f1e9557cec7",
}


@pytest.mark.parametrize("store,scenario,variant", sorted(GOLDEN))
def test_v2_loop_agent_outputs_unchanged(store, scenario, variant):
    cfg = load_experiment(ROOT / f"experiments/agent_tasks_v2_{store}.toml")
    ix = [name for name, _ in cfg.scenarios].index(scenario)
    job = ("", variant, store, cfg.env_kwargs(ix), 250, 0, 1, dict(cfg.policy),
           dict(cfg.loop))
    assert run_job(job)[1][:16] == GOLDEN[(store, scenario, variant)]
