"""Every registered dyna environment follows one rule for a step with no episode running
(:mod:`envs.episode`): before the first ``reset`` and after the step that ended the episode
(``terminated`` or ``truncated``), ``step`` raises :class:`envs.episode.EpisodeOverError`,
a :class:`dyna.errors.ConfigError` and a :class:`gymnasium.error.ResetNeeded`, and changes
nothing; ``reset`` starts the next episode."""

import pickle

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded

import envs
from dyna.errors import ConfigError
from envs.episode import EpisodeOverError

DYNA_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("dyna/"))
MESSAGE = "no episode is running (it ended, or reset() was never called): call reset()"
#: Steps after which a walk gives up (no registered env needs nearly as many).
MAX_WALK = 200_000


def test_every_dyna_env_is_walked():
    assert envs.MAZES  # the package registers its envs on import
    assert DYNA_IDS == ["dyna/AgentTasks-v0", "dyna/AgentTasks-v1", "dyna/AgentTasks-v2",
                        "dyna/AgentTasks-v3", "dyna/AsciiMaze-v0", "dyna/BlockingMaze-v0",
                        "dyna/DynaMaze-v0", "dyna/Escalation-v0", "dyna/ShortcutMaze-v0"]


def _walk_to_the_end(env, seed: int) -> tuple[int, bool, bool]:
    """Reset with ``seed`` and take seeded random actions until the episode ends; returns
    the steps taken and the last step's ``terminated`` and ``truncated``."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    for n in range(1, MAX_WALK + 1):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            return n, terminated, truncated
    raise AssertionError(f"no end within {MAX_WALK} steps")


def _refused(env, action) -> EpisodeOverError:
    with pytest.raises(EpisodeOverError) as caught:
        env.step(action)
    return caught.value


@pytest.mark.parametrize("env_id", DYNA_IDS)
def test_a_step_with_no_episode_running_raises_episode_over(env_id):
    env = gym.make(env_id).unwrapped
    action = env.action_space.sample()
    err = _refused(env, action)                       # before the first reset
    assert isinstance(err, ConfigError) and isinstance(err, ResetNeeded)
    assert err.field == "step" and err.reason == MESSAGE
    assert str(err).endswith(": " + MESSAGE)
    assert pickle.loads(pickle.dumps(err)).reason == MESSAGE

    steps, terminated, truncated = _walk_to_the_end(env, seed=0)
    assert steps >= 1 and (terminated or truncated)
    for _ in range(3):                                # every further step, the same
        assert _refused(env, env.action_space.sample()).reason == MESSAGE
    again = _walk_to_the_end(env, seed=0)             # reset starts the next episode
    assert again[0] >= 1 and (again[1] or again[2])
    env.close()


@pytest.mark.parametrize("env_id", DYNA_IDS)
def test_the_refusal_reaches_the_caller_through_gymnasium_make(env_id):
    """``gym.make`` wraps the env in ``OrderEnforcing`` and ``PassiveEnvChecker``: before
    reset the wrapper's own ResetNeeded, after the end the env's EpisodeOverError."""
    env = gym.make(env_id)
    with pytest.raises(ResetNeeded):
        env.step(env.action_space.sample())
    _walk_to_the_end(env, seed=1)
    assert _refused(env, env.action_space.sample()).field == "step"
    env.close()


def test_the_refused_step_changes_nothing():
    env = gym.make("dyna/AgentTasks-v2").unwrapped
    _walk_to_the_end(env, seed=2)
    before = (env.steps, env.episode_tokens, env.position, env.family)
    _refused(env, (0, 0))
    assert (env.steps, env.episode_tokens, env.position, env.family) == before

    maze = gym.make("dyna/DynaMaze-v0").unwrapped
    _walk_to_the_end(maze, seed=2)
    goal, clock = maze.s, maze.total_steps
    _refused(maze, 0)
    assert (maze.s, maze.total_steps) == (goal, clock)
    assert maze.s == maze.goals[0][0] * maze.cols + maze.goals[0][1]

    esc = gym.make("dyna/Escalation-v0").unwrapped
    steps, terminated, truncated = _walk_to_the_end(esc, seed=2)
    assert (steps, terminated, truncated) == (1000, True, False)
    _refused(esc, 0)
    assert esc._t == 1000


def test_the_video_extra_installs_what_record_video_needs():
    """Gymnasium's ``RecordVideo`` imports moviepy, which none of dyna's dependencies
    brings: the ``video`` extra does, and the Dyna-core page says how to install it."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with open(root / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    assert project["optional-dependencies"]["video"] == ["moviepy>=1.0"]
    assert not any(dep.startswith("moviepy") for dep in project["dependencies"])
    assert 'pip install -e ".[video]"' in (root / "docs" / "dyna-core.md").read_text()
