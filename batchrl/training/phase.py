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
from batchrl.training import overlap as overlap_lib
from batchrl.training import placement


def phase(
    env: simulate.CompiledBatch,
    networks: algorithm_lib.Networks,
    num_steps: int,
    state: simulate.SimState,
    agent: algorithm_lib.AgentState,
    reset: jax.Array | bool = False,
    *,
    algorithm: algorithm_lib.Algorithm | None = None,
    stepper: Callable[..., Any] | None = None,
) -> tuple[simulate.SimState, algorithm_lib.AgentState]:
    """`num_steps` batch steps of acting and the updates they make ready.

    `reset` restarts every env at the first step; the episodes it cuts are kept as cut.
    `algorithm` and `stepper` (`simulate.collect`'s) replace the config's algorithm and
    its fused step (by seeds mapped together, `training.together`).
    """
    algorithm = algorithm or algorithm_lib.of(networks.config)
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
            stepper=stepper,
        )
        agent = algorithm.end(agent, acting_state, storage)
        return state, agent, left - taken

    carry = (state, agent, jnp.asarray(num_steps, jnp.int32))
    state, agent, _ = jax.lax.while_loop(unfinished, stretch, carry)
    return state, agent


def make(
    env: simulate.CompiledBatch,
    networks: algorithm_lib.Networks,
    num_steps: int,
    where: placement.Placement | None = None,
    overlap: bool = False,
) -> Callable[..., tuple[simulate.SimState, algorithm_lib.AgentState]]:
    """The compiled phase of `num_steps` batch steps, returning once it has run.

    Called as (state, agent, reset=False, settle=False). `where` acting and learning run:
    on one device the phase is one program; on two, it is `split`; with `overlap`,
    acting goes on while the learner trains (`training.overlap`), and `settle` trains an
    update left pending. On an env that calls the host, an env worker's error is raised
    as itself.
    """
    where = where or placement.Placement(jax.devices()[0], jax.devices()[0])
    if overlap:
        return overlap_lib.make(env, networks, num_steps, where)
    if where.split:
        return split(env, networks, num_steps, where)

    def run(
        state: simulate.SimState,
        agent: algorithm_lib.AgentState,
        reset: Any = False,
        settle: bool = False,
    ) -> tuple:
        del settle  # Every update is trained within its phase.
        return phase(env, networks, num_steps, state, agent, reset)

    compiled = jax.jit(run)

    def finished(*args: Any) -> tuple[simulate.SimState, algorithm_lib.AgentState]:
        return jax.block_until_ready(compiled(*args))

    wrapped = env.wrap_compiled(finished)
    wrapped.program = compiled  # Its peak memory is read before it runs (`phase_fits`).
    return wrapped


def split(
    env: simulate.CompiledBatch,
    networks: algorithm_lib.Networks,
    num_steps: int,
    where: placement.Placement,
    algorithm: algorithm_lib.Algorithm | None = None,
) -> Callable[..., tuple[simulate.SimState, algorithm_lib.AgentState]]:
    """`phase` with acting on `where.acting` and learning on `where.learner`.

    The same stretches as `phase`, each three programs: on the learner, `learn` and
    `begin`; the acting state and the storage then move to the acting device, which
    collects the stretch's steps; they move back, and the learner `end`s the stretch.
    The agent stays on the learner's device, the simulation on the acting device.
    `algorithm` replaces the config's (by seeds mapped together, `training.together`).
    """
    algorithm = algorithm or algorithm_lib.of(networks.config)
    sampling = algorithm.sampling_agent(networks)
    recorder = algorithm.recorder(networks)

    @jax.jit
    def prepare(agent: Any, cut: jax.Array) -> tuple[Any, simulate.Acting, simulate.Storage]:
        agent = algorithm.learn(networks, algorithm.cut(agent, cut))
        return agent, algorithm.begin(agent), agent.storage

    @jax.jit
    def act(state: Any, acting: Any, storage: Any, left: jax.Array, reset: jax.Array) -> tuple:
        state, acting, storage, taken = simulate.collect(
            env, sampling, state, acting, left, recorder=recorder, storage=storage, reset=reset
        )
        return state, acting, storage, taken, recorder.ready(storage)

    end = jax.jit(algorithm.end)
    act = env.wrap_compiled(act)

    def run(
        state: simulate.SimState,
        agent: algorithm_lib.AgentState,
        reset: Any = False,
        settle: bool = False,
    ) -> tuple[simulate.SimState, algorithm_lib.AgentState]:
        del settle  # Every update is trained within its phase.
        reset, left, ready = bool(reset), num_steps, True
        cut = reset
        while left > 0 or ready:
            agent, acting, storage = prepare(agent, where.to_learner(jnp.asarray(cut)))
            cut = False
            if left == 0:  # The last update: no steps are left to act.
                break
            acting, storage = where.to_acting((acting, storage))
            first = jnp.asarray(reset and left == num_steps)
            state, acting, storage, taken, ready = act(
                state,
                acting,
                storage,
                where.to_acting(jnp.asarray(left, jnp.int32)),
                where.to_acting(first),
            )
            agent = end(agent, *where.to_learner((acting, storage)))
            left, ready = left - int(taken), bool(ready)
        return jax.block_until_ready((state, agent))

    return run
