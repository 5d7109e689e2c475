"""Batches of observations on the host: trees of arrays [n, *shape], as Gymnasium batches them.

A batch is the tree `gymnasium.vector.utils.create_empty_array(space, n)` makes: a dict
for a `Dict` (keys as the space orders them), a tuple for a `Tuple`, an array [n, *shape]
in the space's dtype for each leaf. A flat `Box` is a tree of one leaf, the array itself.
A leaf of no fixed shape (`spaces.Variable`: `Text`, `Graph`, `Sequence`, `OneOf`) is an
object array [n] of each env's value inside a batch, and a tuple of them, as Gymnasium
batches it, for the caller (`to_gymnasium`, `from_gymnasium`). These functions map over
the leaves and never ask what a leaf is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import utils as vector_utils

from batchrl import env_spec
from batchrl.envs import spaces


def empty(space: gym.Space, n: int) -> Any:
    """An uninitialised batch of `n` observations of `space`."""

    def leaf(child: gym.Space, path: str) -> Any:
        if spaces.is_variable(child):
            return np.empty(n, object)
        return vector_utils.create_empty_array(child, n, fn=np.empty)

    return spaces.nested(space, leaf, "")


def variable_kinds(space: gym.Space) -> Any:
    """`space`'s leaves as a tree of `spaces.Variable` or the leaf space; None when none varies.

    Made once per batch: `to_gymnasium` and `from_gymnasium` take it, so a batch of
    fixed-shape spaces (None) pays nothing for them on its step.
    """
    kinds = spaces.nested(
        space,
        lambda child, path: spaces.Variable(child) if spaces.is_variable(child) else child,
        "",
    )
    found: list = []
    env_spec.map_tree(found.append, kinds)
    return kinds if any(isinstance(kind, spaces.Variable) for kind in found) else None


def to_gymnasium(batch: Any, kinds: Any) -> Any:
    """`batch` as Gymnasium gives it: each object array a tuple of values (`kinds` not None)."""
    if kinds is None:
        return batch
    return env_spec.map_tree(lambda leaf: tuple(leaf) if leaf.dtype == object else leaf, batch)


def from_gymnasium(batch: Any, kinds: Any) -> Any:
    """A batch as Gymnasium gives it (tuples of values) as one of this module's, by `kinds`."""
    if kinds is None:
        return batch

    def leaf(kind: Any, values: Any) -> Any:
        if not isinstance(kind, spaces.Variable):
            return values
        array = np.empty(len(values), object)
        for i, value in enumerate(values):
            array[i] = value
        return array

    return env_spec.map_tree(leaf, kinds, batch)


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

    def leaf(child: gym.Space, path: str) -> Any:
        if spaces.is_variable(child):
            return Shape((n,))
        return vector_utils.create_empty_array(child, n, fn=Shape)

    return spaces.nested(space, leaf, "")


def check(batch: Any, expected: Any, path: str = "obs") -> None:
    """Raises a ValueError naming the first leaf of `batch` whose place or shape differs.

    `expected`: the tree of `shapes`, made once. A dict's keys its space lacks are not
    read, as Gymnasium's vector envs read only the space's; a key it lacks is named.
    """
    if isinstance(expected, Shape):
        if np.shape(batch) != expected.shape:
            raise ValueError(
                f"{path} has shape {np.shape(batch)}, but this batch's {_what(path)} have "
                f"shape {expected.shape} there"
            )
        return
    if isinstance(expected, dict):
        fits = isinstance(batch, dict)
        missing = [key for key in expected if fits and key not in batch]
        if missing:
            raise ValueError(
                f"{path} lacks key {missing[0]!r}: this batch's {_what(path)[:-1]} space has "
                f"keys {list(expected)}"
            )
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
