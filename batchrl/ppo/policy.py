"""The policy and value networks of a PPO agent, and the distribution of its actions.

Continuous actions: a Gaussian whose mean is tanh-squashed into [-1, 1] (the seed's) or
linear, mapped linearly onto the env's bounds and clipped to them when acting. Discrete
actions: a categorical over logits. `Networks` hides the difference from the update,
which only asks for log-probs, entropy and KL.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from batchrl.env_spec import EnvSpec
from batchrl.networks import distributions, feed_forward, recurrent
from batchrl.parts import normalizer
from batchrl.ppo import config as config_lib

_ACTIVATIONS = {"relu": nn.relu, "tanh": nn.tanh}


@dataclasses.dataclass(frozen=True)
class Networks:
    """Static description of the policy and value networks for one env's spaces."""

    config: config_lib.Config
    env_spec: EnvSpec  # The only thing the networks know of the env.

    def __post_init__(self):
        if self.config.recurrent and self.discrete:
            raise ValueError("recurrent policies support Box actions only; set recurrent=False")

    @property
    def recurrent(self) -> bool:
        return self.config.recurrent

    @property
    def observation_shape(self) -> tuple[int, ...]:
        return self.env_spec.observation_shape

    @property
    def discrete(self) -> bool:
        return self.env_spec.discrete

    @property
    def action_size(self) -> int:
        """Action dimensions, or the number of discrete actions."""
        return self.env_spec.action_size

    @property
    def policy_module(self) -> nn.Module:
        config = self.config
        shared = dict(
            layers=config.policy_layers,
            activation=_ACTIVATIONS[config.activation],
            init_output_factor=config.init_output_factor,
            orthogonal=config.orthogonal_init,
        )
        if self.discrete:
            return feed_forward.CategoricalPolicy(self.action_size, **shared)
        gaussian = (
            recurrent.RecurrentGaussianPolicy if self.recurrent else feed_forward.GaussianPolicy
        )
        return gaussian(
            self.action_size, init_std=config.init_std, squash_mean=config.squash_mean, **shared
        )

    @property
    def value_module(self) -> nn.Module:
        config = self.config
        return feed_forward.Value(
            layers=config.value_layers,
            activation=_ACTIVATIONS[config.activation],
            orthogonal=config.orthogonal_init,
        )

    def init(self, key: jax.Array) -> dict[str, Any]:
        """Parameters {"policy": ..., "value": ...} for observations of this shape."""
        policy_key, value_key = jax.random.split(key)
        obs = jnp.zeros((1, *self.observation_shape), jnp.float32)
        if self.recurrent:
            policy = self.policy_module.init(
                policy_key, self.initial_carry(1), obs, jnp.zeros((1,), bool)
            )
        else:
            policy = self.policy_module.init(policy_key, obs)
        return {
            "policy": policy,
            "value": self.value_module.init(value_key, obs),
        }

    def initial_carry(self, batch_size: int) -> jax.Array:
        """The recurrent state [B, H] at episode start; [B, 0] for feed-forward policies."""
        if not self.recurrent:
            return jnp.zeros((batch_size, 0), jnp.float32)
        return self.policy_module.initial_carry(batch_size)

    def distribution(self, params: dict, obs: jax.Array) -> Any:
        """The action distribution's parameters for obs [N, ...]: (mean, std) or logits."""
        if self.recurrent:
            raise ValueError("a recurrent policy needs step_distribution or episode_distribution")
        return self.policy_module.apply(params["policy"], obs)

    def step_distribution(
        self, params: dict, carry: jax.Array, obs: jax.Array
    ) -> tuple[jax.Array, Any]:
        """One acting step for obs [B, ...]: (carry, distribution parameters)."""
        if not self.recurrent:
            return carry, self.distribution(params, obs)
        reset = jnp.zeros(obs.shape[:1], bool)
        return self.policy_module.apply(params["policy"], carry, obs, reset)

    def episode_distribution(self, params: dict, obs: jax.Array) -> Any:
        """Distribution parameters [E, L, ...] for episodes obs [E, L, ...], each from its start."""
        episodes, length = obs.shape[:2]
        if not self.recurrent:
            flat = self.distribution(params, obs.reshape(episodes * length, *obs.shape[2:]))
            return jax.tree.map(lambda x: x.reshape(episodes, length, *x.shape[1:]), flat)
        time_major = jnp.swapaxes(obs, 0, 1)
        reset = jnp.zeros((length, episodes), bool).at[0].set(True)
        _, dist = recurrent.unroll(
            self.policy_module, params["policy"], self.initial_carry(episodes), time_major, reset
        )
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), dist)

    def normalize_obs(self, obs_norm: normalizer.NormalizerState, obs: jax.Array) -> jax.Array:
        """Observations as the networks see them: centred, scaled and clipped, or as float32."""
        config = self.config
        if not config.normalize_observations:
            return obs.astype(jnp.float32)
        return normalizer.normalize(obs_norm, obs, center=True, clip=config.observation_clip)

    def value(self, params: dict, obs: jax.Array) -> jax.Array:
        """V(obs) [N]."""
        return self.value_module.apply(params["value"], obs)

    def sample(self, dist: Any, key: jax.Array) -> jax.Array:
        if self.discrete:
            return distributions.categorical_sample(key, dist)
        return distributions.gaussian_sample(key, *dist)

    def mode(self, dist: Any) -> jax.Array:
        if self.discrete:
            return distributions.categorical_mode(dist)
        return dist[0]

    def log_prob(self, dist: Any, action: jax.Array) -> jax.Array:
        if self.discrete:
            return distributions.categorical_log_prob(dist, action)
        return distributions.gaussian_log_prob(*dist, action)

    def entropy(self, dist: Any) -> jax.Array:
        if self.discrete:
            return distributions.categorical_entropy(dist)
        return distributions.gaussian_entropy(*dist)

    def kl(self, old: Any, new: Any) -> jax.Array:
        """KL(old || new) per row."""
        if self.discrete:
            return distributions.categorical_kl(old, new)
        return distributions.gaussian_kl(*old, *new)

    def to_env(self, action: jax.Array) -> jax.Array:
        """Maps a policy action onto the env's action space (bounds, dtype)."""
        if self.discrete:
            return action.astype(jnp.int32)
        if self.env_spec.action_low is None:
            return action
        low, high = jnp.asarray(self.env_spec.action_low), jnp.asarray(self.env_spec.action_high)
        return jnp.clip(low + (action + 1.0) * 0.5 * (high - low), low, high)


def for_env(config: config_lib.Config, env: Any) -> Networks:
    """Networks for a batched env (JAX-native or bridge), from its `env_spec`."""
    return Networks(config, env.env_spec)
