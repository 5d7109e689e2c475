"""The environment side: worker processes, batches, wrappers, and test envs."""

from batchrl.envs.batch import BatchEnv
from batchrl.envs.errors import EnvCrashedError, EnvError, EnvRaisedError, EnvTimeoutError
from batchrl.envs.external import ExternalProcess
from batchrl.envs.spec import UnsupportedSpaceError

__all__ = [
    "BatchEnv",
    "EnvCrashedError",
    "EnvError",
    "EnvRaisedError",
    "EnvTimeoutError",
    "ExternalProcess",
    "UnsupportedSpaceError",
]
