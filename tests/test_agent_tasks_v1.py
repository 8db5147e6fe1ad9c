"""dyna/AgentTasks-v1: each failure-mode mechanic with exact values, and v0 unchanged."""

import hashlib
import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import RecordEpisodeStatistics

import envs  # noqa: F401  (registers dyna/AgentTasks-v1)
from dyna.errors import ConfigError
from dyna.loops.skills import Skill, SkillLibrary
from envs.agent_tasks import (RESULT_FAILED, RESULT_OK, RESULT_WRONG_TOOL, V1_BASE,
                              AgentTaskEnv, AgentTaskEnvV1)

# --------------------------------------------------------------------------- v0 unchanged

V0_CONFIGS = [dict(), dict(injection_rate=0.3, drift_rate=0.05, false_success_rate=0.4),
              dict(n_families=20, zipf_s=1.1, drift_at=[3, 7], untrusted_tools=2,
                   injection_rate=0.2, n_tools=8, max_steps=16)]
# sha256 prefixes of every obs, reward and info over 60 episodes of fixed random play,
# computed with the env as it was before v1 (commit fc43cf7)
V0_GOLDEN = {(0, 0): "a77ada3625c17953", (0, 7): "6fcbaeb78fc48daf",
             (1, 0): "8ca7d7b5bff6778d", (1, 7): "a73ca4454304bcd6",
             (2, 0): "1b85e12d9331cc9e", (2, 7): "1177bba4e3ac3539"}


def _fingerprint(kw, seed, episodes=60):
    env = AgentTaskEnv(**kw)
    rng = np.random.default_rng(seed + 1000)
    h = hashlib.sha256()

    def put(x):
        # the golden hashes predate the rename of info's "episode" to "episode_index"
        if isinstance(x, dict) and "episode_index" in x:
            x = {("episode" if k == "episode_index" else k): v for k, v in x.items()}
        elif isinstance(x, list) and isinstance(x[-1], dict) and "episode_index" in x[-1]:
            x = x[:-1] + [{("episode" if k == "episode_index" else k): v
                           for k, v in x[-1].items()}]
        h.update(json.dumps(x, sort_keys=True, default=str).encode())

    for e in range(episodes):
        obs, info = env.reset(seed=seed) if e == 0 else env.reset()
        put({k: np.asarray(v).tolist() for k, v in obs.items()})
        put(info)
        while True:
            if rng.random() < 0.6:
                a = env.procedure(env.family)[env.position]
            else:
                a = (int(rng.integers(env.n_tools + (rng.random() < 0.05))),
                     int(rng.integers(env.n_values)))
            obs, r, term, trunc, info = env.step(a)
            put([{k: np.asarray(v).tolist() for k, v in obs.items()}, r, term, trunc, info])
            if term or trunc:
                break
    return h.hexdigest()[:16]


@pytest.mark.parametrize("cfg,seed", sorted(V0_GOLDEN))
def test_v0_gives_the_same_tasks_drifts_injections_and_verdicts(cfg, seed):
    assert _fingerprint(V0_CONFIGS[cfg], seed) == V0_GOLDEN[(cfg, seed)]


# --------------------------------------------------------------------------- v1 basics

def test_v0_runs_under_record_episode_statistics_and_make_vec():
    env = RecordEpisodeStatistics(gym.make("dyna/AgentTasks-v0", max_steps=5))
    _, info = env.reset(seed=0)
    assert info["episode_index"] == 0
    u = env.unwrapped
    for call in u.procedure(u.family):
        _, r, term, _, info = env.step(call)
    assert term and info["episode"]["r"] == 1.0 and info["episode"]["l"] == 3
    venv = gym.make_vec("dyna/AgentTasks-v0", num_envs=2, vectorization_mode="sync",
                        max_steps=5)
    venv = gym.wrappers.vector.RecordEpisodeStatistics(venv)
    venv.reset(seed=1)
    venv.action_space.seed(1)
    done = np.zeros(2, bool)
    stats = 0
    for _ in range(5):
        _, _, term, trunc, info = venv.step(venv.action_space.sample())
        done |= term | trunc
        if "episode" in info:            # the wrapper's statistics of the envs that ended
            stats += int(info["_episode"].sum())
            assert (info["episode"]["l"][info["_episode"]] >= 1).all()
    assert done.all() and stats >= 2
    venv.close()


def test_v1_passes_check_env_and_its_base_setting():
    check_env(AgentTaskEnvV1(), skip_render_check=True)
    check_env(AgentTaskEnvV1(drift_kind="rename", drift_at=[1, 2]), skip_render_check=True)
    env = gym.make("dyna/AgentTasks-v1").unwrapped
    assert (env.max_steps, env.silent_wrong_rate, env.destructive_rate,
            env.uninformative_errors, env.shared_trigger_fraction, env.catalog_tokens) == \
        (3 + 4, 0.3, 0.25, True, 0.25, 30)
    assert V1_BASE["step_slack"] == 4
    assert env.observation_space["last_result"].n == 5


def test_v1_info_uses_episode_index_so_record_episode_statistics_can_write_episode():
    env = RecordEpisodeStatistics(gym.make("dyna/AgentTasks-v1", step_slack=0))
    _, info = env.reset(seed=3)
    assert info["episode_index"] == 0 and "episode" not in info
    u = env.unwrapped
    for call in u.procedure(u.family):
        _, r, term, trunc, info = env.step(call)
    assert term and r == 1.0
    assert info["episode"]["r"] == 1.0 and info["episode"]["l"] == 3
    assert info["episode_index"] == 0


def test_step_slack_sets_the_budget():
    for slack in (13, 4, 2, 1, 0):
        assert AgentTaskEnv(length=3, step_slack=slack).max_steps == 3 + slack
    with pytest.raises(ConfigError, match="step_slack"):
        AgentTaskEnv(step_slack=-1)


# --------------------------------------------------------------------------- mechanics

def _wrong_value(env, k=None):
    t, v = env.procedure(env.family)[env.position if k is None else k]
    return t, (v + 1) % env.n_values


def test_a_silent_wrong_call_returns_ok_and_the_run_is_verified_a_failure():
    env = AgentTaskEnv(length=3, n_values=4, silent_wrong_rate=1.0, false_success_rate=0.0)
    env.reset(seed=5)
    proc = env.procedure(env.family)
    t, v = _wrong_value(env)
    _, r, term, _, info = env.step((t, v))
    assert env.last_result == RESULT_OK and info["silent"] is True and not term
    assert info["tool_output"] == f"ok: {env.tool_names[t]} done (step 1 of 3)"
    for call in proc[1:]:
        _, r, term, trunc, info = env.step(call)
    assert term and not trunc
    assert (r, info["verified_success"], info["self_assessed_success"]) == (0.0, False, False)
    # the same calls without the wrong value succeed
    env.reset()
    while env.family != info["family"]:
        env.reset()
    for call in env.procedure(env.family):
        _, r, term, _, info = env.step(call)
    assert (r, info["verified_success"], info["silent"]) == (1.0, True, False)


def test_silent_wrong_calls_happen_at_their_rate_and_never_for_a_wrong_tool():
    env = AgentTaskEnv(length=1, n_values=4, n_tools=4, silent_wrong_rate=0.3,
                       max_steps=1)
    silent = n = 0
    for e in range(4000):
        env.reset(seed=11) if e == 0 else env.reset()
        t, v = _wrong_value(env)
        _, _, _, _, info = env.step((t, v))
        silent += info["silent"]
        n += 1
    p = silent / n
    assert abs(p - 0.3) < 3 * np.sqrt(0.3 * 0.7 / n)
    env.reset()
    t, _ = env.procedure(env.family)[0]
    _, _, _, _, info = env.step(((t + 1) % env.n_tools, 0))
    assert info["silent"] is False and env.last_result == RESULT_WRONG_TOOL


def test_an_irreversible_call_ends_the_run_as_a_failure():
    env = AgentTaskEnv(length=3, destructive_rate=1.0, max_steps=20)
    env.reset(seed=2)
    f = env.family
    d = int(env.destructive[f])
    assert d in env.tools[f]
    # a wrong value for the destructive tool, at a step that uses it
    k = [i for i, (t, _) in enumerate(env.procedure(f)) if t == d][0]
    for call in env.procedure(f)[:k]:
        env.step(call)
    _, r, term, trunc, info = env.step(_wrong_value(env))
    assert (term, trunc, r, info["irreversible"], info["verified_success"]) == \
        (True, False, 0.0, True, False)
    assert "cannot be undone" in info["tool_output"]
    # a wrong call of another tool does not end the run
    env.reset()
    f = env.family
    other = next(t for t in range(env.n_tools) if t != env.destructive[f]
                 and t != env.procedure(f)[0][0])
    _, _, term, _, info = env.step((other, 0))
    assert (term, info["irreversible"]) == (False, False)


def test_uninformative_errors_say_only_failed():
    env = AgentTaskEnv(uninformative_errors=True, n_tools=4)
    env.reset(seed=1)
    t, v = env.procedure(env.family)[0]
    _, _, _, _, info = env.step(((t + 1) % 4, v))
    assert env.last_result == RESULT_FAILED
    assert info["tool_output"] == f"error: {env.tool_names[(t + 1) % 4]} failed"
    _, _, _, _, info = env.step((t, (v + 1) % env.n_values))
    assert env.last_result == RESULT_FAILED and info["tool_output"].endswith(" failed")
    # the incident still says what happened
    _, _, term, _, info = env.step((env.harmful_tool, 0))
    assert term and info["incident"] and "incident" in info["tool_output"]


def test_a_silent_failure_is_misjudged_at_factor_times_the_loud_rate():
    env = AgentTaskEnv(length=1, n_values=4, silent_wrong_rate=1.0, false_success_rate=0.2,
                       silent_judge_factor=2.0, max_steps=2)
    silent_judged = loud_judged = n = 0
    for e in range(6000):
        env.reset(seed=4) if e == 0 else env.reset()
        t, v = _wrong_value(env)
        if e % 2:   # silent: ok-looking wrong value, done
            _, _, term, _, info = env.step((t, v))
            assert term and not info["verified_success"]
            silent_judged += info["self_assessed_success"]
        else:       # loud: wrong tool twice, truncated
            wrong = ((t + 1) % env.n_tools, 0)
            env.step(wrong)
            _, _, _, trunc, info = env.step(wrong)
            assert trunc
            loud_judged += info["self_assessed_success"]
        n += 1
    half = n / 2
    for got, p in ((silent_judged / half, 0.4), (loud_judged / half, 0.2)):
        assert abs(got - p) < 3 * np.sqrt(p * (1 - p) / half)


def test_a_renamed_tool_errors_under_its_old_name_and_works_under_the_new_one():
    env = AgentTaskEnv(n_families=3, n_tools=4, length=3, drift_kind="rename",
                       drift_at=[1], max_steps=30)
    env.reset(seed=9)
    before = env.callable_tools()                    # read (and remembered) before the rename
    assert before == tuple(t for t in range(env.n_tools + 1) if t != env.harmful_tool)
    _, info = env.reset()
    (ev,) = info["drift"]
    assert ev["what"] == "rename"
    old, new = ev["old"], ev["new"]
    assert new == env.n_tools + 1                    # the first spare slot
    assert env.tool_names[new] == env.tool_names[old] + "_v2" == ev["new_name"]
    assert env.tool_index(ev["old_name"]) == old
    assert old not in env.callable_tools() and new in env.callable_tools()
    assert env.callable_tools() == tuple(sorted(set(before) - {old} | {new}))
    assert not (env.tools == old).any()              # every family's use of it moved
    f = ev["family"]
    while env.family != f:
        env.reset()
    proc = env.procedure(f)
    k = ev["step"]
    assert proc[k][0] == new
    for call in proc[:k]:
        env.step(call)
    _, _, term, _, info = env.step((old, proc[k][1]))
    assert not term and env.last_result == RESULT_WRONG_TOOL
    assert info["tool_output"] == f"error: {ev['old_name']}: no such tool"
    assert env.position == k
    env.step(proc[k])
    assert env.position == k + 1


def test_a_replaced_procedure_redraws_every_step():
    env = AgentTaskEnv(n_families=2, n_tools=6, n_values=4, length=4,
                       drift_kind="procedure", drift_at=[1])
    env.reset(seed=0)
    _, info = env.reset()
    (ev,) = info["drift"]
    f = ev["family"]
    assert ev["what"] == "procedure"
    assert [list(map(int, env.tools[f])), list(map(int, env.values[f]))] == ev["new"]
    assert ev["new"] != ev["old"]


def test_rename_needs_spare_slots_and_fixed_drift_times():
    with pytest.raises(ConfigError, match="drift_kind"):
        AgentTaskEnv(drift_kind="rename", drift_rate=0.1)
    with pytest.raises(ConfigError, match="drift_kind"):
        AgentTaskEnv(drift_kind="sideways")
    assert AgentTaskEnv(drift_kind="rename", drift_at=[5, 9]).action_space.nvec[0] == \
        6 + 1 + 2


def test_shared_triggers_make_a_match_return_another_familys_skill(tmp_path):
    env = AgentTaskEnv(n_families=8, n_triggers=4, shared_trigger_fraction=0.25)
    env.reset(seed=0)
    assert env.n_shared_triggers == 1 and env.n_shared_words == 2
    first = [env.vocabulary[env.triggers[f, 0]] for f in range(8)]
    word = first[0]
    sharers = sorted(env.families_of_word(word))
    assert len(sharers) >= 2 and sharers == [f for f in range(8) if first[f] == word]
    a, b = sharers[:2]
    lib = SkillLibrary(tmp_path / "skills")
    lib.add(Skill(f"fam-{a}", f"Procedure for family {a}.", "1. call `tool_a` with `val_0`",
                  triggers=env.trigger_words(a)[:2]))
    while env.family != b:
        env.reset()
    got = [m.name for m in lib.match(env.description)]
    assert got == [f"fam-{a}"]
    assert env.family_of_words(env.description.split()) == b
    # without sharing, no family's trigger is another's
    env0 = AgentTaskEnv(n_families=8, n_triggers=4)
    env0.reset(seed=0)
    assert all(len(env0.families_of_word(w)) == 1 for f in range(8)
               for w in env0.trigger_words(f))


def test_the_catalog_cost_equals_its_formula():
    env = AgentTaskEnv(catalog_tokens=30, base_tokens=200, output_tokens=40,
                       error_tokens=60, tokens_per_entry=50)
    env.reset(seed=1, options={"stored_entries": 12, "context_entries": 2})
    assert env.catalog_cost(12) == 360
    call = env.procedure(env.family)[0]
    _, _, _, _, info = env.step(call)
    assert info["tokens"] == {"base": 200, "context": 100, "output": 40, "catalog": 360,
                              "total": 200 + 100 + 40 + 360}
    _, _, _, _, info = env.step(env.procedure(env.family)[1])
    assert info["tokens"]["catalog"] == 0 and info["tokens"]["total"] == 340
    assert info["episode_tokens"] == 700 + 340
    # declared after reset, as the loop agents do
    env.reset()
    env.declare_context(1, 0, stored_entries=5)
    _, _, _, _, info = env.step(env.procedure(env.family)[0])
    assert info["tokens"]["catalog"] == 150


def test_planted_following_frequency_within_3_sem_over_10000_draws():
    env = AgentTaskEnv(planted_follow_rate=0.1, n_tools=2, length=1, max_steps=10)
    draws = []
    for e in range(1000):
        env.reset(seed=8) if e == 0 else env.reset()
        for _ in range(10):
            draws.append(env.falls_for_planted())
            t, v = env.procedure(env.family)[0]
            _, _, term, trunc, _ = env.step(((t + 1) % 2, v))
            if term or trunc:
                break
    draws = np.array(draws, dtype=float)
    assert draws.size == 10_000
    assert AgentTaskEnv().falls_for_planted() is False          # v0: never
    sem = np.sqrt(0.1 * 0.9 / draws.size)
    assert abs(draws.mean() - 0.1) < 3 * sem


def test_v1_draws_do_not_depend_on_the_budget_or_on_the_agent():
    a = AgentTaskEnv(silent_wrong_rate=0.5, step_slack=1)
    b = AgentTaskEnv(silent_wrong_rate=0.5, step_slack=13)
    a.reset(seed=3)
    b.reset(seed=3)
    for e in range(20):
        if e:
            a.reset()
            b.reset()
        n = a.max_steps
        np.testing.assert_array_equal(a._silent_u, b._silent_u[:n])
        # the agent's calls in b do not move the next episode's draws
        b.step((0, 0))
    # and v1's streams leave v0's tasks alone
    c = AgentTaskEnv(silent_wrong_rate=0.5, destructive_rate=0.5, planted_follow_rate=0.3)
    d = AgentTaskEnv()
    c.reset(seed=4)
    d.reset(seed=4)
    for _ in range(50):
        assert (c.family, c.description) == (d.family, d.description)
        c.reset()
        d.reset()


def test_a_lessons_key_names_its_family_even_when_it_is_part_of_the_triggers():
    env = AgentTaskEnv(n_families=8, n_triggers=4, shared_trigger_fraction=0.25)
    env.reset(seed=0)
    for f in range(8):
        words = env.trigger_words(f)
        assert env.family_of_key(words[:2]) == f          # one shared word + one own word
        assert env.family_of_key(words) == f
        assert env.family_of_words(words[:2]) is None     # needs every trigger
    shared = env.trigger_words(0)[0]
    assert env.family_of_key([shared]) is None             # ambiguous: several families
    assert env.family_of_key(["nosuchword"]) is None and env.family_of_key([]) is None
    v0 = AgentTaskEnv()
    v0.reset(seed=0)
    for f in range(v0.n_families):
        assert v0.family_of_key(v0.trigger_words(f)) == v0.family_of_words(
            v0.trigger_words(f)) == f


def test_the_audit_counts_no_right_lesson_as_poisoned_under_v1():
    from dyna.agents.loop_agents import run_loop_agent
    kw = dict(n_families=4, n_tools=3, n_values=2, length=2, untrusted_tools=0,
              n_triggers=4, shared_trigger_fraction=0.25, step_slack=4)
    out = run_loop_agent("skill_loop", env_kwargs=kw, episodes=300, seed=0,
                         params={"oracle_follows_always": False})
    assert out["library_size"][-1] >= 1
    assert out["poisoned"][-1] < out["library_size"][-1]


def test_a_replaced_procedure_always_differs_and_keeps_a_destructive_tool():
    for seed in range(60):
        env = AgentTaskEnv(n_families=2, n_tools=3, n_values=2, length=2,
                           drift_kind=["procedure", "tool"], drift_at=[1, 2, 3])
        env.reset(seed=seed)
        for _ in range(3):
            env.reset()
        for ev in env.drift_log:
            if ev["what"] == "procedure":
                assert ev["new"] != ev["old"]
        for f in range(2):
            assert env.destructive[f] in env.tools[f]


def test_step_slack_and_an_explicit_budget_are_never_both_taken():
    with pytest.raises(ConfigError) as e:
        AgentTaskEnv(max_steps=30, step_slack=2)
    assert e.value.field == "max_steps"
    assert AgentTaskEnvV1(max_steps=30).max_steps == 30        # replaces the base slack
    assert AgentTaskEnvV1().max_steps == 3 + 4
    assert AgentTaskEnv().max_steps == 20                      # v0's default


def test_a_spare_slot_is_untrusted_until_a_rename_gives_it_the_old_tools_trust():
    env = AgentTaskEnv(n_tools=4, untrusted_tools=1, drift_kind="rename", drift_at=[1])
    env.reset(seed=0)
    assert env.tool_trusted[env.n_tools + 1] is False
    env.reset()
    (ev,) = env.drift_log
    assert env.tool_trusted[ev["new"]] == env.tool_trusted[ev["old"]]
