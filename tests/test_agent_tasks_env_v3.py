"""dyna/AgentTasks-v3: the number of wordings changes the task texts and nothing else."""

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import RecordEpisodeStatistics

import envs
from gym_episodes import play_recorded
from envs.agent_tasks_v2 import AgentTaskEnvV2
from envs.agent_tasks_v3 import AgentTaskEnvV3

VOLUME = {"n_families": 150, "zipf_s": 1.1}   # the volume sweep's world


def _world(cls, n, seed=5):
    env = cls(n_paraphrases=n, **VOLUME)
    env.reset(seed=seed)
    return env


def _same_world(a, b) -> bool:
    n = a.vocab_size - a.n_paraphrase_words
    return (a.vocabulary[:n] == b.vocabulary[:n] and (a.triggers == b.triggers).all()
            and (a.tools == b.tools).all() and (a.values == b.values).all()
            and (a.destructive == b.destructive).all())


def _stream(env, n_tasks=300):
    """(family, distractor words, first trigger word) of the next ``n_tasks`` tasks, each
    run abandoned at once."""
    out = []
    for _ in range(n_tasks):
        _, info = env.reset()
        words = info["description"].split()
        out.append((info["family"], words[0], tuple(words[env.n_triggers:])))
    return out


def test_the_world_is_the_same_at_every_number_of_wordings():
    worlds = [_world(AgentTaskEnvV3, n) for n in (1, 2, 4, 8)]
    assert [w.vocab_size for w in worlds] == [490, 790, 1390, 2590]
    assert all(_same_world(worlds[0], w) for w in worlds[1:])
    streams = [_stream(w) for w in worlds]
    assert all(s == streams[0] for s in streams[1:])   # families, core words, distractors


def test_in_v2_the_number_of_wordings_moves_the_world():
    worlds = [_world(AgentTaskEnvV2, n) for n in (1, 2, 4, 8)]
    assert [_same_world(worlds[0], w) for w in worlds[1:]] == [False, False, False]


def test_at_one_wording_v3_is_v2_draw_for_draw():
    a, b = _world(AgentTaskEnvV2, 1), _world(AgentTaskEnvV3, 1)
    assert a.vocabulary == b.vocabulary and _same_world(a, b)
    assert _stream(a) == _stream(b)


def test_the_extra_words_follow_every_other_word_and_are_new():
    env = _world(AgentTaskEnvV3, 4)
    w = env.wordings
    assert w.shape == (150, 4, 3)
    assert (w[:, :, 0] == w[:, :1, 0]).all()          # the core word in every wording
    extra = w[:, 1:, 1:]
    assert sorted(extra.ravel().tolist()) == list(range(490, 1390))
    assert len(set(env.vocabulary)) == len(env.vocabulary) == env.vocab_size
    seen = {}
    for _ in range(400):
        _, info = env.reset()
        words = info["description"].split()[:3]
        assert env.family_of_words(words) == info["family"]
        seen.setdefault(info["family"], set()).add(tuple(words))
    assert len(seen[0]) == 4


def test_gymnasium_checkers_and_wrappers():
    check_env(AgentTaskEnvV3(n_paraphrases=2, max_retrials=1), skip_render_check=True)
    wrapped = RecordEpisodeStatistics(gym.make("dyna/AgentTasks-v3", max_episode_steps=50))
    play_recorded(wrapped)
    vec = gym.make_vec("dyna/AgentTasks-v3", num_envs=2, vectorization_mode="sync")
    obs, _ = vec.reset(seed=1)
    assert obs["description"].shape == (2, 5)
    vec.close()
    assert type(envs.make_agent_task_env({"id": "dyna/AgentTasks-v3"})) is AgentTaskEnvV3
    assert np.array_equal(AgentTaskEnvV3().observation_space["description"].nvec,
                          AgentTaskEnvV2().observation_space["description"].nvec)
