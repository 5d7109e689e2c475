"""Recurrent Gaussian policy of BatchPPO: an MLP whose last hidden layer is a GRU.

The policy is written for one step of a batch of envs, `(carry, obs, reset) -> (carry,
(mean, std))`, so acting inside `simulate` passes the carry along with the env state.
`reset` zeroes the carry of envs that begin an episode before the step, so one batch
can hold episodes that started at different times. `unroll` runs the same step over a
time-major sequence [T, B, ...] with `lax.scan`, as the PPO update needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from batchrl.networks import feed_forward


class RecurrentGaussianPolicy(nn.Module):
    """Continuous-action policy: Dense layers, a GRU, then a diagonal Gaussian head.

    Attributes:
        action_size: A, the number of action dimensions.
        layers: Hidden layer sizes, at least one; the last is the GRU's size H, the
            others are Dense layers before it.
        activation: Activation of the Dense hidden layers.
        init_output_factor: Factor on the mean layer's initial weights. Ignored when
            `orthogonal`.
        init_std: Initial standard deviation of every action dimension.
        orthogonal: Orthogonal init for the Dense layers and the mean layer (see
            `feed_forward`); the GRU keeps flax's default init.
        squash_mean: Keep the mean in (-1, 1) with tanh, as the seed did; else linear. A
            tuple: a bool for each element (`feed_forward.GaussianHead`).
    """

    action_size: int
    layers: Sequence[int] = (200, 100)
    activation: feed_forward.Activation = nn.relu
    init_output_factor: float = 0.1
    init_std: float = 0.35
    orthogonal: bool = False
    squash_mean: bool | tuple[bool, ...] = True

    @nn.nowrap
    def initial_carry(self, batch_size: int) -> jax.Array:
        """The carry at the start of an episode: [batch_size, H] zeros, float32."""
        if not self.layers:
            raise ValueError("RecurrentGaussianPolicy needs at least one layer for the GRU.")
        return jnp.zeros((batch_size, self.layers[-1]), jnp.float32)

    @nn.compact
    def __call__(
        self, carry: jax.Array, obs: jax.Array, reset: jax.Array
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """One step of a batch of envs.

        Args:
            carry: [B, H] GRU state after the previous step.
            obs: [B, *obs_shape] observations.
            reset: [B] bool, the env begins an episode at this step: its carry is zeroed
                before the step.

        Returns:
            carry: [B, H] GRU state after this step.
            (mean, std): [B, A] each, the action distribution.
        """
        batch_size = carry.shape[0]
        if obs.shape[0] != batch_size or reset.shape != (batch_size,):
            raise ValueError(
                f"Expected obs [{batch_size}, ...] and reset [{batch_size}], got obs "
                f"{obs.shape} and reset {reset.shape} for carry {carry.shape}."
            )
        fresh = self.initial_carry(batch_size).astype(carry.dtype)
        carry = jnp.where(reset[:, None], fresh, carry)
        hidden = feed_forward.MLP(self.layers[:-1], self.activation, self.orthogonal)
        x = hidden(feed_forward.flatten_obs(obs))
        carry, features = nn.GRUCell(self.layers[-1])(carry, x)
        head = feed_forward.GaussianHead(
            self.action_size,
            self.init_output_factor,
            self.init_std,
            self.orthogonal,
            self.squash_mean,
        )
        return carry, head(features)


def unroll(
    policy: RecurrentGaussianPolicy,
    params: Mapping[str, Any],
    carry: jax.Array,
    obs: jax.Array,
    reset: jax.Array,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Runs the policy over a time-major sequence with `lax.scan`.

    Args:
        policy: The module (static).
        params: Its variables, as returned by `policy.init`.
        carry: [B, H] GRU state before the first step.
        obs: [T, B, *obs_shape] observations.
        reset: [T, B] bool, the env begins an episode at that step.

    Returns:
        carry: [B, H] GRU state after the last step.
        (mean, std): [T, B, A] each, the action distribution at every step.
    """

    def step(carry, inputs):
        obs_t, reset_t = inputs
        return policy.apply(params, carry, obs_t, reset_t)

    return jax.lax.scan(step, carry, (obs, reset))
