"""A main module as batchrl's commands are: it imports what `train` does, then starts a worker.

`python -m batchrl.testing.worker_start` prints the CPU seconds the worker had spent
when its env was built (`mock.StartCostEnv`), which includes its run of this module.
"""

import batchrl.training.api  # noqa: F401  What the train command's module imports.
from batchrl.envs import ExternalProcess
from batchrl.testing import mock

if __name__ == "__main__":
    with ExternalProcess(mock.StartCostEnv) as env:
        observation, _ = env.reset(seed=0)
    print(float(observation[0]))
