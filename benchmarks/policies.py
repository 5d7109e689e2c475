"""A 64x64 MLP Gaussian policy as a simulate Agent, shared by the simulate benchmarks.

The MLP reads an observation tree as its leaves flattened, cast to float32 and joined.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from batchrl import env_spec as env_spec_lib
from batchrl import simulate


def init_mlp(key: jax.Array, sizes: list[int]) -> list[tuple[jax.Array, jax.Array]]:
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        (jax.random.normal(k, (m, n)) / jnp.sqrt(m), jnp.zeros(n))
        for k, m, n in zip(keys, sizes[:-1], sizes[1:], strict=True)
    ]


def input_size(env_spec: env_spec_lib.EnvSpec) -> int:
    """The MLP's inputs for this env: the elements of every observation leaf."""
    return sum(leaf.size for leaf in env_spec_lib.leaves(env_spec.observation))


def flatten(obs) -> jax.Array:
    """A batch of observation trees, leaves [B, ...], as float32 [B, input_size]."""
    leaves = jax.tree.leaves(obs)
    return jnp.concatenate(
        [leaf.reshape(leaf.shape[0], -1).astype(jnp.float32) for leaf in leaves], axis=1
    )


def mlp(params: list, obs: jax.Array) -> jax.Array:
    x = obs
    for weight, bias in params[:-1]:
        x = jnp.tanh(x @ weight + bias)
    weight, bias = params[-1]
    return x @ weight + bias


def gaussian_agent(params: list, scale: float = 1.0) -> simulate.Agent:
    """Samples tanh(MLP(obs)) * scale + noise; keeps no state of its own."""

    def perform(agent_state, obs, key):
        mean = jnp.tanh(mlp(params, flatten(obs))) * scale
        return agent_state, mean + 0.1 * jax.random.normal(key, mean.shape), ()

    def identity(agent_state, _):
        return agent_state

    def experience(agent_state, transition, extra):
        del transition
        return agent_state, extra

    return simulate.Agent(identity, perform, experience, identity)
