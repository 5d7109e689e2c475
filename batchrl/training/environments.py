"""Builds the batched env a TrainConfig names: JAX-native, or Gymnasium envs in workers.

`env` is a Gymnasium id ("HalfCheetah-v5"), or a `module:Class` entry point whose class
is built without arguments. Episodes end at the env's own time limit or at
`max_length`, whichever comes first, always as truncation.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym

from batchrl.configs import TrainConfig
from batchrl.envs import BatchEnv, bridge, classic, jax_env


class MakeEnv:
    """A picklable constructor of one Gymnasium env for worker processes."""

    def __init__(self, env: str, max_length: int, render_mode: str | None = None):
        self.env = env
        self.max_length = max_length
        self.render_mode = render_mode

    def __call__(self) -> gym.Env:
        kwargs = {} if self.render_mode is None else {"render_mode": self.render_mode}
        if ":" in self.env:
            module_name, _, class_name = self.env.partition(":")
            env = getattr(importlib.import_module(module_name), class_name)(**kwargs)
            return gym.wrappers.TimeLimit(env, self.max_length)
        registered = gym.spec(self.env).max_episode_steps
        limit = self.max_length if registered is None else min(registered, self.max_length)
        return gym.make(self.env, max_episode_steps=limit, **kwargs)


def check_env_name(config: TrainConfig) -> None:
    """Raises a one-line ValueError when the env cannot be found, before any worker starts."""
    if config.env_kind == "jax":
        classic.make(config.env)  # Names the known JAX-native envs when it fails.
        return
    if ":" in config.env:
        module_name, _, class_name = config.env.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            message = f"cannot import {module_name!r} for env {config.env!r}: {error}"
            raise ValueError(message) from None
        if not hasattr(module, class_name):
            raise ValueError(f"module {module_name!r} has no {class_name!r} for env {config.env!r}")
        return
    try:
        gym.spec(config.env)
    except gym.error.Error as error:
        raise ValueError(f"unknown env {config.env!r}: {error}") from None


def build(config: TrainConfig, local: bool = False) -> tuple[Any, BatchEnv | None]:
    """The batched env for `config` and the BatchEnv behind it (None when JAX-native).

    `local` steps Gymnasium envs in this process instead of workers (for tools that only
    need the env's structure, such as loading a checkpoint).
    """
    check_env_name(config)
    if config.env_kind == "jax":
        registered = classic.make(config.env)
        limit = min(registered.max_length, config.max_length)
        env = jax_env.LimitDuration(registered.env, limit)
        return jax_env.Batched(env, config.num_agents), None
    make = MakeEnv(config.env, config.max_length)
    if local:
        batch_env = BatchEnv([make() for _ in range(config.num_agents)])
    else:
        batch_env = BatchEnv.external(
            make, config.num_agents, envs_per_worker=config.envs_per_worker or None
        )
    return bridge.InGraphBatchEnv(batch_env, seed=config.seed), batch_env
