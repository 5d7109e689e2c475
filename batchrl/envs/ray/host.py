"""The Ray actor that hosts a share of a batch: a node-local `BatchEnv.external` of its envs.

`group.RayGroup` is the parent's handle on it. The actor returns each step's
arrays and keeps the step's infos (themselves still in its workers) until asked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import cloudpickle
import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import infos as infos_lib
from batchrl.envs.host import obs_tree
from batchrl.envs.ray import raylet_watch


class Sent(NamedTuple):
    """A step's encoded infos (`infos.encode`) sent in its answer; None where all are empty."""

    infos: tuple | None


class Host:
    """The actor: a node-local `BatchEnv.external` over envs `first_index` onwards of a batch.

    `build` is that constructor, handed over by the caller, so this module never imports
    the BatchEnv that imports it.
    """

    def __init__(
        self, build: Callable[..., Any], blob: bytes, first_index: int, options: dict[str, Any]
    ):
        raylet_watch.end_with_raylet()
        try:
            constructors, _, _ = cloudpickle.loads(blob)  # `lifecycle.pickled`'s (envs, ...).
            self._batch = build(constructors, first_index=first_index, **options)
        except Exception as error:  # A worker's, or the batch's own (a bad argument).
            # Raised by `describe`: an actor whose __init__ raised reports only its text.
            self._failure = error
            return
        self._failure = None
        space, n = self._batch.single_observation_space, self._batch.num_envs
        self._obs = obs_tree.empty(space, n)  # A tree of arrays, sent as Ray pickles it.
        self._reward = np.empty(n, np.float64)
        self._terminated = np.empty(n, bool)
        self._truncated = np.empty(n, bool)
        self._kept: dict[int, infos_lib.Infos] = {}
        self._steps = 0

    def describe(self) -> tuple:
        """Where the actor runs and what its envs look like; raises what stopped its envs."""
        import ray

        if self._failure is not None:
            raise self._failure

        batch = self._batch
        node = ray.get_runtime_context().get_node_id()
        return node, os.getpid(), batch.single_observation_space, batch.single_action_space

    def step(self, actions: np.ndarray, autoreset: AutoresetMode, read: bool) -> tuple:
        """One step of every env: obs, reward, terminated, truncated, workers' restarts, infos.

        The infos are `Sent` where the caller reads them at once (`read`), else kept here
        until asked for (None).
        """
        results = (self._obs, self._reward, self._terminated, self._truncated)
        # Counted as the parent counts it, even if an env raises: step numbers name infos.
        self._steps += 1
        self._kept.pop(self._steps - infos_lib.KEPT_STEPS, None)
        # As the parent's batch sent them: in the space's dtypes when it trains.
        infos = self._batch.step_into(actions, *results, autoreset, read, as_given=True)
        if read:  # In this answer: a second call would cost as much again.
            return (*results, self._batch.restarts, Sent(infos_lib.encode(list(infos))))
        self._kept[self._steps] = infos
        return (*results, self._batch.restarts, None)

    def infos(self, step: int) -> Any:
        """The encoded infos of `step` (`infos.encode`), kept for the last KEPT_STEPS steps."""
        return infos_lib.encode(list(self._kept[step]))

    def reset(self, indices: list[int], seeds: list[int | None], options: dict | None) -> tuple:
        """Obs and infos of the envs at `indices` after a reset with `seeds`."""
        return self._batch.reset_at(indices, seed=seeds, options=options)

    def attribute(self, index: int, name: str) -> Any:
        return self._batch.get_attr(name, indices=[index], call_methods=False)[0]

    def call(self, index: int, name: str, args: tuple, kwargs: dict) -> Any:
        return self._batch.call(name, *args, indices=[index], **kwargs)[0]

    def set_attr(self, index: int, name: str, value: Any) -> None:
        self._batch.set_attr(name, [value], indices=[index])

    def is_wrapped(self, index: int, wrapper_class: type) -> bool:
        return self._batch.is_wrapped(wrapper_class, indices=[index])[0]

    def close(self) -> None:
        if self._failure is None:
            self._batch.close()
