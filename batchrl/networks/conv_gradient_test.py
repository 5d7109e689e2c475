import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from batchrl.networks import cnn, conv_gradient

LAYOUT = ("NHWC", "HWIO", "NHWC")


def _grads(convolve, images, kernel, strides, padding):
    def loss(images, kernel):
        dimension_numbers = lax.conv_dimension_numbers(images.shape, kernel.shape, LAYOUT)
        out = convolve(images, kernel, strides, padding, dimension_numbers=dimension_numbers)
        return jnp.sum(jnp.sin(out))

    return jax.grad(loss, argnums=(0, 1))(images, kernel)


@pytest.mark.parametrize(
    "size, kernel_size, stride, padding",
    [
        (36, 8, 4, "VALID"),  # The Nature CNN's first layer: (36 - 8) % 4 == 0.
        (11, 4, 2, "VALID"),  # The stride leaves a row and column out: (11 - 4) % 2 == 1.
        (10, 3, 1, "VALID"),  # The MinAtar network's layer.
        (9, 3, 2, ((1, 2), (0, 1))),  # Explicit padding.
    ],
)
def test_gradients_are_lax_own(size, kernel_size, stride, padding):
    images = jax.random.normal(jax.random.key(0), (3, size, size, 5))
    kernel = jax.random.normal(jax.random.key(1), (kernel_size, kernel_size, 5, 7))
    strides = (stride, stride)
    ours = _grads(conv_gradient.conv, images, kernel, strides, padding)
    theirs = _grads(lax.conv_general_dilated, images, kernel, strides, padding)
    for mine, reference in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-4)


def test_layouts_it_does_not_cover_go_to_lax():
    images = jax.random.normal(jax.random.key(0), (2, 3, 9, 9))  # NCHW.
    kernel = jax.random.normal(jax.random.key(1), (4, 3, 3, 3))  # OIHW.
    numbers = lax.conv_dimension_numbers(images.shape, kernel.shape, ("NCHW", "OIHW", "NCHW"))
    for padding in ("SAME", "VALID"):
        mine = conv_gradient.conv(images, kernel, (1, 1), padding, dimension_numbers=numbers)
        reference = lax.conv_general_dilated(
            images, kernel, (1, 1), padding, dimension_numbers=numbers
        )
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind, image", [("nature", (84, 84, 4)), ("minatar", (10, 10, 4))])
def test_a_cnn_update_inside_a_scan_uses_only_canonical_convolutions(kind, image):
    # XLA:CPU runs convolutions of the canonical layout with its fast kernels; inside a
    # loop it left the kernel gradient's in another, run as a generic loop, 10-17x slower.
    net = cnn.network(kind)
    batches = jnp.zeros((2, 8, *image))
    params = net.init(jax.random.key(0), batches[0])

    def step(params, batch):
        grads = jax.grad(lambda p: jnp.mean(net.apply(p, batch) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), None

    compiled = jax.jit(lambda p: lax.scan(step, p, batches)[0]).lower(params).compile()
    labels = re.findall(r"convolution\(.*?dim_labels=(\S+?)[,\s]", compiled.as_text())
    # Each layer's forward and kernel gradient, and the input gradients past the first.
    assert len(labels) == 3 * len(net.convolutions) - 1
    assert set(labels) == {"b01f_01io->b01f"}, labels
