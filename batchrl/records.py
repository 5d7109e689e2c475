"""Shared records: a batch step handed to the algorithm.

An env's one description, `EnvSpec`, lives in `batchrl.env_spec`, free of JAX, so env
worker processes that check spaces never import JAX.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax

__all__ = ["Transition"]


@flax.struct.dataclass
class Transition:
    """One batch step, every field with a leading [B] axis.

    Attributes:
        obs: The observation the action was chosen on: a tree like the env's observation
            spec, leaves [B, *leaf.shape] in their own dtypes.
        action: [B, *action_shape] the action taken.
        reward: [B] float32.
        terminated: [B] bool, a terminal state was reached: do not bootstrap.
        truncated: [B] bool, the episode was cut short (time limit, restart): bootstrap.
        next_obs: The observation after the step (the episode's last observation when it
            ended), like `obs`. Agents read it during the step; learners do not store it.
    """

    obs: Any
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: Any
