"""CNNs on image features: the Nature CNN for Atari-sized frames, the MinAtar network for grids.

`Torso` reads the encoder's features of an observation tree, [N, F]: the stretch of each
image leaf that a CNN reads (pixels already scaled into [0, 1], in (height, width,
channels) order) is reshaped into its image and goes through its own CNN; every other
leaf's features pass as they are; all are concatenated in leaf order. The encoder says
which stretch is which (`encoder.layout`); nothing here reads what a leaf is.

The networks, each ending in a ReLU, chosen per image by `choose`:
- "nature": Mnih et al. (2015)'s Atari network, as CleanRL's and Stable-Baselines3's:
  convolutions of 32 8x8 filters at stride 4, 64 4x4 at stride 2, 64 3x3 at stride 1
  (no padding), then 512 units. It needs 36 pixels a side at least.
- "minatar": Young and Tian (2019)'s MinAtar network: one convolution of 16 3x3 filters
  at stride 1 (no padding), then 128 units. It needs 3 pixels a side.
"auto" takes the Nature CNN from 36 pixels a side, the MinAtar network from 3, and
leaves smaller images flattened into the MLP ("none"). Kernels get the hidden layers'
init (`feed_forward.hidden_init`), biases zeros.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from batchrl.networks import conv_matmul, feed_forward

CNNS = ("auto", "nature", "minatar", "none")
# The smallest side each network's convolutions fit.
SMALLEST = {"nature": 36, "minatar": 3}
_NATURE_CONVOLUTIONS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (filters, kernel, stride)
_MINATAR_CONVOLUTIONS = ((16, 3, 1),)


@dataclasses.dataclass(frozen=True)
class Part:
    """One leaf's stretch of the features, and the CNN that reads it.

    Attributes:
        size: Features of the leaf.
        image: (height, width, channels) the stretch is reshaped into for its CNN; None
            when it passes as it is.
        network: "nature" or "minatar"; None when the stretch passes as it is.
    """

    size: int
    image: tuple[int, int, int] | None = None
    network: str | None = None

    def __post_init__(self):
        if (self.image is None) != (self.network is None):
            raise ValueError(f"a part has both an image and a network or neither, got {self}")


def choose(setting: str, image: tuple[int, int, int], path: str = "obs") -> str | None:
    """The network for an image (height, width, channels) under the config's `cnn` setting.

    Returns:
        "nature", "minatar", or None for an image flattened into the MLP.

    Raises:
        ValueError: an unknown setting, or a network asked for on an image smaller than
            its convolutions fit (naming the leaf at `path`).
    """
    if setting not in CNNS:
        raise ValueError(f"unknown cnn {setting!r}: use one of {CNNS}")
    side = min(image[:2])
    if setting == "auto":
        fitting = [name for name in ("nature", "minatar") if side >= SMALLEST[name]]
        return fitting[0] if fitting else None
    if setting == "none":
        return None
    if side < SMALLEST[setting]:
        raise ValueError(
            f"cnn={setting!r} needs images of at least {SMALLEST[setting]} pixels a side, "
            f"{path} is {image[0]} x {image[1]}; use cnn='auto' or a smaller network"
        )
    return setting


def output_size(part: Part) -> int:
    """Features `Torso` makes of one part."""
    return {"nature": 512, "minatar": 128}[part.network] if part.network else part.size


class ConvNet(nn.Module):
    """Convolutions (no padding), each followed by a ReLU, then one ReLU layer of `units`.

    Maps images [N, H, W, C] to [N, units].
    """

    convolutions: Sequence[tuple[int, int, int]]  # (filters, kernel, stride) each.
    units: int
    orthogonal: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel_init = feed_forward.hidden_init(self.orthogonal)
        for filters, kernel, stride in self.convolutions:
            conv = nn.Conv(
                filters,
                (kernel, kernel),
                (stride, stride),
                "VALID",
                kernel_init=kernel_init,
                conv_general_dilated=conv_matmul.conv,  # Patches and a product on CPU.
            )
            x = nn.relu(conv(x))
        x = x.reshape(x.shape[0], -1)
        return nn.relu(nn.Dense(self.units, kernel_init=kernel_init)(x))


def network(kind: str, orthogonal: bool = False, **kwargs: object) -> ConvNet:
    """The network `kind`, "nature" or "minatar"; `kwargs` go to the module (its name)."""
    if kind == "nature":
        return ConvNet(_NATURE_CONVOLUTIONS, 512, orthogonal, **kwargs)
    if kind == "minatar":
        return ConvNet(_MINATAR_CONVOLUTIONS, 128, orthogonal, **kwargs)
    raise ValueError(f"unknown network {kind!r}: use 'nature' or 'minatar'")


class Torso(nn.Module):
    """One CNN per image part, beside the features of the other parts.

    Maps features [N, sum(part.size)] to [N, sum(output_size(part))].
    """

    parts: tuple[Part, ...]
    orthogonal: bool = False

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:
        expected = sum(part.size for part in self.parts)
        if features.ndim != 2 or features.shape[1] != expected:
            raise ValueError(f"Torso takes features [N, {expected}], got {features.shape}")
        outputs, start = [], 0
        for index, part in enumerate(self.parts):
            x = features[:, start : start + part.size]
            start += part.size
            if part.network is not None:
                image = x.reshape(x.shape[0], *part.image)
                x = network(part.network, self.orthogonal, name=f"cnn_{index}")(image)
            outputs.append(x)
        return outputs[0] if len(outputs) == 1 else jnp.concatenate(outputs, axis=-1)
