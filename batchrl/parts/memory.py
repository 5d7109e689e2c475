"""Episode memory: running episodes of a batch of envs, and the finished episodes kept for training.

This is BatchPPO's memory as pure functions on an explicit `MemoryState` with static shapes.
Each of the `num_agents` envs (B) writes its running episode step by step into the episode
buffer `episodes` [B, max_length, ...] (`append`). When an env's episode ends (`finish`), the
episode is moved into the memory [capacity, max_length, ...] if there is room, its length is
recorded in `length`, and the env's buffer is zeroed for its next episode. Training reads
`memory`, `length` and `valid_mask` once `full` says the memory holds `capacity` episodes, then
calls `clear`.

Rules, kept exactly so that the bookkeeping can be tested against a plain-Python version:

- Padding: everything past an episode's length is zero, in the buffer and in the memory's
  slots below `count`. Slots from `count` on hold what they held before `clear`, until
  `finish` overwrites them whole; `valid_mask` marks none of their steps.
- Truncation: an episode longer than `max_length` keeps only its first `max_length` steps.
  Later `append`s for that env write nothing, the stored length is `max_length`, and the episode
  counts as ending at step `max_length - 1`: its real last step (its reward, `terminated`,
  `next_obs`) is not stored, so treat such an episode as truncated and bootstrap from its last
  kept step. `replace` on a saturated env overwrites step `max_length - 1`, which lets a caller
  mark that step as the cut, if it wants one.
- Overflow: finished episodes fill slots `count, count + 1, ...` in env-index order; those that
  find no free slot are dropped (their envs are still reset). Nothing is ever overwritten
  until `clear`.
- Empty episodes: an env that finishes with no step written (position 0) stores nothing.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

Pytree = Any


@flax.struct.dataclass
class MemoryState:
    """Running episodes of B envs and up to `capacity` finished ones.

    Attributes:
        episodes: Pytree like the example step, leaves [B, max_length, ...]: each env's running
            episode, zero past its position.
        position: [B] int32 steps written of each running episode, at most max_length.
        memory: Pytree like the example step, leaves [capacity, max_length, ...]: finished
            episodes in slots [0, count), zero past each one's length; zero in slots never
            used, and what they held before `clear` in slots used before it.
        length: [capacity] int32 valid steps of each slot; zero for unused slots.
        count: [] int32 episodes stored, at most capacity.
    """

    episodes: Pytree
    position: jax.Array
    memory: Pytree
    length: jax.Array
    count: jax.Array


def _zeros(example: Pytree, leading: tuple[int, ...]) -> Pytree:
    """Zero leaves shaped [*leading, *leaf.shape], in each leaf's dtype."""

    def zeros(leaf: Any) -> jax.Array:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            leaf = jnp.asarray(leaf)
        return jnp.zeros(leading + tuple(leaf.shape), leaf.dtype)

    return jax.tree.map(zeros, example)


def _check_step(state: MemoryState, step: Pytree) -> None:
    """Raises ValueError unless `step` has the buffer's structure and leaves [B, ...]."""
    if jax.tree.structure(step) != jax.tree.structure(state.episodes):
        raise ValueError(
            f"step structure {jax.tree.structure(step)} differs from the memory's "
            f"{jax.tree.structure(state.episodes)}"
        )
    for leaf, buffer in zip(jax.tree.leaves(step), jax.tree.leaves(state.episodes), strict=True):
        expected = buffer.shape[:1] + buffer.shape[2:]
        if tuple(jnp.shape(leaf)) != expected:
            raise ValueError(f"step leaf shape {jnp.shape(leaf)}, expected {expected}")


def _mask(state: MemoryState, mask: jax.Array | None) -> jax.Array:
    """The [B] bool mask, all True when None; checks its shape."""
    if mask is None:
        return jnp.ones_like(state.position, bool)
    mask = jnp.asarray(mask, bool)
    if mask.shape != state.position.shape:
        raise ValueError(f"mask shape {mask.shape}, expected {state.position.shape}")
    return mask


def _write(state: MemoryState, step: Pytree, time: jax.Array) -> Pytree:
    """Episode buffers with env b's step written at time[b]; out-of-range times write nothing."""
    envs = jnp.arange(state.position.shape[0])

    def write(buffer: jax.Array, leaf: jax.Array) -> jax.Array:
        return buffer.at[envs, time].set(jnp.asarray(leaf, buffer.dtype), mode="drop")

    return jax.tree.map(write, state.episodes, step)


def init(example: Pytree, num_agents: int, capacity: int, max_length: int) -> MemoryState:
    """An empty memory for episodes of steps shaped like `example`.

    Args:
        example: Pytree of arrays for one step of one env (e.g. an unbatched `Transition`, with
            any extra fields such as the policy's log-prob); only shapes and dtypes are used.
            `jax.ShapeDtypeStruct` leaves work too.
        num_agents: B, the number of envs writing episodes.
        capacity: Episodes the memory holds (BatchPPO's update_every).
        max_length: Steps kept of each episode.

    Returns:
        A `MemoryState` with zero buffers and memory, positions 0, count 0.
    """
    if num_agents < 1 or capacity < 1 or max_length < 1:
        raise ValueError(
            f"num_agents ({num_agents}), capacity ({capacity}) and max_length ({max_length}) "
            "must be positive"
        )
    if not jax.tree.leaves(example):
        raise ValueError("example has no array leaves")
    return MemoryState(
        episodes=_zeros(example, (num_agents, max_length)),
        position=jnp.zeros((num_agents,), jnp.int32),
        memory=_zeros(example, (capacity, max_length)),
        length=jnp.zeros((capacity,), jnp.int32),
        count=jnp.zeros((), jnp.int32),
    )


def append(state: MemoryState, step: Pytree, mask: jax.Array | None = None) -> MemoryState:
    """Writes one step of each env at its position and advances the position.

    An env whose episode already holds max_length steps writes nothing and keeps its position
    (see the module docstring on truncation).

    Args:
        state: The memory.
        step: Pytree like the example, leaves [B, ...].
        mask: [B] bool, envs whose step to write; default all.

    Returns:
        The memory with the steps written.
    """
    _check_step(state, step)
    mask = _mask(state, mask)
    max_length = jax.tree.leaves(state.episodes)[0].shape[1]
    time = jnp.where(mask, state.position, max_length)  # max_length: out of range, dropped.
    position = jnp.minimum(state.position + mask, max_length).astype(jnp.int32)
    return state.replace(episodes=_write(state, step, time), position=position)


def replace(state: MemoryState, mask: jax.Array, step: Pytree) -> MemoryState:
    """Overwrites the last written step of the running episodes of envs where `mask` is True.

    For a value that must be corrected after the fact, e.g. a step's flags or reward known only
    once the env reports its end. Positions do not change. Envs with no step written yet are left
    alone; on an env whose episode was truncated it overwrites step max_length - 1.

    Args:
        state: The memory.
        mask: [B] bool, envs whose last step to overwrite.
        step: Pytree like the example, leaves [B, ...]; only masked envs' entries are used.

    Returns:
        The memory with those steps overwritten.
    """
    _check_step(state, step)
    mask = _mask(state, mask)
    max_length = jax.tree.leaves(state.episodes)[0].shape[1]
    time = jnp.where(mask & (state.position > 0), state.position - 1, max_length)
    return state.replace(episodes=_write(state, step, time))


def finish(state: MemoryState, mask: jax.Array) -> MemoryState:
    """Moves the running episodes of envs where `mask` is True into the memory.

    Episodes go in env-index order into slots count, count + 1, ... while they fit; those that
    do not fit, and empty ones (position 0), are dropped. Every masked env's position is reset
    to 0 and its buffer zeroed, stored or not.

    Args:
        state: The memory.
        mask: [B] bool, envs whose episode ended.

    Returns:
        The memory with the episodes stored and those envs ready for a new episode.
    """
    mask = _mask(state, mask)
    capacity = state.length.shape[0]
    store = mask & (state.position > 0)
    slot = state.count + jnp.cumsum(store, dtype=jnp.int32) - 1
    store = store & (slot < capacity)
    slot = jnp.where(store, slot, capacity)  # capacity: out of range, dropped.

    # One ended env at a time, touching only its rows: a pass over the whole buffer each
    # step cost 26 ms at Humanoid's size (30 x 1,000 steps of two 348-float observations).
    # A buffer at position 0 is already zero.
    ended = mask & (state.position > 0)
    envs = jnp.argsort(~ended, stable=True)  # The ended envs first.

    def move_and_zero(i: jax.Array, carry: tuple) -> tuple:
        memory, episodes = carry
        env = envs[i]
        memory = jax.tree.map(
            lambda m, e: m.at[slot[env]].set(e[env], mode="drop"), memory, episodes
        )
        episodes = jax.tree.map(lambda e: e.at[env].set(jnp.zeros_like(e[env])), episodes)
        return memory, episodes

    memory, episodes = jax.lax.fori_loop(
        0, ended.sum(), move_and_zero, (state.memory, state.episodes)
    )
    return state.replace(
        memory=memory,
        length=state.length.at[slot].set(state.position, mode="drop"),
        count=state.count + store.sum(dtype=jnp.int32),
        episodes=episodes,
        position=jnp.where(mask, 0, state.position).astype(jnp.int32),
    )


def full(state: MemoryState) -> jax.Array:
    """[] bool, the memory holds `capacity` episodes."""
    return state.count >= state.length.shape[0]


def clear(state: MemoryState, when: jax.Array | bool = True) -> MemoryState:
    """Empties the memory where `when` holds: count and lengths 0; running episodes continue.

    The slots keep their old steps, out of `valid_mask`, until `finish` overwrites each
    whole: clearing touches no episode data, so it costs nothing under a condition.
    """
    return state.replace(
        length=jnp.where(when, 0, state.length),
        count=jnp.where(when, 0, state.count),
    )


def valid_mask(state: MemoryState) -> jax.Array:
    """[capacity, max_length] bool: step t of slot i is valid when i < count and t < length[i]."""
    capacity = state.length.shape[0]
    max_length = jax.tree.leaves(state.memory)[0].shape[1]
    used = jnp.arange(capacity) < state.count
    return used[:, None] & (jnp.arange(max_length)[None, :] < state.length[:, None])
