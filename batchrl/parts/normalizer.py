"""Streaming mean and variance normalisation, for use inside compiled training code.

As in BatchPPO, observations are centred, scaled and clipped to +-5, and rewards are
scaled but not centred and clipped to +-10:

    obs_norm = normalizer.update(obs_norm, transition.obs)
    obs = normalizer.normalize(obs_norm, obs, center=True, clip=5.0)
    reward = normalizer.normalize(reward_norm, reward, center=False, clip=10.0)

One state holds the statistics of one array; an observation tree has one at each vector
leaf of numbers and image without bounds (`networks.encoder.init_normalizer`).

Batches are merged with the parallel-variance formula of Chan et al., which stays
accurate when the data's mean is large relative to its spread.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

VAR_FLOOR = 1e-8
"""The smallest variance `std` reports, so that a constant feature does not divide by zero.

A floor, as Stable-Baselines3's and Gymnasium's 1e-8; the seed added 1e-4 to every variance,
which scaled a stream of spread below about 0.01 to less than unit spread (docs/training.md).
"""


@flax.struct.dataclass
class NormalizerState:
    """Running statistics of a stream of values of one shape.

    Attributes:
        count: [] float32, number of rows merged so far.
        mean: [*shape] float32, mean of the rows.
        var_sum: [*shape] float32, sum of squared deviations from the mean (M2).
    """

    count: jax.Array
    mean: jax.Array
    var_sum: jax.Array


def init(shape: Sequence[int]) -> NormalizerState:
    """Statistics of an empty stream of values of shape `shape`.

    Args:
        shape: the shape of one value, e.g. the observation shape; () for rewards.

    Returns:
        A state with count 0, mean 0 and var_sum 0, mean and var_sum of shape [*shape].
    """
    shape = tuple(shape)
    return NormalizerState(
        count=jnp.zeros((), jnp.float32),
        mean=jnp.zeros(shape, jnp.float32),
        var_sum=jnp.zeros(shape, jnp.float32),
    )


def update(
    state: NormalizerState, batch: jax.Array, mask: jax.Array | None = None
) -> NormalizerState:
    """Merges a batch of rows into the statistics (Chan et al.'s parallel variance).

    Args:
        state: the statistics so far.
        batch: [N, *shape] rows to merge.
        mask: optional [N] bool; only rows where it is True are merged.

    Returns:
        The statistics of the old stream followed by the batch's (selected) rows. A batch
        with no (selected) rows returns `state` unchanged.

    Raises:
        ValueError: if `batch` is not [N, *shape] or `mask` is not [N].
    """
    shape = state.mean.shape
    if batch.ndim != len(shape) + 1 or batch.shape[1:] != shape:
        raise ValueError(f"batch must be [N, *{shape}], got {batch.shape}")
    batch = jnp.asarray(batch, jnp.float32)
    if mask is None:
        weight = jnp.ones(batch.shape[:1], jnp.float32)
    else:
        if mask.shape != batch.shape[:1]:
            raise ValueError(f"mask must be [{batch.shape[0]}], got {mask.shape}")
        weight = jnp.asarray(mask, jnp.float32)
    weight = weight.reshape(weight.shape + (1,) * len(shape))  # [N, 1, ...]

    batch_count = jnp.sum(weight[(...,) + (0,) * len(shape)])
    safe_batch_count = jnp.maximum(batch_count, 1.0)
    batch_mean = jnp.sum(weight * batch, axis=0) / safe_batch_count
    batch_var_sum = jnp.sum(weight * jnp.square(batch - batch_mean), axis=0)
    return merge(state, NormalizerState(count=batch_count, mean=batch_mean, var_sum=batch_var_sum))


def merge(state: NormalizerState, other: NormalizerState) -> NormalizerState:
    """The statistics of `state`'s stream followed by `other`'s (Chan et al.).

    Returns `state` unchanged when `other` is empty. Merging the statistics of a stream's
    parts gives those of the whole within float error, in any grouping.
    """
    count = state.count + other.count
    fraction = other.count / jnp.maximum(count, 1.0)
    delta = other.mean - state.mean
    mean = state.mean + delta * fraction
    # delta^2 * n_a * n_b / n, ordered so that n_a * n_b cannot overflow.
    var_sum = state.var_sum + other.var_sum + jnp.square(delta) * state.count * fraction
    merged = NormalizerState(count=count, mean=mean, var_sum=var_sum)
    return jax.tree.map(lambda new, old: jnp.where(other.count > 0, new, old), merged, state)


def std(state: NormalizerState) -> jax.Array:
    """Sample standard deviation (ddof=1) of the stream.

    Args:
        state: the statistics.

    Returns:
        [*shape] float32: sqrt(max(var_sum / (count - 1), VAR_FLOOR)), or 1.0 while
        fewer than two rows have been seen.
    """
    var = state.var_sum / jnp.maximum(state.count - 1.0, 1.0)
    scale = jnp.sqrt(jnp.maximum(var, VAR_FLOOR))
    return jnp.where(state.count >= 2.0, scale, jnp.ones_like(scale))


def normalize(
    state: NormalizerState, x: jax.Array, *, center: bool, clip: float | None
) -> jax.Array:
    """Scales `x` by the stream's statistics.

    Args:
        state: the statistics.
        x: [..., *shape] values; leading axes (e.g. [B] or [T, B]) broadcast.
        center: subtract the mean first (observations), or not (rewards).
        clip: clip the result to [-clip, clip]; None leaves it unclipped.

    Returns:
        [..., *shape] float32, ((x - mean) if center else x) / std, clipped.

    Raises:
        ValueError: if the trailing axes of `x` are not [*shape].
    """
    shape = state.mean.shape
    if x.ndim < len(shape) or x.shape[x.ndim - len(shape) :] != shape:
        raise ValueError(f"x must be [..., *{shape}], got {x.shape}")
    x = jnp.asarray(x, jnp.float32)
    if center:
        x = x - state.mean
    x = x / std(state)
    if clip is not None:
        x = jnp.clip(x, -clip, clip)
    return x


def check_finite(state: NormalizerState) -> jax.Array:
    """Whether every statistic is finite.

    Training checks this after each update and stops with an error naming the
    normaliser, instead of silently training on NaN.

    Args:
        state: the statistics.

    Returns:
        [] bool, True if count, mean and var_sum are all finite.
    """
    leaves = jax.tree.leaves(state)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


def non_finite(state: NormalizerState, name: str) -> str | None:
    """What made the statistics of stream `name` non-finite, in words; None if they are not.

    On the host, after a phase. A finite mean beside an infinite `var_sum` is a stream of
    finite values too large for float32's squares (about 1.8e19 and above, 1e30
    observations); any other is a NaN or inf in the stream itself. The elements named
    are those of the stream's shape (`obs[1]` of a Box of shape (3,)).
    """
    mean, var_sum = np.asarray(state.mean), np.asarray(state.var_sum)
    bad = ~np.isfinite(mean) | ~np.isfinite(var_sum)
    if not bad.any():
        return None
    where = [name + "".join(f"[{i}]" for i in index) for index in np.argwhere(bad)[:3]]
    named = ", ".join(where) + (f" ({int(bad.sum())} elements)" if bad.sum() > 3 else "")
    if np.isfinite(mean[bad]).all():
        return f"{named} reached the normaliser too large for float32 statistics: scale them"
    # A float64 past float32's largest (3.4e38) arrives as inf: the env's own was finite.
    why = "NaN or inf, or beyond float32's 3.4e38"
    return f"{named} reached the normaliser non-finite ({why}): check them"
