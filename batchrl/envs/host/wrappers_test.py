import gymnasium as gym
import numpy as np
import pytest

from batchrl.envs.host import wrappers
from batchrl.testing import mock


def test_apply_duration_truncates_at_exactly_duration():
    env = wrappers.apply(mock.CountingEnv(duration=100), duration=10)
    assert isinstance(env, gym.wrappers.TimeLimit)
    env.reset(seed=0)
    for step in range(1, 11):
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert obs[0] == step
        assert not terminated
        assert truncated == (step == 10)


def test_action_repeat_sums_rewards_and_stops_at_episode_end():
    inner = mock.CountingEnv(duration=3)
    env = wrappers.ActionRepeat(inner, 2)
    env.reset(seed=0)
    action = np.zeros(2, np.float32)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (2, 1 + 2, False, False)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert (obs[0], reward, terminated, truncated) == (3, 3, True, False)
    assert inner.steps == 3


def test_action_repeat_rejects_zero_amount():
    with pytest.raises(ValueError, match="at least 1"):
        wrappers.ActionRepeat(mock.CountingEnv(), 0)


def test_apply_duration_counts_env_steps_before_repeat():
    env = wrappers.apply(mock.CountingEnv(duration=100), duration=3, action_repeat=2)
    env.reset(seed=0)
    action = np.zeros(2, np.float32)
    assert env.step(action)[3] is False
    obs, _, terminated, truncated, _ = env.step(action)
    assert (obs[0], terminated, truncated) == (3, False, True)


def test_apply_defaults_leave_env_unwrapped():
    env = mock.CountingEnv()
    assert wrappers.apply(env) is env
