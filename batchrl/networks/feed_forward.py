"""Feed-forward networks of BatchPPO: Gaussian, categorical and tree policies, a value function.

Each module maps one batch of features [B, F] (the encoder's, `networks.encoder`; the
trailing dimensions of other inputs are flattened) through an MLP of `layers` hidden
units. By default hidden kernels use flax's LeCun-normal init (variance scaling 1.0,
fan-in, truncated normal) and a policy's output kernel uses the same init multiplied by
`init_output_factor`, so the initial means (or logits) are small whatever the
observation size. Note that the seed's `init_mean_factor` scaled the variance instead:
its 0.1 is sqrt(0.1) here. `orthogonal=True` switches to the common PPO init:
orthogonal(sqrt(2)) hidden kernels, orthogonal(0.01) policy outputs, orthogonal(1.0)
value output, zero biases.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

Activation = Callable[[jax.Array], jax.Array]

_HIDDEN_ORTHOGONAL_SCALE = math.sqrt(2.0)
_POLICY_ORTHOGONAL_SCALE = 0.01
_VALUE_ORTHOGONAL_SCALE = 1.0


def inverse_softplus(y: float) -> float:
    """The x with softplus(x) == y, for y > 0, computed in float64.

    Rounded to float32, softplus of the result equals y to within a few ulps; no float32
    x gives exactly float32(y) for every y.
    """
    return math.log(math.expm1(y))


def hidden_init(orthogonal: bool) -> nn.initializers.Initializer:
    """Kernel init of hidden layers: orthogonal(sqrt(2)), or flax's default LeCun normal."""
    if orthogonal:
        return nn.initializers.orthogonal(_HIDDEN_ORTHOGONAL_SCALE)
    return nn.linear.default_kernel_init


def policy_output_init(orthogonal: bool, init_output_factor: float) -> nn.initializers.Initializer:
    """Kernel init of a policy's output layer.

    Args:
        orthogonal: Use orthogonal(0.01), ignoring `init_output_factor`.
        init_output_factor: Otherwise the factor multiplying LeCun-normal weights (fan-in,
            truncated normal): the weight variance is `init_output_factor**2 / fan_in`.

    Returns:
        The initializer.
    """
    if orthogonal:
        return nn.initializers.orthogonal(_POLICY_ORTHOGONAL_SCALE)
    scale = init_output_factor**2
    return nn.initializers.variance_scaling(scale, "fan_in", "truncated_normal")


def flatten_obs(obs: jax.Array) -> jax.Array:
    """Flattens the trailing observation dimensions: [B, *obs_shape] -> [B, prod(obs_shape)]."""
    return jnp.reshape(obs, (obs.shape[0], -1))


class MLP(nn.Module):
    """Hidden layers: Dense then activation for each size in `layers`.

    Maps [B, D] to [B, layers[-1]] (to [B, D] unchanged when `layers` is empty).
    """

    layers: Sequence[int] = (200, 100)
    activation: Activation = nn.relu
    orthogonal: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for size in self.layers:
            x = nn.Dense(size, kernel_init=hidden_init(self.orthogonal))(x)
            x = self.activation(x)
        return x


class GaussianHead(nn.Module):
    """Diagonal Gaussian from features: a mean (tanh-squashed or linear), a state-independent std.

    Maps features [B, H] to (mean [B, A], std [B, A]). The std is softplus of a
    parameter "raw_std" [A] initialised to `inverse_softplus(init_std)`, so the initial
    std equals `init_std` up to float32 rounding. With `squash_mean` (the seed's head) the
    mean lies in (-1, 1): a policy that wants an action at the bound can only get there by
    shrinking its std. A linear mean can move past the bound, where the env clips it.
    `squash_mean` may name the elements it squashes, one bool each: an element without
    bounds to map onto keeps a linear mean, which tanh would hold inside (-1, 1).
    """

    action_size: int
    init_output_factor: float = 0.1
    init_std: float = 0.35
    orthogonal: bool = False
    squash_mean: bool | tuple[bool, ...] = True

    @nn.compact
    def __call__(self, features: jax.Array) -> tuple[jax.Array, jax.Array]:
        kernel_init = policy_output_init(self.orthogonal, self.init_output_factor)
        mean = nn.Dense(self.action_size, kernel_init=kernel_init)(features)
        if self.squash_mean is True:
            mean = jnp.tanh(mean)
        elif self.squash_mean:
            mean = jnp.where(jnp.asarray(self.squash_mean), jnp.tanh(mean), mean)
        raw_std = self.param(
            "raw_std",
            nn.initializers.constant(inverse_softplus(self.init_std)),
            (self.action_size,),
        )
        std = jnp.broadcast_to(jax.nn.softplus(raw_std), mean.shape)
        return mean, std


class GaussianPolicy(nn.Module):
    """Continuous-action policy: MLP then a diagonal Gaussian head.

    Attributes:
        action_size: A, the number of action dimensions.
        layers: Hidden layer sizes.
        activation: Hidden activation.
        init_output_factor: Factor on the mean layer's initial weights; small keeps the
            initial means near zero. Ignored when `orthogonal`.
        init_std: Initial standard deviation of every action dimension.
        orthogonal: Use the orthogonal PPO init (see the module docstring).
        squash_mean: Keep the mean in (-1, 1) with tanh, as the seed did; else linear. A
            tuple: a bool for each element (`GaussianHead`).
    """

    action_size: int
    layers: Sequence[int] = (200, 100)
    activation: Activation = nn.relu
    init_output_factor: float = 0.1
    init_std: float = 0.35
    orthogonal: bool = False
    squash_mean: bool | tuple[bool, ...] = True

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Action distribution for a batch of observations.

        Args:
            obs: [B, *obs_shape] observations.

        Returns:
            mean: [B, A], in (-1, 1) when `squash_mean`.
            std: [B, A] positive, the same for every observation.
        """
        features = MLP(self.layers, self.activation, self.orthogonal)(flatten_obs(obs))
        head = GaussianHead(
            self.action_size,
            self.init_output_factor,
            self.init_std,
            self.orthogonal,
            self.squash_mean,
        )
        return head(features)


class CategoricalPolicy(nn.Module):
    """Discrete-action policy: MLP then a linear layer of logits.

    Attributes:
        num_actions: N, the number of discrete actions.
        layers: Hidden layer sizes.
        activation: Hidden activation.
        init_output_factor: Factor on the logits layer's initial weights; small keeps
            the initial distribution near uniform. Ignored when `orthogonal`.
        orthogonal: Use the orthogonal PPO init (see the module docstring).
    """

    num_actions: int
    layers: Sequence[int] = (200, 100)
    activation: Activation = nn.relu
    init_output_factor: float = 0.1
    orthogonal: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """Logits for a batch of observations.

        Args:
            obs: [B, *obs_shape] observations.

        Returns:
            [B, N] logits.
        """
        features = MLP(self.layers, self.activation, self.orthogonal)(flatten_obs(obs))
        kernel_init = policy_output_init(self.orthogonal, self.init_output_factor)
        return nn.Dense(self.num_actions, kernel_init=kernel_init)(features)


class TreePolicy(nn.Module):
    """An action tree's policy (`networks.action_tree`): MLP, then its Gaussian and logits heads.

    Attributes:
        means: Elements of the tree's Box leaves: the Gaussian head's mean and std.
        logits: Logits of its other leaves (categorical values, Bernoulli bits).
        The rest as `GaussianPolicy`'s.
    """

    means: int
    logits: int
    layers: Sequence[int] = (200, 100)
    activation: Activation = nn.relu
    init_output_factor: float = 0.1
    init_std: float = 0.35
    orthogonal: bool = False
    squash_mean: bool | tuple[bool, ...] = True

    @nn.compact
    def __call__(self, obs: jax.Array) -> dict[str, jax.Array]:
        """{"mean": [B, means], "std": [B, means], "logits": [B, logits]} of obs [B, ...]."""
        features = MLP(self.layers, self.activation, self.orthogonal)(flatten_obs(obs))
        empty = jnp.zeros((features.shape[0], 0), features.dtype)
        mean = std = logits = empty
        if self.means:
            head = GaussianHead(
                self.means,
                self.init_output_factor,
                self.init_std,
                self.orthogonal,
                self.squash_mean,
            )
            mean, std = head(features)
        if self.logits:
            kernel_init = policy_output_init(self.orthogonal, self.init_output_factor)
            logits = nn.Dense(self.logits, kernel_init=kernel_init)(features)
        return {"mean": mean, "std": std, "logits": logits}


class Value(nn.Module):
    """State-value function: MLP then one linear output.

    Attributes:
        layers: Hidden layer sizes.
        activation: Hidden activation.
        orthogonal: Use the orthogonal PPO init; the output layer gets orthogonal(1.0).
    """

    layers: Sequence[int] = (200, 100)
    activation: Activation = nn.relu
    orthogonal: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """Value estimates for a batch of observations.

        Args:
            obs: [B, *obs_shape] observations.

        Returns:
            [B] values.
        """
        features = MLP(self.layers, self.activation, self.orthogonal)(flatten_obs(obs))
        if self.orthogonal:
            kernel_init = nn.initializers.orthogonal(_VALUE_ORTHOGONAL_SCALE)
        else:
            kernel_init = nn.linear.default_kernel_init
        return nn.Dense(1, kernel_init=kernel_init)(features)[:, 0]
