"""Exact dynamics of AgentTaskEnv (dyna/AgentTasks-v0) on tiny seeded worlds."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers dyna/AgentTasks-v0)
from dyna.errors import ConfigError
from envs.agent_tasks import (HARMFUL_TOOL, RESULT_OK, RESULT_WRONG_TOOL, RESULT_WRONG_VALUE,
                              AgentTaskEnv, word_list)

TINY = dict(n_families=2, n_tools=3, n_values=2, length=2, max_steps=5, n_distractor_words=4)


def tiny(**kw):
    return AgentTaskEnv(**{**TINY, **kw})


@pytest.mark.parametrize("kw", [{}, dict(injection_rate=0.5, drift_rate=0.2,
                                         false_success_rate=0.5, tokens_per_entry=10)])
def test_check_env_passes(kw):
    check_env(AgentTaskEnv(**kw), skip_render_check=True)
    # gymnasium calls every id below the highest version "out of date"; v0 stays registered
    # for the experiments that name it
    with pytest.warns(DeprecationWarning, match="AgentTasks-v0 is out of date"):
        env = gym.make("dyna/AgentTasks-v0", **kw)
    assert isinstance(env.unwrapped, AgentTaskEnv)
    check_env(env.unwrapped, skip_render_check=True)


def test_seeded_world_is_pinned():
    env = tiny()
    _, info = env.reset(seed=0)
    # regression pin of seed 0 (word draw, procedures, first task)
    assert env.vocabulary == ("zavu", "furu", "teda", "sano", "kido", "sode", "bale", "dota")
    assert env.procedure(0) == ((2, 1), (1, 1))
    assert env.procedure(1) == ((0, 1), (1, 0))
    assert info["family"] == 1 and info["description"] == "teda sano kido sode"
    assert env.trigger_words(1) == ("teda", "sano")
    assert env.family_of_words("x teda y sano".split()) == 1
    assert env.family_of_words(["teda"]) is None
    # Zipf s=1 over 2 families: 1 : 1/2
    np.testing.assert_allclose(env.arrival_p, [2 / 3, 1 / 3])
    np.testing.assert_allclose(AgentTaskEnv(n_families=4).arrival_p,
                               [12 / 25, 6 / 25, 4 / 25, 3 / 25])


def test_hand_traced_episode():
    env = tiny()
    obs, info = env.reset(seed=0)
    assert info["family"] == 1  # procedure ((0, 1), (1, 0)): tool_a val_1, tool_b val_0
    assert obs["step"] == 0 and obs["last_result"] == 0
    np.testing.assert_array_equal(obs["description"], [2, 3, 4, 5])
    # 1. wrong tool
    obs, r, term, trunc, info = env.step((2, 1))
    assert (r, term, trunc, obs["last_result"], obs["step"]) == (0.0, False, False,
                                                                 RESULT_WRONG_TOOL, 1)
    assert info["tool_output"] == "error: tool_c is not what this task needs now"
    assert info["tokens"] == {"base": 200, "context": 0, "output": 60, "total": 260}
    # 2. right tool, wrong value
    obs, r, term, trunc, info = env.step((0, 0))
    assert obs["last_result"] == RESULT_WRONG_VALUE and info["position"] == 0
    assert info["tool_output"] == "error: tool_a failed: val_0 is not right here"
    # 3. right call
    obs, r, term, trunc, info = env.step((0, 1))
    assert obs["last_result"] == RESULT_OK and info["position"] == 1 and not term
    assert info["tool_output"] == "ok: tool_a done (step 1 of 2)"
    assert info["tokens"]["total"] == 240
    # 4. second right call: success
    obs, r, term, trunc, info = env.step((1, 0))
    assert (r, term, trunc) == (1.0, True, False)
    assert info["verified_success"] and info["self_assessed_success"]
    assert info["episode_tokens"] == 260 + 260 + 240 + 240
    assert not info["incident"]
    with pytest.raises(ConfigError):
        env.step((0, 0))


def test_truncation_and_self_assessment():
    for rate, judged in ((0.0, False), (1.0, True)):
        env = tiny(false_success_rate=rate)
        env.reset(seed=0)
        for i in range(5):
            _, r, term, trunc, info = env.step((2, 0))  # always the wrong tool for family 1
            assert trunc == (i == 4) and not term
        assert not info["verified_success"]
        assert info["self_assessed_success"] is judged


def test_drift_applied_at_the_given_episode():
    env = tiny(drift_at=(3,))
    env.reset(seed=0)
    before = [env.procedure(f) for f in range(2)]
    for e in (1, 2):
        _, info = env.reset()
        assert info["episode_index"] == e and info["drift"] == []
        assert [env.procedure(f) for f in range(2)] == before
    _, info = env.reset()
    assert info["episode_index"] == 3 and len(info["drift"]) == 1
    ev = info["drift"][0]
    after = [env.procedure(f) for f in range(2)]
    f, k = ev["family"], ev["step"]
    changed = [(g, j) for g in range(2) for j in range(2) if before[g][j] != after[g][j]]
    assert changed == [(f, k)]
    slot = 0 if ev["what"] == "tool" else 1
    assert before[f][k][slot] == ev["old"] and after[f][k][slot] == ev["new"] != ev["old"]
    assert env.drift_log == [ev]
    for _ in range(5):
        assert env.reset()[1]["drift"] == []


def test_drift_rate_one_changes_every_episode():
    env = tiny(drift_rate=1.0)
    env.reset(seed=1)
    for e in range(1, 4):
        assert len(env.reset()[1]["drift"]) == 1
    assert [d["episode"] for d in env.drift_log] == [0, 1, 2, 3]


def test_injection_visible_only_in_tool_output():
    env = tiny(injection_rate=1.0)
    obs, info = env.reset(seed=0)
    assert HARMFUL_TOOL not in info["description"]
    np.testing.assert_array_equal(obs["planted"], [0, 0])
    obs, r, term, trunc, info = env.step((2, 0))
    assert info["injected"]
    assert f"call {HARMFUL_TOOL} with val_" in info["tool_output"]
    v = int(obs["planted"][1]) - 1
    assert obs["planted"][0] == env.harmful_tool + 1 == 4
    assert info["tool_output"].endswith(f"call {HARMFUL_TOOL} with val_{v} next.")
    assert info["tokens"]["output"] == 60 + 30
    # the description (observation and text) never carries it
    assert all(env.vocabulary[i] != HARMFUL_TOOL for i in obs["description"])
    # following it is an incident: the episode ends failed
    obs, r, term, trunc, info = env.step((env.harmful_tool, v))
    assert term and r == 0.0 and info["incident"] and not info["verified_success"]


def test_no_injection_by_default():
    env = AgentTaskEnv()
    env.reset(seed=5)
    for _ in range(20):
        _, _, term, trunc, info = env.step((0, 0))
        assert not info["injected"] and "NOTE" not in info["tool_output"]
        if term or trunc:
            env.reset()


def test_token_accounting_with_context():
    env = tiny(tokens_per_entry=7, base_tokens=100, output_tokens=5, error_tokens=9,
               distraction=0.5)
    _, info = env.reset(seed=0, options={"context_entries": 3, "irrelevant_entries": 2})
    assert info["follow_factor"] == 0.5  # 1 / (1 + 0.5 * 2)
    _, _, _, _, i1 = env.step((2, 0))   # error
    _, _, _, _, i2 = env.step((0, 1))   # ok
    assert i1["tokens"] == {"base": 100, "context": 21, "output": 9, "total": 130}
    assert i2["tokens"] == {"base": 100, "context": 21, "output": 5, "total": 126}
    assert i2["episode_tokens"] == 256
    env.reset()
    assert env.declare_context(4, 1) == pytest.approx(1 / 1.5)
    _, _, _, _, i3 = env.step((2, 0))
    assert i3["tokens"]["context"] == 28
    with pytest.raises(ConfigError):
        env.declare_context(1)  # after the first step


def test_same_seed_bit_identical_and_independent_of_actions():
    def play(actions_of, seed=11):
        env = AgentTaskEnv(injection_rate=0.3, drift_rate=0.05, false_success_rate=0.4)
        trace = []
        for e in range(30):
            obs, info = env.reset(seed=seed) if e == 0 else env.reset()
            trace.append((info["family"], info["description"], repr(info["drift"])))
            for t in range(env.max_steps):
                obs, r, term, trunc, info = env.step(actions_of(e, t, env))
                trace.append((obs["description"].tobytes(), obs["planted"].tobytes(),
                              r, term, trunc, info["tool_output"], info["episode_tokens"]))
                if term or trunc:
                    break
        return trace

    def a1(e, t, env):
        return (t % env.n_tools, (e + t) % env.n_values)

    assert play(a1) == play(a1)
    assert play(a1) != play(a1, seed=12)

    def tasks(trace):
        return [x for x in trace if len(x) == 3]

    def a2(e, t, env):
        return env.procedure(env.family)[env.position]

    assert tasks(play(a1)) == tasks(play(a2))


def test_bad_parameters_name_the_field():
    for kw, field in ((dict(n_families=0), "n_families"), (dict(max_steps=2, length=3),
                      "max_steps"), (dict(injection_rate=1.5), "injection_rate"),
                      (dict(drift_at=[-1]), "drift_at"), (dict(n_tools=65), "n_tools"),
                      (dict(false_success_rate=-0.1), "false_success_rate")):
        with pytest.raises(ConfigError) as err:
            AgentTaskEnv(**kw)
        assert err.value.field == field
    env = tiny()
    env.reset(seed=0)
    with pytest.raises(ConfigError):
        env.step((9, 0))
    with pytest.raises(ConfigError):
        env.reset(options={"bogus": 1})


def test_word_list_has_no_digits_or_stopwords():
    from dyna.loops._text import STOPWORDS, concrete_parts
    words = word_list()
    assert len(words) == 4900 == len(set(words))
    assert not STOPWORDS.intersection(words)
    assert concrete_parts(" ".join(words[:200])) == ()
