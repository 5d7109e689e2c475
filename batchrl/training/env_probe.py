"""The one env a run builds in this process to read its spaces: what else it tells, its close.

Its own step limit (which `environments.check_run` holds `max_length` to), the
Gymnasium normalisers in its wrappers that batchrl would repeat, and a close that may
raise or hang, which is said and passed as a worker's is.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import gymnasium as gym

from batchrl.configs import TrainConfig

logger = logging.getLogger("batchrl.training")
# Gymnasium's normalising wrappers, by the setting that has batchrl normalise the same.
_NORMALISERS = {
    "NormalizeObservation": "normalize_observations",
    "NormalizeReward": "normalize_rewards",
}


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
