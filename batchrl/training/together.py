"""Many seeds of one config in one compiled program, each seed's state on a leading axis.

The seeds of a together-run share all that is static (the config but for its seed, the
env, the networks, the compiled phase) and nothing else: each seed's parameters,
optimiser, normalisers, memory, simulation and keys are its solo run's, stacked on a
leading axis of N. A train phase and an evaluation round map the solo programs over it
(`jax.vmap`): one program, one dispatch, one batch of N x B envs. A mapped seed's lane
keeps its own loop counts and conditionals, so every seed steps, updates and draws its
keys as its solo run does. JAX-native envs' steps map over the seeds like the rest;
envs the host steps share one batch of N x B instead (`training.together_host`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from batchrl import algorithm as algorithm_lib
from batchrl import simulate
from batchrl.configs import train_config
from batchrl.training import loop, phase_row, together_checks, together_memory
from batchrl.training import phase as phase_lib


@dataclasses.dataclass(frozen=True)
class Together:
    """The compiled programs of N seeds and the solo programs they map.

    Attributes:
        solo: One seed's programs: its algorithm, networks, sizes and devices.
        train: (train states, agents, reset) -> (train states, agents): a train phase of
            every seed, each leaf stacked [N, ...].
        evaluate: (eval states, acting states) -> (eval states, acting, FirstEpisodes):
            an evaluation round of every seed.
        metrics: (train states, learners) -> {name: [N]}: each seed's train summary and
            update metrics, as a solo phase's row holds them.
        seeds: N.
        stack: the seeds' run states -> the state the programs carry.
        unstack: that state -> each seed's, as its solo run's (to keep and checkpoint).
        rounds_apart: each seed's evaluation round stops where its solo run's does (its
            envs its own); else all play until the last seed's round ends.
        program: the train phase's `jax.jit`, whose peak `together_memory` reads before
            it runs; None where acting and learning are apart (`phase.split`).
    """

    solo: loop.Programs
    train: Callable[..., tuple[simulate.SimState, Any]]
    evaluate: Callable[..., tuple[simulate.SimState, Any, simulate.FirstEpisodes]]
    metrics: Callable[..., dict[str, jax.Array]]
    seeds: int
    stack: Callable[[Sequence[loop.RunState]], loop.RunState]
    unstack: Callable[[loop.RunState], list[loop.RunState]]
    rounds_apart: bool = True
    program: Any = None


def build(
    configs: Sequence[train_config.TrainConfig], env: simulate.CompiledBatch
) -> tuple[Together, list[loop.RunState]]:
    """The programs of `configs`' seeds on `env`, and each seed's fresh solo state.

    The configs differ in their seeds only (`together_checks`); the storage of all of them
    must fit the learner's memory (`together_memory.check_storage`).
    """
    together_checks.check_configs(configs)
    first = dataclasses.replace(configs[0], overlap="off")  # One program: nothing to overlap.
    programs, state = loop.build(first, env)
    together_checks.check_placement(programs.where, first)
    together_memory.check_storage(programs, len(configs))
    states = [state] + [loop.initial_state(programs, config, env) for config in configs[1:]]
    return make(programs, env, len(configs)), together_memory.one_storage(states)


def make(
    programs: loop.Programs,
    env: simulate.CompiledBatch,
    seeds: int,
    one_by_one: bool | None = None,
) -> Together:
    """The train phase and evaluation round of `seeds` seeds of `programs`, mapped.

    `one_by_one`: the seeds' updates one after another (`mapped`); None: on the CPU only.
    """
    networks, algorithm = programs.networks, programs.algorithm
    sampling = algorithm.sampling_agent(networks)
    evaluation = algorithm.evaluation_agent(networks, sample=programs.eval_sample)
    if one_by_one is None:
        one_by_one = updates_one_by_one(programs)
    stacked = mapped(algorithm, networks, one_by_one)
    stepper = jax.vmap(functools.partial(simulate.step, env, sampling), in_axes=(0, 0, None))

    def train(state: simulate.SimState, agent: Any, reset: jax.Array) -> tuple:
        return phase_lib.phase(
            env,
            networks,
            programs.train_steps,
            state,
            agent,
            reset,
            algorithm=stacked,
            stepper=stepper,
        )

    def evaluate(state: simulate.SimState, acting: Any) -> tuple:
        return first_episodes(env, evaluation, state, acting, programs.eval_steps)

    def metrics(state: simulate.SimState, learner: Any) -> dict[str, jax.Array]:
        return {
            **phase_row.summary_as("train", simulate.summary(state)),
            **algorithm.metrics(programs.networks, learner),
        }

    compiled_train, compiled_evaluate = jax.jit(train), jax.jit(evaluate)
    return Together(
        solo=programs,
        train=lambda *args: jax.block_until_ready(compiled_train(*args)),
        evaluate=lambda *args: jax.block_until_ready(compiled_evaluate(*args)),
        metrics=jax.jit(jax.vmap(metrics)),
        seeds=seeds,
        stack=stack,
        unstack=lambda stacked: unstack(stacked, seeds),
        program=compiled_train,
    )


def updates_one_by_one(programs: loop.Programs) -> bool:
    """Whether the seeds' updates run one after another: where the learner is on the CPU.

    XLA's CPU gains nothing from updates side by side, and mapped, an update's
    conditionals compute both branches: 10 Pendulum updates took 11.6 s mapped, 4.4 s
    one by one, 0.44 s alone. An accelerator runs them side by side.
    """
    return programs.where.learner.platform == "cpu"


def mapped(
    algorithm: algorithm_lib.Algorithm,
    networks: algorithm_lib.Networks,
    one_by_one: bool = False,
    batch_runs: int = 0,
) -> algorithm_lib.Algorithm:
    """`algorithm` on agent states stacked over seeds, for `phase.phase` to drive.

    Its loops stay outside the map, so their conditions are plain booleans, not one per
    seed (a while loop mapped over a condition per seed would copy its whole carry,
    storage included, at every step): the recorder is ready when any seed's storage is,
    and each seed then learns where its own is ready, as its solo run does. An update
    runs only when some seed's storage is ready. `one_by_one` runs the seeds' updates
    one after another in the program (`lax.map`) rather than mapped side by side.
    `batch_runs` N: the seeds' envs are one batch of N x B (`together_host`), whose step
    records and agents take each seed's B envs.
    """
    recorder = algorithm.recorder(networks)
    ready = jax.vmap(recorder.ready)

    def learn(networks: Any, state: Any, behind: bool = False) -> Any:
        one = functools.partial(algorithm.learn, networks, behind=behind)
        update = (lambda state: jax.lax.map(one, state)) if one_by_one else jax.vmap(one)
        return jax.lax.cond(ready(state.storage).any(), update, lambda state: state, state)

    def record(storage: Any, step: simulate.StepRecord) -> Any:
        if batch_runs:
            step = split_runs(step, batch_runs)
        return jax.vmap(recorder.record)(storage, step)

    def stacked_recorder(networks: Any) -> simulate.Recorder:
        del networks
        return simulate.Recorder(record=record, ready=lambda storage: ready(storage).any())

    agents = {}
    if batch_runs:
        agents = dict(
            sampling_agent=lambda networks: mapped_agent(
                algorithm.sampling_agent(networks), batch_runs
            ),
            evaluation_agent=lambda networks, sample=False: mapped_agent(
                algorithm.evaluation_agent(networks, sample=sample), batch_runs
            ),
        )
    return algorithm._replace(
        **agents,
        recorder=stacked_recorder,
        cut=jax.vmap(algorithm.cut, in_axes=(0, None)),
        learn=learn,
        clear=jax.vmap(algorithm.clear, in_axes=(None, 0)),
        begin=jax.vmap(algorithm.begin),
        end=jax.vmap(algorithm.end),
    )


def split_runs(tree: Any, runs: int) -> Any:
    """Leaves [R x B, ...] as [R, B, ...]."""
    return jax.tree.map(lambda leaf: leaf.reshape(runs, -1, *leaf.shape[1:]), tree)


def join_runs(tree: Any) -> Any:
    """Leaves [R, B, ...] as [R x B, ...]."""
    return jax.tree.map(lambda leaf: leaf.reshape(-1, *leaf.shape[2:]), tree)


def mapped_agent(agent: simulate.Agent, runs: int) -> simulate.Agent:
    """`agent` on acting states stacked over `runs` seeds, each acting on its B envs."""

    def perform(acting: Any, obs: Any, key: jax.Array) -> tuple:
        acting, action, extra = jax.vmap(agent.perform)(acting, split_runs(obs, runs), key)
        return acting, join_runs(action), join_runs(extra)

    def experience(acting: Any, transition: Any, extra: Any) -> tuple:
        parts = split_runs((transition, extra), runs)
        acting, extra = jax.vmap(agent.experience)(acting, *parts)
        return acting, join_runs(extra)

    return simulate.Agent(
        begin_episode=lambda acting, mask: jax.vmap(agent.begin_episode)(
            acting, split_runs(mask, runs)
        ),
        perform=perform,
        experience=experience,
        end_episode=lambda acting, mask: jax.vmap(agent.end_episode)(
            acting, split_runs(mask, runs)
        ),
    )


def first_episodes(
    env: simulate.CompiledBatch,
    agent: simulate.Agent,
    state: simulate.SimState,
    acting: Any,
    max_steps: int,
) -> tuple[simulate.SimState, Any, simulate.FirstEpisodes]:
    """`simulate.first_episodes` of seeds stacked on a leading axis.

    A seed whose envs have all ended stops there, its state left as it was, so it steps
    and draws keys as its solo run's round does, however long the other seeds play.
    """
    stepper = jax.vmap(functools.partial(simulate.step, env, agent), in_axes=(0, 0, None))

    def running(carry: tuple) -> jax.Array:
        _, _, first, taken = carry
        return (taken < max_steps) & ~first.ended.all()

    def body(carry: tuple) -> tuple:
        state, acting, first, taken = carry
        playing = ~first.ended.all(axis=1)
        stepped, stepped_acting, _ = stepper(state, acting, taken == 0)
        state, acting = choose(playing, stepped, state), choose(playing, stepped_acting, acting)
        new = state.done & ~first.ended
        first = simulate.FirstEpisodes(
            ended=first.ended | state.done,
            score=jnp.where(new, state.score, first.score),
            length=jnp.where(new, state.length, first.length),
        )
        return state, acting, first, taken + 1

    shape = state.done.shape  # [N, B]
    none = simulate.FirstEpisodes(
        ended=jnp.zeros(shape, bool),
        score=jnp.zeros(shape, jnp.float32),
        length=jnp.zeros(shape, jnp.int32),
    )
    carry = (state, acting, none, jnp.zeros((), jnp.int32))
    state, acting, first, _ = jax.lax.while_loop(running, body, carry)
    return state, acting, first


def stack(trees: Sequence[Any]) -> Any:
    """The trees of one structure stacked leafwise on a new leading axis, in one program.

    Outside `jit` each leaf's shape compiled a program (an agent's state, 40 of them).
    """
    return _stacked(list(trees))


_stacked = jax.jit(lambda trees: jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees))


def unstack(tree: Any, count: int) -> list[Any]:
    """The `count` trees a stacked tree holds, in order, their arrays copied to the host.

    One copy from the device for all of them; random keys stay keys.
    """
    keys = jax.tree.map(_is_key, tree)
    data = jax.tree.map(lambda leaf, key: jax.random.key_data(leaf) if key else leaf, tree, keys)
    host = jax.device_get(data)

    def seed(i: int) -> Any:
        def leaf(value: np.ndarray, key: bool, like: jax.Array) -> Any:
            if key:
                return jax.random.wrap_key_data(value[i], impl=jax.random.key_impl(like))
            return np.array(value[i])

        return jax.tree.map(leaf, host, keys, tree)

    return [seed(i) for i in range(count)]


def _is_key(leaf: Any) -> bool:
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def choose(mask: np.ndarray, new: Any, old: Any) -> Any:
    """Stacked trees: seed i's lane from `new` where `mask[i]`, else from `old`."""
    mask = jnp.asarray(mask)

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        if _is_key(a):
            data = pick(jax.random.key_data(a), jax.random.key_data(b))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(a))
        return jnp.where(mask.reshape(-1, *[1] * (a.ndim - 1)), a, b)

    return jax.tree.map(pick, new, old)


def evaluate(
    together: Together, eval_state: simulate.SimState, agent: Any, episodes: int
) -> tuple[simulate.SimState, list[dict[str, float]]]:
    """Every seed's `loop.evaluate`, its rounds mapped over the seeds; states and summaries.

    A seed plays the rounds its solo run would: once it has its `episodes` (or a round
    ended none), later rounds leave its eval state as it was.
    """
    algorithm = together.solo.algorithm
    count = together.seeds
    scores: list[list[float]] = [[] for _ in range(count)]
    lengths: list[list[float]] = [[] for _ in range(count)]
    playing = np.ones(count, bool)
    while playing.any():
        acting = jax.vmap(algorithm.begin)(agent)
        if together.solo.where.split:
            acting = together.solo.where.to_acting(acting)
        cleared = simulate.clear_summary(eval_state)
        played, _, first = together.evaluate(cleared, acting)
        eval_state = choose(playing, played, eval_state) if together.rounds_apart else played
        ended, score, length = (np.asarray(x) for x in (first.ended, first.score, first.length))
        for seed in np.flatnonzero(playing):
            if not ended[seed].any():
                playing[seed] = False
                continue
            scores[seed].extend(score[seed][ended[seed]].tolist())
            lengths[seed].extend(length[seed][ended[seed]].tolist())
            playing[seed] = len(scores[seed]) < episodes
    summaries = [
        {
            "episode/count": float(len(seed_scores)),
            "episode/return": float(np.mean(seed_scores)) if seed_scores else math.nan,
            "episode/length": float(np.mean(seed_lengths)) if seed_lengths else math.nan,
        }
        for seed_scores, seed_lengths in zip(scores, lengths, strict=True)
    ]
    return eval_state, summaries
