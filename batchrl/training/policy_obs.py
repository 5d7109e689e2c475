"""What `Policy.act` reads: one env's observation or a batch, checked against the spec.

A tree like the env's observation space, each leaf [*leaf.shape] for one env or
[N, *leaf.shape] for N, told apart by the leaves' ranks. Values no space holds (NaN,
infinities, a float frame for a uint8 leaf, 256 for a uint8) and trees that are not the
spec's are one-line ValueErrors naming the leaf, before any compiled code runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from batchrl import env_spec as env_spec_lib
from batchrl.envs import spaces


def as_batch(observation: Any, obs: Any) -> tuple[Any, bool]:
    """`obs` as a batch of leaves [N, *leaf.shape] in compiled dtypes, and whether it was one env.

    Raises:
        ValueError: naming the first leaf whose shape is neither one env's nor a batch's,
            a leaf that is no array of numbers, or a tree that is not the spec's.
    """
    arrays = _arrays(observation, obs)
    pairs = zip(env_spec_lib.leaf_paths(observation), env_spec_lib.leaves(arrays), strict=True)
    single, size = None, None
    for (path, leaf), array in pairs:
        if array.shape == leaf.shape and single is not False:
            single, count = True, 1
        elif array.ndim and array.shape[1:] == leaf.shape and single is not True:
            single, count = False, array.shape[0]
        elif single is not None and leaf.shape in (array.shape, array.shape[1:]):
            made = f"a batch of {size}" if single is False else "one env's"
            raise ValueError(
                f"{path} has shape {array.shape}, but the leaves before it make {made}: "
                f"every leaf is one env's ({leaf.shape}) or every leaf a batch's"
            )
        else:
            raise ValueError(
                f"{path} has shape {array.shape}: expected {leaf.shape} for one env, or "
                f"{_batch_shape(leaf)} for a batch, as every leaf"
            )
        if size not in (None, count):
            raise ValueError(f"{path} holds {count} envs, other leaves {size}")
        size = count
        _check_values(path, leaf, array)
    if size == 0:
        raise ValueError("a batch of observations holds at least one, got 0")

    def batched(leaf: env_spec_lib.ObsLeaf, array: np.ndarray) -> np.ndarray:
        dtype = jax.dtypes.canonicalize_dtype(np.dtype(leaf.dtype))
        if array.dtype.kind == "f" and dtype.kind == "f" and dtype.itemsize < array.itemsize:
            # 1e39, finite in float64, became inf in float32: nan actions, one cast warning.
            big = np.abs(array) > np.finfo(dtype).max
            if big.any():
                raise ValueError(
                    f"obs holds {array[big][0].item()!r}, beyond {dtype}'s range, in which the "
                    "policy computes"
                )
        return (array[None] if single else array).astype(dtype)

    return env_spec_lib.map_tree(batched, observation, arrays), bool(single)


def _arrays(spec: Any, obs: Any, path: str = "obs") -> Any:
    """`obs` as a tree like `spec` of NumPy arrays (extra keys dropped).

    Raises:
        ValueError: one line naming where `obs` is not a tree like `spec`, or a leaf that
            is no array of numbers (a dict, a string, `env.reset()`'s (obs, info)).
    """
    if isinstance(spec, dict):
        if not isinstance(obs, Mapping):
            got = f"{_described(obs)}{_hint(obs)}"
            raise ValueError(f"{path} is a dict of keys {list(spec)}, got {got}")
        missing = [key for key in spec if key not in obs]
        if missing:
            raise ValueError(f"{path} lacks key {missing[0]!r}: the space's keys are {list(spec)}")
        return {
            key: _arrays(child, obs[key], path + env_spec_lib.key_path(key))
            for key, child in spec.items()
        }
    if isinstance(spec, tuple | list):
        if isinstance(obs, list) and obs and all(isinstance(item, tuple) for item in obs):
            # Read as one observation, a list of N observations became a batch of N of its
            # first item's leaves, envs and items crossed.
            raise ValueError(
                f"{path} is {_described(obs)} of tuples: one observation is one tuple, a "
                f"batch one tuple of [N, ...] arrays, as a vector env gives them"
            )
        if not isinstance(obs, tuple | list) or len(obs) != len(spec):
            got = f"{_described(obs)}{_hint(obs)}"
            raise ValueError(f"{path} is a tuple of {len(spec)} items, got {got}")
        return tuple(_arrays(child, obs[i], f"{path}[{i}]") for i, child in enumerate(spec))
    try:
        array = np.asarray(obs)
    except ValueError:  # NumPy's "inhomogeneous shape": items of different shapes.
        raise ValueError(
            f"{path} is {_described(obs)} that make no array: expected {_leaf_said(spec)}"
            f"{_hint(obs)}"
        ) from None
    if array.dtype.kind not in "biuf":
        what = f"an array of {array.dtype}" if isinstance(obs, np.ndarray) else _described(obs)
        raise ValueError(f"{path} is {what}: expected {_leaf_said(spec)}{_hint(obs)}")
    return array


def _leaf_said(leaf: env_spec_lib.ObsLeaf) -> str:
    return f"{leaf.dtype} {leaf.shape} for one env, or {_batch_shape(leaf)} for a batch"


def _batch_shape(leaf: env_spec_lib.ObsLeaf) -> str:
    """A batch's shape of `leaf`'s, in words: `[N, *(3,)]`, or `[N]` for a scalar leaf."""
    return f"[N, *{leaf.shape}]" if leaf.shape else "[N]"


def _described(obs: Any) -> str:
    """What `obs` is, in a few words: `a dict`, `a tuple of 2 items`."""
    if isinstance(obs, tuple | list):
        return f"a {type(obs).__name__} of {len(obs)} items"
    return "None" if obs is None else f"a {type(obs).__name__}"


def _hint(obs: Any) -> str:
    """What to give instead: a batch of trees as one tree, or `env.reset()`'s obs alone."""
    if isinstance(obs, list) and obs and all(isinstance(item, Mapping) for item in obs):
        return "; a batch is one dict of [N, ...] arrays, as a vector env gives them"
    if isinstance(obs, tuple | list) and obs and isinstance(obs[-1], Mapping):
        return "; env.reset() returns (obs, info) and env.step() five values: give their obs"
    return ""


def _check_values(path: str, leaf: env_spec_lib.ObsLeaf, array: np.ndarray) -> None:
    """A one-line ValueError for a value its leaf's space or integer dtype does not hold.

    Cast unchecked, a frame scaled to [0, 1] became a black uint8 frame, and 256 a 0. A
    NaN or an infinity, on which training stops, gave NaN actions.
    """
    if not array.size:
        return
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = array[~np.isfinite(array)][0].item()
        raise ValueError(
            f"{path} holds {bad}: the policy acts on finite observations only, and its action "
            "would be nan"
        )
    outside = spaces.outside_space(leaf, array)
    if outside is not None:
        raise ValueError(f"{path} {outside}")
    dtype = np.dtype(leaf.dtype)
    if leaf.kind in spaces.COUNTED or dtype.kind not in "iu" or array.dtype.kind not in "iuf":
        return
    info = np.iinfo(dtype)
    # The policy's dtype, as compiled code takes it.
    allowed = f"this leaf takes {dtype} values, {info.min} to {info.max}"
    if array.dtype.kind == "f":  # As Gymnasium's Box.contains refuses it.
        if leaf.low is not None and leaf.high is not None:  # Its Box's, not its dtype's.
            allowed = f"this leaf takes {dtype} values, {leaf.low:g} to {leaf.high:g}"
        raise ValueError(f"{path} is {array.dtype}: {allowed} (not scaled)")
    bad = (array < info.min) | (array > info.max)
    if np.any(bad):
        raise ValueError(f"{path} holds {array[bad][0].item()!r}: {allowed}")


def carry(state: Any, shape: tuple[int, ...], single: bool) -> np.ndarray:
    """A recurrent `predict`'s `state` as its carry [N, ...] of `shape`, checked.

    One env's carry (`single`) gains its batch axis. A carry of no numbers, of NaN or
    infinities (or past float32's range) is a one-line ValueError: acted on, it drew NaN
    actions, and NaN carries after them.
    """
    try:
        given = np.asarray(state, np.float64)
    except (TypeError, ValueError):
        what = f"of dtype {state.dtype}" if hasattr(state, "dtype") else f"a {type(state).__name__}"
        said = f"state is {what}: a carry is an array of floats, as predict returns"
        raise ValueError(said) from None
    given = given[None] if single and given.ndim == len(shape) - 1 else given
    if given.shape != shape:
        want = shape[1:] if single else shape
        raise ValueError(f"state has shape {np.shape(state)}: this policy's is {want}")
    bad = given[~(np.abs(given) <= np.finfo(np.float32).max)]
    if bad.size:
        raise ValueError(f"state holds {bad[0].item()!r}: a carry holds finite float32 numbers")
    return given.astype(np.float32)


def flags(values: Any, what: str) -> np.ndarray:
    """`values` as bools: `reset`'s mask, `predict`'s `episode_start`; 0 and 1 count as ones.

    Anything else is a one-line ValueError: 2, NaN and "no" were read as True.
    """
    raw = np.asarray(values)
    flat = raw.ravel()
    other = flat[~np.isin(flat, (0, 1))] if raw.dtype != bool else flat[:0]
    if other.size or raw.dtype.kind not in "biuf":
        shown = (other if other.size else flat)[0] if flat.size else values
        shown = shown.item() if isinstance(shown, np.generic) else shown
        raise ValueError(f"{what} holds {shown!r}: True/False or 1/0 only")
    return raw.astype(bool)
