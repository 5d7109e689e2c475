"""InGraphBatchEnv: a BatchEnv of worker processes, callable from compiled JAX code.

Each reset and step is one host callback made with `buffer_callback`, which hands the
callback XLA's own buffers, an order of magnitude cheaper per call inside `lax.scan`
than `io_callback` (about 5 us against 75 us).
Every call consumes a token that the previous call produced, so XLA cannot
reorder them even when an action does not depend on the observation, and they are
marked side-effecting so XLA never drops them. Python's state of the XLA thread that
makes the calls is kept from one call to the next (`thread_state`), not rebuilt each step.
Where `buffer_callback` is missing, the bridge falls back to an ordered `io_callback`.

Observations are trees (an array, or dicts and tuples of them, as the env's space nests):
each leaf is one result of the host call, in the env's dtype except that 64-bit dtypes
arrive as their 32-bit kind (JAX runs without x64); uint8 stays uint8, bool stays bool.
The host writes each leaf straight into its result buffer.

The bridge is built for one device, where its programs run (`device`, the CPU by
default). On the CPU each call reads and writes XLA's buffers in place. Host code cannot
read an accelerator's buffers: built for one, the bridge moves each call's arrays
explicitly (an `io_callback`, two copies a step), and a program on another device than
its own is refused with one line naming the setting that places it (`acting_device`).

An exception in a callback aborts the compiled program with an opaque runtime error;
the bridge keeps the original error and `surfaced.surface_errors` raises it in its place.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl.bridge import one_block, surfaced
from batchrl.bridge.host_call import DeviceError, host_call, weakly
from batchrl.bridge.seeds import check_env_seeds, resumed_env_seeds, run_env_seeds
from batchrl.envs import spaces
from batchrl.envs.host import batch as batch_lib
from batchrl.envs.host import batch_taken
from batchrl.envs.jax import jax_env


@flax.struct.dataclass
class BridgeState:
    """What the in-graph env knows of its batch: the last results of the host envs.

    Attributes:
        token: [] int32 count of host calls; each call consumes the last one's token,
            which orders the calls. The host counts its calls across `init`s: a call
            from a state whose token is not its last is refused (`StaleStateError`),
            but for a reset of every env.
        obs: The current observations: a tree of [B, *leaf.shape] arrays.
        action: [B, *action_shape] the last actions sent (a tree of them for an action tree).
        reward: [B] float32 last rewards.
        terminated: [B] bool.
        truncated: [B] bool.
    """

    token: jax.Array
    obs: Any
    action: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array


_TOKEN = jax.ShapeDtypeStruct((), np.int32)


def compiled_dtype(dtype: Any, kind: str | None = None) -> np.dtype:
    """The dtype compiled code receives for values of `dtype`: 64-bit ones become 32-bit.

    A Box's 64-bit integers (`kind` vector or image: numbers, not indices) become float32:
    as int32 a value past 2**31 wrapped silently, where float32 rounds it.
    """
    dtype = np.dtype(dtype)
    if dtype.itemsize == 8 and dtype.kind in "iu" and kind in _NUMBERS:
        return np.dtype(np.float32)
    if dtype.itemsize == 8 and dtype.kind in "iuf":
        return np.dtype(f"{dtype.kind}4")
    return dtype


_NUMBERS = (env_spec_lib.VECTOR, env_spec_lib.IMAGE)


def compiled_observation(observation: Any) -> Any:
    """An observation tree of `ObsLeaf` with each dtype as compiled code receives it."""
    return env_spec_lib.map_tree(
        lambda leaf: dataclasses.replace(leaf, dtype=compiled_dtype(leaf.dtype, leaf.kind).name),
        observation,
    )


class InGraphBatchEnv:
    """A `BatchEnv` behind the batched interface of `simulate`: init, reset by mask, step.

    `seed` seeds env i with `env_seeds(seed, B)[i]` at `init`; later resets continue each
    env's own random stream, so a run is reproducible whatever the worker layout, and
    runs of different seeds share no env's episodes. A list of R seeds is R runs sharing
    the batch in equal parts, each seeded as that run alone seeds it; `env_seeds`
    replaces those draws (a rollout actor's share). `env_seconds` counts the compiled
    program's time in the batch's step and reset (env work and messaging), so the rest of
    a rollout's time is the program's own. `device`: where the programs that step it run
    (the CPU's first device by default). `in_place`: its calls read and write XLA's
    buffers in place (the default on the CPU), or copy each call's arrays across (the
    default elsewhere; on the CPU, to measure it). `devices` > 1: the program runs over
    that many devices (a data-parallel update); the host calls are then `io_callback`s
    placed on the first device, as XLA requires of a side effect in such a program.
    """

    calls_host = True  # simulate's step runs its pure work in blocks around the calls.
    block = staticmethod(one_block.run)

    def __init__(
        self,
        batch_env: batch_lib.BatchEnvBase,
        seed: int | Sequence[int] = 0,
        devices: int = 1,
        device: jax.Device | None = None,
        in_place: bool | None = None,
        env_seeds: Sequence[int] | None = None,
    ):
        batch_taken.expect_batch(batch_env, "InGraphBatchEnv takes")
        self.batch_env = batch_env
        self.device = jax.devices("cpu")[0] if device is None else device
        self.devices = devices
        self.seed = seed
        self.num_envs = len(batch_env)
        given = check_env_seeds(env_seeds, self.num_envs)
        self.env_seeds = run_env_seeds(seed, self.num_envs) if given is None else given
        self.env_seconds = 0.0
        # The token the host's last call wrote. Counted from 0 by every bridge, so that a
        # run's checkpoints are the same bytes whatever bridges its process made before.
        self._issued: int | None = None
        self._restart_seeds: list[int] | None = None  # The next restart's (`resumed_after`).
        host_spec = spaces.env_spec(
            batch_env.single_observation_space,
            batch_env.single_action_space,
            batch_env.groups[0].name,
        )
        self.env_spec = dataclasses.replace(  # As the compiled program receives them.
            host_spec, observation=compiled_observation(host_spec.observation)
        )
        obs_types = env_spec_lib.map_tree(
            lambda leaf: jax.ShapeDtypeStruct((self.num_envs, *leaf.shape), leaf.dtype),
            self.env_spec.observation,
        )
        self._obs_tree = jax.tree.structure(obs_types)
        # Where each leaf's buffer sits among a call's results, in a tree shaped as the
        # host's observations (dicts in the space's key order); the token comes first.
        self._obs_positions = env_spec_lib.map_tree(
            lambda _, position: position,
            obs_types,
            jax.tree.unflatten(self._obs_tree, range(1, self._obs_tree.num_leaves + 1)),
        )
        obs_results = (_TOKEN, *jax.tree.leaves(obs_types))
        step_results = (
            *obs_results,
            jax.ShapeDtypeStruct((self.num_envs,), np.float32),
            jax.ShapeDtypeStruct((self.num_envs,), np.bool_),
            jax.ShapeDtypeStruct((self.num_envs,), np.bool_),
        )
        self._action_dtype = np.dtype(np.int32 if self.env_spec.discrete else np.float32)
        # An action tree travels as its leaves, each in the dtype compiled code holds it in.
        self._action_types = self.env_spec.action and env_spec_lib.map_tree(
            lambda leaf: jax.ShapeDtypeStruct(
                (self.num_envs, *leaf.shape), jax.dtypes.canonicalize_dtype(leaf.dtype)
            ),
            self.env_spec.action,
        )
        self._action_tree = self._action_types and jax.tree.structure(self._action_types)
        if devices > 1:
            call = functools.partial(host_call, device=jax.local_devices()[0])
        else:
            if in_place is None:
                in_place = self.device.platform == "cpu"
            elif in_place and self.device.platform != "cpu":
                raise ValueError(f"in_place=True needs a CPU device, got {self.device}")
            call = functools.partial(host_call, in_place=in_place)
        # Weakly: JAX's caches keep a program's callbacks, and through them kept every
        # finished run's envs, 6 open files a run on workers, until "Too many open files".
        self._host_init = call(weakly(self._init_on_host), obs_results)
        self._host_reset = call(weakly(self._reset_on_host), obs_results)
        self._host_step = call(weakly(self._step_on_host), step_results)

    def wrap_compiled(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, a compiled program calling this env, raising env errors as themselves.

        Its arrays must be on the bridge's device (or not yet committed to one): a program
        elsewhere is refused with one line, before it runs.
        """
        raising = surfaced.surface_errors(function)
        if self.devices > 1:  # The program spans devices; its calls are placed on the first.
            return raising

        @functools.wraps(function)
        def placed(*args: Any, **kwargs: Any) -> Any:
            check_device(self.device, (args, kwargs))
            return raising(*args, **kwargs)

        return placed

    def resumed_after(self, phase: int) -> None:
        """Seeds the next restart of every env from its seed and `phase`, once.

        A run resumed after `phase` builds its envs as its start did: restarted unseeded,
        they began the episodes of its first phase, and of its first evaluation, again.
        """
        self._restart_seeds = resumed_env_seeds(self.env_seeds, phase)

    def init(self, key: jax.Array) -> tuple[BridgeState, Any]:
        """Resets every env, env i with `env_seeds[i]`; `key` is unused (envs seed themselves)."""
        traced = isinstance(key, jax.core.Tracer)
        del key
        # Called as is (not traced), its errors are raised as themselves, as a program's are.
        start = self._host_init if traced else surfaced.surface_errors(self._host_init)
        token, obs = self._split(start(jnp.zeros((), jnp.int32)))
        zeros = jnp.zeros((self.num_envs,), jnp.float32)
        falses = jnp.zeros((self.num_envs,), bool)
        if self.env_spec.action is None:
            action = jnp.zeros((self.num_envs, *self.env_spec.action_shape), self._action_dtype)
        else:
            action = jax.tree.map(lambda t: jnp.zeros(t.shape, t.dtype), self._action_types)
        return BridgeState(token, obs, action, zeros, falses, falses), obs

    def reset(
        self, env_state: BridgeState, obs: Any, key: jax.Array, mask: jax.Array
    ) -> tuple[BridgeState, Any]:
        """Resets the envs where mask [B] is True; no host call when none is."""
        del key
        token, obs = jax.lax.cond(
            mask.any(),
            lambda: self._split(self._host_reset(env_state.token, mask, *jax.tree.leaves(obs))),
            lambda: (env_state.token, obs),
        )
        return env_state.replace(token=token, obs=obs), obs

    def step(
        self, env_state: BridgeState, action: jax.Array
    ) -> tuple[BridgeState, jax_env.TimeStep]:
        """Steps every host env with action [B, *action_shape], or a tree of leaves [B, ...].

        Floats for integer actions are refused as `BatchEnv.step` refuses them, as the
        program is traced: cast, 0.9 stepped a `Discrete` env with 0.
        """
        like = self._action_types or np.zeros((), self._action_dtype)
        env_spec_lib.check_action_kinds(action, like)
        if self.env_spec.action is None:
            expected = (self.num_envs, *self.env_spec.action_shape)
            if action.shape != expected:
                raise ValueError(f"action has shape {action.shape}, expected {expected}")
            # Cast before the call, so no work runs beside it (see one_block).
            action = action.astype(self._action_dtype)
        else:
            action = jax.tree.map(_cast_action, self._action_types, action)
        results = self._host_step(env_state.token, *jax.tree.leaves(action))
        token, obs = self._split(results[:-3])
        reward, terminated, truncated = results[-3:]
        state = BridgeState(token, obs, action, reward, terminated, truncated)
        return state, jax_env.TimeStep(obs, reward, terminated, truncated)

    def _split(self, results: tuple[jax.Array, ...]) -> tuple[jax.Array, Any]:
        """(token, obs tree) of a call's results: the token, then the obs leaves."""
        return results[0], jax.tree.unflatten(self._obs_tree, results[1:])

    # -- host side: runs on XLA's thread, inside the compiled program -----------------------
    # Results come as the token, the obs leaves in `jax.tree` order, then the rest.

    def _init_on_host(self, outputs: tuple[np.ndarray, ...], token: np.ndarray) -> None:
        del token  # Every env restarts: any state may, and the host's count goes on.
        start = time.perf_counter()
        obs = self.batch_env.reset(seed=self.env_seeds)[0]
        self.env_seconds += time.perf_counter() - start
        for out, new in zip(outputs[1:], env_spec_lib.leaves(obs), strict=True):
            out[...] = new
        self._issue(outputs)

    def _reset_on_host(
        self, outputs: tuple[np.ndarray, ...], token: np.ndarray, mask: np.ndarray, *obs: np.ndarray
    ) -> None:
        if not mask.all():  # Restarting every env makes any state the envs' own again.
            self._check_newest(token)
        indices = np.flatnonzero(mask)
        start = time.perf_counter()
        if self._restart_seeds is not None and mask.all():
            seeds, self._restart_seeds = self._restart_seeds, None
            fresh = self.batch_env.reset(seed=seeds)[0]
        else:
            fresh = self.batch_env.reset_at(indices)[0]
        self.env_seconds += time.perf_counter() - start
        for out, old, new in zip(outputs[1:], obs, env_spec_lib.leaves(fresh), strict=True):
            out[...] = old
            out[indices] = new
        self._issue(outputs)

    def _step_on_host(
        self, outputs: tuple[np.ndarray, ...], token: np.ndarray, *actions: np.ndarray
    ) -> None:
        self._check_newest(token)
        if self.env_spec.action is None:
            (action,) = actions
        else:
            action = jax.tree.unflatten(self._action_tree, actions)
        reward, terminated, truncated = outputs[-3:]
        obs = env_spec_lib.map_tree(lambda position: outputs[position], self._obs_positions)
        start = time.perf_counter()
        self.batch_env.step_into(action, obs, reward, terminated, truncated)
        self.env_seconds += time.perf_counter() - start
        self._issue(outputs)

    def _issue(self, outputs: tuple[np.ndarray, ...]) -> None:
        """Writes the call's token: the host's own count, so a new `init` does not repeat one."""
        self._issued = ((self._issued or 0) + 1) % 2**31
        outputs[0][...] = self._issued

    def _check_newest(self, token: np.ndarray) -> None:
        """Refuses a call from a state the envs have stepped past (not pure, as JAX's are).

        Stepping on from an older `SimState` (one kept from before an evaluation on the same
        envs, say) gave transitions whose observation was one episode's and next one
        another's, with no error.
        """
        if self._issued is not None and int(token) != self._issued:
            raise StaleStateError(
                "this program steps the worker envs from a state that is not their newest "
                f"(of call {int(token)}, the envs are at call {self._issued}): continue from "
                "the newest state their programs returned, or restart every env "
                "(simulate.init, or reset=True); a jitted function that read its env from a "
                "global keeps the env it was first traced with"
            )


class StaleStateError(RuntimeError):
    """A bridge program given a state older than the host envs' last call."""


def _cast_action(expected: jax.ShapeDtypeStruct, leaf: jax.Array) -> jax.Array:
    """An action tree's leaf checked against its shape and cast to its dtype."""
    if leaf.shape != expected.shape:
        raise ValueError(f"an action leaf has shape {leaf.shape}, expected {expected.shape}")
    return leaf.astype(expected.dtype)


def check_device(device: jax.Device, tree: Any) -> None:
    """Raises the bridge's one-line DeviceError when an array of `tree` is on another device.

    An array not committed to a device goes where the program runs, so it passes.
    """
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and leaf.committed and leaf.devices() != {device}:
            (other, *_) = leaf.devices()
            raise DeviceError(
                f"the env bridge steps its envs from programs on {device}, got an array on "
                f"{other}: run acting there (--set acting_device=auto puts host envs on the CPU)"
            )
