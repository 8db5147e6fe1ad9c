"""dyna/AgentTasks-v2: presets, decoy values, the chosen drift family, paraphrases and
retrials, each pinned on a small seeded world; Gymnasium's checkers and wrappers."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import RecordEpisodeStatistics

import envs
from gym_episodes import play_recorded
from dyna.errors import ConfigError
from envs.agent_tasks_v2 import PRESETS, AgentTaskEnvV2


def _play(env, calls):
    """Step ``calls`` until the episode ends; the last step's (reward, terminated,
    truncated, info)."""
    for c in calls:
        _, r, term, trunc, info = env.step(c)
        if term or trunc:
            return r, term, trunc, info
    return r, term, trunc, info


def _decoy_world(**kw):
    env = AgentTaskEnvV2(decoy_steps=3, n_families=1, **kw)
    env.reset(seed=5)
    return env


def test_the_base_preset_is_the_default_and_keywords_override_it():
    env = AgentTaskEnvV2()
    assert (env.n_families, env.n_tools, env.n_values, env.length) == (8, 5, 3, 3)
    assert env.max_steps == 3 + 9 and env.uninformative_errors is False
    assert env.decoy_steps.tolist() == [1] * 8 and env.drift_family == 0
    env = AgentTaskEnvV2(n_tools=3, max_steps=5, drift_family=None)
    assert env.n_tools == 3 and env.max_steps == 5 and env.drift_family is None
    assert PRESETS["base"]["n_tools"] == 5   # the preset itself is not changed


@pytest.mark.parametrize("kw, field", [({"preset": "nope"}, "preset"),
                                       ({"decoy_steps": 4}, "decoy_steps"),
                                       ({"drift_family": 8}, "drift_family"),
                                       ({"n_paraphrases": 0}, "n_paraphrases"),
                                       ({"max_retrials": -1}, "max_retrials"),
                                       ({"decoy_steps": 1, "n_values": 1}, "decoy_steps")])
def test_bad_keywords_name_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        AgentTaskEnvV2(**kw)
    assert e.value.field == field


def test_a_decoy_value_looks_right_and_fails_the_run():
    env = _decoy_world()
    proc = env.procedure(0)
    decoys = [env.decoy_value(0, k) for k in range(3)]
    assert all(d >= 0 and d != v for d, (_, v) in zip(decoys, proc))
    calls = [(t, d) for (t, _), d in zip(proc, decoys)]
    r, term, trunc, info = _play(env, calls)
    # every call answered ok and the procedure finished, but the run failed
    assert term and not trunc and r == 0.0 and info["position"] == 3
    assert info["decoy"] and not info["verified_success"]
    env.reset()
    r, term, _, info = _play(env, list(proc))
    assert r == 1.0 and info["verified_success"] and not info["decoy"]


def test_a_third_value_errors_next_to_the_decoy():
    env = _decoy_world()
    (t, v) = env.procedure(0)[0]
    d = env.decoy_value(0, 0)
    other = ({0, 1, 2} - {v, d}).pop()
    env.step((t, other))
    assert env.last_result == 3 and env.position == 0   # right tool, wrong value


def test_false_success_judges_a_decoy_run_at_the_silent_factor():
    # the judge's uniform decides: rate 0.3, factor 2 -> a decoy run is judged a success
    # when u < 0.6; a loud failure when u < 0.3
    verdicts = []
    for rate in (0.0, 0.3):
        env = _decoy_world(false_success_rate=rate, silent_judge_factor=2.0)
        proc = env.procedure(0)
        got = []
        for _ in range(200):
            calls = [(t, env.decoy_value(0, k)) for k, (t, _) in enumerate(proc)]
            got.append(_play(env, calls)[3]["self_assessed_success"])
            env.reset()
        verdicts.append(np.mean(got))
    assert verdicts[0] == 0.0
    assert 0.5 < verdicts[1] < 0.7


@pytest.mark.parametrize("kind", ["value", "tool", "procedure"])
def test_a_drift_hits_the_chosen_family_and_its_old_calls_answer_ok_and_fail(kind):
    env = AgentTaskEnvV2(decoy_steps=0, drift_at=[2], drift_kind=kind, drift_family=3,
                         zipf_s=0.0, n_families=4)
    env.reset(seed=11)
    before = env.procedure(3)
    for _ in range(2):
        _, info = env.reset()
    (event,) = info["drift"]
    assert event["family"] == 3 and event["what"] == kind
    after = env.procedure(3)
    changed = [k for k in range(3) if after[k] != before[k]]
    assert changed and (kind == "procedure" or changed == [event["step"]])
    while info["family"] != 3:    # a task of the drifted family
        env.step((env.harmful_tool, 0))
        _, info = env.reset()
    # the old procedure, call for call: every call answers ok, and the run fails
    r, term, _, last = _play(env, list(before))
    assert term and r == 0.0 and last["position"] == 3 and env._loud_errors == 0
    _, info = env.reset()
    while info["family"] != 3:
        env.step((env.harmful_tool, 0))
        _, info = env.reset()
    assert _play(env, list(after))[0] == 1.0


def test_a_renamed_tool_errors_under_its_old_name():
    env = AgentTaskEnvV2(decoy_steps=0, drift_at=[1], drift_kind="rename", drift_family=0,
                         n_families=1)
    env.reset(seed=4)
    before = env.procedure(0)
    _, info = env.reset()
    (event,) = info["drift"]
    k = event["step"]
    for call in before[:k]:
        env.step(call)
    env.step(before[k])
    assert env.last_result == 2 and env.position == k   # "no such tool"


def test_paraphrases_keep_the_core_word_and_draw_a_wording_per_task():
    env = AgentTaskEnvV2(n_paraphrases=4)
    env.reset(seed=2)
    w = env.wordings
    assert w.shape == (8, 4, 3)
    assert (w[:, :, 0] == w[:, :1, 0]).all()          # the core word in every wording
    assert len(np.unique(w[:, :, 1:])) == 8 * 4 * 2    # every other word its own
    seen = {}
    for _ in range(300):
        _, info = env.reset()
        words = info["description"].split()[:3]
        f = info["family"]
        assert env.family_of_words(words) == f
        assert env.family_of_key(words[:2]) == f
        seen.setdefault(f, set()).add(tuple(words))
    assert len(seen[0]) == 4
    assert env.observation_space["description"].nvec[0] == env.vocab_size


def test_the_kth_fresh_task_is_the_same_with_and_without_retrials():
    a, b = AgentTaskEnvV2(max_retrials=2), AgentTaskEnvV2(max_retrials=0)
    fresh = {}
    for env in (a, b):
        env.reset(seed=9)
        tasks = []
        for _ in range(60):
            _, info = env.reset()        # every run abandoned: a failure
            if info["retrial"] == 0:
                tasks.append((info["task_instance"], info["family"], info["description"]))
        fresh[id(env)] = tasks
    n = min(len(fresh[id(a)]), len(fresh[id(b)]))
    assert fresh[id(a)][:n] == fresh[id(b)][:n]


def test_a_failed_task_is_presented_again_up_to_max_retrials():
    env = AgentTaskEnvV2(max_retrials=2, decoy_steps=0)
    env.reset(seed=4)
    infos = []
    for _ in range(4):
        _, info = env.reset()
        infos.append(info)
        env.step((env.harmful_tool, 0))   # an incident: the run fails
    assert [i["retrial"] for i in infos] == [1, 2, 0, 1]   # the seed's reset was abandoned
    assert len({i["description"] for i in infos[:2]}) == 1
    assert infos[2]["task_instance"] == infos[1]["task_instance"] + 1
    # a success is not presented again
    _, info = env.reset()
    _play(env, env.procedure(env.family))
    _, nxt = env.reset()
    assert nxt["retrial"] == 0 and nxt["task_instance"] == info["task_instance"] + 1


def test_gymnasium_checkers_and_wrappers():
    env = AgentTaskEnvV2(n_paraphrases=2, max_retrials=1)
    check_env(env, skip_render_check=True)
    # gymnasium calls every id below the highest version "out of date"; v2 stays registered
    # for the experiments that name it
    with pytest.warns(DeprecationWarning, match="AgentTasks-v2 is out of date"):
        made = gym.make("dyna/AgentTasks-v2", max_episode_steps=50)
    wrapped = RecordEpisodeStatistics(made)
    play_recorded(wrapped)
    with pytest.warns(DeprecationWarning, match="AgentTasks-v2 is out of date"):
        vec = gym.make_vec("dyna/AgentTasks-v2", num_envs=2, vectorization_mode="sync")
    obs, _ = vec.reset(seed=1)
    assert obs["description"].shape == (2, 5)
    vec.close()


def test_make_agent_task_env_resolves_the_id():
    assert type(envs.make_agent_task_env({"id": "dyna/AgentTasks-v2"})) is AgentTaskEnvV2
    with pytest.raises(ConfigError) as e:
        envs.make_agent_task_env({"id": "dyna/AgentTasks-v9"})
    assert e.value.field == "env.id"
    with pytest.raises(ConfigError) as e:
        envs.make_agent_task_env({"id": "dyna/AgentTasks-v2", "colour": 1})
    assert e.value.field == "env"


def test_per_family_decoys_and_the_instance_rate():
    env = AgentTaskEnvV2(n_families=3, decoy_steps=[0, 1, 3], decoy_rate=[1.0, 0.0, 0.5],
                         zipf_s=0.0)
    env.reset(seed=8)
    assert [int(env._decoy_at[f].sum()) for f in range(3)] == [0, 1, 3]
    on = {0: [], 1: [], 2: []}
    for _ in range(600):
        _, info = env.reset()
        f = info["family"]
        on[f].append(any(env.decoy_value(f, k) >= 0 for k in range(3)))
    assert not any(on[0]) and not any(on[1])        # none to turn on / rate 0
    assert 0.4 < np.mean(on[2]) < 0.6                 # rate 0.5
    with pytest.raises(ConfigError) as e:
        AgentTaskEnvV2(n_families=3, decoy_steps=[0, 1])
    assert e.value.field == "decoy_steps"
    with pytest.raises(ConfigError) as e:
        AgentTaskEnvV2(n_families=3, decoy_rate=[0.5, 2.0, 0.1])
    assert e.value.field == "decoy_rate[1]"


def test_arrival_weights_set_the_arrival_probabilities():
    env = AgentTaskEnvV2(n_families=3, arrival_weights=[2, 1, 1])
    assert env.arrival_p.tolist() == [0.5, 0.25, 0.25]
    env.reset(seed=1)
    fams = [env.reset()[1]["family"] for _ in range(4000)]
    assert abs(np.mean(np.array(fams) == 0) - 0.5) < 0.03
    with pytest.raises(ConfigError) as e:
        AgentTaskEnvV2(n_families=3, arrival_weights=[1, 0, 1])
    assert e.value.field == "arrival_weights"


def test_the_hint_names_every_tool_and_the_values_of_steps_without_a_decoy():
    env = AgentTaskEnvV2(hint=True, decoy_steps=1)
    env.reset(seed=3)
    for _ in range(20):
        _, info = env.reset()
        f = info["family"]
        proc = env.procedure(f)
        assert [t for t, _ in info["hint"]] == [t for t, _ in proc]
        assert [v for _, v in info["hint"]] == [
            -1 if env.decoy_value(f, k) >= 0 else proc[k][1] for k in range(3)]
    assert "hint" not in AgentTaskEnvV2().reset(seed=3)[1]


def test_stepping_outside_an_episode_is_a_config_error():
    env = AgentTaskEnvV2()
    with pytest.raises(ConfigError):
        env.step((0, 0))                      # before any reset
    env.reset(seed=0)
    env.step((env.harmful_tool, 0))           # an incident ends the episode
    with pytest.raises(ConfigError) as e:
        env.step((0, 0))
    assert e.value.field == "step"


def test_with_retrials_an_attempt_meets_the_same_draws_whatever_came_before():
    kw = dict(max_retrials=2, false_success_rate=0.5, injection_rate=0.3,
              silent_wrong_rate=0.2)
    seen = []
    for fail_first in (True, False):
        env = AgentTaskEnvV2(**kw)
        env.reset(seed=12)
        draws = {}
        for _ in range(12):
            _, info = env.reset()
            draws[(info["task_instance"], info["retrial"])] = (
                env._judge_u, env._inject_u.tolist(), env._silent_u.tolist())
            if fail_first or info["task_instance"] % 2:
                env.step((env.harmful_tool, 0))          # fail: a retrial follows
            else:
                _play(env, list(env.procedure(env.family)))   # may succeed
        seen.append(draws)
    common = set(seen[0]) & set(seen[1])
    assert len(common) >= 3
    assert all(seen[0][k] == seen[1][k] for k in common)
