"""What envs give a batch, checked: Gymnasium's API in each call, spaces that batch together.

An env of the old Gym API (a step of 4 values, a reset of the obs alone) or one whose
info is no dict failed deep inside batchrl's or Gymnasium's code ("not enough values to
unpack", an obs's shape blamed): these say which call broke the API and what it returns,
at no cost to the steps that keep it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from batchrl.envs import spaces
from batchrl.envs.host import errors
from batchrl.envs.host import infos as infos_lib

# What unpacking a step of the old Gym API (obs, reward, done, info) raises.
_FOUR_VALUES = "not enough values to unpack (expected 5, got 4)"


def step_error(error: ValueError, name: str) -> ValueError | None:
    """The old Gym API's step said in one line, where stepping env `name` raised `error`.

    None for an error of the env's own.
    """
    if str(error) != _FOUR_VALUES:
        return None
    return ValueError(
        f"env {name} returned 4 values from step, as the old Gym API did: Gymnasium's step "
        "returns (obs, reward, terminated, truncated, info)"
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
        for one in infos:
            info(one, name, "step")
        raise


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
