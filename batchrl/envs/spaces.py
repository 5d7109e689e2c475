"""Which spaces batchrl supports, and the `EnvSpec` of an env with supported spaces.

Observations: every space whose values are fixed-shape arrays (`Box`, `Discrete`,
`MultiDiscrete`, `MultiBinary`), nested in `Dict`s and `Tuple`s; each becomes an
`ObsLeaf` of the observation tree. Actions: every fixed-shape action space nested in
`Dict`s and `Tuple`s (`Box`, `Discrete`, `MultiDiscrete`, `MultiBinary`), as Gymnasium's
vector envs step them; a batch steps them and training learns them, a tree as an
`ActionLeaf` per array (`EnvSpec.action`). Spaces of no fixed shape (`Text`, `Graph`,
`Sequence`, `OneOf`, and spaces of one's own) a batch of host envs carries too, a
`Variable` leaf each, one Python value an env; training refuses them. Anything else is
refused up front with one line naming the leaf, rather than failing deep inside a rollout.
Both env sides describe their envs here: the host's Gymnasium envs, and the JAX-native
envs whose spaces are Gymnasium's (gymnax).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl.env_spec import EnvSpec
from batchrl.envs.host import minigrid_env

# The leaves whose values are counts (one-hot indices) or bits, not measurements.
COUNTED = (env_spec_lib.BINARY, env_spec_lib.DISCRETE, env_spec_lib.MULTI_DISCRETE)
SUPPORTED_OBSERVATION = (
    "Box, Discrete, MultiDiscrete and MultiBinary observations, nested in Dict and Tuple"
)
SUPPORTED_ACTION = "Box, Discrete, MultiDiscrete and MultiBinary actions, nested in Dict and Tuple"
ALSO_STEPPED = "; a BatchEnv also steps Text, Graph, Sequence and OneOf"
_GYMNASIUM_KINDS = (
    gym.spaces.Box,
    gym.spaces.Discrete,
    gym.spaces.MultiDiscrete,
    gym.spaces.MultiBinary,
    gym.spaces.Dict,
    gym.spaces.Tuple,
)
_VARIABLE_KINDS = (gym.spaces.Text, gym.spaces.Graph, gym.spaces.Sequence, gym.spaces.OneOf)
# The action spaces EnvSpec's own fields describe; any other supported one is a tree.
_ONE_ARRAY = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete)


class UnsupportedSpaceError(TypeError):
    """A space batchrl cannot batch or learn on."""


class Variable:
    """A leaf of no fixed shape (`Text`, `Graph`, `Sequence`, `OneOf`): a value an env.

    A batch holds it as an object array [n] of each env's value, and gives it to the
    caller as Gymnasium batches it, a tuple of n values. Its `shape` and `dtype` are an
    element's, so code that lays out arrays handles it as any leaf.
    """

    shape = ()
    dtype = np.dtype(object)

    def __init__(self, space: gym.Space):
        self.space = space

    def __repr__(self) -> str:
        return f"Variable({self.space})"


def nested(space: gym.Space, leaf: Callable[[gym.Space, str], Any], path: str) -> Any:
    """`leaf(child, its path)` of each space in `space` but Dicts and Tuples, nested as they are."""
    if isinstance(space, gym.spaces.Dict):
        return {
            key: nested(child, leaf, path + env_spec_lib.key_path(key))
            for key, child in space.spaces.items()
        }
    if isinstance(space, gym.spaces.Tuple):
        return tuple(nested(child, leaf, f"{path}[{i}]") for i, child in enumerate(space.spaces))
    return leaf(space, path)


def observation_tree(
    space: gym.Space, env_name: str = "env", path: str = "obs", variable: bool = False
) -> Any:
    """The observation tree of `space`: an `ObsLeaf` per array, nested as its Dicts and Tuples.

    `variable`: a space of no fixed shape is a `Variable` leaf (a batch of host envs
    carries it), else refused.
    """

    def leaf(child: gym.Space, where: str) -> Any:
        if variable and is_variable(child):
            return Variable(child)
        return _observation_leaf(child, where, env_name, ALSO_STEPPED if variable else "")

    return nested(space, leaf, path)


def _bounds(space: gym.spaces.Box) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """A Box's bounds element by element (inf where one has none); (None, None) if it has none."""
    if not (np.any(np.isfinite(space.low)) or np.any(np.isfinite(space.high))):
        return None, None
    return tuple(map(float, space.low.flat)), tuple(map(float, space.high.flat))


def _observation_leaf(
    space: gym.Space, path: str, env_name: str, also: str = ""
) -> env_spec_lib.ObsLeaf:
    leaf = _leaf(space)
    if leaf is None:
        why = "is not a space batchrl can batch"
        if not isinstance(space, _GYMNASIUM_KINDS + _VARIABLE_KINDS):
            why = "is a space of its own: a BatchEnv steps it, training cannot"
        elif is_variable(space):
            why = "has no fixed shape: a BatchEnv steps it, training cannot"
        raise UnsupportedSpaceError(
            f"{path}: {type(space).__name__} {why}; drop it with a wrapper (env {env_name}; "
            f"batchrl supports {SUPPORTED_OBSERVATION}{also}){minigrid_env.hint(env_name)}"
        )
    return leaf


def is_variable(space: gym.Space) -> bool:
    """Whether `space`'s values have no fixed shape: `Text`, `Graph`, `Sequence`, `OneOf`.

    A space of one's own (no Gymnasium kind) counts too: Gymnasium's vector envs batch
    it as they batch these, a tuple of each env's value.
    """
    return isinstance(space, _VARIABLE_KINDS) or not isinstance(space, _GYMNASIUM_KINDS)


def _kind(space: gym.Space) -> type[gym.Space] | None:
    """The kind of a fixed-shape array space (`Box`, `Discrete`, ...), else None."""
    family = _family(space)
    return family if family in (*_ONE_ARRAY, gym.spaces.MultiBinary) else None


def _leaf(space: gym.Space) -> env_spec_lib.ObsLeaf | None:
    """The leaf of a space that is one fixed-shape array; None for any other space."""
    kind = _kind(space)
    dtype = np.dtype(space.dtype).name if space.dtype is not None else None
    if kind is gym.spaces.Discrete:
        return env_spec_lib.ObsLeaf(
            (), dtype, env_spec_lib.DISCRETE, (int(space.n),), (int(space.start),)
        )
    if kind is gym.spaces.MultiDiscrete:
        return env_spec_lib.ObsLeaf(
            tuple(space.shape),
            dtype,
            env_spec_lib.MULTI_DISCRETE,
            tuple(int(n) for n in space.nvec.flat),
            tuple(int(s) for s in space.start.flat),
        )
    if kind is gym.spaces.MultiBinary:
        return env_spec_lib.ObsLeaf(tuple(space.shape), dtype, env_spec_lib.BINARY)
    if kind is not gym.spaces.Box:
        return None
    shape = tuple(space.shape)
    if len(shape) == 3:
        low, high = np.min(space.low), np.max(space.high)
        uniform = np.all(space.low == low) and np.all(space.high == high)
        bounded = uniform and np.isfinite(low) and np.isfinite(high) and high > low
        bounds = (float(low), float(high)) if bounded else (None, None)
        return env_spec_lib.ObsLeaf(shape, dtype, env_spec_lib.IMAGE, low=bounds[0], high=bounds[1])
    if space.dtype == np.bool_:
        return env_spec_lib.ObsLeaf(shape, dtype, env_spec_lib.BINARY)
    return env_spec_lib.ObsLeaf(shape, dtype, env_spec_lib.VECTOR)


def check_observation_space(space: gym.Space, env_name: str = "env") -> gym.Space:
    """Returns `space` if batchrl supports it as an observation space, raises otherwise."""
    observation_tree(space, env_name)
    return space


def check_action_space(space: gym.Space, env_name: str = "env") -> gym.Space:
    """Returns `space` if a batch can step it as an action space, raises otherwise."""
    action_tree(space, env_name)
    return space


def action_tree(space: gym.Space, env_name: str = "env", variable: bool = False) -> Any:
    """An `ActionLeaf` per array of an action of `space`, nested as its Dicts and Tuples.

    `variable`: a space of no fixed shape is a `Variable` leaf, as in `observation_tree`.
    """

    def leaf(child: gym.Space, where: str) -> Any:
        if variable and is_variable(child):
            return Variable(child)
        return _action_leaf(child, where, env_name, variable)

    return nested(space, leaf, "action")


def _action_leaf(
    space: gym.Space, path: str, env_name: str, stepped: bool = False
) -> env_spec_lib.ActionLeaf:
    """The leaf of `space`; `stepped`: for a batch to step, not for a policy to act in."""
    leaf = _fixed_action_leaf(space, path, env_name, ALSO_STEPPED if stepped else "")
    if not stepped:
        try:
            leaf.check_float_row()
        except ValueError as error:
            raise UnsupportedSpaceError(f"{path} of {env_name}: {error}") from None
    return leaf


def _fixed_action_leaf(
    space: gym.Space, path: str, env_name: str, also: str
) -> env_spec_lib.ActionLeaf:
    kind = _kind(space)
    if kind is None:
        where = "" if path == "action" else f" at {path}"
        raise UnsupportedSpaceError(
            f"unsupported action space {_named(space)}{where} of {env_name}: batchrl supports "
            f"{SUPPORTED_ACTION}{also}"
        )
    shape, dtype = tuple(space.shape), np.dtype(space.dtype).name
    if kind is gym.spaces.Box and space.dtype == np.bool_:  # Bits: a Bernoulli each.
        return env_spec_lib.ActionLeaf(shape, dtype, env_spec_lib.BINARY)
    if kind is gym.spaces.MultiBinary:
        return env_spec_lib.ActionLeaf(shape, dtype, env_spec_lib.BINARY)
    try:
        if kind is gym.spaces.Box:
            low, high = _bounds(space)
            return env_spec_lib.ActionLeaf(shape, dtype, env_spec_lib.VECTOR, low=low, high=high)
        if kind is gym.spaces.Discrete:
            counts, starts = (int(space.n),), (int(space.start),)
        else:
            counts = tuple(int(n) for n in space.nvec.flat)
            starts = tuple(int(s) for s in space.start.flat)
        one = kind is gym.spaces.Discrete
        categorical = env_spec_lib.DISCRETE if one else env_spec_lib.MULTI_DISCRETE
        return env_spec_lib.ActionLeaf(shape, dtype, categorical, counts, starts)
    except ValueError as error:
        raise UnsupportedSpaceError(f"{path} of {env_name}: {error}") from None


def _named(space: gym.Space) -> str:
    """`space` as its repr names it where it is a Gymnasium kind, else by its own type."""
    known = type(space) in _GYMNASIUM_KINDS + _VARIABLE_KINDS
    return repr(space) if known else type(space).__name__


def _family(space: gym.Space) -> type[gym.Space]:
    """The Gymnasium kind `space` is of (a subclass is its base's), or its own class."""
    kinds = _GYMNASIUM_KINDS + _VARIABLE_KINDS
    return next((kind for kind in kinds if isinstance(space, kind)), type(space))


def same_space(a: gym.Space, b: gym.Space) -> bool:
    """Whether two supported spaces are interchangeable for batching: kind, shape, dtype, bounds."""
    if _family(a) is not _family(b) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if isinstance(a, gym.spaces.Box):
        return np.array_equal(a.low, b.low, equal_nan=True) and np.array_equal(
            a.high, b.high, equal_nan=True
        )
    if isinstance(a, gym.spaces.Discrete):
        return a.n == b.n and a.start == b.start
    if isinstance(a, gym.spaces.MultiDiscrete):
        return np.array_equal(a.nvec, b.nvec) and np.array_equal(a.start, b.start)
    if isinstance(a, gym.spaces.Dict):
        return a.keys() == b.keys() and all(same_space(a[k], b[k]) for k in a.spaces)
    if isinstance(a, gym.spaces.Tuple):
        return len(a) == len(b) and all(map(same_space, a.spaces, b.spaces))
    return a == b


def same_layout(a: gym.Space, b: gym.Space) -> bool:
    """Whether two supported spaces batch into the same arrays: kinds, shapes and dtypes.

    Bounds and counts may differ, as Gymnasium's `observation_mode="different"` allows.
    """
    if _family(a) is not _family(b):
        return False
    if isinstance(a, gym.spaces.Dict):
        return a.keys() == b.keys() and all(same_layout(a[k], b[k]) for k in a.spaces)
    if isinstance(a, gym.spaces.Tuple):
        return len(a) == len(b) and all(map(same_layout, a.spaces, b.spaces))
    return a.shape == b.shape and a.dtype == b.dtype


def env_name(env: gym.Env) -> str:
    """A readable name for error messages: the registered id when there is one."""
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return f"'{spec.id}'"
    return f"'{type(getattr(env, 'unwrapped', env)).__name__}'"


def _one_array(space: gym.Space) -> bool:
    """Whether `EnvSpec`'s own fields describe actions of `space`, else its `action` tree.

    Those fields' actions are float32 (which a float64 `Box` holds) or int64; a space of
    another dtype is a tree, whose leaves keep their dtypes, as its `contains` checks.
    """
    kind = _kind(space)
    if kind is gym.spaces.Box:
        return space.dtype in (np.float32, np.float64)
    return kind in _ONE_ARRAY and space.dtype == np.int64


def env_spec(
    observation_space: gym.Space,
    action_space: gym.Space,
    env_name: str = "env",
) -> EnvSpec:
    """The spec of an env with these Gymnasium spaces, which it keeps (`EnvSpec.spaces`).

    Unsupported spaces are refused.
    """
    spec = _spec(observation_space, action_space, env_name)
    return dataclasses.replace(spec, spaces=(observation_space, action_space))


def _spec(observation_space: gym.Space, action_space: gym.Space, env_name: str) -> EnvSpec:
    observation = observation_tree(observation_space, env_name)
    if not sum(math.prod(leaf.shape) for leaf in env_spec_lib.leaves(observation)):
        raise UnsupportedSpaceError(
            f"observation space {observation_space} of {env_name} holds no element to observe: "
            f"batchrl needs one or more (an env that observes nothing may show a constant "
            f"Box(0, 1, (1,)))"
        )
    tree = action_tree(action_space, env_name)
    if not _one_array(action_space) or not math.prod(action_space.shape or (1,)):
        width = sum(leaf.size for leaf in env_spec_lib.leaves(tree))
        if not width:
            raise UnsupportedSpaceError(
                f"action space {action_space} of {env_name} holds no array to act in: "
                f"batchrl supports {SUPPORTED_ACTION}"
            )
        return EnvSpec(observation, discrete=False, action_shape=(width,), action=tree)
    if isinstance(action_space, gym.spaces.Discrete):
        return EnvSpec(
            observation,
            discrete=True,
            num_actions=int(action_space.n),
            action_start=(int(action_space.start),),
        )
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in action_space.nvec.flat)
        return EnvSpec(
            observation,
            discrete=True,
            action_shape=tuple(action_space.shape),
            num_actions=sum(nvec),
            action_nvec=nvec,
            action_start=tuple(int(s) for s in action_space.start.flat),
        )
    low, high = _bounds(action_space)
    return EnvSpec(
        observation,
        discrete=False,
        action_shape=tuple(action_space.shape),
        action_low=low,
        action_high=high,
    )


def outside_space(leaf: env_spec_lib.ObsLeaf, array: np.ndarray) -> str | None:
    """What `array` [..., *leaf.shape] holds that its counted leaf's space does not, in words.

    For DISCRETE, MULTI_DISCRETE and BINARY leaves (None for the others, and where all
    fit): "holds 7: this leaf takes whole numbers from 0 to 2". Their values are one-hot
    indices or bits: one outside, encoded, became zeros or a number no space holds.
    """
    if leaf.kind == env_spec_lib.BINARY:  # As Gymnasium's MultiBinary holds, in any dtype.
        bad = (array != 0) & (array != 1)
        return f"holds {array[bad][0].item()!r}: this leaf takes 0 or 1" if bad.any() else None
    if leaf.kind not in (env_spec_lib.DISCRETE, env_spec_lib.MULTI_DISCRETE):
        return None
    values = np.asarray(array).reshape(-1, max(len(leaf.num_values), 1))
    low = np.asarray(leaf.start)
    high = low + np.asarray(leaf.num_values) - 1
    bad = (values < low) | (values > high) | (values != np.round(values))
    if not bad.any():
        return None
    row, column = np.argwhere(bad)[0]
    return (
        f"holds {values[row, column].item()!r}: this leaf takes whole numbers "
        f"from {int(low[column])} to {int(high[column])}"
    )
