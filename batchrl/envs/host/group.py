"""Group: what a `BatchEnv` asks of each group of its envs, wherever they run.

A batch is a list of groups: envs in this process (`local.LocalGroup`), in a worker
process (`process.ProcessGroup`), on a Ray actor (`ray.ray_group.RayGroup`), or
simulations of one MuJoCo batch (`mujoco.mujoco_group.MujocoGroup`), or the games of
one ale-py vector env (`atari.atari_group.AtariGroup`). `BatchEnv` steps every group
with `step_async` first and collects with `step_wait` after, so groups that run
elsewhere step at the same time; it knows them only through this protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import stepper

# obs (a tree of arrays, as `obs_tree` batches the observation space), reward, terminated,
# truncated (views into the group's buffers), and the infos: one dict per env, an
# `infos.Owed` fetched when first read, or an `infos.encode` chunk.
Step = tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]


class Group(Protocol):
    """`num_envs` envs with shared spaces, addressed by their index in the group."""

    num_envs: int
    name: str  # Names the envs in errors.
    observation_space: gym.Space
    action_space: gym.Space
    buffers: stepper.Buffers  # `obs` holds each env's latest observation, a tree of arrays.
    restarts: int  # Envs' hosts replaced after a crash or hang.

    def step_async(
        self, actions: np.ndarray, autoreset: AutoresetMode, read_infos: bool = False
    ) -> None:
        """Starts a step of every env with its row of `actions`, autoresetting as asked.

        `read_infos`: the caller reads the step's infos at once (a worker sends them
        with its answer instead of keeping them until asked).
        """

    def step_wait(self) -> Step:
        """The step's results, once every env has stepped."""

    def ready(self, timeout: float) -> bool:
        """Whether the step or reset in flight has its answer, waiting up to `timeout` s.

        Reads nothing: the wait that follows collects it. True at once where the envs step
        in the wait itself (in this process, the MuJoCo batch, ALE) or nothing is in flight.
        """

    def reset_async(
        self, indices: Sequence[int], seeds: Sequence[int | None], options: dict | None
    ) -> None:
        """Starts resetting the envs at `indices`, each with its seed (None: not reseeded)."""

    def reset_wait(self) -> tuple[Any, list[dict]]:
        """The reset envs' observations (a tree of [len(indices), ...]) and infos, in order."""

    def attribute(self, index: int, name: str) -> Any:
        """Env `index`'s attribute `name`, found through its wrappers."""

    def call(self, index: int, name: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Calls env `index`'s method `name`; the value itself when it is not callable."""

    def set_attr(self, index: int, name: str, value: Any) -> None:
        """Sets env `index`'s attribute `name`, where its wrappers hold it."""

    def is_wrapped(self, index: int, wrapper_class: type) -> bool:
        """Whether env `index` is wrapped by a `wrapper_class` at any depth."""

    def close(self) -> None:
        """Closes every env and ends whatever hosts them; safe to call twice."""
