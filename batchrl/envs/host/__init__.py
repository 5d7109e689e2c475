"""Gymnasium envs on the host, in worker processes or in this one.

Worker processes, their groups, the batch over them (`batch.BatchEnvBase`, a Gymnasium
VectorEnv, beneath `batchrl.envs.BatchEnv`), shared memory, infos, wrappers, env
construction and test envs. Nothing here imports JAX, nor the MuJoCo and Ray groups or
BatchEnv's builders above: worker processes import only this side.
"""
