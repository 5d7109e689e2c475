"""RemoteGroup: what a group whose envs run elsewhere keeps, whatever carries its messages.

A worker process (`process.ProcessGroup`) and a Ray actor (`ray.ray_group.RayGroup`)
host envs the same way: the parent keeps each env's seed, replaces a host that crashed or
hung when asked to (`restart`), reseeds its envs from (seed, env index, replacements),
and reports their cut episodes as truncated at the next step. This class holds that
algorithm once; a subclass supplies only its transport: how a step and a reset are
sent and received, how owed infos are fetched, and how a fresh host starts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from batchrl.envs.host import errors, lifecycle, obs_tree, stepper
from batchrl.envs.host import infos as infos_lib
from batchrl.envs.host.group import Step

_RESTART = "pass restart=True (restart_workers=true in training)"


# The envs a group's errors name (`_describe`: "(envs 4-7, worker pid 123)", "(env 5, ..."):
# their first and last, for a caller that names them otherwise (a together-run's seeds).
DESCRIBED_ENVS = re.compile(r"\((envs? )(\d+)(?:-(\d+))?, ")


class RemoteGroup:
    """The bookkeeping of envs hosted elsewhere; subclasses carry the messages.

    Subclasses (`ProcessGroup`, `RayGroup`) set `name`, `first_index`, `num_envs` and
    `restart`, call `_init_remote`, say `_where` the envs run, and note when they send a
    step or reset (`_sent`, for `_left`); the checks before each call (`_expect_idle`,
    `_expect_pending`) are made here.
    """

    name: str
    first_index: int
    num_envs: int
    restart: bool
    buffers: stepper.Buffers
    _steps: int
    _closed: bool
    _broken: str | None
    _pending: lifecycle.Pending
    _sent: float  # time.monotonic() when the step or reset in flight was sent.
    _asked: str  # The request `ask` sent, as errors name it.

    def _where(self) -> str:
        raise NotImplementedError

    def _describe(self, index: int | None = None) -> str:  # What `DESCRIBED_ENVS` reads back.
        """The group's envs, or its env at `index` (an error's, `errors.env_index`), and where."""
        last = self.first_index + self.num_envs - 1
        envs = f"envs {self.first_index}-{last}"
        if self.num_envs == 1 or (index is not None and 0 <= index < self.num_envs):
            envs = f"env {self.first_index + (index or 0)}"
        return f"env {self.name} ({envs}, {self._where()})"

    def _expect_idle(self, command: str) -> None:
        if self._closed:
            raise errors.EnvError(f"{self._describe()} is closed; cannot {command}", self.name)
        if self._broken is not None:
            raise errors.EnvError(
                f"{self._describe()} is unusable after: {self._broken}", self.name, command
            )
        if self._pending is not lifecycle.Pending.NONE:
            raise errors.EnvError(
                f"cannot {command} {self._describe()}: its {self._pending.value} is still in "
                f"flight; collect it first",
                self.name,
                command,
            )

    def _expect_pending(self, pending: lifecycle.Pending) -> None:
        if self._pending is not pending:
            raise errors.EnvError(f"no {pending.value} in flight for {self._describe()}", self.name)

    def _left(self, timeout: float | None) -> float | None:
        """Seconds left of `timeout` counted from when the step or reset in flight was sent.

        A batch sends every host its call before it waits for any: counted from each
        wait's start, k hung hosts would hold it for k timeouts, not one.
        """
        if timeout is None:
            return None
        return max(0.0, self._sent + timeout - time.monotonic())

    def ready(self, timeout: float) -> bool:
        """Whether the host answered the step or reset in flight within `timeout` s.

        Reads nothing. True too once the host's own timeout has run out: the wait that
        follows then reports the hang as it always does.
        """
        if self._pending is lifecycle.Pending.NONE:
            return True
        left = self._left(self._host_timeout())
        if left is not None and left <= timeout:  # The host's own deadline comes first.
            self._answered(left)
            return True
        return self._answered(timeout)

    def _init_remote(self, num_envs: int) -> None:
        self._seeds: list[int | None] = [None] * num_envs
        self._fresh = np.zeros(num_envs, bool)  # Replaced without a step to report it.
        self._any_fresh = False  # self._fresh.any(), kept off the per-step path.
        self._pending = lifecycle.Pending.NONE
        self._pending_reset: tuple | None = None
        self._broken: str | None = None
        self._left_dead: errors.EnvError | None = None  # Raised; its host not yet replaced.
        self._interrupted: str | None = None  # What cut its call off: a reset replaces it.
        self._closed = False

    # -- the transport, supplied by subclasses ----------------------------------------------

    def _send_step(self, actions: np.ndarray, autoreset: AutoresetMode, read: bool) -> None:
        """Sends the host its actions and asks for a step."""
        raise NotImplementedError

    def _host_timeout(self) -> float | None:
        """Seconds the host has to answer a step or reset, counted from its send."""
        raise NotImplementedError

    def _answered(self, timeout: float) -> bool:
        """Whether the host's answer (or its error, or its end) came within `timeout` s."""
        raise NotImplementedError

    def _receive_step(self) -> Any:
        """Writes the step's results into `buffers`; returns its infos (owed by the host)."""
        raise NotImplementedError

    def _send_reset(self, indices: list[int], seeds: list, options: dict | None) -> None:
        """Asks the host to reset the envs at `indices`."""
        raise NotImplementedError

    def _receive_reset(self, indices: list[int]) -> list[dict]:
        """Writes the reset envs' obs into `buffers`; returns their infos."""
        raise NotImplementedError

    def _replace_host(self, error: errors.EnvError) -> int:
        """Starts a fresh host after `error`; returns the replacement count that seeds it."""
        raise NotImplementedError

    def _fetch_owed(self, keep_newest: int) -> None:
        """Fetches the infos the host owes that something still holds, but the newest."""
        raise NotImplementedError

    def _send_request(self, method: str, *args: Any) -> None:
        """Asks the host to run its group's `method(*args)` (one of `forwarding.COMMANDS`)."""
        raise NotImplementedError

    def _receive_request(self, command: str) -> Any:
        """The host's answer to the request in flight; `command` names it in errors."""
        raise NotImplementedError

    def _call_done(self) -> None:
        """Forgets the call in flight, collected or failed."""
        self._pending = lifecycle.Pending.NONE

    # -- the group interface ----------------------------------------------------------------

    def step_async(
        self,
        actions: np.ndarray,
        autoreset: AutoresetMode = AutoresetMode.DISABLED,
        read_infos: bool = False,
    ) -> None:
        """Sends every env its action [k, ...]; `step_wait` collects the results."""
        self._expect_idle("step")
        # The host keeps the infos of its last KEPT_STEPS steps: fetch those it is about to
        # drop while something still holds them.
        self._fetch_owed(keep_newest=infos_lib.KEPT_STEPS - 1)
        self._send_step(actions, autoreset, read_infos)  # Counted once sent: it may refuse.
        self._steps += 1
        self._pending = lifecycle.Pending.STEP

    def step_wait(self) -> Step:
        """Results of the step in flight: obs, reward, terminated, truncated as views, and infos."""
        self._expect_pending(lifecycle.Pending.STEP)
        try:
            infos = self._receive_step()
        except (errors.EnvCrashedError, errors.EnvTimeoutError) as error:
            if not self.restart:
                raise
            infos = self._recover(error)
        except (KeyboardInterrupt, SystemExit):
            if self._interrupted is None:  # Cut anywhere in the wait: its answer comes late.
                self._retire_interrupted("step")
            raise
        finally:
            self._call_done()
        buffers = self.buffers
        if self._any_fresh:
            infos = _report_restarted(buffers, self._fresh, infos)
            self._any_fresh = False
        return buffers.obs, buffers.reward, buffers.terminated, buffers.truncated, infos

    def reset_async(
        self, indices: Sequence[int], seeds: Sequence[int | None], options: dict | None
    ) -> None:
        """Resets envs at `indices` (positions in this group) with `seeds`, kept for restarts."""
        if self._interrupted is not None and not self._closed:
            self._replace_interrupted()
        self._expect_idle("reset")
        indices, seeds = [int(i) for i in indices], list(seeds)
        for index, seed in zip(indices, seeds, strict=True):
            if seed is not None:
                self._seeds[index] = seed
        self._pending_reset = (indices, seeds, options)
        self._send_reset(indices, seeds, options)
        self._pending = lifecycle.Pending.RESET

    def reset_wait(self) -> tuple[Any, list[dict]]:
        """Observations (a tree of [len(indices), ...]) of the reset in flight, their infos."""
        self._expect_pending(lifecycle.Pending.RESET)
        indices, seeds, options = self._pending_reset
        try:
            infos = self._receive_reset(indices)
        except (errors.EnvCrashedError, errors.EnvTimeoutError) as error:
            if not self.restart:
                raise
            self._recover(error)
            self._send_reset(indices, seeds, options)
            infos = self._receive_reset(indices)
        except (KeyboardInterrupt, SystemExit):
            if self._interrupted is None:  # Cut anywhere in the wait: its answer comes late.
                self._retire_interrupted("reset")
            raise
        finally:
            self._call_done()
        self._fresh[indices] = False
        self._any_fresh = bool(self._fresh.any())
        return obs_tree.take(self.buffers.obs, indices), infos

    def ask(self, method: str, index: int, *args: Any) -> None:
        """Sends env `index`'s `method` to the host; `answer` collects its result.

        `method` is one of `forwarding.COMMANDS`, `args` what it takes after the index. A
        batch asks every host before it waits for any: their envs answer at once.
        """
        command = f"{method} {args[0]}" if method in ("call", "set_attr") else method
        self._expect_idle(command)
        self._send_request(method, index, *args)
        self._pending, self._asked = lifecycle.Pending.REQUEST, command

    def answer(self) -> Any:
        """The result of the request `ask` sent."""
        self._expect_pending(lifecycle.Pending.REQUEST)
        try:
            return self._receive_request(self._asked)
        except (KeyboardInterrupt, SystemExit):
            if self._interrupted is None:  # Its answer would be read as the next call's.
                self._retire_interrupted(self._asked)
            raise
        finally:
            self._call_done()

    def _request(self, method: str, index: int, *args: Any) -> Any:
        """The host's answer to env `index`'s `method`, as `ask` sends it."""
        self.ask(method, index, *args)
        return self.answer()

    def attribute(self, index: int, name: str) -> Any:
        """The attribute `name` of env `index`, from its host."""
        return self._request("attribute", index, name)

    def call(self, index: int, name: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Calls method `name` of env `index` in its host and returns its result."""
        return self._request("call", index, name, args, kwargs or {})

    def set_attr(self, index: int, name: str, value: Any) -> None:
        """Sets the attribute `name` of env `index` in its host."""
        self._request("set_attr", index, name, value)

    def is_wrapped(self, index: int, wrapper_class: type) -> bool:
        """Whether env `index` is wrapped by a `wrapper_class` at any depth."""
        return self._request("is_wrapped", index, wrapper_class)

    # -- failures ---------------------------------------------------------------------------

    def _advice(self, advice: str) -> str:
        """`advice` on restart=True for an error that ends the batch; none where it replaces.

        Its wording names the setting both ways it is given: the env's and the run's.
        """
        return "" if self.restart else advice.format(restart=_RESTART)

    def _retire_interrupted(self, command: str, why: str | None = None) -> None:
        """Retires the host after a KeyboardInterrupt in the wait for `command`'s answer.

        Its answer may still come, and would be read as the next call's: the host is done
        with, and the batch's next reset replaces it (Ctrl-C in a notebook's loop over
        `step`, then `reset`, as on a `SyncVectorEnv`); other calls are refused till then.
        `why`: what else cut the call off, in words.
        """
        self._interrupted = why or f"interrupted while waiting for {command}"
        self._broken = f"{self._interrupted} (a reset replaces it)"
        self._end_busy_host()

    def _end_busy_host(self) -> None:
        """Ends a host busy with a call whose answer is not to be read: at once, where it can."""
        self._finalizer()

    def abandon(self, why: str | None = None) -> None:
        """Leaves the call in flight unanswered, as a KeyboardInterrupt in its wait would.

        `why`, with `{call}` for the call's name, says what else left it (`fan_out.abandon`).
        """
        if self._pending is not lifecycle.Pending.NONE:
            request = self._pending is lifecycle.Pending.REQUEST
            call = self._asked if request else self._pending.value
            self._retire_interrupted(call, why and why.format(call=call))
            self._call_done()

    def _replace_interrupted(self) -> None:
        """A new host for one `_retire_interrupted` retired; its envs' seeds are the reset's."""
        cut = f"{self._describe()} was {self._interrupted}"
        self._replace_host(errors.EnvError(f"{cut}, and is replaced for the reset", self.name))
        self._broken, self._interrupted, self._left_dead = None, None, None

    def _fail(self, error: errors.EnvError) -> errors.EnvError:
        """`error`, after retiring the host for good unless it is to be replaced.

        A host to be replaced is, at its next call, which finds it gone: that call's
        log names this failure, not a death during itself.
        """
        if not self.restart:
            self._broken = str(error).splitlines()[0]
            self._finalizer()
        elif self._left_dead is None:
            self._left_dead = error
        return error

    def _recover(self, error: errors.EnvError) -> list[dict]:
        """Replaces the host after `error`; its envs begin fresh episodes, ended as truncated."""
        earlier, self._left_dead = self._left_dead, None
        if earlier is not None and earlier is not error:  # Gone since a call that raised.
            said = str(earlier).splitlines()[0]
            error = errors.EnvError(f"{said} (an earlier call's error)", self.name)
        count = self._replace_host(error)
        indices = list(range(self.num_envs))
        seeds = [
            lifecycle.restart_seed(self._seeds[i], self.first_index + i, count) for i in indices
        ]
        self._send_reset(indices, seeds, None)
        infos = self._receive_reset(indices)
        self._fresh[:] = True
        self._any_fresh = True
        return infos


def _report_restarted(buffers: stepper.Buffers, fresh: np.ndarray, infos: Any) -> list[dict]:
    """Infos where envs restarted since their last step (`fresh`, then cleared) report it.

    Their step reads truncated with zero reward, and `info["restarted"]` is True.
    """
    infos = list(infos_lib.Infos([infos], [len(fresh)]))
    buffers.reward[fresh] = 0.0
    buffers.terminated[fresh] = False
    buffers.truncated[fresh] = True
    for i in np.flatnonzero(fresh):
        infos[i] = {**infos[i], "restarted": True}
    fresh[:] = False
    return infos
