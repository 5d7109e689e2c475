"""Keep XLA's CPU thread pool from competing with env workers for the machine's cores.

By default XLA runs compiled CPU code on a pool of threads that spin while they wait.
When a compiled rollout drives env worker processes, those threads took cores from the
workers; with one XLA thread simulate's overhead per batch step beyond env work and
policy nearly vanished (32 HalfCheetah-v5 envs: from 421 us to about zero). JAX 0.10.2's
XLA no longer heeds the flag where it was measured: its dots run on both cores of a
2-core machine either way, and PPO on 8 envs of the MuJoCo batch or 32 in worker
processes trains as fast with it as without (2026-12-01, two runs each, within 3 %).
It stays, for the XLA versions that read it. Call `limit()` before JAX first computes anything.
"""

from __future__ import annotations

import logging
import os

FLAGS = "--xla_cpu_multi_thread_eigen=false"

logger = logging.getLogger("batchrl.envs")


def limit() -> bool:
    """Makes XLA's CPU backend use one thread; returns False if JAX is already running."""
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - layout of other JAX versions
        xla_bridge = None
    if xla_bridge is not None and xla_bridge.backends_are_initialized():
        logger.warning(
            "XLA's thread pool is already running; set XLA_FLAGS='%s' before JAX starts "
            "to keep it from competing with env workers",
            FLAGS,
        )
        return False
    current = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in current:
        os.environ["XLA_FLAGS"] = f"{current} {FLAGS}".strip()
    return True
