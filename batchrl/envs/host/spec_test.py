import gymnasium as gym
import numpy as np
import pytest

from batchrl.env_spec import EnvSpec
from batchrl.envs.host import spec


def test_a_box_action_env_is_described_by_its_spaces():
    env = gym.make("Pendulum-v1")
    described = spec.env_spec(env.observation_space, env.action_space)
    assert described == EnvSpec(
        observation_shape=(3,),
        discrete=False,
        action_shape=(1,),
        action_low=(-2.0,),
        action_high=(2.0,),
        observation_dtype="float32",
    )
    assert described.action_size == 1


def test_a_discrete_action_env_has_num_actions_and_no_bounds():
    env = gym.make("CartPole-v1")
    described = spec.env_spec(env.observation_space, env.action_space)
    assert described.discrete and described.num_actions == 2 and described.action_size == 2
    assert described.action_shape == () and described.action_low is None


def test_unbounded_box_actions_have_no_bounds():
    box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    described = spec.env_spec(box, box)
    assert described.action_low is None and described.action_high is None


def test_unsupported_spaces_are_refused_naming_the_space():
    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    with pytest.raises(spec.UnsupportedSpaceError, match="unsupported action space MultiBinary"):
        spec.env_spec(box, gym.spaces.MultiBinary(3))
    with pytest.raises(spec.UnsupportedSpaceError, match="unsupported observation space Dict"):
        spec.env_spec(gym.spaces.Dict({"a": box}), box)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(discrete=True), "a discrete EnvSpec needs num_actions"),
        (dict(discrete=True, num_actions=2, action_shape=(1,)), "action_shape \\(\\)"),
        (dict(discrete=False, num_actions=2), "a continuous EnvSpec has num_actions None"),
        (dict(discrete=False, action_low=(0.0,)), "given together"),
    ],
)
def test_an_inconsistent_spec_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        EnvSpec(observation_shape=(3,), **fields)
