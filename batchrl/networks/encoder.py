"""Encoder: an observation tree as one float32 feature vector per observation, by leaf kind.

This is the one place that reads what an observation leaf is (`ObsLeaf.kind`); every
other layer moves observation trees leaf by leaf. Per leaf, over its own dims:

- vector: numbers (floats and integers) centred, scaled and clipped by their own
  streaming normaliser (when observations are normalised), bools cast to float;
  flattened.
- discrete: one-hot of (obs - start) over n.
- multi_discrete: one one-hot per element, concatenated in C order.
- binary: zeros and ones as floats.
- image: scaled into [0, 1] by the leaf's own bounds when known, else cast; channels
  moved last when they lead (`channels_first`); flattened. Never normalised.

The leaves' features are concatenated in `jax.tree.leaves` order: [..., F] with
F = `EnvSpec.feature_size`, for any leading axes ([B], [T, B], [E, L]). The observation
normaliser is a tree like the observation: a `NormalizerState` at each vector leaf of
numbers and each unbounded image (`ObsLeaf.normalized`), None elsewhere. `layout` says
which stretch of the features is an image and which CNN (`networks.cnn`) reads it; the
networks apply the CNNs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import ObsLeaf
from batchrl.networks import cnn
from batchrl.parts import normalizer

ObsTree = Any  # Dicts and tuples of arrays, like the observation spec.
NormTree = Any  # The same structure, a NormalizerState or None at each leaf.
# Where an image's channels are: found from its shape, or as the config says.
CHANNELS = ("auto", "first", "last")


def channels_first(leaf: ObsLeaf, channels: str = "auto") -> bool:
    """Whether an image leaf's channels lead its shape (C, H, W) rather than end it.

    "auto" reads the shape as Stable-Baselines3 does, channels first when the first dim
    is the smallest (MinAtar's (10, 10, 4) ends in its channels, a stack of four 84 x 84
    frames (4, 84, 84) leads with them), but for a first dim that only ties for it: last,
    Gymnasium's order (Seaquest-MinAtar's (10, 10, 10), which SB3's rule read as channels
    first, ends in its 10 channels); "first" and "last" say so for any shape.
    """
    if channels not in CHANNELS:
        raise ValueError(f"unknown image_channels {channels!r}: use one of {CHANNELS}")
    if channels == "auto":
        return leaf.shape[0] < min(leaf.shape[1:])
    return channels == "first"


def image_shape(leaf: ObsLeaf, channels: str = "auto") -> tuple[int, int, int]:
    """(height, width, channels) of an image leaf: the shape its features are flattened from."""
    if channels_first(leaf, channels):
        return (*leaf.shape[1:], leaf.shape[0])
    return leaf.shape


def layout(observation: Any, channels: str = "auto", network: str = "auto") -> tuple[cnn.Part, ...]:
    """Each leaf's stretch of the features, in order, with the CNN that reads it if any.

    Args:
        observation: The spec's observation tree of `ObsLeaf`.
        channels: Where images' channels are (`channels_first`).
        network: The config's `cnn` setting (`cnn.choose`): which network reads images.

    Raises:
        ValueError: naming an image too small for the network asked for, or the leaves of
            an observation with no image for it (a stack of RGB frames, Atari's with
            `grayscale=False`, is rank 4: flattened, its raw pixels would swamp the MLP).
    """
    parts = []
    leaves = env_spec_lib.leaf_paths(observation)
    for path, leaf in leaves:
        if leaf.kind != env_spec_lib.IMAGE:
            parts.append(cnn.Part(leaf.feature_size))
            continue
        image = image_shape(leaf, channels)
        read = (
            path
            if channels == "auto"
            else f"{path} {leaf.shape} read with image_channels={channels!r}"
        )
        chosen = cnn.choose(network, image, read)
        parts.append(cnn.Part(leaf.feature_size, image if chosen else None, chosen))
    if network in cnn.SMALLEST and not any(part.network for part in parts):
        shapes = ", ".join(f"{path} {leaf.shape}" for path, leaf in leaves)
        raise ValueError(
            f"cnn={network!r} reads images, Boxes of rank 3, and the observation has none "
            f"({shapes}): a stack of RGB frames is rank 4 (Atari: grayscale=True), or use "
            "cnn='auto'"
        )
    return tuple(parts)


def init_normalizer(observation: Any) -> NormTree:
    """Empty statistics of each vector leaf of numbers of the observation spec; None elsewhere."""
    return env_spec_lib.map_tree(
        lambda leaf: normalizer.init(leaf.shape) if leaf.normalized else None, observation
    )


def update_normalizer(observation: Any, obs_norm: NormTree, obs: ObsTree) -> NormTree:
    """Merges a batch of observations (leaves [..., *leaf.shape]) into each leaf's statistics."""

    def update(leaf: ObsLeaf, state: normalizer.NormalizerState | None, x: jax.Array) -> Any:
        if not leaf.normalized:
            return None
        return normalizer.update(state, jnp.asarray(x, jnp.float32).reshape(-1, *leaf.shape))

    return env_spec_lib.map_tree(update, observation, obs_norm, obs)


def normalized_states(obs_norm: NormTree) -> list[normalizer.NormalizerState]:
    """The statistics of the normalised leaves, in `jax.tree.leaves` order."""
    return [state for _, state in normalized_paths(obs_norm)]


def normalized_paths(obs_norm: NormTree) -> list[tuple[str, normalizer.NormalizerState]]:
    """(path, statistics) of the normalised leaves: `obs`, `obs["position"]`, ..."""
    paths = env_spec_lib.leaf_paths(obs_norm)
    return [(path, state) for path, state in paths if state is not None]


def features(
    observation: Any,
    obs_norm: NormTree,
    obs: ObsTree,
    *,
    normalize: bool = True,
    clip: float | None = 5.0,
    channels: str = "auto",
) -> jax.Array:
    """The features of observations: [..., F] float32.

    Args:
        observation: The spec's observation tree of `ObsLeaf`.
        obs_norm: The normaliser tree (`init_normalizer`'s structure).
        obs: Observations, the spec's structure, leaves [..., *leaf.shape] with the same
            leading axes.
        normalize: Scale vector leaves of numbers, and images without bounds, by their
            statistics; else only cast them.
        clip: Clip normalised leaves to [-clip, clip]; None leaves them unclipped.
        channels: Where images' channels are (`channels_first`): their features are
            [..., H * W * C] in (height, width, channels) order either way.

    Raises:
        ValueError: naming the leaf whose array does not end in the leaf's shape, or when
            the observation's structure is not the spec's.
    """
    paths = env_spec_lib.leaf_paths(observation)
    arrays = env_spec_lib.leaves(obs)
    states = env_spec_lib.leaves(obs_norm)
    if not len(paths) == len(arrays) == len(states):
        raise ValueError(
            f"observation has {len(arrays)} leaves and its normaliser {len(states)}, the spec "
            f"{len(paths)}: {observation!r}"
        )
    parts, lead = [], None
    for (path, leaf), state, x in zip(paths, states, arrays, strict=True):
        rank = jnp.ndim(x) - len(leaf.shape)
        if rank < 0 or tuple(jnp.shape(x)[rank:]) != leaf.shape:
            raise ValueError(f"{path} must be [..., *{leaf.shape}], got {jnp.shape(x)}")
        if lead is not None and tuple(jnp.shape(x)[:rank]) != lead:
            raise ValueError(f"{path} leads with {jnp.shape(x)[:rank]}, other leaves with {lead}")
        lead = tuple(jnp.shape(x)[:rank])
        encoded = _encode(leaf, state, x, normalize, clip, channels)
        parts.append(encoded.reshape(*lead, leaf.feature_size))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)


def _encode(
    leaf: ObsLeaf,
    state: normalizer.NormalizerState | None,
    x: jax.Array,
    normalize: bool,
    clip: float | None,
    channels: str,
) -> jax.Array:
    """One leaf's features, [..., *leaf.shape] or [..., n] (reshaped by the caller)."""
    if leaf.kind == env_spec_lib.DISCRETE:
        return jax.nn.one_hot(jnp.asarray(x, jnp.int32) - leaf.start[0], leaf.num_values[0])
    if leaf.kind == env_spec_lib.MULTI_DISCRETE:
        return _multi_one_hot(leaf, x)
    if leaf.kind == env_spec_lib.IMAGE:
        if leaf.normalized and normalize:  # No bounds to scale it by (`_image`).
            x = normalizer.normalize(state, x, center=True, clip=clip)
        return _image(leaf, x, channels)
    if leaf.kind == env_spec_lib.VECTOR and leaf.normalized and normalize:
        return normalizer.normalize(state, x, center=True, clip=clip)
    return jnp.asarray(x, jnp.float32)  # Other vectors, and binary leaves.


def _image(leaf: ObsLeaf, x: jax.Array, channels: str) -> jax.Array:
    """An image [..., *leaf.shape] scaled by its bounds, as [..., H, W, C] float32.

    By the Box's own bounds, not a fixed 255: a uint8 frame's 255 and a float grid's 1.0
    (MinAtar's bound) both read 1.0.
    """
    x = jnp.asarray(x, jnp.float32)
    if leaf.low is not None and leaf.high is not None and leaf.high > leaf.low:
        x = (x - leaf.low) / (leaf.high - leaf.low)
    return jnp.moveaxis(x, -3, -1) if channels_first(leaf, channels) else x


def _multi_one_hot(leaf: ObsLeaf, x: jax.Array) -> jax.Array:
    """One one-hot per element of x [..., *leaf.shape], concatenated: [..., sum(n)]."""
    lead = x.shape[: x.ndim - len(leaf.shape)]
    flat = jnp.asarray(x, jnp.int32).reshape(*lead, len(leaf.num_values))
    index = flat - jnp.asarray(leaf.start, jnp.int32)
    if len(set(leaf.num_values)) == 1:  # One count for all: one one_hot, no split.
        return jax.nn.one_hot(index, leaf.num_values[0]).reshape(*lead, -1)
    hots = [jax.nn.one_hot(index[..., i], n) for i, n in enumerate(leaf.num_values)]
    return jnp.concatenate(hots, axis=-1)
