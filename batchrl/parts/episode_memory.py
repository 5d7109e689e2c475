"""Episode memory: each env's running episode written straight into the slot it is kept in.

This is BatchPPO's memory as pure functions on an explicit `MemoryState` with static shapes.
The memory has `capacity + num_envs` slots of `max_length` steps: up to `capacity`
finished episodes for the next update, and one running episode per env (B). An env that
begins an episode takes a free slot (`begin`), writes its steps there one by one
(`append`), and when the episode ends (`finish`) the slot is marked finished where it
lies: no episode is ever copied. Training reads `steps`, `length` and `valid_mask` once
`full` says `capacity` episodes are finished, then calls `clear`, which frees their slots.

Rules, kept exactly so that the bookkeeping can be tested against a plain-Python version:

- Slots: the envs that begin an episode at once take the free slots (neither finished nor
  running) in env-index order, lowest slot first. An env that finds no free slot keeps
  nothing of that episode. With `clear` called once `full` holds, there is always a slot:
  at most capacity - 1 finished episodes and B running ones remain before a step ends.
- Padding: steps past an episode's length hold whatever earlier episodes left there (zeros
  in a slot never used); `valid_mask` marks none of them.
- Truncation: an episode longer than `max_length` keeps only its first `max_length` steps.
  Later `append`s for that env write nothing, the stored length is `max_length`, and the
  episode counts as ending at step `max_length - 1`: its real last step (its reward,
  `terminated`) is not stored, so treat such an episode as truncated and bootstrap from
  its last kept step. What follows a stored step is the episode's next stored step, so a
  step that ends its episode (or the last kept one) must carry what bootstrapping needs
  of the observation after it (PPO keeps its value).
- Finishing: every finished episode with at least one step is kept, in its slot, until
  `clear`; `count` may pass `capacity` when several episodes end at one step. An episode
  still running when its env begins anew (a restart) is finished first, as cut there.
- Empty episodes: an env that finishes with no step written keeps nothing; its slot is free.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

Pytree = Any


@flax.struct.dataclass
class MemoryState:
    """Finished and running episodes in `capacity + B` slots.

    Attributes:
        steps: Pytree like the example step, leaves [slots, max_length, ...].
        length: [slots] int32 steps written in each slot's episode, at most max_length.
        finished: [slots] bool, the slot holds a finished episode kept for training.
        slot: [B] int32 the slot of each env's running episode; `slots` when it has none.
        count: [] int32 finished episodes kept.
    """

    steps: Pytree
    length: jax.Array
    finished: jax.Array
    slot: jax.Array
    count: jax.Array

    @property
    def slots(self) -> int:
        return self.length.shape[0]

    @property
    def capacity(self) -> int:
        """Finished episodes an update trains on."""
        return self.slots - self.slot.shape[0]

    @property
    def max_length(self) -> int:
        return jax.tree.leaves(self.steps)[0].shape[1]


def _zeros(example: Pytree, leading: tuple[int, ...]) -> Pytree:
    """Zero leaves shaped [*leading, *leaf.shape], in each leaf's dtype."""

    def zeros(leaf: Any) -> jax.Array:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            leaf = jnp.asarray(leaf)
        return jnp.zeros(leading + tuple(leaf.shape), leaf.dtype)

    return jax.tree.map(zeros, example)


def _check_step(state: MemoryState, step: Pytree) -> None:
    """Raises ValueError unless `step` has the memory's structure and leaves [B, ...]."""
    if jax.tree.structure(step) != jax.tree.structure(state.steps):
        raise ValueError(
            f"step structure {jax.tree.structure(step)} differs from the memory's "
            f"{jax.tree.structure(state.steps)}"
        )
    for leaf, stored in zip(jax.tree.leaves(step), jax.tree.leaves(state.steps), strict=True):
        expected = state.slot.shape + stored.shape[2:]
        if tuple(jnp.shape(leaf)) != expected:
            raise ValueError(f"step leaf shape {jnp.shape(leaf)}, expected {expected}")


def _mask(state: MemoryState, mask: jax.Array | None) -> jax.Array:
    """The [B] bool mask, all True when None; checks its shape."""
    if mask is None:
        return jnp.ones_like(state.slot, bool)
    mask = jnp.asarray(mask, bool)
    if mask.shape != state.slot.shape:
        raise ValueError(f"mask shape {mask.shape}, expected {state.slot.shape}")
    return mask


def init(example: Pytree, num_envs: int, capacity: int, max_length: int) -> MemoryState:
    """An empty memory for episodes of steps shaped like `example`.

    Args:
        example: Pytree of arrays for one step of one env (e.g. an unbatched `Transition`, with
            any extra fields such as the policy's log-prob); only shapes and dtypes are used.
            `jax.ShapeDtypeStruct` leaves work too.
        num_envs: B, the number of envs writing episodes.
        capacity: Finished episodes an update trains on (BatchPPO's update_every).
        max_length: Steps kept of each episode.

    Returns:
        A `MemoryState` with zero steps, no episode running or finished.
    """
    if num_envs < 1 or capacity < 1 or max_length < 1:
        raise ValueError(
            f"num_envs ({num_envs}), capacity ({capacity}) and max_length ({max_length}) "
            "must be positive"
        )
    if not jax.tree.leaves(example):
        raise ValueError("example has no array leaves")
    slots = capacity + num_envs
    return MemoryState(
        steps=_zeros(example, (slots, max_length)),
        length=jnp.zeros((slots,), jnp.int32),
        finished=jnp.zeros((slots,), bool),
        slot=jnp.full((num_envs,), slots, jnp.int32),
        count=jnp.zeros((), jnp.int32),
    )


def begin(state: MemoryState, mask: jax.Array) -> MemoryState:
    """Envs where `mask` is True begin an episode in a free slot (see the rules on slots)."""
    mask = _mask(state, mask)
    state = finish(state, mask)
    slots = state.slots
    running = jnp.zeros((slots + 1,), bool).at[state.slot].set(True)[:slots]
    free = ~state.finished & ~running
    free_slots = jnp.argsort(~free, stable=True)  # Free slots first, lowest first.
    rank = jnp.cumsum(mask, dtype=jnp.int32) - 1
    found = mask & (rank < free.sum())
    new = jnp.where(found, free_slots[jnp.clip(rank, 0, slots - 1)], slots)
    return state.replace(
        slot=jnp.where(mask, new, state.slot),
        length=state.length.at[new].set(0, mode="drop"),
    )


def append(state: MemoryState, step: Pytree, mask: jax.Array | None = None) -> MemoryState:
    """Writes one step of each env's running episode into its slot, in place.

    An env with no slot, or whose episode already holds max_length steps, writes nothing
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
    slot = jnp.where(mask, state.slot, state.slots)
    has_slot = slot < state.slots
    time = jnp.where(has_slot, state.length[jnp.minimum(slot, state.slots - 1)], state.max_length)

    def write(stored: jax.Array, leaf: jax.Array) -> jax.Array:
        return stored.at[slot, time].set(jnp.asarray(leaf, stored.dtype), mode="drop")

    length = state.length.at[slot].set(jnp.minimum(time + 1, state.max_length), mode="drop")
    return state.replace(steps=jax.tree.map(write, state.steps, step), length=length)


def finish(state: MemoryState, mask: jax.Array) -> MemoryState:
    """Ends the running episodes of envs where `mask` is True; those with steps are kept.

    Args:
        state: The memory.
        mask: [B] bool, envs whose episode ended.

    Returns:
        The memory with those slots finished (or freed, when empty) and the envs slotless.
    """
    mask = _mask(state, mask)
    slot = jnp.where(mask, state.slot, state.slots)
    has_steps = (slot < state.slots) & (state.length[jnp.minimum(slot, state.slots - 1)] > 0)
    kept = jnp.where(has_steps, slot, state.slots)
    return state.replace(
        finished=state.finished.at[kept].set(True, mode="drop"),
        count=state.count + has_steps.sum(dtype=jnp.int32),
        slot=jnp.where(mask, state.slots, state.slot).astype(jnp.int32),
    )


def full(state: MemoryState) -> jax.Array:
    """[] bool, the memory holds at least `capacity` finished episodes."""
    return state.count >= state.capacity


def clear(state: MemoryState, when: jax.Array | bool = True) -> MemoryState:
    """Frees the finished episodes' slots where `when` holds; running episodes continue.

    Touches no step data, so it costs nothing under a condition.
    """
    return state.replace(
        finished=jnp.where(when, False, state.finished),
        count=jnp.where(when, 0, state.count),
    )


def valid_mask(state: MemoryState) -> jax.Array:
    """[slots, max_length] bool: step t of slot i is valid when i is finished and t < length[i]."""
    steps = jnp.arange(state.max_length)[None, :]
    return state.finished[:, None] & (steps < state.length[:, None])
