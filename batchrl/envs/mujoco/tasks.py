"""The Gymnasium ids `BatchEnv.mujoco` implements, each with its batched task and keywords."""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium as gym
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
from gymnasium.envs.registration import load_env_creator

from batchrl.envs.mujoco import control, locomotion, task

TASKS: dict[str, type[task.Task]] = {
    "HalfCheetah-v5": locomotion.HalfCheetah,
    "Hopper-v5": locomotion.Hopper,
    "Walker2d-v5": locomotion.Walker2d,
    "Ant-v5": locomotion.Ant,
    "Humanoid-v5": locomotion.Humanoid,
    "Reacher-v5": control.Reacher,
    "Pusher-v5": control.Pusher,
    "Swimmer-v5": locomotion.Swimmer,
    "InvertedPendulum-v5": control.InvertedPendulum,
    "InvertedDoublePendulum-v5": control.InvertedDoublePendulum,
}


def task_class(env_id: str) -> type[task.Task]:
    """The task of a Gymnasium id, or a ValueError naming the ids implemented."""
    if not isinstance(env_id, str):  # An EnvSpec, as gym.make takes: unhashable.
        raise TypeError(
            f"BatchEnv.mujoco takes a task's id, as 'Hopper-v5', got {type(env_id).__name__}: "
            "give an EnvSpec's id, its kwargs as keywords"
        )
    if env_id not in TASKS:
        raise ValueError(
            f"BatchEnv.mujoco does not implement {env_id!r}: it implements {', '.join(TASKS)}"
        )
    return TASKS[env_id]


def keywords(env_id: str) -> list[str]:
    """The keywords `gym.make(env_id, ...)` takes: the env's, MujocoEnv's, and make's own.

    Each v5 env passes its other keywords on to MujocoEnv (`render_mode`, `width`, ...).
    """
    parameters = inspect.signature(load_env_creator(gym.spec(env_id).entry_point)).parameters
    own = [p.name for p in parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    set_by_env = (*own, "model_path", "observation_space")
    passed_on = [name for name in inspect.signature(MujocoEnv).parameters if name not in set_by_env]
    return [*own, *passed_on, "max_episode_steps", "disable_env_checker"]


def check_keywords(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """A one-line ValueError naming each keyword `env_id` does not take, and those it takes.

    Gymnasium's own error names MujocoEnv's constructor and not what the env takes.
    """
    known = keywords(env_id)
    unknown = [name for name in env_kwargs if name not in known]
    if unknown:
        raise ValueError(
            f"{env_id} takes no keyword {', '.join(map(repr, unknown))}: it takes "
            f"{', '.join(known)}"
        )
