"""Cue: a small task with a `Dict` observation whose reward depends on its `Discrete` leaf.

Each step shows a cue (one of `num_cues`) beside a float vector of noise and a count of
the steps left (`MultiDiscrete`); the action that matches the cue earns 1, any other 0.
A policy must read the discrete leaf to do better than chance (1 / num_cues a step),
which makes it a quick check that an agent learns from a structured observation.
`mission=True` adds a `Text` leaf, as MiniGrid's observations have, which batchrl refuses.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class Cue(gym.Env):
    """Match the cue: `length` steps an episode, reward 1 when the action equals the cue."""

    metadata: dict[str, Any] = {"render_modes": []}

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
