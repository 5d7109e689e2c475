"""GridCue: match a cue shown by a few pixels of a grid, a JAX-native image task for learning tests.

Each step shows a `size` x `size` grid of two channels, channels last as MinAtar's:
channel 0 lights a 2 x 2 patch in the corner of the cue (one of `num_cues`, in the
order top left, top right, bottom left, bottom right), channel 1 a patch in a corner
drawn at random, which tells nothing. The action that names the cue earns 1, any other
0; a fresh cue is drawn every step, and the episode terminates after `length` steps.
By chance a policy earns `length / num_cues` an episode; one that reads the cue's
channel earns `length`. Pixels are floats in [0, 1] (a `Box` with high 1, as MinAtar's
grids), or bytes in [0, 255] with `dtype="uint8"`. `testing.cue.FrameCue` is the same
task as a Gymnasium env.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.envs.jax import jax_env

DTYPES = {"float32": 1.0, "uint8": 255.0}  # Each dtype's brightest pixel, its Box's high.


@flax.struct.dataclass
class GridCueState:
    """The cue on show, the steps taken, and the key the next cues are drawn from."""

    cue: jax.Array  # [] int32
    steps: jax.Array  # [] int32
    key: jax.Array


def corner(index: jax.Array, size: int) -> jax.Array:
    """A `size` x `size` bool grid lit in the 2 x 2 patch of corner `index` (0 to 3)."""
    top, left = (index // 2) * (size - 2), (index % 2) * (size - 2)
    rows, cols = jnp.arange(size)[:, None], jnp.arange(size)[None, :]
    return (rows >= top) & (rows < top + 2) & (cols >= left) & (cols < left + 2)


@dataclasses.dataclass(frozen=True)
class GridCue:
    """Name the corner lit in channel 0: reward 1 a step, `length` steps an episode."""

    num_cues: int = 4
    size: int = 6
    length: int = 10
    dtype: str = "float32"

    def __post_init__(self):
        if not 2 <= self.num_cues <= 4:
            raise ValueError(f"num_cues must be 2 to 4 (the corners), got {self.num_cues}")
        if self.size < 4:
            raise ValueError(f"size must be at least 4, got {self.size}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}: use one of {tuple(DTYPES)}")

    @property
    def env_spec(self) -> EnvSpec:
        shape, high = (self.size, self.size, 2), DTYPES[self.dtype]
        frame = env_spec_lib.ObsLeaf(shape, self.dtype, env_spec_lib.IMAGE, low=0.0, high=high)
        return EnvSpec(frame, discrete=True, num_actions=self.num_cues, action_start=(0,))

    @property
    def max_length(self) -> int:
        return self.length

    def _show(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A fresh cue and the grid showing it: ([] int32, [size, size, 2])."""
        cue_key, other_key = jax.random.split(key)
        cue = jax.random.randint(cue_key, (), 0, self.num_cues)
        other = jax.random.randint(other_key, (), 0, 4)
        lit = jnp.stack([corner(cue, self.size), corner(other, self.size)], axis=-1)
        return cue, (lit * DTYPES[self.dtype]).astype(self.dtype)

    def reset(self, key: jax.Array) -> tuple[GridCueState, jax.Array]:
        """Shows the first cue. Returns (state, obs [size, size, 2])."""
        key, show_key = jax.random.split(key)
        cue, obs = self._show(show_key)
        return GridCueState(cue, jnp.zeros((), jnp.int32), key), obs

    def step(
        self, env_state: GridCueState, action: jax.Array
    ) -> tuple[GridCueState, jax_env.TimeStep]:
        """Pays 1 when `action` ([] int) is the cue, then shows the next one."""
        key, show_key = jax.random.split(env_state.key)
        cue, obs = self._show(show_key)
        steps = env_state.steps + 1
        time_step = jax_env.TimeStep(
            obs=obs,
            reward=(action == env_state.cue).astype(jnp.float32),
            terminated=steps >= self.length,
            truncated=jnp.zeros((), bool),
        )
        return GridCueState(cue, steps, key), time_step
