"""EnvSpec: the one static description of an env, in plain Python (no JAX to import).

An env's observation is a tree: one `ObsLeaf` per array, nested in dicts and tuples as
the env's Gymnasium `Dict` and `Tuple` spaces nest (a flat `Box` is a tree of one leaf).
The tree functions here walk dicts in sorted key order, as `jax.tree` does, so a leaf's
position is the same on the host and in compiled code.

An action is one array (a `Box`, `Discrete` or `MultiDiscrete`, EnvSpec's own fields),
or a tree of `ActionLeaf` (`Dict`s and `Tuple`s of those and `MultiBinary`) in
`EnvSpec.action`: the policy then acts in one float row of every leaf's elements.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

# What an observation leaf is, which decides how the policy's encoder reads it.
VECTOR = "vector"  # A Box of numbers; normalised by streaming statistics when float.
IMAGE = "image"  # A rank-3 Box (height, width, channels in either order); scaled by its
# bounds, or normalised as a vector where it has none.
DISCRETE = "discrete"  # One integer in [start, start + n): one-hot.
MULTI_DISCRETE = "multi_discrete"  # Integers, each in its own range: one one-hot each.
BINARY = "binary"  # Zeros and ones (MultiBinary, a bool Box): read as floats.
KINDS = (VECTOR, IMAGE, DISCRETE, MULTI_DISCRETE, BINARY)


@dataclasses.dataclass(frozen=True)
class ObsLeaf:
    """One array of an observation: its shape, dtype and kind.

    Attributes:
        shape: Shape of the array in one observation.
        dtype: Name of its dtype (as the env gives it, or as compiled code receives it).
        kind: One of `KINDS`.
        num_values: DISCRETE: (n,); MULTI_DISCRETE: each element's count, flattened in C
            order; () otherwise.
        start: The smallest value of each element of `num_values`; () otherwise.
        low: IMAGE: the smallest value its Box allows, when one bound holds for all;
            None otherwise.
        high: IMAGE: the largest, likewise.
    """

    shape: tuple[int, ...]
    dtype: str
    kind: str
    num_values: tuple[int, ...] = ()
    start: tuple[int, ...] = ()
    low: float | None = None
    high: float | None = None

    def __post_init__(self):
        _check_leaf(self, "observation", KINDS)

    @property
    def normalized(self) -> bool:
        """Whether the streaming normaliser scales this leaf: vectors of numbers, not of bools.

        Integer ones too: an Atari game's RAM (128 uint8) or a frame of rank 2 reached
        the MLP as raw 0..255 floats, and its policy collapsed where float32 ones learned.
        An image without one pair of finite bounds to scale it by too: features around
        1,000 in a rank-3 Box reached the CNN raw, and its policy was certain in a phase.
        """
        dtype = np.dtype(self.dtype)
        numbers = dtype != np.bool_ and np.issubdtype(dtype, np.number)
        return numbers and (self.kind == VECTOR or (self.kind == IMAGE and self.low is None))

    @property
    def size(self) -> int:
        """Elements of the array in one observation."""
        return math.prod(self.shape)

    @property
    def feature_size(self) -> int:
        """Features the encoder makes of it: one-hots for categories, one per element else."""
        return sum(self.num_values) if self.num_values else self.size

    @property
    def nbytes(self) -> int:
        """Bytes of the array in one observation."""
        return self.size * np.dtype(self.dtype).itemsize


def _check_leaf(leaf: Any, side: str, kinds: tuple[str, ...]) -> None:
    """Refuses an observation or action leaf of an unknown kind, or counts that do not fit it."""
    if leaf.kind not in kinds:
        raise ValueError(f"unknown {side} leaf kind {leaf.kind!r}: use one of {kinds}")
    categorical = leaf.kind in (DISCRETE, MULTI_DISCRETE)
    if categorical != bool(leaf.num_values) or len(leaf.start) != len(leaf.num_values):
        raise ValueError(
            f"a {leaf.kind} {side} leaf needs num_values and start of equal length only when "
            f"discrete or multi-discrete, got num_values={leaf.num_values}, start={leaf.start}"
        )


def vector(shape: tuple[int, ...], dtype: str = "float32") -> ObsLeaf:
    """A leaf of numbers: what a flat `Box` observation is."""
    return ObsLeaf(tuple(shape), dtype, VECTOR)


ACTION_KINDS = (VECTOR, DISCRETE, MULTI_DISCRETE, BINARY)
# Integers ride in a float32 row exactly up to 2**24.
LARGEST_INTEGER_ACTION = 2**24


@dataclasses.dataclass(frozen=True)
class ActionLeaf:
    """One array of an action tree: its shape, dtype, kind and range.

    Attributes:
        shape: Shape of the array in one action.
        dtype: Name of the dtype the env takes.
        kind: VECTOR (a `Box`: a Gaussian), DISCRETE, MULTI_DISCRETE (categoricals) or
            BINARY (a `MultiBinary`: a Bernoulli per element).
        num_values: DISCRETE: (n,); MULTI_DISCRETE: each element's count, flattened in C
            order; () otherwise.
        start: The smallest value of each element of `num_values`; () otherwise.
        low: VECTOR: each element's lower bound when every bound is finite; None otherwise.
        high: VECTOR: the upper bounds, likewise.
    """

    shape: tuple[int, ...]
    dtype: str
    kind: str
    num_values: tuple[int, ...] = ()
    start: tuple[int, ...] = ()
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None

    def __post_init__(self):
        _check_leaf(self, "action", ACTION_KINDS)

    def check_float_row(self) -> None:
        """A ValueError where a policy's float32 row cannot hold this leaf's values exactly.

        Training's concern, not a batch's: a `BatchEnv` steps any integer range.
        """
        if any(
            abs(s) + n > LARGEST_INTEGER_ACTION
            for s, n in zip(self.start, self.num_values, strict=True)
        ):
            raise ValueError(
                f"an integer action leaf's values reach past {LARGEST_INTEGER_ACTION}, the "
                f"largest a float32 row holds exactly: num_values={self.num_values}, "
                f"start={self.start}"
            )
        whole = self.kind == VECTOR and np.dtype(self.dtype).kind in "iu"
        bounds = (self.low or ()) + (self.high or ())
        if whole and any(abs(bound) > LARGEST_INTEGER_ACTION for bound in bounds):
            raise ValueError(
                f"an integer Box's bounds reach past {LARGEST_INTEGER_ACTION}, the largest a "
                f"float32 row holds exactly: low={min(self.low)}, high={max(self.high)}"
            )

    @property
    def size(self) -> int:
        """Elements of the array in one action: its stretch of the policy's float row."""
        return math.prod(self.shape)

    @property
    def policy_outputs(self) -> int:
        """What the policy's head outputs for it: means, or logits of each value or bit."""
        return sum(self.num_values) if self.num_values else self.size


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What batching, simulate and the networks know of an env before it runs.

    Attributes:
        observation: The observation tree: an `ObsLeaf`, or dicts and tuples of them.
        discrete: Whether actions are integers: `Discrete` (one) or `MultiDiscrete`.
        action_shape: Shape of one action; () for a `Discrete` action.
        num_actions: Discrete actions: the count of a `Discrete`, the sum of a
            `MultiDiscrete`'s counts (the policy's logits); None for continuous actions.
        action_low: Lower bound of each continuous action element; None when discrete
            or unbounded.
        action_high: Upper bound, likewise.
        action_nvec: `MultiDiscrete`: each element's count, flattened; None otherwise.
        action_start: Discrete actions: the smallest value of each element (one for a
            `Discrete`); None for continuous actions.
        action: An action tree of `ActionLeaf` (a `Dict`, `Tuple` or `MultiBinary`
            action); None when the fields above describe the action. With a tree,
            `discrete` is False and `action_shape` is (D,), the policy's float row of the
            leaves' elements in `leaves` order.
        spaces: The env's (observation_space, action_space) as Gymnasium gives them, where
            it has them: what a run keeps (`spaces.json`) and a loaded policy tells. Not
            part of what the spec is: specs of envs whose spaces differ only where the
            fields above do not look (a vector Box's bounds) are equal, and share programs.
    """

    observation: Any
    discrete: bool
    action_shape: tuple[int, ...] = ()
    num_actions: int | None = None
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None
    action_nvec: tuple[int, ...] | None = None
    action_start: tuple[int, ...] | None = None
    action: Any = None
    spaces: tuple[Any, Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        bad = [leaf for leaf in leaves(self.observation) if not isinstance(leaf, ObsLeaf)]
        if bad or not leaves(self.observation):
            raise ValueError(
                f"an EnvSpec's observation is a tree (dicts, tuples) of ObsLeaf, got "
                f"{self.observation!r}"
            )
        if self.action is not None:
            self._check_action_tree()
        elif self.discrete:
            self._check_discrete()
        elif self.num_actions is not None or self.action_nvec is not None:
            raise ValueError(
                f"a continuous EnvSpec has num_actions and action_nvec None, got "
                f"{self.num_actions} and {self.action_nvec}"
            )
        if (self.action_low is None) != (self.action_high is None):
            raise ValueError("action_low and action_high are given together or not at all")

    def _check_discrete(self) -> None:
        if self.action_nvec is None and (self.num_actions is None or self.action_shape != ()):
            raise ValueError(
                f"a discrete EnvSpec needs num_actions and action_shape (), got "
                f"num_actions={self.num_actions}, action_shape={self.action_shape}"
            )
        if self.action_nvec is not None and (
            math.prod(self.action_shape) != len(self.action_nvec)
            or self.num_actions != sum(self.action_nvec)
        ):
            raise ValueError(
                f"a multi-discrete EnvSpec needs one count per action element and "
                f"num_actions their sum, got action_shape={self.action_shape}, "
                f"action_nvec={self.action_nvec}, num_actions={self.num_actions}"
            )

    def _check_action_tree(self) -> None:
        found = leaves(self.action)
        if not found or not all(isinstance(leaf, ActionLeaf) for leaf in found):
            raise ValueError(f"an EnvSpec's action is a tree of ActionLeaf, got {self.action!r}")
        width = sum(leaf.size for leaf in found)
        others = (self.num_actions, self.action_low, self.action_nvec, self.action_start)
        if self.discrete or self.action_shape != (width,) or any(o is not None for o in others):
            raise ValueError(
                f"an EnvSpec with an action tree is continuous with action_shape ({width},) "
                f"and no other action field, got discrete={self.discrete}, "
                f"action_shape={self.action_shape}"
            )

    @property
    def action_size(self) -> int:
        """The policy's outputs: logits of discrete actions, or continuous action elements."""
        return self.num_actions if self.discrete else math.prod(self.action_shape)

    @property
    def multi_discrete(self) -> bool:
        """Whether actions are several integers, each with its own count."""
        return self.action_nvec is not None

    @property
    def feature_size(self) -> int:
        """Features the policy's encoder makes of one observation."""
        return sum(leaf.feature_size for leaf in leaves(self.observation))


# -- trees of leaves: dicts (walked in sorted key order, as jax.tree does) and tuples ----------


def _children(tree: Any) -> Iterator[tuple[str, Any]] | None:
    if isinstance(tree, dict):
        return ((key_path(key), tree[key]) for key in sorted(tree))
    if isinstance(tree, tuple | list):
        return ((f"[{i}]", child) for i, child in enumerate(tree))
    return None


def key_path(key: Any) -> str:
    """How a path names a dict key: `["image"]`, or `[3]` for a key that is not a string."""
    return f'["{key}"]' if isinstance(key, str) else f"[{key!r}]"


def leaf_paths(tree: Any, prefix: str = "obs") -> list[tuple[str, Any]]:
    """(path, leaf) of every leaf, `obs["image"]`, `obs[0]`, in `jax.tree.leaves` order."""
    children = _children(tree)
    if children is None:
        return [(prefix, tree)]
    return [pair for key, child in children for pair in leaf_paths(child, prefix + key)]


def leaves(tree: Any) -> list[Any]:
    """The leaves of a tree, in `jax.tree.leaves` order."""
    return [leaf for _, leaf in leaf_paths(tree)]


def map_tree(function: Callable[..., Any], tree: Any, *others: Any) -> Any:
    """`function` of each leaf of `tree` and the same position in `others`, as a like tree."""
    if isinstance(tree, dict):
        return {key: map_tree(function, tree[key], *(o[key] for o in others)) for key in tree}
    if isinstance(tree, tuple | list):
        return tuple(
            map_tree(function, child, *(o[i] for o in others)) for i, child in enumerate(tree)
        )
    return function(tree, *others)


def nbytes(tree: Any) -> int:
    """Bytes of one observation of this tree of leaves."""
    return sum(leaf.nbytes for leaf in leaves(tree))


# -- as plain data (JSON), so a run folder describes its env without building it ---------------


def to_data(spec: EnvSpec) -> dict[str, Any]:
    """`spec` as lists, dicts, strings and numbers: what `from_data` reads back equal.

    `spaces` are left out (a run keeps them apart, as Gymnasium's: `envs.space_data`).
    The observation tree is written node by node: `{"leaf": {...}}`, `{"tuple": [...]}`,
    and `{"dict": [[key, node], ...]}` (pairs, so keys keep their type and order).
    """
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.compare}
    data = {
        name: list(value) if isinstance(value, tuple) else value for name, value in fields.items()
    }
    data["observation"] = _node_data(spec.observation)
    data["action"] = None if spec.action is None else _node_data(spec.action)
    return data


def from_data(data: dict[str, Any]) -> EnvSpec:
    """The `EnvSpec` that `to_data` wrote; a ValueError naming what does not fit."""
    if not isinstance(data, dict) or "observation" not in data:
        raise ValueError(f"an env spec is a mapping with an observation, got {data!r:.80}")
    known = {f.name for f in dataclasses.fields(EnvSpec) if f.compare}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"an env spec has no field {unknown[0]!r}")
    fields = {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in data.items()
        if name not in ("observation", "action")
    }
    action = data.get("action")
    return EnvSpec(
        observation=_node(data["observation"]),
        action=None if action is None else _node(action),
        **fields,
    )


def _node_data(tree: Any) -> dict[str, Any]:
    if isinstance(tree, dict):
        return {"dict": [[key, _node_data(child)] for key, child in tree.items()]}
    if isinstance(tree, tuple | list):
        return {"tuple": [_node_data(child) for child in tree]}
    kind = "action_leaf" if isinstance(tree, ActionLeaf) else "leaf"
    fields = {f.name: getattr(tree, f.name) for f in dataclasses.fields(tree)}
    return {kind: {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}}


def _node(data: Any) -> Any:
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError(f"a spec's tree node is one of leaf, tuple, dict, got {data!r:.80}")
    ((kind, value),) = data.items()
    if kind == "dict":
        return {key: _node(child) for key, child in value}
    if kind == "tuple":
        return tuple(_node(child) for child in value)
    if kind in ("leaf", "action_leaf"):
        leaf = ObsLeaf if kind == "leaf" else ActionLeaf
        return leaf(**{k: tuple(v) if isinstance(v, list) else v for k, v in value.items()})
    raise ValueError(f"a spec's tree node is one of leaf, action_leaf, tuple, dict, got {kind!r}")


# The dtype kinds an action leaf of each kind takes: a cast from another kind would change
# the values (1.7 steps as 1), where Gymnasium's spaces refuse them.
_TAKES = {"b": "biu", "i": "biu", "u": "biu", "f": "biuf"}


def check_action_kinds(actions: Any, like: Any) -> None:
    """A TypeError naming the first leaf of `actions` whose values its leaf's dtype would change.

    `like` is a tree of arrays in the action leaves' dtypes. Floats for a `Discrete`, say,
    are refused as Gymnasium's spaces refuse them, not truncated. Object arrays are left to
    the cast, which names a value it cannot take.
    """
    for (path, given), target in zip(leaf_paths(actions, "actions"), leaves(like), strict=True):
        takes = _TAKES.get(target.dtype.kind)
        if takes is not None and given.dtype.kind not in takes + "O":
            raise TypeError(
                f"{path} of dtype {given.dtype} do not fit this batch's action dtype "
                f"{target.dtype}: give {'numbers' if 'f' in takes else 'integers'} (Gymnasium's "
                f"spaces refuse others, and a cast would truncate them)"
            )
