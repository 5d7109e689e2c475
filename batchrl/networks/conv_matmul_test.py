import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from batchrl.networks import cnn, conv_matmul

LAYOUT = ("NHWC", "HWIO", "NHWC")


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _value_and_grads(convolve, images, kernel, strides, padding):
    def loss(images, kernel):
        dimension_numbers = lax.conv_dimension_numbers(images.shape, kernel.shape, LAYOUT)
        out = convolve(images, kernel, strides, padding, dimension_numbers=dimension_numbers)
        return jnp.sum(jnp.sin(out)), out

    (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(images, kernel)
    return out, *grads


@pytest.mark.parametrize(
    "size, kernel_size, stride, padding",
    [
        # Kernels of multiples of their strides go through blocks of pixels as channels.
        (20, 8, 4, "VALID"),  # The Nature CNN's first layer: (20 - 8) % 4 == 0.
        (11, 4, 2, "VALID"),  # The stride leaves a row and column out: (11 - 4) % 2 == 1.
        (10, 3, 1, "VALID"),  # The MinAtar network's layer.
        (9, 3, 2, ((1, 2), (0, 1))),  # Explicit padding; the stride leaves a row out.
        (13, 4, 2, ((1, 0), (2, 1))),  # Explicit padding, then blocks.
    ],
)
def test_values_and_gradients_are_lax_own(size, kernel_size, stride, padding):
    rng = np.random.default_rng(0)
    images = rng.standard_normal((3, size, size + 2, 5), np.float32)
    kernel = rng.standard_normal((kernel_size, kernel_size, 5, 7), np.float32)
    kernel /= np.sqrt(kernel_size * kernel_size * 5)  # Outputs of about 1.
    strides = (stride, stride)
    ours = _value_and_grads(conv_matmul.conv, images, kernel, strides, padding)
    theirs = _value_and_grads(lax.conv_general_dilated, images, kernel, strides, padding)
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.shape == reference.shape
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-4)


def test_cases_it_does_not_cover_go_to_lax():
    rng = np.random.default_rng(0)
    images = rng.standard_normal((2, 3, 9, 9), np.float32)  # NCHW.
    kernel = rng.standard_normal((4, 3, 3, 3), np.float32)  # OIHW.
    numbers = lax.conv_dimension_numbers(images.shape, kernel.shape, ("NCHW", "OIHW", "NCHW"))
    for padding in ("SAME", "VALID"):
        mine = conv_matmul.conv(images, kernel, (1, 1), padding, dimension_numbers=numbers)
        reference = lax.conv_general_dilated(
            images, kernel, (1, 1), padding, dimension_numbers=numbers
        )
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-5)
    # Flax's layout with "SAME" padding, or a dilated kernel.
    images = images.transpose(0, 2, 3, 1)
    kernel = kernel.transpose(2, 3, 1, 0)
    numbers = lax.conv_dimension_numbers(images.shape, kernel.shape, LAYOUT)
    for padding, dilation in (("SAME", (1, 1)), ("VALID", (2, 2))):
        options = {"rhs_dilation": dilation, "dimension_numbers": numbers}
        mine = conv_matmul.conv(images, kernel, (2, 1), padding, **options)
        reference = lax.conv_general_dilated(images, kernel, (2, 1), padding, **options)
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-5)


def _lowered_update(net, image):
    """A CNN's SGD steps inside a `lax.scan`, as PPO's minibatches run, lowered."""
    batches = jnp.zeros((2, 8, *image))
    params = net.init(jax.random.key(0), batches[0])

    def step(params, batch):
        grads = jax.grad(lambda p: jnp.mean(net.apply(p, batch) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), None

    return jax.jit(lambda p: lax.scan(step, p, batches)[0]).lower(params)


@pytest.mark.parametrize("kind, image", [("nature", (36, 36, 4)), ("minatar", (10, 10, 4))])
def test_a_cnn_update_inside_a_scan_runs_no_convolution_on_cpu(kind, image):
    # XLA:CPU runs a convolution's gradients inside loops as generic loops, several times
    # slower than the slices and matrix products the patches differentiate into.
    lowered = _lowered_update(cnn.network(kind), image)
    if jax.default_backend() == "cpu":
        hlo = lowered.compile().as_text()
        assert re.findall(r"\bconvolution\(", hlo) == []
        assert re.search(r"\bdot\(", hlo)
    else:  # GPUs' convolutions (cuDNN) are fast as they are.
        assert "stablehlo.convolution" in lowered.as_text()


@pytest.mark.parametrize("platform, convolutions", [("cpu", False), ("cuda", True)])
def test_the_program_s_device_chooses_not_jax_s_default_one(platform, convolutions):
    # A learner (`device=cpu`) or acting on the CPU of a GPU machine, where JAX's default
    # device is the GPU, takes the patches; a program for the GPU keeps cuDNN's convolution.
    net = cnn.network("nature")
    image = jnp.zeros((2, 36, 36, 4))
    params = net.init(jax.random.key(0), image)
    lowered = jax.jit(net.apply).trace(params, image).lower(lowering_platforms=(platform,))
    assert ("stablehlo.convolution" in lowered.as_text()) == convolutions
