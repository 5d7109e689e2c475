"""Shared records: a batch step handed to the algorithm.

An env's one description, `EnvSpec`, lives in `batchrl.env_spec`, free of JAX, so env
worker processes that check spaces never import JAX.
"""

from __future__ import annotations

import flax.struct
import jax

__all__ = ["Transition"]


@flax.struct.dataclass
class Transition:
    """One batch step, every field with a leading [B] axis.

    Attributes:
        obs: [B, *obs_shape] the observation the action was chosen on.
        action: [B, *action_shape] the action taken.
        reward: [B] float32.
        terminated: [B] bool, a terminal state was reached: do not bootstrap.
        truncated: [B] bool, the episode was cut short (time limit, restart): bootstrap.
        next_obs: [B, *obs_shape] the observation after the step (the episode's last
            observation when it ended).
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: jax.Array
