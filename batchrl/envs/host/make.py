"""Make: a picklable constructor of one Gymnasium env from a name, for worker processes.

A name is a Gymnasium id ("HalfCheetah-v5") or a `module:Class` entry point whose class
is built without arguments. With `max_length`, episodes end at the env's own time limit
or at `max_length`, whichever comes first, always as truncation.
"""

from __future__ import annotations

import importlib

import gymnasium as gym

from batchrl.envs.host import wrappers


def check_name(name: str) -> None:
    """Raises a one-line ValueError when `name` names no env, before any worker starts."""
    if ":" in name:
        module_name, _, class_name = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            message = f"cannot import {module_name!r} for env {name!r}: {error}"
            raise ValueError(message) from None
        if not hasattr(module, class_name):
            raise ValueError(f"module {module_name!r} has no {class_name!r} for env {name!r}")
        return
    try:
        gym.spec(name)
    except gym.error.Error as error:
        raise ValueError(f"unknown env {name!r}: {error}") from None


class Make:
    """Builds the env `name`, with an optional step limit, render mode and action repeat.

    The training path builds every Gymnasium env here, its wrappers chosen by the config
    (`wrappers.apply`: the time limit counts the env's own steps, then actions repeat).
    """

    def __init__(
        self,
        name: str,
        max_length: int | None = None,
        render_mode: str | None = None,
        action_repeat: int = 1,
    ):
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be at least 1, got {action_repeat}")
        self.name = name
        self.max_length = max_length
        self.render_mode = render_mode
        self.action_repeat = action_repeat

    def __call__(self) -> gym.Env:
        return wrappers.apply(self._limited(), action_repeat=self.action_repeat)

    def _limited(self) -> gym.Env:
        kwargs = {} if self.render_mode is None else {"render_mode": self.render_mode}
        if ":" in self.name:
            module_name, _, class_name = self.name.partition(":")
            env = getattr(importlib.import_module(module_name), class_name)(**kwargs)
            if self.max_length is None:
                return env
            return wrappers.LimitDuration(env, self.max_length)
        if self.max_length is None:
            return gym.make(self.name, **kwargs)
        registered = gym.spec(self.name).max_episode_steps
        limit = self.max_length if registered is None else min(registered, self.max_length)
        return gym.make(self.name, max_episode_steps=limit, **kwargs)
