"""ExternalProcess: one Gymnasium env in its own worker process, with Gymnasium's API.

A thin view on a `process.ProcessGroup` of one env; several of them step in parallel
through promises (`blocking=False`), or together inside a `BatchEnv`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from batchrl import env_spec
from batchrl.envs.host import infos as infos_lib
from batchrl.envs.host import lifecycle, process


class ExternalProcess:
    """A Gymnasium env built and run in its own process.

    `constructor` is any callable returning a `gym.Env` (lambdas and closures work: it is
    sent with cloudpickle). `step` and `reset` take `blocking=False` to return a promise,
    a callable that waits for the result, so several envs step in parallel.

    `timeout`: seconds to wait for an answer before the worker counts as hung (None:
    forever). `restart`: replace a dead or hung worker instead of raising. `context`:
    "forkserver" (the default, also None: workers fork from a preloaded server, fast) or
    "spawn" (never plain fork, unsafe beside JAX's threads). `spin`: seconds the worker
    polls for the next command, and the parent for an answer, before it blocks; each polls
    only while its last wait ended within `spin` (`polling`).
    """

    def __init__(
        self,
        constructor: Callable[[], gym.Env],
        *,
        timeout: float | None = lifecycle.DEFAULT_TIMEOUT,
        restart: bool = False,
        context: str | None = lifecycle.DEFAULT_CONTEXT,
        spin: float = lifecycle.DEFAULT_SPIN,
    ):
        self._group = process.ProcessGroup(
            [constructor], timeout=timeout, restart=restart, context=context, spin=spin
        )

    @property
    def group(self) -> process.ProcessGroup:
        """The handle on its worker, which a BatchEnv steps together with others."""
        return self._group

    @property
    def observation_space(self) -> gym.Space:
        """The env's observation space."""
        return self._group.observation_space

    @property
    def action_space(self) -> gym.Space:
        """The env's action space."""
        return self._group.action_space

    @property
    def restarts(self) -> int:
        """How often the worker was replaced after dying or hanging."""
        return self._group.restarts

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self._group.pid

    def reset(
        self, *, seed: int | None = None, options: dict | None = None, blocking: bool = True
    ) -> Any:
        """Gymnasium's reset: (obs, info), or a promise of it when not blocking.

        The observation is the env's tree (dicts and tuples of arrays) as fresh copies.
        """
        self._group.reset_async([0], [seed], options)

        def promise() -> tuple[Any, dict]:
            obs, infos = self._group.reset_wait()
            return _first(obs), infos[0]

        return promise() if blocking else promise

    def step(self, action: Any, *, blocking: bool = True) -> Any:
        """Gymnasium's step: (obs, reward, terminated, truncated, info), or a promise of it."""
        rows = env_spec.map_tree(_row_of_one, self._group.buffers.action, action)
        self._group.step_async(rows, read_infos=True)

        def promise() -> tuple[Any, float, bool, bool, dict]:
            obs, reward, terminated, truncated, infos = self._group.step_wait()
            info = infos_lib.Infos([infos], [1])[0]
            return _first(obs), float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

        return promise() if blocking else promise

    def call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Calls the env's method `name` in the worker and returns the result.

        `name` is positional only, so the method may take a keyword `name` of its own.
        """
        return self._group.call(0, name, args, kwargs)

    def get_attr(self, name: str) -> Any:
        """The env's attribute `name`, read in the worker (named as Gymnasium's vector envs)."""
        return self._group.attribute(0, name)

    def close(self) -> None:
        """Closes the env and ends its worker. Safe to call more than once."""
        self._group.close()

    def __enter__(self) -> ExternalProcess:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _first(batch: Any) -> Any:
    """The first observation of a batch of one, its leaves fresh copies (scalars for `Discrete`).

    A leaf of no fixed shape (a `Text`'s string, a `Graph`) is a copy of its value.
    """
    return env_spec.map_tree(lambda leaf: copy.copy(leaf[0]), batch)


def _row_of_one(buffer: np.ndarray, value: Any) -> np.ndarray:
    """One env's action leaf as a batch of one, like the group's action `buffer`."""
    if buffer.dtype != object:
        return np.asarray(value, buffer.dtype)[None]
    row = np.empty(1, object)  # A value of no fixed shape, kept whole.
    row[0] = value
    return row
