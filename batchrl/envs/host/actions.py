"""A batch's actions on their way to its envs: checked, sent in which dtypes, each env's own.

Gymnasium's vector envs hand each env its action as the caller gave it, and an env
computes in that dtype: float64 actions on Pendulum's float32 `Box` give other results
than the same actions rounded to float32. Shared memory holds the space's dtypes, so a
step of arrays in other dtypes carries its actions with it (`as_given`); lists and
numbers, which have no dtype, go in the space's, as a `Box` casts a list it checks.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from batchrl import env_spec
from batchrl.envs.host import arguments, obs_tree


def checked(actions: Any, space: Any, num_envs: int, shapes: Any, kinds: Any) -> Any:
    """`actions` as arrays [B, *leaf_shape] nested as the space, or Gymnasium's error.

    `shapes` and `kinds` are the batch's `obs_tree.shapes` and `variable_kinds` of its
    single action `space` (shapes None for a flat space). A scalar is a TypeError (it
    cannot be split among envs), a wrong shape or nesting a ValueError naming the leaf.
    """
    if shapes is None:  # A flat space: one array.
        return arguments.check_flat_actions(actions, space, num_envs)
    try:
        actions = obs_tree.from_gymnasium(actions, kinds)
    except (KeyError, IndexError, TypeError):  # Not nested as the space: say where.
        obs_tree.check(actions, shapes, "actions")
        raise
    obs_tree.check(actions, shapes, "actions")
    # The space's tree leads: a leaf's values given as a list are one array, not a node.
    return env_spec.map_tree(lambda _, leaf: np.asarray(leaf), shapes, actions)


def sent(given: Any, checked: Any, like: Any, keep_dtypes: bool) -> Any:
    """The actions the groups get: `checked` (`given` read as arrays) cast to `like`'s dtypes.

    Cast before any group steps, for every group: an action a later group cannot take
    would otherwise leave the groups before it stepping, never collected. With
    `keep_dtypes`, arrays keep their own dtypes instead, copied where they differ: those
    do not go into shared memory at once, and the caller may write its array again
    before `step_wait`.
    """
    cast = env_spec.map_tree(lambda a, b: np.asarray(a, b.dtype), checked, like)
    if not keep_dtypes:
        return cast

    def leaf(_: Any, raw: Any, array: np.ndarray, into: np.ndarray) -> np.ndarray:
        if not hasattr(raw, "dtype") or array.dtype == into.dtype:
            return into
        return np.array(array)

    return env_spec.map_tree(leaf, like, given, checked, cast)


def as_given(actions: Any, buffers: Any) -> Any:
    """`actions` where a leaf's dtype is not its buffer's (the envs get them so); else None."""
    differ: list[bool] = []
    env_spec.map_tree(
        lambda given, held: differ.append(given.dtype != held.dtype), actions, buffers
    )
    return actions if any(differ) else None


def per_env(action: Any, num_envs: int) -> list[Any]:
    """Each env's own copy of its action from the batch's tree of action arrays."""
    if isinstance(action, np.ndarray):
        return [copy.copy(a) for a in action] if action.dtype == object else list(action.copy())
    return [env_spec.map_tree(lambda leaf, i=i: _own(leaf[i]), action) for i in range(num_envs)]


def _own(value: Any) -> Any:
    """A copy of one env's action leaf: an array's, or a value's of no fixed shape."""
    return value.copy() if isinstance(value, np.ndarray | np.generic) else copy.copy(value)
