"""Envs on a Ray cluster: each actor hosts its share of a batch as node-local worker processes.

`RayGroup` is the parent's handle on one actor (`Host`), behind the interface of a worker
process (`process.ProcessGroup`), so `BatchEnv` steps actors as it steps workers: every
actor is sent its actions first, then each is collected, and a batch step costs one Ray
call per actor, not per env. Inside, an actor is a `BatchEnv.external` over its envs;
the parent gives every env its seed, so a batch gives the same results on Ray as on
local workers. Infos the caller reads at once come in the step's answer; others stay in
the actor until read, as they stay in workers. A dead
actor or a lost node is `EnvCrashedError`, a silent actor `EnvTimeoutError`, and
`restart=True` replaces an actor on a live node, its envs reseeded as a restarted
worker's are.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl import extras
from batchrl.envs.host import errors, lifecycle, obs_tree, remote, stepper
from batchrl.envs.host import infos as infos_lib
from batchrl.envs.ray import host as ray_host
from batchrl.envs.ray import starting

logger = logging.getLogger("batchrl.envs")

# Seconds the parent waits beyond `timeout`: a hung env is caught by the actor's own
# workers first (and restarted there when asked), a hung actor by the parent after.
ACTOR_GRACE = 5.0


@functools.cache  # Called on every step: keep it a lookup.
def import_ray() -> Any:
    """The `ray` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ImportError(f"BatchEnv.ray needs Ray: {extras.pip_install('ray')}") from None
    return ray


class Session:
    """This process's use of Ray: a local Ray it started stops when its last group closes."""

    def __init__(self):
        self.started = False
        self.users = 0

    def join(self) -> None:
        ray = import_ray()
        if not ray.is_initialized():
            with warnings.catch_warnings():
                # Ray starts its processes with subprocess, fork then exec at once: JAX's
                # warning that a forked child would run on with this process's threads
                # does not apply to them.
                warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
                # Connects to RAY_ADDRESS, or to a cluster started on this machine, or
                # starts one for this process alone, without the dashboard's web UI: ten
                # processes fewer, and seconds sooner (a cluster of `ray start` has one).
                # A signal in it waits for it (`starting`).
                starting.init(ray, logging_level=logging.WARNING, include_dashboard=False)
            self.started = True
        self.users += 1

    def leave(self) -> None:
        self.users -= 1
        if self.users == 0 and self.started:
            self.started = False
            import_ray().shutdown()


SESSION = Session()


def alive_nodes() -> list[str]:
    """The ids of the cluster's live nodes, in a fixed order."""
    return sorted(node["NodeID"] for node in import_ray().nodes() if node["Alive"])


@functools.cache
def _remote_host() -> Any:
    return import_ray().remote(ray_host.Host)


class RayGroup(remote.RemoteGroup):
    """One Ray actor hosting `len(constructors)` envs in worker processes on its node."""

    def __init__(
        self,
        constructors: Sequence[Callable[[], gym.Env]],
        *,
        first_index: int,
        node: str,
        timeout: float | None,
        restart: bool,
        host_options: dict[str, Any],
        actor_options: dict[str, Any],
        build: Callable[..., Any],
    ):
        self.num_envs = len(constructors)
        self.first_index = first_index
        self.node_id = node
        self.timeout = timeout
        self.restart = restart
        self.name = lifecycle.constructor_name(constructors[0])
        self._wait = None if timeout is None else timeout + ACTOR_GRACE
        self._blob = lifecycle.pickled(list(constructors), None, first_index, to="a Ray actor")
        self._build = build  # BatchEnv.external, which the actor runs on its node.
        self._options = {**host_options, "timeout": timeout, "restart": restart}
        self._actor_options = {"num_cpus": 0, "max_restarts": 0, **actor_options}
        self._init_remote(self.num_envs)
        self._replaced = 0  # Actors replaced.
        self._worker_restarts = 0  # Worker restarts inside actors, past and present.
        self._current_restarts = 0  # Those of the current actor.
        self._ref: Any = None
        self._generation = 0  # Numbers the actors, so infos of a replaced one count as lost.
        self._launch()
        SESSION.join()  # Once launched: `close` leaves it.

    @property
    def restarts(self) -> int:
        """Actors replaced plus worker processes restarted inside actors."""
        return self._replaced + self._worker_restarts + self._current_restarts

    # -- lifecycle --------------------------------------------------------------------------

    def _launch(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # On its node; a replacement may go to any live node if that one is gone (soft).
        replacement = self._generation > 0
        strategy = NodeAffinitySchedulingStrategy(self.node_id, soft=replacement)
        options = {"scheduling_strategy": strategy, **self._actor_options}
        self._actor = (
            _remote_host()
            .options(**options)
            .remote(self._build, self._blob, self.first_index, self._options)
        )
        self._ready = self._actor.describe.remote()
        self._steps = 0
        self._ledger = infos_lib.Ledger()
        self._finalizer = weakref.finalize(self, _kill, self._actor)

    def wait_ready(self) -> None:
        """Waits for the actor to start its workers; raises what stopped it."""
        try:
            started = self._get(self._ready, "start", lifecycle.start_timeout(self.timeout))
        except errors.EnvError as error:
            self._broken = str(error).splitlines()[0]
            self._finalizer()
            raise
        self.node_id, self.pid, observation_space, action_space = started
        if self._generation == 0:
            self.observation_space, self.action_space = observation_space, action_space
            self.buffers = stepper.Buffers.allocate(self.num_envs, observation_space, action_space)

    def close(self) -> None:
        """Closes the actor's envs and workers, then ends the actor."""
        if self._closed:
            return
        if self._broken is None and import_ray().is_initialized():
            self._fetch_owed(keep_newest=0)
            with contextlib.suppress(errors.EnvError):
                self._get(self._actor.close.remote(), "close", ACTOR_GRACE)
        self._closed = True
        self._finalizer()
        SESSION.leave()

    # -- commands ---------------------------------------------------------------------------

    def _send_step(self, actions: np.ndarray, autoreset: AutoresetMode, read: bool) -> None:
        self._sent = time.monotonic()
        # Serialized at the call. Infos the caller reads at once come in its answer.
        self._ref = self._remote("step", actions, autoreset, read)

    def _receive_step(self) -> Any:
        buffers = self.buffers
        obs, reward, terminated, truncated, restarts, sent = self._get(
            self._ref, "step", self._wait, since=True
        )
        obs_tree.put(buffers.obs, Ellipsis, obs)
        buffers.reward[...] = reward
        buffers.terminated[...], buffers.truncated[...] = terminated, truncated
        self._current_restarts = restarts
        if sent is not None:
            return sent.infos  # Encoded; None where every env's infos are empty.
        infos = infos_lib.Owed(functools.partial(self._fetch, self._generation, self._steps))
        self._ledger.add(self._steps, infos)
        return infos

    def _send_reset(self, indices: list[int], seeds: list, options: dict | None) -> None:
        self._sent = time.monotonic()
        self._ref = self._remote("reset", indices, seeds, options)

    def _receive_reset(self, indices: list[int]) -> list[dict]:
        obs, infos = self._get(self._ref, "reset", self._wait, since=True)
        obs_tree.put(self.buffers.obs, indices, obs)
        return infos

    def _call_done(self) -> None:
        self._pending, self._ref = lifecycle.Pending.NONE, None

    # -- plumbing ---------------------------------------------------------------------------

    def _send_request(self, method: str, *args: Any) -> None:
        """Asks the actor for its `method(*args)`."""
        self._ref = self._remote(method, *args)

    def _remote(self, method: str, *args: Any) -> Any:
        """The ref of the actor's `method(*args)`, sent; an EnvError if Ray was shut down.

        Ray would start a fresh Ray of its own for the call, then fail it: the actor died
        with the Ray the caller shut down.
        """
        if not import_ray().is_initialized():
            self._broken = "Ray was shut down"
            raise errors.EnvError(
                f"{self._describe()} is gone: Ray was shut down (ray.shutdown()) while the "
                "batch was open; close the batch first",
                self.name,
                method,
            )
        return getattr(self._actor, method).remote(*args)

    def _receive_request(self, command: str) -> Any:
        return self._get(self._ref, command, self._wait)

    def _fetch(self, generation: int, step: int) -> Any:
        """The encoded infos of `step` of the actor numbered `generation`, from it."""
        current = generation == self._generation
        if current:
            self._ledger.forget(step)
        if self._closed or self._broken is not None or not current:
            raise errors.EnvError(
                f"the infos of step {step} of {self._describe()} were lost with its actor",
                self.name,
                "infos",
            )
        return self._get(self._remote("infos", step), "infos", self._wait)

    def _fetch_owed(self, keep_newest: int) -> None:
        """Fetches the owed infos that something still holds, but for the `keep_newest` last."""
        for _step, owed in self._ledger.due(self._steps - keep_newest):
            if self._broken is None:
                owed.fetch_now()

    def _host_timeout(self) -> float | None:
        return self._wait

    def _answered(self, timeout: float) -> bool:
        ray = import_ray()
        return self._ref is None or bool(
            ray.wait([self._ref], timeout=timeout, fetch_local=False)[0]
        )

    def _get(self, ref: Any, command: str, timeout: float | None, since: bool = False) -> Any:
        """The value of `ref`, or the EnvError that says why there is none.

        With `since`, the actor must have answered within `timeout` of the send (`_left`);
        its answer then has `timeout` to arrive: a large one is fetched from its node after.
        """
        ray = import_ray()
        try:
            if since and not ray.wait([ref], timeout=self._left(timeout), fetch_local=False)[0]:
                raise ray.exceptions.GetTimeoutError(f"no answer to {command}")
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.RayTaskError as error:
            cause = error.cause
            if isinstance(cause, errors.EnvRaisedError):  # Its worker's pid, and the node.
                first, newline, rest = str(cause).partition("\n")
                cause.args = (f"{first} (in the {self._where()}){newline}{rest}",)
                raise cause from None
            if isinstance(cause, errors.SpaceMismatchError):  # The batch's, not an env's.
                self._finalizer()
                raise errors.SpaceMismatchError(str(cause)) from None
            if isinstance(cause, errors.EnvError):  # A worker in the actor died or hung.
                cause.args = (f"{cause} (in the {self._where()})",)  # Its pid is there.
                raise self._fail(cause) from None
            text = str(error)  # Ray's text of the error, with the actor's traceback.
            raise errors.raised(
                f"{type(cause).__name__}: {cause} (raised by "
                f"{self._describe(errors.env_index(cause))} during "
                f"{command}{errors.rose_at(text)})\n\nIn the actor:\n{text}",
                self.name,
                command,
                type(cause).__name__,
                text,
                type(cause),
            ) from None
        except ray.exceptions.GetTimeoutError:
            if self.node_id in alive_nodes():
                self._finalizer()
                raise self._fail(
                    errors.EnvTimeoutError(
                        f"{self._describe()} did not answer {command} within {timeout} s and "
                        "was killed; raise the timeout" + self._advice(" or {restart}"),
                        self.name,
                        command,
                    )
                ) from None
            raise self._fail(self._lost(command, "its node is gone")) from None
        except ray.exceptions.ActorUnschedulableError:  # Before RayError, its base.
            if self.node_id not in alive_nodes():
                raise self._fail(self._lost(command, "its node is gone")) from None
            raise self._fail(self._unplaceable()) from None
        except ray.exceptions.RayError as error:  # The actor died, or its node.
            why = type(error).__name__
            if self.node_id not in alive_nodes():
                why = f"{why}; its node is gone"
            raise self._fail(self._lost(command, why)) from None

    def _lost(self, command: str, why: str) -> errors.EnvCrashedError:
        return errors.EnvCrashedError(
            f"{self._describe()} died during {command} ({why})"
            + self._advice("; {restart} to replace lost actors"),
            self.name,
            command,
        )

    def _unplaceable(self) -> errors.EnvCrashedError:
        """The error for an actor its live node cannot hold: it lacks what the actor asks for."""
        asks = {k: v for k, v in self._actor_options.items() if k != "max_restarts"}
        return errors.EnvCrashedError(
            f"{self._describe()} cannot start: Ray cannot place the actor on its node, which "
            f"lacks the resources it asks for ({asks}); ask for fewer in actor_options",
            self.name,
            "start",
        )

    def _replace_host(self, error: errors.EnvError) -> int:
        """Replaces the actor after `error`; returns the replacements so far, which seed it."""
        self._replaced += 1
        logger.warning("%s; replacement %d of this actor", error, self._replaced)
        self._finalizer()
        self._worker_restarts += self._current_restarts
        self._current_restarts = 0
        tries_left = lifecycle.RESTART_TRIES
        while True:
            tries_left -= 1
            self._generation += 1
            self._launch()
            try:
                self.wait_ready()
                return self._replaced
            except errors.EnvCrashedError as lost:
                # Placed on a node that died abruptly, which Ray still listed as live: its
                # death is known now, and the next goes to a live node.
                if not tries_left:
                    raise
                self._broken = None
                self._replaced += 1
                logger.warning("%s; replacement %d of this actor", lost, self._replaced)

    def _where(self) -> str:
        return f"Ray actor on node {self.node_id[:8]}"


def _kill(actor: Any) -> None:
    """Ends an actor and its workers at once. Safe to call at any time, once."""
    ray = import_ray()
    if ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
