"""Which spaces batchrl supports, and the `EnvSpec` of an env with supported spaces.

Observations: `Box` of any shape. Actions: `Box` or `Discrete`. Everything else
is rejected up front with an error that says what is supported, rather than
failing deep inside a rollout.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from batchrl.env_spec import EnvSpec

SUPPORTED_OBSERVATION = "Box observations of any shape"
SUPPORTED_ACTION = "Box or Discrete actions"


class UnsupportedSpaceError(TypeError):
    """A space batchrl cannot batch or learn on."""


def check_observation_space(space: gym.Space, env_name: str = "env") -> gym.spaces.Box:
    """Returns `space` if batchrl supports it as an observation space, raises otherwise."""
    if not isinstance(space, gym.spaces.Box):
        raise UnsupportedSpaceError(
            f"unsupported observation space {space} of {env_name}: batchrl supports "
            f"{SUPPORTED_OBSERVATION}"
        )
    return space


def check_action_space(space: gym.Space, env_name: str = "env") -> gym.Space:
    """Returns `space` if batchrl supports it as an action space, raises otherwise."""
    if not isinstance(space, gym.spaces.Box | gym.spaces.Discrete):
        raise UnsupportedSpaceError(
            f"unsupported action space {space} of {env_name}: batchrl supports {SUPPORTED_ACTION}"
        )
    return space


def same_space(a: gym.Space, b: gym.Space) -> bool:
    """Whether two supported spaces are interchangeable for batching: kind, shape, dtype, bounds."""
    if type(a) is not type(b) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if isinstance(a, gym.spaces.Box):
        return np.array_equal(a.low, b.low, equal_nan=True) and np.array_equal(
            a.high, b.high, equal_nan=True
        )
    if isinstance(a, gym.spaces.Discrete):
        return a.n == b.n and a.start == b.start
    return a == b


def env_name(env: gym.Env) -> str:
    """A readable name for error messages: the registered id when there is one."""
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return f"'{spec.id}'"
    return f"'{type(getattr(env, 'unwrapped', env)).__name__}'"


def env_spec(
    observation_space: gym.Space,
    action_space: gym.Space,
    env_name: str = "env",
) -> EnvSpec:
    """The spec of an env with these Gymnasium spaces; unsupported spaces are refused."""
    observation_space = check_observation_space(observation_space, env_name)
    action_space = check_action_space(action_space, env_name)
    discrete = isinstance(action_space, gym.spaces.Discrete)
    bounded = not discrete and bool(
        np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))
    )
    return EnvSpec(
        observation_shape=tuple(observation_space.shape),
        discrete=discrete,
        action_shape=() if discrete else tuple(action_space.shape),
        num_actions=int(action_space.n) if discrete else None,
        action_low=tuple(map(float, action_space.low.flat)) if bounded else None,
        action_high=tuple(map(float, action_space.high.flat)) if bounded else None,
        observation_dtype=np.dtype(observation_space.dtype).name,
    )
