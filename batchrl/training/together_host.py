"""Seeds together on envs the host steps: one batch of N x B envs, the agent mapped inside.

A step of host envs is a call to the host, which no map can split, so the N seeds' envs
step as one batch of N x B (the MuJoCo batch, worker processes), each seed's B envs
seeded as its solo run seeds them (`InGraphBatchEnv` given the seeds), and the map moves
inside the step: the acting agent, the recorder and the update each take a seed's B envs
(`together.mapped`). The simulation keeps a key and episode sums a seed
(`simulate.init` given a key a seed), so each seed acts on its solo run's keys.

What stays shared is the batch's clock: an evaluation round lasts until every seed's envs
have ended an episode. On envs whose episodes end apart, the seeds that ended first step
on, which moves their envs' random streams past their solo runs', so their later starts
differ from their solo runs' (their scores count only each env's first episode, as
alone). Where every episode runs to the time limit (HalfCheetah, Pendulum) a seed equals
its solo run. An env's error names its envs in the batch and, beside them, whose seed's
envs they are (`seed_named`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from batchrl import simulate
from batchrl.configs import train_config
from batchrl.envs.host import errors, remote
from batchrl.training import loop, phase_row, together, together_memory
from batchrl.training import phase as phase_lib


def seed_named(error: errors.EnvError, seeds: Sequence[int], num_envs: int) -> errors.EnvError:
    """`error` with the seeds' envs named beside the batch's: "(envs 4-7: seed 5's envs 0-3, ".

    The seeds' envs are one batch, `num_envs` a seed in their order, so an error names
    envs past a seed's own count; `error` itself where it names no envs.
    """
    message = str(error)
    found = remote.DESCRIBED_ENVS.search(message)
    if found is None:
        return error
    first, last = int(found[2]), int(found[3] or found[2])
    parts = []
    for i, seed in enumerate(seeds):
        base = i * num_envs  # Seed i's env 0 in the batch.
        low, high = max(first, base) - base, min(last, base + num_envs - 1) - base
        if low <= high:
            envs = f"env {low}" if low == high else f"envs {low}-{high}"
            parts.append(f"seed {seed}'s {envs}")
    at = found.end() - 2  # Before ", ".
    return errors.reworded(error, f"{message[:at]}: {' and '.join(parts)}{message[at:]}")


def split_simulation(state: simulate.SimState, runs: int) -> list[simulate.SimState]:
    """Each seed's simulation state, as its solo run's on its B envs (the call token shared)."""
    total = state.done.shape[0]
    size = total // runs

    def part(leaf: jax.Array, i: int) -> jax.Array:
        return leaf[i * size : (i + 1) * size] if leaf.ndim and leaf.shape[0] == total else leaf

    return [
        simulate.SimState(
            env_state=jax.tree.map(functools.partial(part, i=i), state.env_state),
            obs=jax.tree.map(functools.partial(part, i=i), state.obs),
            done=part(state.done, i),
            score=part(state.score, i),
            length=part(state.length, i),
            key=state.key[i],
            episodes=state.episodes[i],
            score_sum=state.score_sum[i],
            length_sum=state.length_sum[i],
        )
        for i in range(runs)
    ]


def join_simulations(states: Sequence[simulate.SimState]) -> simulate.SimState:
    """The simulation state of one batch of the seeds' envs, from each seed's (one program)."""
    return _joined(list(states))


@jax.jit
def _joined(states: list[simulate.SimState]) -> simulate.SimState:
    def join(*leaves: jax.Array) -> jax.Array:
        return jnp.concatenate(leaves) if leaves[0].ndim else leaves[0]

    return simulate.SimState(
        env_state=jax.tree.map(join, *(state.env_state for state in states)),
        obs=jax.tree.map(join, *(state.obs for state in states)),
        done=join(*(state.done for state in states)),
        score=join(*(state.score for state in states)),
        length=join(*(state.length for state in states)),
        key=together.stack([state.key for state in states]),
        episodes=jnp.stack([state.episodes for state in states]),
        score_sum=jnp.stack([state.score_sum for state in states]),
        length_sum=jnp.stack([state.length_sum for state in states]),
    )


def stack_states(states: Sequence[loop.RunState]) -> loop.RunState:
    """The seeds' run states as the together-run carries them."""
    return loop.RunState(
        agent=together.stack([state.agent for state in states]),
        train=join_simulations([state.train for state in states]),
        eval=join_simulations([state.eval for state in states]),
        env_steps=jnp.stack([state.env_steps for state in states]),
        phases=jnp.stack([state.phases for state in states]),
    )


def unstack_states(stacked: loop.RunState, runs: int) -> list[loop.RunState]:
    """Each seed's run state, as its solo run's; its agent on the host."""
    agents = together.unstack(stacked.agent, runs)
    trains = split_simulation(stacked.train, runs)
    evals = split_simulation(stacked.eval, runs)
    return [
        loop.RunState(
            agent=agents[i],
            train=trains[i],
            eval=evals[i],
            env_steps=stacked.env_steps[i],
            phases=stacked.phases[i],
        )
        for i in range(runs)
    ]


def build(
    configs: Sequence[train_config.TrainConfig], env: simulate.CompiledBatch
) -> tuple[together.Together, list[loop.RunState]]:
    """`together.build` for `env`, the seeds' host envs in one batch (`environments.build`)."""
    runs = len(configs)
    first = dataclasses.replace(configs[0], overlap="off")  # One program: nothing to overlap.
    programs = loop.make_programs(first, env, runs=runs)
    together_memory.check_storage(programs, runs)
    keys = [jax.random.split(jax.random.key(config.seed), 3) for config in configs]
    with jax.default_device(programs.where.acting):
        train = simulate.init(env, together.stack([key[1] for key in keys]))
        evaluation = simulate.init(env, together.stack([key[2] for key in keys]))
    zero = jnp.zeros((), jnp.int32)
    states = [
        loop.place(
            programs,
            loop.RunState(
                agent=programs.init(key[0]), train=t, eval=e, env_steps=zero, phases=zero
            ),
        )
        for key, t, e in zip(
            keys, split_simulation(train, runs), split_simulation(evaluation, runs), strict=True
        )
    ]
    return make(programs, env, runs), together_memory.one_storage(states)


def make(programs: loop.Programs, env: simulate.CompiledBatch, runs: int) -> together.Together:
    """The train phase and evaluation round of `runs` seeds whose envs share `env`."""
    networks, algorithm = programs.networks, programs.algorithm
    one_by_one = together.updates_one_by_one(programs)
    stacked = together.mapped(algorithm, networks, one_by_one, batch_runs=runs)
    evaluation = stacked.evaluation_agent(networks, sample=programs.eval_sample)

    def train(state: simulate.SimState, agent: Any, reset: jax.Array) -> tuple:
        return phase_lib.phase(
            env, networks, programs.train_steps, state, agent, reset, algorithm=stacked
        )

    def evaluate(state: simulate.SimState, acting: Any) -> tuple:
        state, acting, first = simulate.first_episodes(
            env, evaluation, state, acting, programs.eval_steps
        )
        return state, acting, together.split_runs(first, runs)

    # Apart: on a split placement the simulation is on the acting device, the learner not.
    summary = jax.jit(lambda state: phase_row.summary_as("train", simulate.summary(state)))
    learned = jax.jit(jax.vmap(functools.partial(algorithm.metrics, programs.networks)))

    def metrics(state: simulate.SimState, learner: Any) -> dict[str, jax.Array]:
        return {**summary(state), **learned(learner)}  # The summary has a value a seed.

    compiled_evaluate = jax.jit(evaluate)
    compiled_train = None
    if programs.where.split:  # Acting on one device, learning on another: `phase.split`.
        trains = phase_lib.split(
            env, networks, programs.train_steps, programs.where, algorithm=stacked
        )
    else:
        compiled_train = jax.jit(train)
        trains = env.wrap_compiled(lambda *args: jax.block_until_ready(compiled_train(*args)))
    return together.Together(
        solo=programs,
        train=trains,
        evaluate=env.wrap_compiled(lambda *args: jax.block_until_ready(compiled_evaluate(*args))),
        metrics=metrics,
        seeds=runs,
        stack=stack_states,
        unstack=lambda stacked: unstack_states(stacked, runs),
        rounds_apart=False,
        program=compiled_train,
    )
