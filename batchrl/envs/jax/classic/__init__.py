"""JAX-native classic control envs, one per file, matching Gymnasium step for step."""

from batchrl.envs.jax import jax_env
from batchrl.envs.jax.classic import cartpole, pendulum
from batchrl.envs.jax.classic.cartpole import CartPole
from batchrl.envs.jax.classic.pendulum import Pendulum

_ENVS = {"CartPole-v1": CartPole, "Pendulum-v1": Pendulum}


def make(name: str) -> jax_env.TimeLimit:
    """The JAX-native env registered as `name`, with its time limit, as `gym.make` adds.

    Raises:
        ValueError: `name` is not a JAX-native env.
    """
    if name not in _ENVS:
        known = ", ".join(sorted(_ENVS))
        raise ValueError(
            f"unknown JAX-native env {name!r}; known: {known} (gymnax's envs with "
            "backend=gymnax, an env of your own as module:Class)"
        )
    return jax_env.TimeLimit(_ENVS[name]())


__all__ = ["CartPole", "Pendulum", "cartpole", "make", "pendulum"]
