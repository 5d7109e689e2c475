"""ProcessGroup: the parent's handle on one worker process hosting k envs.

Actions and results cross through shared memory, a step is asked for and answered by
one byte each way (no pickling on the per-step path), its infos follow the answer on
the command pipe where the caller reads them at once and else stay in the worker until
read (`infos.Owed`), and every other command goes through the command pipe. A dead worker
is detected at once, a hung one after `timeout` seconds; `restart=True` replaces either.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing.connection
import os
import select
import signal
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import actions as actions_lib
from batchrl.envs.host import (
    arguments,
    errors,
    lifecycle,
    obs_tree,
    polling,
    remote,
    shared,
    stepper,
    worker,
)
from batchrl.envs.host import infos as infos_lib

logger = logging.getLogger("batchrl.envs")


class ProcessGroup(remote.RemoteGroup):
    """One worker process hosting `len(constructors)` envs, stepped in sequence there."""

    def __init__(
        self,
        constructors: Sequence[Callable[[], gym.Env]],
        *,
        first_index: int = 0,
        timeout: float | None = lifecycle.DEFAULT_TIMEOUT,
        restart: bool = False,
        context: str | None = lifecycle.DEFAULT_CONTEXT,
        spin: float = lifecycle.DEFAULT_SPIN,
        observation_mode: Any = "same",
    ):
        timeout = arguments.check_timeout(timeout)
        if spin < 0:
            raise ValueError(f"spin must be zero or positive seconds, got {spin!r}")
        self.num_envs = len(constructors)
        self.first_index = first_index
        self.timeout = timeout
        self.restart = restart
        self.spin = spin
        self.restarts = 0
        self.name = lifecycle.constructor_name(constructors[0])  # Until the env reports its own.
        self._context = lifecycle.context(context)
        self._blob = lifecycle.pickled(list(constructors), observation_mode, first_index)
        self._init_remote(self.num_envs)
        self._process, self._pid, self._mapping = None, None, None
        self._closing, self._closing_since = False, 0.0  # Asked to close its envs, and when.
        self._start()

    # -- lifecycle --------------------------------------------------------------------------

    def _start(self) -> None:
        parent_conn, child_conn = self._context.Pipe()
        bell_in, bell_out = self._context.Pipe(duplex=False)  # Parent rings: step.
        answer_in, answer_out = self._context.Pipe(duplex=False)  # Worker rings: stepped.
        process = self._context.Process(
            target=worker.main,
            args=(child_conn, os.getpid(), self._blob, self.spin, bell_in, answer_out),
            name=f"batchrl-env-{self.first_index}",
            daemon=True,
        )
        process.start()
        for end in (child_conn, bell_in, answer_out):
            end.close()
        self._process, self._conn, self._pid = process, parent_conn, process.pid
        self._bell, self._answer = bell_out.fileno(), answer_in.fileno()
        # Made once: cheaper per step than connection.wait.
        self._poller = polling.Poller(self.spin, parent_conn.fileno(), process.sentinel)
        self._step_poller = polling.Poller(
            self.spin, self._answer, parent_conn.fileno(), process.sentinel
        )
        self._steps = 0  # Steps rung on this worker; numbers its kept infos.
        self._ledger = infos_lib.Ledger()  # Infos still in the worker.
        self._finalizer = weakref.finalize(
            self, lifecycle.terminate, process, parent_conn, (bell_out, answer_in)
        )
        try:
            name, *spaces = self._receive("start", lifecycle.start_timeout(self.timeout))
            observation_space, action_space = spaces
            if self.restarts == 0:
                self.name, self.observation_space, self.action_space = name, *spaces
            nbytes = stepper.Buffers.nbytes(self.num_envs, observation_space, action_space)
            path, mapping = shared.create(nbytes)
            try:
                self._conn.send(("attach", path, nbytes))
                self._receive("attach", lifecycle.start_timeout(self.timeout))
            finally:
                shared.unlink(path)
        except BaseException:
            self._finalizer()
            raise
        self._mapping = mapping
        self.buffers = stepper.Buffers.over(mapping, self.num_envs, observation_space, action_space)
        buffers = self.buffers
        self._variable = bool(stepper.objects(buffers.obs) or stepper.objects(buffers.action))
        self._piped = self._variable  # Whether the step in flight went through the pipe.

    def close_begin(self) -> None:
        """Asks the worker to close its envs, without waiting: a batch asks every worker first.

        A worker busy with a call dropped unanswered (`terminate`) is killed by `close`.
        """
        if self._closed or self._closing or self._pending is not lifecycle.Pending.NONE:
            return
        if self._process.is_alive():
            self._fetch_owed(keep_newest=0, timeout=lifecycle.CLOSE_TIMEOUT)
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(("close",))
            self._closing, self._closing_since = True, time.monotonic()

    def _end_busy_host(self) -> None:
        # Its close would be read once the call in flight ends: 1 s a worker after Ctrl-C.
        self._process.kill()
        self._finalizer()

    def kill(self) -> None:
        """Ends the worker at once, its envs not closed (`close(terminate=True)`)."""
        if not self._closed:
            self._closed = True
            self._process.kill()
            self._finalizer()
            self._release()

    def close(self) -> None:
        """Stops the worker once its envs have closed, as Gymnasium's vector envs wait.

        An env's `close` may write files (a video's last frames): the worker gets the
        timeout a step gets (None: no limit), counted from `close_begin` (a batch's stuck
        workers took it one after another), and is then killed with a warning.
        """
        if self._closed:
            return
        try:
            self.close_begin()
            left = self.timeout and max(self._closing_since + self.timeout - time.monotonic(), 0)
            if self._pending is not lifecycle.Pending.NONE and self._process.is_alive():
                self._process.kill()  # Busy with a call dropped unanswered.
            elif self._closing and not multiprocessing.connection.wait(
                [self._process.sentinel], left
            ):
                logger.warning(
                    "%s did not close its envs within %s s and was killed",
                    self._describe(),
                    self.timeout,
                )
                self._process.kill()
        finally:
            self._closed = True
            self._finalizer()  # Kills a worker still running, then joins it.
            self._release()

    def _release(self) -> None:
        """Frees a closed worker's pipes and /dev/shm pages, its buffers copied to be read on."""
        self._process.close()
        if self._mapping is not None:
            self.buffers = stepper.Buffers.over(
                bytearray(self._mapping), self.num_envs, self.observation_space, self.action_space
            )
            with contextlib.suppress(BufferError):  # Viewed by arrays still held: kept for them.
                self._mapping.close()
            self._mapping = None

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self._pid

    # -- commands ---------------------------------------------------------------------------

    def _send_step(self, actions: np.ndarray, autoreset: AutoresetMode, read: bool) -> None:
        """Writes the actions for the worker and rings it: one byte each way per step.

        Actions and results are in shared memory, and the worker keeps the step's infos
        until they are read (`infos_lib.Owed`), or sends them after its answer where the
        caller `read`s them at once.
        """
        obs_tree.put(self.buffers.action, Ellipsis, actions)
        self._sent = time.monotonic()
        given = actions_lib.as_given(actions, self.buffers.action)
        # Values of no fixed size, and actions of other dtypes, go through the command pipe.
        self._piped = self._variable or given is not None
        ring = (stepper.READ_BYTES if read else stepper.STEP_BYTES)[autoreset]
        if self._piped:  # Its answer carries the step's infos where they are read at once.
            values = stepper.objects(self.buffers.action)
            self._send(lifecycle.Pending.STEP, ("step", values, ring, given))
            return
        with contextlib.suppress(OSError):  # The worker is gone: step_wait reports it.
            os.write(self._bell, ring)

    def _receive_step(self) -> Any:
        if self._piped:
            objects, sent, infos = self._receive("step", self.timeout, since=True)
            stepper.put_objects(self.buffers.obs, objects)
            if sent:
                return infos  # None where every env's infos are empty.
        else:
            answer = self._wait_answer()
            if answer == stepper.ANSWERS[False]:
                return None  # Every env's infos are empty: nothing to fetch.
            if answer == stepper.SENT:
                return self._receive("infos", self.timeout)
        owed = infos_lib.Owed(functools.partial(self._fetch, self.restarts, self._steps))
        self._ledger.add(self._steps, owed)
        return owed

    def _send_reset(self, indices: list[int], seeds: list, options: dict | None) -> None:
        self._sent = time.monotonic()
        self._send(lifecycle.Pending.RESET, ("reset", indices, seeds, options))

    def _receive_reset(self, indices: list[int]) -> list[dict]:  # The rest is in shared memory.
        infos, values = self._receive("reset", self.timeout, since=True)
        stepper.put_objects(self.buffers.obs, values)
        return infos

    def _send_request(self, method: str, *args: Any) -> None:
        """Asks the worker for `method(*args)` of its `EnvStepper`, answered pickled."""
        self._send(lifecycle.Pending.REQUEST, (method, *args))

    def _receive_request(self, command: str) -> Any:
        return self._receive(command, self.timeout)

    def _wait_answer(self) -> bytes:
        """The worker's byte: the step's results are in the buffers (`stepper.ANSWERS`)."""
        # A KeyboardInterrupt here retires the worker (`RemoteGroup.step_wait`).
        events = self._step_poller.poll(self._left(self.timeout))
        if self._answer in dict(events):
            answer = os.read(self._answer, 1)
            if answer:
                return answer
            events = [(self._process.sentinel, select.POLLIN)]  # End of file: it died.
        # An error from the env, the worker's death or silence: reported as for any command.
        self._receive("step", self.timeout, events)
        raise errors.EnvError(f"{self._describe()} answered a step out of turn", self.name)

    def _fetch(self, restarts: int, step: int, timeout: float | None = None) -> Any:
        """The encoded infos of `step` of the worker after `restarts` restarts, from it."""
        current = restarts == self.restarts
        if current:
            self._ledger.forget(step)
        kept = current and step > self._steps - infos_lib.KEPT_STEPS
        if current and self._pending is not lifecycle.Pending.NONE:
            raise errors.EnvError(
                f"cannot read the infos of step {step} of {self._describe()} while its "
                f"{self._pending.value} is in flight; collect it first",
                self.name,
                "infos",
            )
        if self._closed or self._broken is not None or not kept:
            raise errors.EnvError(
                f"the infos of step {step} of {self._describe()} were lost with its worker",
                self.name,
                "infos",
            )
        self._conn.send(("infos", step))
        return self._receive("infos", self.timeout if timeout is None else timeout)

    def _fetch_owed(self, keep_newest: int, timeout: float | None = None) -> None:
        """Fetches the owed infos that something still holds, but for the `keep_newest` last."""
        for step, owed in self._ledger.due(self._steps - keep_newest):
            if self._broken is None and self._process.is_alive():
                owed.fetch_now(functools.partial(self._fetch, self.restarts, step, timeout))

    # -- plumbing ---------------------------------------------------------------------------

    def _where(self) -> str:
        return f"worker pid {self.pid}"

    def _host_timeout(self) -> float | None:
        return self.timeout

    def _answered(self, timeout: float) -> bool:
        ends = [self._answer, self._conn, self._process.sentinel]
        return bool(multiprocessing.connection.wait(ends, timeout))

    def _send(self, pending: lifecycle.Pending, message: tuple) -> None:
        # On a broken pipe the call stays pending: the receive that follows reports the death.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
            self._conn.send(message)
        self._pending = pending

    def _receive(
        self, command: str, timeout: float | None, events: list | None = None, since: bool = False
    ) -> Any:
        """The worker's answer to `command` within `timeout` s, counted from its send if `since`."""
        try:
            return self._receive_answer(command, timeout, events, since)
        except (KeyboardInterrupt, SystemExit):
            # The answer may still arrive and would be read as the next one's: retire the worker.
            self._retire_interrupted(command)
            raise

    def _receive_answer(
        self, command: str, timeout: float | None, events: list | None, since: bool
    ) -> Any:
        if events is None:
            wait = self._left(timeout) if since else timeout
            events = self._poller.poll(wait)
        events = dict(events)
        if self._conn.fileno() in events:
            try:
                status, payload = self._conn.recv()
            except (EOFError, OSError):
                raise self._fail(self._died(command)) from None
            if status == "error":
                error_type, message, text, module, qualname, index = payload
                if error_type == errors.SpaceMismatchError.__name__:  # The batch's, not the env's.
                    raise errors.SpaceMismatchError(message)
                raise errors.raised(
                    f"{error_type}: {message} (raised by {self._describe(index)} during {command}"
                    f"{errors.rose_at(text)})"
                    f"\n\nTraceback in the worker:\n{text}",
                    self.name,
                    command,
                    error_type,
                    text,
                    errors.own_type(module, qualname),
                )
            return payload
        if events:
            raise self._fail(self._died(command))
        self._process.kill()
        self._process.join()
        advice = "raise the timeout" + self._advice(" or {restart}")
        if command in ("start", "attach"):  # A replacement would start as slowly.
            advice = (
                f"a worker gets {lifecycle.START_TIMEOUT:g} s to build its envs, or the "
                "timeout if longer: raise the timeout"
            )
        raise self._fail(
            errors.EnvTimeoutError(
                f"{self._describe()} did not answer {command} within {timeout} s and was killed; "
                + advice,
                self.name,
                command,
            )
        )

    def _died(self, command: str) -> errors.EnvCrashedError:
        self._process.join(lifecycle.CLOSE_TIMEOUT)
        code = self._process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            how = f"signal {signal.Signals(-code).name}"
        advice = self._advice("; {restart} to replace crashed workers")
        if command in ("start", "attach") and self.restarts == 0:  # Not retried: no other envs.
            advice = "; a batch's first start is not retried: restarts replace workers that ran"
        if command == "start" and code == 1 and self.restarts == 0 and lifecycle.main_runs_again():
            # An exception before the worker's own code ran: in the main script, run again.
            advice = f", before it built its envs (its error above): {lifecycle.MAIN_GUARD}"
        return errors.EnvCrashedError(
            f"{self._describe()} died ({how}) during {command}{advice}", self.name, command
        )

    def _replace_host(self, error: errors.EnvError) -> int:
        """Replaces the worker after `error`; returns the restarts so far, which seed its envs."""
        self.restarts += 1
        logger.warning("%s; restart %d of this worker", error, self.restarts)
        self._finalizer()
        self._ledger.forget()  # Their fetch now reports them lost with the worker.
        self._replace()
        return self.restarts

    def _replace(self) -> None:
        """Starts a new worker; one that dies while it starts is replaced in turn, a few times."""
        for tries_left in reversed(range(lifecycle.RESTART_TRIES)):
            try:
                self._start()
                return
            except errors.EnvCrashedError as error:
                if not tries_left:
                    ended = f"{lifecycle.RESTART_TRIES} replacements in a row died so"
                    raise errors.reworded(error, f"{error}: {ended}") from None
                self.restarts += 1
                logger.warning("%s; restart %d of this worker", error, self.restarts)
