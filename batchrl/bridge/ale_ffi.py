"""AleFfiBatch: ale-py's Atari games stepped by XLA FFI calls inside the compiled program.

ale-py's `AtariVectorEnv.xla()` registers its batch's reset and step as XLA FFI targets:
custom calls that run the games in ale-py's C++ threads from within a compiled program,
with no Python on the way, where the bridge's host callback enters Python at every step.
AleFfiBatch puts them behind simulate's batched interface (init, reset by mask, step) with
the episodes of `InGraphBatchEnv` over a `BatchEnv.atari` of the same games: env i
seeded as the bridge seeds it at init, envs that ended reset before the step that acts
on them (so no action is ignored, though ale-py's own autoreset is NEXT_STEP), a lost
life under `life_loss_info` ending the episode while the game plays on, frames uint8,
rewards float32.

The env state holds ale-py's handle (the address of its C++ batch, 8 bytes): each call
consumes the handle the last one returned, which orders the calls as the bridge's token
does. A state restored from a checkpoint holds the address of another process's batch:
the calls take only their order from the state and always use this env's address. The
games are not in the state: like worker envs, they start anew when a run resumes.

A masked reset inside a compiled program cannot name a list of dynamic length; the envs
are reset in calls of static sizes, the binary digits of their count (at most
log2(B) + 1 calls, each env reset once, as ale-py resets each env on its own).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

import flax.struct
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from batchrl.bridge import in_graph, one_block
from batchrl.bridge import seeds as seeds_lib
from batchrl.envs import spaces
from batchrl.envs.atari import atari_group
from batchrl.envs.host import batch as batch_lib
from batchrl.envs.host import batch_taken
from batchrl.envs.jax import jax_env

_RESET_TARGET = "atari_vector_xla_reset"  # As `AtariVectorEnv.xla()` registers it.
_NO_SEED = -1  # ale-py's seed for a reset that goes on with the game's random stream.


@flax.struct.dataclass
class AleFfiState:
    """What the compiled program knows of ale-py's batch between calls.

    Attributes:
        handle: [8] uint8, ale-py's handle as the last call returned it; orders the calls.
        lives: [B] int32 each game's lives after the last call.
        plays_on: [B] bool, the last step ended the env's episode at a lost life and its
            game goes on: a reset by mask leaves it playing.
    """

    handle: jax.Array
    lives: jax.Array
    plays_on: jax.Array


class AleFfiBatch:
    """The games of a `BatchEnv.atari` behind the batched interface of `simulate`.

    The calls step the batch's ale-py vector env directly, beside the BatchEnv's own
    bookkeeping: while a compiled program drives the games, step and reset them only
    through this env (`BatchEnv.reset` between programs is fine: it reseeds them).
    `seed` seeds env i with `ale_seeds(seed, B)[i]` at `init` (or `env_seeds[i]`, modulo 2**31,
    where given); later resets go on with each game's random stream. Closing the BatchEnv
    waits for the calls and programs of this env already dispatched, then ends the games'
    threads; a compiled program of this env then refuses to run. `devices` > 1 is
    refused: the calls run on the device of the one program. `device` is where that
    program runs (the CPU's first by default): one of `platforms()`, where ale-py
    registered its calls.
    """

    calls_host = True  # The games are outside the program: train and eval share them.
    # A step's pure work as one conditional between the calls, as on the bridge; left to
    # XLA's scheduling it is neither faster nor slower (over the games' own step, one run
    # gave 14 us against 46 at 8 envs but 272 against 194 at 32; other runs swap them).
    block = staticmethod(one_block.run)

    def __init__(
        self,
        batch_env: batch_lib.BatchEnvBase,
        seed: int = 0,
        devices: int = 1,
        device: jax.Device | None = None,
        env_seeds: Sequence[int] | None = None,
    ):
        batch_taken.expect_batch(batch_env, "AleFfiBatch takes")
        self.device = jax.devices("cpu")[0] if device is None else device
        if self.device.platform not in platforms():
            raise ValueError(
                f"ale-py's XLA calls run on {' and '.join(platforms())}, not on {self.device}: "
                f"set acting_device=cpu (or auto)"
            )
        if devices != 1:
            raise ValueError(
                f"backend='ale' steps its games from a program on one device: "
                f"learner_devices must be 1, got {devices}"
            )
        groups = batch_env.groups
        if len(groups) != 1 or not isinstance(groups[0], atari_group.AtariGroup):
            raise ValueError(f"AleFfiBatch steps the games of a BatchEnv.atari, got {batch_env}")
        (games,) = groups
        num_envs = batch_env.num_envs
        self.batch_env = batch_env
        self.seed = seed
        self.num_envs = num_envs
        # As the bridge seeds its envs, or as `env_seeds` says (a share of a larger batch).
        given = seeds_lib.check_env_seeds(env_seeds, num_envs)
        self.env_seeds = seeds_lib.env_seeds(seed, num_envs) if given is None else given
        self._ale_seeds = in_ale_range(self.env_seeds)
        options = games.settings.options
        # A lost life ends the episode and the game plays on, as `AtariGroup` has it.
        self.life_ends = options["life_loss_info"] and not options["episodic_life"]
        self.env_spec = spaces.env_spec(
            batch_env.single_observation_space, batch_env.single_action_space, games.name
        )
        vector_env = games.vector_env
        self._handle, _, self._step_call = vector_env.xla()
        obs_type = jax.ShapeDtypeStruct(vector_env.observation_space.shape, np.uint8)
        column = jax.ShapeDtypeStruct((num_envs,), np.int32)
        # handle, obs, env ids, lives, frame numbers, episode frame numbers.
        results = (jax.ShapeDtypeStruct((8,), np.uint8), obs_type, column, column, column, column)
        self._reset_call = jax.ffi.ffi_call(_RESET_TARGET, results, has_side_effect=True)
        # An output of the newest dispatched call or program: closing waits for it.
        self._newest: jax.Array | None = None
        games.wait_for_calls = self._wait_for_calls

    def state_rows(self, env_state: AleFfiState) -> AleFfiState:
        """`env_state` with its handle on every env's row, so that shares join by rows.

        A batch acted in shares apart (`training.rollout_actor`) sends its state away and
        back; each share's handle is its own process's, which its next call takes anyway.
        """
        handle = jnp.broadcast_to(env_state.handle, (self.num_envs, *env_state.handle.shape))
        return env_state.replace(handle=handle)

    def state_of_rows(self, env_state: AleFfiState) -> AleFfiState:
        """`state_rows`'s inverse: one handle."""
        return env_state.replace(handle=env_state.handle[0])

    @property
    def closed(self) -> bool:
        """Whether the BatchEnv is closed: no program of this env may run."""
        return self.batch_env.closed

    def wrap_compiled(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, a compiled program calling this env, refusing to run once it is closed."""

        @functools.wraps(function)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._expect_open()
            in_graph.check_device(self.device, (args, kwargs))
            return self._dispatched(function(*args, **kwargs))

        return wrapped

    def init(self, key: jax.Array) -> tuple[AleFfiState, jax.Array]:
        """Resets every env, env i with `ale_seeds[i]`; `key` is unused (games seed themselves)."""
        del key
        self._expect_open()
        indices = jnp.arange(self.num_envs, dtype=jnp.int32)
        handle, obs, lives = self._reset(self._handle, indices, jnp.asarray(self._ale_seeds))
        return self._dispatched(
            (AleFfiState(handle, lives, jnp.zeros((self.num_envs,), bool)), obs)
        )

    def reset(
        self, env_state: AleFfiState, obs: jax.Array, key: jax.Array, mask: jax.Array
    ) -> tuple[AleFfiState, jax.Array]:
        """Resets the envs where mask [B] is True but those playing on; no call when none is."""
        del key
        fresh = mask & ~env_state.plays_on
        handle, obs, lives = jax.lax.cond(
            fresh.any(),
            functools.partial(self._reset_where, fresh),
            lambda *carry: carry,
            env_state.handle,
            obs,
            env_state.lives,
        )
        return self._dispatched((AleFfiState(handle, lives, env_state.plays_on & ~mask), obs))

    def step(
        self, env_state: AleFfiState, action: jax.Array
    ) -> tuple[AleFfiState, jax_env.TimeStep]:
        """Steps every game with action [B] (discrete) or [B, 3] (`continuous`)."""
        expected = (self.num_envs, *self.env_spec.action_shape)
        if action.shape != expected:
            raise ValueError(f"action has shape {action.shape}, expected {expected}")
        # Discrete actions are ale-py's int32 ids; continuous ones its float32 triples.
        action = action.astype(jnp.int32 if self.env_spec.discrete else jnp.float32)
        handle, (obs, reward, terminated, truncated, info) = self._step_call(
            self._live(env_state.handle), action
        )
        lives = info["lives"]
        lost_a_life = (lives < env_state.lives) & (lives > 0)
        plays_on = self.life_ends & terminated & ~truncated & lost_a_life
        time_step = jax_env.TimeStep(obs, reward.astype(jnp.float32), terminated, truncated)
        return self._dispatched((AleFfiState(handle, lives, plays_on), time_step))

    def _reset_where(
        self, mask: jax.Array, handle: jax.Array, obs: jax.Array, lives: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Resets the envs where mask [B] is True, in calls of the sizes of its count's bits."""
        count = mask.sum(dtype=jnp.int32)
        order = jnp.nonzero(mask, size=self.num_envs, fill_value=0)[0].astype(jnp.int32)
        seeds = jnp.full((self.num_envs,), _NO_SEED, jnp.int32)
        for bit in reversed(range(self.num_envs.bit_length())):
            size = 1 << bit
            start = (count >> (bit + 1)) << (bit + 1)  # The envs of the higher bits went first.

            def call(handle, obs, lives, start=start, size=size):
                del obs, lives
                indices = jax.lax.dynamic_slice(order, (start,), (size,))
                return self._reset(handle, indices, seeds[:size])

            handle, obs, lives = jax.lax.cond(
                (count & size) != 0, call, lambda *carry: carry, handle, obs, lives
            )
        return handle, obs, lives

    def _reset(
        self, handle: jax.Array, indices: jax.Array, seeds: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """ale-py's reset of the envs at `indices` with their seeds; every env's obs and lives."""
        handle, obs, _, lives, _, _ = self._reset_call(self._live(handle), indices, seeds)
        return handle, obs, lives

    def _live(self, handle: jax.Array) -> jax.Array:
        """This env's handle, ordered after the call that returned `handle`."""
        return jnp.where(jnp.all(handle == self._handle), handle, self._handle)

    def _dispatched(self, outputs: Any) -> Any:
        """`outputs`; outside a trace, the smallest of them is noted for closing to wait on.

        Calls and programs run in their order of dispatch (each takes the handle the last
        returned), so once the newest has run, no call of this env is left.
        """
        leaves = [
            leaf
            for leaf in jax.tree.leaves(outputs)
            if isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer)
        ]
        if leaves:
            self._newest = min(leaves, key=lambda leaf: leaf.size)
        return outputs

    def _wait_for_calls(self) -> None:
        """Blocks until the newest dispatched call or program of this env has run.

        A program whose wait a second Ctrl-C cut (`training.run_signals`) never returned
        its outputs to be noted, and runs on: every program with effects is waited for
        too (`jax.effects_barrier`; a phase holds the reset call, which has them), or the
        games would be freed under it. An error of such a program is the interrupted
        phase's, whose work is dropped.
        """
        newest, self._newest = self._newest, None
        if newest is not None and not newest.is_deleted():
            newest.block_until_ready()
        with contextlib.suppress(jax.errors.JaxRuntimeError):
            jax.effects_barrier()

    def _expect_open(self) -> None:
        if self.closed:
            raise gym.error.ClosedEnvironmentError("the BatchEnv of this AleFfiBatch is closed")


def platforms() -> tuple[str, ...]:
    """The JAX platforms ale-py's XLA calls run on: the CPU, and GPUs where its build has them."""
    import ale_py

    return ("cpu", "gpu") if hasattr(ale_py._ale_py, "VectorXLAStepGPU") else ("cpu",)


def ale_seeds(seed: int, num_envs: int) -> np.ndarray:
    """[num_envs] int32: each game's seed in a run seeded `seed`.

    The run's env seeds (`bridge.seeds.env_seeds`, as the bridge seeds host envs) taken into
    ale-py's range of int32 seeds (`in_ale_range`).
    """
    return in_ale_range(seeds_lib.env_seeds(seed, num_envs))


def in_ale_range(env_seeds: Sequence[int]) -> np.ndarray:
    """[len(env_seeds)] int32: env seeds as ale-py takes them, modulo 2**31."""
    return (np.asarray(env_seeds, np.int64) % 2**31).astype(np.int32)
