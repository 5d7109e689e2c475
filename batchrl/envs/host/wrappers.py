"""The host-side Gymnasium wrappers of training runs, composed in one order by `apply`.

Gymnasium's `TimeLimit` ends an entry-point env's episodes at `max_length` with
truncated=True (never terminated), and `ActionRepeat` holds each action for several env
steps; `make.Make` applies them when it builds a training run's envs.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym


class ActionRepeat(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Repeats each action `amount` times and sums the rewards, to act at a coarser time scale.

    Repeating stops early when the episode ends; the last observation, terminated,
    truncated and info of the inner steps are returned.
    """

    def __init__(self, env: gym.Env, amount: int):
        gym.utils.RecordConstructorArgs.__init__(self, amount=amount)
        gym.Wrapper.__init__(self, env)
        if amount < 1:
            raise ValueError(f"amount must be at least 1, got {amount}")
        self.amount = amount

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Steps the env up to `amount` times with `action`, summing the rewards."""
        total_reward = 0.0
        for _ in range(self.amount):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total_reward += reward
            if terminated or truncated:
                break
        return obs, total_reward, terminated, truncated, info


def apply(env: gym.Env, *, duration: int | None = None, action_repeat: int = 1) -> gym.Env:
    """Wraps `env` in TimeLimit, then ActionRepeat, each only when asked for.

    So `duration` counts the env's own steps, before repeating.
    """
    if duration is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=duration)
    if action_repeat != 1:
        env = ActionRepeat(env, action_repeat)
    return env
