"""A 2-D convolution whose kernel gradient stays fast inside XLA:CPU's loops.

Inside a loop body (`lax.scan`, `while`), XLA:CPU leaves the convolution that computes a
kernel's gradient in a layout its fast convolution does not take (dimension labels
`f01b_i01o->01bf`) and runs it as a generic loop; outside a loop the same gradient is
rewritten into the canonical layout. PPO's epochs and minibatches are scans, so a CNN
update paid 10-17x for it (benchmarks/cnn_update.py measures both). `conv` is
`lax.conv_general_dilated` forward; its custom VJP computes both gradients as
convolutions in the canonical layout itself. The kernel's: the input channels as its
batch, the examples as its features, the output's gradient as its kernel dilated by the
stride. The input's: the output's gradient dilated by the stride and padded, convolved
with the kernel flipped and its channels swapped (lax's own took another layout too).
Cases it does not cover (other layouts, dilations, feature groups, "SAME" padding) go
to `lax.conv_general_dilated` unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

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
    """`lax.conv_general_dilated`'s signature and values; see the module for the gradient."""
    plain = functools.partial(
        lax.conv_general_dilated,
        window_strides=window_strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers,
        feature_group_count=feature_group_count,
        precision=precision,
        **kwargs,
    )
    covered = (
        lhs.ndim == 4
        and dimension_numbers == lax.conv_dimension_numbers(lhs.shape, rhs.shape, _LAYOUT)
        and all(d == 1 for d in (*(lhs_dilation or ()), *(rhs_dilation or ())))
        and feature_group_count == 1
        and not kwargs
        and (padding == "VALID" or not isinstance(padding, str))
    )
    if not covered:
        return plain(lhs, rhs)
    if not isinstance(padding, str):
        lhs = jnp.pad(lhs, ((0, 0), *[tuple(pair) for pair in padding], (0, 0)))
    return _valid_conv(lhs, rhs, tuple(window_strides), precision)


def _forward(lhs: jax.Array, rhs: jax.Array, strides: tuple[int, ...], precision) -> jax.Array:
    return lax.conv_general_dilated(
        lhs, rhs, strides, "VALID", dimension_numbers=_LAYOUT, precision=precision
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _valid_conv(lhs: jax.Array, rhs: jax.Array, strides: tuple[int, ...], precision) -> jax.Array:
    """NHWC images, HWIO kernel, no padding."""
    return _forward(lhs, rhs, strides, precision)


def _valid_conv_fwd(lhs, rhs, strides, precision):
    return _forward(lhs, rhs, strides, precision), (lhs, rhs)


def _valid_conv_bwd(strides, precision, residuals, grad_out):
    lhs, rhs = residuals
    height, width = rhs.shape[:2]
    # [N, H, W, in channels]; rows and columns past the stride's last reach get padding.
    sides = zip(lhs.shape[1:3], (height, width), strides, strict=True)
    left_out = [(size - kernel) % stride for size, kernel, stride in sides]
    grad_lhs = lax.conv_general_dilated(
        grad_out,
        jnp.transpose(rhs[::-1, ::-1], (0, 1, 3, 2)),
        (1, 1),
        [(height - 1, height - 1 + left_out[0]), (width - 1, width - 1 + left_out[1])],
        lhs_dilation=strides,
        dimension_numbers=_LAYOUT,
        precision=precision,
    )
    # [in channels, H, W, N] convolved with [out H, out W, N, out channels], dilated by
    # the stride: [in channels, >= height, >= width, out channels]; rows and columns the
    # stride never reached come past the kernel's size and are cut.
    grad_rhs = lax.conv_general_dilated(
        jnp.transpose(lhs, (3, 1, 2, 0)),
        jnp.transpose(grad_out, (1, 2, 0, 3)),
        (1, 1),
        "VALID",
        rhs_dilation=strides,
        dimension_numbers=_LAYOUT,
        precision=precision,
    )
    grad_rhs = jnp.transpose(grad_rhs[:, :height, :width, :], (1, 2, 0, 3))
    return grad_lhs.astype(lhs.dtype), grad_rhs.astype(rhs.dtype)


_valid_conv.defvjp(_valid_conv_fwd, _valid_conv_bwd)
