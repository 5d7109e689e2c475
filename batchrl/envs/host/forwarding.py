"""A group's attribute surface, forwarded to the Gymnasium env that holds each env, kept once.

`Group`'s `attribute`, `call`, `set_attr` and `is_wrapped` address an env by its
index in the group. A group whose envs are Gymnasium env objects in this process
(`stepper.EnvStepper`, `local.LocalGroup`, `mujoco.mujoco_group.MujocoGroup`) answers them from the
env `_env(index)` returns, through its wrappers, as Gymnasium's vector envs do; a group
hosted elsewhere (`remote.RemoteGroup`) sends them by these names (`COMMANDS`) to its
host: a worker answers from its `EnvStepper`, a Ray actor from its own batch.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

COMMANDS = ("attribute", "call", "set_attr", "is_wrapped")


class EnvForwarding:
    """`Group`'s attribute surface over the Gymnasium env that `_env(index)` returns."""

    def _env(self, index: int) -> gym.Env:
        """The Gymnasium env that holds env `index` of the group."""
        raise NotImplementedError

    def attribute(self, index: int, name: str) -> Any:
        """The attribute `name` of env `index`, found through its wrappers."""
        return self._env(index).get_wrapper_attr(name)

    def call(self, index: int, name: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Calls method `name` of env `index`; the value itself when it is not callable.

        Found as `attribute` finds it, so that a group's own answers hold for both.
        """
        function = self.attribute(index, name)
        return function(*args, **(kwargs or {})) if callable(function) else function

    def set_attr(self, index: int, name: str, value: Any) -> None:
        """Sets the attribute `name` of env `index` where its wrappers hold it."""
        self._env(index).set_wrapper_attr(name, value)

    def is_wrapped(self, index: int, wrapper_class: type) -> bool:
        """Whether env `index` is wrapped by a `wrapper_class` at any depth."""
        return wrapped_by(self._env(index), wrapper_class)


def wrapped_by(env: gym.Env, wrapper_class: type) -> bool:
    """Whether `env` is wrapped by a `wrapper_class` at any depth."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False
