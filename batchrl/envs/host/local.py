"""LocalGroup: envs stepped in the caller's process, a `Group` like a worker's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import actions as actions_lib
from batchrl.envs.host import errors, forwarding, obs_tree, stepper
from batchrl.envs.host.group import Step


class LocalGroup(forwarding.EnvForwarding):
    """Envs stepped in this process, stepped and reset as a worker's envs are."""

    def __init__(
        self, envs: Sequence[gym.Env], observation_mode: Any = "same", first_index: int = 0
    ):
        constructors = [lambda env=env: env for env in envs]
        self._group = stepper.EnvStepper(constructors, observation_mode, first_index)
        self.num_envs, self.first_index = len(envs), first_index
        self.name = self._group.name
        self.observation_space = self._group.observation_space
        self.action_space = self._group.action_space
        self.buffers = self._group.buffers = stepper.Buffers.allocate(
            self.num_envs, self.observation_space, self.action_space
        )
        self.restarts = 0
        self._autoreset = AutoresetMode.DISABLED
        self._given: Any = None  # The step's actions, where the caller gave other dtypes.
        self._reset: tuple | None = None

    def step_async(
        self,
        actions: np.ndarray,
        autoreset: AutoresetMode = AutoresetMode.DISABLED,
        read_infos: bool = False,
    ) -> None:
        obs_tree.put(self.buffers.action, Ellipsis, actions)
        self._given = actions_lib.as_given(actions, self.buffers.action)
        self._autoreset = autoreset

    def step_wait(self) -> Step:
        try:
            infos = self._group.step(self._autoreset, self._given)
        except Exception as error:
            self._note(error, "step")
            raise
        buffers = self.buffers
        return buffers.obs, buffers.reward, buffers.terminated, buffers.truncated, infos

    def reset_async(
        self, indices: Sequence[int], seeds: Sequence[int | None], options: dict | None
    ) -> None:
        self._reset = (list(indices), list(seeds), options)

    def reset_wait(self) -> tuple[Any, list[dict]]:
        indices, seeds, options = self._reset
        try:
            infos = self._group.reset(indices, seeds, options)
        except Exception as error:
            self._note(error, "reset")
            raise
        return obs_tree.take(self.buffers.obs, indices), infos

    def _note(self, error: BaseException, command: str) -> None:
        """Notes which env raised `error` and in what, for a command's one line."""
        index, last = errors.env_index(error), self.first_index + self.num_envs - 1
        envs = f"envs {self.first_index}-{last}" if index is None else ""
        envs = envs or f"env {self.first_index + index}"
        errors.note_here(error, f"env {self.name} ({envs}, in this process)", command)

    def _env(self, index: int) -> gym.Env:
        return self._group.envs[index]

    def ready(self, timeout: float) -> bool:
        return True  # The envs step in `step_wait` and reset in `reset_wait`.

    def close(self) -> None:
        self._group.close()


def local_first(requests: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The (group, part) pairs, groups in this process first: they step while workers do."""
    return sorted(requests, key=lambda request: not isinstance(request[0], LocalGroup))
