"""Action distributions as pure functions of their parameters: Gaussian, categorical, Bernoulli.

A distribution is not an object here: it is the arrays a network returns, (mean, std)
for a diagonal Gaussian over A action dimensions and logits over N actions for a
categorical, passed to the functions below. Independent categoricals (a `MultiDiscrete`
action of K elements) take their logits one element after another, [..., sum(nvec)];
independent Bernoullis (a `MultiBinary`) one logit a bit. Leading batch dimensions `...`
broadcast.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

_LOG_2PI = math.log(2.0 * math.pi)


def gaussian_log_prob(mean: jax.Array, std: jax.Array, x: jax.Array) -> jax.Array:
    """Log density of `x` under a diagonal Gaussian.

    Args:
        mean: [..., A] mean.
        std: [..., A] standard deviation, positive.
        x: [..., A] the point to evaluate.

    Returns:
        [...] log density, summed over the A dimensions.
    """
    z = (x - mean) / std
    return jnp.sum(-0.5 * jnp.square(z) - jnp.log(std) - 0.5 * _LOG_2PI, axis=-1)


def gaussian_entropy(mean: jax.Array, std: jax.Array) -> jax.Array:
    """Differential entropy of a diagonal Gaussian.

    Args:
        mean: [..., A] mean; only its shape matters.
        std: [..., A] standard deviation, positive; broadcast against `mean`.

    Returns:
        [...] entropy in nats, summed over the A dimensions.
    """
    shape = jnp.broadcast_shapes(jnp.shape(mean), jnp.shape(std))
    per_dim = jnp.broadcast_to(jnp.log(std) + 0.5 * (1.0 + _LOG_2PI), shape)
    return jnp.sum(per_dim, axis=-1)


def gaussian_kl(
    mean_p: jax.Array, std_p: jax.Array, mean_q: jax.Array, std_q: jax.Array
) -> jax.Array:
    """Closed-form KL(p || q) between two diagonal Gaussians.

    Args:
        mean_p: [..., A] mean of p.
        std_p: [..., A] standard deviation of p.
        mean_q: [..., A] mean of q.
        std_q: [..., A] standard deviation of q.

    Returns:
        [...] KL divergence in nats, summed over the A dimensions.
    """
    variance_ratio = jnp.square(std_p / std_q)
    mean_term = jnp.square((mean_p - mean_q) / std_q)
    per_dim = 0.5 * (variance_ratio + mean_term - 1.0 - jnp.log(variance_ratio))
    return jnp.sum(per_dim, axis=-1)


def gaussian_sample(key: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
    """Draws one sample from a diagonal Gaussian.

    Args:
        key: PRNG key.
        mean: [..., A] mean.
        std: [..., A] standard deviation; broadcast against `mean`.

    Returns:
        [..., A] sample, in the dtype of `mean`.
    """
    shape = jnp.broadcast_shapes(jnp.shape(mean), jnp.shape(std))
    noise = jax.random.normal(key, shape, dtype=jnp.result_type(mean))
    return mean + std * noise


def categorical_log_prob(logits: jax.Array, x: jax.Array) -> jax.Array:
    """Log probability of actions `x` under a categorical distribution.

    Args:
        logits: [..., N] unnormalised log probabilities.
        x: [...] int actions in [0, N).

    Returns:
        [...] log probability of each action.
    """
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    index = jnp.asarray(x, jnp.int32)[..., None]
    return jnp.take_along_axis(log_probs, index, axis=-1)[..., 0]


def categorical_entropy(logits: jax.Array) -> jax.Array:
    """Entropy of a categorical distribution; actions with logit -inf contribute zero.

    Args:
        logits: [..., N] unnormalised log probabilities.

    Returns:
        [...] entropy in nats.
    """
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    probs = jnp.exp(log_probs)
    # Replace -inf before multiplying so that neither the value nor the gradient is nan.
    safe_log_probs = jnp.where(probs > 0, log_probs, 0.0)
    return -jnp.sum(probs * safe_log_probs, axis=-1)


def categorical_kl(logits_p: jax.Array, logits_q: jax.Array) -> jax.Array:
    """KL(p || q) between two categorical distributions.

    Args:
        logits_p: [..., N] logits of p; actions p gives probability zero contribute zero.
        logits_q: [..., N] logits of q.

    Returns:
        [...] KL divergence in nats.
    """
    log_p = jax.nn.log_softmax(logits_p, axis=-1)
    log_q = jax.nn.log_softmax(logits_q, axis=-1)
    p = jnp.exp(log_p)
    log_ratio = jnp.where(p > 0, log_p - log_q, 0.0)
    return jnp.sum(p * log_ratio, axis=-1)


def categorical_sample(key: jax.Array, logits: jax.Array) -> jax.Array:
    """Draws one action from a categorical distribution.

    Args:
        key: PRNG key.
        logits: [..., N] unnormalised log probabilities.

    Returns:
        [...] int32 action.
    """
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def categorical_mode(logits: jax.Array) -> jax.Array:
    """The most probable action (the first one on ties).

    Args:
        logits: [..., N] unnormalised log probabilities.

    Returns:
        [...] int32 action.
    """
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def _per_element(logits: jax.Array, nvec: tuple[int, ...]) -> jax.Array:
    """Logits [..., sum(nvec)] as [..., K, max(nvec)], each element's row padded with -inf."""
    if len(set(nvec)) == 1:
        return logits.reshape(*logits.shape[:-1], len(nvec), nvec[0])
    widest = max(nvec)
    offsets = np.cumsum((0, *nvec[:-1]))
    columns = np.arange(widest)
    index = np.minimum(offsets[:, None] + columns, sum(nvec) - 1)  # [K, max(nvec)]
    real = columns[None, :] < np.asarray(nvec)[:, None]
    return jnp.where(real, logits[..., index], -jnp.inf)


def multi_categorical_log_prob(logits: jax.Array, x: jax.Array, nvec: tuple[int, ...]) -> jax.Array:
    """Log probability of independent categorical actions (a `MultiDiscrete`).

    Args:
        logits: [..., sum(nvec)] the elements' logits, one after another.
        x: [..., K] int actions, element k in [0, nvec[k]).
        nvec: the K elements' counts (static).

    Returns:
        [...] the sum of the elements' log probabilities.
    """
    return categorical_log_prob(_per_element(logits, nvec), x).sum(axis=-1)


def multi_categorical_entropy(logits: jax.Array, nvec: tuple[int, ...]) -> jax.Array:
    """Entropy of independent categoricals: [...] the sum of the elements' entropies."""
    return categorical_entropy(_per_element(logits, nvec)).sum(axis=-1)


def multi_categorical_kl(
    logits_p: jax.Array, logits_q: jax.Array, nvec: tuple[int, ...]
) -> jax.Array:
    """KL(p || q) of independent categoricals: [...] the sum of the elements' KLs."""
    return categorical_kl(_per_element(logits_p, nvec), _per_element(logits_q, nvec)).sum(axis=-1)


def multi_categorical_sample(key: jax.Array, logits: jax.Array, nvec: tuple[int, ...]) -> jax.Array:
    """One draw of each element, independently: [..., K] int32."""
    return categorical_sample(key, _per_element(logits, nvec))


def multi_categorical_mode(logits: jax.Array, nvec: tuple[int, ...]) -> jax.Array:
    """Each element's most probable action: [..., K] int32."""
    return categorical_mode(_per_element(logits, nvec))


def bernoulli_log_prob(logits: jax.Array, x: jax.Array) -> jax.Array:
    """Log probability of bits `x` (0 or 1, any dtype) under independent Bernoullis.

    Args:
        logits: [..., N] the log-odds of each bit being 1.
        x: [..., N] the bits.

    Returns:
        [...] the sum of the bits' log probabilities.
    """
    one = jnp.asarray(x, logits.dtype)
    log_p = one * jax.nn.log_sigmoid(logits) + (1.0 - one) * jax.nn.log_sigmoid(-logits)
    return log_p.sum(axis=-1)


def bernoulli_entropy(logits: jax.Array) -> jax.Array:
    """Entropy of independent Bernoullis: [...] the sum of the bits' entropies."""
    p = jax.nn.sigmoid(logits)
    per_bit = -(p * jax.nn.log_sigmoid(logits) + (1.0 - p) * jax.nn.log_sigmoid(-logits))
    return per_bit.sum(axis=-1)


def bernoulli_kl(logits_p: jax.Array, logits_q: jax.Array) -> jax.Array:
    """KL(p || q) of independent Bernoullis: [...] the sum of the bits' KLs."""
    p = jax.nn.sigmoid(logits_p)
    ones = jax.nn.log_sigmoid(logits_p) - jax.nn.log_sigmoid(logits_q)
    zeros = jax.nn.log_sigmoid(-logits_p) - jax.nn.log_sigmoid(-logits_q)
    return (p * ones + (1.0 - p) * zeros).sum(axis=-1)


def bernoulli_sample(key: jax.Array, logits: jax.Array) -> jax.Array:
    """One draw of each bit: [..., N] int32, 1 with probability sigmoid(logits)."""
    return jax.random.bernoulli(key, jax.nn.sigmoid(logits)).astype(jnp.int32)


def bernoulli_mode(logits: jax.Array) -> jax.Array:
    """Each bit's more probable value (0 on ties): [..., N] int32."""
    return (logits > 0).astype(jnp.int32)
