"""Test envs: fixed episode lengths for exact bookkeeping, and envs that fail on demand.

`CountingEnv(duration)` ends every episode after exactly `duration` steps; its
observation is [step, duration, seed-derived offset], so a test can tell which env
and which step produced it. `SpaceEnv` draws observations of any given space on such a
schedule. `FailingEnv` raises, exits, kills itself or hangs at a chosen step, to test
how workers report and recover. `UnstableEnv` makes MuJoCo warn at its first step.
`StartCostEnv` observes the CPU time its process had spent when it was built: a
worker's cost to start. `WitnessEnv` shows the reset options and the closes it got.
`NaNRewardEnv` rewards NaN from a chosen step in the env of one seed: a run diverges.
`NoRenderEnv` takes a render mode and renders nothing.
"""

from __future__ import annotations

import copy
import os
import resource
import signal
import subprocess
import time
from typing import Any

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    """Episodes of exactly `duration` steps; reward is the action's sum plus the step number.

    `end` chooses how an episode ends: "terminated" or "truncated". `step_seconds` makes
    each step take at least that long, like a slow simulator; `step_gate`, a file's path,
    holds every step until that file exists, so that a test decides when steps end.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        duration: int = 3,
        end: str = "terminated",
        discrete: bool = False,
        obs_size: int = 3,
        step_seconds: float = 0.0,
        step_gate: str | None = None,
    ):
        if end not in ("terminated", "truncated"):
            raise ValueError(f"end must be 'terminated' or 'truncated', got {end!r}")
        self.duration = duration
        self.end = end
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_size,), np.float32)
        if discrete:
            self.action_space = gym.spaces.Discrete(3)
        else:
            self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.step_seconds = step_seconds
        self.step_gate = step_gate
        self.steps = 0
        self.offset = 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.steps = 0
        self.offset = float(self.np_random.uniform())
        return self._obs(), {"seed": seed}

    def step(self, action):
        if self.step_seconds:
            time.sleep(self.step_seconds)
        while self.step_gate is not None and not os.path.exists(self.step_gate):
            time.sleep(0.005)
        self.steps += 1
        reward = float(np.sum(action)) + self.steps
        done = self.steps >= self.duration
        terminated = done and self.end == "terminated"
        truncated = done and self.end == "truncated"
        return self._obs(), reward, terminated, truncated, {}

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, np.float32)
        obs[:3] = (self.steps, self.duration, self.offset)[: obs.size]
        return obs

    def meet(self, folder: str, count: int, timeout: float = 30.0) -> bool:
        """Marks a file in `folder`; whether `count` envs have, waiting up to `timeout` s.

        Envs called one after another never meet: the first waits out its timeout.
        """
        with open(os.path.join(folder, f"{os.getpid()}-{id(self)}"), "w"):
            pass
        end = time.monotonic() + timeout
        while len(os.listdir(folder)) < count:
            if time.monotonic() > end:
                return False
            time.sleep(0.01)
        return True


class WitnessEnv(CountingEnv):
    """A `CountingEnv` that shows what reached it: its options and its closes.

    Its reset's `options` go into the reset's infos, and each `close` is a line in the
    file `closes` names, written after `close_seconds` (a video's last frames, say).
    `build_seconds` makes it slow to build.
    """

    def __init__(
        self,
        closes: str | None = None,
        close_seconds: float = 0.0,
        build_seconds: float = 0.0,
        **settings: Any,
    ):
        time.sleep(build_seconds)
        super().__init__(**settings)
        self.closes, self.close_seconds = closes, close_seconds

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed)
        return obs, {**info, "options": repr(options)}

    def close(self) -> None:
        time.sleep(self.close_seconds)
        if self.closes is not None:
            with open(self.closes, "a") as log:
                log.write(f"{os.getpid()}-{id(self)}\n")


class SpaceEnv(gym.Env):
    """Observations of any given space, drawn from the env's own seeded `np_random`.

    Episodes last exactly `duration` steps (ending as `end` says), so autoresets happen
    on schedule; the reward is the step number plus the action's sum, so a test sees
    each env's actions arrive. Each reset reseeds the observation space from `np_random`,
    so the same seed gives the same observations wherever the env runs.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space | None = None,
        duration: int = 3,
        end: str = "terminated",
    ):
        if end not in ("terminated", "truncated"):
            raise ValueError(f"end must be 'terminated' or 'truncated', got {end!r}")
        # Copies: envs built from one space must not share its random generator.
        self.observation_space = copy.deepcopy(observation_space)
        if action_space is None:
            action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = copy.deepcopy(action_space)
        self.duration = duration
        self.end = end
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.steps = 0
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self.observation_space.sample(), {"steps": 0}

    def step(self, action):
        self.steps += 1
        reward = float(np.sum(action)) + self.steps
        done = self.steps >= self.duration
        terminated, truncated = done and self.end == "terminated", done and self.end == "truncated"
        return self.observation_space.sample(), reward, terminated, truncated, {"steps": self.steps}


class ActionEcho(gym.Env):
    """Observes the action it was given, flattened, so a test sees every leaf arrive.

    The action space is any Gymnasium space (a tree of Dicts and Tuples too); the
    observation is `gym.spaces.flatten(action_space, action)` as float64 and the reward
    its sum. Episodes last `duration` steps.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, action_space: gym.Space, duration: int = 4):
        self.action_space = copy.deepcopy(action_space)
        size = gym.spaces.flatdim(self.action_space)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float64)
        self.duration = duration
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(self.observation_space.shape), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self.steps += 1
        obs = gym.spaces.flatten(self.action_space, action).astype(np.float64)
        return obs, float(obs.sum()), self.steps >= self.duration, False, {}


class OwnSpace(gym.Space):
    """A space of one's own, no Gymnasium kind: the words "a" to "e" and their repeats."""

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        del mask, probability
        return str("abcde"[int(self.np_random.integers(5))]) * int(self.np_random.integers(1, 4))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and 1 <= len(x) <= 3 and len(set(x)) == 1 and x[0] in "abcde"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, OwnSpace)

    def __hash__(self) -> int:
        return hash(OwnSpace)


class ValueEcho(SpaceEnv):
    """Observes the action it was given, as it was given, in one space for both.

    For spaces of no fixed shape (`Text`, `Graph`, `Sequence`, `OneOf`): a test sees each
    action arrive and each observation come back intact. Reset observes a sample drawn
    as `SpaceEnv`'s; episodes last `duration` steps, then terminate.
    """

    def __init__(self, space: gym.Space, duration: int = 3):
        super().__init__(space, space, duration=duration)

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self.steps += 1
        return action, float(self.steps), self.steps >= self.duration, False, {}


class FailingEnv(CountingEnv):
    """A CountingEnv that fails in `where` ("init", "reset", "step", "close") on its `at`-th call.

    `how`: "raise" (a ValueError), "exit" (`os._exit(3)`), "sigkill", "segv" or "hang".
    Calls before the `at`-th one behave normally, so a batch can start and then fail.
    `mark`, a file's path, is made as it fails: a test knows the failure came.
    """

    def __init__(
        self,
        where: str = "step",
        how: str = "raise",
        at: int = 1,
        mark: str | None = None,
        **kwargs: Any,
    ):
        self.where, self.how, self.at, self.mark = where, how, at, mark
        self.calls = {"reset": 0, "step": 0}
        if where == "init":
            self._fail()
        super().__init__(**kwargs)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._maybe_fail("reset")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self._maybe_fail("step")
        return super().step(action)

    def close(self) -> None:
        if self.where == "close":
            self._fail()

    def _maybe_fail(self, where: str) -> None:
        self.calls[where] += 1
        if where == self.where and self.calls[where] == self.at:
            self._fail()

    def _fail(self) -> None:
        if self.mark is not None:
            with open(self.mark, "a"):
                pass
        if self.how == "raise":
            raise ValueError(f"FailingEnv failed on purpose in {self.where}")
        if self.how == "exit":
            os._exit(3)
        if self.how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.how == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.how == "hang":
            while True:
                time.sleep(1)
        raise ValueError(f"unknown failure {self.how!r}")


class NaNRewardEnv(CountingEnv):
    """A CountingEnv whose rewards are NaN from its `at`-th step, if first reset with `seed`."""

    def __init__(self, seed: int, at: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.poisoned, self.at = seed, at
        self.first: int | None = None
        self.count = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.first = seed if self.first is None else self.first
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.count += 1
        if self.first == self.poisoned and self.count >= self.at:
            reward = float("nan")
        return obs, reward, terminated, truncated, info


class NoRenderEnv(CountingEnv):
    """Takes `render_mode` but renders nothing of its own: Gymnasium's bare NotImplementedError."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.render_mode = render_mode


class StartCostEnv(gym.Env):
    """Observes the CPU seconds its process had spent when the env was built, every step."""

    observation_space = gym.spaces.Box(0.0, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(1)

    def __init__(self):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._spent = np.array([usage.ru_utime + usage.ru_stime], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self._spent, {}

    def step(self, action):
        return self._spent, 0.0, False, False, {}


class UnstableEnv(gym.Env):
    """A MuJoCo body whose velocity is NaN from reset: its first step makes MuJoCo warn."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = gym.spaces.Discrete(1)
    _XML = (
        "<mujoco><worldbody><body><joint type='slide'/><geom size='.1'/></body></worldbody>"
        "</mujoco>"
    )

    def __init__(self):
        import mujoco

        self._mujoco = mujoco
        self._model = mujoco.MjModel.from_xml_string(self._XML)
        self._data = mujoco.MjData(self._model)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._mujoco.mj_resetData(self._model, self._data)
        self._data.qvel[0] = np.nan
        return self._data.qpos.copy(), {}

    def step(self, action):
        self._mujoco.mj_step(self._model, self._data)
        return self._data.qpos.copy(), 0.0, False, False, {}


def filmed_pendulum() -> gym.Env:
    """Pendulum-v1 rendering RGB frames, made by a function that takes no render_mode."""
    return gym.make("Pendulum-v1", render_mode="rgb_array")


class ChildSignals(CountingEnv):
    """A CountingEnv whose `child_signals` reads the signal masks of a process it starts."""

    def child_signals(self) -> dict[str, int]:
        """The SigIgn and SigBlk masks (bit n-1 for signal n) of a child `cat`'s status."""
        status = subprocess.run(
            ["cat", "/proc/self/status"], capture_output=True, text=True, check=True
        ).stdout
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        return {name: int(fields[name], 16) for name in ("SigIgn", "SigBlk")}
