"""Autoreset: which envs of a group a step resets, as Gymnasium's vector envs do, kept once.

An env whose episode ended is reset as the step's `AutoresetMode` says: NEXT_STEP, in
place of its next step, which reports the reset's obs with zero reward, neither
terminated nor truncated, and the reset's info; SAME_STEP, at once, the step reporting
the reset's obs and an info with the final obs and info beside the reset's (`final`);
DISABLED, never (the caller resets). Every group that steps envs itself (`stepper.EnvStepper`,
`mujoco.mujoco_group.MujocoGroup`) keeps one `Autoreset` and asks it which envs to reset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

_NONE = np.zeros(0, np.int64)


class Autoreset:
    """The envs of a group that ended at their last step, for NEXT_STEP to reset."""

    def __init__(self, num_envs: int):
        self._ended = np.zeros(num_envs, bool)

    def due(self, mode: AutoresetMode) -> np.ndarray | None:
        """[k] bool: the envs to reset in place of this step (NEXT_STEP); None when none is."""
        if mode is AutoresetMode.NEXT_STEP and self._ended.any():
            return self._ended.copy()
        return None

    def stepped(self, mode: AutoresetMode, terminated: Any, truncated: Any) -> np.ndarray:
        """Notes the envs this step ended ([k] each); returns those to reset at once (SAME_STEP).

        An env reset in place of this step reports neither, so it is not due again.
        """
        if mode is AutoresetMode.NEXT_STEP:
            np.logical_or(terminated, truncated, out=self._ended)
            return _NONE
        self._ended[:] = False
        if mode is AutoresetMode.SAME_STEP:
            return np.flatnonzero(np.logical_or(terminated, truncated))
        return _NONE

    def reset(self, indices: Sequence[int] | np.ndarray) -> None:
        """The envs at `indices` were reset by the caller: none of them is due."""
        self._ended[indices] = False


def final(final_obs: Any, final_info: dict, reset_info: dict) -> dict:
    """The info of an env SAME_STEP reset: its final obs and info, beside the reset's info."""
    return {"final_obs": final_obs, "final_info": final_info, **reset_info}
