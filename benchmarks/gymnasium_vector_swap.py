"""A pytest plugin: Gymnasium's own vector tests with `BatchEnv` in `AsyncVectorEnv`'s place.

Loaded by `benchmarks/gymnasium_vector_tests.py` (`pytest -p`), never by batchrl's own
suite. `AsyncVectorEnv(env_fns, ...)` builds `BatchEnv.external(env_fns,
max_concurrency=...)`, a worker per env unless Gymnasium 1.4's `max_concurrency` caps
them, with the autoreset and observation modes given, as a user who swaps the class
would; AsyncVectorEnv's own knobs (shared memory, copy, daemon, custom worker) have no
counterpart and are ignored.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import gymnasium.vector
import gymnasium.vector.async_vector_env
from gymnasium.vector import AutoresetMode

from batchrl.envs import BatchEnv


class BatchEnvInAsyncsPlace(BatchEnv):
    """`AsyncVectorEnv`'s constructor over a `BatchEnv` of one worker per env."""

    def __init__(
        self,
        env_fns: Any,
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Any = None,
        observation_mode: Any = "same",
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        max_concurrency: int | None = None,
    ):
        del shared_memory, copy, daemon, worker  # No counterpart.
        options = {"context": context} if context else {}
        env_fns = list(env_fns)
        built = BatchEnv.external(  # A worker for each env, as AsyncVectorEnv starts them.
            env_fns,
            max_concurrency=len(env_fns) if max_concurrency is None else max_concurrency,
            autoreset_mode=autoreset_mode,
            observation_mode=observation_mode,
            **options,
        )
        built.closed = True  # Its groups are this batch's now; it must not close them.
        super().__init__(
            built.groups, autoreset_mode=autoreset_mode, observation_mode=observation_mode
        )


def pytest_configure(config: Any) -> None:
    """Puts the swap in place before Gymnasium's test modules import the class."""
    del config
    gymnasium.vector.AsyncVectorEnv = BatchEnvInAsyncsPlace
    gymnasium.vector.async_vector_env.AsyncVectorEnv = BatchEnvInAsyncsPlace
