"""The loop agents' per-episode outputs on the v2 worlds are those of before the speed work.

sha256 prefixes of the behaviour fields (benchmarks/fingerprint_agent_tasks.py's
FINGERPRINT_FIELDS, the safeguards' acted_* counts among them) of one run of 250 episodes
(seed 0, run 1), computed by its run_job with the code at commit 211df21, whose every field
equalled the code before the loop-agent speed-ups (commit 96f1a68); three memory rows
changed on purpose with the facts' outcome counts and retirement and the naive loop's
memory_k (commit 75cbacc and its agent side); two more when a followed fact took the
run's outcome, as a skill does. The full set (every variant, six v2 and five
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
    ("skill", "injection-0.5", "naive_loop"): "4cc40863af2eacda",
    ("skill", "injection-0.5", "skill_loop"): "94099cb292f2203f",
    ("skill", "injection-0.5", "skill_loop-no_outcome_gate"): "b3329df427179b48",
    ("skill", "injection-0.5", "skill_loop-no_approval_for_untrusted"): "7b70b85ac787aeaa",
    ("skill", "learning_from_failure-0.5", "skill_loop-no_outcome_gate"): "175d054e308ac556",
    ("memory", "injection-0.5", "naive_loop"): "333d00e4786db5a5",
    ("memory", "injection-0.5", "memory_loop"): "2944562209f2e33c",
    ("memory", "injection-0.5", "memory_loop-no_outcome_gate"): "bed73d2efe06585d",
    ("memory", "injection-0.5", "memory_loop-no_approval_for_untrusted"): "4dd130386ca84097",
    ("memory", "learning_from_failure-0.5", "memory_loop-no_outcome_gate"):
        "61c352fb068ab636",
}


@pytest.mark.parametrize("store,scenario,variant", sorted(GOLDEN))
def test_v2_loop_agent_outputs_unchanged(store, scenario, variant):
    cfg = load_experiment(ROOT / f"experiments/agent_tasks_v2_{store}.toml")
    ix = [name for name, _ in cfg.scenarios].index(scenario)
    job = ("", variant, store, cfg.env_kwargs(ix), 250, 0, 1, dict(cfg.policy),
           dict(cfg.loop))
    assert run_job(job)[1][:16] == GOLDEN[(store, scenario, variant)]
