"""Host-side Gymnasium wrappers that each change one thing, composed in one order by `apply`.

Each wrapper follows Gymnasium 1.x: `reset(seed=, options=) -> (obs, info)` and
`step(action) -> (obs, reward, terminated, truncated, info)`. Where Gymnasium already
has the exact behaviour (`ClipAction`, `TimeLimit`, next-step `Autoreset`) we use it
rather than a copy. Wrappers expose what they offer explicitly; nothing is forwarded
through `__getattr__` beyond what `gymnasium.Wrapper` itself provides.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from batchrl.envs.host import spec

AUTORESET_MODES = ("same_step", "next_step")


class RangeNormalize(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Maps bounded Box observations and actions to [-1, 1], so one scale fits all tasks.

    Observations are mapped from [low, high] to [-1, 1] (values outside the bounds map
    outside [-1, 1]; nothing is clipped). The agent's action in [-1, 1] is mapped back to
    the env's [low, high]. Discrete actions have no range and pass through unchanged.

    Raises:
        ValueError: A space to normalise has an infinite bound.
        spec.UnsupportedSpaceError: The space is not one batchrl supports.
    """

    def __init__(self, env: gym.Env, observations: bool = True, actions: bool = True):
        gym.utils.RecordConstructorArgs.__init__(self, observations=observations, actions=actions)
        gym.Wrapper.__init__(self, env)
        name = spec.env_name(env)
        self._env_obs_space: gym.spaces.Box | None = None
        self._env_action_space: gym.spaces.Box | None = None
        if observations:
            space = spec.check_observation_space(env.observation_space, name)
            _check_finite(space, "observation", "observations", name)
            self._env_obs_space = space
            self.observation_space = _unit_box(space)
        if actions:
            space = spec.check_action_space(env.action_space, name)
            if isinstance(space, gym.spaces.Box):
                _check_finite(space, "action", "actions", name)
                self._env_action_space = space
                self.action_space = _unit_box(space)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets the env and returns its normalised first observation."""
        obs, info = self.env.reset(seed=seed, options=options)
        return self._normalize_obs(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Steps the env with `action` mapped from [-1, 1] to the env's action range."""
        obs, reward, terminated, truncated, info = self.env.step(self._denormalize_action(action))
        return self._normalize_obs(obs), reward, terminated, truncated, info

    def _normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        if self._env_obs_space is None:
            return obs
        low, high = self._env_obs_space.low, self._env_obs_space.high
        normalized = 2.0 * (np.asarray(obs, np.float64) - low) / (high - low) - 1.0
        return normalized.astype(self.observation_space.dtype)

    def _denormalize_action(self, action: Any) -> Any:
        if self._env_action_space is None:
            return action
        low, high = self._env_action_space.low, self._env_action_space.high
        mapped = low + (np.asarray(action, np.float64) + 1.0) / 2.0 * (high - low)
        return mapped.astype(self._env_action_space.dtype)


# Gymnasium's ClipAction clips a Box action to the action space's bounds, exactly what
# batchrl needs, so we re-export it under the shared wrapper vocabulary.
ClipAction = gym.wrappers.ClipAction


def LimitDuration(env: gym.Env, duration: int) -> gym.wrappers.TimeLimit:  # noqa: N802
    """Ends episodes after `duration` steps with truncated=True (never terminated).

    A thin name for Gymnasium's `TimeLimit(env, max_episode_steps=duration)`, which has
    exactly these semantics; named like a class because it is used as a wrapper.
    """
    return gym.wrappers.TimeLimit(env, max_episode_steps=duration)


class ConvertTo32Bit(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Casts float64 observations and all rewards to float32, the precision training uses.

    Observations of other dtypes (float32, integers) are left alone.
    """

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        space = spec.check_observation_space(env.observation_space, spec.env_name(env))
        self._convert = space.dtype == np.float64
        if self._convert:
            self.observation_space = gym.spaces.Box(
                space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32
            )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets the env and returns its first observation in 32 bit."""
        obs, info = self.env.reset(seed=seed, options=options)
        return self._convert_obs(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, np.float32, bool, bool, dict[str, Any]]:
        """Steps the env and returns its observation and reward in 32 bit."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._convert_obs(obs), np.float32(reward), terminated, truncated, info

    def _convert_obs(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, np.float32) if self._convert else obs


class FrameHistory(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Observes the observations at chosen past offsets, so a policy without memory sees motion.

    `past_indices` are offsets into the past: 0 is the current observation, 1 the previous
    one, and so on. At the start of an episode the missing past is padded with the first
    observation. Observations of shape [*S] become [len(past_indices), *S], or with
    `flatten=True` are concatenated along the first axis to [len(past_indices) * S[0], *S[1:]].
    """

    def __init__(self, env: gym.Env, past_indices: Sequence[int], flatten: bool):
        gym.utils.RecordConstructorArgs.__init__(self, past_indices=past_indices, flatten=flatten)
        gym.ObservationWrapper.__init__(self, env)
        space = spec.check_observation_space(env.observation_space, spec.env_name(env))
        past_indices = [int(index) for index in past_indices]
        if not past_indices or min(past_indices) < 0:
            raise ValueError(
                f"past_indices must be a non-empty sequence of offsets >= 0, got {past_indices}"
            )
        if flatten and not space.shape:
            raise ValueError("flatten=True needs observations with at least one axis")
        self._past_indices = past_indices
        self._flatten = flatten
        self._history: collections.deque[np.ndarray] = collections.deque(
            maxlen=max(past_indices) + 1
        )
        bounds = [self._combine([bound] * len(past_indices)) for bound in (space.low, space.high)]
        self.observation_space = gym.spaces.Box(*bounds, dtype=space.dtype)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets the env and pads the history with its first observation."""
        obs, info = self.env.reset(seed=seed, options=options)
        self._history.clear()
        self._history.extend([np.array(obs)] * self._history.maxlen)
        return self._combine([self._history[-1 - index] for index in self._past_indices]), info

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """Adds a step's observation to the history and returns the chosen past ones."""
        self._history.append(np.array(observation))
        return self._combine([self._history[-1 - index] for index in self._past_indices])

    def _combine(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays, 0) if self._flatten else np.stack(arrays, 0)


class FrameDelta(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Observes the change since the previous observation, which is zero right after reset.

    Bounds become (low - high, high - low). Float observations keep their dtype; other
    dtypes become float32 so that negative differences are representable.
    """

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = spec.check_observation_space(env.observation_space, spec.env_name(env))
        dtype = space.dtype if np.issubdtype(space.dtype, np.floating) else np.dtype(np.float32)
        low, high = space.low.astype(np.float64), space.high.astype(np.float64)
        with np.errstate(over="ignore"):
            self.observation_space = gym.spaces.Box(
                (low - high).astype(dtype), (high - low).astype(dtype), dtype=dtype
            )
        self._previous: np.ndarray | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets the env and returns a zero difference."""
        obs, info = self.env.reset(seed=seed, options=options)
        self._previous = np.asarray(obs, self.observation_space.dtype).copy()
        return np.zeros_like(self._previous), info

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """Returns the difference between `observation` and the previous one."""
        if self._previous is None:
            raise RuntimeError("FrameDelta.step called before reset")
        current = np.asarray(observation, self.observation_space.dtype).copy()
        delta = current - self._previous
        self._previous = current
        return delta


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


class SameStepAutoReset(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Resets the env within the step that ends an episode; see `AutoReset(mode="same_step")`."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Steps the env; on an episode's end returns the next episode's first obs instead."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            final_obs, final_info = obs, info
            obs, info = self.env.reset()
            info = {**info, "final_obs": final_obs, "final_info": final_info}
        return obs, reward, terminated, truncated, info


def AutoReset(env: gym.Env, mode: str) -> gym.Wrapper:  # noqa: N802
    """Resets the env automatically when an episode ends, in an explicitly chosen mode.

    mode="same_step": the step that ends an episode also resets the env. It returns the
    new episode's first obs with the ending step's reward and terminated/truncated; the
    finished episode's last obs and info are in info["final_obs"] and info["final_info"],
    and the rest of info is the reset's info.

    mode="next_step": Gymnasium's own `gymnasium.wrappers.Autoreset`, used as is. The
    step that ends an episode returns its last obs as usual; the following step ignores
    its action, resets the env and returns the reset obs with reward 0 and
    terminated=truncated=False.

    Named like a class because it is used as a wrapper.

    Raises:
        ValueError: `mode` is not one of `AUTORESET_MODES`.
    """
    if mode == "same_step":
        return SameStepAutoReset(env)
    if mode == "next_step":
        return gym.wrappers.Autoreset(env)
    raise ValueError(f"unknown autoreset mode {mode!r}, expected one of {AUTORESET_MODES}")


def apply(
    env: gym.Env,
    *,
    normalize: bool = False,
    clip_actions: bool = False,
    duration: int | None = None,
    to_32bit: bool = False,
    action_repeat: int = 1,
    autoreset: str | None = None,
) -> gym.Env:
    """Wraps `env` with the chosen wrappers in one fixed order, innermost first.

    The order is: LimitDuration, ActionRepeat, RangeNormalize, ClipAction, ConvertTo32Bit,
    AutoReset. So `duration` counts the env's own steps (before repeating), actions are
    clipped to [-1, 1] before being mapped to the env's range, and the autoreset sees
    the fully wrapped episode. Wrappers left at their defaults are not applied.
    """
    if duration is not None:
        env = LimitDuration(env, duration)
    if action_repeat != 1:
        env = ActionRepeat(env, action_repeat)
    if normalize:
        env = RangeNormalize(env)
    if clip_actions:
        env = ClipAction(env)
    if to_32bit:
        env = ConvertTo32Bit(env)
    if autoreset is not None:
        env = AutoReset(env, autoreset)
    return env


def _check_finite(space: gym.spaces.Box, kind: str, flag: str, env_name: str) -> None:
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError(
            f"cannot normalise the {kind} space {space} of {env_name}: it has an infinite bound; "
            f"pass {flag}=False to leave it as it is"
        )


def _unit_box(space: gym.spaces.Box) -> gym.spaces.Box:
    dtype = space.dtype if np.issubdtype(space.dtype, np.floating) else np.dtype(np.float32)
    return gym.spaces.Box(-1.0, 1.0, space.shape, dtype)
