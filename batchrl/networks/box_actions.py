"""A Gaussian policy's action elements onto a `Box`: its bounds and dtype, element by element.

The policy acts in [-1, 1] where a Box is bounded (the seed's convention): an element
with both bounds finite maps linearly onto them, one with a single finite bound is
clipped to it, one with none passes as it is. Bounds further apart than float32 holds
(a Box of float32's largest value each way, a common "unbounded") count as none: their
span overflowed, and every action came out at a bound. The clip bounds are rounded inward to
float32, so the action read in the space's dtype (a float64 Box's 0.1, say) lies inside
the space. A Box of integers gets each of its values an equal share of [-1, 1], the
mapped element rounded. Only the env's copy is mapped: the policy stores and scores the
element it drew.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def onto_box(
    x: jax.Array,
    low: Sequence[float] | None,
    high: Sequence[float] | None,
    integers: bool = False,
) -> jax.Array:
    """Elements `x` [..., D] as a Box's: `low`, `high` per element (inf where unbounded).

    None for `low` and `high`: a Box with no finite bound. `integers`: the Box's dtype is
    an integer one; the result is then whole numbers (still float32).
    """
    if low is None or high is None:
        return jnp.round(x) if integers else x
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    both = linear(low, high, low.size)
    half = 0.5 if integers else 0.0  # Each whole number gets a cell of width one.
    start = np.where(both, low - half, 0.0)
    span = np.where(both, high - low + 2 * half, 0.0)
    mapped = jnp.asarray(start, jnp.float32) + (x + 1.0) * 0.5 * jnp.asarray(span, jnp.float32)
    mapped = jnp.where(both, mapped, x)  # Exactly as drawn where not both bounds are finite.
    if integers:
        mapped = jnp.round(mapped)
    return jnp.clip(mapped, _inward(low, np.inf), _inward(high, -np.inf))


def linear(low: Sequence[float] | None, high: Sequence[float] | None, size: int) -> np.ndarray:
    """Which of `size` elements map linearly onto their bounds: both finite, the span a float32."""
    if low is None or high is None:
        return np.zeros((size,), bool)
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    both = np.isfinite(low) & np.isfinite(high)
    span = np.where(both, high - low + 1.0, 0.0)  # With an integer Box's half cells.
    return both & (span <= np.finfo(np.float32).max)


def _inward(bound: np.ndarray, toward: float) -> np.ndarray:
    """`bound` in float32, moved one step `toward` the inside where float32 rounded it out."""
    with np.errstate(over="ignore"):  # A float64 bound past float32's range: inf, moved in.
        rounded = bound.astype(np.float32)
    outside = rounded < bound if toward > 0 else rounded > bound
    return np.where(outside, np.nextafter(rounded, np.float32(toward)), rounded)
