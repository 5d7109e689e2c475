"""The environment side: Gymnasium envs on the host (`host/`) and JAX-native envs (`jax/`).

The public face: `from batchrl.envs import BatchEnv, ExternalProcess` and the env
errors. `classic`, `jax_env`, `gymnax_env`, `bridge`, `xla_threads` and `sb3` are
reachable from here too, imported when first asked for, so that a worker process, which imports
only the host side, never imports JAX.
"""

import importlib
from typing import Any

from batchrl.envs.host.batch import BatchEnv
from batchrl.envs.host.errors import EnvCrashedError, EnvError, EnvRaisedError, EnvTimeoutError
from batchrl.envs.host.external import ExternalProcess
from batchrl.envs.host.spec import UnsupportedSpaceError

_ON_FIRST_USE = {
    "classic": "batchrl.envs.jax.classic",
    "jax_env": "batchrl.envs.jax.jax_env",
    "gymnax_env": "batchrl.envs.jax.gymnax_env",
    "bridge": "batchrl.bridge",
    "xla_threads": "batchrl.bridge.xla_threads",
    "sb3": "batchrl.envs.host.sb3",  # Imports Stable-Baselines3 and torch.
}


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return importlib.import_module(_ON_FIRST_USE[name])
    raise AttributeError(f"module 'batchrl.envs' has no attribute {name!r}")


__all__ = [
    "BatchEnv",
    "EnvCrashedError",
    "EnvError",
    "EnvRaisedError",
    "EnvTimeoutError",
    "ExternalProcess",
    "UnsupportedSpaceError",
]
