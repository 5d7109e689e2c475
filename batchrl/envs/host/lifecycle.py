"""The parent's bookkeeping of a worker's life: name, busy state, checks, restart seeds, end."""

from __future__ import annotations

import ast
import enum
import functools
import multiprocessing
import os
import pathlib
import sys
from collections.abc import Callable
from multiprocessing import connection
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

from batchrl.envs.host import fork_server

DEFAULT_TIMEOUT = 60.0  # Seconds without an answer before a worker counts as hung.
# Workers fork from a fork server that imported what every worker needs once: a worker
# then starts far faster than a fresh interpreter ("spawn": two HalfCheetah-v5 workers
# start and reset in 0.06-0.07 s once the server runs, against 3.3-4.2 s).
# The server is a fresh interpreter too, without JAX, so forking from it is safe.
DEFAULT_CONTEXT = "forkserver"
CONTEXTS = ("forkserver", "spawn")  # Never plain fork: unsafe beside JAX's threads.
# Imported once by the fork server; a module that is not installed is skipped.
# `fork_server` keeps the server alive through a SIGTERM meant for the parent, and
# imports Gymnasium's MuJoCo envs where they load.
PRELOAD = ["batchrl.envs.host.fork_server", "batchrl.envs.host.worker"]
# The main script of a Ray worker process (a rollout actor, an env actor).
_RAY_WORKER_FILE = os.path.join("ray", "_private", "workers", "default_worker.py")
# Packages that start no thread as they are imported: the fork server imports them where a
# user's main script does, for the workers that run the script again.
_QUIET_PACKAGES = frozenset({"batchrl", "flax", "gymnasium", "jax", "numpy", "optax", "ray"})
# Seconds a worker keeps polling for the next command, and the parent for an answer,
# before it blocks: polling first beats blocking at once (32 HalfCheetah-v5 on 2 cores:
# 34.7k env-steps/s against 30.1k); polling yields the core, so a process that has work
# on the same core is not starved.
DEFAULT_SPIN = 0.002
START_TIMEOUT = 120.0  # Seconds a worker gets to build its envs, or its timeout if longer.
CLOSE_TIMEOUT = 1.0  # Seconds a worker gets to end once it is told to, at exit or GC.
# What a worker that died running the main script again is told, and its parent.
MAIN_GUARD = (
    "worker processes run the main script again as they start (Python's multiprocessing), "
    'so the code that builds envs or trains must sit under `if __name__ == "__main__":`'
)
# Replacements of a crashed worker tried in a row when each one dies while it starts.
RESTART_TRIES = 3


def context(name: str | None) -> multiprocessing.context.BaseContext:
    """The start method `name` (None: the default, as `AsyncVectorEnv` reads it).

    A fork server is told to preload what workers import.
    """
    name = DEFAULT_CONTEXT if name is None else name
    if name not in CONTEXTS:
        raise ValueError(
            f"unknown start method {name!r}: use one of {CONTEXTS} (plain fork is unsafe once "
            f"JAX's threads run)"
        )
    check_not_a_workers_start()
    _check_main_runs_again()
    method = multiprocessing.get_context(name)
    if name == "forkserver":
        # Used when the server starts, if not yet; started here, it dies with this process.
        method.set_forkserver_preload([*PRELOAD, *main_imports()])
        fork_server.start_tied()
    return method


def check_not_a_workers_start() -> None:
    """Exits, said in one line, where this process is a worker running the main script again.

    A worker runs the main script before its envs: one that builds worker envs at its top
    level, not under `if __name__ == "__main__":`, would start workers from every worker
    as it starts, which Python refuses in a paragraph on "bootstrapping" instead. Said in
    one line, not a traceback from every worker: the parent's error names the cause too.
    `batchrl.train` and `resume` ask first: a JAX-native run above the guard trained whole
    in every worker, and left its folder there.
    """
    # multiprocessing's own mark of a process that runs its parent's main module again.
    if getattr(multiprocessing.process.current_process(), "_inheriting", False):
        print(f"RuntimeError: {MAIN_GUARD}", file=sys.stderr, flush=True)
        raise SystemExit(1)  # A fork server's child prints no SystemExit's message.


def main_runs_again() -> bool:
    """Whether workers run the main module again as they start: a script's, or `-m`'s."""
    return getattr(sys.modules.get("__main__"), "__file__", None) is not None


def _check_main_runs_again() -> None:
    """A one-line ValueError where a worker could not run the main script again.

    multiprocessing runs it again in every worker, from its file; a script read from
    standard input (`python - < script.py`) has none, and each worker died at its start
    with a FileNotFoundError.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or getattr(getattr(main, "__spec__", None), "name", None):
        return  # Interactive, or `python -m`: run again by name, or not at all.
    if not os.path.isabs(path) and multiprocessing.process.ORIGINAL_DIR is not None:
        path = os.path.join(multiprocessing.process.ORIGINAL_DIR, path)
    if not os.path.isfile(path):
        raise ValueError(
            f"worker processes run the main script again (Python's multiprocessing), but it "
            f"has no file ({main.__file__!r}): run it from a file, or step the envs in this "
            "process (local_envs equal to num_envs)"
        )


def main_imports() -> list[str]:
    """What the parent's main module imports, for the fork server to import for workers.

    multiprocessing runs the parent's main module again in every worker it starts, so
    that what the main script defines unpickles there. Under batchrl's commands (`python
    -m batchrl.scripts.train`) that module imports JAX: each worker spent 0.6-1.3 s of CPU
    on it, and the pendulum preset's workers held 173 MB each against 96 MB. In a Ray
    actor it is Ray's worker script (0.8 s a worker). Imported by the fork server before
    it forks, the modules the main module imports (its top-level imports, read from its
    source) are there when the worker runs it. Of a user's script, only the packages in
    `_QUIET_PACKAGES`: its own modules may start JAX's threads as they are imported (an
    array made at import), after which forking is unsafe.
    """
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    path = getattr(main, "__file__", None) or ""
    imported = _top_level_imports(path)
    if name.startswith("batchrl.") or path.endswith(_RAY_WORKER_FILE):
        return list(imported)
    return [module for module in imported if module.split(".")[0] in _QUIET_PACKAGES]


@functools.cache
def _top_level_imports(path: str) -> tuple[str, ...]:
    """The modules the source at `path` imports at its top level; read once a process."""
    try:
        statements = ast.parse(pathlib.Path(path).read_text()).body
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):  # No source to read.
        return ()
    imported = []
    for statement in statements:
        if isinstance(statement, ast.Import):
            imported += [alias.name for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and not statement.level:
            # A name that is not a module is skipped by the server, as any ImportError.
            names = [f"{statement.module}.{alias.name}" for alias in statement.names]
            imported += [statement.module, *names]
    return tuple(imported)


class Pending(enum.Enum):
    """What a worker is busy with, as Gymnasium's AsyncState: nothing, or one call."""

    NONE = "nothing"
    STEP = "step"
    RESET = "reset"
    REQUEST = "request"  # An attribute or a method call, answered before it returns.


def restart_seed(seed: int | None, index: int, restarts: int) -> int:
    """The seed of env `index` after its worker's `restarts`-th restart: fixed by all three."""
    entropy = [0 if seed is None else seed, index, restarts]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def start_timeout(timeout: float | None) -> float | None:
    """Seconds a worker of `timeout` gets to start: `START_TIMEOUT` or more (None: no limit)."""
    return None if timeout is None else max(START_TIMEOUT, timeout)


def constructor_name(constructor: Callable[[], gym.Env]) -> str:
    """A readable name for the envs a constructor builds, before any is built."""
    name = getattr(constructor, "name", None)  # envs.make.Make
    if isinstance(name, str):
        return repr(name)
    function = getattr(constructor, "func", constructor)  # functools.partial
    return f"from {getattr(function, '__qualname__', type(function).__name__)}"


def terminate(
    process: multiprocessing.Process,
    conn: connection.Connection,
    doorbells: tuple[connection.Connection, ...],
) -> None:
    """Ends a worker: a polite close, then SIGKILL. Safe to call at any time, once."""
    try:
        if process.is_alive():
            conn.send(("close",))
            process.join(CLOSE_TIMEOUT)
    except (OSError, ValueError):
        pass
    if process.is_alive():
        process.kill()
    process.join()
    conn.close()
    for doorbell in doorbells:
        doorbell.close()


def pickled(
    constructors: list[Any], observation_mode: Any, first_index: int, to: str = "a worker process"
) -> bytes:
    """The worker's constructors, mode and first env's place, cloudpickled, sent `to` a worker.

    Raises:
        TypeError: one line naming the env whose constructor cannot be pickled (a lock or
            an open file among what it holds), found constructor by constructor.
    """
    try:
        return cloudpickle.dumps((constructors, observation_mode, first_index))
    except Exception:
        pass
    for index, constructor in enumerate(constructors):
        try:
            cloudpickle.dumps(constructor)
        except Exception as error:
            name = constructor_name(constructor)
            here = ", or step it in this process (local_envs)" if "worker" in to else ""
            raise TypeError(
                f"env {first_index + index}'s constructor {name} cannot be sent to {to} "
                f"({type(error).__name__}: {error}): build what it holds inside it{here}"
            ) from None
    return cloudpickle.dumps((constructors, observation_mode))  # The mode's own error.
