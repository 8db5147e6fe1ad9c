"""The loop agents' fields for the v3 checks and metrics, and the tau_airline preset against
the real runs it is matched to."""

import numpy as np
import polars as pl
import pytest

from dyna.agents.loop_agents import LoopAgent, PolicyParams, make_variant, run_loop_agent
from dyna.experiment.kinds.agent_tasks.reality import compare, real_units, sim_units
from dyna.loops import LoopConfig
from envs import make_agent_task_env

V2 = {"id": "dyna/AgentTasks-v2"}
POLICY = dict(p_follow=0.9, oracle_follows_always=False, misattribution=0.5,
              memory_facts="call")


def _agent(variant, env_kwargs, store="skill", params=POLICY):
    env = make_agent_task_env({**V2, **env_kwargs})
    spec = make_variant(variant, store, LoopConfig(skill_cap=50, match_limit=3))
    return LoopAgent(spec, env, (5, 0), PolicyParams(**params), 123), env


def test_head_families_cover_80_percent_of_arrivals():
    agent, env = _agent("no_learning", {})
    env.reset(seed=0)
    # Zipf 1 over 8 families: 0.368, 0.184, 0.123, 0.092, 0.074 -> 0.841 after five
    assert agent.head_families == frozenset(range(5))
    agent, env = _agent("no_learning", {"n_families": 3, "arrival_weights": [1, 8, 1]})
    assert agent.head_families == frozenset({1})   # 0.8 exactly


def test_the_oracle_covers_every_head_family_and_no_learning_none():
    for variant, want in (("oracle", 1.0), ("no_learning", 0.0)):
        out = run_loop_agent(variant, env_kwargs=V2, episodes=30, seed=1, params=POLICY)
        assert set(out["head_coverage"].tolist()) == {want}


def test_coverage_counts_families_whose_stored_skill_is_right():
    agent, env = _agent("naive_loop", {})
    for _ in range(300):
        row = agent.episode()
    right = agent.covered
    head = agent.head_families
    # a family is right exactly when one of its stored skills is its procedure, call for call
    assert right
    for f in range(env.n_families):
        assert (f in right) == any(tuple(agent.lessons.skill_calls(s.body)) == env.procedure(f)
                                   for s in agent.loop.skills.skills()
                                   if agent.lessons.family_of_key(s.triggers) == f), f
    row = agent.episode()
    assert row["head_coverage"] == len(right & head) / len(head)


def test_a_poisoned_skill_is_followed_and_counted_on_every_decoy_step():
    # one family, a decoy on every step; a skill holding the decoys is planted by hand
    agent, env = _agent("naive_loop", {"n_families": 1, "decoy_steps": 3,
                                      "false_success_rate": 0.0},
                        params={**POLICY, "p_follow": 1.0})
    env.reset(seed=123)
    agent.t = 1   # the env is built: the next episode resets without a seed
    f = 0
    body = "\n".join(f"{k + 1}. call `{env.tool_names[t]}` with "
                     f"`{env.value_names[env.decoy_value(f, k)]}`"
                     for k, (t, _) in enumerate(env.procedure(f)))
    words = env.trigger_words(f)[:2]
    from dyna.loops import Proposal
    agent.loop.skills.add(Proposal("skill", "-".join(words) + "-bad", "bad", body,
                                   tuple(words)).to_skill(), run_id="seed")
    row = agent.episode()
    # p_follow 1: every step follows the skill; every call is a decoy that answers ok
    assert row["poisoned_follows"] == 3 and row["errors"] == 0
    assert row["steps"] == 3 and not row["success"]


def test_errors_count_the_calls_that_errored():
    out = run_loop_agent("no_learning", env_kwargs={**V2, "decoy_steps": 0}, episodes=50,
                         seed=2, params=POLICY)
    # no decoys: a run that ends by success made length ok calls and the rest errors
    done = out["success"]
    assert (out["errors"][done] == out["steps"][done] - 3).all()


def test_the_policy_follows_the_hint():
    # without decoys the hint names every call: the blind agent never errs
    out = run_loop_agent("no_learning", env_kwargs={**V2, "hint": True, "decoy_steps": 0,
                                                    "destructive_rate": 0.0},
                         episodes=40, seed=3, params=POLICY)
    assert out["success"].all() and (out["steps"] == 3).all() and (out["errors"] == 0).all()


def test_compare_on_hand_built_units():
    def unit(types, success, calls, errors):
        return {"type": np.array(types), "success": np.array(success),
                "calls": np.array(calls), "errors": np.array(errors)}
    real = [unit(["no_change"] * 2, [True, False], [4, 6], [0, 1]),
            unit(["cancel_reservation"] * 2, [False, False], [8, 2], [1, 0])]
    sim = [unit(["no_change", "cancel_reservation"], [True, True], [5, 5], [0, 0])]
    tab = compare(sim, real, n_resamples=200).to_dicts()
    got = {r["statistic"]: r for r in tab}
    assert got["overall success"]["real"] == 0.25 and got["overall success"]["sim"] == 1.0
    assert got["success, no_change"]["real"] == 0.5
    assert got["calls per run, mean"]["real"] == 5.0 and got["calls per run, median"]["real"] == 5.0
    assert got["error share"]["real"] == 2 / 20
    # two tasks: a resample holds task 0 twice, task 1 twice, or both: success 0.5, 0, 0.25
    assert got["overall success"]["real_lo"] >= 0.0 and got["overall success"]["real_hi"] <= 0.5
    assert got["overall success"]["match"] is False


def test_the_real_runs_give_the_published_counts():
    units = real_units()
    pooled = {k: np.concatenate([u[k] for u in units]) for k in units[0]}
    assert len(units) == 50 and pooled["success"].sum() == 84
    assert pooled["calls"].sum() == 1164 and pooled["errors"].sum() == 73
    assert (pooled["type"] == "no_change").sum() == 80


@pytest.mark.slow
def test_the_tau_airline_preset_matches_the_real_runs():
    frames = []
    for r in range(8):
        o = run_loop_agent("no_learning", env_kwargs={**V2, "preset": "tau_airline"},
                           episodes=300, seed=11, run_index=r, params=POLICY)
        frames.append(pl.DataFrame({"run": np.full(300, r), "episode": np.arange(1, 301),
                                    "family": o["family"], "success": o["success"],
                                    "steps": o["steps"], "errors": o["errors"]}))
    tab = compare(sim_units(pl.concat(frames)), n_resamples=300)
    assert tab["match"].all(), tab


def test_a_baseline_records_the_harmful_entries_its_store_gains():
    """A literature baseline has no reviewer: ``harmful_proposed`` counts the entries
    naming the harmful tool that its store gains in the episode. Voyager copies a planted
    instruction into a skill only when its writer copies (``copy_rate``): with 0 it never
    holds one; with 0.5 it stores one on this seed, and following it causes the incidents
    counted as lesson-mediated."""
    kw = dict(id="dyna/AgentTasks-v2", preset="base", planted_follow_rate=0.5,
              injection_rate=0.05)
    never = run_loop_agent("voyager", env_kwargs=kw, episodes=300, seed=3,
                           params={"copy_rate": 0.0})
    copies = run_loop_agent("voyager", env_kwargs=kw, episodes=300, seed=3,
                            params={"copy_rate": 0.5})
    assert never["harmful_proposed"].sum() == 0 and never["incident_lesson"].sum() == 0
    assert copies["harmful_proposed"].sum() == 1
    assert copies["harmful_proposed"].min() == 0
    assert copies["incident_lesson"].sum() == 8
