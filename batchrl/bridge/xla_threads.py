"""Keep XLA's CPU thread pool from competing with env workers for the machine's cores.

By default XLA runs compiled CPU code on a pool of threads that spin while they wait.
When a compiled rollout drives env worker processes, those threads took cores from the
workers; with one XLA thread simulate's overhead per batch step beyond env work and
policy nearly vanished (32 HalfCheetah-v5 envs: from 421 us to about zero). JAX 0.10.2's
XLA no longer heeds the flag where it was measured: its dots run on both cores of a
2-core machine either way, and PPO on 8 envs of the MuJoCo batch or 32 in worker
processes trains as fast with it as without (2026-12-01, two runs each, within 3 %).
It stays, for the XLA versions that read it. Call `limit()` before JAX first computes anything.

`keep_to(k)` is the other way to leave cores to the envs: XLA makes its thread pool as its
backend starts, sized by the cores the starting thread may run on, and its threads keep
those cores. Started on k cores, the learner's compiled code runs on those alone.
"""

from __future__ import annotations

import logging
import os

FLAGS = "--xla_cpu_multi_thread_eigen=false"

logger = logging.getLogger("batchrl.envs")

_kept: frozenset[int] = frozenset()  # The cores `keep_to` started XLA's threads on.


def running() -> bool:
    """Whether JAX's backends have started (and XLA's thread pool with them)."""
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - layout of other JAX versions
        return False
    return xla_bridge.backends_are_initialized()


def keep_to(cores: int) -> bool:
    """Starts JAX's backends with XLA's threads on the first `cores` cores this process has.

    The calling thread gets every core back after, so what it starts later (env workers,
    a local Ray) runs on all of them. Returns False, with a warning, if JAX is already
    running on other cores; a ValueError for more cores than the process has, or where
    the system cannot pin threads.
    """
    global _kept  # One pool a process, made once.
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError(f"learner_cores={cores} needs os.sched_setaffinity (Linux); use 0")
    allowed = os.sched_getaffinity(0)
    if cores > len(allowed):  # Which would keep nothing from the envs, unsaid; JAX running or not.
        raise ValueError(
            f"learner_cores={cores}, but this process may run on {len(allowed)} cores: "
            f"use at most {len(allowed)}, or 0 for every core"
        )
    if running():
        if cores == len(_kept):
            return True
        logger.warning(
            "JAX is already running; learner_cores=%d keeps its threads to their cores "
            "only where it is set before JAX starts",
            cores,
        )
        return False
    kept = frozenset(sorted(allowed)[:cores])
    os.sched_setaffinity(0, kept)
    try:
        import jax

        jax.devices()  # Starts every backend: XLA's threads take the cores of this thread.
    finally:
        os.sched_setaffinity(0, allowed)
    _kept = kept
    return True


def pin_thread() -> set[int]:
    """Puts the calling thread on the cores `keep_to` kept XLA's threads to.

    For a learner whose Python thread works too (joining rollout actors' segments), once
    what it starts to act has started. Returns the cores the thread had, to give back with
    `os.sched_setaffinity(0, cores)`; an empty set, changing nothing, where none are kept.
    """
    if not _kept:
        return set()
    had = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _kept)
    return had


def limit() -> bool:
    """Makes XLA's CPU backend use one thread; False if JAX already runs without the flag.

    A flag of the user's own (`--xla_cpu_multi_thread_eigen=true`) is kept, and is no
    cause to warn: it was set before JAX started, as is this one once set.
    """
    current = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" in current:
        return True
    if running():
        logger.warning(
            "XLA's thread pool is already running; set XLA_FLAGS='%s' before JAX starts "
            "to keep it from competing with env workers",
            FLAGS,
        )
        return False
    os.environ["XLA_FLAGS"] = f"{current} {FLAGS}".strip()
    return True
