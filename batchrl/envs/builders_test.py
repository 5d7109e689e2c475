"""BatchEnv's builders: what `from_envs` cannot batch is named in one line."""

import gymnasium as gym
import pytest

from batchrl.envs import BatchEnv


def test_from_envs_names_a_constructor_or_an_id_in_place_of_an_env():
    # SyncVectorEnv takes constructors; from_envs takes the envs they build.
    envs = [gym.make("CartPole-v1"), lambda: gym.make("CartPole-v1")]
    with pytest.raises(
        TypeError, match=r"got the constructor .*<lambda> in place 1: build envs from constructors"
    ):
        BatchEnv.from_envs(envs)
    with pytest.raises(
        TypeError, match=r"\(gym.Env or ExternalProcess\), got 'CartPole-v1' in place 0$"
    ):
        BatchEnv.from_envs(["CartPole-v1"])
    with BatchEnv.from_envs(envs[:1]) as env:  # Env objects batch as before.
        assert env.reset(seed=0)[0].shape == (1, 4)
