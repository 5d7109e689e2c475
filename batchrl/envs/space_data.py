"""Gymnasium spaces as plain JSON data and back: the spaces a run folder keeps.

A run keeps its env's observation and action spaces (`spaces.json`), so that a loaded
policy says what it acts in (`Policy.observation_space`, as Stable-Baselines3's
`model.observation_space`) without building the env. Every space training supports is
written: `Box`, `Discrete`, `MultiDiscrete` and `MultiBinary`, nested in `Dict` and
`Tuple`. A `Box`'s bounds are one number where one holds for every element, else nested
lists; infinite ones are the strings "inf" and "-inf", so the file is standard JSON.
`from_data(to_data(space)) == space` for each of them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

KINDS = "Box, Discrete, MultiDiscrete and MultiBinary, nested in Dict and Tuple"


def to_data(space: gym.Space) -> dict[str, Any]:
    """`space` as JSON data; a ValueError names a space of another kind."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": space.dtype.name,
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        n, start, dtype = int(space.n), int(space.start), space.dtype.name
        return {"type": "Discrete", "n": n, "start": start, "dtype": dtype}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
            "dtype": space.dtype.name,
        }
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": [[k, to_data(s)] for k, s in space.spaces.items()]}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [to_data(s) for s in space.spaces]}
    raise ValueError(f"a run keeps spaces of {KINDS}, not {space}")


def from_data(data: dict[str, Any]) -> gym.Space:
    """The space `to_data` wrote; a ValueError names data of no known space."""
    kind = data.get("type") if isinstance(data, dict) else None
    try:
        if kind == "Box":
            shape, dtype = tuple(data["shape"]), np.dtype(data["dtype"])
            # Floats through float64 ("inf" among them), then the space's dtype: float32
            # bounds come back exactly. Integers in their own: int64's extremes too.
            read = np.float64 if dtype.kind == "f" else dtype
            low, high = (
                np.broadcast_to(np.asarray(data[side], read), shape).astype(dtype)
                for side in ("low", "high")
            )
            return gym.spaces.Box(low, high, shape, dtype)
        if kind == "Discrete":
            return gym.spaces.Discrete(data["n"], start=data["start"], dtype=data["dtype"])
        if kind == "MultiDiscrete":
            return gym.spaces.MultiDiscrete(data["nvec"], data["dtype"], start=data["start"])
        if kind == "MultiBinary":
            return gym.spaces.MultiBinary(data["n"])
        if kind == "Dict":
            # Pairs, not a dict, which Gymnasium sorts: the keys keep the env's order.
            return gym.spaces.Dict([(key, from_data(value)) for key, value in data["spaces"]])
        if kind == "Tuple":
            return gym.spaces.Tuple([from_data(value) for value in data["spaces"]])
    except _DataError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise _DataError(f"space data {data!r} does not make a {kind}: {error!r}") from None
    raise _DataError(f"space data of type {kind!r}, expected one of {KINDS}")


def pair_to_data(spaces: tuple[gym.Space, gym.Space]) -> dict[str, Any]:
    """An env's (observation_space, action_space) as the data a run folder keeps."""
    observation, action = spaces
    return {"observation_space": to_data(observation), "action_space": to_data(action)}


def pair_from_data(data: dict[str, Any]) -> tuple[gym.Space, gym.Space]:
    """The (observation_space, action_space) `pair_to_data` wrote; a ValueError otherwise."""
    if not isinstance(data, dict) or {"observation_space", "action_space"} - set(data):
        raise _DataError(f"spaces' data holds observation_space and action_space, got {data!r:.80}")
    return from_data(data["observation_space"]), from_data(data["action_space"])


class _DataError(ValueError):
    """Space data that makes no space, said once, where it is found."""


def _bound(values: np.ndarray) -> Any:
    """A Box's bounds: one number where all are one, else nested lists; inf as a string."""
    flat = values.ravel()
    one = bool(flat.size) and bool(np.all(flat == flat[0]))
    listed = (flat[:1] if one else values).tolist()
    return _finite_or_named(listed[0] if one else listed)


def _finite_or_named(value: Any) -> Any:
    if isinstance(value, list):
        return [_finite_or_named(item) for item in value]
    if isinstance(value, float) and np.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value
