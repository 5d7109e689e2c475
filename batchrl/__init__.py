"""batchrl: efficient batched reinforcement learning in JAX."""

from batchrl import envs

__all__ = ["envs"]
