"""The policy and value networks of a PPO agent, and the distribution of its actions.

Observations enter the networks as features (`Networks.features`, the encoder's
[..., F]). Where image leaves have CNNs (`networks.cnn`), the policy and the value each
read the features through their own (`params["policy_encoder"]`, `["value_encoder"]`),
or both through one (`params["encoder"]`, `shared_encoder`); otherwise the features go
straight into their MLPs, and the parameters are {"policy", "value"}.

Continuous actions: a Gaussian whose mean is tanh-squashed into [-1, 1] (the seed's)
or linear, mapped linearly onto the env's bounds and clipped to them when acting.
Discrete actions: a categorical over logits; a `MultiDiscrete` action is one
independent categorical per element. Actions are counted from 0 in the policy and
shifted by the space's start when acting. An action tree (`Dict`, `Tuple`, `MultiBinary`)
gets a head a leaf, acting in one float row (`networks.action_tree`). `Networks` hides
the difference from the update, which only asks for log-probs, entropy and KL.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.networks import (
    action_tree,
    box_actions,
    cnn,
    distributions,
    encoder,
    feed_forward,
    recurrent,
)
from batchrl.ppo import config as config_lib

_ACTIVATIONS = {"relu": nn.relu, "tanh": nn.tanh}


@dataclasses.dataclass(frozen=True)
class Networks:
    """Static description of the policy and value networks for one env's spaces."""

    config: config_lib.Config
    env_spec: EnvSpec  # The only thing the networks know of the env.
    # (first, of): these networks act for envs first, first + 1, ... of a batch of `of`
    # (a rollout actor's share), and `sample` draws for them the noise that batch draws
    # for them, so a batch acted in shares samples the actions it samples whole.
    rows: tuple[int, int] | None = None

    def __post_init__(self):
        if self.config.recurrent and (self.discrete or self.tree is not None):
            raise ValueError(
                "recurrent policies act in one Box of float32 or float64 only, not "
                f"{_actions_said(self.env_spec)}; set recurrent=False"
            )
        _ = self.parts  # Refuses an image too small for the CNN the config asks for.

    @property
    def parts(self) -> tuple[cnn.Part, ...]:
        """Each observation leaf's stretch of the features, and the CNN that reads it if any."""
        config = self.config
        return encoder.layout(self.env_spec.observation, config.image_channels, config.cnn)

    @property
    def torso(self) -> cnn.Torso | None:
        """The CNNs on image leaves beside the other leaves' features; None if no leaf has one."""
        parts = self.parts
        if not any(part.network for part in parts):
            return None
        return cnn.Torso(parts, self.config.orthogonal_init)

    @property
    def recurrent(self) -> bool:
        return self.config.recurrent

    @property
    def feature_size(self) -> int:
        """F, the features the encoder makes of one observation."""
        return self.env_spec.feature_size

    @property
    def discrete(self) -> bool:
        return self.env_spec.discrete

    @property
    def tree(self) -> Any:
        """The action tree the policy acts in a row of (`EnvSpec.action`); None for one array."""
        return self.env_spec.action

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
        gaussian_head = dict(init_std=config.init_std, squash_mean=self.squashed)
        if self.tree is not None:
            means, logits = action_tree.sizes(self.tree)
            return feed_forward.TreePolicy(means, logits, **gaussian_head, **shared)
        gaussian = (
            recurrent.RecurrentGaussianPolicy if self.recurrent else feed_forward.GaussianPolicy
        )
        return gaussian(self.action_size, **gaussian_head, **shared)

    @property
    def squashed(self) -> bool | tuple[bool, ...]:
        """`squash_mean` for the Gaussian head: False on the elements with no two bounds.

        A tanh mean of an element that passes to the env as drawn (no bound, one, or
        bounds float32 cannot span) held its action inside (-1, 1): an unbounded action
        of 1.5 was never taken by the policy's mean.
        """
        if not self.config.squash_mean:
            return False
        if self.tree is None:
            spec = self.env_spec
            parts = [box_actions.linear(spec.action_low, spec.action_high, self.action_size)]
        else:
            heads = [h.leaf for h in action_tree.heads(self.tree) if h.gaussian]
            parts = [box_actions.linear(leaf.low, leaf.high, leaf.size) for leaf in heads]
        squashed = tuple(bool(b) for part in parts for b in part)
        return True if all(squashed) else squashed if any(squashed) else False

    @property
    def value_module(self) -> nn.Module:
        config = self.config
        return feed_forward.Value(
            layers=config.value_layers,
            activation=_ACTIVATIONS[config.activation],
            orthogonal=config.orthogonal_init,
        )

    def init(self, key: jax.Array) -> dict[str, Any]:
        """Parameters {"policy": ..., "value": ...} for features [1, F] of this env.

        With CNNs, also "policy_encoder" and "value_encoder", or one shared "encoder".
        """
        policy_key, value_key = jax.random.split(key)
        features = jnp.zeros((1, self.feature_size), jnp.float32)
        params = {}
        torso = self.torso
        if torso is not None:
            policy_key, policy_encoder_key = jax.random.split(policy_key)
            value_key, value_encoder_key = jax.random.split(value_key)
            params[self._encoder("policy")] = torso.init(policy_encoder_key, features)
            if not self.config.shared_encoder:
                params[self._encoder("value")] = torso.init(value_encoder_key, features)
            encoded = sum(cnn.output_size(part) for part in torso.parts)
            features = jnp.zeros((1, encoded), jnp.float32)
        if self.recurrent:
            policy = self.policy_module.init(
                policy_key, self.initial_carry(1), features, jnp.zeros((1,), bool)
            )
        else:
            policy = self.policy_module.init(policy_key, features)
        return {
            "policy": policy,
            "value": self.value_module.init(value_key, features),
            **params,
        }

    def _encoder(self, head: str) -> str:
        """The parameters' key of the CNNs the "policy" or the "value" reads images with."""
        return "encoder" if self.config.shared_encoder else f"{head}_encoder"

    def encode(self, params: dict, head: str, features: jax.Array) -> jax.Array:
        """Features [..., F] as the "policy" or "value" MLP reads them: through its CNNs."""
        torso = self.torso
        if torso is None:
            return features
        flat = features.reshape(-1, features.shape[-1])
        encoded = torso.apply(params[self._encoder(head)], flat)
        return encoded.reshape(*features.shape[:-1], encoded.shape[-1])

    def initial_carry(self, batch_size: int) -> jax.Array:
        """The recurrent state [B, H] at episode start; [B, 0] for feed-forward policies."""
        if not self.recurrent:
            return jnp.zeros((batch_size, 0), jnp.float32)
        return self.policy_module.initial_carry(batch_size)

    def distribution(self, params: dict, features: jax.Array) -> Any:
        """The action distribution's parameters for features [N, F]: (mean, std) or logits."""
        if self.recurrent:
            raise ValueError("a recurrent policy needs step_distribution or episode_distribution")
        return self.policy_module.apply(params["policy"], self.encode(params, "policy", features))

    def step_distribution(
        self, params: dict, carry: jax.Array, features: jax.Array
    ) -> tuple[jax.Array, Any]:
        """One acting step for features [B, F]: (carry, distribution parameters)."""
        if not self.recurrent:
            return carry, self.distribution(params, features)
        reset = jnp.zeros(features.shape[:1], bool)
        encoded = self.encode(params, "policy", features)
        return self.policy_module.apply(params["policy"], carry, encoded, reset)

    def episode_distribution(self, params: dict, features: jax.Array) -> Any:
        """Distribution parameters [E, L, ...] of episodes' features [E, L, F]."""
        episodes, length = features.shape[:2]
        if not self.recurrent:
            flat = self.distribution(params, features.reshape(episodes * length, -1))
            return jax.tree.map(lambda x: x.reshape(episodes, length, *x.shape[1:]), flat)
        time_major = jnp.swapaxes(self.encode(params, "policy", features), 0, 1)
        reset = jnp.zeros((length, episodes), bool).at[0].set(True)
        _, dist = recurrent.unroll(
            self.policy_module, params["policy"], self.initial_carry(episodes), time_major, reset
        )
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), dist)

    def features(self, obs_norm: encoder.NormTree, obs: encoder.ObsTree) -> jax.Array:
        """Observations [..., *leaf shapes] as the networks see them: [..., F] float32.

        Vector leaves of numbers are centred, scaled and clipped by their statistics when the
        config normalises observations; see `encoder` for the other kinds.
        """
        config = self.config
        return encoder.features(
            self.env_spec.observation,
            obs_norm,
            obs,
            normalize=config.normalize_observations,
            clip=config.observation_clip,
            channels=config.image_channels,
        )

    def value(self, params: dict, features: jax.Array) -> jax.Array:
        """V [N] of features [N, F]."""
        return self.value_module.apply(params["value"], self.encode(params, "value", features))

    def distribution_and_value(self, params: dict, features: jax.Array) -> tuple[Any, jax.Array]:
        """`distribution` and `value` of features [N, F], a shared encoder's CNNs run once.

        Called apart, the two would run the shared CNNs twice: XLA merges the two forward
        passes but not the gradients through them, which double a CNN update's cost.
        """
        if not self.config.shared_encoder or self.torso is None:
            return self.distribution(params, features), self.value(params, features)
        encoded = self.encode(params, "policy", features)
        dist = self.policy_module.apply(params["policy"], encoded)
        return dist, self.value_module.apply(params["value"], encoded)

    def sample(self, dist: Any, key: jax.Array) -> jax.Array:
        """An action drawn from each row: [N, A] float, [N] or [N, *action_shape] int32."""
        if self.rows is not None:
            return self._sample_rows(dist, key, *self.rows)
        if self.tree is not None:
            return action_tree.sample(self.tree, dist, key)
        if self.env_spec.multi_discrete:
            nvec = self.env_spec.action_nvec
            return self._shaped(distributions.multi_categorical_sample(key, dist, nvec))
        if self.discrete:
            return distributions.categorical_sample(key, dist)
        return distributions.gaussian_sample(key, *dist)

    def _sample_rows(self, dist: Any, key: jax.Array, first: int, of: int) -> jax.Array:
        """`sample` of the N rows first.. of a batch of `of`: its draw, cut to them."""
        whole = dataclasses.replace(self, rows=None)
        count = jax.tree.leaves(dist)[0].shape[0]
        padded = jax.tree.map(
            lambda x: jnp.zeros((of, *x.shape[1:]), x.dtype).at[first : first + count].set(x),
            dist,
        )
        return jax.tree.map(lambda x: x[first : first + count], whole.sample(padded, key))

    def mode(self, dist: Any) -> jax.Array:
        if self.tree is not None:
            return action_tree.mode(self.tree, dist)
        if self.env_spec.multi_discrete:
            nvec = self.env_spec.action_nvec
            return self._shaped(distributions.multi_categorical_mode(dist, nvec))
        if self.discrete:
            return distributions.categorical_mode(dist)
        return dist[0]

    def log_prob(self, dist: Any, action: jax.Array) -> jax.Array:
        if self.tree is not None:
            return action_tree.log_prob(self.tree, dist, action)
        if self.env_spec.multi_discrete:
            nvec = self.env_spec.action_nvec
            flat = action.reshape(*dist.shape[:-1], len(nvec))
            return distributions.multi_categorical_log_prob(dist, flat, nvec)
        if self.discrete:
            return distributions.categorical_log_prob(dist, action)
        return distributions.gaussian_log_prob(*dist, action)

    def entropy(self, dist: Any) -> jax.Array:
        if self.tree is not None:
            return action_tree.entropy(self.tree, dist)
        if self.env_spec.multi_discrete:
            return distributions.multi_categorical_entropy(dist, self.env_spec.action_nvec)
        if self.discrete:
            return distributions.categorical_entropy(dist)
        return distributions.gaussian_entropy(*dist)

    def kl(self, old: Any, new: Any) -> jax.Array:
        """KL(old || new) per row."""
        if self.tree is not None:
            return action_tree.kl(self.tree, old, new)
        if self.env_spec.multi_discrete:
            return distributions.multi_categorical_kl(old, new, self.env_spec.action_nvec)
        if self.discrete:
            return distributions.categorical_kl(old, new)
        return distributions.gaussian_kl(*old, *new)

    def to_env(self, action: jax.Array) -> jax.Array:
        """Maps a policy action onto the env's action space (start, bounds, dtype; a tree's)."""
        if self.tree is not None:
            return action_tree.to_env(self.tree, action)
        if self.discrete:
            start = self.env_spec.action_start
            if start is None:
                return action.astype(jnp.int32)
            offset = jnp.asarray(start, jnp.int32).reshape(self.env_spec.action_shape)
            return action.astype(jnp.int32) + offset
        action = box_actions.onto_box(action, self.env_spec.action_low, self.env_spec.action_high)
        # The Gaussian's flat row [..., D] in the space's shape (a Box of rank 0, or 2 and up).
        return action.reshape(*action.shape[:-1], *self.env_spec.action_shape)

    def _shaped(self, elements: jax.Array) -> jax.Array:
        """A multi-discrete action's elements [..., K] as [..., *action_shape]."""
        return elements.reshape(*elements.shape[:-1], *self.env_spec.action_shape)


def for_env(config: config_lib.Config, env: Any) -> Networks:
    """Networks for a batched env (JAX-native or bridge), from its `env_spec`."""
    return Networks(config, env.env_spec)


def _actions_said(spec: EnvSpec) -> str:
    """The env's actions in a few words, for an error: `a tree of leaves binary bool`."""
    if spec.action is None:
        return "MultiDiscrete actions" if spec.multi_discrete else "Discrete actions"
    leaves = env_spec_lib.leaves(spec.action)
    return "a tree of leaves " + ", ".join(f"{leaf.kind} {leaf.dtype}" for leaf in leaves)
