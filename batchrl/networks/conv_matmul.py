"""A 2-D convolution on CPU as patches and one matrix product, fast inside PPO's scans.

XLA:CPU runs a convolution's gradients inside a loop body (`lax.scan`, `while`) slowly:
it leaves them in layouts its fast convolution does not take and runs them as generic
loops. PPO's epochs and minibatches are scans, so one update of the `breakout` preset
(Nature CNN, 1,024 rows, 4 epochs x 4 minibatches) took 97 s on a 2-core CPU with
`lax.conv_general_dilated`. A custom VJP that computed both gradients as convolutions in
the canonical layout brought it to 6.6 s. This module drops convolutions altogether:
`conv` cuts the (padded) images into strided slices, one per kernel offset, concatenates
them into patches [N, out H, out W, kernel H * kernel W * C] in (row, column, channel)
order, and takes one `jnp.dot` with the kernel reshaped to [kernel H * kernel W * C, F].
Slices, concatenation and the product differentiate into slices, pads and products that
XLA:CPU runs fast in loops, so no custom gradient is needed; the same update takes about
3.1 s, its parameters equal to float error. A strided kernel whose sides are multiples of
its strides (the Nature CNN's 8 x 8 at 4 and 4 x 4 at 2) is first made a stride-1 one on
blocks of pixels as channels (`_space_to_depth`): 4 slices where there were 64 and 16,
the update about 5 % faster.

`conv` has `lax.conv_general_dilated`'s signature, so Flax's `nn.Conv` takes it as its
`conv_general_dilated` with the parameters unchanged. It covers NHWC images with HWIO
kernels (Flax's layout), no dilations, one feature group, and "VALID" or explicit
non-negative padding; other cases go to `lax.conv_general_dilated` unchanged. So do all
cases in programs compiled for other devices (`lax.platform_dependent`: the program's
device decides, not JAX's default one, so a learner or acting on the CPU of a GPU machine
takes the patches): GPUs' convolutions (cuDNN) are fast as they are. A trick
(`batchrl.tricks`, "conv_matmul"): turned off, every convolution is lax's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from batchrl import tricks

_LAYOUT = ("NHWC", "HWIO", "NHWC")


def conv(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: lax.ConvDimensionNumbers | None = None,
    feature_group_count: int = 1,
    precision: lax.PrecisionLike = None,
    **kwargs: object,
) -> jax.Array:
    """`lax.conv_general_dilated`'s signature and values; on CPU, patches and one product."""
    pads = _pads(padding)
    covered = (
        tricks.on("conv_matmul")
        and not kwargs
        and lhs.ndim == 4
        and dimension_numbers == lax.conv_dimension_numbers(lhs.shape, rhs.shape, _LAYOUT)
        and all(d == 1 for d in (*(lhs_dilation or ()), *(rhs_dilation or ())))
        and feature_group_count == 1
        and pads is not None
        # Zero strides and images smaller than the kernel get lax's error.
        and all(stride >= 1 for stride in window_strides)
        and all(
            size + low + high >= kernel
            for size, (low, high), kernel in zip(lhs.shape[1:3], pads, rhs.shape[:2], strict=True)
        )
    )

    def convolution(lhs: jax.Array, rhs: jax.Array) -> jax.Array:
        return lax.conv_general_dilated(
            lhs,
            rhs,
            window_strides,
            padding,
            lhs_dilation=lhs_dilation,
            rhs_dilation=rhs_dilation,
            dimension_numbers=dimension_numbers,
            feature_group_count=feature_group_count,
            precision=precision,
            **kwargs,
        )

    if not covered:
        return convolution(lhs, rhs)
    strides = tuple(window_strides)
    patches = functools.partial(_as_product, strides=strides, pads=pads, precision=precision)
    return lax.platform_dependent(lhs, rhs, cpu=patches, default=convolution)


def _as_product(
    lhs: jax.Array,
    rhs: jax.Array,
    *,
    strides: tuple[int, ...],
    pads: list[tuple[int, int]],
    precision: lax.PrecisionLike,
) -> jax.Array:
    """The covered convolution as patches and one product (the module's way)."""
    if any(pads[0] + pads[1]):
        lhs = jnp.pad(lhs, ((0, 0), *pads, (0, 0)))
    height, width, channels, features = rhs.shape
    if all(s > 1 and k % s == 0 for k, s in zip((height, width), strides, strict=True)):
        lhs, rhs = _space_to_depth(lhs, rhs, strides)
        height, width, channels, features = rhs.shape
        strides = (1, 1)
    patches = _patches(lhs, (height, width), strides)
    return jnp.dot(patches, rhs.reshape(height * width * channels, features), precision=precision)


def _space_to_depth(
    images: jax.Array, kernel: jax.Array, strides: tuple[int, int]
) -> tuple[jax.Array, jax.Array]:
    """The same convolution at stride 1: blocks of strides[0] x strides[1] pixels as channels.

    For kernels whose sides are multiples of the strides: images [N, H, W, C] become
    [N, H / s0, W / s1, s0 * s1 * C] (cropped to the rows and columns the kernel reaches)
    and the kernel [k0, k1, C, F] becomes [k0 / s0, k1 / s1, s0 * s1 * C, F], so the
    patches are (k0 / s0) * (k1 / s1) slices where they were k0 * k1 strided ones.
    """
    (k0, k1, channels, features), (s0, s1) = kernel.shape, strides
    n, height, width, _ = images.shape
    rows = ((height - k0) // s0 + k0 // s0) * s0  # The rows the kernel reaches, in blocks.
    columns = ((width - k1) // s1 + k1 // s1) * s1
    blocks = images[:, :rows, :columns].reshape(n, rows // s0, s0, columns // s1, s1, channels)
    blocks = blocks.transpose(0, 1, 3, 2, 4, 5).reshape(n, rows // s0, columns // s1, -1)
    kernel = kernel.reshape(k0 // s0, s0, k1 // s1, s1, channels, features)
    kernel = kernel.transpose(0, 2, 1, 3, 4, 5).reshape(k0 // s0, k1 // s1, -1, features)
    return blocks, kernel


def _pads(padding: str | Sequence[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """Two (low, high) pads of "VALID" or explicit padding; None for others or negatives."""
    if isinstance(padding, str):
        return [(0, 0), (0, 0)] if padding == "VALID" else None
    pads = [tuple(pair) for pair in padding]
    return pads if len(pads) == 2 and all(p >= 0 for pair in pads for p in pair) else None


def _patches(images: jax.Array, kernel: tuple[int, int], strides: tuple[int, int]) -> jax.Array:
    """Patches [N, out H, out W, kernel H * kernel W * C] of images [N, H, W, C].

    One strided slice per kernel offset, in (row, column, channel) order, as an HWIO
    kernel's rows come when reshaped to [kernel H * kernel W * C, F].
    """
    # Each slice's reach: the offset of its last output row (column) from its first.
    reach = [
        stride * ((size - side) // stride)
        for size, side, stride in zip(images.shape[1:3], kernel, strides, strict=True)
    ]
    slices = [
        images[:, i : i + reach[0] + 1 : strides[0], j : j + reach[1] + 1 : strides[1]]
        for i in range(kernel[0])
        for j in range(kernel[1])
    ]
    return jnp.concatenate(slices, axis=-1)
