"""The tabular kind's warm-up loads everything the runs compile: one episode of one agent
leaves nothing for the eight agent x schedule runs of dyna.agents.warmup, nor for the
Dyna maze experiment's jobs, to add (run in a fresh interpreter: numba state is global)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, numba
from dyna import agents, model, planning, rng
from dyna.agents import tabular
from dyna.experiment.kinds.tabular.kind import KIND
from dyna.experiment.registry import load_experiment

def counts():
    out = {}
    for mod in (tabular, model, planning, rng):
        for name, obj in vars(mod).items():
            if isinstance(obj, numba.core.registry.CPUDispatcher):
                out[f"{mod.__name__}.{name}"] = len(obj.signatures)
    return out

seconds = KIND.warm_up()
after_warm_up = counts()
agents.warmup()
after_all_agents = counts()
config = load_experiment("experiments/dyna_maze.toml", runs=2)
prepared = KIND.prepare(config)
for job in KIND.plan_jobs(config, prepared, block_size=2):
    KIND.job_function(job)
print(json.dumps([seconds, after_warm_up, after_all_agents, counts()]))
"""


def test_one_warm_up_run_loads_every_signature_the_runs_use():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    seconds, warm, every_agent, maze = json.loads(done.stdout.strip().splitlines()[-1])
    assert seconds > 0
    assert warm["dyna.agents.tabular._run_kernel"] == 1
    assert every_agent == warm and maze == warm
