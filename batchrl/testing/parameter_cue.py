"""ParameterCue: a parameterised action (an arm and an amount) learning tests train on.

Each step shows which of `num_arms` arms pays, one-hot. The action is a `Dict`: "arm", a
`Discrete`, and "amount", a `Box` in [-1, 1]. Pulling the shown arm pays 1 less the
squared distance of the amount from that arm's target (evenly spaced in [-0.5, 0.5]);
any other arm pays 0. Episodes terminate after `length` steps. A policy must learn both
leaves, the amount depending on the arm: by chance an episode earns about
0.24 x `length` with 3 arms (an untrained policy's amounts near 0), the right arm with
the amount at 0 about 0.71 x `length`, both right `length`. `JaxParameterCue` is the
JAX-native env, `ParameterCue` the same task as a Gymnasium env.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.envs.jax import jax_env


def targets(num_arms: int) -> np.ndarray:
    """Each arm's best amount: evenly spaced in [-0.5, 0.5]."""
    return np.linspace(-0.5, 0.5, num_arms).astype(np.float32)


def action_space(num_arms: int) -> gym.spaces.Dict:
    """The `Dict` of an arm and an amount."""
    return gym.spaces.Dict(
        {"arm": gym.spaces.Discrete(num_arms), "amount": gym.spaces.Box(-1.0, 1.0, (1,))}
    )


@flax.struct.dataclass
class ParameterCueState:
    """The arm on show, the steps taken, and the key the next arms are drawn from."""

    arm: jax.Array  # [] int32
    steps: jax.Array  # [] int32
    key: jax.Array


@dataclasses.dataclass(frozen=True)
class JaxParameterCue:
    """Pull the shown arm with its target amount: up to 1 a step, `length` steps an episode."""

    num_arms: int = 3
    length: int = 8

    @property
    def env_spec(self) -> EnvSpec:
        arm = env_spec_lib.ActionLeaf((), "int32", env_spec_lib.DISCRETE, (self.num_arms,), (0,))
        amount = env_spec_lib.ActionLeaf(
            (1,), "float32", env_spec_lib.VECTOR, low=(-1.0,), high=(1.0,)
        )
        return EnvSpec(
            env_spec_lib.vector((self.num_arms,)),
            discrete=False,
            action_shape=(2,),
            action={"amount": amount, "arm": arm},
        )

    @property
    def max_length(self) -> int:
        return self.length

    def _show(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        arm = jax.random.randint(key, (), 0, self.num_arms)
        return arm, jax.nn.one_hot(arm, self.num_arms, dtype=jnp.float32)

    def reset(self, key: jax.Array) -> tuple[ParameterCueState, jax.Array]:
        key, show_key = jax.random.split(key)
        arm, obs = self._show(show_key)
        return ParameterCueState(arm, jnp.zeros((), jnp.int32), key), obs

    def step(
        self, env_state: ParameterCueState, action: dict[str, jax.Array]
    ) -> tuple[ParameterCueState, jax_env.TimeStep]:
        """Pays for `action` ({"arm": [] int, "amount": [1] float}), then shows the next arm."""
        target = jnp.asarray(targets(self.num_arms))[env_state.arm]
        miss = jnp.square(action["amount"][0] - target)
        reward = jnp.where(action["arm"] == env_state.arm, 1.0 - miss, 0.0)
        key, show_key = jax.random.split(env_state.key)
        arm, obs = self._show(show_key)
        steps = env_state.steps + 1
        time_step = jax_env.TimeStep(
            obs=obs,
            reward=reward.astype(jnp.float32),
            terminated=steps >= self.length,
            truncated=jnp.zeros((), bool),
        )
        return ParameterCueState(arm, steps, key), time_step


class ParameterCue(gym.Env):
    """The same task as a Gymnasium env, its action a `Dict` space."""

    def __init__(self, num_arms: int = 3, length: int = 8):
        self.num_arms, self.length = num_arms, length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (num_arms,), np.float32)
        self.action_space = action_space(num_arms)
        self._arm, self._steps = 0, 0

    def _obs(self) -> np.ndarray:
        self._arm = int(self.np_random.integers(self.num_arms))
        return np.eye(self.num_arms, dtype=np.float32)[self._arm]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return self._obs(), {}

    def step(self, action):
        miss = float(np.square(action["amount"][0] - targets(self.num_arms)[self._arm]))
        reward = 1.0 - miss if int(action["arm"]) == self._arm else 0.0
        self._steps += 1
        return self._obs(), reward, self._steps >= self.length, False, {}
