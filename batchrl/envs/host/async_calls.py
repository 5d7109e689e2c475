"""`AsyncVectorEnv`'s split calls on a batch: `step_`, `reset_` and `call_async`/`_wait`.

The first half sends every group its work and returns; the second collects the results.
A caller can compute between the halves while the envs step in their workers (or,
after `call_async`, run a method: each worker its first env's). Calls out
of order raise Gymnasium's `AlreadyPendingCallError` and `NoAsyncCallError` with
`AsyncVectorEnv`'s messages; closing a batch with a call in flight warns as it does and
drops the results. A batch waits for its envs up to its workers' own `timeout` (after
which a hung worker is killed or replaced); `step_wait` and `reset_wait` given a shorter
`timeout` raise `AsyncVectorEnv`'s `multiprocessing.TimeoutError` when an answer is still
missing then, and keep the call in flight, where `AsyncVectorEnv` forgets it and would
read its late answers as the next call's: the next wait collects it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import arguments, obs_tree
from batchrl.envs.host import infos as infos_lib


class AsyncCalls:
    """The split calls of `BatchEnvBase`, over its `_send_*` and `_collect_*` halves."""

    _waiting: tuple | None = None  # The call in flight: ("step",), ("reset", ...), ("call", ...).
    # Envs whose episodes ended without autoreset (DISABLED), not reset since.
    _unreset: np.ndarray | None = None

    def step_async(self, actions: Any) -> None:
        """Sends every env its action; `step_wait` collects the step.

        Without autoreset, an env whose episode ended must be reset first: stepped on, it
        would step a finished episode, as Gymnasium's vector envs refuse.
        """
        self._expect_no_call("step_async")
        ended = [] if self._unreset is None else np.flatnonzero(self._unreset).tolist()
        if ended and self.autoreset_mode is AutoresetMode.DISABLED:
            raise gym.error.ResetNeeded(
                f"envs {ended} ended and were not reset (autoreset_mode=DISABLED): reset "
                "them first, reset(options={'reset_mask': terminated | truncated})"
            )
        # Infos built at once are read at once: workers send them with their answers.
        read = not infos_lib.lazy_on(self.lazy_infos)
        self._send_step(actions, self.autoreset_mode, read, strict=True, as_given=True)
        self._waiting = ("step",)

    def step_wait(
        self, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The results of the step `step_async` sent, as `step` gives them."""
        self._expect_call("step", timeout)
        self._waiting = None
        obs, reward, terminated, truncated = results = self._result_arrays(np.float64)
        infos = self._collect_step(*results)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._unreset = terminated | truncated
        vector_infos = infos_lib.vector_infos(
            self._batched(range(self.num_envs), infos), self.lazy_infos
        )
        obs = obs_tree.to_gymnasium(obs, self._obs_kinds)
        return obs, reward, terminated, truncated, vector_infos

    def reset_async(
        self,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Sends the resets `reset` makes (every env, or `options["reset_mask"]`'s)."""
        self._expect_no_call("reset_async")
        seeds = arguments.check_seeds(seed, self.num_envs)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {options!r:.60}")
        # Popped from the caller's dict, as Gymnasium's vector envs pop it: their wrappers
        # read the dict after the reset (RecordEpisodeStatistics starts every env's
        # statistics afresh where no mask is left, and only the masked envs' otherwise).
        mask = None if options is None else options.pop("reset_mask", None)
        # The envs get what is left of the caller's dict, `{}` included, or None as given.
        options = None if options is None else dict(options)
        others = None
        if mask is None:
            indices = np.arange(self.num_envs)
        else:
            indices = arguments.check_mask(mask, self.num_envs)
            others = self._all_obs()  # The others' obs as they are, read before any resets.
            seeds = [seeds[i] for i in indices]
        requests = self._send_reset(indices, seeds, options)
        self._waiting = ("reset", indices, requests, others)

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """The obs and infos of the reset `reset_async` sent, as `reset` gives them."""
        self._expect_call("reset", timeout)
        _, indices, requests, others = self._waiting
        self._waiting = None
        obs, infos = self._collect_reset(indices, requests)
        if others is not None:
            obs_tree.put(others, indices, obs)
            obs = others
        obs = obs_tree.to_gymnasium(obs, self._obs_kinds)
        return obs, infos_lib.vector_infos(self._batched(indices, infos), self.lazy_infos)

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Sends `call(name, *args, **kwargs)`; `call_wait` collects every env's result.

        Each worker (or Ray actor) gets its first env's call at once; a worker's other
        envs, and envs in this process, are called in `call_wait` (`env_requests`).
        """
        self._waiting = ("call", self._ask(None, "call", name, args, kwargs))

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """The results of the call `call_async` sent, one per env, as `call` gives them."""
        self._expect_call("call", timeout)
        _, sent = self._waiting
        self._waiting = None
        return sent.results()

    def step_into_async(
        self,
        actions: Any,
        autoreset_mode: AutoresetMode = AutoresetMode.DISABLED,
        read_infos: bool = False,
        as_given: bool = False,
    ) -> None:
        """`step_into`'s first half: sends every env its action, for the caller to compute."""
        mode = arguments.check_autoreset_mode(autoreset_mode)
        self._expect_no_call("step_into_async")
        self._send_step(actions, mode, read_infos, as_given=as_given)
        self._waiting = ("step_into",)

    def step_into_wait(
        self, obs: Any, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> infos_lib.Infos:
        """`step_into`'s second half: the step written into the given arrays; its infos."""
        self._expect_call("step_into", None)
        obs_tree.check(obs, self._obs_shapes)  # Refused, the step stays in flight.
        self._waiting = None
        return self._collect_step(obs, reward, terminated, truncated)

    def _reset_done(self, indices: Any) -> None:
        """The envs at `indices` were reset: none of them is due a reset."""
        if self._unreset is not None:
            self._unreset[indices] = False

    def _result_arrays(self, reward_dtype: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """Fresh obs, reward, terminated and truncated arrays for a step's results."""
        n = self.num_envs
        obs = obs_tree.empty(self.single_observation_space, n)
        return obs, np.empty(n, reward_dtype), np.empty(n, bool), np.empty(n, bool)

    def _expect_no_call(self, call: str) -> None:
        """Gymnasium's `AlreadyPendingCallError` when a call is in flight; closed: that first."""
        self._expect_open()  # Not "reset them first", which a closed batch cannot.
        if self._waiting is not None:
            name = self._waiting[0]
            raise gym.error.AlreadyPendingCallError(
                f"Calling `{call}` while waiting for a pending call to `{name}` to complete",
                name,
            )

    def _expect_call(self, name: str, timeout: float | None) -> None:
        """Gymnasium's `NoAsyncCallError` unless `name` is in flight; then waits `timeout` s.

        Past `timeout` with an answer missing, `multiprocessing.TimeoutError` as from
        `AsyncVectorEnv`, the call left in flight for a later wait to collect.
        """
        if self._waiting is None or self._waiting[0] != name:
            raise gym.error.NoAsyncCallError(
                f"Calling `{name}_wait` without any prior call to `{name}_async`.", name
            )
        if timeout is None:
            return
        if name == "call":
            raise ValueError(
                f"call_wait takes no timeout (got {timeout!r}): its calls wait up to their "
                "workers' own timeout"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise ValueError(f"{name}_wait's timeout must be seconds, at least 0: got {timeout!r}")
        deadline = time.monotonic() + timeout
        for group in self._groups:
            if not group.ready(max(0.0, deadline - time.monotonic())):
                raise multiprocessing.TimeoutError(
                    f"The call to `{name}_wait` has timed out after {timeout} second(s)."
                )

    def _drop_pending(self, timeout: float | None = None) -> None:
        """Warns of a call in flight, as `AsyncVectorEnv`'s close does; collects it in `timeout`."""
        if self._waiting is None:
            return
        name = self._waiting[0]
        warnings.warn(
            f"Calling `close` while waiting for a pending call to `{name}` to complete.",
            UserWarning,
            stacklevel=4,
        )
        with contextlib.suppress(Exception):  # Closing anyway: its results are dropped.
            if name == "step_into":
                self.step_into_wait(*self._result_arrays(np.float64))
            elif name != "call":
                getattr(self, f"{name}_wait")(timeout)
            elif timeout is None:  # Else a worker still busy with its call is killed.
                self.call_wait()
        self._waiting = None
