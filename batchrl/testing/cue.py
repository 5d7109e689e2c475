"""Cue: small tasks whose reward depends on one leaf of a `Dict` observation, for learning tests.

Each step shows a cue (one of `num_cues`); the action that matches the cue earns 1, any
other 0. A policy must read the cue to do better than chance (1 / num_cues a step),
which makes these quick checks that an agent learns from a structured observation.
`Cue` shows it as a `Discrete` leaf beside a float vector of noise and a count of the
steps left (`MultiDiscrete`); `mission=True` adds a `Text` leaf, as MiniGrid's
observations have, which batchrl refuses. `FrameCue` shows it by a few pixels of a
uint8 frame, channels first, beside the noise: the Gymnasium twin of the JAX-native
`testing.grid_cue.GridCue`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class _CueTask(gym.Env):
    """The episode both tasks share: a new cue each step, 1 for naming it, `length` steps.

    Each observation (`_obs`) draws the cue; the episode ends after `length` steps.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    length: int
    _cue: int
    _steps: int

    def _obs(self) -> dict[str, Any]:
        raise NotImplementedError

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, Any], dict]:
        super().reset(seed=seed)
        self._steps = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict]:
        reward = float(int(action) == self._cue)
        self._steps += 1
        return self._obs(), reward, self._steps >= self.length, False, {}


class Cue(_CueTask):
    """Match the cue: `length` steps an episode, reward 1 when the action equals the cue."""

    def __init__(self, num_cues: int = 4, length: int = 10, mission: bool = False):
        self.num_cues = num_cues
        self.length = length
        self.mission = mission
        spaces = {
            "cue": gym.spaces.Discrete(num_cues),
            "noise": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "left": gym.spaces.MultiDiscrete([length + 1]),
        }
        if mission:
            spaces["mission"] = gym.spaces.Text(20)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Discrete(num_cues)
        self._cue = 0
        self._steps = 0

    def _obs(self) -> dict[str, Any]:
        self._cue = int(self.np_random.integers(self.num_cues))
        obs = {
            "cue": np.int64(self._cue),
            "noise": self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32),
            "left": np.array([self.length - self._steps]),
        }
        if self.mission:
            obs["mission"] = "match the cue"
        return obs


class FrameCue(_CueTask):
    """Name the corner lit in the frame's channel 0: reward 1 a step, `length` steps an episode.

    The frame is uint8 [2, size, size]: channel 0 lights a 2 x 2 patch in the cue's
    corner (top left, top right, bottom left, bottom right), channel 1 one in a corner
    drawn at random, which tells nothing.
    """

    def __init__(self, num_cues: int = 4, size: int = 6, length: int = 10):
        if not 2 <= num_cues <= 4 or size < 4:
            raise ValueError(f"num_cues must be 2 to 4 and size 4 or more, got {num_cues}, {size}")
        self.num_cues = num_cues
        self.size = size
        self.length = length
        self.observation_space = gym.spaces.Dict(
            {
                "frame": gym.spaces.Box(0, 255, (2, size, size), np.uint8),
                "noise": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            }
        )
        self.action_space = gym.spaces.Discrete(num_cues)
        self._cue = 0
        self._steps = 0

    def _corner(self, index: int) -> np.ndarray:
        top, left = (index // 2) * (self.size - 2), (index % 2) * (self.size - 2)
        lit = np.zeros((self.size, self.size), np.uint8)
        lit[top : top + 2, left : left + 2] = 255
        return lit

    def _obs(self) -> dict[str, Any]:
        self._cue = int(self.np_random.integers(self.num_cues))
        other = int(self.np_random.integers(4))
        return {
            "frame": np.stack([self._corner(self._cue), self._corner(other)]),
            "noise": self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32),
        }
