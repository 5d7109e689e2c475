"""What envs give a batch, checked: Gymnasium's API in each call, spaces that batch together.

An env of the old Gym API (a step of 4 values, a reset of the obs alone) or one whose
info is no dict failed deep inside batchrl's or Gymnasium's code ("not enough values to
unpack", an obs's shape blamed): these say which call broke the API and what it returns,
at no cost to the steps that keep it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np

from batchrl.envs import spaces
from batchrl.envs.host import errors
from batchrl.envs.host import infos as infos_lib

# What unpacking a step of the old Gym API (obs, reward, done, info) raises.
_FOUR_VALUES = "not enough values to unpack (expected 5, got 4)"


def step_error(error: BaseException, results: list, count: int, name: str) -> ValueError | None:
    """The one-line error for a step of no 5 values, where stepping `count` envs raised `error`.

    Raised by an env (fewer `results` than envs): the old Gym API's step, unpacked by a
    Gymnasium wrapper. Raised unpacking the `results`: the first env whose result is not
    5 values, marked as the env that raised it (one env of several may be old). None for
    an error of the env's own.
    """
    if not isinstance(error, ValueError):
        return None
    lengths = [len(r) if isinstance(r, tuple | list) else None for r in results]
    if len(results) < count:
        index, length = (len(results), 4) if str(error) == _FOUR_VALUES else (None, None)
    else:
        index = next((i for i, length in enumerate(lengths) if length != 5), None)
        length = None if index is None else lengths[index]
    if index is None:
        return None
    old = ", as the old Gym API did" if length == 4 else ""
    what = f"{length} values" if length is not None else f"a {type(results[index]).__name__}"
    return errors.marked(
        ValueError(
            f"env {name} returned {what} from step{old}: Gymnasium's step returns (obs, "
            "reward, terminated, truncated, info)"
        ),
        index,
    )


def reset(env: gym.Env, name: str, **kwargs: Any) -> tuple[Any, dict]:
    """`env.reset(**kwargs)`; a one-line ValueError where it returns no (obs, info)."""
    result = env.reset(**kwargs)
    if not (isinstance(result, tuple) and len(result) == 2):  # The old Gym API: obs alone.
        raise ValueError(
            f"env {name} returned a {type(result).__name__} from reset: Gymnasium's reset "
            "returns (obs, info)"
        )
    return result[0], info(result[1], name, "reset")


def info(value: Any, name: str, call: str) -> dict:
    """`value`, env `name`'s info from `call`; a one-line TypeError where it is no dict."""
    if not isinstance(value, dict):
        raise TypeError(
            f"env {name} returned info {value!r:.40} from {call}: Gymnasium's info is a dict"
        )
    return value


def owned_infos(infos: list, name: str) -> list[dict]:
    """Each of env `name`'s step infos as `infos.owned` gives it; a TypeError for no dict."""
    try:
        return [infos_lib.owned(one) for one in infos]
    except AttributeError:  # An info with no `values`: said if it is not a dict.
        for index, one in enumerate(infos):
            try:
                info(one, name, "step")
            except TypeError as error:
                raise errors.marked(error, index) from None
        raise


def write_scalars(buffer: Any, values: list, field: str, name: str) -> None:
    """Writes each env's `field` (its reward, say); a ValueError names one not a number.

    Marked with the place of the env that returned it (`errors.mark_env`).
    """
    try:
        buffer[:] = values
    except ValueError:  # numpy's names neither the env nor the field.
        shaped = [index for index, value in enumerate(values) if np.ndim(value)]
        if not shaped:
            raise
        one = values[shaped[0]]
        what = "number" if field == "reward" else "bool"
        said = f"env {name} returned a {field} of shape {np.shape(one)} ({type(one).__name__}), "
        raise errors.marked(ValueError(f"{said}but a {field} is one {what}"), shaped[0]) from None
    # A None was written as NaN, unsaid; written, the values are numbers `in` compares.
    if field == "reward" and None in values:
        said = f"env {name} returned a reward of None, but a reward is one number"
        raise errors.marked(ValueError(said), values.index(None))


def same_spaces(
    name_a: str, env_a: Any, name_b: str, env_b: Any, observation_mode: Any = "same"
) -> None:
    """Raises a `SpaceMismatchError` naming both envs when their spaces do not batch together.

    Action spaces must be equal; observation spaces too with `observation_mode` "same",
    else they need only the same kinds, shapes and dtypes (bounds and counts may differ).
    """
    space_a, space_b = env_a.action_space, env_b.action_space
    if not spaces.same_space(space_a, space_b):
        raise errors.SpaceMismatchError(
            f"envs in one batch must share spaces, but action_space of {name_a} is {space_a} "
            f"and of {name_b} is {space_b}"
        )
    space_a, space_b = env_a.observation_space, env_b.observation_space
    differ = "same" if observation_mode == "same" else "layout"
    if differ == "same" and not spaces.same_space(space_a, space_b):
        raise errors.SpaceMismatchError(
            f"envs in one batch must share spaces, but observation_space of {name_a} is "
            f"{space_a} and of {name_b} is {space_b}: the sub-environments observation spaces "
            f"are not equivalent. If this is intentional, use `observation_mode='different'` "
            f"instead."
        )
    if differ == "layout" and not spaces.same_layout(space_a, space_b):
        raise errors.SpaceMismatchError(
            f"envs in one batch must share their observations' kinds, shapes and dtypes, but "
            f"observation_space of {name_a} is {space_a} and of {name_b} is {space_b}"
        )


def same_layout_as_given(single: gym.Space, name: str, space: gym.Space) -> None:
    """A `SpaceMismatchError` where `observation_mode`'s single space does not fit env `name`'s."""
    if not spaces.same_layout(single, space):
        raise errors.SpaceMismatchError(
            f"the single observation space of observation_mode, {single}, does not share its "
            f"kinds, shapes and dtypes with {name}'s, {space}"
        )


def refuse_observation(
    name: str, where: Any, observations: list, tree: Any, dtype: Any, path: str, what: str
) -> NoReturn:
    """Raises the one-line ValueError for the first observation whose `what` does not fit.

    `what`: its "shape", its "dtype" (floats into a uint8 image: `dtype`, the buffer's,
    does not take it) or its "values" (a count no space holds) against leaf `tree`. The
    observations are env `name`'s, written at `where` (an env's place, or a slice of them
    all); the error is marked with the place of the env that returned it
    (`errors.mark_env`). Worked out only here, off the path of steps that fit.
    """
    at, there = ("", "") if path == "obs" else (f" at {path}", " there")
    bad = {
        "shape": lambda o: np.shape(o) != tree.shape,
        "dtype": lambda o: not np.can_cast(np.asarray(o).dtype, dtype, "same_kind"),
        "values": lambda o: spaces.outside_space(tree, np.asarray(o)) is not None,
    }[what]
    index = next((i for i, obs in enumerate(observations) if bad(obs)), 0)
    one = observations[index]
    said = f"env {name} returned an observation "
    if what == "shape":
        said += f"of shape {np.shape(one)}{at}, but its observation_space has shape "
        said += f"{tree.shape}{there}"
    elif what == "dtype":
        said += (
            f"of dtype {np.asarray(one).dtype}{at}, where its observation_space holds {dtype}: "
            "cast it in the env (written here, its values would be cut, as SyncVectorEnv "
            "refuses to)"
        )
    else:
        said += f"that {spaces.outside_space(tree, np.asarray(one))}{at}, as its "
        said += "observation_space says"
    raise errors.marked(ValueError(said), where if isinstance(where, int) else index)


def holds(obs: Any, key: Any, tree: Any) -> bool:
    """Whether observation `obs` has the part `key` of the dict or tuple leaf `tree`."""
    if isinstance(tree, dict):
        return isinstance(obs, Mapping) and key in obs
    return isinstance(obs, tuple | list) and key < len(obs)


def part(obs: Any, key: Any, tree: Any, path: str, name: str) -> Any:
    """`obs[key]`, or a ValueError naming `path` where env `name`'s observation lacks it."""
    if holds(obs, key, tree):
        return obs[key]
    if isinstance(obs, Mapping):
        shown = f"a dict of keys {sorted(map(str, obs))}"
    elif isinstance(obs, tuple | list):
        shown = f"a {type(obs).__name__} of {len(obs)}"
    else:
        shown = f"of type {type(obs).__name__}"  # Its value may be an image: not shown.
    raise ValueError(
        f"env {name} returned an observation without {path} ({shown}), but its "
        "observation_space has it"
    )
