import gymnasium as gym
import pytest

from batchrl.envs.host import forwarding


class _Envs(forwarding.EnvForwarding):
    def __init__(self, envs):
        self.envs = envs

    def _env(self, index):
        return self.envs[index]


def test_calls_reach_each_env_through_its_wrappers():
    envs = _Envs([gym.make("Pendulum-v1"), gym.make("Pendulum-v1")])
    try:
        assert envs.attribute(1, "max_speed") == 8.0  # Pendulum's own, under TimeLimit.
        envs.set_attr(1, "max_speed", 5.0)
        assert (envs.attribute(0, "max_speed"), envs.attribute(1, "max_speed")) == (8.0, 5.0)
        assert envs.call(1, "max_speed") == 5.0  # Not callable: the value itself.
        obs, _ = envs.call(0, "reset", (), {"seed": 3})
        assert obs.shape == (3,)
        assert envs.is_wrapped(0, gym.wrappers.TimeLimit)
        assert not envs.is_wrapped(0, gym.wrappers.ClipAction)
        with pytest.raises(AttributeError):
            envs.attribute(0, "no_such_attribute")
    finally:
        for env in envs.envs:
            env.close()


def test_wrapped_by_looks_at_every_depth_and_the_bare_env_is_wrapped_by_nothing():
    bare = gym.make("Pendulum-v1").unwrapped
    env = gym.wrappers.ClipAction(gym.wrappers.TimeLimit(bare, 5))
    assert forwarding.wrapped_by(env, gym.wrappers.TimeLimit)
    assert forwarding.wrapped_by(env, gym.wrappers.ClipAction)
    assert not forwarding.wrapped_by(bare, gym.Wrapper)
