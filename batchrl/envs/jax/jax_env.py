"""The JAX-native env protocol: pure reset and step on one env, batched with vmap.

A JAX-native env is an object holding only static things (constants, shapes, bounds)
whose `reset` and `step` are pure functions of arrays, so whole rollouts compile into
one graph with `jax.jit` and `lax.scan`. Envs are written unbatched, for one env;
`reset_batch`, `step_batch` and `reset_where` batch them with `jax.vmap` over a
leading axis B. Any randomness a step needs travels in the env state as a key.

An observation is a tree (an array, or dicts and tuples of them, as the env's spec
nests); everything here that moves or selects observations maps over its leaves.

`TimeLimit` adds the time limit (named and behaving as Gymnasium's `TimeLimit`, which
the host uses): it counts steps in the state and sets `truncated`, never
`terminated`, so a time limit is bootstrapped rather than treated as terminal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, runtime_checkable

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec

EnvState = Any
"""A pytree of arrays: everything an env needs to step, including its key if it has one."""


@flax.struct.dataclass
class TimeStep:
    """The result of one step of one env (with a leading [B] axis when batched).

    Attributes:
        obs: The observation after the step: a tree of [*leaf.shape] arrays.
        reward: [] float32 reward for the step.
        terminated: [] bool, the episode reached a terminal state (no bootstrapping).
        truncated: [] bool, the episode was cut short, e.g. by a time limit (bootstrap).
    """

    obs: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array


@runtime_checkable
class Env(Protocol):
    """One unbatched JAX-native env: static description plus pure `reset` and `step`.

    Attributes:
        env_spec: The observation tree, action kind and bounds.
        max_length: The registered time limit in steps (e.g. 200 for Pendulum-v1);
            applied by `TimeLimit`, not by `step` itself.
    """

    env_spec: EnvSpec
    max_length: int

    def reset(self, key: jax.Array) -> tuple[EnvState, Any]:
        """Starts an episode. Returns (env_state, obs), obs a tree of [*leaf.shape]."""
        ...

    def step(self, env_state: EnvState, action: jax.Array) -> tuple[EnvState, TimeStep]:
        """Advances one step with action [*action_shape]. Returns (env_state, TimeStep)."""
        ...


@flax.struct.dataclass
class TimeLimitState:
    """State of an env under `TimeLimit`.

    Attributes:
        env_state: The wrapped env's state.
        elapsed_steps: [] int32 steps taken since the last reset.
    """

    env_state: EnvState
    elapsed_steps: jax.Array


class Describes:
    """Forwards the static description of `self.env`: what every wrapper of an env exposes."""

    env: Env

    @property
    def env_spec(self) -> EnvSpec:
        return self.env.env_spec

    @property
    def max_length(self) -> int:
        return self.env.max_length


@dataclasses.dataclass(frozen=True)
class TimeLimit(Describes):
    """Truncates episodes after `duration` steps (the wrapped env's `max_length` by default).

    At the `duration`-th step `truncated` is set; `terminated` is passed through unchanged,
    so an episode that ends both ways at once reports both, as Gymnasium's `TimeLimit` does.
    """

    env: Env
    duration: int | None = None

    def __post_init__(self):
        if self.duration is None:
            object.__setattr__(self, "duration", self.env.max_length)
        if self.duration < 1:
            raise ValueError(f"duration must be at least 1, got {self.duration}")

    @property
    def max_length(self) -> int:
        return self.duration

    def reset(self, key: jax.Array) -> tuple[TimeLimitState, Any]:
        """Resets the wrapped env and the step counter. Returns (state, obs)."""
        env_state, obs = self.env.reset(key)
        return TimeLimitState(env_state, jnp.zeros((), jnp.int32)), obs

    def step(self, state: TimeLimitState, action: jax.Array) -> tuple[TimeLimitState, TimeStep]:
        """Steps the wrapped env and sets `truncated` once `duration` steps are taken."""
        env_state, time_step = self.env.step(state.env_state, action)
        elapsed_steps = state.elapsed_steps + 1
        truncated = jnp.logical_or(time_step.truncated, elapsed_steps >= self.duration)
        state = TimeLimitState(env_state=env_state, elapsed_steps=elapsed_steps)
        return state, time_step.replace(truncated=truncated)


def reset_batch(
    env: Env, key: jax.Array, num_envs: int, rows: tuple[int, int] | None = None
) -> tuple[EnvState, Any]:
    """Resets `num_envs` envs, each with its own key split from `key`.

    `rows` (first, of): the envs are first, first + 1, ... of a batch of `of`, and take
    the keys that batch's reset gives them.

    Returns:
        (state, obs): the batched env state and obs, every leaf with a leading [B]
        axis, where B = num_envs.
    """
    first, of = rows or (0, num_envs)
    keys = jax.random.split(key, of)[first : first + num_envs]
    return jax.vmap(env.reset)(keys)


def step_batch(env: Env, state: EnvState, action: jax.Array) -> tuple[EnvState, TimeStep]:
    """Steps a batch of envs. state: leaves [B, ...]; action: [B, *action_shape].

    An env with an action tree (`env_spec.action`) takes the tree, each leaf [B, *shape].

    Returns:
        (state, time_step): the new batched state and a TimeStep whose fields have a
        leading [B] axis.
    """
    num_envs = _num_envs(state)
    spec = env.env_spec
    if spec.action is None:
        expected = (num_envs, *spec.action_shape)
        got = action.shape
    else:
        expected = [(num_envs, *leaf.shape) for leaf in env_spec_lib.leaves(spec.action)]
        got = [leaf.shape for leaf in jax.tree.leaves(action)]
    if got != expected:
        raise ValueError(f"action has shape {got}, expected {expected}")
    _check_integers(spec, action)
    return jax.vmap(env.step)(state, action)


def _check_integers(spec: EnvSpec, action: Any) -> None:
    """A TypeError for floats where the env takes integers: its cast stepped 0.9 as 0."""
    if spec.action is None:
        like = np.zeros((), np.int32 if spec.discrete else np.float32)
    else:
        like = env_spec_lib.map_tree(lambda leaf: np.zeros((), leaf.dtype), spec.action)
    env_spec_lib.check_action_kinds(action, like)


def rollout_batch(env: Env, state: EnvState, actions: jax.Array) -> tuple[EnvState, TimeStep]:
    """Steps a batch through actions [T, B, *action_shape] in one `lax.scan`, without resets.

    Returns:
        (state, time_steps): the final batched state and a TimeStep whose fields have
        leading [T, B] axes.
    """
    return jax.lax.scan(lambda state, action: step_batch(env, state, action), state, actions)


def reset_where(
    env: Env,
    state: EnvState,
    obs: Any,
    key: jax.Array,
    mask: jax.Array,
    rows: tuple[int, int] | None = None,
) -> tuple[EnvState, Any]:
    """Resets only the envs where `mask` is True; the others keep their state and obs.

    Every env is reset and the results are selected leaf by leaf with `jnp.where`, so
    shapes stay static under `jit`. Env i uses the i-th of B keys split from `key`, as
    `reset_batch`.

    Args:
        env: The unbatched env.
        state: Batched env state, leaves [B, ...].
        obs: Current observations, a tree of [B, *leaf.shape].
        key: One key for this reset.
        mask: [B] bool, which envs to reset.
        rows: The envs' rows in a larger batch, as `reset_batch` reads them.

    Returns:
        (state, obs) with the masked envs reset.
    """
    num_envs = _num_envs(state)
    obs_sizes = {leaf.shape[:1] for leaf in jax.tree.leaves(obs)}
    if mask.shape != (num_envs,) or obs_sizes != {(num_envs,)}:
        raise ValueError(
            f"mask {mask.shape} and obs leaves {sorted(obs_sizes)} must lead with the batch "
            f"size {num_envs}"
        )
    fresh_state, fresh_obs = reset_batch(env, key, num_envs, rows)
    return select(mask, fresh_state, state), select(mask, fresh_obs, obs)


def select(mask: jax.Array, on_true: Any, on_false: Any) -> Any:
    """Leaf by leaf, row i of `on_true` where mask [B] is True, else of `on_false`.

    Both trees have the same structure, every leaf [B, ...]; the mask is broadcast to
    each leaf's rank.
    """

    def where(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (b.ndim - 1)), a, b)

    return jax.tree.map(where, on_true, on_false)


def _num_envs(state: EnvState) -> int:
    """The leading batch size B shared by every leaf of a batched state."""
    sizes = {leaf.shape[:1] for leaf in jax.tree.leaves(state)}
    if len(sizes) != 1 or () in sizes:
        raise ValueError(
            f"batched env state leaves need one leading batch axis, got {sorted(sizes)}"
        )
    return sizes.pop()[0]


class Compiled:
    """The members of simulate's batched-env protocol for envs that never leave compiled code.

    A step's pure work needs no grouping (`block` calls the function) and a compiled
    program raises nothing of the env's own (`wrap_compiled` returns it unchanged).
    """

    calls_host: ClassVar[bool] = False

    @staticmethod
    def block(function: Callable[..., Any], *args: Any) -> Any:
        return function(*args)

    @staticmethod
    def wrap_compiled(program: Callable[..., Any]) -> Callable[..., Any]:
        return program


@dataclasses.dataclass(frozen=True)
class VmapBatch(Describes, Compiled):
    """`num_envs` copies of a JAX-native env behind the batched interface simulate uses.

    `init(key)`, `reset(env_state, obs, key, mask)` and `step(env_state, action)` are
    pure; no step ever leaves the compiled program. `rows` (first, of): these envs are
    first, first + 1, ... of a batch of `of` (a rollout actor's share), and every reset
    gives them the keys that batch's gives them.
    """

    env: Env
    num_envs: int
    rows: tuple[int, int] | None = None

    def init(self, key: jax.Array) -> tuple[EnvState, Any]:
        """Resets every env. Returns (env_state, obs), obs a tree of [B, *leaf.shape].

        One run's: several runs on JAX-native envs are several batches, mapped over.
        """
        if key.ndim:
            raise ValueError(
                f"a VmapBatch's envs are one run's, given one key, got keys of shape "
                f"{key.shape}: map over runs (jax.vmap of simulate.init and its steps) instead"
            )
        return reset_batch(self.env, key, self.num_envs, self.rows)

    def reset(
        self, env_state: EnvState, obs: Any, key: jax.Array, mask: jax.Array
    ) -> tuple[EnvState, Any]:
        """Resets the envs where mask [B] is True; skips the work when none is."""
        return jax.lax.cond(
            mask.any(),
            lambda: reset_where(self.env, env_state, obs, key, mask, self.rows),
            lambda: (env_state, obs),
        )

    def step(self, env_state: EnvState, action: jax.Array) -> tuple[EnvState, TimeStep]:
        """Steps every env with action [B, *action_shape]."""
        return step_batch(self.env, env_state, action)
