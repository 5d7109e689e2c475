"""An episode memory in a checkpoint: the steps its slots hold, not the padding past them.

The memory is sized for the longest episodes, one slot for each finished episode an
update waits for and each running one (the seed's `humanoid`: 90 slots of 1,000 steps,
147 MB), and a checkpoint of a phase keeps it: the running episodes go on after a resume.
Saved, each step leaf keeps the first `length` steps of each slot, in one array; loaded,
the steps past them are zeros. No computation reads them (`episode_memory`: padding
holds whatever earlier episodes left there, and `valid_mask` marks none of it), so a
resumed run trains as the uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

MARK = "__held_steps__"  # A memory saved so: {MARK: its max_length, **its fields, steps cut}.


class HeldStepsError(ValueError):
    """A saved memory whose held steps do not fit its target (the file is corrupt)."""


def pack(memory: dict) -> dict:
    """`memory`, an `episode_memory.MemoryState`'s state dict, with only its held steps."""
    length = np.asarray(memory["length"])
    steps = memory["steps"]
    max_length = np.shape(jax.tree.leaves(steps)[0])[1]
    held = np.arange(max_length)[None, :] < length[:, None]
    steps = jax.tree.map(lambda leaf: np.asarray(leaf)[held], steps)
    return {**memory, MARK: int(max_length), "steps": steps}


def packed(saved: Any) -> bool:
    """Whether `saved` is a memory `pack` wrote."""
    return isinstance(saved, dict) and MARK in saved


def unpack(saved: dict, target: dict) -> dict:
    """The memory `pack` wrote, each step leaf in the shape of `target`'s, zeros past `length`.

    The steps' structure, dtypes and trailing shapes are checked against the target's by
    the caller (`checkpoint.load`), as every other leaf's are.

    Raises:
        HeldStepsError: The lengths or held steps do not fit the target's memory.
    """
    memory = {name: value for name, value in saved.items() if name != MARK}
    length = memory.get("length")
    if "steps" not in target or "steps" not in memory:
        raise HeldStepsError(f"structure mismatch: an episode memory, target has {sorted(target)}")
    slots, max_length = np.shape(jax.tree.leaves(target["steps"])[0])[:2]
    if saved[MARK] != max_length:
        raise HeldStepsError(
            f"structure mismatch: episodes of up to {saved[MARK]} steps, target has {max_length}"
        )
    if not isinstance(length, np.ndarray) or length.shape != (slots,):
        raise HeldStepsError(f"episode lengths {_shape(length)}, expected [{slots}]")
    if length.min(initial=0) < 0 or length.max(initial=0) > max_length:
        raise HeldStepsError(f"episode lengths outside 0 to {max_length}")
    held = np.arange(max_length)[None, :] < length[:, None]
    count = int(held.sum())

    def whole(leaf: Any) -> Any:
        if not isinstance(leaf, np.ndarray) or leaf.shape[:1] != (count,):
            raise HeldStepsError(f"held steps {_shape(leaf)}, expected {count} steps")
        full = np.zeros((slots, max_length, *leaf.shape[1:]), leaf.dtype)
        full[held] = leaf
        return full

    memory["steps"] = jax.tree.map(whole, memory["steps"])
    return memory


def _shape(value: Any) -> str:
    return f"{list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
