"""The one env a run builds in this process to read its spaces: what else it tells, its close.

Its build, which may hang, under a worker's start timeout; its own step limit (which
`environments.check_run` holds `max_length` to), the Gymnasium normalisers in its
wrappers that batchrl would repeat, and a close that may raise or hang, which is said
and passed as a worker's is.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

import gymnasium as gym

from batchrl.configs import TrainConfig

logger = logging.getLogger("batchrl.training")
# Gymnasium's normalising wrappers, by the setting that has batchrl normalise the same.
_NORMALISERS = {
    "NormalizeObservation": "normalize_observations",
    "NormalizeReward": "normalize_rewards",
}


# Seconds a build runs before it is said to be running still, in a line of its own.
SAY_AFTER = 10.0


class BuildTimeoutError(Exception):
    """The env's constructor did not return within the start timeout; says so in one line."""


@contextlib.contextmanager
def build_limit(name: str, timeout: float | None) -> Iterator[None]:
    """Ends a build of env `name` in this process that runs past `timeout` s: BuildTimeoutError.

    A worker gets as long to build its envs; a constructor that waited for a server that
    never came hung the train command silently, before it printed anything. After
    `SAY_AFTER` s a line says what it waits for. SIGALRM interrupts sleeps and waits on
    sockets, not C code that never returns to Python; only the main thread takes
    signals, and a handler of the user's own is left alone: there the build may wait on.
    """
    usable = threading.current_thread() is threading.main_thread()
    if not usable or timeout is None or signal.getsignal(signal.SIGALRM) != signal.SIG_DFL:
        yield
        return
    said = timeout <= SAY_AFTER  # The first alarm says it, the next ends the build.

    def alarm(signum: int, frame: Any) -> None:
        nonlocal said
        if said:
            raise BuildTimeoutError(
                f"env {name!r} did not return from its constructor within {timeout:g} s, built "
                "in this process to read its spaces as a worker would: a larger "
                "worker_timeout gives both longer"
            )
        said = True
        logger.warning(
            "env %r has not returned from its constructor after %g s (built in this process "
            "to read its spaces); waiting up to %g s",
            name,
            SAY_AFTER,
            timeout,
        )

    signal.signal(signal.SIGALRM, alarm)
    first = min(SAY_AFTER, timeout)
    signal.setitimer(signal.ITIMER_REAL, first, max(timeout - first, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def own_limit(one: gym.Env) -> int | None:
    """The smallest step limit among the `TimeLimit`s of a built env's wrappers, if any.

    An id's registered one, or one a constructor put there (`gym.make(..., max_episode_steps=50)`
    returned from a function); the env is built without the one `max_length` adds.
    """
    limits = []
    while isinstance(one, gym.Wrapper):
        if isinstance(one, gym.wrappers.TimeLimit):
            limits.append(one._max_episode_steps)  # Its own; `spec` gives the outermost only.
        one = one.env
    return min(limits, default=None)


def say_normalised_twice(config: TrainConfig, one: Any, name: str) -> None:
    """A warning for each Gymnasium normaliser in the env's wrappers that batchrl repeats.

    The learner normalises inside the compiled program; a `NormalizeReward` of the
    user's made the returns reported its normalised ones, and both learned on twice.
    """
    while isinstance(one, gym.Wrapper):
        setting = _NORMALISERS.get(type(one).__name__)
        if setting is not None and getattr(config.algorithm, setting, False):
            logger.warning(
                "env %r is wrapped in %s and %s=true normalises again: set %s=false or drop "
                "the wrapper",
                name,
                type(one).__name__,
                setting,
                setting,
            )
        one = one.env


def close(one: Any, name: str, timeout: float) -> None:
    """Closes the env built to read its spaces; one that raises or hangs is said, not fatal.

    Its `close` raised with a traceback before any training, or hung the command for
    good, where the same `close` in a worker is one the run goes on past.
    """
    failed: list[BaseException] = []

    def call() -> None:
        try:
            one.close()
        except Exception as error:  # Said below, as a worker's close is passed.
            failed.append(error)

    closing = threading.Thread(target=call, name="batchrl-env-close", daemon=True)
    closing.start()
    closing.join(timeout)
    if closing.is_alive():
        logger.warning("env %r did not return from close() within %s s; left open", name, timeout)
    elif failed:
        error = failed[0]
        logger.warning("env %r raised %s in close(): %s", name, type(error).__name__, error)
