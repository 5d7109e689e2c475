"""A JAX-native batch with fixed episode lengths, for exact bookkeeping tests of simulate.

`CountingBatch(durations)` behaves as `mock.CountingEnv` does in worker processes: env i
ends every episode after exactly durations[i] steps; its observation is [step, duration,
0]; the reward is the action's sum plus the step number.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.envs.jax import jax_env


@dataclasses.dataclass(frozen=True)
class CountingBatch(jax_env.Compiled):
    """Env i terminates (or truncates, with end="truncated") after durations[i] steps."""

    durations: tuple[int, ...]
    end: str = "terminated"
    env_spec: ClassVar[EnvSpec] = EnvSpec(
        env_spec_lib.vector((3,)), discrete=False, action_shape=(2,)
    )

    @property
    def num_envs(self) -> int:
        return len(self.durations)

    def _obs(self, steps: jax.Array) -> jax.Array:
        durations = jnp.asarray(self.durations, jnp.float32)
        zeros = jnp.zeros_like(durations)
        return jnp.stack([steps.astype(jnp.float32), durations, zeros], axis=1)

    def init(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        del key
        steps = jnp.zeros((self.num_envs,), jnp.int32)
        return steps, self._obs(steps)

    def reset(
        self, env_state: jax.Array, obs: jax.Array, key: jax.Array, mask: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        del obs, key
        steps = jnp.where(mask, 0, env_state)
        return steps, self._obs(steps)

    def step(self, env_state: jax.Array, action: jax.Array) -> tuple[jax.Array, jax_env.TimeStep]:
        steps = env_state + 1
        ended = steps >= jnp.asarray(self.durations)
        reward = action.sum(axis=1) + steps.astype(jnp.float32)
        terminated = ended if self.end == "terminated" else jnp.zeros_like(ended)
        truncated = ended if self.end == "truncated" else jnp.zeros_like(ended)
        return steps, jax_env.TimeStep(self._obs(steps), reward, terminated, truncated)
