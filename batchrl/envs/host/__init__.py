"""Gymnasium envs on the host, in worker processes or in this one.

Worker processes, their groups, BatchEnv (a Gymnasium VectorEnv), shared memory,
infos, wrappers, env construction and test envs. Nothing here imports JAX: worker
processes import only this side.
"""
