"""A train phase of any algorithm: stretches of acting, each followed by learning.

One compiled program runs a phase's batch steps. Only the acting state rides through the
steps; each step's record goes into the algorithm's storage (an episode memory, a rollout
buffer), written in place. A stretch of steps ends when the storage is ready, at the
very step the seed's `end_episode` would have trained, or when the phase's steps are
done; the algorithm then learns, outside the steps, and the next stretch acts with the
new parameters. The algorithm is the one its config names (`algorithm.of`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from batchrl import algorithm as algorithm_lib
from batchrl import simulate


def phase(
    env: simulate.BatchedEnv,
    networks: algorithm_lib.Networks,
    num_steps: int,
    state: simulate.SimState,
    agent: algorithm_lib.AgentState,
    reset: jax.Array | bool = False,
) -> tuple[simulate.SimState, algorithm_lib.AgentState]:
    """`num_steps` batch steps of acting and the updates they make ready.

    `reset` restarts every env at the first step; the episodes it cuts are kept as cut.
    """
    algorithm = algorithm_lib.of(networks.config)
    sampling = algorithm.sampling_agent(networks)
    recorder = algorithm.recorder(networks)
    reset = jnp.asarray(reset, bool)
    agent = algorithm.cut(agent, reset)

    def unfinished(carry: tuple) -> jax.Array:
        _, agent, left = carry
        return (left > 0) | recorder.ready(agent.storage)

    def stretch(carry: tuple) -> tuple:
        state, agent, left = carry
        agent = algorithm.learn(networks, agent)  # Trains when the storage is ready.
        acting_state = algorithm.begin(agent)
        state, acting_state, storage, taken = simulate.collect(
            env,
            sampling,
            state,
            acting_state,
            left,
            recorder=recorder,
            storage=agent.storage,
            reset=reset & (left == num_steps),
        )
        agent = algorithm.end(agent, acting_state, storage)
        return state, agent, left - taken

    carry = (state, agent, jnp.asarray(num_steps, jnp.int32))
    state, agent, _ = jax.lax.while_loop(unfinished, stretch, carry)
    return state, agent


def make(
    env: simulate.BatchedEnv, networks: algorithm_lib.Networks, num_steps: int
) -> Callable[
    [simulate.SimState, algorithm_lib.AgentState, Any],
    tuple[simulate.SimState, algorithm_lib.AgentState],
]:
    """The compiled phase of `num_steps` batch steps, returning once it has run.

    On an env that calls the host, an env worker's error is raised as itself.
    """

    def run(state: simulate.SimState, agent: algorithm_lib.AgentState, reset: Any = False) -> tuple:
        return phase(env, networks, num_steps, state, agent, reset)

    compiled = jax.jit(run)

    def finished(*args: Any) -> tuple[simulate.SimState, algorithm_lib.AgentState]:
        return jax.block_until_ready(compiled(*args))

    return env.wrap_compiled(finished)
