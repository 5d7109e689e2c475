"""Alternating train and eval phases of an agent over one batched env, as the seed does.

Training runs a phase of env steps (`training.phase`: acting, and an update each time
the agent's memory or rollout is full); evaluation restarts a separate set of episodes
and scores the mean action (sampled actions with `eval_sample`) on each env's first
(`loop.evaluate`), on the training envs or, where a run has them, on eval envs of its
own (Atari's whole games). Each phase is one compiled program; this loop only reads the
metrics it returns. The agent is the algorithm its config names, driven through the
written protocol (`batchrl.algorithm`). Every size (phase lengths, the budget that
schedules read) derives from the run's `TrainConfig`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from batchrl import algorithm as algorithm_lib
from batchrl import simulate
from batchrl.configs import train_config
from batchrl.envs.jax import jax_env
from batchrl.training import device_memory, phase_row, placement, reuse, tail_average
from batchrl.training import overlap as overlap_lib
from batchrl.training import phase as phase_lib


@dataclasses.dataclass(frozen=True)
class Programs:
    """The compiled phases of one run and the static facts they run with."""

    train: Callable
    evaluate: Callable
    init: Callable  # key -> a fresh agent state, compiled once for every seed.
    algorithm: algorithm_lib.Algorithm
    networks: algorithm_lib.Networks
    num_envs: int
    train_steps: int  # Batch steps of one train phase.
    eval_steps: int  # The most batch steps of one evaluation round.
    eval_sample: bool  # Evaluation samples actions, not the mean action.
    shared_envs: bool  # Train and eval step the same host envs: restart them after an eval.
    storage_bytes: int  # The objective's rollout buffer or episode memory.
    where: placement.Placement  # The devices it acts and learns on.
    overlap: bool  # Acting goes on while the learner trains (`training.overlap`).


@flax.struct.dataclass
class RunState:
    """Everything a run carries from one phase to the next, and all a checkpoint holds."""

    agent: algorithm_lib.AgentState
    train: simulate.SimState
    eval: simulate.SimState
    env_steps: jax.Array  # [] int32
    phases: jax.Array  # [] int32 train phases done


def build(
    config: train_config.TrainConfig,
    env: simulate.CompiledBatch,
    *,
    eval_env: simulate.CompiledBatch | None = None,
    train_steps: int | None = None,
    eval_steps: int | None = None,
) -> tuple[Programs, RunState]:
    """The run's programs and initial state, every size derived from `config`.

    A train phase runs `config.batch_steps_per_phase` batch steps and an eval round at
    most `config.eval_batch_steps`, unless `train_steps` or `eval_steps` (batch steps, each
    stepping every env once) say otherwise; the budget the schedules read is
    `config.shape.steps`, `config.steps` rounded up to the config's whole phases, and
    `config.seed` seeds the agent's and the phases' keys.
    Evaluation steps `eval_env` (of `env`'s spec and size) when given, else `env` itself,
    with the mean action, or with actions sampled from the policy where
    `config.eval_sample` says so. Equal JAX-native runs share their programs (`reuse`).
    """
    check_32_bits()
    envs = (env, env if eval_env is None else eval_env)
    sizes = dict(eval_env=eval_env, train_steps=train_steps, eval_steps=eval_steps)
    found = reuse.key(config, envs, (train_steps, eval_steps))
    programs = reuse.programs(found, lambda: make_programs(config, env, **sizes))
    return programs, initial_state(programs, config, env, eval_env)


def make_programs(
    config: train_config.TrainConfig,
    env: simulate.CompiledBatch,
    *,
    eval_env: simulate.CompiledBatch | None = None,
    train_steps: int | None = None,
    eval_steps: int | None = None,
    runs: int = 1,
) -> Programs:
    """`build`'s programs alone. `runs` R: `env` holds R runs' envs, `config.num_envs` each.

    With R > 1 the programs' sizes, storage and algorithm are one run's, and their `train`
    and `evaluate` would step the whole batch as one run: a together-run compiles its own
    (`training.together`).
    """
    check_32_bits()
    if env.num_envs != runs * config.num_envs:
        raise ValueError(f"the env steps {env.num_envs} envs, the config {runs * config.num_envs}")
    if eval_env is None:
        eval_env = env
    elif (eval_env.env_spec, eval_env.num_envs) != (env.env_spec, env.num_envs):
        raise ValueError(
            f"the eval env must have the env's spec and num_envs={env.num_envs}, got "
            f"{eval_env.env_spec} and {eval_env.num_envs}"
        )
    where = placement.resolve(config, env)
    placement.check_data_parallel(config, where)
    algorithm = algorithm_lib.of(config.algorithm)
    networks = algorithm.networks(config.trained_algorithm, env.env_spec)
    train_steps = train_steps or config.batch_steps_per_phase
    eval_steps = eval_steps or config.eval_batch_steps
    init = jax.jit(functools.partial(algorithm.init, networks, config.shape))
    shapes = algorithm_lib.shapes_of(init)  # Traced once, with the init that runs.
    storage_bytes = device_memory.nbytes(shapes.storage)
    device_memory.check_fits(
        storage_bytes, f"{config.algorithm.objective} objective's storage", where.learner
    )
    evaluation = algorithm.evaluation_agent(networks, sample=config.eval_sample)
    overlap = overlap_lib.wanted(config, env, where)
    if hasattr(env, "train_program"):  # Envs that act in rollout actors run the phases.
        train = env.train_program(networks, algorithm, train_steps, where, overlap)
        evaluate = env.eval_program(algorithm, eval_steps)
    else:
        train = phase_lib.make(env, networks, train_steps, where, overlap)
        evaluate = simulate.make_first_episodes(eval_env, evaluation, eval_steps)
    programs = Programs(
        train=train,
        evaluate=evaluate,
        init=init,
        algorithm=algorithm,
        networks=networks,
        num_envs=config.num_envs,
        train_steps=train_steps,
        eval_steps=eval_steps,
        eval_sample=config.eval_sample,
        # Envs stepped on the host are one set, whichever simulate state drives them.
        shared_envs=env.calls_host and eval_env is env,
        storage_bytes=storage_bytes,
        where=where,
        overlap=overlap,
    )
    return programs


def check_32_bits() -> None:
    """A one-line ValueError where JAX runs with x64: a phase's loops keep 32-bit types.

    Under `jax_enable_x64` the first phase failed deep in a loop or conditional whose
    carry had turned float64 (a metric, an env's state) beside its float32 start.
    """
    if jax.config.jax_enable_x64:
        raise ValueError(
            "batchrl trains in 32 bits, and jax_enable_x64 is on: turn it off first "
            "(jax.config.update('jax_enable_x64', False), or unset JAX_ENABLE_X64)"
        )


def initial_state(
    programs: Programs,
    config: train_config.TrainConfig,
    env: simulate.CompiledBatch,
    eval_env: simulate.CompiledBatch | None = None,
    *,
    fresh_agent: bool = True,
) -> RunState:
    """A fresh run state of `config.seed` for `programs` (sized by their config), placed.

    Resets `env` (and `eval_env`, when evaluation has its own): host envs from a call on
    the acting device. Without `fresh_agent`, the agent is zeros of its shapes, for a
    checkpoint to fill (`evaluate`'s), and its init is not compiled.
    """
    eval_env = env if eval_env is None else eval_env
    agent_key, train_key, eval_key = _run_keys(config.seed)
    if fresh_agent:
        agent = programs.init(agent_key)
    else:
        shapes = algorithm_lib.shapes_of(programs.init)
        agent = algorithm_lib.zeros(shapes)

    simulations = functools.partial(_simulations, env, eval_env)
    # One program where both envs are JAX-native: op by op, each operation of their resets
    # compiled one of its own (1.3 s of a `pendulum_jax` run's start here).
    if all(isinstance(e, jax_env.Compiled) for e in (env, eval_env)):
        simulations = reuse.jit(_simulations, env, eval_env)
    with jax.default_device(programs.where.acting):
        train_state, eval_state = simulations(train_key, eval_key)
    state = RunState(
        agent=agent,
        train=train_state,
        eval=eval_state,
        env_steps=jnp.zeros((), jnp.int32),
        phases=jnp.zeros((), jnp.int32),
    )
    return place(programs, state)


def _simulations(env: Any, eval_env: Any, train_key: jax.Array, eval_key: jax.Array) -> tuple:
    return simulate.init(env, train_key), simulate.init(eval_env, eval_key)


@jax.jit
def _run_keys(seed: int) -> tuple[jax.Array, ...]:
    """The keys of a run's agent, train envs and eval envs, from its seed."""
    return tuple(jax.random.split(jax.random.key(seed), 3))


def place(programs: Programs, state: RunState) -> RunState:
    """`state` with its agent on the learner's device and its simulations on the acting one.

    A run on JAX's default device alone leaves its arrays uncommitted, as JAX makes them,
    so they mix with any other array; a data-parallel learner (`learner_devices` > 1)
    places its own.
    """
    where = programs.where
    default = not where.split and where.learner == jax.devices()[0]
    if default or programs.networks.config.learner_devices > 1:
        return state
    return state.replace(
        agent=where.to_learner(state.agent),
        train=where.to_acting(state.train),
        eval=where.to_acting(state.eval),
    )


def evaluate(
    programs: Programs,
    eval_state: simulate.SimState,
    agent_state: algorithm_lib.AgentState,
    episodes: int,
) -> tuple[simulate.SimState, dict[str, float]]:
    """Scores the policy on at least `episodes` episodes; the state after and their summary.

    The policy acts as `build` made the eval phase: its mean action, or sampled actions
    with `eval_sample`. A round restarts every env and keeps each env's first episode, so
    every episode weighs the same however long it lasts; rounds run until `episodes`
    episodes ended, so the count is `episodes` rounded up to whole rounds of `num_envs`.
    The eval state's key draws sampled actions, and each round's starts on JAX-native
    envs; host envs draw starts from their own random streams, seeded from the run's
    seed (`bridge.seeds.env_seeds`).
    """
    scores, lengths = [], []
    while len(scores) < episodes or not scores:
        # Every env restarts, so the running state the eval episodes begin with is fresh.
        acting_state = programs.algorithm.begin(agent_state)
        if programs.where.split:
            acting_state = programs.where.to_acting(acting_state)
        # The round's scores come back apart; the state's running sums stay cleared.
        eval_state = simulate.clear_summary(eval_state)
        eval_state, _, first = programs.evaluate(eval_state, acting_state)
        ended = np.asarray(first.ended)
        if not ended.any():
            break
        scores.extend(np.asarray(first.score)[ended].tolist())
        lengths.extend(np.asarray(first.length)[ended].tolist())
    count = len(scores)
    return eval_state, {
        "episode/count": float(count),
        "episode/return": float(np.mean(scores)) if count else math.nan,
        "episode/length": float(np.mean(lengths)) if count else math.nan,
    }


def run_phase(
    programs: Programs,
    state: RunState,
    *,
    eval_episodes: int = 0,
    average_with: Sequence[Any] | None = None,
    final: bool = False,
    restart: bool | None = None,
    compiled: float = 0.0,
) -> tuple[RunState, dict[str, float]]:
    """One train phase from `state`, evaluated; the state after it and its flat metrics.

    `compiled`: seconds its program took to compile before the call, counted in its time.

    `restart` restarts every env first: a resumed run's envs begin new episodes, not
    those it was saved in, and envs that evaluation shares with training (`shared_envs`)
    begin afresh after a phase that evaluated on them. None restarts shared envs, for a
    caller that does not follow which phases evaluated.

    Evaluation runs rounds of the eval phase until at least `eval_episodes` episodes
    ended, none when 0. With `average_with`, the parameters of earlier phases, the
    phase's policy is the mean of theirs and its own (`tail_average`), before it is
    evaluated. The `final` phase trains an update that overlap left pending, and its row
    also holds `final/return` and `final/episodes` (and `final/averaged_phases` with
    `average_with`). `state` itself is left as it was: an interrupt here loses nothing.
    """
    start = time.perf_counter()
    train_state = simulate.clear_summary(state.train)
    restart = jnp.asarray(programs.shared_envs if restart is None else restart)
    train_state, agent_state = programs.train(train_state, state.agent, restart, final)
    jax.block_until_ready(agent_state)
    trained = state.replace(train=train_state, agent=agent_state)
    return finish_phase(
        programs,
        state,
        trained,
        time.perf_counter() - start + compiled,
        eval_episodes=eval_episodes,
        average_with=average_with,
        final=final,
    )


def finish_phase(
    programs: Programs,
    state: RunState,
    trained: RunState,
    train_seconds: float,
    *,
    eval_episodes: int = 0,
    average_with: Sequence[Any] | None = None,
    final: bool = False,
) -> tuple[RunState, dict[str, float]]:
    """The rest of `run_phase` once its train program has run from `state`.

    `trained` holds the train and agent states the program returned in `train_seconds`;
    the rest is `run_phase`'s: averaging, evaluation, metrics, the state after the phase.
    """
    train_state, agent_state = trained.train, trained.agent
    agent_state = tail_average.averaged(agent_state, average_with or [])
    metrics = phase_row.summary_as("train", simulate.summary(train_state))
    eval_state, eval_seconds = state.eval, 0.0
    if eval_episodes:
        start = time.perf_counter()
        eval_state, summary = evaluate(programs, eval_state, agent_state, eval_episodes)
        metrics.update(phase_row.summary_as("eval", summary))
        eval_seconds = time.perf_counter() - start
    metrics.update(programs.algorithm.metrics(programs.networks, agent_state.learner))
    metrics = {name: float(value) for name, value in metrics.items()}
    phase_steps = programs.train_steps * programs.num_envs
    env_steps = int(state.env_steps) + phase_steps
    programs.algorithm.check_finite(agent_state.learner, metrics, env_steps)
    updates = programs.algorithm.updates
    if int(updates(trained.agent.learner)) == int(updates(state.agent.learner)):
        phase_row.drop_update_metrics(metrics, programs.algorithm)
    phase_row.add_perf(metrics, env_steps, phase_steps, train_seconds, eval_seconds)
    if final:
        phase_row.add_final(metrics, average_with)
    new_state = RunState(
        agent=agent_state,
        train=train_state,
        eval=eval_state,
        env_steps=jnp.asarray(env_steps, jnp.int32),
        phases=jnp.asarray(int(state.phases) + 1, jnp.int32),
    )
    return new_state, metrics
