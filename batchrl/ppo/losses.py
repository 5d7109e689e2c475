"""PPO losses: the seed's KL-penalty surrogate, the clipped surrogate, and the value loss.

Each takes per-step arrays of any shape and a `mask` of the same shape marking valid
steps (padding in episode memory is masked out), and returns a scalar.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def masked_mean(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Mean of x over the entries where mask is True (all when mask is None)."""
    if mask is None:
        return x.mean()
    return jnp.where(mask, x, 0.0).sum() / jnp.maximum(mask.sum(), 1)


def probability_ratio(
    log_prob: jax.Array, old_log_prob: jax.Array, mask: jax.Array | None
) -> jax.Array:
    """pi_new / pi_old per step; 1 at masked steps.

    A padded step's log-probabilities are of no real action, and their difference can
    overflow exp: masking after exp leaves the loss finite but makes its gradient NaN
    (0 * inf), and every parameter with it. The difference is masked before exp.
    """
    log_ratio = log_prob - old_log_prob
    if mask is not None:
        log_ratio = jnp.where(mask, log_ratio, 0.0)
    return jnp.exp(log_ratio)


def kl_penalty_policy_loss(
    log_prob: jax.Array,
    old_log_prob: jax.Array,
    advantage: jax.Array,
    kl: jax.Array,
    penalty: jax.Array,
    kl_target: float,
    cutoff_factor: float,
    cutoff_coef: float,
    mask: jax.Array | None = None,
) -> jax.Array:
    """The seed's objective: -ratio*advantage + penalty*KL + cutoff_coef*max(0, KL - c*target)^2.

    Arrays are [rows, steps], a row a chunk of an episode (one row where 1-D); kl is
    KL(old || new) per step. The cutoff applies to each row's KL, summed over its steps
    and divided by the row's length, padding included, as the seed's (a chunk's short
    tail weighs as little as its steps), and is averaged over the rows that hold steps:
    on the minibatch's mean KL it stayed silent while a few chunks drifted far and the
    rest held still.
    """
    ratio = probability_ratio(log_prob, old_log_prob, mask)
    surrogate = -masked_mean(ratio * advantage, mask)
    mean_kl = masked_mean(kl, mask)
    rows = jnp.atleast_2d(kl)
    held = jnp.ones(rows.shape, bool) if mask is None else jnp.atleast_2d(mask)
    row_kl = jnp.where(held, rows, 0.0).sum(-1) / rows.shape[-1]
    over = jnp.maximum(0.0, row_kl - cutoff_factor * kl_target) ** 2
    cutoff = cutoff_coef * masked_mean(over, held.any(-1))
    return surrogate + penalty * mean_kl + cutoff


def clipped_policy_loss(
    log_prob: jax.Array,
    old_log_prob: jax.Array,
    advantage: jax.Array,
    clip_ratio: float,
    mask: jax.Array | None = None,
) -> jax.Array:
    """The clipped surrogate of Schulman et al. (2017), negated for minimisation."""
    ratio = probability_ratio(log_prob, old_log_prob, mask)
    clipped = jnp.clip(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    return -masked_mean(jnp.minimum(ratio * advantage, clipped * advantage), mask)


def clip_fraction(log_prob: jax.Array, old_log_prob: jax.Array, clip_ratio: float) -> jax.Array:
    """The share of samples whose probability ratio left [1 - clip_ratio, 1 + clip_ratio]."""
    ratio = probability_ratio(log_prob, old_log_prob, None)
    return jnp.mean((jnp.abs(ratio - 1.0) > clip_ratio).astype(jnp.float32))


def value_loss(
    value: jax.Array,
    target: jax.Array,
    old_value: jax.Array | None = None,
    clip: float | None = None,
    mask: jax.Array | None = None,
) -> jax.Array:
    """0.5 * (target - value)^2; with `clip`, the larger of it and the clipped-value error."""
    error = (target - value) ** 2
    if clip is not None:
        clipped = old_value + jnp.clip(value - old_value, -clip, clip)
        error = jnp.maximum(error, (target - clipped) ** 2)
    return 0.5 * masked_mean(error, mask)


# The penalty coefficient never falls below this. The seed's rule alone divides it by 1.5
# after every quiet update, and on Reacher-v5 it reached exactly zero in float32 after
# about 4M steps, from where no multiplication could raise it again. At the floor the
# penalty term is inert (beta * KL = 1e-5 at a KL of 0.01); 17 updates above the target
# bring it back to 1.
MIN_PENALTY = 1e-3


def update_penalty(penalty: jax.Array, kl: jax.Array, kl_target: float) -> jax.Array:
    """The seed's adaptive rule, floored at MIN_PENALTY.

    x1.5 when KL > 1.3 target, /1.5 when KL < 0.7 target.
    """
    penalty = jnp.where(kl > 1.3 * kl_target, penalty * 1.5, penalty)
    penalty = jnp.where(kl < 0.7 * kl_target, penalty / 1.5, penalty)
    return jnp.maximum(penalty, MIN_PENALTY)


def standardize(x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Rescales x to zero mean and unit std over the valid entries; padding stays zero."""
    mean = masked_mean(x, mask)
    std = jnp.sqrt(masked_mean((x - mean) ** 2, mask))
    out = (x - mean) / (std + 1e-8)
    return out if mask is None else jnp.where(mask, out, 0.0)
