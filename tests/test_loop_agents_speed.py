"""Draws and clocks of the loop agents and of the stores they use.

- A :class:`ProcedureReviewer` draws its two uniforms from numpy's
  ``default_rng([seed, crc32(run_id)])``, whatever the seed's width.
- ``BetaCompetence.record`` is ``update`` then ``posterior``.
- The skill library dates follow the clock object by object.
- A loop agent's store clock advances ``days_per_episode`` days per episode from ``EPOCH``.
"""

import random
import zlib

import numpy as np
import pytest

from dyna.agents.loop_agents import ProcedureReviewer
from dyna.loops import Digest

@pytest.mark.parametrize("seed", [0, 2**32 - 1, 2**32, 2**40 + 7])
def test_reviewer_draws_what_numpy_draws(seed, monkeypatch):
    seen = []
    calls = ({"name": "tool_a", "args": {"value": "val_1"}, "output": "ok"},)
    d = Digest.from_run("e17", "alpha beta task", success=True, verified=True,
                        tool_calls=calls)
    rev = ProcedureReviewer("skill", seed=seed, copy_rate=0.5, misattribution=0.5)
    real = ProcedureReviewer.procedure

    def spy(self, digest, copy, misattribute=True):
        seen.append((copy, misattribute))
        return real(self, digest, copy, misattribute)
    monkeypatch.setattr(ProcedureReviewer, "procedure", spy)
    rev.review(d, None)
    u = np.random.default_rng([seed, zlib.crc32(b"e17")]).random(2)
    assert seen == [(bool(u[0] < 0.5), bool(u[1] < 0.5))]


def test_competence_record_is_update_then_posterior():
    from dyna.competence import BetaCompetence
    for discount in (1.0, 0.9):
        fast, slow = BetaCompetence(discount=discount), BetaCompetence(discount=discount)
        rng = random.Random(5)
        for _ in range(500):
            key, ok = rng.choice("abc"), rng.random() < 0.6
            slow.update(key, ok)
            assert fast.record(key, ok) == slow.posterior(key)
    # hand-computed: prior (1, 1), discount 0.5, outcomes +, +, -
    c = BetaCompetence(discount=0.5)
    assert c.record("k", True) == (2.0, 1.0)
    assert c.record("k", True) == (2.5, 1.0)      # 1 + 0.5 * (2 - 1) + 1
    assert c.record("k", False) == (1.75, 2.0)    # 1 + 0.5 * 1.5, 1 + 0.5 * 0 + 1


def test_library_dates_follow_the_clock_object_by_object():
    # the clock's datetime is remembered by identity: a clock returning the same object
    # gives its date; one returning a new object each call gives each one's date
    import datetime as dt

    from dyna.loops.skills import Skill, SkillLibrary
    days = [dt.datetime(2026, 1, 1, 23, 59, 59, tzinfo=dt.timezone.utc)]
    lib = SkillLibrary(clock=lambda: days[-1])
    lib.add(Skill("deploy-app", "Deploy the app.", "1. run `make deploy`", ("deploy",)),
            "r1")
    days.append(days[-1] + dt.timedelta(seconds=1))     # a new object: the next day
    lib.record_outcome(["deploy-app"], True, "r2")
    days.append(dt.datetime(2026, 1, 2, 0, 0, 1, tzinfo=dt.timezone.utc))
    lib.propose(Skill("deploy-app", "Deploy the app.", "1. run `make deploy`", ("deploy",)),
                "r3", require_approval=False)
    s = lib.get("deploy-app")
    assert (s.created, s.last_verified) == ("2026-01-01", "2026-01-02")
    assert [(h.op, h.time) for h in lib.history()] == [
        ("create", "2026-01-01T23:59:59+00:00"), ("outcome", "2026-01-02T00:00:00+00:00"),
        ("patch", "2026-01-02T00:00:01+00:00")]


def test_agent_clock_follows_the_agent():
    import datetime as dt

    from dyna.agents.loop_agents import EPOCH, LoopAgent, PolicyParams, make_variant
    from envs.agent_tasks import AgentTaskEnv
    agent = LoopAgent(make_variant("naive_loop", "skill"), AgentTaskEnv(n_families=3),
                      (0, 0), PolicyParams(days_per_episode=0.5), env_seed=1)
    clock = agent.loop.skills._clock
    agent.t = 5
    assert clock() == EPOCH + dt.timedelta(days=2.5) == agent.clock()
    agent.t = 6
    assert clock() == EPOCH + dt.timedelta(days=3)
