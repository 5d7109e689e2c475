"""What the adapters over a batch take: a batchrl BatchEnv itself, not a wrapper of one."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from batchrl.envs.host.batch import BatchEnvBase


def expect_batch(value: Any, taker: str) -> None:
    """Refuses in one line anything but a `BatchEnvBase`; `taker` begins the line.

    The adapters (the bridge, SB3's VecEnv) step a batch through `step_into` and
    `reset_at`, beneath Gymnasium's API: a Gymnasium vector wrapper over a batch would
    be passed by, its work silently undone, so it is refused with what to pass instead.
    """
    if isinstance(value, BatchEnvBase):
        return
    got = type(value).__name__
    if isinstance(value, gym.vector.VectorWrapper) and isinstance(value.unwrapped, BatchEnvBase):
        raise TypeError(
            f"{taker} a batchrl BatchEnv, got {got}, a Gymnasium vector wrapper over "
            f"{value.unwrapped!r}: it steps the BatchEnv beneath any wrapper, so the "
            f"wrapper would do nothing; pass the BatchEnv itself"
        )
    if isinstance(value, list | tuple) and value and all(map(callable, value)):
        # SubprocVecEnv's argument, or make_vec_env(vec_env_cls=...)'s call.
        raise TypeError(
            f"{taker} a batchrl BatchEnv, got a {got} of env constructors: "
            "build the batch of them first, BatchEnv.external(env_fns)"
        )
    raise TypeError(f"{taker} a batchrl BatchEnv, got {got}")
