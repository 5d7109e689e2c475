"""The evaluation agent both PPO objectives share: the policy's mean action, learning nothing.

Training agents live beside their objective (`clipped.agent`, `penalty.agent`); acting
for evaluation needs only the parameters, the observation normaliser and, for a
recurrent policy, its state, which every PPO agent state carries under the same names.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from batchrl import simulate
from batchrl.ppo import policy as policy_lib


def evaluation_agent(networks: policy_lib.Networks) -> simulate.Agent:
    """Acts with the mode of the policy's distribution; the agent state is only read."""

    def begin_episode(state: Any, mask: jax.Array) -> Any:
        if not networks.recurrent:
            return state
        fresh = networks.initial_carry(mask.shape[0])
        return state.replace(carry=jnp.where(mask[:, None], fresh, state.carry))

    def perform(state: Any, obs: jax.Array, key: jax.Array) -> tuple[Any, jax.Array]:
        del key
        obs = networks.normalize_obs(state.obs_norm, obs)
        if networks.recurrent:
            carry, dist = networks.step_distribution(state.params, state.carry, obs)
            state = state.replace(carry=carry)
        else:
            dist = networks.distribution(state.params, obs)
        return state, networks.to_env(networks.mode(dist))

    def unchanged(state: Any, _: Any) -> Any:
        return state

    return simulate.Agent(begin_episode, perform, unchanged, unchanged)
