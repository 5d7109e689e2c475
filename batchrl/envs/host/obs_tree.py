"""Batches of observations on the host: trees of arrays [n, *shape], as Gymnasium batches them.

A batch is the tree `gymnasium.vector.utils.create_empty_array(space, n)` makes: a dict
for a `Dict` (keys as the space orders them), a tuple for a `Tuple`, an array [n, *shape]
in the space's dtype for each leaf. A flat `Box` is a tree of one leaf, the array itself.
These functions map over the leaves and never ask what a leaf is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import utils as vector_utils

from batchrl import env_spec


def empty(space: gym.Space, n: int) -> Any:
    """An uninitialised batch of `n` observations of `space`."""
    return vector_utils.create_empty_array(space, n, fn=np.empty)


def take(batch: Any, index: Any) -> Any:
    """Rows `index` of every leaf (an int gives one observation, without its batch axis)."""
    return env_spec.map_tree(lambda leaf: leaf[index], batch)


def put(batch: Any, index: Any, rows: Any) -> None:
    """Writes `rows` (a like tree) into rows `index` of every leaf of `batch`, cast to its dtype."""
    env_spec.map_tree(lambda leaf, row: leaf.__setitem__(index, row), batch, rows)


def copy(batch: Any) -> Any:
    """A batch of fresh arrays equal to `batch`."""
    return env_spec.map_tree(np.copy, batch)


def concatenate(batches: Sequence[Any]) -> Any:
    """One batch of the rows of `batches` (like trees), in order."""
    return env_spec.map_tree(lambda *leaves: np.concatenate(leaves), *batches)


class Shape:
    """A leaf's shape in a tree of shapes (a tuple would read as a `Tuple` space's node)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any = None):
        del dtype  # Given by `create_empty_array`; only the shape is checked.
        self.shape = tuple(shape)


def shapes(space: gym.Space, n: int) -> Any:
    """The tree of each leaf's `Shape` [n, *shape] in a batch of `n` observations of `space`."""
    return vector_utils.create_empty_array(space, n, fn=Shape)


def check(batch: Any, expected: Any, path: str = "obs") -> None:
    """Raises a ValueError naming the first leaf of `batch` whose place or shape differs.

    `expected`: the tree of `shapes`, made once.
    """
    if isinstance(expected, Shape):
        if np.shape(batch) != expected.shape:
            raise ValueError(
                f"{path} has shape {np.shape(batch)}, but this batch's {_what(path)} have "
                f"shape {expected.shape} there"
            )
        return
    if isinstance(expected, dict):
        fits = isinstance(batch, dict) and batch.keys() == expected.keys()
        names = {key: env_spec.key_path(key) for key in expected}
    else:
        fits = isinstance(batch, tuple | list) and len(batch) == len(expected)
        names = {i: f"[{i}]" for i in range(len(expected))}
    if not fits:
        raise ValueError(
            f"{path} must be a {type(expected).__name__} of {len(expected)} entries, as this "
            f"batch's {_what(path)[:-1]} space nests, got {type(batch).__name__}"
        )
    for key, name in names.items():
        check(batch[key], expected[key], path + name)


def _what(path: str) -> str:
    """What a path's root names: "observations" or "actions"."""
    return "actions" if path.startswith("action") else "observations"
