"""A JAX-native batch with fixed episode lengths, for exact bookkeeping tests of simulate.

`CountingBatch(durations)` behaves as `mock.CountingEnv` does in worker processes: env i
ends every episode after exactly durations[i] steps; its observation is [step, duration,
0]; the reward is the action's sum plus the step number. `DictCountingBatch` steps the
same episodes with a `Dict` observation of three dtypes: {"vector": that float32
[step, duration, 0], "step": the step as a discrete int32, "image": uint8 [2, 2, 1]
filled with the step}, for tests of every layer that moves observation trees.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

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

    def init(self, key: jax.Array) -> tuple[jax.Array, Any]:
        del key
        steps = jnp.zeros((self.num_envs,), jnp.int32)
        return steps, self._obs(steps)

    def reset(
        self, env_state: jax.Array, obs: Any, key: jax.Array, mask: jax.Array
    ) -> tuple[jax.Array, Any]:
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


@dataclasses.dataclass(frozen=True)
class DictCountingBatch(CountingBatch):
    """`CountingBatch`'s episodes with a `Dict` observation: a float, a discrete, a uint8 leaf."""

    @property
    def env_spec(self) -> EnvSpec:
        observation = {
            "vector": env_spec_lib.vector((3,)),
            "step": env_spec_lib.ObsLeaf(
                (), "int32", env_spec_lib.DISCRETE, (max(self.durations) + 1,), (0,)
            ),
            "image": env_spec_lib.ObsLeaf(
                (2, 2, 1), "uint8", env_spec_lib.IMAGE, low=0.0, high=255.0
            ),
        }
        return EnvSpec(observation, discrete=False, action_shape=(2,))

    def _obs(self, steps: jax.Array) -> dict[str, Any]:
        image = jnp.broadcast_to(
            steps.astype(jnp.uint8)[:, None, None, None], (len(steps), 2, 2, 1)
        )
        return {"vector": super()._obs(steps), "step": steps, "image": image}
