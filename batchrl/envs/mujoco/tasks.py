"""The Gymnasium ids `BatchEnv.mujoco` implements, each with its batched task."""

from __future__ import annotations

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
    if env_id not in TASKS:
        raise ValueError(
            f"BatchEnv.mujoco does not implement {env_id!r}: it implements {', '.join(TASKS)}"
        )
    return TASKS[env_id]
