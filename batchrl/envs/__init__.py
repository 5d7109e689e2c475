"""The environment side: Gymnasium envs on the host (`host/`) and JAX-native envs (`jax/`).

The public face: `from batchrl.envs import BatchEnv, ExternalProcess` and the env
errors. It imports only the host side, `BatchEnv`'s builders and the MuJoCo batch, so a
worker process never imports JAX.
"""

from batchrl.envs.builders import BatchEnv
from batchrl.envs.host.errors import EnvCrashedError, EnvError, EnvRaisedError, EnvTimeoutError
from batchrl.envs.host.external import ExternalProcess
from batchrl.envs.spaces import UnsupportedSpaceError

__all__ = [
    "BatchEnv",
    "EnvCrashedError",
    "EnvError",
    "EnvRaisedError",
    "EnvTimeoutError",
    "ExternalProcess",
    "UnsupportedSpaceError",
]
