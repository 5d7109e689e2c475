"""Builds the batched env a TrainConfig names: JAX-native, Gymnasium envs, or a MuJoCo batch.

Gymnasium envs are named as `envs.make` reads them and built with the wrappers the
config asks for; episodes end at the env's own time limit or at `max_length` env steps,
whichever comes first.
"""

from __future__ import annotations

from typing import Any

from batchrl import bridge
from batchrl.configs import TrainConfig
from batchrl.env_spec import EnvSpec
from batchrl.envs import BatchEnv
from batchrl.envs.host import make, spec
from batchrl.envs.jax import classic, gymnax_env, jax_env

# The JAX-native env kinds, by the function that makes one of their envs by name.
JAX_NATIVE = {"jax": classic.make, "gymnax": gymnax_env.make}


def check_env_name(config: TrainConfig) -> None:
    """Raises a one-line ValueError when the env cannot be found, before any worker starts."""
    if config.env_kind in JAX_NATIVE:
        JAX_NATIVE[config.env_kind](config.env)  # Names the known envs when it fails.
        return
    make.check_name(config.env, config.env_kwargs)


def check_env(config: TrainConfig) -> EnvSpec:
    """The spec of the env `config` names, from one env built in this process.

    Unknown names and unsupported spaces are refused with one line before a run folder
    or a worker exists.
    """
    check_env_name(config)
    if config.env_kind in JAX_NATIVE:
        return JAX_NATIVE[config.env_kind](config.env).env_spec
    env = make.Make(config.env, config.max_length, kwargs=config.env_kwargs)()
    try:
        return spec.env_spec(env.observation_space, env.action_space, spec.env_name(env))
    finally:
        env.close()


def build(config: TrainConfig, local: bool = False) -> tuple[Any, BatchEnv | None]:
    """The batched env for `config` and the BatchEnv behind it (None when JAX-native).

    `local` steps Gymnasium envs in this process instead of workers (for tools that only
    need the env's structure, such as loading a checkpoint).
    """
    check_env_name(config)
    if config.env_kind in JAX_NATIVE:
        registered = JAX_NATIVE[config.env_kind](config.env)
        limit = min(registered.max_length, config.max_length)
        env = jax_env.LimitDuration(registered.env, limit)
        return jax_env.Batched(env, config.num_agents), None
    constructor = make.Make(
        config.env,
        config.max_length,
        action_repeat=config.action_repeat,
        kwargs=config.env_kwargs,
    )
    if local:
        batch_env = BatchEnv.from_envs([constructor() for _ in range(config.num_agents)])
    elif config.env_backend == "mujoco":
        batch_env = BatchEnv.mujoco(
            config.env,
            config.num_agents,
            threads=config.env_threads or None,
            max_episode_steps=make.time_limit(config.env, config.max_length),
            **config.env_kwargs,
        )
    elif config.env_backend == "ray":
        batch_env = BatchEnv.ray(
            constructor,
            config.num_agents,
            actors=config.ray_actors or None,
            envs_per_worker=config.envs_per_worker or None,
            restart=config.restart_workers,
        )
    else:
        batch_env = BatchEnv.external(
            constructor,
            config.num_agents,
            envs_per_worker=config.envs_per_worker or None,
            local_envs=config.local_envs,
            restart=config.restart_workers,
        )
    return (
        bridge.InGraphBatchEnv(
            batch_env, seed=config.seed, devices=config.algorithm.learner_devices
        ),
        batch_env,
    )
