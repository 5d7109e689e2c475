"""BatchEnv: many envs stepped together, in parallel when they live in worker processes.

Envs are held in groups: a worker process hosting k envs (`ProcessGroup`), or envs in
this process (`LocalGroup`). A batch step sends every worker its actions first, then
collects, so workers step at the same time; the messaging cost is paid per worker,
not per env.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from batchrl.envs import external, lifecycle, process
from batchrl.envs import group as group_lib
from batchrl.envs import infos as infos_lib
from batchrl.envs import make as make_lib

EnvLike = gym.Env | external.ExternalProcess


class LocalGroup:
    """Envs stepped in this process, behind the same interface as a worker process."""

    def __init__(self, envs: Sequence[gym.Env]):
        self._group = group_lib.EnvGroup([lambda env=env: env for env in envs])
        self.num_envs = len(envs)
        self.name = self._group.name
        self.observation_space = self._group.observation_space
        self.action_space = self._group.action_space
        self.buffers = self._group.buffers = group_lib.Buffers.allocate(
            self.num_envs, self.observation_space, self.action_space
        )
        self.restarts = 0
        self._reset: tuple | None = None

    def step_async(self, actions: np.ndarray) -> None:
        self.buffers.action[...] = actions

    def step_wait(self) -> process.Step:
        infos = self._group.step()
        buffers = self.buffers
        return buffers.obs, buffers.reward, buffers.terminated, buffers.truncated, infos

    def reset_async(
        self, indices: Sequence[int], seeds: Sequence[int | None], options: dict | None
    ) -> None:
        self._reset = (list(indices), list(seeds), options)

    def reset_wait(self) -> tuple[np.ndarray, list[dict]]:
        indices, seeds, options = self._reset
        infos = self._group.reset(indices, seeds, options)
        return self.buffers.obs[indices], infos

    def attribute(self, index: int, name: str) -> Any:
        return self._group.attribute(index, name)

    def call(self, index: int, name: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        return self._group.call(index, name, args, kwargs or {})

    def close(self) -> None:
        self._group.close()


def _cores() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, cores or 1)


def default_envs_per_worker(num_envs: int, parent_steps: bool = False) -> int:
    """Envs split evenly over one worker per core (one core fewer when the parent steps envs).

    The fastest setting measured: more, smaller workers pay more wake-ups per step.
    """
    workers = max(1, _cores() - 1) if parent_steps else _cores()
    return max(1, math.ceil(num_envs / workers))


def default_local_envs(num_envs: int) -> int:
    """The parent's even share of the batch when it steps envs beside one worker per other core."""
    return num_envs // _cores() if _cores() > 1 else 0


class BatchEnv:
    """A batch of envs with shared spaces, stepped together.

    `step(actions[B]) -> obs[B], reward[B], terminated[B], truncated[B], infos` and
    `reset(indices=None, seed=None) -> obs[len(indices)], infos`. Env i is seeded with
    seed + i. Returned arrays are fresh copies, safe to keep across steps.
    """

    def __init__(self, envs: Sequence[EnvLike]):
        if not envs:
            raise ValueError("a BatchEnv needs at least one env, got none")
        groups, local = [], []
        for env in envs:
            if isinstance(env, external.ExternalProcess):
                if local:
                    groups.append(LocalGroup(local))
                    local = []
                groups.append(env.group)
            else:
                local.append(env)
        if local:
            groups.append(LocalGroup(local))
        self._init(groups)

    @classmethod
    def external(
        cls,
        env: str | Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]],
        num_envs: int | None = None,
        *,
        envs_per_worker: int | None = None,
        timeout: float | None = lifecycle.DEFAULT_TIMEOUT,
        restart: bool = False,
        context: str = lifecycle.DEFAULT_CONTEXT,
        spin: float = lifecycle.DEFAULT_SPIN,
        local_envs: int | str = 0,
    ) -> BatchEnv:
        """Builds envs in worker processes, `envs_per_worker` to a process.

        `env` is a Gymnasium id, a constructor called `num_envs` times, or a list of
        constructors. By default there is one worker per core. `timeout`, `restart`,
        `context` and `spin` are those of `ExternalProcess`.

        `local_envs`: how many of the envs (the last ones) this process steps itself
        while the workers step theirs, or "auto" for its even share beside one worker
        per other core. On a machine with few cores this keeps every core busy without
        a process waiting to be woken, and is fastest (docs/benchmarks.md); those envs
        run in the caller's process, so a crash in one is not caught or restarted.
        """
        constructors = _constructors(env, num_envs)
        local = _check_local_envs(local_envs, len(constructors))
        remote = constructors[: len(constructors) - local]
        per_worker = envs_per_worker or default_envs_per_worker(len(remote), local > 0)
        if per_worker < 1:
            raise ValueError(f"envs_per_worker must be at least 1, got {per_worker}")
        groups = []
        try:
            for start in range(0, len(remote), per_worker):
                groups.append(
                    process.ProcessGroup(
                        remote[start : start + per_worker],
                        first_index=start,
                        timeout=timeout,
                        restart=restart,
                        context=context,
                        spin=spin,
                    )
                )
            if local:
                groups.append(LocalGroup([make() for make in constructors[len(remote) :]]))
        except BaseException:
            for started in groups:
                started.close()
            raise
        batch = cls.__new__(cls)
        batch._init(groups)
        return batch

    def _init(self, groups: list) -> None:
        self._groups = groups
        self._closed = False
        first = groups[0]
        for other in groups[1:]:
            group_lib.check_same_spaces(first.name, first, other.name, other)
        self.observation_space: gym.Space = first.observation_space
        self.action_space: gym.Space = first.action_space
        self.num_envs = sum(g.num_envs for g in groups)
        bounds = np.cumsum([0] + [g.num_envs for g in groups])
        self._slices = [slice(lo, hi) for lo, hi in itertools.pairwise(bounds)]
        self._sizes = tuple(g.num_envs for g in groups)
        self._owner = np.repeat(np.arange(len(groups)), self._sizes)
        self._action_shape = (self.num_envs, *self.action_space.shape)
        # Each step's collection order, made once: envs in this process go first.
        self._step_plan = _local_first(
            [(g, (n, part)) for n, (g, part) in enumerate(zip(groups, self._slices, strict=True))]
        )

    def __len__(self) -> int:
        return self.num_envs

    @property
    def restarts(self) -> int:
        """How many worker restarts happened in this batch."""
        return sum(g.restarts for g in self._groups)

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, infos_lib.Infos]:
        """Steps every env with its action; returns obs, reward, terminated, truncated, infos.

        `infos` is a sequence of one dict per env, fetched from its worker and decoded when read.
        """
        obs = np.empty((self.num_envs, *self.observation_space.shape), self.observation_space.dtype)
        reward = np.empty(self.num_envs, np.float64)
        terminated = np.empty(self.num_envs, bool)
        truncated = np.empty(self.num_envs, bool)
        infos = self.step_into(actions, obs, reward, terminated, truncated)
        return obs, reward, terminated, truncated, infos

    def step_into(
        self,
        actions: Any,
        obs: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> infos_lib.Infos:
        """`step`, writing the results into the given arrays [B, ...]; returns the infos.

        For callers that own the result memory (the in-graph bridge writes straight into
        XLA's buffers), which saves allocating and copying every array on every step.
        Values are cast to the arrays' dtypes.
        """
        actions = np.asarray(actions)
        if actions.shape != self._action_shape:
            raise ValueError(
                f"actions of shape {actions.shape} do not fit this batch: expected "
                f"{self._action_shape} ({self.num_envs} envs, action shape "
                f"{self.action_space.shape})"
            )
        self._expect_open()
        for g, part in zip(self._groups, self._slices, strict=True):
            g.step_async(actions[part])
        chunks: list[Any] = [None] * len(self._groups)

        def collect(g: Any, numbered: tuple[int, slice]) -> None:
            number, part = numbered
            results = g.step_wait()
            obs[part], reward[part], terminated[part], truncated[part], chunks[number] = results

        _collect_all(self._step_plan, collect)
        return infos_lib.Infos(chunks, self._sizes)

    def reset(
        self,
        indices: Sequence[int] | np.ndarray | None = None,
        seed: int | None = None,
        options: dict | None = None,
    ) -> tuple[np.ndarray, list[dict]]:
        """Resets all envs, or those at `indices`; env i gets seed + i. Returns obs and infos."""
        self._expect_open()
        indices = self._check_indices(indices)
        requests = []
        for number, (g, part) in enumerate(zip(self._groups, self._slices, strict=True)):
            mine = indices[self._owner[indices] == number]
            if len(mine):
                seeds = [None if seed is None else seed + int(i) for i in mine]
                g.reset_async(list(mine - part.start), seeds, options)
                requests.append((g, mine))
        obs = np.empty((len(indices), *self.observation_space.shape), self.observation_space.dtype)
        infos: list[dict] = [{}] * len(indices)
        position = {int(i): n for n, i in enumerate(indices)}

        def collect(g: Any, mine: np.ndarray) -> None:
            group_obs, group_infos = g.reset_wait()
            for i, o, info in zip(mine, group_obs, group_infos, strict=True):
                obs[position[int(i)]] = o
                infos[position[int(i)]] = info

        _collect_all(_local_first(requests), collect)
        return obs, infos

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Calls method `name` on every env; returns the results in env order."""
        self._expect_open()
        return [g.call(i, name, args, kwargs) for g in self._groups for i in range(g.num_envs)]

    def attribute(self, name: str) -> list[Any]:
        """The attribute `name` of every env, in env order."""
        self._expect_open()
        return [g.attribute(i, name) for g in self._groups for i in range(g.num_envs)]

    def close(self) -> None:
        """Closes every env and ends every worker. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        for g in self._groups:
            g.close()

    def __enter__(self) -> BatchEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _expect_open(self) -> None:
        if self._closed:
            raise RuntimeError("this BatchEnv is closed")

    def _check_indices(self, indices: Any) -> np.ndarray:
        if indices is None:
            return np.arange(self.num_envs)
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        bad = indices[(indices < 0) | (indices >= self.num_envs)]
        if len(bad):
            raise IndexError(
                f"env index {int(bad[0])} is out of range: this batch has envs 0 to "
                f"{self.num_envs - 1}"
            )
        if len(np.unique(indices)) != len(indices):
            raise ValueError(f"env indices must be distinct, got {indices.tolist()}")
        return indices


def _local_first(requests: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The (group, part) pairs, groups in this process first: they step while workers do."""
    return sorted(requests, key=lambda request: not isinstance(request[0], LocalGroup))


def _collect_all(requests: Sequence[tuple[Any, Any]], collect: Callable) -> None:
    """Calls `collect(group, part)` for every request, even after one fails, then raises.

    So no answer is left in flight when a worker fails.
    """
    failure = None
    for g, part in requests:
        try:
            collect(g, part)
        except BaseException as error:
            failure = failure or error
    if failure is not None:
        raise failure


def _check_local_envs(local_envs: int | str, num_envs: int) -> int:
    if local_envs == "auto":
        return default_local_envs(num_envs)
    if isinstance(local_envs, bool) or not isinstance(local_envs, int | np.integer):
        raise ValueError(f"local_envs must be a number of envs or 'auto', got {local_envs!r}")
    if not 0 <= local_envs <= num_envs:
        raise ValueError(f"local_envs must be between 0 and num_envs={num_envs}, got {local_envs}")
    return int(local_envs)


def _constructors(env: Any, num_envs: int | None) -> list[Callable[[], gym.Env]]:
    if isinstance(env, str):
        if num_envs is None:
            raise ValueError(f"give num_envs to build a batch of {env!r}")
        make_lib.check_name(env)
        return [make_lib.Make(env)] * num_envs
    if callable(env):
        if num_envs is None:
            raise ValueError("give num_envs to build a batch from one constructor")
        return [env] * num_envs
    constructors = list(env)
    if num_envs is not None and num_envs != len(constructors):
        raise ValueError(f"num_envs={num_envs} but {len(constructors)} constructors were given")
    if not constructors:
        raise ValueError("a BatchEnv needs at least one env, got none")
    return constructors
