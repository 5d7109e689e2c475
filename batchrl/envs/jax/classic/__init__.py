"""JAX-native classic control envs, one per file, matching Gymnasium step for step."""

import dataclasses
from typing import Any

import numpy as np

from batchrl.envs.jax import jax_env
from batchrl.envs.jax.classic import cartpole, pendulum
from batchrl.envs.jax.classic.cartpole import CartPole
from batchrl.envs.jax.classic.pendulum import Pendulum

_ENVS = {"CartPole-v1": CartPole, "Pendulum-v1": Pendulum}


def make(name: str, **kwargs: Any) -> jax_env.TimeLimit:
    """The JAX-native env registered as `name`, with its time limit, as `gym.make` adds.

    `kwargs`: its settings, as `gym.make(name, **kwargs)` takes them (Pendulum's `g`).

    Raises:
        ValueError: `name` is not a JAX-native env, or it has no setting of a name in
            `kwargs`, or one of another type than its default's.
    """
    if name not in _ENVS:
        known = ", ".join(sorted(_ENVS))
        raise ValueError(
            f"unknown JAX-native env {name!r}; known: {known} (gymnax's envs with "
            "backend=gymnax, an env of your own as module:Class)"
        )
    settings = [field.name for field in dataclasses.fields(_ENVS[name])]
    unknown = [key for key in kwargs if key not in settings]
    if unknown:
        takes = f"its settings: {', '.join(settings)}" if settings else "it has no settings"
        raise ValueError(f"env {name!r} takes no keyword {unknown[0]!r}; {takes}")
    defaults = {field.name: field.default for field in dataclasses.fields(_ENVS[name])}
    for key, value in kwargs.items():  # Else a TypeError deep in its compiled step.
        flag = isinstance(defaults[key], bool)  # A JAX or NumPy scalar is a number too.
        kind = np.asarray(value).dtype if np.ndim(value) == 0 else None
        flagged = kind is not None and np.issubdtype(kind, np.bool_)
        if kind is None or flagged != flag or not (flag or np.issubdtype(kind, np.number)):
            what = "true or false" if flag else "a number"
            raise ValueError(
                f"env {name!r} takes {key} as {what} (its default is {defaults[key]!r}), "
                f"got {value!r}"
            )
    return jax_env.TimeLimit(_ENVS[name](**kwargs))


__all__ = ["CartPole", "Pendulum", "cartpole", "make", "pendulum"]
